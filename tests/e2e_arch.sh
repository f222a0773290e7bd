#!/bin/bash
# e2e_arch.sh — swarm gen --arch and bench-llm from the command line: deterministic files, bad
# flags, the lab generator unchanged, a forward pass that runs. tests/
# Env: SWARM_BIN (bin/swarm), SWARM_TEST_TMP (scratch). Closes with "e2e_arch: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_arch"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh

small=(--dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 96)
# the same seed gives the same bytes; another seed does not
small+=(--vocab 300 --type q4_0)
sw gen1 gen --arch llama "${small[@]}" --seed 5 -o "$T/a.gguf"; expect_rc gen1 0
sw gen2 gen --arch llama "${small[@]}" --seed 5 -o "$T/b.gguf"; expect_rc gen2 0
sw gen3 gen --arch llama "${small[@]}" --seed 6 -o "$T/c.gguf"; expect_rc gen3 0
eq "same seed, same file" "$(cmp -s "$T/a.gguf" "$T/b.gguf" && echo same)" same
eq "other seed, other file" "$(cmp -s "$T/a.gguf" "$T/c.gguf" && echo same || echo differ)" differ
# with a vocabulary: the tokenizer keys are copied
gzip -dc tests/fixtures/tok/llama-spm.gguf.gz > "$T/vocab.gguf"
sw genv gen --arch qwen2 --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 96 \
    --vocab-from "$T/vocab.gguf" --type q8_0 --tied --seed 1 -o "$T/q.gguf"; expect_rc genv 0
sw tok tokenize "$T/q.gguf" "Hello world"; expect_rc tok 0
# bad flags and impossible shapes: usage errors or one clear error, never a crash
sw badtype gen --arch llama --vocab 300 --type iq2_xs -o "$T/x.gguf"; expect_rc badtype 2
has badtype err "iq2_xs"
sw badarch gen --arch gemma --vocab 300 -o "$T/x.gguf"; expect_rc badarch 2
sw badheads gen --arch llama --dim 64 --heads 5 --vocab 300 -o "$T/x.gguf"; expect_fail badheads
sw badblock gen --arch llama --dim 48 --heads 4 --ff 96 --type q8_0 --vocab 300 -o "$T/x.gguf"
expect_fail badblock; has badblock err "block 32"
sw novocab gen --arch llama -o "$T/x.gguf"; expect_rc novocab 2
eq "no half-written file left" "$(ls "$T"/x.gguf* 2>/dev/null | wc -l)" 0
# the lab generator is unchanged: same flags, same checksummed file
sw dense gen --layers 2 --dim 64 --seed 1 -o "$T/d.gguf"; expect_rc dense 0
sw dense0 gen --layers 0 --dim 64 -o "$T/d0.gguf"; expect_rc dense0 2
# a forward pass over the file: prompt and generation
sw bench bench-llm "$T/a.gguf" --threads 1,2 --prompt 8 --gen 4 --batch 3; expect_rc bench 0
has bench out "threads 2: prompt 8 tokens (batches of 3)"
sw benchdense bench-llm "$T/d.gguf" --prompt 8 --gen 4; expect_fail benchdense
has benchdense err "swarm-dense model has no tokens"

echo "e2e_arch: $pass passed, $fail failed"
[ "$fail" = 0 ]
