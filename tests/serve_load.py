#!/usr/bin/env python3
"""The client side of tests/test_serve_load.sh (standard library only): many client threads send
a fixed, seeded mix of requests to one or more `tessera serve` servers at once, some leaving in
the middle of a reply. Then every request that completed is sent again alone, not streamed, to
a reference server of the same model that saw none of the load (one slot, no prefix cache, no
lookup), and one in eight once more to the loaded server: text, finish_reason and usage must be
byte-identical to the loaded reply (a streamed reply's chunks concatenated, so streamed == not
streamed too). Each response's shape is checked (ids unique, objects, the role chunk, one
finish_reason, the usage chunk last, [DONE]), and /metrics after the load: no slot held, an
empty queue, 200 for each reply and 499 for each client that left, nothing else, few tokens
generated after the clients left. Last, a lone client leaving (plain and streamed) must free
its slot at once.

    serve_load.py --server NAME=PORT:KIND:REF_PORT ... --seed S --clients C --per N --out DIR

KIND is "story" (a completion model: /v1/completions only) or "chat" (a model with a chat
template: chats and completions); the first server named takes two thirds of the requests.
Writes DIR/requests.json, load.json, alone.json, again.json and summary.json; prints one line
per failure and exits 1 on any."""
import argparse
import json
import os
import random
import signal
import socket
import struct
import sys
import threading
import time

WORDS = ("once upon a time there was a little girl named Lily she loved to play outside in the park "
         "one day she saw a big red ball under a tree and ran to pick it up her mom said be careful "
         "Tom and Sue went to the beach with their dog the sun was warm and the sea was blue they "
         "built a castle of sand and found a shell the cat was sad because it lost its toy so Ben "
         "helped it look in the garden and under the bed").split()
SENTENCES = ["Once upon a time", "Tom and Sue went to the beach", "The little cat was sad because",
             "Lily had a red ball", "One day, a boy named Ben wanted to fly.", "The dog ran to the park."]


class Conn:
    """A minimal HTTP/1.1 client on one socket, kept alive between requests, with the response
    read incrementally (Content-Length or chunked), so a stream can be read event by event and
    dropped at any point."""

    def __init__(self, port):
        self.port = port
        self.sock = None
        self.status = None
        self.buf = b""

    def connect(self):
        self.close()
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=120)
        self.buf = b""

    def close(self, abrupt=False):
        if self.sock is None:
            return
        if abrupt:  # RST instead of FIN: the way a killed client goes
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()
        self.sock = None

    def _more(self):
        d = self.sock.recv(65536)
        if not d:
            raise ConnectionError("the server closed the connection")
        self.buf += d

    def _line(self):
        while b"\r\n" not in self.buf:
            self._more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            self._more()
        d, self.buf = self.buf[:n], self.buf[n:]
        return d

    def send(self, path, body, method="POST"):
        self.status = None  # until this request's status line is in
        if self.sock is None:
            self.connect()
        data = json.dumps(body).encode() if body is not None else b""
        head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % (method, path, self.port)
        if body is not None:
            head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data)
        self.sock.sendall(head.encode() + b"\r\n" + data)
        status = self._line().decode()
        self.status = int(status.split()[1])
        self.headers = {}
        while True:
            h = self._line().decode()
            if not h:
                break
            k, v = h.split(":", 1)
            self.headers[k.strip().lower()] = v.strip()
        self.chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"
        self.left = None if self.chunked else int(self.headers.get("content-length", "0"))
        self.done = False

    def read_some(self):
        """The next piece of the body (b"" at its end)."""
        if self.done:
            return b""
        if not self.chunked:
            d = self._exact(self.left)
            self.done = True
            return d
        n = int(self._line().split(b";")[0], 16)
        if n == 0:
            while self._line():  # trailers
                pass
            self.done = True
            return b""
        d = self._exact(n)
        if self._exact(2) != b"\r\n":
            raise ValueError("bad chunk framing")
        return d

    def read_all(self):
        out = b""
        while True:
            d = self.read_some()
            if not d:
                break
            out += d
        if self.headers.get("connection", "").lower() == "close":
            self.close()
        return out


def make_mix(seed, n_clients, per, servers):
    """The requests, per client, from the seed alone."""
    rng = random.Random(seed)
    names = list(servers)  # the first named takes two thirds
    mix = []
    for c in range(n_clients):
        for k in range(per):
            # the story model takes most (its slots are the queue under test), the chat one the rest
            name = names[0] if len(names) == 1 or rng.random() < 2 / 3 else rng.choice(names[1:])
            kind = servers[name][1]
            chat = kind == "chat" and rng.random() < 0.75
            n_words = rng.choice([0, 1, 1, 2, 5, 12, 30, 60, 120, 200])
            text = " ".join(rng.choice(WORDS) for _ in range(n_words))
            if n_words and rng.random() < 0.4:
                text = rng.choice(SENTENCES) + " " + text
            if not chat and not text:
                text = "" if kind == "story" else "Hi"  # story: BOS alone, a 1-token prompt
            body = {"max_tokens": rng.choice([1, 1, 2, 4, 8, 16, 32, 50, 75, 100])}
            if chat:
                msgs = []
                if rng.random() < 0.3:
                    msgs.append({"role": "system", "content": "You are a storyteller. " + " ".join(rng.sample(WORDS, 8))})
                if rng.random() < 0.3:
                    msgs += [{"role": "user", "content": rng.choice(SENTENCES)},
                             {"role": "assistant", "content": " ".join(rng.sample(WORDS, 6))}]
                msgs.append({"role": "user", "content": text or "Hi"})
                body["messages"] = msgs
                if rng.random() < 0.6:
                    body["chat_template_kwargs"] = {"enable_thinking": False}
            else:
                body["prompt"] = text if rng.random() < 0.85 else [text]
            if rng.random() < 0.5:
                body["temperature"] = 0
            else:
                body["temperature"] = rng.choice([0.5, 0.8, 1.0, 1.3])
                body["seed"] = rng.randrange(1 << 31)
                if rng.random() < 0.5:
                    body["top_k"] = rng.choice([0, 5, 40])
                    body["top_p"] = rng.choice([1, 0.9])
                    body["min_p"] = rng.choice([0, 0.05])
                if rng.random() < 0.25:
                    body["repetition_penalty"] = 1.1
            if rng.random() < 0.25:
                pool = [".", " the", "Lily", "\n", ", ", "said"] if kind == "story" else ["a", "e", "\n", "the", "-f", "ing"]
                body["stop"] = rng.sample(pool, rng.randint(1, 3)) if rng.random() < 0.7 else rng.choice(pool)
            body["stream"] = rng.random() < 0.5
            if body["stream"] and rng.random() < 0.67:
                body["stream_options"] = {"include_usage": True}
            leave = None
            if rng.random() < 0.125:
                # far more tokens than can be produced before the client goes: it leaves mid-reply
                body["max_tokens"] = 1500
                body.pop("stop", None)
                if rng.random() < 0.75:
                    body["stream"] = True
                    leave = {"after_events": rng.randint(1, 3), "abrupt": rng.random() < 0.5}
                else:
                    body["stream"] = False
                    body.pop("stream_options", None)
                    leave = {"after_s": 0.1, "abrupt": rng.random() < 0.5}
            mix.append({"i": len(mix), "client": c, "server": name, "chat": chat,
                        "path": "/v1/chat/completions" if chat else "/v1/completions", "body": body, "leave": leave})
    return mix


def parse_response(req, raw, ctype, errors):
    """(text, finish_reason, usage or None, id) of a whole response, its shape checked."""
    chat, body = req["chat"], req["body"]
    where = "request %d (%s %s)" % (req["i"], req["server"], req["path"])
    if not body.get("stream"):
        j = json.loads(raw)
        if j["object"] != ("chat.completion" if chat else "text_completion"):
            errors.append("%s: object %r" % (where, j["object"]))
        c = j["choices"]
        if len(c) != 1 or c[0]["index"] != 0:
            errors.append("%s: choices %r" % (where, c))
        c = c[0]
        if chat and c["message"]["role"] != "assistant":
            errors.append("%s: role %r" % (where, c["message"]))
        text = c["message"]["content"] if chat else c["text"]
        return text, c["finish_reason"], j["usage"], j["id"]
    if not ctype.startswith("text/event-stream"):
        errors.append("%s: content type %r" % (where, ctype))
    s = raw.decode("utf-8")
    if not s.endswith("data: [DONE]\n\n"):
        errors.append("%s: the stream does not end with [DONE]: %r" % (where, s[-200:]))
    events = [e for e in s.split("\n\n") if e]
    text, fin, usage, ids = "", None, None, set()
    n_fin = 0
    for n, e in enumerate(events[:-1]):
        if not e.startswith("data: "):
            errors.append("%s: event %r" % (where, e[:100]))
            continue
        j = json.loads(e[6:])
        ids.add(j["id"])
        if j["object"] != ("chat.completion.chunk" if chat else "text_completion"):
            errors.append("%s: chunk object %r" % (where, j["object"]))
        want_usage = bool(body.get("stream_options", {}).get("include_usage"))
        if ("usage" in j) != want_usage:
            errors.append("%s: a chunk with%s usage: %r" % (where, "out" if want_usage else "", e))
        if j.get("usage"):
            if usage is not None or j["choices"] or n != len(events) - 2:
                errors.append("%s: the usage chunk is not the last one, alone: %r" % (where, e))
            usage = j["usage"]
            continue
        if usage is not None:
            errors.append("%s: a chunk after the usage chunk" % where)
        c = j["choices"][0]
        if chat:
            if ("role" in c["delta"]) != (n == 0):
                errors.append("%s: chunk %d's delta %r (the role comes first, once)" % (where, n, c["delta"]))
            text += c["delta"].get("content") or ""
        else:
            text += c["text"]
        if c["finish_reason"] is not None:
            n_fin += 1
            fin = c["finish_reason"]
        elif n_fin:
            errors.append("%s: a chunk after the one with finish_reason" % where)
    if n_fin != 1:
        errors.append("%s: %d chunks with a finish_reason" % (where, n_fin))
    if len(ids) != 1:
        errors.append("%s: chunk ids %r (one stream, one id)" % (where, sorted(ids)))
    return text, fin, usage, ids.pop() if ids else None


def run_one(conn, req, errors, leave=None):
    """Sends req on conn; returns its result, or {"left": True} when the client left."""
    body = req["body"]
    conn.status = None
    if leave and "after_s" in leave:
        # not streamed: send, wait a little, go (the server notices while it generates)
        conn.connect()
        data = json.dumps(body).encode()
        conn.sock.sendall(("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                           % (req["path"], len(data))).encode() + data)
        time.sleep(leave["after_s"])
        conn.sock.setblocking(False)
        try:
            got = conn.sock.recv(4096)
        except BlockingIOError:
            got = b""
        conn.close(leave["abrupt"])
        if got and not (TERM and b" 503 " in got.split(b"\r\n")[0]):
            errors.append("request %d: a response came before the client left: %r" % (req["i"], got[:200]))
        return {"left": True}
    conn.send(req["path"], body)
    if TERM and conn.status == 503:  # shutting down: the refusal is whole and says so
        raw = conn.read_all()
        if b'"code":"shutting_down"' not in raw:
            errors.append("request %d: 503 while shutting down: %r" % (req["i"], raw[:300]))
        conn.close()
        return {"refused": 503}
    if leave:
        if conn.status != 200:
            errors.append("request %d: status %d" % (req["i"], conn.status))
        raw = b""
        while raw.count(b"\n\n") < leave["after_events"]:
            d = conn.read_some()
            if not d:
                errors.append("request %d: the stream ended before the client left: %r" % (req["i"], raw[-200:]))
                break
            raw += d
        if b"[DONE]" in raw:
            errors.append("request %d: the stream ended before the client left" % req["i"])
        conn.close(leave["abrupt"])
        return {"left": True}
    raw = conn.read_all()
    if conn.status != 200:
        errors.append("request %d (%s): status %d: %r" % (req["i"], req["path"], conn.status, raw[:300]))
        return {"error": conn.status}
    text, fin, usage, rid = parse_response(req, raw, conn.headers.get("content-type", ""), errors)
    return {"text": text, "finish_reason": fin, "usage": usage, "id": rid}


TERM = False  # --term: the servers are told to stop in the middle of the load


def metrics(port):
    c = Conn(port)
    c.send("/metrics", None, "GET")
    raw = c.read_all().decode()
    c.close()
    out = {}
    for line in raw.split("\n"):
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def settle(port, done, timeout=10):
    """/metrics once done(m) holds, or at the timeout: a response reaches its client a moment
    before the server counts it, and a slot frees at the scheduler's next step."""
    deadline = time.time() + timeout
    while True:
        m = metrics(port)
        if done(m) or time.time() > deadline:
            return m
        time.sleep(0.02)


def count(m, path, status):
    return m.get('tessera_requests_total{endpoint="%s",status="%d"}' % (path, status), 0)


PATHS = ("/v1/completions", "/v1/chat/completions")


def load_phase(mix, servers, n_clients, errors, term_pids):
    """Every client at once, its requests one after another on kept-alive sockets. With
    term_pids, SIGTERM goes to those servers once a third of the replies are in."""
    load = [None] * len(mix)
    lock = threading.Lock()
    n_ok, target = [0], sum(1 for r in mix if not r["leave"]) // 3

    def client(c):
        conns = {n: Conn(servers[n][0]) for n in servers}
        errs = []
        for req in (r for r in mix if r["client"] == c):
            conn = conns[req["server"]]
            try:
                res = run_one(conn, req, errs, req["leave"])
            except Exception as e:
                if TERM and conn.status is None:  # no answer begun: refused, or closed while idle
                    res = {"unserved": repr(e)}
                else:  # a failed request is reported, the client goes on
                    errs.append("request %d (%s %s)%s: %r" % (req["i"], req["server"], req["path"],
                                                              ", its response cut off" if TERM else "", e))
                    res = {"error": repr(e)}
                conn.close()
            load[req["i"]] = res
            if term_pids and "text" in res:
                with lock:
                    n_ok[0] += 1
                    if n_ok[0] == target:
                        for pid in term_pids:
                            os.kill(pid, signal.SIGTERM)
        for cn in conns.values():
            cn.close()
        with lock:
            errors.extend(errs)

    ts = [threading.Thread(target=client, args=(c,)) for c in range(n_clients)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return load


def after_load(mix, servers, errors, summary):
    """Right after the load: no slot held, nothing queued (a slot of a client that left frees at
    the scheduler's next step, so give it a moment), 200 for each reply, 499 for each client
    that left, nothing else."""
    for name, (port, kind, _) in servers.items():
        mine = [r for r in mix if r["server"] == name]
        want = {(p, st): sum(1 for r in mine if r["path"] == p and bool(r["leave"]) == (st == 499))
                for p in PATHS for st in (200, 499)}
        m = settle(port, lambda m: m["tessera_active_slots"] == 0 and m["tessera_queue_depth"] == 0 and
                   all(count(m, *k) == v for k, v in want.items()))
        if m["tessera_active_slots"] != 0 or m["tessera_queue_depth"] != 0:
            errors.append("%s after the load: %d slots active, %d queued" % (name, m["tessera_active_slots"],
                                                                             m["tessera_queue_depth"]))
        for path in PATHS:
            if count(m, path, 200) != want[path, 200] or count(m, path, 499) != want[path, 499]:
                errors.append("%s %s: %d answered 200 and %d left (499), expected %d and %d" % (
                    name, path, count(m, path, 200), count(m, path, 499), want[path, 200], want[path, 499]))
        bad = [k for k in m if k.startswith("tessera_requests_total") and ('status="5' in k or 'status="4' in k)
               and 'status="499"' not in k]
        if bad:
            errors.append("%s: error statuses after the load: %s" % (name, ", ".join("%s %d" % (k, m[k]) for k in bad)))


def alone_phase(mix, servers, load, errors, again_every):
    """The completed requests alone, not streamed, one at a time on the reference server of
    their model, which has seen nothing of the load (one slot, no prefix cache, no lookup:
    plain decoding); with again_every, every again_every-th once more on the loaded server (the
    reference servers and the loaded ones all at once, one request at a time each)."""
    alone, again = [None] * len(mix), [None] * len(mix)
    lock = threading.Lock()

    def one_by_one(name, port, res, every):
        conn = Conn(port)
        errs = []
        done = [r for r in mix if r["server"] == name and "text" in load[r["i"]]]
        for req in done[::every]:
            r = dict(req, body={k: v for k, v in req["body"].items() if k not in ("stream", "stream_options")})
            try:
                res[req["i"]] = run_one(conn, r, errs)
            except Exception as e:
                errs.append("request %d alone on port %d: %r" % (req["i"], port, e))
                conn.close()
        conn.close()
        with lock:
            errors.extend(errs)

    ts = [threading.Thread(target=one_by_one, args=(n, v[2], alone, 1)) for n, v in servers.items()]
    if again_every:
        ts += [threading.Thread(target=one_by_one, args=(n, v[0], again, again_every)) for n, v in servers.items()]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return alone, again


def compare(mix, load, alone, again, errors):
    """Each completed reply (and its repeat) against the reference: text, finish_reason and
    usage; ids unique. Returns how many were identical."""
    same, ids = 0, set()
    for req in mix:
        i, got, ref, ag = req["i"], load[req["i"]], alone[req["i"]], again[req["i"]]
        if "text" not in got or not ref or "text" not in ref or (ag and "text" not in ag):
            continue  # left, refused while stopping, or reported already
        for r in (x for x in (got, ref, ag) if x):
            if r["id"] in ids:
                errors.append("request %d: id %s given twice" % (i, r["id"]))
            ids.add(r["id"])
        u = lambda x: x and {k: v for k, v in x.items() if k != "prompt_tokens_details"}  # cached_tokens: order-dependent
        diff = []
        for what, x in (("under load", got), ("again after the load", ag)):
            if not x:
                continue
            d = [k for k in ("text", "finish_reason") if x[k] != ref[k]]
            if (x["usage"] is not None or x is ag or not req["body"].get("stream")) and u(x["usage"]) != u(ref["usage"]):
                d.append("usage")
            if d:
                diff.append("%s in %s:\n  got:   %r" % (what, ", ".join(d), {k: x[k] for k in ("text", "finish_reason", "usage")}))
        if diff:
            errors.append("request %d (%s %s, %s) != alone: %s\n  alone: %r\n  body: %s" % (
                i, req["server"], req["path"], "streamed" if req["body"].get("stream") else "plain", "; ".join(diff),
                {k: ref[k] for k in ("text", "finish_reason", "usage")}, json.dumps(req["body"])[:300]))
            continue
        us, mt = ref["usage"], req["body"]["max_tokens"]
        # "stop" may come on the last token allowed (a stop string in it); "length" only there
        if us["total_tokens"] != us["prompt_tokens"] + us["completion_tokens"] or us["completion_tokens"] > mt or \
                (ref["finish_reason"] == "length" and us["completion_tokens"] != mt) or \
                ref["finish_reason"] not in ("stop", "length"):
            errors.append("request %d: finish_reason %s with usage %r and max_tokens %d" % (i, ref["finish_reason"], us, mt))
            continue
        same += 1
    return same


def counters(mix, servers, alone, again, errors, summary):
    """The requests sent again answered 200 too, the reference servers answered each one once;
    the clients that left made a few tokens before their slot was freed, not their 1500."""
    for name, (port, kind, ref) in servers.items():
        mine = [r for r in mix if r["server"] == name]
        for pt, res, times in ((port, again, 1), (ref, alone, 0)):
            want = {p: sum(1 for r in mine if r["path"] == p and not r["leave"]) * times +
                    sum(1 for r in mine if r["path"] == p and res[r["i"]]) for p in PATHS}
            m = settle(pt, lambda m: all(count(m, p, 200) == v for p, v in want.items()))
            for p, v in want.items():
                if count(m, p, 200) != v:
                    errors.append("%s %s on port %d: %d answered 200, expected %d" % (name, p, pt, count(m, p, 200), v))
        m = settle(port, lambda m: True)
        gen = sum(x["usage"]["completion_tokens"] * (2 if again[r["i"]] else 1) for r in mine if not r["leave"]
                  for x in (alone[r["i"]],) if x and x.get("usage"))
        waste = m["tessera_generated_tokens_total"] - gen
        left = sum(1 for r in mine if r["leave"])
        summary["servers"][name]["tokens_after_leaving"] = waste
        if waste < 0 or waste > left * 750:
            errors.append("%s: %d tokens generated for the %d clients that left (1500 each asked; most of that means a slot "
                          "went on after its client left)" % (name, waste, left))
        if m["tessera_active_slots"] != 0 or m["tessera_queue_depth"] != 0:
            errors.append("%s at the end: %d slots active, %d queued" % (name, m["tessera_active_slots"],
                                                                         m["tessera_queue_depth"]))


def lone_leavers(servers, errors, summary):
    """One client leaving alone, not streamed and streamed: its slot is free within a moment and
    it has cost a few tokens, not the 2000 it asked for."""
    k499 = 'tessera_requests_total{endpoint="/v1/completions",status="499"}'
    for name, (port, kind, _) in servers.items():
        for k, leave in enumerate(({"after_s": 0.05, "abrupt": False}, {"after_events": 1, "abrupt": True})):
            before = metrics(port)
            req = {"i": -1 - k, "server": name, "chat": False, "path": "/v1/completions", "leave": leave,
                   "body": {"prompt": "Once upon a time", "max_tokens": 2000, "temperature": 0,
                            "stream": "after_events" in leave}}
            try:
                run_one(Conn(port), req, errors, leave)
            except Exception as e:
                errors.append("%s, a lone client leaving: %r" % (name, e))
            t_left = time.time()
            m = settle(port, lambda m: m["tessera_active_slots"] == 0 and m.get(k499, 0) > before.get(k499, 0), 5)
            freed = time.time() - t_left
            n = m["tessera_generated_tokens_total"] - before["tessera_generated_tokens_total"]
            what = "%s, a lone %s client leaving" % (name, "streamed" if "after_events" in leave else "plain")
            summary["servers"][name]["lone_leave_%d" % k] = {"tokens": n, "freed_s": round(freed, 3)}
            if freed > 1 or n > 1000 or m.get(k499, 0) != before.get(k499, 0) + 1:
                errors.append("%s: its slot freed %.2f s after, %d tokens generated, 499 counted %d times" % (
                    what, freed, n, m.get(k499, 0) - before.get(k499, 0)))


def main():
    global TERM
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", action="append", required=True, help="NAME=PORT:KIND:REF_PORT")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--per", type=int, default=8)
    ap.add_argument("--term", help="PID,...: SIGTERM to these (the loaded servers) a third into the load")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    servers = {}
    for s in a.server:
        name, rest = s.split("=")
        port, kind, ref = rest.split(":")
        servers[name] = (int(port), kind, int(ref))
    term_pids = [int(p) for p in a.term.split(",")] if a.term else []
    TERM = bool(term_pids)
    mix = make_mix(a.seed, a.clients, a.per, servers)
    json.dump(mix, open(os.path.join(a.out, "requests.json"), "w"), indent=1)
    errors = []
    summary = {"requests": len(mix), "servers": {n: {
        "requests": sum(1 for r in mix if r["server"] == n), "left": sum(1 for r in mix if r["server"] == n and r["leave"]),
        "streamed": sum(1 for r in mix if r["server"] == n and r["body"].get("stream")),
        "chats": sum(1 for r in mix if r["server"] == n and r["chat"])} for n in servers}}

    t0 = time.time()
    load = load_phase(mix, servers, a.clients, errors, term_pids)
    summary["load_s"] = round(time.time() - t0, 2)
    json.dump(load, open(os.path.join(a.out, "load.json"), "w"), indent=1)
    if not TERM:
        after_load(mix, servers, errors, summary)
    t0 = time.time()
    alone, again = alone_phase(mix, servers, load, errors, 0 if TERM else 8)
    summary["alone_s"] = round(time.time() - t0, 2)
    json.dump(alone, open(os.path.join(a.out, "alone.json"), "w"), indent=1)
    json.dump(again, open(os.path.join(a.out, "again.json"), "w"), indent=1)
    summary["identical"] = compare(mix, load, alone, again, errors)
    summary["completed"] = sum(1 for r in load if "text" in r)
    if TERM:
        # every answer begun was finished: a reply whole, or a 503 saying the server is stopping;
        # the rest found the socket closed before anything was sent back
        kinds = {k: sum(1 for r in load if k in r) for k in ("text", "refused", "unserved", "left")}
        summary.update(kinds)
        if not kinds["text"] or not kinds["refused"] + kinds["unserved"]:
            errors.append("SIGTERM did not land in the middle of the load: %r" % kinds)
        msg = "%d replies whole (%d identical to their run alone), %d refused with 503, %d unanswered, %d left" % (
            kinds["text"], summary["identical"], kinds["refused"], kinds["unserved"], kinds["left"])
    else:
        counters(mix, servers, alone, again, errors, summary)
        lone_leavers(servers, errors, summary)
        msg = "%s; %d of %d completed identical to their run alone" % (", ".join(
            "%s: %d, %d streamed, %d chats, %d left, %d tokens after leaving" % (
                n, v["requests"], v["streamed"], v["chats"], v["left"], v["tokens_after_leaving"])
            for n, v in summary["servers"].items()), summary["identical"], summary["completed"])
    json.dump(summary, open(os.path.join(a.out, "summary.json"), "w"), indent=1)
    for e in errors:
        print("FAIL: " + e, file=sys.stderr)
    print("serve_load%s: %d requests from %d clients: %s; load %.1f s, alone %.1f s" % (
        " (SIGTERM a third in)" if TERM else "", len(mix), a.clients, msg, summary["load_s"], summary["alone_s"]))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
