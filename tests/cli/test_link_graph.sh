#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Each binary links only what it uses (docs/architecture.md):
#   cprctl and ckptd: no CUDA (no symbol, no library);
#   the shared client library libcpr: no RocksDB, no liburing (the store is
#   libcpr-store, loaded for local:// only);
#   a program linked statically against the client archive alone
#   (quickstart-static): no store code at all.
# Usage: test_link_graph.sh CPRCTL CKPTD LIBCPR QUICKSTART_STATIC LIBCPR_STORE
set -euo pipefail
cprctl=$1 ckptd=$2 libcpr=$3 static=$4 libstore=$5

fail() { echo "test_link_graph: $*" >&2; exit 1; }

# (Outputs are captured first: grep -q closing a pipe early would fail it.)
for bin in "$cprctl" "$ckptd"; do
    syms=$(nm "$bin")
    n=$(grep -ciE 'cuda|cudart|cublas|nccl' <<< "$syms" || true)
    [[ $n == 0 ]] || fail "$(basename "$bin") has $n CUDA symbols, e.g. $(grep -iE 'cuda' <<< "$syms" | head -3)"
    libs=$(ldd "$bin")
    if grep -qiE 'cuda|nccl' <<< "$libs"; then
        fail "$(basename "$bin") loads $(grep -iE 'cuda|nccl' <<< "$libs")"
    fi
done

needed=$(readelf -d "$libcpr" | grep NEEDED || true)
[[ -n $needed ]] || fail "readelf shows nothing NEEDED by $libcpr"
if grep -qiE 'rocksdb|uring' <<< "$needed"; then
    fail "libcpr needs the store's libraries: $needed"
fi
exported=$(nm -D --defined-only "$libcpr")
if grep -q ' cpr_store_open$' <<< "$exported"; then
    fail "libcpr defines the store (cpr_store_open)"
fi
grep -q ' cpr_client_open$' <<< "$exported" || fail "libcpr does not export cpr_client_open"
exported=$(nm -D --defined-only "$libstore")
grep -q ' cpri_store_api_get$' <<< "$exported" || fail "libcpr-store does not export its table"

syms=$(nm "$static")
n=$(grep -ciE 'rocksdb|io_uring|cpr_store_open' <<< "$syms" || true)
[[ $n == 0 ]] || fail "quickstart-static holds $n store symbols"
libs=$(ldd "$static")
if grep -qiE 'rocksdb|uring' <<< "$libs"; then
    fail "quickstart-static loads $(grep -iE 'rocksdb|uring' <<< "$libs")"
fi
echo "test_link_graph: ok"
