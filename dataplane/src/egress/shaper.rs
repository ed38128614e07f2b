//! A token bucket: what holds a port to its configured rate.

/// Bytes a shaped port may send back to back after being idle.
pub const BURST_BYTES: f64 = 64.0 * 1024.0;

/// A token bucket in bytes.
#[derive(Debug, Clone)]
pub struct Shaper {
    rate_bps: u64,
    tokens: f64,
    last_ns: u64,
}

impl Shaper {
    /// A full bucket for `rate_bps`.
    pub fn new(rate_bps: u64) -> Shaper {
        Shaper {
            rate_bps: rate_bps.max(1),
            tokens: BURST_BYTES,
            last_ns: 0,
        }
    }

    /// The rate it enforces.
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// Adds what `now` earned since the last refill.
    #[inline]
    pub fn refill(&mut self, now: u64) {
        let dt = now.saturating_sub(self.last_ns) as f64;
        self.last_ns = self.last_ns.max(now);
        self.tokens = (self.tokens + dt * self.rate_bps as f64 / 8e9).min(BURST_BYTES);
    }

    /// Takes `len` bytes if the bucket holds them.
    #[inline]
    pub fn take(&mut self, len: usize) -> bool {
        let len = len as f64;
        if self.tokens >= len {
            self.tokens -= len;
            true
        } else {
            false
        }
    }

    /// When (ns, on the refill clock) the bucket will hold `len` bytes.
    pub fn ready_at(&self, len: usize) -> u64 {
        let missing = (len as f64 - self.tokens).max(0.0);
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
}
