//! AF_PACKET port backend: the portable fallback for interfaces or kernels without AF_XDP, and
//! the backend for frames larger than an AF_XDP frame (RoCE MTU 4096).
//!
//! One raw packet socket per port, bound to the interface. It receives through a
//! `PACKET_MMAP` ring (`TPACKET_V2`): the kernel writes frames into memory shared with us and
//! flips each frame's status word, so an empty port costs a memory read, not a system call,
//! and a busy one none per packet. Each frame is copied once from the ring into a frame of the
//! port's [`FrameArea`] (no allocation per packet) and its ring slot given back at once. It
//! transmits with `sendmmsg` from the packets' own buffers, with `PACKET_QDISC_BYPASS`. The
//! socket ignores its own transmissions (`PACKET_IGNORE_OUTGOING`) and puts the interface in
//! promiscuous mode for its lifetime. The kernel strips received 802.1Q/802.1ad tags into the
//! ring's metadata; the port puts them back, so tagged frames arrive as they were sent.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::sys::{self, LinkWatch, SetupError, SocketMapping};
use super::{LinkState, Port};
use crate::pkt::area::FrameArea;
use crate::pkt::Pkt;

const SOL_PACKET: i32 = 263;
const PACKET_ADD_MEMBERSHIP: i32 = 1;
const PACKET_MR_PROMISC: u16 = 1;
const PACKET_QDISC_BYPASS: i32 = 20;
const PACKET_IGNORE_OUTGOING: i32 = 23;
const PACKET_RX_RING: i32 = 5;
const PACKET_STATISTICS: i32 = 6;
const PACKET_VERSION: i32 = 10;
const TPACKET_V2: i32 = 1;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_VLAN_VALID: u32 = 0x10;
const TP_STATUS_VLAN_TPID_VALID: u32 = 0x40;
const ETH_P_ALL: u16 = 0x0003;
const ETH_P_8021Q: u16 = 0x8100;
/// Packets per system call.
const BATCH: usize = 64;
/// Bytes of the receive ring (about 2000 full-size frames at MTU 1500).
const RING_BYTES: usize = 4 << 20;
/// Ring block size: a multiple of the page size and of every frame size used.
const RING_BLOCK: usize = 64 << 10;

/// `struct tpacket_req`.
#[repr(C)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

/// `struct tpacket2_hdr`: the head of every ring frame.
#[repr(C)]
struct Tpacket2Hdr {
    status: u32,
    len: u32,
    snaplen: u32,
    mac: u16,
    net: u16,
    sec: u32,
    nsec: u32,
    vlan_tci: u16,
    vlan_tpid: u16,
    padding: [u8; 4],
}

/// `struct tpacket_stats`.
#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    packets: u32,
    drops: u32,
}

/// The mapped receive ring: `frames` slots of `frame` bytes, taken in order.
#[derive(Debug)]
struct RxRing {
    map: SocketMapping,
    frame: usize,
    frames: usize,
    next: usize,
}

impl RxRing {
    /// Sets up and maps the ring of socket `fd` (before bind) for frames of up to `max_frame`
    /// bytes.
    fn map(fd: &OwnedFd, max_frame: usize) -> io::Result<RxRing> {
        sys::setsockopt(fd, SOL_PACKET, PACKET_VERSION, &TPACKET_V2)?;
        // Frame header, address and alignment before the data (the kernel puts the MAC header
        // at offset 66 of a frame), plus a VLAN tag's room.
        let frame = (max_frame + 128)
            .next_power_of_two()
            .clamp(2048, RING_BLOCK);
        let req = TpacketReq {
            block_size: RING_BLOCK as u32,
            block_nr: (RING_BYTES / RING_BLOCK) as u32,
            frame_size: frame as u32,
            frame_nr: (RING_BYTES / frame) as u32,
        };
        sys::setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req)?;
        Ok(RxRing {
            map: SocketMapping::map(fd, RING_BYTES, 0)?,
            frame,
            frames: RING_BYTES / frame,
            next: 0,
        })
    }

    /// The status word of slot `i`, shared with the kernel.
    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: slot `i` < frames lies inside the mapping and starts with the u32 status,
        // suitably aligned (slots are 2048-byte aligned); the kernel and we access it
        // atomically (it with its own barriers).
        unsafe { &*self.map.as_ptr().add(i * self.frame).cast::<AtomicU32>() }
    }

    /// The next filled slot's header, if the kernel handed it to us. The Acquire load pairs
    /// with the kernel's barrier before it sets TP_STATUS_USER, so the frame's bytes are there.
    fn peek(&self) -> Option<(u32, &Tpacket2Hdr)> {
        let st = self.status(self.next).load(Ordering::Acquire);
        if st & TP_STATUS_USER == 0 {
            return None;
        }
        // SAFETY: the slot belongs to us while its status says USER; the header is at its
        // start and plain old data.
        let h = unsafe {
            &*self
                .map
                .as_ptr()
                .add(self.next * self.frame)
                .cast::<Tpacket2Hdr>()
        };
        Some((st, h))
    }

    /// `len` bytes at offset `off` of the current slot, clamped to the slot.
    fn bytes(&self, off: usize, len: usize) -> &[u8] {
        let off = off.min(self.frame);
        let len = len.min(self.frame - off);
        // SAFETY: the range lies inside the current slot, which we own until `release`.
        unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(self.next * self.frame + off), len)
        }
    }

    /// Gives the current slot back to the kernel and moves on.
    fn release(&mut self) {
        // Release: our reads of the slot happen before the kernel may overwrite it.
        self.status(self.next).store(0, Ordering::Release);
        self.next = (self.next + 1) % self.frames;
    }
}

/// An AF_PACKET port.
#[derive(Debug)]
pub struct AfPacketPort {
    name: String,
    fd: OwnedFd,
    area: Arc<FrameArea>,
    ring: RxRing,
    link: LinkWatch,
    /// Frames lost here: truncated (larger than the ring's slots), no buffer to copy into,
    /// refused by the kernel on transmit.
    lost: u64,
    /// Frames the kernel dropped because the ring was full (PACKET_STATISTICS, cumulative).
    kernel_drops: u64,
    stats_due: u64,
}

/// Copies the Ethernet frame `data` into `out`, putting back the VLAN tag `(tpid, tci)` the
/// kernel stripped, if any, after the MAC addresses. Returns the frame's length, 0 when it
/// does not fit.
fn copy_restoring_tag(data: &[u8], tag: Option<(u16, u16)>, out: &mut [u8]) -> usize {
    match tag {
        None => {
            if data.len() > out.len() {
                return 0;
            }
            out[..data.len()].copy_from_slice(data);
            data.len()
        }
        Some((tpid, tci)) => {
            let n = data.len() + 4;
            if n > out.len() || data.len() < 12 {
                return 0;
            }
            out[..12].copy_from_slice(&data[..12]);
            out[12..14].copy_from_slice(&tpid.to_be_bytes());
            out[14..16].copy_from_slice(&tci.to_be_bytes());
            out[16..n].copy_from_slice(&data[12..]);
            n
        }
    }
}

/// `struct packet_mreq`.
#[repr(C)]
struct PacketMreq {
    ifindex: i32,
    kind: u16,
    alen: u16,
    address: [u8; 8],
}

impl AfPacketPort {
    /// Buffers of a port's receive pool unless told otherwise: what the switch can keep of its
    /// packets at once (in egress queues and reorder rings) before it stops taking frames from
    /// the kernel's ring.
    pub const DEFAULT_BUFFERS: u32 = 4096;

    /// Opens port `name` on interface `ifname`, with a buffer pool of
    /// [`AfPacketPort::DEFAULT_BUFFERS`] frames sized for its MTU.
    ///
    /// # Errors
    /// A [`SetupError`] naming the port, the step and what to do.
    pub fn open(name: &str, ifname: &str) -> Result<AfPacketPort, SetupError> {
        AfPacketPort::open_with(name, ifname, AfPacketPort::DEFAULT_BUFFERS)
    }

    /// Opens port `name` on interface `ifname`, receiving into a pool of `buffers` frames.
    ///
    /// # Errors
    /// A [`SetupError`] naming the port, the step and what to do.
    pub fn open_with(name: &str, ifname: &str, buffers: u32) -> Result<AfPacketPort, SetupError> {
        let err =
            |what: &str, e: io::Error, hint: Option<&str>| SetupError::new(name, what, e, hint);
        let ifindex = sys::ifindex(ifname).map_err(|e| {
            err(
                &format!("interface {ifname}"),
                e,
                Some("no such interface in this network namespace: check the name, or run the switch in the interface's namespace (ip netns exec)"),
            )
        })?;
        let ctl = sys::ioctl_socket().map_err(|e| err("opening a control socket", e, None))?;
        let mtu =
            sys::ifmtu(ctl.as_raw_fd(), ifname).map_err(|e| err("reading the MTU", e, None))?;
        // Ethernet header and a VLAN tag on top of the MTU, rounded to a power of two.
        let frame = (mtu + 18).next_power_of_two().max(2048);
        let area = FrameArea::new(buffers, frame)
            .map_err(|e| err("allocating the buffer pool", e, None))?;
        // Protocol 0 receives nothing until bind names the interface, so no other interface's
        // frames slip in between socket() and bind().
        // SAFETY: plain socket(2); the result is checked and owned below.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if raw < 0 {
            return Err(err("creating the packet socket", sys::errno(), None));
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        sys::setsockopt(&fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &1i32).map_err(|e| {
            err(
                "ignoring outgoing frames",
                e,
                Some("needs Linux 4.20 or later"),
            )
        })?;
        // Optional: without it frames pass the qdisc layer (slower, still correct).
        let _ = sys::setsockopt(&fd, SOL_PACKET, PACKET_QDISC_BYPASS, &1i32);
        // Receiving goes through the ring, not the socket's receive queue: only the send
        // buffer matters.
        let _ = sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &(8i32 << 20));
        let ring = RxRing::map(&fd, mtu as usize + 18).map_err(|e| {
            err(
                "mapping the receive ring",
                e,
                Some(
                    "needs TPACKET_V2 (Linux 2.6.27 or later) and 4 MiB of kernel memory per port",
                ),
            )
        })?;
        // SAFETY: `sockaddr_ll` is plain old data; all-zero is valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll of the size passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(err("binding", sys::errno(), None));
        }
        let mreq = PacketMreq {
            ifindex: ifindex as i32,
            kind: PACKET_MR_PROMISC,
            alen: 0,
            address: [0; 8],
        };
        sys::setsockopt(&fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq)
            .map_err(|e| err("entering promiscuous mode", e, None))?;
        let link = LinkWatch::new(ifname).map_err(|e| err("reading link state", e, None))?;
        log::info!("port {name}: AF_PACKET on {ifname} (MTU {mtu}, frames of {frame} bytes)");
        Ok(AfPacketPort {
            name: name.to_string(),
            fd,
            area,
            ring,
            link,
            lost: 0,
            kernel_drops: 0,
            stats_due: 0,
        })
    }
}

impl Port for AfPacketPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, now: u64, out: &mut Vec<Pkt>, max: usize) -> usize {
        let mut got = 0;
        while got < max {
            let Some((status, h)) = self.ring.peek() else {
                break;
            };
            let (mac, snap, len) = (usize::from(h.mac), h.snaplen as usize, h.len as usize);
            let tag = (status & TP_STATUS_VLAN_VALID != 0).then(|| {
                let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 {
                    h.vlan_tpid
                } else {
                    ETH_P_8021Q
                };
                (tpid, h.vlan_tci)
            });
            if snap < len || snap < 14 {
                // Larger than the ring's slots (the interface MTU grew) or not Ethernet.
                self.lost += 1;
                self.ring.release();
                continue;
            }
            let Some(mut f) = self.area.alloc() else {
                // Every buffer is inside the switch: leave the frame in the ring for the next
                // burst (if the ring fills meanwhile, the kernel drops and counts).
                break;
            };
            let n = copy_restoring_tag(self.ring.bytes(mac, snap), tag, f.bytes_mut());
            if n == 0 {
                self.lost += 1;
            } else {
                let mut p = Pkt::in_frame(f, n);
                p.rx_ns = now;
                out.push(p);
                got += 1;
            }
            self.ring.release();
        }
        got
    }

    fn tx_burst(&mut self, _now: u64, pkts: &mut Vec<Pkt>) -> usize {
        let mut taken = 0;
        while !pkts.is_empty() {
            let n = pkts.len().min(BATCH);
            // SAFETY: plain old data; all-zero is valid.
            let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
            for (i, p) in pkts[..n].iter().enumerate() {
                iov[i] = libc::iovec {
                    iov_base: p.data().as_ptr() as *mut libc::c_void,
                    iov_len: p.len(),
                };
                msgs[i].msg_hdr.msg_iov = &mut iov[i];
                msgs[i].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: the iovecs point at packet data we own and the kernel only reads them.
            let rc = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    n as u32,
                    libc::MSG_DONTWAIT,
                )
            };
            if rc > 0 {
                pkts.drain(..rc as usize);
                taken += rc as usize;
                continue;
            }
            match sys::errno().raw_os_error() {
                // The first packet can never be sent (too large, bad frame): drop it, counted,
                // so it does not block the queue behind it.
                Some(libc::EMSGSIZE | libc::EINVAL) => {
                    pkts.remove(0);
                    self.lost += 1;
                    taken += 1;
                }
                // Busy or down: keep them; the worker retries and bounds its queue.
                _ => break,
            }
        }
        taken
    }

    fn poll(&mut self, now: u64) {
        self.link.poll(now);
        if now >= self.stats_due {
            self.stats_due = now + 100_000_000;
            // Reading the statistics resets them: accumulate.
            if let Ok(s) = sys::getsockopt::<TpacketStats>(&self.fd, SOL_PACKET, PACKET_STATISTICS)
            {
                self.kernel_drops += u64::from(s.drops);
            }
        }
    }

    fn link_state(&self) -> LinkState {
        self.link.state()
    }

    fn tx_backlog(&self) -> usize {
        0
    }

    fn dropped(&self) -> u64 {
        self.lost + self.kernel_drops
    }

    fn wait_fds(&self, out: &mut Vec<std::os::fd::RawFd>) {
        out.push(self.fd.as_raw_fd());
    }

    fn rx_pool(&self) -> Option<std::sync::Arc<dyn super::RxPool>> {
        Some(self.area.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::copy_restoring_tag;

    #[test]
    fn tags_go_back_after_the_addresses() {
        let frame: Vec<u8> = (0u8..20).collect();
        let mut out = [0u8; 64];
        assert_eq!(copy_restoring_tag(&frame, None, &mut out), 20);
        assert_eq!(&out[..20], &frame[..]);
        let n = copy_restoring_tag(&frame, Some((0x88a8, 0x2007)), &mut out);
        assert_eq!(n, 24);
        assert_eq!(&out[..12], &frame[..12]);
        assert_eq!(&out[12..16], &[0x88, 0xa8, 0x20, 0x07]);
        assert_eq!(&out[16..24], &frame[12..]);
        // Too large for the buffer, or too short to hold addresses: refused, never cut.
        assert_eq!(copy_restoring_tag(&frame, None, &mut out[..19]), 0);
        assert_eq!(
            copy_restoring_tag(&frame, Some((0x8100, 1)), &mut out[..23]),
            0
        );
        assert_eq!(
            copy_restoring_tag(&frame[..11], Some((0x8100, 1)), &mut out),
            0
        );
    }
}
