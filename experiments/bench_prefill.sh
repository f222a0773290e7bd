#!/bin/bash
# bench_prefill.sh — pipelined prefill on the resident arm: prompt tokens/s with WORKERS
# spawned workers, the prompt's chunks in flight at once (the default) against --no-pipeline
# (each batch awaited), beside the reference arm (one process) on the same file. experiments/
#
#   bin/swarm generate MODEL --prompt TEXT -n 1 --temp 0 --batch BATCH --ctx CTX --threads T
#     [--arm resident --workers WORKERS [--no-pipeline]]: the result's prompt_tok_s and
#     prompt_ms (time to first token). TEXT is a fixed English text repeated to about PROMPT
#     tokens. The resident arm's parity gate (the reference arm again, one position a pass)
#     runs after every resident run and is not timed: it is most of this script's time.
# Every round runs the cells in a rotated order; the table gives each cell's runs and the
# ratios of the medians. Load average before and after: compare ratios of one sitting only.
#   usage: experiments/bench_prefill.sh
# Env: MODEL (/work/models/tl-q8_0.gguf), THREADS ("1 2": worker and reference threads),
#   WORKERS (3), PROMPT (512), BATCH (64), ROUNDS (2), SWARM_BIN, OUT (build/bench_prefill),
#   CTX (PROMPT x 2 + 64; at most the model's trained context),
#   CELLS ("reference pipelined awaited"; "base": the pipelined arm of BASE_BIN, another build).
# The pipelined cells' chunk sizes (design.md, pipelined prefill) and the 1-8 host prediction
# the coordinator logs at the end go to OUT/CELL_tT_R.err.
set -eu -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${SWARM_BIN:-$ROOT/bin/swarm}
MODEL=${MODEL:-/work/models/tl-q8_0.gguf}
THREADS=${THREADS:-1 2}
WORKERS=${WORKERS:-3}
PROMPT=${PROMPT:-512}
BATCH=${BATCH:-64}
ROUNDS=${ROUNDS:-2}
OUT=$(mkdir -p "${OUT:-$ROOT/build/bench_prefill}" && cd "${OUT:-$ROOT/build/bench_prefill}" && pwd)

[ -x "$BIN" ] || { echo "bench_prefill: $BIN missing (make bin/swarm)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "bench_prefill: no $MODEL" >&2; exit 1; }
# about 12 tokens a sentence in a llama vocabulary
TEXT=$(python3 -c "print(' '.join(['Once upon a time there was a little girl who lived in a village near the forest.'] * max(1, $PROMPT // 18)))")
CTX=${CTX:-$((PROMPT * 2 + 64))}

s_run() { # CELL THREADS ROUND -> "prompt_tok_s prompt_ms tokens_in"
    local extra=()
    case $1 in
    pipelined) extra=(--arm resident --workers "$WORKERS") ;;
    awaited) extra=(--arm resident --workers "$WORKERS" --no-pipeline) ;;
    base) extra=(--arm resident --workers "$WORKERS") ;;
    esac
    local f="$OUT/$1_t$2_$3" bin=$BIN
    [ "$1" = base ] && bin=${BASE_BIN:?BASE_BIN: the other build}
    "$bin" generate "$MODEL" --prompt "$TEXT" -n 1 --temp 0 --batch "$BATCH" --ctx "$CTX" \
        --threads "$2" "${extra[@]}" --out "$f.jsonl" >/dev/null 2>"$f.err" ||
        { echo "nan nan nan"; return 0; }
    python3 -c "
import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print('%.2f %.1f %d' % (d['prompt_tok_s'], d['prompt_ms'], d['tokens_in']))" "$f.jsonl"
}

read -r -a cells <<<"${CELLS:-reference pipelined awaited}"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# model $MODEL, workers $WORKERS, batch $BATCH, prompt about $PROMPT tokens"
declare -A res
for t in $THREADS; do
    for ((r = 0; r < ROUNDS; r++)); do
        for ((c = 0; c < ${#cells[@]}; c++)); do
            cell=${cells[$(((c + r) % ${#cells[@]}))]}
            v=$(s_run "$cell" "$t" "$r")
            echo "threads $t round $r: $cell: $v (tok/s, ms, tokens)" >&2
            res[$cell $t]="${res[$cell $t]:-} $(echo "$v" | cut -d' ' -f1)"
            res[tokens]=$(echo "$v" | cut -d' ' -f3)
        done
    done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg); prompt ${res[tokens]} tokens"
echo
echo "| threads | cell | prompt tok/s (runs) | median / reference's |"
echo "|---|---|---|---|"
for t in $THREADS; do
    for cell in "${cells[@]}"; do
        python3 - "$t" "$cell" "${res[$cell $t]}" "${res[reference $t]:-}" <<'PY'
import statistics, sys
t, cell, runs, ref = sys.argv[1:]
med = lambda c: statistics.median([float(x) for x in c.split() if x != 'nan'] or [float('nan')])
r = med(ref) if ref.split() else float('nan')
print('| %s | %s | %s | %.2f |' % (t, cell, ', '.join(runs.split()), med(runs) / r))
PY
    done
done
