#!/bin/bash
# e2e_serve_cache.sh — swarm serve's prompt cache on every arm (reference and SSD with 2 slots,
# the SSD arm streaming its layers, resident over 2 workers) on a random-weight model: a request served from
# a slot's cache gives the ids and logits digests of the same request with "cache_prompt": false
# and of the reference arm, cached_tokens in usage, the slot with the longest prefix chosen, chat
# turns reusing the conversation, the /metrics counter (tests/serve_cache.py); on the resident arm
# a worker killed while the slots are idle: only live sessions are rebuilt, so their caches are
# dropped (and the engines told): the request runs whole, still exact, and is cached again. Continuous batching on the reference arm (4 streams at once) and the SSD arm (2):
# each stream has the digests it has alone, in fewer passes; a long prompt arriving while
# another slot decodes is cut into smaller chunks, both exact. tests/
# Env: SWARM_BIN (bin/swarm), SWARM_TEST_TMP (scratch). Closes with "e2e_serve_cache: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_serve_cache"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done' EXIT


gzip -dc tests/fixtures/tok/llama-spm.gguf.gz > "$T/vocab.gguf"
# dim 256, ff 512: a q8_0 layer is ≈0.7 MiB, so the SSD arm's smallest cap streams layers
sw gen gen --arch llama --dim 256 --layers 4 --heads 4 --kv-heads 2 --ff 512 \
    --vocab-from "$T/vocab.gguf" --ctx 512 --seed 9 --type q8_0 -o "$T/m.gguf"; expect_rc gen 0
# The cut phase's model: rows that cost about what a decode pass does (dim 512, 8 layers, ff
# 1536: ~27 M multiply-adds a row against the head's 16 M), so the rule's bound (rows costing
# one decode pass, measured) lands far below the 64-row batch on any machine. On m.gguf a
# decode pass is mostly the 32000-row head and fixed costs, the bound sat near 64, and whether
# a chunk was cut depended on the moment's timings (failed 2 runs in 3 at 08:01).
sw genc gen --arch llama --dim 512 --layers 8 --heads 8 --kv-heads 4 --ff 1536 \
    --vocab-from "$T/vocab.gguf" --ctx 512 --seed 11 --type q8_0 -o "$T/mc.gguf"
expect_rc genc 0

start() { # name, args...: a server in the background; waits for its port file and "ready"
    local name=$1; shift
    "$SWARM_BIN" serve "${MODEL:-$T/m.gguf}" --listen 127.0.0.1:0 --port-file "$T/$name.port" --ctx 512 \
        --chat-template chatml "$@" >"$T/$name.out" 2>"$T/$name.err" &
    pids+=($!); eval "${name}_pid=$!"
    wait_for "$T/$name.err" "serve: ready" 60 ||
        { bad "$name did not start"; tail -5 "$T/$name.err" >&2; }
    eval "${name}_port=$(cat "$T/$name.port" 2>/dev/null || echo 0)"
}
stop() { # name
    local p; p=$(eval echo "\$${1}_pid")
    kill -TERM "$p"; if wait "$p"; then rc=0; else rc=$?; fi
    eq "$1: SIGTERM exit 0" "$rc" 0
}
same_digests() { # description, file, reference file: every request's digests equal
    if diff "$3" "$2" >"$T/diff.txt"; then ok; else bad "$1"; head -5 "$T/diff.txt" >&2; fi
}

# generate --sessions 3 on the reference arm: the sessions' steps batched (fewer passes than
# tokens), every session's ids and logits the reference arm's alone (the parity gate), greedy
# and seeded
for t in 0 0.8; do
    sw "gs$t" generate "$T/m.gguf" --prompt "Once upon a time there was a dog" -n 20 --temp "$t" \
        --seed 5 --sessions 3 --parity --out "$T/gs$t.jsonl"; expect_rc "gs$t" 0
    has "gs$t" err "parity: pass (every session's token ids and logits identical"
    python3 - "$T/gs$t.jsonl" <<'PY' && ok || bad "generate --sessions 3 (temp $t): not batched"
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
sys.exit(0 if 0 < r["batch_passes"] < 3 * 20 and r["batch_rows"] >= 3 * 20 else 1)
PY
done

# the reference arm, 2 slots
start ref --parallel 2
# shellcheck disable=SC2154
python3 tests/serve_cache.py "$ref_port" 2 main "$T/ref.dig" >"$T/ref.txt" 2>&1; tally "$T/ref.txt"
stop ref
# continuous batching: 4 slots' streams in shared passes, each with its own digests alone
start bat --parallel 4
# shellcheck disable=SC2154
python3 tests/serve_cache.py "$bat_port" 4 batch "$T/bat.dig" >"$T/bat.txt" 2>&1; tally "$T/bat.txt"
stop bat
# a long prompt arriving while another slot decodes: its chunks cut, both requests exact
MODEL="$T/mc.gguf" start cut --parallel 2
# shellcheck disable=SC2154
python3 tests/serve_cache.py "$cut_port" 2 cut "$T/cut.dig" >"$T/cut.txt" 2>&1; tally "$T/cut.txt"
stop cut

# the SSD arm, 2 slots (both KV caches under the cap, their passes batched), under the
# smallest cap its plan takes: layers streamed every pass
sw small serve "$T/m.gguf" --arm ssd --cap 1M --ctx 512 --parallel 2 --listen 127.0.0.1:0
expect_rc small 1
need=$(sed -n 's/.*: \([0-9.]*\) MiB needed.*/\1/p' "$T/small.err" | head -1)
cap=$(python3 -c "import math,sys; print(math.ceil(float(sys.argv[1]) * 4) * 262144)" "${need:-0}")
start ssd --arm ssd --cap "$cap" --parallel 2
streamed=$(sed -n 's/.* \([0-9]*\) streamed.*/\1/p' "$T/ssd.err" | head -1)
[ "${streamed:-0}" -ge 1 ] && ok || bad "ssd: no layer streamed under cap $cap"
# shellcheck disable=SC2154
python3 tests/serve_cache.py "$ssd_port" 2 main "$T/ssd.dig" >"$T/ssd.txt" 2>&1; tally "$T/ssd.txt"
same_digests "ssd: every request's digests = the reference arm's" "$T/ssd.dig" "$T/ref.dig"
python3 tests/serve_cache.py "$ssd_port" 2 batch "$T/ssdb.dig" >"$T/ssdb.txt" 2>&1
tally "$T/ssdb.txt"
stop ssd

# the resident arm: 2 workers, 2 slots; then w1 killed while idle, respawned, re-prefilled
start res --arm resident --workers 2 --parallel 2
# shellcheck disable=SC2154
python3 tests/serve_cache.py "$res_port" 2 main "$T/res.dig" >"$T/res.txt" 2>&1; tally "$T/res.txt"
same_digests "resident: every request's digests = the reference arm's" "$T/res.dig" "$T/ref.dig"
python3 tests/serve_cache.py "$res_port" 2 prime "$T/res1.dig" >"$T/res1.txt" 2>&1
# shellcheck disable=SC2154
w1=$(pgrep -P "$res_pid" -f -- "--id w1" | head -1)
[ -n "$w1" ] && kill -9 "$w1"
back=0
for ((i = 0; i < 1200; i++)); do # the monitor finds it, a fresh w1 loads and is routed back
    curl -s "http://127.0.0.1:$res_port/metrics" >"$T/res.metrics"
    grep -q '^swarm_serve_failovers_total 1$' "$T/res.metrics" &&
        grep -q '^swarm_serve_worker_up{worker="w1",.*} 1$' "$T/res.metrics" && { back=1; break; }
    sleep 0.05
done
eq "resident: w1 killed while idle is respawned and back" "$back" 1
python3 tests/serve_cache.py "$res_port" 2 again "$T/res2.dig" >"$T/res2.txt" 2>&1
tally "$T/res2.txt"
eq "resident: P1 after the dropped caches = the reference's" "$(cut -d' ' -f2- "$T/res2.dig")" \
    "$(grep '^p1 ' "$T/ref.dig" | cut -d' ' -f2-)"
stop res

echo "e2e_serve_cache: $pass passed, $fail failed"
[ "$fail" = 0 ]
