//! ECN marking thresholds of an egress queue, WRED-style as every RoCE switch sets them: no
//! mark below Kmin, a probability rising linearly to Pmax at Kmax, every ECN-capable packet
//! above Kmax.

/// Marking thresholds on a queue's depth in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EcnProfile {
    /// Depth where marking starts (bytes).
    pub kmin_bytes: u64,
    /// Depth where the probability reaches `pmax` (bytes); above it every ECT packet is marked.
    pub kmax_bytes: u64,
    /// Marking probability at Kmax (0 to 1).
    pub pmax: f64,
}

impl EcnProfile {
    /// The thresholds that scale the ConWeave/HPCC 100 Gbit/s setting (Kmin 100 KB, Kmax
    /// 400 KB, Pmax 0.2) with the port's rate: 25 Gbit/s 25/100 KB, 100 Gbit/s 100/400 KB,
    /// 400 Gbit/s 400/1600 KB. The queue then starts marking at the same delay (8 us) whatever
    /// the rate.
    pub fn for_rate(rate_bps: u64) -> EcnProfile {
        let scale = rate_bps as f64 / 100e9;
        EcnProfile {
            kmin_bytes: (100_000.0 * scale) as u64,
            kmax_bytes: (400_000.0 * scale) as u64,
            pmax: 0.2,
        }
    }

    /// Why the thresholds cannot be used, if they cannot.
    ///
    /// # Errors
    /// A sentence naming the field: Kmax below Kmin, Pmax outside 0..=1.
    pub fn check(&self) -> Result<(), String> {
        if self.kmax_bytes < self.kmin_bytes {
            return Err(format!(
                "kmax ({} bytes) is below kmin ({} bytes)",
                self.kmax_bytes, self.kmin_bytes
            ));
        }
        if !(0.0..=1.0).contains(&self.pmax) {
            return Err(format!("pmax {} is not between 0 and 1", self.pmax));
        }
        Ok(())
    }

    /// The probability of marking an ECN-capable packet that finds `depth` bytes queued.
    #[inline]
    pub fn probability(&self, depth: u64) -> f64 {
        if depth <= self.kmin_bytes {
            0.0
        } else if depth > self.kmax_bytes {
            1.0
        } else {
            let span = (self.kmax_bytes - self.kmin_bytes).max(1) as f64;
            self.pmax * (depth - self.kmin_bytes) as f64 / span
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probability_rises_linearly_from_kmin_to_pmax_at_kmax_then_is_one() {
        let p = EcnProfile {
            kmin_bytes: 100_000,
            kmax_bytes: 400_000,
            pmax: 0.2,
        };
        assert_eq!(p.probability(0), 0.0);
        assert_eq!(p.probability(100_000), 0.0);
        assert!((p.probability(250_000) - 0.1).abs() < 1e-12);
        assert!((p.probability(400_000) - 0.2).abs() < 1e-12);
        assert_eq!(p.probability(400_001), 1.0);
        let step = EcnProfile {
            kmin_bytes: 5,
            kmax_bytes: 5,
            pmax: 0.5,
        };
        assert_eq!((step.probability(5), step.probability(6)), (0.0, 1.0));
    }

    #[test]
    fn the_rate_scaled_profiles_are_the_documented_ones_and_bad_ones_are_refused() {
        let p = EcnProfile::for_rate(25_000_000_000);
        assert_eq!((p.kmin_bytes, p.kmax_bytes), (25_000, 100_000));
        let p = EcnProfile::for_rate(400_000_000_000);
        assert_eq!((p.kmin_bytes, p.kmax_bytes), (400_000, 1_600_000));
        assert!(p.check().is_ok());
        let bad = EcnProfile {
            kmin_bytes: 10,
            kmax_bytes: 5,
            pmax: 0.1,
        };
        assert!(bad.check().unwrap_err().contains("kmax"));
        let bad = EcnProfile { pmax: 1.5, ..p };
        assert!(bad.check().unwrap_err().contains("pmax"));
    }
}
