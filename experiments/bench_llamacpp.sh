#!/bin/bash
# bench_llamacpp.sh — swarm against llama.cpp on the same files, side by side: prompt processing
# (pp) and generation (tg) tokens/s on TinyLlama-1.1B-shaped random-weight files. experiments/
#
# Makes the files once (swarm gen: llama, dim 2048, 22 layers, 32 heads, 4 kv heads, ff 5632,
# the vocabulary of VOCAB, F16; swarm quantize for every other type), then for each type and
# thread count runs both sides REPS times, alternating which goes first (from one run to the
# next, and from one row to the next), and prints a markdown table of the best of each side and
# their ratios (swarm / llama.cpp).
#   llama.cpp: node-llama-cpp (its prebuilt CPU build) through experiments/bench_llamacpp.mjs:
#     the prompt as one batch of PROMPT tokens, then GEN tokens one at a time (median).
#   swarm: bin/swarm bench-llm --threads N --prompt PROMPT --gen GEN --batch BATCH (the prompt
#     in batches of BATCH positions, generation's median per-token time).
#   usage: experiments/bench_llamacpp.sh [MODEL_DIR]     (default build/bench_llamacpp)
# Env: TYPES (default "Q4_0 Q4_K_M Q5_K_M Q6_K Q8_0 F16"), THREADS ("1 2"), REPS (2),
#   PROMPT (512), GEN (32), BATCH (64, swarm's default; PROMPT gives swarm the one batch
#   llama.cpp gets), NODE_DIR (/work/tokjs: node_modules/node-llama-cpp 3.22.1),
#   VOCAB (/work/models/vocab.gguf), SWARM_BIN, FLIP (0; 1: the other side first in every run,
#   for a second pass that completes the alternation of a REPS=1 one), SWARM_ARGS (more
#   bench-llm options, e.g. "--isa avx2" to set swarm's AVX2 kernels against a NODE_DIR whose
#   node-llama-cpp keeps only its libggml-cpu-haswell.so: both sides' AVX2 fallbacks).
set -eu -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mkdir -p "${1:-$ROOT/build/bench_llamacpp}" && cd "${1:-$ROOT/build/bench_llamacpp}" && pwd)
BIN=${SWARM_BIN:-$ROOT/bin/swarm}
TYPES=${TYPES:-Q4_0 Q4_K_M Q5_K_M Q6_K Q8_0 F16}
THREADS=${THREADS:-1 2}
REPS=${REPS:-2}
PROMPT=${PROMPT:-512}
GEN=${GEN:-32}
BATCH=${BATCH:-64}
NODE_DIR=${NODE_DIR:-/work/tokjs}
VOCAB=${VOCAB:-/work/models/vocab.gguf}
FLIP=${FLIP:-0}
read -r -a XARGS <<<"${SWARM_ARGS:-}"
MJS="$ROOT/experiments/bench_llamacpp.mjs"

[ -x "$BIN" ] || { echo "bench_llamacpp: $BIN missing (make bin/swarm)" >&2; exit 1; }
[ -d "$NODE_DIR/node_modules/node-llama-cpp" ] ||
    { echo "bench_llamacpp: no node-llama-cpp under $NODE_DIR" >&2; exit 1; }
if [ -f "$NODE_DIR/install.log" ] && ! grep -q "done 0" "$NODE_DIR/install.log"; then
    echo "bench_llamacpp: $NODE_DIR/install.log does not say 'done 0' yet" >&2
    exit 1
fi

base="$DIR/tl-F16.gguf"
if [ ! -f "$base" ]; then
    echo "making $base" >&2
    "$BIN" gen --arch llama --dim 2048 --layers 22 --heads 32 --kv-heads 4 --ff 5632 \
        --vocab-from "$VOCAB" --type f16 --seed 1 -o "$base.tmp" >&2
    mv "$base.tmp" "$base"
fi
for t in $TYPES; do
    f="$DIR/tl-$t.gguf"
    [ "$t" = F16 ] || [ -f "$f" ] || { echo "making $f" >&2; "$BIN" quantize "$base" "$f" "$t" >&2; }
done

s_swarm() { # MODEL THREADS -> "pp tg"
    "$BIN" bench-llm "$1" --threads "$2" --prompt "$PROMPT" --gen "$GEN" --batch "$BATCH" \
        ${XARGS[@]+"${XARGS[@]}"} 2>/dev/null |
        sed -n 's/.*prompt [0-9]* tokens (batches of [0-9]*) \([0-9.]*\) tok\/s | generation \([0-9.]*\) tok\/s.*/\1 \2/p'
}
s_llama() { # MODEL THREADS -> "pp tg"
    node "$MJS" "$NODE_DIR" "$1" "$2" "$PROMPT" "$GEN" 2>/dev/null |
        sed -n 's/^llama.cpp pp=\([0-9.]*\) tg=\([0-9.]*\)$/\1 \2/p'
}
s_max() { awk -v a="$1" -v b="$2" 'BEGIN { print ((a + 0 > b + 0) ? a : b) }'; }
s_ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

echo "swarm prompt batches: $BATCH positions; llama.cpp: one batch of $PROMPT"
echo "| type | threads | llama.cpp pp$PROMPT | swarm pp$PROMPT | ratio | llama.cpp tg | swarm tg | ratio |"
echo "|---|---|---|---|---|---|---|---|"
row=0
for t in $TYPES; do
    f="$DIR/tl-$t.gguf"
    for th in $THREADS; do
        lp=0 lt=0 sp=0 st=0
        row=$((row + 1))
        for r in $(seq 1 "$REPS"); do
            for side in $( [ $(((r + row + FLIP) % 2)) = 0 ] && echo "llama swarm" || echo "swarm llama"); do
                if [ "$side" = llama ]; then read -r p g < <(s_llama "$f" "$th"; echo "0 0")
                    lp=$(s_max "$lp" "$p"); lt=$(s_max "$lt" "$g")
                else read -r p g < <(s_swarm "$f" "$th"; echo "0 0")
                    sp=$(s_max "$sp" "$p"); st=$(s_max "$st" "$g")
                fi
                echo "  $t threads $th rep $r $side: pp $p tg $g" >&2
            done
        done
        echo "| $t | $th | $lp | $sp | $(s_ratio "$sp" "$lp") | $lt | $st | $(s_ratio "$st" "$lt") |"
    done
done
