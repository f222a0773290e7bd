#!/bin/bash
# serve_cache_bench.sh — swarm serve's prompt cache on one model and arm: starts a server, runs
# experiments/serve_cache_bench.py against it, stops it. experiments/
#
#   usage: experiments/serve_cache_bench.sh MODEL.gguf [serve options: --arm ssd --cap 1G, ...]
# Prints serve_cache_bench.py's JSON line.
set -eu -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$1; shift
BIN=${SWARM_BIN:-$ROOT/bin/swarm}
D=$(mktemp -d)
trap 'kill $pid 2>/dev/null; rm -rf "$D"' EXIT
"$BIN" serve "$MODEL" --listen 127.0.0.1:0 --port-file "$D/port" --ctx 2048 \
    --chat-template tinyllama "$@" 2>"$D/log" & pid=$!
for _ in $(seq 6000); do grep -q "serve: ready" "$D/log" 2>/dev/null && break; sleep 0.05; done
grep -q "serve: ready" "$D/log" || { tail -5 "$D/log" >&2; exit 1; }
python3 "$ROOT/experiments/serve_cache_bench.py" "$(cat "$D/port")"
kill -TERM $pid; wait $pid
