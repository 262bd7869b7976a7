#!/usr/bin/env bash
# Builds tools/sbs_inproc.c against a llama.cpp build and the project's library, then runs it
# on each file: decode side by side with llama.cpp in one process (see the .c file for why).
#   LLAMA_DIR=/path/to/llama.cpp [BUILD=build] [ARGS="--rounds 8 --ctx 128"] tools/sbs_inproc.sh FILE.gguf ...
# LLAMA_DIR must hold include/llama.h, ggml/include/ and build/bin/libllama.so (a CMake build:
# -DGGML_NATIVE=ON -DLLAMA_CURL=OFF). Nothing here is part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMA_DIR:?set LLAMA_DIR to a llama.cpp checkout with a CMake build in build/}"
BUILD=${BUILD:-build}
OUT=${OUT:-$BUILD/sbs_inproc}
[ -f "$BUILD/libtessera_core.a" ] || { echo "sbs_inproc: build the project first ($BUILD/libtessera_core.a)" >&2; exit 1; }
gcc -O2 -std=c11 -D_GNU_SOURCE -Wall -Isrc -Iinclude -I"$LLAMA_DIR/include" -I"$LLAMA_DIR/ggml/include" \
    tools/sbs_inproc.c "$BUILD/libtessera_core.a" -o "$OUT" \
    -L"$LLAMA_DIR/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$LLAMA_DIR/build/bin" \
    -lcrypto -ljansson -lmicrohttpd -lpcre2-8 -lutf8proc -lm -lpthread
for f in "$@"; do
    # llama.cpp's log lines go to stderr; keep them out of the table
    "$OUT" "$f" ${ARGS:-} 2>"$OUT.$(basename "$f").log" || { echo "sbs_inproc: $f failed, see $OUT.$(basename "$f").log" >&2; exit 1; }
done
