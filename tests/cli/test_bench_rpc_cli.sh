#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cpr-bench rpc on a small table over a Unix socket (not a timing test: it
# checks what the benchmark reports): through ckptd, and with --direct (the
# client given ckptd's directory: docs/client.md, "Direct reads"; that ckptd
# then only plans is tested by test_client's test_direct_local_reads, which
# counts the plans). cpr-bench exits 1 when a restore misses or alters a row.
#   test_bench_rpc_cli.sh CPR_BENCH
set -euo pipefail
bench=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/cpr-bench-rpc.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "test_bench_rpc_cli: $*" >&2; exit 1; }

for mode in plain direct; do
    flag=(); [[ $mode == direct ]] && flag=(--direct)
    "$bench" rpc --rows 20000 --shards 2 --transport unix --rounds 1 "${flag[@]}" --json \
        > "$work/$mode.json" 2> "$work/$mode.err" || fail "rpc $mode: $(tail -5 "$work/$mode.err")"
done
rc=0; "$bench" rpc --direct-writes --rows 1000 > /dev/null 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "rpc --direct-writes without --backend rados: exit $rc, want 2"
# Usage errors found before any work: no ckptd there; rpc's flags given to store.
for bad in "rpc --ckptd $work/no-such-ckptd --rows 1000" "store --shards 4 --rows 1000" \
           "store --ckptd $work/x --rows 1000"; do
    rc=0
    # shellcheck disable=SC2086
    "$bench" $bad > /dev/null 2> "$work/usage.err" || rc=$?
    [[ $rc == 2 ]] || fail "$bad: exit $rc, want 2"
    grep -q -- '--shards\|--ckptd' "$work/usage.err" || fail "$bad: $(cat "$work/usage.err")"
done
python3 - "$work/plain.json" "$work/direct.json" << 'PY' || fail "unexpected JSON: $(cat "$work/direct.json")"
import json, sys
plain, direct = (json.load(open(p)) for p in sys.argv[1:3])
assert plain["store"]["direct_reads"] is False and direct["store"]["direct_reads"] is True
for r in (plain, direct):
    run = r["runs"][0]
    assert run["shards"] == 2 and run["transport"] == "unix", run
    assert run["restore_mb_s"] > 0 and run["ingest_mb_s"] > 0, run
PY
echo "test_bench_rpc_cli: ok"
