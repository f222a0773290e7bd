#!/bin/bash
# e2e_serve_tools.sh — structured output and tool calls through the real clients (tests/js/tools.mjs:
# openai 6, the AI SDK 6, LangChain) against swarm serve on a random-weight model: a schema-
# constrained reply validates, forced calls' arguments validate, the AI SDK's tool loop completes
# with the result in the history, LangChain's bindTools and withStructuredOutput work; the forced
# calls again under the Llama 3 and Mistral templates; tool_choice auto answers in OpenAI's shape;
# n 2: each choice validates / has its own call, whole and streamed.
# tests/  Env: SWARM_BIN, SWARM_TEST_TMP. Closes with "e2e_serve_tools: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_serve_tools"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done' EXIT


if [ ! -d build/npm/node_modules/openai ] || ! command -v node >/dev/null; then
    bad "the client libraries are not installed (make deps installs them under build/npm)"
    echo "e2e_serve_tools: $pass passed, $fail failed"; exit 1
fi

gzip -dc tests/fixtures/tok/llama-spm.gguf.gz > "$T/vocab.gguf"
sw gen gen --arch llama --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 \
    --vocab-from "$T/vocab.gguf" --type q8_0 --seed 7 -o "$T/tiny.gguf"; expect_rc gen 0

start() { # name, args...: a server in the background; waits for its port file and "ready"
    local name=$1; shift
    "$SWARM_BIN" serve "$T/tiny.gguf" --listen 127.0.0.1:0 --port-file "$T/$name.port" "$@" \
        >"$T/$name.out" 2>"$T/$name.err" &
    pids+=($!); eval "${name}_pid=$!"
    wait_for "$T/$name.err" "serve: ready" 30 ||
        { bad "$name did not start"; tail -5 "$T/$name.err" >&2; }
    eval "${name}_port=$(cat "$T/$name.port" 2>/dev/null || echo 0)"
}

# Qwen/Hermes (chatml): every check, the three client libraries
start hermes --ctx 1024 --parallel 2 --chat-template chatml
# shellcheck disable=SC2154
timeout 300 node tests/js/tools.mjs "$hermes_port" tiny full >"$T/hermes.txt" 2>&1
tally "$T/hermes.txt"

# tool_choice auto: the noise rarely calls; the reply is text or calls, in OpenAI's shape
curl -s "http://127.0.0.1:$hermes_port/v1/chat/completions" -d '{"messages":[{"role":"user",
    "content":"hi"}],"max_tokens":16,"seed":1,"tools":[{"type":"function","function":{"name":"f"}}]}' \
    >"$T/auto.json"
python3 - "$T/auto.json" <<'PY' && ok || bad "tool_choice auto: $(head -c 300 "$T/auto.json")"
import json, sys
c = json.load(open(sys.argv[1]))["choices"][0]
m = c["message"]
assert c["finish_reason"] in ("stop", "length", "tool_calls"), c
assert isinstance(m["content"], str) or m.get("tool_calls"), m
PY
# /apply-template renders tools as a chat request would
curl -s "http://127.0.0.1:$hermes_port/apply-template" -d '{"messages":[{"role":"user",
    "content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}' >"$T/apply.json"
python3 - "$T/apply.json" <<'PY' && ok || bad "/apply-template with tools: $(head -c 300 "$T/apply.json")"
import json, sys
p = json.load(open(sys.argv[1]))["prompt"]
assert "<tools>" in p and '"name": "f"' in p, p
PY
# the 400s name the field
code=$(curl -s -o "$T/b1.json" -w '%{http_code}' "http://127.0.0.1:$hermes_port/v1/chat/completions" \
    -d '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}')
eq "a named function not in tools: 400" "$code" 400
eq "... naming tool_choice" "$(jfield "$T/b1.json" error.param)" tool_choice
code=$(curl -s -o "$T/b2.json" -w '%{http_code}' "http://127.0.0.1:$hermes_port/v1/chat/completions" \
    -d '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object","properties":{"a":{"allOf":[]}}}}}}')
eq "allOf: 400" "$code" 400
has_json() { grep -q -F "$2" "$1" && ok || bad "$1 lacks $2: $(head -c 300 "$1")"; }
has_json "$T/b2.json" "properties.a: unsupported keyword 'allOf'"
code=$(curl -s -o "$T/b3.json" -w '%{http_code}' "http://127.0.0.1:$hermes_port/v1/completions" \
    -d '{"prompt":"x","tools":[{"type":"function","function":{"name":"f"}}]}')
eq "tools on /v1/completions: 400" "$code" 400
code=$(curl -s -o "$T/b4.json" -w '%{http_code}' "http://127.0.0.1:$hermes_port/v1/chat/completions" \
    -d '{"messages":[{"role":"user","content":"x"}],"grammar":"root ::= \"a\"","json_schema":{}}')
eq "grammar and json_schema together: 400" "$code" 400

# Llama 3.1 and Mistral: their call formats, forced calls through the openai client
for tmpl in llama3 mistral-v3; do
    name=${tmpl//-/_}
    start "$name" --ctx 1024 --parallel 1 --chat-template "$tmpl"
    port_var="${name}_port"
    timeout 120 node tests/js/tools.mjs "${!port_var}" tiny forced >"$T/$name.txt" 2>&1
    tally "$T/$name.txt"
done
start gemma --ctx 512 --parallel 1 --chat-template gemma
# shellcheck disable=SC2154
code=$(curl -s -o "$T/g.json" -w '%{http_code}' "http://127.0.0.1:$gemma_port/v1/chat/completions" \
    -d '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}')
eq "gemma has no tool format: 400" "$code" 400
has_json "$T/g.json" "has no tool-call format"

for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
pids=()
echo "e2e_serve_tools: $pass passed, $fail failed"
[ "$fail" = 0 ]
