#!/bin/bash
# itl_bench.sh — one stream's inter-token latency alone and with a 2,000-token prompt arriving
# mid-stream (issue 21): starts `swarm serve --parallel 2`, runs experiments/itl_bench.py, stops it.
#
#   usage: experiments/itl_bench.sh MODEL.gguf [STREAM_TOKENS PROMPT_TOKENS AFTER] [-- serve options]
# SWARM_BIN picks the binary (to compare two builds). Prints itl_bench.py's JSON line.
set -eu -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$1; shift
ARGS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do ARGS+=("$1"); shift; done
[ $# -gt 0 ] && shift
BIN=${SWARM_BIN:-$ROOT/bin/swarm}
D=$(mktemp -d)
trap 'kill $pid 2>/dev/null; rm -rf "$D"' EXIT
"$BIN" serve "$MODEL" --listen 127.0.0.1:0 --port-file "$D/port" --ctx 2048 --parallel 2 \
    --threads 2 "$@" 2>"${ITL_LOG:-$D/log}" & pid=$!
for _ in $(seq 6000); do
    grep -q "serve: ready" "${ITL_LOG:-$D/log}" 2>/dev/null && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
done
grep -q "serve: ready" "${ITL_LOG:-$D/log}" || { tail -5 "${ITL_LOG:-$D/log}" >&2; exit 1; }
python3 "$ROOT/experiments/itl_bench.py" "$(cat "$D/port")" "${ARGS[@]}"
kill -TERM $pid; wait $pid || true
