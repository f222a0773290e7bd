#!/bin/bash
# e2e_serve.sh — swarm serve on loopback (ephemeral ports) over a random-weight model: every
# endpoint streamed and not, the bad-input table, slow clients, 16 concurrent streams, a client
# that hangs up, 429, the chat page in headless Chromium, the resident arm (a worker killed
# mid-stream, degraded health, a respawned worker back), SIGTERM. tests/
# Env: SWARM_BIN (bin/swarm), SWARM_TEST_TMP (scratch). Closes with "e2e_serve: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_serve"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done' EXIT


gzip -dc tests/fixtures/tok/llama-spm.gguf.gz > "$T/vocab.gguf"
sw gen gen --arch llama --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 \
    --vocab-from "$T/vocab.gguf" --type q8_0 --seed 7 -o "$T/tiny.gguf"; expect_rc gen 0

# flags: off loopback needs a key; arms that cannot serve yet say so
sw offlo serve "$T/tiny.gguf" --listen 0.0.0.0:0; expect_rc offlo 2; has offlo err "--api-key"
sw badarm serve "$T/tiny.gguf" --arm swarm; expect_rc badarm 2
has badarm err "unknown arm 'swarm' (arms: reference, ssd, resident)"
sw badwcap serve "$T/tiny.gguf" --worker-cap 64M; expect_rc badwcap 2
has badwcap err "are the resident arm's (add --arm resident)"
sw badtmpl serve "$T/tiny.gguf" --listen 127.0.0.1:0 --chat-template jinja2; expect_rc badtmpl 2
sw nomodel serve "$T/none.gguf" --listen 127.0.0.1:0; expect_rc nomodel 2

# While loading: /health and the API answer 503. The model path is a FIFO, so loading blocks
# in open() until this script opens the other end: the loading state lasts exactly as long as
# the test needs, on any machine. An empty write end then makes the load fail: exit 1, cleanly.
mkfifo "$T/slow.gguf"
"$SWARM_BIN" serve "$T/slow.gguf" --listen 127.0.0.1:0 --port-file "$T/slow.port" \
    >"$T/slow.out" 2>"$T/slow.err" &
slow_pid=$!; pids+=($slow_pid)
wait_for "$T/slow.err" "serve: listening" 30 || bad "slow: no listening line"
sp=$(cat "$T/slow.port")
code=$(curl -s -o "$T/slow.h" -w '%{http_code}' "http://127.0.0.1:$sp/health")
eq "loading: /health 503" "$code" 503
eq "loading: status field" "$(jfield "$T/slow.h" status)" loading
eq "loading: completions 503" "$(curl -s -o "$T/slow.c" -w '%{http_code}' \
    "http://127.0.0.1:$sp/v1/completions" -d '{"prompt":"x"}')" 503
eq "loading: error code" "$(jfield "$T/slow.c" error.code)" loading
: >"$T/slow.gguf"
if wait "$slow_pid"; then rc=0; else rc=$?; fi
eq "a model that fails to load: exit 1" "$rc" 1

start() { # name, args...: a server in the background; waits for its port file and "ready"
    local name=$1; shift
    "$SWARM_BIN" serve "$T/tiny.gguf" --listen 127.0.0.1:0 --port-file "$T/$name.port" "$@" \
        >"$T/$name.out" 2>"$T/$name.err" &
    pids+=($!); eval "${name}_pid=$!"
    wait_for "$T/$name.err" "serve: ready" 30 ||
        { bad "$name did not start"; tail -5 "$T/$name.err" >&2; }
    eval "${name}_port=$(cat "$T/$name.port" 2>/dev/null || echo 0)"
}
KEY=sekrit-$$
start main --ctx 256 --parallel 4 --queue 16 --api-key "$KEY" --chat-template chatml \
    --max-body 8192 --timeout 1
# shellcheck disable=SC2154
python3 tests/serve_check.py "$main_port" "$KEY" basic >"$T/basic.txt" 2>&1
tally "$T/basic.txt" echo
# greedy through HTTP = swarm generate's text for the same prompt and settings
sw gref generate "$T/tiny.gguf" --prompt "Once upon a time" -n 24 --temp 0; expect_rc gref 0
curl -s -H "Authorization: Bearer $KEY" "http://127.0.0.1:$main_port/v1/completions" \
    -d '{"prompt":"Once upon a time","max_tokens":24,"temperature":0}' >"$T/gref.json"
eq "greedy = swarm generate" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))
    ["choices"][0]["text"])' "$T/gref.json")" "$(cat "$T/gref.out")"
python3 tests/serve_check.py "$main_port" "$KEY" bad 1 >"$T/bad.txt" 2>&1; tally "$T/bad.txt" echo
python3 tests/serve_check.py "$main_port" "$KEY" load >"$T/load.txt" 2>&1; tally "$T/load.txt" echo

# the chat page in a real browser: load, type, see the reply stream in, screenshot
if [ -x /usr/lib/chromium/chromium ] || command -v chromium >/dev/null; then
    if timeout 120 python3 tests/serve_page.py "http://127.0.0.1:$main_port/" "$T/page.png" 60 \
        "$KEY" >"$T/page.txt" 2>&1; then ok
    else bad "chat page in Chromium: $(tail -1 "$T/page.txt")"; fi
    cat "$T/page.txt"
    eq "screenshot written" "$([ -s "$T/page.png" ] && echo yes)" yes
else
    bad "chromium is not installed (make deps installs it)"
fi

# The resident arm: the model's 2 layers in 2 spawned workers, 2 sessions in flight. Greedy = swarm
# generate's text; a worker killed from outside mid-stream (the server is held with SIGSTOP
# once the first token is out, so the kill lands mid-stream on any machine; the workers are
# slowed so the first token is not also the last): the stream completes with the healthy
# text, /health says degraded naming w1, /metrics shows it down and one failover. A second
# server (respawn, the default): w1 killed while idle is found by the monitor, respawned and
# re-admitted: /health comes back to ok.
start res --arm resident --workers 2 --ctx 256 --parallel 2 --no-respawn --worker-slowdown 8
# shellcheck disable=SC2154
curl -s "http://127.0.0.1:$res_port/v1/completions" \
    -d '{"prompt":"Once upon a time","max_tokens":24,"temperature":0}' >"$T/res_g.json"
eq "resident: greedy = swarm generate" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))
    ["choices"][0]["text"])' "$T/res_g.json")" "$(cat "$T/gref.out")"
curl -s "http://127.0.0.1:$res_port/health" >"$T/res_h0.json"
eq "resident: health ok" "$(jfield "$T/res_h0.json" status)" ok
eq "resident: 2 workers listed" "$(jfield "$T/res_h0.json" workers.1.id)" w1
curl -s "http://127.0.0.1:$res_port/v1/completions" \
    -d '{"prompt":"The","max_tokens":160,"temperature":0}' >"$T/res_long.json"
curl -sN "http://127.0.0.1:$res_port/v1/completions" \
    -d '{"prompt":"The","max_tokens":160,"temperature":0,"stream":true}' >"$T/res_kill.sse" &
cpid=$!
held=0
for ((i = 0; i < 3000; i++)); do
    if grep -q '"text"' "$T/res_kill.sse" 2>/dev/null; then kill -STOP "$res_pid" && held=1; break; fi
    kill -0 $cpid 2>/dev/null || break
    sleep 0.01
done
w1=$(pgrep -P "$res_pid" -f -- "--id w1" | head -1)
if [ $held = 1 ] && [ -n "$w1" ]; then kill -9 "$w1"; ok; else bad "resident: not held mid-stream (w1 '$w1')"; fi
kill -CONT "$res_pid"
wait $cpid
python3 - "$T/res_kill.sse" "$T/res_long.json" <<'PY' && ok || bad "resident: the stream after the kill differs from the healthy text"
import json, sys
text = ""
for line in open(sys.argv[1]):
    if line.startswith("data: {"):
        c = json.loads(line[6:])["choices"]
        if c: text += c[0].get("text", "")
want = json.load(open(sys.argv[2]))["choices"][0]["text"]
if text != want:
    print("got %r\nwant %r" % (text[:200], want[:200]), file=sys.stderr); sys.exit(1)
PY
eq "resident: stream completed" "$(tail -c 200 "$T/res_kill.sse" | grep -c 'data: \[DONE\]')" 1
curl -s "http://127.0.0.1:$res_port/health" >"$T/res_h1.json"
eq "resident: health degraded" "$(jfield "$T/res_h1.json" status)" degraded
eq "resident: degraded names w1" "$(jfield "$T/res_h1.json" degraded.worker)" w1
eq "resident: w1 not live" "$(jfield "$T/res_h1.json" workers.1.live)" False
curl -s "http://127.0.0.1:$res_port/metrics" >"$T/res.metrics"
grep -q '^swarm_serve_worker_up{worker="w1",.*} 0$' "$T/res.metrics" && ok || bad "resident: metrics w1 up 0"
grep -q '^swarm_serve_failovers_total 1$' "$T/res.metrics" && ok || bad "resident: failovers_total 1"
kill -TERM "$res_pid"; if wait "$res_pid"; then rc=0; else rc=$?; fi
eq "resident: SIGTERM exit 0" "$rc" 0

start res2 --arm resident --workers 2 --ctx 256 --parallel 2 --chat-template chatml
# shellcheck disable=SC2154
w1=$(pgrep -P "$res2_pid" -f -- "--id w1" | head -1)
[ -n "$w1" ] && kill -9 "$w1"
back=0
for ((i = 0; i < 600; i++)); do # the monitor finds it, a fresh w1 loads and is routed back
    curl -s "http://127.0.0.1:$res2_port/metrics" >"$T/res2.metrics"
    grep -q '^swarm_serve_failovers_total 1$' "$T/res2.metrics" &&
        grep -q '^swarm_serve_worker_up{worker="w1",.*} 1$' "$T/res2.metrics" && { back=1; break; }
    sleep 0.05
done
eq "resident: w1 killed while idle is respawned and back" "$back" 1
curl -s "http://127.0.0.1:$res2_port/health" >"$T/res2_h.json"
eq "resident: health ok again" "$(jfield "$T/res2_h.json" status)" ok
eq "resident: w1's last loss" "$(jfield "$T/res2_h.json" workers.1.last_lost)" "killed by signal 9"
curl -s "http://127.0.0.1:$res2_port/v1/completions" \
    -d '{"prompt":"Once upon a time","max_tokens":24,"temperature":0}' >"$T/res2_g.json"
eq "resident: greedy after the rejoin" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))
    ["choices"][0]["text"])' "$T/res2_g.json")" "$(cat "$T/gref.out")"
# the page shows the swarm's workers (one row each) and still streams a reply
if [ -x /usr/lib/chromium/chromium ] || command -v chromium >/dev/null; then
    # shellcheck disable=SC2154
    if timeout 120 python3 tests/serve_page.py "http://127.0.0.1:$res2_port/" "$T/page_res.png" 60 \
        "" 2 >"$T/page_res.txt" 2>&1; then ok
    else bad "chat page (resident) in Chromium: $(tail -1 "$T/page_res.txt")"; fi
fi
kill -TERM "$res2_pid"; if wait "$res2_pid"; then rc=0; else rc=$?; fi
eq "resident (respawned): SIGTERM exit 0" "$rc" 0

start busy --ctx 2048 --parallel 1 --queue 1 --grace 0
# shellcheck disable=SC2154
python3 tests/serve_check.py "$main_port" "$KEY" busy "$busy_port" >"$T/busy.txt" 2>&1
tally "$T/busy.txt" echo

# SIGTERM: in-flight streams finish (the grace is long enough), the server exits 0
curl -sN -H "Authorization: Bearer $KEY" "http://127.0.0.1:$main_port/v1/completions" \
    -d '{"prompt":"The","max_tokens":40,"temperature":0,"stream":true}' >"$T/term.sse" &
cpid=$!
wait_for "$T/term.sse" "data: " 10 || bad "no stream before SIGTERM"
# shellcheck disable=SC2154
kill -TERM "$main_pid"
if wait "$main_pid"; then rc=0; else rc=$?; fi
eq "SIGTERM: exit 0" "$rc" 0
wait "$cpid"
eq "SIGTERM: the in-flight stream completed" \
    "$(tail -c 200 "$T/term.sse" | grep -c 'data: \[DONE\]')" 1
has main err "serve: stopped"
# shellcheck disable=SC2154
kill -TERM "$busy_pid"; if wait "$busy_pid"; then rc=0; else rc=$?; fi
eq "SIGTERM (busy server): exit 0" "$rc" 0

echo "e2e_serve: $pass passed, $fail failed"
[ "$fail" = 0 ]
