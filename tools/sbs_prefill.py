#!/usr/bin/env python3
"""Prefill side by side on one shared machine: llama.cpp's llama-bench and tessera bench on the
same GGUF files, 2 threads, in rotating order, ROUNDS rounds. Each run waits (up to WAIT
seconds) until the other processes use under 20% of the cores, and records the share of the two
cores it got itself: its CPU time / (2 x wall time). On a quiet machine that is 0.85-0.9 for a
tessera bench (its loading and probes are partly one thread) and about 0.95 for llama-bench; a
run under --min-share-tessera (0.8) / --min-share-llama (0.9) ran beside someone else's work (on
this host llama.cpp's spinning threads then lose up to 10x, tessera's about 2x) and is
repeated, up to RETRIES times, then kept as it is (the summary leaves such rounds out).
Arms: "llama", and "tessera" or "tessera:ENV=VALUE[,ENV=VALUE]" (e.g.
tessera:TESSERA_Q_PREFILL=f32), or "bin=PATH" for another tessera binary.
Usage: tools/sbs_prefill.py OUT --file NAME=FILE.gguf [--file ...] [--arm ARM ...]
       [--rounds 3] [--prefill 128,512] [--tessera build/tessera] [--llama-bench PATH]
Results: OUT/rROUND-NAME-ARMTAG.json (the tools' JSON with "share" added) and OUT/log;
tools/sbs_prefill_summary.py OUT prints the table."""
import argparse, json, os, resource, subprocess, sys, time


def busy():
    def rd():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:8]]
        return sum(v), v[3] + v[4]
    a, ai = rd()
    time.sleep(1)
    b, bi = rd()
    return 100 * ((b - a) - (bi - ai)) // max(1, b - a)


def run_once(cmd, env):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    wall = time.time() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return p.returncode, p.stdout, cpu / (2 * wall), wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--file", action="append", required=True)
    ap.add_argument("--arm", action="append")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prefill", default="128,512")
    ap.add_argument("--tessera", default="build/tessera")
    ap.add_argument("--llama-bench", default="llama-bench")
    ap.add_argument("--wait", type=int, default=60)
    ap.add_argument("--retries", type=int, default=3)
    ap.add_argument("--min-share-tessera", type=float, default=0.8)
    ap.add_argument("--min-share-llama", type=float, default=0.9)
    a = ap.parse_args()
    arms = a.arm or ["tessera", "llama"]
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "log"), "a")
    for r in range(1, a.rounds + 1):
        for spec in a.file:
            name, path = spec.split("=", 1)
            for i in range(len(arms)):
                arm = arms[(i + r) % len(arms)]
                env = dict(os.environ)
                tessera = a.tessera
                tag = arm
                if arm == "llama":
                    cmd = [a.llama_bench, "-m", path, "-t", "2", "-p", a.prefill, "-n", "0", "-r", "2", "-o", "json"]
                else:
                    _, _, opts = arm.partition(":")
                    for kv in filter(None, opts.split(",")):
                        k, v = kv.split("=", 1)
                        if k == "bin":
                            tessera = v
                        else:
                            env[k] = v
                    tag = "".join(ch if ch.isalnum() else "_" for ch in arm)
                    cmd = [tessera, "bench", path, "--prefill", a.prefill, "--decode", "16", "--gen", "1", "--trials", "2",
                           "--threads", "2", "--json"]
                for attempt in range(a.retries + 1):
                    t0 = time.time()
                    while time.time() - t0 < a.wait:
                        b = busy()
                        if b < 20:
                            break
                    rc, outp, share, wall = run_once(cmd, env)
                    ok = rc == 0 and share >= (a.min_share_llama if arm == "llama" else a.min_share_tessera)
                    log.write(f"{time.strftime('%H:%M:%S')} r{r} {name} {arm} others-busy-before {b}% "
                              f"share {share:.2f} wall {wall:.1f}s rc {rc}{'' if ok else ' (repeat)'}\n")
                    log.flush()
                    if ok or attempt == a.retries:
                        break
                try:
                    j = json.loads(outp)
                except Exception:
                    continue
                if isinstance(j, list):
                    j = {"llama": j}
                j["share"] = round(share, 3)
                j["share_ok"] = ok
                with open(os.path.join(a.out, f"r{r}-{name}-{tag}.json"), "w") as f:
                    json.dump(j, f)


main()
