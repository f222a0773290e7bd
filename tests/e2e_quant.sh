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
    n=$(awk '$1 ~ /^(f16|bf16|q8_0|q4_0|f32)$/ && $2 > 0 && $6 > 0 && $8 > 0 && $9 > 0' \
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

sw bad_type bench-quant --types q4_K
expect_rc bad_type 2
has bad_type err "q4_K"
sw bad_threads bench-quant --threads 0
expect_rc bad_threads 2
sw bad_isa bench-quant --isa sse9
expect_rc bad_isa 2
sw bad_dim bench-quant --dim 100 --rows 8 --types q8_0 --reps 1 --pool 1M
expect_rc bad_dim 2
has bad_dim err "not a multiple of its 32-element block"

echo "e2e_quant: $pass passed, $fail failed"
[ "$fail" = 0 ]
