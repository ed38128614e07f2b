//! The switch's model of itself, as every layer reads it: its ports and what they connect to
//! ([`Role`], [`PortInfo`]), uplink groups and their path health, routes ([`fib`]), static
//! neighbours and own addresses, the spray policy ([`policy`]): one immutable [`Tables`]
//! snapshot the control side builds and validates and publishes as an `Arc`. A worker looks at
//! the newest snapshot once per loop iteration, never per packet. Beside it the one piece of
//! live shared state, the port [`status`] board.

pub mod fib;
pub mod policy;
pub mod status;

use std::net::IpAddr;

pub use fib::{Fib, Prefix};
pub use policy::SprayPolicy;
pub use status::{PortStatus, StatusBoard};

use crate::ids::{IntMap, PortId};
use crate::wire::Pmtu;

/// What a port connects to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Hosts of this rack: RoCE traffic towards them goes through the reorder stage.
    Downlink,
    /// The fabric: traffic towards other racks is sprayed over uplink groups.
    Uplink,
}

impl core::str::FromStr for Role {
    type Err = String;
    /// `downlink` or `uplink`, as configuration files name them.
    fn from_str(s: &str) -> Result<Role, String> {
        match s {
            "downlink" => Ok(Role::Downlink),
            "uplink" => Ok(Role::Uplink),
            other => Err(format!("'{other}': use 'downlink' or 'uplink'")),
        }
    }
}

/// A port as the engine sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PortInfo {
    /// Name (unique).
    pub name: String,
    /// The port's own MAC: source of routed frames, answer to ARP for its addresses.
    pub mac: [u8; 6],
    /// Downlink or uplink.
    pub role: Role,
    /// Ethernet MTU (IP packet size limit).
    pub mtu: u16,
    /// RoCE path MTU of the hosts behind it (sizes READ requests).
    pub pmtu: Pmtu,
    /// The path MTU was configured, not derived from the MTU: do not replace it by the one
    /// learned from traffic.
    pub pmtu_fixed: bool,
    /// Line rate in bits per second, if configured: the egress queue holds the port to it; it
    /// weighs spraying and times pause quanta.
    pub rate_bps: Option<u64>,
    /// Bytes the egress queue may send back to back after an idle spell, above the rate
    /// (`None`: [`crate::egress::shaper::BURST_BYTES`]). A port that models a link (the
    /// simulator's) keeps it near one frame.
    pub rate_burst_bytes: Option<u32>,
    /// ECN marking of the port's egress queue (`None`: it marks nothing).
    pub ecn: Option<crate::egress::EcnProfile>,
    /// Next-hop MAC of an uplink (the switch at the other end of the fabric path).
    pub peer_mac: Option<[u8; 6]>,
    /// The switch's addresses on this port (also its connected prefixes).
    pub addresses: Vec<(IpAddr, u8)>,
    /// Administratively up.
    pub admin_up: bool,
    /// An uplink's place in the spray set as the operator pinned it (`auto`: as its path
    /// health says).
    pub path_pin: PathPin,
}

/// Whether an uplink is in the spray set regardless of its path health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PathPin {
    /// As its path health says (in unless found failing).
    #[default]
    Auto,
    /// Always in (while up).
    In,
    /// Never in; still probed, so its health stays known.
    Out,
}

impl PathPin {
    /// The names `sprayctl set path` takes.
    pub fn name(self) -> &'static str {
        match self {
            PathPin::Auto => "auto",
            PathPin::In => "in",
            PathPin::Out => "out",
        }
    }
}

impl core::str::FromStr for PathPin {
    type Err = String;
    fn from_str(s: &str) -> Result<PathPin, String> {
        match s {
            "auto" => Ok(PathPin::Auto),
            "in" => Ok(PathPin::In),
            "out" => Ok(PathPin::Out),
            other => Err(format!("'{other}': use 'in', 'out' or 'auto'")),
        }
    }
}

/// How the destination ToR tells a lost packet from a reordered one, for what arrives on the
/// members of an uplink group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LossDetection {
    /// By path order, with the hold timeout as the backstop. Rests on one assumption: each
    /// member is one FIFO path through the fabric (a two-tier leaf-spine: one uplink, one
    /// spine, one downlink queue), so a QP's PSNs arrive in increasing order on every member,
    /// and a gap is lost once every path the stream uses delivered a PSN above it (or, with
    /// the group's `path_stamps`, a packet its source host sent later: [`crate::wire::stamp`]).
    #[default]
    PathOrder,
    /// By the hold timeout alone: for members with several paths behind them (a LAG, a
    /// three-tier fabric that hashes again) where order per member does not hold.
    Timeout,
}

impl core::str::FromStr for LossDetection {
    type Err = String;
    /// `path_order` or `timeout`, as configuration files name them.
    fn from_str(s: &str) -> Result<LossDetection, String> {
        match s {
            "path_order" => Ok(LossDetection::PathOrder),
            "timeout" => Ok(LossDetection::Timeout),
            other => Err(format!("'{other}': use 'path_order' or 'timeout'")),
        }
    }
}

/// A group of uplinks that traffic to a remote prefix is spread over.
#[derive(Debug, Clone, PartialEq)]
pub struct UplinkGroup {
    /// Name (unique).
    pub name: String,
    /// Member ports.
    pub ports: Vec<PortId>,
    /// Relative weight of each member (for `weighted`), same order as `ports`.
    pub weights: Vec<u32>,
    /// How loss is told from reordering on what its members deliver.
    pub loss_detection: LossDetection,
    /// The ToRs at the other end of these paths stamp what they send over them and read what
    /// they receive ([`crate::wire::stamp`]); only with [`LossDetection::PathOrder`]. Off by default: a ToR
    /// that does not clear the stamp hands its hosts a wrong UDP checksum.
    pub path_stamps: bool,
    /// Path health: probes to the ToRs at the other end of the members, and members taken out
    /// of the spray set while they fail ([`crate::health`]). `None`: members leave the set
    /// only when their carrier or an operator takes them down.
    pub health: Option<HealthSpec>,
}

/// Path health of an uplink group: what to probe and when a member counts as failing
/// ([`crate::health`] has the method and the reasons for the defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct HealthSpec {
    /// The ToRs at the other end of the members (each an address of theirs routed over the
    /// group); every member is probed towards each.
    pub peers: Vec<IpAddr>,
    /// This switch's address that probes to IPv4 peers come from (the address the peers list).
    pub source_v4: Option<IpAddr>,
    /// The same for IPv6 peers.
    pub source_v6: Option<IpAddr>,
    /// Time between two probes of one member to one peer.
    pub interval_ns: u64,
    /// Probe intervals without a probe from the peer after which a member is dead.
    pub detect_intervals: u32,
    /// Loss over the last 64 probes at which a member goes out at once.
    pub fast_loss_out: f64,
    /// Loss over the last 1024 probes at which a member goes out: where recovering from its
    /// losses costs the hosts more than the member carries.
    pub loss_out: f64,
    /// How long a member that went out must stay clean before it comes back (doubled for each
    /// time it fails again soon after, up to 32 times).
    pub restore_ns: u64,
}

impl HealthSpec {
    /// Probe intervals without a probe from the peer after which a member is dead (BFD's
    /// detect multiplier; 5, not BFD's 3, so that a path losing 1% is not taken for dead).
    pub const DETECT_INTERVALS: u32 = 5;

    /// The defaults, towards `peers`.
    pub fn new(peers: Vec<IpAddr>) -> HealthSpec {
        HealthSpec {
            peers,
            source_v4: None,
            source_v6: None,
            interval_ns: 50_000,
            detect_intervals: Self::DETECT_INTERVALS,
            fast_loss_out: 0.15,
            loss_out: 0.03,
            restore_ns: 200_000_000,
        }
    }

    /// The source address of probes to `peer`.
    pub fn source_for(&self, peer: IpAddr) -> Option<IpAddr> {
        if peer.is_ipv4() {
            self.source_v4
        } else {
            self.source_v6
        }
    }
}

/// Where a route sends packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteTarget {
    /// Hosts directly on the port: the destination address is the next hop.
    Connected(PortId),
    /// Through a gateway reachable on the port.
    Via(PortId, IpAddr),
    /// Spread over an uplink group.
    Group(u16),
}

/// A static or learned neighbour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Neighbor {
    /// Its MAC.
    pub mac: [u8; 6],
    /// The port it is reached on.
    pub port: PortId,
}

/// Key of an IP address in integer maps: IPv4 as its IPv4-mapped IPv6 form.
#[inline]
pub fn ip_key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The immutable forwarding state a worker reads. Built and validated by the control side.
#[derive(Debug, Clone)]
pub struct Tables {
    /// Ports, indexed by [`PortId`].
    pub ports: Vec<PortInfo>,
    /// Uplink groups.
    pub groups: Vec<UplinkGroup>,
    /// Routes, including the connected prefixes of port addresses.
    pub fib: Fib<RouteTarget>,
    /// Static neighbours, by [`ip_key`].
    pub neighbors: IntMap<u128, Neighbor>,
    /// The switch's own addresses, by [`ip_key`], with their port.
    pub local: IntMap<u128, PortId>,
    /// How RoCE packets are spread over uplink groups.
    pub policy: SprayPolicy,
    /// Idle gap after which `flowlet` may move a flow to another uplink.
    pub flowlet_gap_ns: u64,
    /// Patched ports: a frame received on port `i` goes out `patch[i]` untouched, with no
    /// lookup at all (a cross-connect, like VPP's l2patch; also the "bare forward" baseline of
    /// the benchmarks).
    pub patch: Vec<Option<PortId>>,
    /// Incremented by each publication, for logs and `show` commands.
    pub generation: u64,
    /// Switch-wide gap hold timeout of the reorder stage set at run time (`None`: as the stage
    /// was built). Workers apply a change when they pick the tables up.
    pub hold_timeout_ns: Option<u64>,
    /// Bits of a path stamp that name the worker that gave it ([`crate::wire::stamp`]'s lanes: log2 of
    /// `path_stamp_lanes`), as written and as read.
    pub stamp_lane_bits: u8,
}

impl Tables {
    /// The fabric paths whose order the reorder stage may rely on: the members of the uplink
    /// groups that detect loss by path order, in group and member order (a port in two groups
    /// once), at most [`crate::meta::MAX_PATHS`]. A path's index here is
    /// [`crate::meta::RoceMeta::path`].
    pub fn paths(&self) -> Vec<PortId> {
        let mut paths: Vec<PortId> = Vec::new();
        for g in &self.groups {
            if g.loss_detection != LossDetection::PathOrder {
                continue;
            }
            for p in &g.ports {
                if !paths.contains(p) && paths.len() < crate::meta::MAX_PATHS {
                    paths.push(*p);
                }
            }
        }
        paths
    }

    /// Per port: whether it is a path ([`Tables::paths`]) of a group with path stamps.
    pub fn stamp_ports(&self) -> Vec<bool> {
        let paths = self.paths();
        let mut of = vec![false; self.ports.len()];
        for g in self.groups.iter().filter(|g| g.path_stamps) {
            if g.loss_detection != LossDetection::PathOrder {
                continue;
            }
            for p in g.ports.iter().filter(|p| paths.contains(p)) {
                if let Some(o) = of.get_mut(usize::from(*p)) {
                    *o = true;
                }
            }
        }
        of
    }

    /// Per port: its index in [`Tables::paths`], or [`crate::meta::NO_PATH`].
    pub fn path_of_ports(&self) -> Vec<u8> {
        let mut of = vec![crate::meta::NO_PATH; self.ports.len()];
        for (i, p) in self.paths().into_iter().enumerate() {
            if let Some(o) = of.get_mut(usize::from(p)) {
                *o = i as u8;
            }
        }
        of
    }

    /// Empty tables for `ports`, with connected routes and local addresses derived from the
    /// ports' addresses.
    pub fn new(ports: Vec<PortInfo>) -> Tables {
        let mut t = Tables {
            ports,
            groups: Vec::new(),
            fib: Fib::new(),
            neighbors: IntMap::default(),
            local: IntMap::default(),
            policy: SprayPolicy::RoundRobin,
            flowlet_gap_ns: 50_000,
            patch: Vec::new(),
            generation: 0,
            hold_timeout_ns: None,
            stamp_lane_bits: 0,
        };
        for (i, p) in t.ports.iter().enumerate() {
            for (addr, len) in &p.addresses {
                t.local.insert(ip_key(*addr), i as PortId);
                if let Ok(pre) = Prefix::new(*addr, *len) {
                    t.fib.insert(pre, RouteTarget::Connected(i as PortId));
                }
            }
        }
        t
    }

    /// The port called `name`.
    pub fn port_id(&self, name: &str) -> Option<PortId> {
        self.ports
            .iter()
            .position(|p| p.name == name)
            .map(|i| i as PortId)
    }

    /// The group called `name`.
    pub fn group_id(&self, name: &str) -> Option<u16> {
        self.groups
            .iter()
            .position(|g| g.name == name)
            .map(|i| i as u16)
    }

    /// The switch's address of the same family on `port`, if any.
    pub fn local_addr_on(&self, port: PortId, v6: bool) -> Option<IpAddr> {
        self.ports
            .get(usize::from(port))?
            .addresses
            .iter()
            .find_map(|(a, _)| (a.is_ipv6() == v6 && !is_link_local(*a)).then_some(*a))
    }
}

fn is_link_local(a: IpAddr) -> bool {
    match a {
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
        IpAddr::V4(v4) => v4.is_link_local(),
    }
}
