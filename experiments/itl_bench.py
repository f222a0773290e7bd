# itl_bench.py — inter-token latency of one stream, alone and with a long prompt arriving
# mid-stream (issue 21), against a running `swarm serve --parallel 2`. experiments/itl_bench.sh
# starts the server.
#
#   usage: python3 itl_bench.py PORT [STREAM_TOKENS] [PROMPT_TOKENS] [AFTER] [WAIT_S]
# Prints one JSON line: the stream's ITL p50/p95/max alone and with the prompt (the gaps
# between the stream's tokens from the prompt's sending to the stream's end), the prompt's
# time to its first token and digest when it finished within WAIT_S (0) of the stream's end, and
# the batching counters over the stream (passes, rows, prompt chunks cut).
import http.client, json, sys, threading, time

port = int(sys.argv[1])
n_stream = int(sys.argv[2]) if len(sys.argv) > 2 else 120
want = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
after = int(sys.argv[4]) if len(sys.argv) > 4 else 30
H = {"Content-Type": "application/json"}

def post(body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    c.request("POST", "/v1/completions", body=json.dumps(body), headers=H)
    r = c.getresponse()
    j = json.loads(r.read())
    c.close()
    if r.status != 200:
        raise SystemExit(f"{r.status} {j}")
    return j

def stream(body, times, on_token):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    c.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}), headers=H)
    r = c.getresponse()
    last = None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        j = json.loads(line[6:])
        if j.get("choices") and j["choices"][0].get("text"):
            times.append(time.monotonic())
            on_token(len(times))
        last = j
    c.close()
    return last

SENT = ("The old lighthouse keeper climbed the stairs every evening, counting the steps, "
        "listening to the sea, and wondering whether the ships out there knew his name. ")
n = post({"prompt": SENT, "max_tokens": 1, "temperature": 0,
          "cache_prompt": False})["usage"]["prompt_tokens"]
long_text = SENT * max(1, round(want / n))
A = {"prompt": "Once upon a time", "max_tokens": n_stream, "temperature": 0,
     "ignore_eos": True, "cache_prompt": False}

def counters():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    m = c.getresponse().read().decode()
    c.close()
    return {l.split()[0][len("swarm_serve_batch_"):-len("_total")]: int(l.split()[1])
            for l in m.splitlines() if l.startswith("swarm_serve_batch_")}

def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]

def run(with_prompt):
    times, sent, res = [], [], {}
    c0 = counters()
    def fire(k):
        if with_prompt and k == after and not sent:
            sent.append(time.monotonic())
            def go():
                t0 = time.monotonic()
                j = post({"prompt": long_text, "max_tokens": 1, "temperature": 0,
                          "cache_prompt": False})
                res["ttft_s"] = round(time.monotonic() - t0, 2)
                res["prompt_tokens"] = j["usage"]["prompt_tokens"]
                res["digest"] = j["timings"].get("logits_digest")
            th = threading.Thread(target=go, daemon=True)
            th.start()
            sent.append(th)
    stream(A, times, fire)
    c1 = counters() # the passes while the stream ran: rows per pass, chunks cut
    res["passes"] = c1.get("passes", 0) - c0.get("passes", 0)
    res["rows"] = c1.get("rows", 0) - c0.get("rows", 0)
    res["cut_chunks"] = c1.get("cut_chunks", 0) - c0.get("cut_chunks", 0)
    t_from = sent[0] if sent else times[after - 1]
    gaps = [(b - a) * 1e3 for a, b in zip(times, times[1:]) if a >= t_from]
    if sent: # the prompt's rest after the stream ends is not this figure: wait a little only
        sent[1].join(float(sys.argv[5]) if len(sys.argv) > 5 else 0)
    out = {"p50_ms": round(pct(gaps, 0.5), 1), "p95_ms": round(pct(gaps, 0.95), 1),
           "max_ms": round(max(gaps), 1), "gaps": len(gaps)}
    out.update(res)
    return out

print(json.dumps({"alone": run(False), "with_prompt": run(True)}))
