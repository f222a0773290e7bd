#!/bin/bash
# e2e_serve_api.sh — swarm serve through the client libraries users have (openai 6, the AI SDK,
# LangChain; pinned in tests/js, installed under build/npm by make deps) over a random-weight
# model: every request field honoured or refused, several choices, seeds, llama-server's
# endpoints, model names and aliases, CORS, the access log, the end of --grace. tests/
# (issue 23 items 1, 4, 5, 7; the chat page's controls, item 6, are e2e_serve.sh's Chromium run)
# Env: SWARM_BIN (bin/swarm), SWARM_TEST_TMP (scratch). Closes with "e2e_serve_api: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_serve_api"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done' EXIT

if ! command -v node >/dev/null || [ ! -d build/npm/node_modules/openai ]; then
    bad "node or the client libraries are missing (make deps installs them under build/npm)"
    echo "e2e_serve_api: $pass passed, $fail failed"; exit 1
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
js() { # name, phase, port, key, args...: one phase of tests/js/serve_api.mjs, tallied
    local name=$1 phase=$2 port=$3 key=$4; shift 4
    timeout 300 node tests/js/serve_api.mjs "$phase" "http://127.0.0.1:$port" "$key" "$@" \
        >"$T/$name.txt" 2>&1
    tally "$T/$name.txt"
}

# flags
sw badalias serve "$T/tiny.gguf" --alias ""; expect_rc badalias 2
has badalias err "--alias"

KEY=sekrit-$$
ORIGIN=http://front.example
start main --ctx 256 --parallel 4 --api-key "$KEY" --chat-template chatml \
    --alias gpt-4o-mini --alias my-alias --cors "$ORIGIN"
# shellcheck disable=SC2154
js fields fields "$main_port" "$KEY"
js endpoints endpoints "$main_port" "$KEY"
js cors cors "$main_port" "$KEY" "$ORIGIN"
# the access log: a line per request (method, path, status, tokens, seconds), never the key
# nor the prompt's text
grep -qE '^serve: access 127\.0\.0\.1 POST /v1/chat/completions 200 in=[0-9]+ out=[1-9][0-9]* [0-9.]+s$' \
    "$T/main.err" && ok || bad "access log: no chat completion line"
grep -qE '^serve: access 127\.0\.0\.1 POST /v1/chat/completions 400 in=0 out=0 ' "$T/main.err" \
    && ok || bad "access log: no line for a refused request"
grep -qE '^serve: access 127\.0\.0\.1 OPTIONS /v1/chat/completions 204 ' "$T/main.err" \
    && ok || bad "access log: no line for a preflight"
eq "access log: never the key" "$(grep -c -- "$KEY" "$T/main.err")" 0
eq "access log: never the prompt" "$(grep -c 'Tell me a story' "$T/main.err")" 0
kill -TERM "$main_pid"; if wait "$main_pid"; then rc=0; else rc=$?; fi
eq "main: SIGTERM exit 0" "$rc" 0

# --log-prompts shows the body; --strict-model takes only the file's name and its aliases
start strict --ctx 256 --parallel 1 --chat-template chatml --alias my-alias --strict-model \
    --log-prompts
# shellcheck disable=SC2154
js strict strict "$strict_port" ""
grep -q 'body={"model":"my-alias","messages":\[{"role":"user","content":"Tell me a story"}' \
    "$T/strict.err" && ok || bad "--log-prompts: the body is not in the log"
kill -TERM "$strict_pid"; wait "$strict_pid"

# --grace 0: SIGTERM under three long requests (two streams, one whole reply)
start grace --ctx 2048 --parallel 3 --chat-template chatml --grace 0
# shellcheck disable=SC2154
js grace grace "$grace_port" "" "$grace_pid"
if wait "$grace_pid"; then rc=0; else rc=$?; fi
eq "grace: exit 0" "$rc" 0
has grace err "cancelling 3 requests still running"

echo "e2e_serve_api: $pass passed, $fail failed"
[ "$fail" = 0 ]
