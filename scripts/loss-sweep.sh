#!/usr/bin/env bash
# The demo's loss figures over many seeds: one seed's lossy run is chaotic (which packets are
# lost decides whether a retransmission is lost again and a requester waits for its own
# retransmission timer), so the loss targets of BENCHMARKS.md are means and medians over seeds.
#
# For each seed, each hold timeout and each workload, spray+reorder runs on the demo's own
# clock (--virtual-time: the same figure on every run and machine) once loss-free and once with
# LOSS; the script prints one line per run and then, per workload, receiver and hold timeout,
# the mean, median and minimum goodput and the mean of the lossy/loss-free ratios.
#
# Usage: scripts/loss-sweep.sh
# Environment (defaults in brackets):
#   SEEDS ["1 2 ... 16"]  HOLDS_US ["5000 500"]  LOSS ["0,0.01,0,0"]  SCALE [1.0]
#   BIN [target/release] (built first with cargo build --release unless NO_BUILD=1)
# Time: about 20 s per seed and hold timeout on the project's 2-core VM.
set -euo pipefail
cd "$(dirname "$0")/.."

SEEDS=${SEEDS:-$(seq -s ' ' 1 16)}
HOLDS_US=${HOLDS_US:-"5000 500"}
LOSS=${LOSS:-0,0.01,0,0}
SCALE=${SCALE:-1.0}
BIN=${BIN:-target/release}
if [ "${NO_BUILD:-0}" != 1 ]; then
    cargo build --release -q -p sprayswitch-tools --bin sprayswitch-demo
fi

# One table row of the demo: "<workload>[, loss ...] spray+reorder <rnic> <goodput> Mb ...".
# Prints "workload rnic goodput" for each spray+reorder row.
rows() {
    awk '{
        for (i = 1; i <= NF; i++) if ($i == "spray+reorder") {
            w = $1; sub(/,$/, "", w); print w, $(i + 1), $(i + 2)
        }
    }'
}

demo() { # seed hold loss
    "$BIN/sprayswitch-demo" --virtual-time --no-incast --no-lossy --fabrics spray+reorder \
        --seed "$1" --hold-timeout-us "$2" --scale "$SCALE" --svg /dev/null \
        ${3:+--path-loss "$3"} | rows
}

results=$(mktemp)
trap 'rm -f "$results"' EXIT
printf '%-6s %-6s %-14s %-5s %10s %10s\n' seed hold workload rnic loss-free lossy
for hold in $HOLDS_US; do
    for seed in $SEEDS; do
        # The two runs print their rows in the same order (workload, then receiver).
        paste -d ' ' <(demo "$seed" "$hold" "") <(demo "$seed" "$hold" "$LOSS") |
            while read -r w r free _ _ lossy; do
                printf '%-6s %-6s %-14s %-5s %10s %10s\n' "$seed" "$hold" "$w" "$r" "$free" "$lossy"
                echo "$hold $w $r $free $lossy" >>"$results"
            done
    done
done

echo
echo "per workload, receiver and hold timeout (goodput Mb/s over seeds $SEEDS; loss $LOSS, scale $SCALE)"
printf '%-6s %-14s %-5s %5s %10s %10s %10s %10s %12s\n' \
    hold workload rnic runs free-mean lossy-mean lossy-med lossy-min ratio-mean
sort -k1,1nr -k2,2 -k3,3 -k5,5n "$results" | awk '
    function flush() {
        if (n == 0) return
        med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        printf "%-6s %-14s %-5s %5d %10.0f %10.0f %10.1f %10.0f %11.1f%%\n",
            h, w, r, n, fsum / n, lsum / n, med, v[1], 100 * rsum / n
        n = 0; fsum = 0; lsum = 0; rsum = 0
    }
    {
        if ($1 != h || $2 != w || $3 != r) { flush(); h = $1; w = $2; r = $3 }
        n++; v[n] = $5; fsum += $4; lsum += $5; rsum += ($4 > 0 ? $5 / $4 : 0)
    }
    END { flush() }'
