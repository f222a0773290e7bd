#!/bin/bash
# e2e_arms.sh — reference and SSD arms end to end: bit parity, JSONL fields, gates, refusals, cleanup. tests/
# Env: SWARM_BIN (bin/swarm), SWARM_TEST_TMP (scratch on a disk). Needs python3 (JSON checks).
# Closes with "e2e_arms: N passed, N failed"; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_arms"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
check() { # description, command...
    local what=$1; shift
    if "$@"; then ok; else bad "$what"; fi
}
# Run swarm, capturing stdout/stderr into $T/NAME.{out,err}; sets $rc.
sw() { # name, args...
    local name=$1; shift
    if "$SWARM_BIN" "$@" >"$T/$name.out" 2>"$T/$name.err"; then rc=0; else rc=$?; fi
}
# Load the last JSON object of a JSONL file into J: top-level keys and one level below
# ("gates.cache"), values as Python prints them (True/False, 0.0). One python3 per file
# (each start costs ~0.1 s). jf KEY prints a value, or MISSING.
declare -A J
jload() { # file
    J=()
    [ -s "$1" ] || return 0
    local k v
    while IFS=$'\t' read -r k v; do J[$k]=$v; done < <(python3 -c '
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
o = json.loads(lines[-1])
for k, v in o.items():
    print(k + "\t" + (json.dumps(v) if isinstance(v, (dict, list)) else str(v)))
    if isinstance(v, dict):
        for k2, v2 in v.items():
            print(k + "." + k2 + "\t" + str(v2))
' "$1")
}
jf() { echo "${J[$1]-MISSING}"; }
expect_rc() { # name, wanted rc
    if [ "$rc" = "$2" ]; then ok; else
        bad "$1: exit $rc, wanted $2"; sed 's/^/    | /' "$T/$1.err" | tail -8 >&2; fi
}
no_crash() { # name
    if [ "$rc" -lt 128 ] && ! grep -qE 'Segmentation|AddressSanitizer|UndefinedBehaviorSanitizer|runtime error|core dumped' "$T/$1.err"; then ok; else
        bad "$1: crashed (exit $rc)"; tail -8 "$T/$1.err" >&2; fi
}
has() { # name, stream (out|err), fixed string
    if grep -qF -- "$3" "$T/$1.$2"; then ok; else bad "$1: $2 lacks '$3'"; tail -5 "$T/$1.$2" | sed 's/^/    | /' >&2; fi
}
eq() { # description, got, wanted
    if [ "$2" = "$3" ]; then ok; else bad "$1: got '$2', wanted '$3'"; fi
}

if ! command -v python3 >/dev/null; then
    echo "e2e_arms: python3 is required (apt-get install python3)" >&2
    echo "e2e_arms: 0 passed, 1 failed"; exit 1
fi

CFG=configs/tiny.ini
STEPS=8; DIM=256
M="$T/tiny.gguf"
sw gen gen --layers 6 --dim $DIM --seed 1 -o "$M"
expect_rc gen 0

# ---- reference vs ssd: bit-identical, every documented field, gates pass
run_args=(run "$CFG" --model "$M" --steps $STEPS --quiet)
sw ref "${run_args[@]}" --arm reference --out "$T/ref.jsonl" --dump-outputs "$T/ref.f32" --dump-inputs "$T/ref_in.f32"
expect_rc ref 0
sw ssd "${run_args[@]}" --arm ssd --out "$T/ssd.jsonl" --dump-outputs "$T/ssd.f32" --dump-inputs "$T/ssd_in.f32"
expect_rc ssd 0
check "ssd outputs == reference outputs (cmp)" cmp -s "$T/ref.f32" "$T/ssd.f32"
eq "outputs file size" "$(stat -c %s "$T/ssd.f32" 2>/dev/null)" $((STEPS * DIM * 4))
eq "inputs file size" "$(stat -c %s "$T/ssd_in.f32" 2>/dev/null)" $((STEPS * DIM * 4))
check "inputs identical across arms" cmp -s "$T/ref_in.f32" "$T/ssd_in.f32"
check "outputs differ from inputs" eval '! cmp -s "$T/ssd_in.f32" "$T/ssd.f32"'
jload "$T/ref.jsonl"
declare -A R
for k in "${!J[@]}"; do R[$k]=${J[$k]}; done
jload "$T/ssd.jsonl"
eq "output_digest ssd == reference" "$(jf output_digest)" "${R[output_digest]-MISSING(ref)}"
check "output_digest is a sha256" eval '[[ "$(jf output_digest)" =~ ^[0-9a-f]{64}$ ]]'
eq "ssd max_abs_diff" "$(jf max_abs_diff)" "0.0"
eq "ssd gates.cache" "$(jf gates.cache)" pass
eq "ssd gates.content" "$(jf gates.content)" pass
eq "ssd gates.parity" "$(jf gates.parity)" pass
eq "ssd void" "$(jf void)" False
eq "ssd arm" "$(jf arm)" ssd
eq "ssd steps" "$(jf steps)" $STEPS
eq "ssd io" "$(jf io)" direct
eq "ssd resident_layers (tiny.ini plan)" "$(jf resident_layers)" 2
eq "ssd streamed_layers (tiny.ini plan)" "$(jf streamed_layers)" 4
eq "ssd cap_bytes" "$(jf cap_bytes)" 2097152
eq "ssd config" "$(jf config)" "$CFG"
eq "ssd model" "$(jf model)" "$M"
eq "reference arm" "${R[arm]-MISSING}" reference
eq "reference gates.cache (nothing streamed)" "${R[gates.cache]-MISSING}" n/a
eq "reference gates.content" "${R[gates.content]-MISSING}" pass
for f in arm steps setup_ms ttfr_ms step_ms_p50 step_ms_p95 step_ms_p99 steps_per_s stage_ms \
         ssd_read_bytes setup_read_bytes peak_rss_bytes cap_bytes output_digest max_abs_diff \
         gates model config git_rev; do
    if [ -n "${J[$f]+x}" ]; then ok; else bad "ssd JSONL lacks '$f'"; fi
    if [ -n "${R[$f]+x}" ]; then ok; else bad "reference JSONL lacks '$f'"; fi
done
# The cache gate's own numbers: storage served what was streamed (within 1%).
if [ -s "$T/ssd.jsonl" ] && python3 -c '
import json, sys
o = json.loads(open(sys.argv[1]).read().splitlines()[-1])
s, r = o["streamed_bytes"], o["ssd_read_bytes"]
assert s > 0 and abs(r - s) <= 0.01 * s, (s, r)
assert len(o["step_ms"]) == o["steps"] and all(x > 0 for x in o["step_ms"])
assert o["step_ms_p50"] <= o["step_ms_p95"] <= o["step_ms_p99"]
assert o["setup_ms"] > 0 and o["ttfr_ms"] > 0 and o["steps_per_s"] > 0
assert set(o["stage_ms"]) >= {"compute", "read_wait", "verify"}
' "$T/ssd.jsonl"; then ok; else bad "ssd JSONL numbers (read bytes vs streamed, step_ms, percentiles)"; fi

# ---- an odd width (d = 1000: 16-row chunks, 63 per layer, last one 8 rows) through the ssd arm
M1000="$T/d1000.gguf"
sw gen1000 gen --layers 5 --dim 1000 --seed 3 -o "$M1000" --alignment 32
expect_rc gen1000 0
sw ref1000 run "$CFG" --model "$M1000" --steps 4 --quiet --arm reference --dump-outputs "$T/ref1000.f32"
expect_rc ref1000 0
# 10M: 1M overhead + 360 KiB ring + 2 x 3.84 MiB layers -> 2 resident, 3 streamed.
sw ssd1000 run "$CFG" --model "$M1000" --steps 4 --quiet --arm ssd --cap 10M --out "$T/ssd1000.jsonl" --dump-outputs "$T/ssd1000.f32"
expect_rc ssd1000 0
check "d=1000 ssd outputs == reference (cmp)" cmp -s "$T/ref1000.f32" "$T/ssd1000.f32"
eq "d=1000 outputs size" "$(stat -c %s "$T/ssd1000.f32" 2>/dev/null)" $((4 * 1000 * 4))
jload "$T/ssd1000.jsonl"
eq "d=1000 streamed layers" "$(jf streamed_layers)" 3
eq "d=1000 chunk rows" "$(jf chunk_rows)" 16
eq "d=1000 parity" "$(jf gates.parity)" pass
eq "d=1000 content" "$(jf gates.content)" pass
eq "d=1000 cache" "$(jf gates.cache)" pass

# ---- I/O buffers and the device's view. tiny.ini's ring (360 KiB) is under one huge page:
# a reported fallback. A 1 MiB chunk (d = 1000: 256 rows) makes a ring of several MiB, which
# gets huge pages where the machine gives them; [ssd] buffers = 4k forces the fallback, and
# either way the outputs stay the reference's.
jload "$T/ssd.jsonl"
eq "tiny ring: io_buffers" "$(jf io_buffers)" "4k-pages (fallback: 360 KiB is less than one 2 MiB huge page)"
eq "tiny ring: ring_slots (4 + 1; the spare 102 KiB is under two slots)" "$(jf ring_slots)" 5
# Where the scratch folder is on a block device, the device's own counters; otherwise a
# clear "no block device" (tmpfs), never a crash.
if python3 -c 'import os, sys; st = os.stat(sys.argv[1]); sys.exit(0 if os.major(st.st_dev) and os.path.exists("/sys/dev/block/%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev))) else 1)' "$M"; then
    check "ssd: device named" test "$(jf device)" != None -a "$(jf device)" != MISSING
    if [ -s "$T/ssd.jsonl" ] && python3 -c '
import json, sys
o = json.loads(open(sys.argv[1]).read().splitlines()[-1])
# Device-wide counters: other readers can only add to them.
assert o["device_reads"] >= 1 and o["device_read_bytes"] >= o["streamed_bytes"], o
assert o["device_avg_request_bytes"] > 0 and 0 <= o["device_util"] <= 1 and o["device_busy_ms"] >= 0, o
' "$T/ssd.jsonl"; then ok; else bad "ssd device_* fields (reads, bytes >= streamed, request size > 0, util)"; fi
else
    eq "ssd on a file with no block device: device" "$(jf device)" None
    check "ssd: device_error says no block device" grep -q "no block device" <<<"$(jf device_error)"
fi
sw ssd_big run "$CFG" --model "$M1000" --steps 4 --quiet --arm ssd --cap 16M --set ssd.chunk=1M --out "$T/ssd_big.jsonl" --dump-outputs "$T/ssd_big.f32"
expect_rc ssd_big 0
jload "$T/ssd_big.jsonl"
case "$(jf io_buffers)" in
    hugetlb|thp) ok ;;
    "4k-pages (fallback: "?*")") ok; echo "note: this machine gave no huge pages: $(jf io_buffers)" ;;
    *) bad "1 MiB chunks: io_buffers '$(jf io_buffers)'" ;;
esac
check "1 MiB chunks: outputs == reference (cmp)" cmp -s "$T/ref1000.f32" "$T/ssd_big.f32"
sw ssd_4k run "$CFG" --model "$M1000" --steps 4 --quiet --arm ssd --cap 16M --set ssd.chunk=1M --set ssd.buffers=4k --out "$T/ssd_4k.jsonl" --dump-outputs "$T/ssd_4k.f32"
expect_rc ssd_4k 0
jload "$T/ssd_4k.jsonl"
eq "buffers = 4k: io_buffers" "$(jf io_buffers)" "4k-pages (fallback: asked for: buffers = 4k)"
eq "buffers = 4k: gates.cache" "$(jf gates.cache)" pass
check "buffers = 4k: outputs == reference (cmp)" cmp -s "$T/ref1000.f32" "$T/ssd_4k.f32"
# bench-disk: the same buffers, the device's request size and busy time beside the figure.
sw bench bench-disk "$M1000" --config "$CFG" --depths 4 --passes 2
expect_rc bench 0
has bench out "# io buffers: "
has bench out "avg_req"
sw bench4k bench-disk "$M1000" --config "$CFG" --depths 4 --passes 2 --buffers 4k
expect_rc bench4k 0
has bench4k out "# io buffers: 4k-pages (fallback: asked for: buffers = 4k)"
sw bench_bad bench-disk "$M1000" --buffers 1g
expect_rc bench_bad 2
has bench_bad err "--buffers"
printf '[ssd]\nbuffers = 1g\n' >"$T/bad_buffers.ini"
sw cfg_buffers run "$T/bad_buffers.ini" --arm ssd --model "$M"
expect_rc cfg_buffers 2
has cfg_buffers err "$T/bad_buffers.ini:2:"
has cfg_buffers err "[ssd] buffers"

# ---- the cache gate catches a page-cache-served run: buffered reads of a warm file
cat "$M" >/dev/null
sw cached "${run_args[@]}" --arm ssd --buffered --out "$T/cached.jsonl"
expect_rc cached 3
jload "$T/cached.jsonl"
eq "warm buffered run: gates.cache" "$(jf gates.cache)" void
eq "warm buffered run: io" "$(jf io)" buffered
eq "warm buffered run: void" "$(jf void)" True
eq "warm buffered run: parity still pass" "$(jf gates.parity)" pass

# ---- tmpfs: no SSD figure from memory. Kernels before 6.6 refuse O_DIRECT on tmpfs (exit 1,
# a message naming O_DIRECT); later ones accept it, and the cache gate must void the run
# (exit 3). --buffered runs, labelled "buffered", and is voided by the cache gate too.
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && [ -w /dev/shm ]; then
    SHM=$(mktemp -d /dev/shm/swarm-e2e-arms.XXXXXX)
    cp "$M" "$SHM/tiny.gguf"
    sw tmpfs run "$CFG" --model "$SHM/tiny.gguf" --steps $STEPS --quiet --arm ssd --out "$T/tmpfs.jsonl"
    no_crash tmpfs
    if [ "$rc" = 1 ]; then
        ok
        has tmpfs err O_DIRECT
        has tmpfs err "$SHM/tiny.gguf"
        check "tmpfs refusal wrote no result" test ! -s "$T/tmpfs.jsonl"
    elif [ "$rc" = 3 ]; then
        ok
        jload "$T/tmpfs.jsonl"
        eq "tmpfs accepted O_DIRECT: gates.cache" "$(jf gates.cache)" void
        eq "tmpfs accepted O_DIRECT: void" "$(jf void)" True
    else
        bad "tmpfs ssd run: exit $rc, wanted 1 (O_DIRECT refused) or 3 (cache gate)"
    fi
    sw tmpfs_buf run "$CFG" --model "$SHM/tiny.gguf" --steps $STEPS --quiet --arm ssd --buffered --out "$T/tmpfs_buf.jsonl"
    expect_rc tmpfs_buf 3
    no_crash tmpfs_buf
    jload "$T/tmpfs_buf.jsonl"
    eq "tmpfs --buffered: io" "$(jf io)" buffered
    eq "tmpfs --buffered: gates.cache" "$(jf gates.cache)" void
    eq "tmpfs --buffered: parity" "$(jf gates.parity)" pass
    eq "tmpfs --buffered: device" "$(jf device)" None
    check "tmpfs: device_error says no block device" grep -q "no block device" <<<"$(jf device_error)"
    rm -rf "$SHM"
else
    echo "note: /dev/shm is not a writable tmpfs; tmpfs refusal not tested"
fi

# ---- a cap too small for even the ring: exit 1, says by how much
sw smallcap "${run_args[@]}" --arm ssd --cap 1M
expect_rc smallcap 1
has smallcap err "short by"
no_crash smallcap

# ---- config errors name file:line and key, exit 2
printf '[run]\nsteps = 4\n[ssd]\nqueue_depth = 0\n' >"$T/bad_range.ini"
sw cfg_range run "$T/bad_range.ini" --arm ssd --model "$M"
expect_rc cfg_range 2
has cfg_range err "$T/bad_range.ini:4:"
has cfg_range err "[ssd] queue_depth"
printf '; x\n[ssd]\ncap = 20M\nbogus = 1\n' >"$T/bad_key.ini"
sw cfg_key run "$T/bad_key.ini" --arm ssd --model "$M"
expect_rc cfg_key 2
has cfg_key err "$T/bad_key.ini:4:"
has cfg_key err "[ssd] bogus"
has cfg_key err "unknown key"
printf '[model]\nlayers = 2\n[nope]\nx = 1\n' >"$T/bad_sec.ini"
sw cfg_sec run "$T/bad_sec.ini" --arm ssd --model "$M"
expect_rc cfg_sec 2
has cfg_sec err "$T/bad_sec.ini:4:"
has cfg_sec err "unknown section"
sw cfg_set "${run_args[@]}" --arm ssd --set ssd.cap=lots
expect_rc cfg_set 2
has cfg_set err "ssd.cap=lots"
sw cfg_missing run "$T/no-such.ini" --arm ssd
expect_rc cfg_missing 2
has cfg_missing err "$T/no-such.ini"
sw no_arm run "$CFG" --model "$M"
expect_rc no_arm 2

# ---- a truncated model: one clear error naming the file, exit 1, no crash
head -c $(( $(stat -c %s "$M") - 5000 )) "$M" >"$T/trunc.gguf"
sw trunc "${run_args[@]}" --arm ssd --model "$T/trunc.gguf"
expect_rc trunc 1
has trunc err "$T/trunc.gguf"
no_crash trunc
eq "truncated model: error lines" "$(grep -ci 'error' "$T/trunc.err")" 1
head -c 100 "$M" >"$T/stub.gguf"
sw stub "${run_args[@]}" --arm reference --model "$T/stub.gguf"
expect_rc stub 1
has stub err "$T/stub.gguf"
no_crash stub
# A flipped byte near the end of the last (streamed) layer's W: the content gate voids the run.
cp "$M" "$T/flip.gguf"
sz=$(stat -c %s "$T/flip.gguf")
b=$(od -An -tu1 -j $((sz - 1000)) -N1 "$T/flip.gguf" | tr -d ' ')
printf "$(printf '\\%03o' $(( (b ^ 0x5a) & 255 )))" |
    dd of="$T/flip.gguf" bs=1 seek=$((sz - 1000)) conv=notrunc status=none
check "flipped copy differs" eval '! cmp -s "$M" "$T/flip.gguf"'
sw flip "${run_args[@]}" --arm ssd --model "$T/flip.gguf" --no-parity --out "$T/flip.jsonl"
expect_rc flip 3
no_crash flip
has flip err "content gate"
jload "$T/flip.jsonl"
eq "flipped byte: gates.content" "$(jf gates.content)" void
eq "flipped byte: parity n/a (--no-parity)" "$(jf gates.parity)" n/a

# ---- the cgroup is removed after the run (root with a memory controller only)
if [ "$(id -u)" = 0 ] && { [ -w /sys/fs/cgroup/memory ] || [ -f /sys/fs/cgroup/cgroup.controllers ]; }; then
    env -u SWARM_CGROUP_RUN "$SWARM_BIN" "${run_args[@]}" --arm ssd --out "$T/cg.jsonl" >"$T/cg.out" 2>"$T/cg.err" &
    pid=$!
    if wait $pid; then rc=0; else rc=$?; fi
    expect_rc cg 0
    jload "$T/cg.jsonl"
    case "$(jf cap_mode)" in
    enforced*)
        ok
        # its group sat in its own run, swarm-run-<pid>-<start>/ssd-<pid> (base/cap.h): the
        # command removes both when it ends
        check "cgroup run swarm-run-$pid-* removed" \
            bash -c "! ls -d /sys/fs/cgroup/memory/swarm-run-$pid-* /sys/fs/cgroup/swarm-run-$pid-* 2>/dev/null | grep -q ."
        ;;
    *) echo "note: cap not enforced here ($(jf cap_mode)); cgroup removal not tested" ;;
    esac
else
    echo "note: not root or no memory cgroup; cgroup removal not tested"
fi

echo "e2e_arms: $pass passed, $fail failed"
[ "$fail" = 0 ]
