#!/bin/bash
# e2e_faults_llm.sh — issue 19's findings from outside, one check each (tests/faults_llm.py):
# known-bad weights never served on any arm, a respawn killed or stopped as it starts tried
# again until the worker is back while /health answers from its snapshot, failover rebuilding
# only live sessions, a worker lost while loading served here. tests/
# Env: SWARM_BIN, SWARM_TEST_TMP. Closes with "e2e_faults_llm: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
export SWARM_BIN SWARM_TEST_TMP
. tests/lib.sh
cg_run_begin
python3 tests/faults_llm.py; rc=$?
cg_run_end
exit $rc
