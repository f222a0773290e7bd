#!/bin/bash
# e2e_spec.sh — speculative decoding end to end over a tiny random llama model: swarm generate
# with a draft model (the target's Q4_0 copy, and the target itself; argmax drafts when
# seeded: --draft-greedy) and with prompt lookup on the reference, SSD and resident arms
# gives the token ids and logits digest of plain generation (and the parity gate, on with
# speculation, says so); sampled drafts (the default when sampling) pass the replayed parity
# gate, and with --draft-fixed a seed reproduces them; a worker killed mid-
# generation with speculation on changes no token; serve gives the same text with and without
# "speculative", and chat its replies; bad flags and a vocabulary mismatch are refused by
# name. tests/
# Env: SWARM_BIN, SWARM_TEST_TMP. Closes with "e2e_spec: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_spec"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
pids=()
. tests/lib.sh
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done' EXIT

gzip -dc tests/fixtures/tok/llama-spm.gguf.gz > "$T/vocab.gguf"
sw g gen --arch llama --dim 64 --layers 6 --heads 4 --kv-heads 2 --ff 96 \
    --vocab-from "$T/vocab.gguf" --ctx 256 --seed 9 --type q8_0 -o "$T/m.gguf"; expect_rc g 0
sw q quantize "$T/m.gguf" "$T/d.gguf" Q4_0; expect_rc q 0
sw g2 gen --arch llama --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 96 --vocab 500 \
    --ctx 256 --seed 9 -o "$T/v500.gguf"; expect_rc g2 0
P="one two three four, one two three four, one two"

same_as() { # name, reference name: ids, logits digest and count equal
    for k in ids_digest logits_digest tokens_out; do
        eq "$1 $k" "$(jfield "$T/$1.jsonl" $k)" "$(jfield "$T/$2.jsonl" $k)"
    done
    eq "$1 text" "$(cat "$T/$1.out")" "$(cat "$T/$2.out")"
}

for mode in greedy seeded; do
    if [ $mode = greedy ]; then S=(--temp 0); else S=(--temp 0.8 --seed 3); fi
    sw plain_$mode generate "$T/m.gguf" --prompt "$P" -n 40 "${S[@]}" --out "$T/plain_$mode.jsonl"
    expect_rc plain_$mode 0
    for arm in reference ssd resident; do
        A=(--arm $arm)
        [ $arm = resident ] && A+=(--workers 3 --worker-cap 64M --threads 1)
        [ $arm = ssd ] && A+=(--cap 64M)
        for dr in q4 self lookup; do
            case $dr in
                q4) D=(--draft "$T/d.gguf") ;;
                self) D=(--draft "$T/m.gguf" --draft-max 4) ;;
            esac
            case $mode$dr in
                seededq4|seededself) D+=(--draft-greedy) ;;
                lookup) D=(--draft-lookup) ;;
            esac
            n=${mode}_${arm}_$dr
            sw $n generate "$T/m.gguf" --prompt "$P" -n 40 "${S[@]}" "${A[@]}" "${D[@]}" \
                --out "$T/$n.jsonl"
            expect_rc $n 0
            has $n err "parity: pass (token ids and logits identical to the reference arm"
            has $n err "speculation ("
            same_as $n plain_$mode
        done
    done
done
# the target drafting for itself: every draft accepted, several tokens a pass
eq "self: all accepted" "$(jfield "$T/greedy_resident_self.jsonl" speculative.accepted)" \
    "$(jfield "$T/greedy_resident_self.jsonl" speculative.drafted)"
case $(jfield "$T/greedy_resident_self.jsonl" speculative.drafted) in
    0|MISSING) bad "self: nothing drafted" ;; *) ok ;; esac

# speculative sampling: the Q4_0 copy samples its drafts (the default when the request
# samples); the tokens are the run's own draws, and the parity gate replays them through plain
# passes. With k fixed the same seed gives the same tokens twice, on each arm.
for arm in reference resident; do
    A=(--arm $arm)
    [ $arm = resident ] && A+=(--workers 3 --worker-cap 64M --threads 1)
    for run in a b; do
        n=samp_${arm}_$run
        sw $n generate "$T/m.gguf" --prompt "$P" -n 40 --temp 0.8 --seed 3 "${A[@]}" \
            --draft "$T/d.gguf" --draft-fixed --draft-max 3 --out "$T/$n.jsonl"
        expect_rc $n 0
        has $n err "parity: pass (speculative sampling: the tokens drawn replayed"
        has $n err "sampled drafts, k fixed"
        eq "$n drafts" "$(jfield "$T/$n.jsonl" speculative.drafts)" sampled
    done
    for k in ids_digest logits_digest; do
        eq "samp_$arm reproduces: $k" "$(jfield "$T/samp_${arm}_a.jsonl" $k)" \
            "$(jfield "$T/samp_${arm}_b.jsonl" $k)"
    done
    case $(jfield "$T/samp_${arm}_a.jsonl" speculative.drafted) in
        0|MISSING) bad "samp_$arm: nothing drafted" ;; *) ok ;; esac
done
# the adaptive k (the default): tokens are still checked, whatever k the timings chose
sw samp_adapt generate "$T/m.gguf" --prompt "$P" -n 40 --temp 0.8 --seed 3 \
    --draft "$T/d.gguf" --out "$T/samp_adapt.jsonl"
expect_rc samp_adapt 0
has samp_adapt err "parity: pass (speculative sampling"
# the same seed without speculation, twice: the same tokens (a seed reproduces plain runs)
sw plain_seeded2 generate "$T/m.gguf" --prompt "$P" -n 40 --temp 0.8 --seed 3 \
    --out "$T/plain_seeded2.jsonl"
expect_rc plain_seeded2 0
same_as plain_seeded2 plain_seeded

# over the WAN profile a pass costs the links' delay: the target drafting for itself keeps k
# up, and the resident arm's acts drop below one a token
sw wan generate "$T/m.gguf" --prompt "$P" -n 40 --temp 0 --arm resident --workers 3 \
    --profile wan --draft "$T/m.gguf" --out "$T/wan.jsonl"
expect_rc wan 0
same_as wan plain_greedy
python3 - "$T/wan.jsonl" <<'PY' && ok || bad "wan: passes"
import json, sys
r = json.loads([l for l in open(sys.argv[1]) if l.strip()][-1])
sp = r["speculative"]
if not sp["passes"] * 2 <= r["tokens_out"]:
    print("FAIL: %s passes for %s tokens" % (sp["passes"], r["tokens_out"]), file=sys.stderr); sys.exit(1)
# drafting ahead (on by default on the resident arm): the target accepts every draft and
# draws the drafter's own guess after them, so every pass after the first two (plain, then
# 2 drafts) and the ones cut short by max_tokens drafts from the work done ahead
if not sp["ahead_hits"] * 2 >= sp["passes"]:
    print("FAIL: %s of %s passes drafted ahead" % (sp["ahead_hits"], sp["passes"]), file=sys.stderr); sys.exit(1)
PY
# and off by name: the same tokens, nothing drafted ahead
sw wan_off generate "$T/m.gguf" --prompt "$P" -n 40 --temp 0 --arm resident --workers 3 \
    --profile wan --draft "$T/m.gguf" --draft-ahead off --out "$T/wan_off.jsonl"
expect_rc wan_off 0
same_as wan_off plain_greedy
eq "wan_off: nothing ahead" "$(jfield "$T/wan_off.jsonl" speculative.ahead_hits)" 0

# a worker killed mid-generation with speculation on (drafts rejected and accepted, over the
# WAN profile so k stays up): failover, the kept positions replayed and no more, the same
# tokens
for dr in q4 lookup; do
    if [ $dr = q4 ]; then D=(--draft "$T/d.gguf"); else D=(--draft-lookup); fi
    sw fo_$dr generate "$T/m.gguf" --prompt "$P" -n 40 --temp 0 --arm resident --workers 3 \
        --worker-cap 64M --profile wan "${D[@]}" --kill-worker w1@6 --out "$T/fo_$dr.jsonl"
    expect_rc fo_$dr 0
    has fo_$dr err "parity: pass"
    eq "fo_$dr: a failover" "$(jfield "$T/fo_$dr.jsonl" failovers.0.worker)" w1
    eq "fo_$dr: replayed what was kept" "$(jfield "$T/fo_$dr.jsonl" failovers.0.tokens_replayed)" \
        "$(jfield "$T/fo_$dr.jsonl" failovers.0.at_pos)"
    same_as fo_$dr plain_greedy
done

# refused by name
sw bad1 generate "$T/m.gguf" --prompt "$P" --draft "$T/d.gguf" --draft-lookup
expect_rc bad1 2; has bad1 err "one drafter at a time"
sw bad2 generate "$T/m.gguf" --prompt "$P" --draft-max 4
expect_rc bad2 2; has bad2 err "--draft-max needs --draft or --draft-lookup"
sw bad3 generate "$T/m.gguf" --prompt "$P" --draft "$T/v500.gguf"
expect_fail bad3; has bad3 err "a draft must share the target's vocabulary"
sw bad4 generate "$T/m.gguf" --prompt "$P" --draft-max 40 --draft-lookup
expect_rc bad4 2; has bad4 err "--draft-max"
sw bad5 generate "$T/m.gguf" --prompt "$P" --draft "$T/d.gguf" --draft-ahead sometimes
expect_rc bad5 2; has bad5 err "--draft-ahead 'sometimes': on, off or auto"
sw bad6 generate "$T/m.gguf" --prompt "$P" --draft-lookup --draft-greedy
expect_rc bad6 2; has bad6 err "--draft-greedy needs --draft (a draft model)"
sw bad7 generate "$T/m.gguf" --prompt "$P" --draft-fixed
expect_rc bad7 2; has bad7 err "--draft-fixed needs --draft or --draft-lookup"

# serve: the server's default drafter, and per request
"$SWARM_BIN" serve "$T/m.gguf" --listen 127.0.0.1:0 --port-file "$T/s.port" --ctx 256 \
    --draft "$T/d.gguf" >"$T/s.out" 2>"$T/s.err" &
spid=$!; pids+=($spid)
if wait_for "$T/s.err" "serve: ready" 60; then
    port=$(cat "$T/s.port")
    for v in none false true '{"draft":"lookup","max":3}' '{"draft":"model"}'; do
        body='{"prompt":"'"$P"'","max_tokens":30,"temperature":0'
        [ "$v" != none ] && body+=',"speculative":'"$v"
        curl -s "http://127.0.0.1:$port/v1/completions" -d "$body}" >"$T/s_$(echo "$v" | tr -dc a-z0-9).json"
    done
    curl -s "http://127.0.0.1:$port/v1/completions" \
        -d '{"prompt":"x","max_tokens":3,"speculative":{"draft":"guess"}}' >"$T/s_bad.json"
    curl -s "http://127.0.0.1:$port/v1/completions" \
        -d '{"prompt":"x","max_tokens":3,"speculative":{"max":99}}' >"$T/s_bad2.json"
    curl -s "http://127.0.0.1:$port/v1/completions" \
        -d '{"prompt":"x","max_tokens":3,"speculative":{"greedy":"yes"}}' >"$T/s_bad3.json"
    # seeded: argmax drafts ("greedy") give plain generation's text; sampled drafts with k
    # fixed give the same text twice
    for v in false '{"greedy":true}' '{"fixed":true,"max":3}' '{"fixed":true,"max":3}'; do
        body='{"prompt":"'"$P"'","max_tokens":30,"temperature":0.8,"seed":5,"speculative":'"$v"
        curl -s "http://127.0.0.1:$port/v1/completions" -d "$body}" >>"$T/sampled.jsonl"
        echo >>"$T/sampled.jsonl"
    done
    python3 - "$T/sampled.jsonl" <<'PY' && ok || bad "serve: seeded speculative texts"
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tx = [r["choices"][0]["text"] for r in rs]
tm = [r["timings"] for r in rs]
if len(rs) != 4 or tx[0] != tx[1] or tx[2] != tx[3]:
    print("FAIL: %s" % tx, file=sys.stderr); sys.exit(1)
if tm[2]["ids_digest"] != tm[3]["ids_digest"] or tm[2].get("draft_n", 0) < 1:
    print("FAIL: %s" % tm, file=sys.stderr); sys.exit(1)
PY
    python3 - "$T" <<'PY' && ok || bad "serve: speculative texts"
import glob, json, sys
t = sys.argv[1]
texts = {}
for f in sorted(glob.glob(t + "/s_*.json")):
    if "bad" in f: continue
    texts[f] = json.load(open(f))["choices"][0]["text"]
if len(texts) != 5 or len(set(texts.values())) != 1:
    print("FAIL: %s" % texts, file=sys.stderr); sys.exit(1)
tm = {f: json.load(open(f))["timings"] for f in texts}
if len({(t["ids_digest"], t["logits_digest"]) for t in tm.values()}) != 1:
    print("FAIL: digests %s" % tm, file=sys.stderr); sys.exit(1)
if "draft_n" in tm[t + "/s_false.json"] or tm[t + "/s_none.json"].get("draft_passes", 0) < 1:
    print("FAIL: draft fields %s" % tm, file=sys.stderr); sys.exit(1)
for f in ("s_bad.json", "s_bad2.json", "s_bad3.json"):
    e = json.load(open(t + "/" + f)).get("error", {})
    if e.get("param") != "speculative":
        print("FAIL: %s: %s" % (f, e), file=sys.stderr); sys.exit(1)
PY
else
    bad "serve did not start"; tail -5 "$T/s.err" >&2
fi
kill -INT $spid 2>/dev/null
reap $spid serve 30
sw sbad serve "$T/m.gguf" --listen 127.0.0.1:0 --draft "$T/v500.gguf"
expect_fail sbad; has sbad err "a draft must share the target's vocabulary"

# the text lab, sampled (temperature 0.8: +spec's drafts are sampled, +lookup's a point mass):
# conditions with +spec (the model's Q4_0 copy, quantized by the lab) and +lookup
mkdir -p "$T/lab"
lab_llm_ini "$T/lab.ini" "$T/lab/m.gguf" 1 \
    "reference, resident/wan, resident/wan+spec, reference+lookup" "$T/results"
sw lab lab "$T/lab.ini" --set llm.temperature=0.8 --out "$T/labrun"
expect_rc lab 0
has lab err "quantizing the model to Q4_0 for the +spec conditions' drafter"
for c in "resident/wan+spec:" "reference+lookup:"; do
    grep -q -- "^- $c .* drafts accepted, .* tokens a pass" "$T/labrun/table.md" && ok ||
        bad "lab: table.md lacks the speculation row of $c"
done
python3 - "$T/labrun/results.jsonl" <<'PY' && ok || bad "lab: a speculative run's gates"
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sp = [r for r in rs if "+" in r["condition"]]
if len(sp) != 2 or any(r["result"]["gates"]["parity"] != "pass" or "speculative" not in r["result"] for r in sp):
    print("FAIL: %s" % [(r["condition"], r["result"].get("gates")) for r in sp], file=sys.stderr); sys.exit(1)
PY
sw labbad lab "$T/lab.ini" --set lab.conditions=reference+guess --out "$T/labbad"
expect_rc labbad 2

# chat: the same replies, turn by turn, with a drafter as without (the conversation's cache
# and each turn's drafts share one session)
for dr in plain lookup q4; do
    case $dr in plain) D=() ;; lookup) D=(--draft-lookup) ;; q4) D=(--draft "$T/d.gguf") ;; esac
    if printf 'one two three four\none two three four again\n' | "$SWARM_BIN" chat "$T/m.gguf" \
        --chat-template chatml --temp 0 -n 24 "${D[@]}" >"$T/chat_$dr.out" 2>"$T/chat_$dr.err"
    then ok; else bad "chat $dr: rc $? ($(tail -1 "$T/chat_$dr.err"))"; fi
done
for dr in lookup q4; do
    eq "chat $dr replies" "$(cat "$T/chat_$dr.out")" "$(cat "$T/chat_plain.out")"
    has chat_$dr err "drafts accepted"
done
printf 'hi\n' | "$SWARM_BIN" chat "$T/m.gguf" --chat-template chatml --draft-max 4 \
    >"$T/chat_bad.out" 2>"$T/chat_bad.err"; rc=$?
expect_rc chat_bad 2; has chat_bad err "--draft-max needs --draft or --draft-lookup"

echo "e2e_spec: $pass passed, $fail failed"
[ "$fail" = 0 ]
