//! The XDP redirect program, built and attached by sprayswitch itself through bpf(2): no clang,
//! libbpf or bpffs. One program and one XSKMAP per interface; the program sends each frame to
//! the AF_XDP socket of its receive queue, or to the kernel's stack when that queue has none.
//!
//! The attachment is a bpf_link: it detaches when the last descriptor closes, also when the
//! process is killed, so a crashed switch leaves nothing behind.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::abi::*;

/// Which XDP hook the program runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XdpMode {
    /// In the driver (veth supports it): no skb is built before the redirect.
    Native,
    /// Generic, after the skb is built: works on every interface and at any MTU.
    Skb,
}

impl XdpMode {
    /// `native` or `skb`.
    pub fn name(self) -> &'static str {
        match self {
            XdpMode::Native => "native",
            XdpMode::Skb => "skb",
        }
    }

    fn link_flags(self) -> u32 {
        match self {
            XdpMode::Native => XDP_FLAGS_DRV_MODE,
            XdpMode::Skb => XDP_FLAGS_SKB_MODE,
        }
    }
}

fn bpf_raw<T>(cmd: i32, attr: &mut T) -> io::Result<i64> {
    // SAFETY: bpf(2) reads (and for some commands writes) `size_of::<T>()` bytes of `attr`,
    // which we own; the attr structs mirror the kernel's layout (checked in abi tests).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            (attr as *mut T).cast::<libc::c_void>(),
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// bpf(2) for the commands that return a new descriptor.
fn bpf_fd<T>(cmd: i32, attr: &mut T) -> io::Result<OwnedFd> {
    let fd = bpf_raw(cmd, attr)?;
    // SAFETY: MAP_CREATE, PROG_LOAD and LINK_CREATE return a new descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// One eBPF instruction: opcode, registers (dst | src << 4), offset, immediate.
fn insn(op: u8, regs: u8, off: i16, imm: i32) -> u64 {
    u64::from(op) | u64::from(regs) << 8 | u64::from(off as u16) << 16 | u64::from(imm as u32) << 32
}

/// Loads an XDP program (the verifier's log goes into the error) and attaches it to `ifindex`
/// in `mode` with a bpf_link; `frags` declares that it handles multi-buffer frames (which it
/// must for larger-than-a-page frames to reach it). Returns (program, link).
fn load_and_link(
    insns: &[u64],
    ifindex: u32,
    mode: XdpMode,
    frags: bool,
) -> Result<(OwnedFd, OwnedFd), AttachError> {
    let license = b"Dual MIT/GPL\0";
    let mut name = [0u8; 16];
    name[..11].copy_from_slice(b"sprayswitch");
    let mut log = vec![0u8; 4096];
    let mut p = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        prog_name: name,
        expected_attach_type: BPF_XDP,
        prog_flags: if frags { BPF_F_XDP_HAS_FRAGS } else { 0 },
        ..ProgLoadAttr::default()
    };
    let prog = bpf_fd(BPF_PROG_LOAD, &mut p).map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(0);
        let msg = String::from_utf8_lossy(&log[..end]).trim().to_string();
        AttachError {
            what: if msg.is_empty() {
                "loading the program".into()
            } else {
                format!("loading the program (verifier: {msg})")
            },
            source: e,
        }
    })?;
    let mut l = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags: mode.link_flags(),
    };
    let link = bpf_fd(BPF_LINK_CREATE, &mut l).map_err(|source| AttachError {
        what: format!("attaching in {} mode", mode.name()),
        source,
    })?;
    Ok((prog, link))
}

/// The program: `return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);`
/// as six eBPF instructions, with the map's descriptor patched into the `ld_imm64`.
fn redirect_program(map_fd: i32) -> [u64; 6] {
    [
        // r2 = *(u32 *)(r1 + 16): xdp_md->rx_queue_index
        insn(0x61, 0x12, 16, 0),
        // r1 = map (ld_imm64 with src_reg = BPF_PSEUDO_MAP_FD), two slots
        insn(0x18, 0x11, 0, map_fd),
        insn(0, 0, 0, 0),
        // r3 = XDP_PASS: frames of queues without a socket go to the stack
        insn(0xb7, 0x03, 0, 2),
        // call bpf_redirect_map (helper 51)
        insn(0x85, 0, 0, 51),
        // exit
        insn(0x95, 0, 0, 0),
    ]
}

/// An attached redirect program and its XSKMAP. Dropping it detaches the program.
#[derive(Debug)]
pub struct XdpProgram {
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    /// The hook it is attached at.
    pub mode: XdpMode,
}

/// Why attaching failed, per mode tried.
#[derive(Debug)]
pub struct AttachError {
    /// Step that failed (`creating the XSKMAP`, `loading the program`, `attaching (native)` ...).
    pub what: String,
    /// The error.
    pub source: io::Error,
}

impl XdpProgram {
    /// Creates the map (`queues` entries), loads the program and attaches it to `ifindex` in
    /// `mode`.
    ///
    /// # Errors
    /// The step that failed and its errno; EBUSY at attach means another XDP program is on the
    /// interface, ERANGE (native mode on veth) that the peer's MTU is too large.
    pub fn attach(
        ifindex: u32,
        queues: u32,
        mode: XdpMode,
        frags: bool,
    ) -> Result<XdpProgram, AttachError> {
        let fail = |what: &str| {
            let what = what.to_string();
            move |source| AttachError { what, source }
        };
        let mut m = MapCreateAttr {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: queues.max(1),
            map_flags: 0,
        };
        let map = bpf_fd(BPF_MAP_CREATE, &mut m).map_err(fail("creating the XSKMAP"))?;
        let (prog, link) = load_and_link(&redirect_program(map.as_raw_fd()), ifindex, mode, frags)?;
        Ok(XdpProgram {
            map,
            _prog: prog,
            _link: link,
            mode,
        })
    }

    /// Sends queue `queue`'s frames to the AF_XDP socket `sock` (it must be bound).
    ///
    /// # Errors
    /// bpf(2)'s error.
    pub fn set_socket(&self, queue: u32, sock: &OwnedFd) -> io::Result<()> {
        let key = queue;
        let value = sock.as_raw_fd() as u32;
        let mut u = MapUpdateAttr {
            map_fd: self.map.as_raw_fd() as u32,
            pad: 0,
            key: (&key as *const u32) as u64,
            value: (&value as *const u32) as u64,
            flags: 0,
        };
        bpf_raw(BPF_MAP_UPDATE_ELEM, &mut u).map(drop)
    }
}

/// A counting sink: an XDP program that counts every frame of an interface in a per-CPU array
/// and drops it. For benchmarks and tests: it receives at the kernel's speed without a thread.
#[derive(Debug)]
pub struct CountingSink {
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    cpus: usize,
}

impl CountingSink {
    /// Attaches to `ifindex` in `mode`.
    ///
    /// # Errors
    /// The step that failed.
    pub fn attach(ifindex: u32, mode: XdpMode) -> Result<CountingSink, AttachError> {
        let fail = |what: &str| {
            let what = what.to_string();
            move |source| AttachError { what, source }
        };
        let mut m = MapCreateAttr {
            map_type: BPF_MAP_TYPE_PERCPU_ARRAY,
            key_size: 4,
            value_size: 8,
            max_entries: 1,
            map_flags: 0,
        };
        let map = bpf_fd(BPF_MAP_CREATE, &mut m).map_err(fail("creating the counter map"))?;
        let insns = [
            insn(0x62, 0x0a, -4, 0),              // *(u32 *)(r10 - 4) = 0: the key
            insn(0xbf, 0xa2, 0, 0),               // r2 = r10
            insn(0x07, 0x02, 0, -4),              // r2 += -4
            insn(0x18, 0x11, 0, map.as_raw_fd()), // r1 = map
            insn(0, 0, 0, 0),
            insn(0x85, 0, 0, 1),    // call bpf_map_lookup_elem
            insn(0x15, 0x00, 3, 0), // if r0 == 0 goto drop
            insn(0x79, 0x01, 0, 0), // r1 = *(u64 *)(r0 + 0)
            insn(0x07, 0x01, 0, 1), // r1 += 1 (per CPU: no atomics needed)
            insn(0x7b, 0x10, 0, 0), // *(u64 *)(r0 + 0) = r1
            insn(0xb7, 0x00, 0, 1), // drop: r0 = XDP_DROP
            insn(0x95, 0, 0, 0),    // exit
        ];
        let (prog, link) = load_and_link(&insns, ifindex, mode, false)?;
        Ok(CountingSink {
            map,
            _prog: prog,
            _link: link,
            cpus: possible_cpus(),
        })
    }

    /// Frames counted so far (summed over CPUs).
    pub fn count(&self) -> u64 {
        let key = 0u32;
        // Per-CPU values: one 8-byte slot per possible CPU.
        let mut vals = vec![0u64; self.cpus.max(1)];
        let mut u = MapUpdateAttr {
            map_fd: self.map.as_raw_fd() as u32,
            pad: 0,
            key: (&key as *const u32) as u64,
            value: vals.as_mut_ptr() as u64,
            flags: 0,
        };
        match bpf_raw(BPF_MAP_LOOKUP_ELEM, &mut u) {
            Ok(_) => vals.iter().sum(),
            Err(_) => 0,
        }
    }
}

/// Number of possible CPUs (`/sys/devices/system/cpu/possible`, e.g. `0-1`).
fn possible_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| {
            s.trim()
                .split(',')
                .map(|r| match r.split_once('-') {
                    Some((a, b)) => b
                        .parse::<usize>()
                        .ok()
                        .map(|b| b + 1)
                        .filter(|_| a.parse::<usize>().is_ok()),
                    None => r.parse::<usize>().ok().map(|x| x + 1),
                })
                .try_fold(0usize, |m, x| x.map(|x| m.max(x)))
        })
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_bytes_are_the_known_six_instructions() {
        let p = redirect_program(7);
        let bytes: Vec<u8> = p.iter().flat_map(|i| i.to_le_bytes()).collect();
        assert_eq!(&bytes[0..8], &[0x61, 0x12, 0x10, 0, 0, 0, 0, 0]);
        assert_eq!(&bytes[8..16], &[0x18, 0x11, 0, 0, 7, 0, 0, 0]);
        assert_eq!(&bytes[16..24], &[0; 8]);
        assert_eq!(&bytes[24..32], &[0xb7, 0x03, 0, 0, 2, 0, 0, 0]);
        assert_eq!(&bytes[32..40], &[0x85, 0, 0, 0, 0x33, 0, 0, 0]);
        assert_eq!(&bytes[40..48], &[0x95, 0, 0, 0, 0, 0, 0, 0]);
    }
}
