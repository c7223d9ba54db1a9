#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Smoke test of cpr-dlrm: a short run on `cpr-data gen` output with a
# malformed line in it (the JSON log's events, counts and time breakdown),
# a run on the real CSV sample, and the exit codes of --help (0), usage
# errors (2) and a missing file (1).
# Usage: test_dlrm_cli.sh CPR_DLRM CPR_DATA TEST_DATA_DIR
set -euo pipefail

dlrm=$1
data_tool=$2
data_dir=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/cpr-dlrm-cli.XXXXXX")
trap 'rm -rf "$work"' EXIT

fail() { echo "test_dlrm_cli: $*" >&2; exit 1; }

small=(--tables 8 --table-rows 1000 --emb-dim 8 --bottom 13-16-8 --top 16-1 --batch 32)

# 3000 lines plus one malformed line in the training part.
"$data_tool" gen --rows 3000 --tables 8 --cardinality 500 --seed 3 -o "$work/gen.tsv"
{ head -n 100 "$work/gen.tsv"; echo "not a criteo line"; tail -n +101 "$work/gen.tsv"; } \
    > "$work/train.tsv"
"$dlrm" --data "$work/train.tsv" "${small[@]}" --steps 40 --eval-every 20 --log-every 10 \
    --holdout 0.2 --shards 2 --track all --shuffle-window 500 --json-log "$work/log.jsonl" \
    2> "$work/err" || fail "the run failed: $(cat "$work/err")"
grep -q "eval at step 40" "$work/err" || fail "no progress line for the last eval"
python3 - "$work/log.jsonl" <<'PY' || fail "bad log: $(cat "$work/log.jsonl")"
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
kinds = [e["event"] for e in events]
assert kinds == ["start", "step", "step", "eval", "step", "step", "eval", "summary"], kinds
start, summary = events[0], events[-1]
assert start["train_lines"] == 2400 and start["holdout_lines"] == 601, start
assert start["shards"] == 2 and start["tables"] == 8, start
assert [e["step"] for e in events if e["event"] == "step"] == [10, 20, 30, 40]
for e in events:
    assert e["t"] >= 0
evals = [e for e in events if e["event"] == "eval"]
assert all(e["samples"] == 601 and 0 <= e["auc"] <= 1 and e["logloss"] > 0 for e in evals)
assert summary["steps"] == 40 and summary["samples"] == 40 * 32, summary
assert summary["malformed"] == 1, summary
for key in ("train_s", "eval_s", "io_s", "hook_s", "total_s", "steps_per_s"):
    assert summary[key] >= 0, key
assert summary["train_s"] + summary["io_s"] + summary["eval_s"] <= summary["total_s"] + 1e-6
assert summary["auc"] == evals[-1]["auc"]
PY

# By epochs on the real sample (CSV with a header): 96 training lines.
"$dlrm" "$data_dir/criteo_sample.csv" --tables 26 --table-rows 100 --emb-dim 4 \
    --batch 16 --epochs 2 --holdout 0.2 --quiet --json-log "$work/csv.jsonl" \
    || fail "the CSV run failed"
python3 - "$work/csv.jsonl" <<'PY' || fail "bad CSV log: $(cat "$work/csv.jsonl")"
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
summary = events[-1]
assert events[0]["train_lines"] == 96 and events[0]["holdout_lines"] == 24, events[0]
assert summary["event"] == "summary" and summary["epochs"] == 2, summary
assert summary["steps"] == 12 and summary["samples"] == 192, summary
PY

# --ckpt-codec auto: the estimator picks the codec of each MFU save (4
# failures over the run, 2 shards: a row is restored about twice from them,
# within int4's budget, docs/model.md); FULL parts stay f32.
"$dlrm" --data "$work/gen.tsv" "${small[@]}" --steps 80 --shards 2 --track all \
    --ckpt "local://$work/store" --policy mfu --ckpt-codec auto --failures 4 --failure-seed 2 \
    --quiet --json-log "$work/auto.jsonl" 2> "$work/err" || fail "the auto-codec run failed: $(cat "$work/err")"
python3 - "$work/auto.jsonl" <<'PY' || fail "bad auto-codec log: $(cat "$work/auto.jsonl")"
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
saves = [(e["kind"], e["codec"]) for e in events if e["event"] == "checkpoint"]
assert ("PRIORITY", "int4") in saves, saves
assert all(c == "f32" for k, c in saves if k == "FULL"), saves
assert all(c == "int4" for k, c in saves if k == "PRIORITY"), saves
summary = events[-1]
assert summary["codec"] == "auto" and summary["strategy"] == "mfu-auto", summary
PY

# Exit codes.
"$dlrm" --help > "$work/help" || fail "--help failed"
grep -q "usage: cpr-dlrm" "$work/help" || fail "--help did not print the usage"
grep -q -- "--policy" "$work/help" || fail "--help does not list the checkpoint flags"
expect_rc() {
    local want=$1 rc=0
    shift
    "$dlrm" "$@" > /dev/null 2> "$work/err" || rc=$?
    [[ $rc == "$want" ]] || fail "'$*' exited $rc, not $want: $(cat "$work/err")"
}
expect_rc 2
expect_rc 2 --data "$work/gen.tsv" --batch 0
expect_rc 2 --data "$work/gen.tsv" --optimizer adam
expect_rc 2 --data "$work/gen.tsv" --steps 5 --epochs 1
expect_rc 2 --data "$work/gen.tsv" --holdout 1
expect_rc 2 --data "$work/gen.tsv" --track counts,bogus
expect_rc 2 --data "$work/gen.tsv" --bottom 12-16
expect_rc 2 --data "$work/gen.tsv" --top 16-2
expect_rc 2 --data "$work/gen.tsv" --no-such-flag
expect_rc 2 --data "$work/gen.tsv" --steps
expect_rc 1 --data "$work/missing.tsv" "${small[@]}" --steps 1
# A pipe would be read by the line count and lost to training: refused.
rc=0
cat "$work/gen.tsv" | "$dlrm" --data /dev/stdin "${small[@]}" --steps 1 > /dev/null \
    2> "$work/err" || rc=$?
[[ $rc == 1 ]] || fail "a pipe as --data exited $rc, not 1: $(cat "$work/err")"
grep -q "not a regular file" "$work/err" || fail "a pipe as --data: $(cat "$work/err")"
expect_rc 2 --data "$work/gen.tsv" --policy bogus
expect_rc 2 --data "$work/gen.tsv" --recovery sometimes
expect_rc 2 --data "$work/gen.tsv" --ckpt-codec-full auto
expect_rc 2 --data "$work/gen.tsv" --fraction 0
expect_rc 2 --data "$work/gen.tsv" --resume
expect_rc 2 --data "$work/gen.tsv" --mtbf-steps 10 --failures 2
# Checkpointing flags the client checks are usage errors too.
expect_rc 2 --data "$work/gen.tsv" "${small[@]}" --steps 1 --job bad/name \
    --ckpt "local://$work/usage-store"
expect_rc 2 --data "$work/gen.tsv" "${small[@]}" --steps 1 --ckpt bogus://x
expect_rc 2 --data "$work/gen.tsv" --failure-dist gamma
echo "test_dlrm_cli: ok"
