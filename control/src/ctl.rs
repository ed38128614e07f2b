//! The control side of a running switch: requests from `sprayctl`, reloads, Prometheus
//! metrics, and periodic work. [`Control`] owns the switch and its configuration; workers only
//! ever see immutable table snapshots it publishes (never a lock per packet).
//!
//! # Protocol
//!
//! A Unix stream socket (mode 0600). The client writes one JSON request per line; the switch
//! answers each with one JSON line, `{"ok":true,"data":...}` or `{"ok":false,"error":"..."}`.
//! Requests:
//!
//! | request | effect |
//! |---|---|
//! | `{"cmd":"show","what":"ports"}` | ports: role, MAC, MTU, carrier, admin state, counters |
//! | `{"cmd":"show","what":"uplinks"}` | uplink groups, members, weights, state, backlog |
//! | `{"cmd":"show","what":"routes"}` | the FIB |
//! | `{"cmd":"show","what":"neighbors"}` | static and learned neighbours |
//! | `{"cmd":"show","what":"streams","top":N,"qp":Q}` | busiest reorder streams (optionally one QPN) |
//! | `{"cmd":"show","what":"counters"}` | switch-wide counters, drops by reason, reorder totals |
//! | `{"cmd":"show","what":"hosts"}` | per downlink host: its NAKs and CNPs (host trouble) next to hold timeouts and retransmissions reaching it (fabric trouble) |
//! | `{"cmd":"set-spray-policy","policy":"ecmp"}` | changes the spray policy |
//! | `{"cmd":"set-uplink","name":"u0","state":"down"}` | administrative down/up |
//! | `{"cmd":"set-hold-timeout","us":500}` | switch-wide gap hold timeout |
//! | `{"cmd":"capture-start","port":"u0","file":"PATH"}` | captures the port's traffic (both directions) to a pcap file |
//! | `{"cmd":"capture-stop","port":"u0"}` | stops it; answers frames written and dropped |
//! | `{"cmd":"reload"}` / `{"cmd":"reload","file":"PATH"}` | validates, then applies the file |
//!
//! A malformed request gets an error answer; the switch is unaffected. An answer that had to
//! leave something out (`show streams`, `neighbors` or `hosts` when a worker did not answer
//! within [`QUERY_TIMEOUT`]) carries `"warnings":["..."]` next to its data.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};
use sprayswitch::counters::{Kind, Row, Scope};
use sprayswitch::engine::Role;
use sprayswitch::engine::{ip_key, DropReason, RouteTarget, SprayPolicy, Tables};
use sprayswitch::pcap::PcapWriter;
use sprayswitch::reorder::StreamKey;
use sprayswitch::switch::{Gathered, Switch};
use sprayswitch::time::wall_ns;

use crate::config::{Config, Validated};

/// A request on the control socket.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "cmd", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    /// `show WHAT`.
    Show {
        /// ports, uplinks, routes, neighbors, streams, counters, hosts.
        what: String,
        /// streams: how many.
        top: Option<usize>,
        /// streams: only this QPN.
        qp: Option<u32>,
    },
    /// `set spray-policy`.
    SetSprayPolicy {
        /// The policy's name.
        policy: String,
    },
    /// `set uplink NAME down|up`.
    SetUplink {
        /// Port name.
        name: String,
        /// `down` or `up`.
        state: String,
    },
    /// `set hold-timeout US`.
    SetHoldTimeout {
        /// Microseconds.
        us: u64,
    },
    /// `capture start PORT FILE`: writes what the port receives and what is queued to it.
    CaptureStart {
        /// Port name.
        port: String,
        /// pcap file to write.
        file: String,
    },
    /// `capture stop PORT`.
    CaptureStop {
        /// Port name.
        port: String,
    },
    /// `reload [FILE]`.
    Reload {
        /// The file; default: the one the switch was started with.
        file: Option<String>,
    },
}

/// Learned neighbours not confirmed by ARP or ND for this long are forgotten (and resolved
/// again when traffic needs them). Linux hosts confirm their gateway every ~30 s while they use
/// it, so only hosts that went away age out.
pub const NEIGHBOR_MAX_AGE: Duration = Duration::from_secs(300);

/// How long `show streams`, `show neighbors` and `show hosts` wait for the workers' answers.
pub const QUERY_TIMEOUT: Duration = Duration::from_millis(500);

fn mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn key_ip(k: u128) -> IpAddr {
    let a = std::net::Ipv6Addr::from(k);
    a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4)
}

/// The control side of one running switch.
pub struct Control {
    switch: Switch,
    config: Config,
    path: Option<PathBuf>,
    validated: Validated,
    link_seen: Vec<bool>,
    evictions_seen: u64,
    captures: Vec<Capture>,
    /// What the answer being built leaves out (workers that did not answer), sent with it by
    /// `handle_line`; emptied by each `handle`.
    warnings: Vec<String>,
}

struct Capture {
    port: u16,
    file: PathBuf,
    writer: PcapWriter<std::io::BufWriter<std::fs::File>>,
}

impl Control {
    /// Takes charge of `switch`, started from `validated` (parsed from `config`, read from
    /// `path` when there is a file).
    pub fn new(
        switch: Switch,
        config: Config,
        validated: Validated,
        path: Option<PathBuf>,
    ) -> Control {
        let n = validated.tables.ports.len();
        Control {
            switch,
            config,
            path,
            validated,
            link_seen: vec![true; n],
            evictions_seen: 0,
            captures: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// The switch.
    pub fn switch(&self) -> &Switch {
        &self.switch
    }

    /// Gives the switch back (to stop it), finishing any capture first.
    pub fn into_switch(mut self) -> Switch {
        let ports: Vec<u16> = self.captures.iter().map(|c| c.port).collect();
        for p in ports {
            let _ = self.capture_stop(p);
        }
        self.switch
    }

    /// Moves captured packets from the workers' queues into their files.
    pub fn pump_captures(&mut self) {
        let taps = self.switch.capture_taps();
        for c in &mut self.captures {
            let w = &mut c.writer;
            taps.drain(c.port, |t, p| {
                let _ = w.write_frame(wall_ns(t), p.data());
            });
        }
    }

    fn capture_stop(&mut self, port: u16) -> Result<Value, String> {
        let i = self
            .captures
            .iter()
            .position(|c| c.port == port)
            .ok_or("no capture runs on that port")?;
        let taps = self.switch.capture_taps();
        taps.set(port, false);
        self.pump_captures();
        let mut c = self.captures.remove(i);
        c.writer.flush().map_err(|e| e.to_string())?;
        let name = self.switch.tables().ports[usize::from(port)].name.clone();
        log::info!(
            "capture on {name} stopped: {} frames in {}",
            c.writer.frames_written(),
            c.file.display()
        );
        Ok(
            json!({"port": name, "file": c.file.display().to_string(), "frames": c.writer.frames_written(), "dropped": taps.dropped(port)}),
        )
    }

    /// Answers one request line with one response line (no newline).
    /// An answer that leaves something out says so in `warnings` (`{"ok":true,"data":...,
    /// "warnings":["..."]}`).
    pub fn handle_line(&mut self, line: &str) -> String {
        let answer = match serde_json::from_str::<Request>(line) {
            Ok(r) => self.handle(&r),
            Err(e) => Err(format!("bad request: {e}")),
        };
        match answer {
            Ok(data) if self.warnings.is_empty() => json!({"ok": true, "data": data}).to_string(),
            Ok(data) => json!({"ok": true, "data": data, "warnings": self.warnings}).to_string(),
            Err(e) => json!({"ok": false, "error": e}).to_string(),
        }
    }

    /// Notes the workers of `g` that did not answer: what they hold (`what`) is missing.
    fn gathered<T>(&mut self, g: Gathered<T>, what: &str) -> Vec<T> {
        for w in &g.silent {
            self.warnings.push(format!(
                "worker {w} did not answer within {} ms: its {what} are missing from this answer",
                QUERY_TIMEOUT.as_millis()
            ));
        }
        g.items
    }

    /// Carries out a request.
    ///
    /// # Errors
    /// What was wrong with it; nothing changed.
    pub fn handle(&mut self, r: &Request) -> Result<Value, String> {
        // Warnings belong to one answer: a caller of `handle` alone (the SIGHUP reload) never
        // carries an earlier request's into the next.
        self.warnings.clear();
        match r {
            Request::Show { what, top, qp } => self.show(what, *top, *qp),
            Request::SetSprayPolicy { policy } => {
                let p: SprayPolicy = policy.parse()?;
                let mut t = (*self.switch.tables()).clone();
                t.policy = p;
                self.switch.publish(t);
                log::info!("spray policy set to {}", p.name());
                Ok(json!({"spray_policy": p.name()}))
            }
            Request::SetUplink { name, state } => {
                let up = match state.as_str() {
                    "up" => true,
                    "down" => false,
                    o => return Err(format!("state '{o}': use 'up' or 'down'")),
                };
                let t = self.switch.tables();
                let id = t
                    .port_id(name)
                    .ok_or_else(|| format!("no port named '{name}'"))?;
                if t.ports[usize::from(id)].role != sprayswitch::engine::Role::Uplink {
                    return Err(format!("port '{name}' is not an uplink"));
                }
                self.switch.set_port_admin(name, up)?;
                log::info!("uplink {name} administratively {state}");
                Ok(json!({"port": name, "admin": state}))
            }
            Request::SetHoldTimeout { us } => {
                if *us == 0 || *us > 10_000_000 {
                    return Err(format!("{us} us: use 1 to 10000000"));
                }
                if self.validated.reorder.is_none() {
                    return Err("reordering is off in this configuration".into());
                }
                let mut t = (*self.switch.tables()).clone();
                t.hold_timeout_ns = Some(us * 1000);
                self.switch.publish(t);
                log::info!("hold timeout set to {us} us");
                Ok(json!({"hold_timeout_us": us}))
            }
            Request::CaptureStart { port, file } => {
                let id = self
                    .switch
                    .tables()
                    .port_id(port)
                    .ok_or_else(|| format!("no port named '{port}'"))?;
                if self.captures.iter().any(|c| c.port == id) {
                    return Err(format!("a capture already runs on {port}"));
                }
                let path = PathBuf::from(file);
                let writer = PcapWriter::create(&path).map_err(|e| format!("{file}: {e}"))?;
                self.captures.push(Capture {
                    port: id,
                    file: path,
                    writer,
                });
                self.switch.capture_taps().set(id, true);
                log::info!("capture on {port} started into {file}");
                Ok(json!({"port": port, "file": file}))
            }
            Request::CaptureStop { port } => {
                let id = self
                    .switch
                    .tables()
                    .port_id(port)
                    .ok_or_else(|| format!("no port named '{port}'"))?;
                self.capture_stop(id)
            }
            Request::Reload { file } => {
                let path = file
                    .as_ref()
                    .map(PathBuf::from)
                    .or_else(|| self.path.clone());
                let path = path.ok_or("the switch runs the embedded default: give a file")?;
                self.reload(&path)
            }
        }
    }

    /// Validates `path` and applies it under traffic. Ports, workers and the reorder stage's
    /// limits must stay as they are (they need a restart); routes, groups, neighbours, spray
    /// policy, addresses, MTUs and the hold timeout change in place. Streams and learned
    /// neighbours survive; administrative port states set at run time are kept.
    ///
    /// # Errors
    /// Why the file was refused; nothing changed.
    pub fn reload(&mut self, path: &Path) -> Result<Value, String> {
        let cfg = Config::load(path).map_err(|e| e.to_string())?;
        let v = cfg.validate().map_err(|e| e.to_string())?;
        let old = &self.validated;
        let names = |v: &Validated| -> Vec<(String, String)> {
            v.tables
                .ports
                .iter()
                .zip(&v.backends)
                .map(|(p, b)| (p.name.clone(), format!("{:?}/{b:?}", p.role)))
                .collect()
        };
        if names(old) != names(&v) {
            return Err("the ports changed (names, roles or backends): that needs a restart; nothing was applied".into());
        }
        if v.run.workers != old.run.workers || v.run.assignment != old.run.assignment {
            return Err(
                "workers or port assignment changed: that needs a restart; nothing was applied"
                    .into(),
            );
        }
        let limits = |r: &Option<sprayswitch::reorder::ReorderConfig>| {
            r.map(|c| sprayswitch::reorder::ReorderConfig {
                hold_timeout_ns: 0,
                ..c
            })
        };
        if limits(&v.reorder) != limits(&old.reorder) || v.port_timeouts != old.port_timeouts {
            return Err("reorder settings other than hold_timeout_us changed: that needs a restart; nothing was applied".into());
        }
        let mut t: Tables = v.tables.clone();
        let cur = self.switch.tables();
        for (p, c) in t.ports.iter_mut().zip(&cur.ports) {
            p.admin_up = c.admin_up;
        }
        t.hold_timeout_ns = v.reorder.map(|r| r.hold_timeout_ns);
        let routes = t.fib.len();
        self.switch.publish(t);
        log::info!(
            "configuration {} applied: {} routes, spray policy {}",
            path.display(),
            routes,
            v.tables.policy.name()
        );
        self.config = cfg;
        self.validated = v;
        self.path = Some(path.to_path_buf());
        Ok(
            json!({"applied": path.display().to_string(), "generation": self.switch.tables().generation}),
        )
    }

    /// Periodic work (call it about once a second): neighbour ageing, link-state changes of
    /// ports and idle reorder streams forgotten, logged one line per event.
    pub fn periodic(&mut self) {
        self.switch.age_neighbors(NEIGHBOR_MAX_AGE);
        let t = self.switch.tables();
        for (i, p) in t.ports.iter().enumerate() {
            let up = self.switch.port_up(i as u16);
            if self.link_seen.get(i).copied() != Some(up) {
                log::info!("port {} link {}", p.name, if up { "up" } else { "down" });
                if let Some(s) = self.link_seen.get_mut(i) {
                    *s = up;
                }
            }
        }
        let ev = self.switch.stats().reorder.evictions;
        if ev > self.evictions_seen {
            // Idle eviction is routine (a QP that went quiet for `idle_evict_ns`); a stream
            // that held packets releases them first, so nothing is lost.
            log::info!(
                "{} idle reorder streams forgotten",
                ev - self.evictions_seen
            );
            self.evictions_seen = ev;
        }
    }

    fn show(&mut self, what: &str, top: Option<usize>, qp: Option<u32>) -> Result<Value, String> {
        let t = self.switch.tables();
        let s = self.switch.stats();
        Ok(match what {
            "ports" => Value::Array(
                t.ports
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        let c = s.ports.get(i).cloned().unwrap_or_default();
                        let mut o = json!({
                            "name": p.name,
                            "role": format!("{:?}", p.role).to_lowercase(),
                            "mac": mac(p.mac),
                            "mtu": p.mtu,
                            "link": if self.switch.port_up(i as u16) { "up" } else { "down" },
                            "admin": if p.admin_up { "up" } else { "down" },
                        });
                        add_rows(
                            &mut o,
                            c.rows()
                                .iter()
                                .filter(|r| r.scope == Scope::Port || p.role == Role::Downlink),
                        );
                        o
                    })
                    .collect(),
            ),
            "uplinks" => Value::Array(
                t.groups
                    .iter()
                    .flat_map(|g| {
                        g.ports.iter().enumerate().map(|(k, &id)| {
                            let p = &t.ports[usize::from(id)];
                            let c = s.ports.get(usize::from(id)).cloned().unwrap_or_default();
                            json!({
                                "group": g.name,
                                "port": p.name,
                                "weight": g.weights.get(k).copied().unwrap_or(1),
                                "link": if self.switch.port_up(id) { "up" } else { "down" },
                                "admin": if p.admin_up { "up" } else { "down" },
                                "backlog": self.switch.port_backlog(id),
                                "tx_pkts": c.tx_pkts,
                            })
                        })
                    })
                    .collect(),
            ),
            "routes" => Value::Array(
                t.fib
                    .iter()
                    .map(|(pre, target)| {
                        let (kind, via) = match target {
                            RouteTarget::Connected(p) => {
                                ("connected", t.ports[usize::from(*p)].name.clone())
                            }
                            RouteTarget::Via(p, gw) => {
                                ("via", format!("{gw} on {}", t.ports[usize::from(*p)].name))
                            }
                            RouteTarget::Group(g) => {
                                ("group", t.groups[usize::from(*g)].name.clone())
                            }
                        };
                        json!({"prefix": pre.to_string(), "kind": kind, "target": via})
                    })
                    .collect(),
            ),
            "neighbors" => {
                let mut rows: Vec<Value> = t
                    .neighbors
                    .iter()
                    .map(|(k, n)| {
                        json!({"ip": key_ip(*k).to_string(), "mac": mac(n.mac), "port": t.ports[usize::from(n.port)].name, "kind": "static"})
                    })
                    .collect();
                let learned = self.switch.learned_neighbors(QUERY_TIMEOUT);
                for (ip, n) in self.gathered(learned, "learned neighbours") {
                    if !t.neighbors.contains_key(&ip_key(ip)) {
                        rows.push(json!({"ip": ip.to_string(), "mac": mac(n.mac), "port": t.ports[usize::from(n.port)].name, "kind": "learned"}));
                    }
                }
                Value::Array(rows)
            }
            "streams" => {
                let top = top.unwrap_or(20).min(10_000);
                let want = if qp.is_some() { 100_000 } else { top };
                let rows = self.switch.streams(want, QUERY_TIMEOUT);
                let rows = self.gathered(rows, "streams");
                Value::Array(
                    rows.into_iter()
                        .filter(|r| match (qp, r.key) {
                            (None, _) => true,
                            (Some(q), StreamKey::Request { qpn, .. }) => qpn == q,
                            (Some(_), StreamKey::Response { .. }) => false,
                        })
                        .take(top)
                        .map(|r| {
                            let (kind, host, peer) = match r.key {
                                StreamKey::Request { local, qpn } => {
                                    ("request", key_ip(local).to_string(), format!("qpn {qpn}"))
                                }
                                StreamKey::Response {
                                    local,
                                    remote,
                                    remote_qpn,
                                } => (
                                    "response",
                                    key_ip(local).to_string(),
                                    format!("{} qpn {remote_qpn}", key_ip(remote)),
                                ),
                            };
                            json!({
                                "kind": kind, "host": host, "peer": peer,
                                "expected_psn": r.expected.value(),
                                "held": r.stats.held, "released": r.stats.released,
                                "max_depth": r.stats.max_depth, "late": r.stats.late,
                                "duplicates": r.stats.duplicates, "overflows": r.stats.overflows,
                                "timeouts": r.stats.timeouts, "resyncs": r.stats.resyncs,
                                "restarts": r.stats.restarts,
                            })
                        })
                        .collect(),
                )
            }
            "counters" => {
                let drops: serde_json::Map<String, Value> = DropReason::ALL
                    .iter()
                    .map(|r| (r.name().to_string(), json!(s.dropped(*r))))
                    .collect();
                let mut o = json!({
                    "generation": t.generation,
                    "spray_policy": t.policy.name(),
                });
                let rows = s.rows();
                add_rows(&mut o, rows.iter().filter(|r| r.scope != Scope::Worker));
                o["drops"] = Value::Object(drops);
                let mut reorder = json!({});
                add_rows(&mut reorder, s.reorder.rows().iter());
                o["reorder"] = reorder;
                o
            }
            "hosts" => Value::Array(self.hosts(&t, &s)),
            other => {
                return Err(format!(
                "show '{other}': use ports, uplinks, routes, neighbors, streams, counters or hosts"
            ))
            }
        })
    }

    /// Per downlink: what its host reported (NAKs, CNPs) next to what the reorder stage saw on
    /// the way to it (hold timeouts = fabric loss, late and duplicate = retransmissions reaching
    /// the host).
    fn hosts(&mut self, t: &Tables, s: &sprayswitch::switch::Stats) -> Vec<Value> {
        let rows = self.switch.streams(100_000, QUERY_TIMEOUT);
        let rows = self.gathered(rows, "streams (in the reorder sums)");
        t.ports
            .iter()
            .enumerate()
            .filter(|(_, p)| p.role == sprayswitch::engine::Role::Downlink)
            .map(|(i, p)| {
                let mine = rows.iter().filter(|r| {
                    let local = match r.key {
                        StreamKey::Request { local, .. } | StreamKey::Response { local, .. } => local,
                    };
                    matches!(t.fib.lookup(key_ip(local)), Some((_, RouteTarget::Connected(x))) if usize::from(*x) == i)
                });
                let (mut timeouts, mut retrans, mut resyncs, mut streams, mut held) = (0u64, 0u64, 0u64, 0u64, 0u64);
                for r in mine {
                    streams += 1;
                    timeouts += r.stats.timeouts;
                    retrans += r.stats.late + r.stats.duplicates;
                    resyncs += r.stats.resyncs;
                    held += r.stats.held;
                }
                let c = s.ports.get(i).cloned().unwrap_or_default();
                json!({
                    "port": p.name,
                    "link": if self.switch.port_up(i as u16) { "up" } else { "down" },
                    "host_naks": c.host_naks,
                    "host_cnps": c.host_cnps,
                    "retransmissions_seen": retrans,
                    "hold_timeouts": timeouts,
                    "resyncs": resyncs,
                    "streams": streams,
                    "held_now": held,
                })
            })
            .collect()
    }

    /// Prometheus text exposition of every counter.
    pub fn metrics(&self) -> String {
        let t = self.switch.tables();
        let s = self.switch.stats();
        let mut m = Metrics::default();
        for row in s.rows().iter().filter(|r| r.scope != Scope::Worker) {
            m.row(row, &[]);
        }
        for r in DropReason::ALL {
            m.counter(
                "sprayswitch_drop_packets_total",
                "Packets dropped, by reason (see each reason in `show counters`'s drops).",
                &[("reason", r.name())],
                s.dropped(r),
            );
        }
        for (i, p) in t.ports.iter().enumerate() {
            let c = s.ports.get(i).cloned().unwrap_or_default();
            let role = if p.role == Role::Uplink {
                "uplink"
            } else {
                "downlink"
            };
            let l = [("port", p.name.as_str()), ("role", role)];
            for row in c.rows() {
                match row.scope {
                    Scope::Downlink if p.role == Role::Downlink => m.row(&row, &l[..1]),
                    Scope::Downlink => {}
                    _ => m.row(&row, &l),
                }
            }
            m.gauge(
                "sprayswitch_port_up",
                "1 when the port's carrier is up.",
                &l,
                u64::from(self.switch.port_up(i as u16)),
            );
            m.gauge(
                "sprayswitch_port_admin_up",
                "1 when the port is administratively up.",
                &l,
                u64::from(p.admin_up),
            );
            m.gauge(
                "sprayswitch_port_tx_backlog_packets",
                "Packets queued towards a port.",
                &l,
                self.switch.port_backlog(i as u16) as u64,
            );
        }
        for (w, ws) in self.switch.worker_stats().iter().enumerate() {
            let id = w.to_string();
            let l = [("worker", id.as_str())];
            for row in ws.rows() {
                match row.scope {
                    Scope::Worker => m.row(&row, &l),
                    // The summed series has no label; its per-worker series is named for the
                    // worker.
                    Scope::SwitchAndWorker => {
                        let name = row
                            .metric
                            .replacen("sprayswitch_", "sprayswitch_worker_", 1);
                        m.named_row(&name, &row, &l)
                    }
                    _ => {}
                }
            }
        }
        for row in s.reorder.rows() {
            m.row(&row, &[]);
        }
        if let Some(h) = self.switch.hold_histogram() {
            m.histogram_ns(
                "sprayswitch_reorder_hold_seconds",
                "Time packets were held.",
                &h,
            );
        }
        m.text
    }
}

/// Adds `rows` to the JSON object `o`, each under its field name.
fn add_rows<'a>(o: &mut Value, rows: impl Iterator<Item = &'a Row>) {
    if let Value::Object(m) = o {
        for r in rows {
            m.insert(r.name.to_string(), json!(r.value));
        }
    }
}

#[derive(Default)]
struct Metrics {
    text: String,
    declared: std::collections::HashSet<String>,
}

impl Metrics {
    fn head(&mut self, name: &str, help: &str, kind: &str) {
        if self.declared.insert(name.to_string()) {
            self.text += &format!("# HELP {name} {help}\n# TYPE {name} {kind}\n");
        }
    }

    fn labels(l: &[(&str, &str)]) -> String {
        if l.is_empty() {
            return String::new();
        }
        let parts: Vec<String> = l
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
            .collect();
        format!("{{{}}}", parts.join(","))
    }

    fn counter(&mut self, name: &str, help: &str, l: &[(&str, &str)], v: u64) {
        self.head(name, help, "counter");
        self.text += &format!("{name}{} {v}\n", Self::labels(l));
    }

    fn gauge(&mut self, name: &str, help: &str, l: &[(&str, &str)], v: u64) {
        self.head(name, help, "gauge");
        self.text += &format!("{name}{} {v}\n", Self::labels(l));
    }

    fn row(&mut self, r: &Row, l: &[(&str, &str)]) {
        self.named_row(r.metric, r, l);
    }

    /// Row `r` exported under `name`.
    fn named_row(&mut self, name: &str, r: &Row, l: &[(&str, &str)]) {
        match r.kind {
            Kind::Counter => self.counter(name, r.help, l, r.value),
            Kind::Gauge | Kind::Max => self.gauge(name, r.help, l, r.value),
        }
    }

    fn histogram_ns(&mut self, name: &str, help: &str, h: &hdrhistogram::Histogram<u64>) {
        self.head(name, help, "histogram");
        let mut sum = 0f64;
        for v in h.iter_recorded() {
            sum += v.value_iterated_to() as f64 * v.count_at_value() as f64;
        }
        for le_us in [1u64, 5, 10, 50, 100, 500, 1000, 5000, 10000, 50000] {
            let n: u64 = h
                .iter_recorded()
                .filter(|v| v.value_iterated_to() <= le_us * 1000)
                .map(|v| v.count_at_value())
                .sum();
            self.text += &format!("{name}_bucket{{le=\"{}\"}} {n}\n", le_us as f64 / 1e6);
        }
        self.text += &format!("{name}_bucket{{le=\"+Inf\"}} {}\n", h.len());
        self.text += &format!("{name}_sum {}\n", sum / 1e9);
        self.text += &format!("{name}_count {}\n", h.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_CONFIG;
    use crate::ports::open_ports_with_mem;
    use sprayswitch::port::mem;

    #[test]
    fn an_answer_that_misses_workers_says_which_and_what_is_missing() {
        let cfg = Config::parse(DEFAULT_CONFIG, "default").unwrap();
        let v = cfg.validate().unwrap();
        let names: Vec<String> = v.tables.ports.iter().map(|p| p.name.clone()).collect();
        let mut far_ends = Vec::new();
        let opened = open_ports_with_mem(&v, |i| {
            let (far, near) = mem::link("far", &names[i], 64);
            far_ends.push(far);
            Ok(Box::new(near))
        })
        .unwrap();
        // The workers are handed back and never driven: none of them answers.
        let (switch, workers) = v.clone().start_driven(opened.ports).unwrap();
        let n = workers.len();
        let mut c = Control::new(switch, cfg, v, None::<PathBuf>);

        let ans: Value =
            serde_json::from_str(&c.handle_line(r#"{"cmd":"show","what":"streams"}"#)).unwrap();
        assert_eq!(ans["ok"], true);
        assert_eq!(ans["data"], json!([]));
        let warnings: Vec<&str> = ans["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect();
        let expected: Vec<String> = (0..n)
            .map(|w| {
                format!("worker {w} did not answer within 500 ms: its streams are missing from this answer")
            })
            .collect();
        assert_eq!(warnings, expected);

        let ans: Value =
            serde_json::from_str(&c.handle_line(r#"{"cmd":"show","what":"neighbors"}"#)).unwrap();
        assert_eq!(ans["warnings"].as_array().unwrap().len(), n);
        assert_eq!(ans["ok"], true, "the answer is still given: {ans}");

        // An answer that needs no worker carries no warnings, also right after one that did.
        let ans: Value =
            serde_json::from_str(&c.handle_line(r#"{"cmd":"show","what":"routes"}"#)).unwrap();
        assert_eq!(ans["ok"], true);
        assert!(ans.get("warnings").is_none(), "{ans}");
        drop(far_ends);
    }
}
