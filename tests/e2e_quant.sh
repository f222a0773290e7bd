#!/bin/bash
# e2e_quant.sh — `swarm bench-quant` runs end to end on a small shape (every type, each ISA this
# CPU has, two thread counts) and refuses bad flags cleanly. No timing is asserted: the figures
# depend on the machine; the test checks the table is complete and its numbers are sane. tests/
# Env: SWARM_BIN (bin/swarm), SWARM_TEST_TMP (scratch).
# Closes with "e2e_quant: N passed, N failed"; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_quant"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh

# Every row of the table: type, threads, then positive figures (matvec and read GB/s, ratio).
rows_ok() { # name, wanted row count
    local n
    n=$(awk '$1 ~ /^(f16|bf16|q8_0|q4_0|f32|q4_K|q5_K|q6_K|q4_1|q5_0|q5_1|iq4_nl|q2_K|q3_K|iq4_xs)$/ &&
             $2 > 0 && $6 > 0 && $8 > 0 && $9 > 0' \
        "$T/$1.out" | wc -l)
    eq "$1: complete rows" "$n" "$2"
}

sw small bench-quant --dim 256 --rows 96 --reps 3 --pool 1M --threads 1,2
expect_rc small 0
rows_ok small 8
has small out "ratio"
for isa in scalar avx2 avx512; do
    sw "isa_$isa" bench-quant --dim 256 --rows 40 --reps 1 --pool 1M --threads 3 --isa "$isa" \
        --types f32,q4_0 --batch 3
    if [ "$rc" = 0 ]; then
        rows_ok "isa_$isa" 2
        has "isa_$isa" out "isa $isa"
    else # a CPU without this ISA: a clean refusal naming the best one
        expect_rc "isa_$isa" 2
        has "isa_$isa" err "best here"
    fi
done

sw kquants bench-quant --dim 512 --rows 40 --reps 2 --pool 1M --threads 1,2 --types q4_K,q5_K,q6_K \
    --batch 3
expect_rc kquants 0
rows_ok kquants 6
sw newtypes bench-quant --dim 512 --rows 40 --reps 2 --pool 1M --threads 1,2 \
    --types q4_1,q5_0,q5_1,iq4_nl,q2_K,q3_K,iq4_xs --batch 3
expect_rc newtypes 0
rows_ok newtypes 14
sw bad_type bench-quant --types iq2_xs
expect_rc bad_type 2
has bad_type err "iq2_xs"
sw bad_threads bench-quant --threads 0
expect_rc bad_threads 2
sw bad_isa bench-quant --isa sse9
expect_rc bad_isa 2
sw bad_dim bench-quant --dim 100 --rows 8 --types q8_0 --reps 1 --pool 1M
expect_rc bad_dim 2
has bad_dim err "not a multiple of its 32-element block"
sw bad_kdim bench-quant --dim 288 --rows 8 --types q6_K --reps 1 --pool 1M
expect_rc bad_kdim 2
has bad_kdim err "not a multiple of its 256-element block"

# swarm quantize on the lab's dense model: W in the target type, clean refusals.
sw gen gen --layers 2 --dim 256 --seed 3 -o "$T/dense.gguf" --alignment 32
expect_rc gen 0
sw q8 quantize -v "$T/dense.gguf" "$T/dense-q8.gguf" Q8_0
expect_rc q8 0
has q8 out "blk.1.w"
has q8 out "q8_0"
has q8 out "2 quantized"
sw q6 quantize "$T/dense.gguf" "$T/dense-q6.gguf" q6_k
expect_rc q6 0
sw qhelp quantize --help
expect_rc qhelp 0
has qhelp out "Q4_K_M"
sw qbad quantize "$T/dense.gguf" "$T/x.gguf" Q3_K_XL
expect_rc qbad 2
has qbad err "unknown type 'Q3_K_XL'"
[ ! -e "$T/x.gguf" ] && ok || bad "qbad: output created"
sw qmissing quantize "$T/nope.gguf" "$T/x.gguf" Q8_0
expect_rc qmissing 1
has qmissing err "nope.gguf"
sw qargs quantize "$T/dense.gguf"
expect_rc qargs 2
sw qthreads quantize --threads 0 "$T/dense.gguf" "$T/x.gguf" Q8_0
expect_rc qthreads 2
sw qt2 quantize --threads 2 "$T/dense.gguf" "$T/dense-q8-t2.gguf" Q8_0
expect_rc qt2 0
cmp -s "$T/dense-q8.gguf" "$T/dense-q8-t2.gguf" && ok || bad "qt2: 2 threads wrote other bytes"

# swarm quantize on a llama file: llama.cpp's mixes (Q3_K_M, Q2_K, IQ4_XS) and the pure
# Q5_1 load and generate; 1 and 2 threads agree on the text (the kernels' order is fixed).
gzip -dc tests/fixtures/tok/llama-spm.gguf.gz > "$T/vocab.gguf"
sw lgen gen --arch llama --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 \
    --vocab-from "$T/vocab.gguf" --seed 5 -o "$T/l.gguf"; expect_rc lgen 0
for m in Q3_K_M Q2_K IQ4_XS Q5_1; do
    sw "lq_$m" quantize -v "$T/l.gguf" "$T/l-$m.gguf" "$m"; expect_rc "lq_$m" 0
    sw "lg1_$m" generate "$T/l-$m.gguf" --prompt "Once upon a time" -n 6 --temp 0 --threads 1
    expect_rc "lg1_$m" 0
    sw "lg2_$m" generate "$T/l-$m.gguf" --prompt "Once upon a time" -n 6 --temp 0 --threads 2
    eq "$m: threads 1 vs 2" "$(cat "$T/lg2_$m.out")" "$(cat "$T/lg1_$m.out")"
done
typed() { # name, tensor, type: the -v line "TENSOR FROM -> TO"
    eq "$1: $2" "$(awk -v t="$2" '$1 == t { print $4 }' "$T/$1.out")" "$3"
}
typed lq_Q3_K_M blk.0.attn_v.weight q5_K
typed lq_Q3_K_M blk.1.attn_v.weight q5_K
typed lq_Q3_K_M blk.1.attn_output.weight q4_K
typed lq_Q3_K_M blk.1.ffn_up.weight q3_K
typed lq_Q2_K blk.0.ffn_down.weight q3_K
typed lq_Q2_K blk.0.attn_v.weight q3_K
typed lq_Q2_K blk.0.attn_q.weight q2_K
typed lq_IQ4_XS blk.1.ffn_up.weight iq4_xs
typed lq_IQ4_XS blk.0.ffn_down.weight iq4_xs
typed lq_IQ4_XS output.weight q6_K

echo "e2e_quant: $pass passed, $fail failed"
[ "$fail" = 0 ]
