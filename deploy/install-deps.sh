#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install the Debian 12 packages CPR needs to build, test and run.
# Idempotent and non-interactive: installs only what is missing, and runs
# `apt-get update` once, only when something is missing. Usage:
#   deploy/install-deps.sh           install what is missing
#   deploy/install-deps.sh --check   list what is missing; exit 1 if anything
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config   # toolchain
  librocksdb-dev                     # store: rows and metadata (C API)
  liburing-dev                       # store: blob I/O
  librados-dev                       # store: segments and catalog in a Ceph pool (ckptd/store/rados.c)
  ceph-mon ceph-osd ceph-common ceph-mgr # tests: a small Ceph cluster (deploy/ceph/test-cluster.sh)
  libisal-dev                        # CRC32C (ISA-L crc32_iscsi)
  libfp16-dev                        # row codecs: portable IEEE half conversion
  libcjson-dev                       # --json output of the tools
  libcmocka-dev                      # unit-test harness
  protobuf-c-compiler libprotobuf-c-dev  # ckptd wire contract (proto/)
  libgrpc-dev                        # ckptd and the client: gRPC C core
  libmicrohttpd-dev                  # ckptd --metrics-listen: the Prometheus endpoint (ckptd/metrics.c)
  prometheus                         # tests: its promtool checks ckptd's exposition (test_metrics);
                                     # (on a systemd host the package also enables a server on :9090)
  python3-grpcio python3-grpc-tools  # test_python_client: the wire contract from Python
  python3-dev                        # the cpr Python package (python/), for /usr/bin/python3
  python3-pip python3-setuptools python3-wheel  # pip install ./python, offline
  python3-numpy python3-pytest       # its tests
  python3-yaml                       # test_deploy: parses deploy/k8s/ckptd.yaml
  python3-torch                      # cpr.torch and examples/torch_dlrm
  gnuplot-nox                        # cpr-analyze --plot-dir (run as a program; optional at runtime)
  openssl                            # tests: certificates for TLS and mutual TLS, made at test time
  gdb                                # tests: a hanging test prints its threads (tests/util/watchdog.c)
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [[ ${1:-} == --check ]]; then
  if ((${#missing[@]})); then echo "missing: ${missing[*]}"; exit 1; fi
  echo "all dependencies installed"; exit 0
fi

if ((${#missing[@]} == 0)); then
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
SUDO=()
if [[ $(id -u) != 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=(sudo env DEBIAN_FRONTEND=noninteractive) # sudo resets the environment
fi
echo "install-deps: installing ${missing[*]}"
# A fresh VM's apt-daily may hold apt's locks for a while: wait for them.
LOCK=(-o DPkg::Lock::Timeout=600)
for try in 1 2 3 4 5 6 7 8 9 10; do
  "${SUDO[@]}" apt-get "${LOCK[@]}" update -q && break
  [[ $try == 10 ]] && { echo "install-deps: apt-get update kept failing" >&2; exit 1; }
  echo "install-deps: apt-get update failed (another apt holding its lists?); again in 30 s" >&2
  sleep 30
done
"${SUDO[@]}" apt-get "${LOCK[@]}" install -y -q --no-install-recommends "${missing[@]}"
