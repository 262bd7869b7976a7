#!/usr/bin/env python3
"""Summary of tools/sbs_decode.sh runs: per round, each arm's decode tok/s, its GB/s (the
bench's bytes per token x tok/s, the same weights for llama.cpp) against the best read peak
the round's tessera runs probed, and the ratios against llama.cpp."""
import glob, json, re, sys

ARMS = ["f32", "f32copy", "bf16x3", "avx2", "auto", "copy", "llama"]
for d in sys.argv[1:]:
    rows = {}
    for f in sorted(glob.glob(d + "/r*-*.json")):
        r, m, k = re.match(r".*/r(\d+)-(.+)-(\w+)\.json$", f).groups()
        try:
            j = json.load(open(f))
        except Exception:
            print("unreadable:", f)
            continue
        if k == "llama":
            rows.setdefault((m, int(r)), {})[k] = {"t": [x for x in j if x.get("n_gen", 0) > 0][0]["avg_ts"]}
        else:
            rows.setdefault((m, int(r)), {})[k] = {"t": j["decode_tok_s"], "pk": j["peak_read_gbs"], "b": j["bytes_per_token"]}
    for (m, r), v in sorted(rows.items()):
        b = next((x["b"] for x in v.values() if "b" in x), None)
        pk = max((x["pk"] for x in v.values() if "pk" in x), default=None)
        if not b or not pk:
            continue
        s = f"{m} r{r} read peak {pk:5.1f} GB/s:"
        for k in ARMS:
            if k in v:
                g = v[k]["t"] * b / 1e9
                s += f" {k} {v[k]['t']:6.2f} tok/s {g:5.1f} GB/s ({g / pk:.2f}{' OVER' if g > pk else ''})"
        if "llama" in v:
            s += " | /llama: " + " ".join(f"{k} {v[k]['t'] / v['llama']['t']:.2f}" for k in ARMS if k in v and k != "llama")
        print(s)
