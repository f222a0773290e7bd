#!/bin/bash
# e2e_quantized.sh — `swarm run --arm quantized` on the tiny dense model: the q8_0 file made
# beside the f32 one and reused, the quality gate passing within its limits, a file quantized
# from corrupted weights voided by the quality gate (exit 3), a damaged quantized file refused
# by the content check, a missing file that may not be made, a cap it does not fit and a bad
# [quantized] type refused with clear errors. No timing is asserted. tests/
# Env: SWARM_BIN (bin/swarm), SWARM_TEST_TMP (scratch).
# Closes with "e2e_quantized: N passed, N failed"; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_quantized"
rm -rf "$T" && mkdir -p "$T/ok" "$T/bad" "$T/dmg" "$T/none"
pass=0; fail=0
. tests/lib.sh
M="$T/ok/tiny.gguf"
run_q() { # name, args...: the tiny config on the model in $T/ok unless --model says otherwise
    local name=$1; shift
    sw "$name" run configs/tiny.ini --arm quantized --set "model.path=$M" \
        --set model.generate=1 --out "$T/$name.jsonl" "$@"
}

# ---- q8_0: made beside the f32 model, within the gate, then reused
run_q q8
expect_rc q8 0
has q8 err "making $T/ok/tiny.q8_0.gguf"
eq "q8: quantized file beside the model" "$(test -s "$T/ok/tiny.q8_0.gguf" && echo yes)" yes
eq "q8: quality gate" "$(jfield "$T/q8.jsonl" gates.quality)" pass
eq "q8: parity n/a" "$(jfield "$T/q8.jsonl" gates.parity)" n/a
eq "q8: content gate" "$(jfield "$T/q8.jsonl" gates.content)" pass
eq "q8: type" "$(jfield "$T/q8.jsonl" quant_type)" q8_0
eq "q8: every layer resident" "$(jfield "$T/q8.jsonl" resident_layers)" 6
python3 - "$T/q8.jsonl" <<'EOF' && ok || bad "q8: errors not inside (0, limit) or RSS missing"
import json, sys
o = json.loads(open(sys.argv[1]).read().splitlines()[-1])
assert 0 < o["quality_max_abs_err"] <= o["quality_limit_abs"], o
assert 0 < o["quality_max_rel_err"] <= o["quality_limit_rel"], o
assert o["peak_rss_bytes"] > 0 and o["steps_per_s"] > 0, o
EOF
run_q again
expect_rc again 0
if grep -qF "making" "$T/again.err"; then bad "again: the cached file was made again"; else ok; fi
eq "again: same outputs" "$(jfield "$T/again.jsonl" output_digest)" \
    "$(jfield "$T/q8.jsonl" output_digest)"

# ---- every type the key takes runs and passes its own limits
for t in q4_0 q4_K q5_K q6_K q4_1 q5_0 q5_1 iq4_nl iq4_xs q3_K q2_K; do
    run_q "type_$t" --set "quantized.type=$t"
    expect_rc "type_$t" 0
    eq "type_$t: quality gate" "$(jfield "$T/type_$t.jsonl" gates.quality)" pass
    eq "type_$t: W type" "$(jfield "$T/type_$t.jsonl" quant_type)" "$t"
done

# ---- quantized from corrupted f32 weights (its checksums match its own bytes): quality voids
cp "$M" "$T/bad/tiny.gguf"
cp "$M" "$T/bad/corrupt.gguf"
size=$(stat -c %s "$M")
# 64 KiB of 0x41 (floats of 12.1, where |w| <= 1/16) in the middle of the file: inside a W
python3 - "$T/bad/corrupt.gguf" "$((size / 2))" <<'EOF'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2]) // 4096 * 4096)
    f.write(b"\x41" * 65536)
EOF
sw qbad quantize "$T/bad/corrupt.gguf" "$T/bad/tiny.q8_0.gguf" Q8_0
expect_rc qbad 0
sw void run configs/tiny.ini --arm quantized --model "$T/bad/tiny.gguf" --out "$T/void.jsonl"
expect_rc void 3
eq "void: quality gate" "$(jfield "$T/void.jsonl" gates.quality)" void
eq "void: content gate (its own sums match)" "$(jfield "$T/void.jsonl" gates.content)" pass
has void out "quality: q8_0 outputs off the f32 reference"

# ---- a damaged quantized file: its layer checksum refuses the load, naming the layer
cp "$M" "$T/dmg/tiny.gguf"
cp "$T/ok/tiny.q8_0.gguf" "$T/dmg/tiny.q8_0.gguf"
qs=$(stat -c %s "$T/dmg/tiny.q8_0.gguf")
printf '\x55\xaa\x55\xaa' | dd of="$T/dmg/tiny.q8_0.gguf" bs=1 seek=$((qs - 8192)) conv=notrunc \
    status=none
sw dmg run configs/tiny.ini --arm quantized --model "$T/dmg/tiny.gguf"
expect_fail dmg
has dmg err "checksum"

# ---- a missing quantized file for a model the config may not generate: the command to run
cp "$M" "$T/none/tiny.gguf"
sw none run configs/tiny.ini --arm quantized --model "$T/none/tiny.gguf"
expect_rc none 2
has none err "swarm quantize $T/none/tiny.gguf $T/none/tiny.q8_0.gguf q8_0"
eq "none: nothing made" "$(test -e "$T/none/tiny.q8_0.gguf" && echo made || echo absent)" absent

# ---- a cap it does not fit: refused before any step, with the figures
run_q small --cap 1M
expect_rc small 1
has small err "do not fit resident under the cap 1.0 MiB"
has small err "short by"

# ---- a bad [quantized] type: the file, line and the choices
cp configs/tiny.ini "$T/badtype.ini"
printf '[quantized]\ntype = iq2_xs\n' >>"$T/badtype.ini"
line=$(wc -l <"$T/badtype.ini")
sw badtype run "$T/badtype.ini" --arm quantized --model "$M"
expect_rc badtype 2
has badtype err "$T/badtype.ini:$line: [quantized] type: unknown type 'iq2_xs' (type: q8_0, q6_K"
sw badarm run configs/tiny.ini --arm quantised --model "$M"
expect_rc badarm 2
has badarm err "unknown arm 'quantised' (arms: reference, ssd, resident, quantized)"

echo "e2e_quantized: $pass passed, $fail failed"
[ "$fail" = 0 ]
