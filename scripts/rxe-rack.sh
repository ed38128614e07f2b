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
# baseline. Prints one table row per test with the goodput and what that test alone did to the
# guests' rxe hw counters (each guest's counters are read before and after each test: they
# are per device, so a sum over a mode's tests would hide which test erred), as server/client
# pairs: the responder's out-of-sequence and duplicate requests, the requester's
# sequence-error NAKs, retries and exhausted retries (perftest's -b makes both guests
# requester and responder, and every test has ACKs both ways, so both guests' counts are
# shown), then what the ToRs' reorder stages did over the mode; a second table has rxe's other
# transport-error counters per test (RNR NAKs received and sent, exhausted RNR retries, send
# errors, link downs) and the packets each guest sent. Exits non-zero when an expectation
# fails (see CHECK below).
#
# Usage: scripts/rxe-rack.sh [quick|full] [list]
#   quick  ib_write_bw; ib_read_bw with 64 READs outstanding (-o 64); ib_write_bw over 8 QPs
#          (-q 8); RoCE MTU 1024 (CI)
#   full   ib_write_bw, ib_read_bw (-o 64), ib_send_bw, ib_atomic_bw (-o 64), each alone, over
#          8 QPs, bidirectional (-b) and both; ib_write_lat, ib_read_lat (perftest takes
#          neither -q nor -b on latency tests); RoCE MTU 1024 and 4096
#   list   prints the profile's tests (with the name each has in the tables) and exits: needs
#          neither root nor qemu
#   Message counts (-n) are small to keep the runs short; with -q 8, -n is per QP.
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
#   TESTS_OVERRIDE: a ';'-separated list of perftest commands that replaces the profile's,
#   ROUNDS [1]: repeat everything round by round (direct and the other modes back to back in
#   each round) and print each goodput ratio (each bandwidth test's reorder/wire too) as the
#   median over the rounds, with every value,
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
# CHECK=1 fails the run unless: every test completes in direct, wire, ecmp and reorder modes, and
# no QP of either guest exhausts its retries (retry_exceeded_err, retry_rnr_exceeded_err) in
# those modes; spray mode shows out-of-sequence requests at a responder in every bandwidth test
# (for READ and atomic tests, whose long stream is the responses, retries at the requester
# count too; latency tests have one message in flight and nothing to reorder); in reorder mode
# on a loss-free fabric (LOSS unset) no test makes either guest count out_of_seq_request,
# duplicate_request, rcvd_seq_err or completer_retry_err (each failure names the test, the
# guest, the counter and its value); with LOSS those may grow, as a loss is repaired by
# retransmission, but the ToRs must show hold timeouts.
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
# The test lists, ';'-separated. About 20 MB per bandwidth test (-n is per QP: 40 x 8 QPs x 64 KiB).
# READs and atomics: -o 64 puts more of them in flight per QP than a ConnectX allows (16), and
# pins the number rather than leaving it to the device (perftest's default is the device's
# maximum, 128 on rxe). -q 8: eight QPs interleave their PSN streams at the destination ToR. -b: both guests send, so each is requester and
# responder at once. Latency tests run one message at a time and perftest refuses -q ("Multiple
# QPs only available on bw tests") and -b ("Bidirectional is only available in BW test") on them.
# Under -q 8 and -b the client's rxe can leave one QP nearly idle for hundreds of milliseconds
# while the others send: in captures at the ToR's host port, one QP sent 23 packets, then one
# every 30-80 ms while four others sent 1,500 each, and its timer fired before its own
# ACK-requesting packet had left the guest (retries and duplicates with no sequence NAK and
# nothing dropped or held anywhere in the rack; in ecmp mode as well). That is the guests' TCG
# scheduling, not the fabric: these variants run with -u 20 (4.3 s; -u 17, 537 ms, was not enough),
# so that what they count is reordering (sequence NAKs and duplicates), not the guests' timers.
MANY="-u 20"
bw_variants() {  # TEST N_ONE_QP N_PER_QP_OF_8 -> the test alone, over 8 QPs, -b, and both
  echo "$1 -n $2;$1 -n $3 -q 8 $MANY;$1 -n $2 -b $MANY;$1 -n $3 -q 8 -b $MANY"
}
case "$PROFILE" in
  quick) TESTS="ib_write_bw -s 65536 -n 300;ib_read_bw -s 65536 -n 300 -o 64;ib_write_bw -s 65536 -n 40 -q 8 $MANY"; PMTUS="1024" ;;
  full)
    TESTS="$(bw_variants "ib_write_bw -s 65536" 300 40);$(bw_variants "ib_read_bw -s 65536 -o 64" 300 40)"
    TESTS="$TESTS;$(bw_variants "ib_send_bw -s 65536" 300 40);$(bw_variants "ib_atomic_bw -o 64" 2000 250)"
    TESTS="$TESTS;ib_write_lat -s 64 -n 1000;ib_read_lat -s 64 -n 1000"
    PMTUS="1024 4096" ;;
  *) sed -n '2,/^set -euo/{/^set/!p}' "$0"; exit 2 ;;
esac
TESTS=${TESTS_OVERRIDE:-$TESTS}
PMTUS=${PMTUS_OVERRIDE:-$PMTUS}
# test_label TEST -> its name in the tables: the perftest program without "ib_", and the options
# that tell the variants of one program apart (-q N, -o N, -b), e.g. "read_bw-o64-q8-b".
test_label() {
  local a l i; read -ra a <<<"$1"
  l=${a[0]#ib_}
  for ((i = 1; i < ${#a[@]}; i++)); do
    case ${a[i]} in
      -q|-o) l="$l${a[i]}${a[i + 1]:-}"; i=$((i + 1)) ;;
      -b) l="$l-b" ;;
    esac
  done
  echo "$l"
}
# LABELS: the tests' names in order, one per test of TESTS; a name taken already gets "#N" (its
# place in the list), so that each row and each goodput ratio belongs to one test.
LABELS=()
IFS=';' read -ra T <<<"$TESTS"
for t in "${T[@]}"; do
  l=$(test_label "$t")
  for u in "${LABELS[@]}"; do [ "$u" = "$l" ] && { l="$l#$((${#LABELS[@]} + 1))"; break; }; done
  LABELS+=("$l")
done
if [ "${2:-}" = list ]; then
  echo "profile $PROFILE: RoCE MTU $PMTUS; modes $MODES; ${#LABELS[@]} tests per mode and MTU:"
  for i in "${!T[@]}"; do printf '  %-20s %s\n' "${LABELS[i]}" "${T[i]}"; done
  exit 0
fi

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

# hw_delta LOG ROLE N -> "NAME=GROWTH ..." for every rxe hw counter of that guest over its test
# N, from the "stats before/after hw" lines its /init prints around each test; nothing when the
# guest did not print both (it died, or its test never started).
hw_delta() {
  tr -d '\r' <"$1" | sed -n "/=== $2 START $3 /,/=== $2 END $3 /p" | awk '
    $1 == "stats" && $3 == "hw" {
      for (i = 4; i <= NF; i++) { split($i, kv, "="); if ($2 == "before") b[kv[1]] = kv[2]; else { a[kv[1]] = kv[2]; o[++n] = kv[1] } }
    }
    END { for (i = 1; i <= n; i++) if (o[i] in b) printf "%s=%d ", o[i], a[o[i]] - b[o[i]] }'
}
# dv DELTAS NAME -> that counter's growth in a hw_delta answer, "?" when it is not there; dn: the
# same with 0 for "?" (for sums).
dv() { local w; for w in $1; do [ "${w%%=*}" = "$2" ] && { echo "${w#*=}"; return; }; done; echo "?"; }
dn() { local v; v=$(dv "$1" "$2"); [ "$v" = "?" ] && echo 0 || echo "$v"; }
# sc SERVER_DELTAS CLIENT_DELTAS NAME -> "server/client": a counter's growth in both guests.
sc() { echo "$(dv "$1" "$3")/$(dv "$2" "$3")"; }

ROWS="$OUT/rows.txt"; : >"$ROWS"
ERRS="$OUT/errors.txt"; : >"$ERRS"
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
  awk -v mode="$2" -v pmtu="$3" -v names="${LABELS[*]}" '
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
  local st="/run/sprayswitch-rack/$NAME" tb_json="{}" ta_json="{}"
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
    ta_json=$("$BIN/sprayctl" -s "$st/tor-a.sock" --json show counters 2>/dev/null || echo '{}')
    for t in a b; do
      for w in ports hosts counters; do
        echo "== tor-$t show $w"
        "$BIN/sprayctl" -s "$st/tor-$t.sock" show "$w" 2>&1 || true
      done
    done >"$OUT/switches-$mode-$pmtu.txt"
    for n in rack tora torb; do
      ip netns pids "ssr-$NAME-$n" >/dev/null 2>&1 || continue
      echo "== ssr-$NAME-$n links"; ip -n "ssr-$NAME-$n" -s link show 2>&1 || true
    done >>"$OUT/switches-$mode-$pmtu.txt"
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
  # The reorder stages of both ToRs over the whole mode, as tor-b/tor-a: tor-b's holds what goes
  # to the server (the client's requests; with -b also its ACKs), tor-a's what goes to the client
  # (the server's ACKs and READ and atomic responses; with -b also its requests).
  local hold resync reorder_json='import json,sys; d=json.load(sys.stdin); print(d.get("data",{}).get("reorder",{}).get(sys.argv[1],"-"))'
  hold="$(echo "$tb_json" | python3 -c "$reorder_json" timeouts 2>/dev/null || echo -)/$(echo "$ta_json" | python3 -c "$reorder_json" timeouts 2>/dev/null || echo -)"
  resync="$(echo "$tb_json" | python3 -c "$reorder_json" resyncs 2>/dev/null || echo -)/$(echo "$ta_json" | python3 -c "$reorder_json" resyncs 2>/dev/null || echo -)"
  if [ "$CHECK" = 1 ] && [ "$mode" = reorder ] && [ -n "$LOSS" ] &&
     [ "$(echo "$hold" | awk -F/ '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ {print $1 + $2}')" = 0 ]; then
    echo "FAIL: reorder $pmtu with loss '$LOSS': no hold timeouts recorded at either ToR (tor-b/tor-a $hold)" >&2; FAIL=1
  fi
  local n=0 t
  IFS=';' read -ra T <<<"$TESTS"
  for t in "${T[@]}"; do
    n=$((n + 1))
    local b label=${LABELS[n - 1]}; b=$(echo "$t" | awk '{print $1}')
    # perftest's exit status in each guest ("none": the guest never finished the test).
    local rc src
    rc=$(grep -o "=== client END $n $b rc=[0-9]*" "$cli" | sed 's/.*rc=//' | tail -1) || true
    src=$(grep -o "=== server END $n $b rc=[0-9]*" "$srv" | sed 's/.*rc=//' | tail -1) || true
    # perftest's result line follows its header; bandwidth tests: BW average (MB/s) is column 4
    # (with -b, both directions together), but atomics carry 8 bytes each and are counted by
    # MsgRate (Mpps, column 5); latency tests: t_avg (usec) is column 6. awk reads
    # to the end: quitting early would kill sed with SIGPIPE, which pipefail turns into an exit.
    local res
    res=$(sed -n "/=== client START $n /,/=== client END $n /p" "$cli" |
      awk '/#bytes/ {h=1; next} h && !done && NF >= 4 && $1 ~ /^[0-9]+$/ {print; done=1}')
    local value="-"
    if [ -n "$res" ]; then
      case "$b" in
        *_lat) value="$(echo "$res" | awk '{print $6}') us" ;;
        ib_atomic_*) value="$(echo "$res" | awk '{printf "%.0f op/s", $5 * 1e6}')" ;;
        *) value="$(echo "$res" | awk '{printf "%.0f Mb/s", $4 * 8}')" ;;
      esac
    fi
    # What this test did to each guest's rxe counters, as "server/client".
    local sd cd c g v
    sd=$(hw_delta "$srv" server "$n"); cd=$(hw_delta "$cli" client "$n")
    # The ToRs' counters cover the whole mode (all its tests): on its first row.
    local h="" r=""
    [ $n = 1 ] && h=$hold r=$resync
    printf '%-8s %-5s %-18s %-9s %-12s %10s %10s %10s %10s %10s %9s %9s\n' "$mode" "$pmtu" "$label" "${src:-none}/${rc:-none}" "$value" \
      "$(sc "$sd" "$cd" out_of_seq_request)" "$(sc "$sd" "$cd" duplicate_request)" "$(sc "$sd" "$cd" rcvd_seq_err)" "$(sc "$sd" "$cd" completer_retry_err)" \
      "$(sc "$sd" "$cd" retry_exceeded_err)" "$h" "$r" >>"$ROWS"
    printf '%-8s %-5s %-18s %12s %12s %12s %12s %12s %17s\n' "$mode" "$pmtu" "$label" \
      "$(sc "$sd" "$cd" rcvd_rnr_err)" "$(sc "$sd" "$cd" send_rnr_err)" "$(sc "$sd" "$cd" retry_rnr_exceeded_err)" "$(sc "$sd" "$cd" send_err)" "$(sc "$sd" "$cd" link_downed)" \
      "$(sc "$sd" "$cd" sent_pkts)" >>"$ERRS"
    if [ "$CHECK" = 1 ]; then
      if [ "$mode" = spray ]; then
        # Spraying without reorder must show the hosts seeing reordering, except where one
        # message at a time is in flight (latency tests). READ and atomic requests are one
        # packet each and their responses are the long stream: retries at the requester (the
        # client's completer re-requests what came out of order) count as well.
        local seen
        case "$b" in
          *_lat) seen=skip ;;
          ib_read_*|ib_atomic_*) seen=$(($(dn "$sd" out_of_seq_request) + $(dn "$cd" out_of_seq_request) + $(dn "$cd" completer_retry_err))) ;;
          *) seen=$(($(dn "$sd" out_of_seq_request) + $(dn "$cd" out_of_seq_request))) ;;
        esac
        if [ "$seen" = 0 ]; then
          echo "FAIL: spray $pmtu $label: no out-of-sequence requests without reorder (server/client out_of_seq_request $(sc "$sd" "$cd" out_of_seq_request), completer_retry_err $(sc "$sd" "$cd" completer_retry_err))" >&2; FAIL=1
        fi
      else
        if [ "${rc:-1}" != 0 ] || [ "${src:-1}" != 0 ]; then
          echo "FAIL: $mode $pmtu $label did not complete (rc server ${src:-none}, client ${rc:-none})" >&2; FAIL=1
        fi
        # A QP that exhausts its retries has failed, lossy fabric or not.
        for c in retry_exceeded_err retry_rnr_exceeded_err; do
          for g in server client; do
            if [ $g = server ]; then v=$(dv "$sd" $c); else v=$(dv "$cd" $c); fi
            if [ "$v" != 0 ] && [ "$v" != "?" ]; then echo "FAIL: $mode $pmtu $label: the $g's $c is $v" >&2; FAIL=1; fi
          done
        done
      fi
      # Reordering complete and a fabric that loses nothing: the hosts must see nothing out of
      # order, duplicated or retried, in either direction.
      if [ "$mode" = reorder ] && [ -z "$LOSS" ]; then
        for c in out_of_seq_request duplicate_request rcvd_seq_err completer_retry_err; do
          for g in server client; do
            if [ $g = server ]; then v=$(dv "$sd" $c); else v=$(dv "$cd" $c); fi
            if [ "$v" = "?" ]; then echo "FAIL: reorder $pmtu $label: the $g did not report $c for this test" >&2; FAIL=1
            elif [ "$v" != 0 ]; then echo "FAIL: reorder $pmtu $label: the $g's $c is $v (must be 0 on a loss-free fabric)" >&2; FAIL=1; fi
          done
        done
      fi
    fi
  done
}

# ratios ROWS_FILE: goodput (atomics: operation rate) of each mode against the direct link's for
# the same test in that round, and reorder's against wire's (also when direct did not run), for
# each bandwidth test, as "pmtu test mode percent" lines.
ratios() {
  awk '$6 == "Mb/s" || $6 == "op/s" { v[$1" "$2" "$3] = $5; if (!(($2" "$3) in seen)) { seen[$2" "$3] = 1; order[++n] = $2" "$3 } }
    END {
      for (i = 1; i <= n; i++) {
        k = order[i]; d = v["direct " k]
        if (d != "" && d > 0) {
          split("wire ecmp spray reorder", m, " ")
          for (j = 1; j <= 4; j++) { x = v[m[j]" "k]; if (x != "") printf "%s %s %.0f\n", k, m[j], 100 * x / d }
        }
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
      printf "%s\n%-5s %-18s %-19s %-19s %-19s %-19s %-19s\n", head, "pmtu", "test", "wire", "ecmp", "spray", "reorder", "reorder/wire"
      for (i = 1; i <= n; i++) {
        split(order[i], f, " "); printf "%-5s %-18s", f[1], f[2]
        printf " %-19s %-19s %-19s %-19s %-19s\n", cell(order[i]" wire"), cell(order[i]" ecmp"), cell(order[i]" spray"), cell(order[i]" reorder"), cell(order[i]" reorder/wire")
      }
    }' "$RATIOS"
}

OUT_ROOT=$OUT
for round in $(seq "$ROUNDS"); do
  if [ "$ROUNDS" -gt 1 ]; then
    OUT="$OUT_ROOT/round-$round"; mkdir -p "$OUT"
    ROWS="$OUT/rows.txt"; : >"$ROWS"
    ERRS="$OUT/errors.txt"; : >"$ERRS"
  fi
  for pmtu in $PMTUS; do
    for mode in $MODES; do
      echo "rxe-rack: round $round/$ROUNDS: $mode, RoCE MTU $pmtu: $TESTS" >&2
      run_mode "$mode" "$pmtu"
    done
  done
  if [ "$ROUNDS" -gt 1 ]; then
    { echo "round $round"; cat "$ROWS"; } >>"$OUT_ROOT/rows.txt"
    { echo "round $round"; cat "$ERRS"; } >>"$OUT_ROOT/errors.txt"
  fi
  ratios "$ROWS" >>"$RATIOS"
done
OUT=$OUT_ROOT
ROWS="$OUT/rows.txt"
ERRS="$OUT/errors.txt"
echo "Per test; guests' rxe counters as server/client, grown during that test alone:"
printf '%-8s %-5s %-18s %-9s %-12s %10s %10s %10s %10s %10s %9s %9s\n' mode pmtu test rc result \
  oos_req dup_req seq_nak retries retry_exc hold_to resync
cat "$ROWS"
echo
echo "Per test, rxe's other transport-error counters and the packets sent, server/client:"
printf '%-8s %-5s %-18s %12s %12s %12s %12s %12s %17s\n' mode pmtu test \
  rnr_nak_rcvd rnr_nak_sent rnr_exc send_err link_down sent_pkts
cat "$ERRS"
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
echo "Counters, per test, server/client (the server is the responder, the client the requester;"
echo "with -b each is both): oos_req, dup_req: out_of_seq_request, duplicate_request (responder);"
echo "seq_nak, retries, retry_exc: rcvd_seq_err, completer_retry_err, retry_exceeded_err"
echo "(requester); rnr_nak_rcvd, rnr_exc: rcvd_rnr_err, retry_rnr_exceeded_err (requester);"
echo "rnr_nak_sent: send_rnr_err (responder); send_err, link_down: send_err, link_downed."
echo "hold_to, resync: the ToRs' reorder hold timeouts and resyncs, tor-b (towards the server) /"
echo "tor-a (towards the client), over the mode's whole run (on its first row)."
echo "rc: perftest's exit status, server/client. Results: bandwidth tests BW average (with -b both"
echo "directions together), atomic tests MsgRate; latency tests t_avg."
exit $FAIL
