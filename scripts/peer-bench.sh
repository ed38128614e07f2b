#!/usr/bin/env bash
# sprayswitch against DPDK's own applications on the same DPDK vdevs, one core each.
#
#   scripts/peer-bench.sh [--rounds 3] [--seconds 5] [--core 1] [--frames "90 1098"] [--qps 64]
#                         [--logs DIR] [--workers 1|2]
#
# Source role (a ToR's host port to its uplink group): a `net_pcap` port replays RoCE RC WRITE
# ONLY frames of --qps QPs from memory (`infinite_rx=1`) and the application sends them out of
# `net_null` ports (`no-rx=1`: they receive nothing):
#   - testpmd, io forwarding, pcap -> one null port: the ceiling of the vdevs themselves;
#   - l3fwd (DPDK 22.11's example, LPM, built here from Debian's dpdk-doc sources), pcap -> one
#     null port (198.18.1.0/24 is its port 1);
#   - sprayswitch (`--features dpdk`), the pcap port a downlink, four null ports an uplink group
#     with path stamps, the frames routed (198.18.0.0/16) and sprayed round robin, reorder on.
# --workers 2: both cores, two host ports (the same replay each): l3fwd with one lcore per
# port, sprayswitch with a worker per host port and two uplinks each (spraying over all four
# hands half the packets to the other worker); no testpmd (its main lcore needs a third core).
# --logs DIR keeps every run's output (sprayswitch's counters at exit among them). Each runs
# pinned to --core (testpmd's idle main lcore on the other core), alone, for a
# warm-up of 2 s and --seconds of measurement; the rounds alternate the three. Packets per
# second are read from DPDK's telemetry socket (`/ethdev/stats`: the egress ports' opackets
# over the window), the same counter for all three. The table gives every round, the median
# and sprayswitch's ratio to l3fwd.
#
# l3fwd is built from /usr/share/dpdk/examples/l3fwd with one change, made here: no RX checksum
# offload (net_pcap has none, and l3fwd refuses to start without it); `--parse-ptype` is its
# own option for ports that do not report packet types. Needs root (DPDK), libdpdk-dev,
# dpdk-dev (testpmd), dpdk-doc, pkg-config, make and gcc: as root, missing packages are
# installed with apt-get. The replay holds at least 4096 frames and two per QP; l3fwd's mbuf
# pool (8192) takes a replay of at most about 8000 frames, so --qps stays below about 4000.
set -euo pipefail

ROUNDS=3
SECONDS_RUN=5
CORE=1
FRAMES="90 1098"
QPS=64
WARMUP=2
LOGS=""
WORKERS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --seconds) SECONDS_RUN="$2"; shift 2 ;;
    --core) CORE="$2"; shift 2 ;;
    --frames) FRAMES="$2"; shift 2 ;;
    --qps) QPS="$2"; shift 2 ;;
    --logs) LOGS="$2"; shift 2 ;;
    --workers) WORKERS="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "peer-bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

cd "$(dirname "$0")/.."
ROOT=$(pwd)
[ "$(id -u)" = 0 ] || { echo "peer-bench: DPDK needs root" >&2; exit 1; }
NCPU=$(nproc)
[ "$CORE" -lt "$NCPU" ] || { echo "peer-bench: --core $CORE: this machine has $NCPU cores" >&2; exit 1; }
case "$WORKERS" in
  1) ;;
  2) [ "$NCPU" -ge 2 ] || { echo "peer-bench: --workers 2 needs two cores" >&2; exit 1; } ;;
  *) echo "peer-bench: --workers $WORKERS: 1 or 2" >&2; exit 2 ;;
esac
MAIN=$(( CORE == 0 ? 1 : 0 ))
[ "$MAIN" -lt "$NCPU" ] || { echo "peer-bench: testpmd needs a second core for its main lcore" >&2; exit 1; }

need=()
pkg-config --exists libdpdk 2>/dev/null || need+=(libdpdk-dev pkg-config)
[ -d /usr/share/dpdk/examples/l3fwd ] || need+=(dpdk-doc)
command -v dpdk-testpmd >/dev/null || need+=(dpdk-dev)
command -v make >/dev/null || need+=(make)
if [ ${#need[@]} -gt 0 ]; then
  echo "peer-bench: installing ${need[*]}" >&2
  apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
fi

WORK=$(mktemp -d /tmp/sprayswitch-peer-bench.XXXXXX)
TAG="ssw-peer-$$"
PID=""
PID2=""
# Stops a process this script started: SIGINT, then SIGKILL after 5 s.
stop_pid() {
  kill -INT "$1" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
cleanup() {
  for p in $PID $PID2; do stop_pid "$p"; done
  rm -rf "$WORK" "/var/run/dpdk/$TAG"-*
}
trap cleanup EXIT

echo "# building l3fwd (dpdk-doc sources) and sprayswitch --features dpdk" >&2
cp -r /usr/share/dpdk/examples/l3fwd /usr/share/dpdk/examples/common "$WORK/"
grep -q '\.offloads = RTE_ETH_RX_OFFLOAD_CHECKSUM,' "$WORK/l3fwd/main.c" \
  || { echo "peer-bench: l3fwd's main.c is not the 22.11 one this script patches" >&2; exit 1; }
sed -i 's/\.offloads = RTE_ETH_RX_OFFLOAD_CHECKSUM,/.offloads = 0,/' "$WORK/l3fwd/main.c"
make -s -C "$WORK/l3fwd" >"$WORK/l3fwd-build.log" 2>&1 \
  || { cat "$WORK/l3fwd-build.log" >&2; exit 1; }
L3FWD="$WORK/l3fwd/build/l3fwd"
cargo build --release -q -p sprayswitch-control --features dpdk --bin sprayswitch
cargo build --release -q -p sprayswitch-packet --bin rocepcap
SSW="$ROOT/target/release/sprayswitch"

# The telemetry sampler: egress opackets summed over the given ports, twice, --seconds apart.
cat >"$WORK/sample.py" <<'EOF'
import json, socket, sys, time
warmup, secs = float(sys.argv[1]), float(sys.argv[2])
# Each further argument: SOCKET@PORT,PORT,... (one per process measured; their sum is printed).
specs = [(a.split("@")[0], [int(p) for p in a.split("@")[1].split(",")]) for a in sys.argv[3:]]
def total():
    n = 0
    for path, ports in specs:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(path)
        s.recv(4096)
        for p in ports:
            s.send(("/ethdev/stats,%d" % p).encode())
            n += json.loads(s.recv(1 << 16))["/ethdev/stats"]["opackets"]
        s.close()
    return n, time.monotonic()
deadline = time.monotonic() + 30
while True:
    try:
        total()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("no telemetry socket at " + " ".join(p for p, _ in specs))
        time.sleep(0.2)
time.sleep(warmup)
a, t0 = total()
time.sleep(secs)
b, t1 = total()
print("%.3f" % ((b - a) / (t1 - t0) / 1e6))
EOF

# Runs one application in the background, samples it, stops it. $1: name, $2: telemetry
# prefix, $3: egress ports, rest: the command. EXTRA (SOCKET@PORTS), when set, is another
# process (PID2) measured in the same window and stopped with it.
measure() {
  local name="$1" prefix="$2" ports="$3"
  shift 3
  "$@" >"$WORK/$name.log" 2>&1 </dev/null &
  PID=$!
  local mpps
  # shellcheck disable=SC2086
  if ! mpps=$(python3 "$WORK/sample.py" "$WARMUP" "$SECONDS_RUN" \
    "/var/run/dpdk/$prefix/dpdk_telemetry.v2@$ports" ${EXTRA:-}); then
    echo "peer-bench: $name did not run; its log:" >&2
    tail -20 "$WORK/$name.log" >&2
    exit 1
  fi
  if ! kill -0 "$PID" 2>/dev/null; then
    echo "peer-bench: $name stopped during the run; its log:" >&2
    tail -20 "$WORK/$name.log" >&2
    exit 1
  fi
  stop_pid "$PID"
  PID=""
  if [ -n "$PID2" ]; then stop_pid "$PID2"; PID2=""; fi
  rm -rf "/var/run/dpdk/$prefix"
  if [ -n "$LOGS" ]; then
    mkdir -p "$LOGS"
    cp "$WORK/$name.log" "$LOGS/$name-$(date +%s%N).log"
  fi
  echo "$mpps"
}

eal_common=(--no-huge -m 1024 --no-pci)
declare -A RESULT
# The switch's configuration: one downlink per worker (net_pcap0..) and four uplinks
# (net_null0..3; with two workers u0 and u1 on worker 0, u2 and u3 on worker 1).
ssw_config() {
  local pcap="$1" cores="$CORE" lcores="$CORE" vdevs="" h u
  [ "$WORKERS" = 1 ] || { cores="0, 1"; lcores="0,1"; }
  printf '[switch]\nname = "peer"\nworkers = %d\ncores = [%s]\nidle = "spin"\npath_stamp_lanes = %d\n[reorder]\nenabled = true\n' \
    "$WORKERS" "$cores" "$WORKERS"
  for h in $(seq 0 $((WORKERS - 1))); do
    printf '[[port]]\nname = "h%d"\nrole = "downlink"\nbackend = "dpdk"\ndevice = "net_pcap%d"\nmac = "02:5a:01:01:00:01"\naddresses = ["10.1.%d.1/24"]\nworker = %d\n' \
      "$h" "$h" "$((h + 1))" "$h"
    vdevs+="\"--vdev\", \"net_pcap$h,rx_pcap=$pcap,infinite_rx=1\", "
  done
  for u in 0 1 2 3; do
    printf '[[port]]\nname = "u%d"\nrole = "uplink"\nbackend = "dpdk"\ndevice = "net_null%d"\nmac = "02:5a:01:02:00:0%d"\npeer_mac = "02:5a:02:02:00:0%d"\nworker = %d\n' \
      "$u" "$u" "$u" "$u" "$(( WORKERS == 1 ? 0 : u / 2 ))"
    vdevs+="\"--vdev\", \"net_null$u,no-rx=1\", "
  done
  printf '[[uplink_group]]\nname = "fabric"\nports = ["u0", "u1", "u2", "u3"]\nloss_detection = "path_order"\npath_stamps = true\n'
  printf '[[route]]\nprefix = "198.18.0.0/16"\ngroup = "fabric"\n'
  printf '[dpdk]\neal_args = ["--no-huge", "-m", "1024", "--no-pci", "--file-prefix", "%s", "-l", "%s", %s]\nmbufs = 16384\n' \
    "$TAG-ssw" "$lcores" "${vdevs%, }"
}

for frame in $FRAMES; do
  pcap="$WORK/roce-$frame.pcap"
  # l3fwd sends 198.18.1.0/24 to its port 1, the null port after its pcap port.
  # At least 4096 frames, at least two per QP (net_pcap holds the whole replay in mbufs).
  per_qp=$(( 4096 / QPS > 2 ? 4096 / QPS : 2 ))
  "$ROOT/target/release/rocepcap" --out "$pcap" --qps "$QPS" --frame-bytes "$frame" --per-qp "$per_qp" \
    --dst-ip 198.18.1.2 >/dev/null
  ssw_config "$pcap" >"$WORK/ssw-$frame.toml"
  ssw_ports=$(seq -s, "$WORKERS" $((WORKERS + 3)))
  for r in $(seq "$ROUNDS"); do
    echo "# source role, $frame-byte frames, $WORKERS worker(s), round $r of $ROUNDS" >&2
    if [ "$WORKERS" = 1 ]; then
      src="net_pcap0,rx_pcap=$pcap,infinite_rx=1"
      RESULT[testpmd,$frame,$r]=$(measure testpmd "$TAG-tp" 1 \
        dpdk-testpmd -l "$MAIN,$CORE" "${eal_common[@]}" --file-prefix "$TAG-tp" \
        --vdev "$src" --vdev net_null0,no-rx=1 -- --forward-mode=io --auto-start \
        --no-lsc-interrupt --stats-period 1 --total-num-mbufs 65536)
      RESULT[l3fwd,$frame,$r]=$(measure l3fwd "$TAG-l3" 1 \
        taskset -c "$CORE" "$L3FWD" -l "$CORE" "${eal_common[@]}" --file-prefix "$TAG-l3" \
        --vdev "$src" --vdev net_null0,no-rx=1 -- -p 0x3 -P --parse-ptype \
        --config "(0,0,$CORE),(1,0,$CORE)")
    else
      # l3fwd gives every lcore a transmit queue on every port and net_pcap has one: two
      # l3fwd processes, one per core, each a host port to a null port, measured together.
      taskset -c 0 "$L3FWD" -l 0 "${eal_common[@]}" --file-prefix "$TAG-l3b" \
        --vdev "net_pcap1,rx_pcap=$pcap,infinite_rx=1" --vdev net_null1,no-rx=1 \
        -- -p 0x3 -P --parse-ptype --config "(0,0,0),(1,0,0)" >"$WORK/l3fwd-b.log" 2>&1 </dev/null &
      PID2=$!
      RESULT[l3fwd,$frame,$r]=$(EXTRA="/var/run/dpdk/$TAG-l3b/dpdk_telemetry.v2@1" measure l3fwd "$TAG-l3" 1 \
        taskset -c 1 "$L3FWD" -l 1 "${eal_common[@]}" --file-prefix "$TAG-l3" \
        --vdev "net_pcap0,rx_pcap=$pcap,infinite_rx=1" --vdev net_null0,no-rx=1 \
        -- -p 0x3 -P --parse-ptype --config "(0,0,1),(1,0,1)")
      stop_pid "$PID2"
      PID2=""
      rm -rf "/var/run/dpdk/$TAG-l3b"
    fi
    RESULT[sprayswitch,$frame,$r]=$(measure sprayswitch "$TAG-ssw" "$ssw_ports" \
      env RUST_LOG=warn "$SSW" --config "$WORK/ssw-$frame.toml" run --no-socket --stats-interval 0)
  done
done

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
if [ "$WORKERS" = 1 ]; then
  APPS="testpmd l3fwd sprayswitch"
  printf '\nsource role: host port (net_pcap, %d QPs) to the uplinks (net_null), one core (%d), %s s per run\n' "$QPS" "$CORE" "$SECONDS_RUN"
else
  APPS="l3fwd sprayswitch"
  printf '\nsource role, two cores: two host ports (net_pcap, %d QPs each), one per worker or lcore, to the uplinks (net_null), %s s per run\n' "$QPS" "$SECONDS_RUN"
fi
printf '%-6s %-12s %-28s %9s %9s\n' frame app "Mpps per round" median "x l3fwd"
for frame in $FRAMES; do
  l3=""
  for app in $APPS; do
    vals=()
    for r in $(seq "$ROUNDS"); do vals+=("${RESULT[$app,$frame,$r]}"); done
    m=$(median "${vals[@]}")
    [ "$app" = l3fwd ] && l3="$m"
    ratio="-"
    if [ "$app" != l3fwd ] && [ -n "$l3" ]; then ratio=$(awk -v a="$m" -v b="$l3" 'BEGIN {printf "%.2f", a / b}'); fi
    printf '%-6s %-12s %-28s %9s %9s\n' "$frame" "$app" "${vals[*]}" "$m" "$ratio"
  done
done
