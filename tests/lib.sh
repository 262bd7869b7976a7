# Shared by the shell tests: paths from ctest's environment, a fresh scratch directory named
# after the test, pass/fail counters, `expect` and `skip`. Source it after setting NAME.
BIN=${TS_BIN:-build/tessera}
FIX=${TS_FIXTURES:-tests/fixtures}
# the unpacked real tokenizers, templates and models (tests/fixtures/shared/README.md)
SHARED=${TS_REALDATA:-build/fixtures-shared}
TMP=${TS_TMP:-/tmp/tessera-tests}/$NAME
rm -rf "$TMP" && mkdir -p "$TMP"
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

# expect CODE PATTERN -- command...: exit code and a stdout/stderr substring (stdin empty)
expect() {
    local code=$1 pat=$2
    shift 3
    local out rc
    out=$("$@" 2>&1 </dev/null)
    rc=$?
    if [ "$rc" -ne "$code" ]; then bad "$* -> exit $rc, expected $code; output: $(tail -40 <<<"$out")"; return; fi
    if [ -n "$pat" ] && ! grep -qF -- "$pat" <<<"$out"; then bad "$* -> output lacks '$pat': $(tail -40 <<<"$out")"; return; fi
    ok
}

# skip REASON: end the test now as skipped (exit 77, ctest's SKIP_RETURN_CODE; the same code
# and "SKIP: " line as th_skip in tests/tharness.h). A failure already counted wins. Only for
# what this machine cannot run (.ci/run accepts a skip only if the reason says "this machine
# lacks the instruction set"), never for a missing fixture: those are committed.
skip() {
    echo "SKIP: $*"
    echo "$NAME: $pass passed, $fail failed"
    [ "$fail" -eq 0 ] && { remove_tmp; exit 77; }
    exit 1
}

# remove_tmp: a passing test's scratch directory goes (its synth checkpoints add up to gigabytes
# across the release and sanitizer builds); a failing one's stays for inspection, and so does
# every one under TS_KEEP_TMP=1
remove_tmp() {
    case "${TS_KEEP_TMP:-0}" in
    0 | "")
        # a server still running could write into the directory while it goes
        for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
        rm -rf "$TMP" 2>/dev/null || { sleep 0.2; rm -rf "$TMP"; } ;;
    esac
}

# finish: the summary line and the exit status
finish() {
    echo "$NAME: $pass passed, $fail failed"
    [ "$fail" -eq 0 ] && remove_tmp
    [ "$fail" -eq 0 ]
}

# kill_at_exit: every pid the test appends to PIDS (serve_start does) is killed when it exits
kill_at_exit() {
    PIDS=()
    trap 'for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done' EXIT
}

# serve_start LOG MODEL ARGS...: starts `tessera serve MODEL --port 0 ARGS` in the background
# (stderr to LOG), waits for its "listening on" line and sets PORT and SPID (also appended to
# the caller's PIDS array, which it kills at exit). A server that does not come up fails the test.
serve_start() {
    local log=$1 model=$2
    shift 2
    "$BIN" serve "$model" --port 0 "$@" 2>"$log" &
    SPID=$!
    PIDS+=("$SPID")
    PORT=
    for _ in $(seq 100); do
        PORT=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\)$|\1|p' "$log" 2>/dev/null)
        [ -n "$PORT" ] && return 0
        kill -0 "$SPID" 2>/dev/null || break
        sleep 0.1
    done
    bad "server did not start: $(cat "$log")"
    finish
    exit 1
}
