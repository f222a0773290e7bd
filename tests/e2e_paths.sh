#!/bin/bash
# e2e_paths.sh — paths stay paths: 40-char key paths, inline z85: keys, model paths never invented, enumerated flags. tests/
# Env: SWARM_BIN (bin/swarm), SWARM_TEST_TMP (scratch). Loopback only. Needs python3 (JSON).
# Closes with "e2e_paths: N passed, N failed"; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_paths"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh
check() { # description, command...
    local what=$1; shift
    if "$@"; then ok; else bad "$what"; fi
}
# Everything under a folder but this script's own captured output, for "created nothing".
tree() { (cd "$1" && find . ! -name '*.out' ! -name '*.err' | LC_ALL=C sort); }

if ! command -v python3 >/dev/null; then
    echo "e2e_paths: python3 is required" >&2
    echo "e2e_paths: 0 passed, 1 failed"; exit 1
fi

M="$T/m.gguf"
sw gen gen --layers 6 --dim 256 --seed 1 -o "$M"
expect_rc gen 0

# ---------------------------------------------------------------- model paths (issue 14)
# A misspelt folder with --model: exit 2, the path and the command that makes it named,
# nothing created (not the folder, not the file) even though tiny.ini says generate = 1.
before=$(tree "$T")
sw typo run configs/tiny.ini --model "$T/modles/typo.gguf" --arm reference --steps 2
expect_rc typo 2
has typo err "$T/modles/typo.gguf"
has typo err "--model"
has typo err "swarm gen --layers 6 --dim 256 --seed 1 -o $T/modles/typo.gguf"
check "a missing --model path created nothing" [ "$(tree "$T")" = "$before" ]
# An absolute path at the root of the filesystem: nothing appears there either.
ROOTP="/swarm-e2e-typo-$$"
sw rootp run configs/tiny.ini --model "$ROOTP/x.gguf" --arm reference --steps 2
expect_rc rootp 2
check "no $ROOTP created" [ ! -e "$ROOTP" ]
rm -rf "$ROOTP" 2>/dev/null
# The same through lab (which would otherwise make its results folder first) and bench-disk.
sw labtypo lab configs/tiny.ini --quick --model "$T/modles/typo.gguf" --out "$T/labout"
expect_rc labtypo 2
has labtypo err "$T/modles/typo.gguf"
check "lab with a missing --model made no results folder" [ ! -e "$T/labout" ]
sw benchtypo bench-disk "$T/modles/typo.gguf"
expect_rc benchtypo 2
has benchtypo err "$T/modles/typo.gguf"
check "no folder or model appeared (run, lab, bench-disk)" [ "$(tree "$T")" = "$before" ]

# A config without the generate key: its missing [model] path is an error with both hints.
printf '[model]\npath = %s\nlayers = 2\ndim = 64\nseed = 5\n' "$T/cfg/none.gguf" >"$T/nogen.ini"
sw nogen run "$T/nogen.ini" --arm reference --steps 2
expect_rc nogen 2
has nogen err "$T/cfg/none.gguf"
has nogen err "swarm gen --layers 2 --dim 64 --seed 5 -o $T/cfg/none.gguf"
has nogen err "set [model] generate = 1 in $T/nogen.ini"
check "config without generate: no folder made" [ ! -e "$T/cfg" ]
# --set model.path is generated only with --set model.generate=1 as well.
sw setpath run "$T/nogen.ini" --arm reference --steps 2 --set "model.path=$T/set/a.gguf"
expect_rc setpath 2
has setpath err "--set model.generate=1"
check "--set model.path alone: no folder made" [ ! -e "$T/set" ]

# The explicit key works: a missing path (and its missing folders) is generated, and runs.
printf '[model]\npath = %s\ngenerate = 1\nlayers = 2\ndim = 64\nseed = 5\n' "$T/gen/a/b.gguf" >"$T/gen.ini"
sw gen1 run "$T/gen.ini" --arm reference --steps 2 --quiet --out "$T/gen1.jsonl"
expect_rc gen1 0
check "generate = 1 made the model" [ -s "$T/gen/a/b.gguf" ]
has gen1 err "generating 2 layers x 64"
eq "generated model runs: content gate" "$(jfield "$T/gen1.jsonl" gates.content)" pass
# Second run: the file exists and is used as it is (no regeneration).
sum1=$(sha256sum <"$T/gen/a/b.gguf")
sw gen2 run "$T/gen.ini" --arm reference --steps 2 --quiet
expect_rc gen2 0
check "an existing model is not generated again" eval '! grep -q generating "$T/gen2.err"'
eq "model unchanged by a second run" "$(sha256sum <"$T/gen/a/b.gguf")" "$sum1"

# A real-format file of another architecture is never generated over, whatever the config says.
python3 - "$T/llama.gguf" <<'EOF'
import struct, sys
k, v = b"general.architecture", b"llama"
hdr = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
kv = struct.pack("<Q", len(k)) + k + struct.pack("<IQ", 8, len(v)) + v
open(sys.argv[1], "wb").write(hdr + kv)
EOF
sum_l=$(sha256sum <"$T/llama.gguf")
printf '[model]\npath = %s\ngenerate = 1\nlayers = 2\ndim = 64\n' "$T/llama.gguf" >"$T/llama.ini"
sw llama run "$T/llama.ini" --arm reference --steps 2
expect_rc llama 1
has llama err "$T/llama.gguf"
has llama err "llama"
eq "another architecture's file untouched" "$(sha256sum <"$T/llama.gguf")" "$sum_l"

# The lab's default model on a fresh machine: configs/lab02.ini, as `make lab` runs it, in a
# folder with no models/ in it. Only the model's size is overridden (a 2 x 256 model instead
# of 24 x 4096); the path and the generate key are the shipped config's own.
FRESH="$T/fresh"
mkdir -p "$FRESH/configs" && cp configs/lab02.ini "$FRESH/configs/"
(cd "$FRESH" && "$SWARM_BIN" lab configs/lab02.ini --quick --steps 2 --set model.layers=2 \
    --set model.dim=256 --set lab.conditions=reference --out "$FRESH/results") \
    >"$T/fresh.out" 2>"$T/fresh.err"
rc=$?
expect_rc fresh 0
check "make lab's config generated models/lab02.gguf in a fresh folder" [ -s "$FRESH/models/lab02.gguf" ]
check "fresh lab wrote its results" [ -s "$FRESH/results/results.jsonl" ]

# ---------------------------------------------------------------- enumerated flags and keys
sw arm run configs/tiny.ini --model "$M" --arm bogus
expect_rc arm 2
has arm err "unknown arm 'bogus'"
has arm err "reference, ssd, resident"
sw noarm run configs/tiny.ini --model "$M"
expect_rc noarm 2
has noarm err "reference, ssd, resident"
sw prof run configs/tiny.ini --model "$M" --arm resident --profile moon
expect_rc prof 2
has prof err "unknown profile 'moon'"
has prof err "none, lan, wifi, wan"
sw io run configs/tiny.ini --model "$M" --arm ssd --set ssd.io=mmap
expect_rc io 2
has io err "unknown io 'mmap'"
sw dist run configs/tiny.ini --model "$M" --arm reference --set profile.x.jitter_dist=gauss
expect_rc dist 2
has dist err "unknown jitter_dist 'gauss'"
has dist err "uniform, normal, pareto"
sw cond lab configs/tiny.ini --quick --model "$M" --set lab.conditions=reference,moon --out "$T/cond"
expect_rc cond 2
has cond err "unknown condition 'moon'"
sw suffix lab configs/tiny.ini --quick --model "$M" --set lab.conditions=resident/lan+crash --out "$T/suffix"
expect_rc suffix 2
has suffix err "unknown suffix '+crash'"
sw fault_id run configs/tiny.ini --model "$M" --arm resident --kill-worker w9@3
expect_rc fault_id 2
has fault_id err "unknown worker 'w9'"
has fault_id err "w0, w1, w2"
sw fault_arm run configs/tiny.ini --model "$M" --arm ssd --kill-worker w1@3
expect_rc fault_arm 2
has fault_arm err "--arm resident"
sw steps run configs/tiny.ini --model "$M" --arm reference --steps lots
expect_rc steps 2
has steps err "--steps: 'lots'"
sw bh netem --link lo --blackhole maybe
expect_rc bh 2
has bh err "unknown --blackhole value 'maybe' (on, off)"

# ---------------------------------------------------------------- key paths (issue 9, part 2)
# Keys in a folder padded so that DIR/coord.pub and DIR/wrkr1.pub are exactly 40 characters,
# each of them in the Z85 alphabet: the case that was read as an inline key.
KT=$(mktemp -d /tmp/swkXXXXXX)
cleanup() { [ -n "${WPID:-}" ] && kill "$WPID" 2>/dev/null; wait "${WPID:-}" 2>/dev/null; rm -rf "$KT"; }
trap cleanup EXIT
pad=$((40 - ${#KT} - 1 - 10)) # 10: "/coord.pub"
KD="$KT/$(printf '%*s' "$pad" '' | tr ' ' p)"
mkdir -p "$KD"
(cd "$KD" && "$SWARM_BIN" keygen coord >/dev/null && "$SWARM_BIN" keygen wrkr1 >/dev/null)
eq "coord.pub path is 40 characters" "$(printf %s "$KD/coord.pub" | wc -c)" 40
check "the path is all Z85 characters" python3 -c '
import string, sys
z85 = string.digits + string.ascii_letters + ".-:+=^!/*?&<>()[]{}@%$#"
sys.exit(0 if all(c in z85 for c in sys.argv[1]) else 1)' "$KD/coord.pub"
# Worker: CURVE on loopback, allowing the coordinator by the 40-character path.
start_curve_worker() { # name, --allow value
    "$SWARM_BIN" worker --listen "tcp://127.0.0.1:*" --id wrkr1 --cap 64M --once \
        --key "$KD/wrkr1.key" --allow "$2" >"$T/$1.log" 2>&1 &
    WPID=$!
    # No deadline to guess: the worker either announces its endpoint or exits.
    while kill -0 "$WPID" 2>/dev/null && ! grep -qs "listening on" "$T/$1.log"; do sleep 0.05; done
    grep -qs "listening on" "$T/$1.log" && ok || bad "$1: worker did not start: $(tail -1 "$T/$1.log")"
    EP=$(sed -n 's/.*listening on \(tcp:[^ ]*\).*/\1/p' "$T/$1.log" | head -1)
}
stop_worker() { [ -n "${WPID:-}" ] && kill "$WPID" 2>/dev/null; wait "${WPID:-}" 2>/dev/null; WPID=""; }
curve_ini() { # file, public_key value
    printf '[model]\npath = %s\n[run]\nsteps = 8\n[security]\nkey = %s\n[worker.wrkr1]\nendpoint = %s\ncap = 64M\npublic_key = %s\n' \
        "$M" "$KD/coord.key" "$EP" "$2" >"$1"
}
start_curve_worker w_path "$KD/coord.pub"
curve_ini "$T/curve_path.ini" "$KD/wrkr1.pub"
sw curve_path run "$T/curve_path.ini" --arm resident --quiet --out "$T/curve_path.jsonl"
expect_rc curve_path 0
eq "40-char key paths: transport" "$(jfield "$T/curve_path.jsonl" transport)" curve
eq "40-char key paths: parity" "$(jfield "$T/curve_path.jsonl" gates.parity)" pass
check "40-char key paths: the worker refused no one" eval '! grep -q "refused a CURVE client" "$T/w_path.log"'
stop_worker

# Inline keys in their explicit form, on both ends.
start_curve_worker w_inline "z85:$(cat "$KD/coord.pub")"
curve_ini "$T/curve_inline.ini" "z85:$(cat "$KD/wrkr1.pub")"
sw curve_inline run "$T/curve_inline.ini" --arm resident --quiet --out "$T/curve_inline.jsonl"
expect_rc curve_inline 0
eq "z85: inline keys: transport" "$(jfield "$T/curve_inline.jsonl" transport)" curve
eq "z85: inline keys: parity" "$(jfield "$T/curve_inline.jsonl" gates.parity)" pass
stop_worker

# Neither a file nor an inline key: refused, naming the value, before anything runs.
BARE=$(cat "$KD/wrkr1.pub")
EP=tcp://127.0.0.1:1
curve_ini "$T/curve_bare.ini" "$BARE"
sw curve_bare run "$T/curve_bare.ini" --arm resident --quiet
expect_rc curve_bare 2
has curve_bare err "[worker.wrkr1] public_key"
has curve_bare err "z85:$BARE"
curve_ini "$T/curve_nofile.ini" "$KD/nope.pub"
sw curve_nofile run "$T/curve_nofile.ini" --arm resident --quiet
expect_rc curve_nofile 2
has curve_nofile err "$KD/nope.pub"
sw w_bare worker --listen "tcp://127.0.0.1:*" --id wrkr1 --cap 64M --once \
    --key "$KD/wrkr1.key" --allow "$(cat "$KD/coord.pub")"
expect_fail w_bare
has w_bare err "--allow"
has w_bare err "z85:"

echo "e2e_paths: $pass passed, $fail failed"
[ "$fail" = 0 ]
