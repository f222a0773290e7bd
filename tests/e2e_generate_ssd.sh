#!/bin/bash
# e2e_generate_ssd.sh — swarm generate, perplexity and serve under the SSD arm on a tiny random llama
# model (fixture vocabulary) with a cap that streams some layers: parity with the reference arm,
# the cache and content gates and the SSD fields of --out, a corrupted streamed byte voiding the
# run (exit 3), a cap too small refused with its numbers (exit 1), serve --arm ssd answering
# what generate prints, --sessions 3 batched under a cap planned for them, perplexity equal to
# the reference arm's. tests/
# Env: SWARM_BIN (bin/swarm), SWARM_TEST_TMP (scratch). Closes with "e2e_generate_ssd: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_generate_ssd"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh

gzip -dc tests/fixtures/tok/llama-spm.gguf.gz > "$T/vocab.gguf"
# dim 256 and ff 512 make a q8_0 layer ≈0.7 MiB: a few hundred KiB of cap moves a layer
sw gen gen --arch llama --dim 256 --layers 4 --heads 4 --kv-heads 2 --ff 512 \
    --vocab-from "$T/vocab.gguf" --ctx 256 --seed 9 --type q8_0 -o "$T/m.gguf"; expect_rc gen 0
P="Once upon a time"
plan() { # name: "RESIDENT STREAMED" from the ssd arm's plan line
    sed -n 's/.* \([0-9]*\) layers resident, \([0-9]*\) streamed.*/\1 \2/p' "$T/$1.err" | head -1
}

# a cap too small: exit 1, the refusal names the cap and what the plan needs
sw small generate "$T/m.gguf" --arm ssd --cap 1M --prompt "$P" -n 4 --temp 0
expect_rc small 1; has small err "cannot hold"; has small err "needed"
# the smallest cap that streams everything is in that refusal; from it, in quarter-MiB steps,
# the first cap that keeps a layer resident and still streams the rest (for the same -n: the
# KV cache is planned under the cap)
need=$(sed -n 's/.*: \([0-9.]*\) MiB needed.*/\1/p' "$T/small.err" | head -1)
cap=$(python3 -c "import math,sys; print(math.ceil(float(sys.argv[1]) * 4) * 262144)" "${need:-0}")
CAP=""
for _ in $(seq 1 24); do
    sw probe generate "$T/m.gguf" --arm ssd --cap "$cap" --prompt "$P" -n 16 --temp 0
    read -r res str <<<"$(plan probe)"
    if [ "$rc" = 0 ] && [ "${res:-0}" -ge 1 ] && [ "${str:-0}" -ge 1 ]; then CAP=$cap; break; fi
    cap=$((cap + 262144))
done
if [ -n "$CAP" ]; then ok; else bad "no cap keeps a layer resident and streams another"; CAP=$cap; fi

# parity: ssd (streaming) against the reference arm in the same invocation
sw ref generate "$T/m.gguf" --prompt "$P" -n 16 --temp 0 --out "$T/ref.jsonl"; expect_rc ref 0
sw ssd generate "$T/m.gguf" --arm ssd --cap "$CAP" --prompt "$P" -n 16 --temp 0 --parity \
    --out "$T/ssd.jsonl"; expect_rc ssd 0
has ssd err "parity: pass"
has ssd err "ssd gates: cache pass"
eq "ssd text = reference text" "$(cat "$T/ssd.out")" "$(cat "$T/ref.out")"
eq "ssd ids = reference ids" "$(jfield "$T/ssd.jsonl" ids_digest)" "$(jfield "$T/ref.jsonl" ids_digest)"
eq "ssd logits = reference logits" "$(jfield "$T/ssd.jsonl" logits_digest)" \
    "$(jfield "$T/ref.jsonl" logits_digest)"
for g in parity cache content; do eq "gate $g" "$(jfield "$T/ssd.jsonl" gates.$g)" pass; done
eq "arm" "$(jfield "$T/ssd.jsonl" arm)" ssd
eq "void" "$(jfield "$T/ssd.jsonl" void)" False
eq "cap_bytes" "$(jfield "$T/ssd.jsonl" cap_bytes)" "$CAP"
eq "ssd_from" "$(jfield "$T/ssd.jsonl" ssd_from)" defaults
for k in ssd_read_bytes streamed_bytes streamed_per_pass_bytes resident_layers streamed_layers \
         io io_uring io_buffers cap_mode checksums planned_working_set_bytes held_bytes \
         cgroup_peak_bytes read_wait_ms layer_ms hash_wait_ms queue_depth chunk_bytes \
         ring_slots peak_rss_bytes device; do
    [ "$(jfield "$T/ssd.jsonl" "$k")" != MISSING ] && ok || bad "--out lacks $k"
done
eq "io" "$(jfield "$T/ssd.jsonl" io)" direct
python3 - "$T/ssd.jsonl" <<'EOF' && ok || bad "streamed fields inconsistent (see above)"
import json, sys
o = json.loads(open(sys.argv[1]).read().splitlines()[-1])
assert o["streamed_layers"] >= 1 and o["resident_layers"] >= 1, o
# one pass per generated token and one for the prompt, and read-ahead of the next at most
assert o["streamed_bytes"] >= o["tokens_out"] * o["streamed_per_pass_bytes"], o
assert o["streamed_bytes"] <= (o["tokens_out"] + 2) * o["streamed_per_pass_bytes"], o
assert abs(o["ssd_read_bytes"] - o["streamed_bytes"]) <= 0.01 * o["streamed_bytes"], o
EOF
# two threads and a batch of 3: the same bits
sw ssd2 generate "$T/m.gguf" --arm ssd --cap "$CAP" --prompt "$P" -n 16 --temp 0 --threads 2 \
    --batch 3 --out "$T/ssd.jsonl"; expect_rc ssd2 0
eq "ssd 2 threads ids" "$(jfield "$T/ssd.jsonl" ids_digest)" "$(jfield "$T/ref.jsonl" ids_digest)"
eq "ssd 2 threads logits" "$(jfield "$T/ssd.jsonl" logits_digest)" \
    "$(jfield "$T/ref.jsonl" logits_digest)"
# knobs from a config's [ssd] section
printf '[model]\npath = %s\n[ssd]\ncap = %s\nqueue_depth = 2\nchunk = 64K\n' "$T/m.gguf" \
    "$CAP" >"$T/c.ini"
sw cfg generate "$T/c.ini" --arm ssd --prompt "$P" -n 4 --temp 0 --out "$T/cfg.jsonl"
expect_rc cfg 0
eq "config: ssd_from" "$(jfield "$T/cfg.jsonl" ssd_from)" "$T/c.ini [ssd]"
eq "config: queue_depth" "$(jfield "$T/cfg.jsonl" queue_depth)" 2
eq "config: chunk_bytes" "$(jfield "$T/cfg.jsonl" chunk_bytes)" 65536
# flags that belong to the SSD arm, and a bad one
sw nossd generate "$T/m.gguf" --cap 600M --prompt "$P"; expect_rc nossd 2; has nossd err "--arm ssd"
sw badcap generate "$T/m.gguf" --arm ssd --cap lots --prompt "$P"; expect_rc badcap 2
has badcap err "--cap 'lots'"

# a streamed byte corrupted in place, size and mtime kept (the checksum cache stays valid):
# the content gate fails the prompt's pass, so no text comes out; exit 3 (issue 19)
cp -p "$T/m.gguf" "$T/bad.gguf"
sw warm generate "$T/bad.gguf" --arm ssd --cap "$CAP" --prompt "$P" -n 1 --temp 0; expect_rc warm 0
python3 - "$T/bad.gguf" blk.3.ffn_down.weight <<'EOF' && ok || bad "could not corrupt the copy"
import os, struct, sys
path, name = sys.argv[1], sys.argv[2]
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
        v = None
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
    n, p = s(p); nd, = struct.unpack_from("<I", d, p); p += 4 + 8 * nd
    t, o = struct.unpack_from("<IQ", d, p); p += 12
    if n == name: off = o
base = (p + align - 1) // align * align
st = os.stat(path)
f.seek(base + off + 100); b = f.read(1); f.seek(base + off + 100); f.write(bytes([b[0] ^ 0x40])); f.close()
os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
EOF
sw corrupt generate "$T/bad.gguf" --arm ssd --cap "$CAP" --prompt "$P" -n 4 --temp 0 \
    --out "$T/bad.jsonl"; expect_rc corrupt 3
has corrupt err "checksums: cache"
has corrupt err "content gate: streamed layer 3 checksum mismatch"
eq "corrupt: no text computed from it" "$(tr -d '\n' <"$T/corrupt.out")" ""

# perplexity --arm ssd: the reference arm's figure to the last digit, gates passed
for _ in $(seq 1 40); do printf 'Once upon a time the cat sat on the mat, 12 + 30 = 42. ' ; done >"$T/text.txt"
sw pref perplexity "$T/m.gguf" --file "$T/text.txt" --ctx 16; expect_rc pref 0
sw pssd perplexity "$T/m.gguf" --file "$T/text.txt" --ctx 16 --arm ssd --cap "$CAP"
expect_rc pssd 0
has pssd err "ssd gates: cache pass"
has pssd err "content pass"
eq "perplexity ssd = reference" "$(grep -o 'perplexity [0-9.]*' "$T/pssd.out")" \
    "$(grep -o 'perplexity [0-9.]*' "$T/pref.out")"
sw pcorr perplexity "$T/bad.gguf" --file "$T/text.txt" --ctx 16 --arm ssd --cap "$CAP"
expect_rc pcorr 3; has pcorr err "content gate: streamed layer 3 checksum mismatch"

# several sessions under the same cap: each one's KV cache planned in (fewer layers stay
# resident), their passes batched (each streamed layer read once for all): every session's ids
# and logits are the reference arm's, the gates pass, as many layers streamed as one session's
# run streams per pass, not three times as many
sw ssd3 generate "$T/m.gguf" --arm ssd --cap "$CAP" --prompt "$P" -n 16 --temp 0.8 --seed 3 \
    --sessions 3 --parity --out "$T/ssd3.jsonl"; expect_rc ssd3 0
has ssd3 err "parity: pass (every session's token ids and logits identical"
has ssd3 err "ssd gates: cache pass"
read -r res3 str3 <<<"$(plan ssd3)"
hashed=$(sed -n 's/.*content pass (\([0-9]*\) streamed layers hashed.*/\1/p' "$T/ssd3.err" | head -1)
[ "${str3:-0}" -ge 1 ] && [ "${hashed:-0}" -le $((str3 * (16 + 8))) ] && ok ||
    bad "ssd3: ${hashed:-?} streamed layers hashed for 3 sessions of 16 tokens (${str3:-?} a pass)"
# serve --arm ssd: one slot unless --parallel, /health says ssd, greedy = generate's text
# serve plans 64 positions where the probe above planned the prompt + 16, under the same 32 MiB
# overhead as every command's SSD arm (dist/arm_open.c): a MiB more holds the larger KV cache
"$SWARM_BIN" serve "$T/m.gguf" --arm ssd --cap "$((CAP + 1048576))" --ctx 64 --listen 127.0.0.1:0 \
    --port-file "$T/srv.port" >"$T/srv.out" 2>"$T/srv.err" &
srv=$!
# waits as long as the server lives (a slow machine loads slowly; a dead server ends it)
until grep -qF "serve: ready" "$T/srv.err" 2>/dev/null || ! kill -0 "$srv" 2>/dev/null; do
    sleep 0.05
done
if grep -qF "serve: ready" "$T/srv.err"; then
    ok
    port=$(cat "$T/srv.port")
    has srv err "ssd arm: cap"
    has srv err "1 slots"
    curl -s "http://127.0.0.1:$port/health" >"$T/health.json"
    eq "/health arm" "$(jfield "$T/health.json" arm)" ssd
    eq "/health slots" "$(jfield "$T/health.json" slots)" 1
    curl -s "http://127.0.0.1:$port/v1/completions" \
        -d "{\"prompt\":\"$P\",\"max_tokens\":16,\"temperature\":0}" >"$T/c.json"
    eq "serve ssd greedy = generate" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))
        ["choices"][0]["text"])' "$T/c.json")" "$(cat "$T/ssd.out")"
    kill -TERM "$srv"
else
    bad "serve --arm ssd did not start"; tail -5 "$T/srv.err" >&2
fi
if wait "$srv"; then rc=0; else rc=$?; fi
eq "serve ssd: SIGTERM exit" "$rc" 0

echo "e2e_generate_ssd: $pass passed, $fail failed"
[ "$fail" = 0 ]
