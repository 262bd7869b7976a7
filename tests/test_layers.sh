#!/usr/bin/env bash
# The layers of DESIGN.md's data flow, enforced on the includes: each directory under src/ may
# include only its own headers and the public headers of the layers below it (core < io <
# model < tok, plan < target < runtime < deploy), never a kernel-private header of another
# directory. A wrong-way include (a target reading deploy's gate table, deploy calling a GEMM
# kernel directly) fails here instead of growing a seam in the wrong place.
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)/src
declare -A allowed=(
    [core]="core"
    [io]="core io"
    [model]="core io model"
    [tok]="core io tok"
    [plan]="core model plan"
    [target/ref]="core io model plan target/ref"
    [target/cpu]="core io model plan target/ref target/cpu"
    [runtime]="core io model tok plan target/ref target/cpu runtime"
    [deploy]="core io model tok plan target/ref target/cpu runtime deploy"
    [serve]="core io model tok plan target/ref target/cpu runtime deploy serve"
)
# Headers only their own directory may include.
private="target/cpu/gemm.h target/cpu/cpu_internal.h target/cpu/attn.h target/cpu/transpose_avx512.h
target/ref/ref_dot.h tok/tok_internal.h tok/tok_json.h tok/tok_load.h"
pass=0 fail=0
while IFS= read -r f; do
    rel=${f#"$SRC"/}
    case $rel in target/*) layer=$(cut -d/ -f1-2 <<<"$rel") ;; *) layer=${rel%%/*} ;; esac
    [ -n "${allowed[$layer]+x}" ] || { fail=$((fail + 1)); echo "FAIL: $rel: directory $layer is not a known layer" >&2; continue; }
    while IFS= read -r inc; do
        case $inc in target/*) dep=$(cut -d/ -f1-2 <<<"$inc") ;; */*) dep=${inc%%/*} ;; *) continue ;; esac
        ok=0
        for a in ${allowed[$layer]}; do [ "$a" = "$dep" ] && ok=1; done
        if [ $ok = 1 ] && [ "$dep" != "$layer" ] && grep -qxF -- "$inc" <<<"$(tr ' ' '\n' <<<"$private")"; then ok=0; fi
        if [ $ok = 1 ]; then pass=$((pass + 1))
        else fail=$((fail + 1)); echo "FAIL: src/$rel includes \"$inc\": $layer may use only ${allowed[$layer]} (public headers)" >&2; fi
    done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
done < <(find "$SRC" -name '*.[ch]' | sort)
echo "test_layers: $pass includes checked, $fail wrong-way"
[ "$fail" -eq 0 ]
