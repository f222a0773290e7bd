#!/bin/bash
# e2e_soak.sh — the soak test's short version (tests/soak.py, `make soak` for the long one):
# serve --arm resident with concurrent clients while faults from outside land (kill -9, SIGSTOP,
# links cut, a respawn killed again); no request lost, none different from the reference arm's
# text, none hung, /health within 10x its healthy answers. SOAK_SHORT_SECONDS (12) of faults.
# tests/
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
export SWARM_BIN SWARM_TEST_TMP
. tests/lib.sh
cg_run_begin
SOAK_NAME=e2e_soak SOAK_SECONDS="${SOAK_SHORT_SECONDS:-12}" python3 tests/soak.py; rc=$?
cg_run_end
exit $rc
