//! In-process topologies: a rack pair of two sprayswitch ToRs, their hosts, and an N-path
//! fabric of fault-injected in-memory links, all in one process and without privileges.
//!
//! ```text
//!  host a1 ─┐                 path 0 (delay, jitter, loss, rate)                ┌─ host b1
//!  host a2 ─┤ tor-a u0 ═══════════════════════════════════════════ u0 tor-b    ├─ host b2
//!   ...     │       u1 ═══════════════ path 1 ════════════════════ u1          │   ...
//!           │       ...                                                        │
//! ```
//!
//! Rack A hosts are `10.1.<i>.2` behind gateway `10.1.<i>.1` (and `fd00:1:<i>::2`); rack B hosts
//! are `10.2.<i>.2` (`fd00:2:<i>::2`). The test or tool drives the host ends directly.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use anyhow::Context;
use sprayswitch::port::fault::{FaultConfig, FaultInjector, FaultStats, LossStep};
use sprayswitch::port::mem::{self, LinkControl, MemPort};
use sprayswitch::port::pooled::PooledPort;
use sprayswitch::port::Port;
use sprayswitch::reorder::ReorderConfig;
use sprayswitch::switch::{Stopped, Switch};
use sprayswitch::tables::{ip_key, Neighbor, SprayPolicy};
use sprayswitch::wire::format_mac;
use sprayswitch::worker::IdlePolicy;
use sprayswitch_control::config::Choice;
use sprayswitch_control::Config;

/// One fabric path (both directions get the same impairments, with different seeds).
#[derive(Debug, Clone, PartialEq)]
pub struct PathSpec {
    /// One-way delay.
    pub delay_ns: u64,
    /// Jitter (order is kept).
    pub jitter_ns: u64,
    /// Loss probability.
    pub loss: f64,
    /// Changes of the loss over time (a path that fails mid-run, flaps, is repaired); before
    /// the first, `loss`.
    pub loss_schedule: Vec<LossStep>,
    /// Rate in bits per second.
    pub rate_bps: Option<u64>,
}

impl PathSpec {
    /// A clean path with a fixed delay.
    pub fn delay(delay_ns: u64) -> PathSpec {
        PathSpec {
            delay_ns,
            jitter_ns: 0,
            loss: 0.0,
            loss_schedule: Vec::new(),
            rate_bps: None,
        }
    }
}

/// The prefix lengths (IPv4, IPv6) the hosts of one rack share: rack `r` is `10.r.0.0/16` and
/// `fd00:r::/32`.
pub const RACK_PREFIX: (u8, u8) = (16, 32);

/// What to build.
#[derive(Debug, Clone, PartialEq)]
pub struct RackPairSpec {
    /// Hosts per rack.
    pub hosts: usize,
    /// Fabric paths.
    pub paths: Vec<PathSpec>,
    /// Spray policy of both ToRs.
    pub policy: SprayPolicy,
    /// Workers per ToR.
    pub workers: usize,
    /// Install static neighbours for the hosts (otherwise the ToRs resolve them with ARP/ND).
    pub static_neighbors: bool,
    /// Packets each in-memory link holds per direction.
    pub link_capacity: usize,
    /// Idle behaviour of the workers.
    pub idle: IdlePolicy,
    /// Seed of the fabric impairments and spray policies.
    pub seed: u64,
    /// Reordering at the ToRs: `None` sprays without reordering.
    pub reorder: Option<sprayswitch::reorder::ReorderConfig>,
    /// Take the path stamps of a rack's hosts as one sequence ([`RACK_PREFIX`], overriding
    /// `reorder`'s `stamp_source_prefix`); false: as `reorder` says.
    pub stamp_per_rack: bool,
    /// Ethernet MTU of every ToR port (9000 lets hosts use RoCE path MTU 4096).
    pub mtu: u16,
    /// How the ToRs tell loss from reordering on the fabric's paths.
    pub loss_detection: sprayswitch::tables::LossDetection,
    /// What a declared loss releases towards the hosts.
    pub loss_recovery: sprayswitch::reorder::LossRecovery,
    /// What the ToRs' downlinks do with the fabric's reordering (with `reorder` set).
    pub downlink_mode: sprayswitch::reorder::DownlinkMode,
    /// Rate of every ToR port towards a host (`None`: as fast as the host takes packets).
    pub host_rate_bps: Option<u64>,
    /// Rate of every ToR uplink (`None`: as fast as the fabric link takes packets).
    pub uplink_rate_bps: Option<u64>,
    /// ECN marking of every ToR port (`None`: no marking).
    pub ecn: Option<sprayswitch::egress::EcnProfile>,
    /// Packets each ToR port's egress queue holds (`None`: the configuration's default).
    pub tx_queue_limit: Option<usize>,
    /// Longest a packet waits in a transmit buffer before a flush (`None`: the configuration's
    /// default; virtual-time runs at 100 Gbit/s use 0).
    pub flush_ns: Option<u64>,
    /// Give each ToR uplink a receive pool of this many frames (as an AF_PACKET port has), so
    /// that what the reorder stage holds pins receive buffers as on a real port; `None`: heap
    /// packets, no pool.
    pub uplink_pool_frames: Option<u32>,
    /// Path health on the fabric group (each ToR probes the other over every path and takes
    /// failing paths out of its spray set), with this probe interval in microseconds; `None`
    /// (the default): off, so that what a test counts on the paths is its own traffic. In real
    /// time on shared cores use [`REAL_TIME_PROBE_US`]: the paths are emulated by the ToRs'
    /// own threads, which deliver a path's packets late by as much as they wake late. On a
    /// clock of its own ([`DrivenRackPair`]) nothing is late: the switch's default suits.
    pub health_interval_us: Option<u64>,
}

impl Default for RackPairSpec {
    fn default() -> Self {
        RackPairSpec {
            hosts: 2,
            paths: vec![PathSpec::delay(0); 4],
            policy: SprayPolicy::RoundRobin,
            workers: 1,
            static_neighbors: true,
            link_capacity: 8192,
            idle: IdlePolicy::Backoff {
                spins: 100,
                yields: 100,
                sleep_us: 20,
            },
            seed: 1,
            reorder: Some(sprayswitch::reorder::ReorderConfig::default()),
            stamp_per_rack: true,
            mtu: 1500,
            loss_detection: Default::default(),
            loss_recovery: Default::default(),
            downlink_mode: Default::default(),
            host_rate_bps: None,
            uplink_rate_bps: None,
            ecn: None,
            tx_queue_limit: None,
            flush_ns: None,
            health_interval_us: None,
            uplink_pool_frames: None,
        }
    }
}

/// The probe interval of path health in a rack pair running in real time on shared cores
/// (microseconds): its emulated paths deliver late by milliseconds when the threads that drive
/// them wake late, and a probe that late would look lost at the switch's default 50 us.
pub const REAL_TIME_PROBE_US: u64 = 1000;

/// A host's NIC: the far end of a ToR downlink.
pub struct Host {
    /// Port towards the ToR.
    pub port: MemPort,
    /// Host MAC.
    pub mac: [u8; 6],
    /// Host IPv4 address.
    pub ip4: Ipv4Addr,
    /// Host IPv6 address.
    pub ip6: Ipv6Addr,
    /// The ToR port's MAC (the host's gateway MAC).
    pub gw_mac: [u8; 6],
    /// Gateway IPv4 address.
    pub gw4: Ipv4Addr,
    /// Gateway IPv6 address.
    pub gw6: Ipv6Addr,
}

/// A running rack pair.
pub struct RackPair {
    /// ToR of rack A.
    pub tor_a: Switch,
    /// ToR of rack B.
    pub tor_b: Switch,
    /// Rack A hosts.
    pub hosts_a: Vec<Host>,
    /// Rack B hosts.
    pub hosts_b: Vec<Host>,
    /// Per path: impairment counters A->B and B->A.
    pub path_stats: Vec<(Arc<FaultStats>, Arc<FaultStats>)>,
    /// Per path: carrier control.
    pub path_links: Vec<LinkControl>,
}

/// The fabric of a rack pair: per path, an in-memory link whose two ends are fault-injected
/// (each direction delayed, rate-limited and lossy as the path says, with its own seed).
pub struct FabricLinks {
    /// The uplink ends of ToR A (`ends[0]`) and ToR B (`ends[1]`), `u0`.. in path order.
    pub ends: [Vec<Box<dyn Port>>; 2],
    /// Per path: impairment counters A->B and B->A.
    pub stats: Vec<(Arc<FaultStats>, Arc<FaultStats>)>,
    /// Per path: carrier control.
    pub links: Vec<LinkControl>,
}

impl FabricLinks {
    /// The paths of `spec`, each holding `spec.link_capacity` packets per direction.
    pub fn new(spec: &RackPairSpec) -> FabricLinks {
        let mut f = FabricLinks {
            ends: [Vec::new(), Vec::new()],
            stats: Vec::new(),
            links: Vec::new(),
        };
        for (p, ps) in spec.paths.iter().enumerate() {
            let (a, b) = mem::link(&format!("u{p}"), &format!("u{p}"), spec.link_capacity);
            f.links.push(a.control());
            let cfg = |seed| FaultConfig {
                drop_rate: ps.loss,
                drop_schedule: ps.loss_schedule.clone(),
                delay_ns: ps.delay_ns,
                jitter_ns: ps.jitter_ns,
                rate_bps: ps.rate_bps,
                queue_limit: spec.link_capacity,
                seed,
                ..FaultConfig::default()
            };
            let fa = FaultInjector::new(a, cfg(spec.seed * 1000 + p as u64 * 2));
            let fb = FaultInjector::new(b, cfg(spec.seed * 1000 + p as u64 * 2 + 1));
            f.stats.push((fa.stats(), fb.stats()));
            match spec.uplink_pool_frames {
                Some(frames) => {
                    // Frames that fit the MTU, as the AF_PACKET backend sizes them.
                    let size = (u32::from(spec.mtu) + 18).next_power_of_two().max(2048);
                    let pool = |port| -> Box<dyn Port> {
                        Box::new(
                            PooledPort::new(port, frames, size).expect("a small anonymous mapping"),
                        )
                    };
                    f.ends[0].push(pool(fa));
                    f.ends[1].push(pool(fb));
                }
                None => {
                    f.ends[0].push(Box::new(fa));
                    f.ends[1].push(Box::new(fb));
                }
            }
        }
        f
    }
}

/// MAC of a rack-pair element: `kind` 1 = ToR downlink, 2 = ToR uplink, 3 = host.
pub fn mac(rack: u8, kind: u8, i: usize) -> [u8; 6] {
    [0x02, 0x5a, rack, kind, 0, i as u8]
}

/// The path stamp lanes of a rack pair's ToRs: one per worker (both ToRs have as many; more
/// than 8 workers are refused with path stamps).
fn stamp_lanes(workers: usize) -> usize {
    workers.next_power_of_two().min(8)
}

/// The configuration text of ToR `rack` (1 or 2) in a rack pair, with in-memory ports.
pub fn tor_config(spec: &RackPairSpec, rack: u8) -> String {
    tor_config_ports(spec, rack, "mem", "mem", None, spec.mtu)
}

/// A ToR of a rack pair on real interfaces (`sprayrack` prints it for the namespace rack,
/// `sprayrackd` runs two of them in one process): where its ports are and the settings the
/// scripts vary.
#[derive(Debug, Clone, PartialEq)]
pub struct TorText {
    /// Backend of the host ports: `af_xdp`, `af_packet` or `auto`.
    pub host_backend: String,
    /// Backend of the uplinks: the same, or `mem` when the fabric is in the same process.
    pub uplink_backend: String,
    /// Host port `hN` opens interface `<prefix>N`; `None`: an interface named like the port.
    pub host_interface_prefix: Option<String>,
    /// Ethernet MTU of every port.
    pub mtu: u16,
    /// Core to pin the worker to.
    pub core: Option<usize>,
    /// Idle policy name (`backoff`, `wait`, `spin`).
    pub idle: String,
    /// Longest idle wait, microseconds.
    pub idle_us: u32,
    /// Reordering on (otherwise spraying without reorder).
    pub reorder: bool,
    /// Gap hold timeout, microseconds.
    pub hold_us: u64,
    /// Learning window of a new stream, microseconds.
    pub learn_us: u64,
    /// Rate the ToR paces what it sends to each host at, Mbit/s (`None`: unpaced).
    pub host_rate_mbps: Option<u32>,
    /// Receive buffers of every real port beyond its rings (`rx_buffers`; DPDK: the pool's
    /// mbufs beyond its rings and caches); `None`: the switch's default.
    pub rx_buffers: Option<u32>,
    /// AF_XDP ring size of every real port (`ring_size`, the fill ring twice it), or DPDK
    /// descriptors per queue; `None`: default.
    pub ring_size: Option<u32>,
}

/// The ToR settings `sprayrack` and `sprayrackd` take on their command lines.
#[derive(Debug, Clone, clap::Args)]
pub struct TorArgs {
    /// Port backend of every port: af_xdp, af_packet, auto or dpdk (a `net_af_packet` vdev on
    /// each interface; the switch needs the `dpdk` feature).
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Spray policy (ecmp, round_robin, random, weighted, least_loaded, flowlet).
    #[arg(long, default_value = "round_robin")]
    pub policy: String,
    /// Turn the reorder stage off (spray without reorder).
    #[arg(long)]
    pub no_reorder: bool,
    /// Gap hold timeout, microseconds.
    #[arg(long, default_value_t = 5000)]
    pub hold_us: u64,
    /// Learning window of a new stream, microseconds.
    #[arg(long, default_value_t = 5000)]
    pub learn_us: u64,
    /// Ethernet MTU of every port.
    #[arg(long, default_value_t = 1500)]
    pub mtu: u16,
    /// Longest idle wait while something is timed, microseconds.
    #[arg(long, default_value_t = 50)]
    pub idle_us: u32,
    /// Pace what each ToR sends to a host at this rate, Mbit/s (the host port's `rate_gbps`;
    /// default: unpaced).
    #[arg(long)]
    pub host_rate_mbps: Option<u32>,
    /// Receive buffers of every port beyond its rings: what the ToR can keep of a port's
    /// packets before it stops receiving (`rx_buffers`; with DPDK the pool's mbufs beyond its
    /// rings, caches and a burst, at least 1024). Default: the switch's (4096; DPDK: pools of
    /// 8192, 4096 above MTU 1500).
    #[arg(long)]
    pub rx_buffers: Option<u32>,
    /// AF_XDP ring size of every port (`ring_size`; the fill ring twice it), or DPDK
    /// descriptors per queue. Default: the switch's (1024).
    #[arg(long)]
    pub ring_size: Option<u32>,
}

impl TorArgs {
    /// The spray policy named.
    ///
    /// # Errors
    /// An unknown name, with the ones that exist.
    pub fn spray_policy(&self) -> anyhow::Result<SprayPolicy> {
        self.policy.parse().map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The ToR's settings: every port on `--backend` (sprayrack changes nothing else), with
    /// idle policy `idle` and the worker pinned to `core`.
    pub fn tor_text(&self, idle: &str, core: Option<usize>) -> TorText {
        TorText {
            host_backend: self.backend.clone(),
            uplink_backend: self.backend.clone(),
            host_interface_prefix: None,
            mtu: self.mtu,
            core,
            idle: idle.to_string(),
            idle_us: self.idle_us,
            reorder: !self.no_reorder,
            hold_us: self.hold_us,
            learn_us: self.learn_us,
            host_rate_mbps: self.host_rate_mbps,
            rx_buffers: self.rx_buffers,
            ring_size: self.ring_size,
        }
    }
}

/// The configuration text of ToR `rack` (1 or 2) as `t` says, validated.
///
/// # Errors
/// When the switch would refuse it (a bad backend name or MTU, say).
pub fn tor_config_text(spec: &RackPairSpec, rack: u8, t: &TorText) -> anyhow::Result<String> {
    let mut text = tor_config_ports(
        spec,
        rack,
        &t.host_backend,
        &t.uplink_backend,
        t.host_interface_prefix.as_deref(),
        t.mtu,
    );
    if let Some(r) = t.host_rate_mbps {
        text = text.replace(
            "\nrole = \"downlink\"\n",
            &format!(
                "\nrole = \"downlink\"\nrate_gbps = {}\n",
                f64::from(r) / 1000.0
            ),
        );
    }
    if t.mtu != 1500 {
        text = text.replace("\nrole = ", &format!("\nmtu = {}\nrole = ", t.mtu));
    }
    // Pool and ring sizes on the real ports (a `mem` port has neither; DPDK's pool is sized
    // in its `[dpdk]` section).
    for (backend, role) in [(&t.host_backend, "downlink"), (&t.uplink_backend, "uplink")] {
        if !["af_xdp", "af_packet", "auto"].contains(&backend.as_str()) {
            continue;
        }
        let mut extra = String::new();
        if let Some(n) = t.rx_buffers {
            extra += &format!("rx_buffers = {n}\n");
        }
        if let Some(n) = t.ring_size.filter(|_| backend != "af_packet") {
            extra += &format!("ring_size = {n}\n");
        }
        let at = format!("\nrole = \"{role}\"\n");
        text = text.replace(&at, &format!("{at}{extra}"));
    }
    if let Some(n) = t.ring_size {
        // DPDK ports: descriptors per queue.
        text = text.replace("\ndevice = ", &format!("\nring_size = {n}\ndevice = "));
    }
    if let Some(at) = text.find("[dpdk]\n") {
        // The pools (and EAL's memory for them) as the rings and rx_buffers ask.
        let ports = text.matches("\nbackend = \"dpdk\"").count();
        text.truncate(at);
        text += &dpdk_section(ports, t.mtu, t.ring_size.unwrap_or(1024), t.rx_buffers);
    }
    let mut switch = format!(
        "[switch]\nidle = \"{}\"\nidle_sleep_us = {}\n",
        t.idle, t.idle_us
    );
    if let Some(c) = t.core {
        switch += &format!("cores = [{c}]\n");
    }
    text = text.replacen("[switch]\n", &switch, 1);
    text += &format!(
        "[reorder]\nenabled = {}\nhold_timeout_us = {}\nlearn_us = {}\n",
        t.reorder, t.hold_us, t.learn_us
    );
    if spec.stamp_per_rack {
        text += &format!(
            "stamp_source_prefix = [{}, {}]\n",
            RACK_PREFIX.0, RACK_PREFIX.1
        );
    }
    Config::parse(&text, "generated")?.validate()?;
    Ok(text)
}

/// The configuration text of ToR `rack` (1 or 2): host ports `h1`.. on `host_backend` (opening
/// `<host_prefix>N` when given, else an interface named like the port), uplinks `u0`.. on
/// `uplink_backend`; DPDK ports open their interface through a `net_af_packet` vdev, and
/// the text then ends with the `[dpdk]` section they need (see [`dpdk_section`]).
fn tor_config_ports(
    spec: &RackPairSpec,
    rack: u8,
    host_backend: &str,
    uplink_backend: &str,
    host_prefix: Option<&str>,
    mtu: u16,
) -> String {
    let other = 3 - rack;
    let mut s = format!(
        "[switch]\nname = \"tor-{}\"\nworkers = {}\npath_stamp_lanes = {}\nspray_policy = \"{}\"\nseed = {}\n",
        if rack == 1 { 'a' } else { 'b' },
        spec.workers,
        stamp_lanes(spec.workers),
        spec.policy.name(),
        spec.seed + u64::from(rack)
    );
    for i in 1..=spec.hosts {
        s += &format!(
            "[[port]]\nname = \"h{i}\"\nbackend = \"{host_backend}\"\nrole = \"downlink\"\nmac = \"{}\"\naddresses = [\"10.{rack}.{i}.1/24\", \"fd00:{rack}:{i}::1/64\"]\n",
            format_mac(mac(rack, 1, i))
        );
        let iface = host_prefix.map_or(format!("h{i}"), |p| format!("{p}{i}"));
        if host_backend == "dpdk" {
            s += &dpdk_device(&format!("h{i}"), &iface);
        } else if host_prefix.is_some() {
            s += &format!("interface = \"{iface}\"\n");
        }
    }
    let mut members = Vec::new();
    for (p, _) in spec.paths.iter().enumerate() {
        s += &format!(
            "[[port]]\nname = \"u{p}\"\nbackend = \"{uplink_backend}\"\nrole = \"uplink\"\nmac = \"{}\"\npeer_mac = \"{}\"\n",
            format_mac(mac(rack, 2, p)),
            format_mac(mac(other, 2, p))
        );
        if uplink_backend == "dpdk" {
            s += &dpdk_device(&format!("u{p}"), &format!("u{p}"));
        }
        members.push(format!("\"u{p}\""));
    }
    s += &format!(
        "[[uplink_group]]\nname = \"fabric\"\nports = [{}]\nloss_detection = \"path_order\"\npath_stamps = true\n",
        members.join(", ")
    );
    if let Some(us) = spec.health_interval_us {
        // Each ToR probes the other from its first address, 10.<rack>.1.1. In memory the
        // interval is set when the rack pair is built (ToR A of the default shape runs the
        // embedded configuration); real ToRs get it in their text.
        s += &format!("health = {{ peers = [\"10.{other}.1.1\"]");
        if host_backend != "mem" {
            s += &format!(", interval_us = {us}");
        }
        s += " }\n";
    }
    s += &format!("[[route]]\nprefix = \"10.{other}.0.0/16\"\ngroup = \"fabric\"\n");
    s += &format!("[[route]]\nprefix = \"fd00:{other}::/32\"\ngroup = \"fabric\"\n");
    let dpdk_ports = [
        (host_backend, spec.hosts),
        (uplink_backend, spec.paths.len()),
    ]
    .iter()
    .filter(|(b, _)| *b == "dpdk")
    .map(|(_, n)| *n)
    .sum::<usize>();
    if dpdk_ports > 0 {
        s += &dpdk_section(dpdk_ports, mtu, 1024, None);
    }
    s
}

/// The `device` line of DPDK port `port` on Linux interface `iface`: a `net_af_packet` vdev
/// (the vdev's name is made of the port's, unique in the process).
fn dpdk_device(port: &str, iface: &str) -> String {
    format!("device = \"net_af_packet_{port},iface={iface}\"\n")
}

/// The `[dpdk]` section of a ToR with `ports` DPDK ports of `mtu` and rings of `ring`
/// descriptors: EAL without hugepages, PCI or shared files (`--no-shconf`; `--in-memory` would
/// say the same, but EAL refuses it beside `--no-huge`) (two ToRs run side by side, each in its
/// own namespace), its memory sized for the ports' mbuf pools. Each pool holds `rx_buffers`
/// mbufs (at least the switch's 1024) beyond a queue's rings, two pool caches and a burst, or
/// by default 8192 in all (4096 above MTU 1500) when that is more.
fn dpdk_section(ports: usize, mtu: u16, ring: u32, rx_buffers: Option<u32>) -> String {
    // Receive and transmit rings, two of the shim's pool caches of 256, a burst of 64.
    let fixed = u64::from(2 * ring + 2 * 256 + 64);
    let mbufs = match rx_buffers {
        Some(n) => fixed + u64::from(n.max(1024)),
        None => (fixed + 1024).max(if mtu > 1500 { 4096 } else { 8192 }),
    };
    // Each mbuf: its data room (frame and DPDK's 128-byte headroom), the mbuf header and the
    // pool's own; twice that for EAL's heap to fit the pools beside everything else, and
    // 128 MB of slack (6 ports at MTU 1500: about 370 MB, taken as touched).
    let room = (u64::from(mtu) + 26 + 128).max(2048 + 128) + 256;
    let mb = ((ports as u64 * mbufs * room * 2) >> 20) + 128;
    format!(
        "[dpdk]\neal_args = [\"--no-huge\", \"-m\", \"{mb}\", \"--no-shconf\", \"--no-pci\", \
         \"--no-telemetry\", \"-l\", \"0\"]\nmbufs = {mbufs}\n"
    )
}

/// A rack pair built but not started: both ToRs' validated configurations with their ports,
/// the hosts and the fabric.
struct Built {
    tors: Vec<(sprayswitch_control::config::Validated, Vec<Box<dyn Port>>)>,
    hosts: [Vec<Host>; 2],
    path_stats: Vec<(Arc<FaultStats>, Arc<FaultStats>)>,
    path_links: Vec<LinkControl>,
}

impl Built {
    fn new(spec: &RackPairSpec) -> anyhow::Result<Built> {
        let mut hosts: [Vec<Host>; 2] = [Vec::new(), Vec::new()];
        let mut switch_ports: [Vec<Box<dyn Port>>; 2] = [Vec::new(), Vec::new()];
        for rack in 1..=2u8 {
            for i in 1..=spec.hosts {
                let (host_end, tor_end) = mem::link(
                    &format!("host{rack}-{i}"),
                    &format!("h{i}"),
                    spec.link_capacity,
                );
                switch_ports[usize::from(rack - 1)].push(Box::new(tor_end));
                hosts[usize::from(rack - 1)].push(Host {
                    port: host_end,
                    mac: mac(rack, 3, i),
                    ip4: Ipv4Addr::new(10, rack, i as u8, 2),
                    ip6: Ipv6Addr::new(0xfd00, u16::from(rack), i as u16, 0, 0, 0, 0, 2),
                    gw_mac: mac(rack, 1, i),
                    gw4: Ipv4Addr::new(10, rack, i as u8, 1),
                    gw6: Ipv6Addr::new(0xfd00, u16::from(rack), i as u16, 0, 0, 0, 0, 1),
                });
            }
        }
        let fabric = FabricLinks::new(spec);
        let path_stats = fabric.stats.clone();
        let path_links = fabric.links.clone();
        for (r, uplinks) in fabric.ends.into_iter().enumerate() {
            switch_ports[r].extend(uplinks);
        }
        let mut tors = Vec::new();
        for (rack, ports) in [1u8, 2].into_iter().zip(switch_ports) {
            // ToR A of the default shape runs the embedded default configuration itself.
            let mut cfg = if rack == 1 && spec.hosts == 2 && spec.paths.len() == 4 {
                let mut c = Config::default_config();
                c.switch.spray_policy = Choice::new(spec.policy.name());
                c.switch.workers = spec.workers;
                c.switch.seed = spec.seed + 1;
                c
            } else {
                Config::parse(&tor_config(spec, rack), &format!("tor{rack}"))?
            };
            cfg.switch.workers = spec.workers;
            cfg.switch.path_stamp_lanes = stamp_lanes(spec.workers);
            if spec.mtu != 1500 {
                for p in &mut cfg.ports {
                    p.mtu = spec.mtu;
                }
            }
            let mut v = cfg
                .validate()
                .with_context(|| format!("configuration of ToR {rack}"))?;
            v.run.worker.idle = spec.idle;
            if spec.static_neighbors {
                for (i, h) in hosts[usize::from(rack - 1)].iter().enumerate() {
                    let n = Neighbor {
                        mac: h.mac,
                        port: i as u16,
                    };
                    v.tables.neighbors.insert(ip_key(IpAddr::V4(h.ip4)), n);
                    v.tables.neighbors.insert(ip_key(IpAddr::V6(h.ip6)), n);
                }
            }
            v.reorder = spec.reorder.map(|c| ReorderConfig {
                stamp_source_prefix: if spec.stamp_per_rack {
                    RACK_PREFIX
                } else {
                    c.stamp_source_prefix
                },
                ..c
            });
            for g in &mut v.tables.groups {
                g.loss_detection = spec.loss_detection;
                match spec.health_interval_us {
                    None => g.health = None,
                    Some(us) => {
                        if let Some(h) = &mut g.health {
                            h.interval_ns = us * 1000;
                        }
                    }
                }
            }
            for (p, info) in v.port_reorder.iter_mut().zip(&v.tables.ports) {
                p.recovery = spec.loss_recovery;
                if info.role == sprayswitch::tables::Role::Downlink {
                    p.mode = spec.downlink_mode;
                }
            }
            for p in &mut v.tables.ports {
                p.rate_bps = match p.role {
                    sprayswitch::tables::Role::Downlink => spec.host_rate_bps,
                    sprayswitch::tables::Role::Uplink => spec.uplink_rate_bps,
                };
                p.ecn = spec.ecn;
            }
            if let Some(l) = spec.tx_queue_limit {
                v.run.worker.tx_queue_limit = l;
            }
            if let Some(f) = spec.flush_ns {
                v.run.worker.flush_ns = f;
            }
            tors.push((v, ports));
        }
        Ok(Built {
            tors,
            hosts,
            path_stats,
            path_links,
        })
    }
}

impl RackPair {
    /// Builds and starts the rack pair; the ToRs reorder as `spec.reorder` says.
    ///
    /// # Errors
    /// When a generated configuration does not validate or a switch does not start.
    pub fn start(spec: &RackPairSpec) -> anyhow::Result<RackPair> {
        let built = Built::new(spec)?;
        let mut tors = Vec::new();
        for (v, ports) in built.tors {
            tors.push(v.start(ports)?);
        }
        let tor_b = tors.pop().context("two ToRs")?;
        let tor_a = tors.pop().context("two ToRs")?;
        let [hosts_a, hosts_b] = built.hosts;
        Ok(RackPair {
            tor_a,
            tor_b,
            hosts_a,
            hosts_b,
            path_stats: built.path_stats,
            path_links: built.path_links,
        })
    }

    /// Stops both ToRs.
    pub fn stop(self) -> (Stopped, Stopped) {
        (self.tor_a.stop(), self.tor_b.stop())
    }
}

/// A rack pair whose ToRs run on the caller's clock: the same switches as [`RackPair`] (the
/// embedded configuration, workers, engine, sprayer, reorder stage), with their workers handed
/// back and driven by [`DrivenRackPair::step`], and the fabric's delays measured on the same
/// clock. Nothing here reads a real clock, so a test is exact and repeatable, and runs as fast
/// as the machine can iterate.
pub struct DrivenRackPair {
    /// ToR of rack A.
    pub tor_a: Switch,
    /// ToR of rack B.
    pub tor_b: Switch,
    /// ToR A's workers, then ToR B's.
    pub workers: [Vec<sprayswitch::worker::Worker>; 2],
    /// Rack A hosts.
    pub hosts_a: Vec<Host>,
    /// Rack B hosts.
    pub hosts_b: Vec<Host>,
    /// Per path: impairment counters A->B and B->A.
    pub path_stats: Vec<(Arc<FaultStats>, Arc<FaultStats>)>,
    /// Per path: carrier control.
    pub path_links: Vec<LinkControl>,
    /// ToR B's configuration, to start it again after a restart.
    tor_b_config: sprayswitch_control::config::Validated,
    /// A restart of ToR B under way: it comes back at this time.
    tor_b_down_until: Option<u64>,
    /// ToR B's ports while it is down.
    tor_b_ports: Vec<Box<dyn Port>>,
    /// A restart of ToR B planned: (when, how long down).
    tor_b_restart: Option<(u64, u64)>,
}

impl DrivenRackPair {
    /// Restarts ToR B at `at_ns` (its process crashes: everything it held is lost) and starts
    /// it again, with its configuration and ports but none of its state, `down_ns` later;
    /// meanwhile nothing it receives is handled.
    pub fn restart_b_at(&mut self, at_ns: u64, down_ns: u64) {
        self.tor_b_restart = Some((at_ns, down_ns));
    }

    /// Whether ToR B is down (between the crash and the start of a restart).
    pub fn b_down(&self) -> bool {
        self.tor_b_down_until.is_some()
    }

    /// Crashes or starts ToR B as its planned restart says, at `now`.
    fn restart_b(&mut self, now: u64) -> anyhow::Result<()> {
        if let Some((at, down)) = self.tor_b_restart {
            if now >= at {
                self.tor_b_restart = None;
                let exits: Vec<_> = std::mem::take(&mut self.workers[1])
                    .into_iter()
                    .map(sprayswitch::worker::Worker::crash)
                    .collect();
                let mut by_id: Vec<(u16, Box<dyn Port>)> =
                    exits.into_iter().flat_map(|e| e.ports).collect();
                by_id.sort_by_key(|(id, _)| *id);
                self.tor_b_ports = by_id.into_iter().map(|(_, p)| p).collect();
                self.tor_b_down_until = Some(now + down);
            }
        }
        if let Some(until) = self.tor_b_down_until {
            if now >= until {
                self.tor_b_down_until = None;
                let ports = std::mem::take(&mut self.tor_b_ports);
                let (sw, ws) = self.tor_b_config.clone().start_driven(ports)?;
                self.tor_b = sw;
                self.workers[1] = ws;
            }
        }
        Ok(())
    }
    /// Builds the rack pair of `spec` with driven workers.
    ///
    /// # Errors
    /// When a generated configuration does not validate or a switch does not start.
    pub fn start(spec: &RackPairSpec) -> anyhow::Result<DrivenRackPair> {
        let built = Built::new(spec)?;
        let tor_b_config = built.tors.get(1).context("two ToRs")?.0.clone();
        let mut tors = Vec::new();
        for (v, ports) in built.tors {
            tors.push(v.start_driven(ports)?);
        }
        let (tor_b, wb) = tors.pop().context("two ToRs")?;
        let (tor_a, wa) = tors.pop().context("two ToRs")?;
        let [hosts_a, hosts_b] = built.hosts;
        Ok(DrivenRackPair {
            tor_a,
            tor_b,
            workers: [wa, wb],
            hosts_a,
            hosts_b,
            path_stats: built.path_stats,
            path_links: built.path_links,
            tor_b_config,
            tor_b_down_until: None,
            tor_b_ports: Vec::new(),
            tor_b_restart: None,
        })
    }

    /// One loop iteration of every worker of both ToRs at `now`; true when any found work.
    ///
    /// # Panics
    /// When ToR B cannot start again after a restart (its configuration started once).
    pub fn step(&mut self, now: u64) -> bool {
        if self.tor_b_restart.is_some() || self.tor_b_down_until.is_some() {
            self.restart_b(now)
                .expect("ToR B starts again as it started");
        }
        let mut work = false;
        for ws in &mut self.workers {
            for w in ws.iter_mut() {
                work |= w.iterate(now);
            }
        }
        work
    }

    /// Stops both ToRs (their workers flushed on the real clock).
    pub fn stop(self) -> (Stopped, Stopped) {
        self.stop_by(None)
    }

    /// Stops both ToRs at `now` on the caller's clock.
    pub fn stop_at(self, now: u64) -> (Stopped, Stopped) {
        self.stop_by(Some(now))
    }

    fn stop_by(self, at: Option<u64>) -> (Stopped, Stopped) {
        let finish = |w: sprayswitch::worker::Worker| match at {
            Some(now) => w.finish_at(now),
            None => w.finish(),
        };
        let [wa, wb] = self.workers;
        let a = self.tor_a.stop_driven(wa.into_iter().map(finish).collect());
        let b = self.tor_b.stop_driven(wb.into_iter().map(finish).collect());
        (a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_shape_is_the_embedded_default_configuration() {
        // With path health, as the embedded configuration has it (its interval is set when
        // the rack pair is built).
        let spec = RackPairSpec {
            health_interval_us: Some(REAL_TIME_PROBE_US),
            ..RackPairSpec::default()
        };
        let generated = Config::parse(&tor_config(&spec, 1), "generated").unwrap();
        let mut embedded = Config::default_config();
        embedded.switch.seed = spec.seed + 1;
        assert_eq!(generated.ports, embedded.ports);
        assert_eq!(generated.groups, embedded.groups);
        assert_eq!(generated.routes, embedded.routes);
        assert_eq!(generated.switch.spray_policy, embedded.switch.spray_policy);
    }
}
