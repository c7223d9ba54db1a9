#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `cmake --install` into a temporary prefix, then the getting-started program
# built out of tree against it, the two ways docs/getting-started.md shows:
#   1. cc ... $(pkg-config --cflags --libs cpr)
#   2. a CMake project with find_package(cpr) and cpr::cpr (and once more
#      with cpr::cpr_static, to prove the static archive is complete)
# and each run against the installed ckptd (and pkg-config's over local://,
# which loads the installed libcpr-store.so.0). Nothing from the source or
# build tree is on any include or library path of those builds.
# Usage: test_install.sh BUILD_DIR SOURCE_DIR [EXTRA_CFLAGS (sanitizers)] [python]
# ("python": the build has the Python package, so pip install ./python too)
set -euo pipefail
build=$1
src=$2
extra=${3:-}
with_python=${4:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/install-test.XXXXXX")
prefix=$work/prefix

fail() { echo "test_install: $*" >&2; exit 1; }
ckptd=$prefix/bin/ckptd
source "$(dirname "$0")/lib_ckptd.sh"
trap 'kill_daemons; rm -rf "$work"' EXIT

command -v pkg-config > /dev/null || fail "pkg-config is missing (deploy/install-deps.sh installs it)"
cmake --install "$build" --prefix "$prefix" > "$work/install.log" ||
    fail "cmake --install failed: $(tail -5 "$work/install.log")"
for f in include/cpr/client.h include/cpr/types.h lib/libcpr.so.0 lib/libcpr.a \
         lib/libcpr-store.so.0 lib/libcpr-store.a lib/pkgconfig/cpr.pc \
         lib/cmake/cpr/cprConfig.cmake bin/ckptd bin/cprctl; do
    [[ -e $prefix/$f ]] || fail "the prefix has no $f"
done
cp "$src/examples/quickstart/quickstart.c" "$work/"

# 1. pkg-config
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
flags=$(pkg-config --cflags --libs cpr) || fail "pkg-config --cflags --libs cpr failed"
cc -std=c11 -Wall -Werror $extra -o "$work/qs-pc" "$work/quickstart.c" $flags \
    -Wl,-rpath,"$prefix/lib" || fail "the pkg-config build failed"

# 2. find_package(cpr)
mkdir -p "$work/proj"
cat > "$work/proj/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(quickstart C)
find_package(cpr 0.1 REQUIRED)
add_executable(qs-cmake quickstart.c)
target_link_libraries(qs-cmake PRIVATE cpr::cpr)
add_executable(qs-static quickstart.c)
target_link_libraries(qs-static PRIVATE cpr::cpr_static)
CMAKE
cp "$work/quickstart.c" "$work/proj/"
cmake -S "$work/proj" -B "$work/proj/build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_C_FLAGS="$extra" -DCMAKE_BUILD_TYPE=Release > "$work/cmake.log" 2>&1 ||
    fail "configuring with find_package(cpr) failed: $(tail -20 "$work/cmake.log")"
cmake --build "$work/proj/build" > "$work/build.log" 2>&1 ||
    fail "building with find_package(cpr) failed: $(tail -20 "$work/build.log")"

n=0
for prog in "$work/qs-pc" "$work/proj/build/qs-cmake" "$work/proj/build/qs-static"; do
    n=$((n + 1))
    start_daemon "d$n" # each program saves checkpoint 1 of job "quickstart": a daemon each
    out=$("$prog" "grpc://${daemon_addr[d$n]}" 2>&1) || fail "$(basename "$prog"): $out"
    [[ $out == *"as of checkpoint 1"* ]] || fail "$(basename "$prog"): '$out'"
    stop_daemon "d$n"
done
out=$("$work/qs-pc" "local://$work/local" 2>&1) || fail "qs-pc over local://: $out"
[[ $out == *"as of checkpoint 1"* ]] || fail "qs-pc over local://: '$out'"
libs=$(ldd "$work/qs-pc")
if grep -qiE 'rocksdb|uring' <<< "$libs"; then
    fail "a gRPC program built with pkg-config cpr loads the store's libraries"
fi

# 3. The Python package: `pip install ./python` against the installed libcpr
# (offline, Debian's setuptools), into a directory of its own, then a round
# trip through the installed ckptd. Only where the build has the package
# (never under the sanitizers: an ASan libcpr cannot load into python).
py=""
if [[ $with_python == python ]]; then
    cp -r "$src/python" "$work/pysrc" # pip writes build files beside setup.py
    /usr/bin/python3 -m pip install --no-build-isolation --no-deps --no-index --quiet \
        --target "$work/site" "$work/pysrc" > "$work/pip.log" 2>&1 ||
        fail "pip install of python/ failed: $(tail -20 "$work/pip.log")"
    start_daemon py
    out=$(cd "$work" && PYTHONPATH=$work/site /usr/bin/python3 - "grpc://${daemon_addr[py]}" <<'PY' 2>&1
import sys
import numpy as np
import cpr
assert cpr.__file__.startswith(sys.path[1]) or "site" in cpr.__file__, cpr.__file__
with cpr.Client(sys.argv[1]) as c:
    with c.begin("installed", 0, 1, tables=[(0, 10, 2, 0)]) as p:
        p.put_range(0, 0, np.arange(20, dtype=np.float32).reshape(10, 2))
    rows, res = c.restore("installed")
    assert np.asarray(rows[0].values)[9, 1] == 19.0
    print("python ok as of", res.as_of, cpr.__file__)
PY
) || fail "the pip-installed package: $out"
    [[ $out == *"python ok as of 1"*"/site/cpr/"* ]] || fail "the pip-installed package: '$out'"
    stop_daemon py
    py=", the pip-installed Python package"
fi
echo "test_install: ok ($n programs against the installed ckptd, one over local://$py)"
