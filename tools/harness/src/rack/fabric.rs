//! The fabric emulator: N paths, each joining port `a` to port `b` in both directions with its
//! own delay, jitter, loss and rate (the kernel here has no netem). It stands in for the spine
//! switches between two ToRs. Within one path order is kept (jitter never reorders); it
//! decides nothing about where a frame goes: what enters `a` leaves `b` and the other way.
//!
//! It runs over any [`Port`]: in-memory ports in tests, AF_XDP or AF_PACKET interfaces in the
//! `sprayfabric` binary. Impairments are [`FaultInjector`]s wrapped around each port's transmit
//! side, seeded per path and direction.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use sprayswitch::pkt::Pkt;
use sprayswitch::port::fault::{FaultConfig, FaultInjector, FaultStats, Lateness};
use sprayswitch::port::Port;
use sprayswitch::time::now_ns;
use sprayswitch::worker::{IdlePolicy, IdleWaiter};

use crate::rack::topo::PathSpec;

/// Frames a direction keeps while its egress port pushes back; more are dropped and counted.
const PENDING_LIMIT: usize = 8192;

/// One direction of one path.
struct Direction {
    from: usize,
    to: usize,
    pending: Vec<Pkt>,
    overflow: u64,
}

/// Counters of one path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathReport {
    /// Frames taken in at `a` / at `b`.
    pub rx: [u64; 2],
    /// Frames lost to the configured loss, `a`->`b` and `b`->`a`.
    pub lost: [u64; 2],
    /// Frames dropped because the egress pushed back for too long or the path's queue was full.
    pub overflow: [u64; 2],
    /// How late the emulator handed frames on against their delay and rate, `a`->`b` and
    /// `b`->`a` (its wake-up and loop latency as the frames saw it).
    pub late: [Lateness; 2],
}

/// One path to build: port `a`, port `b`, and the impairments of both directions.
pub type PathPorts = (Box<dyn Port>, Box<dyn Port>, PathSpec);

/// The emulator: ports (two per path, wrapped in their injectors) and their directions.
pub struct Fabric {
    ports: Vec<FaultInjector<Box<dyn Port>>>,
    stats: Vec<Arc<FaultStats>>,
    dirs: Vec<Direction>,
    rx_counts: Vec<u64>,
    burst: usize,
}

impl Fabric {
    /// A fabric over `paths`: (port a, port b, impairments). `seed` varies the random choices.
    pub fn new(paths: Vec<PathPorts>, seed: u64) -> Fabric {
        let mut ports = Vec::new();
        let mut stats = Vec::new();
        let mut dirs = Vec::new();
        for (i, (a, b, spec)) in paths.into_iter().enumerate() {
            let cfg = |k: u64| FaultConfig {
                drop_rate: spec.loss,
                drop_schedule: spec.loss_schedule.clone(),
                delay_ns: spec.delay_ns,
                jitter_ns: spec.jitter_ns,
                rate_bps: spec.rate_bps,
                queue_limit: PENDING_LIMIT,
                seed: seed.wrapping_mul(1000) + i as u64 * 2 + k,
                ..FaultConfig::default()
            };
            for (k, p) in [a, b].into_iter().enumerate() {
                let f = FaultInjector::new(p, cfg(k as u64));
                stats.push(f.stats());
                ports.push(f);
            }
            dirs.push(Direction {
                from: 2 * i,
                to: 2 * i + 1,
                pending: Vec::with_capacity(256),
                overflow: 0,
            });
            dirs.push(Direction {
                from: 2 * i + 1,
                to: 2 * i,
                pending: Vec::with_capacity(256),
                overflow: 0,
            });
        }
        let n = ports.len();
        Fabric {
            ports,
            stats,
            dirs,
            rx_counts: vec![0; n],
            burst: 64,
        }
    }

    /// One pass over every path at `now`; true when a frame moved.
    pub fn iterate(&mut self, now: u64) -> bool {
        let mut work = false;
        let mut rx = Vec::with_capacity(self.burst);
        for d in &mut self.dirs {
            // Received frames enter the opposite port's injector, which delays, drops or
            // rate-limits them on the way out.
            let n = self.ports[d.from].rx_burst(now, &mut rx, self.burst);
            if n > 0 {
                work = true;
                self.rx_counts[d.from] += n as u64;
                let room = PENDING_LIMIT.saturating_sub(d.pending.len());
                if rx.len() > room {
                    d.overflow += (rx.len() - room) as u64;
                    rx.truncate(room);
                }
                d.pending.append(&mut rx);
            }
            if !d.pending.is_empty() {
                let before = d.pending.len();
                self.ports[d.to].tx_burst(now, &mut d.pending);
                work |= d.pending.len() != before;
            }
        }
        for p in &mut self.ports {
            p.poll(now);
        }
        work
    }

    /// Runs until `stop` is set, backing off as `idle` says when nothing moves.
    pub fn run(&mut self, stop: &AtomicBool, idle: IdlePolicy) {
        sprayswitch::time::tighten_timer_slack();
        let mut idle_iters = 0u64;
        // Nothing but its ports brings the fabric work: no wake-up needed.
        let mut waiter = IdleWaiter::for_ports(self.ports.iter().map(|p| p as &dyn Port), []);
        while !stop.load(Ordering::Relaxed) {
            if self.iterate(now_ns()) {
                idle_iters = 0;
            } else {
                idle_iters += 1;
                let timed = self.next_deadline(now_ns());
                idle.back_off(idle_iters, &mut waiter, timed);
            }
        }
    }

    /// How soon something must leave: the next delayed or paced frame's release, at once for
    /// frames waiting for room; `None` when nothing is in flight.
    pub fn next_deadline(&self, now: u64) -> Option<Duration> {
        let mut next: Option<u64> = None;
        for p in &self.ports {
            let at = if p.stalled() {
                Some(now)
            } else {
                p.next_release_ns()
            };
            next = match (next, at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        if self.dirs.iter().any(|d| !d.pending.is_empty()) {
            next = Some(now);
        }
        next.map(|t| Duration::from_nanos(t.saturating_sub(now)))
    }

    /// Counters per path.
    pub fn report(&self) -> Vec<PathReport> {
        (0..self.ports.len() / 2)
            .map(|i| {
                let lost = |k: usize| FaultStats::get(&self.stats[2 * i + k].dropped);
                let qdrop = |k: usize| FaultStats::get(&self.stats[2 * i + k].queue_drops);
                PathReport {
                    rx: [self.rx_counts[2 * i], self.rx_counts[2 * i + 1]],
                    // The injector on `b` impairs a->b.
                    lost: [lost(1), lost(0)],
                    overflow: [
                        self.dirs[2 * i].overflow + qdrop(1),
                        self.dirs[2 * i + 1].overflow + qdrop(0),
                    ],
                    late: [
                        self.stats[2 * i + 1].lateness(),
                        self.stats[2 * i].lateness(),
                    ],
                }
            })
            .collect()
    }
}

/// Parses a path: `A:B[,delay_us=N][,jitter_us=N][,loss=P][,rate_mbps=N]` (interface names and
/// impairments).
///
/// # Errors
/// A message naming the bad part.
pub fn parse_path(s: &str) -> anyhow::Result<(String, String, PathSpec)> {
    let (ends, rest) = s.split_once(',').unwrap_or((s, ""));
    let Some((a, b)) = ends.split_once(':') else {
        bail!("path '{s}': start with the two interfaces, A:B");
    };
    if a.is_empty() || b.is_empty() {
        bail!("path '{s}': empty interface name");
    }
    let spec = impairments(s, rest)?;
    Ok((a.to_string(), b.to_string(), spec))
}

/// Parses a path's impairments alone: `[delay_us=N][,jitter_us=N][,loss=P][,rate_mbps=N]` (the
/// paths of `sprayrackd`, which joins its ToRs itself). An empty text is a clean path.
///
/// # Errors
/// A message naming the bad part.
pub fn parse_impairments(s: &str) -> anyhow::Result<PathSpec> {
    impairments(s, s)
}

/// The impairments in `text` (comma-separated key=value), naming `whole` in errors.
fn impairments(whole: &str, text: &str) -> anyhow::Result<PathSpec> {
    let s = whole;
    let mut spec = PathSpec::delay(0);
    for kv in text.split(',').filter(|kv| !kv.is_empty()) {
        let Some((k, v)) = kv.split_once('=') else {
            bail!("path '{s}': '{kv}' is not key=value");
        };
        let num = |v: &str| -> anyhow::Result<f64> {
            let x: f64 = v
                .parse()
                .with_context(|| format!("path '{s}': {k}={v} is not a number"))?;
            if !x.is_finite() || x < 0.0 {
                bail!("path '{s}': {k}={v} must be zero or more");
            }
            Ok(x)
        };
        match k {
            "delay_us" => spec.delay_ns = (num(v)? * 1000.0) as u64,
            "jitter_us" => spec.jitter_ns = (num(v)? * 1000.0) as u64,
            "loss" => {
                let p = num(v)?;
                if p > 1.0 {
                    bail!("path '{s}': loss={v} is a probability (0 to 1)");
                }
                spec.loss = p;
            }
            "rate_mbps" => spec.rate_bps = Some((num(v)? * 1e6) as u64),
            _ => bail!("path '{s}': unknown key '{k}' (delay_us, jitter_us, loss, rate_mbps)"),
        }
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprayswitch::port::mem;

    #[test]
    fn paths_parse_with_clear_errors() {
        let (a, b, p) =
            parse_path("u0:v0,delay_us=20,jitter_us=5,loss=0.01,rate_mbps=250").unwrap();
        assert_eq!((a.as_str(), b.as_str()), ("u0", "v0"));
        assert_eq!(p.delay_ns, 20_000);
        assert_eq!(p.jitter_ns, 5_000);
        assert_eq!(p.loss, 0.01);
        assert_eq!(p.rate_bps, Some(250_000_000));
        for (bad, says) in [
            ("u0", "A:B"),
            ("u0:,delay_us=1", "empty"),
            ("u0:v0,delay=1", "unknown key"),
            ("u0:v0,loss=2", "probability"),
            ("u0:v0,delay_us=x", "not a number"),
            ("u0:v0,delay_us=-1", "zero or more"),
        ] {
            let e = parse_path(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!(parse_impairments("").unwrap(), PathSpec::delay(0));
        let p = parse_impairments("delay_us=40,rate_mbps=100").unwrap();
        assert_eq!((p.delay_ns, p.rate_bps), (40_000, Some(100_000_000)));
        for (bad, says) in [
            ("delay_us", "key=value"),
            ("u0:v0", "key=value"),
            ("loss=1.5", "probability"),
        ] {
            let e = parse_impairments(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn frames_cross_each_path_in_order_with_its_delay() {
        let (a_out, a_in) = mem::link("a-host", "a", 1024);
        let (b_out, b_in) = mem::link("b-host", "b", 1024);
        let mut f = Fabric::new(
            vec![(Box::new(a_in), Box::new(b_in), PathSpec::delay(1_000_000))],
            1,
        );
        let (mut a_out, mut b_out) = (a_out, b_out);
        let mut frames: Vec<Pkt> = (0..100u8).map(|i| Pkt::from_slice(&[i; 64])).collect();
        a_out.tx_burst(0, &mut frames);
        let mut back = vec![Pkt::from_slice(&[200; 64])];
        b_out.tx_burst(0, &mut back);
        // Bursts of 64: two passes take all 100 in.
        f.iterate(10);
        f.iterate(10);
        let mut got = Vec::new();
        b_out.rx_burst(500_000, &mut got, 256);
        assert!(got.is_empty(), "nothing arrives before the path's delay");
        // The idle wait ends at the next release: 1 ms after the frames entered at t = 10.
        assert_eq!(
            f.next_deadline(500_000),
            Some(Duration::from_nanos(500_010))
        );
        f.iterate(1_000_011);
        b_out.rx_burst(1_000_011, &mut got, 256);
        let order: Vec<u8> = got.iter().map(|p| p.data()[0]).collect();
        assert_eq!(order, (0..100).collect::<Vec<u8>>());
        let mut rev = Vec::new();
        a_out.rx_burst(1_000_011, &mut rev, 256);
        assert_eq!(rev.len(), 1);
        assert_eq!(rev[0].data()[0], 200);
        // Delivered and taken by the hosts: nothing timed is left.
        assert_eq!(f.next_deadline(1_000_011), None, "nothing left in flight");
        let r = f.report();
        assert_eq!(r[0].rx, [100, 1]);
        assert_eq!(r[0].lost, [0, 0]);
    }

    #[test]
    fn loss_is_applied_per_direction() {
        let (mut a_out, a_in) = mem::link("a-host", "a", 4096);
        let (mut b_out, b_in) = mem::link("b-host", "b", 4096);
        let spec = PathSpec {
            loss: 0.5,
            ..PathSpec::delay(0)
        };
        let mut f = Fabric::new(vec![(Box::new(a_in), Box::new(b_in), spec)], 7);
        let mut frames: Vec<Pkt> = (0..1000).map(|_| Pkt::from_slice(&[1; 64])).collect();
        a_out.tx_burst(0, &mut frames);
        for t in 0..20 {
            f.iterate(t);
        }
        let mut got = Vec::new();
        while b_out.rx_burst(30, &mut got, 4096) > 0 {}
        let r = f.report();
        assert_eq!(r[0].rx[0], 1000);
        assert_eq!(got.len() as u64 + r[0].lost[0], 1000);
        assert!((400..600).contains(&got.len()), "{}", got.len());
    }
}
