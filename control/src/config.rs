//! The configuration file: model, validation, translation.
//!
//! Every problem is reported before anything starts, as `field: reason`, where the field is a
//! path into the file (`port[2].addresses[0]`, `route[1].group`, ...).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sprayswitch::engine::{
    ip_key, Neighbor, PortInfo, Prefix, Role, RouteTarget, SprayPolicy, Tables, UplinkGroup,
};
use sprayswitch::port::pcap::Pace;
use sprayswitch::reorder::ReorderConfig;
use sprayswitch::switch::RunConfig;
use sprayswitch::wire::Pmtu;
use sprayswitch::worker::{IdlePolicy, WorkerConfig};

/// The embedded default configuration (ToR "tor-a" of the demo rack pair).
pub const DEFAULT_CONFIG: &str = include_str!("../default.toml");

/// A configuration problem: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ConfigError {
    /// Path of the offending field.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

fn err<T>(field: impl Into<String>, reason: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError {
        field: field.into(),
        reason: reason.into(),
    })
}

/// The `[switch]` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SwitchSection {
    /// Name, for logs and metrics.
    pub name: String,
    /// Worker threads.
    pub workers: usize,
    /// Core of each worker (pinning); absent: not pinned.
    pub cores: Option<Vec<usize>>,
    /// `backoff` (spin, yield, then wait for packets when idle), `wait` (wait for packets at
    /// once: event-driven, for shared cores and real-time priority) or `spin`.
    pub idle: String,
    /// Longest an idle worker waits per iteration after spinning and yielding, in
    /// microseconds (a packet on one of its ports ends the wait earlier).
    pub idle_sleep_us: u32,
    /// Packets per burst.
    pub burst: usize,
    /// Longest wait in a transmit buffer, microseconds.
    pub flush_us: u64,
    /// Packets a port's transmit queue holds when the port pushes back.
    pub tx_queue_limit: usize,
    /// How RoCE is spread over uplink groups.
    pub spray_policy: String,
    /// Idle gap for `flowlet`, microseconds.
    pub flowlet_gap_us: u64,
    /// Seed of the random policies.
    pub seed: u64,
}

impl Default for SwitchSection {
    fn default() -> Self {
        SwitchSection {
            name: "sprayswitch".into(),
            workers: 1,
            cores: None,
            idle: "backoff".into(),
            idle_sleep_us: 50,
            burst: 32,
            flush_us: 10,
            tx_queue_limit: 4096,
            spray_policy: "round_robin".into(),
            flowlet_gap_us: 50,
            seed: 1,
        }
    }
}

/// The `[reorder]` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ReorderSection {
    /// Reorder RoCE towards downlinks (false: spray without reordering, for comparison).
    pub enabled: bool,
    /// Ring size in PSNs (power of two, 64 to 4096).
    pub window: u32,
    /// Streams tracked at once, per worker.
    pub max_streams: usize,
    /// Streams holding packets at once, per worker.
    pub max_rings: usize,
    /// Bytes held at once, per worker, in MiB.
    pub max_held_mib: usize,
    /// Gap hold timeout, microseconds (ports may override it with `hold_timeout_us`).
    pub hold_timeout_us: u64,
    /// Learning window of a new stream, microseconds.
    pub learn_us: u64,
    /// Idle time after which a stream is forgotten, milliseconds (ten times as long for a
    /// stream whose READ, atomic or FLUSH requests are not all answered yet).
    pub idle_evict_ms: u64,
    /// Outstanding READ/atomic ranges remembered per QP pair.
    pub max_reads: usize,
}

impl Default for ReorderSection {
    fn default() -> Self {
        let d = ReorderConfig::default();
        ReorderSection {
            enabled: true,
            window: d.window,
            max_streams: d.max_streams,
            max_rings: d.max_rings,
            max_held_mib: d.max_held_bytes >> 20,
            hold_timeout_us: d.hold_timeout_ns / 1000,
            learn_us: d.learn_ns / 1000,
            idle_evict_ms: d.idle_evict_ns / 1_000_000,
            max_reads: d.max_reads,
        }
    }
}

/// A `[[port]]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PortSection {
    /// Unique name.
    pub name: String,
    /// `mem`, `pcap`, `af_xdp`, `af_packet`, or `auto` (AF_XDP, falling back to AF_PACKET
    /// with a logged reason).
    #[serde(default = "default_backend")]
    pub backend: String,
    /// Real ports: the interface to open; default: the port's name.
    pub interface: Option<String>,
    /// AF_XDP: receive queues to open (0..queues); default 1.
    pub queues: Option<u32>,
    /// AF_XDP: `auto` (native, falling back to skb), `native` or `skb`.
    pub xdp_mode: Option<String>,
    /// `downlink` or `uplink`.
    pub role: String,
    /// The port's MAC.
    pub mac: String,
    /// Ethernet MTU.
    #[serde(default = "default_mtu")]
    pub mtu: u16,
    /// RoCE path MTU of the hosts behind it; default: the largest that fits `mtu`.
    pub pmtu: Option<u32>,
    /// Line rate in Gbit/s.
    pub rate_gbps: Option<f64>,
    /// The switch's addresses on this port, `ADDRESS/LENGTH`.
    #[serde(default)]
    pub addresses: Vec<String>,
    /// Next-hop MAC for an uplink.
    pub peer_mac: Option<String>,
    /// Worker that owns the port; default: round robin.
    pub worker: Option<usize>,
    /// `pcap` backend: capture to replay.
    pub pcap_in: Option<String>,
    /// `pcap` backend: file to write what is sent.
    pub pcap_out: Option<String>,
    /// `pcap` backend: `recorded` or `fast`.
    pub pace: Option<String>,
    /// Hold timeout of streams towards this downlink, microseconds (overrides `[reorder]`).
    pub hold_timeout_us: Option<u64>,
}

fn default_backend() -> String {
    "mem".into()
}
fn default_mtu() -> u16 {
    1500
}

/// An `[[uplink_group]]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GroupSection {
    /// Unique name.
    pub name: String,
    /// Member uplinks.
    pub ports: Vec<String>,
    /// Weights for `weighted`, one per member; default: by `rate_gbps`, else equal.
    pub weights: Option<Vec<u32>>,
}

/// A `[[route]]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    /// Destination prefix.
    pub prefix: String,
    /// Out this port (connected, or through `via`).
    pub port: Option<String>,
    /// Over this uplink group.
    pub group: Option<String>,
    /// Gateway on `port`.
    pub via: Option<String>,
}

/// A `[[neighbor]]` (static).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NeighborSection {
    /// Address.
    pub ip: String,
    /// MAC.
    pub mac: String,
    /// Port it is on.
    pub port: String,
}

/// The whole file.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[switch]`.
    #[serde(default)]
    pub switch: SwitchSection,
    /// `[reorder]`.
    #[serde(default)]
    pub reorder: ReorderSection,
    /// `[[port]]`.
    #[serde(default, rename = "port")]
    pub ports: Vec<PortSection>,
    /// `[[uplink_group]]`.
    #[serde(default, rename = "uplink_group")]
    pub groups: Vec<GroupSection>,
    /// `[[route]]`.
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteSection>,
    /// `[[neighbor]]`.
    #[serde(default, rename = "neighbor")]
    pub neighbors: Vec<NeighborSection>,
}

/// Which kernel interface a real port uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RealKind {
    /// AF_XDP only.
    AfXdp,
    /// AF_PACKET only.
    AfPacket,
    /// AF_XDP, falling back to AF_PACKET.
    Auto,
}

/// The XDP hook an AF_XDP port asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpModeChoice {
    /// Native, falling back to skb.
    Auto,
    /// Native (driver) only.
    Native,
    /// Generic (skb) only.
    Skb,
}

/// How a port is realised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// In-memory link end, connected by whoever builds the topology in-process.
    Mem,
    /// Capture replay and/or capture output.
    Pcap {
        /// Capture to replay.
        input: Option<PathBuf>,
        /// File to write transmitted frames to.
        output: Option<PathBuf>,
        /// Replay pace.
        pace: Pace,
    },
    /// A Linux interface through AF_XDP or AF_PACKET.
    Real {
        /// Socket family.
        kind: RealKind,
        /// Interface name.
        interface: String,
        /// AF_XDP receive queues.
        queues: u32,
        /// AF_XDP hook.
        xdp_mode: XdpModeChoice,
    },
}

/// A checked configuration, ready to run.
#[derive(Debug, Clone)]
pub struct Validated {
    /// The switch's name.
    pub name: String,
    /// Forwarding tables.
    pub tables: Tables,
    /// Worker settings.
    pub run: RunConfig,
    /// Backend of each port, in table order.
    pub backends: Vec<Backend>,
    /// Reorder limits, or `None` when reordering is off.
    pub reorder: Option<ReorderConfig>,
    /// Hold timeout override of each port, in table order.
    pub port_timeouts: Vec<Option<u64>>,
}

/// Parses a MAC address `aa:bb:cc:dd:ee:ff`.
///
/// # Errors
/// A reason, when it is not six hex bytes.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6 {
        return Err(format!(
            "'{s}' is not a MAC address (six hex bytes, aa:bb:cc:dd:ee:ff)"
        ));
    }
    let mut m = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        m[i] = u8::from_str_radix(p, 16)
            .ok()
            .filter(|_| p.len() == 2)
            .ok_or_else(|| format!("'{s}' is not a MAC address (bad byte '{p}')"))?;
    }
    Ok(m)
}

impl Config {
    /// Parses TOML text.
    ///
    /// # Errors
    /// [`ConfigError`] with field `<origin>` and toml's message (it names line and column).
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError {
            field: origin.to_string(),
            reason: e.to_string().trim_end().to_string(),
        })
    }

    /// Reads and parses a file.
    ///
    /// # Errors
    /// [`ConfigError`] when the file cannot be read or parsed.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            field: path.display().to_string(),
            reason: format!("cannot read: {e}"),
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// The embedded default.
    pub fn default_config() -> Config {
        Self::parse(DEFAULT_CONFIG, "<embedded default>").expect("the embedded default parses")
    }

    /// Checks everything and builds the dataplane's view of it.
    ///
    /// # Errors
    /// The first problem found, naming its field.
    pub fn validate(&self) -> Result<Validated, ConfigError> {
        let s = &self.switch;
        if s.workers == 0 || s.workers > 64 {
            return err(
                "switch.workers",
                format!("{} workers: use 1 to 64", s.workers),
            );
        }
        if let Some(cores) = &s.cores {
            if cores.len() < s.workers {
                return err(
                    "switch.cores",
                    format!("{} cores listed for {} workers", cores.len(), s.workers),
                );
            }
        }
        let idle =
            IdlePolicy::from_name(&s.idle, s.idle_sleep_us).map_err(|reason| ConfigError {
                field: "switch.idle".into(),
                reason,
            })?;
        if s.burst == 0 || s.burst > 1024 {
            return err("switch.burst", format!("{}: use 1 to 1024", s.burst));
        }
        if s.tx_queue_limit < s.burst {
            return err(
                "switch.tx_queue_limit",
                format!(
                    "{} is smaller than the burst ({})",
                    s.tx_queue_limit, s.burst
                ),
            );
        }
        let policy: SprayPolicy = s.spray_policy.parse().map_err(|e| ConfigError {
            field: "switch.spray_policy".into(),
            reason: e,
        })?;
        if self.ports.is_empty() {
            return err("port", "no ports configured");
        }

        // Ports.
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut infos = Vec::new();
        let mut backends = Vec::new();
        let mut assigned = Vec::new();
        let mut addrs: Vec<(Prefix, IpAddr, String)> = Vec::new();
        for (i, p) in self.ports.iter().enumerate() {
            let f = |x: &str| format!("port[{i}].{x}");
            if p.name.is_empty()
                || p.name.len() > 32
                || !p
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return err(
                    f("name"),
                    format!("'{}': use 1 to 32 letters, digits, '-', '_' or '.'", p.name),
                );
            }
            if let Some(j) = names.insert(&p.name, i) {
                return err(
                    f("name"),
                    format!("duplicate name '{}' (also port[{j}])", p.name),
                );
            }
            let role = match p.role.as_str() {
                "downlink" => Role::Downlink,
                "uplink" => Role::Uplink,
                other => return err(f("role"), format!("'{other}': use 'downlink' or 'uplink'")),
            };
            let mac = parse_mac(&p.mac).map_err(|r| ConfigError {
                field: f("mac"),
                reason: r,
            })?;
            if mac[0] & 1 == 1 || mac == [0; 6] {
                return err(f("mac"), format!("'{}' is not a unicast address", p.mac));
            }
            if !(68..=9000).contains(&p.mtu) {
                return err(f("mtu"), format!("{}: use 68 to 9000", p.mtu));
            }
            let pmtu = match p.pmtu {
                Some(v) => Pmtu::new(v).map_err(|v| ConfigError {
                    field: f("pmtu"),
                    reason: format!("{v}: use 256, 512, 1024, 2048 or 4096"),
                })?,
                None => Pmtu::for_ethernet_mtu(u32::from(p.mtu))
                    .unwrap_or(Pmtu::new(256).unwrap_or_default()),
            };
            let rate_bps = match p.rate_gbps {
                Some(g) if g.is_finite() && g > 0.0 && g <= 1000.0 => Some((g * 1e9) as u64),
                Some(g) => {
                    return err(
                        f("rate_gbps"),
                        format!("{g}: use a rate above 0 and at most 1000"),
                    )
                }
                None => None,
            };
            let peer_mac = match &p.peer_mac {
                Some(m) => Some(parse_mac(m).map_err(|r| ConfigError {
                    field: f("peer_mac"),
                    reason: r,
                })?),
                None => None,
            };
            let mut port_addrs = Vec::new();
            for (k, a) in p.addresses.iter().enumerate() {
                let field = f(&format!("addresses[{k}]"));
                let (ip, len) = parse_host_prefix(a).map_err(|r| ConfigError {
                    field: field.clone(),
                    reason: r,
                })?;
                let pre = Prefix::new(ip, len).map_err(|_| ConfigError {
                    field: field.clone(),
                    reason: "bad prefix".into(),
                })?;
                for (other, other_ip, other_field) in &addrs {
                    if *other_ip == ip {
                        return err(field, format!("{ip} is already used by {other_field}"));
                    }
                    if other.overlaps(&pre) {
                        return err(field, format!("{a} overlaps {other_field} ({other})"));
                    }
                }
                addrs.push((pre, ip, field));
                port_addrs.push((ip, len));
            }
            if let Some(w) = p.worker {
                if w >= s.workers {
                    return err(
                        f("worker"),
                        format!("worker {w} does not exist ({} workers)", s.workers),
                    );
                }
            }
            assigned.push(p.worker.unwrap_or(i % s.workers));
            backends.push(match p.backend.as_str() {
                "mem" => Backend::Mem,
                "pcap" => {
                    if p.pcap_in.is_none() && p.pcap_out.is_none() {
                        return err(f("backend"), "a pcap port needs pcap_in, pcap_out or both");
                    }
                    let pace = match p.pace.as_deref() {
                        None | Some("recorded") => Pace::Recorded,
                        Some("fast") => Pace::Fast,
                        Some(o) => {
                            return err(f("pace"), format!("'{o}': use 'recorded' or 'fast'"))
                        }
                    };
                    Backend::Pcap {
                        input: p.pcap_in.as_ref().map(PathBuf::from),
                        output: p.pcap_out.as_ref().map(PathBuf::from),
                        pace,
                    }
                }
                kind @ ("af_xdp" | "af_packet" | "auto") => {
                    let interface = p.interface.clone().unwrap_or_else(|| p.name.clone());
                    if interface.is_empty()
                        || interface.len() > 15
                        || interface.contains(['/', ' ', '\0'])
                    {
                        return err(
                            f("interface"),
                            format!("'{interface}' is not an interface name (1-15 characters, no '/' or spaces)"),
                        );
                    }
                    if let Some(j) = backends.iter().position(|b| {
                        matches!(b, Backend::Real { interface: other, .. } if *other == interface)
                    }) {
                        return err(
                            f("interface"),
                            format!("{interface} is already used by port '{}'", self.ports[j].name),
                        );
                    }
                    let queues = p.queues.unwrap_or(1);
                    if !(1..=64).contains(&queues) {
                        return err(f("queues"), format!("{queues} queues: use 1 to 64"));
                    }
                    let xdp_mode = match p.xdp_mode.as_deref() {
                        None | Some("auto") => XdpModeChoice::Auto,
                        Some("native") => XdpModeChoice::Native,
                        Some("skb") => XdpModeChoice::Skb,
                        Some(o) => {
                            return err(
                                f("xdp_mode"),
                                format!("'{o}': use 'auto', 'native' or 'skb'"),
                            )
                        }
                    };
                    if kind == "af_packet" && (p.queues.is_some() || p.xdp_mode.is_some()) {
                        return err(
                            f("backend"),
                            "queues and xdp_mode apply to AF_XDP (backend 'af_xdp' or 'auto')",
                        );
                    }
                    Backend::Real {
                        kind: match kind {
                            "af_xdp" => RealKind::AfXdp,
                            "af_packet" => RealKind::AfPacket,
                            _ => RealKind::Auto,
                        },
                        interface,
                        queues,
                        xdp_mode,
                    }
                }
                other => {
                    return err(
                        f("backend"),
                        format!("'{other}': use 'mem', 'pcap', 'af_xdp', 'af_packet' or 'auto'"),
                    )
                }
            });
            if (p.interface.is_some() || p.queues.is_some() || p.xdp_mode.is_some())
                && !matches!(p.backend.as_str(), "af_xdp" | "af_packet" | "auto")
            {
                return err(
                    f("interface"),
                    "interface, queues and xdp_mode need a real backend (af_xdp, af_packet or auto)",
                );
            }
            if (p.pcap_in.is_some() || p.pcap_out.is_some() || p.pace.is_some())
                && p.backend != "pcap"
            {
                return err(
                    f("backend"),
                    "pcap_in, pcap_out and pace need backend = \"pcap\"",
                );
            }
            infos.push(PortInfo {
                name: p.name.clone(),
                mac,
                role,
                mtu: p.mtu,
                pmtu,
                pmtu_fixed: p.pmtu.is_some(),
                rate_bps,
                peer_mac,
                addresses: port_addrs,
                admin_up: true,
            });
        }
        let mut t = Tables::new(infos);
        t.policy = policy;
        t.flowlet_gap_ns = s.flowlet_gap_us.saturating_mul(1000);

        // Uplink groups.
        let mut group_names = HashSet::new();
        for (i, g) in self.groups.iter().enumerate() {
            let f = |x: &str| format!("uplink_group[{i}].{x}");
            if g.name.is_empty() || !group_names.insert(g.name.as_str()) {
                return err(f("name"), format!("'{}' is empty or used twice", g.name));
            }
            if names.contains_key(g.name.as_str()) {
                return err(f("name"), format!("'{}' is also a port name", g.name));
            }
            if g.ports.is_empty() {
                return err(f("ports"), "a group needs at least one uplink");
            }
            let mut members = Vec::new();
            for (k, pn) in g.ports.iter().enumerate() {
                let field = f(&format!("ports[{k}]"));
                let Some(&pi) = names.get(pn.as_str()) else {
                    return err(field, format!("unknown port '{pn}'"));
                };
                let info = &t.ports[pi];
                if info.role != Role::Uplink {
                    return err(
                        field,
                        format!("port '{pn}' is a downlink; groups hold uplinks"),
                    );
                }
                if info.peer_mac.is_none() {
                    return err(
                        field,
                        format!("uplink '{pn}' has no peer_mac (the next hop at the other end)"),
                    );
                }
                if members.contains(&(pi as u16)) {
                    return err(field, format!("port '{pn}' is listed twice"));
                }
                members.push(pi as u16);
            }
            let weights = match &g.weights {
                Some(w) if w.len() != members.len() => {
                    return err(
                        f("weights"),
                        format!("{} weights for {} ports", w.len(), members.len()),
                    )
                }
                Some(w) if w.iter().any(|x| *x == 0 || *x > 1_000_000) => {
                    return err(f("weights"), "weights must be 1 to 1000000")
                }
                Some(w) => w.clone(),
                None => members
                    .iter()
                    .map(|m| {
                        t.ports[usize::from(*m)]
                            .rate_bps
                            .map_or(1, |b| (b / 1_000_000_000).max(1) as u32)
                    })
                    .collect(),
            };
            t.groups.push(UplinkGroup {
                name: g.name.clone(),
                ports: members,
                weights,
            });
        }

        // Routes.
        let mut seen = HashMap::new();
        for (i, r) in self.routes.iter().enumerate() {
            let f = |x: &str| format!("route[{i}].{x}");
            let pre: Prefix = r.prefix.parse().map_err(|e| ConfigError {
                field: f("prefix"),
                reason: e,
            })?;
            if let Some(j) = seen.insert(pre, i) {
                return err(
                    f("prefix"),
                    format!("{pre} is already routed by route[{j}]"),
                );
            }
            let target = match (&r.port, &r.group) {
                (Some(_), Some(_)) => {
                    return err(f("group"), "give either port or group, not both")
                }
                (None, None) => return err(f("port"), "a route needs a port or a group"),
                (None, Some(g)) => {
                    if r.via.is_some() {
                        return err(
                            f("via"),
                            "via goes with port, not group (uplinks use peer_mac)",
                        );
                    }
                    let Some(gi) = t.group_id(g) else {
                        return err(f("group"), format!("unknown uplink group '{g}'"));
                    };
                    RouteTarget::Group(gi)
                }
                (Some(p), None) => {
                    let Some(pi) = t.port_id(p) else {
                        return err(f("port"), format!("unknown port '{p}'"));
                    };
                    match &r.via {
                        None => RouteTarget::Connected(pi),
                        Some(v) => {
                            let gw: IpAddr = v.parse().map_err(|_| ConfigError {
                                field: f("via"),
                                reason: format!("'{v}' is not an IP address"),
                            })?;
                            let on_port = t.ports[usize::from(pi)]
                                .addresses
                                .iter()
                                .any(|(a, l)| Prefix::new(*a, *l).is_ok_and(|pp| pp.contains(gw)));
                            if !on_port {
                                return err(
                                    f("via"),
                                    format!("gateway {gw} is not inside an address of port '{p}'"),
                                );
                            }
                            RouteTarget::Via(pi, gw)
                        }
                    }
                }
            };
            if pre.addr.is_ipv4() != matches!(target, RouteTarget::Via(_, IpAddr::V4(_)))
                && matches!(target, RouteTarget::Via(..))
            {
                return err(f("via"), "gateway and prefix are of different IP versions");
            }
            t.fib.insert(pre, target);
        }

        // Static neighbours.
        for (i, n) in self.neighbors.iter().enumerate() {
            let f = |x: &str| format!("neighbor[{i}].{x}");
            let ip: IpAddr = n.ip.parse().map_err(|_| ConfigError {
                field: f("ip"),
                reason: format!("'{}' is not an IP address", n.ip),
            })?;
            let mac = parse_mac(&n.mac).map_err(|r| ConfigError {
                field: f("mac"),
                reason: r,
            })?;
            let Some(port) = t.port_id(&n.port) else {
                return err(f("port"), format!("unknown port '{}'", n.port));
            };
            if t.neighbors
                .insert(ip_key(ip), Neighbor { mac, port })
                .is_some()
            {
                return err(f("ip"), format!("{ip} is listed twice"));
            }
        }

        let r = &self.reorder;
        let rcfg = ReorderConfig {
            window: r.window,
            max_streams: r.max_streams,
            max_rings: r.max_rings,
            max_held_bytes: r.max_held_mib.saturating_mul(1 << 20),
            hold_timeout_ns: r.hold_timeout_us.saturating_mul(1000),
            learn_ns: r.learn_us.saturating_mul(1000),
            idle_evict_ns: r.idle_evict_ms.saturating_mul(1_000_000),
            max_reads: r.max_reads,
        };
        if let Err(e) = rcfg.check() {
            let field = if e.starts_with("window") {
                "reorder.window"
            } else {
                "reorder"
            };
            return err(field, e);
        }
        if r.hold_timeout_us == 0 {
            return err("reorder.hold_timeout_us", "must be at least 1");
        }
        let mut port_timeouts = Vec::new();
        for (i, p) in self.ports.iter().enumerate() {
            match p.hold_timeout_us {
                Some(0) => return err(format!("port[{i}].hold_timeout_us"), "must be at least 1"),
                Some(_) if p.role != "downlink" => {
                    return err(
                        format!("port[{i}].hold_timeout_us"),
                        "only downlinks reorder",
                    )
                }
                v => port_timeouts.push(v.map(|us| us.saturating_mul(1000))),
            }
        }

        let run = RunConfig {
            workers: s.workers,
            assignment: Some(assigned),
            cores: s.cores.clone(),
            worker: WorkerConfig {
                burst: s.burst,
                flush_ns: s.flush_us.saturating_mul(1000),
                tx_queue_limit: s.tx_queue_limit,
                idle,
            },
            seed: s.seed,
        };
        Ok(Validated {
            name: s.name.clone(),
            tables: t,
            run,
            backends,
            reorder: r.enabled.then_some(rcfg),
            port_timeouts,
        })
    }
}

impl Validated {
    /// Starts the switch over `ports` (in table order): with a reorder stage per worker when
    /// reordering is on, pass-through otherwise.
    ///
    /// # Errors
    /// When the ports do not match the tables or a worker cannot start.
    pub fn start(
        self,
        ports: Vec<Box<dyn sprayswitch::port::Port>>,
    ) -> Result<sprayswitch::switch::Switch, sprayswitch::switch::StartError> {
        let make = self.reorder_factory();
        sprayswitch::switch::Switch::start_with(self.tables, ports, self.run, make)
    }

    /// As [`Validated::start`], with the workers handed back to be driven by the caller
    /// ([`sprayswitch::switch::Switch::start_driven`]).
    ///
    /// # Errors
    /// When the ports do not match the tables.
    pub fn start_driven(
        self,
        ports: Vec<Box<dyn sprayswitch::port::Port>>,
    ) -> Result<
        (
            sprayswitch::switch::Switch,
            Vec<sprayswitch::worker::Worker>,
        ),
        sprayswitch::switch::StartError,
    > {
        let make = self.reorder_factory();
        sprayswitch::switch::Switch::start_driven(self.tables, ports, self.run, make)
    }

    /// Makes each worker's reorder stage: the reorder engine when reordering is on,
    /// pass-through otherwise.
    fn reorder_factory(
        &self,
    ) -> impl Fn(usize) -> Box<dyn sprayswitch::reorder::DownlinkStage> + use<> {
        use sprayswitch::reorder::{DownlinkStage, Passthrough, ReorderStage};
        let tables = self.tables.clone();
        let timeouts = self.port_timeouts.clone();
        let rcfg = self.reorder;
        move |_| -> Box<dyn DownlinkStage> {
            match rcfg {
                Some(cfg) => Box::new(ReorderStage::new(cfg, &tables, &timeouts)),
                None => Box::new(Passthrough),
            }
        }
    }
}

/// Parses `ADDRESS/LENGTH` keeping the host address.
fn parse_host_prefix(s: &str) -> Result<(IpAddr, u8), String> {
    let pre: Prefix = s.parse()?;
    let (a, _) = s.split_once('/').unwrap_or((s, ""));
    let ip: IpAddr = a
        .parse()
        .map_err(|_| format!("'{a}' is not an IP address"))?;
    if ip == pre.addr && pre.len < if ip.is_ipv4() { 31 } else { 127 } {
        return Err(format!(
            "{s} is a network address, not an address of the switch"
        ));
    }
    Ok((ip, pre.len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(extra: &str) -> ConfigError {
        let text = format!("{DEFAULT_CONFIG}\n{extra}");
        Config::parse(&text, "t.toml")
            .and_then(|c| c.validate())
            .unwrap_err()
    }

    fn with_port(fields: &str) -> ConfigError {
        check(&format!(
            "[[port]]\nname = \"x\"\nrole = \"downlink\"\nmac = \"02:00:00:00:00:09\"\n{fields}"
        ))
    }

    #[test]
    fn real_backends_are_described() {
        let text = format!(
            "{}\n[[port]]\nname = \"x\"\nbackend = \"af_xdp\"\ninterface = \"veth7\"\nqueues = 2\nxdp_mode = \"skb\"\nrole = \"downlink\"\nmac = \"02:00:00:00:00:09\"\n\
             [[port]]\nname = \"y\"\nbackend = \"auto\"\nrole = \"downlink\"\nmac = \"02:00:00:00:00:0a\"\n",
            DEFAULT_CONFIG
        );
        let v = Config::parse(&text, "t").unwrap().validate().unwrap();
        assert_eq!(
            v.backends[6],
            Backend::Real {
                kind: RealKind::AfXdp,
                interface: "veth7".into(),
                queues: 2,
                xdp_mode: XdpModeChoice::Skb
            }
        );
        assert_eq!(
            v.backends[7],
            Backend::Real {
                kind: RealKind::Auto,
                interface: "y".into(),
                queues: 1,
                xdp_mode: XdpModeChoice::Auto
            }
        );
        let dup = text.replace(
            "name = \"y\"\nbackend = \"auto\"",
            "name = \"y\"\nbackend = \"auto\"\ninterface = \"veth7\"",
        );
        let e = Config::parse(&dup, "t").unwrap().validate().unwrap_err();
        assert_eq!(e.field, "port[7].interface");
        assert!(e.reason.contains("already used by port 'x'"), "{e}");
    }

    #[test]
    fn the_default_is_valid() {
        let v = Config::default_config().validate().unwrap();
        assert_eq!(v.name, "tor-a");
        assert_eq!(v.tables.ports.len(), 6);
        assert_eq!(v.tables.groups[0].ports.len(), 4);
        assert_eq!(v.tables.policy, SprayPolicy::RoundRobin);
        assert!(v.backends.iter().all(|b| *b == Backend::Mem));
        let (_, target) = v.tables.fib.lookup("10.2.3.4".parse().unwrap()).unwrap();
        assert_eq!(*target, RouteTarget::Group(0));
        let (_, target) = v.tables.fib.lookup("10.1.2.7".parse().unwrap()).unwrap();
        assert_eq!(*target, RouteTarget::Connected(1));
        assert_eq!(v.tables.ports[0].pmtu, Pmtu::new(1024).unwrap());
    }

    #[test]
    fn errors_name_the_field_and_reason() {
        let cases: Vec<(ConfigError, &str, &str)> =
            vec![
            (
                Config::parse(&DEFAULT_CONFIG.replace("window = 256", "window = 100"), "t.toml")
                    .and_then(|c| c.validate())
                    .unwrap_err(),
                "reorder.window",
                "power of two",
            ),
            (with_port("hold_timeout_us = 0"), "port[6].hold_timeout_us", "at least 1"),
            (
                check("[[route]]\nprefix = \"10.9.0.0/16\"\nport = \"u9\""),
                "route[2].port",
                "unknown port 'u9'",
            ),
            (
                check("[[route]]\nprefix = \"10.9.0.0/33\"\nport = \"h1\""),
                "route[2].prefix",
                "longer than 32",
            ),
            (
                check("[[route]]\nprefix = \"10.2.0.0/16\"\nport = \"h1\""),
                "route[2].prefix",
                "already routed by route[0]",
            ),
            (
                check("[[route]]\nprefix = \"10.9.0.0/16\"\ngroup = \"spine\""),
                "route[2].group",
                "unknown uplink group 'spine'",
            ),
            (
                check("[[route]]\nprefix = \"10.9.0.0/16\"\nport = \"h1\"\nvia = \"10.5.0.1\""),
                "route[2].via",
                "not inside an address of port 'h1'",
            ),
            (
                check("[[route]]\nprefix = \"10.9.0.0/16\"\nport = \"h1\"\ngroup = \"fabric\""),
                "route[2].group",
                "not both",
            ),
            (
                with_port("addresses = [\"10.1.1.9/24\"]"),
                "port[6].addresses[0]",
                "overlaps port[0].addresses[0]",
            ),
            (
                with_port("addresses = [\"10.1.1.1/32\"]"),
                "port[6].addresses[0]",
                "already used by port[0].addresses[0]",
            ),
            (
                with_port("addresses = [\"10.7.0.0/16\"]"),
                "port[6].addresses[0]",
                "network address",
            ),
            (
                check("[[port]]\nname = \"h1\"\nrole = \"downlink\"\nmac = \"02:00:00:00:00:09\""),
                "port[6].name",
                "duplicate name 'h1' (also port[0])",
            ),
            (with_port("mtu = 20000"), "port[6].mtu", "use 68 to 9000"),
            (with_port("pmtu = 1000"), "port[6].pmtu", "1000: use 256"),
            (
                with_port("backend = \"pcap\""),
                "port[6].backend",
                "needs pcap_in",
            ),
            (with_port("backend = \"dpdk\""), "port[6].backend", "'dpdk'"),
            (
                with_port("backend = \"af_xdp\"\nqueues = 0"),
                "port[6].queues",
                "use 1 to 64",
            ),
            (
                with_port("backend = \"auto\"\nxdp_mode = \"turbo\""),
                "port[6].xdp_mode",
                "'turbo'",
            ),
            (
                with_port("backend = \"af_packet\"\nxdp_mode = \"skb\""),
                "port[6].backend",
                "apply to AF_XDP",
            ),
            (
                with_port("backend = \"af_xdp\"\ninterface = \"a-very-long-interface\""),
                "port[6].interface",
                "not an interface name",
            ),
            (
                with_port("interface = \"eth0\""),
                "port[6].interface",
                "need a real backend",
            ),
            (
                check("[[port]]\nname = \"y\"\nrole = \"spine\"\nmac = \"02:00:00:00:00:09\""),
                "port[6].role",
                "'spine'",
            ),
            (
                check("[[port]]\nname = \"y\"\nrole = \"uplink\"\nmac = \"01:00:00:00:00:09\""),
                "port[6].mac",
                "not a unicast",
            ),
            (
                check("[[port]]\nname = \"y\"\nrole = \"uplink\"\nmac = \"02:00:00:00:09\""),
                "port[6].mac",
                "not a MAC address",
            ),
            (
                check("[[uplink_group]]\nname = \"g2\"\nports = [\"h1\"]"),
                "uplink_group[1].ports[0]",
                "is a downlink",
            ),
            (
                check("[[uplink_group]]\nname = \"g2\"\nports = [\"u0\", \"u0\"]"),
                "uplink_group[1].ports[1]",
                "listed twice",
            ),
            (
                check("[[uplink_group]]\nname = \"g2\"\nports = [\"u0\"]\nweights = [1, 2]"),
                "uplink_group[1].weights",
                "2 weights for 1 ports",
            ),
            (
                check(
                    "[[neighbor]]\nip = \"10.1.1.7\"\nmac = \"02:00:00:00:00:07\"\nport = \"h7\"",
                ),
                "neighbor[0].port",
                "unknown port 'h7'",
            ),
        ];
        for (e, field, reason) in cases {
            assert_eq!(e.field, field, "{e}");
            assert!(e.reason.contains(reason), "{e} should say '{reason}'");
        }
    }

    #[test]
    fn switch_section_and_syntax_errors() {
        let bad = |s: &str| {
            let text = DEFAULT_CONFIG.replace("workers = 1", s);
            Config::parse(&text, "t.toml")
                .and_then(|c| c.validate())
                .unwrap_err()
        };
        assert_eq!(bad("workers = 0").field, "switch.workers");
        let e = bad("workers = 1\nspray_policy2 = \"x\"");
        assert_eq!(e.field, "t.toml");
        assert!(e.reason.contains("unknown field `spray_policy2`"), "{e}");
        let e = Config::parse(&DEFAULT_CONFIG.replace("round_robin", "spray"), "t.toml")
            .unwrap()
            .validate()
            .unwrap_err();
        assert_eq!(e.field, "switch.spray_policy");
        assert!(e.reason.contains("one of: ecmp, round_robin"));
        let e = Config::parse("[switch]\nworkers = \"two\"", "t.toml").unwrap_err();
        assert!(e.reason.contains("line 2"), "{e}");
        assert_eq!(
            Config::parse("", "t")
                .unwrap()
                .validate()
                .unwrap_err()
                .field,
            "port"
        );
    }
}
