//! One worker's neighbour table: next hops learned from their ARP and neighbour discovery (or
//! told by other workers), aged when not confirmed, and the resolution requests for next hops
//! not known yet. Bounded: at most [`MAX_LEARNED`] entries and [`MAX_PENDING`] queued learnings
//! or requests per iteration, preallocated, so that learning never allocates on the packet path.

use std::net::{IpAddr, Ipv6Addr};

use crate::ids::{IntMap, PortId};
use crate::pkt::Pkt;
use crate::tables::{ip_key, Neighbor, RouteTarget, Tables};
use crate::wire::control::as_v4;

/// Most neighbours one worker learns; beyond it new ones are not learned (static entries and
/// those already known still serve).
pub const MAX_LEARNED: usize = 65_536;
/// Learnings and resolution requests queued between two iterations.
pub const MAX_PENDING: usize = 256;
/// Shortest time between two requests for one next hop.
pub const RESOLVE_INTERVAL_NS: u64 = 100_000_000;

/// A next hop the switch must resolve: the worker sends an ARP request or neighbour solicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolveRequest {
    /// Port to ask on.
    pub port: PortId,
    /// Address to resolve.
    pub target: IpAddr,
}

/// What [`NeighborTable::learn`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learned {
    /// Not a neighbour to learn (not unicast, not in a connected prefix of its port, or the
    /// table is full).
    Ignored,
    /// Known already, the same: confirmed.
    Confirmed,
    /// New or changed: routes through it must be looked up again.
    Changed,
}

/// Learned neighbours of one worker, and what it must tell or ask.
#[derive(Debug)]
pub struct NeighborTable {
    /// Learned neighbours and when each was last confirmed (ARP/ND from it), for ageing.
    learned: IntMap<u128, (Neighbor, u64)>,
    /// Learned here since the last [`NeighborTable::take_learned`], for the other workers.
    learned_out: Vec<(IpAddr, Neighbor)>,
    /// Requests since the last [`NeighborTable::take_resolve`].
    resolve_out: Vec<ResolveRequest>,
    /// When each next hop was last asked for.
    last_resolve: IntMap<u128, u64>,
}

impl Default for NeighborTable {
    fn default() -> Self {
        let mut learned = IntMap::default();
        learned.reserve(1024);
        let mut last_resolve = IntMap::default();
        last_resolve.reserve(MAX_PENDING * 4);
        NeighborTable {
            learned,
            learned_out: Vec::with_capacity(MAX_PENDING),
            resolve_out: Vec::with_capacity(MAX_PENDING),
            last_resolve,
        }
    }
}

impl NeighborTable {
    /// The neighbour for `ip`: static entries of `t` first, then learned ones.
    #[inline]
    pub fn get(&self, t: &Tables, ip: IpAddr) -> Option<Neighbor> {
        let k = ip_key(ip);
        t.neighbors
            .get(&k)
            .copied()
            .or_else(|| self.learned.get(&k).map(|e| e.0))
    }

    /// Every learned neighbour, by address.
    pub fn snapshot(&self) -> Vec<(IpAddr, Neighbor)> {
        self.learned
            .iter()
            .map(|(k, (n, _))| {
                let a = Ipv6Addr::from(*k);
                let ip = a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4);
                (ip, *n)
            })
            .collect()
    }

    /// Every learned neighbour, by address key.
    pub fn iter(&self) -> impl Iterator<Item = (&u128, &Neighbor)> {
        self.learned.iter().map(|(k, (n, _))| (k, n))
    }

    /// Learns `ip` at `mac` behind `port` from its own ARP or ND at `now`, when it is a unicast
    /// (or link-local) host inside a connected prefix of `port`.
    pub fn learn(
        &mut self,
        t: &Tables,
        ip: IpAddr,
        mac: [u8; 6],
        port: PortId,
        now: u64,
    ) -> Learned {
        if !is_unicast_ip(ip) && !is_link_local(ip) {
            return Learned::Ignored;
        }
        if !matches!(t.fib.lookup(ip), Some((_, RouteTarget::Connected(p))) if *p == port) {
            return Learned::Ignored;
        }
        let n = Neighbor { mac, port };
        let k = ip_key(ip);
        if let Some(e) = self.learned.get_mut(&k) {
            if e.0 == n {
                e.1 = now;
                return Learned::Confirmed;
            }
        }
        if self.learned.len() >= MAX_LEARNED && !self.learned.contains_key(&k) {
            return Learned::Ignored;
        }
        self.learned.insert(k, (n, now));
        if self.learned_out.len() < MAX_PENDING {
            self.learned_out.push((ip, n));
        }
        Learned::Changed
    }

    /// Records a neighbour another worker learned. True when it changed what is known.
    pub fn learn_remote(&mut self, ip: IpAddr, n: Neighbor, now: u64) -> bool {
        let k = ip_key(ip);
        (self.learned.len() < MAX_LEARNED || self.learned.contains_key(&k))
            && self.learned.insert(k, (n, now)).map(|e| e.0) != Some(n)
    }

    /// Forgets learned neighbours not confirmed for `max_age_ns` (they are resolved again when
    /// traffic needs them). Returns how many went.
    pub fn age(&mut self, now: u64, max_age_ns: u64) -> usize {
        let before = self.learned.len();
        self.learned
            .retain(|_, (_, seen)| now.saturating_sub(*seen) <= max_age_ns);
        before - self.learned.len()
    }

    /// Asks for `target` on `port`, at most once per [`RESOLVE_INTERVAL_NS`]. True when a
    /// request was queued.
    pub fn request_resolve(&mut self, port: PortId, target: IpAddr, now: u64) -> bool {
        let k = ip_key(target);
        if let Some(last) = self.last_resolve.get(&k) {
            if now.saturating_sub(*last) < RESOLVE_INTERVAL_NS {
                return false;
            }
        }
        if self.last_resolve.len() >= MAX_PENDING * 4 {
            self.last_resolve.clear();
        }
        self.last_resolve.insert(k, now);
        if self.resolve_out.len() >= MAX_PENDING {
            return false;
        }
        self.resolve_out.push(ResolveRequest { port, target });
        true
    }

    /// Neighbours learned here since the last call, for the other workers.
    pub fn take_learned(&mut self, out: &mut Vec<(IpAddr, Neighbor)>) {
        out.append(&mut self.learned_out);
    }

    /// Next hops to resolve since the last call.
    pub fn take_resolve(&mut self, out: &mut Vec<ResolveRequest>) {
        out.append(&mut self.resolve_out);
    }
}

/// A unicast address a host may own (not multicast, broadcast, unspecified or link-local).
pub(super) fn is_unicast_ip(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => !(v.is_multicast() || v.is_broadcast() || v.is_unspecified()),
        IpAddr::V6(v) => !(v.is_multicast() || v.is_unspecified() || is_link_local(a)),
    }
}

fn is_link_local(a: IpAddr) -> bool {
    matches!(a, IpAddr::V6(v) if (v.segments()[0] & 0xffc0) == 0xfe80)
}

/// Writes the ARP request or neighbour solicitation for `req` into `pkt`; `false` when the port
/// has no address of the right family to ask from.
pub fn build_resolve(t: &Tables, req: &ResolveRequest, pkt: &mut Pkt) -> bool {
    let Some(port) = t.ports.get(usize::from(req.port)) else {
        return false;
    };
    let cap = pkt.capacity();
    let buf = pkt.resize(cap);
    let len = match req.target {
        IpAddr::V4(target) => {
            let Some(src) = t.local_addr_on(req.port, false).and_then(as_v4) else {
                return false;
            };
            crate::wire::control::arp_request(buf, port.mac, src, target)
        }
        IpAddr::V6(target) => {
            let Some(IpAddr::V6(src)) = t.local_addr_on(req.port, true) else {
                return false;
            };
            crate::wire::control::neighbor_solicit(buf, port.mac, src, target)
        }
    };
    pkt.resize(len);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::SprayPolicy;
    use crate::testkit::tor_tables;

    #[test]
    fn learned_neighbors_age_out_unless_confirmed() {
        let t = tor_tables(2, 0, SprayPolicy::Ecmp);
        let mut table = NeighborTable::default();
        let n = Neighbor {
            mac: [2, 0, 0, 0, 0, 7],
            port: 0,
        };
        let (old, fresh) = (
            IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 7)),
            IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 8)),
        );
        assert!(table.learn_remote(old, n, 0));
        assert!(table.learn_remote(fresh, n, 200_000_000_000));
        assert_eq!(table.age(250_000_000_000, 300_000_000_000), 0);
        assert_eq!(table.age(301_000_000_000, 300_000_000_000), 1);
        assert!(table.get(&t, old).is_none());
        assert_eq!(table.get(&t, fresh), Some(n));
    }

    #[test]
    fn only_hosts_inside_a_connected_prefix_of_their_port_are_learned() {
        let t = tor_tables(2, 0, SprayPolicy::Ecmp);
        let mut table = NeighborTable::default();
        let mac = [2, 0, 0, 0, 0, 9];
        let host = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 9));
        // 10.0.0.0/24 is d0's prefix: learned there, not from d1.
        assert_eq!(table.learn(&t, host, mac, 1, 5), Learned::Ignored);
        assert_eq!(table.learn(&t, host, mac, 0, 5), Learned::Changed);
        assert_eq!(table.learn(&t, host, mac, 0, 6), Learned::Confirmed);
        let bcast = IpAddr::V4(std::net::Ipv4Addr::BROADCAST);
        assert_eq!(table.learn(&t, bcast, mac, 0, 7), Learned::Ignored);
        let mut out = Vec::new();
        table.take_learned(&mut out);
        assert_eq!(out, vec![(host, Neighbor { mac, port: 0 })]);
    }

    #[test]
    fn a_next_hop_is_asked_for_at_most_once_per_interval() {
        let mut table = NeighborTable::default();
        let nh = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 1, 2));
        assert!(table.request_resolve(1, nh, 0));
        assert!(!table.request_resolve(1, nh, RESOLVE_INTERVAL_NS - 1));
        assert!(table.request_resolve(1, nh, RESOLVE_INTERVAL_NS));
        let mut out = Vec::new();
        table.take_resolve(&mut out);
        assert_eq!(out.len(), 2);
    }
}
