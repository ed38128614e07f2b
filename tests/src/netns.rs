//! Network namespaces and veth pairs for the real-port tests.
//!
//! Every namespace gets a unique name (prefix, process id, a counter) and is deleted when its
//! guard drops, also when the test panics; deleting a namespace removes its veths. Interfaces
//! are created directly inside the namespaces, so no name ever appears in the root namespace.
//! Code that must run inside a namespace runs on a thread that entered it with `setns` (sockets
//! keep the namespace they were created in, so the ports it opens can be used from anywhere).

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// Why the real-port tests cannot run here, or `None` when they can.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (network namespaces, AF_XDP and BPF need it)".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("the ip command (iproute2) is missing".into());
    }
    None
}

/// True when the test may run. Otherwise reports it skipped ([`crate::skip`]: listed in the
/// summary of `scripts/test.sh`), or panics when `SPRAYSWITCH_REQUIRE_NETNS=1` (set by
/// `scripts/test.sh` when running as root), so CI never passes a skipped test silently.
pub fn available(test: &str) -> bool {
    match unavailable() {
        None => true,
        Some(why) => {
            if std::env::var("SPRAYSWITCH_REQUIRE_NETNS").as_deref() == Ok("1") {
                panic!("{test}: required but cannot run: {why}");
            }
            crate::skip(test, &why);
            false
        }
    }
}

/// Runs a command, returning its output; panics with the command line when it fails.
pub fn sh(args: &[&str]) -> Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")));
    assert!(
        out.status.success(),
        "{} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A network namespace, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    /// Its name.
    pub name: String,
}

impl Netns {
    /// Creates `ssw-<tag>-<pid>-<n>` with loopback up.
    pub fn new(tag: &str) -> Netns {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "ssw-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        sh(&["ip", "netns", "add", &name]);
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n NAME ARGS...`.
    pub fn ip(&self, args: &[&str]) -> Output {
        let mut v = vec!["ip", "-n", &self.name];
        v.extend_from_slice(args);
        sh(&v)
    }

    /// `ip netns exec NAME ARGS...`, not checked.
    pub fn exec(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .expect("ip netns exec")
    }

    /// A sysctl inside the namespace.
    pub fn sysctl(&self, key_value: &str) {
        let out = self.exec(&["sysctl", "-qw", key_value]);
        assert!(
            out.status.success(),
            "sysctl {key_value} in {}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Runs `f` on a thread that entered this namespace.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                self.enter();
                f()
            })
            .join()
            .expect("thread inside the namespace panicked")
        })
    }

    /// Moves the calling thread into this namespace (for threads the test owns).
    pub fn enter(&self) {
        enter(&self.name);
    }
}

/// Moves the calling thread into namespace `name`; panics when it cannot.
pub fn enter(name: &str) {
    sprayswitch::port::sys::enter_netns(name).unwrap_or_else(|e| panic!("entering {name}: {e}"));
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// Creates veth `a` in `na` and its peer `b` in `nb`, both up, with the given MACs, IPv6 off
/// on both (no router solicitations or DAD noise), and no offloads that would hand AF_PACKET
/// frames larger than the MTU.
pub fn veth(na: &Netns, a: &str, mac_a: &str, nb: &Netns, b: &str, mac_b: &str) {
    na.ip(&[
        "link", "add", a, "address", mac_a, "type", "veth", "peer", "name", b, "address", mac_b,
        "netns", &nb.name,
    ]);
    for (ns, ifn) in [(na, a), (nb, b)] {
        ns.sysctl(&format!("net.ipv6.conf.{ifn}.disable_ipv6=1"));
        ns.ip(&["link", "set", ifn, "up"]);
    }
}

/// Kills a child process by PID on drop (the processes a test started, and only those).
#[derive(Debug)]
pub struct ChildGuard(pub std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
