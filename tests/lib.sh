# Shared by the shell tests: paths from ctest's environment, a fresh scratch directory named
# after the test, pass/fail counters and `expect`. Source it after setting NAME.
BIN=${TS_BIN:-build/tessera}
FIX=${TS_FIXTURES:-tests/fixtures}
SHARED=${TS_SHARED:-../shared}
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

# finish: the summary line and the exit status
finish() {
    echo "$NAME: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
