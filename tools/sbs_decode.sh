#!/bin/bash
# Decode side by side on one machine: tessera (AVX-512 FP32 GEMV from the mmap and copied to
# huge pages, the vdpbf16ps x3 GEMV, the AVX2 variant) and llama.cpp's llama-bench on the same
# BF16 weights, 2 threads, both at context DEPTH (default 128; tessera --decode DEPTH, llama-bench
# -d DEPTH: a decode from an empty cache would be 2-4% faster for llama.cpp), in rotating order, each run
# started when the other processes use under 20% of the cores (ARMS chooses the arms). Results: one JSON per run in OUT, a log with the load and the steal
# ticks during each run; tools/sbs_summary.py OUT prints tok/s, GB/s against the read peak and
# the ratios. Usage: TESSERA=build/tessera LLAMA_BENCH=.../llama-bench ROUNDS=3 \
#   tools/sbs_decode.sh OUT MODEL_DIR:MODEL.gguf [MODEL_DIR:MODEL.gguf ...]
set -u
OUT=$1; shift
T=${TESSERA:-build/tessera}; LB=${LLAMA_BENCH:-llama-bench}; ROUNDS=${ROUNDS:-3}; DEPTH=${DEPTH:-128}
mkdir -p "$OUT"
busy() { # busy share of all cores over one second, percent
    local a b
    read -r _ a1 a2 a3 a4 a5 a6 a7 _ </proc/stat; sleep 1; read -r _ b1 b2 b3 b4 b5 b6 b7 _ </proc/stat
    a=$(((b1 + b2 + b3 + b4 + b5 + b6 + b7) - (a1 + a2 + a3 + a4 + a5 + a6 + a7))); b=$(((b4 + b5) - (a4 + a5)))
    echo $((100 * (a - b) / a))
}
quiet() { local i b=100; for i in $(seq 1 60); do b=$(busy); [ "$b" -lt 20 ] && break; sleep 2; done; BUSY=$b; }
run() { # ARM DIR GGUF FILE
    local arm=$1 dir=$2 gguf=$3 f=$OUT/$4 st0
    quiet
    st0=$(awk 'NR==1{print $9}' /proc/stat)
    echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg) others-busy ${BUSY}% $arm $dir" >>"$OUT/log"
    local tb=("$T" bench "$dir" --prefill 16 --decode "$DEPTH" --gen 16 --trials 3 --threads 2 --json)
    case $arm in
    f32) TESSERA_AVX512_DECODE=f32 "${tb[@]}" >"$f" 2>/dev/null ;;
    f32copy) TESSERA_AVX512_DECODE=f32 "${tb[@]}" --copy-weights >"$f" 2>/dev/null ;;
    bf16x3) TESSERA_AVX512_DECODE=bf16 "${tb[@]}" >"$f" 2>/dev/null ;;
    avx2) TESSERA_CPU_VARIANT=avx2+fma "${tb[@]}" >"$f" 2>/dev/null ;;
    auto) "${tb[@]}" >"$f" 2>/dev/null ;;
    copy) "${tb[@]}" --copy-weights >"$f" 2>/dev/null ;;
    llama) "$LB" -m "$gguf" -t 2 -p 0 -n 32 -d "$DEPTH" -r 3 -o json >"$f" 2>/dev/null ;;
    esac
    echo "$(date +%T) done $arm steal $(($(awk 'NR==1{print $9}' /proc/stat) - st0)) ticks" >>"$OUT/log"
}
# ARMS="auto copy llama" (the variant and kernels the CPUID and the per-core probes pick, from
# the mmap and copied) suits quantized files, where the FP32/BF16 GEMV choice does not apply.
read -r -a ARMS <<<"${ARMS:-f32 bf16x3 avx2 llama f32copy}"
NA=${#ARMS[@]}
for r in $(seq 1 "$ROUNDS"); do
    for pair in "$@"; do
        dir=${pair%%:*} gguf=${pair#*:} name=$(basename "$dir")
        for i in $(seq 0 $((NA - 1))); do
            a=${ARMS[$(((i + r) % NA))]}
            run "$a" "$dir" "$gguf" "r$r-$name-$a.json"
        done
    done
done
