#!/bin/bash
# e2e_layers.sh — the layer rule (docs/design.md "Layout"): every #include "DIR/FILE" in a
# layer's sources points at the same folder or one below it in the Makefile's LAYERS order.
# A violation is named by file and line. tests/
set -u
cd "$(dirname "$0")/.."
layers=$(sed -n 's/^LAYERS *= *//p' Makefile)
[ -n "$layers" ] || { echo "e2e_layers: no LAYERS line in the Makefile"; echo "e2e_layers: 0 passed, 1 failed"; exit 1; }
declare -A rank; i=0
for l in $layers; do rank[$l]=$i; i=$((i + 1)); done
pass=0; fail=0
for l in $layers; do
    [ -d "$l" ] || { echo "FAIL: layer $l has no folder"; fail=$((fail + 1)); continue; }
    while IFS=: read -r file line inc; do
        dir=${inc%%/*}
        [ "$dir" = "$inc" ] && continue            # a same-folder or generated header
        if [ -z "${rank[$dir]+x}" ]; then
            echo "FAIL: $file:$line: includes \"$inc\" from $dir/, which is not a layer"
            fail=$((fail + 1))
        elif [ "${rank[$dir]}" -gt "${rank[$l]}" ]; then
            echo "FAIL: $file:$line: includes \"$inc\": $l/ may not include from $dir/ (above it)"
            fail=$((fail + 1))
        else
            pass=$((pass + 1))
        fi
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$l"/*.c "$l"/*.h 2>/dev/null |
             sed -E 's/^([^:]+):([0-9]+):.*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1:\2:\3/')
done
# Every folder of C sources at the top is a layer (a new folder must be placed in the order).
for d in */; do
    d=${d%/}
    case " $layers tests experiments configs docs build bin " in *" $d "*) continue ;; esac
    if ls "$d"/*.c >/dev/null 2>&1; then
        echo "FAIL: $d/ holds C sources but is not in the Makefile's LAYERS"; fail=$((fail + 1))
    fi
done
echo "e2e_layers: $pass passed, $fail failed"
[ "$fail" = 0 ]
