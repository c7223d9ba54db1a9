#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The reference trainer is written against CPR's public API only: every
# quoted #include under examples/dlrm names either a public header
# ("cpr/NAME.h", which include/cpr must hold) or a file of examples/dlrm
# itself; anything else (cpr_common.h, cpr_json.h, a header of ckptd/ or
# client/) would only compile through an internal include path. A <...>
# include is the system's, unless it names a header of CPR's own module
# directories (<cpr_common.h> through a stray -I): that fails too.
# Usage: test_dlrm_public.sh SOURCE_DIR
set -euo pipefail
src=$1
dir=$src/examples/dlrm

fail() { echo "test_dlrm_public: $*" >&2; exit 1; }

shopt -s nullglob
files=("$dir"/*.c "$dir"/*.h)
(( ${#files[@]} > 0 )) || fail "no sources under $dir"
checked=0
for file in "${files[@]}"; do
    # Quoted includes: a public header or one of the example's own.
    while IFS= read -r header; do
        checked=$((checked + 1))
        what="$(basename "$file") includes \"$header\""
        if [[ $header == cpr/* ]]; then
            [[ -f $src/include/$header ]] || fail "$what, which include/cpr does not hold"
        elif [[ $header == */* || ! -f $dir/$header ]]; then
            fail "$what: neither cpr/*.h nor a file of examples/dlrm"
        fi
    done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/p' "$file")
    while IFS= read -r header; do
        for module in common ckptd client rpc embedding recovery data tools tests; do
            [[ ! -f $src/$module/$header ]] ||
                fail "$(basename "$file") includes <$header>, an internal header of $module/"
        done
    done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*<([^>]+)>.*/\1/p' "$file")
done
(( checked > 0 )) || fail "found no quoted include at all: is the pattern broken?"
echo "test_dlrm_public: ok ($checked includes in ${#files[@]} files)"
