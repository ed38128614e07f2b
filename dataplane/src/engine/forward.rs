//! The per-packet decision: classify, answer what is addressed to the switch, route, pick the
//! egress (spraying towards uplink groups), rewrite MACs and TTL in place.
//!
//! Cost (BENCHMARKS.md): a RoCE data packet to a destination routed before takes the fast path
//! (`super::fast`, about 25 ns of work over the worker's bare forward); anything else takes
//! the full path, a little over the time of its classification (about 100 ns more). No
//! allocation in steady state (neighbour learning and resolution requests use bounded,
//! preallocated storage).

use std::net::IpAddr;

use super::fast::{fast_ops, FastOp, Hop, RouteCache};
use super::neigh::{is_unicast_ip, Learned, NeighborTable, ResolveRequest};
use super::spray::{flow_hash, flow_hash_v4, Pick, Sprayer};
use super::DropReason;
use crate::ids::PortId;
use crate::meta::{MetaKind, PathStamp, QpRef, RoceMeta, NO_PATH};
use crate::pkt::Pkt;
use crate::tables::{ip_key, Neighbor, PortInfo, Role, RouteTarget, StatusBoard, Tables};
use crate::wire::checksum::{ipv4_checksum_ok, ipv4_decrement_ttl};
use crate::wire::control::{
    arp_reply_in_place, echo_reply_in_place, nd_advert_in_place, nd_lladdr, nd_target,
};
use crate::wire::pause::{PauseFrame, ETHERTYPE_MAC_CONTROL};
use crate::wire::{
    classify, FrameClass, IpSummary, L4Summary, Opcode, Pmtu, Psn, RoceSummary, Transport,
    ICRC_LEN, ROCEV2_UDP_PORT,
};

/// What to do with a packet after [`Engine::handle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Routed and rewritten: transmit on the port.
    Forward(PortId),
    /// Routed RoCE (RC or UC, or an RDMA CM message) towards a downlink: through the reorder
    /// stage with these facts, then out the port.
    Reorder(PortId, RoceMeta),
    /// The switch answered in place (ARP, ND, echo): transmit on the port it came from.
    Reply(PortId),
    /// Taken by the switch (an ARP reply or neighbour advertisement it learned from).
    Consumed,
    /// A PAUSE or PFC frame from the port's peer: the port's egress queue stops what it names
    /// (the frame itself is consumed).
    Pause(PauseFrame),
    /// Routed towards a next hop whose address is being resolved (a request went out on
    /// `port`): the worker may hold the packet until `next_hop` answers; if it does not, the
    /// packet is an `unresolved` drop.
    Resolving {
        /// The egress port, where the resolution was asked.
        port: PortId,
        /// The next hop.
        next_hop: IpAddr,
    },
    /// A path probe from a peer ToR ([`crate::wire::probe`]) that arrived on an uplink: for the
    /// worker's path monitor (the packet itself is consumed).
    Probe {
        /// The peer's address.
        src: IpAddr,
        /// Offset of the probe's payload in the frame.
        payload: u16,
    },
    /// Dropped, for this reason.
    Drop(DropReason),
}

/// Everything the engine decided about one packet: the verdict, and what the worker does
/// besides sending it (the reorder stage learns from a local host's packet whatever its
/// verdict; a host's CNP is counted on its downlink).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Where the packet goes.
    pub verdict: Verdict,
    /// What a local host's packet tells the reorder stage of its downlink (READ requests and
    /// atomics, NAKs, ACKs, path MTUs, RDMA CM).
    pub observed: Option<RoceMeta>,
    /// The packet is a CNP from a host (received on a downlink).
    pub host_cnp: bool,
}

impl From<Verdict> for Decision {
    fn from(verdict: Verdict) -> Decision {
        Decision {
            verdict,
            observed: None,
            host_cnp: false,
        }
    }
}

/// Plain event counts of one engine, published by its worker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// ARP requests answered.
    pub arp_replies: u64,
    /// Neighbour solicitations answered.
    pub nd_replies: u64,
    /// ICMP/ICMPv6 echo requests answered.
    pub echo_replies: u64,
    /// Neighbours learned from ARP/ND.
    pub neigh_learned: u64,
    /// Resolution requests queued.
    pub resolve_requests: u64,
    /// RoCE packets sent over a group under a spraying policy (a request that asks for
    /// responses takes its QP's hashed uplink, see `Opcode::asks_for_responses`).
    pub sprayed: u64,
    /// Packets sent over a group by flow hash (non-RoCE, or policy `ecmp`).
    pub hashed: u64,
}

/// Forwarding state of one worker.
#[derive(Debug)]
pub struct Engine {
    /// Next hops learned and to resolve.
    neigh: NeighborTable,
    /// The time of the packet being handled (for learning).
    clock: u64,
    sprayer: Sprayer,
    /// Event counts.
    pub stats: EngineStats,
    /// Path MTU learned per port from full-size RoCE segments (FIRST and MIDDLE packets carry
    /// exactly one path MTU of payload).
    learned_pmtu: Vec<Option<Pmtu>>,
    /// Resolved next hops of the fast path (see [`super::fast`]).
    cache: RouteCache,
    /// The fast path's table of opcodes.
    fast_ops: Box<[FastOp; 256]>,
    /// Address of the tables the cache was filled from (the last [`Engine::on_tables`]): the
    /// fast path serves only those.
    tables_addr: usize,
    /// The fast path is on (it is unless a test or a benchmark turns it off).
    fast: bool,
    /// Packets the fast path decided.
    pub fast_hits: u64,
    /// What the fast path reads of each egress port, packed (a `PortInfo` is 88 bytes with its
    /// name and addresses; this is 16), rebuilt with the tables.
    port_facts: Vec<PortFacts>,
    /// Per port: the fabric path it is ([`Tables::path_of_ports`]), what RoCE packets it
    /// delivers carry to the reorder stage.
    rx_path: Vec<u8>,
    /// Per port: a path of a group with path stamps ([`Tables::stamp_ports`]).
    stamp_port: Vec<bool>,
    /// The stamps this worker writes on those paths ([`crate::wire::stamp`]).
    stamper: crate::wire::stamp::Stamper,
    /// This engine's worker (the stamper's lane).
    worker: usize,
}

/// The fast path's copy of a port's forwarding facts.
#[derive(Debug, Clone, Copy)]
struct PortFacts {
    mac: [u8; 6],
    peer_mac: Option<[u8; 6]>,
    mtu: u16,
    downlink: bool,
    admin_up: bool,
}

fn port_facts(t: &Tables) -> Vec<PortFacts> {
    t.ports
        .iter()
        .map(|p| PortFacts {
            mac: p.mac,
            peer_mac: p.peer_mac,
            mtu: p.mtu,
            downlink: p.role == Role::Downlink,
            admin_up: p.admin_up,
        })
        .collect()
}

/// A frame as the full path received it: its port, what it is, and whether it was addressed
/// to the port's own MAC (else to a group address).
#[derive(Clone, Copy)]
struct Received<'a> {
    rx_info: &'a PortInfo,
    c: &'a crate::wire::Classified,
    to_us: bool,
}

impl Engine {
    /// A fresh engine; `seed` drives the random spray policies.
    pub fn new(t: &Tables, seed: u64) -> Engine {
        let mut sprayer = Sprayer::new(t.groups.len(), seed);
        sprayer.reshape(t);
        Engine {
            neigh: NeighborTable::default(),
            clock: 0,
            sprayer,
            stats: EngineStats::default(),
            learned_pmtu: vec![None; t.ports.len()],
            cache: RouteCache::default(),
            fast_ops: fast_ops(),
            tables_addr: t as *const Tables as usize,
            fast: true,
            fast_hits: 0,
            port_facts: port_facts(t),
            rx_path: t.path_of_ports(),
            stamp_port: t.stamp_ports(),
            stamper: crate::wire::stamp::Stamper::new(0, t.stamp_lane_bits),
            worker: 0,
        }
    }

    /// Adapts per-group state to a new snapshot (not on the packet path). Call it whenever
    /// the tables change: the fast path's cache depends on them.
    pub fn on_tables(&mut self, t: &Tables) {
        self.sprayer.reshape(t);
        self.learned_pmtu.resize(t.ports.len(), None);
        self.cache.invalidate();
        self.tables_addr = t as *const Tables as usize;
        self.port_facts = port_facts(t);
        self.rx_path = t.path_of_ports();
        self.stamp_port = t.stamp_ports();
        if t.stamp_lane_bits.min(crate::wire::stamp::MAX_LANE_BITS) != self.stamper.lane_bits() {
            self.stamper = crate::wire::stamp::Stamper::new(self.worker, t.stamp_lane_bits);
        }
    }

    /// Starts a worker loop iteration: link state of uplink groups is then read once per
    /// iteration (see [`Sprayer::begin_iteration`]).
    pub fn begin_iteration(&mut self) {
        self.sprayer.begin_iteration();
    }

    /// Stamps with the counter of worker `worker` ([`crate::wire::stamp::Stamper::new`]).
    pub fn set_worker(&mut self, worker: usize) {
        self.worker = worker;
        self.stamper = crate::wire::stamp::Stamper::new(worker, self.stamper.lane_bits());
    }

    /// Turns the fast path on or off (for the property test that compares both paths and for
    /// benchmarks); decisions are the same either way.
    pub fn set_fast_path(&mut self, on: bool) {
        self.fast = on;
        self.cache.invalidate();
    }

    /// The neighbour for `ip`: static entries first, then learned ones.
    #[inline]
    pub fn neighbor(&self, t: &Tables, ip: IpAddr) -> Option<Neighbor> {
        self.neigh.get(t, ip)
    }

    /// Neighbours this engine learned (or was told about by other workers).
    pub fn learned_neighbors(&self) -> Vec<(IpAddr, Neighbor)> {
        self.neigh.snapshot()
    }

    /// Records a neighbour learned by another worker.
    pub fn learn_remote(&mut self, ip: IpAddr, n: Neighbor, now: u64) {
        if self.neigh.learn_remote(ip, n, now) {
            self.cache.invalidate();
        }
    }

    /// Forgets learned neighbours not confirmed for `max_age_ns` (they are resolved again when
    /// traffic needs them). Returns how many went.
    pub fn age_neighbors(&mut self, now: u64, max_age_ns: u64) -> usize {
        let gone = self.neigh.age(now, max_age_ns);
        if gone > 0 {
            self.cache.invalidate();
        }
        gone
    }

    /// Neighbours learned here since the last call, for the other workers.
    pub fn take_learned(&mut self, out: &mut Vec<(IpAddr, Neighbor)>) {
        self.neigh.take_learned(out);
    }

    /// Next hops to resolve since the last call.
    pub fn take_resolve(&mut self, out: &mut Vec<ResolveRequest>) {
        self.neigh.take_resolve(out);
    }

    /// Asks again for `next_hop` on `port` (ARP or neighbour solicitation), at most once per
    /// resolve interval (100 ms): for packets held while it does not answer, so that a lost
    /// request or answer is not the end of them.
    pub fn ask_again(&mut self, port: PortId, next_hop: IpAddr, now: u64) {
        self.request_resolve(port, next_hop, now);
    }

    /// Every learned neighbour.
    pub fn learned(&self) -> impl Iterator<Item = (&u128, &Neighbor)> {
        self.neigh.iter()
    }

    fn learn(&mut self, t: &Tables, ip: IpAddr, mac: [u8; 6], port: PortId) {
        if self.neigh.learn(t, ip, mac, port, self.clock) == Learned::Changed {
            self.cache.invalidate();
            self.stats.neigh_learned += 1;
        }
    }

    fn request_resolve(&mut self, port: PortId, target: IpAddr, now: u64) {
        if self.neigh.request_resolve(port, target, now) {
            self.stats.resolve_requests += 1;
        }
    }

    /// Decides what to do with `pkt`, received on `pkt.rx_port`, rewriting it in place when it
    /// is routed or answered.
    #[inline]
    pub fn handle(
        &mut self,
        t: &Tables,
        status: &StatusBoard,
        pkt: &mut Pkt,
        now: u64,
    ) -> Decision {
        let rx = pkt.rx_port;
        self.clock = now;
        if let Some(Some(peer)) = t.patch.get(usize::from(rx)) {
            return Verdict::Forward(*peer).into();
        }
        let Some(rx_info) = t.ports.get(usize::from(rx)) else {
            return Verdict::Drop(DropReason::NotForUs).into();
        };
        if self.fast && self.tables_addr == t as *const Tables as usize {
            if let Some(v) = self.handle_fast(t, status, rx_info, pkt, now) {
                self.fast_hits += 1;
                return v;
            }
        }
        self.handle_full(t, status, rx_info, pkt, now)
    }

    /// The full path: everything [`Engine::handle`] does not leave to the fast path. Kept out
    /// of line so that the fast path does not pay for its stack frame.
    #[inline(never)]
    fn handle_full(
        &mut self,
        t: &Tables,
        status: &StatusBoard,
        rx_info: &PortInfo,
        pkt: &mut Pkt,
        now: u64,
    ) -> Decision {
        let rx = pkt.rx_port;
        let c = match classify(pkt.data(), rx_info.pmtu) {
            Ok(c) => c,
            Err(_) => return Verdict::Drop(DropReason::Malformed).into(),
        };
        let dst_mac = c.eth.dst;
        let to_us = dst_mac == rx_info.mac;
        let group_addr = dst_mac[0] & 1 == 1;
        if !to_us && !group_addr {
            return Verdict::Drop(DropReason::NotForUs).into();
        }
        let (mut observed, mut host_cnp) = (None, false);
        if let (FrameClass::Roce(r), Role::Downlink) = (&c.class, rx_info.role) {
            self.learn_pmtu(rx, r);
            let pmtu = self.pmtu_of(t, rx);
            observed = host_observation(r, pmtu, pkt.len())
                .or_else(|| cm_meta(r, pkt.data(), true, false));
            host_cnp = r.bth.opcode == crate::wire::Opcode::Cnp;
        }
        Decision {
            verdict: self.route(
                t,
                status,
                pkt,
                Received {
                    rx_info,
                    c: &c,
                    to_us,
                },
                now,
            ),
            observed,
            host_cnp,
        }
    }

    /// The full path's verdict for a classified frame (`got`) addressed to this switch's port
    /// MAC or to a group address.
    fn route(
        &mut self,
        t: &Tables,
        status: &StatusBoard,
        pkt: &mut Pkt,
        got: Received<'_>,
        now: u64,
    ) -> Verdict {
        let Received { rx_info, c, to_us } = got;
        let rx = pkt.rx_port;
        let l3 = usize::from(c.eth.l3_offset);
        // Borrow from `c` rather than copy: the summaries are large and copying them per packet
        // showed up in profiles (store-forwarding stalls).
        let roce = c.roce();
        let (ip, roce_transport) = match &c.class {
            FrameClass::Arp(a) => {
                self.learn(t, IpAddr::V4(a.sender_ip), a.sender_mac, rx);
                let ours = t.local.get(&ip_key(IpAddr::V4(a.target_ip))) == Some(&rx);
                if a.operation == 1 && ours {
                    arp_reply_in_place(pkt.data_mut(), l3, rx_info.mac, a.target_ip);
                    self.stats.arp_replies += 1;
                    return Verdict::Reply(rx);
                }
                return Verdict::Consumed;
            }
            FrameClass::OtherL2 if c.eth.ether_type == ETHERTYPE_MAC_CONTROL => {
                return match PauseFrame::parse(pkt.data().get(l3..).unwrap_or_default()) {
                    Ok(f) => Verdict::Pause(f),
                    Err(_) => Verdict::Drop(DropReason::BadPause),
                };
            }
            FrameClass::OtherL2 => return Verdict::Drop(DropReason::UnsupportedEthertype),
            FrameClass::Ip(ip) => (ip, None),
            FrameClass::Roce(r) => (&r.ip, Some(r.transport)),
        };

        if let L4Summary::Icmpv6 { icmp_type, .. } = ip.l4 {
            if let Some(v) = self.handle_nd(t, pkt, ip, icmp_type, l3) {
                return v;
            }
        }
        if t.local.contains_key(&ip_key(ip.dst)) {
            if let (L4Summary::Udp { dst_port, .. }, Role::Uplink) = (ip.l4, rx_info.role) {
                if dst_port == crate::wire::probe::PROBE_UDP_PORT {
                    return Verdict::Probe {
                        src: ip.src,
                        payload: ip.l4_offset + 8,
                    };
                }
            }
            return self.handle_local(pkt, ip, l3, rx_info.mac);
        }
        if !to_us || !is_unicast_ip(ip.dst) {
            return Verdict::Drop(DropReason::NotRoutable);
        }
        if ip.dst.is_ipv4() {
            let ihl = usize::from(pkt.data()[l3] & 0x0F) * 4;
            if !ipv4_checksum_ok(&pkt.data()[l3..l3 + ihl]) {
                return Verdict::Drop(DropReason::BadIpChecksum);
            }
        }
        if ip.hop_limit <= 1 {
            return Verdict::Drop(DropReason::TtlExpired);
        }

        // Route.
        let Some((_, target)) = t.fib.lookup(ip.dst) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        let (egress, mac) = match *target {
            RouteTarget::Connected(p) | RouteTarget::Via(p, _) => {
                let nh = match *target {
                    RouteTarget::Via(_, gw) => gw,
                    _ => ip.dst,
                };
                let up = t.ports.get(usize::from(p)).is_some_and(|i| i.admin_up)
                    && status.get(usize::from(p)).is_some_and(|s| s.is_up());
                if !up {
                    return Verdict::Drop(DropReason::PortDown);
                }
                match self.neighbor(t, nh) {
                    Some(n) if n.port == p => {
                        if let IpAddr::V4(d) = ip.dst {
                            self.cache.fill(
                                u32::from(d),
                                Hop::Port {
                                    port: p,
                                    mac: n.mac,
                                },
                            );
                        }
                        (p, n.mac)
                    }
                    _ => {
                        self.request_resolve(p, nh, now);
                        return Verdict::Resolving {
                            port: p,
                            next_hop: nh,
                        };
                    }
                }
            }
            RouteTarget::Group(g) => {
                if let IpAddr::V4(d) = ip.dst {
                    self.cache.fill(u32::from(d), Hop::Group(g));
                }
                let hash = flow_hash(ip);
                // A request that asks for responses (READ, atomics, FLUSH, ATOMIC WRITE) takes
                // its QP's hashed uplink even when the rest is sprayed: it carries no data, and
                // a requester's retry resends several of them at once, which the responder
                // replays in the order they come. Sprayed, they would overtake each other (a
                // retransmission is behind the far reorder stage's expected PSN, so it passes
                // unordered) and the replayed responses would go back and forth in PSN, which
                // path-order loss detection cannot read.
                // Only under the per-packet policies: a flowlet keeps the whole QP on one
                // uplink already, which a request pinned elsewhere would overtake.
                let pinned = t.policy.sprays()
                    && !t.policy.uses_flow_hash()
                    && roce.is_some_and(|r| r.bth.opcode.asks_for_responses());
                let policy = if roce_transport.is_some() && !pinned {
                    t.policy
                } else {
                    crate::tables::SprayPolicy::Ecmp
                };
                let Some(p) = self.sprayer.choose(
                    t,
                    g,
                    status,
                    Pick {
                        policy,
                        flow: hash,
                        now,
                    },
                ) else {
                    return Verdict::Drop(DropReason::AllUplinksDown);
                };
                if policy.sprays() || pinned {
                    self.stats.sprayed += 1;
                } else {
                    self.stats.hashed += 1;
                }
                match t.ports.get(usize::from(p)).and_then(|i| i.peer_mac) {
                    Some(m) => (p, m),
                    None => return Verdict::Drop(DropReason::Unresolved),
                }
            }
        };
        let Some(out) = t.ports.get(usize::from(egress)) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        let ip_len = usize::from(ip.end_offset).saturating_sub(l3);
        if ip_len > usize::from(out.mtu) {
            return Verdict::Drop(DropReason::MtuExceeded);
        }

        // Rewrite in place: MACs, TTL / hop limit (masked out of the ICRC).
        let f = pkt.data_mut();
        f[0..6].copy_from_slice(&mac);
        f[6..12].copy_from_slice(&out.mac);
        if ip.dst.is_ipv4() {
            ipv4_decrement_ttl(&mut f[l3..]);
        } else {
            f[l3 + 7] -= 1;
        }
        let stamp = match roce_transport {
            Some(_) => self.restamp(
                f,
                usize::from(ip.l4_offset),
                (rx, rx_info.role),
                (egress, out.role),
            ),
            None => PathStamp::NONE,
        };
        match (roce_transport, roce) {
            (Some(Transport::Ud), Some(r)) if out.role == Role::Downlink => {
                // RDMA CM towards a local host: the owner of the downlink learns from it.
                match cm_meta(r, pkt.data(), rx_info.role == Role::Downlink, true) {
                    Some(m) => Verdict::Reorder(egress, m),
                    None => Verdict::Forward(egress),
                }
            }
            (Some(Transport::Rc | Transport::Uc), Some(r)) if out.role == Role::Downlink => {
                self.learn_pmtu(egress, r);
                let pmtu = self.pmtu_of(t, egress);
                let path = self.path_of(pkt.rx_port);
                Verdict::Reorder(egress, towards_host(r, pmtu, pkt.len(), path, stamp))
            }
            _ => Verdict::Forward(egress),
        }
    }

    /// The fast path (see [`super::fast`]): decides an IPv4 RoCE data packet towards a cached
    /// destination from fixed offsets, or returns `None` and leaves it, untouched, to the full
    /// path. Every check here mirrors one of the full path. Before it has a route it declines
    /// whatever the full path would drop or learn from (not for us, TTL, checksum, no cached
    /// route); once it has one it decides as the full path does, its drops (all uplinks down,
    /// no peer MAC, MTU exceeded) and side effects (spray turn, path MTU learned) included.
    /// Measured cost: BENCHMARKS.md, "Forwarding".
    #[inline]
    fn handle_fast(
        &mut self,
        t: &Tables,
        status: &StatusBoard,
        rx_info: &PortInfo,
        pkt: &mut Pkt,
        now: u64,
    ) -> Option<Decision> {
        // Ethernet II + IPv4 without options + UDP + BTH + ICRC, at the offsets of `plain_v4`.
        use crate::wire::classify::plain_v4::*;
        let f = pkt.data();
        if f.len() < BTH + BTH_LEN + ICRC_LEN
            || f[0..6] != rx_info.mac
            || f[12..14] != [0x08, 0x00]
            || f[L3] != 0x45
        {
            return None;
        }
        let be16 = |o: usize| u16::from_be_bytes([f[o], f[o + 1]]);
        let total_len = usize::from(be16(IP_TOTAL_LEN));
        let udp_len = usize::from(be16(UDP_LEN));
        // Not a fragment (MF clear, offset 0), TTL left to decrement, UDP to 4791, lengths
        // that nest: frame >= IP packet >= UDP datagram >= UDP + BTH + ICRC.
        if be16(IP_FRAG) & 0x3FFF != 0
            || f[IP_TTL] <= 1
            || f[IP_PROTO] != 17
            || be16(UDP_DPORT) != ROCEV2_UDP_PORT
            || L3 + total_len > f.len()
            || udp_len + 20 > total_len
            || udp_len < 8 + BTH_LEN + ICRC_LEN
        {
            return None;
        }
        let op = self.fast_ops[usize::from(f[BTH_OPCODE])];
        let pad_tver = f[BTH_FLAGS];
        let need = usize::from(op.ext_len) + usize::from((pad_tver >> 4) & 3) + ICRC_LEN;
        let ext_len = udp_len - 8 - BTH_LEN;
        if !op.ok || pad_tver & 0x0F != 0 || ext_len < need {
            return None;
        }
        let dst = u32::from_be_bytes([f[IP_DST], f[IP_DST + 1], f[IP_DST + 2], f[IP_DST + 3]]);
        let src = u32::from_be_bytes([f[IP_SRC], f[IP_SRC + 1], f[IP_SRC + 2], f[IP_SRC + 3]]);
        let sport = be16(UDP_SPORT);
        let hop = self.cache.get(dst)?;
        if !ipv4_checksum_ok(&f[L3..L4]) {
            return None;
        }
        // From here on the packet is the fast path's. The full path learns a host's path MTU
        // before it decides anything (also for packets it then drops); so does this one.
        let payload_len = (ext_len - need) as u16;
        let qpn = u32::from_be_bytes([0, f[BTH_DEST_QP], f[BTH_DEST_QP + 1], f[BTH_DEST_QP + 2]]);
        let psn = Psn::new(u32::from_be_bytes([
            0,
            f[BTH_PSN],
            f[BTH_PSN + 1],
            f[BTH_PSN + 2],
        ]));
        let len = f.len() as u32;
        if op.full_segment && rx_info.role == Role::Downlink {
            self.learn_pmtu_bytes(pkt.rx_port, payload_len);
        }
        // A local responder's READ RESPONSE shows its QP's path MTU (what the READ REQUESTs it
        // answers span): the reorder stage of its downlink learns it (not from an empty one,
        // which shows nothing; the full path skips those too).
        let mut observed = None;
        if rx_info.role == Role::Downlink && op.fill && op.full_segment && payload_len > 0 {
            let qp = QpRef {
                local: ip_key(IpAddr::V4(src.into())),
                remote: ip_key(IpAddr::V4(dst.into())),
                sport,
                qpn,
            };
            observed = Some(RoceMeta::new(qp, psn, MetaKind::HostPmtu).sized(1, payload_len, len));
        }
        let (egress, mac) = match hop {
            Hop::Port { port, mac } => {
                let up = self
                    .port_facts
                    .get(usize::from(port))
                    .is_some_and(|e| e.admin_up)
                    && status.get(usize::from(port)).is_some_and(|s| s.is_up());
                if !up {
                    return None;
                }
                (port, mac)
            }
            Hop::Group(g) => {
                // Only the hashing policies read the hash.
                let hash = if t.policy.uses_flow_hash() {
                    let ports = 17u64 << 32 | u64::from(sport) << 16 | u64::from(ROCEV2_UDP_PORT);
                    flow_hash_v4(src, dst, ports)
                } else {
                    0
                };
                let Some(p) = self.sprayer.choose(
                    t,
                    g,
                    status,
                    Pick {
                        policy: t.policy,
                        flow: hash,
                        now,
                    },
                ) else {
                    return Some(Decision {
                        observed,
                        ..Verdict::Drop(DropReason::AllUplinksDown).into()
                    });
                };
                if t.policy.sprays() {
                    self.stats.sprayed += 1;
                } else {
                    self.stats.hashed += 1;
                }
                match self.port_facts.get(usize::from(p)).and_then(|e| e.peer_mac) {
                    Some(m) => (p, m),
                    None => {
                        return Some(Decision {
                            observed,
                            ..Verdict::Drop(DropReason::Unresolved).into()
                        })
                    }
                }
            }
        };
        let out = *self.port_facts.get(usize::from(egress))?;
        if total_len > usize::from(out.mtu) {
            // The spray choice above stands, as on the full path, which drops it too.
            return Some(Decision {
                observed,
                ..Verdict::Drop(DropReason::MtuExceeded).into()
            });
        }

        // Decided. The rewrite, then the facts for the reorder stage.
        let (rx_port, rx_role) = (pkt.rx_port, rx_info.role);
        let out_role = if out.downlink {
            Role::Downlink
        } else {
            Role::Uplink
        };
        let f = pkt.data_mut();
        f[0..6].copy_from_slice(&mac);
        f[6..12].copy_from_slice(&out.mac);
        ipv4_decrement_ttl(&mut f[L3..]);
        let stamp = self.restamp(f, L4, (rx_port, rx_role), (egress, out_role));
        // An `if`, not `bool::then` with a closure: the closure was not inlined (8% of the
        // routed forward bench).
        let meta = if out.downlink {
            let qp = QpRef {
                local: ip_key(IpAddr::V4(dst.into())),
                remote: ip_key(IpAddr::V4(src.into())),
                sport,
                qpn,
            };
            let kind = if op.fill {
                MetaKind::Fill { ends: op.ends }
            } else {
                MetaKind::Request { read_len: None }
            };
            let full = if op.full_segment { payload_len } else { 0 };
            Some(
                RoceMeta::new(qp, psn, kind)
                    .sized(1, full, len)
                    .over(self.path_of(pkt.rx_port), stamp),
            )
        } else {
            None
        };
        if op.full_segment && meta.is_some() {
            self.learn_pmtu_bytes(egress, payload_len);
        }
        let verdict = match meta {
            Some(m) => Verdict::Reorder(egress, m),
            None => Verdict::Forward(egress),
        };
        Some(Decision {
            verdict,
            observed,
            host_cnp: false,
        })
    }

    /// The path stamp of a RoCE packet being forwarded (its UDP header at `l4`) from port
    /// `rx_port`, of role `rx`, out of `egress`, of role `out` ([`crate::wire::stamp`]): from a
    /// stamped path towards a host, the stamp is read (returned with the packet's priority)
    /// and the checksum cleared; from a host onto a stamped path, the next stamp is written
    /// (none returned). Anything else is left as it is (a sprayswitch spine keeps the source
    /// ToR's stamps).
    #[inline]
    fn restamp(
        &mut self,
        f: &mut [u8],
        l4: usize,
        (rx_port, rx): (PortId, Role),
        (egress, out): (PortId, Role),
    ) -> PathStamp {
        let stamped = |p: PortId| self.stamp_port.get(usize::from(p)).copied() == Some(true);
        match (rx, out) {
            (Role::Uplink, Role::Downlink) if stamped(rx_port) => {
                match crate::wire::stamp::take(f, l4) {
                    0 => PathStamp::NONE,
                    s => {
                        PathStamp::read(s, crate::wire::ecn::priority(f), self.stamper.lane_bits())
                    }
                }
            }
            (Role::Downlink, Role::Uplink) if stamped(egress) => {
                crate::wire::stamp::put(f, l4, self.stamper.stamp());
                PathStamp::NONE
            }
            _ => PathStamp::NONE,
        }
    }

    /// The fabric path port `rx` is, for the reorder stage ([`NO_PATH`] if none).
    #[inline]
    fn path_of(&self, rx: PortId) -> u8 {
        self.rx_path
            .get(usize::from(rx))
            .copied()
            .unwrap_or(NO_PATH)
    }

    /// Learns a port's path MTU from a full-size segment.
    #[inline]
    fn learn_pmtu(&mut self, port: PortId, r: &RoceSummary) {
        if matches!(
            r.bth.opcode.segment(),
            crate::wire::Segment::First | crate::wire::Segment::Middle
        ) {
            self.learn_pmtu_bytes(port, r.payload_len);
        }
    }

    /// Learns a port's path MTU from the payload of a FIRST or MIDDLE segment.
    #[inline]
    fn learn_pmtu_bytes(&mut self, port: PortId, payload_len: u16) {
        if let Ok(p) = Pmtu::new(u32::from(payload_len)) {
            if let Some(slot) = self.learned_pmtu.get_mut(usize::from(port)) {
                *slot = Some(slot.map_or(p, |old| if p.bytes() > old.bytes() { p } else { old }));
            }
        }
    }

    /// The path MTU READ REQUESTs through a port are sized at: configured, else the largest of
    /// what its MTU allows and what its hosts showed. QPs of one port may run at different path
    /// MTUs; the reorder stage learns each QP's own and corrects spans with it, and an estimate
    /// at the largest is never too long (a span too long would skip PSNs that do come).
    pub fn pmtu_of(&self, t: &Tables, port: PortId) -> Pmtu {
        let Some(info) = t.ports.get(usize::from(port)) else {
            return Pmtu::DEFAULT;
        };
        if info.pmtu_fixed {
            return info.pmtu;
        }
        match self.learned_pmtu.get(usize::from(port)).copied().flatten() {
            Some(l) if l.bytes() > info.pmtu.bytes() => l,
            _ => info.pmtu,
        }
    }

    fn handle_nd(
        &mut self,
        t: &Tables,
        pkt: &mut Pkt,
        ip: &IpSummary,
        icmp_type: u8,
        l3: usize,
    ) -> Option<Verdict> {
        let rx = pkt.rx_port;
        let l4 = usize::from(ip.l4_offset);
        let end = usize::from(ip.end_offset);
        match icmp_type {
            135 => {
                let target = nd_target(pkt.data(), l4)?;
                if t.local.get(&ip_key(IpAddr::V6(target))) != Some(&rx) {
                    return Some(Verdict::Drop(DropReason::NotRoutable));
                }
                if let (IpAddr::V6(src), Some(mac)) = (ip.src, nd_lladdr(pkt.data(), l4, end, 1)) {
                    if !src.is_unspecified() {
                        self.learn(t, IpAddr::V6(src), mac, rx);
                    }
                }
                let mac = t.ports[usize::from(rx)].mac;
                let cap = pkt.capacity();
                pkt.resize(cap);
                match nd_advert_in_place(pkt.data_mut(), l3, mac, target) {
                    Some(len) => {
                        pkt.resize(len);
                        self.stats.nd_replies += 1;
                        Some(Verdict::Reply(rx))
                    }
                    None => Some(Verdict::Drop(DropReason::Malformed)),
                }
            }
            136 => {
                if let (Some(target), Some(mac)) =
                    (nd_target(pkt.data(), l4), nd_lladdr(pkt.data(), l4, end, 2))
                {
                    self.learn(t, IpAddr::V6(target), mac, rx);
                }
                Some(Verdict::Consumed)
            }
            // Router/neighbour discovery we do not take part in (RS, RA, redirect).
            133 | 134 | 137 => Some(Verdict::Drop(DropReason::NotRoutable)),
            _ => None,
        }
    }

    fn handle_local(&mut self, pkt: &mut Pkt, ip: &IpSummary, l3: usize, mac: [u8; 6]) -> Verdict {
        let is_echo = matches!(
            ip.l4,
            L4Summary::Icmpv4 {
                icmp_type: 8,
                code: 0
            } | L4Summary::Icmpv6 {
                icmp_type: 128,
                code: 0
            }
        );
        if !is_echo {
            return Verdict::Drop(DropReason::LocalUnsupported);
        }
        let l4 = usize::from(ip.l4_offset);
        let end = usize::from(ip.end_offset).min(pkt.len());
        echo_reply_in_place(pkt.data_mut(), l3, l4, end, mac);
        self.stats.echo_replies += 1;
        Verdict::Reply(pkt.rx_port)
    }
}

/// The reorder facts of a RoCE packet routed towards a local host.
pub fn towards_host(
    r: &RoceSummary,
    pmtu: crate::wire::Pmtu,
    len: usize,
    path: u8,
    stamp: PathStamp,
) -> RoceMeta {
    let op = r.bth.opcode;
    let seg = op.segment();
    let kind = if op.is_read_response() || op == Opcode::RcAtomicAcknowledge {
        MetaKind::Fill {
            ends: matches!(seg, crate::wire::Segment::Last | crate::wire::Segment::Only),
        }
    } else if op == Opcode::RcAcknowledge {
        MetaKind::Ack
    } else {
        MetaKind::Request {
            read_len: (op == Opcode::RcReadRequest).then(|| r.reth.map_or(0, |x| x.dma_len)),
        }
    };
    RoceMeta::new(qp_of(r, true), r.bth.psn, kind)
        .sized(r.psn_span_for(pmtu), full_payload(r), len as u32)
        .over(path, stamp)
}

/// The QP a RoCE packet names, towards a local host (`towards_host`: the destination is the
/// local end) or from one.
#[inline]
fn qp_of(r: &RoceSummary, towards_host: bool) -> QpRef {
    let (local, remote) = if towards_host {
        (r.ip.dst, r.ip.src)
    } else {
        (r.ip.src, r.ip.dst)
    };
    QpRef {
        local: ip_key(local),
        remote: ip_key(remote),
        sport: r.ip.udp_ports().map_or(0, |p| p.0),
        qpn: r.bth.dest_qp,
    }
}

/// The payload of a FIRST or MIDDLE packet (one path MTU of it), else 0.
fn full_payload(r: &RoceSummary) -> u16 {
    if matches!(
        r.bth.opcode.segment(),
        crate::wire::Segment::First | crate::wire::Segment::Middle
    ) {
        r.payload_len
    } else {
        0
    }
}

/// The CM REQ or REP a UD packet to QP1 carries, as reorder facts (`local` = sender).
pub fn cm_meta(
    r: &RoceSummary,
    frame: &[u8],
    sender_local: bool,
    receiver_local: bool,
) -> Option<RoceMeta> {
    if r.bth.opcode != Opcode::UdSendOnly || r.bth.dest_qp != 1 {
        return None;
    }
    let mad = frame
        .get(usize::from(r.payload_offset)..)?
        .get(..usize::from(r.payload_len))?;
    let msg = crate::wire::cm::parse(mad).ok()?;
    // A CM MAD (QP1, no UDP source port of a QP pair): the pairing reads the message.
    let qp = QpRef {
        local: ip_key(r.ip.src),
        remote: ip_key(r.ip.dst),
        sport: 0,
        qpn: 1,
    };
    let kind = MetaKind::Cm {
        sender_local,
        receiver_local,
        msg,
    };
    Some(RoceMeta::new(qp, r.bth.psn, kind).sized(1, 0, frame.len() as u32))
}

/// What the reorder stage learns from a RoCE packet a local host sent, if anything.
pub fn host_observation(r: &RoceSummary, pmtu: crate::wire::Pmtu, len: usize) -> Option<RoceMeta> {
    if r.transport != Transport::Rc {
        return None;
    }
    let op = r.bth.opcode;
    let (kind, span) = match op {
        Opcode::RcReadRequest => (
            MetaKind::HostRead {
                dma_len: r.reth.map_or(0, |x| x.dma_len),
            },
            r.psn_span_for(pmtu),
        ),
        // Answered by one response: ATOMIC ACKNOWLEDGE, or READ RESPONSE ONLY (FLUSH and
        // ATOMIC WRITE).
        Opcode::RcCompareSwap | Opcode::RcFetchAdd | Opcode::RcFlush | Opcode::RcAtomicWrite => {
            (MetaKind::HostSingle, 1)
        }
        op if op.is_read_response() && full_payload(r) > 0 => (MetaKind::HostPmtu, 1),
        Opcode::RcAcknowledge => match r.aeth.map(|a| a.syndrome) {
            Some(s) if s.is_sequence_nak() => (MetaKind::HostNak, 1),
            Some(crate::wire::Syndrome::RnrNak { .. }) => (MetaKind::HostRnrNak, 1),
            Some(crate::wire::Syndrome::Ack { .. }) => (MetaKind::HostAck, 1),
            _ => return None,
        },
        _ => return None,
    };
    Some(RoceMeta::new(qp_of(r, false), r.bth.psn, kind).sized(span, full_payload(r), len as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::status::PortStatus;
    use crate::tables::SprayPolicy;
    use crate::testkit::{peer_mac, port_mac, tor_tables};
    use crate::wire::{BthRepr, ExtRepr, IpRepr, Psn, RethRepr, RoceFrameRepr};
    use crossbeam::utils::CachePadded;
    use std::net::Ipv4Addr;

    /// The reorder facts of a decision that must be [`Verdict::Reorder`] towards `port`.
    fn reorder_meta(d: Decision, port: PortId) -> RoceMeta {
        match d.verdict {
            Verdict::Reorder(p, m) if p == port => m,
            v => panic!("expected Reorder({port}, _), got {v:?}"),
        }
    }

    /// A frame from the host behind d0 to the host behind d1, received on d0.
    fn d0_to_d1(bth: BthRepr, ext: ExtRepr, payload: &[u8]) -> Pkt {
        let ip = IpRepr::V4 {
            src: Ipv4Addr::new(10, 0, 0, 2),
            dst: Ipv4Addr::new(10, 0, 1, 2),
            id: 0,
        };
        let f = RoceFrameRepr::new(peer_mac(0), port_mac(0), ip, bth)
            .with_ext(ext)
            .with_payload(payload)
            .to_vec()
            .unwrap();
        let mut p = Pkt::from_slice(&f);
        p.rx_port = 0;
        p
    }

    fn frame(op: Opcode, psn: u32, payload: usize, dma_len: u32) -> Pkt {
        let reth = RethRepr {
            virtual_address: 0,
            rkey: 1,
            dma_len,
        };
        let ext = ExtRepr {
            reth: Some(reth),
            ..ExtRepr::default()
        };
        d0_to_d1(BthRepr::new(op, 9, Psn::new(psn)), ext, &vec![1u8; payload])
    }

    /// The UDP checksum of an IPv4 RoCE frame (Ethernet II, 20-byte IPv4 header).
    fn udp_checksum(f: &[u8]) -> u16 {
        u16::from_be_bytes([f[14 + 20 + 6], f[14 + 20 + 7]])
    }

    #[test]
    fn path_stamps_are_written_towards_the_fabric_and_read_and_cleared_towards_a_host() {
        let t = tor_tables(1, 4, SprayPolicy::RoundRobin);
        let status: Vec<CachePadded<PortStatus>> = (0..5)
            .map(|_| CachePadded::new(PortStatus::new_up()))
            .collect();
        let mut e = Engine::new(&t, 1);
        let frame = |rx: usize, src: [u8; 4], dst: [u8; 4], checksum: u16| {
            let ip = IpRepr::V4 {
                src: src.into(),
                dst: dst.into(),
                id: 0,
            };
            let bth = BthRepr::new(Opcode::RcWriteOnly, 9, Psn::new(1));
            let mut f = RoceFrameRepr::new(peer_mac(rx), port_mac(rx), ip, bth)
                .with_ext(crate::wire::frame::every_ext())
                .with_payload(&[7u8; 64])
                .to_vec()
                .unwrap();
            f[14 + 20 + 6..14 + 20 + 8].copy_from_slice(&checksum.to_be_bytes());
            let mut p = Pkt::from_slice(&f);
            p.rx_port = rx as PortId;
            p
        };
        let icrc_ok = |p: &Pkt| crate::wire::icrc::verify(&p.data()[14..]).unwrap();
        // From the host (full path first, then the fast path once the route is cached): each
        // packet onto an uplink of the path-order group gets the worker's next stamp, whatever
        // the host wrote; the ICRC still holds (the checksum is masked out of it).
        let mut stamps = Vec::new();
        for i in 0..6 {
            let mut p = frame(
                0,
                [10, 0, 0, 2],
                [10, 9, 0, 2],
                if i == 0 { 0 } else { 0x1111 },
            );
            match e.handle(&t, &status, &mut p, 0).verdict {
                Verdict::Forward(port) => assert!((1..=4).contains(&port)),
                v => panic!("{v:?}"),
            }
            assert!(icrc_ok(&p));
            stamps.push(udp_checksum(p.data()));
        }
        assert!(e.fast_hits > 0, "the fast path stamped some of them");
        assert_eq!(stamps, (1..=6).collect::<Vec<u16>>());
        // From the fabric towards the host: the stamp goes to the reorder stage with the path,
        // and the host gets a zero checksum (its stack would check a non-zero one), full path
        // and fast path alike.
        for i in 0..3 {
            let mut p = frame(2, [10, 9, 0, 2], [10, 0, 0, 2], 0xBEEF - i);
            let m = reorder_meta(e.handle(&t, &status, &mut p, 0), 0);
            // One lane: the whole field counts.
            let s = m.stamp;
            assert_eq!((m.path, s.lane, s.seq, s.class), (1, 0, 0xBEEF - i, 0));
            assert_eq!(udp_checksum(p.data()), 0);
            assert!(icrc_ok(&p));
        }
        // Eight lanes, worker 13 (lane 5): the lane above a 13-bit count, written and read
        // (the count scaled back to 16 bits); back to one lane, all 16 bits count again.
        let mut t8 = tor_tables(1, 4, SprayPolicy::RoundRobin);
        t8.stamp_lane_bits = 3;
        e.on_tables(&t8);
        e.set_worker(13);
        let mut p = frame(0, [10, 0, 0, 2], [10, 9, 0, 2], 0);
        e.handle(&t8, &status, &mut p, 0);
        assert_eq!(udp_checksum(p.data()), 5 << 13 | 1);
        let mut p = frame(2, [10, 9, 0, 2], [10, 0, 0, 2], 5 << 13 | 7);
        let m = reorder_meta(e.handle(&t8, &status, &mut p, 0), 0);
        assert_eq!((m.stamp.lane, m.stamp.seq), (5, 7 << 3));
        e.on_tables(&t);
        let mut p = frame(0, [10, 0, 0, 2], [10, 9, 0, 2], 0);
        e.handle(&t, &status, &mut p, 0);
        assert_eq!(udp_checksum(p.data()), 1, "a new counter, lane bits gone");
        // Host to host inside the rack: left alone.
        let t = tor_tables(2, 0, SprayPolicy::Ecmp);
        let mut e = Engine::new(&t, 1);
        let mut p = frame(0, [10, 0, 0, 2], [10, 0, 1, 2], 0x2222);
        let m = reorder_meta(e.handle(&t, &status, &mut p, 0), 1);
        assert_eq!((m.path, m.stamp), (crate::meta::NO_PATH, PathStamp::NONE));
        assert_eq!(udp_checksum(p.data()), 0x2222);
    }

    #[test]
    fn requests_that_ask_for_responses_keep_their_qp_s_uplink_while_the_rest_is_sprayed() {
        let t = tor_tables(1, 4, SprayPolicy::RoundRobin);
        let status: Vec<CachePadded<PortStatus>> = (0..5)
            .map(|_| CachePadded::new(PortStatus::new_up()))
            .collect();
        let mut e = Engine::new(&t, 1);
        let to_fabric = |op: Opcode, psn: u32, payload: usize| {
            let ip = IpRepr::V4 {
                src: Ipv4Addr::new(10, 0, 0, 2),
                dst: Ipv4Addr::new(10, 9, 0, 2),
                id: 0,
            };
            let f = RoceFrameRepr {
                udp_src_port: 0xC123,
                ..RoceFrameRepr::new(
                    peer_mac(0),
                    port_mac(0),
                    ip,
                    BthRepr::new(op, 9, Psn::new(psn)),
                )
            }
            .with_ext(crate::wire::frame::every_ext())
            .with_payload(&vec![1u8; payload])
            .to_vec()
            .unwrap();
            let mut p = Pkt::from_slice(&f);
            p.rx_port = 0;
            p
        };
        let mut egress = |op: Opcode, psn: u32, payload: usize| {
            let mut p = to_fabric(op, psn, payload);
            match e.handle(&t, &status, &mut p, 0).verdict {
                Verdict::Forward(port) => port,
                v => panic!("{op:?}: {v:?}"),
            }
        };
        let mut asking = std::collections::BTreeSet::new();
        let mut data = std::collections::BTreeSet::new();
        for i in 0..8 {
            asking.insert(egress(Opcode::RcReadRequest, 100 + i, 0));
            asking.insert(egress(Opcode::RcFetchAdd, 200 + i, 0));
            asking.insert(egress(Opcode::RcFlush, 300 + i, 0));
            asking.insert(egress(Opcode::RcAtomicWrite, 400 + i, 8));
            data.insert(egress(Opcode::RcWriteOnly, 500 + i, 64));
        }
        assert_eq!(asking.len(), 1, "one uplink for the QP's READs and atomics");
        assert_eq!(data.len(), 4, "WRITEs sprayed over all four");
        assert_eq!((e.stats.sprayed, e.stats.hashed), (40, 0));
        // A flowlet keeps them all on its one uplink (no gap here).
        let t = tor_tables(1, 4, SprayPolicy::Flowlet);
        let mut e = Engine::new(&t, 1);
        let mut ports = std::collections::BTreeSet::new();
        for (i, op) in [
            Opcode::RcWriteOnly,
            Opcode::RcReadRequest,
            Opcode::RcWriteOnly,
        ]
        .into_iter()
        .enumerate()
        {
            let payload = if op == Opcode::RcReadRequest { 0 } else { 64 };
            let mut p = to_fabric(op, 600 + i as u32, payload);
            match e.handle(&t, &status, &mut p, 0).verdict {
                Verdict::Forward(port) => ports.insert(port),
                v => panic!("{op:?}: {v:?}"),
            };
        }
        assert_eq!(ports.len(), 1, "one flowlet, one uplink: {ports:?}");
    }

    #[test]
    fn cm_messages_reach_the_reorder_stage_in_both_directions() {
        use crate::wire::cm::{self, CmMessage, GSI_QKEY, MAD_LEN};
        use crate::wire::DethRepr;
        let t = tor_tables(2, 0, SprayPolicy::Ecmp);
        let status: Vec<CachePadded<PortStatus>> = (0..2)
            .map(|_| CachePadded::new(PortStatus::new_up()))
            .collect();
        let mut e = Engine::new(&t, 1);
        let msg = CmMessage::Req {
            local_comm_id: 5,
            qpn: 0x44,
            starting_psn: Psn::new(9),
        };
        let mut mad = [0u8; MAD_LEN];
        cm::emit(&msg, &mut mad).unwrap();
        let gsi = DethRepr {
            qkey: GSI_QKEY,
            src_qp: 1,
        };
        let ext = ExtRepr {
            deth: Some(gsi),
            ..ExtRepr::default()
        };
        let mut p = d0_to_d1(BthRepr::new(Opcode::UdSendOnly, 1, Psn::new(1)), ext, &mad);
        // From host d0 (local) to host d1 (local): observed on the way in, and handed to the
        // stage of d1's owner on the way out.
        let d = e.handle(&t, &status, &mut p, 0);
        let seen = d.observed.unwrap();
        assert!(matches!(seen.kind, MetaKind::Cm { sender_local: true, msg: m, .. } if m == msg));
        let out = reorder_meta(d, 1);
        assert!(matches!(
            out.kind,
            MetaKind::Cm {
                receiver_local: true,
                ..
            }
        ));
    }

    #[test]
    fn read_spans_are_sized_at_the_largest_path_mtu_of_the_port() {
        let t = tor_tables(2, 0, SprayPolicy::Ecmp);
        let status: Vec<CachePadded<PortStatus>> = (0..2)
            .map(|_| CachePadded::new(PortStatus::new_up()))
            .collect();
        let mut e = Engine::new(&t, 1);
        // Derived from MTU 1500: 1024. A READ of 4096 bytes spans 4 PSNs.
        let mut p = frame(Opcode::RcReadRequest, 10, 0, 4096);
        assert_eq!(reorder_meta(e.handle(&t, &status, &mut p, 0), 1).span, 4);
        // A QP at path MTU 512 does not make the port's estimate longer (another QP may run
        // at 1024; the reorder stage learns each QP's own).
        let mut w = frame(Opcode::RcWriteFirst, 14, 512, 4096);
        assert_eq!(
            reorder_meta(e.handle(&t, &status, &mut w, 0), 1).full_payload,
            512
        );
        assert_eq!(e.pmtu_of(&t, 1), Pmtu::new(1024).unwrap());
        let mut p = frame(Opcode::RcReadRequest, 22, 0, 4096);
        let m = reorder_meta(e.handle(&t, &status, &mut p, 0), 1);
        assert_eq!(m.span, 4);
        assert_eq!(
            m.kind,
            MetaKind::Request {
                read_len: Some(4096)
            }
        );
        // A configured path MTU is not replaced.
        let mut t2 = t.clone();
        t2.ports[1].pmtu_fixed = true;
        assert_eq!(e.pmtu_of(&t2, 1), Pmtu::new(1024).unwrap());
    }
}
