//! A token bucket: what holds a port to its configured rate.

/// Bytes a shaped port may send back to back after being idle, by default: room for a worker
/// that comes round every few microseconds to keep a fast port at its rate.
pub const BURST_BYTES: f64 = 64.0 * 1024.0;

/// A token bucket in bytes.
#[derive(Debug, Clone)]
pub struct Shaper {
    rate_bps: u64,
    burst: f64,
    tokens: f64,
    last_ns: u64,
}

impl Shaper {
    /// A full bucket of [`BURST_BYTES`] for `rate_bps`.
    pub fn new(rate_bps: u64) -> Shaper {
        Shaper::with_burst(rate_bps, BURST_BYTES)
    }

    /// A full bucket of `burst` bytes (at least one byte) for `rate_bps`. To hold a port to
    /// its rate the bucket must take a frame plus what the rate earns between two visits of
    /// the worker; anything above that is sent early after an idle spell.
    pub fn with_burst(rate_bps: u64, burst: f64) -> Shaper {
        let burst = if burst.is_finite() {
            burst.max(1.0)
        } else {
            BURST_BYTES
        };
        Shaper {
            rate_bps: rate_bps.max(1),
            burst,
            tokens: burst,
            last_ns: 0,
        }
    }

    /// The rate it enforces.
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// Its bucket's size, bytes.
    pub fn burst_bytes(&self) -> f64 {
        self.burst
    }

    /// Adds what `now` earned since the last refill.
    #[inline]
    pub fn refill(&mut self, now: u64) {
        let dt = now.saturating_sub(self.last_ns) as f64;
        self.last_ns = self.last_ns.max(now);
        self.tokens = (self.tokens + dt * self.rate_bps as f64 / 8e9).min(self.burst);
    }

    /// Takes `len` bytes if the bucket holds them, or if it is full (a frame larger than the
    /// bucket then leaves the bucket owing the rest: it waits for a full bucket, never for
    /// ever).
    #[inline]
    pub fn take(&mut self, len: usize) -> bool {
        let len = len as f64;
        if self.tokens >= len.min(self.burst) {
            self.tokens -= len;
            true
        } else {
            false
        }
    }

    /// When (ns, on the refill clock) the bucket will hold `len` bytes.
    pub fn ready_at(&self, len: usize) -> u64 {
        let missing = ((len as f64).min(self.burst) - self.tokens).max(0.0);
        self.last_ns + (missing * 8e9 / self.rate_bps as f64).ceil() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_sends_its_burst_then_its_rate() {
        let mut s = Shaper::new(8_000_000_000); // 1 byte per ns
        s.refill(0);
        let mut sent = 0;
        while s.take(1000) {
            sent += 1000;
        }
        assert_eq!(sent, 65_000);
        assert_eq!(s.ready_at(1000), 464);
        s.refill(464);
        assert!(s.take(1000));
        assert!(!s.take(1000));
        s.refill(10_000_000);
        assert!((s.tokens - BURST_BYTES).abs() < 1e-9, "capped at the burst");
    }

    #[test]
    fn a_bucket_of_a_frame_and_a_step_keeps_a_port_at_its_rate_and_sends_nothing_early() {
        // 100 Gbit/s visited every 100 ns: 1250 bytes per visit, 1100-byte frames.
        let (frame, step) = (1100usize, 100u64);
        let mut s = Shaper::with_burst(100_000_000_000, frame as f64 + 1250.0);
        let mut sent = 0usize;
        for i in 1..=10_000u64 {
            s.refill(i * step);
            while s.take(frame) {
                sent += frame;
            }
        }
        // Backlogged for 1 ms: the rate, less one frame's worth, plus the first bucket.
        let rate_bytes = 12_500_000usize;
        assert!(
            sent + frame >= rate_bytes && sent <= rate_bytes + frame + 1250,
            "sent {sent} bytes in 1 ms at 100 Gbit/s"
        );
        // Idle for a long time: one frame and one visit's worth at once, not 64 KB.
        s.refill(10_000_000);
        let mut burst = 0;
        while s.take(frame) {
            burst += frame;
        }
        assert_eq!(burst, 2 * frame);
    }

    #[test]
    fn a_frame_larger_than_the_bucket_waits_for_a_full_bucket_and_the_rate_holds() {
        // 1 byte per ns, a 100-byte bucket, 1000-byte frames.
        let mut s = Shaper::with_burst(8_000_000_000, 100.0);
        s.refill(0);
        assert!(s.take(1000), "a full bucket lets it go");
        assert!(!s.take(1000));
        // It owes 900 bytes, then needs a full bucket again: 1000 ns after the first.
        assert_eq!(s.ready_at(1000), 1000);
        s.refill(999);
        assert!(!s.take(1000));
        s.refill(1000);
        assert!(s.take(1000));
    }
}
