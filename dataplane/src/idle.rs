//! What a poll loop does when it finds nothing to do.
//!
//! Busy polling owns a core. On a machine whose cores are shared (two cores, guests next to
//! the switch) a poll loop must give the CPU back when idle and still serve the next packet at
//! once. The loops here spin a little, yield a little, then wait in `ppoll(2)` on their ports'
//! receive descriptors: the kernel wakes them when a packet arrives. When the loop has timed
//! work (packets held for reordering, delayed or paced packets, transmit rings pushing back) the
//! wait is short (until the deadline, at most the policy's `sleep_us`); when it has none it
//! waits for a packet or a
//! [`Wake`] (another worker handing over packets, the control plane publishing tables, asking a
//! question or stopping the switch), up to [`QUIET_WAIT`].

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::time::Duration;

use crate::port::Port;

/// Longest wait of a loop that has no timed work and hears every source of work: it bounds
/// how stale the periodic things it publishes (link state, hold-time histogram) can get.
pub const QUIET_WAIT: Duration = Duration::from_millis(20);

/// What a loop does when an iteration finds no work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdlePolicy {
    /// Spin forever (lowest latency; owns a core).
    Spin,
    /// Spin `spins` iterations, then yield `yields` times, then wait (see the module
    /// documentation) until work shows up again. With `spins` and `yields` at 0 the loop is
    /// event-driven: it uses the CPU only for the packets it moves, which is what a switch
    /// sharing its cores with busy tenants wants, and the only safe choice at real-time
    /// priority, where a spinning or yielding thread starves everything else on its core.
    Backoff {
        /// Idle iterations spent spinning.
        spins: u32,
        /// Idle iterations spent yielding the CPU.
        yields: u32,
        /// Longest wait per idle iteration while the loop has timed work (or cannot hear all
        /// of its work), in microseconds.
        sleep_us: u32,
    },
}

impl Default for IdlePolicy {
    fn default() -> Self {
        IdlePolicy::Backoff {
            spins: 200,
            yields: 200,
            sleep_us: 50,
        }
    }
}

impl IdlePolicy {
    /// The event-driven policy: no spinning, no yielding.
    pub fn wait(sleep_us: u32) -> IdlePolicy {
        IdlePolicy::Backoff {
            spins: 0,
            yields: 0,
            sleep_us,
        }
    }

    /// Parses `spin`, `backoff` or `wait` (the last two with `sleep_us` as their short wait).
    ///
    /// # Errors
    /// Any other name, with the ones that exist.
    pub fn from_name(name: &str, sleep_us: u32) -> Result<IdlePolicy, String> {
        let sleep_us = sleep_us.max(1);
        match name {
            "spin" => Ok(IdlePolicy::Spin),
            "backoff" => Ok(IdlePolicy::Backoff {
                spins: 200,
                yields: 200,
                sleep_us,
            }),
            "wait" => Ok(IdlePolicy::wait(sleep_us)),
            other => Err(format!("'{other}': use 'backoff', 'wait' or 'spin'")),
        }
    }

    /// True when the `idle`-th consecutive idle iteration waits (rather than spins or yields).
    pub fn waits(&self, idle: u64) -> bool {
        match *self {
            IdlePolicy::Spin => false,
            IdlePolicy::Backoff { spins, yields, .. } => {
                idle > u64::from(spins) + u64::from(yields)
            }
        }
    }

    /// The policy's short wait (`sleep_us`): for loops with timed work whose deadline they do
    /// not track, and for waiters that cannot hear all of their work.
    pub fn short_wait(&self) -> Duration {
        match *self {
            IdlePolicy::Spin => Duration::ZERO,
            IdlePolicy::Backoff { sleep_us, .. } => Duration::from_micros(u64::from(sleep_us)),
        }
    }

    /// Backs off as the policy says after `idle` consecutive iterations without work. `timed`
    /// is how soon the loop has timed work: `Some(d)` waits at most `d` and at most the
    /// policy's short wait; `None` (nothing timed) waits up to [`QUIET_WAIT`] if `waiter`
    /// hears every source of work, else the short wait.
    pub fn back_off(&self, idle: u64, waiter: &mut IdleWaiter, timed: Option<Duration>) {
        match *self {
            IdlePolicy::Spin => std::hint::spin_loop(),
            IdlePolicy::Backoff { spins, .. } if !self.waits(idle) => {
                if idle <= u64::from(spins) {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            IdlePolicy::Backoff { .. } => {
                let short = self.short_wait();
                waiter.wait(match timed {
                    Some(d) => d.min(short),
                    None if waiter.hears_all() => QUIET_WAIT,
                    None => short,
                });
            }
        }
    }
}

/// Where an idle loop waits: in `ppoll(2)` on its ports' receive descriptors and its
/// [`Wake`]'s, or, when it has none (in-memory and pcap ports), in a plain sleep.
#[derive(Debug, Default)]
pub struct IdleWaiter {
    fds: Vec<libc::pollfd>,
    hears_all: bool,
    /// Indices of the wake-up eventfds in `fds`, drained whenever a wait finds them readable.
    wake_at: Vec<usize>,
}

impl IdleWaiter {
    /// A waiter on the receive descriptors of `ports` (see [`Port::wait_fds`]) and on `wakes`
    /// (one per worker it serves: a loop that drives several workers waits on all of theirs).
    /// It hears every source of work when every port and every wake has a descriptor: only
    /// then may a quiet loop wait longer than its policy's `sleep_us`.
    pub fn for_ports<'a, 'b>(
        ports: impl IntoIterator<Item = &'a dyn Port>,
        wakes: impl IntoIterator<Item = &'b Wake>,
    ) -> IdleWaiter {
        let mut raw = Vec::new();
        let mut hears_all = true;
        for p in ports {
            let before = raw.len();
            p.wait_fds(&mut raw);
            hears_all &= raw.len() > before;
        }
        let mut wake_at = Vec::new();
        for w in wakes {
            match &w.fd {
                Some(fd) => {
                    wake_at.push(raw.len());
                    raw.push(fd.as_raw_fd());
                }
                None => hears_all = false,
            }
        }
        IdleWaiter {
            wake_at,
            hears_all: hears_all && !raw.is_empty(),
            fds: raw
                .into_iter()
                .map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect(),
        }
    }

    /// How many descriptors it waits on.
    pub fn len(&self) -> usize {
        self.fds.len()
    }

    /// True when it has no descriptor and therefore sleeps.
    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// True when a packet or a wake-up ends every wait that matters (see [`Self::for_ports`]).
    pub fn hears_all(&self) -> bool {
        self.hears_all
    }

    /// Returns when a descriptor is readable or `max` has passed (a signal may end it early,
    /// which a poll loop absorbs like any spurious wake-up).
    pub fn wait(&mut self, max: Duration) {
        if self.fds.is_empty() {
            std::thread::sleep(max);
            return;
        }
        let ts = libc::timespec {
            tv_sec: max.as_secs() as libc::time_t,
            tv_nsec: max.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `fds` is a live array of `len` pollfd the kernel may write `revents` into;
        // `ts` outlives the call; a null signal mask keeps the thread's. The descriptors belong
        // to ports (and a wake) that the caller owns for as long as it uses this waiter.
        let ready = unsafe {
            libc::ppoll(
                self.fds.as_mut_ptr(),
                self.fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        // A wake-up is consumed by whoever sees it readable, so a write that raced with the
        // sleeper's disarm never leaves the eventfd readable (which would end every later wait
        // at once).
        if ready > 0 {
            for pfd in self.wake_at.iter().filter_map(|&i| self.fds.get(i)) {
                if pfd.revents & libc::POLLIN != 0 {
                    let mut v = 0u64;
                    // SAFETY: reads 8 bytes into `v` from the wake's non-blocking eventfd,
                    // which the caller keeps open while it uses this waiter.
                    unsafe {
                        libc::read(pfd.fd, (&mut v as *mut u64).cast(), 8);
                    }
                }
            }
        }
    }
}

/// Wakes a loop waiting in [`IdleWaiter::wait`] when work reaches it other than through its
/// ports. The sleeper [`arm`](Self::arm)s before it checks its queues one last time and waits;
/// a notifier that finds it armed writes to an eventfd the waiter polls. Cheap when nobody
/// sleeps: one load.
#[derive(Debug)]
pub struct Wake {
    fd: Option<OwnedFd>,
    armed: AtomicBool,
    signalled: AtomicBool,
}

impl Default for Wake {
    fn default() -> Self {
        Wake::new()
    }
}

impl Wake {
    /// A wake with its eventfd. Without one (the process ran out of descriptors) it still
    /// works, but its waiter does not hear it and keeps its waits short.
    pub fn new() -> Wake {
        // SAFETY: eventfd takes no pointers; a non-negative result is a descriptor we own.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        let fd = if raw >= 0 {
            // SAFETY: `raw` is a fresh descriptor nobody else owns.
            Some(unsafe { OwnedFd::from_raw_fd(raw) })
        } else {
            log::warn!(
                "no eventfd ({}): idle waits stay short",
                std::io::Error::last_os_error()
            );
            None
        };
        Wake {
            fd,
            armed: AtomicBool::new(false),
            signalled: AtomicBool::new(false),
        }
    }

    /// Called by the sleeper before its last look at its queues.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::Relaxed);
        // Pairs with the fence in `notify`: either the notifier sees `armed`, or the sleeper's
        // last look sees what the notifier queued before notifying.
        fence(Ordering::SeqCst);
    }

    /// Called by the sleeper after waiting (or instead of it). The eventfd itself is drained
    /// by the wait that finds it readable ([`IdleWaiter::wait`]).
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::Relaxed);
        self.signalled.store(false, Ordering::Release);
    }

    /// Called after queueing work for the sleeper: wakes it if it is (about to be) waiting.
    #[inline]
    pub fn notify(&self) {
        fence(Ordering::SeqCst);
        if self.armed.load(Ordering::Relaxed) && !self.signalled.swap(true, Ordering::AcqRel) {
            if let Some(fd) = &self.fd {
                let one = 1u64;
                // SAFETY: writes 8 bytes from `one` to our own non-blocking eventfd.
                unsafe {
                    libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8);
                }
            }
        }
    }

    /// The eventfd, for tests.
    pub fn raw_fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|f| f.as_raw_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pkt::Pkt;
    use crate::port::LinkState;
    use std::os::unix::net::UnixDatagram;
    use std::sync::Arc;
    use std::time::Instant;

    /// A port whose only trait is its descriptor.
    struct FdPort(UnixDatagram);

    impl Port for FdPort {
        fn name(&self) -> &str {
            "fd"
        }
        fn rx_burst(&mut self, _now: u64, _out: &mut Vec<Pkt>, _max: usize) -> usize {
            0
        }
        fn tx_burst(&mut self, _now: u64, _pkts: &mut Vec<Pkt>) -> usize {
            0
        }
        fn link_state(&self) -> LinkState {
            LinkState::Up
        }
        fn tx_backlog(&self) -> usize {
            0
        }
        fn wait_fds(&self, out: &mut Vec<RawFd>) {
            out.push(self.0.as_raw_fd());
        }
    }

    // The waits below are 30 s; the test asserts that something ended them long before (a
    // margin no scheduler stall reaches), not how fast.
    const LONG: Duration = Duration::from_secs(30);
    const EARLY: Duration = Duration::from_secs(10);

    #[test]
    fn a_packet_ends_the_wait() {
        let (a, b) = UnixDatagram::pair().unwrap();
        let port = FdPort(a);
        let mut w = IdleWaiter::for_ports([&port as &dyn Port], []);
        assert!(w.hears_all());
        assert_eq!(w.len(), 1);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            b.send(b"x").unwrap();
            b
        });
        let start = Instant::now();
        w.wait(LONG);
        assert!(start.elapsed() < EARLY, "the datagram did not end the wait");
        drop(t.join());
    }

    #[test]
    fn a_notify_ends_an_armed_wait_and_is_consumed() {
        let (a, _b) = UnixDatagram::pair().unwrap();
        let port = FdPort(a);
        let wake = Arc::new(Wake::new());
        assert!(wake.raw_fd().is_some());
        let mut w = IdleWaiter::for_ports([&port as &dyn Port], [&*wake]);
        assert!(w.hears_all());
        assert_eq!(w.len(), 2);

        wake.arm();
        let notifier = {
            let wake = wake.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                wake.notify();
            })
        };
        let start = Instant::now();
        w.wait(LONG);
        assert!(start.elapsed() < EARLY, "the notify did not end the wait");
        notifier.join().unwrap();
        wake.disarm();

        // Consumed: a short wait now times out (nothing readable).
        assert_times_out(&mut w);
    }

    /// A 20 ms wait on `w` runs its full length: nothing it polls is readable.
    fn assert_times_out(w: &mut IdleWaiter) {
        let start = Instant::now();
        w.wait(Duration::from_millis(20));
        assert!(
            start.elapsed() >= Duration::from_millis(20),
            "a descriptor was readable"
        );
    }

    #[test]
    fn a_wake_up_landing_after_disarm_ends_one_wait_only() {
        // A notifier that saw the sleeper armed may write after the sleeper disarmed (it lost
        // the race): the next wait ends at once and drains it, the one after that sleeps.
        let (a, _b) = UnixDatagram::pair().unwrap();
        let port = FdPort(a);
        let wake = Wake::new();
        let mut w = IdleWaiter::for_ports([&port as &dyn Port], [&wake]);
        wake.arm();
        wake.disarm();
        let fd = wake.raw_fd().unwrap();
        let one = 1u64;
        // SAFETY: writes 8 bytes to the wake's eventfd, as `notify` does.
        assert_eq!(
            unsafe { libc::write(fd, (&one as *const u64).cast(), 8) },
            8
        );
        let start = Instant::now();
        w.wait(LONG);
        assert!(
            start.elapsed() < EARLY,
            "the stray wake-up did not end the wait"
        );
        assert_times_out(&mut w);
    }

    #[test]
    fn one_waiter_hears_every_wake_it_was_given() {
        // A loop driving two workers waits on both of their wakes: either one ends the wait,
        // and each is drained by the wait that saw it.
        let (a, _b) = UnixDatagram::pair().unwrap();
        let port = FdPort(a);
        let wakes = [Wake::new(), Wake::new()];
        let mut w = IdleWaiter::for_ports([&port as &dyn Port], wakes.iter());
        assert!(w.hears_all());
        assert_eq!(w.len(), 3);
        for which in [1, 0] {
            for k in &wakes {
                k.arm();
            }
            wakes[which].notify();
            let start = Instant::now();
            w.wait(LONG);
            assert!(start.elapsed() < EARLY, "wake {which} did not end the wait");
            for k in &wakes {
                k.disarm();
            }
            assert_times_out(&mut w);
        }
    }

    #[test]
    fn a_notify_while_disarmed_writes_nothing() {
        let (a, _b) = UnixDatagram::pair().unwrap();
        let port = FdPort(a);
        let wake = Wake::new();
        let mut w = IdleWaiter::for_ports([&port as &dyn Port], [&wake]);
        wake.notify();
        assert_times_out(&mut w);
    }

    #[test]
    fn ports_without_descriptors_keep_waits_short() {
        let (a, _b) = crate::port::mem::link("a", "b", 8);
        let (c, _d) = UnixDatagram::pair().unwrap();
        let fd = FdPort(c);
        let w = IdleWaiter::for_ports([&a as &dyn Port], []);
        assert!(w.is_empty() && !w.hears_all());
        let w = IdleWaiter::for_ports([&a as &dyn Port, &fd as &dyn Port], []);
        assert_eq!(w.len(), 1);
        assert!(!w.hears_all(), "the in-memory port is not heard");
    }

    #[test]
    fn policies_by_name() {
        assert_eq!(IdlePolicy::from_name("spin", 5), Ok(IdlePolicy::Spin));
        assert_eq!(
            IdlePolicy::from_name("wait", 0),
            Ok(IdlePolicy::Backoff {
                spins: 0,
                yields: 0,
                sleep_us: 1
            })
        );
        assert!(IdlePolicy::from_name("backoff", 50).unwrap().waits(401));
        assert!(!IdlePolicy::from_name("backoff", 50).unwrap().waits(400));
        assert!(IdlePolicy::wait(50).waits(1));
        assert!(!IdlePolicy::Spin.waits(u64::MAX));
        assert!(IdlePolicy::from_name("nap", 1)
            .unwrap_err()
            .contains("'nap'"));
    }
}
