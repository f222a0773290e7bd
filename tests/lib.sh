# lib.sh — helpers the end-to-end scripts share (sourced; needs $T, $SWARM_BIN, pass and fail). tests/
# Not a test itself: tests/run.sh runs only tests/e2e_*.sh.
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
sw() { # name, args...: stdout/stderr into $T/NAME.{out,err}; sets $rc
    local name=$1; shift
    if "$SWARM_BIN" "$@" >"$T/$name.out" 2>"$T/$name.err"; then rc=0; else rc=$?; fi
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
