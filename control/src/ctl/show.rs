//! `show` answers: ports, uplinks, routes, neighbours, streams, counters and hosts as JSON.

use std::net::IpAddr;

use serde_json::{json, Value};
use sprayswitch::counters::{Row, Scope};
use sprayswitch::engine::DropReason;
use sprayswitch::reorder::StreamKey;
use sprayswitch::tables::{ip_key, Role, RouteTarget, Tables};
use sprayswitch::wire::format_mac as mac;

use super::{Control, QUERY_TIMEOUT};

fn key_ip(k: u128) -> IpAddr {
    let a = std::net::Ipv6Addr::from(k);
    a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4)
}

impl Control {
    /// `show paths`: a row per uplink group member and peer ToR (one row without peers for a
    /// member of a group without path health).
    fn show_paths(&self, t: &Tables) -> Value {
        let now = sprayswitch::time::now_ns();
        let pct = |l: Option<sprayswitch::health::WindowLoss>| {
            l.map_or(Value::Null, |l| json!(format!("{:.2}%", l.ratio() * 100.0)))
        };
        let mut rows = Vec::new();
        for g in &t.groups {
            for &id in &g.ports {
                let p = &t.ports[usize::from(id)];
                let r = self.switch.path_report(id).unwrap_or_default();
                let state = if !r.monitored { "-" } else { r.state.name() };
                let row = |peer: Value, heard: Value, fast: Value, slow: Value| {
                    json!({
                        "group": g.name,
                        "port": p.name,
                        "sprayed": if r.sprayed { "yes" } else { "no" },
                        "health": state,
                        "pin": p.path_pin.name(),
                        "link": if self.switch.port_up(id) { "up" } else { "down" },
                        "peer": peer,
                        "heard_ms_ago": heard,
                        "loss_64": fast,
                        "loss_1024": slow,
                        "outs": r.outs,
                        "since_s": if r.monitored { json!(format!("{:.1}", now.saturating_sub(r.since_ns) as f64 / 1e9)) } else { Value::Null },
                        "restore_ms": if r.monitored { json!(r.restore_ns / 1_000_000) } else { Value::Null },
                        "reason": if r.reason.is_empty() { Value::Null } else { json!(r.reason) },
                    })
                };
                if r.peers.is_empty() {
                    rows.push(row(Value::Null, Value::Null, Value::Null, Value::Null));
                }
                for peer in &r.peers {
                    let heard = peer
                        .heard_ago_ns
                        .map_or(Value::Null, |ns| json!(format!("{:.2}", ns as f64 / 1e6)));
                    rows.push(row(
                        json!(peer.peer.to_string()),
                        heard,
                        pct(peer.fast),
                        pct(peer.slow),
                    ));
                }
            }
        }
        Value::Array(rows)
    }

    pub(super) fn show(
        &mut self,
        what: &str,
        top: Option<usize>,
        qp: Option<u32>,
    ) -> Result<Value, String> {
        let t = self.switch.tables();
        let (s, workers, window_s) = self.windowed_stats();
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
                            "backend": self.backends.get(i).cloned().unwrap_or_default(),
                        });
                        add_rows(
                            &mut o,
                            c.rows()
                                .iter()
                                .filter(|r| match r.scope {
                                    Scope::Downlink => p.role == Role::Downlink,
                                    Scope::Uplink => p.role == Role::Uplink,
                                    _ => true,
                                }),
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
            "paths" => self.show_paths(&t),
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
                                "timeouts": r.stats.timeouts, "path_losses": r.stats.path_losses,
                                "resyncs": r.stats.resyncs,
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
                    "window_s": window_s,
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
            "queues" => Value::Array(self.queues(&t, &s)),
            "workers" => Value::Array(self.workers(&t, &workers, window_s)),
            other => {
                return Err(format!(
                "show '{other}': use ports, uplinks, paths, routes, neighbors, streams, counters, hosts, queues or workers"
            ))
            }
        })
    }

    /// Per downlink: what its host reported (NAKs, CNPs) next to what the reorder stage saw on
    /// the way to it (path-order losses and hold timeouts = fabric loss, late and duplicate =
    /// retransmissions reaching the host).
    fn hosts(&mut self, t: &Tables, s: &sprayswitch::switch::Stats) -> Vec<Value> {
        let rows = self.switch.streams(100_000, QUERY_TIMEOUT);
        let rows = self.gathered(rows, "streams (in the reorder sums)");
        t.ports
            .iter()
            .enumerate()
            .filter(|(_, p)| p.role == sprayswitch::tables::Role::Downlink)
            .map(|(i, p)| {
                let mine = rows.iter().filter(|r| {
                    let local = match r.key {
                        StreamKey::Request { local, .. } | StreamKey::Response { local, .. } => local,
                    };
                    matches!(t.fib.lookup(key_ip(local)), Some((_, RouteTarget::Connected(x))) if usize::from(*x) == i)
                });
                let (mut timeouts, mut retrans, mut resyncs, mut streams, mut held) = (0u64, 0u64, 0u64, 0u64, 0u64);
                let mut path_losses = 0u64;
                for r in mine {
                    streams += 1;
                    timeouts += r.stats.timeouts;
                    path_losses += r.stats.path_losses;
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
                    "host_pause_frames": c.pause_frames + c.pfc_frames,
                    "host_paused_us": c.paused_ns / 1000,
                    "retransmissions_seen": retrans,
                    "path_order_losses": path_losses,
                    "hold_timeouts": timeouts,
                    "resyncs": resyncs,
                    "streams": streams,
                    "held_now": held,
                })
            })
            .collect()
    }
}

impl Control {
    /// Per port: its egress queue now (bytes, with what the reorder stage holds towards a
    /// host), the depths packets found entering it (p50, p99, max), its rate and marking
    /// thresholds, marks, drops and pauses.
    fn queues(&self, t: &Tables, s: &sprayswitch::switch::Stats) -> Vec<Value> {
        t.ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let c = s.ports.get(i).cloned().unwrap_or_default();
                let h = self.switch.queue_depth_histogram(i as u16);
                let q = |f: f64| h.as_ref().map_or(0, |h| h.value_at_quantile(f));
                json!({
                    "port": p.name,
                    "role": format!("{:?}", p.role).to_lowercase(),
                    "rate_gbps": p.rate_bps.map(|r| r as f64 / 1e9),
                    "ecn": p.ecn.map(|e| json!({
                        "kmin_kb": e.kmin_bytes as f64 / 1000.0,
                        "kmax_kb": e.kmax_bytes as f64 / 1000.0,
                        "pmax": e.pmax,
                    })),
                    "queue_bytes": c.queue_bytes,
                    "depth_p50_bytes": q(0.5),
                    "depth_p99_bytes": q(0.99),
                    "depth_max_bytes": h.as_ref().map_or(0, |h| h.max()),
                    "ecn_marked": c.ecn_marked,
                    "tx_queue_drops": c.tx_queue_drops,
                    "pause_frames": c.pause_frames,
                    "pfc_frames": c.pfc_frames,
                    "paused_us": c.paused_ns / 1000,
                })
            })
            .collect()
    }
}

impl Control {
    /// Per worker, as DPDK switches show their poll-mode threads (`pmd-stats-show`, `show
    /// runtime`): its core, the ports and queues it polls, loop iterations (all and idle),
    /// busy and idle time, packets received per busy iteration, busy ns per packet received.
    fn workers(
        &self,
        t: &Tables,
        ws: &[sprayswitch::switch::Stats],
        window_s: Option<f64>,
    ) -> Vec<Value> {
        let run = &self.validated.run;
        ws.iter()
            .enumerate()
            .map(|(w, c)| {
                let ports: Vec<String> = t
                    .ports
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| {
                        run.assignment
                            .as_ref()
                            .map_or(i % run.workers.max(1) == w, |a| a[*i] == w)
                    })
                    .map(|(i, p)| {
                        let queues = match self.validated.backends.get(i) {
                            Some(crate::config::Backend::Real { queues, .. })
                            | Some(crate::config::Backend::Dpdk { queues, .. }) => *queues,
                            _ => 1,
                        };
                        if queues > 1 {
                            format!("{}({queues}q)", p.name)
                        } else {
                            p.name.clone()
                        }
                    })
                    .collect();
                let r2 = |x: f64| (x * 100.0).round() / 100.0;
                let busy_loops = c.loops.saturating_sub(c.idle_loops);
                let per = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
                let total_ns = c.busy_ns + c.idle_ns;
                json!({
                    "worker": w,
                    "core": run.cores.as_ref().and_then(|c| c.get(w).copied()),
                    "ports": ports.join(" "),
                    "iterations": c.loops,
                    "idle_iterations": c.idle_loops,
                    "busy_ms": r2(c.busy_ns as f64 / 1e6),
                    "idle_ms": r2(c.idle_ns as f64 / 1e6),
                    "busy_percent": r2(100.0 * per(c.busy_ns, total_ns)),
                    "rx_pkts": c.rx_pkts,
                    "tx_pkts": c.tx_pkts,
                    "pkts_per_busy_iteration": r2(per(c.rx_pkts, busy_loops)),
                    "ns_per_pkt": r2(per(c.busy_ns, c.rx_pkts)),
                    "handoff_in": c.handoff_in,
                    "window_s": window_s.map(r2),
                })
            })
            .collect()
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
