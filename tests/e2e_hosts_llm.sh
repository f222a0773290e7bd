#!/bin/bash
# e2e_hosts_llm.sh — a real (random-weight llama) model's layers on namespace hosts: the same
# tokens as one process over plaintext and CURVE, each worker fetching only its layers'
# tensors (and resuming a cut transfer), a coordinator with the wrong key refused, a worker
# killed on its host mid-generation (its caches rebuilt here, the tokens unchanged) and
# restarted there (asked to rejoin, re-prefilled, the route moved back). tests/
# Root only (namespaces, veth, BPF); as another user it prints "skip: not root" and passes.
# Hosts come from experiments/hosts.sh (198.18.0.0/15, nothing routed off this machine).
# Env: SWARM_BIN, SWARM_TEST_TMP. Closes with "e2e_hosts_llm: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
export SWARM_BIN
pass=0; fail=0
if [ "$(id -u)" != 0 ]; then
    echo "skip: not root"
    echo "e2e_hosts_llm: 0 passed, 0 failed"
    exit 0
fi
T="$SWARM_TEST_TMP/e2e_hosts_llm"
HD="$T/hosts"
HOSTS="$PWD/experiments/hosts.sh"
rm -rf "$T" && mkdir -p "$T"
. tests/lib.sh
cg_run_begin # the hosts' workers make their cgroups in this script's run (a killed one's too)
bg=()
cleanup() {
    local p
    for p in "${bg[@]}"; do kill -TERM "$p" 2>/dev/null; done
    "$HOSTS" down --dir "$HD" >/dev/null 2>&1
    cg_run_end
}
trap cleanup EXIT
trap 'exit 130' INT TERM

TAGS=() # every tag this script's hosts had: the cleanup checks judge only those
up() { # hosts.sh up 3 with options; a failed setup fails the test and ends it
    if ! "$HOSTS" up 3 --dir "$HD" "$@" >"$T/up.log" 2>&1; then
        cat "$T/up.log"; bad "hosts up $*"
        echo "e2e_hosts_llm: $pass passed, $fail failed"; exit 1
    fi
    # this run's names (its tag, chosen by hosts.sh; another run's hosts have others)
    . "$HD/hosts.env"
    TAGS+=("$HOSTS_TAG")
}
cfg() { # name, model: the hosts' config with [model] path = model
    { printf '[model]\npath = %s\n' "$2"; grep -v '^\[model\]\|^path = ' "$HD/hosts.ini"; } \
        >"$T/$1.ini"
}
J() { jfield "$T/$1.jsonl" "$2"; }

gzip -dc tests/fixtures/tok/llama-spm.gguf.gz >"$T/vocab.gguf"
M="$T/m.gguf" # 6 layers of 2.4 MB (f32) beside a 65 MB embedding and head
sw gen gen --arch llama --dim 256 --layers 6 --heads 4 --kv-heads 2 --ff 512 \
    --vocab-from "$T/vocab.gguf" --ctx 1024 --seed 9 --type f32 -o "$M"; expect_rc gen 0
P="Once upon a time"
t0=$(date +%s%N)
sw ref generate "$M" --prompt "$P" -n 24 --temp 0 --out "$T/ref.jsonl"; expect_rc ref 0
REF=$(J ref ids_digest)
# Every later command is bounded by a hang guard scaled from this run (a whole generate with
# its setup: 0.3-0.5 s here; the slowest command below, 64 tokens under wan, takes ~20x that).
# A command past it is a hang: its stacks go to its .err and it counts as a failure.
SW_LIMIT=$(python3 -c "print(max(60, int(100 * ($(date +%s%N) - $t0) / 1e9)))")
SIZE=$(stat -c %s "$M")

# ---- a: plaintext hosts, each reading its own copy of the file -----------------------------
up --model "$M"
cfg plain "$M"
sw plain generate "$T/plain.ini" --prompt "$P" -n 24 --temp 0 --arm resident \
    --out "$T/plain.jsonl"
expect_rc plain 0
has plain err "parity: pass (token ids and logits identical to the reference arm"
eq "a: same tokens as one process" "$(J plain ids_digest)" "$REF"
eq "a: transport" "$(J plain transport)" plaintext
eq "a: h2 at its host's address" "$(J plain workers.1.endpoint)" "tcp://$HOSTS_NET.3:7000"
eq "a: h3 serves the last layers" "$(J plain workers.2.last)" 6
eq "a: h1 read its own copy" "$(J plain workers.0.fetched_bytes)" 0
sw kill_remote generate "$T/plain.ini" --prompt "$P" -n 4 --temp 0 --arm resident \
    --kill-worker w1@2
expect_rc kill_remote 2
has kill_remote err "cannot kill it"

# ---- b: CURVE hosts without the file: each fetches its layers' tensors alone ---------------
up --model "$M" --curve "$T/keys" --fetch
cfg curve "$M"
sw curve generate "$T/curve.ini" --prompt "$P" -n 24 --temp 0 --arm resident \
    --out "$T/curve.jsonl"
expect_rc curve 0
has curve err "parity: pass (token ids and logits identical to the reference arm"
eq "b: same tokens over CURVE" "$(J curve ids_digest)" "$REF"
eq "b: transport" "$(J curve transport)" curve
sum=0
for i in 0 1 2; do
    f=$(J curve workers.$i.fetched_bytes)
    if [ "${f:-0}" -gt 0 ] 2>/dev/null; then ok; else bad "b: worker $i fetched '$f' bytes"; fi
    sum=$((sum + ${f:-0}))
done
# every worker took the header and 2 of 6 layers: together far less than the one file
if [ "$sum" -lt "$SIZE" ]; then ok; else bad "b: the workers fetched $sum bytes of a $SIZE-byte file"; fi
check_log() { if grep -q "$2" "$HD/$1.log"; then ok; else bad "$1.log lacks '$2'"; fi; }
check_log h1 "h1: loaded layers \[0, 2)"
sw again generate "$T/curve.ini" --prompt "$P" -n 24 --temp 0 --arm resident \
    --out "$T/again.jsonl"
expect_rc again 0
eq "b: the second run's fetch is already in the cache" "$(J again workers.0.fetched_bytes)" 0
if [ "$(J again workers.0.resumed_bytes)" -gt 0 ] 2>/dev/null; then ok; else
    bad "b: second run resumed_bytes $(J again workers.0.resumed_bytes)"; fi

# ---- c: a coordinator with a key the workers were not given --------------------------------
mkdir -p "$T/intruder" && (cd "$T/intruder" && "$SWARM_BIN" keygen intruder >/dev/null)
sed "s|^key = .*|key = $T/intruder/intruder.key|" "$T/curve.ini" >"$T/intruder.ini"
sw intruder generate "$T/intruder.ini" --prompt "$P" -n 4 --temp 0 --arm resident \
    --out "$T/intruder.jsonl"
expect_fail intruder
has intruder err "refused the CURVE handshake"
if [ ! -s "$T/intruder.jsonl" ]; then ok; else bad "c: the refused run wrote a result"; fi

# ---- d: a worker killed on its host mid-generation, then restarted there -------------------
# The wan profile holds every act 30 ms per hop, so a generation lasts seconds without
# burning the CPU. A healthy run measures it (D); the kill comes a quarter of D after the
# first token, the restart once the loss is seen, and every wait is bounded by D.
sw healthy generate "$T/curve.ini" --prompt "$P" -n 64 --temp 0 --arm resident --profile wan \
    --out "$T/healthy.jsonl"
expect_rc healthy 0
D=$(J healthy gen_wall_ms)
bound=$(python3 -c "print(max(10, int(4 * $D / 1000) + 5))")
"$SWARM_BIN" generate "$T/curve.ini" --prompt "$P" -n 64 --temp 0 --arm resident \
    --profile wan --respawn --out "$T/fo.jsonl" >"$T/fo.out" 2>"$T/fo.err" &
fp=$!; bg+=("$fp")
for _ in $(seq $((bound * 20))); do [ -s "$T/fo.out" ] && break; sleep 0.05; done
sleep "$(python3 -c "print($D / 4000)")"
kill -KILL "$(cat "$HD/h2.pid")"
if wait_for "$T/fo.err" "h2: lost (" "$bound"; then ok; else bad "d: h2's loss not seen"; fi
"$HOSTS" restart 2 --dir "$HD" >"$T/restart.log" 2>&1 || bad "d: h2 did not restart"
reap "$fp" fo "$bound"
expect_rc fo 0
has fo err "parity: pass (token ids and logits identical to the reference arm"
eq "d: the same tokens as the healthy run" "$(J fo ids_digest)" "$(J healthy ids_digest)"
eq "d: h2 failed over" "$(J fo failovers.0.worker)" h2
case $(J fo failovers.0.how) in "heartbeats stopped"*) ok ;; *) bad "d: how '$(J fo failovers.0.how)'" ;; esac
python3 - "$T/fo.jsonl" <<'PY' || bad "d: failover record"
import json, sys
f = json.loads([l for l in open(sys.argv[1]) if l.strip()][-1])["failovers"][0]
print("d: replayed %d positions, caches whole %.0f ms after the loss, %d degraded at %.1f tok/s, "
      "rejoined %.0f ms after the loss (%d positions re-prefilled)" % (f["tokens_replayed"],
      f["rebuild_ms"], f["degraded_tokens"], f["degraded_tok_s"] or 0, f["rejoin_ms"],
      f["reprefill_tokens"]))
assert f["tokens_replayed"] > 0 and f["rebuild_ms"] > 0
assert f["rejoin_ms"] > f["rebuild_ms"] and f["reprefill_tokens"] > 0
PY
eq "d: h2 serves again" "$(J fo workers.1.state)" serving
check_log h2 "h2: loaded layers \[2, 4)"

# ---- serve: the same CURVE hosts behind the OpenAI API; h3 killed on its host ---------------
"$SWARM_BIN" serve "$T/curve.ini" --arm resident --listen 127.0.0.1:0 --port-file "$T/serve.port" \
    >"$T/serve.out" 2>"$T/serve.err" &
sp=$!; bg+=("$sp")
health() { curl -s -m "$bound" "http://127.0.0.1:$(cat "$T/serve.port" 2>/dev/null)/health" >"$T/health.json" 2>/dev/null; }
complete() { # name: a greedy completion of 8 tokens into $T/NAME.json
    curl -s -m "$bound" "http://127.0.0.1:$(cat "$T/serve.port")/v1/completions" \
        -d "{\"prompt\": \"$P\", \"max_tokens\": 8, \"temperature\": 0}" >"$T/$1.json"
}
hj() { python3 -c "import json,sys; o=json.load(open(sys.argv[1])); print($2)" "$T/$1.json" 2>/dev/null || echo MISSING; }
for _ in $(seq $((bound * 20))); do health && [ "$(hj health 'o["status"]')" = ok ] && break; sleep 0.05; done
eq "serve: healthy on the hosts" "$(hj health 'o["status"]')" ok
eq "serve: h2 listed at its host" "$(hj health 'o["workers"][1]["endpoint"]')" "tcp://$HOSTS_NET.3:7000"
complete c1
eq "serve: 8 tokens" "$(hj c1 'o["usage"]["completion_tokens"]')" 8
kill -KILL "$(cat "$HD/h3.pid")"
for _ in $(seq $((bound * 20))); do health && [ "$(hj health 'o["status"]')" = degraded ] && break; sleep 0.05; done
eq "serve: degraded once h3 is gone" "$(hj health 'o["status"]')" degraded
eq "serve: h3 named" "$(hj health 'o["degraded"]["worker"]')" h3
complete c2
eq "serve: the same completion with h3's layers here" "$(hj c2 'o["choices"][0]["text"]')" \
    "$(hj c1 'o["choices"][0]["text"]')"
kill -TERM "$sp"; reap "$sp" serve "$bound"
expect_rc serve 0
"$HOSTS" restart 3 --dir "$HD" >/dev/null 2>&1 || bad "serve: h3 did not restart"

# ---- e: a transfer cut mid-way, then resumed -----------------------------------------------
# 6 layers of 45 MB (f32, dim 1024): 90 MB per worker over CURVE, progress made durable every
# 16 MiB. h1's link is cut once its progress file appears, for longer than its 3 s
# coordinator timeout (so it pauses and records its progress); the next run resumes.
BIG="$T/big.gguf"
sw genbig gen --arch llama --dim 1024 --layers 6 --heads 16 --kv-heads 4 --ff 2816 \
    --vocab-from "$T/vocab.gguf" --ctx 256 --seed 5 --type f32 -o "$BIG"; expect_rc genbig 0
"$HOSTS" down --dir "$HD" >/dev/null 2>&1; rm -rf "$HD"
up --model "$BIG" --curve "$T/keys" --fetch --cap 256M
cfg big "$BIG"
prog="$HD/h1/cache/$(basename "$BIG").$(stat -c %s "$BIG").fetch"
"$SWARM_BIN" generate "$T/big.ini" --prompt "$P" -n 4 --temp 0 --arm resident \
    --out "$T/cut.jsonl" >"$T/cut.out" 2>"$T/cut.err" &
cp_=$!; bg+=("$cp_")
for _ in $(seq 1500); do [ -s "$prog" ] && break; kill -0 "$cp_" 2>/dev/null || break; sleep 0.01; done
"$SWARM_BIN" netem --netns "${HOSTS_NS}1" --link "${HOSTS_LINK}1" --blackhole on >/dev/null 2>&1
if [ -s "$prog" ]; then ok; else bad "e: no progress file from h1 before the cut"; fi
sleep 4 # the worker's coordinator timeout (PIRATE_WORKER_SILENT_MS) and a second
"$SWARM_BIN" netem --netns "${HOSTS_NS}1" --link "${HOSTS_LINK}1" --blackhole off >/dev/null 2>&1
"$SWARM_BIN" netem --netns "${HOSTS_NS}1" --link "${HOSTS_LINK}1" --detach >/dev/null 2>&1
for _ in $(seq 100); do kill -0 "$cp_" 2>/dev/null || break; sleep 0.1; done
kill -INT "$cp_" 2>/dev/null # still waiting for h1: stop it, as an operator would
reap "$cp_" cut "$bound"
if [ "$rc" != 124 ]; then ok; else bad "e: the cut run did not stop on SIGINT"; fi
echo "e: the cut run ended: $(grep -m1 -o 'resident arm: .*' "$T/cut.err")"
check_log h1 "fetch paused at [1-9]"
sw resumed generate "$T/big.ini" --prompt "$P" -n 4 --temp 0 --arm resident \
    --out "$T/resumed.jsonl"
expect_rc resumed 0
has resumed err "parity: pass (token ids and logits identical to the reference arm"
res=$(J resumed workers.0.resumed_bytes); got=$(J resumed workers.0.fetched_bytes)
echo "e: h1 resumed_bytes $res, fetched_bytes $got of a $(stat -c %s "$BIG")-byte file"
if [ "${res:-0}" -gt 0 ] 2>/dev/null; then ok; else bad "e: h1 did not resume ($res)"; fi
if [ "${got:-0}" -gt 0 ] && [ $((got + res)) -lt $(($(stat -c %s "$BIG") / 2)) ] 2>/dev/null; then
    ok; else bad "e: h1 fetched $got + resumed $res: not just its share"; fi
check_log h1 "h1: loaded layers \[0, 2)"

cleanup; bg=()
rm -rf "$BIG" "$HD"/h*/cache
for t in "${TAGS[@]}"; do # hosts.sh names its namespaces swarmRhI
    if ! ip netns list | grep -q "^swarm${t}h[0-9]"; then ok; else bad "cleanup: namespaces of tag $t left"; fi
done
echo "e2e_hosts_llm: $pass passed, $fail failed"
[ "$fail" = 0 ]
