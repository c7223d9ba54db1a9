#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A small Ceph cluster for tests and benchmarks, from Debian's packages, in
# one directory, bound to 127.0.0.1: one monitor, N memstore OSDs (data in
# the OSDs' memory: it measures the code path, not a disk), auth none (or
# cephx), and a pool replicated N ways (at most 3) across them.
#
#   deploy/ceph/test-cluster.sh start DIR [--osds N] [--pool NAME] [--mgr] [--cephx]
#       prints DIR/ceph.conf once the pool takes writes; --mgr also starts a
#       manager (ceph-mgr), which pool usage and free space (ceph df) need;
#       --cephx turns authentication on, with every key in DIR
#       (DIR/ceph.client.admin.keyring: every right; ceph.conf names it)
#   deploy/ceph/test-cluster.sh stop DIR              stops every daemon of DIR
#   deploy/ceph/test-cluster.sh kill-osd DIR ID       SIGKILL one OSD
#   deploy/ceph/test-cluster.sh start-osd DIR ID      start it again (memstore: empty;
#                                                     the others heal it)
#   deploy/ceph/test-cluster.sh wait-ready DIR [POOL [S]]  until every OSD is up and
#                                                     POOL takes a write
#
# Exit 77 from start when the packages (ceph-mon, ceph-osd, ceph-common) are
# missing, so a test that needs the cluster can skip. Never for production:
# no disks, keys in a plain directory (or no authentication at all). deploy/ceph/README.md says how to point ckptd
# at a real cluster.
set -euo pipefail

usage() { sed -n '8,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 2 ]] || usage
cmd=$1 dir=$2
shift 2

ceph_() { timeout 60 ceph -c "$dir/ceph.conf" "$@"; }

# Ready: every OSD of the map up, and an object written to and read back from
# the pool (PG states need a ceph-mgr, which this cluster does without).
wait_ready() {
  local pool=$1 limit=${2:-60} t=0 want
  want=$(ls -d "$dir"/osd/*/ 2>/dev/null | wc -l)
  while :; do
    local s
    s=$(ceph_ osd stat 2>/dev/null || true)
    if [[ $s =~ ([0-9]+)\ osds:\ ([0-9]+)\ up ]] && ((BASH_REMATCH[2] == want)) &&
       timeout 10 rados -c "$dir/ceph.conf" -p "$pool" put .cpr-ready "$dir/ceph.conf" 2>/dev/null &&
       timeout 10 rados -c "$dir/ceph.conf" -p "$pool" stat .cpr-ready >/dev/null 2>&1; then
      return 0
    fi
    ((t++ < limit * 5)) || { echo "test-cluster: not ready after ${limit}s: $s" >&2; return 1; }
    sleep 0.2
  done
}

start_osd() {
  local id=$1
  ceph-osd -c "$dir/ceph.conf" -i "$id" --mkfs >"$dir/log/mkfs.osd.$id" 2>&1
  ceph-osd -c "$dir/ceph.conf" -i "$id" 2>>"$dir/log/stderr.osd.$id"
}

case $cmd in
start)
  osds=3 pool=cpr mgr=0 auth=none
  while [[ $# -gt 0 ]]; do
    case $1 in
      --osds) osds=$2; shift 2 ;;
      --pool) pool=$2; shift 2 ;;
      --mgr) mgr=1; shift ;;
      --cephx) auth=cephx; shift ;;
      *) usage ;;
    esac
  done
  for b in ceph-mon ceph-osd ceph monmaptool; do
    command -v "$b" >/dev/null || { echo "test-cluster: $b missing (deploy/install-deps.sh installs it)" >&2; exit 77; }
  done
  mkdir -p "$dir"/{mon,osd,run,log}
  dir=$(cd "$dir" && pwd)
  # A free port for the monitor: ask the kernel for one.
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  fsid=$(cat /proc/sys/kernel/random/uuid)
  size=$((osds < 3 ? osds : 3))
  # memstore page set: with memstore's other object kind (Debian's 16.2, the
  # default), an OSD's count of bytes used drifted below zero after runs of
  # cpr-bench that wrote and removed a few GB: the OSD then reported itself
  # full ("full status failsafe engaged ... now -2147483648% full"), the
  # pool was marked full and every write blocked, for good once the pool
  # was empty. Seen 8 times in about 20 runs of cpr-bench rpc; with page
  # sets, never in the runs after (docs/performance.md, 2026-11-28).
  cat >"$dir/ceph.conf" <<CONF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$port
public network = 127.0.0.0/8
auth cluster required = $auth
auth service required = $auth
auth client required = $auth
keyring = $dir/\$cluster.\$name.keyring
auth allow insecure global id reclaim = false
ms bind ipv6 = false
run dir = $dir/run
pid file = $dir/run/\$name.pid
log file = $dir/log/\$name.log
mon data = $dir/mon/\$name
osd data = $dir/osd/\$id
osd objectstore = memstore
memstore device bytes = 2147483648
memstore page set = true
osd pool default size = $size
osd pool default min size = $(((size + 1) / 2))
osd crush chooseleaf type = 0
osd memory target = 939524096
mon allow pool delete = true
mon allow pool size one = true
mon warn on pool no redundancy = false
mon osd down out interval = 0
osd op num shards = 1
osd op num threads per shard = 2
# A killed OSD is marked down within seconds, so that writes go on without it.
osd heartbeat interval = 1
osd heartbeat grace = 3
mon osd min down reporters = 1
[mon]
admin socket = $dir/run/\$name.asok
[osd]
admin socket = $dir/run/\$name.asok
CONF
  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" "$dir/monmap" >/dev/null
  mkfs_keys=()
  if [[ $auth == cephx ]]; then
    # The monitors' key, and the admin's (every right), which the monitor
    # starts knowing; OSDs get theirs from the admin below.
    ceph-authtool --create-keyring "$dir/ceph.mon.a.keyring" --gen-key -n mon. \
      --cap mon 'allow *' >/dev/null
    ceph-authtool --create-keyring "$dir/ceph.client.admin.keyring" --gen-key -n client.admin \
      --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
    ceph-authtool "$dir/ceph.mon.a.keyring" --import-keyring "$dir/ceph.client.admin.keyring" \
      >/dev/null
    chmod 600 "$dir"/*.keyring
    mkfs_keys=(--keyring "$dir/ceph.mon.a.keyring")
  fi
  ceph-mon -c "$dir/ceph.conf" -i a --mkfs --monmap "$dir/monmap" ${mkfs_keys[@]+"${mkfs_keys[@]}"} \
    >"$dir/log/mkfs.mon" 2>&1
  ceph-mon -c "$dir/ceph.conf" -i a 2>>"$dir/log/stderr.mon"
  for ((i = 0; i < osds; i++)); do
    id=$(ceph_ osd create)
    mkdir -p "$dir/osd/$id"
    if [[ $auth == cephx ]]; then
      ceph_ auth get-or-create "osd.$id" mon 'allow profile osd' osd 'allow *' \
        mgr 'allow profile osd' -o "$dir/ceph.osd.$id.keyring" >/dev/null
      chmod 600 "$dir/ceph.osd.$id.keyring"
    fi
    start_osd "$id"
  done
  # The pool's set-up, its output in log/setup (set -e would otherwise end
  # the script without a word).
  setup() { "$@" >>"$dir/log/setup" 2>&1 || { echo "test-cluster: '$*' failed: see $dir/log/setup" >&2; exit 1; }; }
  setup ceph_ osd pool create "$pool" 32 32
  # One OSD, one replica: Ceph asks to be told twice (and the conf allows it).
  setup ceph_ osd pool set "$pool" size "$size" $( ((size == 1)) && echo --yes-i-really-mean-it)
  setup ceph_ osd pool application enable "$pool" cpr
  wait_ready "$pool" 60
  if ((mgr)); then
    command -v ceph-mgr >/dev/null || { echo "test-cluster: ceph-mgr missing" >&2; exit 77; }
    mkdir -p "$dir/mgr/x"
    if [[ $auth == cephx ]]; then
      ceph_ auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
        -o "$dir/ceph.mgr.x.keyring" >/dev/null
      chmod 600 "$dir/ceph.mgr.x.keyring"
    fi
    ceph-mgr -c "$dir/ceph.conf" -i x --mgr-data "$dir/mgr/x" 2>>"$dir/log/stderr.mgr"
  fi
  echo "$dir/ceph.conf"
  ;;
stop)
  [[ -d $dir ]] && dir=$(cd "$dir" && pwd) # as start recorded it
  # Only this cluster's daemons: a pid file left by a run that never stopped
  # (Ctrl-C, a reboot) may name another process by now.
  ours() {
    local cmd
    cmd=$(tr '\0' ' ' 2>/dev/null < "/proc/$1/cmdline") || return 1
    [[ $cmd == ceph-* && $cmd == *" $dir/ceph.conf "* ]]
  }
  for pid in "$dir"/run/*.pid; do
    p=$(cat "$pid" 2>/dev/null) || continue
    if ours "$p"; then kill "$p" 2>/dev/null || true; fi
  done
  for pid in "$dir"/run/*.pid; do
    p=$(cat "$pid" 2>/dev/null) || continue # gone meanwhile: go on with the others
    for _ in $(seq 100); do ours "$p" || break; sleep 0.1; done
    if ours "$p"; then kill -9 "$p" 2>/dev/null || true; fi
    rm -f "$pid"
  done
  ;;
kill-osd)
  p=$(cat "$dir/run/osd.$1.pid")
  kill -9 "$p"
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  rm -f "$dir/run/osd.$1.pid"
  ;;
start-osd)
  # memstore lost its data with the process: a fresh OSD with the same id
  # (the monitor knows its fsid from before), filled again by recovery.
  ceph-osd -c "$dir/ceph.conf" -i "$1" 2>>"$dir/log/stderr.osd.$1"
  ;;
wait-ready)
  wait_ready "${1:-cpr}" "${2:-60}"
  ;;
*) usage ;;
esac
