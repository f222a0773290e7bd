#!/bin/bash
# e2e_llm_swarm.sh — swarm generate --arm resident: a tiny random llama model with the fixture
# vocabulary, its layers in 2 and 3 spawned workers (partitioned by bytes), greedy and seeded
# sampling: the same token ids and logits digests as the reference arm (the parity gate runs
# on every resident run), the plan in the result (ranges, embedding and head with the
# coordinator), a worker cap too small refused with its numbers, a bad arm named. tests/
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
        sw $n generate "$T/m.gguf" --prompt "$P" -n 20 "${S[@]}" --batch 3 --arm resident \
            --workers $nw --worker-cap 64M --out "$T/$n.jsonl"
        expect_rc $n 0
        has $n err "parity: pass (token ids and logits identical to the reference arm"
        eq "$n text" "$(cat "$T/$n.out")" "$(cat "$T/ref_$mode.out")"
        for k in ids_digest logits_digest tokens_out; do
            eq "$n $k" "$(jfield "$T/$n.jsonl" $k)" "$(jfield "$T/ref_$mode.jsonl" $k)"
        done
        eq "$n arm" "$(jfield "$T/$n.jsonl" arm)" resident
        eq "$n embedding" "$(jfield "$T/$n.jsonl" embedding_at)" coordinator
        eq "$n head" "$(jfield "$T/$n.jsonl" head_at)" coordinator
        eq "$n last worker's range ends at 6" "$(jfield "$T/$n.jsonl" workers.$((nw - 1)).last)" 6
    done
done
# the prompt of 5 tokens in batches of 3 (2 acts) and 19 single positions after the first
# token: 21 acts
eq "acts" "$(jfield "$T/res_greedy_3.jsonl" acts)" 21

# a worker cap that cannot hold a layer beside the caches: refused before any worker starts
sw small generate "$T/m.gguf" --prompt "$P" -n 4 --arm resident --workers 2 --worker-cap 16M
expect_rc small 2
has small err "holds no layer: 16.0 MiB overhead"
sw badarm generate "$T/m.gguf" --prompt "$P" --arm swarm
expect_rc badarm 2
has badarm err "unknown arm 'swarm' (arms: reference, ssd, resident)"

echo "e2e_llm_swarm: $pass passed, $fail failed"
[ "$fail" = 0 ]
