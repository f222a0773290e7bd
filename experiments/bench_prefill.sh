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
#   WORKERS (3), PROMPT (512), BATCH (64), ROUNDS (2), SWARM_BIN, OUT (build/bench_prefill).
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
CTX=$((PROMPT * 2 + 64))

s_run() { # CELL THREADS ROUND -> "prompt_tok_s prompt_ms tokens_in"
    local extra=()
    case $1 in
    pipelined) extra=(--arm resident --workers "$WORKERS") ;;
    awaited) extra=(--arm resident --workers "$WORKERS" --no-pipeline) ;;
    esac
    local f="$OUT/$1_t$2_$3"
    "$BIN" generate "$MODEL" --prompt "$TEXT" -n 1 --temp 0 --batch "$BATCH" --ctx "$CTX" \
        --threads "$2" "${extra[@]}" --out "$f.jsonl" >/dev/null 2>"$f.err" ||
        { echo "nan nan nan"; return 0; }
    python3 -c "
import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print('%.2f %.1f %d' % (d['prompt_tok_s'], d['prompt_ms'], d['tokens_in']))" "$f.jsonl"
}

cells=(reference pipelined awaited)
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
echo "| threads | reference tok/s | resident pipelined tok/s | resident awaited tok/s | pipelined/awaited | pipelined/reference |"
echo "|---|---|---|---|---|---|"
for t in $THREADS; do
    python3 - "$t" "${res[reference $t]}" "${res[pipelined $t]}" "${res[awaited $t]}" <<'PY'
import statistics, sys
t, *cols = sys.argv[1:]
v = [[float(x) for x in c.split() if x != 'nan'] for c in cols]
m = [statistics.median(x) if x else float('nan') for x in v]
print('| %s | %s | %s | %s | %.2f | %.2f |' % (t, ', '.join(cols[0].split()), ', '.join(cols[1].split()),
      ', '.join(cols[2].split()), m[1] / m[2], m[1] / m[0]))
PY
done
