#!/usr/bin/env python3
"""Summary of tools/sbs_prefill.py runs (OUT/rROUND-NAME-ARM.json): per round and prompt
length, each arm's prefill tok/s (and the share of the two cores the run got) and its ratio to
llama.cpp's on the same file in the same round; then, per arm, the ratios' min-max and median
over the rounds where both runs got their share of the cores (sbs_prefill.py's share_ok; all
rounds if none did), and the best tok/s of each arm."""
import glob, json, re, statistics, sys

for d in sys.argv[1:]:
    rows = {}  # (name, round) -> arm -> ({tokens: tok/s}, share)
    for f in sorted(glob.glob(d + "/r*-*.json")):
        r, m, k = re.match(r".*/r(\d+)-(.+?)-(\w+)\.json$", f).groups()
        try:
            j = json.load(open(f))
            if k == "llama":
                v = {x["n_prompt"]: x["avg_ts"] for x in j["llama"] if x.get("n_prompt", 0) > 0 and x.get("n_gen", 0) == 0}
            else:
                v = {x["tokens"]: x["tok_s"] for x in j["prefill"]}
        except Exception:
            print("unreadable:", f)
            continue
        rows.setdefault((m, int(r)), {})[k] = (v, j.get("share", 1.0), j.get("share_ok", True))
    ratios, best = {}, {}
    for (m, r), v in sorted(rows.items()):
        arms = sorted(a for a in v if a != "llama")
        for p in sorted({p for a in v.values() for p in a[0]}):
            s = f"{m:8s} r{r} pp{p}:"
            for k in arms + ["llama"]:
                if k in v and p in v[k][0]:
                    s += f" {k} {v[k][0][p]:6.1f} ({v[k][1]:.2f})"
                    best[(m, p, k)] = max(best.get((m, p, k), 0), v[k][0][p])
            if "llama" in v and p in v["llama"][0]:
                s += " |"
                for k in arms:
                    if p in v[k][0]:
                        q = v[k][0][p] / v["llama"][0][p]
                        s += f" {k} {q:.2f}"
                        ok = v[k][2] and v["llama"][2]
                        ratios.setdefault((m, p, k), []).append((q, ok))
            print(s)
    for (m, p, k), qs in sorted(ratios.items()):
        good = [q for q, ok in qs if ok]
        use = good or [q for q, _ in qs]
        print(f"{m:8s} pp{p} {k}/llama: {min(use):.2f}-{max(use):.2f} (median {statistics.median(use):.2f}, "
              f"{len(good)} of {len(qs)} rounds with both runs uncontended{'' if good else '; all shown'})"
              f"; best tok/s {best[(m, p, k)]:.1f} vs llama.cpp {best.get((m, p, 'llama'), 0):.1f}")
