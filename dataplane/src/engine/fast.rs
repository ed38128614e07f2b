//! The fast path: the bulk of a RoCE fabric's traffic decided in a few loads, the way a
//! switch ASIC's pipeline or DPDK's `l3fwd` does it, with everything else left to the full
//! path ([`Engine::handle`](super::Engine::handle)).
//!
//! It takes exactly one frame shape: Ethernet II addressed to the receiving port, IPv4 without
//! options and not a fragment, UDP to 4791, and an RC or UC opcode that carries data (SEND,
//! WRITE, READ RESPONSE segments): the packets that move the bytes. It reads them at fixed
//! offsets instead of walking the headers through etherparse (the STYLE rule for L2-L4):
//! etherparse's slicing alone costs more than the whole decision below (BENCHMARKS.md), and this
//! one shape has nothing to walk. Whatever the fast path is not sure of (another EtherType, a
//! VLAN tag, IP options, a TTL about to expire, a bad checksum, an opcode the reorder stage
//! learns from, a length that does not add up, a destination it has not seen) it leaves to the
//! full path, which then decides as if the fast path did not exist. A property test drives both
//! over mutated frames and requires the same verdict, the same bytes and the same facts for the
//! reorder stage.
//!
//! Routes come from a small per-worker cache of resolved next hops, keyed by destination and
//! filled by the full path when it routes a packet. Any change that could alter a decision (a
//! new table snapshot, a neighbour learned, changed or aged) empties it at once (an epoch
//! bump). Link state is read as the full path reads it: a port's on every packet, an uplink
//! group's once per worker iteration (see `Sprayer::begin_iteration`).

use crate::ids::PortId;
use crate::wire::{Opcode, Segment, Transport};

/// A routed next hop, as the full path resolved it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    /// A port and the neighbour's MAC (connected or via a gateway).
    Port {
        /// Egress port.
        port: PortId,
        /// Next hop's MAC.
        mac: [u8; 6],
    },
    /// An uplink group: the spray policy picks the port per packet.
    Group(u16),
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    dst: u32,
    epoch: u32,
    hop: Option<Hop>,
}

/// Slots of the route cache (a power of two). 1024 slots of 16 bytes: 16 KiB, inside L1/L2.
const SLOTS: usize = 1024;

/// Direct-mapped cache of IPv4 destination -> resolved next hop.
#[derive(Debug)]
pub struct RouteCache {
    slots: Box<[Slot]>,
    /// Entries of older epochs are invalid. Starts at 1 so that empty slots (epoch 0) miss.
    epoch: u32,
}

impl Default for RouteCache {
    fn default() -> Self {
        RouteCache {
            slots: vec![
                Slot {
                    dst: 0,
                    epoch: 0,
                    hop: None,
                };
                SLOTS
            ]
            .into_boxed_slice(),
            epoch: 1,
        }
    }
}

impl RouteCache {
    #[inline]
    fn index(dst: u32) -> usize {
        // Fibonacci hashing: the top bits of the product depend on every bit of the address.
        (dst.wrapping_mul(0x9E37_79B9) >> (32 - SLOTS.trailing_zeros())) as usize
    }

    /// The next hop cached for `dst` in the current epoch.
    #[inline(always)]
    pub fn get(&self, dst: u32) -> Option<Hop> {
        let s = &self.slots[Self::index(dst)];
        if s.epoch == self.epoch && s.dst == dst {
            s.hop
        } else {
            None
        }
    }

    /// Remembers how the full path routed `dst`.
    #[inline]
    pub fn fill(&mut self, dst: u32, hop: Hop) {
        self.slots[Self::index(dst)] = Slot {
            dst,
            epoch: self.epoch,
            hop: Some(hop),
        };
    }

    /// Forgets every entry (something a decision depends on changed).
    pub fn invalidate(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            // After 2^32 invalidations: clear for real so that no stale slot matches again.
            for s in self.slots.iter_mut() {
                s.epoch = 0;
            }
            self.epoch = 1;
        }
    }
}

/// What the fast path needs to know of an opcode.
#[derive(Debug, Clone, Copy, Default)]
pub struct FastOp {
    /// The fast path takes this opcode.
    pub ok: bool,
    /// Length of its extension headers.
    pub ext_len: u8,
    /// READ RESPONSE: fills a PSN the local requester asked for (else a request).
    pub fill: bool,
    /// FIRST or MIDDLE segment: carries exactly one path MTU of payload.
    pub full_segment: bool,
    /// READ RESPONSE LAST or ONLY: the last response of its READ.
    pub ends: bool,
}

/// The fast path's view of all 256 opcodes, derived from [`Opcode`] so that the fast and
/// the full path read the same facts.
pub fn fast_ops() -> Box<[FastOp; 256]> {
    let mut t = Box::new([FastOp::default(); 256]);
    for (b, slot) in t.iter_mut().enumerate() {
        let op = Opcode::from(b as u8);
        let Some(layout) = op.layout() else { continue };
        // The reorder stage learns from READ REQUESTs, atomics, ATOMIC WRITEs and ACKs a host
        // sends and sizes READ REQUESTs by their RETH: those, and opcodes without payload, take
        // the full path.
        let data = matches!(op.transport(), Transport::Rc | Transport::Uc)
            && layout.payload
            && op != Opcode::RcReadRequest
            && op != Opcode::RcAtomicWrite
            && !op.is_atomic();
        if !data {
            continue;
        }
        *slot = FastOp {
            ok: true,
            ext_len: layout.len() as u8,
            fill: op.is_read_response(),
            full_segment: matches!(op.segment(), Segment::First | Segment::Middle),
            ends: op.is_read_response() && matches!(op.segment(), Segment::Last | Segment::Only),
        };
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_misses_after_invalidation_and_on_collision() {
        let mut c = RouteCache::default();
        assert_eq!(c.get(0x0a00_0102), None);
        let hop = Hop::Group(3);
        c.fill(0x0a00_0102, hop);
        assert_eq!(c.get(0x0a00_0102), Some(hop));
        // Another address in the same slot replaces it; the first then misses.
        let other = (0u32..)
            .find(|&a| a != 0x0a00_0102 && RouteCache::index(a) == RouteCache::index(0x0a00_0102))
            .unwrap();
        c.fill(other, Hop::Group(1));
        assert_eq!(c.get(0x0a00_0102), None);
        assert_eq!(c.get(other), Some(Hop::Group(1)));
        c.invalidate();
        assert_eq!(c.get(other), None);
        // Address 0 in a fresh slot does not match the zeroed slot.
        assert_eq!(RouteCache::default().get(0), None);
    }

    #[test]
    fn epoch_wrap_clears_the_slots() {
        let mut c = RouteCache::default();
        c.fill(7, Hop::Group(0));
        c.epoch = u32::MAX;
        c.fill(9, Hop::Group(1));
        c.invalidate();
        assert_eq!(c.epoch, 1);
        assert_eq!(c.get(7), None);
        assert_eq!(c.get(9), None);
    }

    #[test]
    fn fast_opcodes_are_the_data_segments() {
        let t = fast_ops();
        for op in [
            Opcode::RcSendOnly,
            Opcode::RcWriteFirst,
            Opcode::RcWriteMiddle,
            Opcode::RcWriteOnly,
            Opcode::RcReadResponseLast,
            Opcode::UcSendFirst,
            Opcode::UcWriteOnlyImm,
        ] {
            assert!(t[usize::from(u8::from(op))].ok, "{op:?}");
        }
        for op in [
            Opcode::RcReadRequest,
            Opcode::RcAcknowledge,
            Opcode::RcAtomicAcknowledge,
            Opcode::RcCompareSwap,
            Opcode::RcFetchAdd,
            Opcode::UdSendOnly,
            Opcode::Cnp,
        ] {
            assert!(!t[usize::from(u8::from(op))].ok, "{op:?}");
        }
        let w = t[usize::from(u8::from(Opcode::RcWriteFirst))];
        assert_eq!((w.ext_len, w.full_segment, w.fill), (16, true, false));
        let r = t[usize::from(u8::from(Opcode::RcReadResponseMiddle))];
        assert_eq!((r.ext_len, r.full_segment, r.fill), (0, true, true));
    }

    /// The fast path against the full path: two engines over the same tables, status board and
    /// packet sequence, one with the fast path and one without, must agree on every verdict,
    /// every byte, every fact handed to the reorder stage, every learned path MTU and every
    /// count. The sequence mixes valid frames, mutated ones (a byte changed, the IPv4 checksum
    /// then fixed or not, cut short), neighbours learned and moved by ARP, links going down.
    mod against_full_path {
        use std::net::{IpAddr, Ipv4Addr};
        use std::sync::Arc;

        use crossbeam::utils::CachePadded;
        use proptest::prelude::*;

        use crate::engine::{Engine, Verdict};
        use crate::pkt::Pkt;
        use crate::tables::status::PortStatus;
        use crate::tables::{ip_key, SprayPolicy, Tables};
        use crate::testkit::{peer_mac, port_mac, tor_tables};
        use crate::wire::checksum::{fold, ones_sum};
        use crate::wire::control::arp_request;
        use crate::wire::frame::every_ext;
        use crate::wire::{BthRepr, IpRepr, Opcode, Psn, RoceFrameRepr};

        /// Destinations: both local hosts (d1's learned, not static), a local address of the
        /// switch, a connected host never resolved, two remote hosts behind the group, one
        /// with no route.
        const DSTS: [[u8; 4]; 7] = [
            [10, 0, 0, 2],
            [10, 0, 1, 2],
            [10, 0, 1, 1],
            [10, 0, 1, 9],
            [10, 9, 1, 2],
            [10, 9, 7, 7],
            [192, 168, 5, 5],
        ];
        const PORTS: usize = 6;

        /// A RoCE frame sent to the switch: on which port, to its MAC or not, between which of
        /// [`DSTS`], with which opcode, payload length, TTL and PSN (which also sets QPN and UDP
        /// source port).
        #[derive(Debug, Clone, Copy)]
        struct Spec {
            rx: usize,
            to_port_mac: bool,
            src: usize,
            dst: usize,
            opcode: u8,
            payload: usize,
            hop_limit: u8,
            psn: u32,
        }

        #[derive(Debug, Clone)]
        enum Step {
            Frame {
                spec: Spec,
                /// (offset, xor, fix the IPv4 checksum afterwards)
                mutate: Option<(usize, u8, bool)>,
                cut: Option<usize>,
            },
            /// The host behind d1 announces itself with one of two MACs.
            Arp(bool),
            Link(usize, bool),
        }

        fn step() -> impl Strategy<Value = Step> {
            let opcodes: Vec<u8> = (0..=255u8)
                .filter(|b| Opcode::from(*b).layout().is_some())
                .collect();
            let ops = super::super::fast_ops();
            let data: Vec<u8> = (0..=255u8).filter(|b| ops[usize::from(*b)].ok).collect();
            prop_oneof![
                8 => (
                    (0..PORTS, prop::bool::weighted(0.9), 0..DSTS.len(), 0..DSTS.len()),
                    prop_oneof![prop::sample::select(data), prop::sample::select(opcodes)],
                    prop_oneof![0..64usize, 1000..1100usize, Just(1024usize), Just(256)],
                    prop::sample::select(vec![0u8, 1, 2, 64, 64, 64, 64, 64]),
                    any::<u32>(),
                    prop::option::weighted(0.3, (0..80usize, 1..=255u8, any::<bool>())),
                    prop::option::weighted(0.1, 0..120usize),
                )
                    .prop_map(
                        |((rx, to_port_mac, src, dst), opcode, payload, hop_limit, psn, mutate, cut)| {
                            let spec = Spec { rx, to_port_mac, src, dst, opcode, payload, hop_limit, psn };
                            Step::Frame { spec, mutate, cut }
                        }
                    ),
                1 => any::<bool>().prop_map(Step::Arp),
                1 => (0..PORTS, prop::bool::weighted(0.7)).prop_map(|(p, up)| Step::Link(p, up)),
            ]
        }

        fn frame(spec: Spec) -> Option<Vec<u8>> {
            let Spec {
                rx,
                to_port_mac,
                src,
                dst,
                opcode,
                payload,
                hop_limit,
                psn,
            } = spec;
            let op = Opcode::from(opcode);
            let layout = op.layout()?;
            let body = vec![0xA5u8; if layout.payload { payload } else { 0 }];
            let dst_mac = if to_port_mac {
                port_mac(rx)
            } else {
                [0x02, 0x99, 0, 0, 0, 1]
            };
            let ip = IpRepr::V4 {
                src: Ipv4Addr::from(DSTS[src]),
                dst: Ipv4Addr::from(DSTS[dst]),
                id: 3,
            };
            let bth = BthRepr::new(op, psn >> 8, Psn::new(psn));
            RoceFrameRepr {
                hop_limit,
                udp_src_port: 49152 + (psn & 0xFF) as u16,
                ..RoceFrameRepr::new(peer_mac(rx), dst_mac, ip, bth)
            }
            .with_ext(every_ext())
            .with_payload(&body)
            .to_vec()
            .ok()
        }

        fn tables() -> Tables {
            let mut t = tor_tables(2, 4, SprayPolicy::RoundRobin);
            // d1's host is learned from ARP, not configured.
            t.neighbors
                .remove(&ip_key(IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2))));
            // One uplink with a smaller MTU: some sprayed packets exceed it.
            t.ports[2].mtu = 1000;
            t
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]
            #[test]
            fn fast_and_full_path_decide_alike(steps in prop::collection::vec(step(), 1..80)) {
                let t = Arc::new(tables());
                let status: Vec<CachePadded<PortStatus>> =
                    (0..PORTS).map(|_| CachePadded::new(PortStatus::new_up())).collect();
                let mut fast = Engine::new(&t, 7);
                let mut full = Engine::new(&t, 7);
                fast.on_tables(&t);
                full.on_tables(&t);
                full.set_fast_path(false);
                let mut now = 0u64;
                for s in steps {
                    now += 1_000;
                    // Each step is a worker iteration: link state is read once per iteration.
                    fast.begin_iteration();
                    full.begin_iteration();
                    let bytes = match s {
                        Step::Link(p, up) => {
                            status[p].set_up(up);
                            continue;
                        }
                        Step::Arp(second) => {
                            let mut b = vec![0u8; 60];
                            let mac = if second { [2, 0x30, 0, 0, 0, 9] } else { peer_mac(1) };
                            arp_request(
                                &mut b,
                                mac,
                                Ipv4Addr::new(10, 0, 1, 2),
                                Ipv4Addr::new(10, 0, 1, 1),
                            );
                            let mut p = Pkt::from_slice(&b);
                            p.rx_port = 1;
                            p
                        }
                        Step::Frame { spec, mutate, cut } => {
                            let Some(mut f) = frame(spec) else {
                                continue;
                            };
                            if let Some((at, x, fix)) = mutate {
                                let at = at % f.len();
                                f[at] ^= x;
                                if fix && f.len() >= 34 {
                                    f[24] = 0;
                                    f[25] = 0;
                                    let c = !fold(ones_sum(&f[14..34], 0));
                                    f[24..26].copy_from_slice(&c.to_be_bytes());
                                }
                            }
                            if let Some(n) = cut {
                                f.truncate(n.min(f.len()));
                            }
                            let mut p = Pkt::from_slice(&f);
                            p.rx_port = spec.rx as u16;
                            p
                        }
                    };
                    let mut a = bytes.clone();
                    let mut b = bytes;
                    let va = fast.handle(&t, &status, &mut a, now);
                    let vb = full.handle(&t, &status, &mut b, now);
                    // The whole decision: verdict, the reorder facts, what the stage learns
                    // from a host and the CNP flag.
                    prop_assert_eq!(va, vb);
                    prop_assert_eq!(a.data(), b.data());
                    prop_assert_eq!(fast.stats, full.stats);
                    for port in 0..PORTS as u16 {
                        prop_assert_eq!(fast.pmtu_of(&t, port), full.pmtu_of(&t, port));
                    }
                    let (mut ra, mut rb) = (Vec::new(), Vec::new());
                    fast.take_resolve(&mut ra);
                    full.take_resolve(&mut rb);
                    prop_assert_eq!(ra, rb);
                    let (mut la, mut lb) = (Vec::new(), Vec::new());
                    fast.take_learned(&mut la);
                    full.take_learned(&mut lb);
                    prop_assert_eq!(la, lb);
                }
                prop_assert_eq!(full.fast_hits, 0);
                if std::env::var_os("FAST_PATH_HITS").is_some() {
                    eprintln!("fast path hits {}", fast.fast_hits);
                }
            }
        }

        /// The traffic of the benchmarks takes the fast path after the first packet per
        /// destination (so the property test above compares something).
        #[test]
        fn steady_roce_traffic_takes_the_fast_path() {
            let t = Arc::new(tables());
            let status: Vec<CachePadded<PortStatus>> = (0..PORTS)
                .map(|_| CachePadded::new(PortStatus::new_up()))
                .collect();
            let mut e = Engine::new(&t, 1);
            let write = |dst: usize, psn: u32| Spec {
                rx: 1,
                to_port_mac: true,
                src: 1,
                dst,
                opcode: u8::from(Opcode::RcWriteMiddle),
                payload: 256,
                hop_limit: 64,
                psn,
            };
            for (i, dst) in [0usize, 4, 5, 4, 0, 5].into_iter().enumerate() {
                let f = frame(write(dst, i as u32)).unwrap();
                let mut p = Pkt::from_slice(&f);
                p.rx_port = 1;
                let v = e.handle(&t, &status, &mut p, 1_000);
                assert!(
                    matches!(v.verdict, Verdict::Forward(_) | Verdict::Reorder(0, _)),
                    "{v:?}"
                );
            }
            assert_eq!(e.fast_hits, 3);
            // A new snapshot empties the cache.
            let t2 = Arc::new(tables());
            e.on_tables(&t2);
            let f = frame(write(4, 9)).unwrap();
            let mut p = Pkt::from_slice(&f);
            p.rx_port = 1;
            e.handle(&t2, &status, &mut p, 2_000);
            assert_eq!(e.fast_hits, 3);
        }
    }
}
