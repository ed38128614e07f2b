#!/usr/bin/env bash
# perftest between real Soft-RoCE (rdma_rxe) hosts through sprayswitch.
#
#   client guest ── tap ┐ tor-a ═══ fabric emulator, 4 skewed paths ═══ tor-b ┌ tap ── server guest
#
# Two qemu guests (TCG; stock Debian kernel, built by scripts/rxe-guest.sh) attach to taps that
# are the ToRs' downlinks of the rack of scripts/netns-rack.sh. For each RoCE MTU and mode the
# guests run the profile's perftest list. This script only orchestrates (guests, taps,
# namespaces, processes); `rxerack` (tools/harness/src/rxerack) reads what each run left, checks it and
# prints the tables: per test, what it alone did to each guest's rxe hw counters (server/client),
# the goodput ratios, where the cores went. `rxerack --help` and `rxerack list full` say more.
#
# Usage: scripts/rxe-rack.sh [quick|full] [list]
#   quick  CI's profile; full: every RC bandwidth test alone, -q 8, -b and both, latency tests,
#          RoCE MTU 1024 and 4096; list: the profile's tests and their names in the tables
# Modes: direct (a Linux bridge: the baseline), wire (a bare userspace forwarder on the
#   switches' backend with the fabric's capacity and mean delay on its one path: WIRE_IMPAIR),
#   ecmp, spray (without reorder) and reorder (spray with reorder) through the rack.
# Environment: MODES ["direct wire ecmp spray reorder"]; LOSS ("" or per path, "0 0.01 0 0");
#   HOLD_US, LEARN_US [20000] (two TCG guests keep both cores busy and the switches then forward
#   with millisecond delays: the hold timeout must exceed that skew and rxe's retransmission
#   timeout, 8.4 ms); IDLE [wait], IDLE_US [50], RT_PRIO [""], SHAPE [one] (see netns-rack.sh);
#   GUEST_CPUS, SWITCH_CPUS [""]: taskset lists of the guests and of the rack and the wire
#   forwarder; GUEST_SCHED [normal|batch]: batch guests do not preempt each other on wake-up;
#   RATE_MBPS [per path: 100 at RoCE MTU 1024, 300 at 4096: one path slower than a direct link,
#   four well faster]; HOST_RATE_MBPS [fabric]: the ToRs pace their sends to a guest at this rate
#   ("fabric": the paths' summed rate, what the wire mode delivers at most; empty: unpaced);
#   DELAYS_US ["0 20 40 60"]; TAP_QLEN [1000, tun's default]: the taps' transmit queue towards
#   the guests in every mode; 1000 overflows when a TCG guest stalls (loss no switch can prevent,
#   which a lossless RoCE host link would not have); 10000 removed those drops in one run of the
#   -q 8 tests, but the quick profile failed once with it (BENCHMARKS.md); WIRE_IMPAIR [fabric|none|sprayfabric
#   impairments]; TESTS_OVERRIDE (';'-separated), PMTUS_OVERRIDE; ROUNDS [1] (each round runs
#   every mode back to back; ratios are medians over rounds); TEST_LIMIT [150], SPRAY_LIMIT [45]
#   (seconds per perftest run; spraying without reorder collapses Go-Back-N); CAPTURE [""]: 1
#   captures both ToRs' host ports to $OUT/tor-{a,b}-h1-MODE-PMTU.pcap (direct: the taps, with
#   tcpdump; wire: not captured); THREADS [""]: 1 samples the guests' qemu threads; BIN
#   [target/release]; OUT [/tmp/sprayswitch-rxe-<pid>]; CHECK [1]: exit non-zero on what
#   `rxerack mode --check` fails (every test completes and no QP exhausts its retries outside
#   spray mode; spray shows reordering; reorder on a loss-free fabric: no out-of-sequence or
#   duplicate request, sequence NAK or retry at either guest; with LOSS, losses declared, and a
#   ToR whose counters are missing or unreadable fails that check as not checked).
# Needs root and qemu-system-x86_64. Everything it creates (guests, taps, namespaces, processes)
# is removed on exit, also on failure or interruption.
set -euo pipefail
cd "$(dirname "$0")/.."

PROFILE=${1:-quick}
BIN=${BIN:-target/release}
RX="$BIN/rxerack"
[ -x "$RX" ] || { echo "rxe-rack: $RX is missing: cargo build --release --bins (or set BIN)" >&2; exit 1; }
TESTS=${TESTS_OVERRIDE:-$("$RX" tests "$PROFILE")}
PMTUS=${PMTUS_OVERRIDE:-$("$RX" pmtus "$PROFILE")}
MODES=${MODES:-"direct wire ecmp spray reorder"}
if [ "${2:-}" = list ]; then exec "$RX" list "$PROFILE" --tests "${TESTS_OVERRIDE:-}" --pmtus "$PMTUS" --modes "$MODES"; fi
RATE_MBPS=${RATE_MBPS:-}
# What the ToRs pace their sends to a guest at: HOST_RATE_MBPS, "fabric" (the paths' summed rate,
# what the wire mode delivers at most), or empty (unpaced).
HOST_RATE_MBPS=${HOST_RATE_MBPS-fabric}
host_rate_for() { [ "$HOST_RATE_MBPS" = fabric ] && echo $(($(rate_for "$1") * 4)) || echo "$HOST_RATE_MBPS"; }
rate_for() { [ -n "$RATE_MBPS" ] && echo "$RATE_MBPS" || { [ "$1" = 4096 ] && echo 300 || echo 100; }; }
DELAYS_US=${DELAYS_US:-"0 20 40 60"}
# The taps' transmit queue towards the guests, in every mode (see netns-rack.sh).
TAP_QLEN=${TAP_QLEN:-1000}
export TAP_QLEN
LOSS=${LOSS:-}
OUT=${OUT:-/tmp/sprayswitch-rxe-$$}
CHECK=${CHECK:-1}
NAME=rxe$$
HOLD_US=${HOLD_US:-20000}
LEARN_US=${LEARN_US:-20000}
RT_PRIO=${RT_PRIO:-}
GUEST_CPUS=${GUEST_CPUS:-}
SWITCH_CPUS=${SWITCH_CPUS:-}
GUEST_SCHED=${GUEST_SCHED:-normal}
IDLE=${IDLE:-wait}
IDLE_US=${IDLE_US:-50}
SHAPE=${SHAPE:-one}
ROUNDS=${ROUNDS:-1}
TEST_LIMIT=${TEST_LIMIT:-150}
SPRAY_LIMIT=${SPRAY_LIMIT:-45}
THREADS=${THREADS:-}
guest_pin=(); [ -n "$GUEST_CPUS" ] && guest_pin=(taskset -c "$GUEST_CPUS")
case "$GUEST_SCHED" in
  batch) guest_pin+=(chrt -b 0) ;;
  normal) ;;
  *) echo "rxe-rack: GUEST_SCHED is batch or normal, not '$GUEST_SCHED'" >&2; exit 2 ;;
esac
switch_pin=(); [ -n "$SWITCH_CPUS" ] && switch_pin=(taskset -c "$SWITCH_CPUS")
# The wire mode's forwarder runs as the rack's processes do: at RT_PRIO when it is set.
[ -n "$RT_PRIO" ] && switch_pin+=(chrt -f "$RT_PRIO")

command -v qemu-system-x86_64 >/dev/null || { echo "rxe-rack: qemu-system-x86_64 is missing (apt-get install qemu-system-x86)" >&2; exit 1; }
GUEST=$(scripts/rxe-guest.sh build)
mkdir -p "$OUT"
RECORDS="$OUT/records.jsonl"; : >"$RECORDS"

QEMU_PIDS=() DUMP_PIDS=() DIRECT_NS="" WIRE_PID="" SAMPLER_PID="" TORS_PID="" WIRE_PATH=""
stop_pid() { [ -n "${1:-}" ] && { kill "${2:--TERM}" "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }; return 0; }
stop_guests() { for p in "${QEMU_PIDS[@]}"; do stop_pid "$p"; done; QEMU_PIDS=(); }
stop_dumps() { for p in "${DUMP_PIDS[@]}"; do stop_pid "$p" -INT; done; DUMP_PIDS=(); }
cleanup() {
  stop_pid "$SAMPLER_PID"; SAMPLER_PID=""
  stop_pid "$TORS_PID"; TORS_PID=""
  stop_guests; stop_dumps
  stop_pid "$WIRE_PID"; WIRE_PID=""
  scripts/netns-rack.sh down "$NAME" >/dev/null 2>&1 || true
  [ -n "$DIRECT_NS" ] && ip netns del "$DIRECT_NS" 2>/dev/null || true
  DIRECT_NS=""
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# guest NS TAP NAME IP GW ROLE PEER MTU LIMIT -> boots it in the background, console in $OUT/NAME.log
guest() {
  local ns=$1 tap=$2 name=$3 ip=$4 gw=$5 role=$6 peer=$7 mtu=$8 limit=$9 d="$OUT/$3.d"
  mkdir -p "$d"
  scripts/rxe-guest.sh init >"$d/init"; chmod 755 "$d/init"
  printf 'NAME=%s\nIP=%s\nGW=%s\nMTU=%s\nROLE=%s\nPEER=%s\nTESTS="%s"\nLIMIT=%s\n' \
    "$name" "$ip" "$gw" "$mtu" "$role" "$peer" "$TESTS" "$limit" >"$d/guest.conf"
  (cd "$d" && printf 'init\nguest.conf\n' | cpio -o -H newc --quiet | gzip -1) >"$d/overlay.cpio.gz"
  cat "$GUEST/base.cpio.gz" "$d/overlay.cpio.gz" >"$d/initrd.gz"
  local mac; mac=$(printf '52:54:00:5a:%02x:%02x' "$(echo "$ip" | cut -d. -f2)" "$(echo "$ip" | cut -d. -f4 | cut -d/ -f1)")
  # csum=off: the guest computes its own TCP/UDP checksums. With checksum offload the frame
  # leaves the tap with only a partial checksum, which a userspace switch forwards as it is.
  timeout 600 ip netns exec "$ns" "${guest_pin[@]}" qemu-system-x86_64 -accel tcg -cpu qemu64 -m 256 -smp 1 \
    -nodefaults -display none -no-reboot -kernel "$GUEST/vmlinux" -initrd "$d/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1" -serial "file:$OUT/$name.log" \
    -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" \
    -device "virtio-net-pci,netdev=n0,mac=$mac,csum=off,guest_csum=off" </dev/null >"$d/qemu.log" 2>&1 &
  QEMU_PIDS+=($!)
}

# Netdev MTU for a RoCE path MTU: 1024 fits a 1500 link; 4096 needs a jumbo link.
netdev_mtu() { [ "$1" = 4096 ] && echo 9000 || echo 1500; }

# direct_up MODE MTU PMTU: the two taps on a bridge (direct) or joined by the wire forwarder.
direct_up() {
  local mode=$1 mtu=$2 pmtu=$3 t impair
  DIRECT_NS="ssr-$NAME-direct"
  ip netns add "$DIRECT_NS"
  if [ "$mode" = direct ]; then
    ip -n "$DIRECT_NS" link add br0 mtu "$mtu" type bridge
    ip -n "$DIRECT_NS" link set br0 up
  fi
  for t in ta tb; do
    ip -n "$DIRECT_NS" tuntap add "$t" mode tap
    ip -n "$DIRECT_NS" link set "$t" txqueuelen "$TAP_QLEN"
    if [ "$mode" = direct ]; then ip -n "$DIRECT_NS" link set "$t" mtu "$mtu" master br0 up
    else ip -n "$DIRECT_NS" link set "$t" mtu "$mtu" up; fi
  done
  if [ "$mode" = wire ]; then
    # One path with the fabric's mean delay and summed rate: the most any spraying over its
    # paths can give, on the same kernel paths and with one wake-up, as through the rack.
    impair=${WIRE_IMPAIR:-fabric}
    [ "$impair" = none ] && impair=""
    [ "$impair" = fabric ] && impair="delay_us=$(echo "$DELAYS_US" | awk '{s = 0; for (i = 1; i <= NF; i++) s += $i; print s / NF}'),rate_mbps=$(($(rate_for "$pmtu") * 4))"
    WIRE_PATH="path ${impair:-clean}"
    ip netns exec "$DIRECT_NS" "${switch_pin[@]}" "$BIN/sprayfabric" --backend "${BACKEND:-auto}" --path "ta:tb${impair:+,$impair}" \
      --idle "$IDLE" --idle-us "$IDLE_US" >"$OUT/wire-$pmtu.log" 2>&1 &
    WIRE_PID=$!
    for _ in $(seq 100); do grep -q "path ta <->" "$OUT/wire-$pmtu.log" && break; sleep 0.1; done
  elif [ -n "${CAPTURE:-}" ]; then
    # The same capture points as the ToRs' host ports: the client's tap (a), the server's (b).
    # Not in the wire mode: its XDP program takes frames before the kernel's packet taps.
    command -v tcpdump >/dev/null || { echo "rxe-rack: CAPTURE needs tcpdump" >&2; exit 1; }
    for t in a b; do
      ip netns exec "$DIRECT_NS" tcpdump -q -i "t$t" -B 16384 --time-stamp-precision nano \
        -w "$OUT/tor-$t-h1-$mode-$pmtu.pcap" >/dev/null 2>&1 &
      DUMP_PIDS+=($!)
    done
    sleep 1
  fi
}

run_mode() {  # ROUND MODE PMTU
  local round=$1 mode=$2 pmtu=$3 mtu t0 limit=$TEST_LIMIT srv_tap cli_tap st="/run/sprayswitch-rack/$NAME"
  mtu=$(netdev_mtu "$pmtu"); t0=$(date +%s.%N)
  local args=(--dir "$OUT" --round "$round" --mode "$mode" --pmtu "$pmtu" --tests "$TESTS" --loss "$LOSS" --records "$RECORDS")
  if [ "$mode" = direct ] || [ "$mode" = wire ]; then
    direct_up "$mode" "$mtu" "$pmtu"
    srv_tap=tb; cli_tap=ta
    guest "$DIRECT_NS" tb "srv-$mode-$pmtu" 10.9.0.2/24 "" server "" "$mtu" "$limit"
    guest "$DIRECT_NS" ta "cli-$mode-$pmtu" 10.9.0.1/24 "" client 10.9.0.2 "$mtu" "$limit"
  else
    local policy=round_robin reorder=1 ns_b="ssr-$NAME-rack" ns_a="ssr-$NAME-rack"
    [ "$mode" = ecmp ] && policy=ecmp
    [ "$mode" = spray ] && reorder=0 limit=$SPRAY_LIMIT
    SHAPE=$SHAPE HOST_KIND=tap HOSTS=1 RT_PRIO=$RT_PRIO RACK_CPUS=$SWITCH_CPUS IDLE=$IDLE IDLE_US=$IDLE_US \
      HOLD_US=$HOLD_US LEARN_US=$LEARN_US MTU=$mtu BACKEND=${BACKEND:-auto} POLICY=$policy REORDER=$reorder \
      RATE_MBPS=$(rate_for "$pmtu") HOST_RATE_MBPS=$(host_rate_for "$pmtu") DELAYS_US=$DELAYS_US LOSS=$LOSS BIN=$BIN \
      scripts/netns-rack.sh up "$NAME" >"$OUT/rack-$mode-$pmtu.log"
    if [ "$SHAPE" = one ]; then srv_tap=b-h1; cli_tap=a-h1
    else srv_tap=h1; cli_tap=h1; ns_b="ssr-$NAME-torb"; ns_a="ssr-$NAME-tora"; fi
    guest "$ns_b" "$srv_tap" "srv-$mode-$pmtu" 10.2.1.2/24 10.2.1.1 server "" "$mtu" "$limit"
    guest "$ns_a" "$cli_tap" "cli-$mode-$pmtu" 10.1.1.2/24 10.1.1.1 client 10.2.1.2 "$mtu" "$limit"
    if [ -n "${CAPTURE:-}" ]; then
      for t in a b; do "$BIN/sprayctl" -s "$st/tor-$t.sock" capture start h1 "$OUT/tor-$t-h1-$mode-$pmtu.pcap" >/dev/null; done
    fi
    # The ToRs' counters at each test's end: what each guest sent that reached its ToR.
    "$RX" tors --sprayctl "$BIN/sprayctl" --sock-a "$st/tor-a.sock" --sock-b "$st/tor-b.sock" \
      --client-log "$OUT/cli-$mode-$pmtu.log" --out "$OUT/tors-$mode-$pmtu.txt" &
    TORS_PID=$!
    args+=(--tor-samples "$OUT/tors-$mode-$pmtu.txt")
  fi
  if [ -n "$THREADS" ]; then
    # The qemu processes are the children of the `timeout` processes started (ip netns exec,
    # taskset and chrt exec in place); the server was booted first.
    local spid cpid
    sleep 0.5
    spid=$(pgrep -P "${QEMU_PIDS[0]}" | head -1) || true; cpid=$(pgrep -P "${QEMU_PIDS[1]}" | head -1) || true
    if [ -n "$spid" ] && [ -n "$cpid" ]; then
      "$RX" sample --server "$spid:$srv_tap" --client "$cpid:$cli_tap" --client-log "$OUT/cli-$mode-$pmtu.log" \
        --out "$OUT/threads-$mode-$pmtu.txt" &
      SAMPLER_PID=$!
      args+=(--threads "$OUT/threads-$mode-$pmtu.txt")
    else
      echo "rxe-rack: THREADS: the guests' qemu processes were not found; not sampled" >&2
    fi
  fi
  for p in "${QEMU_PIDS[@]}"; do wait "$p" || true; done
  QEMU_PIDS=()
  stop_pid "$SAMPLER_PID"; SAMPLER_PID=""
  # It ends by itself once the client's console says all tests are done (a moment after).
  for _ in $(seq 20); do kill -0 "$TORS_PID" 2>/dev/null || break; sleep 0.1; done
  stop_pid "$TORS_PID"; TORS_PID=""
  stop_dumps
  if [ "$mode" = direct ] || [ "$mode" = wire ]; then
    # The taps' own counters (TX dropped: a guest that did not take what was sent to it).
    ip -n "$DIRECT_NS" -s link show >"$OUT/links-$mode-$pmtu.txt" 2>&1 || true
  fi
  if [ "$mode" = wire ]; then
    "$RX" usage --since "$t0" --note "$WIRE_PATH" "forwarder=$WIRE_PID" >"$OUT/usage-$mode-$pmtu.txt"
    stop_pid "$WIRE_PID"; WIRE_PID=""
    args+=(--late-log "$OUT/wire-$pmtu.log" --wire-log "$OUT/wire-$pmtu.log")
  elif [ "$mode" != direct ]; then
    [ -n "${CAPTURE:-}" ] && for t in a b; do "$BIN/sprayctl" -s "$st/tor-$t.sock" capture stop h1 >/dev/null || true; done
    local procs=() p
    if [ "$SHAPE" = one ]; then procs=(rack); else procs=(tor-a fabric tor-b); fi
    local named=()
    for p in "${procs[@]}"; do named+=("$p=$(cat "$st/$p.pid" 2>/dev/null || echo 0)"); done
    local sw="$OUT/switches-$mode-$pmtu.txt" n
    : >"$sw"
    for t in a b; do
      "$BIN/sprayctl" -s "$st/tor-$t.sock" --json show ports >"$OUT/ports-$t-$mode-$pmtu.json" 2>/dev/null || true
      # A ToR that does not answer leaves no counters: said here, and `rxerack mode --check`
      # fails a lossy reorder run on it (the ToRs' losses were not checked).
      "$BIN/sprayctl" -s "$st/tor-$t.sock" --json show counters >"$OUT/counters-$t-$mode-$pmtu.json" 2>"$OUT/counters-$t-$mode-$pmtu.err" ||
        echo "rxe-rack: tor-$t did not answer 'show counters' ($mode, RoCE MTU $pmtu): $(head -c 300 "$OUT/counters-$t-$mode-$pmtu.err")" >&2
      for w in ports hosts counters; do
        echo "== tor-$t show $w"; "$BIN/sprayctl" -s "$st/tor-$t.sock" show "$w" 2>&1 || true
      done >>"$sw"
    done
    # The taps' and links' own counters: drops towards a guest happen there, not in the switch.
    for n in rack tora torb; do
      ip netns pids "ssr-$NAME-$n" >/dev/null 2>&1 || continue
      echo "== ssr-$NAME-$n links"; ip -n "ssr-$NAME-$n" -s link show 2>&1 || true
    done >>"$sw"
    "$RX" usage --since "$t0" "${named[@]}" >"$OUT/usage-$mode-$pmtu.txt"
    stop_guests
    # The rack's logs end with the fabric's per-path counters and lateness: keep them.
    KEEP_LOGS="$OUT" scripts/netns-rack.sh down "$NAME" >/dev/null 2>&1 || true
    for f in "$OUT"/tor-?.log "$OUT"/fabric.log "$OUT"/rack.log; do [ -e "$f" ] && mv "$f" "${f%.log}-$mode-$pmtu.log"; done
    for f in "$OUT"/{rack,fabric}-"$mode-$pmtu".log; do [ -e "$f" ] && args+=(--late-log "$f"); done
    args+=(--tor-b "$OUT/counters-b-$mode-$pmtu.json" --tor-a "$OUT/counters-a-$mode-$pmtu.json")
    args+=(--ports-json "$OUT/ports-a-$mode-$pmtu.json" --ports-json "$OUT/ports-b-$mode-$pmtu.json")
  fi
  cleanup
  [ "$CHECK" = 1 ] && args+=(--check)
  "$RX" mode "${args[@]}" || FAIL=1
}

FAIL=0
OUT_ROOT=$OUT
for round in $(seq "$ROUNDS"); do
  [ "$ROUNDS" -gt 1 ] && { OUT="$OUT_ROOT/round-$round"; mkdir -p "$OUT"; }
  for pmtu in $PMTUS; do
    for mode in $MODES; do
      echo "rxe-rack: round $round/$ROUNDS: $mode, RoCE MTU $pmtu: $TESTS" >&2
      run_mode "$round" "$mode" "$pmtu"
    done
  done
done
OUT=$OUT_ROOT
"$RX" summary --records "$RECORDS"
rates=$(for m in $PMTUS; do printf '%s Mbit/s each at RoCE MTU %s, ' "$(rate_for "$m")" "$m"; done)
echo "fabric: 4 paths, ${rates}delays ${DELAYS_US} us, loss '${LOSS:-none}'; logs in $OUT"
echo "CPUs: guests on ${GUEST_CPUS:-all} (policy $GUEST_SCHED), switches and forwarders on ${SWITCH_CPUS:-all} (idle policy $IDLE)"
exit $FAIL
