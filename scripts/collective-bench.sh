#!/usr/bin/env bash
# The collective results of BENCHMARKS.md ("Collectives"), all of them, into one folder:
#
#   scripts/collective-bench.sh [OUT_DIR] [--jobs N] [--only NAME]
#
# Every run is `sprayswitch-sim --collective` (real switch code in virtual time, RNIC models with
# DCQCN, path MTU 4096, 2 channels per rank pair); each writes NAME.txt (the table), NAME.csv,
# NAME.json and, with several sizes, NAME.svg (completion time against size). The same seed
# (the simulator's default) for every scheme of a run. NAME is one of:
#
#   ring128       ring AllReduce, 128 hosts, every ring edge between racks (--rank-stride 16),
#                 64 KiB to 8 MiB, every scheme, Go-Back-N and selective-repeat RNICs
#   ring128-64M   the same ring at 64 MiB (one iteration), ECMP against spray + reorder
#   nccl128       the ring in NCCL's order (ranks packed rack by rack), 1 and 8 MiB
#   hd128         halving-doubling AllReduce, 128 hosts, 1 and 8 MiB
#   a2a128        AlltoAll, 128 hosts, 64 KiB to 16 MiB, every scheme and RNIC
#   a2a128-64M    AlltoAll at 64 MiB (512 KiB per pair, one iteration), selective repeat
#   oversub-ring, oversub-alltoall
#                 ring and AlltoAll on the 4:1 oversubscribed 32-host fabric, 1 to 64 MiB
#   background    the cross-rack ring at 8 MiB beside AliStorage flows at 30% load
#   loss          the cross-rack ring at 8 MiB with 1% loss through spine 0, path health off
#   two-jobs      a ring and an AlltoAll of 64 ranks each at once, sharing the fabric
#
# It takes about 45 minutes of one core in all (--jobs 2: the schemes of a run on two
# threads); OUT_DIR defaults to target/collective-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=target/collective-bench
JOBS=1
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) JOBS="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    -*) echo "collective-bench: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) OUT="$1"; shift ;;
  esac
done
mkdir -p "$OUT"
cargo build --release -q -p sprayswitch-harness --bin sprayswitch-sim
SIM=target/release/sprayswitch-sim
ALL_GBN=ecmp,flowlet,spray,spray+reorder
ALL_SR=ecmp,spray+reorder,spray+nak_filter

# run NAME ARGS...: one simulator run (GBN and SR rows when ARGS ask for both).
run() {
  local name="$1"
  shift
  if [ -n "$ONLY" ] && [ "$ONLY" != "$name" ]; then return; fi
  echo "# $name: sprayswitch-sim $*" >&2
  local start=$SECONDS
  "$SIM" --pmtu 4096 --quiet --jobs "$JOBS" "$@" --csv "$OUT/$name.csv" --json "$OUT/$name.json" \
    >"$OUT/$name.txt"
  echo "# $name: $((SECONDS - start)) s" >&2
  cat "$OUT/$name.txt"
}
# both NAME ARGS...: the GBN schemes, then the SR ones, into NAME-gbn and NAME-sr.
both() {
  local name="$1"
  shift
  run "$name-gbn" "$@" --schemes "$ALL_GBN" --receivers gbn --svg "$OUT/$name-gbn.svg"
  run "$name-sr" "$@" --schemes "$ALL_SR" --receivers sr --svg "$OUT/$name-sr.svg"
}

both ring128 --collective ring:1M:128:2 --rank-stride 16 --sizes 64K,1M,8M --iterations 3
run ring128-64M --collective ring:64M:128:2 --rank-stride 16 --iterations 1 \
  --schemes ecmp,spray+reorder --receivers gbn
run nccl128 --collective ring:1M:128:2 --sizes 1M,8M --iterations 3 \
  --schemes ecmp,spray+reorder --receivers gbn
run hd128 --collective hd:1M:128:2 --sizes 1M,8M --iterations 3 \
  --schemes ecmp,spray+reorder --receivers gbn
both a2a128 --collective alltoall:1M:128:2 --sizes 64K,1M,16M --iterations 3
# Half a MiB per pair overflows the 2:1 oversubscribed uplinks (no PFC in the simulator): the
# drops and their retransmissions need a longer drain than the default 20 ms.
run a2a128-64M --collective alltoall:64M:128:2 --iterations 1 --drain-ms 100 \
  --schemes ecmp,spray+reorder --receivers sr
for algo in ring alltoall; do
  run "oversub-$algo" --topology tools/harness/sim/oversub.toml --collective "$algo:1M:32:2" \
    --sizes 1M,16M,64M --iterations 2 --drain-ms 100 --schemes ecmp,spray+reorder \
    --receivers gbn,sr --svg "$OUT/oversub-$algo.svg"
done
run background --collective ring:8M:128:2 --rank-stride 16 --iterations 3 \
  --background --load 0.3 --duration-ms 3 --schemes ecmp,spray+reorder --receivers gbn
run loss --collective ring:8M:128:2 --rank-stride 16 --iterations 3 \
  --spine-fault 0:0:0.01 --no-health --schemes ecmp,spray,spray+reorder,spray+nak_filter \
  --receivers gbn,sr
run two-jobs --collective ring:8M:64:2 --collective alltoall:8M:64:2 --iterations 3 \
  --schemes ecmp,spray+reorder --receivers gbn
