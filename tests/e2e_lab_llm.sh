#!/bin/bash
# e2e_lab_llm.sh — `swarm lab CONFIG` with an [llm] section: the lab for text generation on a
# tiny random llama (generated from the config when missing), every condition once per repeat
# as a `swarm generate` with its gates, predictions printed before the first run, table.md
# with the ratios against the SSD arm, the plot; bad configs named. tests/
# Env: SWARM_BIN, SWARM_TEST_TMP. Closes with "e2e_lab_llm: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_lab_llm"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh

lab_llm_ini "$T/lab.ini" "$T/models/m.gguf" 2 \
    "reference, ssd, resident/none, resident/lan" "$T/results"
sw lab lab "$T/lab.ini" --out "$T/run"
expect_rc lab 0
has lab err "is missing: generating a random llama of 6 layers x 64"
check_order() { # the last prediction line comes before the first finished run
    local p r
    p=$(grep -n "predicted resident/lan" "$T/lab.err" | head -1 | cut -d: -f1)
    r=$(grep -n "repeat 1: done" "$T/lab.err" | head -1 | cut -d: -f1)
    [ -n "$p" ] && [ -n "$r" ] && [ "$p" -lt "$r" ]
}
check_order && ok || bad "lab: predictions are not all printed before the first run"
has lab err "machine: reference"
eq "8 runs recorded" "$(grep -c '"condition"' "$T/run/results.jsonl")" 8
python3 - "$T/run/results.jsonl" <<'PY' && ok || bad "lab: a run's gates"
import json, sys
why = []
for line in open(sys.argv[1]):
    o = json.loads(line)
    r, c = o["result"], o["condition"]
    if not r: why.append("%s r%s failed" % (c, o["repeat"])); continue
    g = r["gates"]
    if c.startswith("resident") and g["parity"] != "pass": why.append(c + " parity " + g["parity"])
    # this model fits the cap whole: nothing streamed, so no cache gate to judge (n/a)
    if c == "ssd" and (g["cache"] not in ("pass", "n/a") or g["content"] != "pass"):
        why.append("ssd gates %s" % g)
    if r["void"]: why.append(c + " void")
    if not o["predicted_ms_per_token"] > 0: why.append(c + " no prediction")
if why:
    print("FAIL: " + "; ".join(why), file=sys.stderr); sys.exit(1)
PY
for c in reference ssd resident/none resident/lan; do
    grep -q "^| $c | 2 / 0 |" "$T/run/table.md" && ok || bad "table.md: $c row with 2 runs"
done
has lab out "- resident/lan / ssd: **"
has lab out "the article's dense lab: 13.70x"
if command -v gnuplot >/dev/null; then
    [ -s "$T/run/gen_tok_s.png" ] && ok || bad "no gen_tok_s.png"
fi
# the config names its model for the other commands too: generate and serve take it
sw gcfg generate "$T/lab.ini" --prompt "Once upon a time" -n 6 --temp 0
expect_rc gcfg 0
# `run` steps the dense model: a text-lab config is refused by name, not run on [model]'s defaults
sw runllm run "$T/lab.ini" --arm reference --steps 2
expect_rc runllm 2
has runllm err "is a text-lab config ([llm] model"
sw gfile generate "$T/models/m.gguf" --prompt "Once upon a time" -n 6 --temp 0
eq "generate CONFIG = generate FILE" "$(cat "$T/gcfg.out")" "$(cat "$T/gfile.out")"
"$SWARM_BIN" serve "$T/lab.ini" --listen 127.0.0.1:0 --port-file "$T/srv.port" \
    >"$T/srv.out" 2>"$T/srv.err" &
spid=$!
if wait_for "$T/srv.err" "serve: ready" 30; then
    eq "serve CONFIG: the model's id" "$(curl -s "http://127.0.0.1:$(cat "$T/srv.port")/v1/models" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')" m
else bad "serve CONFIG did not start"; fi
kill -TERM $spid; wait $spid

# the model is not generated again; a config error names file, line and key
sw lab2 lab "$T/lab.ini" --quick --out "$T/run2" --set llm.ctx=96
expect_rc lab2 0
grep -q "generating" "$T/lab2.err" && bad "lab2: generated the model again" || ok
grep -q "context 96," "$T/run2/table.md" && ok || bad "lab2: --set llm.ctx=96 not applied"
printf '[llm]\nmodel = %s/models/m.gguf\ntokenz = 3\n[lab]\nconditions = reference\n' "$T" >"$T/bad.ini"
sw badkey lab "$T/bad.ini"
expect_rc badkey 2
has badkey err "$T/bad.ini:3: [llm] tokenz: unknown key (known: model, generate, vocab,"
sw badset lab "$T/lab.ini" --set llm.tokens=0
expect_rc badset 2
has badset err "--set llm.tokens=0: [llm] tokens: '0' must be an integer in 1..4096"
printf '[llm]\nmodel = %s/models/m.gguf\n' "$T" >"$T/nocond.ini"
sw nocond lab "$T/nocond.ini"
expect_rc nocond 2
has nocond err "$T/nocond.ini: needs [llm] model and [lab] conditions"
printf '[llm]\nmodel = %s/none.gguf\n[lab]\nconditions = reference\n' "$T" >"$T/nogen.ini"
sw nogen lab "$T/nogen.ini"
expect_rc nogen 2
has nogen err "set [llm] generate = 1 in $T/nogen.ini"
[ ! -e "$T/none.gguf" ] && ok || bad "nogen: a model was made"
printf '[llm]\nmodel = %s/models/m.gguf\n[lab]\nconditions = reference, resident/moon\n' "$T" >"$T/badc.ini"
sw badc lab "$T/badc.ini"
expect_rc badc 2
has badc err "condition 'resident/moon': unknown profile"

echo "e2e_lab_llm: $pass passed, $fail failed"
[ "$fail" = 0 ]
