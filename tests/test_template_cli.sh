#!/usr/bin/env bash
# tessera template: the real chat templates (TS_REALDATA/templates/*.jinja, the llama3 and qwen3
# tokenizer directories, a GGUF) print byte-identical to transformers' apply_chat_template on
# conversations of tests/fixtures/templates/golden.json; --date fixes strftime_now, --var sets
# template variables, --chat-template overrides; the errors name the file and exit non-zero.
# Then `tessera chat` and `run --chat` on a synth model speaking Llama-3.2's template.
set -u
NAME=template_cli
source "$(dirname "$0")/lib.sh"

GOLD="$FIX/templates/golden.json"
TPL="$SHARED/templates"
L32="$TPL/meta-llama-Llama-3.2-3B-Instruct.jinja"

# Every golden case of a few templates, and a few of the others, through the command line: a
# messages file per conversation ({"messages", "tools"}), the tokenizer's special tokens and the
# conversation's kwargs as --var, the golden date as --date. Printed bytes == golden output;
# a template's raise_exception: exit 1 with its message.
python3 - "$BIN" "$GOLD" "$SHARED" "$TMP" <<'PY' && ok || bad "tessera template differs from transformers (above)"
import json, subprocess, sys
binp, gold, shared, tmp = sys.argv[1:5]
g = json.load(open(gold))
convs = {c["id"]: c for c in g["conversations"]}
# Python's str() of a dict/list (printed by some templates) is the interpreter's business, not the CLI's
skip_convs = {"tool-result-dict", "content-parts"}
full = {"meta-llama-Llama-3.2-3B-Instruct", "Qwen-Qwen3-0.6B", "google-gemma-2-2b-it"}
date = g["date"]
n = fails = 0
seen = set()
for case in g["cases"]:
    name, cid, gen = case["template"], case["conversation"], case["add_generation_prompt"]
    t = g["templates"][name]
    if cid in skip_convs or "error_type" in case:
        continue
    if name not in full and (name, "error" in case) in seen:
        continue
    seen.add((name, "error" in case))
    conv = convs[cid]
    mf = "%s/m-%s.json" % (tmp, cid)
    doc = {"messages": conv["messages"]}
    if "tools" in conv:
        doc["tools"] = conv["tools"]
    json.dump(doc, open(mf, "w"), ensure_ascii=False)
    if t.get("json_key"):  # the template inside a tokenizer directory: its own special tokens
        model, vs = shared + "/" + t["realdata"].rsplit("/", 1)[0], {}
    else:
        model, vs = shared + "/" + t["realdata"], dict(t["vars"])
    vs.update(conv.get("kwargs", {}))
    cmd = [binp, "template", model, "--messages", mf, "--date", date]
    for k, v in vs.items():
        cmd += ["--var", "%s=%s" % (k, json.dumps(v, ensure_ascii=False))]
    if gen:
        cmd.append("--add-generation-prompt")
    r = subprocess.run(cmd, capture_output=True)
    n += 1
    if "error" in case:
        if r.returncode != 1 or case["error"].encode() not in r.stderr:
            fails += 1
            print("FAIL %s/%s gen=%s: expected exit 1 and %r, got exit %d: %s"
                  % (name, cid, gen, case["error"], r.returncode, r.stderr.decode(errors="replace")[-300:]))
        continue
    want = case["output"].encode()
    if r.returncode != 0 or r.stdout != want:
        fails += 1
        d = next((i for i in range(min(len(r.stdout), len(want))) if r.stdout[i] != want[i]), min(len(r.stdout), len(want)))
        print("FAIL %s/%s gen=%s: exit %d, differs at byte %d\n  got: %r\n  exp: %r\n  %s"
              % (name, cid, gen, r.returncode, d, r.stdout[d:d + 60], want[d:d + 60], r.stderr.decode(errors="replace")[-300:]))
print("tessera template: %d golden cases, %d differ" % (n, fails))
sys.exit(1 if fails or n < 150 else 0)
PY

# the tokenizer directories, their tokenizer_config.json, and --chat-template over them
printf '[{"role": "user", "content": "Hi!"}]' >"$TMP/hi.json"
"$BIN" template "$SHARED/tokenizers/qwen3" --messages "$TMP/hi.json" --add-generation-prompt >"$TMP/q1" 2>"$TMP/qe" \
    && ok || bad "qwen3 dir: $(cat "$TMP/qe")"
[ "$(cat "$TMP/q1")" = "$(printf '<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n')" ] && ok || bad "qwen3: $(cat "$TMP/q1")"
"$BIN" template "$SHARED/tokenizers/qwen3/tokenizer_config.json" --messages - --add-generation-prompt <"$TMP/hi.json" >"$TMP/q2" \
    && cmp -s "$TMP/q1" "$TMP/q2" && ok || bad "tokenizer_config.json path with messages on stdin differs"
"$BIN" template "$SHARED/tokenizers/qwen3" --messages "$TMP/hi.json" --add-generation-prompt --var enable_thinking=false >"$TMP/q3"
{ cat "$TMP/q1"; printf '<think>\n\n</think>\n\n'; } >"$TMP/q3want"
cmp -s "$TMP/q3" "$TMP/q3want" && ok || bad "--var enable_thinking=false: $(cat "$TMP/q3")"
# Llama-3.2's template over the llama3 tokenizer: bos from its tokenizer_config.json, today's date
# unless --date (or TESSERA_DATE) fixes it; a --var string for date_string
l32() { "$BIN" template "$SHARED/tokenizers/llama3" --chat-template "$L32" --messages "$TMP/hi.json" "$@"; }
expect 0 "Today Date: 14 Mar 2026" -- l32 --date 2026-03-14
expect 0 "Today Date: 29 Feb 2024" -- env TESSERA_DATE=2024-02-29 "$BIN" template "$SHARED/tokenizers/llama3" --chat-template "$L32" --messages "$TMP/hi.json"
expect 0 "Today Date: 14 Mar 2026" -- env TESSERA_DATE=2024-02-29 "$BIN" template "$SHARED/tokenizers/llama3" --chat-template "$L32" --messages "$TMP/hi.json" --date 2026-03-14
expect 0 "Today Date: $(date +'%d %b %Y')" -- l32
expect 0 "Today Date: 26 Jul 2024" -- l32 --var "date_string=26 Jul 2024"
l32 --date 2026-03-14 >"$TMP/l1"
[ "$(head -c 17 "$TMP/l1")" = "<|begin_of_text|>" ] && ok || bad "no bos from tokenizer_config.json: $(head -c 80 "$TMP/l1")"
"$BIN" template "$L32" --messages "$TMP/hi.json" --date 2026-03-14 --var 'bos_token=<|begin_of_text|>' >"$TMP/l2"
cmp -s "$TMP/l1" "$TMP/l2" && ok || bad "the .jinja with --var bos_token differs from the directory with --chat-template"
# ChatML only when the tokenizer speaks it, and said on stderr
mkdir -p "$TMP/chatml" "$TMP/notpl"
cp "$SHARED/tokenizers/qwen3/tokenizer.json" "$TMP/chatml/"
expect 0 "using ChatML" -- "$BIN" template "$TMP/chatml" --messages "$TMP/hi.json"
[ "$("$BIN" template "$TMP/chatml" --messages "$TMP/hi.json" 2>/dev/null)" = "$(printf '<|im_start|>user\nHi!<|im_end|>')" ] \
    && ok || bad "ChatML fallback text"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d.pop('chat_template'); json.dump(d, open(sys.argv[2],'w'))" \
    "$SHARED/tokenizers/llama3/tokenizer_config.json" "$TMP/notpl/tokenizer_config.json"
cp "$SHARED/tokenizers/llama3/tokenizer.json" "$TMP/notpl/"
expect 4 "$TMP/notpl/tokenizer_config.json: no chat template" -- "$BIN" template "$TMP/notpl" --messages "$TMP/hi.json"
expect 0 "Today Date" -- "$BIN" template "$TMP/notpl" --messages "$TMP/hi.json" --chat-template "$L32"
printf '%s' "$(cat "$L32")" >"$TMP/notpl/chat_template.jinja"
expect 0 "Today Date" -- "$BIN" template "$TMP/notpl" --messages "$TMP/hi.json"

# errors: exit code and a message naming the file and the field
printf '[{"role": "user", "content": "Hi"},\n {"role": "user" "content": 1}]' >"$TMP/bad.json"
printf '{"role": "user", "content": "Hi"}' >"$TMP/obj.json"
printf '[{"role": "user", "content": "Hi"}, "hello"]' >"$TMP/str.json"
printf '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]' >"$TMP/sys.json"
expect 2 "$TMP/missing: no such file or directory" -- "$BIN" template "$TMP/missing" --messages "$TMP/hi.json"
expect 2 "$TMP/nope.json" -- "$BIN" template "$L32" --messages "$TMP/nope.json"
expect 3 "$TMP/bad.json: invalid JSON at line 2 column" -- "$BIN" template "$L32" --messages "$TMP/bad.json"
expect 3 "$TMP/obj.json: an object without \"messages\"" -- "$BIN" template "$L32" --messages "$TMP/obj.json"
expect 3 "$TMP/str.json: message 1 is a string, expected an object" -- "$BIN" template "$L32" --messages "$TMP/str.json"
expect 3 "$TMP/obj.json: the document is an object, expected a list of tool definitions" \
    -- "$BIN" template "$L32" --messages "$TMP/hi.json" --tools "$TMP/obj.json"
expect 1 "System role not supported" -- "$BIN" template "$TPL/google-gemma-2-2b-it.jinja" --messages "$TMP/sys.json"
printf '{%% if %%}' >"$TMP/broken.jinja"
expect 3 "$TMP/broken.jinja:1:" -- "$BIN" template "$TMP/broken.jinja" --messages "$TMP/hi.json"
expect 64 "expects MODEL|FILE and --messages" -- "$BIN" template "$L32"
expect 64 "--var expects key=value" -- "$BIN" template "$L32" --messages "$TMP/hi.json" --var novalue
expect 64 "--date expects a date YYYY-MM-DD" -- "$BIN" template "$L32" --messages "$TMP/hi.json" --date 2026-02-30
expect 64 "TESSERA_DATE expects a date" -- env TESSERA_DATE=tomorrow "$BIN" template "$L32" --messages "$TMP/hi.json"
expect 64 "unexpected argument \"--frobnicate\"" -- "$BIN" template "$L32" --messages "$TMP/hi.json" --frobnicate
expect 0 "--add-generation-prompt" -- "$BIN" template --help

# A model speaking Llama-3.2: synth with the llama3 tokenizer, chat through the template file
M="$TMP/l"
expect 0 "wrote" -- "$BIN" synth llama-3.2-1b-tiny "$M" --seed 3 --vocab 128256 --tokenizer "$SHARED/tokenizers/llama3"
chat() { printf 'Hello there\nWhat is 2+2?\n' | "$BIN" chat "$M" --chat-template "$L32" --date 2026-03-14 -n 4 --temp 0 --threads 2 --verbose "$@"; }
chat >"$TMP/c1" 2>"$TMP/ce1" && ok || bad "chat with Llama-3.2's template: $(cat "$TMP/ce1")"
[ "$(grep -c '^prompt: .* generation: [1-4] tokens' "$TMP/ce1")" -eq 2 ] && ok || bad "expected 2 replies: $(cat "$TMP/ce1")"
# turn 1's prompt is exactly what `tessera template` prints for it, tokenized
"$BIN" template "$M" --chat-template "$L32" --date 2026-03-14 --messages "$TMP/hi.json" --add-generation-prompt >/dev/null && ok \
    || bad "template on the synth model directory"
printf '[{"role": "user", "content": "Hello there"}]' >"$TMP/t1.json"
n1=$("$BIN" template "$M" --chat-template "$L32" --date 2026-03-14 --messages "$TMP/t1.json" --add-generation-prompt \
    | "$BIN" tokenize "$M" --ids | wc -w)
grep -q "^prompt: $n1 tokens" "$TMP/ce1" && ok || bad "turn 1 prefilled other than the $n1 tokens of the rendered template: $(head -2 "$TMP/ce1")"
chat >"$TMP/c2" 2>/dev/null
cmp -s "$TMP/c1" "$TMP/c2" && ok || bad "chat at temp 0 with a fixed date is not deterministic"
expect 0 "generation:" -- "$BIN" run "$M" --chat -p "Hello there" --chat-template "$L32" --date 2026-03-14 -n 3 --temp 0 --threads 2
# without the file: the llama3 tokenizer's own (Llama-3) template
expect 0 "generation:" -- "$BIN" run "$M" --chat -p "Hello there" -n 2 --temp 0 --threads 2
expect 2 "$TMP/none.jinja" -- "$BIN" run "$M" --chat -p "Hi" --chat-template "$TMP/none.jinja" -n 2
expect 64 "--date expects" -- "$BIN" chat "$M" --date 14.03.2026
# a GGUF carries its template: `tessera quantize` writes tokenizer_config.json's into it
if "$BIN" quantize "$M" "$TMP/l.gguf" --type q8_0 >"$TMP/qz" 2>&1; then
    "$BIN" template "$TMP/l.gguf" --messages "$TMP/hi.json" --add-generation-prompt >"$TMP/g1" 2>"$TMP/ge" || bad "GGUF: $(cat "$TMP/ge")"
    "$BIN" template "$M" --messages "$TMP/hi.json" --add-generation-prompt >"$TMP/g2"
    cmp -s "$TMP/g1" "$TMP/g2" && ok || bad "GGUF template differs from the directory's: $(head -c 200 "$TMP/g1")"
    expect 0 "Today Date: 14 Mar 2026" -- "$BIN" template "$TMP/l.gguf" --chat-template "$L32" --date 2026-03-14 --messages "$TMP/hi.json"
else
    bad "quantize: $(tail -5 "$TMP/qz")"
fi

finish
