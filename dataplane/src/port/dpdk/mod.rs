//! DPDK ports (cargo feature `dpdk`): a port is an ethdev (a PCI device bound to a DPDK
//! driver, or a vdev such as `net_af_packet`) polled by its worker.
//!
//! The binding is small and its own (no maintained Rust binding builds against DPDK 22.11):
//! `shim.c` wraps the calls used, DPDK's static-inline fast path among them, in plain C
//! functions, and `ffi.rs` declares those; no DPDK struct crosses to Rust. What a switch needs:
//!
//! - **EAL** once per process ([`init_eal`]), with the arguments of the configuration's
//!   `[dpdk] eal_args` (`--no-huge -m 512`, `--vdev`, `-a` PCI allow-lists, `--no-shconf` ...).
//!   EAL pins the thread that initialises it to its main lcore; [`init_eal`] gives the thread
//!   back its CPU set, so the workers started after it are placed by the switch, not by EAL.
//! - **Packets are mbufs.** A received mbuf becomes the [`Pkt`] (its bytes are the mbuf's data
//!   room, no copy) and goes to a DPDK port's transmit ring as it is, whichever DPDK port it
//!   came from; the driver frees it after sending. A packet of another backend is copied into
//!   an mbuf of the port's pool, and a dropped packet frees its mbuf: every mbuf goes back to its pool ([`DpdkPort::pool_in_use`] counts them).
//! - **Jumbo frames**: the pool's data room fits the port's MTU, so a frame is one segment and
//!   crosses without a copy; a frame a driver scatters over several segments anyway is copied
//!   out whole (counted in [`DpdkPort::linearized`]). A packet of another backend larger than
//!   the port's MTU allows is dropped and counted, as a NIC would.
//!
//! A worker that uses a DPDK port registers itself with EAL (`rte_thread_register`, once per
//! thread), so that its mbuf allocations and frees go through the pools' per-thread caches;
//! each queue is used by one thread, the port's worker, as DPDK requires. The pools use
//! DPDK's default multi-producer, multi-consumer ring, so a packet dropped on any thread
//! returns its mbuf safely (`--mbuf-pool-ops-name` with single-producer ops would break that:
//! not for this switch).

mod ffi;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::NonNull;
use std::sync::Mutex;

use super::{LinkState, Port};
use crate::pkt::mbuf::Mbuf;
use crate::pkt::{push_built, Pkt};

/// What went wrong opening a DPDK port, naming the port and what to do.
#[derive(Debug, thiserror::Error)]
pub enum DpdkError {
    /// `rte_eal_init` failed.
    #[error("DPDK EAL init with {args:?} failed: {reason}")]
    Eal {
        /// The arguments given.
        args: Vec<String>,
        /// DPDK's reason and what to do.
        reason: String,
    },
    /// EAL runs already with other arguments (it initialises once per process).
    #[error(
        "DPDK EAL is initialised already (with {had:?}); it cannot be initialised again with \
         {asked:?} in the same process: restart the switch to change [dpdk] eal_args"
    )]
    EalAgain {
        /// Arguments of the first init.
        had: Vec<String>,
        /// Arguments asked now.
        asked: Vec<String>,
    },
    /// A port was opened before EAL was initialised.
    #[error("port {port}: DPDK EAL is not initialised (the [dpdk] section's eal_args start it)")]
    NoEal {
        /// Port name.
        port: String,
    },
    /// No ethdev of that name.
    #[error(
        "port {port}: no DPDK device {device:?} ({reason}): name a PCI address bound to a DPDK \
         driver (and allowed by -a in eal_args), a vdev given with --vdev in eal_args, or a \
         vdev's whole devargs (net_af_packet0,iface=eth0)"
    )]
    NoDevice {
        /// Port name.
        port: String,
        /// The `device` asked for.
        device: String,
        /// DPDK's reason.
        reason: String,
    },
    /// The device has fewer queues than asked for.
    #[error("port {port}: {device} has {max} receive/transmit queue pairs, {asked} asked for")]
    Queues {
        /// Port name.
        port: String,
        /// Device.
        device: String,
        /// Queues asked for.
        asked: u32,
        /// Queues the device has.
        max: u32,
    },
    /// The MTU is more than the device takes.
    #[error("port {port}: MTU {mtu} is more than {device} ({driver}) takes (MTU {max}){hint}")]
    FrameSize {
        /// Port name.
        port: String,
        /// Device.
        device: String,
        /// Its driver.
        driver: String,
        /// The MTU.
        mtu: u16,
        /// The device's largest MTU.
        max: u32,
        /// What to do.
        hint: &'static str,
    },
    /// The pool would not fill the port's rings and leave room for what the switch holds.
    #[error(
        "port {port}: {mbufs} mbufs are too few for {queues} receive queue(s) of {ring} \
         descriptors, a transmit ring, the pool caches and what the switch holds: give [dpdk] \
         mbufs = {need} or more"
    )]
    TooFewMbufs {
        /// Port name.
        port: String,
        /// Mbufs asked for.
        mbufs: u32,
        /// Queues asked for.
        queues: u32,
        /// Descriptors per ring.
        ring: u16,
        /// The least that works.
        need: u32,
    },
    /// The mbuf pool could not be made.
    #[error(
        "port {port}: no memory for {mbufs} mbufs of {room} bytes ({reason}): give EAL more \
         memory (-m MB with --no-huge, or more hugepages) or fewer mbufs ([dpdk] mbufs)"
    )]
    Pool {
        /// Port name.
        port: String,
        /// Mbufs asked for.
        mbufs: u32,
        /// Data room of each.
        room: u32,
        /// DPDK's reason.
        reason: String,
    },
    /// Configuring or starting the device failed.
    #[error("port {port}: {device}: {step} failed: {reason}")]
    Setup {
        /// Port name.
        port: String,
        /// Device.
        device: String,
        /// The step.
        step: &'static str,
        /// DPDK's reason.
        reason: String,
    },
}

fn strerror(e: c_int) -> String {
    // SAFETY: rte_strerror returns a pointer to a NUL-terminated string it owns (static or
    // thread-local), valid until the next call on this thread; copied at once.
    unsafe { CStr::from_ptr(ffi::ss_strerror(e)) }
        .to_string_lossy()
        .into_owned()
}

/// The arguments EAL was started with in this process, and how that went (a failed
/// `rte_eal_init` cannot be tried again: EAL keeps what it parsed).
static EAL: Mutex<Option<EalStart>> = Mutex::new(None);

/// EAL's arguments and the outcome of starting it with them.
type EalStart = (Vec<String>, Result<(), String>);

/// Initialises DPDK's EAL with `args` (without the program name), once per process; a second
/// call with the same arguments returns what the first got, with others it is an error.
/// Without `--no-huge` on a machine with no hugepages reserved, it fails before EAL would,
/// saying so.
///
/// # Errors
/// [`DpdkError::Eal`] with DPDK's reason, [`DpdkError::EalAgain`].
pub fn init_eal(args: &[String]) -> Result<(), DpdkError> {
    let mut done = EAL.lock().unwrap_or_else(|e| e.into_inner());
    let eal = |reason: String| DpdkError::Eal {
        args: args.to_vec(),
        reason,
    };
    if let Some((had, outcome)) = done.as_ref() {
        if had != args {
            return Err(DpdkError::EalAgain {
                had: had.clone(),
                asked: args.to_vec(),
            });
        }
        return outcome.clone().map_err(eal);
    }
    if !args.iter().any(|a| a == "--no-huge") && hugepages_total() == Some(0) {
        return Err(eal(
            "no hugepages are reserved (of any size, /sys/kernel/mm/hugepages): reserve some \
             (echo 1024 > /proc/sys/vm/nr_hugepages) or add --no-huge -m 512 to eal_args"
                .into(),
        ));
    }
    let mut owned: Vec<CString> = Vec::with_capacity(args.len() + 1);
    owned.push(CString::from(c"sprayswitch"));
    for a in args {
        owned.push(
            CString::new(a.as_str())
                .map_err(|_| eal(format!("argument {a:?} holds a NUL byte")))?,
        );
    }
    // EAL keeps pointers into argv: the strings live for the process (leaked once). argv
    // ends with a null pointer, as a C program's does.
    let mut argv: Vec<*mut c_char> = owned.into_iter().map(CString::into_raw).collect();
    let argc = argv.len() as c_int;
    argv.push(std::ptr::null_mut());
    let cpus = affinity();
    // SAFETY: argv holds argc valid NUL-terminated strings that are never freed; EAL may
    // permute the array, which is leaked with them below.
    let rc = unsafe { ffi::ss_eal_init(argc, argv.as_mut_ptr()) };
    std::mem::forget(argv);
    if let Some(set) = cpus {
        set_affinity(&set);
    }
    let outcome = if rc == 0 {
        Ok(())
    } else {
        let mut reason = strerror(rc);
        if rc == libc::EALREADY {
            reason.push_str(" (EAL was initialised by other code in this process)");
        }
        Err(reason)
    };
    *done = Some((args.to_vec(), outcome.clone()));
    outcome.map_err(eal)
}

/// True once [`init_eal`] succeeded in this process.
pub fn eal_running() -> bool {
    matches!(
        EAL.lock().unwrap_or_else(|e| e.into_inner()).as_ref(),
        Some((_, Ok(())))
    )
}

/// Hugepages reserved, of every size (`/sys/kernel/mm/hugepages/*/nr_hugepages`); `None`
/// when the kernel does not say.
fn hugepages_total() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/kernel/mm/hugepages").ok()?;
    Some(
        dir.flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("nr_hugepages")).ok())
            .filter_map(|t| t.trim().parse::<u64>().ok())
            .sum(),
    )
}

fn affinity() -> Option<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain data; all-zero is an empty set, filled by the kernel.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the size and pointer describe `set`.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    (rc == 0).then_some(set)
}

fn set_affinity(set: &libc::cpu_set_t) {
    // SAFETY: the size and pointer describe a valid set; failure leaves the thread as it is.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(set), set) };
}

/// Makes the calling thread an EAL thread once (see `ss_thread_register`): its mbuf frees
/// and allocations then go through the pools' per-thread caches instead of each touching the
/// shared ring. Without a free lcore id it stays as it is (correct, only slower), said once.
fn register_thread() {
    thread_local! {
        static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    DONE.with(|d| {
        if !d.replace(true) {
            // SAFETY: EAL runs (a port exists); registers the calling thread only.
            let rc = unsafe { ffi::ss_thread_register() };
            if rc != 0 {
                log::info!(
                    "DPDK: this thread stays a non-EAL thread ({}): mbufs go to their pools \
                     without a cache",
                    strerror(rc)
                );
            }
        }
    });
}

/// Receive and transmit descriptors per queue unless [`DpdkOptions::ring`] says otherwise.
pub const RING: u16 = 1024;

const BURST: usize = 64;

/// Mbufs of a pool beyond its rings, two pool caches and a burst in flight: what the switch
/// can hold at the least (pool caches grow to one and a half times their size, and each worker
/// that frees into the pool has one: the margin keeps a few of them from emptying it).
const SPARE: u32 = 1024;

/// How to open a DPDK port.
#[derive(Debug, Clone)]
pub struct DpdkOptions {
    /// The device: an ethdev name EAL knows (a PCI address, a `--vdev`'s name), or a vdev's
    /// whole devargs (`net_af_packet0,iface=eth0`), probed when EAL does not have it yet.
    pub device: String,
    /// Receive queues polled (0..queues), with as many transmit queues.
    pub queues: u32,
    /// The port's Ethernet MTU.
    pub mtu: u16,
    /// Mbufs in the port's pool: at least its rings' descriptors, plus what the switch holds
    /// of what it receives (egress queues, reorder rings).
    pub mbufs: u32,
    /// Receive and transmit descriptors per queue; [`RING`] by default. The device fits it to
    /// its limits (`rte_eth_dev_adjust_nb_rx_tx_desc`), and the port logs what it took.
    pub ring: u16,
}

/// A DPDK ethdev as a [`Port`].
pub struct DpdkPort {
    name: String,
    device: String,
    driver: String,
    id: u16,
    /// The device was probed when the port opened (removed again when it closes).
    probed: c_int,
    queues: u16,
    next_q: u16,
    pool: NonNull<c_void>,
    mac: [u8; 6],
    link: LinkState,
    stats: ffi::Stats,
    /// Frames lost by the port itself: freed on receive (a stripped VLAN tag that could not
    /// go back, a frame larger than any packet), or too large to send.
    lost: u64,
    /// Bytes a frame may have in one of this port's mbufs.
    seg_room: usize,
    /// Multi-segment frames copied out whole.
    linearized: u64,
    polled_ns: u64,
    rx: [ffi::RxDesc; BURST],
    /// Received beyond what a call asked for (a driver's vector path takes bursts of 4 or
    /// more), given out first by the next call.
    pending: Vec<Pkt>,
}

// SAFETY: the port's queues and pool are used by the one thread that owns the DpdkPort (its
// worker) at a time, which is what DPDK requires of a queue; the pool pointer stays valid for
// the process (pools are never freed: mbufs of it may outlive the port).
unsafe impl Send for DpdkPort {}

static POOLS: Mutex<u32> = Mutex::new(0);

/// Held while a port opens or closes (see [`DpdkPort::open`]).
static CONTROL: Mutex<()> = Mutex::new(());

impl DpdkPort {
    /// Opens `o.device` as port `name`: checks its queues and frame size, makes its mbuf pool,
    /// configures `o.queues` queue pairs, starts it in promiscuous mode.
    ///
    /// # Errors
    /// [`DpdkError`] naming the port and what to do.
    pub fn open(name: &str, o: &DpdkOptions) -> Result<DpdkPort, DpdkError> {
        if !eal_running() {
            return Err(DpdkError::NoEal { port: name.into() });
        }
        // DPDK's hotplug and device configuration are not thread-safe: one open or close at a
        // time in the process.
        let _one = CONTROL.lock().unwrap_or_else(|e| e.into_inner());
        let device = o.device.clone();
        let no_device = |reason: String| DpdkError::NoDevice {
            port: name.into(),
            device: device.clone(),
            reason,
        };
        let cname = CString::new(o.device.as_str()).map_err(|_| no_device("a NUL byte".into()))?;
        let (mut id, mut probed) = (0u16, 0 as c_int);
        // SAFETY: a valid C string and valid out-pointers.
        let rc = unsafe { ffi::ss_port_by_name(cname.as_ptr(), &mut id, &mut probed) };
        if rc != 0 {
            return Err(no_device(strerror(rc)));
        }
        // From here on a failure releases what was set up (a vdev probed here is removed, so
        // that the same devargs can be opened again).
        let release = |pool: Option<NonNull<c_void>>| {
            // SAFETY: a port id EAL gave; the pool (if any) has no mbuf outside it once the
            // port is closed.
            unsafe {
                ffi::ss_port_close(id, 0, probed);
                if let Some(p) = pool {
                    ffi::ss_pool_free(p.as_ptr());
                }
            }
        };
        // The ethdev's name: the devargs' first word.
        let dev = o.device.split(',').next().unwrap_or(&o.device).to_string();
        let setup = |step: &'static str, rc: c_int| DpdkError::Setup {
            port: name.into(),
            device: dev.clone(),
            step,
            reason: strerror(rc),
        };
        // SAFETY: Info is plain data (all-zero valid), filled by the shim.
        let mut info: ffi::Info = unsafe { std::mem::zeroed() };
        // SAFETY: a valid port id and out-pointer.
        let rc = unsafe { ffi::ss_port_info(id, &mut info) };
        if rc != 0 {
            release(None);
            return Err(setup("rte_eth_dev_info_get", rc));
        }
        // SAFETY: the shim NUL-terminates the driver name within the array.
        let driver = unsafe { CStr::from_ptr(info.driver.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let max_q = u32::from(info.max_rx_queues.min(info.max_tx_queues));
        if o.queues == 0 || o.queues > max_q {
            release(None);
            return Err(DpdkError::Queues {
                port: name.into(),
                device: dev,
                asked: o.queues,
                max: max_q,
            });
        }
        // Every receive ring fills with mbufs when the port starts; the transmit ring, each
        // EAL thread's pool cache and a burst in flight take more. What is left is what the
        // switch can hold of what it receives: at least SPARE.
        // SAFETY: plain getters.
        let cache = unsafe { ffi::ss_pool_cache() };
        let need = (o.queues + 1) * u32::from(o.ring) + 2 * cache + BURST as u32 + SPARE;
        if o.mbufs < need {
            release(None);
            return Err(DpdkError::TooFewMbufs {
                port: name.into(),
                mbufs: o.mbufs,
                queues: o.queues,
                ring: o.ring,
                need,
            });
        }
        // The largest MTU the device takes, by ethdev's own rule (configuring more fails with
        // only EINVAL): its largest frame less the overhead it states.
        let overhead = if info.max_mtu != u16::MAX && info.max_rx_pktlen > u32::from(info.max_mtu) {
            info.max_rx_pktlen - u32::from(info.max_mtu)
        } else {
            18
        };
        let max_mtu = info.max_rx_pktlen.saturating_sub(overhead);
        if info.max_rx_pktlen != 0 && u32::from(o.mtu) > max_mtu {
            release(None);
            return Err(DpdkError::FrameSize {
                port: name.into(),
                device: dev,
                driver: driver.clone(),
                mtu: o.mtu,
                max: max_mtu,
                hint: if driver.contains("af_packet") {
                    ": DPDK 22.11's net_af_packet states 1518-byte frames whatever its ring \
                     frames are; jumbo frames need a NIC's driver"
                } else {
                    ""
                },
            });
        }
        // A frame of that MTU (Ethernet, two VLAN tags and the FCS around it) in one buffer,
        // rounded up to whole KiB: NICs size receive buffers in such units (ixgbe in 1 KiB),
        // and a buffer they round down would scatter every full-size frame.
        // SAFETY: a plain getter.
        let headroom = unsafe { ffi::ss_headroom() };
        let need = (u32::from(o.mtu) + 14 + 8 + 4).max(2048).div_ceil(1024) * 1024;
        let room = (need + headroom).min(u32::from(u16::MAX));
        let pool_name = {
            let mut n = POOLS.lock().unwrap_or_else(|e| e.into_inner());
            *n += 1;
            CString::new(format!("ss-pool-{}", *n)).expect("no NUL")
        };
        let mut err: c_int = 0;
        // SAFETY: a valid C string and port id; `err` is an out-pointer.
        let pool =
            unsafe { ffi::ss_pool_create(pool_name.as_ptr(), o.mbufs, room as u16, id, &mut err) };
        let Some(pool) = NonNull::new(pool) else {
            release(None);
            return Err(DpdkError::Pool {
                port: name.into(),
                mbufs: o.mbufs,
                room,
                reason: strerror(err),
            });
        };
        let (mut step, mut promisc): (c_int, c_int) = (0, 0);
        let mut ring = o.ring;
        // SAFETY: a valid port id and pool; `ring`, `step` and `promisc` are in/out-pointers.
        let rc = unsafe {
            ffi::ss_port_start(
                id,
                o.queues as u16,
                &mut ring,
                pool.as_ptr(),
                o.mtu,
                &mut step,
                &mut promisc,
            )
        };
        if rc != 0 {
            release(Some(pool));
            let what = match step {
                0 => "rte_eth_dev_info_get",
                1 => "rte_eth_dev_configure",
                2 => "rte_eth_dev_adjust_nb_rx_tx_desc",
                3 => "rte_eth_rx_queue_setup",
                4 => "rte_eth_tx_queue_setup",
                _ => "rte_eth_dev_start",
            };
            return Err(setup(what, rc));
        }
        if ring != o.ring {
            let need = (o.queues + 1) * u32::from(ring) + 2 * cache + BURST as u32 + SPARE;
            if o.mbufs < need {
                // SAFETY: the port was started here; the pool has no mbuf outside it once the
                // port is closed.
                unsafe {
                    ffi::ss_port_close(id, 1, probed);
                    ffi::ss_pool_free(pool.as_ptr());
                }
                return Err(DpdkError::TooFewMbufs {
                    port: name.into(),
                    mbufs: o.mbufs,
                    queues: o.queues,
                    ring,
                    need,
                });
            }
            log::info!(
                "port {name}: {dev} takes rings of {ring} descriptors ({} asked for)",
                o.ring
            );
        }
        if promisc != 0 {
            // An untrusted VF, say: frames for MACs other than the device's are not seen.
            log::warn!(
                "port {name}: {dev} refused promiscuous mode ({}): it receives frames for its \
                 own MAC and broadcast only",
                strerror(promisc)
            );
        }
        let mut mac = [0u8; 6];
        // SAFETY: `mac` has the 6 bytes the shim writes.
        unsafe { ffi::ss_mac(id, mac.as_mut_ptr()) };
        let mut p = DpdkPort {
            name: name.into(),
            device: dev,
            driver,
            id,
            probed,
            queues: o.queues as u16,
            next_q: 0,
            pool,
            mac,
            link: LinkState::Down,
            stats: ffi::Stats::default(),
            lost: 0,
            seg_room: (room - headroom) as usize,
            linearized: 0,
            polled_ns: 0,
            rx: [ffi::RxDesc::default(); BURST],
            pending: Vec::with_capacity(BURST),
        };
        p.refresh();
        Ok(p)
    }

    /// The ethdev's name.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Its driver (`net_af_packet`, `mlx5_pci` ...).
    pub fn driver(&self) -> &str {
        &self.driver
    }

    /// The device's MAC.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Mbufs of this port's pool that are out of it now (in receive rings, in the switch, in
    /// a transmit ring not yet sent).
    pub fn pool_in_use(&self) -> u32 {
        // SAFETY: the pool is valid for the process.
        unsafe { ffi::ss_pool_in_use(self.pool.as_ptr()) }
    }

    /// Mbufs in the pool now.
    pub fn pool_available(&self) -> u32 {
        // SAFETY: as above.
        unsafe { ffi::ss_pool_avail(self.pool.as_ptr()) }
    }

    /// Multi-segment frames received and copied out whole.
    pub fn linearized(&self) -> u64 {
        self.linearized
    }

    fn refresh(&mut self) {
        // SAFETY: a valid port id.
        self.link = match unsafe { ffi::ss_link_up(self.id) } {
            1 => LinkState::Up,
            _ => LinkState::Down,
        };
        let mut s = ffi::Stats::default();
        // SAFETY: a valid port id and out-pointer.
        if unsafe { ffi::ss_stats(self.id, &mut s) } == 0 {
            self.stats = s;
        }
    }

    /// A packet of another backend (that fits one mbuf), copied into an mbuf of this port's
    /// pool; `None` when the pool is empty.
    fn copy_in(&self, p: &Pkt) -> Option<Pkt> {
        let mut data = std::ptr::null_mut();
        let mut room = 0u32;
        // SAFETY: the pool is valid; the source bytes are p's frame; the out-pointers are valid.
        let m = unsafe {
            ffi::ss_mbuf_from(
                self.pool.as_ptr(),
                p.data().as_ptr(),
                p.len() as u32,
                &mut data,
                &mut room,
            )
        };
        let mbuf = Mbuf {
            m: NonNull::new(m)?,
            data: NonNull::new(data)?,
            room: room as usize,
        };
        let mut c = Pkt::in_mbuf(mbuf, p.len());
        c.rx_port = p.rx_port;
        c.rx_ns = p.rx_ns;
        Some(c)
    }
}

impl Port for DpdkPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, now: u64, out: &mut Vec<Pkt>, max: usize) -> usize {
        register_thread();
        // What the last call received beyond its `max` first.
        let mut got = self.pending.len().min(max);
        if got > 0 {
            // (Only then: extending by an empty drain cost 1.5% of the source role's samples,
            // a store-forwarding stall on the drain built on the stack.)
            out.extend(self.pending.drain(..got));
        }
        // Every queue once per call, starting where the last call stopped.
        for _ in 0..self.queues {
            if got >= max {
                break;
            }
            let q = self.next_q;
            self.next_q = (self.next_q + 1) % self.queues;
            // At least 4: vector receive paths (i40e, ixgbe) return nothing for fewer.
            let want = (max - got).clamp(4, BURST) as u16;
            // SAFETY: `rx` has room for `want` descriptors; one thread uses this queue.
            let n =
                unsafe { ffi::ss_rx_burst(self.id, q, self.rx.as_mut_ptr(), want, &mut self.lost) };
            for i in 0..usize::from(n) {
                let d = self.rx[i];
                let len = d.len as usize;
                let (Some(m), Some(data)) = (NonNull::new(d.m), NonNull::new(d.data)) else {
                    continue;
                };
                let mbuf = Mbuf {
                    m,
                    data,
                    room: d.room as usize,
                };
                if d.segs == 1 && got < max {
                    // The common case, built where it stays (see `push_built`).
                    push_built(out, || Pkt::in_mbuf(mbuf, len)).rx_ns = now;
                    got += 1;
                    continue;
                }
                let mut p = if d.segs == 1 {
                    Pkt::in_mbuf(mbuf, len)
                } else {
                    // Scattered over segments: one contiguous copy (the mbufs go back).
                    let mut p = Pkt::with_capacity(len.max(crate::pkt::DEFAULT_BUF));
                    let buf = p.resize(len);
                    if buf.len() == len {
                        // SAFETY: `buf` has room for the chain's `len` bytes.
                        unsafe { ffi::ss_mbuf_read(mbuf.m.as_ptr(), buf.as_mut_ptr()) };
                        self.linearized += 1;
                    } else {
                        // Larger than any packet of the switch: dropped, counted.
                        self.lost += 1;
                        continue;
                    }
                    p
                };
                p.rx_ns = now;
                if got < max {
                    out.push(p);
                    got += 1;
                } else {
                    self.pending.push(p);
                }
            }
        }
        got
    }

    fn tx_burst(&mut self, _now: u64, pkts: &mut Vec<Pkt>) -> usize {
        register_thread();
        let mut taken = 0;
        while !pkts.is_empty() {
            let mut n = pkts.len().min(BURST);
            // Packets of other backends become mbufs of this port's pool, in place.
            let mut i = 0;
            while i < n {
                if pkts[i].len() < 14 {
                    // Not even an Ethernet header (some NICs flag such a descriptor as
                    // malicious): dropped, counted.
                    pkts.remove(i);
                    self.lost += 1;
                    taken += 1;
                    n -= 1;
                    continue;
                }
                if !pkts[i].is_mbuf() {
                    if pkts[i].len() > self.seg_room {
                        // Larger than this port's MTU makes frames: no NIC sends it. Counted.
                        pkts.remove(i);
                        self.lost += 1;
                        taken += 1;
                        n -= 1;
                        continue;
                    }
                    match self.copy_in(&pkts[i]) {
                        Some(c) => pkts[i] = c,
                        None => {
                            // The pool is empty: send what is ready, the rest waits.
                            n = i;
                            break;
                        }
                    }
                }
                i += 1;
            }
            if n == 0 {
                break;
            }
            let mut m = [std::ptr::null_mut::<c_void>(); BURST];
            let mut lens = [0u32; BURST];
            for (i, p) in pkts[..n].iter().enumerate() {
                m[i] = p.mbuf_ptr().expect("made an mbuf above");
                lens[i] = p.len() as u32;
            }
            // SAFETY: `m[..n]` are valid mbufs owned by `pkts[..n]`; the driver takes the
            // first `sent` of them, whose owners are given up below without freeing.
            let sent = usize::from(unsafe {
                ffi::ss_tx_burst(self.id, 0, m.as_mut_ptr(), lens.as_ptr(), n as u16)
            });
            for p in pkts.drain(..sent) {
                if let Ok(mbuf) = p.into_mbuf() {
                    let _ = mbuf.into_raw();
                }
            }
            taken += sent;
            if sent < n {
                break;
            }
        }
        taken
    }

    fn poll(&mut self, now: u64) {
        if now >= self.polled_ns {
            self.polled_ns = now + 100_000_000;
            self.refresh();
        }
    }

    fn link_state(&self) -> LinkState {
        self.link
    }

    fn tx_backlog(&self) -> usize {
        0
    }

    fn dropped(&self) -> u64 {
        self.lost + self.stats.imissed + self.stats.ierrors + self.stats.rx_nombuf
    }

    fn backend_counters(&self) -> super::BackendCounters {
        super::BackendCounters {
            rx_dropped: self.stats.imissed,
            rx_ring_full: 0,
            rx_no_buffer: self.stats.rx_nombuf,
            invalid: self.stats.ierrors,
        }
    }

    fn rx_pool(&self) -> Option<std::sync::Arc<dyn super::RxPool>> {
        Some(std::sync::Arc::new(MbufPool {
            pool: self.pool,
            capacity: self.pool_available() + self.pool_in_use(),
        }))
    }
}

/// A port's mempool as an [`super::RxPool`].
#[derive(Debug)]
struct MbufPool {
    pool: NonNull<c_void>,
    capacity: u32,
}

// SAFETY: the pool is created once per port and never freed while the process runs
// (`rte_mempool_avail_count` is safe from any thread: it reads the ring and every lcore's
// cache without writing).
unsafe impl Send for MbufPool {}
// SAFETY: as for `Send`: only read through `ss_pool_avail`.
unsafe impl Sync for MbufPool {}

impl super::RxPool for MbufPool {
    fn capacity(&self) -> usize {
        self.capacity as usize
    }
    fn free(&self) -> usize {
        // SAFETY: the pool is valid for the process (see `Send`).
        unsafe { ffi::ss_pool_avail(self.pool.as_ptr()) as usize }
    }
}

impl Drop for DpdkPort {
    fn drop(&mut self) {
        let _one = CONTROL.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: a port this DpdkPort started; its mbufs still in the switch stay valid (the
        // pool is never freed).
        unsafe { ffi::ss_port_close(self.id, 1, self.probed) };
    }
}
