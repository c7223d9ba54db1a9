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
# Usage: test_install.sh BUILD_DIR SOURCE_DIR [EXTRA_CFLAGS (sanitizers)]
set -euo pipefail
build=$1
src=$2
extra=${3:-}
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
echo "test_install: ok ($n programs against the installed ckptd, one over local://)"
