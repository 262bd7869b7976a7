#!/usr/bin/env bash
# `make deploy-all`: deploys each preset in turn (a synth checkpoint is written once into the
# models directory), keeps going after a failure, and ends with a table of model, exit code,
# wall time, verdict, peak RSS and phase times, printed and written to OUT/deploy-all.md.
# Exits 1 when any deployment (or its synth) failed, so an unattended run cannot hide one.
set -u

usage() {
    cat >&2 <<'EOF'
usage: scripts/deploy_all.sh [--bin TESSERA] [--models DIR] [--out DIR] [--args "DEPLOY ARGS"] PRESET...
  --bin     the tessera binary (default build/tessera)
  --models  where synth checkpoints live, one directory per preset (default bench-models);
            an existing MODELS/PRESET/config.json is deployed as it is
  --out     deployments go to OUT/PRESET, logs to OUT/PRESET.log, the table to OUT/deploy-all.md
            (default deployments)
  --args    extra arguments for every `tessera deploy` (e.g. "--phases 0-3 --threads 2")
EOF
    exit 64
}

BIN=build/tessera MODELS=bench-models OUT=deployments ARGS=""
while [ $# -gt 0 ]; do
    case "$1" in
    --bin) [ $# -ge 2 ] || usage; BIN=$2; shift 2 ;;
    --models) [ $# -ge 2 ] || usage; MODELS=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || usage; OUT=$2; shift 2 ;;
    --args) [ $# -ge 2 ] || usage; ARGS=$2; shift 2 ;;
    -h | --help) usage ;;
    -*) echo "deploy_all: unknown option $1" >&2; usage ;;
    *) break ;;
    esac
done
[ $# -ge 1 ] || usage
[ -x "$BIN" ] || { echo "deploy_all: $BIN is not an executable (run make build first)" >&2; exit 2; }
mkdir -p "$MODELS" "$OUT" || exit 2

# Peak RSS of a command and all it waits for (deploy spawns `tessera eval` for phase 7): GNU
# time's %M when installed (scripts/setup.sh installs it), else the same rusage read by python.
if /usr/bin/time -f %M -o /dev/null true 2>/dev/null; then
    measured() { local rss=$1; shift; /usr/bin/time -f %M -o "$rss" "$@"; }
else
    measured() {
        python3 - "$@" <<'PY'
import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc if rc >= 0 else 128 - rc)
PY
    }
fi

rows="$OUT/.deploy-all.tsv"
: >"$rows"
read -r -a extra <<<"$ARGS"
for m in "$@"; do
    log="$OUT/$m.log" rss="$OUT/.$m.rss"
    rm -f "$rss"
    start=$(date +%s.%N)
    rc=0
    echo "deploy_all: $m (log $log)"
    if [ ! -f "$MODELS/$m/config.json" ]; then
        "$BIN" synth "$m" "$MODELS/$m" >"$log" 2>&1 || rc=$?
    else
        : >"$log"
    fi
    if [ "$rc" -eq 0 ]; then
        measured "$rss" "$BIN" deploy "$MODELS/$m" --out "$OUT/$m" "${extra[@]}" >>"$log" 2>&1 || rc=$?
    fi
    end=$(date +%s.%N)
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$m" "$rc" "$start" "$end" "$(cat "$rss" 2>/dev/null | tail -1)" "$log" >>"$rows"
    rm -f "$rss"
    echo "deploy_all: $m exit $rc"
done

# The verdict of each row, from this run's files only (an older deployment in the same
# directory must not lend its verdict): phase 7's evaluator verdict when it ran, else the
# gates recorded in manifest.json, else the error the log ends with.
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
python3 - "$rows" "$OUT" "$commit" "$ARGS" <<'PY'
import json, os, platform, re, sys, time
rows_path, out, commit, args = sys.argv[1:5]

def fresh(path, start):
    return os.path.exists(path) and os.path.getmtime(path) >= int(start)

def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None

def verdict(m, rc, start, log):
    d = os.path.join(out, m)
    p7 = os.path.join(d, "phase7.json")
    if fresh(p7, start) and load(p7):
        return load(p7).get("verdict", "?")
    man = os.path.join(d, "manifest.json")
    if fresh(man, start) and load(man):
        gates = load(man).get("gates", {})
        # "pass": null is phase 0's "not compared" (no HF goldens): unverified, not failed
        failed = [k.replace("phase", "") for k, g in gates.items() if g.get("pass") is False]
        unverified = [k.replace("phase", "") for k, g in gates.items() if g.get("pass") is None]
        if failed:
            return "FAIL (phase %s gate)" % ", ".join(failed)
        ph = sorted(int(k.replace("phase", "")) for k in gates)
        span = "%d-%d" % (ph[0], ph[-1]) if ph else "none"
        if rc == 0:
            note = ", phase %s not compared" % ", ".join(unverified) if unverified else ""
            return "gates PASS (phases %s, no eval%s)" % (span, note)
    last = ""
    try:
        for line in open(log, errors="replace"):
            if "error" in line:
                last = line.strip()
    except OSError:
        pass
    # "tessera deploy: error (non-finite value): MSG" -> "ERROR (non-finite value): MSG"
    mt = re.match(r"^tessera \S+: error (\([^)]*\)): (.*)$", last)
    last = "ERROR %s: %s" % mt.groups() if mt else ("ERROR: " + last if last else "ERROR (exit %d)" % rc)
    if len(last) > 120:  # the head says what failed, the tail says why
        last = last[:45] + " ... " + last[-70:]
    return last

def wall(s):
    return "%d min %d s" % (s // 60, s % 60) if s >= 60 else "%.1f s" % s

def rss(kb):
    if not kb:
        return "-"
    b = int(kb) * 1024
    return "%.2f GB" % (b / 1e9) if b >= 1e9 else "%.0f MB" % (b / 1e6)

def phases(log):
    took = {}  # deploy's own "phase N took X s" lines (phase7.json has no wall time)
    try:
        for line in open(log, errors="replace"):
            mt = re.match(r"^phase (\d) took ([0-9.]+) s", line)
            if mt:
                took[int(mt.group(1))] = float(mt.group(2))
    except OSError:
        pass
    return " / ".join(("%.0f" if took[p] >= 10 else "%.1f") % took[p] if p in took else "-" for p in (3, 4, 5, 7))

lines = ["# make deploy-all", "",
         "%s, commit %s, %d cores (%s), deploy args: %s" % (time.strftime("%Y-%m-%d %H:%M"), commit,
                                                            os.cpu_count() or 0, platform.machine(), args or "(none)"),
         "",
         "| model | exit | wall | verdict | peak RSS | phase 3 / 4 / 5 / 7 (s) | log |",
         "|---|---|---|---|---|---|---|"]
failed = 0
for row in open(rows_path):
    m, rc, start, end, kb, log = row.rstrip("\n").split("\t")
    rc, start, end = int(rc), float(start), float(end)
    failed += rc != 0
    cells = [m, str(rc), wall(end - start), verdict(m, rc, start, log), rss(kb), phases(log), log]
    lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
n = len(lines) - 6
lines += ["", "%d of %d deployments failed" % (failed, n) if failed else "all %d deployments exited 0" % n]
text = "\n".join(lines) + "\n"
open(os.path.join(out, "deploy-all.md"), "w").write(text)
print(text, end="")
PY
status=$?
rm -f "$rows"
[ $status -eq 0 ] || { echo "deploy_all: could not write the summary" >&2; exit 2; }
grep -q "^all [0-9]* deployments exited 0" "$OUT/deploy-all.md" || exit 1
