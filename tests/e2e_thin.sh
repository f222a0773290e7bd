#!/bin/bash
# e2e_thin.sh — thin commands: no function in cli/, serve/ or lab/ longer than LIMIT lines
# (signature to closing brace), each named by file and line; the longest are listed. Functions
# are found as this tree writes them: the signature at column 0, "{" and "}" alone at column 0.
# tests/
set -u
cd "$(dirname "$0")/.."
LIMIT=${THIN_LIMIT:-100}
lens=$(awk '
    /^[A-Za-z_].*\(/ && !/;[[:space:]]*$/ { sig = $0; sigline = FNR }
    /^\{/ { if (sig != "") { name = sig; sub(/\(.*/, "", name); n = split(name, a, /[ *]+/);
                             name = a[n]; infn = 1 } }
    /^\}/ { if (infn) { printf "%d %s:%d %s\n", FNR - sigline + 1, FILENAME, sigline, name;
                        infn = 0; sig = "" } }
' cli/*.c serve/*.c lab/*.c | sort -rn)
[ -n "$lens" ] || { echo "FAIL: no function found"; echo "e2e_thin: 0 passed, 1 failed"; exit 1; }
echo "longest functions in cli/, serve/, lab/ (lines):"
head -5 <<<"$lens" | sed 's/^/  /'
pass=0; fail=0
while read -r n where name; do
    if [ "$n" -gt "$LIMIT" ]; then
        echo "FAIL: $where: $name is $n lines (at most $LIMIT: split it)"; fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
done <<<"$lens"
echo "e2e_thin: $pass passed, $fail failed"
[ "$fail" = 0 ]
