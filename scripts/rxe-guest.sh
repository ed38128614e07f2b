#!/usr/bin/env bash
# Builds (once, cached) the Soft-RoCE guest used by scripts/rxe-rack.sh: the stock Debian kernel
# as an ELF vmlinux (qemu boots it directly, PVH) and an initramfs with the rdma_rxe and
# virtio-net modules, rdma-core's verbs libraries, perftest, iproute2 and busybox. Nothing is
# installed on the host: the packages are fetched with `apt-get download` and unpacked with
# `dpkg -x`.
#
# Usage: scripts/rxe-guest.sh [build|path|init]
#   build  builds into $CACHE unless it is there already (REBUILD=1 forces), prints the path
#   path   prints the cache directory
#   init   prints the guest's /init (the runner puts it into each guest's overlay archive, so
#          changing it needs no rebuild)
# Environment: CACHE [/var/cache/sprayswitch/rxe-guest]
# The guest's /init reads /guest.conf (NAME, IP, GW, MTU, ROLE, PEER, TESTS, LIMIT) from a second cpio
# archive appended by the runner, runs the tests (printing its CPU, NIC and rxe hardware counters
# before and after each, so that the runner can tell each test's own counts), prints the rxe
# hardware counters once more and powers off.
set -euo pipefail

CACHE=${CACHE:-/var/cache/sprayswitch/rxe-guest}
cmd=${1:-build}

guest_init() {
  cat <<'INIT'
#!/bin/sh
# PID 1 of a sprayswitch Soft-RoCE guest. Busybox applets shadow iproute2 in $PATH, so the real
# tools are called by full path.
export PATH=/usr/bin:/bin:/sbin:/usr/sbin:/bbin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp; mount -t tmpfs tmpfs /run
say() { echo "[guest $(cut -d' ' -f1 /proc/uptime)] $*"; }
NAME=guest; IP=; GW=; MTU=1500; ROLE=server; PEER=; TESTS=; LIMIT=150
. /guest.conf
for m in virtio_pci virtio_net crc32_generic rdma_rxe ib_uverbs; do modprobe $m 2>/dev/null; done
/bin/ip link set lo up
/bin/ip link set eth0 mtu "$MTU" up
/bin/ip addr add "$IP" dev eth0
[ -n "$GW" ] && /bin/ip route add default via "$GW"
rdma link add rxe0 type rxe netdev eth0 || say "rdma link add failed"
# The kernel serves the hw counters from a cache refreshed at most every "lifespan" ms: 0 makes
# every read fresh, so that the counts read right after a test are that test's.
echo 0 >/sys/class/infiniband/rxe0/ports/1/hw_counters/lifespan 2>/dev/null || say "hw counters' lifespan not set"
# The GID index of this guest's IPv4 address as RoCE v2, for perftest's -x. The index is not
# fixed: in one run index 1 was not that GID on one of two guests, and perftest refused to
# connect them ("Incompatibility issue with GID types"). Waits for the GID to appear.
gid_index() {
  want=$(echo "${IP%/*}" | awk -F. '{printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", $1, $2, $3, $4}')
  for g in /sys/class/infiniband/rxe0/ports/1/gids/*; do
    i=${g##*/}
    [ "$(cat "$g" 2>/dev/null)" = "$want" ] || continue
    [ "$(cat "/sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] || continue
    echo "$i"; return 0
  done
  return 1
}
k=0
until GIDX=$(gid_index); do
  k=$((k + 1)); [ $k -ge 50 ] && { say "no RoCE v2 GID for $IP: using index 1"; GIDX=1; break; }
  sleep 0.1
done
ibv_devinfo -d rxe0 | grep -E 'active_mtu' | sed 's/^/  /'
say "$NAME ready: $IP via $GW, eth0 mtu $(cat /sys/class/net/eth0/mtu), RoCE v2 GID index $GIDX"
if [ "$ROLE" = client ]; then
  # Reachability and round-trip time to the server before the tests (busybox ping).
  k=0; until ping -c 1 -W 1 "$PEER" >/dev/null 2>&1; do k=$((k + 1)); [ $k -ge 30 ] && break; done
  ping -c 20 -i 0.1 "$PEER" | tail -2 | sed 's/^/  ping: /'
fi
# stats WHEN -> the guest's CPU time (USER_HZ ticks: user nice system idle iowait irq softirq)
# and its NIC's interrupts, around each test: where the vCPU's time went, and how many
# interrupts the packets cost; and every rxe hw counter as NAME=VALUE on one line: the
# counters are per device, not per QP, so only their growth between "before" and "after"
# tells what one test did.
stats() {
  echo "  stats $1 cpu $(head -1 /proc/stat | cut -d' ' -f3-9)"
  echo "  stats $1 irq $(awk '/virtio0-input/ {s = 0; for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i; print s}' /proc/interrupts)"
  echo "  stats $1 rx $(cat /sys/class/net/eth0/statistics/rx_packets) tx $(cat /sys/class/net/eth0/statistics/tx_packets)"
  hw=""
  # "lifespan" sits among them but is no counter (see above).
  for c in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do
    [ "${c##*/}" = lifespan ] || hw="$hw ${c##*/}=$(cat "$c")"
  done
  echo "  stats $1 hw$hw"
}
n=0
echo "$TESTS" | tr ';' '\n' | while read -r t; do
  [ -z "$t" ] && continue
  n=$((n + 1))
  set -- $t; b=$1; shift
  say "=== $ROLE START $n $b $*"
  stats before
  if [ "$ROLE" = client ]; then
    # The server may not listen yet: retry while the connection is refused.
    k=0
    while :; do
      timeout "$LIMIT" "$b" -d rxe0 -i 1 -x "$GIDX" -F "$@" "$PEER" >/tmp/out 2>&1; rc=$?
      cat /tmp/out
      grep -q "t connect" /tmp/out || break
      k=$((k + 1)); [ $k -ge 60 ] && break; sleep 1
    done
  else
    timeout $((LIMIT + 30)) "$b" -d rxe0 -i 1 -x "$GIDX" -F "$@" >/tmp/out 2>&1; rc=$?
    cat /tmp/out
  fi
  stats after
  say "=== $ROLE END $n $b rc=$rc"
  # The host samples the ToRs a quarter second after the client's END line (rxerack tors):
  # nothing of the next test may reach them before.
  sleep 1
done
say "tests done"
echo "--- hw_counters $NAME"
for c in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do echo "  $(basename "$c")=$(cat "$c")"; done
echo "--- end hw_counters"
poweroff -f
INIT
}

build() {
  local stamp="$CACHE/.built"
  if [ -z "${REBUILD:-}" ] && [ -s "$CACHE/vmlinux" ] && [ -s "$CACHE/base.cpio.gz" ] && [ -e "$stamp" ]; then
    echo "$CACHE"; return 0
  fi
  for t in apt-get dpkg cpio gzip python3; do
    command -v $t >/dev/null || { echo "rxe-guest: $t is missing" >&2; exit 1; }
  done
  rm -rf "$CACHE"; mkdir -p "$CACHE/debs"
  local work; work=$(mktemp -d); trap 'rm -rf "$work"' RETURN
  local kpkg
  kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')
  [ -n "$kpkg" ] || { apt-get update -qq; kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}'); }
  local pkgs="$kpkg perftest ibverbs-utils ibverbs-providers libibverbs1 librdmacm1 libibumad3 libpci3
    libnl-3-200 libnl-route-3-200 busybox-static iproute2 libmnl0 libelf1 libbpf1 libcap2 libdb5.3
    libbsd0 libmd0 libxtables12 zlib1g libzstd1 kmod liblzma5 libssl3 libc6 libtirpc3
    libgssapi-krb5-2 libkrb5-3 libk5crypto3 libcom-err2 libkrb5support0 libkeyutils1 libudev1"
  # shellcheck disable=SC2086
  (cd "$CACHE/debs" && { timeout 900 apt-get download $pkgs >/dev/null 2>&1 || { apt-get update -qq && timeout 900 apt-get download $pkgs >/dev/null; }; })
  local st="$work/stage" r="$work/root"
  mkdir -p "$st"
  for p in "$CACHE"/debs/*.deb; do dpkg -x "$p" "$st"; done
  local kver; kver=$(ls "$st/lib/modules" | head -1)
  # The bzImage carries the kernel as an XZ-compressed ELF with a PVH entry note: unpack it so
  # qemu can boot it directly (no firmware, no decompression in the guest).
  python3 - "$st/boot/vmlinuz-$kver" "$CACHE/vmlinux" <<'PY'
import lzma, sys
blob = open(sys.argv[1], 'rb').read()
start = blob.find(b'\xfd7zXZ\x00')
open(sys.argv[2], 'wb').write(lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(blob[start:]))
PY
  mkdir -p "$r"/{bin,sbin,bbin,usr/bin,usr/sbin,usr/lib,lib,lib64,etc,proc,sys,dev,tmp,run,root}
  cp -a "$st/lib/x86_64-linux-gnu" "$r/lib/"
  cp -a "$st/usr/lib/x86_64-linux-gnu" "$r/usr/lib/"
  rm -rf "$r/usr/lib/x86_64-linux-gnu/gconv"
  cp -a "$st/lib64/ld-linux-x86-64.so.2" "$r/lib64/"
  cp -a "$st/etc/libibverbs.d" "$r/etc/"
  cp -a "$st"/usr/bin/ib_* "$st"/usr/bin/ibv_* "$st/usr/bin/rdma" "$r/usr/bin/"
  cp -a "$st/bin/ip" "$st/bin/kmod" "$r/bin/"
  for l in modprobe insmod lsmod depmod; do ln -sf /bin/kmod "$r/sbin/$l"; done
  cp "$st/bin/busybox" "$r/bin/busybox"
  for a in $("$st/bin/busybox" --list); do ln -sf /bin/busybox "$r/bbin/$a"; done
  ln -sf /bbin/sh "$r/bin/sh"
  local km="$st/lib/modules/$kver/kernel" dm="$r/lib/modules/$kver/kernel"
  for p in drivers/infiniband/core drivers/infiniband/sw/rxe drivers/virtio drivers/net/virtio_net.ko \
           drivers/net/net_failover.ko net/core/failover.ko net/ipv4/udp_tunnel.ko \
           net/ipv6/ip6_udp_tunnel.ko crypto/crc32_generic.ko; do
    [ -e "$km/$p" ] || continue
    mkdir -p "$dm/$(dirname "$p")"; cp -a "$km/$p" "$dm/$(dirname "$p")/"
  done
  cp "$st"/lib/modules/"$kver"/modules.{order,builtin,builtin.modinfo} "$r/lib/modules/$kver/" 2>/dev/null || true
  # kmod acts as depmod when called by that name.
  (LD_LIBRARY_PATH="$st/lib/x86_64-linux-gnu:$st/usr/lib/x86_64-linux-gnu" exec -a depmod "$st/bin/kmod" -b "$r" "$kver")
  guest_init >"$r/init"; chmod 755 "$r/init"   # overridden by each guest's overlay
  (cd "$r" && find . | cpio -o -H newc --quiet | gzip -1) >"$CACHE/base.cpio.gz"
  echo "$kver" >"$CACHE/kver"
  rm -rf "$CACHE/debs"
  touch "$stamp"
  echo "$CACHE"
}

case "$cmd" in
  build) build ;;
  path) echo "$CACHE" ;;
  init) guest_init ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
