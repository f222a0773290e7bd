#!/bin/bash
# e2e_lab_moe.sh — configs/moe.ini, the lab for Mixture-of-Experts, shrunk with --set to a
# tiny qwen3moe (3 layers of 128, 16 experts, 2 routed): its keys (arch, head_dim, experts,
# experts_used, ff_exp) reach `swarm gen`; under a cap that keeps every layer's attention and
# router resident and reads only the routed experts (split), the lab predicts the SSD arm with
# the routed experts' reads and the cache (uniform routing's hit rate and the reference's
# routing replayed through the cache's policy), every run passes its gates, and table.md's
# expert section shows the bytes read a token equal to what the misses must read, with the
# replayed hit rate equal to the one measured (greedy: the same tokens, the same routing). tests/
# Env: SWARM_BIN, SWARM_TEST_TMP. Closes with "e2e_lab_moe: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_lab_moe"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh

M="$T/models/moe.gguf"
S=(--set "llm.model=$M" --set llm.dim=128 --set llm.layers=3 --set llm.heads=4
   --set llm.kv_heads=2 --set llm.head_dim=32 --set llm.ff=256 --set llm.experts=16
   --set llm.experts_used=2 --set llm.ff_exp=64 --set llm.ctx_train=256 --set llm.tokens=10
   --set llm.ctx=64 --set llm.batch=2 --set llm.seed=5)

# the model from the config's keys (a cap that holds it whole: nothing to stream yet)
sw lab0 lab configs/moe.ini "${S[@]}" --set llm.cap=64M --set lab.conditions=reference \
    --set lab.repeats=1 --out "$T/run0"
expect_rc lab0 0
has lab0 err "generating a random qwen3moe of 3 layers x 128, experts 16"
eq "gen: 16 experts, 2 used" "$(python3 - "$M" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read(1 << 20)
def u(key, fmt="<I"):
    i = d.find(key.encode()); return struct.unpack_from(fmt, d, i + len(key) + 4)[0] if i >= 0 else None
print(u("qwen3moe.expert_count"), u("qwen3moe.expert_used_count"))
PY
)" "16 2"

# the first cap (from the smallest's refusal upwards) at which every layer is split
P=(--prompt "Once upon a time" -n 4 --temp 0 --ctx 64 --batch 2)
sw small generate "$M" --arm ssd --cap 1M "${P[@]}"
need=$(sed -n 's/.*: \([0-9.]*\) MiB needed.*/\1/p' "$T/small.err" | head -1)
cap=$(python3 -c "import math,sys; print(math.ceil(float(sys.argv[1]) * 16) * 65536)" "${need:-0}")
CAP=""
for _ in $(seq 1 40); do
    sw probe generate "$M" --arm ssd --cap "$cap" "${P[@]}"
    if [ "$rc" = 0 ] && grep -q " 0 streamed (.*, 3 split (attention" "$T/probe.err"; then CAP=$cap; break; fi
    cap=$((cap + 65536))
done
if [ -n "$CAP" ]; then ok; else bad "no cap splits every layer"; CAP=$cap; fi

sw lab lab configs/moe.ini "${S[@]}" --set "llm.cap=$CAP" \
    --set "lab.conditions=reference, ssd, resident/none" --set lab.repeats=1 --out "$T/run"
expect_rc lab 0
has lab err "3 split"
has lab err "ssd under uniform routing:"
has lab err "(the reference's routing replayed)"
has lab err "disk: the calibration's misses replayed"
has lab err "disk: a generated token's misses (the last 9 passes)"
has lab err "compute: the SSD arm with every layer resident"
has lab out "## SSD: where a generated token's time went"
python3 - "$T/run/results.jsonl" <<'PY' && ok || bad "lab: gates and expert figures"
import json, sys
ssd = None
for line in open(sys.argv[1]):
    o = json.loads(line)
    r, c = o["result"], o["condition"]
    assert r and not r["void"], (c, o["exit_code"])
    if c.startswith("resident"):
        assert r["gates"]["parity"] == "pass", c
    if c == "ssd":
        ssd = o
r = ssd["result"]
assert r["gates"]["cache"] == "pass" and r["gates"]["content"] == "pass", r["gates"]
assert r["split_layers"] == 3 and r["streamed_bytes"] == 0, r
assert ssd["hit_rate_from"] == "replay", ssd
h, m = r["expert_cache_hits_1"], r["expert_cache_misses_1"]
# greedy: the SSD arm routes as the reference did, so the replay predicted its hit rate
assert abs(h / (h + m) - ssd["predicted_hit_rate"]) < 1e-9, (h, m, ssd["predicted_hit_rate"])
assert ssd["uniform_hit_rate"] <= 1 and ssd["routed_read_bytes_per_token"] > 0, ssd
PY
has lab out "## Experts: what the SSD arm read a generated token"
# bytes read a token against what the misses must read: the same, but for the aligned
# supersets (must read prices each miss at the mean of the layer's experts' reads, whose
# alignment differs by a 4 KiB block from expert to expert in a file aligned to 32)
r=$(awk -F'|' '/^\| ssd r1 /{gsub(/ /,"",$5); print $5}' "$T/run/table.md")
python3 -c "import sys; assert abs(float(sys.argv[1]) - 1) <= 0.02" "${r:-0}" && ok ||
    bad "ssd bytes read over must read: $r, wanted 1 within 2%"

echo "e2e_lab_moe: $pass passed, $fail failed"
[ "$fail" = 0 ]
