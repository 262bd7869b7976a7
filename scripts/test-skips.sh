#!/usr/bin/env bash
# Prints why each test of the last ctest run in BUILD was skipped, one "skipped: NAME: REASON"
# line per "SKIP: " line the test printed (tests/tharness.h, tests/lib.sh). ctest itself
# only says "***Skipped"; .ci/run reads these lines to accept the skips it may accept.
# Usage: scripts/test-skips.sh BUILD  (needs BUILD/junit.xml from ctest --output-junit)
set -euo pipefail
xml="${1:?usage: test-skips.sh BUILD}/junit.xml"
[ -f "$xml" ] || { echo "test-skips: no $xml" >&2; exit 1; }
awk '
function unxml(s) {
    gsub(/&lt;/, "<", s); gsub(/&gt;/, ">", s); gsub(/&quot;/, "\"", s); gsub(/&apos;/, "\047", s)
    gsub(/&amp;/, "\\&", s); return s
}
/<testcase / {
    name = $0; sub(/.*<testcase name="/, "", name); sub(/".*/, "", name)
    skipped = ($0 ~ /status="notrun"/); said = 0
}
skipped && /SKIP: / { line = $0; sub(/.*SKIP: /, "", line); print "skipped: " unxml(name) ": " unxml(line); said = 1 }
/<\/testcase>/ { if (skipped && !said) print "skipped: " unxml(name) ": (no reason printed)"; skipped = 0 }
' "$xml"
