//! The depths packets find entering an egress queue, counted per packet at the cost of one
//! increment: log-linear buckets (exact below 16 bytes, then 16 per power of two: within 6.25%),
//! turned into an HdrHistogram only when published (every 100 ms) or asked for.

use hdrhistogram::Histogram;

/// Sub-buckets per power of two.
const SUB: usize = 16;
/// Powers of two above the exact range, up to 2^32 bytes.
const POWERS: usize = 32 - 4;
const BUCKETS: usize = SUB + POWERS * SUB;

/// Per-packet depth counts.
#[derive(Debug, Clone)]
pub struct DepthCounts {
    counts: Box<[u64; BUCKETS]>,
}

impl Default for DepthCounts {
    fn default() -> Self {
        DepthCounts {
            counts: Box::new([0; BUCKETS]),
        }
    }
}

#[inline]
fn bucket(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let v = v.min((1 << 32) - 1);
    let e = 63 - v.leading_zeros() as usize; // 4..=31
    let sub = ((v >> (e - 4)) as usize) & (SUB - 1);
    SUB + (e - 4) * SUB + sub
}

/// The smallest depth of bucket `b`.
fn low(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let e = (b - SUB) / SUB + 4;
    let sub = ((b - SUB) % SUB) as u64;
    (1 << e) | (sub << (e - 4))
}

impl DepthCounts {
    /// Counts one packet that found `depth` bytes.
    #[inline]
    pub fn record(&mut self, depth: u64) {
        self.counts[bucket(depth)] += 1;
    }

    /// Packets counted.
    pub fn len(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Nothing counted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every count.
    pub fn reset(&mut self) {
        self.counts.fill(0);
    }

    /// The counts as an HdrHistogram (each bucket at its lowest depth, at least 1).
    pub fn histogram(&self) -> Histogram<u64> {
        let mut h = depth_histogram();
        self.fill(&mut h);
        h
    }

    /// Replaces `h`'s contents with the counts.
    pub fn fill(&self, h: &mut Histogram<u64>) {
        h.reset();
        for (b, &n) in self.counts.iter().enumerate() {
            if n > 0 {
                let _ = h.record_n(low(b).max(1), n);
            }
        }
    }
}

/// A new empty histogram of queue depths (1 byte to 4 GiB, two significant digits).
pub fn depth_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 1 << 32, 2).expect("valid histogram bounds")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_exact_below_16_then_within_a_sixteenth() {
        for v in 0..16u64 {
            assert_eq!(low(bucket(v)), v);
        }
        let mut last = 0;
        for v in [
            16u64,
            17,
            31,
            32,
            100,
            1000,
            65_535,
            400_000,
            4_000_000,
            (1 << 32) - 1,
        ] {
            let b = bucket(v);
            assert!(b >= last && b < BUCKETS, "{v}");
            last = b;
            let l = low(b);
            assert!(l <= v && v - l <= v / 16, "{v}: bucket from {l}");
        }
        assert_eq!(bucket(u64::MAX), bucket((1 << 32) - 1));
    }

    #[test]
    fn the_histogram_keeps_counts_and_percentiles() {
        let mut d = DepthCounts::default();
        for v in 0..1000u64 {
            d.record(v * 1000);
        }
        let h = d.histogram();
        assert_eq!(h.len(), 1000);
        let p99 = h.value_at_quantile(0.99);
        assert!(p99.abs_diff(989_000) <= 989_000 / 16 + 10_000, "{p99}");
        d.reset();
        assert!(d.is_empty());
    }
}
