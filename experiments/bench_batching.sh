#!/bin/bash
# bench_batching.sh — continuous batching side by side: aggregate generation tokens/s of K
# streams at once against one, on swarm's reference arm, its resident arm (WORKERS spawned
# workers) and llama.cpp (K sequences in one context), the same file and threads. experiments/
#
#   swarm: bin/swarm generate MODEL --prompt "Once upon a time" -n GEN --temp 0 --ctx CTX
#     --threads THREADS [--arm resident --workers WORKERS] --sessions 1|K: the result's
#     aggregate_gen_tok_s (every session's tokens over the wall time of all of them, prompt
#     included; the sessions share passes: llm_model_batching, one act per pass on the
#     resident arm). The resident arm's parity gate runs after every run (not timed).
#   llama.cpp: experiments/bench_batching.mjs (node-llama-cpp 3.22.1's prebuilt CPU build):
#     the same prompt ids, GEN tokens greedy on each of 1|K sequences of one context.
# Every round runs the six cells in a rotated order (the first cell of round r is cell r), and
# the table gives each cell's runs and the K/1 ratio of the medians. The load average is
# printed before and after: on a shared machine, compare ratios of one sitting only.
#   usage: experiments/bench_batching.sh
# Env: MODEL (/work/models/tl-q8_0.gguf), THREADS (2), WORKERS (3), K (4), GEN (32), CTX (256),
#   ROUNDS (2), NODE_DIR (/work/tokjs), SWARM_BIN, OUT (build/bench_batching), SIDES (the sides
#   to run: "reference resident llama.cpp").
set -eu -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${SWARM_BIN:-$ROOT/bin/swarm}
MODEL=${MODEL:-/work/models/tl-q8_0.gguf}
THREADS=${THREADS:-2}
WORKERS=${WORKERS:-3}
K=${K:-4}
GEN=${GEN:-32}
CTX=${CTX:-256}
ROUNDS=${ROUNDS:-2}
NODE_DIR=${NODE_DIR:-/work/tokjs}
OUT=$(mkdir -p "${OUT:-$ROOT/build/bench_batching}" && cd "${OUT:-$ROOT/build/bench_batching}" && pwd)
MJS="$ROOT/experiments/bench_batching.mjs"

[ -x "$BIN" ] || { echo "bench_batching: $BIN missing (make bin/swarm)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "bench_batching: no $MODEL" >&2; exit 1; }

s_swarm() { # ARM SESSIONS RUN -> aggregate tokens/s
    local extra=()
    [ "$1" = resident ] && extra=(--arm resident --workers "$WORKERS")
    "$BIN" generate "$MODEL" --prompt "Once upon a time" -n "$GEN" --temp 0 --ctx "$CTX" \
        --threads "$THREADS" "${extra[@]}" --sessions "$2" --out "$OUT/$1_$2_$3.jsonl" \
        >/dev/null 2>"$OUT/$1_$2_$3.err" || { echo "FAILED"; return 0; }
    python3 -c "
import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print('%.2f' % (d.get('aggregate_gen_tok_s') or d['gen_tok_s']))" "$OUT/$1_$2_$3.jsonl"
}
s_llama() { # SEQUENCES -> aggregate tokens/s
    node "$MJS" "$NODE_DIR" "$MODEL" "$THREADS" "$1" "$GEN" "$CTX" 2>/dev/null |
        sed -n 's/^llama.cpp seqs=[0-9]* tokens=[0-9]* wall_ms=[0-9.]* agg=\([0-9.]*\)$/\1/p'
}

SIDES=${SIDES:-reference resident llama.cpp}
cells=()
for side in $SIDES; do cells+=("$side 1" "$side $K"); done
declare -A res
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# model $MODEL, threads $THREADS, workers $WORKERS, $GEN tokens a stream, K=$K"
for ((r = 0; r < ROUNDS; r++)); do
    for ((c = 0; c < ${#cells[@]}; c++)); do
        cell=${cells[$(((c + r) % ${#cells[@]}))]}
        set -- $cell
        if [ "$1" = llama.cpp ]; then v=$(s_llama "$2"); else v=$(s_swarm "$1" "$2" "$r"); fi
        echo "round $r: $cell: ${v:-FAILED} tok/s" >&2
        res[$cell]="${res[$cell]:-} ${v:-nan}"
    done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| side | 1 stream tok/s | $K streams aggregate tok/s | $K/1 (medians) |"
echo "|---|---|---|---|"
for side in $SIDES; do
    python3 - "$side" "${res[$side 1]}" "${res[$side $K]}" <<'PY'
import statistics, sys
side, one, many = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
f = lambda v: [float(x) for x in v if x != 'nan']
a, b = f(one), f(many)
ma = statistics.median(a) if a else float('nan')
mb = statistics.median(b) if b else float('nan')
print('| %s | %s | %s | %.2f |' % (side, ', '.join(one), ', '.join(many), mb / ma if a and b else float('nan')))
PY
done
