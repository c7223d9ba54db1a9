#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ckptd's own command line: a --listen that is not HOST:PORT (port 0-65535,
# IPv6 in brackets, no scheme) or unix:/ABSOLUTE/PATH exits 2 naming what to
# fix, before anything is opened; and a unix socket is never taken from a
# live daemon: a second ckptd on the same path exits 1 (it cannot take the
# first one's PATH.lock) before it serves anything, and the first keeps
# serving it; a socket another process serves is refused; a socket left by a
# killed daemon is reused; a path that is a symbolic link or not a socket,
# or whose directory is missing, is refused.
# Usage: test_ckptd_cli.sh CKPTD CPRCTL
set -euo pipefail

ckptd=$1
cprctl=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/ckptd-cli.XXXXXX")

fail() { echo "test_ckptd_cli: $*" >&2; exit 1; }
source "$(dirname "$0")/lib_ckptd.sh"
other_pid=
cleanup() {
    kill_daemons
    [[ -z $other_pid ]] || kill "$other_pid" 2> /dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# expect_exit RC PATTERN ARGS...: ckptd ARGS exits RC, stderr matching PATTERN.
expect_exit() {
    local want=$1 pattern=$2 rc=0
    shift 2
    "$ckptd" "$@" > "$work/out" 2> "$work/err" || rc=$?
    [[ $rc == "$want" ]] || fail "'ckptd $*' exited $rc, not $want: $(cat "$work/err")"
    grep -q -e "$pattern" "$work/err" || fail "'ckptd $*': no '$pattern' in: $(cat "$work/err")"
    ! grep -q -e 'Sanitizer' -e 'runtime error:' "$work/err" || fail "'ckptd $*': $(cat "$work/err")"
}

d=$work/usage.data
expect_exit 2 "port '99999'; a port is a number from 0 to 65535" --data-dir "$d" --listen 127.0.0.1:99999
expect_exit 2 "has no port" --data-dir "$d" --listen 127.0.0.1
expect_exit 2 "port 'abc'" --data-dir "$d" --listen 127.0.0.1:abc
expect_exit 2 "has no port" --data-dir "$d" --listen nonsense
expect_exit 2 "without a scheme" --data-dir "$d" --listen grpc://127.0.0.1:0
expect_exit 2 "has no host" --data-dir "$d" --listen :7717
expect_exit 2 "in brackets" --data-dir "$d" --listen ::1:7717
expect_exit 2 "unix:/ABSOLUTE/PATH" --data-dir "$d" --listen unix:relative.sock
expect_exit 2 "not a gRPC address form" --data-dir "$d" --listen ipv4:127.0.0.1:0
expect_exit 2 "not a list" --data-dir "$d" --listen 127.0.0.1:1,127.0.0.1:2
[[ ! -e $d ]] || fail "a refused command line created $d"

sock=$work/s.sock
start_daemon first "unix:$sock"
[[ ${daemon_addr[first]} == "unix:$sock" ]] || fail "first daemon on ${daemon_addr[first]}"
"$cprctl" --server "unix:$sock" list > /dev/null || fail "cprctl could not reach the first daemon"
expect_exit 1 "another ckptd holds $sock.lock" --data-dir "$work/second.data" --listen "unix:$sock"
[[ -S $sock ]] || fail "the refused second daemon removed the socket"
"$cprctl" --server "unix:$sock" list > /dev/null || fail "the first daemon lost its socket"
stop_daemon first

# A killed daemon leaves its socket file: the next one may take it.
start_daemon killed "unix:$sock"
kill -KILL "${daemon_pid[killed]}"
wait "${daemon_pid[killed]}" 2> /dev/null || true
unset "daemon_pid[killed]"
[[ -S $sock ]] || fail "no socket file left by the killed daemon"
start_daemon after "unix:$sock"
# A socket inside --data-dir, which the daemon creates.
start_daemon inside "unix:$work/inside.data/s.sock"
stop_daemon inside
"$cprctl" --server "unix:$sock" list > /dev/null || fail "the daemon on a stale socket serves nothing"
stop_daemon after

# A socket some other process serves (no lock of ours): refused, left alone.
other=$work/other.sock
python3 -c '
import signal, socket, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1)
print("ready", flush=True); signal.pause()' "$other" > "$work/other.out" < /dev/null &
other_pid=$!
for ((i = 0; i < 100; i++)); do [[ -s $work/other.out ]] && break; sleep 0.1; done # a deadline
[[ -S $other ]] || fail "the other process did not listen on $other"
expect_exit 1 "another process is listening there" --data-dir "$work/o.data" --listen "unix:$other"
[[ -S $other ]] || fail "ckptd removed another process's socket"
kill "$other_pid"
wait "$other_pid" 2> /dev/null || true
other_pid=

ln -s "$sock" "$work/link.sock"
expect_exit 1 "is a symbolic link" --data-dir "$work/l.data" --listen "unix:$work/link.sock"
: > "$work/plain"
expect_exit 1 "exists and is not a socket" --data-dir "$work/p.data" --listen "unix:$work/plain"
[[ -f $work/plain ]] || fail "ckptd removed a file that is not a socket"
expect_exit 1 "missing: No such file or directory (create it" --data-dir "$work/m.data" \
    --listen "unix:$work/missing/s.sock"
echo "test_ckptd_cli: ok"
