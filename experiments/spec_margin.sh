#!/bin/bash
# spec_margin.sh TARGET COPY [N_GEN] — build experiments/spec_margin.c against build/libswarm.a
# (make first) and run it on the benchmark prompt of docs/measurements/2026-12-02-speculative.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/experiments/spec_margin
mkdir -p build/experiments
cc -std=c11 -D_GNU_SOURCE -O2 -I. -o "$out" experiments/spec_margin.c build/libswarm.a \
    -lzmq -lmsgpackc -L/usr/lib/x86_64-linux-gnu/openblas-pthread/ -lopenblas -lbpf -linih -ljansson -lxxhash -luring -lcrypto -lpcre2-8 -lmicrohttpd -lpthread -lm
P=${PROMPT:-"The history of the city begins with a small village on the river"}
ids=$(bin/swarm tokenize "$1" "$P" 2>/dev/null | head -1 | tr -d '[],')
"$out" "$1" "$2" "${3:-48}" $ids
