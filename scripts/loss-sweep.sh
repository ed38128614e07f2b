#!/usr/bin/env bash
# The demo's loss figures over many seeds: one seed's lossy run is chaotic (which packets are
# lost decides whether a retransmission is lost again and a requester waits for its own
# retransmission timer), so the loss targets of BENCHMARKS.md are means and medians over seeds.
#
# For each seed, each hold timeout and each workload, every fabric of FABRICS (spray+reorder and
# spray+nak_filter; the latter towards selective-repeat receivers only) runs on the demo's own
# clock (--virtual-time: the same figure on every run and machine) once loss-free and once with
# LOSS; the script prints one line per run and then, per workload, fabric, receiver and hold
# timeout, the mean, median and minimum goodput, the mean of the lossy/loss-free ratios, the
# NAKs that reached the requesters, the retransmissions and the most a ToR held, and the false
# exclusions of path health over all runs.
#
# Usage: scripts/loss-sweep.sh
# Environment (defaults in brackets):
#   SEEDS ["1 2 ... 16"]  HOLDS_US ["5000 500"]  LOSS ["0,0.01,0,0"]  SCALE [1.0]
#   FABRICS ["spray+reorder,spray+nak_filter"]
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
FABRICS=${FABRICS:-spray+reorder,spray+nak_filter}
BIN=${BIN:-target/release}
if [ "${NO_BUILD:-0}" != 1 ]; then
    cargo build --release -q -p sprayswitch-harness --bin sprayswitch-demo
fi

# One table row of the demo: "<workload>[, loss ...] <fabric> <rnic> <goodput> Mb <of cap>
# <p50> <p99> <NAKs sent/recv> <retrans> <RTOs> <sent/ne> <lost po/to> <det p99> <seen skew>
# <path skew> <held KB> <done> <out ms> <fex> <drops> <gvup>", det p99 and seen skew "-" or
# "<n> us", path skew "<n> us". Prints "workload fabric rnic goodput p50 p99 naks retrans RTOs
# held det seen path fex" (in us, "-" when none; fex: paths without loss that path health took
# out) for each row of a fabric in FABRICS.
rows() {
    awk -v fabrics="$FABRICS" '
    BEGIN { n = split(fabrics, f, ","); for (k = 1; k <= n; k++) want[f[k]] = 1 }
    {
        for (i = 1; i <= NF; i++) if ($i in want) {
            w = $1; sub(/,$/, "", w)
            j = i + 12
            det = $j; if (det != "-") j++
            j++; seen = $j; if (seen != "-") j++
            j++; path = $j
            print w, $i, $(i + 1), $(i + 2), $(i + 5), $(i + 6), $(i + 7), $(i + 8), $(i + 9),
                $(NF - 5), det, seen, path, $(NF - 2)
            break
        }
    }'
}

demo() { # seed hold loss
    "$BIN/sprayswitch-demo" --virtual-time --no-incast --no-lossy --no-ordering \
        --fabrics "$FABRICS" --seed "$1" --hold-timeout-us "$2" --scale "$SCALE" \
        --svg /dev/null ${3:+--path-loss "$3"} ${DEMO_ARGS:-} | rows
}

results=$(mktemp)
trap 'rm -f "$results" "$results.fex"' EXIT
printf '%-6s %-6s %-14s %-16s %-5s %9s %9s %8s %8s %11s %7s %5s %8s %9s %9s %9s %4s\n' \
    seed hold workload fabric rnic loss-free lossy 'p50 ms' 'p99 ms' 'NAKs s/r' retrans RTOs \
    'held KB' 'det p99' 'seen skew' 'path skew' fex
for hold in $HOLDS_US; do
    for seed in $SEEDS; do
        # The two runs print their rows in the same order (workload, receiver, fabric).
        paste -d ' ' <(demo "$seed" "$hold" "") <(demo "$seed" "$hold" "$LOSS") |
            while read -r w fab r free _ _ _ _ _ held0 _ _ _ fex0 \
                _ _ _ lossy p50 p99 naks retrans rtos held det seen path fex; do
                held=$(awk -v a="$held0" -v b="$held" 'BEGIN { print (a > b) ? a : b }')
                printf '%-6s %-6s %-14s %-16s %-5s %9s %9s %8s %8s %11s %7s %5s %8s %9s %9s %9s %4s\n' \
                    "$seed" "$hold" "$w" "$fab" "$r" "$free" "$lossy" "$p50" "$p99" "$naks" \
                    "$retrans" "$rtos" "$held" "$det" "$seen" "$path" "$((fex0 + fex))"
                # Detection within the skew plus 50 us (or nothing to detect): the largest the
                # switch saw, and the fabric's own.
                met=$(awk -v d="$det" -v s="$seen" -v p="$path" 'BEGIN {
                    print (d == "-" || (s != "-" && d <= s + 50)) ? 1 : 0,
                          (d == "-" || d <= p + 50) ? 1 : 0 }')
                echo "$hold $w $fab $r $free $lossy $rtos $met ${naks#*/} $retrans $held" >>"$results"
                echo "$((fex0 + fex))" >>"$results.fex"
            done
    done
done

echo
echo "per workload, fabric, receiver and hold timeout (goodput Mb/s; loss $LOSS, scale $SCALE; RTOs: the"
echo "requesters' retransmission timeouts, mean per run; NAKs: NAKs that reached the requesters and"
echo "retrans: packets resent, means per lossy run; held: the most KB a ToR held in any run;"
echo "det<=seen, det<=path: runs whose path-order detection p99 was at most plus 50 us the largest skew"
echo "the switch saw (a gap waiting for its own packet) and the fabric's largest skew A->B)"
printf '%-6s %-14s %-16s %-5s %5s %10s %10s %10s %10s %12s %6s %7s %8s %8s %9s %9s\n' \
    hold workload fabric rnic runs free-mean lossy-mean lossy-med lossy-min ratio-mean RTOs \
    NAKs retrans 'held KB' det\<=seen det\<=path
sort -k1,1nr -k2,2 -k3,3 -k4,4 -k6,6n "$results" | awk '
    function flush() {
        if (n == 0) return
        med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        printf "%-6s %-14s %-16s %-5s %5d %10.0f %10.0f %10.1f %10.0f %11.1f%% %6.2f %7.1f %8.1f %8.1f %6d/%d %6d/%d\n",
            h, w, f, r, n, fsum / n, lsum / n, med, v[1], 100 * rsum / n, tsum / n,
            ksum / n, xsum / n, hmax, met, n, pmet, n
        n = 0; fsum = 0; lsum = 0; rsum = 0; tsum = 0; met = 0; pmet = 0; ksum = 0; xsum = 0; hmax = 0
    }
    {
        if ($1 != h || $2 != w || $3 != f || $4 != r) { flush(); h = $1; w = $2; f = $3; r = $4 }
        n++; v[n] = $6; fsum += $5; lsum += $6; rsum += ($5 > 0 ? $6 / $5 : 0)
        tsum += $7; met += $8; pmet += $9; ksum += $10; xsum += $11; if ($12 > hmax) hmax = $12
    }
    END { flush() }'
echo
echo "false exclusions (paths without loss that path health took out, both runs of every seed):" \
    "$(awk '{ s += $1 } END { print s + 0 }' "$results.fex")"
