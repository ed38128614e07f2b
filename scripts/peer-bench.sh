#!/usr/bin/env bash
# sprayswitch against DPDK's own applications on the same DPDK vdevs, one core each.
#
#   scripts/peer-bench.sh [--rounds 3] [--seconds 5] [--core 1] [--frames "90 1098"] [--qps 64]
#                         [--logs DIR]
#
# Source role (a ToR's host port to its uplink group): a `net_pcap` port replays RoCE RC WRITE
# ONLY frames of --qps QPs from memory (`infinite_rx=1`) and the application sends them out of
# `net_null` ports (`no-rx=1`: they receive nothing):
#   - testpmd, io forwarding, pcap -> one null port: the ceiling of the vdevs themselves;
#   - l3fwd (DPDK 22.11's example, LPM, built here from Debian's dpdk-doc sources), pcap -> one
#     null port (198.18.1.0/24 is its port 1);
#   - sprayswitch (`--features dpdk`), the pcap port a downlink, four null ports an uplink group
#     with path stamps, the frames routed (198.18.0.0/16) and sprayed round robin, reorder on.
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
# installed with apt-get.
set -euo pipefail

ROUNDS=3
SECONDS_RUN=5
CORE=1
FRAMES="90 1098"
QPS=64
WARMUP=2
LOGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --seconds) SECONDS_RUN="$2"; shift 2 ;;
    --core) CORE="$2"; shift 2 ;;
    --frames) FRAMES="$2"; shift 2 ;;
    --qps) QPS="$2"; shift 2 ;;
    --logs) LOGS="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "peer-bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

cd "$(dirname "$0")/.."
ROOT=$(pwd)
[ "$(id -u)" = 0 ] || { echo "peer-bench: DPDK needs root" >&2; exit 1; }
NCPU=$(nproc)
[ "$CORE" -lt "$NCPU" ] || { echo "peer-bench: --core $CORE: this machine has $NCPU cores" >&2; exit 1; }
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
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
    kill -INT "$PID" 2>/dev/null || true
    sleep 1
    kill -KILL "$PID" 2>/dev/null || true
  fi
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
path, ports, warmup, secs = sys.argv[1], [int(p) for p in sys.argv[2].split(",")], float(sys.argv[3]), float(sys.argv[4])
def total():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(path)
    s.recv(4096)
    n = 0
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
            sys.exit("no telemetry socket at " + path)
        time.sleep(0.2)
time.sleep(warmup)
a, t0 = total()
time.sleep(secs)
b, t1 = total()
print("%.3f" % ((b - a) / (t1 - t0) / 1e6))
EOF

# Runs one application in the background, samples it, stops it. $1: name, $2: telemetry
# prefix, $3: egress ports, rest: the command.
measure() {
  local name="$1" prefix="$2" ports="$3"
  shift 3
  "$@" >"$WORK/$name.log" 2>&1 </dev/null &
  PID=$!
  local mpps
  if ! mpps=$(python3 "$WORK/sample.py" "/var/run/dpdk/$prefix/dpdk_telemetry.v2" "$ports" "$WARMUP" "$SECONDS_RUN"); then
    echo "peer-bench: $name did not run; its log:" >&2
    tail -20 "$WORK/$name.log" >&2
    exit 1
  fi
  if ! kill -0 "$PID" 2>/dev/null; then
    echo "peer-bench: $name stopped during the run; its log:" >&2
    tail -20 "$WORK/$name.log" >&2
    exit 1
  fi
  kill -INT "$PID" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  PID=""
  rm -rf "/var/run/dpdk/$prefix"
  if [ -n "$LOGS" ]; then
    mkdir -p "$LOGS"
    cp "$WORK/$name.log" "$LOGS/$name-$(date +%s%N).log"
  fi
  echo "$mpps"
}

eal_common=(--no-huge -m 1024 --no-pci)
declare -A RESULT
for frame in $FRAMES; do
  pcap="$WORK/roce-$frame.pcap"
  "$ROOT/target/release/rocepcap" --out "$pcap" --qps "$QPS" --frame-bytes "$frame" --per-qp 64 >/dev/null
  src="net_pcap0,rx_pcap=$pcap,infinite_rx=1"
  cat >"$WORK/ssw-$frame.toml" <<EOF
[switch]
name = "peer"
workers = 1
cores = [$CORE]
idle = "spin"
[reorder]
enabled = true
[[port]]
name = "h1"
role = "downlink"
backend = "dpdk"
device = "net_pcap0"
mac = "02:5a:01:01:00:01"
addresses = ["10.1.1.1/24"]
$(for u in 0 1 2 3; do printf '[[port]]\nname = "u%d"\nrole = "uplink"\nbackend = "dpdk"\ndevice = "net_null%d"\nmac = "02:5a:01:02:00:0%d"\npeer_mac = "02:5a:02:02:00:0%d"\n' "$u" "$u" "$u" "$u"; done)
[[uplink_group]]
name = "fabric"
ports = ["u0", "u1", "u2", "u3"]
loss_detection = "path_order"
path_stamps = true
[[route]]
prefix = "198.18.0.0/16"
group = "fabric"
[dpdk]
eal_args = ["--no-huge", "-m", "1024", "--no-pci", "--file-prefix", "$TAG-ssw", "-l", "$CORE", "--vdev", "$src", "--vdev", "net_null0,no-rx=1", "--vdev", "net_null1,no-rx=1", "--vdev", "net_null2,no-rx=1", "--vdev", "net_null3,no-rx=1"]
mbufs = 16384
EOF
  for r in $(seq "$ROUNDS"); do
    echo "# source role, $frame-byte frames, round $r of $ROUNDS" >&2
    RESULT[testpmd,$frame,$r]=$(measure testpmd "$TAG-tp" 1 \
      dpdk-testpmd -l "$MAIN,$CORE" "${eal_common[@]}" --file-prefix "$TAG-tp" \
      --vdev "$src" --vdev net_null0,no-rx=1 -- --forward-mode=io --auto-start \
      --no-lsc-interrupt --stats-period 1 --total-num-mbufs 16384)
    RESULT[l3fwd,$frame,$r]=$(measure l3fwd "$TAG-l3" 1 \
      taskset -c "$CORE" "$L3FWD" -l "$CORE" "${eal_common[@]}" --file-prefix "$TAG-l3" \
      --vdev "$src" --vdev net_null0,no-rx=1 -- -p 0x3 -P --parse-ptype \
      --config "(0,0,$CORE),(1,0,$CORE)")
    RESULT[sprayswitch,$frame,$r]=$(measure sprayswitch "$TAG-ssw" 1,2,3,4 \
      env RUST_LOG=warn "$SSW" --config "$WORK/ssw-$frame.toml" run --no-socket --stats-interval 0)
  done
done

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
printf '\nsource role: host port (net_pcap, %d QPs) to the uplinks (net_null), one core (%d), %s s per run\n' "$QPS" "$CORE" "$SECONDS_RUN"
printf '%-6s %-12s %-28s %9s %9s\n' frame app "Mpps per round" median "x l3fwd"
for frame in $FRAMES; do
  l3=""
  for app in testpmd l3fwd sprayswitch; do
    vals=()
    for r in $(seq "$ROUNDS"); do vals+=("${RESULT[$app,$frame,$r]}"); done
    m=$(median "${vals[@]}")
    [ "$app" = l3fwd ] && l3="$m"
    ratio="-"
    if [ "$app" != l3fwd ] && [ -n "$l3" ]; then ratio=$(awk -v a="$m" -v b="$l3" 'BEGIN {printf "%.2f", a / b}'); fi
    printf '%-6s %-12s %-28s %9s %9s\n' "$frame" "$app" "${vals[*]}" "$m" "$ratio"
  done
done
