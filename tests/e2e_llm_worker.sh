#!/bin/bash
# e2e_llm_worker.sh — real-model workers over the wire, driven by tests/tools/llmdrive (a
# stand-in coordinator until the resident arm for real models exists): a tiny random llama
# model with the fixture vocabulary over 2 and 3 local workers, 2-3 sessions interleaved
# (prompt in batches, then single positions), every result bit-identical to one process, a
# session in a freed slot; a worker whose cap cannot hold its range refuses with the numbers.
# Env: SWARM_BIN, TEST_BIN_DIR, SWARM_TEST_TMP. Closes with "e2e_llm_worker: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${TEST_BIN_DIR:=$PWD/build/tests}" \
  "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_llm_worker"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh
DRIVE="$TEST_BIN_DIR/tools/llmdrive"
if [ ! -x "$DRIVE" ]; then
    bad "no driver at $DRIVE"; echo "e2e_llm_worker: $pass passed, $fail failed"; exit 1
fi

gzip -dc tests/fixtures/tok/llama-spm.gguf.gz > "$T/vocab.gguf"
sw g gen --arch llama --dim 64 --layers 6 --heads 4 --kv-heads 2 --ff 96 \
    --vocab-from "$T/vocab.gguf" --ctx 256 --seed 9 --type q8_0 -o "$T/m.gguf"; expect_rc g 0

PIDS=()
start_worker() { # name, cap
    "$SWARM_BIN" worker --listen "tcp://127.0.0.1:*" --id "$1" --cap "$2" --once \
        >"$T/$1.log" 2>&1 &
    PIDS+=($!)
    local pid=$!
    # No deadline to guess: the worker either announces its endpoint or exits.
    while kill -0 "$pid" 2>/dev/null && ! grep -qs "listening on" "$T/$1.log"; do
        sleep 0.05
    done
    sed -n 's/.*listening on \(tcp:[^ ]*\).*/\1/p' "$T/$1.log" | head -1
}
stop_workers() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    PIDS=()
}
trap stop_workers EXIT

# 2 workers, 2 sessions, batches of 4
e1=$(start_worker lw1 64M); e2=$(start_worker lw2 64M)
if "$DRIVE" --model "$T/m.gguf" --workers "$e1,$e2" --sessions 2 --ctx 32 --batch 4 \
    --prompt 7 --gen 5 >"$T/d2.out" 2>"$T/d2.err"; then ok
else bad "2 workers: $(cat "$T/d2.err")"; fi
has d2 out "21 steps (prompt 7 in batches of 4, 5 single positions each): 21 identical"
stop_workers
grep -q "loaded layers \[0, 3) of" "$T/lw1.log" && ok || bad "lw1 did not load [0, 3)"

# 3 workers, 3 sessions, batches of 3
e1=$(start_worker lw3 64M); e2=$(start_worker lw4 64M); e3=$(start_worker lw5 64M)
if "$DRIVE" --model "$T/m.gguf" --workers "$e1,$e2,$e3" --sessions 3 --ctx 24 --batch 3 \
    --prompt 5 --gen 4 >"$T/d3.out" 2>"$T/d3.err"; then ok
else bad "3 workers: $(cat "$T/d3.err")"; fi
has d3 out "24 steps (prompt 5 in batches of 3, 4 single positions each): 24 identical"
stop_workers

# A cap that cannot hold [0, 3) beside 8 sessions of 256 positions: refused, with numbers
e1=$(start_worker lw6 17M); e2=$(start_worker lw7 64M)
"$DRIVE" --model "$T/m.gguf" --workers "$e1,$e2" --sessions 8 --ctx 256 --batch 4 \
    >"$T/dc.out" 2>"$T/dc.err"; rc=$?
expect_rc dc 2
has dc err "short by"
has dc err "code 3"
stop_workers

echo "e2e_llm_worker: $pass passed, $fail failed"
[ "$fail" = 0 ]
