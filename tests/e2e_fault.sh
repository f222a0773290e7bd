#!/bin/bash
# e2e_fault.sh — failover end to end on the tiny model with 3 local workers, at --inflight 1 and 3:
# SIGKILL of the first, middle and last worker, SIGSTOP/SIGCONT, a cut link, respawn and rejoin,
# two workers lost at once, and a fallback budget too small (exit 4, partial results intact). tests/
# Env: SWARM_BIN (bin/swarm), SWARM_TEST_TMP (scratch). Needs python3 (JSON checks).
# Closes with "e2e_fault: N passed, N failed"; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_fault"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh
# Checks a failover run's JSONL; prints "ok" or what is wrong, and a figures line to stderr.
# args: jsonl, reference digest, want_rejoin (0|1), worker ids lost...
judge() {
    python3 - "$@" <<'EOF'
import json, sys
f, ref, rejoin, lost = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4:]
try:
    o = json.loads([l for l in open(f) if l.strip()][-1])
except Exception as e:
    print("no JSONL (%s)" % e); sys.exit(0)
why = []
if o.get("output_digest") != ref: why.append("digest %s != reference %s" % (o.get("output_digest"), ref))
if o.get("max_abs_diff") != 0: why.append("max_abs_diff %s" % o.get("max_abs_diff"))
if o.get("gates", {}).get("parity") != "pass": why.append("parity %s" % o.get("gates", {}).get("parity"))
for k in ("lost_steps", "duplicate_steps"):
    if o.get(k) != 0: why.append("%s = %s" % (k, o.get(k)))
if not isinstance(o.get("stale_msgs_dropped"), int) or o["stale_msgs_dropped"] < 0: why.append("stale_msgs_dropped %s" % o.get("stale_msgs_dropped"))
fo = o.get("failover") or []
figs = []
for w in lost:
    recs = [r for r in fo if r.get("worker") == w]
    if not recs:
        why.append("no failover record for %s" % w); continue
    r = recs[0]
    for k in ("worker", "how", "lost_at_step", "detection_ms", "steps_replayed", "steps_in_fallback", "fallback_step_ms", "rejoin_ms"):
        if k not in r: why.append("%s record lacks %s" % (w, k))
    d = r.get("detection_ms")
    if not isinstance(d, (int, float)) or not 0 < d < 1000: why.append("%s detection_ms %s" % (w, d))
    if not r.get("steps_in_fallback", 0) > 0: why.append("%s steps_in_fallback %s" % (w, r.get("steps_in_fallback")))
    rj = any(x.get("rejoin_ms") is not None for x in recs)
    if rejoin and not rj: why.append("%s did not rejoin (rejoin_ms null)" % w)
    figs.append("%s lost at step %s: detection %.0f ms, replayed %s, %s steps in fallback at %s ms, rejoin %s ms"
                % (w, r.get("lost_at_step"), d or -1, r.get("steps_replayed"), r.get("steps_in_fallback"),
                   "%.3f" % r["fallback_step_ms"] if r.get("fallback_step_ms") is not None else "-",
                   "%.1f" % recs[-1]["rejoin_ms"] if recs[-1].get("rejoin_ms") is not None else "-"))
figs.append("stale dropped %s, replays %s, %.0f steps/s" % (o.get("stale_msgs_dropped"), o.get("replays"), o.get("steps_per_s", 0)))
sys.stderr.write("    " + "; ".join(figs) + "\n")
print("; ".join(why) or "ok")
EOF
}

if ! command -v python3 >/dev/null; then
    echo "e2e_fault: python3 is required" >&2
    echo "e2e_fault: 0 passed, 1 failed"; exit 1
fi

# Workers spawned here carry a marker cap (64 MiB plus a per-run number of pages) so the stray
# check sees only this script's processes on a shared machine.
MARKB=$((4096 * ($$ % 997 + 1)))
CAPB=$((64 * 1048576 + MARKB))
ours() { pgrep -f -- "swarm worker .*--cap ($CAPB|$((20 * 1048576 + MARKB))) " || true; }
# Their cgroups sit in this script's run (tests/lib.sh): only those are judged below.
cg_run_begin
trap cg_run_end EXIT

M="$T/x.gguf"
sw gen gen --layers 6 --dim 256 --seed 2 -o "$M"
expect_rc gen 0
COMMON=(configs/tiny.ini --model "$M" --set "swarm.cap=$CAPB" --quiet)

# Steps: SHORT for kills (a loss is detected in ~0.2 s, the run goes on in fallback); LONG for the
# faults that must end in a rejoin: the run has to outlast the fault (1 s) plus detection and
# the rejoin. LONG is sized from a healthy run timed here at the fastest setting (--inflight 3),
# to last at least 4 s at that rate: 16,000 steps took 2-8 s at the tiny model's 2,000-7,000
# steps/s (2-core machine, 2026-12-02), so a machine three times faster would end it before
# the rejoin. At most the config's 1,000,000 steps.
SHORT=40
sw rate run "${COMMON[@]}" --arm resident --steps 4000 --inflight 3 --no-parity --out "$T/rate.jsonl"
expect_rc rate 0
LONG=$(python3 -c "print(min(1000000, max(16000, int(4 * $(jfield "$T/rate.jsonl" steps_per_s)))))" \
    2>/dev/null) || LONG=16000
echo "faults that end in a rejoin: $LONG steps ($(jfield "$T/rate.jsonl" steps_per_s) steps/s healthy)"
declare -A REF
for n in $SHORT $LONG 100; do
    sw ref$n run configs/tiny.ini --model "$M" --quiet --arm reference --steps $n \
        --out "$T/ref$n.jsonl" --dump-outputs "$T/ref$n.bin"
    expect_rc ref$n 0
    REF[$n]=$(jfield "$T/ref$n.jsonl" output_digest)
done

# Fault steps from a fixed seed: reproducible, but not hand-picked round numbers.
read -r KILL0 KILL1 KILL2 <<<"$(python3 -c 'import random; r = random.Random(5); print(*[r.randrange(3, 30) for _ in range(3)])')"
echo "fault steps (seed 5): w0@$KILL0 w1@$KILL1 w2@$KILL2"

run_case() { # name, steps, want_rejoin, lost workers (space separated), -- args...
    local name=$1 steps=$2 rejoin=$3 lost=$4 t0=$SECONDS
    shift 5
    sw $name run "${COMMON[@]}" --arm resident --steps $steps --out "$T/$name.jsonl" "$@"
    expect_rc $name 0
    local v
    v=$(judge "$T/$name.jsonl" "${REF[$steps]}" $rejoin $lost 2>"$T/$name.figs")
    echo "  $name ($((SECONDS - t0)) s):"; cat "$T/$name.figs"
    if [ "$v" = ok ]; then ok; else bad "$name: $v"; grep -v "route epoch" "$T/$name.err" | grep -E "coord\]" | tail -8 | sed 's/^/    | /' >&2; fi
}

for K in 1 3; do
    run_case kill_first_k$K $SHORT 0 w0 -- --inflight $K --kill-worker w0@$KILL0
    run_case kill_middle_k$K $SHORT 0 w1 -- --inflight $K --kill-worker w1@$KILL1
    run_case kill_last_k$K $SHORT 0 w2 -- --inflight $K --kill-worker w2@$KILL2
    run_case kill_two_k$K $SHORT 0 "w0 w2" -- --inflight $K --kill-worker w0@5 --kill-worker w2@5
    run_case respawn_k$K $LONG 1 w1 -- --inflight $K --kill-worker w1@$KILL1 --respawn
    run_case stop_k$K $LONG 1 w1 -- --inflight $K --stop-worker w1@10:1
    run_case cut_k$K $LONG 1 w2 -- --inflight $K --cut-link w2@10:1

    # The lost worker's budget cannot even hold the coordinator's streaming overhead: exit 4, the
    # completed steps written and equal to the reference's, the rest counted as lost.
    n=budget_k$K
    sw $n run configs/tiny.ini --model "$M" --quiet --arm resident --steps 100 --inflight $K \
        --set "swarm.cap=$((20 * 1048576 + MARKB))" --set ssd.overhead=24M --kill-worker w1@50 \
        --out "$T/$n.jsonl" --dump-outputs "$T/$n.bin"
    expect_rc $n 4
    grep -qF "short by" "$T/$n.err" && ok || bad "$n: the error does not say by how much"
    v=$(python3 - "$T/$n.jsonl" "$T/$n.bin" "$T/ref100.bin" 2>"$T/$n.figs" <<'EOF'
import json, sys
try:
    o = json.loads([l for l in open(sys.argv[1]) if l.strip()][-1])
except Exception as e:
    print("no JSONL (%s)" % e); sys.exit(0)
why, done = [], o.get("completed_steps")
if o.get("completed_steps_match_reference") is not True: why.append("completed_steps_match_reference %s" % o.get("completed_steps_match_reference"))
if not isinstance(done, int) or not 0 < done < 100: why.append("completed_steps %s" % done)
elif o.get("lost_steps") != 100 - done: why.append("lost_steps %s with %s completed" % (o.get("lost_steps"), done))
if not o.get("lost_steps", 0) > 0: why.append("lost_steps %s" % o.get("lost_steps"))
if o.get("duplicate_steps") != 0: why.append("duplicate_steps %s" % o.get("duplicate_steps"))
if not any(r.get("worker") == "w1" for r in o.get("failover", [])): why.append("no failover record for w1")
if isinstance(done, int) and done > 0:
    a, b = open(sys.argv[2], "rb").read(), open(sys.argv[3], "rb").read()
    n = done * 256 * 4
    if a[:n] != b[:n]: why.append("the first %d dumped outputs differ from the reference" % done)
sys.stderr.write("    %s completed, %s lost, void: %s\n" % (done, o.get("lost_steps"), o.get("void_reason")))
print("; ".join(why) or "ok")
EOF
)
    echo "  $n:"; cat "$T/$n.figs"
    if [ "$v" = ok ]; then ok; else bad "$n: $v"; fi
done

# Nothing of ours left behind: workers, killed or not, and their cgroups.
sleep 0.2
left=$(ours)
if [ -z "$left" ]; then ok; else bad "stray workers: $(echo $left)"; fi
if [ -n "$CG_RUN" ]; then
    cg=""
    for g in $(cg_left); do [ ! -d "/proc/${g##*-}" ] && cg="$cg $g"; done
    if [ -z "$cg" ]; then ok; else bad "cgroups of dead workers left in $SWARM_CGROUP_RUN:$cg"; fi
fi

echo "e2e_fault: $pass passed, $fail failed"
[ "$fail" = 0 ]
