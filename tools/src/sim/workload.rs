//! Flows: sizes drawn from a CDF file, Poisson arrivals per host sized to a load on the ToR
//! uplinks, destinations in other racks.
//!
//! A CDF file has one point per line, `<size in bytes> <cumulative percent>`, ascending, `#`
//! comments (the source of the data); sizes between points are interpolated linearly, as the
//! HPCC and ConWeave traffic generators do.

use sprayswitch::rng::Rng;

/// A flow-size distribution.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeCdf {
    /// Its name (the file's stem, or the embedded one's).
    pub name: String,
    /// (size in bytes, cumulative fraction 0..=1), ascending in both.
    points: Vec<(f64, f64)>,
}

/// The embedded distributions: (name, file text).
pub const EMBEDDED: [(&str, &str); 3] = [
    (
        "alistorage2019",
        include_str!("../../sim/cdf/alistorage2019.txt"),
    ),
    ("websearch", include_str!("../../sim/cdf/websearch.txt")),
    ("hadoop", include_str!("../../sim/cdf/hadoop.txt")),
];

impl SizeCdf {
    /// Parses a CDF file's text.
    ///
    /// # Errors
    /// A line that is not two numbers, sizes or percentages going down, a last point below
    /// 100%, fewer than two points.
    pub fn parse(name: &str, text: &str) -> Result<SizeCdf, String> {
        let mut points: Vec<(f64, f64)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut it = line.split_whitespace();
            let (Some(a), Some(b), None) = (it.next(), it.next(), it.next()) else {
                return Err(format!(
                    "{name}:{}: want '<size> <cumulative percent>'",
                    i + 1
                ));
            };
            let (Ok(size), Ok(pct)) = (a.parse::<f64>(), b.parse::<f64>()) else {
                return Err(format!("{name}:{}: '{line}' is not two numbers", i + 1));
            };
            if !(size.is_finite()
                && (0.0..=f64::from(u32::MAX)).contains(&size)
                && (0.0..=100.0).contains(&pct))
            {
                return Err(format!(
                    "{name}:{}: size (0 to 4 GiB) or percent (0 to 100) out of range",
                    i + 1
                ));
            }
            if let Some(&(s0, p0)) = points.last() {
                if size < s0 || pct / 100.0 < p0 {
                    return Err(format!("{name}:{}: the points must ascend", i + 1));
                }
            }
            points.push((size, pct / 100.0));
        }
        if points.len() < 2 {
            return Err(format!("{name}: needs at least two points"));
        }
        if points.last().is_some_and(|p| (p.1 - 1.0).abs() > 1e-9) {
            return Err(format!("{name}: the last point must be at 100%"));
        }
        if points.last().is_some_and(|p| p.0 < 64.0) {
            return Err(format!(
                "{name}: the largest size must be at least 64 bytes"
            ));
        }
        Ok(SizeCdf {
            name: name.to_string(),
            points,
        })
    }

    /// One of [`EMBEDDED`] by name.
    ///
    /// # Errors
    /// An unknown name.
    pub fn embedded(name: &str) -> Result<SizeCdf, String> {
        let (_, text) = EMBEDDED.iter().find(|(n, _)| *n == name).ok_or_else(|| {
            let names: Vec<&str> = EMBEDDED.iter().map(|(n, _)| *n).collect();
            format!(
                "no embedded workload '{name}' (there are {})",
                names.join(", ")
            )
        })?;
        SizeCdf::parse(name, text)
    }

    /// The size at cumulative fraction `u` (0..1), interpolated; at least 1 byte.
    pub fn size_at(&self, u: f64) -> u64 {
        let mut prev = self.points[0];
        for &p in &self.points {
            if u <= p.1 {
                let span = p.1 - prev.1;
                let s = if span <= 0.0 {
                    p.0
                } else {
                    prev.0 + (p.0 - prev.0) * (u - prev.1) / span
                };
                return (s.round() as u64).max(1);
            }
            prev = p;
        }
        (prev.0.round() as u64).max(1)
    }

    /// A size drawn at random.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        self.size_at((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// The mean size, bytes (each segment's mean weighted by its probability).
    pub fn mean(&self) -> f64 {
        self.points
            .windows(2)
            .map(|w| (w[1].1 - w[0].1) * (w[0].0 + w[1].0) / 2.0)
            .sum::<f64>()
            + self.points[0].1 * self.points[0].0
    }
}

/// One flow: an RDMA WRITE of `bytes` from `src` to `dst` (global host indices) starting at
/// `start_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Index, in arrival order.
    pub id: u32,
    /// Sending host.
    pub src: u32,
    /// Receiving host.
    pub dst: u32,
    /// Bytes.
    pub bytes: u64,
    /// When the application posts it.
    pub start_ns: u64,
}

/// Who sends to whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Each flow to a host drawn uniformly from the other racks.
    Uniform,
    /// Every host of rack 0 but the first, and of every other rack, to host 0 of rack 0: an
    /// incast onto one host (arrivals still Poisson per sender).
    Incast,
}

/// Poisson arrivals at every host for `duration_ns`, sized so that the ToR uplinks carry `load`
/// of their capacity: a rack of `hosts_per_rack` hosts with `uplinks` of `uplink_bps` each
/// sends `load * uplinks * uplink_bps` into the fabric.
#[allow(clippy::too_many_arguments)]
pub fn poisson(
    cdf: &SizeCdf,
    racks: u32,
    hosts_per_rack: u32,
    uplinks: u32,
    uplink_bps: u64,
    load: f64,
    duration_ns: u64,
    pattern: Pattern,
    seed: u64,
) -> Vec<Flow> {
    let mut rng = Rng::new(seed);
    let per_host_bps =
        load * f64::from(uplinks) * uplink_bps as f64 / f64::from(hosts_per_rack.max(1));
    let mean_gap_ns = cdf.mean() * 8.0 / per_host_bps.max(1.0) * 1e9;
    let hosts = racks * hosts_per_rack;
    let mut flows = Vec::new();
    for src in 0..hosts {
        if pattern == Pattern::Incast && src == 0 {
            continue;
        }
        let mut t = 0.0f64;
        loop {
            let u = ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64).max(1e-12);
            t += -u.ln() * mean_gap_ns;
            if t >= duration_ns as f64 {
                break;
            }
            let dst = match pattern {
                Pattern::Incast => 0,
                Pattern::Uniform => {
                    let rack = src / hosts_per_rack;
                    let other = (rack + 1 + rng.below(u64::from(racks - 1)) as u32) % racks;
                    other * hosts_per_rack + rng.below(u64::from(hosts_per_rack)) as u32
                }
            };
            flows.push(Flow {
                id: 0,
                src,
                dst,
                bytes: cdf.sample(&mut rng),
                start_ns: t as u64,
            });
        }
    }
    flows.sort_by_key(|f| (f.start_ns, f.src));
    for (i, f) in flows.iter_mut().enumerate() {
        f.id = i as u32;
    }
    flows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cdf_interpolates_between_its_points_and_refuses_bad_files() {
        let c = SizeCdf::parse("t", "# test\n0 0\n1000 50\n3000 100\n").unwrap();
        assert_eq!(c.size_at(0.25), 500);
        assert_eq!(c.size_at(0.5), 1000);
        assert_eq!(c.size_at(0.75), 2000);
        assert_eq!(c.size_at(1.0), 3000);
        assert!((c.mean() - (0.5 * 500.0 + 0.5 * 2000.0)).abs() < 1e-9);
        assert!(SizeCdf::parse("t", "1000 50\n500 100\n").is_err());
        assert!(SizeCdf::parse("t", "0 0\n1000 90\n").is_err());
        assert!(SizeCdf::parse("t", "0 0\nten 100\n").is_err());
        assert!(SizeCdf::parse("t", "5 100\n").is_err());
        assert!(
            SizeCdf::parse("t", "0 0\n0 100\n").is_err(),
            "no flow of 0 bytes"
        );
        assert!(SizeCdf::parse("t", "0 0\n1e12 100\n").is_err());
    }

    #[test]
    fn the_embedded_workloads_parse() {
        for (name, _) in EMBEDDED {
            let c = SizeCdf::embedded(name).unwrap();
            assert!(c.mean() > 1000.0, "{name}: {}", c.mean());
        }
        assert!(SizeCdf::embedded("nope").is_err());
    }

    #[test]
    fn arrivals_carry_the_load_asked_for_and_go_to_other_racks() {
        let c = SizeCdf::parse("t", "0 0\n100000 100\n").unwrap();
        let (racks, hosts, uplinks, rate) = (4, 4, 2, 10_000_000_000u64);
        let dur = 100_000_000;
        let f = poisson(
            &c,
            racks,
            hosts,
            uplinks,
            rate,
            0.5,
            dur,
            Pattern::Uniform,
            3,
        );
        let bits: f64 = f.iter().map(|f| f.bytes as f64 * 8.0).sum();
        let offered = bits / (dur as f64 / 1e9) / f64::from(racks);
        let want = 0.5 * f64::from(uplinks) * rate as f64;
        assert!((offered / want - 1.0).abs() < 0.05, "{offered} vs {want}");
        assert!(f.iter().all(|f| f.src / hosts != f.dst / hosts));
        assert!(f.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
        let again = poisson(
            &c,
            racks,
            hosts,
            uplinks,
            rate,
            0.5,
            dur,
            Pattern::Uniform,
            3,
        );
        assert_eq!(f, again, "the same seed, the same flows");
    }
}
