#!/usr/bin/env bash
# The demo's loss figures over many seeds: one seed's lossy run is chaotic (which packets are
# lost decides whether a retransmission is lost again and a requester waits for its own
# retransmission timer), so the loss targets of BENCHMARKS.md are means and medians over seeds.
#
# For each seed, each hold timeout and each workload, spray+reorder runs on the demo's own
# clock (--virtual-time: the same figure on every run and machine) once loss-free and once with
# LOSS; the script prints one line per run and then, per workload, receiver and hold timeout,
# the mean, median and minimum goodput and the mean of the lossy/loss-free ratios, and the false
# exclusions of path health over all runs.
#
# Usage: scripts/loss-sweep.sh
# Environment (defaults in brackets):
#   SEEDS ["1 2 ... 16"]  HOLDS_US ["5000 500"]  LOSS ["0,0.01,0,0"]  SCALE [1.0]
#   DEMO_ARGS [""] (more sprayswitch-demo options, e.g. "--window 128")
#   BIN [target/release] (built first with cargo build --release unless NO_BUILD=1)
# Time: about 3 s per seed and hold timeout on the project's 2-core VM (64 seeds, two hold
# timeouts: 7 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

SEEDS=${SEEDS:-$(seq -s ' ' 1 16)}
HOLDS_US=${HOLDS_US:-"5000 500"}
LOSS=${LOSS:-0,0.01,0,0}
SCALE=${SCALE:-1.0}
BIN=${BIN:-target/release}
if [ "${NO_BUILD:-0}" != 1 ]; then
    cargo build --release -q -p sprayswitch-harness --bin sprayswitch-demo
fi

# One table row of the demo: "<workload>[, loss ...] spray+reorder <rnic> <goodput> Mb <of cap>
# <p50> <p99> <NAKs> <retrans> <RTOs> <sent/ne> <lost po/to> <det p99> <seen skew> <path skew>
# <done> <out ms> <fex> <drops> <gvup>", det p99 and seen skew "-" or "<n> us", path skew "<n>
# us". Prints "workload rnic goodput RTOs det seen path fex" (in us, "-" when none; fex: paths
# without loss that path health took out) for each spray+reorder row.
rows() {
    awk '{
        for (i = 1; i <= NF; i++) if ($i == "spray+reorder") {
            w = $1; sub(/,$/, "", w)
            j = i + 12
            det = $j; if (det != "-") j++
            j++; seen = $j; if (seen != "-") j++
            j++; path = $j
            print w, $(i + 1), $(i + 2), $(i + 9), det, seen, path, $(NF - 2)
        }
    }'
}

demo() { # seed hold loss
    "$BIN/sprayswitch-demo" --virtual-time --no-incast --no-lossy --fabrics spray+reorder \
        --seed "$1" --hold-timeout-us "$2" --scale "$SCALE" --svg /dev/null \
        ${3:+--path-loss "$3"} ${DEMO_ARGS:-} | rows
}

results=$(mktemp)
trap 'rm -f "$results" "$results.fex"' EXIT
printf '%-6s %-6s %-14s %-5s %10s %10s %5s %9s %9s %9s %4s\n' \
    seed hold workload rnic loss-free lossy RTOs 'det p99' 'seen skew' 'path skew' fex
for hold in $HOLDS_US; do
    for seed in $SEEDS; do
        # The two runs print their rows in the same order (workload, then receiver).
        paste -d ' ' <(demo "$seed" "$hold" "") <(demo "$seed" "$hold" "$LOSS") |
            while read -r w r free _ _ _ _ fex0 _ _ lossy rtos det seen path fex; do
                printf '%-6s %-6s %-14s %-5s %10s %10s %5s %9s %9s %9s %4s\n' \
                    "$seed" "$hold" "$w" "$r" "$free" "$lossy" "$rtos" "$det" "$seen" "$path" \
                    "$((fex0 + fex))"
                # Detection within the skew plus 50 us (or nothing to detect): the largest the
                # switch saw, and the fabric's own.
                met=$(awk -v d="$det" -v s="$seen" -v p="$path" 'BEGIN {
                    print (d == "-" || (s != "-" && d <= s + 50)) ? 1 : 0,
                          (d == "-" || d <= p + 50) ? 1 : 0 }')
                echo "$hold $w $r $free $lossy $rtos $met" >>"$results"
                echo "$((fex0 + fex))" >>"$results.fex"
            done
    done
done

echo
echo "per workload, receiver and hold timeout (goodput Mb/s; loss $LOSS, scale $SCALE; RTOs: the"
echo "requesters' retransmission timeouts, mean per run; det<=seen, det<=path: runs whose path-order"
echo "detection p99 was at most plus 50 us the largest skew the switch saw (a gap waiting for its own"
echo "packet) and the fabric's largest skew A->B (propagation and queues, sampled by the demo))"
printf '%-6s %-14s %-5s %5s %10s %10s %10s %10s %12s %6s %9s %9s\n' \
    hold workload rnic runs free-mean lossy-mean lossy-med lossy-min ratio-mean RTOs det\<=seen det\<=path
sort -k1,1nr -k2,2 -k3,3 -k5,5n "$results" | awk '
    function flush() {
        if (n == 0) return
        med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        printf "%-6s %-14s %-5s %5d %10.0f %10.0f %10.1f %10.0f %11.1f%% %6.2f %6d/%d %6d/%d\n",
            h, w, r, n, fsum / n, lsum / n, med, v[1], 100 * rsum / n, tsum / n, met, n, pmet, n
        n = 0; fsum = 0; lsum = 0; rsum = 0; tsum = 0; met = 0; pmet = 0
    }
    {
        if ($1 != h || $2 != w || $3 != r) { flush(); h = $1; w = $2; r = $3 }
        n++; v[n] = $5; fsum += $4; lsum += $5; rsum += ($4 > 0 ? $5 / $4 : 0)
        tsum += $6; met += $7; pmet += $8
    }
    END { flush() }'
echo
echo "false exclusions (paths without loss that path health took out, both runs of every seed):" \
    "$(awk '{ s += $1 } END { print s + 0 }' "$results.fex")"
