#!/bin/bash
# e2e_moe.sh — the Mixture-of-Experts families (Mixtral-style llama with experts, qwen3moe,
# gpt-oss)
# through every arm on tiny random models: the reference arm (its --parity rerun), the SSD arm
# under a cap that streams layers (parity, cache and content gates; a streamed layer reads
# only its routed experts into an expert cache: fewer bytes than every expert, each slice
# hashed; --stream-all-experts, the dense read, gives the same bits; a corrupted expert fails
# the content gate, exit 3), the resident arm in 2 spawned workers (the same token ids and
# logits as the reference; a layer's experts are never split across workers; a worker killed
# mid-generation changes nothing), and the quantized arm (the f16 file quantized to q8_0 by
# `swarm quantize`, its 3-D expert tensors included; gpt-oss also as MXFP4_MOE, its experts
# MXFP4). llama.cpp parity of these families: test_arch (tests/fixtures/llama/expected-moe.json,
# expected-gptoss.json). tests/
# Env: SWARM_BIN, SWARM_TEST_TMP. Closes with "e2e_moe: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_moe"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh

gzip -dc tests/fixtures/tok/llama-spm.gguf.gz > "$T/vocab.gguf"
P="In a small village by the sea there lived an old fisherman who went out every morning before the sun rose"
plan() { # name: "RESIDENT STREAMED" from the ssd arm's plan line
    sed -n 's/.* \([0-9]*\) layers resident, \([0-9]*\) streamed.*/\1 \2/p' "$T/$1.err" | head -1
}
split() { # name: split layers (attention and router resident, experts through the cache)
    sed -n 's/.* \([0-9]*\) split (attention.*/\1/p' "$T/$1.err" | head -1
}
digests() { # jsonl: ids and logits digests
    python3 -c 'import json,sys; o=json.loads(open(sys.argv[1]).readlines()[-1]); print(o["ids_digest"], o["logits_digest"])' "$1"
}

for fam in mixtral qwen3moe gptoss; do
    case $fam in
    mixtral) shape=(--arch llama --dim 128 --layers 4 --heads 4 --kv-heads 2 --ff 128 --experts 8
                    --experts-used 2) ;;
    qwen3moe) shape=(--arch qwen3moe --dim 128 --layers 4 --heads 4 --kv-heads 2 --head-dim 64
                     --ff 256 --ff-exp 64 --experts 16 --experts-used 4) ;;
    gptoss) shape=(--arch gpt-oss --dim 128 --layers 4 --heads 4 --kv-heads 2 --head-dim 64
                   --ff 256 --ff-exp 64 --experts 16 --experts-used 4 --swa 8) ;;
    esac
    nl=${shape[5]}
    common=("${shape[@]}" --vocab-from "$T/vocab.gguf" --ctx 256 --seed 9)
    sw ${fam}_gen gen "${common[@]}" --type q8_0 -o "$T/$fam.gguf"; expect_rc ${fam}_gen 0
    sw ${fam}_g16 gen "${common[@]}" --type f16 -o "$T/$fam-f16.gguf"; expect_rc ${fam}_g16 0
    G=(--prompt "$P" -n 10 --temp 0 --batch 7)

    # reference: its parity rerun (1 thread, one position a pass) gives the same bits
    sw ${fam}_ref generate "$T/$fam.gguf" "${G[@]}" --threads 2 --parity --out "$T/${fam}_ref.jsonl"
    expect_rc ${fam}_ref 0; has ${fam}_ref err "parity: pass"
    arch=$(jfield "$T/${fam}_ref.jsonl" architecture)
    case $fam in
    mixtral) eq "$fam architecture" "$arch" llama ;;
    gptoss) eq "$fam architecture" "$arch" gpt-oss ;;
    *) eq "$fam architecture" "$arch" $fam ;;
    esac

    # SSD: from the smallest cap (in its refusal) upwards, the first that keeps a layer's
    # attention and router resident (split) and streams the rest through the ring (a layer
    # here is about 0.5 MiB)
    sw ${fam}_small generate "$T/$fam.gguf" --arm ssd --cap 1M "${G[@]}"
    expect_rc ${fam}_small 1; has ${fam}_small err "needed"
    need=$(sed -n 's/.*: \([0-9.]*\) MiB needed.*/\1/p' "$T/${fam}_small.err" | head -1)
    cap=$(python3 -c "import math,sys; print(math.ceil(float(sys.argv[1]) * 16) * 65536)" "${need:-0}")
    CAP=""
    for _ in $(seq 1 32); do
        sw ${fam}_probe generate "$T/$fam.gguf" --arm ssd --cap "$cap" "${G[@]}"
        read -r res str <<<"$(plan ${fam}_probe)"
        if [ "$rc" = 0 ] && [ "$(split ${fam}_probe)" -ge 1 ] 2>/dev/null && [ "${str:-0}" -ge 1 ]; then CAP=$cap; break; fi
        cap=$((cap + 65536))
    done
    if [ -n "$CAP" ]; then ok; else bad "$fam: no cap splits a layer and streams another"; CAP=$cap; fi
    echo "$fam: ssd cap $CAP: split $(split ${fam}_probe)"
    # ... and upwards again, the first that splits every layer: nothing through the ring, only
    # routed experts read
    ACAP=""
    for _ in $(seq 1 32); do
        cap=$((cap + 65536))
        sw ${fam}_aprobe generate "$T/$fam.gguf" --arm ssd --cap "$cap" "${G[@]}"
        read -r res str <<<"$(plan ${fam}_aprobe)"
        if [ "$rc" = 0 ] && [ "$(split ${fam}_aprobe)" = "$nl" ] && [ "${str:-1}" = 0 ]; then ACAP=$cap; break; fi
    done
    if [ -n "$ACAP" ]; then ok; else bad "$fam: no cap splits every layer"; ACAP=$cap; fi
    sw ${fam}_ssda generate "$T/$fam.gguf" --arm ssd --cap "$ACAP" "${G[@]}" --out "$T/${fam}_ssda.jsonl"
    expect_rc ${fam}_ssda 0
    for g in cache content; do
        eq "$fam all-split gate $g" "$(jfield "$T/${fam}_ssda.jsonl" gates.$g)" pass
    done
    eq "$fam all-split digests" "$(digests "$T/${fam}_ssda.jsonl")" "$(digests "$T/${fam}_ref.jsonl")"
    python3 - "$T/${fam}_ssda.jsonl" <<'PY' && ok || bad "$fam: all-split figures"
import json, sys
o = json.loads(open(sys.argv[1]).readlines()[-1])
# nothing through the ring; what storage gave is the routed experts' misses alone
assert o["streamed_bytes"] == 0 and o["split_layers"] >= 1, o
assert o["expert_read_bytes"] > 0 and 9 <= o["steps_1"] <= 10, o
assert 0 < o["expert_read_bytes_1"] <= o["expert_read_bytes"], o
assert o["expert_cache_hits_1"] + o["expert_cache_misses_1"] > 0, o
# the disk bound of a generated token's expert bytes at the rate the arm's reads ran
b = o["expert_read_bytes_per_token"]
assert abs(b - o["expert_read_bytes_1"] / o["steps_1"]) < 1 and o["expert_read_gbps"] > 0, o
assert abs(o["expert_disk_bound_ms_per_token"] - b / (o["expert_read_gbps"] * 1e6)) < 1e-6, o
PY
    echo "$fam: ssd cap $CAP: $(plan ${fam}_probe) (resident, streamed layers)"
    [ $fam = qwen3moe ] && CAPQ=$CAP
    sw ${fam}_ssd generate "$T/$fam.gguf" --arm ssd --cap "$CAP" "${G[@]}" --parity \
        --out "$T/${fam}_ssd.jsonl"; expect_rc ${fam}_ssd 0
    for g in parity cache content; do
        eq "$fam ssd gate $g" "$(jfield "$T/${fam}_ssd.jsonl" gates.$g)" pass
    done
    eq "$fam ssd digests" "$(digests "$T/${fam}_ssd.jsonl")" "$(digests "$T/${fam}_ref.jsonl")"
    has ${fam}_ssd err "ssd experts:"
    python3 - "$T/${fam}_ssd.jsonl" <<'PY' && ok || bad "$fam: expert streaming figures"
import json, sys
o = json.loads(open(sys.argv[1]).readlines()[-1])
r, d = o["expert_read_bytes"], o["expert_dense_bytes"]
h, m = o["expert_cache_hits"], o["expert_cache_misses"]
assert 0 < r < d, (r, d)
assert m > 0 and o["experts_hashed"] >= m, o
assert o["expert_cache_slots"] >= 1
print(f"  experts read {r} of {d} bytes ({r / d:.2f}), cache hit rate {h / (h + m):.2f}")
PY
    # the same run with every expert streamed with its layer (the dense read): the same bits
    # (its ring carries expert chunks: a larger ring than the split plan's, 1 MiB more cap)
    sw ${fam}_ssdd generate "$T/$fam.gguf" --arm ssd --cap "$((CAP + 1048576))" "${G[@]}" --stream-all-experts \
        --out "$T/${fam}_ssdd.jsonl"; expect_rc ${fam}_ssdd 0
    eq "$fam ssd dense digests" "$(digests "$T/${fam}_ssdd.jsonl")" "$(digests "$T/${fam}_ref.jsonl")"
    eq "$fam ssd dense: no expert cache" "$(jfield "$T/${fam}_ssdd.jsonl" expert_cache_slots)" MISSING

    # resident: 2 workers, partitioned by bytes (every layer's experts priced in)
    sw ${fam}_res generate "$T/$fam.gguf" "${G[@]}" --arm resident --workers 2 \
        --worker-cap 64M --threads 1 --out "$T/${fam}_res.jsonl"; expect_rc ${fam}_res 0
    has ${fam}_res err "parity: pass (token ids and logits identical to the reference arm"
    eq "$fam resident digests" "$(digests "$T/${fam}_res.jsonl")" "$(digests "$T/${fam}_ref.jsonl")"
    eq "$fam resident: the last worker ends at the last layer" \
        "$(jfield "$T/${fam}_res.jsonl" workers.1.last)" "$nl"

    # failover: a worker killed mid-generation, the same tokens and logits
    sw ${fam}_kill generate "$T/$fam.gguf" "${G[@]}" --arm resident --workers 2 \
        --worker-cap 64M --threads 1 --kill-worker w1@4 --out "$T/${fam}_kill.jsonl"
    expect_rc ${fam}_kill 0; has ${fam}_kill err "failover w1 (killed by signal 9)"
    eq "$fam failover digests" "$(digests "$T/${fam}_kill.jsonl")" "$(digests "$T/${fam}_ref.jsonl")"

    # quantized: the f16 file to q8_0 (3-D expert tensors too), reference and resident
    sw ${fam}_quant quantize "$T/$fam-f16.gguf" "$T/$fam-q8.gguf" q8_0; expect_rc ${fam}_quant 0
    sw ${fam}_qref generate "$T/$fam-q8.gguf" "${G[@]}" --parity --kl-base "$T/$fam-f16.gguf" \
        --out "$T/${fam}_qref.jsonl"
    expect_rc ${fam}_qref 0; has ${fam}_qref err "parity: pass"; has ${fam}_qref err "KL"
    sw ${fam}_qres generate "$T/$fam-q8.gguf" "${G[@]}" --arm resident --workers 2 \
        --worker-cap 64M --threads 1 --out "$T/${fam}_qres.jsonl"; expect_rc ${fam}_qres 0
    eq "$fam q8_0 resident digests" "$(digests "$T/${fam}_qres.jsonl")" "$(digests "$T/${fam}_qref.jsonl")"
done

# gpt-oss as published: MXFP4_MOE (its 3-D experts MXFP4, the other matrices q8_0) on the
# reference, SSD (streamed experts) and resident arms, the same bits on each
F=gptoss
sw mx_quant quantize -v "$T/$F-f16.gguf" "$T/$F-mx.gguf" MXFP4_MOE; expect_rc mx_quant 0
has mx_quant out "ffn_down_exps.weight"
grep -q "ffn_gate_exps.weight.*mxfp4" "$T/mx_quant.out" && grep -q "attn_q.weight.*q8_0" "$T/mx_quant.out" \
    && ok || bad "MXFP4_MOE: experts mxfp4, attention q8_0"
sw mx_ref generate "$T/$F-mx.gguf" "${G[@]}" --parity --kl-base "$T/$F-f16.gguf" \
    --out "$T/mx_ref.jsonl"
expect_rc mx_ref 0; has mx_ref err "parity: pass"; has mx_ref err "KL"
sw mx_small generate "$T/$F-mx.gguf" --arm ssd --cap 1M "${G[@]}"
need=$(sed -n 's/.*: \([0-9.]*\) MiB needed.*/\1/p' "$T/mx_small.err" | head -1)
cap=$(python3 -c "import math,sys; print(math.ceil(float(sys.argv[1]) * 4) * 262144 + 262144)" "${need:-0}")
sw mx_ssd generate "$T/$F-mx.gguf" --arm ssd --cap "$cap" "${G[@]}" --parity --out "$T/mx_ssd.jsonl"
expect_rc mx_ssd 0
for g in parity cache content; do eq "mxfp4 ssd gate $g" "$(jfield "$T/mx_ssd.jsonl" gates.$g)" pass; done
eq "mxfp4 ssd digests" "$(digests "$T/mx_ssd.jsonl")" "$(digests "$T/mx_ref.jsonl")"
echo "gptoss mxfp4: ssd cap $cap: $(plan mx_ssd) (resident, streamed layers)"
sw mx_res generate "$T/$F-mx.gguf" "${G[@]}" --arm resident --workers 2 --worker-cap 64M \
    --threads 1 --out "$T/mx_res.jsonl"; expect_rc mx_res 0
eq "mxfp4 resident digests" "$(digests "$T/mx_res.jsonl")" "$(digests "$T/mx_ref.jsonl")"

# a byte of every expert's slice of one streamed expert tensor corrupted in place, size and
# mtime kept (the checksum caches stay valid): whichever experts are routed fail the content
# gate, no text comes out, exit 3
F=qwen3moe
cp -p "$T/$F.gguf" "$T/bad.gguf"
sw warm generate "$T/bad.gguf" --arm ssd --cap "$CAPQ" "${G[@]}"; expect_rc warm 0
python3 - "$T/bad.gguf" blk.3.ffn_up_exps.weight 16 <<'EOF' && ok || bad "could not corrupt the copy"
import os, struct, sys
path, name, E = sys.argv[1], sys.argv[2], int(sys.argv[3])
f = open(path, "r+b"); d = f.read()
p = 4 + 4
nt, nkv = struct.unpack_from("<QQ", d, p); p += 16
def s(p):
    n, = struct.unpack_from("<Q", d, p); return d[p + 8:p + 8 + n].decode(), p + 8 + n
SZ = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def val(t, p):
    if t == 8: return s(p)
    if t == 9:
        at, n = struct.unpack_from("<IQ", d, p); p += 12
        for _ in range(n): v, p = val(at, p)
        return None, p
    v = struct.unpack_from({4: "<I", 5: "<i"}.get(t, "<%dx" % SZ[t]), d, p)
    return (v[0] if v else None), p + SZ[t]
align = 32
for _ in range(nkv):
    k, p = s(p); t, = struct.unpack_from("<I", d, p); v, p = val(t, p + 4)
    if k == "general.alignment": align = v
off = None
for _ in range(nt):
    n, p = s(p); nd, = struct.unpack_from("<I", d, p)
    dims = struct.unpack_from("<%dQ" % nd, d, p + 4); p += 4 + 8 * nd
    t, o = struct.unpack_from("<IQ", d, p); p += 12
    if n == name: off, nbytes = o, dims[0] * dims[1] * dims[2] // 32 * 34  # q8_0 blocks
base = (p + align - 1) // align * align
st = os.stat(path)
for e in range(E):
    at = base + off + e * (nbytes // E) + 100
    f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0x40]))
f.close()
os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
EOF
sw corrupt generate "$T/bad.gguf" --arm ssd --cap "$CAPQ" "${G[@]}" --out "$T/bad.jsonl"
expect_rc corrupt 3
has corrupt err "content gate: layer 3 expert"
has corrupt err "checksum mismatch"
eq "corrupt: no text computed from it" "$(tr -d '\n' <"$T/corrupt.out")" ""

# bad input: experts where the family has none, a qwen3moe file without them
sw bad_fam gen --arch qwen3 --experts 8 --vocab-from "$T/vocab.gguf" --seed 1 -o "$T/bad.gguf"
expect_rc bad_fam 1; has bad_fam err "experts belong to llama, qwen3moe and gpt-oss files"
sw bad_used gen --arch llama --experts 4 --experts-used 5 --vocab-from "$T/vocab.gguf" --seed 1 -o "$T/bad.gguf"
expect_rc bad_used 1; has bad_used err "experts-used"
sw bad_none gen --arch qwen3moe --vocab-from "$T/vocab.gguf" --seed 1 -o "$T/bad.gguf"
expect_rc bad_none 1; has bad_none err "needs --experts"
sw bad_oss gen --arch gpt-oss --experts 4 --tied --vocab-from "$T/vocab.gguf" --seed 1 -o "$T/bad.gguf"
expect_rc bad_oss 1; has bad_oss err "own head"

echo "e2e_moe: $pass passed, $fail failed"
[ "$fail" = 0 ]
