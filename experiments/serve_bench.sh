#!/bin/bash
# serve_bench.sh — swarm serve over HTTP against the same load in-process: time to first token
# (one client, one request at a time) and aggregate tokens/s (16 clients). experiments/
#
#   usage: experiments/serve_bench.sh MODEL.gguf [PARALLEL] [SECONDS] [MAX_TOKENS]
# Prints three JSON lines: in-process one client (serve_inproc 1 slot), in-process 16 clients
# (PARALLEL slots), HTTP (serve_bench.py: client ttft, the server's ttft for the same requests,
# 16 clients). Needs build/tests/tools/serve_inproc (`make build/tests/tools/serve_inproc`).
set -eu -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$1 K=${2:-4} SECS=${3:-10} MAXT=${4:-32}
BIN=${SWARM_BIN:-$ROOT/bin/swarm}
INPROC=${SERVE_INPROC:-$ROOT/build/tests/tools/serve_inproc}
PROMPT="Once upon a time there was a small machine that wanted to talk"
D=$(mktemp -d)
trap 'kill $pid 2>/dev/null; rm -rf "$D"' EXIT
echo "inproc 1 client:   $("$INPROC" "$MODEL" 1 1 "$SECS" "$MAXT" "$PROMPT")"
echo "inproc 16 clients: $("$INPROC" "$MODEL" "$K" 16 "$SECS" "$MAXT" "$PROMPT")"
"$BIN" serve "$MODEL" --listen 127.0.0.1:0 --port-file "$D/port" --parallel "$K" --queue 16 \
    2>"$D/log" & pid=$!
for _ in $(seq 600); do grep -q "serve: ready" "$D/log" 2>/dev/null && break; sleep 0.05; done
echo "http:              $(python3 "$ROOT/experiments/serve_bench.py" "$(cat "$D/port")" 50 16 \
    "$SECS" "$MAXT" "$PROMPT")"
kill -TERM $pid; wait $pid
