#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cpr-bench quant on small tables (not a timing test): --help exits 0, usage
# errors exit 2, and at every dim, the smallest included (where an int8 or
# int4 row, with its header, is larger than the f32 row), the JSON has every
# codec with its row size and an error within the codec's bound.
# Usage: test_bench_quant_cli.sh CPR_BENCH_BINARY
set -euo pipefail

tool=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/cpr-bench-quant.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "test_bench_quant_cli: $*" >&2; exit 1; }

"$tool" quant --help > "$work/help" || fail "--help exited $?"
for bad in "--dim 0" "--rows 0" "--bogus" "--dim 4097"; do
    rc=0
    # shellcheck disable=SC2086
    "$tool" quant $bad > /dev/null 2> "$work/err" || rc=$?
    [[ $rc == 2 ]] || fail "quant $bad exited $rc, not 2"
done

for dim in 1 2 3 64; do
    "$tool" quant --rows 2000 --dim "$dim" --rounds 1 --json > "$work/q.json" 2> "$work/progress" ||
        fail "quant --dim $dim exited $?: $(cat "$work/progress")"
    python3 - "$work/q.json" "$dim" <<'PY' || fail "quant --dim $dim --json: $(cat "$work/q.json")"
import json, sys
r = json.load(open(sys.argv[1]))
dim = int(sys.argv[2])
assert r["bench"] == "quant" and r["dim"] == dim and r["rows"] == 2000, r
c = r["codecs"]
assert set(c) == {"f32", "bf16", "f16", "int8", "int4"}, c.keys()
assert c["f32"]["rmse"] == 0, c["f32"]
for name, v in c.items():
    assert v["row_bytes"] > 0 and v["rmse"] >= 0, (name, v)
for name in ("int8", "int4"):
    assert c[name]["max_error_steps"] <= 0.5 + 1e-9, (name, c[name])
PY
done
echo "test_bench_quant_cli: ok"
