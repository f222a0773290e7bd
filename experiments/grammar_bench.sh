#!/bin/bash
# grammar_bench.sh — what a grammar costs per token next to the forward pass: swarm serve on MODEL,
# the same chat request plain, with response_format json_object, with a JSON schema and with a
# forced tool call (tool_choice required), each REPEATS times (seeds 1..REPEATS); prints the
# server's timings (tokens, ms per token, grammar ms per token, tokens drawn again from a mask).
# experiments/  Usage: experiments/grammar_bench.sh MODEL [TEMPLATE=chatml] [MAX_TOKENS=200] [REPEATS=3]
set -eu
cd "$(dirname "$0")/.."
model=$1 tmpl=${2:-chatml} maxt=${3:-200} reps=${4:-3}
T=$(mktemp -d /tmp/grammar_bench.XXXXXX)
bin/swarm serve "$model" --listen 127.0.0.1:0 --port-file "$T/port" --ctx 1024 --parallel 1 \
    --chat-template "$tmpl" >"$T/out" 2>"$T/err" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$T"' EXIT
for _ in $(seq 1 600); do grep -q "serve: ready" "$T/err" && break; sleep 0.5; done
port=$(cat "$T/port")
schema='{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"type":"string"},"maxItems":3}},"required":["name","age","tags"],"additionalProperties":false}'
tool='{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}'
printf '%-12s %5s %9s %11s %9s %s\n' case tokens ms/token grammar_ms/t masked finish
for case in plain json_object json_schema tool_required; do
    case $case in
    plain) extra='' ;;
    json_object) extra=',"response_format":{"type":"json_object"}' ;;
    json_schema) extra=',"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":'"$schema"'}}' ;;
    tool_required) extra=',"tools":['"$tool"'],"tool_choice":"required"' ;;
    esac
    for seed in $(seq 1 "$reps"); do
        curl -s "http://127.0.0.1:$port/v1/chat/completions" -d '{"messages":[{"role":"user",
            "content":"Describe a person as JSON."}],"max_tokens":'"$maxt"',"seed":'"$seed$extra"'}' |
            python3 -c '
import json, sys
r = json.load(sys.stdin)
if "error" in r:
    print("%-12s %s" % (sys.argv[1], r["error"]["message"][:100])); sys.exit(0)
t = r["timings"]; n = r["usage"]["completion_tokens"]
ms = (n - 1) / t["predicted_per_second"] * 1e3 if t["predicted_per_second"] else 0
print("%-12s %5d %9.3f %11.3f %9s %s" % (sys.argv[1], n, ms / max(n - 1, 1),
      t.get("grammar_ms", 0) / n, t.get("grammar_masked", "-"), r["choices"][0]["finish_reason"]))' "$case"
    done
done
