//! The configuration file: model (this file), named choices ([`Choice`]), validation
//! (`validate`, section by section), the reference of every key ([`keys`], rendered by
//! [`reference`](mod@reference)) and the start of a validated switch.
//!
//! Every problem is reported before anything starts, as `field: reason`, where the field is a
//! path into the file (`port[2].addresses[0]`, `route[1].group`, ...).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sprayswitch::port::pcap::Pace;
use sprayswitch::reorder::{DownlinkMode, LossRecovery, PortReorder, ReorderConfig};
use sprayswitch::switch::RunConfig;
use sprayswitch::tables::{LossDetection, Role, SprayPolicy, Tables};

mod choice;
pub mod keys;
pub mod reference;
mod validate;

pub use choice::{BackendKind, Choice, RnicKind, XdpModeChoice};
pub use sprayswitch::wire::parse_mac;

/// The embedded default configuration (ToR "tor-a" of the demo rack pair).
pub const DEFAULT_CONFIG: &str = include_str!("../../default.toml");

/// A configuration problem: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ConfigError {
    /// Path of the offending field.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

pub(super) fn err<T>(
    field: impl Into<String>,
    reason: impl Into<String>,
) -> Result<T, ConfigError> {
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
    pub spray_policy: Choice<SprayPolicy>,
    /// Idle gap for `flowlet`, microseconds.
    pub flowlet_gap_us: u64,
    /// Seed of the random policies.
    pub seed: u64,
    /// ECN marking of every port's egress queue (a `[[port]]` may set its own); absent: no
    /// marking.
    pub ecn: Option<EcnSetting>,
    /// Stamp counters a ToR's path stamps tell apart (1, 2, 4 or 8; the same on every ToR of
    /// the fabric, at least the workers of each): each worker stamps with its own, named in
    /// the stamp's top bits. Each doubling halves how far stamps compare.
    pub path_stamp_lanes: usize,
}

/// An `ecn` setting: thresholds, or a word.
///
/// ```toml
/// ecn = { kmin_kb = 100, kmax_kb = 400, pmax = 0.2 }   # WRED-style thresholds (1 KB = 1000 bytes)
/// ecn = "for_rate"                                    # 100/400 KB, 0.2 scaled by the port's rate_gbps
/// ecn = "off"                                         # this port marks nothing
/// ```
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum EcnSetting {
    /// `off` or `for_rate`.
    Word(String),
    /// Explicit thresholds.
    Thresholds(EcnThresholds),
}

/// Marking thresholds on a queue's depth.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EcnThresholds {
    /// Depth where marking starts, KB (1000 bytes).
    pub kmin_kb: f64,
    /// Depth where the probability reaches `pmax`, KB; above it every ECN-capable packet is
    /// marked.
    pub kmax_kb: f64,
    /// Marking probability at `kmax_kb` (0 to 1).
    pub pmax: f64,
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
            spray_policy: Choice::new("round_robin"),
            flowlet_gap_us: 50,
            seed: 1,
            ecn: None,
            path_stamp_lanes: 1,
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
    /// Prefix lengths `[IPv4, IPv6]` of a sender's address that all hosts behind one source
    /// ToR share (its rack's subnet): path stamps of those hosts are taken as one sequence, so
    /// each host's packets prove its neighbours' losses. `[32, 128]`: each host on its own.
    /// Two ToRs' hosts under one prefix pause each other's stamp evidence (`stamp_disorder`).
    pub stamp_source_prefix: [u8; 2],
    /// What a declared loss releases towards a host: `nak_first` (Go-Back-N RNICs: ConnectX-5,
    /// Soft-RoCE) or `release_run` (selective repeat: ConnectX-6/7); ports may override it.
    /// Default: what `rnic` needs.
    pub loss_recovery: Option<Choice<LossRecovery>>,
    /// What downlinks do with the fabric's reordering: `reorder`, `nak_filter` or `pass`;
    /// ports may override it.
    pub mode: Choice<DownlinkMode>,
    /// The hosts' RNICs: `go_back_n` or `selective_repeat`; ports may override it.
    pub rnic: Choice<RnicKind>,
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
            stamp_source_prefix: [d.stamp_source_prefix.0, d.stamp_source_prefix.1],
            loss_recovery: None,
            mode: Choice::new("reorder"),
            rnic: Choice::new("go_back_n"),
        }
    }
}

/// A `[[port]]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PortSection {
    /// Unique name.
    pub name: String,
    /// `mem`, `pcap`, `af_xdp`, `af_packet`, `auto` (AF_XDP, falling back to AF_PACKET
    /// with a logged reason) or `dpdk`.
    #[serde(default = "default_backend")]
    pub backend: Choice<BackendKind>,
    /// Real ports: the interface to open; default: the port's name.
    pub interface: Option<String>,
    /// AF_XDP and DPDK: receive queues to open (0..queues); default 1.
    pub queues: Option<u32>,
    /// DPDK: the device, a PCI address (`0000:3b:00.0`), a vdev of `[dpdk] eal_args`
    /// (`net_af_packet0`), or a vdev's whole devargs (`net_af_packet0,iface=eth0`).
    pub device: Option<String>,
    /// AF_XDP: `auto` (native, falling back to skb), `native` or `skb`.
    pub xdp_mode: Option<Choice<XdpModeChoice>>,
    /// AF_XDP: entries of the receive, transmit and completion rings (power of two, 64 to
    /// 32768); DPDK: descriptors of each receive and transmit queue (power of two, 64 to
    /// 32768); default 1024.
    pub ring_size: Option<u32>,
    /// AF_XDP: entries of the fill ring (power of two, at least `ring_size`); default twice
    /// `ring_size`.
    pub fill_ring_size: Option<u32>,
    /// AF_XDP: busy polling for this many microseconds per receive (`SO_BUSY_POLL` with
    /// `SO_PREFER_BUSY_POLL`, Linux 5.11+); default off.
    pub busy_poll_us: Option<u32>,
    /// AF_PACKET and AF_XDP: receive buffers beyond the rings, what the switch can keep of the
    /// port's packets at once (egress queues, reorder rings); default 4096. AF_XDP ports of a
    /// worker share one UMEM holding all of theirs. DPDK: `[dpdk] mbufs`.
    pub rx_buffers: Option<u32>,
    /// `downlink` or `uplink`.
    pub role: Choice<Role>,
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
    pub pace: Option<Choice<Pace>>,
    /// Hold timeout of streams towards this downlink, microseconds (overrides `[reorder]`).
    pub hold_timeout_us: Option<u64>,
    /// What a declared loss releases towards the hosts of this downlink (overrides
    /// `[reorder]`): `nak_first` or `release_run`.
    pub loss_recovery: Option<Choice<LossRecovery>>,
    /// What this downlink does with the fabric's reordering (overrides `[reorder]`).
    pub mode: Option<Choice<DownlinkMode>>,
    /// The RNICs of this downlink's hosts (overrides `[reorder]`).
    pub rnic: Option<Choice<RnicKind>>,
    /// ECN marking of this port's egress queue (overrides `[switch]`; `"off"`: none).
    pub ecn: Option<EcnSetting>,
}

fn default_backend() -> Choice<BackendKind> {
    Choice::new("mem")
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
    /// How the destination ToR tells loss from reordering on what the members deliver:
    /// `path_order` (default; each member is one FIFO path: a two-tier leaf-spine) or `timeout`
    /// (a LAG or more paths behind one member).
    pub loss_detection: Option<Choice<LossDetection>>,
    /// Path stamps (with `path_order`): this ToR stamps the RoCE packets it sends over the
    /// members in their UDP checksum and reads and clears the stamps of what it receives on
    /// them, so that any later packet of a source host proves a path for all its QPs. Default
    /// false; every ToR at the other end must have it on (its hosts would get a wrong UDP
    /// checksum otherwise), and each member must have one receive queue.
    pub path_stamps: Option<bool>,
    /// Path health: probe the ToRs at the other end of the members and take a member out of
    /// the spray set while it fails (dead, lossy, flapping), with its carrier up.
    pub health: Option<HealthSection>,
}

/// The `health` of an `[[uplink_group]]`.
///
/// ```toml
/// health = { peers = ["10.2.1.1"] }   # the other ToRs' addresses; the rest as below
/// health = { peers = ["10.2.1.1"], interval_us = 50, loss_out = 0.03, fast_loss_out = 0.15, restore_ms = 200 }
/// ```
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HealthSection {
    /// The ToRs at the other end of the members: an address of each, routed over this group
    /// (each is probed over every member). Every peer must list this switch's probe source
    /// among its own peers.
    pub peers: Vec<String>,
    /// This switch's address that probes come from (one per family in use; default: the
    /// switch's first address of the peer's family, in port order).
    #[serde(default)]
    pub source: Vec<String>,
    /// Time between two probes of one member to one peer, microseconds (default 50).
    pub interval_us: Option<u64>,
    /// Intervals without a probe from a peer after which a member is dead (default 5).
    pub detect_intervals: Option<u32>,
    /// Loss over the last 64 probes at which a member goes out at once (default 0.15).
    pub fast_loss_out: Option<f64>,
    /// Loss over the last 1024 probes at which a member goes out (default 0.03: where
    /// recovering from its losses costs more than the member carries).
    pub loss_out: Option<f64>,
    /// How long a member must stay clean before it comes back, milliseconds (default 200;
    /// doubled each time it fails again soon after, up to 32 times).
    pub restore_ms: Option<u64>,
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
    /// `[dpdk]`: how DPDK's EAL starts, for `backend = "dpdk"` ports.
    #[serde(default)]
    pub dpdk: DpdkSection,
}

/// `[dpdk]`.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct DpdkSection {
    /// EAL's arguments, as for any DPDK program (`["--no-huge", "-m", "512", "--no-shconf",
    /// "--vdev", "net_af_packet0,iface=eth0"]`, `-a 0000:3b:00.0` allow-lists ...).
    #[serde(default)]
    pub eal_args: Vec<String>,
    /// Mbufs in each DPDK port's pool; default 16384.
    pub mbufs: Option<u32>,
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
    /// A DPDK ethdev.
    Dpdk {
        /// The device (PCI address, vdev name or devargs).
        device: String,
        /// Queue pairs.
        queues: u32,
        /// Receive and transmit descriptors per queue.
        ring: u16,
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
        /// AF_XDP ring sizes: (receive/transmit/completion, fill).
        rings: (u32, u32),
        /// AF_XDP busy polling, microseconds.
        busy_poll_us: Option<u32>,
        /// Receive buffers beyond the rings (AF_PACKET: its pool; AF_XDP: its share of the
        /// worker's UMEM).
        rx_buffers: u32,
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
    /// Each port's reorder settings (hold timeout, loss recovery), in table order.
    pub port_reorder: Vec<PortReorder>,
    /// EAL arguments and pool size, when a port uses DPDK.
    pub dpdk: Option<DpdkRun>,
}

/// How DPDK runs (from `[dpdk]`), for a configuration with DPDK ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkRun {
    /// EAL's arguments.
    pub eal_args: Vec<String>,
    /// Mbufs per port pool.
    pub mbufs: u32,
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
        let timeouts = self.port_reorder.clone();
        let rcfg = self.reorder;
        move |_| -> Box<dyn DownlinkStage> {
            match rcfg {
                Some(cfg) => Box::new(ReorderStage::new(cfg, &tables, &timeouts)),
                None => Box::new(Passthrough),
            }
        }
    }
}

#[cfg(test)]
mod tests;
