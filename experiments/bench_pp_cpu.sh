#!/bin/bash
# bench_pp_cpu.sh — prompt tokens per CPU second, swarm against llama.cpp on the same files, one
# thread, alternating sides. experiments/
#
# On a shared machine CPU time is what neighbours disturb least (docs/measurements/
# 2026-12-02-kernels.md): llama.cpp's is process.cpuUsage() around the prompt's evaluation
# (experiments/bench_llamacpp.mjs prints it as pp_cpu); swarm's is the CPU time (user + sys) of
# `bench-llm --prompt 512 --gen 1` minus that of `--prompt 16 --gen 1` (the same loading,
# read-bound passes and token), over the 496 positions between.
#   usage: experiments/bench_pp_cpu.sh FILE.gguf...      (prints one row per file and rep)
# Env: REPS (2: llama.cpp, swarm, then swarm, llama.cpp), NODE_DIR (/work/tokjs), SWARM_BIN,
#   BATCH (swarm's prompt batch, bench-llm --batch: 64; llama.cpp takes the 512 in one).
set -eu -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${SWARM_BIN:-$ROOT/bin/swarm}
NODE_DIR=${NODE_DIR:-/work/tokjs}
REPS=${REPS:-2}
BATCH=${BATCH:-64}
MJS="$ROOT/experiments/bench_llamacpp.mjs"
s_cpu() { # FILE PROMPT -> CPU seconds of one bench-llm run
    local t
    t=$(mktemp)
    /usr/bin/time -o "$t" -f "%U %S" "$BIN" bench-llm "$1" --threads 1 --prompt "$2" --gen 1 --batch "$BATCH" \
        >/dev/null 2>&1
    awk '{ printf "%.3f", $1 + $2 }' "$t"
    rm -f "$t"
}
s_swarm() { # FILE -> tokens per CPU second
    local a b
    a=$(s_cpu "$1" 16)
    b=$(s_cpu "$1" 512)
    awk -v a="$a" -v b="$b" 'BEGIN { printf "%.1f", 496 / (b - a) }'
}
s_llama() { # FILE -> tokens per CPU second
    node "$MJS" "$NODE_DIR" "$1" 1 512 4 2>/dev/null | sed -n 's/^llama.cpp pp_cpu=\([0-9.]*\).*/\1/p'
}
echo "| file | rep | first | llama.cpp tok/CPU s | swarm tok/CPU s | ratio | load |"
echo "|---|---|---|---|---|---|---|"
for f in "$@"; do
    for r in $(seq 1 "$REPS"); do
        if [ $((r % 2)) = 1 ]; then
            l=$(s_llama "$f"); s=$(s_swarm "$f"); first=llama.cpp
        else
            s=$(s_swarm "$f"); l=$(s_llama "$f"); first=swarm
        fi
        load=$(cut -d' ' -f1 /proc/loadavg)
        ratio=$(awk -v s="$s" -v l="$l" 'BEGIN { printf "%.2f", s / l }')
        echo "| $(basename "$f") | $r | $first | $l | $s | $ratio | $load |"
    done
done
