//! Flows: sizes drawn from a CDF file, Poisson arrivals per host sized to a load (on the ToR
//! uplinks, or on the receiver's link for an incast), destinations in other racks, every other
//! host in turn, or one host.
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
    /// Its QP's UDP source port (`None`: one derived from the QP's number, as an RNIC hashes
    /// its QPN into it). With long-lived QPs, flows with the same hosts and port share a QP.
    pub sport: Option<u16>,
}

/// Who sends to whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Each flow to a host drawn uniformly from the other racks.
    Uniform,
    /// Every host sends to every other host in turn (its own rack's included), starting at a
    /// place of its own: each pair carries the same share of every host's flows.
    AllToAll,
    /// Every other host, of rack 0 and of every other rack, to host 0 of rack 0: an incast onto
    /// one host (arrivals still Poisson per sender).
    Incast,
}

impl Pattern {
    /// By name (`uniform`, `all-to-all`, `incast`).
    ///
    /// # Errors
    /// An unknown name.
    pub fn parse(s: &str) -> Result<Pattern, String> {
        match s {
            "uniform" => Ok(Pattern::Uniform),
            "all-to-all" | "alltoall" => Ok(Pattern::AllToAll),
            "incast" => Ok(Pattern::Incast),
            other => Err(format!(
                "pattern '{other}': use uniform, all-to-all or incast"
            )),
        }
    }
}

/// What flows arrive: a fabric's racks, the load and the pattern.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrivals {
    /// Racks (leaves).
    pub racks: u32,
    /// Hosts per rack.
    pub hosts_per_rack: u32,
    /// Uplinks per rack.
    pub uplinks: u32,
    /// Each uplink's rate, bit/s.
    pub uplink_bps: u64,
    /// Each host link's rate, bit/s.
    pub host_bps: u64,
    /// The load, 0 to 1: of the racks' uplinks (uniform, all-to-all), or of the one
    /// receiver's link (incast: every sender's share of it).
    pub load: f64,
    /// Arrivals start in `0..duration_ns`.
    pub duration_ns: u64,
    /// Who sends to whom.
    pub pattern: Pattern,
    /// The seed.
    pub seed: u64,
}

impl Arrivals {
    /// The arrivals of `t` at `load` for `duration_ns`.
    pub fn on(
        t: &super::topo::Topology,
        load: f64,
        duration_ns: u64,
        pattern: Pattern,
        seed: u64,
    ) -> Arrivals {
        Arrivals {
            racks: t.leaves,
            hosts_per_rack: t.hosts_per_leaf,
            uplinks: t.spines,
            uplink_bps: t.fabric_bps(),
            host_bps: t.host_bps(),
            load,
            duration_ns,
            pattern,
            seed,
        }
    }

    /// What each sending host offers, bit/s. Uniform: a rack's hosts together offer `load` of
    /// its uplinks. All-to-all: the same on the uplinks, which carry only the flows to other
    /// racks. Incast: the senders together offer `load` of the receiver's link.
    pub fn per_host_bps(&self) -> f64 {
        let hosts = f64::from(self.racks * self.hosts_per_rack);
        let rack = f64::from(self.hosts_per_rack.max(1));
        let uplink_share = self.load * f64::from(self.uplinks) * self.uplink_bps as f64 / rack;
        match self.pattern {
            Pattern::Uniform => uplink_share,
            Pattern::AllToAll => {
                let away = (hosts - rack) / (hosts - 1.0).max(1.0);
                uplink_share / away.max(f64::MIN_POSITIVE)
            }
            Pattern::Incast => self.load * self.host_bps as f64 / (hosts - 1.0).max(1.0),
        }
    }

    /// Poisson arrivals at every sending host, flow sizes from `cdf`, in start order with ids
    /// from 0.
    pub fn flows(&self, cdf: &SizeCdf) -> Vec<Flow> {
        // Every pattern needs two hosts, and uniform and all-to-all loads need other racks
        // to size on; nothing arrives otherwise (the topology file asks for two leaves).
        let hosts = self.racks * self.hosts_per_rack;
        if hosts < 2 || (self.pattern != Pattern::Incast && self.racks < 2) {
            return Vec::new();
        }
        let mut rng = Rng::new(self.seed);
        let mean_gap_ns = cdf.mean() * 8.0 / self.per_host_bps().max(1.0) * 1e9;
        let (racks, per_rack) = (self.racks, self.hosts_per_rack);
        let mut flows = Vec::new();
        for src in 0..hosts {
            if self.pattern == Pattern::Incast && src == 0 {
                continue;
            }
            // All-to-all: this host's next destination, counted from a place of its own.
            let mut turn = if self.pattern == Pattern::AllToAll {
                rng.below(u64::from(hosts - 1)) as u32
            } else {
                0
            };
            let mut t = 0.0f64;
            loop {
                let u = ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64).max(1e-12);
                t += -u.ln() * mean_gap_ns;
                if t >= self.duration_ns as f64 {
                    break;
                }
                let dst = match self.pattern {
                    Pattern::Incast => 0,
                    Pattern::AllToAll => {
                        turn = (turn + 1) % (hosts - 1);
                        (src + 1 + turn) % hosts
                    }
                    Pattern::Uniform => {
                        let rack = src / per_rack;
                        let other = (rack + 1 + rng.below(u64::from(racks - 1)) as u32) % racks;
                        other * per_rack + rng.below(u64::from(per_rack)) as u32
                    }
                };
                flows.push(Flow {
                    id: 0,
                    src,
                    dst,
                    bytes: cdf.sample(&mut rng),
                    start_ns: t as u64,
                    sport: None,
                });
            }
        }
        flows.sort_by_key(|f| (f.start_ns, f.src));
        for (i, f) in flows.iter_mut().enumerate() {
            f.id = i as u32;
        }
        flows
    }
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

    fn arrivals(pattern: Pattern, load: f64) -> Arrivals {
        Arrivals {
            racks: 4,
            hosts_per_rack: 4,
            uplinks: 2,
            uplink_bps: 10_000_000_000,
            host_bps: 10_000_000_000,
            load,
            duration_ns: 100_000_000,
            pattern,
            seed: 3,
        }
    }

    fn offered_bps(f: &[Flow], dur_ns: u64, keep: impl Fn(&Flow) -> bool) -> f64 {
        let bits: f64 = f
            .iter()
            .filter(|f| keep(f))
            .map(|f| f.bytes as f64 * 8.0)
            .sum();
        bits / (dur_ns as f64 / 1e9)
    }

    #[test]
    fn arrivals_carry_the_load_asked_for_and_go_to_other_racks() {
        let c = SizeCdf::parse("t", "0 0\n100000 100\n").unwrap();
        let a = arrivals(Pattern::Uniform, 0.5);
        let f = a.flows(&c);
        let offered = offered_bps(&f, a.duration_ns, |_| true) / f64::from(a.racks);
        let want = 0.5 * f64::from(a.uplinks) * a.uplink_bps as f64;
        assert!((offered / want - 1.0).abs() < 0.05, "{offered} vs {want}");
        assert!(f.iter().all(|f| f.src / 4 != f.dst / 4));
        assert!(f.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
        assert_eq!(f, a.flows(&c), "the same seed, the same flows");
    }

    #[test]
    fn all_to_all_reaches_every_host_evenly_and_loads_the_uplinks_as_asked() {
        let c = SizeCdf::parse("t", "0 0\n100000 100\n").unwrap();
        let a = arrivals(Pattern::AllToAll, 0.5);
        let f = a.flows(&c);
        let mut pairs = std::collections::HashMap::new();
        for x in &f {
            assert_ne!(x.src, x.dst);
            *pairs.entry((x.src, x.dst)).or_insert(0u32) += 1;
        }
        assert_eq!(pairs.len(), 16 * 15, "every ordered pair");
        for src in 0..16 {
            let n: Vec<u32> = (0..16)
                .filter(|d| *d != src)
                .map(|d| pairs[&(src, d)])
                .collect();
            let (lo, hi) = (n.iter().min().unwrap(), n.iter().max().unwrap());
            assert!(hi - lo <= 1, "host {src} in turn: {lo}..{hi}");
        }
        let away = offered_bps(&f, a.duration_ns, |x| x.src / 4 != x.dst / 4) / 4.0;
        let want = 0.5 * 2.0 * 10e9;
        assert!((away / want - 1.0).abs() < 0.05, "{away} vs {want}");
    }

    #[test]
    fn incast_loads_the_receivers_link_as_asked() {
        let c = SizeCdf::parse("t", "0 0\n100000 100\n").unwrap();
        let a = arrivals(Pattern::Incast, 0.8);
        let f = a.flows(&c);
        assert!(f.iter().all(|x| x.dst == 0 && x.src != 0));
        let into = offered_bps(&f, a.duration_ns, |_| true);
        assert!((into / 8e9 - 1.0).abs() < 0.05, "{into}");
        assert_eq!(Pattern::parse("all-to-all"), Ok(Pattern::AllToAll));
        assert!(Pattern::parse("permutation").is_err());
    }
}
