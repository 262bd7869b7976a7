#!/usr/bin/env bash
# Every skill has name/description front matter, and every `tessera COMMAND` it quotes is a
# real subcommand when quoted as code (its --help exits 0), so the skills cannot drift from the CLI.
set -u
BIN=${TS_BIN:-build/tessera}
DIR=$(cd "$(dirname "$0")/.." && pwd)/skills
pass=0 fail=0
for f in "$DIR"/*/SKILL.md; do
    head -1 "$f" | grep -qx -- '---' && grep -q '^name: ' "$f" && grep -q '^description: ' "$f" \
        && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: $f lacks front matter" >&2; }
    name=$(sed -n 's/^name: //p' "$f" | head -1)
    [ "$name" = "$(basename "$(dirname "$f")")" ] && pass=$((pass + 1)) \
        || { fail=$((fail + 1)); echo "FAIL: $f name '$name' differs from its folder" >&2; }
done
for cmd in $(grep -ohE '`tessera [a-z]+' "$DIR"/*/SKILL.md | awk '{print $2}' | sort -u); do
    if "$BIN" "$cmd" --help > /dev/null 2>&1; then pass=$((pass + 1))
    else fail=$((fail + 1)); echo "FAIL: skills quote 'tessera $cmd', which is not a command" >&2; fi
done
# Every --flag in a quoted `tessera CMD ...` span appears in that command's --help.
while IFS= read -r span; do
    cmd=$(awk '{print $2}' <<<"$span")
    help=$("$BIN" "$cmd" --help 2>&1)
    for flag in $(grep -oE -- '--[a-z][a-z0-9-]*' <<<"$span"); do
        if grep -qF -- "$flag" <<<"$help"; then pass=$((pass + 1))
        else fail=$((fail + 1)); echo "FAIL: skills quote '$span' but 'tessera $cmd --help' has no $flag" >&2; fi
    done
done < <(grep -ohE '`tessera [a-z]+[^`]*`' "$DIR"/*/SKILL.md | tr -d '`' | sort -u)
# Every repository path a skill quotes (src/..., docs/..., tools/...) exists, so a moved file
# cannot leave a recipe pointing at nothing.
ROOT=$(dirname "$DIR")
for p in $(grep -ohE '(src|docs|tools|tests|scripts|cli)/[A-Za-z0-9_./-]*[A-Za-z0-9_/]' "$DIR"/*/SKILL.md | sort -u); do
    if [ -e "$ROOT/$p" ]; then pass=$((pass + 1))
    else fail=$((fail + 1)); echo "FAIL: skills quote $p, which is not in the repository" >&2; fi
done
echo "test_skills: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
