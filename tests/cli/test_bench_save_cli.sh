#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cpr-bench save on a small table (not a timing test: it checks what the
# benchmark reports, not how fast): --help exits 0, usage errors exit 2, the
# JSON has every policy with a stall, its memcpy baseline and their ratio,
# within its budget, --codec int8 runs, and --device cuda without a device fails
# with CPR_CUDA (exit 1); with one, it must run and report the device-to-host
# baseline. Whether there is a device is test_cuda_device's answer (exit 77:
# none), so a failing CUDA path on a GPU machine fails this test.
# Usage: test_bench_save_cli.sh CPR_BENCH_BINARY [TEST_CUDA_DEVICE_BINARY]
set -euo pipefail

tool=$1
probe=${2:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/cpr-bench-save.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "test_bench_save_cli: $*" >&2; exit 1; }

"$tool" save --help > "$work/help" || fail "--help exited $?"
grep -q -- "--device" "$work/help" || fail "--help does not name --device"
for bad in "--device tpu" "--rows 10" "--fraction 0" "--bogus" "--codec int3" "--target foo"; do
    rc=0
    # shellcheck disable=SC2086
    "$tool" save $bad > /dev/null 2> "$work/err" || rc=$?
    [[ $rc == 2 ]] || fail "save $bad exited $rc, not 2"
done

"$tool" save --rows 20000 --bags 512 --rounds 1 --json > "$work/save.json" 2> "$work/progress"
python3 - "$work/save.json" <<'PY' || fail "save --json: $(cat "$work/save.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["bench"] == "save" and r["device"] == "cpu" and r["rows"] == 20000, r
pols = r["policies"]
assert set(pols) == {"full", "delta", "mfu", "ssu", "topk-norm"}, pols.keys()
for name, p in pols.items():
    assert p["rows"] > 0 and p["bytes"] == p["rows"] * (8 + 4 * 65), (name, p)
    assert p["stall_ms"] > 0 and p["memcpy_ms"] > 0, (name, p)
    # the ratio is of the unrounded times; the printed ones are rounded to 1 us
    lo = (p["stall_ms"] - 0.0005) / (p["memcpy_ms"] + 0.0005)
    hi = (p["stall_ms"] + 0.0005) / max(p["memcpy_ms"] - 0.0005, 1e-9)
    assert lo - 0.001 <= p["stall_ratio"] <= hi + 0.001, (name, p)
    assert p["background_ms"] > 0, (name, p)
assert pols["full"]["rows"] == 20000, pols["full"]
# the budget is 5%: MFU, SSU and TOPK_NORM save at most 1,000 rows
for name in ("mfu", "ssu", "topk-norm"):
    assert pols[name]["rows"] <= 1000, (name, pols[name])
assert r["worst_stall_ratio"] == max(p["stall_ratio"] for p in pols.values()), r
PY

# the parts in int8: encoded by the sender (a CUDA table's on the device)
"$tool" save --rows 20000 --bags 512 --rounds 1 --codec int8 --json > "$work/int8.json" \
    2> "$work/progress" || fail "--codec int8 exited $?: $(cat "$work/progress")"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["codec"]=="int8" and all(p["background_ms"]>0 for p in r["policies"].values()), r' \
    "$work/int8.json" || fail "--codec int8: $(cat "$work/int8.json")"

have_device=unknown
if [[ -n "$probe" ]]; then
    prc=0
    "$probe" > /dev/null 2>&1 || prc=$?
    case $prc in
    0) have_device=yes ;;
    77) have_device=no ;;
    *) fail "$probe (is there a CUDA device?) exited $prc" ;;
    esac
fi
rc=0
"$tool" save --rows 20000 --bags 512 --rounds 1 --device cuda --codec int8 --json \
    > "$work/cuda.json" 2> "$work/cuda.err" || rc=$?
[[ $have_device == yes && $rc != 0 ]] &&
    fail "--device cuda on a machine with a CUDA device exited $rc: $(cat "$work/cuda.err")"
[[ $have_device == no && $rc == 0 ]] &&
    fail "--device cuda ran, but test_cuda_device found no CUDA device"
if [[ $rc == 0 ]]; then
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["device"]=="cuda" and r["d2h_gb_s"]>0 and r["codec"]=="int8", r' \
        "$work/cuda.json" || fail "--device cuda: $(cat "$work/cuda.json")"
else
    [[ $rc == 1 ]] || fail "--device cuda without a device exited $rc, not 1"
    grep -q CPR_CUDA "$work/cuda.err" || fail "--device cuda: $(cat "$work/cuda.err")"
fi
echo "test_bench_save_cli: ok"
