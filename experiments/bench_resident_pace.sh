#!/bin/bash
# bench_resident_pace.sh — issue 22 item 4: the resident arm's decode pace against the reference
# arm's, in alternating rounds (each round runs every cell once, the order rotated per round).
# Usage: experiments/bench_resident_pace.sh MODEL.gguf [ROUNDS]
# Env: CELLS "name=binary:arm ..." (default: ref=bin/swarm:reference res=bin/swarm:resident),
#      THREADS (2), WORKERS (3), N (64 tokens). Prints one line per run and the load average.
# Compare two builds of the resident arm in one sitting by naming both binaries in CELLS.
set -u
cd "$(dirname "$0")/.."
M=${1:?usage: $0 MODEL.gguf [ROUNDS]}
R=${2:-6}
: "${CELLS:=ref=bin/swarm:reference res=bin/swarm:resident}" "${THREADS:=2}" "${WORKERS:=3}" "${N:=64}"
read -r -a cells <<<"$CELLS"
nc=${#cells[@]}
for ((r = 0; r < R; r++)); do
    echo "# round $((r + 1)) $(uptime | sed 's/.*load/load/')"
    for ((j = 0; j < nc; j++)); do
        c=${cells[$(((r + j) % nc))]}
        name=${c%%=*} spec=${c#*=}
        bin=${spec%%:*} arm=${spec#*:}
        extra=()
        [ "$arm" = resident ] && extra=(--arm resident --workers "$WORKERS")
        line=$(timeout 300 "$bin" generate "$M" --prompt "Once upon a time" -n "$N" --temp 0 \
            --ctx 256 --threads "$THREADS" "${extra[@]}" 2>&1 | grep -o 'generated [0-9]*.*itl p50 [0-9.]*')
        tps=$(sed -n 's/.*ms, \([0-9.]*\) tok\/s.*/\1/p' <<<"$line")
        echo "$((r + 1)) $name ${tps:-FAILED} ($line)"
    done
done
echo "# end $(uptime | sed 's/.*load/load/')"
