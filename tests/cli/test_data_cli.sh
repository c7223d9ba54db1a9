#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Smoke test of the cpr-data tool: generate a small synthetic file, read it
# back with `stats --json` and check the counts; check that the shared real
# sample reads as 120 rows; check the exit codes of --help (0) and of usage
# errors (2). Usage: test_data_cli.sh CPR_DATA_BINARY TEST_DATA_DIR
set -euo pipefail

tool=$1
data_dir=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/cpr-data-cli.XXXXXX")
trap 'rm -rf "$work"' EXIT

fail() { echo "test_data_cli: $*" >&2; exit 1; }

# json_get FILE KEY: print one top-level value of a JSON object.
json_get() {
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

"$tool" gen --rows 2000 --seed 7 -o "$work/synth.tsv"
"$tool" stats "$work/synth.tsv" --json > "$work/synth.json"
[[ $(json_get "$work/synth.json" rows) == 2000 ]] || fail "rows is not 2000: $(cat "$work/synth.json")"
[[ $(json_get "$work/synth.json" malformed) == 0 ]] || fail "malformed is not 0"
python3 - "$work/synth.json" <<'PY' || fail "bad distinct or positive_rate in $(cat "$work/synth.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert len(r["distinct"]) == 26 and all(0 < d <= 2000 for d in r["distinct"]), r
assert 0.18 <= r["positive_rate"] <= 0.32, r
assert r["positives"] == round(r["positive_rate"] * r["rows"]), r
PY

# A failed gen leaves its -o path as it was (here a link to a full device),
# and someone else's FILE.tmp is never touched.
ln -s /dev/full "$work/full"
rc=0
"$tool" gen --rows 100000 -o "$work/full" 2> "$work/err" || rc=$?
[[ $rc == 1 && -L $work/full && -c /dev/full ]] || fail "gen into a full device: rc $rc, link or device gone"
echo notes > "$work/synth.tsv.tmp"
"$tool" gen --rows 2000 --seed 7 -o "$work/synth.tsv"
[[ $(cat "$work/synth.tsv.tmp") == notes ]] || fail "gen touched FILE.tmp"

# A file name that is not UTF-8 still gives JSON that parses (U+FFFD for
# the byte that is not).
odd=$'odd\xff\xc3(.tsv'
cp "$work/synth.tsv" "$work/$odd"
"$tool" stats "$work/$odd" --json > "$work/odd.json"
python3 -c 'import json, sys; r = json.load(open(sys.argv[1], encoding="utf-8")); assert r["rows"] == 2000 and "odd\ufffd\ufffd(" in r["file"], r' "$work/odd.json" ||
    fail "stats --json of a non-UTF-8 name: $(cat "$work/odd.json")"

# Same seed, same bytes.
"$tool" gen --rows 2000 --seed 7 -o "$work/again.tsv"
cmp -s "$work/synth.tsv" "$work/again.tsv" || fail "same seed wrote different files"

# The real sample (CSV with a header).
"$tool" stats "$data_dir/criteo_sample.csv" --json > "$work/sample.json"
[[ $(json_get "$work/sample.json" rows) == 120 ]] || fail "the sample is not 120 rows"
[[ $(json_get "$work/sample.json" positives) == 26 ]] || fail "the sample has not 26 positives"
"$tool" stats "$data_dir/criteo_sample.csv" > /dev/null || fail "text summary failed"

# A malformed line: counted by default, fatal with --strict.
head -c 200 "$work/synth.tsv" > "$work/bad.tsv"; echo >> "$work/bad.tsv"
head -n 3 "$work/synth.tsv" >> "$work/bad.tsv"
"$tool" stats "$work/bad.tsv" --json > "$work/bad.json" 2> /dev/null
[[ $(json_get "$work/bad.json" malformed) == 1 ]] || fail "malformed line not counted"
[[ $(json_get "$work/bad.json" rows) == 3 ]] || fail "good lines after a bad one lost"
rc=0; "$tool" stats "$work/bad.tsv" --strict > /dev/null 2>&1 || rc=$?
[[ $rc == 1 ]] || fail "--strict on a malformed line exited $rc, not 1"

# A file none of whose lines is a row: statistics of nothing are a failure.
printf 'not\na criteo file\n' > "$work/prose.txt"
rc=0; "$tool" stats "$work/prose.txt" > /dev/null 2> "$work/err" || rc=$?
[[ $rc == 1 ]] || fail "stats of a file with no row exited $rc, not 1"
grep -q "none of its 2 lines is a Criteo row" "$work/err" || fail "no row: $(cat "$work/err")"

# Exit codes.
"$tool" --help > /dev/null || fail "--help did not exit 0"
"$tool" gen --help > /dev/null || fail "gen --help did not exit 0"
expect_usage() {
    local rc=0
    "$tool" "$@" > /dev/null 2> "$work/err" || rc=$?
    [[ $rc == 2 ]] || fail "'$*' exited $rc, not 2"
}
expect_usage gen -o "$work/x.tsv"
expect_usage gen --rows 10
expect_usage gen --rows 10 --zipf 0 -o "$work/x.tsv"
expect_usage gen --rows 10 --tables 27 -o "$work/x.tsv"
expect_usage gen --rows 10 --positive-rate 1 -o "$work/x.tsv"
expect_usage gen --rows ten -o "$work/x.tsv"
expect_usage gen --rows 10 --bogus -o "$work/x.tsv"
expect_usage stats
expect_usage stats "$work/synth.tsv" --rows-per-table 0
expect_usage frobnicate
expect_usage gen --rows 10 --zipf 0 -o "$work/x.tsv"
grep -q -- "--zipf" "$work/err" || fail "the usage error does not name --zipf"
echo "test_data_cli: ok"
