//! The simulated fabric: a two-tier leaf-spine whose switches are real sprayswitch instances
//! (the configuration a user would write, validated, started with their workers handed back),
//! joined by in-memory links that delay what crosses them, with hosts on the leaves.
//!
//! ```text
//!   spine 0 ... spine S-1          every spine: one port per leaf, a route to each leaf's /16
//!     |  \      /  |                (sprayswitch with reordering off: a forwarding switch)
//!   leaf 1 ...  leaf L             every leaf: H host ports, S uplinks in one group, spraying
//!   | .. |      | .. |             and reordering as the scheme says
//!   hosts       hosts              host h of leaf r: 10.r.h.2
//! ```
//!
//! Rates: every switch port is held to its rate by its egress queue (host ports at
//! `host_rate_gbps`, fabric ports at `fabric_rate_gbps`), which also marks ECN and bounds the
//! queue (`buffer_packets`); links add `link_delay_ns` each way (a spine's links their own delay
//! when `spine_delays_ns` gives one).

use std::net::{IpAddr, Ipv4Addr};

use anyhow::Context;
use serde::Deserialize;
use sprayswitch::port::fault::{FaultConfig, FaultInjector};
use sprayswitch::port::mem;
use sprayswitch::port::Port;
use sprayswitch::reorder::{DownlinkMode, LossRecovery, ReorderConfig};
use sprayswitch::switch::Switch;
use sprayswitch::tables::{ip_key, Neighbor, Role, SprayPolicy};
use sprayswitch::wire::format_mac;
use sprayswitch::worker::{IdlePolicy, Worker};
use sprayswitch_control::Config;

/// The topology file (`--topology FILE`; the embedded default is ConWeave's leaf-spine).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Leaf switches (racks).
    pub leaves: u32,
    /// Spine switches (each leaf has one uplink to each).
    pub spines: u32,
    /// Hosts per leaf.
    pub hosts_per_leaf: u32,
    /// Host links, Gbit/s.
    pub host_rate_gbps: f64,
    /// Leaf-spine links, Gbit/s.
    pub fabric_rate_gbps: f64,
    /// One-way delay of every link, ns.
    pub link_delay_ns: u64,
    /// One-way delay of the links of each spine, ns, one per spine (both of a path's
    /// leaf-spine links): paths of different lengths. Empty (the default): `link_delay_ns`.
    #[serde(default)]
    pub spine_delays_ns: Vec<u64>,
    /// Per spine, the probability that a packet crossing its path one way (leaf, spine, leaf)
    /// is lost, split evenly over the path's two links, in both directions: a lossy path.
    /// Empty (the default): no loss.
    #[serde(default)]
    pub spine_loss: Vec<f64>,
    /// Spines whose paths fail during a run: from `at_ms` (of simulated time) each of its
    /// leaf-spine links loses so that a crossing (two links) is lost with probability `loss` (1:
    /// dead), both ways, until `for_ms` later if given.
    #[serde(default)]
    pub spine_faults: Vec<SpineFault>,
    /// Path health on the leaves (each probes every other leaf over every spine and takes a
    /// failing spine out of its spray set); on by default.
    #[serde(default = "yes")]
    pub health: bool,
    /// The RoCE path MTU of the hosts' QPs, bytes (256 to 4096, a power of two; 1024 by
    /// default). Above 1024 every port's MTU is 9000 (a jumbo fabric).
    #[serde(default = "default_pmtu")]
    pub pmtu: u32,
    /// Packets each switch port's egress queue holds.
    pub buffer_packets: usize,
    /// ECN marking thresholds of every switch port, KB (1000 bytes), and Pmax.
    pub ecn_kmin_kb: f64,
    /// See `ecn_kmin_kb`.
    pub ecn_kmax_kb: f64,
    /// See `ecn_kmin_kb`.
    pub ecn_pmax: f64,
}

fn yes() -> bool {
    true
}

fn default_pmtu() -> u32 {
    1024
}

/// A spine's paths failing mid-run (see [`Topology::spine_faults`]).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SpineFault {
    /// The spine (0-based).
    pub spine: u32,
    /// When, ms of simulated time.
    pub at_ms: f64,
    /// Loss of a crossing of its path (1: dead).
    pub loss: f64,
    /// Repaired this long after (`None`: never).
    #[serde(default)]
    pub for_ms: Option<f64>,
}

impl SpineFault {
    /// `SPINE:AT_MS:LOSS[:FOR_MS]`, as `--spine-fault` takes it.
    ///
    /// # Errors
    /// A malformed value.
    pub fn parse(s: &str) -> Result<SpineFault, String> {
        let v: Vec<&str> = s.split(':').collect();
        let num = |i: usize| -> Result<f64, String> {
            v.get(i)
                .and_then(|x| x.parse::<f64>().ok())
                .ok_or_else(|| format!("spine fault '{s}': SPINE:AT_MS:LOSS[:FOR_MS]"))
        };
        if !(3..=4).contains(&v.len()) {
            return Err(format!("spine fault '{s}': SPINE:AT_MS:LOSS[:FOR_MS]"));
        }
        Ok(SpineFault {
            spine: num(0)? as u32,
            at_ms: num(1)?,
            loss: num(2)?,
            for_ms: if v.len() == 4 { Some(num(3)?) } else { None },
        })
    }

    /// Each of the spine's links' loss schedule (a crossing loses `loss`; repaired, a link
    /// loses `base` again).
    pub fn link_schedule(&self, base: f64) -> Vec<sprayswitch::port::fault::LossStep> {
        use sprayswitch::port::fault::LossStep;
        let per_link = 1.0 - (1.0 - self.loss).max(0.0).sqrt();
        let at = (self.at_ms * 1e6) as u64;
        let mut v = vec![LossStep {
            at_ns: at,
            drop_rate: per_link,
        }];
        if let Some(d) = self.for_ms {
            v.push(LossStep {
                at_ns: at + (d * 1e6) as u64,
                drop_rate: base,
            });
        }
        v
    }
}

/// The embedded default topology's text.
pub const DEFAULT_TOPOLOGY: &str = include_str!("../../sim/conweave.toml");

impl Topology {
    /// Parses and checks a topology file.
    ///
    /// # Errors
    /// A TOML error, or a field out of range (named).
    pub fn parse(text: &str) -> anyhow::Result<Topology> {
        let t: Topology = toml::from_str(text).context("topology")?;
        t.check()?;
        Ok(t)
    }

    /// Checks the fields' ranges (what [`Topology::parse`] does after reading).
    ///
    /// # Errors
    /// The first field out of range, named.
    pub fn check(&self) -> anyhow::Result<()> {
        let t = self;
        anyhow::ensure!(
            (256..=4096).contains(&t.pmtu) && t.pmtu.is_power_of_two(),
            "pmtu {}: use 256, 512, 1024, 2048 or 4096",
            t.pmtu
        );
        anyhow::ensure!(
            (2..=200).contains(&t.leaves),
            "leaves {}: use 2 to 200",
            t.leaves
        );
        anyhow::ensure!(
            (1..=64).contains(&t.spines),
            "spines {}: use 1 to 64",
            t.spines
        );
        anyhow::ensure!(
            (1..=200).contains(&t.hosts_per_leaf),
            "hosts_per_leaf {}: use 1 to 200",
            t.hosts_per_leaf
        );
        for (name, v) in [
            ("host_rate_gbps", t.host_rate_gbps),
            ("fabric_rate_gbps", t.fabric_rate_gbps),
        ] {
            anyhow::ensure!(
                v.is_finite() && v > 0.0 && v <= 1000.0,
                "{name} {v}: use above 0, at most 1000"
            );
        }
        anyhow::ensure!(
            (16..=1 << 20).contains(&t.buffer_packets),
            "buffer_packets {}: use 16 to 1048576",
            t.buffer_packets
        );
        anyhow::ensure!(
            t.link_delay_ns <= 1_000_000_000,
            "link_delay_ns {}: at most 1 s",
            t.link_delay_ns
        );
        anyhow::ensure!(
            t.spine_delays_ns.is_empty() || t.spine_delays_ns.len() == t.spines as usize,
            "spine_delays_ns: {} delays for {} spines (give one per spine, or none)",
            t.spine_delays_ns.len(),
            t.spines
        );
        if let Some(d) = t.spine_delays_ns.iter().find(|d| **d > 1_000_000_000) {
            anyhow::bail!("spine_delays_ns: {d}: at most 1 s");
        }
        anyhow::ensure!(
            t.spine_loss.is_empty() || t.spine_loss.len() == t.spines as usize,
            "spine_loss: {} values for {} spines (give one per spine, or none)",
            t.spine_loss.len(),
            t.spines
        );
        if let Some(l) = t.spine_loss.iter().find(|l| !(0.0..1.0).contains(*l)) {
            anyhow::bail!("spine_loss: {l}: from 0 to below 1");
        }
        for f in &t.spine_faults {
            anyhow::ensure!(
                f.spine < t.spines,
                "spine_faults: spine {} of {}",
                f.spine,
                t.spines
            );
            anyhow::ensure!(
                (0.0..=1.0).contains(&f.loss),
                "spine_faults: loss {}: from 0 to 1",
                f.loss
            );
            anyhow::ensure!(
                f.at_ms >= 0.0 && f.for_ms.is_none_or(|d| d >= 0.0),
                "spine_faults: times are ms from 0"
            );
        }
        anyhow::ensure!(
            t.ecn_kmin_kb >= 0.0
                && t.ecn_kmax_kb >= t.ecn_kmin_kb
                && (0.0..=1.0).contains(&t.ecn_pmax),
            "ecn: kmin <= kmax, pmax from 0 to 1"
        );
        Ok(())
    }

    /// The embedded default.
    pub fn default_topology() -> Topology {
        Topology::parse(DEFAULT_TOPOLOGY).expect("the embedded topology is valid")
    }

    /// The hosts' path MTU.
    pub fn path_mtu(&self) -> sprayswitch::wire::Pmtu {
        sprayswitch::wire::Pmtu::new(self.pmtu).unwrap_or(sprayswitch::wire::Pmtu::DEFAULT)
    }

    /// What every `[[port]]` of a switch gets for the path MTU: nothing at 1024 (the
    /// default), else a jumbo MTU and the path MTU.
    fn port_mtu(&self) -> String {
        if self.pmtu > 1024 {
            format!("mtu = 9000\npmtu = {}\n", self.pmtu)
        } else {
            String::new()
        }
    }

    /// Hosts in all.
    pub fn hosts(&self) -> u32 {
        self.leaves * self.hosts_per_leaf
    }

    /// Host link rate, bit/s.
    pub fn host_bps(&self) -> u64 {
        (self.host_rate_gbps * 1e9) as u64
    }

    /// Fabric link rate, bit/s.
    pub fn fabric_bps(&self) -> u64 {
        (self.fabric_rate_gbps * 1e9) as u64
    }

    /// One-way delay of spine `sp`'s links, ns.
    pub fn spine_delay_ns(&self, sp: u32) -> u64 {
        self.spine_delays_ns
            .get(sp as usize)
            .copied()
            .unwrap_or(self.link_delay_ns)
    }

    /// The loss probability of each of spine `sp`'s links, so that a packet crossing its path
    /// (two links) is lost with the spine's `spine_loss`.
    pub fn spine_link_loss(&self, sp: u32) -> f64 {
        let p = self.spine_loss.get(sp as usize).copied().unwrap_or(0.0);
        1.0 - (1.0 - p).sqrt()
    }

    /// The shortest one-way delay of a leaf-spine link, ns.
    pub fn shortest_spine_delay_ns(&self) -> u64 {
        (0..self.spines)
            .map(|sp| self.spine_delay_ns(sp))
            .min()
            .unwrap_or(self.link_delay_ns)
    }
}

/// How the leaves carry RoCE over their uplinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Per-flow hashing.
    Ecmp,
    /// Flowlets (50 us gap).
    Flowlet,
    /// Per-packet round robin, no reordering at the destination leaf.
    Spray,
    /// Per-packet round robin with sprayswitch's reordering.
    SprayReorder,
    /// Per-packet round robin; the destination leaf forwards at once and filters the hosts'
    /// spurious NAKs (selective-repeat receivers only).
    SprayNakFilter,
}

impl Scheme {
    /// Every scheme, in table order.
    pub const ALL: [Scheme; 5] = [
        Scheme::Ecmp,
        Scheme::Flowlet,
        Scheme::Spray,
        Scheme::SprayReorder,
        Scheme::SprayNakFilter,
    ];

    /// Whether the scheme can serve `receiver` (NAK filtering needs selective repeat).
    pub fn serves(self, receiver: sprayswitch_models::rnic::ReceiverMode) -> bool {
        self != Scheme::SprayNakFilter || receiver != sprayswitch_models::rnic::ReceiverMode::Gbn
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Ecmp => "ecmp",
            Scheme::Flowlet => "flowlet",
            Scheme::Spray => "spray",
            Scheme::SprayReorder => "spray+reorder",
            Scheme::SprayNakFilter => "spray+nak_filter",
        }
    }

    /// By name.
    ///
    /// # Errors
    /// An unknown name.
    pub fn parse(s: &str) -> Result<Scheme, String> {
        Scheme::ALL
            .into_iter()
            .find(|x| x.name() == s || (s == "spray_reorder" && *x == Scheme::SprayReorder))
            .ok_or_else(|| {
                format!("scheme '{s}': use ecmp, flowlet, spray, spray+reorder or spray+nak_filter")
            })
    }

    fn policy(self) -> SprayPolicy {
        match self {
            Scheme::Ecmp => SprayPolicy::Ecmp,
            Scheme::Flowlet => SprayPolicy::Flowlet,
            Scheme::Spray | Scheme::SprayReorder | Scheme::SprayNakFilter => {
                SprayPolicy::RoundRobin
            }
        }
    }
}

/// The leaves' reorder settings (with spray + reorder).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeafReorder {
    /// The reorder stage's settings.
    pub config: ReorderConfig,
    /// What a declared loss releases towards the hosts (as a downlink towards such RNICs is
    /// configured: `nak_first` for Go-Back-N, `release_run` for selective repeat).
    pub recovery: LossRecovery,
}

impl LeafReorder {
    /// The default reorder settings, with the recovery a downlink towards `r` is configured
    /// with.
    pub fn towards(r: sprayswitch_models::rnic::ReceiverMode) -> LeafReorder {
        LeafReorder {
            // Leaf `r`'s hosts are 10.r.0.0/16 ([`host_ip`]): their stamps one sequence.
            config: ReorderConfig {
                stamp_source_prefix: (16, 32),
                ..ReorderConfig::default()
            },
            recovery: r.loss_recovery(),
        }
    }
}

/// A host of the simulated fabric: its NIC's end of the link to its leaf.
pub struct SimHost {
    /// Towards the leaf (the link's delay applied on the way out).
    pub port: Box<dyn Port>,
    /// MAC.
    pub mac: [u8; 6],
    /// Address.
    pub ip: Ipv4Addr,
    /// Its leaf port's MAC.
    pub gw_mac: [u8; 6],
}

/// The running fabric.
pub struct Fabric {
    /// Leaves then spines, each with its workers.
    pub switches: Vec<(Switch, Vec<Worker>)>,
    /// Every host, leaf by leaf.
    pub hosts: Vec<SimHost>,
}

fn leaf_mac(leaf: u32, kind: u8, i: u32) -> [u8; 6] {
    [0x02, 0x5a, leaf as u8, kind, (i >> 8) as u8, i as u8]
}

fn spine_mac(spine: u32, leaf: u32) -> [u8; 6] {
    [0x02, 0x5b, spine as u8, 1, (leaf >> 8) as u8, leaf as u8]
}

/// Host `h` (1-based) of leaf `r` (1-based).
pub fn host_ip(r: u32, h: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, r as u8, h as u8, 2)
}

/// The configuration text of leaf `r` (1-based).
fn leaf_config(t: &Topology, r: u32, scheme: Scheme) -> String {
    let mut s = format!(
        "[switch]\nname = \"leaf-{r}\"\nspray_policy = \"{}\"\nseed = {r}\nidle = \"spin\"\n",
        scheme.policy().name()
    );
    for h in 1..=t.hosts_per_leaf {
        s += &format!(
            "[[port]]\nname = \"h{h}\"\nrole = \"downlink\"\nmac = \"{}\"\naddresses = [\"10.{r}.{h}.1/24\"]\n{}",
            format_mac(leaf_mac(r, 1, h)),
            t.port_mtu()
        );
    }
    let mut members = Vec::new();
    for sp in 0..t.spines {
        s += &format!(
            "[[port]]\nname = \"u{sp}\"\nrole = \"uplink\"\nmac = \"{}\"\npeer_mac = \"{}\"\n{}",
            format_mac(leaf_mac(r, 2, sp)),
            format_mac(spine_mac(sp, r)),
            t.port_mtu()
        );
        members.push(format!("\"u{sp}\""));
    }
    s += &format!(
        "[[uplink_group]]\nname = \"fabric\"\nports = [{}]\nloss_detection = \"path_order\"\npath_stamps = true\n",
        members.join(", ")
    );
    if t.health {
        // Every other leaf, by its first address (10.<leaf>.1.1, which it probes from).
        let peers: Vec<String> = (1..=t.leaves)
            .filter(|q| *q != r)
            .map(|q| format!("\"10.{q}.1.1\""))
            .collect();
        s += &format!("health = {{ peers = [{}] }}\n", peers.join(", "));
    }
    s += "[[route]]\nprefix = \"10.0.0.0/8\"\ngroup = \"fabric\"\n";
    s
}

/// The configuration text of spine `sp` (0-based).
fn spine_config(t: &Topology, sp: u32) -> String {
    let mut s = format!(
        "[switch]\nname = \"spine-{sp}\"\nseed = {}\nidle = \"spin\"\n[reorder]\nenabled = false\n",
        1000 + sp
    );
    for r in 1..=t.leaves {
        s += &format!(
            "[[port]]\nname = \"l{r}\"\nrole = \"uplink\"\nmac = \"{}\"\npeer_mac = \"{}\"\n{}[[uplink_group]]\nname = \"to-l{r}\"\nports = [\"l{r}\"]\nloss_detection = \"timeout\"\n[[route]]\nprefix = \"10.{r}.0.0/16\"\ngroup = \"to-l{r}\"\n",
            format_mac(spine_mac(sp, r)),
            format_mac(leaf_mac(r, 2, sp)),
            t.port_mtu()
        );
    }
    s
}

/// The largest frame the hosts send beyond its payload (headers, RETH, ICRC): a path MTU's
/// worth more.
const FRAME_OVERHEAD: f64 = 14.0 + 20.0 + 8.0 + 12.0 + 16.0 + 4.0;

fn delayed(p: mem::MemPort, delay_ns: u64, capacity: usize, seed: u64) -> Box<dyn Port> {
    lossy(p, delay_ns, 0.0, capacity, seed)
}

fn lossy(
    p: mem::MemPort,
    delay_ns: u64,
    drop_rate: f64,
    capacity: usize,
    seed: u64,
) -> Box<dyn Port> {
    scheduled(p, delay_ns, drop_rate, Vec::new(), capacity, seed)
}

fn scheduled(
    p: mem::MemPort,
    delay_ns: u64,
    drop_rate: f64,
    drop_schedule: Vec<sprayswitch::port::fault::LossStep>,
    capacity: usize,
    seed: u64,
) -> Box<dyn Port> {
    Box::new(FaultInjector::new(
        p,
        FaultConfig {
            delay_ns,
            drop_rate,
            drop_schedule,
            queue_limit: capacity,
            seed,
            ..FaultConfig::default()
        },
    ))
}

impl Fabric {
    /// Builds and starts the fabric of `t` for `scheme`, to be stepped every `step_ns` (the
    /// switches flush every iteration: in virtual time nothing waits for a deadline). Every
    /// switch port is a link: its egress queue lets through at most one frame and a step's
    /// worth of its rate back to back after an idle spell (a link serialises what it sends;
    /// the default 64 KB, room for a real worker's visits, would let an idle 100 Gbit/s port
    /// send 5 us of traffic at once).
    ///
    /// # Errors
    /// When a generated configuration does not validate (a bug) or a switch does not start.
    pub fn start(
        t: &Topology,
        scheme: Scheme,
        step_ns: u64,
        leaf: &LeafReorder,
    ) -> anyhow::Result<Fabric> {
        let max_frame = f64::from(t.pmtu) + FRAME_OVERHEAD;
        let burst = |bps: u64| (max_frame + bps as f64 * step_ns as f64 / 8e9).ceil() as u32;
        let cap = (t.buffer_packets * 2).max(4096);
        let mut leaf_ports: Vec<Vec<Box<dyn Port>>> = Vec::new();
        let mut spine_ports: Vec<Vec<Option<Box<dyn Port>>>> = (0..t.spines)
            .map(|_| (0..t.leaves).map(|_| None).collect())
            .collect();
        let mut hosts = Vec::new();
        let mut seed = 1u64;
        let mut next_seed = || {
            seed += 1;
            seed
        };
        for r in 1..=t.leaves {
            let mut ports: Vec<Box<dyn Port>> = Vec::new();
            for h in 1..=t.hosts_per_leaf {
                let (host_end, leaf_end) =
                    mem::link(&format!("host{r}-{h}"), &format!("h{h}"), cap);
                ports.push(delayed(leaf_end, t.link_delay_ns, cap, next_seed()));
                hosts.push(SimHost {
                    port: delayed(host_end, t.link_delay_ns, cap, next_seed()),
                    mac: leaf_mac(r, 3, h),
                    ip: host_ip(r, h),
                    gw_mac: leaf_mac(r, 1, h),
                });
            }
            for sp in 0..t.spines {
                let (leaf_end, spine_end) = mem::link(&format!("u{sp}"), &format!("l{r}"), cap);
                let (d, l) = (t.spine_delay_ns(sp), t.spine_link_loss(sp));
                let mut sched: Vec<_> = t
                    .spine_faults
                    .iter()
                    .filter(|f| f.spine == sp)
                    .flat_map(|f| f.link_schedule(l))
                    .collect();
                sched.sort_by_key(|s| s.at_ns);
                ports.push(scheduled(leaf_end, d, l, sched.clone(), cap, next_seed()));
                spine_ports[sp as usize][(r - 1) as usize] =
                    Some(scheduled(spine_end, d, l, sched, cap, next_seed()));
            }
            leaf_ports.push(ports);
        }
        let ecn = sprayswitch::egress::EcnProfile {
            kmin_bytes: (t.ecn_kmin_kb * 1000.0) as u64,
            kmax_bytes: (t.ecn_kmax_kb * 1000.0) as u64,
            pmax: t.ecn_pmax,
        };
        let mut switches = Vec::new();
        for (i, ports) in leaf_ports.into_iter().enumerate() {
            let r = i as u32 + 1;
            let cfg = Config::parse(&leaf_config(t, r, scheme), &format!("leaf-{r}"))?;
            let mut v = cfg.validate().with_context(|| format!("leaf {r}"))?;
            for (k, p) in v.tables.ports.iter_mut().enumerate() {
                let rate = if k < t.hosts_per_leaf as usize {
                    t.host_bps()
                } else {
                    t.fabric_bps()
                };
                p.rate_bps = Some(rate);
                p.rate_burst_bytes = Some(burst(rate));
                p.ecn = Some(ecn);
            }
            for h in 1..=t.hosts_per_leaf {
                let n = Neighbor {
                    mac: leaf_mac(r, 3, h),
                    port: (h - 1) as u16,
                };
                v.tables
                    .neighbors
                    .insert(ip_key(IpAddr::V4(host_ip(r, h))), n);
            }
            v.reorder = matches!(scheme, Scheme::SprayReorder | Scheme::SprayNakFilter)
                .then_some(leaf.config);
            for (p, info) in v.port_reorder.iter_mut().zip(&v.tables.ports) {
                p.recovery = leaf.recovery;
                if scheme == Scheme::SprayNakFilter && info.role == Role::Downlink {
                    p.mode = DownlinkMode::NakFilter;
                }
            }
            v.run.worker.idle = IdlePolicy::Spin;
            v.run.worker.flush_ns = 0;
            v.run.worker.tx_queue_limit = t.buffer_packets;
            switches.push(v.start_driven(ports)?);
        }
        for (sp, ports) in spine_ports.into_iter().enumerate() {
            let cfg = Config::parse(&spine_config(t, sp as u32), &format!("spine-{sp}"))?;
            let mut v = cfg.validate().with_context(|| format!("spine {sp}"))?;
            for p in &mut v.tables.ports {
                p.rate_bps = Some(t.fabric_bps());
                p.rate_burst_bytes = Some(burst(t.fabric_bps()));
                p.ecn = Some(ecn);
            }
            v.run.worker.idle = IdlePolicy::Spin;
            v.run.worker.flush_ns = 0;
            v.run.worker.tx_queue_limit = t.buffer_packets;
            let ports: Vec<Box<dyn Port>> = ports.into_iter().flatten().collect();
            switches.push(v.start_driven(ports)?);
        }
        Ok(Fabric { switches, hosts })
    }

    /// One loop iteration of every switch's workers at `now`.
    pub fn step(&mut self, now: u64) {
        for (_, ws) in &mut self.switches {
            for w in ws.iter_mut() {
                w.iterate(now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_topology_is_conweaves_leaf_spine_and_its_configurations_validate() {
        let t = Topology::default_topology();
        assert_eq!((t.leaves, t.spines, t.hosts_per_leaf), (8, 8, 16));
        assert_eq!(t.hosts(), 128);
        // 2:1 oversubscription.
        assert!(
            (f64::from(t.hosts_per_leaf) * t.host_rate_gbps
                / (f64::from(t.spines) * t.fabric_rate_gbps)
                - 2.0)
                .abs()
                < 1e-9
        );
        Config::parse(&leaf_config(&t, 1, Scheme::SprayReorder), "leaf")
            .unwrap()
            .validate()
            .unwrap();
        Config::parse(&spine_config(&t, 0), "spine")
            .unwrap()
            .validate()
            .unwrap();
        assert!(Topology::parse("leaves = 1\nspines = 1\nhosts_per_leaf = 1\nhost_rate_gbps = 1\nfabric_rate_gbps = 1\nlink_delay_ns = 1\nbuffer_packets = 100\necn_kmin_kb = 1\necn_kmax_kb = 2\necn_pmax = 0.1\n").is_err());
        assert_eq!(Scheme::parse("spray+reorder"), Ok(Scheme::SprayReorder));
        assert!(Scheme::parse("conga").is_err());
    }
}
