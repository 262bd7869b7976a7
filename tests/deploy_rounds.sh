# Shared by the shell tests that deploy through phase 7 (source it after lib.sh). Phase 7
# re-measures a deployment's speed claims in a fresh process; a tiny model's runs last tens of
# microseconds to a few milliseconds, and on a shared 2-core host running the suite two tests
# at a time (and under ASan) a re-measurement can come out 1.5-4x slower with no other process
# visible in /proc/stat (CI logs: decode 91.5k against a claimed 137k tok/s; TTFT 9.6 against
# 2.4 ms, all three attempts). So an honest claim is expected to be reproduced in most
# deploy-then-evaluate rounds, not in every one: a claim FAIL gets up to two more rounds, each
# re-measuring the claims (`deploy --phases 4-6` into the same directory, REDEPLOY_ARGS) right
# before evaluating, and passes when one of them is honest. An inflated claim fails every time
# (test_deploy.sh); an idle machine passes the first round in most runs (docs/deploy.md).
REDEPLOY_ARGS=(--threads 1)

# honest DIR: every FAIL or WARN in DIR/phase7.json is phase 0's "not compared" (no HF goldens
# for a synth model), a speed claim slower than claimed but within the floor (a WARN), or a
# claim the evaluator could not reproduce while other processes held the CPU (it says so).
honest() {
    python3 - "$1" <<'PY'
import json, sys
p7 = json.load(open(sys.argv[1] + "/phase7.json"))
def excused(c):
    t = c["check"]
    if "run `tessera eval` again on an idle machine" in t: return True
    return c["result"] == "WARN" and (t.startswith("phase 0 not compared with Hugging Face") or "within the floor" in t)
bad = [c["check"] for c in p7["checks"] if c["result"] != "OK" and not excused(c)]
if bad: print("note: not excused:", *bad, sep="\n  ", file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}
# eval_ok DIR [ARGS]: tessera eval passes, within those rules.
eval_ok() {
    local d=$1 out rc try model
    shift
    for try in 1 2 3; do
        if [ "$try" -gt 1 ]; then
            model=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["model"]["dir"])' "$d/manifest.json")
            "$BIN" deploy "$model" --phases 4-6 --out "$d" "${REDEPLOY_ARGS[@]}" >/dev/null 2>&1 </dev/null \
                || { bad "re-measuring the claims of $d failed"; return; }
        fi
        rm -f "$d/phase7.json" # a verdict of an earlier run must not stand in for this one
        out=$("$BIN" eval "$d" --threads 2 "$@" 2>&1 </dev/null)
        rc=$?
        if [ "$rc" -eq 0 ] || { { [ "$rc" -eq 8 ] || [ "$rc" -eq 9 ]; } && honest "$d" 2>/dev/null; }; then
            ok
            return
        fi
        [ "$rc" -eq 8 ] || break # only a claim FAIL gets another round
    done
    honest "$d"
    bad "eval $d $* -> exit $rc (3 rounds): $(tail -30 <<<"$out")"
}
# deploy_ok DIR PATTERN ARGS: tessera deploy ARGS passes (exit 0), or its phase 7 fails only on
# speed claims and a later round passes as eval_ok; its output has PATTERN.
deploy_ok() {
    local d=$1 pat=$2 out rc
    shift 2
    rm -f "$d/phase7.json"
    out=$("$BIN" deploy "$@" 2>&1 </dev/null)
    rc=$?
    if ! grep -qF -- "$pat" <<<"$out"; then bad "deploy $* -> output lacks '$pat': $(tail -30 <<<"$out")"
    elif [ "$rc" -eq 0 ] || { [ "$rc" -eq 8 ] && honest "$d" 2>/dev/null; }; then ok
    elif [ "$rc" -eq 8 ] && grep -q "phase 7: the evaluator's verdict is FAIL" <<<"$out"; then eval_ok "$d"
    else bad "deploy $* -> exit $rc: $(tail -30 <<<"$out")"; fi
}

