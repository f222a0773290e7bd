#!/usr/bin/env python3
"""serve_bench.py — swarm serve measured from an HTTP client on loopback. experiments/
(run by experiments/serve_bench.sh)

usage: serve_bench.py PORT REQUESTS CLIENTS SECONDS MAX_TOKENS PROMPT
(a) REQUESTS streamed greedy completions one at a time: the client's time to first token
    (request sent to the first content chunk read) beside the server's own figure for the same
    request (timings.ttft_ms: request parsed to first token sampled); their difference is what
    HTTP costs. (b) CLIENTS streaming clients for SECONDS: aggregate tokens/s.
Prints one JSON line.
"""
import http.client, json, statistics, sys, threading, time

port, nreq, ncli, secs, maxt, prompt = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                        float(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
body = json.dumps({"prompt": prompt, "max_tokens": maxt, "temperature": 0, "stream": True,
                   "stream_options": {"include_usage": True}})

def one(conn):
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    first, usage, timings, buf = None, None, None, b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            d = ev[6:]
            if d == b"[DONE]":
                continue
            j = json.loads(d)
            if j["choices"] and j["choices"][0]["text"] and first is None:
                first = time.perf_counter() - t0
            if "usage" in j:
                usage, timings = j["usage"], j["timings"]
    return first * 1e3, timings["ttft_ms"], usage["completion_tokens"]

conn = http.client.HTTPConnection("127.0.0.1", port)
one(conn)  # warm: the connection, the caches
cli, srv = [], []
for _ in range(nreq):
    c, s, _ = one(conn)
    cli.append(c); srv.append(s)
diff = [c - s for c, s in zip(cli, srv)]
tokens = [0] * ncli
def client(i):
    cn = http.client.HTTPConnection("127.0.0.1", port)
    end = time.perf_counter() + secs
    while time.perf_counter() < end:
        tokens[i] += one(cn)[2]
t0 = time.perf_counter()
th = [threading.Thread(target=client, args=(i,)) for i in range(ncli)]
[t.start() for t in th]; [t.join() for t in th]
wall = time.perf_counter() - t0
q = lambda v, p: sorted(v)[min(len(v) - 1, int(p * len(v)))]
print(json.dumps({"requests": nreq, "client_ttft_ms_p50": round(statistics.median(cli), 3),
                  "server_ttft_ms_p50": round(statistics.median(srv), 3),
                  "http_overhead_ms_p50": round(statistics.median(diff), 3),
                  "http_overhead_ms_p90": round(q(diff, 0.9), 3),
                  "clients": ncli, "tokens": sum(tokens), "wall_s": round(wall, 3),
                  "tok_s": round(sum(tokens) / wall, 1)}))
