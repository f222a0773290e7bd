#!/bin/bash
# e2e_plan.sh — swarm plan on a tiny random llama model with the fixture vocabulary: layers over
# 3 workers by bytes (weights + KV for the sessions x context + buffers, within every cap),
# embedding and head with the coordinator, uneven caps, a cap too small refused with its
# numbers, bad flags. tests/
# Env: SWARM_BIN (bin/swarm), SWARM_TEST_TMP (scratch). Closes with "e2e_plan: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_plan"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh

gzip -dc tests/fixtures/tok/llama-spm.gguf.gz > "$T/vocab.gguf"
sw g gen --arch llama --dim 64 --layers 6 --heads 4 --kv-heads 2 --ff 96 \
    --vocab-from "$T/vocab.gguf" --ctx 256 --seed 9 --type f16 -o "$T/m.gguf"; expect_rc g 0

# 3 equal workers: 2 layers each, every worker's need within its cap, KV = 4 x 256 x 256 B
sw p3 plan "$T/m.gguf" --workers 3 --cap 64M --sessions 4 --ctx 256; expect_rc p3 0
o="$T/p3.out"
ends="$(jfield "$o" workers.0.last),$(jfield "$o" workers.1.last),$(jfield "$o" workers.2.last)"
eq "p3 ranges" "$ends" "2,4,6"
eq "p3 embedding" "$(jfield "$o" embedding_at)" coordinator
eq "p3 head" "$(jfield "$o" head_at)" coordinator
eq "p3 kv per position" "$(jfield "$o" kv_bytes_per_pos_layer)" 256
eq "p3 kv of worker 0" "$(jfield "$o" workers.0.kv_bytes)" $((2 * 4 * 256 * 256))
python3 - "$o" <<'PY' && ok || bad "p3: a need is not weights + KV + overhead + buffers, in cap"
import json, sys
p = json.loads(open(sys.argv[1]).read())
for w in p["workers"]:
    parts = w["weight_bytes"] + w["kv_bytes"] + w["overhead_bytes"] + w["buffer_bytes"]
    assert w["need_bytes"] == parts and w["need_bytes"] <= w["cap_bytes"]
PY

# Uneven caps: a worker whose cap is exactly one layer's need (overhead + buffers + one layer's
# weights and KV, from p3's numbers) gets one layer, the others share the rest
need1=$(python3 - "$o" <<'PY'
import json, sys
w = json.load(open(sys.argv[1]))["workers"][0]
print(w["overhead_bytes"] + w["buffer_bytes"] + (w["weight_bytes"] + w["kv_bytes"]) // 2)
PY
)
sw pu plan "$T/m.gguf" --caps "$need1,64M,64M" --sessions 4 --ctx 256; expect_rc pu 0
eq "pu worker 0 holds one layer" "$(jfield "$T/pu.out" workers.0.last)" 1

# A cap too small: exit 2, every term named
sw small plan "$T/m.gguf" --workers 3 --cap 17M --sessions 64 --ctx 4096; expect_rc small 2
has small err "64 sessions x 4096 positions"
has small err "16.0 MiB overhead"
has small err "cannot hold even the smallest layer"
sw tiny plan "$T/m.gguf" --workers 3 --cap 16M; expect_rc tiny 2
has tiny err "holds no layer: 16.0 MiB overhead"
sw many plan "$T/m.gguf" --workers 7 --cap 64M; expect_rc many 2
has many err "7 workers for 6 layers"

# Bad flags and files
sw nocap plan "$T/m.gguf" --workers 3; expect_rc nocap 2
sw badcap plan "$T/m.gguf" --workers 3 --cap lots; expect_rc badcap 2
has badcap err "--cap: 'lots' is not a size"
sw mism plan "$T/m.gguf" --workers 2 --caps 64M,64M,64M; expect_rc mism 2
sw missing plan "$T/none.gguf" --workers 2 --cap 64M; expect_rc missing 1
has missing err "none.gguf"

echo "e2e_plan: $pass passed, $fail failed"
[ "$fail" = 0 ]
