#!/bin/bash
# e2e_llm_swarm.sh — swarm generate --arm resident: a tiny random llama model with the fixture
# vocabulary, its layers in 2 and 3 spawned workers (partitioned by bytes), greedy and seeded
# sampling: the same token ids and logits digests as the reference arm (the parity gate runs
# on every resident run), the plan in the result (ranges, embedding and head with the
# coordinator), failover with the caches (killed, stopped, cut off, respawned, killed from
# outside: the same tokens), a worker cap too small refused with its numbers, a bad arm named;
# chat and perplexity on the resident arm (the same text and perplexity), shared flags refused
# by name where a command cannot honour them. tests/
# Env: SWARM_BIN, SWARM_TEST_TMP. Closes with "e2e_llm_swarm: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_llm_swarm"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh

gzip -dc tests/fixtures/tok/llama-spm.gguf.gz > "$T/vocab.gguf"
sw g gen --arch llama --dim 64 --layers 6 --heads 4 --kv-heads 2 --ff 96 \
    --vocab-from "$T/vocab.gguf" --ctx 256 --seed 9 --type q8_0 -o "$T/m.gguf"; expect_rc g 0
P="Once upon a time"

for mode in greedy seeded; do
    if [ $mode = greedy ]; then S=(--temp 0); else S=(--temp 0.8 --seed 3); fi
    sw ref_$mode generate "$T/m.gguf" --prompt "$P" -n 20 "${S[@]}" --batch 3 \
        --out "$T/ref_$mode.jsonl"
    expect_rc ref_$mode 0
    for nw in 2 3; do
        n=res_${mode}_$nw
        # --threads 1: the default is the physical cores (dist/arm_open.c), and the shared core
        # below is one session on one thread's
        sw $n generate "$T/m.gguf" --prompt "$P" -n 20 "${S[@]}" --batch 3 --arm resident \
            --workers $nw --worker-cap 64M --threads 1 --out "$T/$n.jsonl"
        expect_rc $n 0
        has $n err "parity: pass (token ids and logits identical to the reference arm"
        eq "$n text" "$(cat "$T/$n.out")" "$(cat "$T/ref_$mode.out")"
        for k in ids_digest logits_digest tokens_out; do
            eq "$n $k" "$(jfield "$T/$n.jsonl" $k)" "$(jfield "$T/ref_$mode.jsonl" $k)"
        done
        eq "$n arm" "$(jfield "$T/$n.jsonl" arm)" resident
        # one session, one thread: coordinator and workers keep to one core (llm_swarm.c)
        case $(jfield "$T/$n.jsonl" shared_core) in [0-9]*) ok ;; *) bad "$n: shared_core '$(jfield "$T/$n.jsonl" shared_core)'" ;; esac
        eq "$n embedding" "$(jfield "$T/$n.jsonl" embedding_at)" coordinator
        eq "$n head" "$(jfield "$T/$n.jsonl" head_at)" coordinator
        eq "$n last worker's range ends at 6" "$(jfield "$T/$n.jsonl" workers.$((nw - 1)).last)" 6
    done
done
# the prompt of 5 tokens in batches of 3 (2 acts) and 19 single positions after the first
# token: 21 acts
eq "acts" "$(jfield "$T/res_greedy_3.jsonl" acts)" 21

# Failover with the caches: a worker killed, stopped, cut off, all three killed, killed and
# respawned, killed from outside: every run's tokens and logits equal the reference arm's (the
# parity gate and the digests), and each failover says what it replayed.
fo_check() { # name, worker, how prefix, expect rejoin (1/0): the first failover record
    python3 - "$T/$1.jsonl" "$2" "$3" "$4" <<'PY' || bad "$1: failover record"
import json, sys
r = json.loads([l for l in open(sys.argv[1]) if l.strip()][-1])
fo = r.get("failovers") or []
why = []
if not fo: why.append("no failover")
else:
    f = fo[0]
    if f["worker"] != sys.argv[2]: why.append("worker %s" % f["worker"])
    if not f["how"].startswith(sys.argv[3]): why.append("how %s" % f["how"])
    if f["sessions_replayed"] != 1 or f["tokens_replayed"] != f["at_pos"]:
        why.append("replayed %s sessions, %s positions at %s" % (f["sessions_replayed"], f["tokens_replayed"], f["at_pos"]))
    if not f["rebuild_ms"] > 0: why.append("rebuild_ms %s" % f["rebuild_ms"])
    d = f["detection_ms"]
    if sys.argv[3] != "killed by signal 9 (outside)" and not (isinstance(d, (int, float)) and 0 < d < 1000):
        why.append("detection_ms %s" % d)
    if (f["rejoin_ms"] is not None) != (sys.argv[4] == "1"): why.append("rejoin_ms %s" % f["rejoin_ms"])
    if sys.argv[4] == "1" and not f["reprefill_tokens"] > f["at_pos"]: why.append("reprefill %s" % f["reprefill_tokens"])
if why:
    print("FAIL: %s: %s" % (sys.argv[1], "; ".join(why)), file=sys.stderr); sys.exit(1)
PY
}
fo_run() { # name, fault args...: a greedy resident run with faults, against the reference
    local n=$1; shift
    sw $n generate "$T/m.gguf" --prompt "$P" -n 20 --temp 0 --batch 3 --arm resident \
        --workers 3 --worker-cap 64M "$@" --out "$T/$n.jsonl"
    expect_rc $n 0
    has $n err "parity: pass (token ids and logits identical to the reference arm"
    for k in ids_digest logits_digest tokens_out; do
        eq "$n $k" "$(jfield "$T/$n.jsonl" $k)" "$(jfield "$T/ref_greedy.jsonl" $k)"
    done
}
fo_run fo_kill --kill-worker w1@5; fo_check fo_kill w1 "killed by signal 9" 0 && ok
has fo_kill err "failover w1 (killed by signal 9) at position 8"
fo_run fo_stop --stop-worker w0@3:30; fo_check fo_stop w0 "heartbeats stopped" 0 && ok
fo_run fo_cut --cut-link w2@2:30; fo_check fo_cut w2 "heartbeats stopped" 0 && ok
fo_run fo_all --kill-worker w0@2 --kill-worker w1@4 --kill-worker w2@6
eq "fo_all: three failovers" "$(jfield "$T/fo_all.jsonl" failovers.2.worker)" w2

# Killed from outside, mid-generation: the coordinator is held (SIGSTOP) once the first token
# is out, w1 is killed, the coordinator goes on. How long generating takes is measured first
# (slowed workers, so the first token is not also the last on a fast machine).
sw slow_ref generate "$T/m.gguf" --prompt "$P" -n 200 --temp 0 --batch 3 --arm resident \
    --workers 3 --worker-slowdown 16 --out "$T/slow_ref.jsonl"
expect_rc slow_ref 0
"$SWARM_BIN" generate "$T/m.gguf" --prompt "$P" -n 200 --temp 0 --batch 3 --arm resident \
    --workers 3 --worker-slowdown 16 --out "$T/fo_outside.jsonl" \
    >"$T/fo_outside.out" 2>"$T/fo_outside.err" &
gpid=$!
held=0
for ((i = 0; i < 2000; i++)); do # until the first token or the end (the end is a failure)
    if [ -s "$T/fo_outside.out" ]; then kill -STOP $gpid && held=1; break; fi
    kill -0 $gpid 2>/dev/null || break
    sleep 0.01
done
w1=$(pgrep -P $gpid -f -- "--id w1" | head -1)
if [ $held = 1 ] && [ -n "$w1" ]; then kill -9 "$w1"; ok; else bad "fo_outside: not held mid-generation (w1 '$w1')"; fi
kill -CONT $gpid 2>/dev/null
wait $gpid; rc=$?
expect_rc fo_outside 0
has fo_outside err "parity: pass (token ids and logits identical to the reference arm"
eq "fo_outside ids" "$(jfield "$T/fo_outside.jsonl" ids_digest)" "$(jfield "$T/slow_ref.jsonl" ids_digest)"
eq "fo_outside how" "$(jfield "$T/fo_outside.jsonl" failovers.0.how)" "killed by signal 9"
# detection from the fault's first sign (the last poll that found w1 alive; finding 8 of
# issue 19: it was null for faults from outside)
det=$(jfield "$T/fo_outside.jsonl" failovers.0.detection_ms)
python3 -c "import sys; d=float(sys.argv[1]); sys.exit(0 if d >= 0 else 1)" "$det" 2>/dev/null &&
    ok || bad "fo_outside: detection_ms '$det', wanted a measured figure"

# Killed and respawned: the fresh worker must be up, loaded and re-prefilled while the run still
# generates, or there is no rejoin to check. How long a worker takes to start here is measured
# (the slowed run's setup: three spawned, loaded and routed), and the workers are slowed until
# the tokens after the kill take at least four such starts (only two of the three stages are
# slowed while w1's layers run in the coordinator). The slowdown repeats each act's compute, so
# the tokens are the slowed reference's whatever the factor (at most 64x here).
slow=$(python3 -c "
import math
setup, itl = $(jfield "$T/slow_ref.jsonl" setup_ms), $(jfield "$T/slow_ref.jsonl" itl_ms_p50)
have = 190 * itl * 2 / 3
print(16 if have >= 4 * setup else min(64, math.ceil(16 * 4 * setup / have) + 1))")
n=fo_respawn
sw $n generate "$T/m.gguf" --prompt "$P" -n 200 --temp 0 --batch 3 --arm resident \
    --workers 3 --worker-cap 64M --worker-slowdown "$slow" --kill-worker w1@5 --respawn \
    --out "$T/$n.jsonl"
expect_rc $n 0
has $n err "parity: pass (token ids and logits identical to the reference arm"
for k in ids_digest logits_digest tokens_out; do
    eq "$n $k" "$(jfield "$T/$n.jsonl" $k)" "$(jfield "$T/slow_ref.jsonl" $k)"
done
fo_check $n w1 "killed by signal 9" 1 && ok

# SIGINT mid-generation (as Ctrl-C, or an operator's kill -INT on a background run: a
# non-interactive shell starts those with INT ignored) stops at the next token: a clean exit
# that says so, no result (no gate judged it), and the spawned workers gone with it. Bounded by
# the slowed run above, which is the whole of the same generation. The signal comes within a
# poll (50 ms) of the first token, so the tokens after it must take longer than that on any
# machine: the workers are slowed until they take at least 2 s at the slowed reference's ITL
# (a third of it counted as not slowed, as above; at most 64x).
bound=$(python3 -c "print(max(10, int(2 * $(jfield "$T/slow_ref.jsonl" gen_wall_ms) / 1000) + 5))")
slow=$(python3 -c "
import math
have = 199 * $(jfield "$T/slow_ref.jsonl" itl_ms_p50) * 2 / 3
print(16 if have >= 2000 else min(64, math.ceil(16 * 2000 / have) + 1))")
echo "int: workers slowed ${slow}x"
"$SWARM_BIN" generate "$T/m.gguf" --prompt "$P" -n 200 --temp 0 --batch 3 --arm resident \
    --workers 3 --worker-slowdown "$slow" --out "$T/int.jsonl" >"$T/int.out" 2>"$T/int.err" &
gpid=$!
for ((i = 0; i < bound * 20; i++)); do [ -s "$T/int.out" ] && break; sleep 0.05; done
wpids=$(pgrep -P $gpid -f -- "worker" | tr '\n' ' ')
kill -INT $gpid
reap $gpid int "$bound"
expect_rc int 1
has int err "interrupted after"
if [ ! -e "$T/int.jsonl" ]; then ok; else bad "int: an interrupted run wrote a result"; fi
left=""
for w in $wpids; do
    for ((i = 0; i < bound * 20; i++)); do kill -0 "$w" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$w" 2>/dev/null && left="$left $w"
done
if [ -n "$wpids" ] && [ -z "$left" ]; then ok; else bad "int: workers '$wpids', still running '$left'"; fi

# Several sessions in flight (--sessions 3, one thread and KV cache each, session k seeded
# seed + k): every session's tokens are the reference's (greedy: all the same as the single
# run); with w1 killed mid-way and respawned, every live session is replayed both ways (the
# workers slowed 64x and 200 tokens, so the fresh w1 is re-prefilled beside the passes, which it
# does not stop, before the run ends: measured 2026-12-02 on an idle 2-core VM, the rejoin
# landed 180-290 ms after the loss in runs of 1.8-2.0 s; with 60 tokens and 16x the run could
# end first, 0.4 s, and the check failed on a fast machine).
sw multi generate "$T/m.gguf" --prompt "$P" -n 20 --temp 0 --batch 3 --arm resident \
    --workers 3 --sessions 3 --out "$T/multi.jsonl"
expect_rc multi 0
has multi err "parity: pass (every session's token ids and logits identical to the reference"
for k in 0 1 2; do
    eq "multi session $k ids" "$(jfield "$T/multi.jsonl" per_session.$k.ids_digest)" \
        "$(jfield "$T/ref_greedy.jsonl" ids_digest)"
done
eq "multi sessions" "$(jfield "$T/multi.jsonl" sessions)" 3
eq "multi: several sessions want every core" "$(jfield "$T/multi.jsonl" shared_core)" null
# ... and they shared acts (continuous batching: one act carries every session's rows, "sg"):
# fewer passes than positions, each session's logits the reference's all the same
for k in 0 1 2; do
    eq "multi session $k logits" "$(jfield "$T/multi.jsonl" per_session.$k.logits_digest)" \
        "$(jfield "$T/ref_greedy.jsonl" logits_digest)"
done
python3 - "$T/multi.jsonl" <<'PY' && ok || bad "multi: sessions did not share acts"
import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
sys.exit(0 if 0 < d["batch_passes"] < d["batch_rows"] and d["acts"] < 3 * d["batch_rows"] else 1)
PY
has multi err "batched: "
# 2 and 4 seeded sessions (session k seeded 3 + k) in shared acts: each one's ids and logits
# those of the same seed run alone on the reference arm
for s in 3 4 5 6; do
    sw ref_s$s generate "$T/m.gguf" --prompt "$P" -n 20 --temp 0.8 --seed $s --batch 3 \
        --out "$T/ref_s$s.jsonl"
    expect_rc ref_s$s 0
done
# (and with w1 killed while a shared act is in flight, no respawn: its layers run here for
# every session, each rebuilt, the act run again whole)
for K in 2 4 4k; do
    extra=(); [ $K = 4k ] && extra=(--kill-worker w1@6 --no-respawn)
    sw multi_s$K generate "$T/m.gguf" --prompt "$P" -n 20 --temp 0.8 --seed 3 --batch 3 \
        --arm resident --workers 3 --sessions ${K%k} "${extra[@]}" --out "$T/multi_s$K.jsonl"
    expect_rc multi_s$K 0
    for ((k = 0; k < ${K%k}; k++)); do
        for d in ids_digest logits_digest; do
            eq "multi_s$K session $k $d" "$(jfield "$T/multi_s$K.jsonl" per_session.$k.$d)" \
                "$(jfield "$T/ref_s$((3 + k)).jsonl" $d)"
        done
    done
done
eq "multi_s4k sessions replayed" "$(jfield "$T/multi_s4k.jsonl" failovers.0.sessions_replayed)" 4
sw ref_seeded200 generate "$T/m.gguf" --prompt "$P" -n 200 --temp 0.8 --seed 3 --batch 3 \
    --out "$T/ref_seeded200.jsonl"
expect_rc ref_seeded200 0
# The respawned worker's rejoin must land before the run ends: with the sessions batched into
# one act a pass, 200 tokens at 64x took ~2 s and the rejoin missed it 1 time in 10 (main,
# 07:50). So the run is repeated 4x slower (at most twice) until the rejoin lands in it; each
# run is judged for parity all the same, and the slowdown it took is printed.
for slow in 64 256 1024; do
    sw multi_fo generate "$T/m.gguf" --prompt "$P" -n 200 --temp 0.8 --seed 3 --batch 3 \
        --arm resident --workers 3 --sessions 3 --kill-worker w1@5 --respawn \
        --worker-slowdown $slow --out "$T/multi_fo.jsonl"
    expect_rc multi_fo 0
    has multi_fo err "parity: pass (every session's token ids and logits identical to the reference"
    eq "multi_fo session 0 ids" "$(jfield "$T/multi_fo.jsonl" per_session.0.ids_digest)" \
        "$(jfield "$T/ref_seeded200.jsonl" ids_digest)"
    eq "multi_fo sessions replayed" "$(jfield "$T/multi_fo.jsonl" failovers.0.sessions_replayed)" 3
    if python3 - "$T/multi_fo.jsonl" <<'PY'; then break; fi
import json, sys
f = json.loads(open(sys.argv[1]).read().splitlines()[-1])["failovers"][0]
sys.exit(0 if f["rejoin_ms"] is not None and f["reprefill_tokens"] >= f["tokens_replayed"] else 1)
PY
    echo "  multi_fo: no rejoin within the run at worker slowdown $slow" >&2
    rm -f "$T/multi_fo.jsonl"
done
if [ -s "$T/multi_fo.jsonl" ]; then ok; echo "  multi_fo: rejoined at worker slowdown $slow"
else bad "multi_fo: rejoin (not within the run even at worker slowdown 1024)"; fi
# Pipelined prefill (a prompt's chunks in flight through the workers at once): the same ids
# and logits as the reference and as --no-pipeline, the same acts; with w1 killed from outside
# while the prompt is in flight, the chunks done are rebuilt, the rest run again, still exact.
# The kill lands 40% into the prompt as this run measured it (the workers slowed until the
# prompt takes at least 2 s), so it is mid-prompt on a slow machine and a fast one alike.
sw g2 gen --arch llama --dim 256 --layers 6 --heads 4 --kv-heads 2 --ff 512 \
    --vocab-from "$T/vocab.gguf" --ctx 1024 --seed 9 --type q8_0 -o "$T/m2.gguf"; expect_rc g2 0
LP=$(python3 -c "print(' '.join(['Once upon a time there was a little girl who lived in a village near the forest.'] * 25))")
sw pp_ref generate "$T/m2.gguf" --prompt "$LP" -n 8 --temp 0 --batch 32 --out "$T/pp_ref.jsonl"
expect_rc pp_ref 0
for pp in pipe nopipe; do
    extra=(); [ $pp = nopipe ] && extra=(--no-pipeline)
    sw pp_$pp generate "$T/m2.gguf" --prompt "$LP" -n 8 --temp 0 --batch 32 --arm resident \
        --workers 3 --threads 1 "${extra[@]}" --out "$T/pp_$pp.jsonl"
    expect_rc pp_$pp 0
    for d in ids_digest logits_digest; do
        eq "pp_$pp $d" "$(jfield "$T/pp_$pp.jsonl" $d)" "$(jfield "$T/pp_ref.jsonl" $d)"
    done
done
# the chunks are sized by the cost model (dist/chunk_plan.c), not the batch: every act but the
# prompt's is the same, and --no-pipeline sends the prompt in batches of 32
eq "pipelined: the same acts but the prompt's" \
    "$(($(jfield "$T/pp_pipe.jsonl" acts) - $(jfield "$T/pp_pipe.jsonl" prefill_chunks)))" \
    "$(($(jfield "$T/pp_nopipe.jsonl" acts) - ($(jfield "$T/pp_nopipe.jsonl" tokens_in) + 31) / 32))"
slow=$(python3 -c "
import math
print(min(64, max(2, math.ceil(2000 / max(1.0, $(jfield "$T/pp_nopipe.jsonl" prompt_ms))) + 1)))")
sw pp_slow generate "$T/m2.gguf" --prompt "$LP" -n 8 --temp 0 --batch 32 --arm resident \
    --workers 3 --threads 1 --worker-slowdown "$slow" --out "$T/pp_slow.jsonl"
expect_rc pp_slow 0
after=$(python3 -c "print($(jfield "$T/pp_slow.jsonl" prompt_ms) * 0.4 / 1000)")
bound=$(python3 -c "print(max(30, int(20 * $(jfield "$T/pp_slow.jsonl" prompt_ms) / 1000) + 10))")
echo "pp_kill: workers slowed ${slow}x, w1 killed ${after} s into the prompt"
"$SWARM_BIN" generate "$T/m2.gguf" --prompt "$LP" -n 8 --temp 0 --batch 32 --arm resident \
    --workers 3 --threads 1 --worker-slowdown "$slow" --out "$T/pp_kill.jsonl" \
    >"$T/pp_kill.out" 2>"$T/pp_kill.err" &
gpid=$!
for ((i = 0; i < bound * 20; i++)); do grep -q "joined" "$T/pp_kill.err" && break; sleep 0.05; done
sleep "$after"
kill -9 $(pgrep -P $gpid -f -- "--id w1") 2>/dev/null
reap $gpid pp_kill "$bound"
expect_rc pp_kill 0
for d in ids_digest logits_digest; do
    eq "pp_kill $d" "$(jfield "$T/pp_kill.jsonl" $d)" "$(jfield "$T/pp_ref.jsonl" $d)"
done
python3 - "$T/pp_kill.jsonl" <<'PY' && ok || bad "pp_kill: not lost mid-prompt or not rebuilt to it"
import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
f = d["failovers"][0]
sys.exit(0 if 0 < f["at_pos"] < d["tokens_in"] and f["tokens_replayed"] == f["at_pos"] else 1)
PY

sw multi_kl generate "$T/m.gguf" --prompt "$P" --sessions 2 --kl-base "$T/m.gguf"
expect_rc multi_kl 2
has multi_kl err "--sessions runs without --kl-base"

# An emulated WAN on every data link (RTT 60 ms: 30 ms each way, workers + 1 = 4 hops): the
# same tokens, and every token waits at least the 4 one-way delays (a lower bound: the
# emulation only adds).
sw wan generate "$T/m.gguf" --prompt "$P" -n 20 --temp 0 --batch 3 --arm resident --workers 3 \
    --profile wan --out "$T/wan.jsonl"
expect_rc wan 0
eq "wan ids" "$(jfield "$T/wan.jsonl" ids_digest)" "$(jfield "$T/ref_greedy.jsonl" ids_digest)"
eq "wan profile" "$(jfield "$T/wan.jsonl" profile)" wan
python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).read().splitlines()[-1]); sys.exit(0 if r["itl_ms_p50"] >= 120 else 1)' \
    "$T/wan.jsonl" && ok || bad "wan: itl p50 $(jfield "$T/wan.jsonl" itl_ms_p50) ms < 4 x 30 ms"
sw badprof generate "$T/m.gguf" --prompt "$P" --arm resident --profile moon
expect_rc badprof 2
has badprof err "unknown profile 'moon' (profiles: none, lan, wifi, wan)"

# faults named clearly
sw fo_bad1 generate "$T/m.gguf" --prompt "$P" --arm resident --workers 3 --kill-worker w5@2
expect_rc fo_bad1 2
has fo_bad1 err "a fault for w5: the workers are w0..w2"
sw fo_bad2 generate "$T/m.gguf" --prompt "$P" --arm resident --stop-worker w1@2
expect_rc fo_bad2 2
has fo_bad2 err "--stop-worker: 'w1@2': want wI@TOKEN:SECONDS"
sw fo_bad3 generate "$T/m.gguf" --prompt "$P" --kill-worker w1@2
expect_rc fo_bad3 2
has fo_bad3 err "are the resident arm's (add --arm resident)"

# a worker cap that cannot hold a layer beside the caches: refused before any worker starts
sw small generate "$T/m.gguf" --prompt "$P" -n 4 --arm resident --workers 2 --worker-cap 16M
expect_rc small 2
has small err "holds no layer: 16.0 MiB overhead"
sw badarm generate "$T/m.gguf" --prompt "$P" --arm swarm
expect_rc badarm 2
has badarm err "unknown arm 'swarm' (arms: reference, ssd, resident)"

# One arm for every command (dist/arm_open.c): chat and perplexity on the resident arm give the
# reference arm's text and perplexity; a flag a command cannot honour is refused by name
printf 'hello\nhow are you\n' > "$T/chat.in"
sw chref chat "$T/m.gguf" --chat-template chatml -n 6 --temp 0 < "$T/chat.in"; expect_rc chref 0
sw chres chat "$T/m.gguf" --chat-template chatml -n 6 --temp 0 --arm resident --workers 2 \
    < "$T/chat.in"; expect_rc chres 0
eq "chat: resident = reference" "$(cat "$T/chres.out")" "$(cat "$T/chref.out")"
python3 -c "print('the quick brown fox jumps over the lazy dog. ' * 40)" > "$T/text.txt"
sw ppref perplexity "$T/m.gguf" --file "$T/text.txt" --ctx 64; expect_rc ppref 0
sw ppres perplexity "$T/m.gguf" --file "$T/text.txt" --ctx 64 --arm resident --workers 3
expect_rc ppres 0
eq "perplexity: resident = reference" "$(grep -o 'perplexity [0-9.]*' "$T/ppres.out")" \
    "$(grep -o 'perplexity [0-9.]*' "$T/ppref.out")"
for c in chat perplexity serve; do
    extra=(); [ $c = perplexity ] && extra=(--file "$T/text.txt")
    sw nofault_$c $c "$T/m.gguf" "${extra[@]}" --arm resident --kill-worker w1@2 </dev/null
    expect_rc nofault_$c 2
    has nofault_$c err "--kill-worker is not a flag of swarm $c"
done
sw ppprof perplexity "$T/m.gguf" --file "$T/text.txt" --profile lan
expect_rc ppprof 2; has ppprof err "--profile: "; has ppprof err "(add --arm resident)"

echo "e2e_llm_swarm: $pass passed, $fail failed"
[ "$fail" = 0 ]
