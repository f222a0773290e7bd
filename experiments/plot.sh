#!/bin/bash
# plot.sh — re-render a lab results folder's PNGs from its data files and plots.gp (gnuplot). experiments/
#
# `swarm lab` writes DIR/{steps_per_s,stages,latency_cdf}.dat and DIR/plots.gp and runs gnuplot
# itself; this script redraws them (after editing plots.gp, or on a machine where gnuplot was
# missing during the lab run) without running the lab again.
#   usage: experiments/plot.sh RESULTS_DIR [more dirs...]
set -eu
[ $# -ge 1 ] || { echo "usage: $0 RESULTS_DIR..." >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 1; }
for d in "$@"; do
    [ -f "$d/plots.gp" ] || { echo "plot.sh: $d/plots.gp missing (not a swarm lab folder?)" >&2; exit 1; }
    (cd "$d" && gnuplot plots.gp)
    for p in steps_per_s stages latency_cdf; do
        [ -s "$d/$p.png" ] && echo "$d/$p.png"
    done
done
