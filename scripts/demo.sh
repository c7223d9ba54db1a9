#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make demo`: the CPR paper's comparison, run for real. Starts ckptd on
# 127.0.0.1 with its data under ./var/ckptd, generates a synthetic Criteo-like
# dataset (or uses DATA=/path/to/train.txt), and trains the reference DLRM
# six times on one seeded failure schedule: no failures (the baseline), full
# recovery, partial recovery (vanilla CPR), CPR-MFU, CPR-SSU and TOPK_NORM.
# Each run writes a JSON event log; cpr-analyze turns them into the table,
# var/report/summary.json and plots. Sized for a few minutes on 2 cores.
#
# usage: scripts/demo.sh BUILD_DIR [DATA]
# environment: DEMO_ROWS (synthetic lines, default 1000000), DEMO_SEED,
#              DEMO_FAILURES (expected over a run, default 6), DEMO_SHARDS (8)
set -euo pipefail

build=${1:?usage: scripts/demo.sh BUILD_DIR [DATA]}
data=${2:-}
rows=${DEMO_ROWS:-1000000}
seed=${DEMO_SEED:-1}
failures=${DEMO_FAILURES:-6}
shards=${DEMO_SHARDS:-8}
var=${DEMO_VAR:-var}
strategies=(none full partial mfu ssu topk-norm)

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
"$build/ckptd/ckptd" --listen 127.0.0.1:0 --data-dir "$var/ckptd" --log-level warn \
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
        --track all --restart-s "${DEMO_RESTART_S:-1}" --failure-seed "$seed" --quiet)
i=0
for s in "${strategies[@]}"; do
    i=$((i + 1))
    log="$var/report/$s.jsonl"
    say "[$i/${#strategies[@]}] $s ..."
    start=$(date +%s)
    case "$s" in
    none) args=() ;;
    *) args=(--ckpt "grpc://$addr" --job "demo-$s" --policy "$s" --failures "$failures") ;;
    esac
    "$build/examples/dlrm/cpr-dlrm" "${common[@]}" "${args[@]}" --json-log "$log"
    say "[$i/${#strategies[@]}] $s done in $(( $(date +%s) - start )) s"
done

# ---- the report -------------------------------------------------------------------------
logs=()
for s in "${strategies[@]}"; do logs+=("$var/report/$s.jsonl"); done
"$build/analysis/cpr-analyze" report "${logs[@]}" --summary "$var/report/summary.json" \
    --csv "$var/report/summary.csv" --plot-dir "$var/report" | tee "$var/report/summary.txt"
say "summary: $var/report/summary.json, plots and logs in $var/report/"
