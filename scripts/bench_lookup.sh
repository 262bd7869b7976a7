#!/usr/bin/env bash
# Prompt-lookup speculative decoding, measured (docs/serve.md, "Prompt lookup"): `make bench-lookup`.
#  1. Speed at full acceptance, on a model large enough that decode is bound by reading the
#     weights (synth qwen3-0.6b, 1.2 GB BF16): greedy decoding of random weights falls into a
#     loop within a few tokens, so every draft copied from the loop is accepted. Tokens/s of
#     `tessera run --temp 0` with --lookup 0 and D, alternated, TRIALS times; the ratio is the
#     most lookup can give at that D (a verify pass of 1 + D rows against one decode).
#  2. Acceptance on a real trained model, stories260K (too small to be weight-bound, so its
#     times mean nothing): free-text prompts and input-copying prompts (a story, then its start
#     again), greedy; tokens drafted, accepted, and decode passes per generated token.
#     With the speed-up those acceptances would give on the big model, estimated from 1.: a
#     verify pass of 1 + d rows costs (1 + c d) decode steps, c fitted at full acceptance.
#  3. One request through `tessera serve` on the big model, --lookup 0 and D: tokens/s and the
#     /metrics lookup counters.
# Every run checks that the text with lookup is byte-identical to the text without it.
# Usage: scripts/bench_lookup.sh [BIN] [MODEL_DIR] [TOKENIZER_DIR]
set -eu
BIN=${1:-build/tessera}
M=${2:-bench-models/qwen3-0.6b}
TOK=${3:-build/fixtures-shared/tokenizers/qwen3}
STORIES=${STORIES:-build/fixtures-shared/models/stories260K.gguf}
D=${LOOKUP:-8}
N=${GEN:-96}
TRIALS=${TRIALS:-3}
THREADS=${THREADS:-$(nproc)}
[ -f "$M/model.safetensors" ] || "$BIN" synth qwen3-0.6b "$M" >/dev/null
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# rate OUT ERR: "tokens/s" from run's summary line
rate() { sed -n 's/.*generation: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p' "$1"; }

echo "== 1. full acceptance, $M (synth, weight-bound), $THREADS threads, $N tokens, --lookup $D vs 0 =="
P="The quick brown fox jumps over the lazy dog."
r0=() rd=()
for t in $(seq "$TRIALS"); do
    for L in 0 "$D"; do
        "$BIN" run "$M" --tokenizer "$TOK" -p "$P" -n "$N" --temp 0 --lookup "$L" --threads "$THREADS" --ctx 512 \
            >"$T/out$L" 2>"$T/err$L"
        if [ "$L" = 0 ]; then r0+=("$(rate "$T/err$L")"); else rd+=("$(rate "$T/err$L")"); fi
    done
    cmp -s "$T/out0" "$T/out$D" || { echo "FAIL: --lookup $D changed the text"; exit 1; }
    echo "  trial $t: plain ${r0[-1]} tok/s, lookup ${rd[-1]} tok/s; $(grep '^lookup:' "$T/err$D")"
done
read -r m0 md < <(python3 -c "import statistics as st; print(st.median([$(IFS=,; echo "${r0[*]}")]), st.median([$(IFS=,; echo "${rd[*]}")]))")
# the fitted per-row cost c: generation of N tokens with `steps` passes and `drafted` extra rows
ln=$(grep '^lookup:' "$T/err$D")
steps=$(sed -n 's/lookup: \([0-9]*\) decode steps.*/\1/p' <<<"$ln")
drafted=$(sed -n 's/.* \([0-9]*\) tokens drafted.*/\1/p' <<<"$ln")
c=$(python3 -c "
m0, md, n, s, d = $m0, $md, $N, $steps, $drafted
# time per token: 1/md = (s + c d) / (n m0)  ->  c = (n m0 / md - s) / d
print('%.3f' % max(0.0, (n * m0 / md - s) / d))")
echo "  median: plain $m0 tok/s, lookup $md tok/s: x$(python3 -c "print('%.2f' % ($md / $m0))") at full acceptance;"\
     "a draft row costs c = $c decode steps"

echo "== 2. acceptance on stories260K (trained), greedy, --lookup $D =="
python3 - "$BIN" "$STORIES" "$D" "$c" <<'PY'
import re, subprocess, sys
bin_, m, D, c = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
story = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
         "One day, she saw a big red ball under a tree. She ran to the ball and picked it up. ")
work = {
    "free text": ["Once upon a time", "Tom and Sue went to the beach", "The little cat was sad because",
                  "Mom and Dad took Tim to the zoo."],
    "copying (a story, then its start again)": [story + "\n" + story[:50], "Repeat: " + story + "\nAgain: " + story[:30],
                                                story + story + story[:20]],
}
for kind, prompts in work.items():
    n = s = d = a = 0
    for p in prompts:
        runs = {}
        for look in ("0", D):
            r = subprocess.run([bin_, "run", m, "-p", p, "-n", "200", "--temp", "0", "--threads", "1", "--lookup", look],
                               capture_output=True)
            runs[look] = r
        if runs["0"].stdout != runs[D].stdout:
            print("FAIL: --lookup changed the text of %r" % p[:40]); sys.exit(1)
        err = runs[D].stderr.decode()
        g = int(re.search(r"generation: (\d+) tokens", err).group(1))
        m_ = re.search(r"lookup: (\d+) decode steps, (\d+) tokens drafted, (\d+) accepted", err)
        st, dr, ac = map(int, m_.groups()) if m_ else (g, 0, 0)
        n += g; s += st; d += dr; a += ac
    print("  %-42s %4d tokens in %4d passes (%.2f tokens/pass), %4d drafted, %4d accepted (%2.0f%%); "
          "estimated on the big model: x%.2f" % (kind, n, s, n / s, d, a, 100.0 * a / max(d, 1), n / (s + c * d)))
PY

echo "== 3. through tessera serve (the same big model, one request of $N tokens, greedy): tokens/s =="
for L in 0 "$D"; do
    "$BIN" serve "$M" --tokenizer "$TOK" --port 0 --threads "$THREADS" --ctx 512 --lookup "$L" --quiet 2>"$T/serve$L.log" &
    spid=$!
    port=
    for _ in $(seq 300); do
        port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\)$|\1|p' "$T/serve$L.log")
        [ -n "$port" ] && break
        sleep 0.1
    done
    python3 - "$port" "$N" "$L" "$T/text$L" <<'PY'
import json, sys, time, urllib.request
port, n, look, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
body = {"prompt": "The quick brown fox jumps over the lazy dog.", "max_tokens": n, "temperature": 0}
q = urllib.request.Request("http://127.0.0.1:%s/v1/completions" % port, data=json.dumps(body).encode())
t = time.time()
j = json.load(urllib.request.urlopen(q, timeout=600))
dt = time.time() - t
open(out, "w").write(j["choices"][0]["text"])
m = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port).read().decode()
acc = [l for l in m.split("\n") if l.startswith("tessera_lookup_") and not l.startswith("#")]
print("  --lookup %-2s %5.1f tok/s (request wall time, prefill included)  %s" % (look, j["usage"]["completion_tokens"] / dt, " ".join(acc)))
PY
    kill -TERM "$spid"
    wait "$spid"
done
cmp -s "$T/text0" "$T/text$D" && echo "  identical text" || { echo "FAIL: serve --lookup $D changed the text"; exit 1; }
