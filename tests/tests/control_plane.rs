//! The control plane end to end, against a running switch on in-memory ports: ToR A of an
//! in-process rack pair is handed to [`Control`] and served on a Unix socket and a metrics
//! endpoint from a control thread, while host a1 sends RoCE WRITEs to host b1 through the rack.
//! Every `sprayctl` command runs as the real binary, tables and `--json`; a bad reload changes
//! nothing, a good one applies under traffic; an uplink goes down and up under traffic; nothing
//! sent is lost; metrics are scraped and parsed; the socket is private; a malformed request
//! gets an error and the switch carries on.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use sprayswitch::counters::Scope;
use sprayswitch::engine::DropReason;
use sprayswitch::pkt::Pkt;
use sprayswitch::port::Port;
use sprayswitch::reorder::ReorderTotals;
use sprayswitch::stats::{PortStats, Stats};
use sprayswitch_control::ctl::Control;
use sprayswitch_control::server::ControlServer;
use sprayswitch_control::{Config, DEFAULT_CONFIG};
use sprayswitch_harness::rack::topo::{RackPair, RackPairSpec};
use sprayswitch_tests::frames::{roce_write, tag_of};
use sprayswitch_tests::{bin_dir, shared_cpu_reorder};

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ssw-ctl-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The embedded default with the test timers of the rack pair (and the policy the rack runs).
fn config_text(extra: &str) -> String {
    let text = DEFAULT_CONFIG
        .replace("hold_timeout_us = 500", "hold_timeout_us = 5000")
        .replace("learn_us = 100", "learn_us = 5000");
    format!("{text}\n{extra}")
}

fn ctl(sock: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin_dir(&["sprayctl"]).join("sprayctl"))
        .arg("--socket")
        .arg(sock)
        .args(args)
        .output()
        .expect("sprayctl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn ctl_json(sock: &Path, args: &[&str]) -> Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let (ok, out, err) = ctl(sock, &a);
    assert!(ok, "sprayctl {args:?}: {out}{err}");
    let v: Value = serde_json::from_str(out.trim()).expect("JSON answer");
    assert_eq!(v["ok"], true, "{v}");
    v["data"].clone()
}

fn scrape(addr: std::net::SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    body.split("\r\n\r\n").nth(1).unwrap_or("").to_string()
}

/// Parses Prometheus text into (name{labels}, value) pairs, checking the format as it goes.
/// Every row of every counter table, and every drop reason, appears in `show counters` (or
/// `show ports`) and in the metrics, under the names its table gives.
fn every_counter_is_in_the_json_and_the_metrics(sock: &Path, text: &str) {
    let declared = |metric: &str| text.contains(&format!("# TYPE {metric} "));
    let counters = ctl_json(sock, &["show", "counters"]);
    for r in Stats::default().rows() {
        match r.scope {
            Scope::Worker => assert!(
                text.contains(&format!("{}{{worker=\"0\"}}", r.metric)),
                "{} per worker",
                r.metric
            ),
            Scope::SwitchAndWorker => {
                let per_worker = r.metric.replacen("sprayswitch_", "sprayswitch_worker_", 1);
                assert!(
                    text.contains(&format!("{per_worker}{{worker=\"0\"}}")),
                    "{per_worker}"
                );
            }
            _ => {}
        }
        if r.scope != Scope::Worker {
            assert!(
                counters[r.name].is_u64(),
                "show counters lacks {}: {counters}",
                r.name
            );
            assert!(declared(r.metric), "metrics lack {}", r.metric);
        }
    }
    for r in ReorderTotals::default().rows() {
        assert!(
            counters["reorder"][r.name].is_u64(),
            "show counters lacks reorder {}",
            r.name
        );
        assert!(declared(r.metric), "metrics lack {}", r.metric);
    }
    for d in DropReason::ALL {
        assert!(
            counters["drops"][d.name()].is_u64(),
            "show counters lacks drop {}",
            d.name()
        );
        assert!(
            text.contains(&format!(
                "sprayswitch_drop_packets_total{{reason=\"{}\"}}",
                d.name()
            )),
            "metrics lack drop reason {}",
            d.name()
        );
    }
    let ports = ctl_json(sock, &["show", "ports"]);
    let port = |name: &str| {
        ports
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()
            .clone()
    };
    let (h1, u0) = (port("h1"), port("u0"));
    for r in PortStats::default().rows() {
        let (on, off) = match r.scope {
            Scope::Uplink => (&u0, &h1),
            Scope::Downlink => (&h1, &u0),
            _ => (&h1, &h1),
        };
        assert!(on[r.name].is_u64(), "show ports lacks {}: {on}", r.name);
        if r.scope == Scope::Uplink || r.scope == Scope::Downlink {
            assert!(off[r.name].is_null(), "{} shown on {off}", r.name);
        }
        assert!(declared(r.metric), "metrics lack {}", r.metric);
    }
}

fn parse_metrics(text: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
            continue;
        }
        let (name, value) = line.rsplit_once(' ').expect("name value");
        let metric = name.split('{').next().unwrap();
        assert!(
            metric.starts_with("sprayswitch_")
                && metric
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()),
            "{line}"
        );
        out.push((name.to_string(), value.parse::<f64>().expect("a number")));
    }
    out
}

#[test]
fn sprayctl_reload_uplinks_and_metrics_on_a_running_switch() {
    let dir = tmp("e2e");
    let sock = dir.join("tor-a.sock");
    let cfg_path = dir.join("tor-a.toml");
    std::fs::write(&cfg_path, config_text("")).unwrap();

    let spec = RackPairSpec {
        reorder: Some(shared_cpu_reorder()),
        health_interval_us: Some(sprayswitch_harness::rack::topo::REAL_TIME_PROBE_US),
        ..RackPairSpec::default()
    };
    let RackPair {
        tor_a,
        tor_b,
        mut hosts_a,
        mut hosts_b,
        ..
    } = RackPair::start(&spec).unwrap();
    let cfg = Config::load(&cfg_path).unwrap();
    let v = cfg.validate().unwrap();
    let mut control = Control::new(tor_a, cfg, v, Some(cfg_path.clone()));
    let mut server =
        ControlServer::bind(Some(&sock), Some("127.0.0.1:0".parse().unwrap())).unwrap();
    let metrics_addr = server.metrics_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));

    // Socket permissions: owner only.
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // Traffic: a1 -> b1, 16 QPs (spread over the uplinks by the spray policy), tagged.
    let sent = Arc::new(AtomicU64::new(0));
    let got = Arc::new(AtomicU64::new(0));
    let b_ip = IpAddr::V4(hosts_b[0].ip4);
    let (a1, b1) = (hosts_a.remove(0), hosts_b.remove(0));
    let a_stop = stop.clone();
    let a_sent = sent.clone();
    let sender = std::thread::spawn(move || {
        let mut a1 = a1;
        let mut psn = [0u32; 16];
        let mut n = 0u32;
        let mut q: Vec<Pkt> = Vec::new();
        while !a_stop.load(Ordering::Relaxed) {
            for qp in 0..16u32 {
                let p = roce_write(
                    &a1,
                    b_ip,
                    0x100 + qp,
                    psn[qp as usize],
                    5000 + qp as u16,
                    256,
                    n,
                );
                psn[qp as usize] += 1;
                n += 1;
                q.push(p);
            }
            while !q.is_empty() {
                a1.port.tx_burst(0, &mut q);
            }
            a_sent.store(u64::from(n), Ordering::Relaxed);
            std::thread::sleep(Duration::from_micros(500));
        }
        // Drain anything the switch sent back (none expected), keeping the link clean.
        let mut rx = Vec::new();
        a1.port.rx_burst(0, &mut rx, 1024);
    });
    let b_stop = stop.clone();
    let b_got = got.clone();
    let receiver = std::thread::spawn(move || {
        let mut b1 = b1;
        let mut rx = Vec::with_capacity(256);
        let mut seen = std::collections::HashSet::new();
        let mut quiet_since = None;
        loop {
            let n = b1.port.rx_burst(0, &mut rx, 256);
            for p in rx.drain(..) {
                seen.insert(tag_of(p.data()));
            }
            b_got.store(seen.len() as u64, Ordering::Relaxed);
            if b_stop.load(Ordering::Relaxed) {
                // Stop after the stream has been quiet for a while.
                if n == 0 {
                    let t = *quiet_since.get_or_insert_with(Instant::now);
                    if t.elapsed() > Duration::from_millis(300) {
                        break;
                    }
                } else {
                    quiet_since = None;
                }
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    });

    let srv_stop = stop.clone();
    let served = std::thread::spawn(move || {
        while !srv_stop.load(Ordering::Relaxed) {
            if !server.poll(&mut control) {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        control
    });
    std::thread::sleep(Duration::from_millis(300));

    // Every show command, as a table and as JSON.
    for what in [
        "ports",
        "uplinks",
        "paths",
        "routes",
        "neighbors",
        "streams",
        "counters",
        "hosts",
        "queues",
        "workers",
    ] {
        let (ok, out, err) = ctl(&sock, &["show", what]);
        assert!(ok, "show {what}: {err}");
        assert!(!out.trim().is_empty(), "show {what} printed nothing");
        let data = ctl_json(&sock, &["show", what]);
        assert!(data.is_array() || data.is_object(), "{what}: {data}");
    }
    let queues = ctl_json(&sock, &["show", "queues"]);
    assert_eq!(queues.as_array().unwrap().len(), 6, "{queues}");
    for field in [
        "queue_bytes",
        "depth_p50_bytes",
        "depth_p99_bytes",
        "depth_max_bytes",
        "ecn_marked",
        "tx_queue_drops",
        "pause_frames",
        "pfc_frames",
        "paused_us",
    ] {
        assert!(
            queues[0][field].is_u64(),
            "show queues lacks {field}: {queues}"
        );
    }
    let hosts = ctl_json(&sock, &["show", "hosts"]);
    assert!(hosts[0]["host_paused_us"].is_u64(), "{hosts}");

    // The per-core view: the one worker polls every port, loops, is busy some of the time and
    // forwards what it receives; `stats clear` starts a fresh window for every counter view.
    let workers = ctl_json(&sock, &["show", "workers"]);
    let w = &workers[0];
    assert_eq!(w["ports"], "h1 h2 u0 u1 u2 u3", "{workers}");
    assert!(
        w["iterations"].as_u64().unwrap() > w["idle_iterations"].as_u64().unwrap(),
        "{w}"
    );
    assert!(w["busy_ms"].as_f64().unwrap() > 0.0, "{w}");
    assert!(w["idle_ms"].as_f64().unwrap() > 0.0, "{w}");
    assert!(w["rx_pkts"].as_u64().unwrap() > 0, "{w}");
    assert!(w["pkts_per_busy_iteration"].as_f64().unwrap() >= 1.0, "{w}");
    assert!(w["ns_per_pkt"].as_f64().unwrap() > 0.0, "{w}");
    assert_eq!(w["window_s"], Value::Null, "since start before any clear");
    let before = ctl_json(&sock, &["show", "counters"])["rx_pkts"]
        .as_u64()
        .unwrap();
    let h1_before = ctl_json(&sock, &["show", "ports"])[0]["rx_pkts"]
        .as_u64()
        .unwrap();
    let (ok, _, err) = ctl(&sock, &["stats", "clear"]);
    assert!(ok, "stats clear: {err}");
    let after = ctl_json(&sock, &["show", "counters"]);
    assert!(after["window_s"].as_f64().unwrap() < 1.0, "{after}");
    let in_window = after["rx_pkts"].as_u64().unwrap();
    assert!(
        in_window < before,
        "the window counts from the clear: {in_window} of {before}"
    );
    let ports_now = ctl_json(&sock, &["show", "ports"]);
    assert!(
        ports_now[0]["rx_pkts"].as_u64().unwrap() < h1_before,
        "{h1_before}: {ports_now}"
    );
    // Prometheus stays monotonic: its counters are not reset by a window.
    let text = scrape(metrics_addr);
    let scraped = parse_metrics(&text)
        .into_iter()
        .find(|(n, _)| n == "sprayswitch_rx_packets_total")
        .map(|(_, v)| v as u64)
        .unwrap();
    assert!(scraped >= before, "{scraped} < {before}");
    assert!(
        text.contains("sprayswitch_worker_busy_nanoseconds_total{worker=\"0\"}"),
        "per-worker busy time in the metrics"
    );
    let ports = ctl_json(&sock, &["show", "ports"]);
    assert_eq!(ports.as_array().unwrap().len(), 6);
    assert_eq!(ports[2]["name"], "u0");
    let (_, table, _) = ctl(&sock, &["show", "ports"]);
    assert!(table.lines().next().unwrap().starts_with("name"), "{table}");
    let routes = ctl_json(&sock, &["show", "routes"]);
    assert!(
        routes
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["prefix"] == "10.2.0.0/16" && r["target"] == "fabric"),
        "{routes}"
    );
    let hosts = ctl_json(&sock, &["show", "hosts"]);
    assert_eq!(hosts.as_array().unwrap().len(), 2, "{hosts}");
    let streams = ctl_json(&sock, &["show", "streams", "--top", "5"]);
    assert!(streams.as_array().unwrap().len() <= 5);
    let counters = ctl_json(&sock, &["show", "counters"]);
    assert_eq!(counters["spray_policy"], "round_robin");
    assert!(counters["sprayed"].as_u64().unwrap() > 0, "{counters}");
    // The host's RoCE WRITEs after the first per destination take the engine's fast path.
    assert!(counters["fast_path"].as_u64().unwrap() > 0, "{counters}");

    // Settings.
    let r = ctl_json(&sock, &["set", "spray-policy", "random"]);
    assert_eq!(r["spray_policy"], "random");
    assert_eq!(
        ctl_json(&sock, &["show", "counters"])["spray_policy"],
        "random"
    );
    let (ok, _, err) = ctl(&sock, &["set", "spray-policy", "fastest"]);
    assert!(!ok && err.contains("fastest"), "{err}");
    ctl_json(&sock, &["set", "hold-timeout", "6000"]);
    let (ok, _, err) = ctl(&sock, &["set", "hold-timeout", "0"]);
    assert!(!ok && err.contains("use 1"), "{err}");

    // Uplink down under traffic: it stops carrying packets; up again: it carries them again.
    ctl_json(&sock, &["set", "uplink", "u1", "down"]);
    let (ok, _, err) = ctl(&sock, &["set", "uplink", "h1", "down"]);
    assert!(!ok && err.contains("not an uplink"), "{err}");
    std::thread::sleep(Duration::from_millis(100));
    let tx_of = |name: &str| -> u64 {
        ctl_json(&sock, &["show", "uplinks"])
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["port"] == name)
            .unwrap()["tx_pkts"]
            .as_u64()
            .unwrap()
    };
    let before = tx_of("u1");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(tx_of("u1"), before, "a down uplink carries nothing");
    let up = ctl_json(&sock, &["show", "uplinks"]);
    assert_eq!(up[1]["admin"], "down", "{up}");
    ctl_json(&sock, &["set", "uplink", "u1", "up"]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(tx_of("u1") > before, "back up, it carries traffic again");

    // Path health: the two ToRs probe each other over every path, and every path is in the
    // spray set.
    let paths = ctl_json(&sock, &["show", "paths"]);
    let rows = paths.as_array().unwrap();
    assert_eq!(rows.len(), 4, "{paths}");
    for r in rows {
        assert_eq!(r["peer"], "10.2.1.1", "{r}");
        assert_eq!(r["sprayed"], "yes", "{r}");
        assert_eq!(r["pin"], "auto", "{r}");
        let ago: f64 = r["heard_ms_ago"].as_str().unwrap().parse().unwrap();
        assert!(ago < 100.0, "tor-b last heard {ago} ms ago: {r}");
    }
    // Pinned out: it carries nothing but its probes, and says so; back to auto: traffic again.
    ctl_json(&sock, &["set", "path", "u2", "out"]);
    std::thread::sleep(Duration::from_millis(100));
    // What the port sent and the probes among them, from one answer.
    let sent_and_probes = |name: &str| -> (u64, u64) {
        let ports = ctl_json(&sock, &["show", "ports"]);
        let p = ports
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["name"] == name)
            .unwrap()
            .clone();
        (
            p["tx_pkts"].as_u64().unwrap(),
            p["probes_tx"].as_u64().unwrap(),
        )
    };
    let (tx0, probes0) = sent_and_probes("u2");
    std::thread::sleep(Duration::from_millis(300));
    let (tx1, probes1) = sent_and_probes("u2");
    assert!(probes1 > probes0, "a pinned-out path is still probed");
    // The two counters move at different moments: a probe counts in `probes_tx` when the
    // monitor queues it (one per peer a poll) and in `tx_pkts` when the port takes it (at the
    // latest in the next iteration's flush), and `probes_tx` is published at the end of each
    // worker iteration while `tx_pkts` moves at once. So one answer may count a peer's latest
    // probe in either and not yet in the other: each reading is off by at most one probe a
    // peer, the difference of two by at most two a peer. Sprayed data would be hundreds of
    // packets in 300 ms.
    let peers = ctl_json(&sock, &["show", "paths"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["port"] == "u2")
        .count() as u64;
    let (on_u2, probes) = (tx1 - tx0, probes1 - probes0);
    assert!(
        on_u2.abs_diff(probes) <= 2 * peers,
        "nothing but probes on a pinned-out path: {on_u2} sent, {probes} probes, {peers} peers"
    );
    let paths = ctl_json(&sock, &["show", "paths"]);
    assert_eq!(paths[2]["port"], "u2");
    assert_eq!(
        (&paths[2]["pin"], &paths[2]["sprayed"]),
        (&"out".into(), &"no".into())
    );
    let m = parse_metrics(&scrape(metrics_addr));
    let state = |port: &str| {
        m.iter()
            .find(|(n, _)| n == &format!("sprayswitch_path_state{{port=\"{port}\"}}"))
            .map(|(_, v)| *v)
    };
    assert_eq!(state("u2"), Some(3.0), "pinned out");
    // Back in the spray set. "In" or "in but suspect": suspect flickers whenever a probe is
    // 1.5 intervals (75 us) late, which a loaded two-core machine running both switches and
    // the traffic makes now and then (seen twice as 1.0 here).
    assert!(
        matches!(state("u1"), Some(s) if s == 0.0 || s == 1.0),
        "in: {:?}",
        state("u1")
    );
    assert_eq!(state("h1"), None, "a downlink has no path state");
    let (ok, _, err) = ctl(&sock, &["set", "path", "h1", "out"]);
    assert!(!ok && err.contains("no member"), "{err}");
    let (ok, _, err) = ctl(&sock, &["set", "path", "u2", "sideways"]);
    assert!(!ok && err.contains("'in', 'out' or 'auto'"), "{err}");
    ctl_json(&sock, &["set", "path", "u2", "auto"]);
    std::thread::sleep(Duration::from_millis(300));
    let (tx2, probes2) = sent_and_probes("u2");
    assert!(tx2 - tx1 > probes2 - probes1, "back in the spray set");

    // Reload: a bad file changes nothing and says why.
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        config_text("[[route]]\nprefix = \"10.9.0.0/16\"\nport = \"nope\"\n"),
    )
    .unwrap();
    let (ok, _, err) = ctl(&sock, &["reload", bad.to_str().unwrap()]);
    assert!(!ok && err.contains("unknown port 'nope'"), "{err}");
    let gen_before = ctl_json(&sock, &["show", "counters"])["generation"].clone();
    // A port change needs a restart: refused, nothing changes.
    let ports_changed = dir.join("ports.toml");
    std::fs::write(
        &ports_changed,
        config_text("[[port]]\nname = \"h3\"\nrole = \"downlink\"\nmac = \"02:5a:01:01:00:03\"\n"),
    )
    .unwrap();
    let (ok, _, err) = ctl(&sock, &["reload", ports_changed.to_str().unwrap()]);
    assert!(!ok && err.contains("restart"), "{err}");
    // So does a change of the stamps' lanes (every ToR reads them with its own).
    let lanes_changed = dir.join("lanes.toml");
    std::fs::write(
        &lanes_changed,
        config_text("").replace("burst = 32\n", "burst = 32\npath_stamp_lanes = 2\n"),
    )
    .unwrap();
    let (ok, _, err) = ctl(&sock, &["reload", lanes_changed.to_str().unwrap()]);
    assert!(!ok && err.contains("path_stamp_lanes changed"), "{err}");
    assert_eq!(
        ctl_json(&sock, &["show", "counters"])["generation"],
        gen_before
    );
    // A good file with a new route and the ECMP policy: applied under traffic.
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        config_text("[[route]]\nprefix = \"10.3.0.0/16\"\ngroup = \"fabric\"\n")
            .replace("spray_policy = \"round_robin\"", "spray_policy = \"ecmp\"")
            .replace(
                "burst = 32\n",
                "burst = 32\necn = { kmin_kb = 50, kmax_kb = 200, pmax = 0.1 }\n",
            ),
    )
    .unwrap();
    assert_eq!(ctl_json(&sock, &["show", "queues"])[0]["ecn"], Value::Null);
    let r = ctl_json(&sock, &["reload", good.to_str().unwrap()]);
    assert!(r["applied"].as_str().unwrap().ends_with("good.toml"), "{r}");
    // Marking thresholds change in place.
    let queues = ctl_json(&sock, &["show", "queues"]);
    assert_eq!(queues[0]["ecn"]["kmax_kb"], 200.0, "{queues}");
    let routes = ctl_json(&sock, &["show", "routes"]);
    assert!(routes
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["prefix"] == "10.3.0.0/16"));
    assert_eq!(
        ctl_json(&sock, &["show", "counters"])["spray_policy"],
        "ecmp"
    );
    // Reload of the file it runs (as SIGHUP does).
    ctl_json(&sock, &["reload"]);

    // Metrics: scraped and parsed, with the conventions.
    let text = scrape(metrics_addr);
    let m = parse_metrics(&text);
    let get = |name: &str| {
        m.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    assert!(get("sprayswitch_rx_packets_total") > 0.0);
    assert!(get("sprayswitch_fast_path_packets_total") > 0.0);
    assert!(get("sprayswitch_port_tx_packets_total{port=\"u0\",role=\"uplink\"}") > 0.0);
    assert_eq!(get("sprayswitch_port_up{port=\"u1\",role=\"uplink\"}"), 1.0);
    assert!(text.contains("# TYPE sprayswitch_drop_packets_total counter"));
    assert!(get("sprayswitch_worker_loops_total{worker=\"0\"}") > 0.0);
    assert!(m
        .iter()
        .any(|(n, _)| n.starts_with("sprayswitch_host_nak_packets_total{port=\"h1\"}")));
    assert!(
        text.contains("sprayswitch_reorder_hold_seconds_bucket{le=\"+Inf\"}"),
        "{text}"
    );
    assert!(
        text.contains(
            "sprayswitch_port_queue_depth_bytes_bucket{port=\"u0\",role=\"uplink\",le=\"+Inf\"}"
        ),
        "{text}"
    );
    every_counter_is_in_the_json_and_the_metrics(&sock, &text);
    let mut s = TcpStream::connect(metrics_addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 404"), "{body}");

    // Live capture of an uplink under traffic.
    let pcap = dir.join("u0.pcap");
    ctl_json(&sock, &["capture", "start", "u0", pcap.to_str().unwrap()]);
    let (ok, _, err) = ctl(&sock, &["capture", "start", "u0", pcap.to_str().unwrap()]);
    assert!(!ok && err.contains("already"), "{err}");
    let (ok, _, err) = ctl(&sock, &["capture", "start", "u9", pcap.to_str().unwrap()]);
    assert!(!ok && err.contains("no port named 'u9'"), "{err}");
    std::thread::sleep(Duration::from_millis(300));
    let done = ctl_json(&sock, &["capture", "stop", "u0"]);
    let frames = sprayswitch_tests::read_capture(&pcap);
    assert!(!frames.is_empty());
    assert_eq!(
        done["frames"].as_u64().unwrap(),
        frames.len() as u64,
        "{done}"
    );
    assert_eq!(done["dropped"], 0);
    let mut probes = 0;
    for f in &frames {
        let c = sprayswitch::wire::classify(f, sprayswitch::wire::Pmtu::DEFAULT).unwrap();
        let probe = matches!(
            c.class,
            sprayswitch::wire::FrameClass::Ip(ip) if ip.l4 == sprayswitch::wire::L4Summary::Udp {
                src_port: sprayswitch::wire::probe::PROBE_UDP_PORT,
                dst_port: sprayswitch::wire::probe::PROBE_UDP_PORT,
            }
        );
        probes += usize::from(probe);
        assert!(
            c.roce().is_some() || probe,
            "only the RoCE traffic and path probes cross u0 here"
        );
    }
    // Both ways: this ToR's probes to tor-b, and tor-b's to it.
    assert!(probes > 100, "{probes} path probes in 0.3 s");
    let (ok, _, err) = ctl(&sock, &["capture", "stop", "u0"]);
    assert!(!ok && err.contains("no capture"), "{err}");

    // A malformed request: an error answer, the connection and the switch carry on.
    let mut raw = UnixStream::connect(&sock).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut lines = BufReader::new(raw.try_clone().unwrap());
    for bad in [
        "this is not json",
        "{\"cmd\":\"explode\"}",
        "{\"cmd\":\"show\",\"what\":\"nothing\"}",
    ] {
        raw.write_all(format!("{bad}\n").as_bytes()).unwrap();
        let mut line = String::new();
        lines.read_line(&mut line).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["ok"], false, "{bad}: {v}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    raw.write_all(b"{\"cmd\":\"show\",\"what\":\"counters\"}\n")
        .unwrap();
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    assert!(line.contains("\"ok\":true"), "{line}");

    // Stop the traffic, let it drain, then count: nothing sent was lost, through the policy
    // changes, the reloads and the uplink going down and up.
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    receiver.join().unwrap();
    let control = served.join().unwrap();
    let stats = control.switch().stats();
    let (sent, got) = (sent.load(Ordering::Relaxed), got.load(Ordering::Relaxed));
    assert!(sent > 1000, "{sent}");
    assert_eq!(
        got,
        sent,
        "every packet sent arrived ({} switch drops)",
        stats.drops_total()
    );
    assert_eq!(stats.drops_total(), 0);
    control.into_switch().stop();
    tor_b.stop();
    assert!(!sock.exists() || UnixStream::connect(&sock).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
