//! The one clock of the dataplane: monotonic nanoseconds since the first call in this process.
//!
//! Only the worker loop and the tools read it, once per iteration; everything below (engine,
//! reorder, port middleware) takes `now` as an argument so that tests can drive it by hand.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

static EPOCH: OnceLock<(Instant, u64)> = OnceLock::new();

fn epoch() -> &'static (Instant, u64) {
    EPOCH.get_or_init(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        (Instant::now(), wall)
    })
}

/// Monotonic nanoseconds since the process's clock epoch.
#[inline]
pub fn now_ns() -> u64 {
    epoch().0.elapsed().as_nanos() as u64
}

/// Wall-clock nanoseconds since the Unix epoch for a monotonic `now` (for pcap timestamps).
pub fn wall_ns(now: u64) -> u64 {
    epoch().1.saturating_add(now)
}

/// Asks the kernel to end this thread's sleeps close to when they are due (timer slack 1 us
/// instead of the default 50 us), so the idle backoff's short sleeps cost what they say. Only
/// the calling thread is affected; elsewhere than Linux it does nothing.
pub fn tighten_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and changes only this thread's slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong);
    }
}
