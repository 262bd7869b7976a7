#!/usr/bin/env bash
# The suite stands on its own: TS_REALDATA is the tree the build unpacked from
# tests/fixtures/shared (not the team's shared folder beside the clone), every file in it is the
# one recorded in SHA256SUMS and nothing else is there, no test names that folder, and no committed fixture
# exceeds 4 MB.
set -u
NAME=fixtures
source "$(dirname "$0")/lib.sh"

SUMS="$FIX/shared/SHA256SUMS"
build=$(realpath "$(dirname "$BIN")")
shared=$(realpath "$SHARED" 2>/dev/null)
[ -n "${TS_REALDATA:-}" ] && ok || bad "TS_REALDATA is not set by ctest"
case "$shared/" in
    "$build"/*) ok ;;
    *) bad "TS_REALDATA=$SHARED resolves to $shared, outside the build tree $build" ;;
esac

if out=$(cd "$SHARED" && sha256sum --check --strict --quiet "$SUMS" 2>&1); then ok; else
    bad "unpacked fixtures differ from $SUMS (a changed fixture needs its SHA256SUMS line; an edited copy: remove $SHARED and rebuild): $out"
fi
# Every unpacked file is listed: a file the build left behind from an older archive would let
# a test pass on data the repository no longer holds.
extra=$(comm -13 <(awk '{print $2}' "$SUMS" | sort) <(cd "$SHARED" && find . -type f | sed 's|^\./||' | sort))
[ -z "$extra" ] && ok || bad "files in $SHARED not in SHA256SUMS (stale? remove $SHARED and rebuild): $extra"
[ "$(wc -l <"$SUMS")" -ge 15 ] && ok || bad "SHA256SUMS lists only $(wc -l <"$SUMS") files"

src=$(dirname "$0")
up=".."
hits=$(grep -lnF "$up/shared" "$src"/*.c "$src"/*.h "$src"/*.sh)
[ -z "$hits" ] && ok || bad "tests that read the shared folder beside the clone instead of TS_REALDATA: $hits"
big=$(find "$FIX" -type f -size +4M)
[ -z "$big" ] && ok || bad "fixtures over 4 MB (compress them, tests/fixtures/shared/README.md): $big"

finish
