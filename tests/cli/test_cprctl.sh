#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cprctl end to end. cprctl_fixture writes a job whose every value is known
# (see tests/cli/cprctl_fixture.c); then every command runs against it, in
# text and --json: list (jobs, parts, latest cut), inspect (a cut and a
# checkpoint that is not one), stats, verify, export (csv compared line by
# line with what the fixture computes, f32 compared bit by bit with the csv,
# the atomic replace of FILE), gc --keep 1 (older parts gone, retained state
# still exact), and the exit codes (0, 1 on failures, 2 on usage errors).
# Against: one real ckptd (given as a bare HOST:PORT), local:///path (plus a
# damaged blob that verify must report), and a job spread over two daemons.
# Each daemon is stopped with SIGTERM and must exit 0.
# Usage: test_cprctl.sh CPRCTL CKPTD CPRCTL_FIXTURE
set -euo pipefail

tool=$1
ckptd=$2
fixture=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/cprctl-test.XXXXXX")
unset CPR_SERVER

fail() { echo "test_cprctl: $*" >&2; exit 1; }
source "$(dirname "$0")/lib_ckptd.sh"

cleanup() {
    kill_daemons
    rm -rf "$work"
}
trap cleanup EXIT

# ---- running cprctl ---------------------------------------------------------------

# expect_rc RC ARGS...: run cprctl ARGS (stdout in $work/out, stderr in
# $work/err) and check its exit status. Under the sanitizers a leak also
# exits 1, so their reports are looked for too.
expect_rc() {
    local want=$1 rc=0
    shift
    "$tool" "$@" > "$work/out" 2> "$work/err" || rc=$?
    [[ $rc == "$want" ]] || fail "'cprctl $*' exited $rc, not $want: $(cat "$work/err")"
    ! grep -q -e 'Sanitizer' -e 'runtime error:' "$work/err" ||
        fail "'cprctl $*': $(cat "$work/err")"
}

# ok ARGS...: cprctl --server $server ARGS must exit 0.
ok() { expect_rc 0 --server "$server" "$@"; }

# json_true EXPR: the Python expression, over the JSON object d read from
# $work/out (which must hold exactly one line), is true.
json_true() {
    python3 - "$work/out" "$1" << 'PY' || fail "not true: $1 in $(head -c 2000 "$work/out")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, "expected one JSON line, got %d" % len(lines)
d = json.loads(lines[0])
assert eval(sys.argv[2]), sys.argv[2]
PY
}

# expect_file_from_fixture FILE TABLE AS_OF: FILE is the fixture's csv.
expect_csv() {
    "$fixture" expect "$2" "$3" > "$work/expected.csv"
    cmp -s "$1" "$work/expected.csv" ||
        fail "export of table $2 as of $3 differs: $(diff "$1" "$work/expected.csv" | head -5)"
}

# same_csv_and_f32 CSV F32 DIM STATE_DIM: the binary dump holds bit for bit
# the floats of the csv (so %.9g round-trips), rows in the same order.
same_csv_and_f32() {
    python3 - "$@" << 'PY' || fail "f32 dump $2 does not match $1"
import struct, sys
csv_path, f32_path, dim, sdim = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lines = open(csv_path).read().splitlines()
header = ["row"] + ["v%d" % i for i in range(dim)] + ["s%d" % i for i in range(sdim)]
assert lines[0] == ",".join(header), lines[0]
data = open(f32_path, "rb").read()
rec = 8 + 4 * (dim + sdim)
assert len(data) == rec * (len(lines) - 1), (len(data), rec, len(lines))
for k, line in enumerate(lines[1:]):
    fields = line.split(",")
    want = struct.pack("<Q", int(fields[0])) + b"".join(
        struct.pack("<f", float(x)) for x in fields[1:])
    assert data[k * rec:(k + 1) * rec] == want, (k, line)
PY
}

# ---- the checks, for one store ---------------------------------------------------------

check_list() {
    ok list
    [[ $(cat "$work/out") == $'demo\nother' ]] || fail "list: $(cat "$work/out")"
    ok list --json
    json_true 'd == {"command": "list", "jobs": ["demo", "other"]}'
    ok list demo --json
    json_true '[(p["checkpoint"], p["shard"]) for p in d["parts"]] == [(1,0),(1,1),(2,0),(2,1),(3,0)]'
    json_true '[p["kind"] for p in d["parts"]] == ["FULL","FULL","DELTA","DELTA","FULL"]'
    json_true '[p["rows"] for p in d["parts"]] == [750, 750, 100, 100, 750]'
    json_true 'all(p["committed"] and p["consistent"] and p["num_shards"] == 2 for p in d["parts"])'
    json_true '[p["base"] for p in d["parts"]] == [0, 0, 1, 1, 0] and d["latest_cut"] == 2'
    ok list demo
    grep -q '^CHECKPOINT  SHARD  KIND ' "$work/out" || fail "list demo: no header"
    grep -q '^2  *1/2  *DELTA  *200  *100 ' "$work/out" || fail "list demo: no DELTA row"
    grep -q '^latest consistent cut: 2$' "$work/out" || fail "list demo: no latest cut"
    ok list other --json
    json_true 'len(d["parts"]) == 8 and d["latest_cut"] == 1'
    expect_rc 1 --server "$server" list nosuch
    grep -q 'CPR_NOT_FOUND' "$work/err" || fail "list nosuch: $(cat "$work/err")"
    expect_rc 1 --server "$server" list nosuch --json
    json_true 'd["error"]["status"] == "CPR_NOT_FOUND" and "nosuch" in d["error"]["message"]'
}

check_inspect() {
    ok inspect demo 2 --json
    json_true 'd["consistent_cut"] and d["num_shards"] == 2 and d["missing_shards"] == []'
    json_true 'd["rows"] == 200 and len(d["parts"]) == 2 and d["inconsistent_count"] == 0'
    json_true 'all(p["codecs"] == ["f32"] for p in d["parts"])'
    ok inspect demo 3 --json
    json_true 'not d["consistent_cut"] and d["missing_shards"] == [1] and d["missing_count"] == 1'
    json_true 'd["rows"] == 750 and [p["shard"] for p in d["parts"]] == [0]'
    ok inspect demo 3
    grep -q '^consistent cut: *no$' "$work/out" || fail "inspect 3: $(cat "$work/out")"
    grep -q '^missing shards: *1 (1 of 2)$' "$work/out" || fail "inspect 3: $(cat "$work/out")"
    ok inspect demo 1
    grep -q '^consistent cut: *yes$' "$work/out" || fail "inspect 1: $(cat "$work/out")"
    grep -q '^SHARD  KIND .* BYTES  CODEC ' "$work/out" || fail "inspect 1: no CODEC column"
    grep -q ' f32  *yes ' "$work/out" || fail "inspect 1: no f32 part"
    expect_rc 1 --server "$server" inspect demo 99
    grep -q 'no part at checkpoint 99' "$work/err" || fail "inspect 99: $(cat "$work/err")"
    expect_rc 1 --server "$server" inspect demo 99 --json
    json_true 'd["error"]["status"] == "CPR_NOT_FOUND"'
}

# check_stats KIND: KIND daemon (counters since the daemon started) or local.
check_stats() {
    ok stats --json
    json_true 'd["jobs"] == 2 and d["parts_committed"] == 13 and d["parts_open"] == 0'
    json_true 'd["store_bytes"] > 0 and isinstance(d["errors"], dict)'
    json_true 'all(k.startswith("CPR_") and v > 0 for k, v in d["errors"].items())'
    if [[ $1 == daemon ]]; then
        json_true 'd["rows_in"] == 2466 and d["bytes_in"] > 0'
    fi
    ok stats
    grep -q '^parts_committed  *13$' "$work/out" || fail "stats: $(cat "$work/out")"
}

check_verify() {
    ok verify --json
    json_true 'd["intact"] and d["problem_count"] == 0 and d["problems"] == []'
    json_true 'd["rows_checked"] == 2466 and d["blobs_checked"] == 13 and "job" not in d'
    ok verify demo
    grep -q '^result: intact$' "$work/out" || fail "verify demo: $(cat "$work/out")"
    grep -q '^rows checked  *2450$' "$work/out" || fail "verify demo: $(cat "$work/out")"
    expect_rc 1 --server "$server" verify nosuch
}

check_export() {
    local f="$work/t1.csv"
    ok export demo 1 "$f" --json
    expect_csv "$f" 1 0
    json_true 'd["rows"] == 1000 and d["as_of"] == 3 and d["dim"] == 4 and d["state_dim"] == 2'
    json_true 'd["bytes"] == '"$(stat -c %s "$f")"' and d["format"] == "csv"'
    ls "$f".tmp* > /dev/null 2>&1 && fail "export left a temporary file"
    ok export demo 1 "$work/t1.f32" --format f32 --quiet
    grep -q '1000 rows' "$work/err" || fail "export summary: $(cat "$work/err")"
    same_csv_and_f32 "$f" "$work/t1.f32" 4 2
    ok export demo 2 "$work/t2.csv" --consistent --format=csv
    expect_csv "$work/t2.csv" 2 2
    grep -q 'as of checkpoint 2' "$work/err" || fail "export summary: $(cat "$work/err")"
    ok export demo 2 "$work/t2.f32" --consistent --format f32 --json
    json_true 'd["rows"] == 500 and d["bytes"] == 500 * (8 + 12) and d["state_dim"] == 0'
    same_csv_and_f32 "$work/t2.csv" "$work/t2.f32" 3 0
    ok export demo 1 - --as-of 1
    expect_csv "$work/out" 1 1
    # A failed export leaves FILE as it was and no FILE.tmp.
    echo "old contents" > "$work/keep.csv"
    expect_rc 1 --server "$server" export demo 9 "$work/keep.csv"
    grep -q 'CPR_NOT_FOUND' "$work/err" || fail "export of table 9: $(cat "$work/err")"
    [[ $(cat "$work/keep.csv") == "old contents" ]] || fail "a failed export touched FILE"
    ls "$work"/keep.csv.tmp* > /dev/null 2>&1 && fail "a failed export left a temporary file"
    expect_rc 1 --server "$server" export demo 1 "$work/no/such/dir/t.csv"
    grep -q 'CPR_IO' "$work/err" || fail "export into a missing directory: $(cat "$work/err")"
    # Someone else's FILE.tmp is never touched; through a link, its file is
    # replaced and the link stays; a FIFO is written in place and stays.
    rm -f "$work/t3.csv" "$work/t3-link.csv" "$work/fifo" # check_export runs per target
    echo "notes" > "$work/t3.csv.tmp"
    ln -s t3.csv "$work/t3-link.csv"
    ok export demo 1 "$work/t3-link.csv"
    [[ -L $work/t3-link.csv && $(cat "$work/t3.csv.tmp") == notes ]] ||
        fail "export through a link replaced the link or touched FILE.tmp"
    cmp -s "$work/t3.csv" "$f" || fail "export through a link wrote another table"
    mkfifo "$work/fifo"
    cat "$work/fifo" > "$work/from-fifo.csv" &
    local reader=$!
    ok export demo 1 "$work/fifo"
    wait "$reader"
    [[ -p $work/fifo ]] || fail "export replaced a FIFO"
    cmp -s "$work/from-fifo.csv" "$f" || fail "export into a FIFO wrote other rows"
}

# abort: an id with no open part is OK (nothing left), a committed part is
# never touched (exit 1, FAILED_PRECONDITION), and the list is unchanged.
check_abort() {
    ok abort demo 0 99
    grep -q 'not open any more' "$work/out" || fail "abort: $(cat "$work/out")"
    ok abort demo 1 99 --json
    json_true 'd["aborted"] and d["shard"] == 1 and d["checkpoint"] == 99'
    expect_rc 1 --server "$server" abort demo 0 1
    grep -q 'CPR_FAILED_PRECONDITION' "$work/err" || fail "abort of a committed part: $(cat "$work/err")"
    expect_rc 2 --server "$server" abort demo 0
    expect_rc 2 --server "$server" abort demo x 1
    expect_rc 2 --server "$server" abort demo 0 0
    ok list demo --json
    json_true 'len(d["parts"]) == 5'
}

# where: the part's segment file, as the node that has it names it.
check_where() {
    ok where demo 0 1
    local line path
    line=$(head -n 1 "$work/out")
    [[ $line =~ ^.+:\ file:(/[^ ]+/j_demo/0-1\.[0-9a-f]{16}\.seg)\ \(([0-9]+)\ bytes\) ]] ||
        fail "where: $(cat "$work/out")"
    path=${BASH_REMATCH[1]}
    [[ $(stat -c %s "$path") == "${BASH_REMATCH[2]}" ]] || fail "where: $path is not that size"
    ok where demo 0 1 --json
    json_true 'd["job"] == "demo" and d["shard"] == 0 and d["checkpoint"] == 1 and len(d["places"]) == 1 and d["places"][0]["location"].startswith("file:/")'
    expect_rc 1 --server "$server" where demo 0 77
    grep -q 'CPR_NOT_FOUND' "$work/err" || fail "where of no part: $(cat "$work/err")"
    expect_rc 2 --server "$server" where demo x 1
    expect_rc 2 --server "$server" where demo 0
}

check_gc() {
    ok gc demo --keep 1 --json
    json_true 'd["floor"] == 2 and d["parts_removed"] == 2 and d["keep"] == 1'
    # The cut at 2 is a DELTA: its FULL's rows stay, folded (docs/store.md),
    # so this small store need not shrink; the versions nobody needs go.
    json_true 'd["bytes_before"] > 0 and d["bytes_after"] > 0 and d["versions_removed"] > 0 and d["job"] == "demo"'
    ok list demo --json
    json_true '[p["checkpoint"] for p in d["parts"]] == [2, 2, 3] and d["latest_cut"] == 2'
    ok export demo 1 "$work/after-gc.csv" --consistent
    expect_csv "$work/after-gc.csv" 1 2
    ok export demo 1 "$work/after-gc.csv"
    expect_csv "$work/after-gc.csv" 1 0
    expect_rc 1 --server "$server" export demo 1 "$work/gone.csv" --as-of 1
    grep -q 'CPR_FAILED_PRECONDITION' "$work/err" || fail "export below the floor: $(cat "$work/err")"
    [[ ! -e $work/gone.csv && ! -e $work/gone.csv.tmp ]] || fail "failed export left a file"
    ok gc
    grep -q '^parts removed  *0$' "$work/out" || fail "second gc: $(cat "$work/out")"
    ok verify
}

# The fixture recorded demo's FULL resume plan (generation 1, cut 2, step 200);
# other has no record.
check_recovery() {
    # Bytes that are no plan are shown, their control characters escaped.
    expect_rc 1 --server "$server" recovery junk
    grep -q 'x1b\[31mred\\x07 not a plan' "$work/err" || fail "recovery junk: $(cat "$work/err")"
    if LC_ALL=C grep -q $'\x1b\|\x07' "$work/err"; then fail "raw control bytes reached stderr"; fi
    ok recovery demo
    grep -q '^generation  *1$' "$work/out" || fail "recovery: $(cat "$work/out")"
    grep -q '^action  *full$' "$work/out" || fail "recovery action: $(cat "$work/out")"
    grep -q '^cut  *2$' "$work/out" || fail "recovery cut: $(cat "$work/out")"
    grep -q '^rewind step  *200$' "$work/out" || fail "recovery step: $(cat "$work/out")"
    grep -Eq '^1  +store  +2  +DELTA  +200  +blob of shard 0 at 2$' "$work/out" ||
        fail "recovery shards: $(cat "$work/out")"
    grep -q '^problems  *none$' "$work/out" || fail "recovery problems: $(cat "$work/out")"
    grep -q '^reason .*every shard restores as of consistent cut 2, rewinding to step 200$' \
        "$work/out" || fail "recovery reason: $(cat "$work/out")"
    ok recovery demo --json
    json_true 'd["generation"] == 1 and d["plan"]["action"] == "full" and d["plan"]["cut"] == 2 and len(d["plan"]["shards"]) == 2'
    ok recovery other
    grep -q '^generation  *0$' "$work/out" || fail "recovery of other: $(cat "$work/out")"
    ok recovery other --json
    json_true 'd["generation"] == 0 and d["plan"] is None'
}

# Checkpoint ids past 2^53 come out exact in --json (last: job "big" is
# written here, after the checks that count jobs).
check_big_ids() {
    "$fixture" big "$1" || fail "the fixture could not write job big to $1"
    ok list big --json
    json_true '[p["checkpoint"] for p in d["parts"]] == [2**53 + 1, 2**64 - 1]'
    ok inspect big 18446744073709551615 --json
    json_true 'd["checkpoint"] == 2**64 - 1'
}

# check_store WRITE_TARGET SERVER KIND: write the fixture's data through
# WRITE_TARGET, then run every check with --server SERVER.
check_store() {
    "$fixture" write "$1" || fail "the fixture could not write to $1"
    server=$2
    check_list
    check_inspect
    check_stats "$3"
    check_verify
    check_export
    check_recovery
    check_abort
    check_where
    check_gc
    check_big_ids "$1"
}

# ---- usage ------------------------------------------------------------------------------

check_usage() {
    local s=(--server "127.0.0.1:1")
    expect_rc 0 --help
    grep -q 'export JOB TABLE FILE' "$work/out" || fail "--help does not show export"
    expect_rc 0 export --help
    grep -q 'uint64 row' "$work/out" || fail "export --help does not document f32"
    expect_rc 0 -h list
    expect_rc 2
    expect_rc 2 "${s[@]}" frobnicate
    grep -q "frobnicate" "$work/err" || fail "no name of the unknown command"
    expect_rc 2 "${s[@]}" list --bogus
    grep -q -- "--bogus" "$work/err" || fail "no name of the unknown option"
    expect_rc 2 "${s[@]}" list demo other
    expect_rc 2 "${s[@]}" list 'bad/name'
    expect_rc 2 "${s[@]}" --timeout 0x10 list
    expect_rc 2 "${s[@]}" --timeout ' 1' list
    for port in 0 99999 abc -5 12x; do
        expect_rc 2 --server "127.0.0.1:$port" list
        grep -q "port" "$work/err" || fail "a bad port $port: $(cat "$work/err")"
    done
    # A local:// target without a store: refused, nothing created there.
    expect_rc 1 --server "local://$work/no-store-here" verify
    grep -q 'CPR_NOT_FOUND' "$work/err" || fail "verify of no store: $(cat "$work/err")"
    [[ ! -e $work/no-store-here ]] || fail "cprctl created a store at a mistyped path"
    expect_rc 2 --server "local://relative-store" verify # the library's rule: absolute
    grep -q 'absolute' "$work/err" || fail "a relative local:// path: $(cat "$work/err")"
    expect_rc 2 "${s[@]}" inspect demo
    expect_rc 2 "${s[@]}" inspect demo abc
    expect_rc 2 "${s[@]}" inspect demo 0 # checkpoint ids start at 1
    grep -q "CKPT" "$work/err" || fail "the usage error does not name CKPT"
    expect_rc 2 "${s[@]}" inspect demo -1 # a bad number, not an unknown option
    grep -q "CKPT" "$work/err" || fail "the usage error does not name CKPT"
    expect_rc 2 "${s[@]}" recovery
    expect_rc 2 "${s[@]}" recovery demo other
    expect_rc 2 "${s[@]}" export demo x "$work/x"
    grep -q "TABLE" "$work/err" || fail "the usage error does not name TABLE"
    expect_rc 2 "${s[@]}" export demo 1
    expect_rc 2 "${s[@]}" export demo 1 "$work/x" --as-of 1 --consistent
    expect_rc 2 "${s[@]}" export demo 1 "$work/x" --as-of 0
    expect_rc 2 "${s[@]}" export demo 1 "$work/x" --format xml
    expect_rc 2 "${s[@]}" export demo 1 - --json
    expect_rc 2 "${s[@]}" gc --keep 0
    expect_rc 2 "${s[@]}" gc --keep x
    grep -q -- "--keep" "$work/err" || fail "the usage error does not name --keep"
    expect_rc 2 "${s[@]}" gc --keep
    expect_rc 2 "${s[@]}" list --keep 1
    expect_rc 2 "${s[@]}" stats extra
    expect_rc 2 "${s[@]}" --timeout 0 stats
    expect_rc 2 list
    grep -q "CPR_SERVER" "$work/err" || fail "no hint at CPR_SERVER"
    expect_rc 2 --server "" list
    expect_rc 2 --server "grpc://" list
    [[ ! -e $work/x && ! -e $work/x.tmp ]] || fail "a usage error created a file"
}

# ---- main -----------------------------------------------------------------------------

check_usage

# One daemon, named by a bare HOST:PORT (and once through CPR_SERVER).
start_daemon one
check_store "grpc://${daemon_addr[one]}" "${daemon_addr[one]}" daemon
CPR_SERVER="grpc://${daemon_addr[one]}" "$tool" list > "$work/out" || fail "CPR_SERVER ignored"
[[ $(cat "$work/out") == $'big\ndemo\nother' ]] || fail "list via CPR_SERVER: $(cat "$work/out")"
addr_one=${daemon_addr[one]}
stop_daemon one
expect_rc 1 --server "$addr_one" --timeout 5 list
grep -q 'CPR_UNAVAILABLE' "$work/err" || fail "a stopped daemon: $(cat "$work/err")"

# The store in-process; then a damaged blob, which verify must report.
check_store "local://$work/local" "local://$work/local" local
blob=$(find "$work/local/blobs" -path '*j_other*' -name b_dense | head -1)
[[ -n $blob ]] || fail "no blob file of job other under $work/local/blobs"
printf '\xff' | dd of="$blob" bs=1 seek=10 conv=notrunc status=none
server="local://$work/local"
expect_rc 1 --server "$server" verify other
grep -q '^problem: ' "$work/out" || fail "verify printed no problem: $(cat "$work/out")"
grep -q 'CPR_CORRUPT' "$work/err" || fail "verify: $(cat "$work/err")"
expect_rc 1 --server "$server" verify --json
json_true 'not d["intact"] and d["problem_count"] >= 1 and len(d["problems"]) >= 1'
json_true 'all(p["what"] and p["where"] for p in d["problems"])'
ok verify demo

# Two daemons: jobs listed once each, parts merged, the cut and the export
# computed over both.
start_daemon two_a
start_daemon two_b
two="${daemon_addr[two_a]},${daemon_addr[two_b]}"
"$fixture" write "grpc://$two" || fail "the fixture could not write to grpc://$two"
server=$two
check_list
ok list other --json
json_true 'sorted(p["shard"] for p in d["parts"]) == list(range(8))'
ok inspect demo 3 --json
json_true 'not d["consistent_cut"] and d["missing_shards"] == [1]'
ok export demo 1 "$work/two.csv" --consistent
"$fixture" expect 1 2 > "$work/expected.csv"
cmp -s <(sort "$work/two.csv") <(sort "$work/expected.csv") || fail "two-node export differs"
ok verify --json
json_true 'd["intact"] and d["rows_checked"] == 2466 and d["blobs_checked"] == 13'
ok gc demo --keep 1 --json
json_true 'd["floor"] == 2 and d["parts_removed"] == 2'
stop_daemon two_a
stop_daemon two_b
echo "test_cprctl: ok"
