#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cpr-bench against the test cluster (fixture "ceph"): store and rpc with
# --backend rados on a small table (rpc also with --direct --direct-writes:
# the client reads and writes the pool) report the store's figures beside rados bench's, restore every
# row, and leave nothing in the pool.
#   test_bench_rados.sh CPR_BENCH CEPH_CONF
set -euo pipefail
bench=$1 conf=$2
[[ -r $conf ]] || { echo "no test cluster ($conf): skipped"; exit 77; }
command -v rados >/dev/null || { echo "no rados tool: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "test_bench_rados: $*" >&2; exit 1; }

"$bench" store --backend rados --rados-conf "$conf" --rows 20000 --rounds 1 --json \
    > "$work/store.json" 2> "$work/store.err" || fail "store: $(tail -5 "$work/store.err")"
"$bench" rpc --backend rados --rados-conf "$conf" --rows 20000 --shards 2 --transport tcp \
    --json > "$work/rpc.json" 2> "$work/rpc.err" || fail "rpc: $(tail -5 "$work/rpc.err")"
# Direct reads and writes: the client reads and writes the pool, ckptd plans
# and checks indexes (and --direct* is refused where it means nothing).
"$bench" rpc --backend rados --rados-conf "$conf" --rows 20000 --shards 2 --transport tcp \
    --rounds 1 --direct --direct-writes --json > "$work/direct.json" 2> "$work/direct.err" ||
    fail "rpc --direct --direct-writes: $(tail -5 "$work/direct.err")"
rc=0; "$bench" store --direct --rows 1000 > /dev/null 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "store --direct: exit $rc, want 2"
rc=0; "$bench" rpc --direct-writes --rows 1000 > /dev/null 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "rpc --direct-writes without --backend rados: exit $rc, want 2"
rc=0; "$bench" store --backend rados --direct-writes --rows 1000 > /dev/null 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "store --direct-writes: exit $rc, want 2"
python3 - "$work/store.json" "$work/rpc.json" "$work/direct.json" << 'PY' || fail "unexpected JSON"
import json, sys
store = json.load(open(sys.argv[1]))
rpc = json.load(open(sys.argv[2]))
direct = json.load(open(sys.argv[3]))
assert rpc["store"]["direct_reads"] is False and direct["store"]["direct_reads"] is True
assert rpc["store"]["direct_writes"] is False and direct["store"]["direct_writes"] is True
d = direct["runs"][0]
assert d["restore_rows"] == 20000 and d["verified"] and d["rados_restore_ratio"] > 0, d
assert store["backend"] == "rados", store
assert store["rados_ingest_ratio"] > 0 and store["rados_restore_ratio"] > 0, store
assert rpc["bench"] == "rpc" and len(rpc["runs"]) == 1, rpc
run = rpc["runs"][0]
assert run["shards"] == 2 and run["transport"] == "tcp", run
assert run["restore_rows"] == 20000, run
assert run["rados_ingest_ratio"] > 0 and run["rados_restore_ratio"] > 0, run
assert rpc["store"]["rados_write_mb_s"] > 0, rpc["store"]
PY
# Each run's namespace is emptied at the end.
for ns in $(grep -ho 'namespace cpr/bench-[0-9-]*' "$work"/*.err | sed 's|.*cpr/||' | sort -u); do
    left=$(rados -c "$conf" -p cpr -N "$ns" ls | wc -l)
    [[ $left == 0 ]] || fail "namespace $ns still holds $left objects"
done
echo "cpr-bench store and rpc --backend rados: ok"
