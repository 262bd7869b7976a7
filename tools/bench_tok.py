#!/usr/bin/env python3
"""Tokenizer speed: tessera vs Hugging Face `tokenizers`, single thread.

For each tokenizer: load time (ms) of tokenizer.json, and encode throughput (MB/s) over the
test corpus (tests/fixtures/tok/corpus.json, each string encoded separately, repeated to about
--mb MB). tessera is timed by `tessera tokenize PATH --bench` (in-process C timing); HF by
Tokenizer.encode in a loop (which includes Python's per-call cost) and by encode_batch over the
whole corpus (mostly Rust time), both with TOKENIZERS_PARALLELISM=false. Token counts of both are
printed so a mismatch shows. This is a benchmark, not a test: numbers depend on the machine.

Run: /work/venv-hf/bin/python tools/bench_tok.py [--bin build/tessera] [--mb 4] [--trials 3]
"""
import argparse
import json
import os
import subprocess
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("RAYON_NUM_THREADS", "1")

from tokenizers import Tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def hf_bench(path, texts, mb, trials):
    best_load = None
    for _ in range(trials):
        t0 = time.perf_counter()
        tok = Tokenizer.from_file(path)
        dt = (time.perf_counter() - t0) * 1e3
        best_load = dt if best_load is None else min(best_load, dt)
    total = sum(len(t.encode("utf-8")) for t in texts)
    rounds = max(1, int(mb * 1e6 / max(total, 1)))
    for t in texts:  # warm-up
        tok.encode(t, add_special_tokens=False)
    best = best_batch = None
    tokens = 0
    for _ in range(trials):
        tokens = 0
        t0 = time.perf_counter()
        for _ in range(rounds):
            for t in texts:
                tokens += len(tok.encode(t, add_special_tokens=False).ids)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
        # encode_batch: one call per round, so Python's per-call cost is mostly gone (still one
        # thread with TOKENIZERS_PARALLELISM=false)
        t0 = time.perf_counter()
        for _ in range(rounds):
            tok.encode_batch(texts, add_special_tokens=False)
        dt = time.perf_counter() - t0
        best_batch = dt if best_batch is None else min(best_batch, dt)
    return best_load, rounds * total / best / 1e6, rounds * total / best_batch / 1e6, tokens


def hf_bulk(path, text, trials):
    tok = Tokenizer.from_file(path)
    best, n = None, 0
    for _ in range(trials):
        t0 = time.perf_counter()
        n = len(tok.encode(text, add_special_tokens=False).ids)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return len(text.encode("utf-8")) / best / 1e6, n


def ts_bench(binary, path, corpus, mb, trials):
    best = None
    for _ in range(trials):
        out = subprocess.run([binary, "tokenize", path, "--bench", "--file", corpus, "--mb", str(mb)],
                             check=True, capture_output=True, text=True).stdout
        r = json.loads(out)
        if best is None:
            best = r
        else:
            best["load_ms"] = min(best["load_ms"], r["load_ms"])
            best["mb_per_s"] = max(best["mb_per_s"], r["mb_per_s"])
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "tessera"))
    ap.add_argument("--corpus", default=os.path.join(ROOT, "tests", "fixtures", "tok", "corpus.json"))
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--mb", type=int, default=4)
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    with open(args.corpus, encoding="utf-8") as f:
        texts = json.load(f)
    toks = {
        "qwen3": os.path.join(args.shared, "tokenizers", "qwen3", "tokenizer.json"),
        "llama3": os.path.join(args.shared, "tokenizers", "llama3", "tokenizer.json"),
        "smol": os.path.join(ROOT, "tests", "fixtures", "tok", "smol", "tokenizer.json"),
    }
    print(f"corpus: {len(texts)} strings, {sum(len(t.encode()) for t in texts)} bytes, "
          f"repeated to ~{args.mb} MB; best of {args.trials}")
    print(f"{'tokenizer':10} {'load ms (ts / HF)':>20} {'encode MB/s: ts / HF encode / HF batch':>40} "
          f"{'ratios':>12}  tokens per round (ts / HF)")
    # bulk: the corpus joined by newlines and repeated to ~1 MB, encoded in one call by both
    bulk = "\n".join(texts)
    bulk = bulk * max(1, int(1e6 / len(bulk.encode("utf-8"))))
    bulk_path = os.path.join(ROOT, "build", "bench_tok_bulk.txt")
    os.makedirs(os.path.dirname(bulk_path), exist_ok=True)
    with open(bulk_path, "w", encoding="utf-8") as f:
        f.write(bulk)
    rows = []
    for name, path in toks.items():
        if not os.path.exists(path):
            print(f"{name:10} skipped: {path} not found")
            continue
        ts_b = ts_bench(args.bin, path, bulk_path, 1, args.trials)
        hf_b, hf_bn = hf_bulk(path, bulk, args.trials)
        rows.append(f"{name:10} {ts_b['mb_per_s']:8.2f} / {hf_b:8.2f} MB/s  {ts_b['mb_per_s'] / hf_b:5.1f}x  "
                    f"tokens {ts_b['tokens'] // max(ts_b['rounds'], 1)} / {hf_bn}")
        ts = ts_bench(args.bin, path, args.corpus, args.mb, args.trials)
        hf_load, hf_mbs, hf_batch, hf_tokens = hf_bench(path, texts, args.mb, args.trials)
        # token totals cover different round counts; compare per round
        ts_per = ts["tokens"] // max(ts["rounds"], 1)
        hf_per = hf_tokens // max(1, int(args.mb * 1e6 / max(sum(len(t.encode()) for t in texts), 1)))
        print(f"{name:10} {ts['load_ms']:9.1f} / {hf_load:8.1f} {ts['mb_per_s']:14.2f} / {hf_mbs:9.2f} / "
              f"{hf_batch:8.2f} {ts['mb_per_s'] / hf_mbs:6.1f}x {ts['mb_per_s'] / hf_batch:5.1f}x  "
              f"{ts_per} / {hf_per}")
    print(f"\nbulk: one text of {len(bulk.encode('utf-8'))} bytes in one encode call (ts / HF)")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
