#!/usr/bin/env bash
# perftest between real Soft-RoCE (rdma_rxe) hosts through sprayswitch.
#
#   client guest ── tap ┐ tor-a ═══ fabric emulator, 4 skewed paths ═══ tor-b ┌ tap ── server guest
#
# Two qemu guests (TCG; stock Debian kernel, built by scripts/rxe-guest.sh) attach to tap
# devices that are the ToRs' downlinks of the rack of scripts/netns-rack.sh (by default the
# rack in one process, sprayrackd: see SHAPE). For each
# fabric mode (ecmp, spray without reorder, spray with reorder) and each RoCE MTU, the guests run
# the perftest list; then the same guests run it over a direct link (a Linux bridge) as the
# baseline. Prints one table row per test with the goodput, the responder's out-of-sequence and
# duplicate requests, the requester's sequence-error NAKs and retries, and what the destination
# ToR's reorder stage did; exits non-zero when an expectation fails (see CHECK below).
#
# Usage: scripts/rxe-rack.sh [quick|full]
#   quick  one ib_write_bw per mode, RoCE MTU 1024 (CI)
#   full   ib_write_bw, ib_read_bw, ib_send_bw, ib_write_lat at RoCE MTU 1024 and 4096
# Modes: direct (the two guests on one Linux bridge: the baseline), wire (the two guests joined
# by a bare userspace forwarder on the switches' backend, by default with the fabric's
# capacity and mean delay on its one path: see WIRE_IMPAIR),
# ecmp, spray (without reorder) and reorder (spray with reorder) through the rack.
# Environment: MODES ["direct wire ecmp spray reorder"], LOSS ("" or e.g. "0 0.01 0 0": per path),
#   HOLD_US, LEARN_US [20000] (reorder timers, see below), IDLE [wait], IDLE_US [50],
#   RT_PRIO [""] (see netns-rack.sh), GUEST_CPUS and SWITCH_CPUS [""]: CPU lists (taskset -c)
#   of the guests and of the rack's processes and the wire forwarder (e.g. 1 and 0: a core for
#   the switch alone; the guests get the same core in every mode), GUEST_SCHED [normal]:
#   the guests' scheduling policy, normal (SCHED_OTHER) or batch (SCHED_BATCH: a guest woken
#   by a packet does not preempt the other; see below), PMTUS_OVERRIDE (e.g.
#   "4096"), SHAPE [one] (see netns-rack.sh: the rack in one process and thread, or split in
#   three processes),
#   ROUNDS [1]: repeat everything round by round (direct and the other modes back to back in
#   each round) and print each goodput ratio as the median over the rounds, with every value,
#   RATE_MBPS [per fabric path; default 100 at RoCE MTU 1024, 300 at 4096, see below], DELAYS_US ["0 20 40 60"], BIN [target/release],
#   OUT [/tmp/sprayswitch-rxe-<pid>] (console logs, switch logs and counters), CHECK [1],
#   CAPTURE [""]: 1 captures both ToRs' host ports to $OUT/tor-{a,b}-h1-MODE-PMTU.pcap (in the
#   direct mode the client's and the server's taps, with tcpdump; the wire mode is not
#   captured); `rocecap loop` reads them,
#   WIRE_IMPAIR [fabric]: impairments of the wire mode's one path. "fabric": the fabric's mean
#   path delay and the four paths' summed rate, one link of the fabric's latency and capacity:
#   the most any spraying over those paths can give, so "reorder/wire" in the ratio table is
#   what spraying and reordering cost against it; "none": a clean path (what a bare userspace
#   hop costs); or impairments as sprayfabric takes them (e.g. "delay_us=30"),
#   TEST_LIMIT [150] and SPRAY_LIMIT [45]: seconds a perftest run may take (spraying without
#   reorder collapses Go-Back-N, so it gets less time before it counts as not completed),
#   THREADS [""]: 1 samples the guests' qemu threads on the host every 0.2 s (CPU time,
#   run-queue wait, voluntary and involuntary context switches: /proc/PID/task/*/schedstat
#   and status) and prints them per test over its middle 90% of packets: where the guests'
#   core goes.
# CHECK=1 fails the run unless: every test completes in direct, wire, ecmp and reorder modes; spray
# mode shows out-of-sequence requests at the responder; reorder mode shows none when the fabric
# loses nothing, and hold timeouts when it does (LOSS).
# Needs root and qemu-system-x86_64. Everything it creates (guests, taps, namespaces, processes)
# is removed on exit, also on failure or interruption.
set -euo pipefail
cd "$(dirname "$0")/.."

PROFILE=${1:-quick}
MODES=${MODES:-"direct wire ecmp spray reorder"}
# Rate of each fabric path. The experiment needs one path slower than what the guests can do on
# a direct link (so ECMP, pinned to one path, shows its limit) and all four together well
# faster (so spraying is limited by the switch, not by the fabric). The guests write at
# 130-260 Mbit/s at RoCE MTU 1024 and 360-590 at 4096 (BENCHMARKS.md, stop 14): 100 and 300
# per path.
# (Until stop 14, 150 at 4096, chosen when the guests did 330-400 there: four such paths then
# offered little more than the guests alone and were the limit.)
RATE_MBPS=${RATE_MBPS:-}
rate_for() { [ -n "$RATE_MBPS" ] && echo "$RATE_MBPS" || { [ "$1" = 4096 ] && echo 300 || echo 100; }; }
DELAYS_US=${DELAYS_US:-"0 20 40 60"}
LOSS=${LOSS:-}
BIN=${BIN:-target/release}
OUT=${OUT:-/tmp/sprayswitch-rxe-$$}
CHECK=${CHECK:-1}
NAME=rxe$$
# Reorder timers. Two TCG guests keep both cores of a small machine busy, and the switch
# processes then forward with millisecond delays (measured p90 4.7 ms, max 7.8 ms one way):
# the hold timeout must exceed that skew, or scheduling stalls look like loss. 20 ms is above
# it and above rxe's retransmission timeout (8.4 ms), so a real loss is repaired by the
# requester's retransmission. The switch's own default (500 us) is for dedicated cores.
HOLD_US=${HOLD_US:-20000}
LEARN_US=${LEARN_US:-20000}
RT_PRIO=${RT_PRIO:-}   # SCHED_FIFO priority of switches and fabric (default none; see README)
# CPUs (taskset -c lists) of the guests and of the switches, fabric and wire forwarder: by
# default everything shares every core. GUEST_CPUS=1 SWITCH_CPUS=0 gives the switch a core of
# its own, as a ToR has, and the guests the same one core in every mode (direct included).
GUEST_CPUS=${GUEST_CPUS:-}
SWITCH_CPUS=${SWITCH_CPUS:-}
guest_pin=(); [ -n "$GUEST_CPUS" ] && guest_pin=(taskset -c "$GUEST_CPUS")
# Scheduling policy of the guests. Two guests share the cores here, as two real hosts never
# do. Under SCHED_OTHER (normal) a guest woken by a packet from another core (the switch's) can
# preempt the guest that runs, while on the bridge a packet arrives in the sender's own context
# and the receiver waits its turn (measured: the receiving guest takes 3-4 packets per interrupt
# through any userspace hop, 8 from the bridge).
# SCHED_BATCH (batch) guests never preempt on wake-up, in every mode alike. Neither is two hosts
# with a CPU each; BENCHMARKS.md (stop 16) has both.
GUEST_SCHED=${GUEST_SCHED:-normal}
case "$GUEST_SCHED" in
  batch) guest_pin+=(chrt -b 0) ;;
  normal) ;;
  *) echo "rxe-rack: GUEST_SCHED is batch or normal, not '$GUEST_SCHED'" >&2; exit 2 ;;
esac
switch_pin=(); [ -n "$SWITCH_CPUS" ] && switch_pin=(taskset -c "$SWITCH_CPUS")
# Idle policy of switches and fabric (netns-rack.sh): event-driven, because the guests keep the
# cores busy and a switch that spins or sleeps on a timer then forwards milliseconds late.
IDLE=${IDLE:-wait}
IDLE_US=${IDLE_US:-50}
# How the rack runs (netns-rack.sh): one (ToR A, fabric and ToR B in one process and one
# thread, sprayrackd) or split (three processes joined by veth pairs).
SHAPE=${SHAPE:-one}
ROUNDS=${ROUNDS:-1}             # repeat every mode this many times (round by round)
TEST_LIMIT=${TEST_LIMIT:-150}   # seconds per perftest run in a guest
SPRAY_LIMIT=${SPRAY_LIMIT:-45}  # ... when spraying without reorder
THREADS=${THREADS:-}            # 1: sample the guests' qemu threads (see the top)
LIMIT=$TEST_LIMIT
case "$PROFILE" in
  quick) TESTS="ib_write_bw -s 65536 -n 300"; PMTUS="1024" ;;
  full) TESTS="ib_write_bw -s 65536 -n 1000;ib_read_bw -s 65536 -n 1000;ib_send_bw -s 65536 -n 1000;ib_write_lat -s 64 -n 1000"; PMTUS="1024 4096" ;;
  *) sed -n '2,/^set -euo/{/^set/!p}' "$0"; exit 2 ;;
esac
TESTS=${TESTS_OVERRIDE:-$TESTS}
PMTUS=${PMTUS_OVERRIDE:-$PMTUS}

command -v qemu-system-x86_64 >/dev/null || { echo "rxe-rack: qemu-system-x86_64 is missing (apt-get install qemu-system-x86)" >&2; exit 1; }
GUEST=$(scripts/rxe-guest.sh build)
mkdir -p "$OUT"

QEMU_PIDS=()
DIRECT_NS=""
WIRE_PID=""
DUMP_PIDS=()
SAMPLER_PID=""
# Stops the guests this script started (by PID).
stop_guests() {
  for p in "${QEMU_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${QEMU_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  QEMU_PIDS=()
}
cleanup() {
  stop_sampler
  stop_guests
  for p in "${DUMP_PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  DUMP_PIDS=()
  if [ -n "$WIRE_PID" ]; then kill "$WIRE_PID" 2>/dev/null || true; wait "$WIRE_PID" 2>/dev/null || true; fi
  WIRE_PID=""
  scripts/netns-rack.sh down "$NAME" >/dev/null 2>&1 || true
  [ -n "$DIRECT_NS" ] && ip netns del "$DIRECT_NS" 2>/dev/null || true
  DIRECT_NS=""
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# lateness DIR LOG... -> how late the fabric released packets in direction DIR ("a->b"), over
# all paths, from the "released late by" lines the rack or the fabric prints as it stops.
lateness() {
  local dir=$1; shift
  cat "$@" 2>/dev/null | awk -v dir="$dir" '
    $0 ~ dir " released late by" {
      m = 0
      for (i = 1; i < NF; i++) {
        if ($i ~ /^(<=|>)[0-9]/) { v = $(i + 1); sub(",", "", v); c[$i] += v; m += v }
        if ($i == "mean") mean = $(i + 1)
      }
      n += m; sum += mean * m
    }
    END {
      if (n == 0) { printf "%s no packets released", dir; exit }
      over100 = n - c["<=10us"] - c["<=50us"] - c["<=100us"]
      over1ms = c["<=5ms"] + c[">5ms"]
      printf "%s %d packets released a mean %.0f us late, %.1f%% over 100 us, %.2f%% over 1 ms", dir, n, sum / n, 100 * over100 / n, 100 * over1ms / n
    }'
}

# guest NS TAP NAME IP GW ROLE PEER MTU -> boots it in the background, console in $OUT/NAME.log
guest() {
  local ns=$1 tap=$2 name=$3 ip=$4 gw=$5 role=$6 peer=$7 mtu=$8 d="$OUT/$3.d"
  mkdir -p "$d"
  scripts/rxe-guest.sh init >"$d/init"; chmod 755 "$d/init"
  printf 'NAME=%s\nIP=%s\nGW=%s\nMTU=%s\nROLE=%s\nPEER=%s\nTESTS="%s"\nLIMIT=%s\n' \
    "$name" "$ip" "$gw" "$mtu" "$role" "$peer" "$TESTS" "$LIMIT" >"$d/guest.conf"
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

# counter NAME FILE -> value of an rxe hw counter printed by the guest
counter() { tr -d '\r' <"$2" | awk -F= -v k="  $1" '$1 == k {print $2}' | tail -1; }

ROWS="$OUT/rows.txt"; : >"$ROWS"
CPUS="$OUT/cpu.txt"; : >"$CPUS"
GUESTS="$OUT/guests.txt"; : >"$GUESTS"
LATE="$OUT/late.txt"; : >"$LATE"
RATIOS="$OUT/ratios.txt"; : >"$RATIOS"
THREADSF="$OUT/threads.txt"; : >"$THREADSF"
FAIL=0
HZ=$(getconf CLK_TCK)
# wakeups PID -> times the process's threads went to sleep and were woken (voluntary context
# switches, summed over its threads): each is a context switch taken from a guest's core.
wakeups() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches/ {s += $2} END {print s + 0}'; }
# cpu_s PID -> CPU seconds (user + system) the process has used so far.
cpu_s() { awk -v hz="$HZ" '{printf "%.1f", ($14 + $15) / hz}' "/proc/$1/stat" 2>/dev/null || echo "?"; }
# guest_stats LOG -> what a guest's vCPU and NIC did during its tests (the "stats before/after"
# lines its /init prints around each test, summed): NIC interrupts, packets per interrupt, and
# the CPU time split (USER_HZ ticks).
guest_stats() {
  tr -d '\r' <"$1" | awk '
    $1 == "stats" { sign = ($2 == "before") ? -1 : 1
      if ($3 == "cpu") { u += sign * $4; sy += sign * $6; id += sign * $7; si += sign * $10 }
      if ($3 == "irq") irq += sign * $4
      if ($3 == "rx") pk += sign * ($4 + $6) }
    END { printf "%d interrupts, %.1f packets each; cpu ticks user %d system %d softirq %d idle %d", irq, (irq > 0 ? pk / irq : 0), u, sy, si, id }'
}
# sample_threads FILE SRV_PID SRV_TAP CLI_PID CLI_TAP CLI_LOG: until killed, every 0.2 s, a
# line "P time server_packets client_packets tests_started tests_ended" (the packets each
# guest's tap carried both ways; the tests the client's console announced) and per thread of
# each guest's qemu a line "T time role tid is_main run_ns wait_ns voluntary involuntary"
# (schedstat: time on a CPU and waiting for one; context switches). Builtins but one awk per
# sample, so that the sampling takes little from the switch's core.
sample_threads() {
  local file=$1 spid=$2 stap=$3 cpid=$4 ctap=$5 clog=$6
  local now role pid tap d tid run wait v nv line pk f out tl lines
  while :; do
    # Both guests gone (they power off right after their last test): nothing left to sample.
    [ -e "/proc/$spid" ] || [ -e "/proc/$cpid" ] || break
    now=$EPOCHREALTIME
    out="P $now" tl=""
    for role in srv cli; do
      if [ $role = srv ]; then pid=$spid tap=$stap; else pid=$cpid tap=$ctap; fi
      pk=0 lines=()
      { mapfile -t lines <"/proc/$pid/net/dev"; } 2>/dev/null || true
      for line in "${lines[@]}"; do
        line=${line#"${line%%[![:space:]]*}"}
        case $line in "$tap:"*) read -ra f <<<"${line#*:}"; pk=$((f[1] + f[9])) ;; esac
      done
      out="$out $pk"
      for d in /proc/"$pid"/task/*; do
        [ -r "$d/schedstat" ] || continue
        tid=${d##*/}; v=0; nv=0
        { read -r run wait _ <"$d/schedstat"; } 2>/dev/null || continue
        # mapfile takes the file in one read: /proc regenerates it on every read, and a line read
        # in pieces (as `while read` does) can mix two versions of it.
        lines=()
        { mapfile -t lines <"$d/status"; } 2>/dev/null || true
        for line in "${lines[@]}"; do
          case $line in
            voluntary_ctxt_switches:*) v=${line##*[[:space:]]} ;;
            nonvoluntary_ctxt_switches:*) nv=${line##*[[:space:]]} ;;
          esac
        done
        tl="$tl"$'\n'"T $now $role $tid $((tid == pid)) $run $wait $v $nv"
      done
    done
    out="$out $(awk '/=== client START/ {s++} /=== client END/ {e++} END {print s + 0, e + 0}' "$clog" 2>/dev/null)$tl"
    echo "$out" >>"$file"
    sleep 0.2
  done
}
stop_sampler() {
  if [ -n "$SAMPLER_PID" ]; then kill "$SAMPLER_PID" 2>/dev/null || true; wait "$SAMPLER_PID" 2>/dev/null || true; fi
  SAMPLER_PID=""
}
# thread_report FILE MODE PMTU -> per test of the mode, over the middle 90% of the packets the
# two guests exchanged (so that setup and teardown do not count): each guest's qemu I/O thread
# (the main loop: the tap and virtio) and vCPU thread (its busiest other thread): CPU seconds,
# seconds waiting for a CPU, voluntary/involuntary context switches; and the CPU seconds all
# their threads had.
thread_report() {
  local names=() t
  IFS=';' read -ra T <<<"$TESTS"
  for t in "${T[@]}"; do names+=("$(echo "$t" | awk '{print $1}')"); done
  awk -v mode="$2" -v pmtu="$3" -v names="${names[*]}" '
    $1 == "P" { n++; tm[n] = $2; pk[n] = $3 + $4; st[n] = $5; en[n] = $6 }
    $1 == "T" { k = n SUBSEP $3 SUBSEP $4; main[$3, $4] = $5; run[k] = $6; wt[k] = $7; vol[k] = $8; inv[k] = $9; tids[$3, $4] = 1 }
    END {
      split(names, nm, " ")
      for (t = 1; t <= length(nm); t++) {
        a = 0; b = 0
        for (i = 1; i <= n; i++) { if (!a && st[i] >= t) a = i; if (!b && en[i] >= t) b = i }
        # The last test: the guests may power off before a sample sees its end.
        if (a && !b && t == st[n]) b = n
        if (!a || !b || pk[b] - pk[a] < 200) continue
        lo = pk[a] + 0.05 * (pk[b] - pk[a]); hi = pk[b] - 0.05 * (pk[b] - pk[a]); i0 = 0; i1 = 0
        for (i = a; i <= b; i++) { if (!i0 && pk[i] >= lo) i0 = i; if (!i1 && pk[i] >= hi) i1 = i }
        if (!i0 || !i1 || i1 <= i0) continue
        line = sprintf("%s %s %s: %.2f s, %d packets:", mode, pmtu, nm[t], tm[i1] - tm[i0], pk[i1] - pk[i0])
        all = 0
        for (r = 1; r <= 2; r++) {
          role = (r == 1) ? "srv" : "cli"; best = ""; bestrun = -1; io = ""
          for (x in tids) {
            split(x, q, SUBSEP); if (q[1] != role) continue
            k0 = i0 SUBSEP role SUBSEP q[2]; k1 = i1 SUBSEP role SUBSEP q[2]
            if (!(k0 in run) || !(k1 in run)) continue
            d = run[k1] - run[k0]; all += d
            if (main[role, q[2]]) io = q[2]; else if (d > bestrun) { bestrun = d; best = q[2] }
          }
          split("io vcpu", lab, " "); who[1] = io; who[2] = best
          for (j = 1; j <= 2; j++) {
            if (who[j] == "") continue
            k0 = i0 SUBSEP role SUBSEP who[j]; k1 = i1 SUBSEP role SUBSEP who[j]
            line = line sprintf(" %s %s %.2f s, waited %.2f s, %d/%d switches;", (role == "srv" ? "server" : "client"), lab[j],
              (run[k1] - run[k0]) / 1e9, (wt[k1] - wt[k0]) / 1e9, vol[k1] - vol[k0], inv[k1] - inv[k0])
          }
        }
        printf "%s all their threads %.2f s\n", line, all / 1e9
      }
    }' "$1"
}
run_mode() {  # mode pmtu
  local mode=$1 pmtu=$2 mtu impair=""; mtu=$(netdev_mtu "$2")
  local t0; t0=$(date +%s.%N)
  local srv_ns cli_ns srv_gw cli_gw srv_ip=10.2.1.2 cli_ip=10.1.1.2 srv_tap cli_tap
  if [ "$mode" = direct ] || [ "$mode" = wire ]; then
    DIRECT_NS="ssr-$NAME-direct"
    ip netns add "$DIRECT_NS"
    if [ "$mode" = direct ]; then
      ip -n "$DIRECT_NS" link add br0 mtu "$mtu" type bridge
      ip -n "$DIRECT_NS" link set br0 up
    fi
    for t in ta tb; do
      ip -n "$DIRECT_NS" tuntap add "$t" mode tap
      if [ "$mode" = direct ]; then
        ip -n "$DIRECT_NS" link set "$t" mtu "$mtu" master br0 up
      else
        ip -n "$DIRECT_NS" link set "$t" mtu "$mtu" up
      fi
    done
    if [ "$mode" = wire ]; then
      # The two taps joined by a bare userspace forwarder: the fabric emulator with one path
      # (WIRE_IMPAIR), on the switches' backend and idle policy. Every frame crosses the same
      # kernel paths and one wake-up as through the rack; no switching, no spraying.
      impair=${WIRE_IMPAIR:-fabric}
      [ "$impair" = none ] && impair=""
      if [ "$impair" = fabric ]; then
        impair="delay_us=$(echo "$DELAYS_US" | awk '{s = 0; for (i = 1; i <= NF; i++) s += $i; print s / NF}'),rate_mbps=$(($(rate_for "$pmtu") * 4))"
      fi
      ip netns exec "$DIRECT_NS" "${switch_pin[@]}" "$BIN/sprayfabric" --backend "${BACKEND:-auto}" --path "ta:tb${impair:+,$impair}" \
        --idle "$IDLE" --idle-us "$IDLE_US" >"$OUT/wire-$pmtu.log" 2>&1 &
      WIRE_PID=$!
      for _ in $(seq 100); do grep -q "path ta <->" "$OUT/wire-$pmtu.log" && break; sleep 0.1; done
    fi
    if [ -n "${CAPTURE:-}" ] && [ "$mode" = direct ]; then
      # The same two capture points as the ToRs' host ports: the client's tap (a) and the
      # server's (b), with tcpdump (whole frames: rocecap parses them; nanosecond timestamps).
      # Not in the wire mode: its forwarder's XDP program takes the frames before the kernel's
      # packet taps see them.
      command -v tcpdump >/dev/null || { echo "rxe-rack: CAPTURE needs tcpdump for the $mode mode" >&2; exit 1; }
      for t in a b; do
        ip netns exec "$DIRECT_NS" tcpdump -q -i "t$t" -B 16384 --time-stamp-precision nano \
          -w "$OUT/tor-$t-h1-$mode-$pmtu.pcap" >/dev/null 2>&1 &
        DUMP_PIDS+=($!)
      done
      sleep 1
    fi
    srv_ns=$DIRECT_NS; cli_ns=$DIRECT_NS; srv_gw=""; cli_gw=""
    srv_ip=10.9.0.2; cli_ip=10.9.0.1
    srv_tap=tb; cli_tap=ta
    guest "$srv_ns" tb "srv-$mode-$pmtu" "$srv_ip/24" "" server "" "$mtu"
    guest "$cli_ns" ta "cli-$mode-$pmtu" "$cli_ip/24" "" client "$srv_ip" "$mtu"
  else
    local policy=round_robin reorder=1 backend=${BACKEND:-auto}
    # Spraying without reorder collapses Go-Back-N: give it less time before calling it.
    [ "$mode" = spray ] && LIMIT=$SPRAY_LIMIT
    [ "$mode" = ecmp ] && policy=ecmp
    [ "$mode" = spray ] && reorder=0
    SHAPE=$SHAPE HOST_KIND=tap HOSTS=1 RT_PRIO=$RT_PRIO RACK_CPUS=$SWITCH_CPUS IDLE=$IDLE IDLE_US=$IDLE_US HOLD_US=$HOLD_US LEARN_US=$LEARN_US MTU=$mtu BACKEND=$backend POLICY=$policy REORDER=$reorder \
      RATE_MBPS=$(rate_for "$pmtu") DELAYS_US=$DELAYS_US LOSS=$LOSS BIN=$BIN \
      scripts/netns-rack.sh up "$NAME" >"$OUT/rack-$mode-$pmtu.log"
    if [ "$SHAPE" = one ]; then
      srv_tap=b-h1; cli_tap=a-h1
      guest "ssr-$NAME-rack" b-h1 "srv-$mode-$pmtu" "$srv_ip/24" 10.2.1.1 server "" "$mtu"
      guest "ssr-$NAME-rack" a-h1 "cli-$mode-$pmtu" "$cli_ip/24" 10.1.1.1 client "$srv_ip" "$mtu"
    else
      srv_tap=h1; cli_tap=h1
      guest "ssr-$NAME-torb" h1 "srv-$mode-$pmtu" "$srv_ip/24" 10.2.1.1 server "" "$mtu"
      guest "ssr-$NAME-tora" h1 "cli-$mode-$pmtu" "$cli_ip/24" 10.1.1.1 client "$srv_ip" "$mtu"
    fi
    if [ -n "${CAPTURE:-}" ]; then
      for t in a b; do
        "$BIN/sprayctl" -s "/run/sprayswitch-rack/$NAME/tor-$t.sock" capture start h1 "$OUT/tor-$t-h1-$mode-$pmtu.pcap" >/dev/null
      done
    fi
  fi
  if [ -n "$THREADS" ]; then
    # The guests were booted server first: their qemu processes are the children of the
    # `timeout` processes started (ip netns exec, taskset and chrt exec in place).
    local spid cpid
    sleep 0.5
    spid=$(pgrep -P "${QEMU_PIDS[0]}" | head -1); cpid=$(pgrep -P "${QEMU_PIDS[1]}" | head -1)
    if [ -n "$spid" ] && [ -n "$cpid" ]; then
      sample_threads "$OUT/threads-$mode-$pmtu.txt" "$spid" "$srv_tap" "$cpid" "$cli_tap" "$OUT/cli-$mode-$pmtu.log" &
      SAMPLER_PID=$!
    else
      echo "rxe-rack: THREADS: the guests' qemu processes were not found; not sampled" >&2
    fi
  fi
  for p in "${QEMU_PIDS[@]}"; do wait "$p" || true; done
  QEMU_PIDS=()
  if [ -n "$SAMPLER_PID" ]; then
    stop_sampler
    local reported; reported=$(thread_report "$OUT/threads-$mode-$pmtu.txt" "$mode" "$pmtu")
    [ -n "$reported" ] && echo "$reported" >>"$THREADSF"
    # Every mode but spraying without reorder completes its tests: each must have a report.
    if [ "$CHECK" = 1 ] && [ "$mode" != spray ] && [ -z "$reported" ]; then
      echo "FAIL: THREADS: no thread report for $mode $pmtu (see $OUT/threads-$mode-$pmtu.txt)" >&2; FAIL=1
    fi
  fi
  LIMIT=$TEST_LIMIT
  for p in "${DUMP_PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  DUMP_PIDS=()
  local st="/run/sprayswitch-rack/$NAME" tb_json="{}"
  if [ "$mode" != direct ] && [ -n "${CAPTURE:-}" ]; then
    for t in a b; do "$BIN/sprayctl" -s "$st/tor-$t.sock" capture stop h1 >/dev/null || true; done
  fi
  if [ "$mode" = wire ] && [ -n "$WIRE_PID" ]; then
    local wall; wall=$(echo "$(date +%s.%N) $t0" | awk '{printf "%.0f", $1 - $2}')
    local c w; c=$(cpu_s "$WIRE_PID"); w=$(wakeups "$WIRE_PID")
    kill -TERM "$WIRE_PID" 2>/dev/null || true; wait "$WIRE_PID" 2>/dev/null || true; WIRE_PID=""
    local n; n=$(awk '/^path 0: a->b rx / {gsub(";", ""); print $5 + $12}' "$OUT/wire-$pmtu.log")
    echo "wire $pmtu (path ${impair:-clean}): forwarder ${c}s in ${wall}s ($(awk -v a="$c" -v w="$wall" 'BEGIN {printf "%.2f", a / w}') cores); $w wake-ups for ${n:-?} packets from the guests ($(awk -v a="$w" -v b="${n:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "-" }') per packet)" >>"$CPUS"
    echo "wire $pmtu: $(lateness a-\>b "$OUT/wire-$pmtu.log"); $(lateness b-\>a "$OUT/wire-$pmtu.log")" >>"$LATE"
  fi
  if [ "$mode" != direct ] && [ "$mode" != wire ]; then
    # What the rack's processes took from the two cores the guests run on.
    local wall cpus="" p procs="tor-a fabric tor-b"
    [ "$SHAPE" = one ] && procs=rack
    wall=$(echo "$(date +%s.%N) $t0" | awk '{printf "%.0f", $1 - $2}')
    local wakes=0 hostpkts=0 t
    for p in $procs; do
      cpus="$cpus $p $(cpu_s "$(cat "$st/$p.pid" 2>/dev/null)")s"
      wakes=$((wakes + $(wakeups "$(cat "$st/$p.pid" 2>/dev/null)")))
    done
    for t in a b; do
      hostpkts=$((hostpkts + $("$BIN/sprayctl" -s "$st/tor-$t.sock" --json show ports 2>/dev/null |
        python3 -c 'import json,sys; print(sum(p["rx_pkts"] for p in json.load(sys.stdin)["data"] if p["name"] == "h1"))' 2>/dev/null || echo 0)))
    done
    echo "$mode $pmtu:$cpus in ${wall}s ($(echo "$cpus" | awk -v w="$wall" '{s = 0; for (i = 2; i <= NF; i += 2) s += $i; printf "%.2f", s / w}') cores); $wakes wake-ups for $hostpkts packets from the guests ($(awk -v a="$wakes" -v b="$hostpkts" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "-" }') per packet)" >>"$CPUS"
    tb_json=$("$BIN/sprayctl" -s "$st/tor-b.sock" --json show counters 2>/dev/null || echo '{}')
    for t in a b; do
      for w in ports hosts counters; do
        echo "== tor-$t show $w"
        "$BIN/sprayctl" -s "$st/tor-$t.sock" show "$w" 2>&1 || true
      done
    done >"$OUT/switches-$mode-$pmtu.txt"
    # Stop the guests, then the rack, keeping its logs with the final reports (the fabric's
    # per-path counters and how late it released packets).
    stop_guests
    KEEP_LOGS="$OUT" scripts/netns-rack.sh down "$NAME" >/dev/null 2>&1 || true
    for f in "$OUT"/tor-?.log "$OUT"/fabric.log "$OUT"/rack.log; do [ -e "$f" ] && mv "$f" "${f%.log}-$mode-$pmtu.log"; done
    echo "$mode $pmtu: $(lateness a-\>b "$OUT"/{rack,fabric}-"$mode-$pmtu".log); $(lateness b-\>a "$OUT"/{rack,fabric}-"$mode-$pmtu".log)" >>"$LATE"
  fi
  cleanup
  local srv="$OUT/srv-$mode-$pmtu.log" cli="$OUT/cli-$mode-$pmtu.log"
  echo "$mode $pmtu: server $(guest_stats "$srv"); client $(guest_stats "$cli")" >>"$GUESTS"
  local hold resync
  hold=$(echo "$tb_json" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("data",{}).get("reorder",{}).get("timeouts","-"))' 2>/dev/null || echo -)
  resync=$(echo "$tb_json" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("data",{}).get("reorder",{}).get("resyncs","-"))' 2>/dev/null || echo -)
  local n=0
  IFS=';' read -ra T <<<"$TESTS"
  for t in "${T[@]}"; do
    n=$((n + 1))
    local b; b=$(echo "$t" | awk '{print $1}')
    local rc; rc=$(grep -o "=== client END $n $b rc=[0-9]*" "$cli" | sed 's/.*rc=//' | tail -1)
    # perftest's result line follows its header; bandwidth tests: BW average (MB/s) is column 4,
    # latency tests: t_avg (usec) is column 6.
    local res
    res=$(sed -n "/=== client START $n /,/=== client END $n /p" "$cli" |
      awk '/#bytes/ {h=1; next} h && NF >= 4 && $1 ~ /^[0-9]+$/ {print; exit}')
    local value="-"
    if [ -n "$res" ]; then
      case "$b" in
        *_lat) value="$(echo "$res" | awk '{print $6}') us" ;;
        *) value="$(echo "$res" | awk '{printf "%.0f Mb/s", $4 * 8}')" ;;
      esac
    fi
    # The guests' counters and the switch's cover the whole run of a mode (all its tests):
    # printed on its first row.
    if [ $n = 1 ]; then
      printf '%-8s %-5s %-12s %-6s %-12s %8s %8s %8s %8s %8s %8s\n' "$mode" "$pmtu" "$b" "${rc:-none}" "$value" \
        "$(counter out_of_seq_request "$srv")" "$(counter duplicate_request "$srv")" \
        "$(counter rcvd_seq_err "$cli")" "$(counter completer_retry_err "$cli")" "$hold" "$resync" >>"$ROWS"
    else
      printf '%-8s %-5s %-12s %-6s %-12s\n' "$mode" "$pmtu" "$b" "${rc:-none}" "$value" >>"$ROWS"
    fi
    if [ "$CHECK" = 1 ]; then
      local oos; oos=$(counter out_of_seq_request "$srv")
      # Every test completes, except spraying without reorder, which must show the collapse.
      if [ "$mode" = spray ]; then
        if [ "${oos:-0}" = 0 ]; then echo "FAIL: spray $pmtu $b: no out-of-sequence requests without reorder" >&2; FAIL=1; fi
      elif [ "${rc:-1}" != 0 ]; then
        echo "FAIL: $mode $pmtu $b did not complete (rc ${rc:-none})" >&2; FAIL=1
      fi
      if [ "$mode" = reorder ] && [ -z "$LOSS" ] && [ "${oos:-1}" != 0 ]; then
        echo "FAIL: reorder $pmtu $b: the responder saw $oos out-of-sequence requests" >&2; FAIL=1
      fi
      if [ "$mode" = reorder ] && [ -n "$LOSS" ] && [ "$hold" = 0 ]; then
        echo "FAIL: reorder $pmtu $b with loss: no hold timeouts recorded" >&2; FAIL=1
      fi
    fi
  done
}

# ratios ROWS_FILE: goodput of each mode against the direct link's for the same test in that
# round (bandwidth tests), as "pmtu test mode percent" lines.
ratios() {
  awk '$6 == "Mb/s" { v[$1" "$2" "$3] = $5; if (!(($2" "$3) in seen)) { seen[$2" "$3] = 1; order[++n] = $2" "$3 } }
    END {
      for (i = 1; i <= n; i++) {
        k = order[i]; d = v["direct " k]; if (d == "" || d == 0) continue
        split("wire ecmp spray reorder", m, " ")
        for (j = 1; j <= 4; j++) { x = v[m[j]" "k]; if (x != "") printf "%s %s %.0f\n", k, m[j], 100 * x / d }
        w = v["wire " k]; r = v["reorder " k]
        if (w != "" && w > 0 && r != "") printf "%s reorder/wire %.0f\n", k, 100 * r / w
      }
    }' "$1"
}

# ratio_table: the ratios of every round, one column per mode; with several rounds, each
# cell is the median over the rounds followed by every round's value.
ratio_table() {
  awk -v rounds="$ROUNDS" '{ k = $1" "$2; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
      c = k" "$3; cnt[c]++; val[c, cnt[c]] = $4 }
    function cell(c,   i, j, t, a, s, m) {
      if (!(c in cnt)) return "-"
      m = cnt[c]; for (i = 1; i <= m; i++) a[i] = val[c, i]
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      s = (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
      if (m == 1) return sprintf("%.0f%%", s)
      t = ""; for (i = 1; i <= m; i++) t = t (i > 1 ? "/" : "") val[c, i]
      return sprintf("%.0f%% (%s)", s, t)
    }
    END {
      head = rounds > 1 ? "goodput vs direct, median of " rounds " rounds (each round: direct and the modes back to back)" : "goodput vs direct, same run"
      printf "%s\n%-5s %-12s %-19s %-19s %-19s %-19s %-19s\n", head, "pmtu", "test", "wire", "ecmp", "spray", "reorder", "reorder/wire"
      for (i = 1; i <= n; i++) {
        split(order[i], f, " "); printf "%-5s %-12s", f[1], f[2]
        printf " %-19s %-19s %-19s %-19s %-19s\n", cell(order[i]" wire"), cell(order[i]" ecmp"), cell(order[i]" spray"), cell(order[i]" reorder"), cell(order[i]" reorder/wire")
      }
    }' "$RATIOS"
}

OUT_ROOT=$OUT
for round in $(seq "$ROUNDS"); do
  if [ "$ROUNDS" -gt 1 ]; then
    OUT="$OUT_ROOT/round-$round"; mkdir -p "$OUT"
    ROWS="$OUT/rows.txt"; : >"$ROWS"
  fi
  for pmtu in $PMTUS; do
    for mode in $MODES; do
      echo "rxe-rack: round $round/$ROUNDS: $mode, RoCE MTU $pmtu: $TESTS" >&2
      run_mode "$mode" "$pmtu"
    done
  done
  if [ "$ROUNDS" -gt 1 ]; then
    { echo "round $round"; cat "$ROWS"; } >>"$OUT_ROOT/rows.txt"
  fi
  ratios "$ROWS" >>"$RATIOS"
done
OUT=$OUT_ROOT
ROWS="$OUT/rows.txt"
printf '%-8s %-5s %-12s %-6s %-12s %8s %8s %8s %8s %8s %8s\n' mode pmtu test rc result \
  oos_req dup_req seq_nak retries hold_to resync
cat "$ROWS"
if [ -s "$RATIOS" ]; then
  echo
  ratio_table
fi
echo
echo "CPU of the rack's switches and fabric (user + system) over each mode's whole run:"
cat "$CPUS"
echo
echo "The guests during their tests (NIC interrupts and packets per interrupt, vCPU time in ticks):"
cat "$GUESTS"
echo
if [ -s "$THREADSF" ]; then
  echo "The guests' qemu threads on the host (THREADS=1), per test over its middle 90% of packets: CPU"
  echo "seconds, seconds waiting for a CPU, voluntary/involuntary context switches:"
  cat "$THREADSF"
  echo
fi
echo "How late the emulated paths released packets against their delay and rate (the emulating thread's wake-up and loop latency):"
cat "$LATE"
rates=$(for m in $PMTUS; do printf '%s Mbit/s each at RoCE MTU %s, ' "$(rate_for "$m")" "$m"; done)
echo "fabric: 4 paths, ${rates}delays ${DELAYS_US} us, loss '${LOSS:-none}'; logs in $OUT"
echo "CPUs: guests on ${GUEST_CPUS:-all} (policy $GUEST_SCHED), switches and forwarders on ${SWITCH_CPUS:-all} (idle policy $IDLE)"
echo "Counters (first row of each mode, for all its tests): oos_req, dup_req: the responder's"
echo "out_of_seq_request, duplicate_request; seq_nak, retries: the requester's"
echo "rcvd_seq_err, completer_retry_err; hold_to, resync: the destination ToR's reorder hold"
echo "timeouts and resyncs. Results: bandwidth tests BW average; ib_write_lat t_avg."
exit $FAIL
