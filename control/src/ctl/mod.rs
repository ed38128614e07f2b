//! The control side of a running switch: requests from `sprayctl`, reloads, Prometheus
//! metrics, and periodic work. [`Control`] owns the switch and its configuration; workers only
//! ever see immutable table snapshots it publishes (never a lock per packet). This file holds
//! the requests, reloads and periodic work; `show` renders the `show` answers and `metrics`
//! the Prometheus exposition.
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
//! | `{"cmd":"show","what":"paths"}` | per uplink and peer ToR: path health (in, suspect, out), pin, loss over the last 64 and 1024 probes, when the peer was last heard, why it last changed |
//! | `{"cmd":"show","what":"routes"}` | the FIB |
//! | `{"cmd":"show","what":"neighbors"}` | static and learned neighbours |
//! | `{"cmd":"show","what":"streams","top":N,"qp":Q}` | busiest reorder streams (optionally one QPN) |
//! | `{"cmd":"show","what":"counters"}` | switch-wide counters, drops by reason, reorder totals |
//! | `{"cmd":"show","what":"hosts"}` | per downlink host: its NAKs, CNPs and pauses (host trouble) next to hold timeouts and retransmissions reaching it (fabric trouble) |
//! | `{"cmd":"show","what":"queues"}` | per port: egress queue bytes now, depth p50/p99/max, rate, ECN thresholds, marks, drops, pauses |
//! | `{"cmd":"show","what":"workers"}` | per worker: its core, the ports and queues it polls, loop iterations, busy and idle time, packets per busy iteration, ns per packet |
//! | `{"cmd":"stats-clear"}` | starts a fresh measurement window: every `show` counter since now, except the reorder stage's per-stream sums in `show streams` and `show hosts` and the depth histograms (Prometheus stays monotonic) |
//! | `{"cmd":"set-spray-policy","policy":"ecmp"}` | changes the spray policy |
//! | `{"cmd":"set-uplink","name":"u0","state":"down"}` | administrative down/up |
//! | `{"cmd":"set-path","name":"u0","pin":"out"}` | pins an uplink out of (or into) the spray set whatever its path health says; `auto` gives it back to its health |
//! | `{"cmd":"set-hold-timeout","us":500}` | switch-wide gap hold timeout |
//! | `{"cmd":"capture-start","port":"u0","file":"PATH"}` | captures the port's traffic (both directions) to a pcap file |
//! | `{"cmd":"capture-stop","port":"u0"}` | stops it; answers frames written and dropped |
//! | `{"cmd":"reload"}` / `{"cmd":"reload","file":"PATH"}` | validates, then applies the file |
//!
//! A malformed request gets an error answer; the switch is unaffected. An answer that had to
//! leave something out (`show streams`, `neighbors` or `hosts` when a worker did not answer
//! within [`QUERY_TIMEOUT`]) carries `"warnings":["..."]` next to its data.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};
use sprayswitch::pcap::PcapWriter;
use sprayswitch::switch::{Gathered, Switch};
use sprayswitch::tables::{SprayPolicy, Tables};
use sprayswitch::time::wall_ns;

use crate::config::{Config, Validated};

mod metrics;
mod show;

/// A request on the control socket.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "cmd", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    /// `show WHAT`.
    Show {
        /// ports, uplinks, routes, neighbors, streams, counters, hosts, queues.
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
    /// `set path NAME in|out|auto`.
    SetPath {
        /// Uplink port name.
        name: String,
        /// `in`, `out` or `auto`.
        pin: String,
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
    /// `stats clear`: every `show` counter counts from now.
    StatsClear,
}

/// Learned neighbours not confirmed by ARP or ND for this long are forgotten (and resolved
/// again when traffic needs them). Linux hosts confirm their gateway every ~30 s while they use
/// it, so only hosts that went away age out.
pub const NEIGHBOR_MAX_AGE: Duration = Duration::from_secs(300);

/// How long `show streams`, `show neighbors` and `show hosts` wait for the workers' answers.
pub const QUERY_TIMEOUT: Duration = Duration::from_millis(500);

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
    /// The counters when `stats clear` last ran: `show` answers count from there.
    window: Option<Window>,
    /// What each port was opened as (backend, mode, queues), for `show ports`.
    backends: Vec<String>,
}

/// The start of a measurement window (`stats clear`).
struct Window {
    since: std::time::Instant,
    switch: sprayswitch::switch::Stats,
    workers: Vec<sprayswitch::switch::Stats>,
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
            window: None,
            backends: Vec::new(),
        }
    }

    /// What each port was opened as, in table order (`ports::Opened::report`): `show ports`
    /// gives it per port.
    pub fn set_backends(&mut self, report: Vec<String>) {
        self.backends = report;
    }

    /// The switch's counters in the current measurement window (since `stats clear`, else
    /// since start), each worker's, and the window's length in seconds (`None`: since start).
    pub(super) fn windowed_stats(
        &self,
    ) -> (
        sprayswitch::switch::Stats,
        Vec<sprayswitch::switch::Stats>,
        Option<f64>,
    ) {
        let (s, ws) = (self.switch.stats(), self.switch.worker_stats());
        match &self.window {
            None => (s, ws, None),
            Some(w) => (
                s.since(&w.switch),
                ws.iter()
                    .zip(&w.workers)
                    .map(|(now, base)| now.since(base))
                    .collect(),
                Some(w.since.elapsed().as_secs_f64()),
            ),
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
                if t.ports[usize::from(id)].role != sprayswitch::tables::Role::Uplink {
                    return Err(format!("port '{name}' is not an uplink"));
                }
                self.switch.set_port_admin(name, up)?;
                log::info!("uplink {name} administratively {state}");
                Ok(json!({"port": name, "admin": state}))
            }
            Request::SetPath { name, pin } => {
                let pin: sprayswitch::tables::PathPin = pin.parse()?;
                let mut t = (*self.switch.tables()).clone();
                let id = t
                    .port_id(name)
                    .ok_or_else(|| format!("no port named '{name}'"))?;
                if !t.groups.iter().any(|g| g.ports.contains(&id)) {
                    return Err(format!("port '{name}' is no member of an uplink group"));
                }
                t.ports[usize::from(id)].path_pin = pin;
                self.switch.publish(t);
                log::info!("path {name} pinned {}", pin.name());
                Ok(json!({"port": name, "pin": pin.name()}))
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
            Request::StatsClear => {
                self.window = Some(Window {
                    since: std::time::Instant::now(),
                    switch: self.switch.stats(),
                    workers: self.switch.worker_stats(),
                });
                log::info!("counters: a new measurement window starts");
                Ok(json!({"window": "started"}))
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
        if v.tables.stamp_lane_bits != old.tables.stamp_lane_bits {
            // The other ToRs read this one's stamps with their own lanes: the fabric changes
            // it together, ToRs restarted.
            return Err(
                "path_stamp_lanes changed: that needs a restart of every ToR; nothing was applied"
                    .into(),
            );
        }
        let limits = |r: &Option<sprayswitch::reorder::ReorderConfig>| {
            r.map(|c| sprayswitch::reorder::ReorderConfig {
                hold_timeout_ns: 0,
                ..c
            })
        };
        if limits(&v.reorder) != limits(&old.reorder) || v.port_reorder != old.port_reorder {
            return Err("reorder settings other than hold_timeout_us changed: that needs a restart; nothing was applied".into());
        }
        let mut t: Tables = v.tables.clone();
        let cur = self.switch.tables();
        for (p, c) in t.ports.iter_mut().zip(&cur.ports) {
            p.admin_up = c.admin_up;
            p.path_pin = c.path_pin;
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
