#!/bin/bash
# e2e_lab.sh — `swarm lab --quick` on the tiny config: every file, JSONL lab fields, predictions first, errors. tests/
# Env: SWARM_BIN (bin/swarm), SWARM_TEST_TMP (scratch). Needs python3 (JSON checks).
# Closes with "e2e_lab: N passed, N failed"; exits non-zero on any failure. ~2 s on the dev machine.
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_lab"
D="$SWARM_TEST_TMP/lab1"
rm -rf "$T" "$D" && mkdir -p "$T"
pass=0; fail=0
check() { # description, command...
    local what=$1; shift
    if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi
}
sw() { # name, args... -> $T/NAME.{out,err}, $rc
    local name=$1; shift
    if "$SWARM_BIN" "$@" >"$T/$name.out" 2>"$T/$name.err"; then rc=0; else rc=$?; fi
}

# ---- usage and config errors
sw help lab --help
check "--help exits 0 and names the flags" [ $rc = 0 ]
check "--help mentions --quick" grep -q -- "--quick" "$T/help.out"
sw bogus lab --bogus
check "unknown flag exits 2" [ $rc = 2 ]
sw moon lab configs/tiny.ini --quick --out "$T/moon" --set lab.conditions=reference,moon
check "unknown condition exits 2" [ $rc = 2 ]
check "unknown condition is named" grep -q "moon" "$T/moon.err"
sw noprof lab configs/tiny.ini --quick --out "$T/noprof" --set lab.conditions=resident/mars
check "unknown profile exits 2" [ $rc = 2 ]

# ---- the quick lab on the tiny config
n_cond=$(sed -n 's/^conditions *= *\([^;]*\).*/\1/p' configs/tiny.ini | tr ',' '\n' | grep -c '[a-z]')
sw lab lab configs/tiny.ini --quick --out "$D"
echo "lab exit $rc, $n_cond conditions"
for f in results.jsonl table.md steps_per_s.png stages.png latency_cdf.png plots.gp; do
    check "$f exists and is not empty" [ -s "$D/$f" ]
done
for f in steps_per_s.png stages.png latency_cdf.png; do
    check "$f is a PNG" bash -c "head -c 8 '$D/$f' | od -An -c | grep -q 'P   N   G'"
done
check "one JSONL line per condition x repeat" [ "$(wc -l <"$D/results.jsonl")" = "$n_cond" ]
# Prediction table printed before the results table; progress on stderr.
check "predictions printed before the results" \
    awk '/^predictions \(before any run/{p=NR} /^## Results/{r=NR} END{exit !(p && r && p < r)}' "$T/lab.out"
check "machine figures printed" grep -q "^  disk .*GB/s" "$T/lab.out"
check "progress on stderr" grep -q "^\[1/$n_cond\] reference repeat 1/1" "$T/lab.err"
check "table.md printed to stdout" grep -q "Predicted vs measured" "$T/lab.out"
for s in "## Results" "Predicted vs measured" "Break-even" "13.70" "Link profiles"; do
    check "table.md has '$s'" grep -q "$s" "$D/table.md"
done

# Every line: lab fields present; finished runs carry figures; failed runs say why.
python3 - "$D/results.jsonl" >"$T/json.txt" 2>&1 <<'EOF'
import json, sys
need = ["condition", "profile", "profile_configured_ms", "profile_measured_ms",
        "predicted_steps_per_s", "predicted_ttfr_ms", "repeat", "disk_gbps", "layer_ms",
        "hop_ms", "prediction", "failed", "error", "steps_per_s", "stage_ms", "step_ms", "gates"]
bad = 0
for n, line in enumerate(open(sys.argv[1]), 1):
    o = json.loads(line)
    miss = [k for k in need if k not in o]
    if miss:
        print(f"line {n} ({o.get('condition')}): missing {miss}"); bad += 1
    if not (o.get("predicted_steps_per_s") or 0) > 0:
        print(f"line {n}: predicted_steps_per_s not positive"); bad += 1
    if o.get("failed"):
        # The resident arm may fail on this config for now (see below); it must say why.
        print(f"FAILED {o['condition']}: {o.get('error')}")
        if not o.get("error"):
            print(f"line {n}: failed without an error"); bad += 1
    elif not o.get("steps_per_s"):
        print(f"line {n}: finished run without steps/s"); bad += 1
    if o["condition"].startswith("resident/") and o.get("profile_measured_ms") is None:
        print(f"line {n}: resident run without profile_measured_ms"); bad += 1
    if o["condition"] in ("reference", "ssd"):
        if o.get("failed") or o.get("void"):
            print(f"line {n}: {o['condition']} failed or void: {o.get('error')} {o.get('void_reason')}"); bad += 1
    if o["condition"] == "ssd" and o.get("gates", {}).get("parity") != "pass":
        print(f"line {n}: ssd parity gate not pass (reference outputs not used?)"); bad += 1
sys.exit(1 if bad else 0)
EOF
jrc=$?
cat "$T/json.txt"
check "JSONL fields present and consistent" [ $jrc = 0 ]

# Exit status: 0 when every condition ran and passed its gates.
check "lab exit 0 (rc $rc)" test "$rc" = 0

echo "e2e_lab: $pass passed, $fail failed"
[ "$fail" = 0 ]
