#!/usr/bin/env python3
"""Concurrent load on an OpenAI-compatible /v1/completions endpoint, for benchmarks.

Closed loop: CLIENTS threads each send REQUESTS streamed completions one after another (the
next when the previous has ended). Prompts and max_tokens come from a fixed seed, so two servers
given the same arguments get the same requests in the same order per client. Per request it
records the time to first token (the first streamed chunk carrying text), the end, and the
usage the server reported; it prints one JSON object: requests/s, p50/p99 time to first token,
generated tokens/s, and the totals (so two runs can be checked to have done the same work).

  serve_load.py --url http://127.0.0.1:8080 [--clients 8] [--requests 4] [--seed 1]
                [--prompt-words 20:200] [--max-tokens 16:48] [--prefix-words 0]

Standard library only (it also runs where no venv exists).
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse

WORDS = ("river stone market lantern garden copper winter harbor violin meadow orbit candle "
         "thunder pepper library falcon marble ladder cotton island engine puzzle saddle "
         "glacier velvet compass tunnel basket ember quartz").split()


def span(text):
    lo, _, hi = text.partition(":")
    return int(lo), int(hi or lo)


def make_requests(a):
    """The whole plan up front: [client][i] -> (prompt, max_tokens)."""
    rng = random.Random(a.seed)
    prefix = " ".join(rng.choice(WORDS) for _ in range(a.prefix_words))
    plan = []
    for _ in range(a.clients):
        mine = []
        for _ in range(a.requests):
            n = rng.randint(*span(a.prompt_words))
            body = " ".join(rng.choice(WORDS) for _ in range(n))
            prompt = (prefix + "\n" + body) if prefix else body
            mine.append((prompt, rng.randint(*span(a.max_tokens))))
        plan.append(mine)
    return plan


def one(url, prompt, max_tokens, timeout):
    """Streams one completion; returns (ttft_s, total_s, prompt_tokens, completion_tokens)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError("HTTP %d: %s" % (resp.status, resp.read()[:300]))
    ttft, usage, chunks = None, None, 0
    for raw in resp:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        j = json.loads(data)
        if j.get("usage"):
            usage = j["usage"]
        for c in j.get("choices") or []:
            if c.get("text"):
                chunks += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
    total = time.perf_counter() - t0
    conn.close()
    if usage is None:
        raise RuntimeError("no usage in the stream")
    return ttft if ttft is not None else total, total, usage["prompt_tokens"], usage["completion_tokens"]


def pct(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prompt-words", default="20:200")
    ap.add_argument("--max-tokens", default="16:48")
    ap.add_argument("--prefix-words", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=900)
    a = ap.parse_args()
    plan = make_requests(a)
    results, errors = [], []
    lock = threading.Lock()

    def client(mine):
        for prompt, mt in mine:
            try:
                r = one(a.url, prompt, mt, a.timeout)
                with lock:
                    results.append(r)
            except Exception as e:  # report, never hide
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(m,)) for m in plan]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ttft = [r[0] for r in results]
    out = {
        "requests": len(results), "errors": len(errors), "first_errors": errors[:3],
        "wall_s": round(wall, 3),
        "requests_per_s": round(len(results) / wall, 4),
        "ttft_p50_s": round(pct(ttft, 50), 4) if ttft else None,
        "ttft_p99_s": round(pct(ttft, 99), 4) if ttft else None,
        "ttft_mean_s": round(statistics.mean(ttft), 4) if ttft else None,
        "prompt_tokens": sum(r[2] for r in results),
        "completion_tokens": sum(r[3] for r in results),
        "completion_tokens_per_s": round(sum(r[3] for r in results) / wall, 3),
    }
    print(json.dumps(out))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
