//! Validation, section by section: each check reports the first problem as `field: reason`
//! and builds its part of the dataplane's view.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::PathBuf;

use sprayswitch::egress::EcnProfile;
use sprayswitch::reorder::{DownlinkMode, LossRecovery, PortReorder, ReorderConfig};
use sprayswitch::switch::RunConfig;
use sprayswitch::tables::{
    ip_key, LossDetection, Neighbor, PortInfo, Prefix, Role, RouteTarget, SprayPolicy, Tables,
    UplinkGroup,
};
use sprayswitch::wire::Pmtu;
use sprayswitch::worker::{IdlePolicy, WorkerConfig};

use super::choice::{BackendKind, RnicKind};
use super::keys::{
    BURST, BUSY_POLL_US, DEFAULT_DPDK_MBUFS, DEFAULT_PACE, DEFAULT_PATH_STAMPS, DEFAULT_QUEUES,
    DEFAULT_RING_SIZE, DEFAULT_RX_BUFFERS, DEFAULT_XDP_MODE, DETECT_INTERVALS, DPDK_MBUFS, ECN_KB,
    FAST_LOSS_OUT, FILL_RING_MAX, GROUP_WEIGHT, HEALTH_INTERVAL_US, HOLD_TIMEOUT_US, LOSS_OUT, MTU,
    PATH_STAMP_LANES, QUEUES, RATE_GBPS, RESTORE_MS, RING_SIZE, RX_BUFFERS, WORKERS,
};
use super::{
    err, parse_mac, Backend, Config, ConfigError, DpdkRun, DpdkSection, EcnSetting, GroupSection,
    NeighborSection, PortSection, RealKind, ReorderSection, RouteSection, SwitchSection, Validated,
};

impl Config {
    /// Checks everything and builds the dataplane's view of it.
    ///
    /// # Errors
    /// The first problem found, naming its field.
    pub fn validate(&self) -> Result<Validated, ConfigError> {
        let s = &self.switch;
        let (idle, policy) = s.validate()?;
        if self.ports.is_empty() {
            return err("port", "no ports configured");
        }
        let ports = validate_ports(&self.ports, s.workers, s.ecn.as_ref())?;
        let mut t = Tables::new(ports.infos);
        t.policy = policy;
        t.flowlet_gap_ns = s.flowlet_gap_us.saturating_mul(1000);
        if !PATH_STAMP_LANES.admits(s.path_stamp_lanes as u64) {
            return err(
                "switch.path_stamp_lanes",
                format!("{}: use {PATH_STAMP_LANES}", s.path_stamp_lanes),
            );
        }
        t.stamp_lane_bits = s.path_stamp_lanes.trailing_zeros() as u8;
        validate_groups(&self.groups, &self.ports, &ports.names, s, &mut t)?;
        validate_routes(&self.routes, &mut t)?;
        validate_health(&self.groups, &mut t)?;
        validate_neighbors(&self.neighbors, &mut t)?;
        let rcfg = self.reorder.validate()?;
        let port_reorder = port_reorder(&self.ports, &self.reorder)?;
        let dpdk = self.dpdk.validate(&ports.backends)?;
        let run = RunConfig {
            workers: s.workers,
            assignment: Some(ports.assigned),
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
            backends: ports.backends,
            reorder: self.reorder.enabled.then_some(rcfg),
            port_reorder,
            dpdk,
        })
    }
}

impl DpdkSection {
    /// `[dpdk]`: what EAL gets, when some port uses DPDK; a `[dpdk]` without one is an error
    /// (a forgotten `backend = "dpdk"` would otherwise go unnoticed).
    fn validate(&self, backends: &[Backend]) -> Result<Option<DpdkRun>, ConfigError> {
        let used = backends.iter().any(|b| matches!(b, Backend::Dpdk { .. }));
        if !used {
            if self != &DpdkSection::default() {
                return err("dpdk", "no port has backend = \"dpdk\"");
            }
            return Ok(None);
        }
        let mbufs = self.mbufs.unwrap_or(DEFAULT_DPDK_MBUFS);
        if !DPDK_MBUFS.admits(u64::from(mbufs)) {
            return err(
                "dpdk.mbufs",
                format!("{mbufs}: use {DPDK_MBUFS} (every queue's rings must fill)"),
            );
        }
        // Each port's pool fills its receive rings and a transmit ring and keeps 1024 for what
        // the switch holds (the port checks it exactly, with DPDK's pool caches, when it opens).
        for b in backends {
            if let Backend::Dpdk { queues, ring, .. } = b {
                let need = (u64::from(*queues) + 1) * u64::from(*ring) + 1024;
                if u64::from(mbufs) < need {
                    return err(
                        "dpdk.mbufs",
                        format!(
                            "{mbufs}: a port of {queues} queue(s) with rings of {ring} needs more \
                             than {need}"
                        ),
                    );
                }
            }
        }
        if let Some(a) = self.eal_args.iter().find(|a| a.contains('\0')) {
            return err("dpdk.eal_args", format!("{a:?} holds a NUL byte"));
        }
        // EAL prints its usage and exits the process on these; single-producer pool ops would
        // break mbufs freed by other workers.
        if let Some(a) = self.eal_args.iter().find(|a| {
            matches!(a.as_str(), "-h" | "--help") || a.starts_with("--mbuf-pool-ops-name")
        }) {
            return err(
                "dpdk.eal_args",
                format!("{a}: not for a switch (help exits the process; the pools need DPDK's default multi-producer ring)"),
            );
        }
        Ok(Some(DpdkRun {
            eal_args: self.eal_args.clone(),
            mbufs,
        }))
    }
}

impl SwitchSection {
    /// `[switch]`: worker count, cores, idle policy, burst and queue limits, spray policy.
    fn validate(&self) -> Result<(IdlePolicy, SprayPolicy), ConfigError> {
        if !WORKERS.admits(self.workers as u64) {
            return err(
                "switch.workers",
                format!("{} workers: use {WORKERS}", self.workers),
            );
        }
        if let Some(cores) = &self.cores {
            if cores.len() < self.workers {
                return err(
                    "switch.cores",
                    format!("{} cores listed for {} workers", cores.len(), self.workers),
                );
            }
        }
        let idle = IdlePolicy::from_name(&self.idle, self.idle_sleep_us).map_err(|reason| {
            ConfigError {
                field: "switch.idle".into(),
                reason,
            }
        })?;
        if !BURST.admits(self.burst as u64) {
            return err("switch.burst", format!("{}: use {BURST}", self.burst));
        }
        if self.tx_queue_limit < self.burst {
            return err(
                "switch.tx_queue_limit",
                format!(
                    "{} is smaller than the burst ({})",
                    self.tx_queue_limit, self.burst
                ),
            );
        }
        let policy = self.spray_policy.get(|| "switch.spray_policy".into())?;
        Ok((idle, policy))
    }
}

/// What the `[[port]]` sections give the rest of validation.
struct Ports<'a> {
    /// Index of each port by name.
    names: HashMap<&'a str, usize>,
    infos: Vec<PortInfo>,
    backends: Vec<Backend>,
    /// Worker of each port.
    assigned: Vec<usize>,
}

/// The marking profile of a port: its own `ecn` setting, else the switch's (`None`: no
/// marking). `for_rate` needs the port's rate.
fn ecn_profile(
    own: Option<&EcnSetting>,
    switch: Option<&EcnSetting>,
    rate_bps: Option<u64>,
    field: &str,
) -> Result<Option<EcnProfile>, ConfigError> {
    let (setting, field) = match (own, switch) {
        (Some(s), _) => (s, field.to_string()),
        (None, Some(s)) => (s, "switch.ecn".to_string()),
        (None, None) => return Ok(None),
    };
    match setting {
        EcnSetting::Word(w) if w == "off" => Ok(None),
        EcnSetting::Word(w) if w == "for_rate" => match rate_bps {
            Some(r) => Ok(Some(EcnProfile::for_rate(r))),
            None => err(field, "'for_rate' needs the port's rate_gbps"),
        },
        EcnSetting::Word(w) => err(
            field,
            format!("'{w}': use 'off', 'for_rate' or {{ kmin_kb, kmax_kb, pmax }}"),
        ),
        EcnSetting::Thresholds(t) => {
            let kb = |v: f64, name: &str| {
                if ECN_KB.admits(v) {
                    Ok((v * 1000.0) as u64)
                } else {
                    err(format!("{field}.{name}"), format!("{v}: use {ECN_KB} KB"))
                }
            };
            let p = EcnProfile {
                kmin_bytes: kb(t.kmin_kb, "kmin_kb")?,
                kmax_bytes: kb(t.kmax_kb, "kmax_kb")?,
                pmax: t.pmax,
            };
            p.check().map_err(|reason| ConfigError {
                field: field.clone(),
                reason,
            })?;
            Ok(Some(p))
        }
    }
}

fn validate_ports<'a>(
    ports: &'a [PortSection],
    workers: usize,
    switch_ecn: Option<&EcnSetting>,
) -> Result<Ports<'a>, ConfigError> {
    let mut out = Ports {
        names: HashMap::new(),
        infos: Vec::new(),
        backends: Vec::new(),
        assigned: Vec::new(),
    };
    // Every address given so far: (prefix, address, field), for overlaps between ports.
    let mut addrs: Vec<(Prefix, IpAddr, String)> = Vec::new();
    for (i, p) in ports.iter().enumerate() {
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
        if let Some(j) = out.names.insert(&p.name, i) {
            return err(
                f("name"),
                format!("duplicate name '{}' (also port[{j}])", p.name),
            );
        }
        let mut info = p.info(&f, &mut addrs)?;
        info.ecn = ecn_profile(p.ecn.as_ref(), switch_ecn, info.rate_bps, &f("ecn"))?;
        if let Some(w) = p.worker {
            if w >= workers {
                return err(
                    f("worker"),
                    format!("worker {w} does not exist ({workers} workers)"),
                );
            }
        }
        out.assigned.push(p.worker.unwrap_or(i % workers));
        let backend = p.backend(&f, &out.backends, ports)?;
        out.backends.push(backend);
        out.infos.push(info);
    }
    Ok(out)
}

impl PortSection {
    /// The port's forwarding facts: role, MAC, MTUs, rate, peer, addresses (each checked against
    /// those of the ports before it, `addrs`).
    fn info(
        &self,
        f: &impl Fn(&str) -> String,
        addrs: &mut Vec<(Prefix, IpAddr, String)>,
    ) -> Result<PortInfo, ConfigError> {
        let role = self.role.get(|| f("role"))?;
        let mac = parse_mac(&self.mac).map_err(|r| ConfigError {
            field: f("mac"),
            reason: r,
        })?;
        if mac[0] & 1 == 1 || mac == [0; 6] {
            return err(f("mac"), format!("'{}' is not a unicast address", self.mac));
        }
        if !MTU.admits(u64::from(self.mtu)) {
            return err(f("mtu"), format!("{}: use {MTU}", self.mtu));
        }
        let pmtu = match self.pmtu {
            Some(v) => Pmtu::new(v).map_err(|v| ConfigError {
                field: f("pmtu"),
                reason: format!("{v}: use 256, 512, 1024, 2048 or 4096"),
            })?,
            None => Pmtu::for_ethernet_mtu(u32::from(self.mtu))
                .unwrap_or(Pmtu::new(256).unwrap_or_default()),
        };
        let rate_bps = match self.rate_gbps {
            Some(g) if RATE_GBPS.admits(g) => Some((g * 1e9) as u64),
            Some(g) => return err(f("rate_gbps"), format!("{g}: use a rate {RATE_GBPS}")),
            None => None,
        };
        let peer_mac = match &self.peer_mac {
            Some(m) => Some(parse_mac(m).map_err(|r| ConfigError {
                field: f("peer_mac"),
                reason: r,
            })?),
            None => None,
        };
        let mut port_addrs = Vec::new();
        for (k, a) in self.addresses.iter().enumerate() {
            let field = f(&format!("addresses[{k}]"));
            let (ip, len) = parse_host_prefix(a).map_err(|r| ConfigError {
                field: field.clone(),
                reason: r,
            })?;
            let pre = Prefix::new(ip, len).map_err(|_| ConfigError {
                field: field.clone(),
                reason: "bad prefix".into(),
            })?;
            for (other, other_ip, other_field) in addrs.iter() {
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
        Ok(PortInfo {
            name: self.name.clone(),
            mac,
            role,
            mtu: self.mtu,
            pmtu,
            pmtu_fixed: self.pmtu.is_some(),
            rate_burst_bytes: None,
            rate_bps,
            ecn: None,
            peer_mac,
            addresses: port_addrs,
            admin_up: true,
            path_pin: Default::default(),
        })
    }

    /// How the port is realised; `before`: the backends of the ports before it (an interface
    /// serves one port), `ports`: every port section (to name the other user).
    fn backend(
        &self,
        f: &impl Fn(&str) -> String,
        before: &[Backend],
        ports: &[PortSection],
    ) -> Result<Backend, ConfigError> {
        let kind = self.backend.get(|| f("backend"))?;
        let backend = match kind {
            BackendKind::Mem => Backend::Mem,
            BackendKind::Pcap => {
                if self.pcap_in.is_none() && self.pcap_out.is_none() {
                    return err(f("backend"), "a pcap port needs pcap_in, pcap_out or both");
                }
                let pace = match &self.pace {
                    None => DEFAULT_PACE,
                    Some(c) => c.get(|| f("pace"))?,
                };
                Backend::Pcap {
                    input: self.pcap_in.as_ref().map(PathBuf::from),
                    output: self.pcap_out.as_ref().map(PathBuf::from),
                    pace,
                }
            }
            BackendKind::AfXdp | BackendKind::AfPacket | BackendKind::Auto => {
                self.real_backend(kind, f, before, ports)?
            }
            BackendKind::Dpdk => self.dpdk_backend(f, before, ports)?,
        };
        if self.device.is_some() && kind != BackendKind::Dpdk {
            return err(f("device"), "device needs backend = \"dpdk\"");
        }
        let interface = self.interface.is_some().then_some("interface");
        if self.rx_buffers.is_some() && !kind.is_real() {
            return err(
                f("rx_buffers"),
                if kind == BackendKind::Dpdk {
                    "DPDK ports receive into their pools of [dpdk] mbufs"
                } else {
                    "rx_buffers needs a real backend (af_packet, af_xdp or auto)"
                },
            );
        }
        if kind == BackendKind::Dpdk {
            let xdp_only = [
                ("xdp_mode", self.xdp_mode.is_some()),
                ("fill_ring_size", self.fill_ring_size.is_some()),
                ("busy_poll_us", self.busy_poll_us.is_some()),
            ]
            .into_iter()
            .find_map(|(name, set)| set.then_some(name));
            if let Some(field) = interface.or(xdp_only) {
                return err(
                    f(field),
                    "a DPDK port names its device (device = ...), not an interface, an XDP mode, \
                     a fill ring or busy polling",
                );
            }
        } else if !kind.is_real() {
            let queues = self.queues.is_some().then_some("queues");
            if let Some(field) = interface.or(queues).or(self.xdp_field()) {
                return err(
                    f(field),
                    "interface, queues, xdp_mode, ring_size, fill_ring_size and busy_poll_us need \
                     a real backend (af_xdp or auto; af_packet takes only interface and \
                     rx_buffers; dpdk queues and ring_size)",
                );
            }
        }
        if (self.pcap_in.is_some() || self.pcap_out.is_some() || self.pace.is_some())
            && kind != BackendKind::Pcap
        {
            return err(
                f("backend"),
                "pcap_in, pcap_out and pace need backend = \"pcap\"",
            );
        }
        Ok(backend)
    }

    /// The first field set that only AF_XDP ports take, if any.
    fn xdp_field(&self) -> Option<&'static str> {
        [
            ("xdp_mode", self.xdp_mode.is_some()),
            ("ring_size", self.ring_size.is_some()),
            ("fill_ring_size", self.fill_ring_size.is_some()),
            ("busy_poll_us", self.busy_poll_us.is_some()),
        ]
        .into_iter()
        .find_map(|(name, set)| set.then_some(name))
    }

    /// The ring size of an AF_XDP or DPDK port.
    fn ring_size(&self, f: &impl Fn(&str) -> String) -> Result<u32, ConfigError> {
        let ring = self.ring_size.unwrap_or(DEFAULT_RING_SIZE);
        if !RING_SIZE.admits(u64::from(ring)) {
            return err(f("ring_size"), format!("{ring}: {RING_SIZE}"));
        }
        Ok(ring)
    }

    /// The queues of an AF_XDP or DPDK port.
    fn queue_count(&self, f: &impl Fn(&str) -> String) -> Result<u32, ConfigError> {
        let queues = self.queues.unwrap_or(DEFAULT_QUEUES);
        if !QUEUES.admits(u64::from(queues)) {
            return err(f("queues"), format!("{queues} queues: use {QUEUES}"));
        }
        Ok(queues)
    }

    /// A DPDK port: its device and queues.
    fn dpdk_backend(
        &self,
        f: &impl Fn(&str) -> String,
        before: &[Backend],
        ports: &[PortSection],
    ) -> Result<Backend, ConfigError> {
        let Some(device) = self.device.clone() else {
            return err(
                f("device"),
                "a DPDK port needs device = a PCI address, a vdev name or a vdev's devargs",
            );
        };
        let name = device.split(',').next().unwrap_or_default();
        if name.is_empty() || device.contains(['\0', ' ']) {
            return err(f("device"), format!("{device:?} is not a device name"));
        }
        if let Some(j) = before.iter().position(|b| {
            matches!(b, Backend::Dpdk { device: other, .. }
                if other.split(',').next() == Some(name))
        }) {
            return err(
                f("device"),
                format!("{name} is already used by port '{}'", ports[j].name),
            );
        }
        let queues = self.queue_count(f)?;
        let ring = self.ring_size(f)?;
        Ok(Backend::Dpdk {
            device,
            queues,
            ring: ring as u16,
        })
    }

    /// An AF_XDP or AF_PACKET port: its interface, queues and XDP hook.
    fn real_backend(
        &self,
        kind: BackendKind,
        f: &impl Fn(&str) -> String,
        before: &[Backend],
        ports: &[PortSection],
    ) -> Result<Backend, ConfigError> {
        let interface = self.interface.clone().unwrap_or_else(|| self.name.clone());
        if interface.is_empty() || interface.len() > 15 || interface.contains(['/', ' ', '\0']) {
            return err(
                f("interface"),
                format!(
                    "'{interface}' is not an interface name (1-15 characters, no '/' or spaces)"
                ),
            );
        }
        if let Some(j) = before.iter().position(
            |b| matches!(b, Backend::Real { interface: other, .. } if *other == interface),
        ) {
            return err(
                f("interface"),
                format!("{interface} is already used by port '{}'", ports[j].name),
            );
        }
        let queues = self.queue_count(f)?;
        let xdp_mode = match &self.xdp_mode {
            None => DEFAULT_XDP_MODE,
            Some(c) => c.get(|| f("xdp_mode"))?,
        };
        if kind == BackendKind::AfPacket && (self.queues.is_some() || self.xdp_field().is_some()) {
            return err(
                f("backend"),
                "queues, xdp_mode, ring_size, fill_ring_size and busy_poll_us apply to AF_XDP \
                 (backend 'af_xdp' or 'auto')",
            );
        }
        let ring = self.ring_size(f)?;
        let fill = self.fill_ring_size.unwrap_or(2 * ring);
        if !fill.is_power_of_two() || fill < ring || fill > FILL_RING_MAX {
            return err(
                f("fill_ring_size"),
                format!(
                    "{fill}: a power of two from ring_size ({ring}) to {FILL_RING_MAX} (a fill \
                     ring smaller than the receive ring drops frames when the receive ring is \
                     full)"
                ),
            );
        }
        if let Some(us) = self.busy_poll_us {
            if !BUSY_POLL_US.admits(u64::from(us)) {
                return err(f("busy_poll_us"), format!("{us}: use {BUSY_POLL_US}"));
            }
        }
        let rx_buffers = self.rx_buffers.unwrap_or(DEFAULT_RX_BUFFERS);
        if !RX_BUFFERS.admits(u64::from(rx_buffers)) {
            return err(f("rx_buffers"), format!("{rx_buffers}: use {RX_BUFFERS}"));
        }
        Ok(Backend::Real {
            kind: match kind {
                BackendKind::AfXdp => RealKind::AfXdp,
                BackendKind::AfPacket => RealKind::AfPacket,
                _ => RealKind::Auto,
            },
            interface,
            queues,
            xdp_mode,
            rings: (ring, fill),
            busy_poll_us: self.busy_poll_us,
            rx_buffers,
        })
    }
}

fn validate_groups(
    groups: &[GroupSection],
    port_sections: &[PortSection],
    port_names: &HashMap<&str, usize>,
    switch: &SwitchSection,
    t: &mut Tables,
) -> Result<(), ConfigError> {
    let mut group_names = HashSet::new();
    for (i, g) in groups.iter().enumerate() {
        let f = |x: &str| format!("uplink_group[{i}].{x}");
        if g.name.is_empty() || !group_names.insert(g.name.as_str()) {
            return err(f("name"), format!("'{}' is empty or used twice", g.name));
        }
        if port_names.contains_key(g.name.as_str()) {
            return err(f("name"), format!("'{}' is also a port name", g.name));
        }
        if g.ports.is_empty() {
            return err(f("ports"), "a group needs at least one uplink");
        }
        let mut members = Vec::new();
        for (k, pn) in g.ports.iter().enumerate() {
            let field = f(&format!("ports[{k}]"));
            let Some(&pi) = port_names.get(pn.as_str()) else {
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
            Some(w) if w.iter().any(|x| !GROUP_WEIGHT.admits(u64::from(*x))) => {
                return err(f("weights"), format!("weights must be {GROUP_WEIGHT}"))
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
        let loss_detection = match &g.loss_detection {
            Some(c) => c.get(|| f("loss_detection"))?,
            None => LossDetection::default(),
        };
        let path_stamps = g.path_stamps.unwrap_or(DEFAULT_PATH_STAMPS);
        if path_stamps && loss_detection != LossDetection::PathOrder {
            return err(
                f("path_stamps"),
                "path stamps need loss_detection = \"path_order\"",
            );
        }
        let (workers, lanes) = (switch.workers, switch.path_stamp_lanes);
        if path_stamps && workers > 8 {
            return err(
                f("path_stamps"),
                format!("{workers} workers: path stamps tell at most 8 workers' counters apart"),
            );
        }
        if path_stamps && workers > lanes {
            // Each worker stamps with its own counter, named by the stamp's lane.
            return err(
                f("path_stamps"),
                format!(
                    "{workers} workers stamp with {workers} counters: set switch.path_stamp_lanes \
                     to at least that (1, 2, 4 or 8; the same on every ToR of the fabric)"
                ),
            );
        }
        if path_stamps {
            // Several receive queues are polled in turn: packets of different QPs of one
            // member may be taken out of the order they came in, and a stamp would vouch for
            // a packet still in another queue.
            for m in &members {
                let queues = port_sections.get(usize::from(*m)).and_then(|p| p.queues);
                if queues.is_some_and(|q| q > 1) {
                    return err(
                        f("path_stamps"),
                        format!(
                            "port '{}' has {} receive queues: path stamps need one per member",
                            t.ports[usize::from(*m)].name,
                            queues.unwrap_or(1)
                        ),
                    );
                }
            }
        }
        t.groups.push(UplinkGroup {
            name: g.name.clone(),
            ports: members,
            weights,
            loss_detection,
            path_stamps,
            // Checked once the routes are known (its peers must be routed over the group).
            health: None,
        });
    }
    Ok(())
}

/// `uplink_group[i].health`, once ports, groups and routes are known: each peer is routed over
/// its group, a source address of its family exists, the numbers are in range.
fn validate_health(groups: &[GroupSection], t: &mut Tables) -> Result<(), ConfigError> {
    for (i, g) in groups.iter().enumerate() {
        let Some(h) = &g.health else { continue };
        let f = |x: &str| format!("uplink_group[{i}].health.{x}");
        if h.peers.is_empty() {
            return err(f("peers"), "list at least one peer ToR's address");
        }
        if h.peers.len() > sprayswitch::health::MAX_PEERS {
            return err(
                f("peers"),
                format!(
                    "{} peers: at most {}",
                    h.peers.len(),
                    sprayswitch::health::MAX_PEERS
                ),
            );
        }
        let mut spec = sprayswitch::tables::HealthSpec::new(Vec::new());
        for (k, p) in h.peers.iter().enumerate() {
            let a: IpAddr = p.parse().map_err(|_| ConfigError {
                field: f(&format!("peers[{k}]")),
                reason: format!("'{p}' is not an IP address"),
            })?;
            match t.fib.lookup(a) {
                Some((_, RouteTarget::Group(gi))) if usize::from(*gi) == i => {}
                _ => {
                    return err(
                        f(&format!("peers[{k}]")),
                        format!(
                        "{a} is not routed over this group (probes to it must cross the members)"
                    ),
                    )
                }
            }
            if spec.peers.contains(&a) {
                return err(f(&format!("peers[{k}]")), format!("{a} is listed twice"));
            }
            spec.peers.push(a);
        }
        for (k, src) in h.source.iter().enumerate() {
            let field = f(&format!("source[{k}]"));
            let a: IpAddr = src.parse().map_err(|_| ConfigError {
                field: field.clone(),
                reason: format!("'{src}' is not an IP address"),
            })?;
            if !t.local.contains_key(&ip_key(a)) {
                return err(field, format!("{a} is not an address of this switch"));
            }
            let slot = if a.is_ipv4() {
                &mut spec.source_v4
            } else {
                &mut spec.source_v6
            };
            if slot.is_some() {
                return err(field, "one source per address family");
            }
            *slot = Some(a);
        }
        let first = |v6: bool| {
            t.ports
                .iter()
                .flat_map(|p| p.addresses.iter())
                .map(|(a, _)| *a)
                .find(|a| {
                    a.is_ipv6() == v6
                        && !matches!(a, IpAddr::V6(x) if (x.segments()[0] & 0xffc0) == 0xfe80)
                })
        };
        spec.source_v4 = spec.source_v4.or_else(|| first(false));
        spec.source_v6 = spec.source_v6.or_else(|| first(true));
        for (k, p) in spec.peers.iter().enumerate() {
            if spec.source_for(*p).is_none() {
                return err(
                    f(&format!("peers[{k}]")),
                    format!("the switch has no address of {p}'s family to probe from"),
                );
            }
        }
        if let Some(us) = h.interval_us {
            if !HEALTH_INTERVAL_US.admits(us) {
                return err(f("interval_us"), format!("{us}: use {HEALTH_INTERVAL_US}"));
            }
            spec.interval_ns = us * 1000;
        }
        if let Some(n) = h.detect_intervals {
            if !DETECT_INTERVALS.admits(u64::from(n)) {
                return err(
                    f("detect_intervals"),
                    format!("{n}: use {DETECT_INTERVALS}"),
                );
            }
            spec.detect_intervals = n;
        }
        if let Some(x) = h.loss_out {
            if !LOSS_OUT.admits(x) {
                return err(f("loss_out"), format!("{x}: use {LOSS_OUT}"));
            }
            spec.loss_out = x;
        }
        if let Some(x) = h.fast_loss_out {
            if !FAST_LOSS_OUT.admits(x) || x < spec.loss_out {
                return err(
                    f("fast_loss_out"),
                    format!("{x}: use {FAST_LOSS_OUT}, at least loss_out"),
                );
            }
            spec.fast_loss_out = x;
        }
        if let Some(ms) = h.restore_ms {
            if !RESTORE_MS.admits(ms) {
                return err(f("restore_ms"), format!("{ms}: use {RESTORE_MS}"));
            }
            spec.restore_ns = ms * 1_000_000;
        }
        t.groups[i].health = Some(spec);
    }
    Ok(())
}

fn validate_routes(routes: &[RouteSection], t: &mut Tables) -> Result<(), ConfigError> {
    let mut seen = HashMap::new();
    for (i, r) in routes.iter().enumerate() {
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
        let target = r.target(&f, t)?;
        if pre.addr.is_ipv4() != matches!(target, RouteTarget::Via(_, IpAddr::V4(_)))
            && matches!(target, RouteTarget::Via(..))
        {
            return err(f("via"), "gateway and prefix are of different IP versions");
        }
        t.fib.insert(pre, target);
    }
    Ok(())
}

impl RouteSection {
    /// Where the route leads: a connected port, a gateway on a port, or an uplink group.
    fn target(&self, f: &impl Fn(&str) -> String, t: &Tables) -> Result<RouteTarget, ConfigError> {
        match (&self.port, &self.group) {
            (Some(_), Some(_)) => err(f("group"), "give either port or group, not both"),
            (None, None) => err(f("port"), "a route needs a port or a group"),
            (None, Some(g)) => {
                if self.via.is_some() {
                    return err(
                        f("via"),
                        "via goes with port, not group (uplinks use peer_mac)",
                    );
                }
                match t.group_id(g) {
                    Some(gi) => Ok(RouteTarget::Group(gi)),
                    None => err(f("group"), format!("unknown uplink group '{g}'")),
                }
            }
            (Some(p), None) => {
                let Some(pi) = t.port_id(p) else {
                    return err(f("port"), format!("unknown port '{p}'"));
                };
                let Some(v) = &self.via else {
                    return Ok(RouteTarget::Connected(pi));
                };
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
                Ok(RouteTarget::Via(pi, gw))
            }
        }
    }
}

fn validate_neighbors(neighbors: &[NeighborSection], t: &mut Tables) -> Result<(), ConfigError> {
    for (i, n) in neighbors.iter().enumerate() {
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
    Ok(())
}

impl ReorderSection {
    /// `[reorder]`: the core's limits.
    fn validate(&self) -> Result<ReorderConfig, ConfigError> {
        let rcfg = ReorderConfig {
            window: self.window,
            max_streams: self.max_streams,
            max_rings: self.max_rings,
            max_held_bytes: self.max_held_mib.saturating_mul(1 << 20),
            hold_timeout_ns: self.hold_timeout_us.saturating_mul(1000),
            learn_ns: self.learn_us.saturating_mul(1000),
            idle_evict_ns: self.idle_evict_ms.saturating_mul(1_000_000),
            max_reads: self.max_reads,
            stamp_source_prefix: (self.stamp_source_prefix[0], self.stamp_source_prefix[1]),
        };
        if let Err(e) = rcfg.check() {
            let field = if e.starts_with("window") {
                "reorder.window"
            } else if e.starts_with("stamp_source_prefix") {
                "reorder.stamp_source_prefix"
            } else {
                "reorder"
            };
            return err(field, e);
        }
        if !HOLD_TIMEOUT_US.admits(self.hold_timeout_us) {
            return err(
                "reorder.hold_timeout_us",
                format!("must be {HOLD_TIMEOUT_US}"),
            );
        }
        Ok(rcfg)
    }
}

/// Each port's reorder settings: its own hold timeout (downlinks only) and loss recovery.
fn port_reorder(
    ports: &[PortSection],
    r: &ReorderSection,
) -> Result<Vec<PortReorder>, ConfigError> {
    let rnic = r.rnic.get(|| "reorder.rnic".into())?;
    let mode = r.mode.get(|| "reorder.mode".into())?;
    let recovery = match &r.loss_recovery {
        Some(c) => Some(c.get(|| "reorder.loss_recovery".into())?),
        None => None,
    };
    let mut out = Vec::with_capacity(ports.len());
    for (i, p) in ports.iter().enumerate() {
        let downlink = p.role.value() == Some(Role::Downlink);
        let only_downlinks = |key: &str| err(format!("port[{i}].{key}"), "only downlinks reorder");
        let hold_timeout_ns = match p.hold_timeout_us {
            Some(us) if !HOLD_TIMEOUT_US.admits(us) => {
                return err(
                    format!("port[{i}].hold_timeout_us"),
                    format!("must be {HOLD_TIMEOUT_US}"),
                )
            }
            Some(_) if !downlink => return only_downlinks("hold_timeout_us"),
            v => v.map(|us| us.saturating_mul(1000)),
        };
        let port_rnic = match &p.rnic {
            Some(_) if !downlink => return only_downlinks("rnic"),
            Some(c) => c.get(|| format!("port[{i}].rnic"))?,
            None => rnic,
        };
        let (port_mode, mode_field) = match &p.mode {
            Some(_) if !downlink => return only_downlinks("mode"),
            Some(c) => (
                c.get(|| format!("port[{i}].mode"))?,
                format!("port[{i}].mode"),
            ),
            None => (mode, "reorder.mode".to_string()),
        };
        let port_recovery = match &p.loss_recovery {
            Some(_) if !downlink => return only_downlinks("loss_recovery"),
            Some(c) => Some(c.get(|| format!("port[{i}].loss_recovery"))?),
            None => recovery,
        };
        if downlink && port_mode == DownlinkMode::NakFilter {
            if port_rnic != RnicKind::SelectiveRepeat {
                return err(
                    mode_field,
                    format!(
                        "nak_filter needs selective-repeat RNICs, and the hosts of port[{i}] \
                         ('{}') are declared go_back_n (`rnic`): a Go-Back-N RNIC drops what \
                         comes out of order, so every NAK filtered would cost it a \
                         retransmission timeout; use `reorder`, or declare `rnic = \
                         \"selective_repeat\"` if its RNICs are",
                        p.name
                    ),
                );
            }
            if !r.enabled {
                return err(
                    mode_field,
                    "nak_filter needs the reorder stage (`[reorder] enabled = true`), which \
                     keeps the state it judges NAKs by",
                );
            }
            if port_recovery == Some(LossRecovery::NakFirst) {
                let field = if p.loss_recovery.is_some() {
                    format!("port[{i}].loss_recovery")
                } else {
                    "reorder.loss_recovery".to_string()
                };
                return err(
                    field,
                    "nak_first is for Go-Back-N RNICs behind a `reorder` downlink; a nak_filter \
                     downlink releases nothing (leave loss_recovery out, or use release_run)",
                );
            }
        }
        // Without a choice, what the RNIC needs: one packet out of sequence makes a
        // Go-Back-N RNIC NAK; a selective-repeat one keeps the whole run.
        let recovery = port_recovery.unwrap_or(match port_rnic {
            RnicKind::GoBackN => LossRecovery::NakFirst,
            RnicKind::SelectiveRepeat => LossRecovery::ReleaseRun,
        });
        out.push(PortReorder {
            hold_timeout_ns,
            recovery,
            mode: port_mode,
        });
    }
    Ok(out)
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
