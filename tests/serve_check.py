#!/usr/bin/env python3
"""serve_check.py — HTTP checks against a running swarm serve (loopback): every endpoint streamed
and not, sampling options, stop strings across tokens, the bad-input table, slow clients,
concurrent streams, a client that hangs up, 429. tests/ (used by e2e_serve.sh)

usage: serve_check.py PORT KEY PHASE [PORT2]
Prints "ok NAME" / "FAIL NAME: why" lines; every wait is bounded by a multiple of a duration
measured in this run.
"""
import http.client, json, socket, sys, threading, time

port, key, phase = int(sys.argv[1]), sys.argv[2], sys.argv[3]
AUTH = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}

def check(name, cond, why=""):
    print(("ok " + name) if cond else f"FAIL {name}: {why}", flush=True)

def req(method, path, body=None, headers=AUTH, p=port, raw=None):
    c = http.client.HTTPConnection("127.0.0.1", p, timeout=60)
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    c.request(method, path, body=data, headers=headers)
    r = c.getresponse()
    b = r.read()
    c.close()
    return r.status, dict(r.getheaders()), b

def sse(body, p=port):
    """Streamed request: (status, list of data payloads, text, seconds to first content)."""
    c = http.client.HTTPConnection("127.0.0.1", p, timeout=60)
    t0 = time.monotonic()
    c.request("POST", body.pop("_path", "/v1/completions"), body=json.dumps(body), headers=AUTH)
    r = c.getresponse()
    events, text, first = [], "", None
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: "):
                continue
            d = ev[6:].decode()
            events.append(d)
            if d == "[DONE]":
                continue
            j = json.loads(d)
            for ch in j.get("choices", []):
                piece = ch.get("text") or (ch.get("delta") or {}).get("content") or ""
                if piece and first is None:
                    first = time.monotonic() - t0
                text += piece
    c.close()
    return r.status, events, text, first

def metric(name):
    _, _, b = req("GET", "/metrics")
    for line in b.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None

if phase == "basic":
    st, _, b = req("GET", "/health", headers={})
    h = json.loads(b)
    check("health 200 ok", st == 200 and h["status"] == "ok" and h["workers"] == [], b)
    st, _, b = req("GET", "/v1/models")
    check("models", st == 200 and json.loads(b)["data"][0]["id"] == "tiny", b)
    st, hd, b = req("GET", "/", headers={})
    check("page", st == 200 and b"<script>" in b, st)
    check("page names no outside address", b"http://" not in b and b"https://" not in b, "")
    base = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}
    st, _, b = req("POST", "/v1/completions", base)
    j = json.loads(b)
    full = j["choices"][0]["text"]
    check("completion non-streamed", st == 200 and j["usage"]["completion_tokens"] == 24 and
          j["choices"][0]["finish_reason"] == "length" and
          j["usage"]["total_tokens"] == j["usage"]["prompt_tokens"] + 24, b[:300])
    st, ev, text, _ = sse(dict(base, stream=True, stream_options={"include_usage": True}))
    check("completion streamed ends with [DONE]", st == 200 and ev[-1] == "[DONE]", ev[-2:])
    usage = json.loads(ev[-2]).get("usage") if len(ev) > 1 else None
    check("streamed usage", usage and usage["completion_tokens"] == 24, ev[-2:])
    check("streamed text equals non-streamed (greedy)", text == full, (text, full))
    st, ev, t2, _ = sse(dict(base, stream=True))
    check("no usage unless asked", all('"usage"' not in e for e in ev), ev[-2:])
    msgs = {"_path": "/v1/chat/completions", "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 8, "temperature": 0, "stream": True, "logprobs": True, "top_logprobs": 3}
    st, ev, ctext, _ = sse(msgs)
    first = json.loads(ev[0])["choices"][0]["delta"]
    lp = [json.loads(e)["choices"][0]["logprobs"] for e in ev[1:-2]]
    check("chat streamed: role first, logprobs with 3 top",
          st == 200 and first.get("role") == "assistant" and ev[-1] == "[DONE]" and
          all(l and len(l["content"][0]["top_logprobs"]) == 3 for l in lp if l), ev[:2])
    st, _, b = req("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                   "max_tokens": 8, "temperature": 0})
    j = json.loads(b)
    check("chat non-streamed equals streamed", st == 200 and
          j["choices"][0]["message"]["content"] == ctext, (j, ctext))
    # sampling: the same seed, the same text; temperature > 0 with top_p
    s = dict(base, temperature=0.9, top_p=0.9, seed=42)
    a = json.loads(req("POST", "/v1/completions", s)[2])["choices"][0]["text"]
    b2 = json.loads(req("POST", "/v1/completions", s)[2])["choices"][0]["text"]
    check("same seed same text", a == b2, (a, b2))
    # a stop string that spans tokens: cut from the middle of the greedy text
    toks = json.loads(req("POST", "/v1/completions", dict(base, logprobs=0))[2])
    pieces = toks["choices"][0]["logprobs"]["tokens"]
    acc, cut = "", None
    for i, p in enumerate(pieces[:-1]):
        if i >= 3 and len(p) >= 2 and len(pieces[i + 1]) >= 2 and "\ufffd" not in p + pieces[i + 1]:
            cut = p[-2:] + pieces[i + 1][:2]
            break
        acc += p
    if cut:
        want = full[:full.find(cut)]
        for stream in (False, True):
            body = dict(base, stop=[cut, "zzzz-never"])
            if stream:
                st, ev, got, _ = sse(dict(body, stream=True))
                fin = json.loads(ev[-2])["choices"][0]["finish_reason"]
            else:
                j = json.loads(req("POST", "/v1/completions", body)[2])
                got, fin = j["choices"][0]["text"], j["choices"][0]["finish_reason"]
            check(f"stop across tokens (stream={stream})", got == want and fin == "stop",
                  (cut, got, want, fin))
    else:
        check("stop across tokens", False, "no two adjacent pieces of 2+ chars in " + repr(pieces))

elif phase == "bad":
    def bad(name, status, code, method="POST", path="/v1/completions", body=None, raw=None,
            headers=AUTH):
        st, hd, b = req(method, path, body, headers=headers, raw=raw)
        try:
            e = json.loads(b)["error"]
            shape = all(k in e for k in ("message", "type", "param", "code"))
        except Exception:
            e, shape = {}, False
        check("bad: " + name, st == status and shape and (code is None or e.get("code") == code),
              f"status {st}, body {b[:200]}")
        return hd
    bad("malformed JSON", 400, "invalid_json", raw='{"prompt": "x",')
    bad("not an object", 400, "invalid_type", raw='[1,2]')
    bad("temperature a string", 400, "invalid_value", body={"prompt": "x", "temperature": "hot"})
    bad("temperature 3", 400, "invalid_value", body={"prompt": "x", "temperature": 3})
    bad("max_tokens 0", 400, "invalid_value", body={"prompt": "x", "max_tokens": 0})
    bad("prompt a number", 400, "invalid_type", body={"prompt": 5})
    bad("token id outside the vocabulary", 400, "invalid_value", body={"prompt": [1, 99999999]})
    bad("model not a string", 400, "invalid_type", body={"prompt": "x", "model": 5})
    bad("n = 17", 400, "invalid_value", body={"prompt": "x", "n": 17})
    bad("an unknown field", 400, "unknown_parameter", body={"prompt": "x", "frobnicate": 1})
    bad("a tool with a bad name", 400, "invalid_value", path="/v1/chat/completions",
        body={"messages": [{"role": "user", "content": "x"}],
              "tools": [{"type": "function", "function": {"name": "no spaces"}}]})
    bad("stream_options unknown field", 400, "unknown_parameter",
        body={"prompt": "x", "stream": True, "stream_options": {"include_usag": True}})
    bad("messages missing", 400, "invalid_type", path="/v1/chat/completions", body={})
    bad("bad role", 400, "invalid_value", path="/v1/chat/completions",
        body={"messages": [{"role": "wizard", "content": "x"}]})
    bad("stop of 5 strings", 400, "invalid_type", body={"prompt": "x", "stop": list("abcde")})
    bad("prompt longer than the context", 400, "context_length_exceeded",
        body={"prompt": [1] * 300})
    bad("prompt + max_tokens over the context", 400, "context_length_exceeded",
        body={"prompt": "hello", "max_tokens": 256})
    bad("body over the cap", 413, "body_too_large", raw='{"prompt": "' + "a" * 9000 + '"}')
    bad("unknown endpoint", 404, "not_found", method="GET", path="/v2/nothing")
    hd = bad("wrong method", 405, "method_not_allowed", method="GET")
    check("405 names the method allowed", hd.get("Allow") == "POST", hd)
    bad("no API key", 401, "invalid_api_key", body={"prompt": "x"},
        headers={"Content-Type": "application/json"})
    bad("wrong API key", 401, "invalid_api_key", body={"prompt": "x"},
        headers={"Authorization": "Bearer nope"})
    # a slow-loris client: half a request line, then nothing. The server's --timeout drops it;
    # the bound is that timeout (given to the server by the script) times 5.
    tmo = float(sys.argv[4])
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
    s.settimeout(tmo * 5)
    t0 = time.monotonic()
    try:
        closed = s.recv(100) == b""
    except (socket.timeout, ConnectionResetError):
        closed = False
    dt = time.monotonic() - t0
    check("slow-loris client dropped by the timeout", closed and dt >= tmo * 0.5,
          f"closed={closed} after {dt:.2f} s, timeout {tmo}")
    st, _, _ = req("GET", "/health", headers={})
    check("server healthy after the bad inputs", st == 200, st)

elif phase == "load":
    # 16 streaming clients for a duration derived from one request's measured time.
    one = {"prompt": "The", "max_tokens": 32, "temperature": 0.7, "seed": 1, "stream": True}
    t0 = time.monotonic()
    st, ev, _, _ = sse(dict(one))
    d = time.monotonic() - t0
    dur = min(8.0, max(2.0, 20 * d))
    errors, counts = [], [0] * 16
    def client(i):
        end = time.monotonic() + dur
        while time.monotonic() < end:
            try:
                st, ev, text, _ = sse(dict(one, seed=i))
                if st != 200 or ev[-1] != "[DONE]":
                    errors.append((i, st, ev[-1:]))
                counts[i] += 1
            except Exception as e:
                errors.append((i, repr(e)))
    t0 = time.monotonic()
    th = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    [t.start() for t in th]
    [t.join() for t in th]
    wall = time.monotonic() - t0
    n = sum(counts)
    print(f"load: 16 clients, {dur:.1f} s (one request alone {d*1e3:.1f} ms), {n} requests, "
          f"{n * 32 / wall:.0f} tok/s aggregate")
    check("16 concurrent streaming clients, no error", not errors and min(counts) > 0,
          (errors[:3], counts))
    act = metric("swarm_serve_sessions_active")
    check("sessions back to 0 after the load", act == 0, act)
    # a client that hangs up mid-stream: its session ends (metrics) long before max_tokens
    before = metric("swarm_serve_generated_tokens_total")
    long_req = {"prompt": "The", "max_tokens": 200, "temperature": 0, "stream": True}
    c = socket.create_connection(("127.0.0.1", port))
    body = json.dumps(long_req).encode()
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
              key.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: " +
              str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data: ") < 3:
        got += c.recv(4096)
    c.close()
    t0 = time.monotonic()
    bound = max(1.0, 50 * d)  # 50 requests' worth: generous on a loaded machine
    while metric("swarm_serve_sessions_active") != 0 and time.monotonic() - t0 < bound:
        time.sleep(0.01)
    freed = time.monotonic() - t0
    gen = metric("swarm_serve_generated_tokens_total") - before
    check("a hung-up client frees its session", metric("swarm_serve_sessions_active") == 0,
          f"after {freed:.2f} s")
    check("a hung-up client's generation stops early", gen < 200, f"{gen} tokens generated")
    print(f"hang-up: session freed {freed*1e3:.1f} ms after close, {gen:.0f} of 200 tokens made")

elif phase == "busy":
    # a server with 1 slot and 1 queue place: a third concurrent request gets 429
    p2 = int(sys.argv[4])
    hold = {"prompt": "The", "max_tokens": 2000, "temperature": 0, "stream": True}
    socks = []
    for _ in range(2):
        c = socket.create_connection(("127.0.0.1", p2))
        body = json.dumps(hold).encode()
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        socks.append(c)
    socks[0].recv(100)  # the first is generating
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10:
        _, _, b = req("GET", "/health", headers={}, p=p2)
        h = json.loads(b)
        if h["active"] + h["queued"] == 2:
            break
        time.sleep(0.01)
    st, hd, b = req("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2}, p=p2,
                    headers={"Content-Type": "application/json"})
    check("429 when slots and queue are full", st == 429 and "Retry-After" in hd and
          json.loads(b)["error"]["code"] == "server_busy", (st, hd, b[:200]))
    def wait_health(pred):
        t0 = time.monotonic()
        while time.monotonic() - t0 < 10:
            h = json.loads(req("GET", "/health", headers={}, p=p2)[2])
            if pred(h):
                return h
            time.sleep(0.005)
        return h
    socks[1].close()  # the queued client goes: its place is free at once, not when a slot frees
    h = wait_health(lambda h: h["queued"] == 0)
    check("a queued client that hangs up leaves the queue",
          h["queued"] == 0 and h["active"] == 1, h)
    socks[0].close()
    h = wait_health(lambda h: h["active"] == 0)
    check("the generating client that hangs up frees its slot", h["active"] == 0, h)
