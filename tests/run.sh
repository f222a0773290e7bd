#!/bin/bash
# run.sh — runs every test binary and end-to-end script; closes with "N passed, N failed". tests/
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${TEST_BIN_DIR:=$PWD/build/tests}"
export SWARM_BIN TEST_BIN_DIR
export SWARM_TEST_TMP="${SWARM_TEST_TMP:-$PWD/tests/tmp}"
mkdir -p "$SWARM_TEST_TMP"
# A hang guard per test, not a pass criterion: the slowest test takes about a minute on a
# 2-core machine, so one still running after TEST_LIMIT seconds is stuck. It is stopped (TERM
# first: the scripts' traps take their hosts and workers down), counted failed and its log's
# tail printed, and the tests after it still run.
: "${TEST_LIMIT:=900}"
pass=0; fail=0; failed=()
run_one() { # name, command...
    local name=$1; shift
    local log="$SWARM_TEST_TMP/$name.log" t0=$SECONDS
    if timeout -k 20 "$TEST_LIMIT" "$@" >"$log" 2>&1; then rc=0; else rc=$?; fi
    [ $rc = 124 ] && echo "$name: stopped by the hang guard after $TEST_LIMIT s" >>"$log"
    local line; line=$(grep -E '^[A-Za-z0-9_.-]+: [0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    local p f
    p=$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line"); f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
    [ -z "$line" ] && { p=0; f=1; }
    [ $rc -ne 0 ] && [ "$f" = 0 ] && f=1
    pass=$((pass + p)); fail=$((fail + f))
    printf '%-28s %4s passed %3s failed  (%ss)\n' "$name" "$p" "$f" $((SECONDS - t0))
    if [ "$f" != 0 ]; then failed+=("$name"); tail -30 "$log" | sed 's/^/    | /'; fi
}
for t in "$TEST_BIN_DIR"/test_*; do
    [ -x "$t" ] && run_one "$(basename "$t")" "$t"
done
for s in tests/e2e_*.sh; do
    [ -f "$s" ] && run_one "$(basename "$s" .sh)" bash "$s"
done
[ ${#failed[@]} -gt 0 ] && echo "failing: ${failed[*]}"
echo "tests: $pass passed, $fail failed"
[ "$fail" = 0 ]
