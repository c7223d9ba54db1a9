#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cpr-analyze end to end: `plan` (the exact JSON keys, values computed by
# hand, exit 2 naming the flag for every kind of bad input), `simulate`
# (exponential failures agree with `plan` within the 95% intervals; the
# prioritized policies measured on real tables agree with vanilla at
# fraction 1 and lose less at 1/8; a save's background floors the planned
# intervals out of back-to-back saves and costs its share of the overhead;
# same seed same bytes; CSV; plots, or a
# warning and exit 0 without gnuplot), and `report` on the hand-written logs
# in tests/data (values checked against their arithmetic, malformed logs
# exit 1). Usage: test_analyze_cli.sh CPR_ANALYZE_BINARY TEST_DATA_DIR
set -euo pipefail

tool=$1
data_dir=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/cpr-analyze-cli.XXXXXX")
trap 'rm -rf "$work"' EXIT

fail() { echo "test_analyze_cli: $*" >&2; exit 1; }

# The worked example of docs/model.md: T_full = 600 s, T_part = 720 s, and
# both divide the 180000 s job, so the simulation has no end effect.
model=(--mtbf-hours 1 --shards 8 --save-s 50 --load-s 120 --restart-s 60 --job-hours 50
       --target-pls 0.0125)

# ---- plan --------------------------------------------------------------------------
"$tool" plan "${model[@]}" --json > "$work/plan.json"
python3 - "$work/plan.json" <<'PY' || fail "plan --json: $(cat "$work/plan.json")"
import json, sys
p = json.load(open(sys.argv[1]))
assert set(p) == {"full", "partial", "decision", "benefit_frac"}, p.keys()
assert set(p["full"]) == {"interval_s", "overhead_frac", "save_frac", "load_frac",
                          "lost_frac", "restart_frac", "background_frac"}, p["full"].keys()
assert set(p["partial"]) == {"interval_s", "overhead_frac", "pls", "save_frac",
                             "load_frac", "restart_frac", "background_frac"}, p["partial"].keys()
assert p["full"]["background_frac"] == 0 and p["partial"]["background_frac"] == 0, p
close = lambda a, b: abs(a - b) <= 1e-12 * max(1, abs(b))
# O_full = 15000 + 50 (120 + 60 + 300) = 39000 s; O_part = 12500 + 50 (15 + 60) = 16250 s
assert close(p["full"]["interval_s"], 600) and close(p["partial"]["interval_s"], 720), p
assert close(p["full"]["overhead_frac"], 39000 / 180000), p
assert close(p["full"]["lost_frac"], 15000 / 180000), p
assert close(p["partial"]["overhead_frac"], 16250 / 180000), p
assert close(p["partial"]["pls"], 0.0125), p
assert p["decision"] == "partial" and close(p["benefit_frac"], 22750 / 180000), p
PY
"$tool" plan "${model[@]}" > "$work/plan.txt"
grep -q "decision: partial recovery" "$work/plan.txt" || fail "plan table: $(cat "$work/plan.txt")"
"$tool" plan "${model[@]}" --formula daly --json > "$work/daly.json"
python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["full"]["interval_s"]; assert abs(t - (600*(1+1/36+1/1296)-50)) < 1e-9, t' \
    "$work/daly.json" || fail "Daly interval: $(cat "$work/daly.json")"

# expect_usage FLAG ARGS...: exit 2 and a message naming FLAG.
expect_usage() {
    local flag=$1 rc=0
    shift
    "$tool" "$@" > /dev/null 2> "$work/err" || rc=$?
    [[ $rc == 2 ]] || fail "'$*' exited $rc, not 2"
    grep -q -- "$flag" "$work/err" || fail "'$*': the message does not name $flag: $(cat "$work/err")"
}
# with_flag FLAG VALUE: the model flags with FLAG's value replaced.
with_flag() {
    local flag=$1 value=$2 out=() i
    for ((i = 0; i < ${#model[@]}; i += 2)); do
        if [[ ${model[i]} == "$flag" ]]; then out+=("$flag" "$value"); else out+=("${model[i]}" "${model[i+1]}"); fi
    done
    printf '%s\n' "${out[@]}"
}
for flag in --mtbf-hours --save-s --load-s --restart-s --job-hours; do
    for bad in 0 -1 nan inf junk 5x ""; do
        mapfile -t args < <(with_flag "$flag" "$bad")
        expect_usage "$flag" plan "${args[@]}"
    done
done
for bad in 0 -2 1.5 nan many; do
    mapfile -t args < <(with_flag --shards "$bad")
    expect_usage --shards plan "${args[@]}"
done
for bad in 0 1 -0.1 1.5 nan abc; do
    mapfile -t args < <(with_flag --target-pls "$bad")
    expect_usage --target-pls plan "${args[@]}"
done
expect_usage --formula plan "${model[@]}" --formula newton
for bad in -1 nan inf junk ""; do
    expect_usage --background-s plan "${model[@]}" --background-s "$bad"
    expect_usage --background-cost-s plan "${model[@]}" --background-cost-s "$bad"
done
for bad in 0 -0.5 1.5 nan junk; do
    expect_usage --max-background-share plan "${model[@]}" --max-background-share "$bad"
done
# The background of a save: b 300 s, c 30 s floor both intervals at 300 / 0.25 =
# 1200 s: full 7500 + 50 (120 + 60 + 600) + 30 x 150 = 51000 s; partial 7500 +
# 50 (15 + 60) + 4500 = 15750 s, PLS 1200 / (2 x 8 x 3600).
"$tool" plan "${model[@]}" --background-s 300 --background-cost-s 30 --json > "$work/bg.json"
python3 - "$work/bg.json" <<'PY' || fail "plan with a background: $(cat "$work/bg.json")"
import json, sys
p = json.load(open(sys.argv[1]))
close = lambda a, b: abs(a - b) <= 1e-12 * max(1, abs(b))
assert p["full"]["interval_s"] == 1200 and p["partial"]["interval_s"] == 1200, p
assert close(p["full"]["overhead_frac"], 51000 / 180000), p
assert close(p["full"]["background_frac"], 4500 / 180000), p
assert close(p["partial"]["overhead_frac"], 15750 / 180000), p
assert close(p["partial"]["pls"], 1200 / 57600), p
PY
"$tool" plan "${model[@]}" --background-s 300 --max-background-share 0.5 --json |
    python3 -c 'import json,sys; p=json.load(sys.stdin); assert p["full"]["interval_s"] == 600 and p["partial"]["interval_s"] == 720, p' ||
    fail "a share of 0.5 should leave 600 s and 720 s (floor 600 s)"
expect_usage --job-hours plan --mtbf-hours 1 --shards 8 --save-s 50 --load-s 120 --restart-s 60 --target-pls 0.01
expect_usage --bogus plan "${model[@]}" --bogus
expect_usage --target-pls plan "${model[@]:0:12}" --target-pls
expect_usage frobnicate frobnicate
"$tool" --help > /dev/null || fail "--help did not exit 0"
"$tool" plan --help > /dev/null || fail "plan --help did not exit 0"
rc=0; "$tool" > /dev/null 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "no command exited $rc, not 2"

# ---- simulate: the time model against the closed form -------------------------------------
"$tool" simulate "${model[@]}" --strategies full,partial --trials 400 --seed 7 --json \
    > "$work/sim.json"
python3 - "$work/sim.json" "$work/plan.json" <<'PY' || fail "simulate vs plan"
import json, sys
s, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert set(s) == {"params", "plan", "results"}, s.keys()
assert s["plan"] == p, "simulate's plan differs from plan's"
at = {r["strategy"]: r for r in s["results"] if r["point"] == "plan"}
assert set(at) == {"full", "partial"}, at.keys()
def within(stat, want, what):
    assert stat["lo"] <= want <= stat["hi"], f"{what}: {want} not in [{stat['lo']}, {stat['hi']}]"
    assert stat["hi"] - stat["lo"] < 0.1 * max(want, 1e-3), f"{what}: interval too wide {stat}"
within(at["full"]["overhead_frac"], p["full"]["overhead_frac"], "full overhead")
within(at["partial"]["overhead_frac"], p["partial"]["overhead_frac"], "partial overhead")
within(at["partial"]["pls"], p["partial"]["pls"], "partial PLS")
assert at["full"]["interval_s"] == 600 and at["partial"]["interval_s"] == 720
assert at["full"]["pls"]["mean"] == 0
sweep = [r for r in s["results"] if r["point"] == "sweep"]
assert len(sweep) == 2 * 7, len(sweep)
for r in s["results"]:
    assert {"strategy", "interval_s", "overhead_frac", "pls", "save_frac", "load_frac",
            "lost_frac", "restart_frac", "failures", "model_overhead_frac",
            "model_pls", "trials"} <= set(r), r.keys()
    # no background given: its fields are there, and zero
    assert r["background_frac"] == 0 and r["background_share"] == 0, r
    assert r["back_to_back"] is False, r
    # every sweep point agrees with the closed form up to the end effect
    assert abs(r["overhead_frac"]["mean"] - r["model_overhead_frac"]) < 0.01, r
PY

# Same seed, same bytes; another seed, other traces.
"$tool" simulate "${model[@]}" --strategies full,partial --trials 400 --seed 7 --json > "$work/again.json"
cmp -s "$work/sim.json" "$work/again.json" || fail "the same seed gave different output"
"$tool" simulate "${model[@]}" --strategies full,partial --trials 400 --seed 8 --json > "$work/other.json"
! cmp -s "$work/sim.json" "$work/other.json" || fail "another seed gave the same output"

# Weibull failures with the same mean: runs, deterministic, sane.
"$tool" simulate "${model[@]}" --strategies full --failures weibull --shape 0.7 --trials 200 --json > "$work/weib.json"
python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["params"]["failures"]=="weibull"; assert all(r["failures"] > 0 for r in s["results"])' \
    "$work/weib.json" || fail "weibull run"

# ---- simulate: prioritized policies on real embedding tables ------------------------------
small=(--rows 256 --batch 64 --steps-per-save 4 --emb-saves 40 --emb-trials 30 --points 1
       --interval-min-s 720 --interval-max-s 720 --strategies partial,mfu,ssu,topk-norm --json)
"$tool" simulate "${model[@]}" "${small[@]}" --fraction 1 > "$work/r1.json" 2> /dev/null
"$tool" simulate "${model[@]}" "${small[@]}" > "$work/r8.json" 2> /dev/null
python3 - "$work/r1.json" "$work/r8.json" <<'PY' || fail "prioritized PLS"
import json, sys
r1, r8 = (json.load(open(f)) for f in sys.argv[1:3])
at = lambda s: {r["strategy"]: r for r in s["results"] if r["point"] == "plan"}
a1, a8 = at(r1), at(r8)
vanilla = a1["partial"]["model_pls"]
for pol in ("mfu", "ssu", "topk-norm"):
    # fraction 1: every policy saves every touched row each interval: vanilla
    st = a1[pol]["pls"]
    assert st["lo"] <= vanilla <= st["hi"], (pol, st, vanilla)
    # 1/8 of the rows 8 times as often loses less than vanilla at equal bandwidth
    assert a8[pol]["pls"]["hi"] < vanilla, (pol, a8[pol]["pls"], vanilla)
    assert 0 < a8[pol]["loss_ratio"] < 1, a8[pol]
    assert a8[pol]["save_interval_s"] == 90, a8[pol]
PY

# ---- simulate: the background of a save stops back-to-back saves ----------------------------
# A stall of 0.5 s plans saves every 60 s (full) and 720 s (partial); each save's
# background is 900 s on the trainer's host, costing 60 s of training. Without the
# term those intervals put saves back to back; with it both rise to 900 / 0.25.
# The sweep (--points 2 from 60 to 720 s) evaluates the intervals planned without it.
tiny=(--mtbf-hours 1 --shards 8 --save-s 0.5 --load-s 120 --restart-s 60 --job-hours 50
      --target-pls 0.0125 --strategies full,partial,mfu --trials 200 --emb-trials 4
      --points 2 --interval-min-s 60 --interval-max-s 720 --json)
"$tool" simulate "${tiny[@]}" --background-s 0 > "$work/nobg.json" 2> /dev/null
"$tool" simulate "${tiny[@]}" --background-s 900 --background-cost-s 60 > "$work/withbg.json" 2> /dev/null
python3 - "$work/nobg.json" "$work/withbg.json" <<'PY' || fail "the background term"
import json, sys
off, on = (json.load(open(f)) for f in sys.argv[1:3])
close = lambda a, b: abs(a - b) <= 1e-12 * max(1, abs(b))
assert off["plan"]["full"]["interval_s"] == 60 and off["plan"]["partial"]["interval_s"] == 720
assert on["plan"]["full"]["interval_s"] == 3600 and on["plan"]["partial"]["interval_s"] == 3600
assert on["params"]["background_s"] == 900 and on["params"]["max_background_share"] == 0.25
for r in on["results"]:
    t = 60 if r["interval_s"] == 60 else 720 if r["interval_s"] == 720 else 3600
    # the share is b/t for every policy: r*900 every r*T for mfu
    assert close(r["background_share"], 900 / t), r
    if r["point"] == "plan":
        assert r["interval_s"] == 3600 and r["back_to_back"] is False, r
        # 50 saves x 60 s over the 180000 s job, in the simulated and modelled overhead
        assert close(r["background_frac"], 3000 / 180000), r
    else:
        # the intervals planned without the term: each save's background is still
        # in flight when the next one is due
        assert r["back_to_back"] is True and r["background_share"] >= 1, r
        assert close(r["background_frac"], 60 / t), r
    base = next(b for b in off["results"] if b["strategy"] == r["strategy"]
                and b["interval_s"] == r["interval_s"] and b["point"] == "sweep") \
        if r["point"] == "sweep" else None
    if base:   # the same traces: the overhead grows by exactly the background
        assert close(r["overhead_frac"]["mean"], base["overhead_frac"]["mean"] + r["background_frac"]), (r, base)
        assert close(r["model_overhead_frac"], base["model_overhead_frac"] + 60 / r["interval_s"]), (r, base)
at_off = {r["strategy"]: r for r in off["results"] if r["point"] == "plan"}
at_on = {r["strategy"]: r for r in on["results"] if r["point"] == "plan"}
assert all(r["background_share"] == 0 and r["back_to_back"] is False for r in off["results"])
# partial at 720 s without the term models 2.15% but pays 8.3% more in background;
# at 3600 s it pays 1.67%, and its PLS misses the target visibly (0.0625)
assert close(on["plan"]["partial"]["overhead_frac"], (25 + 750 + 3000 + 3000) / 180000), on["plan"]
assert close(on["plan"]["partial"]["pls"], 3600 / 57600), on["plan"]
assert at_on["partial"]["overhead_frac"]["lo"] <= on["plan"]["partial"]["overhead_frac"] <= at_on["partial"]["overhead_frac"]["hi"], at_on
PY

# ---- simulate: usage errors -----------------------------------------------------------------
expect_usage --fraction simulate "${model[@]}" --fraction 0
expect_usage --strategies simulate "${model[@]}" --strategies full,bogus
expect_usage --shape simulate "${model[@]}" --shape 0
expect_usage --failures simulate "${model[@]}" --failures gamma
expect_usage --rows simulate "${model[@]}" --rows 4
expect_usage --trials simulate "${model[@]}" --trials 1
expect_usage --interval-min-s simulate "${model[@]}" --interval-min-s 100 --interval-max-s 10
expect_usage --background-s simulate "${model[@]}" --background-s -5
expect_usage --max-background-share simulate "${model[@]}" --max-background-share 2
expect_usage --save-s simulate --mtbf-hours 1 --shards 8 --load-s 1 --restart-s 1 --job-hours 1 --target-pls 0.1

# ---- CSV and plots ---------------------------------------------------------------------------
"$tool" simulate "${model[@]}" --strategies full,partial --trials 50 --points 3 \
    --csv "$work/sim.csv" --plot-dir "$work/plots" > /dev/null 2> "$work/plot.err"
[[ $(head -1 "$work/sim.csv") == strategy,point,interval_s,*,background_frac,background_share,back_to_back ]] ||
    fail "CSV header: $(head -1 "$work/sim.csv")"
[[ $(wc -l < "$work/sim.csv") == 9 ]] || fail "CSV rows: $(wc -l < "$work/sim.csv") lines, want 1 + 2 x 4"
[[ -s $work/plots/plots.gp && -s $work/plots/overhead_0.dat ]] || fail "plot data missing"
if command -v gnuplot > /dev/null; then
    for f in overhead pls; do
        [[ $(head -c 4 "$work/plots/$f.png" | od -An -tx1 | tr -d ' ') == 89504e47 ]] ||
            fail "$f.png is not a PNG"
    done
    "$tool" simulate "${model[@]}" --strategies partial --trials 20 --points 2 --plot-dir "$work/svg" --svg > /dev/null 2>&1
    grep -q "<svg" "$work/svg/pls.svg" || fail "pls.svg is not SVG"
else
    echo "test_analyze_cli: gnuplot not installed: PNG checks skipped" >&2
fi
# Without gnuplot on PATH: a warning, the data still written, exit 0.
rc=0
PATH=/nonexistent "$tool" simulate "${model[@]}" --strategies full --trials 20 --points 2 \
    --plot-dir "$work/noplot" > /dev/null 2> "$work/noplot.err" || rc=$?
[[ $rc == 0 ]] || fail "missing gnuplot exited $rc: $(cat "$work/noplot.err")"
grep -q "gnuplot not found" "$work/noplot.err" || fail "no warning without gnuplot"
[[ -s $work/noplot/plots.gp && ! -e $work/noplot/overhead.png ]] || fail "noplot directory"

# ---- report on hand-written logs --------------------------------------------------------------
"$tool" report "$data_dir/run_full.jsonl" "$data_dir/run_mfu.jsonl" > "$work/report.txt"
grep -q "run_mfu" "$work/report.txt" || fail "report table: $(cat "$work/report.txt")"
"$tool" report "$data_dir/run_full.jsonl" "$data_dir/run_mfu.jsonl" --json \
    --csv "$work/report.csv" --plot-dir "$work/rplots" > "$work/report.json" 2> "$work/rplots.err"
python3 - "$work/report.json" <<'PY' || fail "report --json: $(cat "$work/report.json")"
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
assert len(runs) == 2
full, mfu = runs
close = lambda a, b: abs(a - b) <= 1e-12 * max(1, abs(b))
# run_full: the summary's breakdown over compute_s 256: (6 + 4 + 40 + 6) / 256
assert full["strategy"] == "full" and full["recovery"] == "full", full
assert close(full["overhead_frac"], 56 / 256) and close(full["lost_frac"], 40 / 256), full
assert close(full["interval_s"], 125), full          # commits at 10, 110, 260
assert full["pls"] == 0 and full["auc"] == 0.75 and full["logloss"] == 0.5, full
assert full["checkpoints"] == 3 and full["failures"] == 1, full
# the model at 125 s with the run's costs: 2*256/125 + (4 + 6 + 62.5), over 256
assert close(full["model"]["overhead_frac"], (2 * 256 / 125 + 72.5) / 256), full["model"]
# run_mfu, no summary: stalls 5 x 0.5 s, load 1 s, restart 2 s; last event at 100 s.
# The restart is emulated (never slept, so not in t_s): compute 100 - 3.5.
assert mfu["strategy"] == "run_mfu" and mfu["recovery"] == "partial", mfu
assert close(mfu["compute_s"], 96.5) and close(mfu["overhead_frac"], 5.5 / 96.5), mfu
assert close(mfu["pls"], 50 / 5000) and close(mfu["interval_s"], 20), mfu
assert mfu["checkpoints"] == 5 and mfu["committed"] == 4 and mfu["bytes_written"] == 40000, mfu
assert mfu["rows_saved"] == 1250 and close(mfu["bytes_per_row_saved"], 32), mfu
assert "auc" not in mfu and "model" not in mfu, mfu   # no eval; no shard count for a model
PY
[[ $(wc -l < "$work/report.csv") == 3 ]] || fail "report CSV: $(cat "$work/report.csv")"

# An eval without "auc" (a held-out part of one class) is read: logloss kept, no auc.
# A line with junk after its object is refused, not read up to the object's end.
cat > "$work/one_class.jsonl" <<'EOF2'
{"event":"eval","t_s":90,"step":900,"logloss":0.25}
{"event":"summary","t_s":100,"strategy":"one","shards":2,"steps":1000,"wall_s":100,"compute_s":100,"save_s":0,"load_s":0,"lost_s":0,"restart_s":0,"update_events":10,"lost_events":0,"bytes_written":0,"failures":0}
EOF2
"$tool" report "$work/one_class.jsonl" --json > "$work/one.json" || fail "report of a one-class eval"
python3 - "$work/one.json" <<'PY' || fail "one-class eval: $(cat "$work/one.json")"
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
assert "auc" not in run and run["logloss"] == 0.25, run
PY
printf '%s\n' '{"event":"step","t_s":5,"step":50,"loss":0.7,"update_events":5}junk' \
    > "$work/torn.jsonl"
if "$tool" report "$work/torn.jsonl" > /dev/null 2> "$work/err"; then
    fail "a torn line was read"
fi

# With a "none" run, every run is also compared end to end with it.
cat > "$work/none.jsonl" <<'EOF2'
{"event":"summary","t_s":200,"strategy":"none","shards":2,"steps":3300,"wall_s":200,"compute_s":200,"save_s":0,"load_s":0,"lost_s":0,"restart_s":0,"update_events":33000,"lost_events":0,"bytes_written":0,"failures":0}
EOF2
"$tool" report "$work/none.jsonl" "$data_dir/run_full.jsonl" "$data_dir/run_mfu.jsonl" --json \
    > "$work/vs_none.json" || fail "report with a baseline"
python3 - "$work/vs_none.json" <<'PY' || fail "report vs none: $(cat "$work/vs_none.json")"
import json, sys
none, full, mfu = json.load(open(sys.argv[1]))["runs"]
assert none["slowdown_frac"] == 0 and none["wall_s"] == 200, none
assert abs(full["slowdown_frac"] - (312 / 200 - 1)) < 1e-12, full      # the summary's wall_s
assert abs(mfu["slowdown_frac"] - (100 / 200 - 1)) < 1e-12, mfu        # no summary: last t_s
PY
"$tool" report "$work/none.jsonl" "$data_dir/run_full.jsonl" | grep -Eq '^full .* \+56\.0%$' \
    || fail "report table lacks full's wall/none cell (+56.0%)"
! grep -q slowdown_frac "$work/report.json" || fail "slowdown_frac without a none run"
[[ -s $work/rplots/loss_0.dat && -s $work/rplots/plots.gp ]] || fail "report plot data"

# A checkpoint's settle_ms (ending its embedding saves) counts with its stall.
cat > "$work/settle.jsonl" <<'EOF2'
{"event":"checkpoint","t_s":10,"step":100,"checkpoint":1,"kind":"FULL","policy":"full","rows":10,"bytes":320,"stall_ms":100,"settle_ms":50,"duration_ms":300,"committed":true}
{"event":"checkpoint","t_s":100,"step":1000,"checkpoint":2,"kind":"FULL","policy":"full","rows":10,"bytes":320,"stall_ms":100,"duration_ms":300,"committed":true}
EOF2
"$tool" report "$work/settle.jsonl" --json > "$work/settle.json" || fail "report of settle.jsonl"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["runs"][0]; assert abs(r["save_frac"] - 0.25 / 99.75) < 1e-12, r' \
    "$work/settle.json" || fail "report settle_ms: $(cat "$work/settle.json")"

# A summary's background_s (steps slowed while saves streamed) is overhead too.
cat > "$work/bg.jsonl" <<'EOF2'
{"event":"summary","t_s":210,"strategy":"mfu","shards":2,"steps":3300,"wall_s":210,"compute_s":200,"save_s":2,"load_s":0,"lost_s":0,"restart_s":0,"background_s":8,"update_events":33000,"lost_events":0,"bytes_written":0,"failures":0}
EOF2
"$tool" report "$work/bg.jsonl" --json --csv "$work/bg.csv" > "$work/bg.json" || fail "report of bg.jsonl"
python3 - "$work/bg.json" "$work/bg.csv" <<'PY' || fail "report background: $(cat "$work/bg.json")"
import csv, json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
assert abs(r["background_frac"] - 8 / 200) < 1e-12 and abs(r["overhead_frac"] - 10 / 200) < 1e-12, r
row = next(csv.DictReader(open(sys.argv[2])))
assert abs(float(row["background_frac"]) - 0.04) < 1e-12, row
PY

expect_report_error() {
    local want=$1 rc=0
    shift
    "$tool" report "$@" > /dev/null 2> "$work/err" || rc=$?
    [[ $rc == 1 ]] || fail "report $* exited $rc, not 1"
    grep -q -- "$want" "$work/err" || fail "report $*: message lacks '$want': $(cat "$work/err")"
}
head -2 "$data_dir/run_mfu.jsonl" > "$work/bad.jsonl"; echo '{"event": "step", ' >> "$work/bad.jsonl"
expect_report_error "bad.jsonl:3: not valid JSON" "$work/bad.jsonl"
echo '{"event":"checkpoint","t_s":1,"step":1,"checkpoint":1,"kind":"FULL","policy":"full","rows":1,"bytes":1,"duration_ms":1,"committed":true}' > "$work/field.jsonl"
expect_report_error '"stall_ms"' "$work/field.jsonl"
echo '[1, 2]' > "$work/array.jsonl"
expect_report_error 'string "event"' "$work/array.jsonl"
expect_report_error "cannot read" "$work/missing.jsonl"
expect_usage RUN.jsonl report
expect_usage --bogus report "$data_dir/run_full.jsonl" --bogus
echo "test_analyze_cli: ok"
