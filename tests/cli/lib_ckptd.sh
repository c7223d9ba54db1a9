# SPDX-License-Identifier: Apache-2.0
# Sourced by the tests' shell scripts: real ckptd daemons on 127.0.0.1.
# Needs $ckptd (the binary) and $work (a scratch directory); defines
# start_daemon NAME, stop_daemon NAME, kill_daemons, and fills
# daemon_addr[NAME] with "127.0.0.1:PORT".

declare -A daemon_pid=() daemon_addr=()

# start_daemon NAME [LISTEN]: ckptd on a free port of 127.0.0.1 (or LISTEN,
# e.g. unix:/path) with its own data directory; waits (with a deadline) for
# the line that gives its address.
start_daemon() {
    local name=$1 listen=${2:-127.0.0.1:0} line fd
    local fifo="$work/$name.fifo"
    mkfifo "$fifo"
    "$ckptd" --listen "$listen" --data-dir "$work/$name.data" --gc-interval-s 0 > "$fifo" 2> "$work/$name.log" &
    daemon_pid[$name]=$!
    exec {fd}< "$fifo" # kept open: the daemon's stdout never sees a closed pipe
    read -r -t 60 line <&"$fd" || fail "ckptd $name printed no address: $(cat "$work/$name.log")"
    [[ $line == "ckptd listening on "* ]] || fail "ckptd $name printed '$line'"
    daemon_addr[$name]=${line#ckptd listening on }
}

# stop_daemon NAME: SIGTERM, and the daemon must exit 0 within 60 s (else
# its threads are printed, through gdb where installed, and it is killed).
stop_daemon() {
    local name=$1 rc=0 pid=${daemon_pid[$1]} i running=1
    kill -TERM "$pid"
    for ((i = 0; i < 600; i++)); do # a deadline, not synchronisation
        # gone, or a zombie (exited: only wait can tell its status)
        if ! kill -0 "$pid" 2> /dev/null ||
            [[ $(awk '{print $3}' "/proc/$pid/stat" 2> /dev/null) != [RSDT] ]]; then
            running=0
            break
        fi
        sleep 0.1
    done
    if ((running)); then
        echo "ckptd $name did not stop within 60 s of SIGTERM; its threads:" >&2
        timeout 60 gdb -batch -nx -p "$pid" -ex "thread apply all bt" >&2 2>&1 || true
        kill -KILL "$pid" 2> /dev/null || true
    fi
    wait "$pid" || rc=$?
    unset "daemon_pid[$name]"
    [[ $rc == 0 ]] || fail "ckptd $name exited $rc after SIGTERM: $(tail -5 "$work/$name.log")"
}

# kill_daemons: for an EXIT trap.
kill_daemons() {
    local pid
    for pid in "${daemon_pid[@]}"; do
        kill -KILL "$pid" 2> /dev/null || true
        wait "$pid" 2> /dev/null || true
    done
}
