//! Transit time between two capture points: `rocecap transit A B`.
//!
//! Two captures taken on one machine (the same clock), for example the host ports of both ToRs
//! of a rack pair (`sprayctl capture start h1 ...` on each) or tcpdump on two interfaces. A RoCE
//! packet is identified by source and destination address, DestQP, PSN and opcode; one seen in
//! both captures crossed from the capture that saw it first to the other, and its transit time
//! is the difference of the two timestamps. Packets whose identity repeats within a capture
//! (retransmissions, duplicates, a PSN space that wrapped) are left out rather than guessed
//! at; packets in one capture only are counted (dropped, or outside the other's time span).
//!
//! This is what a network engineer asks of a fabric first: how long does a packet take from
//! here to there, per direction, and in the tail.

use std::collections::HashMap;

use serde::Serialize;
use sprayswitch::tables::ip_key;
use sprayswitch::wire::{classify, FrameClass, Pmtu};

use super::CapturePair;
use crate::percentile::quantile_us;

/// The identity of a RoCE packet in a capture: (source, destination, DestQP, PSN, opcode).
type Key = (u128, u128, u32, u32, u8);

/// First sighting of a key in one capture, and how often it was seen.
#[derive(Debug, Clone, Copy)]
struct Seen {
    ts_ns: u64,
    count: u32,
}

/// Collects the RoCE packets of two captures.
#[derive(Debug, Default)]
pub struct Transit {
    a: HashMap<Key, Seen>,
    b: HashMap<Key, Seen>,
    /// Frames of either capture that were not RoCEv2.
    pub other_frames: u64,
}

/// Transit times in one direction.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DirectionReport {
    /// `a_to_b` or `b_to_a`.
    pub direction: &'static str,
    /// Packets seen once in each capture.
    pub packets: u64,
    /// Median transit time, microseconds.
    pub p50_us: f64,
    /// 90th percentile, microseconds.
    pub p90_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Largest, microseconds.
    pub max_us: f64,
}

/// What [`Transit::report`] found.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TransitReport {
    /// One entry per direction that carried packets.
    pub directions: Vec<DirectionReport>,
    /// RoCE packets only capture A saw.
    pub only_in_a: u64,
    /// RoCE packets only capture B saw.
    pub only_in_b: u64,
    /// Identities seen more than once in a capture (left out).
    pub repeated: u64,
}

impl CapturePair for Transit {
    fn add_a(&mut self, ts_ns: u64, frame: &[u8]) {
        Self::add(&mut self.a, &mut self.other_frames, ts_ns, frame);
    }

    fn add_b(&mut self, ts_ns: u64, frame: &[u8]) {
        Self::add(&mut self.b, &mut self.other_frames, ts_ns, frame);
    }
}

impl Transit {
    fn add(map: &mut HashMap<Key, Seen>, other: &mut u64, ts_ns: u64, frame: &[u8]) {
        let key = match classify(frame, Pmtu::DEFAULT) {
            Ok(c) => match c.class {
                FrameClass::Roce(r) => (
                    ip_key(r.ip.src),
                    ip_key(r.ip.dst),
                    r.bth.dest_qp,
                    r.bth.psn.value(),
                    u8::from(r.bth.opcode),
                ),
                _ => {
                    *other += 1;
                    return;
                }
            },
            Err(_) => {
                *other += 1;
                return;
            }
        };
        map.entry(key)
            .and_modify(|s| s.count += 1)
            .or_insert(Seen { ts_ns, count: 1 });
    }

    /// Transit times per direction, and what could not be matched.
    pub fn report(&self) -> TransitReport {
        let mut a_to_b = Vec::new();
        let mut b_to_a = Vec::new();
        let mut repeated = 0u64;
        let mut only_in_a = 0u64;
        for (k, sa) in &self.a {
            let Some(sb) = self.b.get(k) else {
                if sa.count == 1 {
                    only_in_a += 1;
                } else {
                    repeated += 1;
                }
                continue;
            };
            if sa.count > 1 || sb.count > 1 {
                repeated += 1;
            } else if sb.ts_ns >= sa.ts_ns {
                a_to_b.push(sb.ts_ns - sa.ts_ns);
            } else {
                b_to_a.push(sa.ts_ns - sb.ts_ns);
            }
        }
        let mut only_in_b = 0u64;
        for (k, sb) in &self.b {
            if !self.a.contains_key(k) {
                if sb.count == 1 {
                    only_in_b += 1;
                } else {
                    repeated += 1;
                }
            }
        }
        let directions = [("a_to_b", a_to_b), ("b_to_a", b_to_a)]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(direction, mut v)| {
                v.sort_unstable();
                let at = |q: f64| quantile_us(&v, q);
                DirectionReport {
                    direction,
                    packets: v.len() as u64,
                    p50_us: at(0.5),
                    p90_us: at(0.9),
                    p99_us: at(0.99),
                    max_us: at(1.0),
                }
            })
            .collect();
        TransitReport {
            directions,
            only_in_a,
            only_in_b,
            repeated,
        }
    }
}

/// The report as text.
pub fn human(r: &TransitReport) -> String {
    let mut s = String::new();
    for d in &r.directions {
        s.push_str(&format!(
            "{}: {} packets, transit p50 {:.1} us, p90 {:.1} us, p99 {:.1} us, max {:.1} us\n",
            d.direction.replace('_', " "),
            d.packets,
            d.p50_us,
            d.p90_us,
            d.p99_us,
            d.max_us
        ));
    }
    s.push_str(&format!(
        "only in a: {}, only in b: {}, repeated (left out): {}",
        r.only_in_a, r.only_in_b, r.repeated
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprayswitch::testkit::roce_frame;
    use std::net::Ipv4Addr;

    #[test]
    fn transit_per_direction_with_losses_and_repeats() {
        let mut t = Transit::default();
        let there = Ipv4Addr::new(10, 0, 1, 2);
        // 100 packets A -> B, taking 10 + i us each.
        for i in 0..100u32 {
            let f = roce_frame(0, there, 7, i, 64);
            t.add_a(1_000_000 + u64::from(i) * 100_000, &f);
            t.add_b(
                1_000_000 + u64::from(i) * 100_000 + 10_000 + u64::from(i) * 1_000,
                &f,
            );
        }
        // 10 packets B -> A (another QP), 5 us each.
        for i in 0..10u32 {
            let f = roce_frame(1, Ipv4Addr::new(10, 0, 0, 2), 9, i, 64);
            t.add_b(50_000_000 + u64::from(i) * 1_000, &f);
            t.add_a(50_000_000 + u64::from(i) * 1_000 + 5_000, &f);
        }
        // Lost on the way: only in A. Retransmitted: twice in A, once in B.
        t.add_a(90_000_000, &roce_frame(0, there, 7, 500, 64));
        let again = roce_frame(0, there, 7, 600, 64);
        t.add_a(91_000_000, &again);
        t.add_a(92_000_000, &again);
        t.add_b(92_500_000, &again);
        // Not RoCE.
        t.add_b(93_000_000, &[0u8; 60]);

        let r = t.report();
        assert_eq!((r.only_in_a, r.only_in_b, r.repeated), (1, 0, 1));
        assert_eq!(t.other_frames, 1);
        let ab = r
            .directions
            .iter()
            .find(|d| d.direction == "a_to_b")
            .unwrap();
        assert_eq!(ab.packets, 100);
        // Nearest rank over 10..=109 us: the 50th and the 90th value.
        assert_eq!(ab.p50_us, 59.0);
        assert_eq!(ab.p90_us, 99.0);
        assert_eq!(ab.max_us, 109.0);
        let ba = r
            .directions
            .iter()
            .find(|d| d.direction == "b_to_a")
            .unwrap();
        assert_eq!((ba.packets, ba.p50_us, ba.max_us), (10, 5.0, 5.0));
        let text = human(&r);
        assert!(
            text.contains("a to b: 100 packets, transit p50 59.0 us"),
            "{text}"
        );
        assert!(text.contains("only in a: 1, only in b: 0, repeated (left out): 1"));
    }

    #[test]
    fn empty_captures_report_nothing() {
        let r = Transit::default().report();
        assert!(r.directions.is_empty());
        assert_eq!((r.only_in_a, r.only_in_b, r.repeated), (0, 0, 0));
    }
}
