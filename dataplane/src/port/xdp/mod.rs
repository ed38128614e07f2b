//! AF_XDP port backend, on our own ring layer over libc (no libxdp, libbpf, clang or bpffs).
//!
//! All ports of one worker share one UMEM ([`XdpUmem`], a [`FrameArea`]): a frame received
//! on one port is transmitted on another as the same descriptor, never copied in userspace. A
//! packet from elsewhere (a heap packet, another worker's UMEM) is copied into a free frame.
//! Each port has one socket per receive queue, each with its own fill and completion rings;
//! the port transmits through its first queue's socket. The redirect program
//! ([`bpf::XdpProgram`]) is attached per interface, native mode first and generic (skb) mode
//! as the fallback unless a mode is forced; the mode in use is reported.
//!
//! Frames larger than a UMEM frame (RoCE MTU 4096 and jumbo frames) use AF_XDP multi-buffer
//! (Linux 6.6 or later): the UMEM is bound with `XDP_USE_SG` and, on interfaces whose MTU needs
//! it, the program declares frags, so the kernel hands such a frame over as several descriptors (`XDP_PKT_CONTD` on all but the
//! last). The port reassembles them into one heap packet (one copy) on receive and splits a
//! large packet over several frames on transmit. Frames that fit one UMEM frame, the common
//! case, are untouched by this. On an older kernel the UMEM is bound without it and setup
//! refuses an interface whose MTU does not fit a frame, naming the port and the fallback
//! (`af_packet`).
//!
//! What it is not: zero-copy on veth (veth has no zero-copy mode; the kernel copies into the
//! UMEM).

pub mod abi;
pub mod bpf;
pub mod ring;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use self::abi::*;
pub use self::bpf::XdpMode;
use self::bpf::XdpProgram;
use self::ring::{Consumer, Producer};
use super::sys::{self, LinkWatch, SetupError};
use super::{LinkState, Port};
use crate::pkt::area::FrameArea;
use crate::pkt::{push_built, Pkt, MAX_FRAME};

/// Most descriptors one transmitted frame may span (the kernel's copy mode builds an skb with
/// at most `MAX_SKB_FRAGS` (17) fragments; 5 frames of 2048 bytes hold the largest packet).
const MAX_TX_DESCS: usize = 16;

/// Settings of one AF_XDP port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpOptions {
    /// Interface to open.
    pub ifname: String,
    /// Receive queues to open (0..queues).
    pub queues: u32,
    /// Forced mode, or `None`: native, falling back to skb.
    pub mode: Option<XdpMode>,
    /// Entries of the receive, transmit and completion rings (power of two).
    pub ring_size: u32,
    /// Entries of the fill ring (power of two, at least `ring_size`): above the receive
    /// ring, so that a full receive ring's worth of frames is already back in the fill ring
    /// when the kernel needs the next ones (a fill ring no larger than the receive ring is the
    /// usual cause of silent drops: the kernel's `rx_fill_ring_empty_descs`).
    pub fill_size: u32,
    /// Busy polling (`SO_BUSY_POLL` at this many microseconds with `SO_PREFER_BUSY_POLL`,
    /// Linux 5.11 or later): the port's non-blocking receive on an empty ring runs the
    /// driver's poll once from the worker, and the driver's interrupts stay off while it does.
    /// `None`: off.
    pub busy_poll_us: Option<u32>,
}

impl XdpOptions {
    /// Defaults for `ifname`: one queue, mode chosen automatically, 1024-entry rings, a
    /// 2048-entry fill ring, no busy polling.
    pub fn new(ifname: &str) -> XdpOptions {
        XdpOptions {
            ifname: ifname.to_string(),
            queues: 1,
            mode: None,
            ring_size: 1024,
            fill_size: 2048,
            busy_poll_us: None,
        }
    }
}

/// One UMEM shared by the AF_XDP ports of one worker: the frame area and the socket that
/// registered it (the first port opened).
#[derive(Debug)]
pub struct XdpUmem {
    area: Arc<FrameArea>,
    owner_fd: Option<i32>,
    /// Whether the kernel accepted multi-buffer (`XDP_USE_SG`) when the first socket bound.
    multi_buffer: bool,
}

impl XdpUmem {
    /// A UMEM of `frames` frames of `frame_size` bytes (2048 or 4096).
    ///
    /// # Errors
    /// The mmap error.
    pub fn new(frames: u32, frame_size: u32) -> io::Result<XdpUmem> {
        Ok(XdpUmem {
            area: FrameArea::new(frames, frame_size)?,
            owner_fd: None,
            multi_buffer: false,
        })
    }

    /// Frames for `ports` single-queue ports with rings of `ring_size` and fill rings of
    /// `fill_size`, as the switch sizes a worker's UMEM: each port's fill and transmit rings
    /// full, a receive ring's worth in the switch and 4096 more for the packets it keeps (a
    /// port's default `rx_buffers`; a port of several queues has a fill ring per queue: count
    /// it once per queue), in whole 64 KiB pages.
    pub fn frames_for(ports: usize, ring_size: u32, fill_size: u32) -> u32 {
        (ports as u32 * (fill_size + 2 * ring_size + 4096)).next_multiple_of(32)
    }

    /// The frame area.
    pub fn area(&self) -> &Arc<FrameArea> {
        &self.area
    }

    /// Opens port `name` on `opts.ifname`.
    ///
    /// # Errors
    /// A [`SetupError`] naming the port, the step and what to do.
    pub fn open(&mut self, name: &str, opts: &XdpOptions) -> Result<XdpPort, SetupError> {
        let had_owner = self.owner_fd.is_some();
        let port = self.open_port(name, opts);
        if port.is_err() && !had_owner {
            // The socket that registered the UMEM is closed with the failed port: the next
            // port registers it afresh rather than naming a closed descriptor.
            self.owner_fd = None;
        }
        port
    }

    fn open_port(&mut self, name: &str, opts: &XdpOptions) -> Result<XdpPort, SetupError> {
        let err =
            |what: &str, e: io::Error, hint: Option<&str>| SetupError::new(name, what, e, hint);
        let ifindex = sys::ifindex(&opts.ifname).map_err(|e| {
            err(
                &format!("interface {}", opts.ifname),
                e,
                Some("no such interface in this network namespace: check the name, or run the switch in the interface's namespace (ip netns exec)"),
            )
        })?;
        if !opts.ring_size.is_power_of_two() || opts.ring_size < 64 {
            return Err(err(
                "ring size",
                io::Error::from(io::ErrorKind::InvalidInput),
                Some("rings need a power-of-two size of at least 64"),
            ));
        }
        if !opts.fill_size.is_power_of_two() || opts.fill_size < opts.ring_size {
            return Err(err(
                "fill ring size",
                io::Error::from(io::ErrorKind::InvalidInput),
                Some("the fill ring needs a power-of-two size of at least the receive ring's"),
            ));
        }
        let ctl = sys::ioctl_socket().map_err(|e| err("opening a control socket", e, None))?;
        let mtu = sys::ifmtu(ctl.as_raw_fd(), &opts.ifname)
            .map_err(|e| err("reading the MTU", e, None))?;
        let mut queues = Vec::new();
        for q in 0..opts.queues.max(1) {
            queues.push(self.open_queue(name, ifindex, q, opts)?);
        }
        // Checked once the UMEM is bound: whether frames larger than a UMEM frame can come as
        // several descriptors is known then.
        let room = self.area.frame_size() - XDP_PACKET_HEADROOM;
        // Ethernet header and one VLAN tag on top of the MTU.
        let largest = mtu + 18;
        if largest as usize > MAX_FRAME || (largest > room && !self.multi_buffer) {
            let hint = if largest as usize > MAX_FRAME {
                format!("the switch handles frames of up to {MAX_FRAME} bytes: lower the MTU")
            } else {
                format!(
                    "AF_XDP frames here hold {room} bytes (frame size {} minus the kernel's \
                     headroom) and this kernel refused multi-buffer AF_XDP (Linux 6.6 or later): \
                     lower the MTU to {} or use backend = \"af_packet\" for larger frames",
                    self.area.frame_size(),
                    room - 18
                )
            };
            return Err(err(
                &format!("MTU {mtu} of {}", opts.ifname),
                io::Error::from_raw_os_error(libc::EMSGSIZE),
                Some(&hint),
            ));
        }
        // Only interfaces whose frames can exceed a UMEM frame get a frags-aware program: some
        // drivers refuse those in native mode, and the others gain nothing from it.
        let frags = self.multi_buffer && largest > room;
        let (prog, fallback) = attach(name, ifindex, opts, frags)?;
        for (q, s) in queues.iter().enumerate() {
            prog.set_socket(q as u32, &s.fd)
                .map_err(|e| err(&format!("adding queue {q}'s socket to the XSKMAP"), e, None))?;
        }
        // The kernel binds zero-copy when the driver has it (no XDP_COPY is asked for) and
        // copy mode otherwise; what each queue got is read back.
        let zero_copy_queues: Vec<bool> = queues
            .iter()
            .map(|s| options(&s.fd) & XDP_OPTIONS_ZEROCOPY != 0)
            .collect();
        let zero_copy = zero_copy_queues.first().copied().unwrap_or(false);
        let busy_poll = match opts.busy_poll_us {
            None => false,
            Some(us) => match queues.iter().try_for_each(|q| set_busy_poll(&q.fd, us)) {
                Ok(()) => true,
                Err(e) => {
                    // Off on every queue again: no queue is left half set up.
                    for q in &queues {
                        let _ = set_busy_poll(&q.fd, 0);
                    }
                    log::warn!(
                        "port {name}: busy polling refused ({e}; it needs Linux 5.11 or later \
                         and CAP_NET_ADMIN): the port works without it"
                    );
                    false
                }
            },
        };
        let link = LinkWatch::new(&opts.ifname).map_err(|e| err("reading link state", e, None))?;
        log::info!(
            "port {name}: AF_XDP on {} ({} queue(s)), XDP {} mode{}, {} copy, {} frames of {} bytes{}",
            opts.ifname,
            queues.len(),
            prog.mode.name(),
            fallback
                .map(|r| format!(" (native refused: {r})"))
                .unwrap_or_default(),
            if zero_copy { "zero" } else { "kernel" },
            self.area.frames(),
            self.area.frame_size(),
            if largest > room {
                format!(", multi-buffer for frames over {room} bytes (MTU {mtu})")
            } else {
                String::new()
            }
        );
        let mut port = XdpPort {
            name: name.to_string(),
            area: self.area.clone(),
            queues,
            _prog: prog,
            link,
            fill_target: opts.fill_size,
            tx_outstanding: 0,
            next_rx: 0,
            tx_lost: 0,
            rx_lost: 0,
            kernel_drops: 0,
            kernel: XdpStatistics::default(),
            stats_due: 0,
            zero_copy,
            zero_copy_queues,
            busy_poll,
            multi_buffer: self.multi_buffer,
        };
        port.refill();
        Ok(port)
    }

    fn open_queue(
        &mut self,
        name: &str,
        ifindex: u32,
        queue: u32,
        opts: &XdpOptions,
    ) -> Result<Xsk, SetupError> {
        let (ring, fill_size) = (opts.ring_size, opts.fill_size);
        let err = |what: &str, e: io::Error, hint: Option<&str>| {
            SetupError::new(name, &format!("queue {queue}: {what}"), e, hint)
        };
        // SAFETY: plain socket(2); the result is checked and owned below.
        let raw = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(err("creating the AF_XDP socket", sys::errno(), None));
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let first = self.owner_fd.is_none();
        if first {
            let reg = UmemReg {
                addr: self.area.as_ptr() as u64,
                len: self.area.len_bytes() as u64,
                chunk_size: self.area.frame_size(),
                ..UmemReg::default()
            };
            sys::setsockopt(&fd, SOL_XDP, XDP_UMEM_REG, &reg).map_err(|e| {
                let hint = matches!(
                    e.raw_os_error(),
                    Some(libc::ENOBUFS | libc::ENOMEM | libc::EPERM)
                )
                .then_some(
                    "the UMEM counts against RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK: \
                         run as root, raise the limit (ulimit -l), or use fewer/smaller frames",
                );
                err(
                    &format!("registering a {} MiB UMEM", self.area.len_bytes() >> 20),
                    e,
                    hint,
                )
            })?;
        }
        for (opt, what, size) in [
            (XDP_UMEM_FILL_RING, "sizing the fill ring", fill_size),
            (XDP_UMEM_COMPLETION_RING, "sizing the completion ring", ring),
            (XDP_RX_RING, "sizing the RX ring", ring),
            (XDP_TX_RING, "sizing the TX ring", ring),
        ] {
            sys::setsockopt(&fd, SOL_XDP, opt, &size).map_err(|e| err(what, e, None))?;
        }
        let off: MmapOffsets = sys::getsockopt(&fd, SOL_XDP, XDP_MMAP_OFFSETS)
            .map_err(|e| err("reading ring offsets", e, None))?;
        let map_err = |e| err("mapping the rings", e, None);
        let fill =
            Producer::map(&fd, XDP_UMEM_PGOFF_FILL_RING, fill_size, &off.fr).map_err(map_err)?;
        let comp =
            Consumer::map(&fd, XDP_UMEM_PGOFF_COMPLETION_RING, ring, &off.cr).map_err(map_err)?;
        let rx = Consumer::map(&fd, XDP_PGOFF_RX_RING, ring, &off.rx).map_err(map_err)?;
        let tx = Producer::map(&fd, XDP_PGOFF_TX_RING, ring, &off.tx).map_err(map_err)?;
        let mut addr = SockaddrXdp {
            family: AF_XDP as u16,
            // The UMEM owner chooses copy/zero-copy, wakeup and multi-buffer; sharers must pass
            // only XDP_SHARED_UMEM (anything else is EINVAL: they inherit the owner's flags).
            flags: if first {
                XDP_USE_NEED_WAKEUP | XDP_USE_SG
            } else {
                XDP_SHARED_UMEM
            },
            ifindex,
            queue_id: queue,
            shared_umem_fd: self.owner_fd.unwrap_or(0) as u32,
        };
        let mut bound = bind_retrying(&fd, &addr);
        if first {
            // Kernels before 6.6 do not know XDP_USE_SG (EINVAL): bind without it.
            if matches!(&bound, Err(e) if e.raw_os_error() == Some(libc::EINVAL)) {
                addr.flags = XDP_USE_NEED_WAKEUP;
                bound = bind_retrying(&fd, &addr);
                self.multi_buffer = false;
            } else {
                self.multi_buffer = bound.is_ok();
            }
        }
        bound.map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::EBUSY) => Some(
                    "the queue is still owned by another AF_XDP socket (retried for 2 s): \
                     stop the other program, or wait for the previous switch to finish exiting",
                ),
                Some(libc::EINVAL) => Some("no such queue on this interface (see ethtool -l)"),
                _ => None,
            };
            err("binding", e, hint)
        })?;
        // Lets one sendto move more than the default 32 descriptors (kernel 6.x). Older kernels
        // refuse the option; the TX kick then loops instead.
        let _ = sys::setsockopt(&fd, SOL_XDP, XDP_MAX_TX_SKB_BUDGET, &256u32);
        if first {
            self.owner_fd = Some(fd.as_raw_fd());
        }
        Ok(Xsk {
            partial: None,
            fd,
            rx,
            tx,
            fill,
            comp,
        })
    }
}

/// Descriptors and fresh frames packet `p` needs to leave through a port of `area`: one and
/// none when it already is in one of its frames, one and one when a copy fits a frame, one per
/// frame-sized piece with multi-buffer; (0, 0) when it can never be sent.
fn tx_needs(p: &Pkt, area: &FrameArea, multi_buffer: bool) -> (usize, usize) {
    let fs = area.frame_size() as usize;
    if p.in_frame_of(area) {
        (1, 0)
    } else if p.len() <= fs {
        (1, 1)
    } else if multi_buffer && p.len() <= MAX_FRAME && p.len().div_ceil(fs) <= MAX_TX_DESCS {
        let n = p.len().div_ceil(fs);
        (n, n)
    } else {
        (0, 0)
    }
}

/// Adds descriptor `d` of a multi-buffer frame to the frame being reassembled in `partial`
/// (copying its bytes and giving its UMEM frame back); on the last descriptor (no
/// `XDP_PKT_CONTD`) moves the whole frame to `out`, or counts it in `lost` if it outgrew
/// [`MAX_FRAME`].
fn reassemble(
    area: &Arc<FrameArea>,
    partial: &mut Option<(Pkt, bool)>,
    d: XdpDesc,
    now: u64,
    out: &mut Vec<Pkt>,
    lost: &mut u64,
) {
    let more = d.options & XDP_PKT_CONTD != 0;
    let (pkt, good) = partial.get_or_insert_with(|| (Pkt::with_capacity(MAX_FRAME), true));
    // Dropped at the end of this function: the frame goes back to the free list.
    let frame = area.claim(d.addr);
    match &frame {
        Some(f) if *good && pkt.len() + d.len as usize <= MAX_FRAME => {
            let at = pkt.len();
            let n = (d.len as usize).min(f.bytes().len());
            pkt.resize(at + n)[at..].copy_from_slice(&f.bytes()[..n]);
        }
        _ => *good = false,
    }
    if !more {
        if let Some((mut p, good)) = partial.take() {
            if good {
                p.rx_ns = now;
                out.push(p);
            } else {
                *lost += 1;
            }
        }
    }
}

/// Busy polling on an AF_XDP socket (`us` > 0: preferred over interrupts, a burst's worth of
/// packets per poll), or off again (`us` = 0).
fn set_busy_poll(fd: &OwnedFd, us: u32) -> io::Result<()> {
    let on = i32::from(us > 0);
    sys::setsockopt(fd, libc::SOL_SOCKET, libc::SO_PREFER_BUSY_POLL, &on)?;
    sys::setsockopt(fd, libc::SOL_SOCKET, libc::SO_BUSY_POLL, &(us as i32))?;
    if us > 0 {
        sys::setsockopt(fd, libc::SOL_SOCKET, libc::SO_BUSY_POLL_BUDGET, &64i32)?;
    }
    Ok(())
}

fn bind_retrying(fd: &OwnedFd, addr: &SockaddrXdp) -> io::Result<()> {
    let mut tries = 0;
    loop {
        // SAFETY: `addr` is a valid sockaddr_xdp of the size passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (addr as *const SockaddrXdp).cast(),
                std::mem::size_of::<SockaddrXdp>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = sys::errno();
        // The kernel frees a previous owner's buffer pool lazily (~200 ms after it exits).
        if e.raw_os_error() == Some(libc::EBUSY) && tries < 20 {
            tries += 1;
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        return Err(e);
    }
}

/// Attaches the redirect program: the forced mode, or native then skb. Returns the program
/// and, after a fallback, why native mode was refused.
fn attach(
    name: &str,
    ifindex: u32,
    opts: &XdpOptions,
    frags: bool,
) -> Result<(XdpProgram, Option<String>), SetupError> {
    let hint = |e: &io::Error, mode: XdpMode| -> Option<String> {
        match e.raw_os_error() {
            Some(libc::EBUSY) | Some(libc::EEXIST) => Some(format!(
                "another XDP program is attached to {}: remove it (ip link set dev {} xdp off) or stop its owner",
                opts.ifname, opts.ifname
            )),
            Some(libc::ERANGE) if mode == XdpMode::Native => Some(
                "native XDP refuses this MTU (on veth without multi-buffer: the peer's MTU must be at most 3506): use xdp_mode = \"skb\" or a smaller MTU".into(),
            ),
            Some(libc::EOPNOTSUPP) => Some(format!("the driver of {} has no {} XDP", opts.ifname, mode.name())),
            _ => None,
        }
    };
    let queues = opts.queues.max(1);
    let fail = |e: bpf::AttachError, mode| {
        let h = hint(&e.source, mode);
        SetupError::new(name, &e.what, e.source, h.as_deref())
    };
    match opts.mode {
        Some(m) => XdpProgram::attach(ifindex, queues, m, frags)
            .map(|p| (p, None))
            .map_err(|e| fail(e, m)),
        None => match XdpProgram::attach(ifindex, queues, XdpMode::Native, frags) {
            Ok(p) => Ok((p, None)),
            // Another program on the interface: falling back would not help.
            Err(e) if matches!(e.source.raw_os_error(), Some(libc::EBUSY | libc::EEXIST)) => {
                Err(fail(e, XdpMode::Native))
            }
            Err(native) => {
                let why = format!("{}: {}", native.what, native.source);
                XdpProgram::attach(ifindex, queues, XdpMode::Skb, frags)
                    .map(|p| (p, Some(why)))
                    .map_err(|e| fail(e, XdpMode::Skb))
            }
        },
    }
}

fn options(fd: &OwnedFd) -> u32 {
    sys::getsockopt(fd, SOL_XDP, XDP_OPTIONS).unwrap_or(0)
}

/// One AF_XDP socket (one queue of a port) and its four rings.
#[derive(Debug)]
struct Xsk {
    /// A multi-buffer frame being reassembled: its descriptors so far (copied), and whether it
    /// is still good (false once it outgrew the largest frame).
    partial: Option<(Pkt, bool)>,
    // Field order matters for drop: rings unmap before the socket closes.
    rx: Consumer<XdpDesc>,
    tx: Producer<XdpDesc>,
    fill: Producer<u64>,
    comp: Consumer<u64>,
    fd: OwnedFd,
}

impl Xsk {
    fn stats(&self) -> XdpStatistics {
        sys::getsockopt(&self.fd, SOL_XDP, XDP_STATISTICS).unwrap_or_default()
    }

    /// Wakes the kernel to send what the TX ring holds: `sendto` until the ring is empty or
    /// the kernel says "later". Returns false when the interface is down.
    fn kick_tx(&mut self) -> bool {
        for _ in 0..16 {
            if self.tx.pending() == 0 || !self.tx.needs_wakeup() {
                return true;
            }
            // SAFETY: a zero-length sendto on our socket is the documented TX wakeup.
            let rc = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            if rc < 0 {
                return match sys::errno().raw_os_error() {
                    Some(libc::ENETDOWN | libc::ENXIO) => false,
                    // EAGAIN/EBUSY/ENOBUFS: the kernel is busy; the next poll retries.
                    _ => true,
                };
            }
        }
        true
    }
}

/// An AF_XDP port.
#[derive(Debug)]
pub struct XdpPort {
    name: String,
    // Sockets close (and rings unmap) before the program detaches and the area is released.
    queues: Vec<Xsk>,
    _prog: XdpProgram,
    area: Arc<FrameArea>,
    link: LinkWatch,
    fill_target: u32,
    tx_outstanding: usize,
    next_rx: usize,
    /// Frames refused as larger than the port can send (or with no frame to copy into).
    tx_lost: u64,
    /// Multi-buffer frames received larger than the largest frame the switch handles.
    rx_lost: u64,
    kernel_drops: u64,
    /// The kernel's statistics summed over the sockets, as last read.
    kernel: XdpStatistics,
    stats_due: u64,
    zero_copy: bool,
    /// Zero-copy per queue, as the kernel bound each socket.
    zero_copy_queues: Vec<bool>,
    /// Busy polling is on: an empty receive drives the driver with a system call.
    busy_poll: bool,
    /// Frames larger than a UMEM frame span several descriptors.
    multi_buffer: bool,
}

impl XdpPort {
    /// The XDP hook in use.
    pub fn mode(&self) -> XdpMode {
        self._prog.mode
    }

    /// True when frames larger than a UMEM frame can be received and sent (multi-buffer).
    pub fn multi_buffer(&self) -> bool {
        self.multi_buffer
    }

    /// True when the kernel bound the sockets in zero-copy mode.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// How each queue's socket is bound: `zero-copy` or `copy`, in queue order.
    pub fn queue_modes(&self) -> Vec<&'static str> {
        self.zero_copy_queues
            .iter()
            .map(|&z| if z { "zero-copy" } else { "copy" })
            .collect()
    }

    /// True when busy polling is on.
    pub fn busy_poll(&self) -> bool {
        self.busy_poll
    }

    /// Kernel drop statistics summed over the port's sockets.
    pub fn kernel_stats(&self) -> XdpStatistics {
        let mut t = XdpStatistics::default();
        for q in &self.queues {
            let s = q.stats();
            t.rx_dropped += s.rx_dropped;
            t.rx_invalid_descs += s.rx_invalid_descs;
            t.tx_invalid_descs += s.tx_invalid_descs;
            t.rx_ring_full += s.rx_ring_full;
            t.rx_fill_ring_empty_descs += s.rx_fill_ring_empty_descs;
            t.tx_ring_empty_descs += s.tx_ring_empty_descs;
        }
        t
    }

    /// Tops every fill ring up from the free list.
    fn refill(&mut self) {
        for q in &mut self.queues {
            let want = self.fill_target.saturating_sub(q.fill.pending());
            if want == 0 {
                continue;
            }
            let mut r = q.fill.reserve(want);
            while r.remaining() > 0 {
                match self.area.take() {
                    Some(a) => {
                        r.push(a);
                    }
                    None => break,
                }
            }
            r.commit();
        }
    }

    /// Returns completed transmit frames to the free list.
    fn reclaim(&mut self) {
        let area = &self.area;
        let done = self.queues[0].comp.consume(u32::MAX, |a| area.give_back(a));
        self.tx_outstanding = self.tx_outstanding.saturating_sub(done as usize);
    }
}

impl Port for XdpPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, now: u64, out: &mut Vec<Pkt>, max: usize) -> usize {
        let mut got = 0;
        let mut consumed = false;
        let n = self.queues.len();
        for i in 0..n {
            if got >= max {
                break;
            }
            let qi = (self.next_rx + i) % n;
            let q = &mut self.queues[qi];
            let area = &self.area;
            let before = out.len();
            let rx_lost = &mut self.rx_lost;
            let Xsk { rx, partial, .. } = q;
            let descs = rx.consume((max - got) as u32, |d| {
                let more = d.options & XDP_PKT_CONTD != 0;
                if partial.is_none() && !more {
                    // One descriptor, one frame: the packet owns the UMEM frame (no copy).
                    if let Some(f) = area.claim(d.addr) {
                        // Built where it stays (see `push_built`).
                        push_built(out, || Pkt::in_frame(f, d.len as usize)).rx_ns = now;
                    }
                    return;
                }
                reassemble(area, partial, d, now, out, rx_lost);
            });
            got += out.len() - before;
            consumed |= descs > 0;
            if descs == 0 && (q.fill.needs_wakeup() || self.busy_poll) {
                // SAFETY: a zero-length non-blocking recvfrom on our socket is the documented
                // fill-ring wakeup (and, with busy polling, what runs the driver's poll); no
                // buffer is written.
                unsafe {
                    libc::recvfrom(
                        q.fd.as_raw_fd(),
                        std::ptr::null_mut(),
                        0,
                        libc::MSG_DONTWAIT,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    );
                }
            }
        }
        self.next_rx = self.next_rx.wrapping_add(1);
        if consumed {
            self.refill();
        }
        got
    }

    fn tx_burst(&mut self, _now: u64, pkts: &mut Vec<Pkt>) -> usize {
        self.reclaim();
        let area = self.area.clone();
        let multi = self.multi_buffer;
        let q = &mut self.queues[0];
        // Decide how many fit: ring slots (one per descriptor) and free frames for copies.
        let mut slots = q.tx.free(pkts.len() as u32) as usize;
        let mut refreshed = false;
        let mut free = area.free_frames();
        let (mut take, mut used) = (0, 0);
        for p in pkts.iter() {
            let (descs, frames) = tx_needs(p, &area, multi);
            if used + descs > slots && !refreshed {
                // A multi-buffer frame may need more slots than the cached count shows.
                slots = q.tx.free(u32::MAX) as usize;
                refreshed = true;
            }
            if used + descs > slots || frames > free {
                break;
            }
            used += descs;
            free -= frames;
            take += 1;
        }
        if take == 0 {
            return 0;
        }
        let fs = area.frame_size() as usize;
        let mut r = q.tx.reserve(used as u32);
        let mut lost = 0;
        for p in pkts.drain(..take) {
            let p = match p.into_frame_of(&area) {
                Ok((addr, len)) => {
                    r.push(XdpDesc {
                        addr,
                        len,
                        options: 0,
                    });
                    continue;
                }
                Err(p) => p,
            };
            let (descs, _) = tx_needs(&p, &area, multi);
            if descs == 0 {
                // Larger than this port can ever send: counted, not retried.
                lost += 1;
                continue;
            }
            // Copied into `descs` fresh frames, chained with XDP_PKT_CONTD. The frames were
            // counted above and only this thread takes from the area, so they are there.
            let mut frames: [Option<crate::pkt::area::Frame>; MAX_TX_DESCS] =
                std::array::from_fn(|_| None);
            for slot in frames.iter_mut().take(descs) {
                *slot = area.alloc();
            }
            if frames[..descs].iter().any(Option::is_none) {
                lost += 1;
                continue;
            }
            let chunks = p.data().chunks(fs);
            for (i, (chunk, f)) in chunks.zip(frames.iter_mut()).enumerate() {
                let Some(mut f) = f.take() else { break };
                f.bytes_mut()[..chunk.len()].copy_from_slice(chunk);
                r.push(XdpDesc {
                    addr: f.into_addr(),
                    len: chunk.len() as u32,
                    options: if i + 1 < descs { XDP_PKT_CONTD } else { 0 },
                });
            }
        }
        let sent = r.commit();
        self.tx_outstanding += sent as usize;
        self.tx_lost += lost;
        q.kick_tx();
        take
    }

    fn poll(&mut self, now: u64) {
        self.reclaim();
        if self.tx_outstanding > 0 {
            self.queues[0].kick_tx();
        }
        self.refill();
        self.link.poll(now);
        if now >= self.stats_due {
            self.stats_due = now + 100_000_000;
            let s = self.kernel_stats();
            self.kernel_drops = s.rx_dropped + s.rx_ring_full + s.rx_invalid_descs;
            self.kernel = s;
        }
    }

    fn link_state(&self) -> LinkState {
        self.link.state()
    }

    fn tx_backlog(&self) -> usize {
        self.tx_outstanding
    }

    fn dropped(&self) -> u64 {
        self.tx_lost + self.rx_lost + self.kernel_drops
    }

    fn backend_counters(&self) -> super::BackendCounters {
        let k = &self.kernel;
        super::BackendCounters {
            rx_dropped: k.rx_dropped,
            rx_ring_full: k.rx_ring_full,
            rx_no_buffer: k.rx_fill_ring_empty_descs,
            invalid: k.rx_invalid_descs + k.tx_invalid_descs,
        }
    }

    /// Every queue's socket: the kernel wakes a `poll(2)` on it when its RX ring fills.
    fn wait_fds(&self, out: &mut Vec<std::os::fd::RawFd>) {
        out.extend(self.queues.iter().map(|q| q.fd.as_raw_fd()));
    }

    fn rx_pool(&self) -> Option<std::sync::Arc<dyn super::RxPool>> {
        // The worker's UMEM, shared by its AF_XDP ports: a frame on its free list is one the
        // fill rings can be given.
        Some(self.area.clone())
    }
}
