//! Small Linux helpers shared by the real-port backends: interface lookups, socket errors with
//! a hint, and the setup error every backend returns.
//!
//! Setup errors name the port and say what to do; packet-path errors never come here (they are
//! counters).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A port could not be set up. Returned before any worker starts.
#[derive(Debug, thiserror::Error)]
#[error("port {port}: {what}: {source}{hint}")]
pub struct SetupError {
    /// The port's name.
    pub port: String,
    /// The step that failed.
    pub what: String,
    /// The system's error.
    #[source]
    pub source: io::Error,
    /// What to do about it (empty, or starting with " (").
    pub hint: String,
}

impl SetupError {
    /// An error for `port` at step `what`, with a hint chosen from the errno (and `extra`, for
    /// causes only the caller knows).
    pub fn new(port: &str, what: &str, source: io::Error, extra: Option<&str>) -> SetupError {
        let hint = extra
            .map(str::to_string)
            .or_else(|| generic_hint(&source))
            .map(|h| format!(" ({h})"))
            .unwrap_or_default();
        SetupError {
            port: port.to_string(),
            what: what.to_string(),
            source,
            hint,
        }
    }

    /// The raw errno, when there is one.
    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }
}

fn generic_hint(e: &io::Error) -> Option<String> {
    Some(
        match e.raw_os_error()? {
            libc::EPERM | libc::EACCES => {
                "needs root, or the capabilities of its backend (AF_PACKET: CAP_NET_RAW; AF_XDP: also \
                 CAP_NET_ADMIN, CAP_BPF and CAP_IPC_LOCK; see docs/packaging.md)"
            }
            libc::ENODEV | libc::ENXIO => "no such interface in this network namespace",
            libc::EAFNOSUPPORT => "the kernel was built without this socket family",
            _ => return None,
        }
        .to_string(),
    )
}

/// Clock ticks per second of `/proc`'s CPU times (`_SC_CLK_TCK`; 100 if it cannot be read).
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as u64
    } else {
        100
    }
}

/// The last OS error.
pub fn errno() -> io::Error {
    io::Error::last_os_error()
}

/// The index of interface `ifname`.
///
/// # Errors
/// `ENODEV` when there is no such interface, or a name with a NUL byte.
pub fn ifindex(ifname: &str) -> io::Result<u32> {
    let c = CString::new(ifname)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in interface name"))?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(io::Error::from_raw_os_error(libc::ENODEV))
    } else {
        Ok(i)
    }
}

fn ifreq(ifname: &str) -> libc::ifreq {
    // SAFETY: `ifreq` is plain old data; all-zero is a valid value.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in r
        .ifr_name
        .iter_mut()
        .zip(ifname.bytes().take(libc::IFNAMSIZ - 1))
    {
        *d = s as libc::c_char;
    }
    r
}

/// A socket good for interface ioctls (any family works; a UDP socket needs no privilege).
pub fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the result is checked and owned.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Interface flags (`IFF_UP`, `IFF_RUNNING`, ...), through `sock`.
pub fn ifflags(sock: RawFd, ifname: &str) -> io::Result<u32> {
    let mut r = ifreq(ifname);
    // SAFETY: SIOCGIFFLAGS reads the name and writes the flags of the `ifreq` we own.
    let rc = unsafe { libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut r) };
    if rc < 0 {
        return Err(errno());
    }
    // SAFETY: after SIOCGIFFLAGS the union holds `ifru_flags`.
    Ok(u32::from(unsafe { r.ifr_ifru.ifru_flags } as u16))
}

/// True when `flags` say the carrier is up (administratively up and running).
pub fn carrier_up(flags: u32) -> bool {
    let want = (libc::IFF_UP | libc::IFF_RUNNING) as u32;
    flags & want == want
}

/// The interface's MTU.
pub fn ifmtu(sock: RawFd, ifname: &str) -> io::Result<u32> {
    let mut r = ifreq(ifname);
    // SAFETY: SIOCGIFMTU reads the name and writes the MTU of the `ifreq` we own.
    let rc = unsafe { libc::ioctl(sock, libc::SIOCGIFMTU, &mut r) };
    if rc < 0 {
        return Err(errno());
    }
    // SAFETY: after SIOCGIFMTU the union holds `ifru_mtu`.
    Ok(unsafe { r.ifr_ifru.ifru_mtu } as u32)
}

/// The interface's MAC address.
pub fn ifmac(sock: RawFd, ifname: &str) -> io::Result<[u8; 6]> {
    let mut r = ifreq(ifname);
    // SAFETY: SIOCGIFHWADDR reads the name and writes the address of the `ifreq` we own.
    let rc = unsafe { libc::ioctl(sock, libc::SIOCGIFHWADDR, &mut r) };
    if rc < 0 {
        return Err(errno());
    }
    // SAFETY: after SIOCGIFHWADDR the union holds `ifru_hwaddr`.
    let sa = unsafe { r.ifr_ifru.ifru_hwaddr };
    let mut m = [0u8; 6];
    for (d, s) in m.iter_mut().zip(sa.sa_data.iter()) {
        *d = *s as u8;
    }
    Ok(m)
}

/// The interface's (primary) IPv4 address.
pub fn ifaddr4(sock: RawFd, ifname: &str) -> io::Result<std::net::Ipv4Addr> {
    let mut r = ifreq(ifname);
    // SAFETY: SIOCGIFADDR reads the name and writes the address of the `ifreq` we own.
    let rc = unsafe { libc::ioctl(sock, libc::SIOCGIFADDR, &mut r) };
    if rc < 0 {
        return Err(errno());
    }
    // SAFETY: after SIOCGIFADDR the union holds a `sockaddr_in` in `ifru_addr`.
    let sa = unsafe { r.ifr_ifru.ifru_addr };
    let b: Vec<u8> = sa.sa_data[2..6].iter().map(|&c| c as u8).collect();
    Ok(std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]))
}

/// The IPv4 default gateway out of `ifname`, from the calling thread's network namespace
/// (`/proc/thread-self/net/route`: `/proc/net` follows the process, not a thread that entered
/// another namespace).
pub fn default_gateway4(ifname: &str) -> Option<std::net::Ipv4Addr> {
    let text = std::fs::read_to_string("/proc/thread-self/net/route")
        .or_else(|_| std::fs::read_to_string("/proc/net/route"))
        .ok()?;
    text.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[0] == ifname && f[1] == "00000000")
            .then(|| u32::from_str_radix(f[2], 16).ok())
            .flatten()
            // The file prints the address in host (little-endian) order.
            .map(|g| std::net::Ipv4Addr::from(g.swap_bytes()))
    })
}

/// A socket's ring memory mapped shared into this process (AF_XDP rings, the AF_PACKET receive
/// ring); unmapped on drop.
#[derive(Debug)]
pub struct SocketMapping {
    base: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is memory shared with the kernel only; the one owner of this value is the
// only userspace accessor, so moving it to another thread is sound.
unsafe impl Send for SocketMapping {}

impl SocketMapping {
    /// Maps `len` bytes of socket `fd`'s ring at page offset `pgoff`, read-write, populated.
    ///
    /// # Errors
    /// mmap's error.
    pub fn map(fd: &OwnedFd, len: usize, pgoff: i64) -> io::Result<SocketMapping> {
        // SAFETY: a shared mapping of the socket's ring at a kernel-defined page offset; the
        // result is checked before use and unmapped exactly once, in Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                pgoff,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(errno());
        }
        let base = std::ptr::NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(SocketMapping { base, len })
    }

    /// The start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty mapping (never: mmap refuses length 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for SocketMapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are what mmap returned; the owner is being dropped, so nothing
        // references the mapping anymore.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

/// `getsockopt(2)` of a plain-old-data value of type `T`.
pub fn getsockopt<T: Default>(fd: &OwnedFd, level: i32, name: i32) -> io::Result<T> {
    let mut v = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`, a live `T` we own; callers use
    // it only for plain-old-data option structures.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut v as *mut T).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        Err(errno())
    } else {
        Ok(v)
    }
}

/// `setsockopt(2)` with a value of type `T`.
pub fn setsockopt<T>(fd: &OwnedFd, level: i32, name: i32, val: &T) -> io::Result<()> {
    // SAFETY: `val` points at a live `T` of the size we pass.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (val as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Moves the calling thread into the named network namespace (`ip netns add NAME`), for code
/// that opens ports in a namespace from one process. Sockets keep the namespace they were made
/// in, so ports opened there can be used from any thread afterwards.
///
/// # Errors
/// No such namespace, or setns(2)'s error (privileges).
pub fn enter_netns(name: &str) -> io::Result<()> {
    let f = std::fs::File::open(format!("/var/run/netns/{name}"))?;
    // SAFETY: setns with a namespace descriptor we hold open; it changes only this thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(errno());
    }
    Ok(())
}

/// Link state cache: ioctls are a system call, so the state is read at most every
/// `REFRESH_NS`, from the worker's clock.
#[derive(Debug)]
pub struct LinkWatch {
    sock: OwnedFd,
    ifname: String,
    up: bool,
    next_ns: u64,
}

impl LinkWatch {
    const REFRESH_NS: u64 = 50_000_000;

    /// Watches `ifname`.
    pub fn new(ifname: &str) -> io::Result<LinkWatch> {
        let sock = ioctl_socket()?;
        let up = carrier_up(ifflags(sock.as_raw_fd(), ifname)?);
        Ok(LinkWatch {
            sock,
            ifname: ifname.to_string(),
            up,
            next_ns: 0,
        })
    }

    /// Re-reads the state when it is due.
    pub fn poll(&mut self, now: u64) {
        if now >= self.next_ns {
            self.next_ns = now + Self::REFRESH_NS;
            // An interface that vanished is down.
            self.up = ifflags(self.sock.as_raw_fd(), &self.ifname)
                .map(carrier_up)
                .unwrap_or(false);
        }
    }

    /// Last state read.
    pub fn up(&self) -> bool {
        self.up
    }

    /// Last state read, as a port reports it.
    pub fn state(&self) -> super::LinkState {
        if self.up {
            super::LinkState::Up
        } else {
            super::LinkState::Down
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_found_and_up() {
        let i = ifindex("lo").unwrap();
        assert!(i > 0);
        let s = ioctl_socket().unwrap();
        assert!(carrier_up(ifflags(s.as_raw_fd(), "lo").unwrap()));
        assert_eq!(ifmtu(s.as_raw_fd(), "lo").unwrap(), 65536);
        assert!(ifindex("no-such-if0").is_err());
        assert_eq!(ifmac(s.as_raw_fd(), "lo").unwrap(), [0; 6]);
        assert_eq!(
            ifaddr4(s.as_raw_fd(), "lo").unwrap(),
            std::net::Ipv4Addr::LOCALHOST
        );
        let mut w = LinkWatch::new("lo").unwrap();
        w.poll(0);
        assert!(w.up());
    }

    #[test]
    fn errors_name_the_port_and_hint() {
        let e = SetupError::new(
            "up0",
            "opening",
            io::Error::from_raw_os_error(libc::EPERM),
            None,
        );
        let s = e.to_string();
        assert!(s.starts_with("port up0: opening: "), "{s}");
        assert!(s.contains("needs root"), "{s}");
        let e = SetupError::new(
            "up0",
            "attach",
            io::Error::from_raw_os_error(libc::EBUSY),
            Some("detach it"),
        );
        assert!(e.to_string().ends_with("(detach it)"));
        assert_eq!(e.errno(), Some(libc::EBUSY));
    }
}
