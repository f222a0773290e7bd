# lib.sh — helpers the end-to-end scripts share (sourced; needs $T, $SWARM_BIN, pass and fail). tests/
# Not a test itself: tests/run.sh runs only tests/e2e_*.sh.
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
sw() { # name, args...: stdout/stderr into $T/NAME.{out,err}; sets $rc
    # With $SW_LIMIT (seconds, a hang guard a script derives from a run it timed) a command
    # that outlives it is ended (rc 124) and its threads' stacks land in $T/NAME.err.
    local name=$1; shift
    if [ -z "${SW_LIMIT:-}" ]; then
        if "$SWARM_BIN" "$@" >"$T/$name.out" 2>"$T/$name.err"; then rc=0; else rc=$?; fi
        return
    fi
    "$SWARM_BIN" "$@" >"$T/$name.out" 2>"$T/$name.err" &
    reap $! "$name" "$SW_LIMIT"
}
reap() { # pid, name, seconds: wait for a background swarm, at most that long; sets $rc
    # Past the bound it is a hang: its stacks (gdb, where installed) go to $T/NAME.err for the
    # log, then TERM, then KILL; rc is 124 like timeout(1).
    local pid=$1 i
    for ((i = 0; i < $3 * 20; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    if kill -0 "$pid" 2>/dev/null; then
        echo "HANG: $2 (pid $pid) still running after $3 s" >&2
        command -v gdb >/dev/null &&
            timeout 60 gdb -batch -p "$pid" -ex "thread apply all bt" 2>&1 |
            grep -E '^(Thread|#)' >>"$T/$2.err"
        kill -TERM "$pid" 2>/dev/null
        for ((i = 0; i < 40; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        rc=124
        return
    fi
    if wait "$pid"; then rc=0; else rc=$?; fi
}
jfield() { # file, dotted key: a field of the last JSON object ("MISSING" if absent)
    python3 - "$1" "$2" <<'EOF'
import json, sys
try:
    lines = [l for l in open(sys.argv[1]) if l.strip()]
    o = json.loads(lines[-1])
except Exception:
    print("MISSING"); sys.exit(0)
for k in sys.argv[2].split("."):
    if isinstance(o, list) and k.isdigit() and int(k) < len(o):
        o = o[int(k)]; continue
    if not isinstance(o, dict) or k not in o:
        print("MISSING"); sys.exit(0)
    o = o[k]
print(json.dumps(o) if isinstance(o, (dict, list)) or o is None else o)
EOF
}
lab_llm_ini() { # file, model, repeats, conditions, results dir: a text lab's config (the
    # tiny random llama e2e_lab_llm and e2e_spec share, generated from it when missing)
    cat >"$1" <<INI
[llm]
model = $2
generate = 1
vocab = tests/fixtures/tok/llama-spm.gguf.gz
dim = 64
layers = 6
heads = 4
kv_heads = 2
ff = 96
ctx_train = 256
type = q8_0
seed = 9
tokens = 12
ctx = 128
batch = 8
cap = 40M
workers = 3
[lab]
repeats = $3
conditions = $4
out = $5
INI
}
tally() { # file [echo]: a checker's "ok"/"FAIL" lines into pass/fail, each FAIL (and the 5
    # lines after it) to stderr; with echo, the checker's other lines to stdout. A file with no
    # check at all is a failure (the checker died before its first).
    local f=$1
    pass=$((pass + $(grep -c '^ok ' "$f")))
    local nf; nf=$(grep -c '^FAIL ' "$f")
    fail=$((fail + nf))
    [ "$nf" = 0 ] || grep -A5 '^FAIL ' "$f" >&2
    [ "${2:-}" != echo ] || grep -vE '^(ok|FAIL) ' "$f"
    grep -q -E '^(ok|FAIL) ' "$f" ||
        { fail=$((fail + 1)); echo "FAIL: $f: no checks ran" >&2; tail -5 "$f" >&2; }
}
expect_rc() { # name, wanted rc
    if [ "$rc" = "$2" ]; then ok; else
        bad "$1: exit $rc, wanted $2"; grep -v "route epoch" "$T/$1.err" | tail -12 | sed 's/^/    | /' >&2; fi
}
expect_fail() { # name: non-zero, not a crash
    if [ "$rc" != 0 ] && [ "$rc" -lt 128 ]; then ok; else
        bad "$1: exit $rc, wanted a clean failure"; tail -5 "$T/$1.err" | sed 's/^/    | /' >&2; fi
}
has() { # name, stream (out|err), fixed string
    if grep -qF -- "$3" "$T/$1.$2"; then ok; else
        bad "$1: $2 lacks '$3'"; tail -5 "$T/$1.$2" | sed 's/^/    | /' >&2; fi
}
eq() { # description, got, wanted
    if [ "$2" = "$3" ]; then ok; else bad "$1: got '$2', wanted '$3'"; fi
}
wait_for() { # file, fixed string, seconds: 0 when the string shows up in time
    local i
    for ((i = 0; i < $3 * 20; i++)); do
        grep -qF -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}
# This script's run of memory cgroups (base/cap.h): with SWARM_CGROUP_RUN exported, every swarm
# it starts (and every worker those start) makes its groups under this run's parent, so a
# leftover check judges only what this script made, never another run's on a shared machine.
# cg_run_begin exports it and sets CG_RUN (the parent's directory, empty where there is no
# memory controller); cg_left lists groups left in it; cg_run_end removes it (the owner's job:
# this shell's pid and start time name the run, so a sweep elsewhere leaves it alone).
cg_run_begin() {
    local stat f
    stat=$(cat "/proc/$$/stat")
    read -r -a f <<<"${stat##*) }" # fields 3..: the start time (field 22) is f[19]
    export SWARM_CGROUP_RUN="swarm-run-$$-${f[19]}"
    CG_RUN=""
    if [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
        CG_RUN=/sys/fs/cgroup/memory/$SWARM_CGROUP_RUN
    elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then
        CG_RUN=/sys/fs/cgroup/$SWARM_CGROUP_RUN
    fi
}
cg_left() { # [pid]: groups left in this run (of that pid only, "<tag>-<pid>"), one a line
    local d
    [ -n "${CG_RUN:-}" ] || return 0
    for d in "$CG_RUN"/*-"${1:-*}"; do [ -d "$d" ] && echo "${d##*/}"; done
    return 0
}
cg_run_end() {
    local d
    [ -n "${CG_RUN:-}" ] && [ -d "$CG_RUN" ] || return 0
    for d in "$CG_RUN"/*/; do [ -d "$d" ] && rmdir "$d" 2>/dev/null; done
    rmdir "$CG_RUN" 2>/dev/null
    return 0
}
