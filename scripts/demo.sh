#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make demo`: the CPR paper's comparison, run for real. Starts ckptd on
# 127.0.0.1 with its data under ./var/ckptd, generates a synthetic Criteo-like
# dataset (or uses DATA=/path/to/train.txt), and trains the reference DLRM
# eight times on one seeded failure schedule: no failures (the baseline), full
# recovery, partial recovery (vanilla CPR), CPR-MFU, CPR-SSU and TOPK_NORM, and
# CPR-MFU and CPR-SSU once more with every part's rows in int8.
# Each run writes a JSON event log; cpr-analyze turns them into the table,
# var/report/summary.json and plots. Sized for a few minutes on 2 cores.
#
# The regime is a production scenario compressed in time (docs/results.md,
# "The scenario"): a job of DEMO_JOB_H hours with a failure every
# DEMO_MTBF_H hours and DEMO_RESTART_MIN minutes to reschedule after each.
# The `none` run's compute time stands for the job's length; that fixes one
# time-compression factor, and the failures expected over a run
# (job / MTBF) and the restart cost (restart / factor) follow from it.
# ckptd and the trainer run pinned to different cores when there are two.
#
# usage: scripts/demo.sh BUILD_DIR [DATA]
# environment: DEMO_ROWS (synthetic lines, default 1000000), DEMO_SEED,
#              DEMO_SHARDS (8), DEMO_JOB_H (48), DEMO_MTBF_H (7.9),
#              DEMO_RESTART_MIN (5), DEMO_RESTART_S (overrides the scaled
#              restart), DEMO_FAILURES (overrides job / MTBF)
set -euo pipefail

build=${1:?usage: scripts/demo.sh BUILD_DIR [DATA]}
data=${2:-}
rows=${DEMO_ROWS:-1000000}
seed=${DEMO_SEED:-1}
shards=${DEMO_SHARDS:-8}
job_h=${DEMO_JOB_H:-48}
mtbf_h=${DEMO_MTBF_H:-7.9}
restart_min=${DEMO_RESTART_MIN:-5}
failures=${DEMO_FAILURES:-$(awk -v j="$job_h" -v m="$mtbf_h" 'BEGIN { printf "%.4f", j / m }')}
var=${DEMO_VAR:-var}
# mfu-int8 and ssu-int8: the same policies with every part's rows in int8 (issue #12).
strategies=(none full partial mfu ssu topk-norm mfu-int8 ssu-int8)

say() { printf 'demo: %s\n' "$*" >&2; }

for tool in ckptd/ckptd examples/dlrm/cpr-dlrm tools/cpr-data analysis/cpr-analyze; do
    [[ -x "$build/$tool" ]] || { say "missing $build/$tool (run make build)"; exit 1; }
done

mkdir -p "$var/report" "$var/data"
rm -rf "$var/ckptd" "$var/report"/*.jsonl
daemon_pid=
cleanup() {
    if [[ -n "$daemon_pid" ]] && kill -0 "$daemon_pid" 2>/dev/null; then
        kill -TERM "$daemon_pid"
        wait "$daemon_pid" || true
    fi
}
trap cleanup EXIT

# ---- data -----------------------------------------------------------------------
if [[ -z "$data" ]]; then
    data="$var/data/train-$rows-$seed.tsv"
    if [[ ! -s "$data" ]]; then
        say "generating $rows synthetic lines (cpr-data gen, seed $seed) -> $data"
        "$build/tools/cpr-data" gen --rows "$rows" --seed "$seed" -o "$data.tmp"
        mv "$data.tmp" "$data"
    fi
else
    [[ -r "$data" ]] || { say "DATA=$data is not a readable file"; exit 2; }
    say "using $data"
fi

# ---- the daemon -------------------------------------------------------------------
fifo="$var/ckptd.fifo"
rm -f "$fifo"
mkfifo "$fifo"
# ckptd gets the last core and the trainer the first, as on separate hosts
# (every run, `none` included, is pinned the same way). The checkpoint
# client's threads (copying saves out, checksums, sending) run off the
# training core, as on a trainer host with cores to spare: here that is
# ckptd's core, the only other one.
pin_ckptd=() pin_trainer=() ckpt_cpus=()
ncpu=$(nproc 2>/dev/null || echo 1)
if (( ncpu >= 2 )) && command -v taskset >/dev/null; then
    pin_ckptd=(taskset -c $((ncpu - 1)))
    pin_trainer=(taskset -c 0)
    ckpt_cpus=(--ckpt-cpus $((ncpu - 1)))
    say "pinning: trainer on cpu 0, ckptd and the client's threads on cpu $((ncpu - 1))"
else
    say "not pinning ($ncpu cpu, taskset $(command -v taskset >/dev/null && echo found || echo missing))"
fi
"${pin_ckptd[@]}" "$build/ckptd/ckptd" --listen 127.0.0.1:0 --data-dir "$var/ckptd" --log-level warn \
    --gc-interval-s 10 \
    > "$fifo" 2> "$var/ckptd.log" &
daemon_pid=$!
# The daemon prints its address once it serves; EOF (it died) ends the read.
line=
read -r -t 60 line < "$fifo" || true
rm -f "$fifo"
addr=${line#ckptd listening on }
if [[ -z "$line" || "$addr" == "$line" ]]; then
    say "ckptd did not start; see $var/ckptd.log"
    exit 1
fi
say "ckptd serves $addr (data in $var/ckptd)"

# ---- the runs --------------------------------------------------------------------------
# One epoch over the training lines (more overfits this small data set), the
# same model, data order and failure schedule for every strategy.
common=(--data "$data" --epochs 1 --batch 256 --shards "$shards" --table-rows 50000
        --emb-dim 16 --seed "$seed" --holdout 0.1 --eval-max 40000 --log-every 200
        --track all --failure-seed "$seed" --quiet)
restart_s=${DEMO_RESTART_S:-}
i=0
for s in "${strategies[@]}"; do
    i=$((i + 1))
    log="$var/report/$s.jsonl"
    say "[$i/${#strategies[@]}] $s ..."
    start=$(date +%s)
    case "$s" in
    none) args=() ;;
    *-int8) args=(--ckpt "grpc://$addr" --job "demo-$s" --policy "${s%-int8}"
                  --ckpt-codec int8 --ckpt-codec-full int8 --failures "$failures"
                  --restart-s "$restart_s" "${ckpt_cpus[@]}") ;;
    *) args=(--ckpt "grpc://$addr" --job "demo-$s" --policy "$s" --failures "$failures"
             --restart-s "$restart_s" "${ckpt_cpus[@]}") ;;
    esac
    "${pin_trainer[@]}" "$build/examples/dlrm/cpr-dlrm" "${common[@]}" "${args[@]}" --json-log "$log"
    say "[$i/${#strategies[@]}] $s done in $(( $(date +%s) - start )) s"
    if [[ "$s" == none ]]; then
        # The failure-free run is the job: its compute time is DEMO_JOB_H hours.
        compute_s=$(sed -n 's/.*"event":"summary".*"compute_s":\([0-9.eE+-]*\).*/\1/p' "$log")
        [[ -n "$compute_s" ]] || { say "no compute_s in $log"; exit 1; }
        scenario=$(awk -v c="$compute_s" -v j="$job_h" -v m="$mtbf_h" -v r="$restart_min" \
            -v f="$failures" -v rs="$restart_s" 'BEGIN {
                k = j * 3600 / c; if (rs == "") rs = r * 60 / k
                printf "%.6g %.6g %.6g", k, rs, (f > 0 ? c / f : 0) }')
        read -r factor restart_s mtbf_s <<< "$scenario"
        [[ -n "$factor" && -n "$restart_s" && -n "$mtbf_s" ]] ||
            { say "could not derive the scenario from compute_s=$compute_s"; exit 1; }
        say "scenario: job ${job_h} h, MTBF ${mtbf_h} h, restart ${restart_min} min;" \
            "the job is ${compute_s} s here, so 1 s here = ${factor} s there:" \
            "${failures} failures expected, MTBF ${mtbf_s} s, restart ${restart_s} s"
        printf '{"job_h":%s,"mtbf_h":%s,"restart_min":%s,"none_compute_s":%s,"compression":%s,"failures_expected":%s,"mtbf_s":%s,"restart_s":%s,"pinned":%s}\n' \
            "$job_h" "$mtbf_h" "$restart_min" "$compute_s" "$factor" "$failures" "$mtbf_s" \
            "$restart_s" "$([[ ${#pin_trainer[@]} -gt 0 ]] && echo true || echo false)" \
            > "$var/report/scenario.json"
    fi
done

# ---- the report -------------------------------------------------------------------------
logs=()
for s in "${strategies[@]}"; do logs+=("$var/report/$s.jsonl"); done
"$build/analysis/cpr-analyze" report "${logs[@]}" --summary "$var/report/summary.json" \
    --csv "$var/report/summary.csv" --plot-dir "$var/report" | tee "$var/report/summary.txt"
say "summary: $var/report/summary.json, plots and logs in $var/report/"
