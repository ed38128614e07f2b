#!/usr/bin/env bash
# A rack pair on real Linux network stacks, in network namespaces joined by veth pairs:
#
#   host a1 ─ h1 ┐                                         ┌ h1 ─ host b1
#   host a2 ─ h2 ┤ tor-a  u0..uN-1 ═══ sprayfabric ═══ u0..uN-1  tor-b ├ h2 ─ host b2
#
# Two sprayswitch ToRs (AF_XDP, falling back to AF_PACKET), the fabric emulator with N paths of
# skewed delays between them, and HOSTS Linux hosts per rack whose only route is a default
# route via their ToR. Every name starts with "ssr-<NAME>-", every address lives inside those
# namespaces, and nothing is created in the root namespace.
#
# Usage: scripts/netns-rack.sh up|down|status [NAME]
#   up      builds the topology and starts the switches and the fabric (idempotent: tears down
#           a previous one of the same NAME first); on any failure everything is removed.
#   down    stops the processes it started (by PID) and deletes the namespaces. Idempotent.
#   status  lists the namespaces and processes.
#
# Environment (defaults in brackets):
#   HOSTS [2]  PATHS [4]  DELAYS_US ["0 20 40 60"] (one per path)  LOSS [""] (e.g. "0 0.01 0 0")
#   BACKEND [auto] (af_xdp, af_packet, auto; dpdk: the ToRs' ports are DPDK net_af_packet
#     vdevs, the fabric stays on auto; needs BIN built with --features dpdk, SHAPE=split)
#   POLICY [round_robin]  REORDER [1]
#   HOLD_US [5000]  LEARN_US [5000]  BIN [target/release]  RATE_MBPS [""] (per fabric path)
#   HOST_RATE_MBPS [""]: the ToRs pace what they send to each host at this rate (unpaced if empty)
#   RX_BUFFERS [""]: receive buffers of every real ToR port beyond its rings (the switch's
#     rx_buffers; with BACKEND=dpdk each pool's mbufs beyond its rings, caches and a burst, at
#     least 1024); RING_SIZE [""]: the ToRs' AF_XDP ring size (fill ring twice it) or DPDK
#     descriptors per queue. Empty: the switch's defaults. With SHAPE=one only the host ports
#     are real
#   MTU [1500] (every link; up to 9000; AF_XDP uses multi-buffer above 3822 bytes per frame)
#   IDLE [backoff]: idle policy of the switches and the fabric: backoff (spin, yield, then wait
#     for packets), wait (wait for packets at once: event-driven) or spin; IDLE_US [50] is the
#     longest idle wait (a packet ends it earlier)
#   RT_PRIO [""]: run the switches and the fabric with SCHED_FIFO at this priority (chrt), so
#     that a packet wakes them at once even when guests keep every core busy; use with IDLE=wait
#     (a real-time thread that spins or yields starves everything else on its core)
#   HOST_KIND [veth]: "tap" makes each host port a tap device in its ToR's namespace instead of a
#     host namespace, for qemu guests to attach to (scripts/rxe-rack.sh); no host namespaces then.
#   TAP_QLEN [1000, tun's default]: the taps' transmit queue (frames towards a guest), which a
#     TCG guest that stalls for a few ms overflows: host-side loss a lossless RoCE link would not
#     have (see rxe-rack.sh)
#   CORES ["" = no pinning; "0 1" pins tor-a to 0, tor-b to 1 and the fabric to 0]
#   RACK_CPUS [""]: a CPU list (taskset -c, e.g. "0") every process it starts is confined to,
#     in both shapes (in the split one, CORES then pins each worker within it)
#   SHAPE [split]: split runs tor-a, the fabric and tor-b as three processes joined by veth
#     pairs (above); one runs all three in one process and one thread (sprayrackd): the hosts'
#     ports are then a-h1.. and b-h1.. in one namespace <P>-rack (taps with HOST_KIND=tap), the
#     paths in memory; the control sockets are the same (tor-a.sock, tor-b.sock). CORES is
#     ignored there.
# Processes' logs and configurations are in /run/sprayswitch-rack/<NAME>/; KEEP_LOGS=DIR with
# down copies the logs there after the processes stopped (with their final reports).
set -euo pipefail

cmd=${1:-}
NAME=${2:-rack}
P="ssr-$NAME"
STATE="/run/sprayswitch-rack/$NAME"
HOSTS=${HOSTS:-2}
PATHS=${PATHS:-4}
DELAYS_US=${DELAYS_US:-"0 20 40 60"}
LOSS=${LOSS:-}
BACKEND=${BACKEND:-auto}
POLICY=${POLICY:-round_robin}
REORDER=${REORDER:-1}
HOLD_US=${HOLD_US:-5000}
LEARN_US=${LEARN_US:-5000}
BIN=${BIN:-target/release}
CORES=${CORES:-}
RATE_MBPS=${RATE_MBPS:-}
HOST_RATE_MBPS=${HOST_RATE_MBPS:-}
RX_BUFFERS=${RX_BUFFERS:-}
RING_SIZE=${RING_SIZE:-}
MTU=${MTU:-1500}
HOST_KIND=${HOST_KIND:-veth}
TAP_QLEN=${TAP_QLEN:-1000}
RT_PRIO=${RT_PRIO:-}
RACK_CPUS=${RACK_CPUS:-}
IDLE=${IDLE:-backoff}
IDLE_US=${IDLE_US:-50}
SHAPE=${SHAPE:-split}

mac() { printf '02:5a:%02x:%02x:00:%02x' "$1" "$2" "$3"; }
nsx() { ip netns exec "$@"; }

namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$P-" || true
}

down() {
  if [ -d "$STATE" ]; then
    for f in "$STATE"/*.pid; do
      [ -e "$f" ] || continue
      pid=$(cat "$f")
      # Only a process we started: its PID file is ours and it still runs our binary.
      if kill -0 "$pid" 2>/dev/null && grep -qE 'sprayswitch|sprayfabric|sprayrackd' "/proc/$pid/cmdline" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
      fi
      rm -f "$f"
    done
  fi
  for ns in $(namespaces); do ip netns del "$ns" 2>/dev/null || true; done
  # The processes' logs end with their final reports, written as they stop: KEEP_LOGS=DIR keeps
  # them.
  if [ -n "${KEEP_LOGS:-}" ] && [ -d "$STATE" ]; then
    mkdir -p "$KEEP_LOGS"
    cp "$STATE"/*.log "$KEEP_LOGS/" 2>/dev/null || true
  fi
  rm -rf "$STATE"
}

status() {
  echo "namespaces:"; namespaces | sed 's/^/  /'
  if [ -d "$STATE" ]; then
    for f in "$STATE"/*.pid; do
      [ -e "$f" ] || continue
      pid=$(cat "$f")
      state=$(kill -0 "$pid" 2>/dev/null && echo running || echo gone)
      echo "  $(basename "$f" .pid): pid $pid $state"
    done
  fi
}

newns() {
  ip netns add "$1"
  ip -n "$1" link set lo up
  # No IPv6 on these links: no router solicitations, DAD or MLD noise in the captures.
  nsx "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
}

# veth NS_A IF_A MAC_A NS_B IF_B MAC_B
veth() {
  ip -n "$1" link add "$2" address "$3" mtu "$MTU" type veth peer name "$5" address "$6" mtu "$MTU" netns "$4"
  ip -n "$1" link set "$2" up
  ip -n "$4" link set "$5" up
}

wait_ready() { # name logfile
  for _ in $(seq 200); do
    if grep -q "$2" "$STATE/$1.log" 2>/dev/null; then return 0; fi
    if ! kill -0 "$(cat "$STATE/$1.pid")" 2>/dev/null; then
      echo "$1 exited during start:" >&2; cat "$STATE/$1.log" >&2; return 1
    fi
    sleep 0.1
  done
  echo "$1 did not become ready:" >&2; cat "$STATE/$1.log" >&2; return 1
}

# host_port NS IF MAC RACK I LETTER: host i of rack r on interface IF in namespace NS: a tap for
# a qemu guest (HOST_KIND=tap), else a veth to the host's own namespace with its address and
# default route.
host_port() {
  local ns=$1 ifname=$2 hwaddr=$3 r=$4 i=$5 letter=$6
  if [ "$HOST_KIND" = tap ]; then
    # A tap for a qemu guest (`-netdev tap,ifname=IF,script=no` run in this namespace).
    ip -n "$ns" tuntap add "$ifname" mode tap
    ip -n "$ns" link set "$ifname" address "$hwaddr" mtu "$MTU" txqueuelen "$TAP_QLEN" up
    return
  fi
  local h="$P-$letter$i"
  newns "$h"
  veth "$ns" "$ifname" "$hwaddr" "$h" eth0 "$(mac "$r" 3 "$i")"
  # veth leaves TCP/UDP checksums to "hardware" (CHECKSUM_PARTIAL) that never runs when
  # a frame leaves through AF_XDP or AF_PACKET: make the hosts' stacks compute them.
  nsx "$h" ethtool -K eth0 tx off >/dev/null
  ip -n "$h" addr add "10.$r.$i.2/24" dev eth0
  ip -n "$h" route add default via "10.$r.$i.1"
}

# What the processes it starts run under: their CPUs (RACK_CPUS) and real-time priority (RT_PRIO).
# `ip netns exec` replaces itself with taskset, taskset with chrt, chrt with the program: $! is
# the program's PID.
prefix=()
[ -n "$RACK_CPUS" ] && prefix+=(taskset -c "$RACK_CPUS")
[ -n "$RT_PRIO" ] && prefix+=(chrt -f "$RT_PRIO")

# impairments P: path P's delay, rate and loss as the fabric emulator's key=value list.
impairments() {
  local delays loss spec
  read -r -a delays <<<"$DELAYS_US"
  read -r -a loss <<<"$LOSS"
  spec="delay_us=${delays[$1]:-0}"
  [ -n "$RATE_MBPS" ] && spec+=",rate_mbps=$RATE_MBPS"
  [ -n "${loss[$1]:-}" ] && spec+=",loss=${loss[$1]}"
  echo "$spec"
}

# The whole rack in one process (SHAPE=one).
up_one() {
  newns "$P-rack"
  for r in 1 2; do
    letter=$([ $r = 1 ] && echo a || echo b)
    for i in $(seq "$HOSTS"); do
      host_port "$P-rack" "$letter-h$i" "$(mac $r 1 "$i")" "$r" "$i" "$letter"
    done
  done
  args=()
  for p in $(seq 0 $((PATHS - 1))); do
    args+=(--path "$(impairments "$p")")
  done
  [ "$REORDER" = 1 ] || args+=(--no-reorder)
  [ -n "$HOST_RATE_MBPS" ] && args+=(--host-rate-mbps "$HOST_RATE_MBPS")
  [ -n "$RX_BUFFERS" ] && args+=(--rx-buffers "$RX_BUFFERS")
  [ -n "$RING_SIZE" ] && args+=(--ring-size "$RING_SIZE")
  RUST_LOG=${RUST_LOG:-info} ip netns exec "$P-rack" "${prefix[@]}" "$BIN/sprayrackd" --hosts "$HOSTS" \
    --backend "$BACKEND" --policy "$POLICY" --hold-us "$HOLD_US" --learn-us "$LEARN_US" \
    --mtu "$MTU" --idle "$IDLE" --idle-us "$IDLE_US" --socket-dir "$STATE" "${args[@]}" \
    >"$STATE/rack.log" 2>&1 &
  echo $! >"$STATE/rack.pid"
  wait_ready rack "rack running"
}

up() {
  command -v ethtool >/dev/null || { echo "ethtool is missing (apt-get install ethtool)" >&2; exit 1; }
  for b in sprayswitch sprayfabric sprayrack sprayrackd; do
    [ -x "$BIN/$b" ] || { echo "missing $BIN/$b: run cargo build --release (or set BIN)" >&2; exit 1; }
  done
  down
  mkdir -p "$STATE"
  trap 'echo "netns-rack: setup failed, removing everything" >&2; down' ERR
  if [ "$SHAPE" = one ]; then
    up_one
    trap - ERR
    echo "rack $NAME up (one process): hosts $P-a1..$HOSTS and $P-b1..$HOSTS (10.1.i.2, 10.2.i.2), state in $STATE"
    return
  fi
  [ "$SHAPE" = split ] || { echo "SHAPE=$SHAPE: use split or one" >&2; exit 2; }
  read -r -a cores <<<"$CORES"
  newns "$P-tora"; newns "$P-torb"; newns "$P-fab"
  for r in 1 2; do
    tor=$([ $r = 1 ] && echo "$P-tora" || echo "$P-torb")
    letter=$([ $r = 1 ] && echo a || echo b)
    for i in $(seq "$HOSTS"); do
      host_port "$tor" "h$i" "$(mac $r 1 "$i")" "$r" "$i" "$letter"
    done
    for p in $(seq 0 $((PATHS - 1))); do
      veth "$tor" "u$p" "$(mac $r 2 "$p")" "$P-fab" "$letter$p" "$(mac $r 4 "$p")"
    done
  done
  fabric_args=()
  for p in $(seq 0 $((PATHS - 1))); do
    fabric_args+=(--path "a$p:b$p,$(impairments "$p")")
  done
  [ -n "${cores[0]:-}" ] && fabric_args+=(--core "${cores[0]}")
  reorder_flag=()
  [ "$REORDER" = 1 ] || reorder_flag=(--no-reorder)
  [ -n "$HOST_RATE_MBPS" ] && reorder_flag+=(--host-rate-mbps "$HOST_RATE_MBPS")
  [ -n "$RX_BUFFERS" ] && reorder_flag+=(--rx-buffers "$RX_BUFFERS")
  [ -n "$RING_SIZE" ] && reorder_flag+=(--ring-size "$RING_SIZE")
  for r in a b; do
    core=()
    if [ ${#cores[@]} -ge 2 ]; then
      core=(--core "$([ $r = a ] && echo "${cores[0]}" || echo "${cores[1]}")")
    fi
    "$BIN/sprayrack" --rack $r --hosts "$HOSTS" --paths "$PATHS" --backend "$BACKEND" \
      --policy "$POLICY" --hold-us "$HOLD_US" --learn-us "$LEARN_US" --mtu "$MTU" "${reorder_flag[@]}" \
      --idle "$IDLE" --idle-us "$IDLE_US" \
      "${core[@]}" >"$STATE/tor-$r.toml"
  done
  # The fabric emulator has no DPDK ports: with BACKEND=dpdk only the ToRs use DPDK.
  fabric_backend=$([ "$BACKEND" = dpdk ] && echo auto || echo "$BACKEND")
  ip netns exec "$P-fab" "${prefix[@]}" "$BIN/sprayfabric" --backend "$fabric_backend" "${fabric_args[@]}" \
    --idle "$IDLE" --idle-us "$IDLE_US" \
    >"$STATE/fabric.log" 2>&1 &
  echo $! >"$STATE/fabric.pid"
  for r in a b; do
    RUST_LOG=${RUST_LOG:-info} ip netns exec "$P-tor$r" "${prefix[@]}" "$BIN/sprayswitch" --config "$STATE/tor-$r.toml" \
      run --stats-interval 0 --socket "$STATE/tor-$r.sock" >"$STATE/tor-$r.log" 2>&1 &
    echo $! >"$STATE/tor-$r.pid"
  done
  wait_ready fabric "path a$((PATHS - 1)) <->"
  wait_ready tor-a "running"
  wait_ready tor-b "running"
  trap - ERR
  echo "rack $NAME up: hosts $P-a1..$HOSTS and $P-b1..$HOSTS (10.1.i.2, 10.2.i.2), state in $STATE"
}

case "$cmd" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) sed -n '2,51p' "$0"; exit 2 ;;
esac
