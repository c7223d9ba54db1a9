#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The getting-started program (examples/quickstart) as built in the tree,
# linked to the shared client library: against a real ckptd over TCP and over
# a Unix socket, and against local:// (where libcpr loads libcpr-store.so.0
# from beside itself). Also: the docs/getting-started.md listing is the file.
# Usage: test_quickstart.sh QUICKSTART CKPTD SOURCE_DIR
set -euo pipefail

quickstart=$1
ckptd=$2
src=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/quickstart-test.XXXXXX")

fail() { echo "test_quickstart: $*" >&2; exit 1; }
source "$(dirname "$0")/lib_ckptd.sh"
trap 'kill_daemons; rm -rf "$work"' EXIT

rc=0
"$quickstart" > /dev/null 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "no target: exit $rc, want 2"

start_daemon a
out=$("$quickstart" "grpc://${daemon_addr[a]}") || fail "over gRPC: $out"
[[ $out == *"restored 10000 rows and the blob exactly, as of checkpoint 1"* ]] || fail "over gRPC: '$out'"
# A second run: checkpoint 1 exists, and the error says so.
rc=0
out=$("$quickstart" "grpc://${daemon_addr[a]}" 2>&1) || rc=$?
[[ $rc == 1 && $out == *CPR_ALREADY_EXISTS* ]] || fail "second run: exit $rc, '$out'"
stop_daemon a

start_daemon u "unix:$work/ckptd.sock"
out=$("$quickstart" "${daemon_addr[u]}") || fail "over ${daemon_addr[u]}: $out"
[[ $out == *"as of checkpoint 1"* ]] || fail "over a unix socket: '$out'"
stop_daemon u

out=$("$quickstart" "local://$work/local") || fail "local://: $out"
[[ $out == *"as of checkpoint 1"* ]] || fail "local://: '$out'"
# local:// with no store library to be found says what to do.
rc=0
out=$(CPR_STORE_LIBRARY=/nonexistent/libcpr-store.so.0 "$quickstart" "local://$work/l2" 2>&1) || rc=$?
[[ $rc == 1 && $out == *"install libcpr-store"* ]] || fail "no store library: exit $rc, '$out'"

# The listing in docs/getting-started.md is examples/quickstart/quickstart.c.
awk '/^```c quickstart.c$/{on=1; next} /^```$/{on=0} on' "$src/docs/getting-started.md" \
    > "$work/listed.c"
cmp -s "$work/listed.c" "$src/examples/quickstart/quickstart.c" ||
    fail "docs/getting-started.md does not list examples/quickstart/quickstart.c as it is"
echo "test_quickstart: ok"
