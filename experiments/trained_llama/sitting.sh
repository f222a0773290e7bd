#!/bin/bash
# sitting.sh ROUNDS — the issue-25 bars on the TinyLlama-shaped file carrying the trained model:
# reference arm and resident/wan (3 workers), plain vs its Q4_0 copy drafting, alternating; greedy.
set -u
# run in the directory holding tlt-f16.gguf and its copies
B=${SWARM:-/work/main/bin/swarm}
T=tlt-f16.gguf; Q=tlt-q4_0.gguf; Q2=tlt-q2_k.gguf
P="The history of the city begins with a small village on the river"
N=${N:-64}
W="--arm resident --workers 3 --worker-cap 900M --profile wan"
run() { # label args...
    local l=$1; shift
    echo "== $l $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    "$B" generate $T --prompt "$P" -n $N --temp 0 --threads 2 --out sit.jsonl "$@" 2>&1 >/dev/null |
        grep -E "tok/s|draft|parity|accept|void|error" | sed 's/^/   /'
}
for r in $(seq 1 ${1:-2}); do
    if [ $((r % 2)) = 1 ]; then
        run "r$r ref plain"; run "r$r ref q4_0" --draft $Q; run "r$r ref q2_k" --draft $Q2
        run "r$r wan plain" $W; run "r$r wan q4_0" $W --draft $Q; run "r$r wan q2_k" $W --draft $Q2
    else
        run "r$r wan q2_k" $W --draft $Q2; run "r$r wan q4_0" $W --draft $Q; run "r$r wan plain" $W
        run "r$r ref q2_k" --draft $Q2; run "r$r ref q4_0" --draft $Q; run "r$r ref plain"
    fi
done
