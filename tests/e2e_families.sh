#!/bin/bash
# e2e_families.sh — the families after llama/qwen2 (qwen3, gemma2, gemma3, phi3) through every
# arm on tiny random models: the reference arm (its --parity rerun; 3 sessions batched in shared
# passes, each with its own bits: generate --sessions 3 --parity), the SSD arm under a cap
# that streams layers (parity, cache and content gates), the resident arm in 2 spawned workers
# (the same token ids and logits as the reference), and the quantized arm (an f16 file
# quantized by `swarm quantize` to q8_0, Q4_K_M and Q2_K (q2_K and q3_K tensors), run on the
# reference and resident arms with the same gates; llama.cpp's tokens for such files: test_arch,
# expected-families-quant.json). qwen3's heads are wider than dim / heads (key_length, as
# Qwen3-0.6B); gemma3 has a window of 8 with a prompt far past it, so local and global layers
# both run (gemma2: every other layer, with soft-capped scores and logits), the local layers'
# caches rings of the window and a pass (the planner prices them so: swarm plan's KV bytes);
# phi3 has fused qkv and gate/up matrices and longrope with an original context of 16, under
# the prompt (its long factors).
# The vocabulary is the 32000-piece SentencePiece fixture: the arms do not depend on it, and
# Qwen3's or Gemma 3's would make every file's embedding 5 to 8 times larger (their tokenizers
# and llama.cpp parity: test_tokenizer, test_arch). tests/
# Env: SWARM_BIN, SWARM_TEST_TMP. Closes with "e2e_families: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_families"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh

gzip -dc tests/fixtures/tok/llama-spm.gguf.gz > "$T/vocab.gguf"
P="In a small village by the sea there lived an old fisherman who went out every morning before the sun rose, and every evening he came back with stories"
plan() { # name: "RESIDENT STREAMED" from the ssd arm's plan line
    sed -n 's/.* \([0-9]*\) layers resident, \([0-9]*\) streamed.*/\1 \2/p' "$T/$1.err" | head -1
}
digests() { # jsonl: ids and logits digests
    python3 -c 'import json,sys; o=json.loads(open(sys.argv[1]).readlines()[-1]); print(o["ids_digest"], o["logits_digest"])' "$1"
}

for fam in qwen3 gemma2 gemma3 phi3; do
    case $fam in
    gemma2) shape=(--dim 256 --layers 4 --heads 4 --kv-heads 2 --head-dim 64 --ff 512 --swa 8
                   --tied --attn-softcap 0.05 --softcap 0.5) ;;
    qwen3) shape=(--dim 256 --layers 4 --heads 4 --kv-heads 2 --head-dim 128 --ff 512) ;;
    gemma3) shape=(--dim 256 --layers 6 --heads 4 --kv-heads 1 --head-dim 64 --ff 512 --swa 8) ;;
    phi3) shape=(--dim 256 --layers 8 --heads 4 --kv-heads 2 --rope-dim 48 --ff 512 --longrope 16) ;;
    esac
    nl=${shape[3]}
    common=(--arch $fam "${shape[@]}" --vocab-from "$T/vocab.gguf" --ctx 256 --seed 5)
    sw ${fam}_gen gen "${common[@]}" --type q8_0 -o "$T/$fam.gguf"; expect_rc ${fam}_gen 0
    sw ${fam}_g16 gen "${common[@]}" --type f16 -o "$T/$fam-f16.gguf"; expect_rc ${fam}_g16 0
    G=(--prompt "$P" -n 12 --temp 0 --batch 7)

    # reference: its parity rerun (1 thread, one position a pass) gives the same bits
    sw ${fam}_ref generate "$T/$fam.gguf" "${G[@]}" --threads 2 --parity --out "$T/${fam}_ref.jsonl"
    expect_rc ${fam}_ref 0; has ${fam}_ref err "parity: pass"
    eq "$fam architecture" "$(jfield "$T/${fam}_ref.jsonl" architecture)" $fam
    # 3 sessions batched in shared passes (embedding scale, window, soft-caps per session):
    # every session's bits are the reference arm's alone
    sw ${fam}_bat generate "$T/$fam.gguf" "${G[@]}" --threads 2 --sessions 3 --parity
    expect_rc ${fam}_bat 0
    has ${fam}_bat err "parity: pass (every session's token ids and logits identical"
    has ${fam}_bat err "batched: "
    # sliding-window layers keep only their window: the planner prices each local layer's
    # ring (window 8 + a message of 7 positions) and each global layer the whole context
    case $fam in gemma2|gemma3)
        sw ${fam}_plan plan "$T/$fam.gguf" --workers 1 --cap 0 --ctx 256 --batch 7
        expect_rc ${fam}_plan 0
        python3 - "$T/${fam}_plan.out" $fam <<'PY' && ok || bad "$fam: the plan's KV bytes are not the windows'"
import json, sys
p = json.load(open(sys.argv[1]))
L, per = p["layers"], p["kv_bytes_per_pos_layer"]
glob = sum(1 for l in range(L) if l % (6 if sys.argv[2] == "gemma3" else 2) == (5 if sys.argv[2] == "gemma3" else 1))
want = (glob * 256 + (L - glob) * (8 + 7)) * per
assert p["workers"][0]["kv_bytes"] == want, (p["workers"][0]["kv_bytes"], want)
PY
    esac
    ntok=$(jfield "$T/${fam}_ref.jsonl" tokens_in)
    if [ "${ntok:-0}" -gt 24 ]; then ok; else bad "$fam: prompt of $ntok tokens does not pass the window"; fi

    # SSD: the smallest cap that streams everything is in a refusal; from it plus 3/4 MiB (a
    # layer here is 0.6-0.8 MiB), in half-MiB steps, the first cap that keeps a layer resident
    # and streams the rest (the layers that fit span 3 layers' bytes or more: steps cannot
    # jump it)
    sw ${fam}_small generate "$T/$fam.gguf" --arm ssd --cap 1M "${G[@]}"
    expect_rc ${fam}_small 1; has ${fam}_small err "needed"
    need=$(sed -n 's/.*: \([0-9.]*\) MiB needed.*/\1/p' "$T/${fam}_small.err" | head -1)
    cap=$(python3 -c "import math,sys; print(math.ceil(float(sys.argv[1]) * 4) * 262144 + 786432)" "${need:-0}")
    CAP=""
    for _ in $(seq 1 16); do
        sw ${fam}_probe generate "$T/$fam.gguf" --arm ssd --cap "$cap" "${G[@]}"
        read -r res str <<<"$(plan ${fam}_probe)"
        if [ "$rc" = 0 ] && [ "${res:-0}" -ge 1 ] && [ "${str:-0}" -ge 1 ]; then CAP=$cap; break; fi
        cap=$((cap + 524288))
    done
    if [ -n "$CAP" ]; then ok; else bad "$fam: no cap keeps a layer resident and streams another"; CAP=$cap; fi
    echo "$fam: ssd cap $CAP: $(plan ${fam}_probe) (resident, streamed layers)"
    sw ${fam}_ssd generate "$T/$fam.gguf" --arm ssd --cap "$CAP" "${G[@]}" --parity \
        --out "$T/${fam}_ssd.jsonl"; expect_rc ${fam}_ssd 0
    for g in parity cache content; do
        eq "$fam ssd gate $g" "$(jfield "$T/${fam}_ssd.jsonl" gates.$g)" pass
    done
    eq "$fam ssd text" "$(cat "$T/${fam}_ssd.out")" "$(cat "$T/${fam}_ref.out")"
    eq "$fam ssd digests" "$(digests "$T/${fam}_ssd.jsonl")" "$(digests "$T/${fam}_ref.jsonl")"

    # resident: 2 workers, partitioned by bytes (the partitioner prices the family's layers)
    sw ${fam}_res generate "$T/$fam.gguf" "${G[@]}" --arm resident --workers 2 \
        --worker-cap 64M --threads 1 --out "$T/${fam}_res.jsonl"; expect_rc ${fam}_res 0
    has ${fam}_res err "parity: pass (token ids and logits identical to the reference arm"
    eq "$fam resident text" "$(cat "$T/${fam}_res.out")" "$(cat "$T/${fam}_ref.out")"
    eq "$fam resident digests" "$(digests "$T/${fam}_res.jsonl")" "$(digests "$T/${fam}_ref.jsonl")"
    eq "$fam resident: the last worker ends at the last layer" \
        "$(jfield "$T/${fam}_res.jsonl" workers.1.last)" "$nl"

    # quantized: the f16 file quantized, then the same gates on the reference and resident arms
    for q in q8_0 Q4_K_M Q2_K; do
        sw ${fam}_quant_$q quantize "$T/$fam-f16.gguf" "$T/$fam-$q.gguf" $q
        expect_rc ${fam}_quant_$q 0
        sw ${fam}_qref_$q generate "$T/$fam-$q.gguf" "${G[@]}" --parity --kl-base "$T/$fam-f16.gguf" \
            --out "$T/${fam}_qref_$q.jsonl"
        expect_rc ${fam}_qref_$q 0; has ${fam}_qref_$q err "parity: pass"
        t=$q; [ $q = Q4_K_M ] && t=q4_K; [ $q = Q2_K ] && t=q2_K
        case $(jfield "$T/${fam}_qref_$q.jsonl" tensor_types.$t) in
            [1-9]*) ok ;; *) bad "$fam $q: no $t tensors in the quantized file" ;; esac
        has ${fam}_qref_$q err "KL"
        sw ${fam}_qres_$q generate "$T/$fam-$q.gguf" "${G[@]}" --arm resident --workers 2 \
            --worker-cap 64M --threads 1 --out "$T/${fam}_qres_$q.jsonl"
        expect_rc ${fam}_qres_$q 0
        has ${fam}_qres_$q err "parity: pass (token ids and logits identical to the reference arm"
        eq "$fam $q resident digests" "$(digests "$T/${fam}_qres_$q.jsonl")" \
            "$(digests "$T/${fam}_qref_$q.jsonl")"
    done
done

echo "e2e_families: $pass passed, $fail failed"
[ "$fail" = 0 ]
