#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make demo-store`: writes a FULL and a PRIORITY
# checkpoint part of a 500k-row embedding table through the real store,
# restores it, and compares ingest and restore speed with the raw disk
# measured in the same run. Data lives under ./var/demo and is removed after.
set -euo pipefail
build=${1:-build}
mkdir -p var
dir=$(mktemp -d "$PWD/var/demo.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$build/tools/cpr-bench" store --rows 500000 --dim 64 --dir "$dir"
