//! The Grafana dashboard `docs/grafana/sprayswitch.json` against a running switch. ToR A of an
//! in-process rack pair is handed to [`Control`] and its metrics endpoint is scraped over HTTP,
//! as Prometheus would; the exported series come from that scrape (`# TYPE` lines, a
//! histogram's `_bucket`/`_sum`/`_count`), not from a list kept by hand. Then:
//!
//! - every metric a panel or a template variable queries is one the switch exports, and every
//!   label it matches, groups by or names in a legend is one those series carry;
//! - every selector is filtered by the `instance` variable and every panel queries the
//!   `datasource` variable;
//! - the dashboard covers each area an operator needs: port rates and queues, drops, what the
//!   reorder stage holds and for how long, hold timeouts, losses by how they were found, ECN
//!   marks, host NAKs, CNPs, host and fabric pauses, path health, worker busy share.
//!
//! The PromQL reader here is small on purpose: it finds metric names, label matchers and
//! grouping labels, and refuses what it cannot attribute to a metric (a selector without a
//! name). It is not a PromQL validator; Grafana and Prometheus are.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sprayswitch_control::ctl::Control;
use sprayswitch_control::server::ControlServer;
use sprayswitch_control::{Config, DEFAULT_CONFIG};
use sprayswitch_harness::rack::topo::{RackPair, RackPairSpec};
use sprayswitch_tests::{repo_root, shared_cpu_reorder};

/// Labels Prometheus adds to every scraped series.
const TARGET_LABELS: [&str; 2] = ["instance", "job"];

/// Label names, each with the values it takes.
type Labels = BTreeMap<String, BTreeSet<String>>;

/// What a running switch's metrics endpoint serves: each series name with its labels.
struct Exported {
    series: BTreeMap<String, Labels>,
}

impl Exported {
    /// Reads Prometheus text: the series each `# TYPE` line declares, checked against the
    /// sample lines (each declared series has samples, each sample a declared series).
    fn parse(text: &str) -> Exported {
        let mut declared = BTreeSet::new();
        let mut series: BTreeMap<String, Labels> = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
                let suffixes: &[&str] = match kind {
                    "histogram" => &["_bucket", "_sum", "_count"],
                    "summary" => &["", "_sum", "_count"],
                    "counter" | "gauge" | "untyped" => &[""],
                    _ => panic!("unknown metric kind: {line}"),
                };
                declared.extend(suffixes.iter().map(|s| format!("{name}{s}")));
            } else if line.starts_with('#') || line.is_empty() {
                continue;
            } else {
                let (name, labels) = sample_labels(line);
                let known = series.entry(name).or_default();
                for (label, value) in labels {
                    known.entry(label).or_default().insert(value);
                }
            }
        }
        let sampled: BTreeSet<String> = series.keys().cloned().collect();
        assert_eq!(
            declared, sampled,
            "the declared series and the sampled ones differ"
        );
        Exported { series }
    }

    fn labels(&self, metric: &str) -> Option<&Labels> {
        self.series.get(metric)
    }
}

/// A sample line's series name and labels (name, value as written).
fn sample_labels(line: &str) -> (String, Vec<(String, String)>) {
    let end = line
        .find(['{', ' '])
        .unwrap_or_else(|| panic!("no value: {line}"));
    let name = line[..end].to_string();
    let mut labels = Vec::new();
    if line[end..].starts_with('{') {
        let mut rest = &line[end + 1..];
        loop {
            if let Some(r) = rest.strip_prefix('}') {
                assert!(r.starts_with(' '), "a value follows the labels: {line}");
                break;
            }
            let eq = rest.find('=').unwrap_or_else(|| panic!("label=: {line}"));
            let label = rest[..eq].to_string();
            rest = rest[eq + 1..]
                .strip_prefix('"')
                .unwrap_or_else(|| panic!("a quoted label value: {line}"));
            // The value: up to the first quote that no backslash escapes.
            let mut escaped = false;
            let close = rest
                .char_indices()
                .find(|&(_, c)| {
                    let end = c == '"' && !escaped;
                    escaped = c == '\\' && !escaped;
                    end
                })
                .map(|(i, _)| i)
                .unwrap_or_else(|| panic!("an unterminated label value: {line}"));
            labels.push((label, rest[..close].to_string()));
            rest = &rest[close + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
    }
    (name, labels)
}

/// A vector selector: its metric name and label matchers.
#[derive(Debug)]
struct Selector {
    metric: String,
    matchers: Vec<Matcher>,
}

/// One label matcher: `label op "value"` (the value as written, quotes off).
#[derive(Debug)]
struct Matcher {
    label: String,
    op: String,
    value: String,
}

impl Matcher {
    fn is(&self, label: &str, op: &str, value: &str) -> bool {
        (self.label.as_str(), self.op.as_str(), self.value.as_str()) == (label, op, value)
    }
}

/// What a PromQL expression queries.
#[derive(Debug, Default)]
struct Query {
    selectors: Vec<Selector>,
    /// Labels of every `by (...)`.
    by: Vec<String>,
    /// Labels of `without`, `on`, `ignoring`, `group_left` and `group_right`.
    other_grouping: Vec<String>,
}

/// Words that are neither metrics nor functions.
const KEYWORDS: [&str; 8] = [
    "and", "or", "unless", "bool", "offset", "atan2", "inf", "nan",
];
/// Aggregation operators (their `by (...)` may come before their parentheses).
const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
/// Words followed by a list of labels.
const GROUPING: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Reads the metric names, label matchers and grouping labels of a PromQL expression (Grafana
/// variables such as `$instance` and `$__rate_interval` allowed).
///
/// # Errors
/// A selector without a metric name, or a label list or matcher it cannot read.
fn read_promql(expr: &str) -> Result<Query, String> {
    let b = expr.as_bytes();
    let mut q = Query::default();
    let mut i = 0;
    // The selector a `{` right after it belongs to.
    let mut last_metric: Option<usize> = None;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let was_metric = last_metric.take();
        match c {
            b'"' | b'\'' | b'`' => i = skip_string(b, i)?,
            b'[' => {
                i += b[i..]
                    .iter()
                    .position(|&c| c == b']')
                    .ok_or("an unclosed [")?
                    + 1
            }
            b'$' => {
                i += 1;
                let braced = b.get(i) == Some(&b'{');
                while i < b.len() && (is_word(b[i]) || (braced && b[i] != b'}')) {
                    i += 1;
                }
                i += usize::from(braced);
            }
            b'{' => {
                let s = was_metric
                    .ok_or_else(|| format!("a selector without a metric name at {i}: {expr}"))?;
                let (matchers, next) = read_matchers(b, i)?;
                q.selectors[s].matchers = matchers;
                i = next;
            }
            b'0'..=b'9' | b'.' => {
                while i < b.len() && (is_word(b[i]) || b[i] == b'.') {
                    i += 1;
                }
            }
            c if is_word(c) => {
                let start = i;
                while i < b.len() && (is_word(b[i]) || b[i] == b':') {
                    i += 1;
                }
                let word = &expr[start..i];
                let next = b[i..].iter().find(|c| !c.is_ascii_whitespace()).copied();
                if GROUPING.contains(&word) {
                    if next == Some(b'(') {
                        let (labels, after) = read_label_list(b, i)?;
                        if word == "by" {
                            q.by.extend(labels);
                        } else {
                            q.other_grouping.extend(labels);
                        }
                        i = after;
                    }
                } else if next == Some(b'(')
                    || AGGREGATIONS.contains(&word)
                    || KEYWORDS.contains(&word.to_lowercase().as_str())
                {
                    // A function or an aggregation; its arguments are read as they come.
                } else {
                    q.selectors.push(Selector {
                        metric: word.to_string(),
                        matchers: Vec::new(),
                    });
                    last_metric = Some(q.selectors.len() - 1);
                }
            }
            _ => i += 1,
        }
    }
    Ok(q)
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The index after the string literal starting at `i`.
fn skip_string(b: &[u8], i: usize) -> Result<usize, String> {
    let quote = b[i];
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' if quote != b'`' => j += 2,
            c if c == quote => return Ok(j + 1),
            _ => j += 1,
        }
    }
    Err(format!("an unterminated string at {i}"))
}

/// The label matchers of the `{...}` at `i`, and the index after it.
fn read_matchers(b: &[u8], i: usize) -> Result<(Vec<Matcher>, usize), String> {
    let text = String::from_utf8_lossy(b);
    let mut out = Vec::new();
    let mut j = i + 1;
    loop {
        while j < b.len() && (b[j].is_ascii_whitespace() || b[j] == b',') {
            j += 1;
        }
        match b.get(j) {
            Some(b'}') => return Ok((out, j + 1)),
            None => return Err("an unclosed {".into()),
            _ => {}
        }
        let start = j;
        while j < b.len() && is_word(b[j]) {
            j += 1;
        }
        let label = text[start..j].to_string();
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        let op_start = j;
        while j < b.len() && matches!(b[j], b'=' | b'!' | b'~') {
            j += 1;
        }
        let op = text[op_start..j].to_string();
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        if label.is_empty() || !["=", "!=", "=~", "!~"].contains(&op.as_str()) {
            return Err(format!("a matcher it cannot read at {start}"));
        }
        if !matches!(b.get(j), Some(b'"' | b'\'' | b'`')) {
            return Err(format!("a matcher value that is no string at {j}"));
        }
        let end = skip_string(b, j)?;
        out.push(Matcher {
            label,
            op,
            value: text[j + 1..end - 1].to_string(),
        });
        j = end;
    }
}

/// The labels of the `(...)` list after a grouping word ending before `i`, and the index after
/// the list.
fn read_label_list(b: &[u8], i: usize) -> Result<(Vec<String>, usize), String> {
    let open = i + b[i..].iter().position(|&c| c == b'(').expect("a (");
    let close = open
        + b[open..]
            .iter()
            .position(|&c| c == b')')
            .ok_or("an unclosed label list")?;
    let labels = String::from_utf8_lossy(&b[open + 1..close])
        .split(',')
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>();
    if let Some(bad) = labels.iter().find(|l| !l.bytes().all(is_word)) {
        return Err(format!("a label list it cannot read: {bad}"));
    }
    Ok((labels, close + 1))
}

/// The labels a legend names (`{{port}}`).
fn legend_labels(legend: &str) -> Vec<String> {
    legend
        .split("{{")
        .skip(1)
        .filter_map(|s| s.split_once("}}"))
        .map(|(l, _)| l.trim().to_string())
        .collect()
}

/// Every panel, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for p in list.as_array().into_iter().flatten() {
            out.push(p);
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default()
}

/// The metrics text of ToR A of a running rack pair (reordering on, path health probing),
/// scraped from its endpoint.
fn running_switch_metrics() -> String {
    let spec = RackPairSpec {
        reorder: Some(shared_cpu_reorder()),
        health_interval_us: Some(sprayswitch_harness::rack::topo::REAL_TIME_PROBE_US),
        ..RackPairSpec::default()
    };
    let RackPair {
        tor_a,
        tor_b,
        hosts_a,
        hosts_b,
        ..
    } = RackPair::start(&spec).unwrap();
    let cfg = Config::parse(DEFAULT_CONFIG, "<embedded default>").unwrap();
    let v = cfg.validate().unwrap();
    let mut control = Control::new(tor_a, cfg, v, None);
    let mut server = ControlServer::bind(None, Some("127.0.0.1:0".parse().unwrap())).unwrap();
    let addr = server.metrics_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let served = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if !server.poll(&mut control) {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            control
        })
    };
    // The families are there from the start; a moment of running fills some of them (the
    // workers publish histograms and path reports every 100 ms at most).
    std::thread::sleep(Duration::from_millis(200));
    let text = scrape(addr);
    stop.store(true, Ordering::Relaxed);
    served.join().unwrap().into_switch().stop();
    tor_b.stop();
    drop((hosts_a, hosts_b));
    text
}

/// One area the dashboard must cover: a panel whose selectors satisfy `covers`.
struct Area {
    name: &'static str,
    covers: fn(&[Selector]) -> bool,
}

fn queries(s: &[Selector], metric: &str) -> bool {
    s.iter().any(|s| s.metric == metric)
}

/// A selector of one of `metrics` on ports of `role`.
fn on_role(s: &[Selector], metrics: &[&str], role: &str) -> bool {
    s.iter().any(|s| {
        metrics.contains(&s.metric.as_str()) && s.matchers.iter().any(|m| m.is("role", "=", role))
    })
}

const PAUSES: [&str; 3] = [
    "sprayswitch_port_paused_nanoseconds_total",
    "sprayswitch_port_pause_frames_total",
    "sprayswitch_port_pfc_frames_total",
];

const AREAS: [Area; 17] = [
    Area {
        name: "per-port packet rates",
        covers: |s| queries(s, "sprayswitch_port_rx_packets_total"),
    },
    Area {
        name: "per-port byte rates",
        covers: |s| queries(s, "sprayswitch_port_tx_bytes_total"),
    },
    Area {
        name: "drops by reason",
        covers: |s| queries(s, "sprayswitch_drop_packets_total"),
    },
    Area {
        name: "per-port queue depth",
        covers: |s| queries(s, "sprayswitch_port_queue_depth_bytes_bucket"),
    },
    Area {
        name: "reorder held packets",
        covers: |s| queries(s, "sprayswitch_reorder_holding_packets"),
    },
    Area {
        name: "reorder held bytes",
        covers: |s| queries(s, "sprayswitch_reorder_peak_held_bytes"),
    },
    Area {
        name: "reorder hold time",
        covers: |s| queries(s, "sprayswitch_reorder_hold_seconds_bucket"),
    },
    Area {
        name: "reorder hold timeouts",
        covers: |s| queries(s, "sprayswitch_reorder_hold_timeouts_total"),
    },
    Area {
        name: "losses by how they were found, side by side",
        covers: |s| {
            [
                "sprayswitch_reorder_path_order_losses_total",
                "sprayswitch_reorder_hold_timeouts_total",
                "sprayswitch_reorder_pool_give_ups_total",
                "sprayswitch_reorder_overflows_total",
            ]
            .iter()
            .all(|m| queries(s, m))
        },
    },
    Area {
        name: "ECN marks",
        covers: |s| queries(s, "sprayswitch_port_ecn_marked_packets_total"),
    },
    Area {
        name: "host NAKs",
        covers: |s| queries(s, "sprayswitch_host_nak_packets_total"),
    },
    Area {
        name: "host CNPs",
        covers: |s| queries(s, "sprayswitch_host_cnp_packets_total"),
    },
    Area {
        name: "host pauses (downlinks)",
        covers: |s| on_role(s, &PAUSES, "downlink"),
    },
    Area {
        name: "fabric pauses (uplinks), apart from the hosts'",
        covers: |s| on_role(s, &PAUSES, "uplink"),
    },
    Area {
        name: "path health state",
        covers: |s| queries(s, "sprayswitch_path_state"),
    },
    Area {
        name: "path loss",
        covers: |s| queries(s, "sprayswitch_path_loss_ppm"),
    },
    Area {
        name: "per-worker busy share",
        covers: |s| {
            queries(s, "sprayswitch_worker_busy_nanoseconds_total")
                && queries(s, "sprayswitch_worker_idle_nanoseconds_total")
        },
    },
];

/// Checks one target's query (and its legend) against what the switch exports, adding what
/// is wrong to `problems`; returns the query's selectors.
fn check_query(
    where_: &str,
    expr: &str,
    legend: Option<&str>,
    exported: &Exported,
    problems: &mut Vec<String>,
) -> Vec<Selector> {
    let q = match read_promql(expr) {
        Ok(q) => q,
        Err(e) => {
            problems.push(format!("{where_}: {e}"));
            return Vec::new();
        }
    };
    if q.selectors.is_empty() {
        problems.push(format!("{where_}: queries no metric: {expr}"));
    }
    let mut carried: BTreeSet<&str> = TARGET_LABELS.into_iter().collect();
    for s in &q.selectors {
        let Some(labels) = exported.labels(&s.metric) else {
            problems.push(format!(
                "{where_}: {} is not exported by the switch",
                s.metric
            ));
            continue;
        };
        carried.extend(labels.keys().map(String::as_str));
        for Matcher {
            label: l,
            op,
            value: v,
        } in &s.matchers
        {
            if TARGET_LABELS.contains(&l.as_str()) {
                continue;
            }
            match labels.get(l) {
                None => problems.push(format!("{where_}: {} has no label {l}", s.metric)),
                // A literal equality matcher names a value the switch exports.
                Some(values) if op == "=" && !v.contains('$') && !values.contains(v) => problems
                    .push(format!(
                        "{where_}: {} has no {l}=\"{v}\" (only {values:?})",
                        s.metric
                    )),
                Some(_) => {}
            }
        }
        if !s
            .matchers
            .iter()
            .any(|m| m.is("instance", "=~", "$instance") || m.is("instance", "=", "$instance"))
        {
            problems.push(format!(
                "{where_}: {} is not filtered by $instance",
                s.metric
            ));
        }
    }
    for l in q.by.iter().chain(&q.other_grouping) {
        if !carried.contains(l.as_str()) {
            problems.push(format!(
                "{where_}: groups by {l}, which none of its series carry"
            ));
        }
    }
    // After a `by`, only its labels are left for the legend.
    let left: BTreeSet<&str> = if q.by.is_empty() {
        carried
    } else {
        q.by.iter().map(String::as_str).collect()
    };
    for l in legend.map(legend_labels).unwrap_or_default() {
        if !left.contains(l.as_str()) {
            problems.push(format!(
                "{where_}: the legend names {l}, which the result lacks"
            ));
        }
    }
    q.selectors
}

/// `label_values(<selector>, <label>)`: its selector and label.
fn label_values(query: &str) -> Option<(&str, &str)> {
    let inner = query
        .trim()
        .strip_prefix("label_values(")?
        .strip_suffix(')')?;
    let (sel, label) = inner.rsplit_once(',')?;
    Some((sel.trim(), label.trim()))
}

#[test]
fn every_metric_the_dashboard_queries_is_one_a_running_switch_exports() {
    let path = repo_root().join("docs/grafana/sprayswitch.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let exported = Exported::parse(&running_switch_metrics());
    assert!(
        exported.series.len() > 80,
        "the scrape has every table: {:?}",
        exported.series.keys()
    );
    let mut problems = Vec::new();

    // Template variables: a Prometheus data source chosen by the user, then the switch.
    let vars = dashboard["templating"]["list"].as_array().unwrap();
    let var = |name: &str| vars.iter().find(|v| v["name"] == name);
    let ds = var("datasource").expect("a datasource variable");
    assert_eq!(
        (ds["type"].as_str(), ds["query"].as_str()),
        (Some("datasource"), Some("prometheus"))
    );
    assert!(var("instance").is_some(), "an instance variable");
    for v in vars.iter().filter(|v| v["type"] == "query") {
        let where_ = format!("variable {}", v["name"]);
        let query = v["query"]["query"]
            .as_str()
            .or(v["query"].as_str())
            .unwrap();
        let (sel, label) = label_values(query)
            .unwrap_or_else(|| panic!("{where_}: a label_values(selector, label) query"));
        let q = read_promql(sel).unwrap();
        assert_eq!(q.selectors.len(), 1, "{where_}: {query}");
        let labels = exported.labels(&q.selectors[0].metric);
        if !labels.is_some_and(|l| l.contains_key(label) || TARGET_LABELS.contains(&label)) {
            problems.push(format!(
                "{where_}: {} with label {label} is not exported",
                q.selectors[0].metric
            ));
        }
        assert_eq!(v["datasource"]["uid"], "${datasource}", "{where_}");
    }

    // Panels: each target's metrics and labels, and which areas each panel covers.
    let mut covered = vec![Vec::new(); AREAS.len()];
    let mut ids = BTreeSet::new();
    let all = panels(&dashboard);
    for p in &all {
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "panel id {}",
            p["id"]
        );
        let g = &p["gridPos"];
        assert!(
            g["x"].as_u64().unwrap() + g["w"].as_u64().unwrap() <= 24,
            "{}",
            p["title"]
        );
        if p["type"] == "row" {
            continue;
        }
        let title = p["title"].as_str().unwrap();
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title} queries nothing");
        let mut selectors = Vec::new();
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}");
            let where_ = format!("panel {title:?} target {}", t["refId"]);
            let expr = t["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("{where_}: expr"));
            selectors.extend(check_query(
                &where_,
                expr,
                t["legendFormat"].as_str(),
                &exported,
                &mut problems,
            ));
        }
        for (a, c) in AREAS.iter().zip(&mut covered) {
            if (a.covers)(&selectors) {
                c.push(title);
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the dashboard queries what the switch does not export:\n{}",
        problems.join("\n")
    );
    for (a, c) in AREAS.iter().zip(&covered) {
        assert!(!c.is_empty(), "no panel shows {}", a.name);
    }
    assert!(all.len() > 40, "{} panels", all.len());
}

#[test]
fn the_promql_reader_finds_metrics_matchers_and_grouping() {
    let q = read_promql(
        "histogram_quantile(0.99, sum by (port, le) (rate(a_bucket{instance=~\"$instance\", \
         port=~\"$port\"}[$__rate_interval]))) / ignoring (x) b offset 5m > bool 1e9",
    )
    .unwrap();
    let names: Vec<_> = q.selectors.iter().map(|s| s.metric.as_str()).collect();
    assert_eq!(names, ["a_bucket", "b"]);
    assert!(q.selectors[0].matchers[1].is("port", "=~", "$port"));
    assert_eq!(q.by, ["port", "le"]);
    assert_eq!(q.other_grouping, ["x"]);
    // A string that looks like a metric is not one; a selector without a name is refused.
    let q = read_promql("label_replace(m, \"dst\", \"$1\", \"src\", \"(.*)\")").unwrap();
    assert_eq!(q.selectors.len(), 1);
    assert!(read_promql("{__name__=~\"sprayswitch_.*\"}").is_err());
    assert_eq!(legend_labels("{{port}} rx {{ role }}"), ["port", "role"]);
    assert_eq!(
        sample_labels("m{a=\"x\\\"},y\",b=\"\"} 1"),
        (
            "m".to_string(),
            vec![
                ("a".to_string(), "x\\\"},y".to_string()),
                ("b".to_string(), String::new())
            ]
        )
    );
}
