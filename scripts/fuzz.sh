#!/usr/bin/env bash
# Runs every fuzz target of a build for a bounded time: builds a seed corpus per target in
# BUILD_DIR/fuzz-corpus/<target>/ from the fixtures (whole small safetensors files, the heads of
# the big ones, a few hand-written ones; every config.json), then runs each BUILD_DIR/fuzz_*
# with libFuzzer (TS_FUZZ=ON builds) or with fuzz/standalone.c's driver. Exits non-zero if any
# target crashes; crashing inputs land in BUILD_DIR/fuzz-artifacts/.
#   usage: scripts/fuzz.sh BUILD_DIR SECONDS
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 BUILD_DIR SECONDS" >&2
    exit 2
fi
BUILD=$1
SECONDS_PER_TARGET=$2
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FIX=$ROOT/tests/fixtures/hf
CORPUS=$BUILD/fuzz-corpus
ART=$BUILD/fuzz-artifacts

shopt -s nullglob
targets=("$BUILD"/fuzz_*)
if [ ${#targets[@]} -eq 0 ]; then
    echo "fuzz.sh: no fuzz_* binaries in $BUILD (build it first)" >&2
    exit 2
fi
mode=standalone
if grep -q '^TS_FUZZ:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then mode=libfuzzer; fi

# ---- seed corpora ----
mkdir -p "$CORPUS" "$ART"

# mk_st FILE HEADER DATA_BYTES: a complete safetensors file; the header is space-padded to 8
# bytes and the data area is DATA_BYTES bytes of a repeating pattern.
mk_st() {
    local file=$1 hdr=$2 nbytes=$3
    local len=${#hdr}
    local pad=$(((len + 7) / 8 * 8))
    {
        local i esc=
        for i in 0 1 2 3 4 5 6 7; do esc+=$(printf '\\x%02x' $(((pad >> (8 * i)) & 255))); done
        printf '%b' "$esc"
        printf '%s' "$hdr"
        printf '%*s' $((pad - len)) ''
        head -c "$nbytes" /dev/zero | tr '\0' '\077'
    } >"$file"
}

st=$CORPUS/fuzz_safetensors
mkdir -p "$st"
for f in "$FIX"/*/*.safetensors; do
    name=$(basename "$(dirname "$f")")_$(basename "$f")
    if [ "$(stat -c %s "$f")" -le 100000 ]; then
        cp "$f" "$st/seed_$name"                          # whole file: two of the shards
    else
        head -c 4096 "$f" >"$st/seed_head_$name"          # header and the first tensors
    fi
done
mk_st "$st/seed_tiny_f32" '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}' 8
mixed='{"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},'
mixed+='"b":{"dtype":"F16","shape":[3],"data_offsets":[12,18]},'
mixed+='"e":{"dtype":"F32","shape":[0],"data_offsets":[20,20]},'
mixed+='"s":{"dtype":"F32","shape":[],"data_offsets":[20,24]}}'
mk_st "$st/seed_tiny_mixed" "$mixed" 24
mk_st "$st/seed_tiny_empty" '{}' 0

cf=$CORPUS/fuzz_config
mkdir -p "$cf"
for f in "$FIX"/*/config.json; do cp "$f" "$cf/seed_$(basename "$(dirname "$f")").json"; done
cat >"$cf/seed_llama32_rope_scaling.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
 "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192,
 "max_position_embeddings": 131072, "mlp_bias": false, "num_attention_heads": 32,
 "num_hidden_layers": 16, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
 "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
 "original_max_position_embeddings": 8192, "type": "llama3"}, "rope_theta": 500000.0,
 "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 128256}
EOF
cat >"$cf/seed_qwen3_nulls.json" <<'EOF'
{"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "bos_token_id": null,
 "eos_token_id": null, "head_dim": 128, "hidden_size": 1024, "intermediate_size": 3072,
 "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
 "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
 "use_sliding_window": false, "vocab_size": 151936}
EOF

gg=$CORPUS/fuzz_gguf
mkdir -p "$gg"
# The real trained model's header (metadata, vocabulary, tensor table) and small whole files.
head -c 16384 "$ROOT/tests/fixtures/shared/models/stories260K.gguf" >"$gg/seed_head_stories260K"
for f in "$ROOT"/tests/fixtures/gguf/*/*.gguf; do
    [ -f "$f" ] && [ "$(stat -c %s "$f")" -le 131072 ] && cp "$f" "$gg/seed_$(basename "$f")"
done
# A tiny complete file: one F32 tensor and one Q8_0 tensor, one string and one array.
python3 - "$gg/seed_tiny" <<'PY'
import struct, sys
def s(x): return struct.pack("<Q", len(x)) + x.encode()
kv = s("general.architecture") + struct.pack("<I", 8) + s("llama")
kv += s("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 2) + struct.pack("<ff", 0.5, -1)
ti = s("a") + struct.pack("<IQIQ", 1, 2, 0, 0) + s("q") + struct.pack("<IQQIQ", 2, 32, 1, 8, 32)
h = b"GGUF" + struct.pack("<IQQ", 3, 2, 2) + kv + ti
h += b"\0" * (-len(h) % 32)
data = struct.pack("<ff", 1, 2) + b"\0" * 24 + struct.pack("<e", 0.5) + bytes(range(32))
open(sys.argv[1], "wb").write(h + data)
PY

jj=$CORPUS/fuzz_jinja
mkdir -p "$jj"
# The real chat templates, and small ones reaching the statements and filters they do not use.
for f in "$ROOT"/tests/fixtures/shared/templates/*.jinja; do cp "$f" "$jj/seed_$(basename "$f")"; done
printf '%s' '{% for m in messages if m.role != "tool" %}{{ loop.index }}{{ m.content|trim|upper }}{% else %}none{% endfor %}' >"$jj/seed_for_if"
printf '%s' '{% set ns = namespace(a=[]) %}{% macro f(x, y=2) %}{{ x * y }}{% endmacro %}{{ f(3) ~ f(x=1, y="ab") }}{% set ns.a = ns.a + [1] %}{{ ns.a|tojson(indent=2) }}' >"$jj/seed_macro_ns"
printf '%s' '{{ "a,b"[::-1].split(",")|map("upper")|join("-") }}{{ {"k": [1, 2.5, none, true]}|dictsort }}{{ range(3)|list|sum }}{% raw %}{{ x }}{% endraw %}{#- c -#}' >"$jj/seed_exprs"
printf '%s' '{%- filter upper %}{% set x %}{{ messages[0]["content"] }}{% endset %}{{ x[1:4] }}{% endfilter %}{{ strftime_now("%Y-%m-%d") }}{{ raise_exception("no") if tools is none }}' >"$jj/seed_blocks"

sv=$CORPUS/fuzz_serve_request
mkdir -p "$sv"
# OpenAI request bodies as clients send them, and ones each check refuses.
printf '%s' '{"model": "q", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi \u00e9"}]}], "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 7, "stop": ["\n\n", "END"], "stream": true, "stream_options": {"include_usage": true}, "chat_template_kwargs": {"enable_thinking": false}}' >"$sv/seed_chat_full"
printf '%s' '{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "content": "1", "tool_call_id": "a"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}], "n": 1, "max_completion_tokens": 3, "logprobs": false, "response_format": {"type": "text"}}' >"$sv/seed_chat_tools"
printf '%s' '{"prompt": "Once upon a time", "max_tokens": 5, "stop": "\n", "echo": false, "suffix": "", "best_of": 1, "presence_penalty": 0, "frequency_penalty": 0.0, "repetition_penalty": 1.1}' >"$sv/seed_completion"
printf '%s' '{"prompt": ["one"], "temperature": 3, "n": 2, "top_p": 0, "max_tokens": 1e9, "seed": -1.5, "stop": [1, "a"]}' >"$sv/seed_bad_fields"
printf '%s' '{"prompt": "x", "max_tokens": 3,}' >"$sv/seed_bad_json"
printf '%s' '[{"messages": []}, "prompt"]' >"$sv/seed_not_object"
printf '%s' '{"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 5, "tools": [], "tool_choice": "auto", "parallel_tool_calls": false}' >"$sv/seed_chat_logprobs"
printf '%s' '{"prompt": "x", "logprobs": 5, "echo": true, "max_tokens": 0}' >"$sv/seed_echo"
# model replies for the tool-call parser (the same input is parsed as one)
printf '%s' 'Sure.
<tool_call>
{"name": "f", "arguments": {"a": [1, "</tool_call>"]}}
</tool_call>
<tool_call>
{"name": 1}</tool_call>' >"$sv/seed_reply_hermes"
printf '%s' '[TOOL_CALLS][{"name": "f", "arguments": {}}, {"name": "g", "arguments": "{\"x\": 1}"}] after' >"$sv/seed_reply_mistral"
printf '%s' '<|python_tag|>{"name": "f", "parameters": {"q": "\u00e9"}}' >"$sv/seed_reply_llama"

# JSON tokens for libFuzzer's dictionary (standalone.c carries its own list).
dict=$CORPUS/json.dict
printf '%s\n' '"{"' '"}"' '"["' '"]"' '","' '":"' '"\""' '"null"' '"true"' '"false"' '"-1"' \
    '"1e308"' '"9223372036854775807"' '"18446744073709551616"' '"\"dtype\""' '"\"shape\""' \
    '"\"data_offsets\""' '"\"__metadata__\""' '"\"F32\""' '"\"F16\""' '"\"BF16\""' \
    '"\"architectures\""' '"\"hidden_size\""' '"\"num_attention_heads\""' \
    '"\"num_key_value_heads\""' '"\"head_dim\""' '"\"vocab_size\""' '"\"eos_token_id\""' \
    '"\"rope_scaling\""' '"\"rope_parameters\""' '"\"rope_type\""' '"\"llama3\""' \
    '"\"LlamaForCausalLM\""' '"\"Qwen2ForCausalLM\""' '"\"Qwen3ForCausalLM\""' \
    '"{%"' '"%}"' '"{{"' '"}}"' '"{#"' '"#}"' '"{%-"' '"-%}"' '"endfor"' '"endif"' '"endmacro"' \
    '"namespace("' '"loop."' '"messages"' '"|tojson"' '"|trim"' '"is defined"' \
    '"\"prompt\""' '"\"stream\""' '"\"max_tokens\""' '"\"temperature\""' '"\"stop\""' '"\"role\""' \
    '"\"content\""' '"\"stream_options\""' '"\"include_usage\""' '"\"chat_template_kwargs\""' \
    '"\"seed\""' '"\"top_p\""' '"\"top_k\""' '"\"n\""' '"\"tools\""' \
    '"\"logprobs\""' '"\"top_logprobs\""' '"\"echo\""' '"\"tool_choice\""' '"<tool_call>"' \
    '"</tool_call>"' '"[TOOL_CALLS]"' '"\"name\""' '"\"arguments\""' '"\"parameters\""' >"$dict"

# ---- runs ----
max_len_of() { case $1 in fuzz_safetensors | fuzz_gguf) echo 131072 ;; *) echo 16384 ;; esac; }

failed=0
summary=()
for bin in "${targets[@]}"; do
    [ -x "$bin" ] || continue
    t=$(basename "$bin")
    corpus=$CORPUS/$t
    mkdir -p "$corpus"
    log=$BUILD/fuzz-$t.log
    ml=$(max_len_of "$t")
    echo "fuzz.sh: $t ($mode, ${SECONDS_PER_TARGET}s, $(find "$corpus" -type f | wc -l) corpus files)"
    set +e
    if [ $mode = libfuzzer ]; then
        "$bin" -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -max_len="$ml" \
            -timeout=25 -dict="$dict" -print_final_stats=1 -artifact_prefix="$ART/$t-" \
            "$corpus" >"$log" 2>&1
    else
        "$bin" -seconds="$SECONDS_PER_TARGET" -max_len="$ml" -artifact_prefix="$ART/$t-" \
            "$corpus" >"$log" 2>&1
    fi
    rc=$?
    set -e
    runs=$(grep -Eo 'Done [0-9]+ runs' "$log" | tail -1 | grep -Eo '[0-9]+' || true)
    if [ $rc -ne 0 ]; then
        failed=1
        echo "fuzz.sh: $t FAILED (exit $rc); last lines of $log:" >&2
        tail -n 40 "$log" >&2
        ls -l "$ART"/"$t"-* >&2 2>/dev/null || true
        summary+=("$t: CRASH (exit $rc), see $log and $ART/")
    else
        summary+=("$t: ok, ${runs:-?} runs in ${SECONDS_PER_TARGET}s ($mode)")
    fi
done

echo "fuzz.sh summary:"
printf '  %s\n' "${summary[@]}"
exit $failed
