#!/usr/bin/env python3
"""serve_cache_bench.py — swarm serve's prompt cache measured from an HTTP client. experiments/

usage: serve_cache_bench.py PORT [PROMPT_TOKENS] [TURNS]
(a) the same prompt of about PROMPT_TOKENS tokens (1000) three times, greedy, 8 tokens each:
    the server's prefill time (timings.prefill_ms: slot took the job -> first token sampled) and
    the positions it ran (timings.prompt_n) for each, and the second's over the first's.
(b) a chat of TURNS turns (10) replayed through /v1/chat/completions with fixed replies (a
    recorded transcript): per turn the prompt's tokens, the new ones (this prompt's tokens less
    the last one's) and those prefilled; the totals and their ratio.
(c) the same chat with the model's own replies sent back (what a chat client does).
Prints one JSON line.
"""
import http.client, json, sys

port = int(sys.argv[1])
want = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
turns = int(sys.argv[3]) if len(sys.argv) > 3 else 10
H = {"Content-Type": "application/json"}

def post(path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    c.request("POST", path, body=json.dumps(body), headers=H)
    r = c.getresponse()
    j = json.loads(r.read())
    c.close()
    if r.status != 200:
        raise SystemExit(f"{path}: {r.status} {j}")
    return j

SENT = ("The old lighthouse keeper climbed the stairs every evening, counting the steps, "
        "listening to the sea, and wondering whether the ships out there knew his name. ")
# grow the text a sentence at a time until /tokenize (with the BOS a completion adds) says it is
# at least `want` tokens: a sentence repeated tokenizes shorter than alone, so counting one
# sentence and multiplying fell short (947 and 982 of 1000)
def count(t):
    return len(post("/tokenize", {"content": t, "add_special": True})["tokens"])
text = SENT * max(1, want // max(1, count(SENT)))
while count(text) < want:
    text += SENT
a = []
for i in range(3):
    j = post("/v1/completions", {"prompt": text, "max_tokens": 8, "temperature": 0,
                                 **({"cache_prompt": False} if i == 0 else {})})
    a.append({"prompt_tokens": j["usage"]["prompt_tokens"],
              "cached_tokens": j["usage"]["prompt_tokens_details"]["cached_tokens"],
              "prompt_n": j["timings"]["prompt_n"], "prefill_ms": round(j["timings"]["prefill_ms"], 2),
              "logits_digest": j["timings"]["logits_digest"]})

QS = ["Hello! Who are you?", "What do you do all day?", "Do you ever get lonely up there?",
      "What is the strangest ship you have seen?", "How do you keep the lamp burning?",
      "What happens in a storm?", "Have you ever saved anyone?", "What do you eat?",
      "Would you ever leave the lighthouse?", "Thank you for talking with me."]
RS = ["I keep the lighthouse on the northern cape.", "I trim the wick and polish the lens.",
      "Sometimes, but the gulls keep me company.", "A ship with black sails and no crew.",
      "With oil, a steady hand and a lot of patience.", "The whole tower shakes and I pray.",
      "Twice: a fisherman and a very wet dog.", "Fish, bread and tea, mostly.",
      "Only when the sea stops needing a light.", "It was a pleasure. Mind the rocks."]

def chat(own):
    msgs = [{"role": "system", "content": "You are a lighthouse keeper."}]
    prev, rows = 0, []
    for t in range(turns):
        msgs.append({"role": "user", "content": QS[t % len(QS)]})
        j = post("/v1/chat/completions", {"messages": msgs, "max_tokens": 24, "temperature": 0})
        np = j["usage"]["prompt_tokens"]
        rows.append({"prompt_tokens": np, "new": np - prev, "prompt_n": j["timings"]["prompt_n"],
                     "prefill_ms": round(j["timings"]["prefill_ms"], 2)})
        prev = np
        reply = j["choices"][0]["message"]["content"] if own else RS[t % len(RS)]
        msgs.append({"role": "assistant", "content": reply})
    new = sum(r["new"] for r in rows)
    pre = sum(r["prompt_n"] for r in rows)
    return {"turns": rows, "new_tokens": new, "prefilled_tokens": pre,
            "prefilled_over_new": round(pre / new, 4)}

out = {"same_prompt": a, "second_over_first_prefill_ms": round(a[1]["prefill_ms"] / a[0]["prefill_ms"], 4),
       "second_over_first_positions": round(a[1]["prompt_n"] / a[0]["prompt_n"], 4),
       "digests_equal": len({x["logits_digest"] for x in a}) == 1,
       "chat_replayed": chat(False), "chat_own_replies": chat(True)}
print(json.dumps(out))
