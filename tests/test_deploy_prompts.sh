#!/usr/bin/env bash
# The prompts of phases 3-5 and the evaluator (src/deploy/prompts.h): a model with a real
# tokenizer deploys on the built-in texts and every report says so, with the decisive /
# competitive class counts; a model without one (or with a tokenizer larger than its
# vocabulary) on random ids, saying why; `tessera eval` re-tokenizes the deployment's prompt
# source itself, and warns when the tokenizer is gone or encodes differently. Tiny shapes, one
# thread, no performance claims to re-measure except in the one phases 3-5 run.
set -u
NAME=deploy_prompts
source "$(dirname "$0")/lib.sh"
SMALL=(--threads 1 --prefill 32 --prefill-sizes 16,48 --decode-contexts 16,40 --decode-tokens 4)
TOK="$SHARED/tokenizers/qwen3"

# A tiny Qwen3 with the real Qwen3 tokenizer: phases 3-5 on text.
"$BIN" synth qwen3-0.6b-tiny "$TMP/q" --seed 5 --vocab 151936 --tokenizer "$TOK" >/dev/null 2>&1 || bad "synth with tokenizer"
expect 0 "phase 3 (model): 6 text prompts" -- "$BIN" deploy "$TMP/q" --phases 3-5 --out "$TMP/qd" "${SMALL[@]}"
python3 - "$TMP/qd" <<'PY' && ok || bad "phases 3-5 on a model with a tokenizer do not report text prompts and their classes"
import json, sys
d = sys.argv[1]
p3, p4, p5, m = (json.load(open(f"{d}/{n}.json")) for n in ("phase3", "phase4", "phase5", "manifest"))
src = p3["prompt_source"]
assert src["kind"] == "text" and src["vocab"] == 151669 and src["bos"] is None and len(src["fingerprint"]) == 16, src
assert p4["prompt_source"] == src and p5["prompt_source"] == src, (p4["prompt_source"], p5["prompt_source"])
names = ["english_prose", "python_code", "dialogue", "numbers_dates_prices", "french", "chinese"]
assert [r["text"] for r in p3["prompts"]] == names, [r["text"] for r in p3["prompts"]]
assert [r["text"] for r in p4["oracle_prompts"]] == names, p4["oracle_prompts"]
lock3, lock5 = [r["text"] for r in p3["lockstep"]], [r["text"] for r in p5["lockstep"]]
assert len(set(names + lock3 + lock5)) == 22, (lock3, lock5)  # each test on texts of its own
def pair(x): return x["decisive"] + x["competitive"]
for p, rows in ((p3, p3["prompts"]), (p4, p4["oracle_prompts"])):
    c = p["classes"]
    assert c["decisive_prob"] == 0.5 and pair(c["positions"]) == 8 + 16 + 24 + 32 + 48 + 64 and pair(c["prompts"]) == 6, c
    assert c["positions"]["decisive"] == sum(r["decisive"] for r in rows), (c, rows)
    assert all(r["decisive"] + r["competitive"] == r["tokens"] for r in rows), rows
assert p3["classes"]["positions"] == p4["classes"]["positions"] == {"decisive": p3["decisive_positions"],
       "competitive": p3["positions"] - p3["decisive_positions"]}, (p3["classes"], p4["classes"])
for p in (p3, p5):
    c = p["classes"]
    assert pair(c["lockstep_steps"]) == 8 * 32 and pair(c["lockstep_runs"]) == 8, c
    assert all(r["decisive_steps"] + r["competitive_steps"] == 32 for r in p["lockstep"]), p["lockstep"]
    assert pair(c["lockstep_divergences"]) == sum(r["identical_tokens"] < 32 for r in p["lockstep"]), c
assert "lockstep_steps" not in p4["classes"] and "positions" not in p5["classes"]
for n, p in ((3, p3), (4, p4), (5, p5)):
    g = m["gates"][f"phase{n}"]
    assert g["prompt_source"] == src and g["classes"] == p["classes"], n
rep = open(d + "/report.md").read()
assert "## Test prompts" in rep and rep.count("| text (the model's tokenizer, fingerprint " + src["fingerprint"]) == 3, rep
PY

# The evaluator on a phases-3 deployment (no speed claims to re-measure): the same texts,
# re-tokenized here; then with the tokenizer gone, and with another tokenizer in its place.
eval_prompts() { # DIR PATTERN: eval's phase7.json has a prompts check line with PATTERN
    local d=$1 pat=$2
    "$BIN" eval "$d" --threads 1 --seed 4 >"$TMP/eval.log" 2>&1 </dev/null
    grep -qF -- "$pat" "$d/evaluation.md" && ok || bad "eval $d: evaluation.md lacks '$pat': $(grep -i prompt "$d/evaluation.md")"
}
expect 0 "phase 3: PASS" -- "$BIN" deploy "$TMP/q" --phases 3 --out "$TMP/q3" --threads 1
eval_prompts "$TMP/q3" "| OK | prompts: text, re-tokenized with the model's tokenizer as at deployment (fingerprint"
eval_prompts "$TMP/q3" "| OK | phase 3 gate re-derived on new inputs: pass (text prompts, decisive / competitive: positions"
python3 - "$TMP/q3" <<'PY' && ok || bad "phase7.json does not record the re-derived phase 3's prompts"
import json, sys
d = sys.argv[1]
p3, p7 = (json.load(open(f"{d}/{n}.json")) for n in ("phase3", "phase7"))
pr = p7["prompts"]
assert pr["source"] == p3["prompt_source"], (pr["source"], p3["prompt_source"])
c = pr["classes"]["positions"]
assert c["decisive"] + c["competitive"] == 192 and len(pr["prompts"]) == 6 and len(pr["lockstep"]) == 8, pr["classes"]
# seed 4: other texts than the deployment's, from the same table
assert [r["text"] for r in pr["prompts"]] != [r["text"] for r in p3["prompts"]], pr["prompts"]
PY
mv "$TMP/q/tokenizer.json" "$TMP/tokenizer.json.away"
eval_prompts "$TMP/q3" "| WARN | prompts: the deployment ran on text prompts, but now the model has no tokenizer: the gates are re-derived on random token ids"
cp "$SHARED/tokenizers/llama3/tokenizer.json" "$TMP/q/tokenizer.json"
eval_prompts "$TMP/q3" "| WARN | prompts: the model's tokenizer encodes the prompt texts differently than at deployment"
mv "$TMP/tokenizer.json.away" "$TMP/q/tokenizer.json"
# Class counts the rows do not give are caught.
cp -r "$TMP/q3" "$TMP/q3t"
python3 -c "import json,sys; p=sys.argv[1]; r=json.load(open(p)); r['classes']['positions']['decisive'] += 3; json.dump(r, open(p,'w'))" \
    "$TMP/q3t/phase3.json"
eval_prompts "$TMP/q3t" "| FAIL | phase3 classes.positions: recorded"

# No tokenizer (a synth model without --tokenizer): random ids, saying why; eval follows.
"$BIN" synth qwen3-0.6b-tiny "$TMP/r" --seed 5 >/dev/null 2>&1 || bad "synth without tokenizer"
expect 0 "random token ids: the model has no tokenizer" -- "$BIN" deploy "$TMP/r" --phases 3 --out "$TMP/rd" --threads 1
python3 - "$TMP/rd/phase3.json" <<'PY' && ok || bad "phase3.json of a model without a tokenizer does not say random ids"
import json, sys
p3 = json.load(open(sys.argv[1]))
assert p3["prompt_source"] == {"kind": "random ids", "why": "the model has no tokenizer"}, p3["prompt_source"]
assert all(r["text"] == "random ids" for r in p3["prompts"] + p3["lockstep"]), p3["prompts"]
assert sum(p3["classes"]["positions"].values()) == 192, p3["classes"]
PY
grep -qF "| 3 model: prompts and lockstep | random ids: the model has no tokenizer |" "$TMP/rd/report.md" && ok \
    || bad "report.md does not say phase 3 ran on random ids: $(grep -A5 'Test prompts' "$TMP/rd/report.md")"
eval_prompts "$TMP/rd" "| OK | prompts: random token ids, as deployed (the model has no tokenizer)"

# A tokenizer whose vocabulary exceeds the model's (a 256-token fixture beside Qwen3's): random
# ids with the reason, no crash.
mkdir -p "$TMP/big"
ln -s "$FIX/hf/qwen3_qknorm/config.json" "$FIX/hf/qwen3_qknorm/model.safetensors" "$TOK/tokenizer.json" "$TMP/big/"
expect 0 "random token ids: the tokenizer's 151669 tokens exceed the model's vocabulary of 256" -- \
    "$BIN" deploy "$TMP/big" --phases 3 --out "$TMP/bigd" --threads 1
grep -q '"kind": "random ids"' "$TMP/bigd/phase3.json" && ok || bad "phase3.json of the oversized tokenizer does not say random ids"

finish
