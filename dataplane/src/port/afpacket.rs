//! AF_PACKET port backend: the portable fallback for interfaces or kernels without AF_XDP, and
//! the backend for frames larger than an AF_XDP frame (RoCE MTU 4096).
//!
//! One raw packet socket per port, bound to the interface, with batched system calls:
//! `recvmmsg` straight into frames of a [`FrameArea`] (no allocation per packet) and
//! `sendmmsg` from the packets' own buffers with `PACKET_QDISC_BYPASS`. The socket ignores
//! its own transmissions (`PACKET_IGNORE_OUTGOING`) and puts the interface in promiscuous mode
//! for its lifetime. What it is not: VLAN-aware (the kernel strips received 802.1Q tags into
//! metadata that this backend does not restore; tagged traffic needs AF_XDP).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use super::area::Frame;
use super::sys::{self, LinkWatch, SetupError};
use super::{FrameArea, LinkState, Pkt, Port};

const SOL_PACKET: i32 = 263;
const PACKET_ADD_MEMBERSHIP: i32 = 1;
const PACKET_MR_PROMISC: u16 = 1;
const PACKET_QDISC_BYPASS: i32 = 20;
const PACKET_IGNORE_OUTGOING: i32 = 23;
const ETH_P_ALL: u16 = 0x0003;
/// Packets per system call.
const BATCH: usize = 64;

/// An AF_PACKET port.
#[derive(Debug)]
pub struct AfPacketPort {
    name: String,
    fd: OwnedFd,
    area: Arc<FrameArea>,
    /// Frames ready for the next `recvmmsg`.
    rx_frames: Vec<Frame>,
    link: LinkWatch,
    lost: u64,
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
    /// Opens port `name` on interface `ifname`, with a buffer pool sized for `mtu`.
    ///
    /// # Errors
    /// A [`SetupError`] naming the port, the step and what to do.
    pub fn open(name: &str, ifname: &str) -> Result<AfPacketPort, SetupError> {
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
        let area =
            FrameArea::new(4096, frame).map_err(|e| err("allocating the buffer pool", e, None))?;
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
        let buf = 8i32 << 20;
        if sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &buf).is_err() {
            let _ = sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &buf);
        }
        let _ = sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &buf);
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
            rx_frames: Vec::with_capacity(BATCH),
            link,
            lost: 0,
        })
    }
}

impl Port for AfPacketPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, now: u64, out: &mut Vec<Pkt>, max: usize) -> usize {
        let want = max.min(BATCH);
        while self.rx_frames.len() < want {
            match self.area.alloc() {
                Some(f) => self.rx_frames.push(f),
                None => break,
            }
        }
        let n = self.rx_frames.len().min(want);
        if n == 0 {
            return 0;
        }
        // SAFETY: iovec and mmsghdr are plain old data; all-zero is valid.
        let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..n {
            let b = self.rx_frames[i].bytes_mut();
            iov[i] = libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            };
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `msgs[..n]` point at `iov[..n]`, which point at frames we own for the
        // duration of the call; the kernel writes at most each iovec's length.
        let rc = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if rc <= 0 {
            return 0;
        }
        let rc = rc as usize;
        let mut got = 0;
        for (m, f) in msgs[..rc].iter().zip(self.rx_frames.drain(..rc)) {
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                // Larger than the interface MTU allowed for: counted, dropped.
                self.lost += 1;
                continue;
            }
            let mut p = Pkt::in_frame(f, m.msg_len as usize);
            p.rx_ns = now;
            out.push(p);
            got += 1;
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
    }

    fn link_state(&self) -> LinkState {
        self.link.state()
    }

    fn tx_backlog(&self) -> usize {
        0
    }

    fn dropped(&self) -> u64 {
        self.lost
    }
}
