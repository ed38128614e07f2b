#!/usr/bin/env bash
# The Debian package under a real systemd (docs/packaging.md): boots a Debian 12 guest in qemu
# (software emulation) whose root is a debootstrap of bookworm with the package installed by
# dpkg, maintainer scripts included. A unit run at boot checks sprayswitch@t1.service on two
# AF_XDP veths: it runs as user sprayswitch with exactly the unit's capabilities, forwards,
# `systemctl reload` applies a good file and fails on a bad one without stopping the switch,
# captures land in /var/lib/sprayswitch, a killed switch is restarted, `systemctl stop` is
# clean, without CAP_BPF the start fails with the reason in the journal, and the documented
# AF_PACKET drop-in (CAP_NET_RAW alone) forwards. Prints each check as PASS or FAIL and exits
# non-zero when one fails or the guest does not finish.
#
# What the test of the package in `cargo test` cannot do: systemd is not PID 1 on the test
# machines, so it reads the unit rather than running it. Not part of scripts/test.sh (about
# five minutes the first time, for the download, and two to three after).
#
# Usage: scripts/systemd-guest.sh [DEB]   (default: builds it with scripts/package.sh)
# Needs root, debootstrap, qemu-system-x86_64, cpio. The guest kernel comes from
# scripts/rxe-guest.sh (built and cached if missing), with its veth module (downloaded once).
# Environment: CACHE [/var/cache/sprayswitch/systemd-guest] holds the Debian root (about
# 250 MB); REBUILD=1 makes it again.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${CACHE:-/var/cache/sprayswitch/systemd-guest}
for t in debootstrap qemu-system-x86_64 cpio dpkg apt-get; do
  command -v $t >/dev/null || { echo "systemd-guest: $t is missing (apt-get install $t)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "systemd-guest: needs root (debootstrap, chroot)" >&2; exit 1; }

deb=${1:-$(scripts/package.sh | tail -n 1)}
[ -f "$deb" ] || { echo "systemd-guest: no package $deb" >&2; exit 1; }
kernel=$(scripts/rxe-guest.sh build)
kver=$(cat "$kernel/kver")

base="$CACHE/base"
if [ -n "${REBUILD:-}" ] || [ ! -e "$CACHE/.built" ]; then
  rm -rf "$CACHE"; mkdir -p "$CACHE"
  debootstrap --variant=minbase --include=systemd,systemd-sysv,iproute2,iputils-ping,kmod,procps \
    bookworm "$base" http://deb.debian.org/debian >"$CACHE/debootstrap.log" 2>&1 ||
    { tail -n 20 "$CACHE/debootstrap.log" >&2; exit 1; }
  k=$(mktemp -d)
  (cd "$k" && apt-get download "linux-image-$kver" >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get download "linux-image-$kver" >/dev/null; }) ||
    { echo "systemd-guest: linux-image-$kver is gone from the mirror: REBUILD=1 scripts/rxe-guest.sh build" >&2; exit 1; }
  dpkg -x "$k"/linux-image-*.deb "$k/x"
  mkdir -p "$base/lib/modules/$kver/kernel/drivers/net"
  cp "$k/x/lib/modules/$kver/kernel/drivers/net/veth.ko" "$base/lib/modules/$kver/kernel/drivers/net/"
  cp "$k/x/lib/modules/$kver"/modules.{builtin,builtin.modinfo,order} "$base/lib/modules/$kver/"
  chroot "$base" /sbin/depmod "$kver"
  rm -rf "$k"
  touch "$CACHE/.built"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root="$work/root"
cp -a "$base" "$root"
# The real install: maintainer scripts run in the chroot (systemd-sysusers creates the user).
dpkg --root="$root" -i "$deb" >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; exit 1; }

cat >"$root/root/pkgtest.sh" <<'GUEST'
#!/bin/bash
# Runs at boot: checks sprayswitch@t1.service. Output on the serial console.
exec >/dev/ttyS0 2>&1
check() { # NAME COMMAND...: PASS or FAIL
  local name=$1; shift
  if "$@"; then echo "PKGTEST: PASS $name"; else echo "PKGTEST: FAIL $name"; fi
}
pings() { # COUNT: all COUNT pings from host a to host b answered
  ip netns exec a ping -c 2 -W 1 10.9.2.2 >/dev/null 2>&1
  ip netns exec a ping -c "$1" -i 0.1 -W 1 -q 10.9.2.2 | grep -q " $1 received"
}
svc=sprayswitch@t1
modprobe veth
for n in a b; do ip netns add $n; ip -n $n link set lo up; done
for i in 1 2; do
  n=$([ $i = 1 ] && echo a || echo b)
  ip link add h$i address 02:5c:01:01:00:0$i type veth peer name eth0 address 02:5c:03:00:00:0$i netns $n
  ip link set h$i up
  ip -n $n link set eth0 up
  ip -n $n addr add 10.9.$i.2/24 dev eth0
  ip -n $n route add default via 10.9.$i.1
done
cat >/etc/sprayswitch/t1.toml <<'CFG'
[switch]
name = "guest"
workers = 1

[[port]]
name = "h1"
role = "downlink"
backend = "af_xdp"
interface = "h1"
mac = "02:5c:01:01:00:01"
addresses = ["10.9.1.1/24"]

[[port]]
name = "h2"
role = "downlink"
backend = "af_xdp"
interface = "h2"
mac = "02:5c:01:01:00:02"
addresses = ["10.9.2.1/24"]
CFG
main_pid() { systemctl show -p MainPID --value $svc; }
status_of() { grep "^$2:" "/proc/$1/status" | cut -f2- | tr '\t' ' '; }
systemctl start $svc
sleep 3
pid=$(main_pid)
uid=$(id -u sprayswitch)
check "runs as sprayswitch" [ "$(status_of "$pid" Uid)" = "$uid $uid $uid $uid" ]
check "effective capabilities: net_admin net_raw ipc_lock bpf" [ "$(status_of "$pid" CapEff)" = 0000008000007000 ]
check "bounding set: the same" [ "$(status_of "$pid" CapBnd)" = 0000008000007000 ]
check "no new privileges" [ "$(status_of "$pid" NoNewPrivs)" = 1 ]
check "af_xdp ports" bash -c "journalctl -u $svc -o cat | grep -q 'port h1: af_xdp'"
check "forwards over AF_XDP" pings 10
check "sprayctl on the instance's socket" sprayctl -s /run/sprayswitch/t1.sock show ports
check "reload of a good file" systemctl reload $svc
sed -i 's/workers = 1/workers = "many"/' /etc/sprayswitch/t1.toml
check "reload of a bad file fails" bash -c "! systemctl reload $svc"
sed -i 's/workers = "many"/workers = 1/' /etc/sprayswitch/t1.toml
check "still running after the refused reload" systemctl is-active -q $svc
check "forwards after the refused reload" pings 5
sprayctl -s /run/sprayswitch/t1.sock capture start h1 /var/lib/sprayswitch/h1.pcap >/dev/null
ip netns exec a ping -c 3 -i 0.1 -W 1 -q 10.9.2.2 >/dev/null
sprayctl -s /run/sprayswitch/t1.sock capture stop h1 >/dev/null
check "capture written to /var/lib/sprayswitch" [ -s /var/lib/sprayswitch/h1.pcap ]
kill -9 "$pid"
sleep 5
check "restarted after SIGKILL" [ "$(systemctl show -p NRestarts --value $svc)" = 1 ]
check "a new process" [ "$(main_pid)" != "$pid" -a "$(main_pid)" != 0 ]
check "forwards after the restart" pings 10
systemctl stop $svc
check "clean stop" [ "$(systemctl show -p Result --value $svc)" = success ]
mkdir -p /etc/systemd/system/$svc.service.d
drop=/etc/systemd/system/$svc.service.d/caps.conf
printf '[Service]\nAmbientCapabilities=\nAmbientCapabilities=CAP_NET_RAW CAP_NET_ADMIN CAP_IPC_LOCK\nCapabilityBoundingSet=\nCapabilityBoundingSet=CAP_NET_RAW CAP_NET_ADMIN CAP_IPC_LOCK\n' >$drop
systemctl daemon-reload
systemctl start $svc
sleep 2
check "without CAP_BPF the start fails" bash -c "! systemctl is-active -q $svc"
check "and the journal says why" bash -c "journalctl -u $svc -o cat | grep -q 'port h1: creating the XSKMAP: Operation not permitted'"
systemctl stop $svc 2>/dev/null; systemctl reset-failed $svc 2>/dev/null
printf '[Service]\nAmbientCapabilities=\nAmbientCapabilities=CAP_NET_RAW\nCapabilityBoundingSet=\nCapabilityBoundingSet=CAP_NET_RAW\n' >$drop
sed -i 's/backend = "af_xdp"/backend = "af_packet"/' /etc/sprayswitch/t1.toml
systemctl daemon-reload
systemctl start $svc
sleep 3
check "AF_PACKET drop-in: CAP_NET_RAW alone" [ "$(status_of "$(main_pid)" CapEff)" = 0000000000002000 ]
check "AF_PACKET drop-in: forwards" pings 10
systemctl stop $svc
echo "PKGTEST: DONE"
systemctl poweroff
GUEST
chmod +x "$root/root/pkgtest.sh"
cat >"$root/etc/systemd/system/pkgtest.service" <<'UNIT'
[Unit]
Description=sprayswitch package checks
[Service]
Type=oneshot
ExecStart=/root/pkgtest.sh
[Install]
WantedBy=multi-user.target
UNIT
mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/pkgtest.service "$root/etc/systemd/system/multi-user.target.wants/"
# systemd is the initramfs's /init: the whole root boots from memory, no disk or modules needed.
ln -sf /lib/systemd/systemd "$root/init"
(cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1 >"$work/guest.cpio.gz")
rm -rf "$root"

log="$work/console.log"
timeout 900 qemu-system-x86_64 -accel tcg -cpu max -m 2048 -smp 2 -nodefaults -display none \
  -no-reboot -serial "file:$log" -kernel "$kernel/vmlinux" -initrd "$work/guest.cpio.gz" \
  -append "console=ttyS0 rdinit=/init panic=-1 quiet systemd.show_status=0" || true
grep -a "PKGTEST:" "$log" | sed 's/^PKGTEST: //' || true
if ! grep -aq "PKGTEST: DONE" "$log"; then
  echo "systemd-guest: the guest did not finish; its console:" >&2
  tail -n 40 "$log" >&2
  exit 1
fi
if grep -aq "PKGTEST: FAIL" "$log"; then
  exit 1
fi
echo "systemd-guest: every check passed"
