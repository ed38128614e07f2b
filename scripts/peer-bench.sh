#!/usr/bin/env bash
# sprayswitch against DPDK's own applications on the same DPDK vdevs, one core each.
#
#   scripts/peer-bench.sh [--role all|source|destination] [--rounds 3] [--seconds 5] [--core 1]
#                         [--frames "90 1098"] [--qps 64] [--dest-qps "64 10000"]
#                         [--depths "0 4 16"] [--logs DIR] [--workers 1|2] [--baseline BIN]
#
# Source role (a ToR's host port to its uplink group): a `net_pcap` port replays RoCE RC WRITE
# ONLY frames of --qps QPs from memory (`infinite_rx=1`) and the application sends them out of
# `net_null` ports (`no-rx=1`: they receive nothing):
#   - testpmd, io forwarding, pcap -> one null port: the ceiling of the vdevs themselves;
#   - l3fwd (DPDK 22.11's example, LPM, built here from Debian's dpdk-doc sources), pcap -> one
#     null port (198.18.1.0/24 is its port 1);
#   - sprayswitch (`--features dpdk`), the pcap port a downlink, four null ports an uplink group
#     with path stamps, the frames routed (198.18.0.0/16) and sprayed round robin, reorder on.
# Destination role (a ToR's uplinks to a host port, through the reorder stage): four `net_pcap`
# ports read what a source ToR sprayed over four uplinks (`rocepcap`: stamped, in chunks of 32
# frames per uplink, the burst all three poll with) straight from captures (not infinite_rx:
# every QP's PSNs keep counting for the whole run; the run stops with an error if a capture
# runs out inside the window), 90-byte frames of each --dest-qps count, in order (depth 0) and
# reordered to each --depths (the fourth uplink lags: its captures start with the chunks of
# another host's QPs that delay it), into one null port (198.18.4.0/24, l3fwd's port 4):
#   - testpmd, io forwarding, chained ports (each port's packets out of the next);
#   - l3fwd, the four pcap ports to the null port;
#   - sprayswitch, the four pcap ports an uplink group (path-order loss detection, stamps), the
#     null port a downlink with the eight hosts as static neighbours, reorder on; the hold
#     timeout, rings and mbufs sized for the lag (deep lags of 10,000 QPs hold 10^5 packets).
#   Reading captures costs every application the same: testpmd's figure is that ceiling.
# --workers 2 (source role only): both cores, two host ports (the same replay each): l3fwd with
# one lcore per port, sprayswitch with a worker per host port and two uplinks each (spraying
# over all four hands half the packets to the other worker); no testpmd (its main lcore needs a
# third core).
# --baseline BIN: also measure that sprayswitch binary (another commit's build, with the dpdk
# feature; it must read the current configuration, which is checked first) as the app
# `baseline`, in the same rounds and on the same configuration, before or after the current
# build by turns: a change's effect from one run, not from two runs minutes apart.
# --logs DIR keeps every run's output (sprayswitch's counters at exit among them). Each runs
# pinned to --core (testpmd's idle main lcore on the other core), alone, for a
# warm-up of 2 s and --seconds of measurement; the rounds alternate the applications. Packets
# per second are read from DPDK's telemetry socket (`/ethdev/stats`: the egress ports'
# opackets over the window), the same counter for all. The table gives every round, the
# median and each sprayswitch build's ratio to l3fwd.
#
# l3fwd is built from /usr/share/dpdk/examples/l3fwd with one change, made here: no RX checksum
# offload (net_pcap has none, and l3fwd refuses to start without it); `--parse-ptype` is its
# own option for ports that do not report packet types. Needs root (DPDK), libdpdk-dev,
# dpdk-dev (testpmd), dpdk-doc, pkg-config, make and gcc: as root, missing packages are
# installed with apt-get. The source role's replay holds at least 4096 frames and two per QP;
# l3fwd's mbuf pool (8192) takes a replay of at most about 8000 frames, so --qps stays below
# about 4000. The destination role's captures are written to /dev/shm when it has room (about
# 1 GB per second of run at 12 Mpps), else beside the script's other files in /tmp.
set -euo pipefail

ROUNDS=3
SECONDS_RUN=5
CORE=1
FRAMES="90 1098"
QPS=64
WARMUP=2
LOGS=""
WORKERS=1
ROLE=all
DEST_QPS="64 10000"
DEPTHS="0 4 16"
BASELINE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --seconds) SECONDS_RUN="$2"; shift 2 ;;
    --core) CORE="$2"; shift 2 ;;
    --frames) FRAMES="$2"; shift 2 ;;
    --qps) QPS="$2"; shift 2 ;;
    --logs) LOGS="$2"; shift 2 ;;
    --workers) WORKERS="$2"; shift 2 ;;
    --role) ROLE="$2"; shift 2 ;;
    --dest-qps) DEST_QPS="$2"; shift 2 ;;
    --depths) DEPTHS="$2"; shift 2 ;;
    --baseline) BASELINE="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "peer-bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ -n "$BASELINE" ]; then
  { [ -f "$BASELINE" ] && [ -x "$BASELINE" ]; } ||
    { echo "peer-bench: --baseline $BASELINE is not an executable file" >&2; exit 2; }
  BASELINE=$(realpath "$BASELINE")
fi
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
case "$ROLE" in
  all|source|destination) ;;
  *) echo "peer-bench: --role $ROLE: all, source or destination" >&2; exit 2 ;;
esac
if [ "$WORKERS" = 2 ] && [ "$ROLE" != source ]; then
  echo "peer-bench: --workers 2 runs the source role only (--role source)" >&2; exit 2
fi
for n in $QPS $DEST_QPS $DEPTHS $ROUNDS $SECONDS_RUN; do
  case "$n" in ''|*[!0-9]*) echo "peer-bench: $n: a whole number expected" >&2; exit 2 ;; esac
done
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
SHM_DIR=""
# Stops a process this script started: SIGINT, then SIGKILL after 5 s.
stop_pid() {
  kill -INT "$1" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
cleanup() {
  for p in $PID $PID2; do stop_pid "$p"; done
  rm -rf "$WORK" ${SHM_DIR:+"$SHM_DIR"} "/var/run/dpdk/$TAG"-*
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
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release"
SSW="$BIN/sprayswitch"

# The telemetry sampler: egress opackets summed over the given ports, twice, --seconds apart.
# With a limit (the frames the captures hold), it fails when the ingress ports' ipackets reach
# it inside the window: a capture ran out and the figure would count idle time.
cat >"$WORK/sample.py" <<'EOF'
import json, socket, sys, time
warmup, secs, limit = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
# Each further argument: SOCKET@PORT,PORT,...[@RXPORT,...] (one per process measured; their
# sums are printed).
def ports(s):
    return [int(p) for p in s.split(",")]
specs = [(a.split("@")[0], ports(a.split("@")[1]), ports(a.split("@")[2]) if a.count("@") > 1 else [])
         for a in sys.argv[4:]]
def stats(s, p):
    s.send(("/ethdev/stats,%d" % p).encode())
    return json.loads(s.recv(1 << 16))["/ethdev/stats"]
def total():
    n, rx = 0, 0
    for path, tx_ports, rx_ports in specs:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(path)
        s.recv(4096)
        for p in tx_ports:
            n += stats(s, p)["opackets"]
        for p in rx_ports:
            rx += stats(s, p)["ipackets"]
        s.close()
    return n, rx, time.monotonic()
deadline = time.monotonic() + 30
while True:
    try:
        total()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("no telemetry socket at " + " ".join(p for p, _, _ in specs))
        time.sleep(0.2)
# The warm-up starts with the first packet out: an application that takes long to start (EAL
# clearing a large memory arena) is not measured while it starts.
while total()[0] == 0:
    if time.monotonic() > deadline + 60:
        sys.exit("nothing forwarded within 90 s")
    time.sleep(0.1)
time.sleep(warmup)
a, _, t0 = total()
time.sleep(secs)
b, rx, t1 = total()
if limit and rx >= limit:
    sys.exit("the captures ran out inside the window (%d of %d frames read): fewer --seconds" % (rx, limit))
print("%.3f" % ((b - a) / (t1 - t0) / 1e6))
EOF

# Runs one application in the background, samples it, stops it. $1: name, $2: telemetry
# prefix, $3: egress ports (and @ingress ports, with RXLIMIT the frames they may read), rest:
# the command. EXTRA (SOCKET@PORTS), when set, is another process (PID2) measured in the same
# window and stopped with it.
measure() {
  local name="$1" prefix="$2" ports="$3"
  shift 3
  "$@" >"$WORK/$name.log" 2>&1 </dev/null &
  PID=$!
  local mpps
  # shellcheck disable=SC2086
  if ! mpps=$(python3 "$WORK/sample.py" "$WARMUP" "$SECONDS_RUN" "${RXLIMIT:-0}" \
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

# The current build and, with --baseline, the baseline build, in an order that turns with the
# round (odd rounds the current build first), so that neither always runs second. $1: the
# round, $2: the RESULT key after the application's name, $3: the egress ports (as for
# measure; RXLIMIT from the caller's environment); the rest: sprayswitch's arguments.
measure_builds() {
  local r="$1" key="$2" ports="$3" app bin order=(sprayswitch)
  shift 3
  if [ -n "$BASELINE" ]; then
    if (( r % 2 )); then order=(sprayswitch baseline); else order=(baseline sprayswitch); fi
  fi
  for app in "${order[@]}"; do
    bin="$SSW"
    [ "$app" = baseline ] && bin="$BASELINE"
    RESULT[$app,$key]=$(measure "$app" "$TAG-ssw" "$ports" env RUST_LOG=warn "$bin" "$@")
  done
}

# With --baseline: that build must read the configuration $1 (an older build may refuse keys
# added since).
check_baseline() {
  [ -z "$BASELINE" ] || "$BASELINE" --config "$1" check >/dev/null || {
    echo "peer-bench: the baseline build does not read $1 (built before a key it uses?)" >&2
    exit 2
  }
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# The ratio of two medians, two decimals.
ratio_of() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
# One table row's figures: VALS (every round's RESULT[$1,ROUND]), M (their median), and RATIO
# to L3 (l3fwd's median, set here on l3fwd's own row; "-" for l3fwd and before it).
row_figures() {
  local app="${1%%,*}" r
  VALS=()
  for r in $(seq "$ROUNDS"); do VALS+=("${RESULT[$1,$r]}"); done
  M=$(median "${VALS[@]}")
  [ "$app" = l3fwd ] && L3="$M"
  RATIO="-"
  if [ "$app" != l3fwd ] && [ -n "$L3" ]; then RATIO=$(ratio_of "$M" "$L3"); fi
}

source_role() {
  for frame in $FRAMES; do
    pcap="$WORK/roce-$frame.pcap"
    # l3fwd sends 198.18.1.0/24 to its port 1, the null port after its pcap port.
    # At least 4096 frames, at least two per QP (net_pcap holds the whole replay in mbufs).
    per_qp=$(( 4096 / QPS > 2 ? 4096 / QPS : 2 ))
    "$BIN/rocepcap" --out "$pcap" --qps "$QPS" --frame-bytes "$frame" --per-qp "$per_qp" \
      --dst-ip 198.18.1.2 >/dev/null
    ssw_config "$pcap" >"$WORK/ssw-$frame.toml"
    check_baseline "$WORK/ssw-$frame.toml"
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
      measure_builds "$r" "$frame,$r" "$ssw_ports" \
        --config "$WORK/ssw-$frame.toml" run --no-socket --stats-interval 0
    done
  done

  if [ "$WORKERS" = 1 ]; then
    APPS="testpmd l3fwd sprayswitch${BASELINE:+ baseline}"
    printf '\nsource role: host port (net_pcap, %d QPs) to the uplinks (net_null), one core (%d), %s s per run\n' "$QPS" "$CORE" "$SECONDS_RUN"
  else
    APPS="l3fwd sprayswitch${BASELINE:+ baseline}"
    printf '\nsource role, two cores: two host ports (net_pcap, %d QPs each), one per worker or lcore, to the uplinks (net_null), %s s per run\n' "$QPS" "$SECONDS_RUN"
  fi
  printf '%-6s %-12s %-28s %9s %9s\n' frame app "Mpps per round" median "x l3fwd"
  for frame in $FRAMES; do
    L3=""
    for app in $APPS; do
      row_figures "$app,$frame"
      printf '%-6s %-12s %-28s %9s %9s\n' "$frame" "$app" "${VALS[*]}" "$M" "$RATIO"
    done
  done
}

# The destination switch's configuration: four uplinks reading the captures (net_pcap0..3, DPDK
# ports 0 to 3), the host port net_null0 (port 4) with 198.18.4.0/24 and the eight hosts the
# captures go to; $1: the captures' prefix, $2: their lag in chunks, $3: QPs, $4: mbufs.
dest_config() {
  local caps="$1" lag="$2" qps="$3" mbufs="$4" u n vdevs=""
  # The lagging uplink's chunks arrive lag x 128 frames late: a gap is held at least that long
  # at 0.25 Mpps (512 us per chunk round) on top of the default 500 us, so that a lag the
  # switch takes long to work through is not taken for loss (a depth of 16 on 10,000 QPs
  # lags by 160,000 frames: 0.2 s at 0.8 Mpps).
  printf '[switch]\nname = "peer-dest"\nworkers = 1\ncores = [%s]\nidle = "spin"\n' "$CORE"
  printf '[reorder]\nenabled = true\nhold_timeout_us = %d\nmax_rings = %d\nmax_held_mib = 512\n' \
    "$(( 500 + lag * 512 ))" "$(( qps * 2 > 1024 ? qps * 2 : 1024 ))"
  printf '[[port]]\nname = "h0"\nrole = "downlink"\nbackend = "dpdk"\ndevice = "net_null0"\nmac = "02:5a:01:01:00:01"\naddresses = ["198.18.4.1/24"]\n'
  for u in 0 1 2 3; do
    printf '[[port]]\nname = "u%d"\nrole = "uplink"\nbackend = "dpdk"\ndevice = "net_pcap%d"\nmac = "02:5a:01:02:00:0%d"\npeer_mac = "02:5a:02:02:00:0%d"\n' \
      "$u" "$u" "$u" "$u"
    vdevs+="\"--vdev\", \"net_pcap$u,rx_pcap=$caps-$u.pcap\", "
  done
  for n in 2 3 4 5 6 7 8 9; do
    printf '[[neighbor]]\nip = "198.18.4.%d"\nmac = "02:5a:00:00:04:0%d"\nport = "h0"\n' "$n" "$n"
  done
  printf '[[uplink_group]]\nname = "fabric"\nports = ["u0", "u1", "u2", "u3"]\nloss_detection = "path_order"\npath_stamps = true\n'
  printf '[[route]]\nprefix = "10.1.0.0/16"\ngroup = "fabric"\n'
  # Five pools of $mbufs mbufs of 2,176 bytes (3 KB with the pools' own overhead), and a GB
  # for the rest.
  printf '[dpdk]\neal_args = ["--no-huge", "-m", "%d", "--no-pci", "--file-prefix", "%s", "-l", "%s", %s"--vdev", "net_null0,no-rx=1"]\nmbufs = %d\n' \
    "$(( mbufs * 5 * 3 / 1000 + 1024 ))" "$TAG-ssw" "$CORE" "$vdevs" "$mbufs"
}

destination_role() {
  local caps_dir="$WORK" qps depth lag per_qp frames need_mb caps tp_vdevs mbufs r
  # Frames the captures need: the whole run (warm-up, window and a second for starting) at
  # 12 Mpps, what reading captures tops out at on this kind of machine (testpmd's figure).
  frames=$(( (WARMUP + SECONDS_RUN + 2) * 12000000 ))
  need_mb=$(( frames * 106 / 1000000 + 1024 ))
  if [ "$(df -m --output=avail /dev/shm 2>/dev/null | tail -1)" -gt "$(( need_mb + 2048 ))" ] 2>/dev/null; then
    caps_dir=$(mktemp -d /dev/shm/sprayswitch-peer-bench.XXXXXX)
    SHM_DIR="$caps_dir"
  fi
  for qps in $DEST_QPS; do
    for depth in $DEPTHS; do
      # A QP sends one frame in qps: a lag of N rounds of 4 x 32 frames reorders it by
      # N x 128 / qps PSNs.
      lag=$(( (depth * qps + 127) / 128 ))
      per_qp=$(( (frames + qps - 1) / qps ))
      caps="$caps_dir/dest-$qps-$depth"
      rm -f "$caps_dir"/dest-*.pcap
      echo "# destination role, $qps QPs, depth $depth: writing $((per_qp * qps / 1000000)) M frames (lag $lag chunks)" >&2
      "$BIN/rocepcap" --out "$caps-0.pcap" --out "$caps-1.pcap" --out "$caps-2.pcap" \
        --out "$caps-3.pcap" --dst-mac 02:5a:01:02:00:00 --dst-mac 02:5a:01:02:00:01 \
        --dst-mac 02:5a:01:02:00:02 --dst-mac 02:5a:01:02:00:03 --qps "$qps" --per-qp "$per_qp" \
        --srcs 64 --stamps --lag "$lag" --dst-ip 198.18.4.2 --frame-bytes 90 >/dev/null
      # The switch's mbufs per uplink: what the lag holds of it (a chunk a round), twice.
      mbufs=$(( lag * 32 * 2 + 16384 ))
      dest_config "$caps" "$lag" "$qps" "$mbufs" >"$WORK/ssw-dest.toml"
      check_baseline "$WORK/ssw-dest.toml"
      tp_vdevs=()
      for u in 0 1 2 3; do tp_vdevs+=(--vdev "net_pcap$u,rx_pcap=$caps-$u.pcap"); done
      tp_vdevs+=(--vdev net_null0,no-rx=1)
      local all=$(( per_qp * qps + lag * 32 ))
      for r in $(seq "$ROUNDS"); do
        echo "# destination role, $qps QPs, depth $depth, round $r of $ROUNDS" >&2
        RESULT[testpmd,$qps,$depth,$r]=$(RXLIMIT=$all measure testpmd "$TAG-tp" "0,1,2,3,4@0,1,2,3" \
          dpdk-testpmd -l "$MAIN,$CORE" "${eal_common[@]}" --file-prefix "$TAG-tp" \
          "${tp_vdevs[@]}" -- --forward-mode=io --port-topology=chained --auto-start \
          --no-lsc-interrupt --stats-period 1 --total-num-mbufs 65536)
        RESULT[l3fwd,$qps,$depth,$r]=$(RXLIMIT=$all measure l3fwd "$TAG-l3" "4@0,1,2,3" \
          taskset -c "$CORE" "$L3FWD" -l "$CORE" "${eal_common[@]}" --file-prefix "$TAG-l3" \
          "${tp_vdevs[@]}" -- -p 0x1f -P --parse-ptype \
          --config "(0,0,$CORE),(1,0,$CORE),(2,0,$CORE),(3,0,$CORE),(4,0,$CORE)")
        RXLIMIT=$all measure_builds "$r" "$qps,$depth,$r" "4@0,1,2,3" \
          --config "$WORK/ssw-dest.toml" run --no-socket --stats-interval 0
      done
      rm -f "$caps"-*.pcap
    done
  done
  printf '\ndestination role: four uplinks (net_pcap, captures of 90-byte frames) through the reorder stage to a host port (net_null), one core (%d), %s s per run\n' "$CORE" "$SECONDS_RUN"
  # Each build against itself with the first --dest-qps count (64 by default).
  local first
  read -r first _ <<<"$DEST_QPS"
  printf '%-7s %-6s %-12s %-28s %9s %9s %9s\n' QPs depth app "Mpps per round" median "x l3fwd" "x $first QPs"
  declare -A first_qps
  for qps in $DEST_QPS; do
    for depth in $DEPTHS; do
      local vs
      L3=""
      for app in testpmd l3fwd sprayswitch${BASELINE:+ baseline}; do
        row_figures "$app,$qps,$depth"
        # Each sprayswitch build against itself with the first --dest-qps count at the same
        # depth.
        vs="-"
        if [ "$app" = sprayswitch ] || [ "$app" = baseline ]; then
          [ -n "${first_qps[$app,$depth]:-}" ] || first_qps[$app,$depth]="$M"
          vs=$(ratio_of "$M" "${first_qps[$app,$depth]}")
        fi
        printf '%-7s %-6s %-12s %-28s %9s %9s %9s\n' "$qps" "$depth" "$app" "${VALS[*]}" "$M" "$RATIO" "$vs"
      done
    done
  done
}

[ "$ROLE" = destination ] || source_role
[ "$ROLE" = source ] || destination_role
