//! One record per mode run (what each test did to both guests, the ToRs' reorder sums, where
//! the cores went), the checks a run must pass, and the tables over every round.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::guest::{GuestStats, Perf};
use sprayswitch_packet::percentile::median;

/// What one test did, in both guests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestRow {
    /// Its name in the tables.
    pub label: String,
    /// The perftest program (`ib_read_bw`).
    pub program: String,
    /// perftest's exit status in the server and the client (`None`: never finished).
    pub rc: [Option<i32>; 2],
    /// perftest's result at the client.
    pub perf: Option<Perf>,
    /// Growth of each rxe hw counter over the test, server and client (`None`: not read).
    pub hw: [Option<Vec<(String, i64)>>; 2],
    /// What the ToRs counted over the test (`None`: not sampled).
    #[serde(default)]
    pub tors: Option<super::tors::TorTest>,
}

impl TestRow {
    /// The growth of counter `name` in guest `g` (0 server, 1 client); `None` when not read.
    pub fn counter(&self, g: usize, name: &str) -> Option<i64> {
        self.hw[g]
            .as_ref()?
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
    }

    /// Packets guest `g` (0 server, 1 client) counted as sent over the test that its ToR never
    /// received, while neither ToR dropped anything such a packet could have been: lost on
    /// that guest's side of its ToR (its stack, qemu, the tap), before any switch. Negative:
    /// the ToR counted more than the guest sent (the samples and the guest's counters did not
    /// cover the same packets). `None` when the ToRs were not sampled, the guest's `sent_pkts`
    /// was not read, or a ToR dropped something (then the loss is the switch's to answer for).
    pub fn host_lost(&self, g: usize) -> Option<i64> {
        let t = self.tors?;
        // ToR A serves the client, ToR B the server.
        let tor = if g == 1 { 0 } else { 1 };
        let sent = self.counter(g, "sent_pkts")?;
        (t.switch_drops == [0, 0]).then(|| sent - t.sprayed[tor] as i64)
    }

    /// `server/client` growth of `name`, `?` for what was not read.
    pub fn pair(&self, name: &str) -> String {
        let v = |g| {
            self.counter(g, name)
                .map_or("?".to_string(), |v| v.to_string())
        };
        format!("{}/{}", v(0), v(1))
    }
}

/// The reorder stage's totals at one ToR over a mode's run (from `show counters`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TorSums {
    /// Gaps declared lost after the hold timeout.
    pub timeouts: u64,
    /// Gaps declared lost by path order (0 in records from before it existed).
    #[serde(default)]
    pub path_losses: u64,
    /// Expected PSNs moved by host NAKs.
    pub resyncs: u64,
}

impl TorSums {
    /// From `sprayctl --json show counters`' answer; `None` when it has no reorder totals.
    pub fn from_counters_json(text: &str) -> Option<TorSums> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        let r = v.get("data")?.get("reorder")?;
        Some(TorSums {
            timeouts: r.get("timeouts")?.as_u64()?,
            path_losses: r
                .get("path_losses")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0),
            resyncs: r.get("resyncs")?.as_u64()?,
        })
    }
}

/// Packets the ToR's host port `h1` received (from `sprayctl --json show ports`).
pub fn host_port_packets(ports_json: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(ports_json).ok()?;
    v.get("data")?
        .as_array()?
        .iter()
        .filter(|p| p.get("name").and_then(|n| n.as_str()) == Some("h1"))
        .map(|p| p.get("rx_pkts").and_then(|n| n.as_u64()))
        .sum()
}

/// One mode at one RoCE MTU in one round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModeRecord {
    /// Round (from 1).
    pub round: u32,
    /// `direct`, `wire`, `ecmp`, `spray` or `reorder`.
    pub mode: String,
    /// RoCE path MTU.
    pub pmtu: u32,
    /// Per-path loss of the fabric (empty: none).
    pub loss: String,
    /// Each test, in order.
    pub tests: Vec<TestRow>,
    /// Reorder totals of ToR B (towards the server) and ToR A (towards the client).
    pub tors: [Option<TorSums>; 2],
    /// What the server's and the client's vCPU and NIC did.
    pub guests: [GuestStats; 2],
    /// The CPU line of the switches or the forwarder (from `rxerack usage`).
    pub usage: Option<String>,
    /// How late the emulated paths released packets, both directions.
    pub lateness: Option<String>,
    /// The thread report lines (THREADS=1).
    pub threads: Vec<String>,
}

impl ModeRecord {
    /// What the record shows that is no failure of the switch's but must be said: tests whose
    /// guest errors follow packets lost inside a host (see [`TestRow::host_lost`]), with the
    /// errors they excuse from the loss-free check.
    pub fn notes(&self) -> Vec<String> {
        let (m, p) = (&self.mode, self.pmtu);
        let mut out = Vec::new();
        for (i, t) in self.tests.iter().enumerate() {
            if self.host_losses(i) == 0 {
                continue;
            }
            for (g, who) in [(0, "server"), (1, "client")] {
                if let Some(n) = t.host_lost(g).filter(|n| *n > 0) {
                    out.push(format!(
                        "{m} {p} {}: the {who}'s rxe sent {n} packet(s) its ToR never received, and neither ToR dropped anything: lost on the {who}'s side of its ToR (its stack, qemu or the tap); out_of_seq_request {}, duplicate_request {}, rcvd_seq_err {}, completer_retry_err {} (server/client), up to what that loss explains, not counted against the switch",
                        t.label,
                        t.pair("out_of_seq_request"),
                        t.pair("duplicate_request"),
                        t.pair("rcvd_seq_err"),
                        t.pair("completer_retry_err")
                    ));
                }
            }
        }
        out
    }

    /// Packets both guests lost on their side of their ToRs in test `i` (see
    /// [`TestRow::host_lost`]), where that can be trusted: the ToRs spray RoCE in this mode,
    /// and neither this test's nor the one before's counts came out negative (a window that
    /// took in the next test's packets leaves both tests' counts wrong). 0 otherwise.
    pub fn host_losses(&self, i: usize) -> i64 {
        let negative = |i: usize| {
            self.tests.get(i).is_some_and(|t| {
                [0, 1]
                    .iter()
                    .any(|g| t.host_lost(*g).is_some_and(|n| n < 0))
            })
        };
        if !sprays(&self.mode) || negative(i) || (i > 0 && negative(i - 1)) {
            return 0;
        }
        let t = &self.tests[i];
        [0, 1].iter().filter_map(|g| t.host_lost(*g)).sum()
    }

    /// The failures of this record (each names the test, the guest, the counter and its value):
    /// every test completes in direct, wire, ecmp and reorder modes and no QP exhausts its
    /// retries there; spraying without reorder shows out-of-sequence requests in every
    /// bandwidth test (for READ and atomic tests, whose long stream is the responses, retries
    /// at the requester count too); reorder on a loss-free fabric makes neither guest count
    /// `out_of_seq_request`, `duplicate_request`, `rcvd_seq_err` or `completer_retry_err`
    /// (unless packets were lost inside a host in that test: [`ModeRecord::notes`]); with
    /// loss, the ToRs declare losses (by path order or hold timeout), and a ToR whose counters
    /// are missing or did not parse fails that check as not checked. `threads_sampled`:
    /// THREADS=1 was on (every mode but spray must then have a thread report).
    pub fn failures(&self, threads_sampled: bool) -> Vec<String> {
        let (m, p) = (&self.mode, self.pmtu);
        let mut out = Vec::new();
        if m == "reorder" && !self.loss.is_empty() {
            match self.tors {
                [Some(b), Some(a)] => {
                    if a.timeouts + b.timeouts + a.path_losses + b.path_losses == 0 {
                        out.push(format!(
                            "reorder {p} with loss '{}': no loss declared at either ToR (hold timeouts tor-b/tor-a {}/{}, path order {}/{})",
                            self.loss, b.timeouts, a.timeouts, b.path_losses, a.path_losses
                        ));
                    }
                }
                tors => {
                    let missing: Vec<&str> = ["tor-b", "tor-a"]
                        .into_iter()
                        .zip(tors)
                        .filter_map(|(name, t)| t.is_none().then_some(name))
                        .collect();
                    out.push(format!(
                        "reorder {p} with loss '{}': losses declared by the ToRs not checked: the counters of {} (sprayctl --json show counters) are missing or did not parse",
                        self.loss,
                        missing.join(" and ")
                    ));
                }
            }
        }
        if threads_sampled && m != "spray" && self.threads.is_empty() {
            out.push(format!("THREADS: no thread report for {m} {p}"));
        }
        for (i, t) in self.tests.iter().enumerate() {
            let l = &t.label;
            if m == "spray" {
                let oos = |g| t.counter(g, "out_of_seq_request").unwrap_or(0);
                let seen = if t.program.ends_with("_lat") {
                    None
                } else if t.program.starts_with("ib_read_") || t.program.starts_with("ib_atomic_") {
                    Some(oos(0) + oos(1) + t.counter(1, "completer_retry_err").unwrap_or(0))
                } else {
                    Some(oos(0) + oos(1))
                };
                if seen == Some(0) {
                    out.push(format!(
                        "spray {p} {l}: no out-of-sequence requests without reorder (server/client out_of_seq_request {}, completer_retry_err {})",
                        t.pair("out_of_seq_request"),
                        t.pair("completer_retry_err")
                    ));
                }
            } else {
                if t.rc != [Some(0), Some(0)] {
                    out.push(format!(
                        "{m} {p} {l} did not complete (rc server {}, client {})",
                        rc_text(t, 0),
                        rc_text(t, 1)
                    ));
                }
                // A QP that exhausts its retries has failed, lossy fabric or not.
                for c in ["retry_exceeded_err", "retry_rnr_exceeded_err"] {
                    for (g, who) in [(0, "server"), (1, "client")] {
                        if let Some(v) = t.counter(g, c).filter(|v| *v != 0) {
                            out.push(format!("{m} {p} {l}: the {who}'s {c} is {v}"));
                        }
                    }
                }
            }
            // Errors that packets lost on a guest's side of its ToR explain (its rxe sent them,
            // its ToR never got them) are that host's, not the switch's: noted, not failed (see
            // `notes`), up to what that many losses can cause.
            let lost = self.host_losses(i);
            if m == "reorder" && self.loss.is_empty() {
                for c in [
                    "out_of_seq_request",
                    "duplicate_request",
                    "rcvd_seq_err",
                    "completer_retry_err",
                ] {
                    for (g, who) in [(0, "server"), (1, "client")] {
                        match t.counter(g, c) {
                            None => out.push(format!(
                                "reorder {p} {l}: the {who} did not report {c} for this test"
                            )),
                            Some(0) => {}
                            Some(v) if v <= lost * explained_per_loss(c) => {}
                            Some(v) if lost > 0 => out.push(format!(
                                "reorder {p} {l}: the {who}'s {c} is {v}, more than the {lost} packet(s) lost on the guests' side of their ToRs explain ({} at most)",
                                lost * explained_per_loss(c)
                            )),
                            Some(v) => out.push(format!(
                                "reorder {p} {l}: the {who}'s {c} is {v} (must be 0 on a loss-free fabric)"
                            )),
                        }
                    }
                }
            }
        }
        out
    }
}

/// How many of counter `c` one packet lost before the switch can explain: the responder counts
/// the packets after it out of sequence and NAKs (rxe counts an out-of-sequence request and a
/// sequence error once per NAK episode, the requester retries once; a few for a loss that hits
/// a retry as well), and the go-back resends at most a window of what the responder already
/// had (perftest's QPs here: at most 256 packets outstanding).
fn explained_per_loss(c: &str) -> i64 {
    match c {
        "duplicate_request" => 256,
        _ => 4,
    }
}

/// The ToRs of mode `m` spray RoCE, so that what a ToR sprayed is what its guest's rxe sent
/// that reached it. Under ECMP they hash RoCE together with every other packet (and the
/// direct and wire modes have no ToR).
fn sprays(m: &str) -> bool {
    m == "reorder" || m == "spray"
}

/// perftest's exit status in guest `g` (0 server, 1 client), `none` when it never finished.
fn rc_text(t: &TestRow, g: usize) -> String {
    t.rc[g].map_or("none".to_string(), |v| v.to_string())
}

fn rc_pair(t: &TestRow) -> String {
    format!("{}/{}", rc_text(t, 0), rc_text(t, 1))
}

fn perf_cell(t: &TestRow) -> String {
    match t.perf {
        // Latencies as perftest prints them (two decimals); rates in whole units.
        Some(p) if p.unit == super::guest::Unit::Us => format!("{:.2} us", p.value),
        Some(p) => format!("{:.0} {}", p.value, p.unit.as_str()),
        None => "-".into(),
    }
}

/// The main table: per test, the guests' rxe counters as server/client, then the ToRs' reorder
/// totals over the mode (on its first row).
pub fn counter_rows(r: &ModeRecord) -> String {
    let mut s = String::new();
    for (i, t) in r.tests.iter().enumerate() {
        // Over the whole mode, so on its first row; `-` where a ToR did not answer (or the
        // mode has none).
        let tor = |f: fn(&TorSums) -> u64| match (i, r.tors) {
            (0, [b, a]) => {
                let v = |x: Option<TorSums>| x.map_or("-".to_string(), |x| f(&x).to_string());
                format!("{}/{}", v(b), v(a))
            }
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "{:<8} {:<5} {:<18} {:<9} {:<12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9}",
            r.mode,
            r.pmtu,
            t.label,
            rc_pair(t),
            perf_cell(t),
            t.pair("out_of_seq_request"),
            t.pair("duplicate_request"),
            t.pair("rcvd_seq_err"),
            t.pair("completer_retry_err"),
            t.pair("retry_exceeded_err"),
            tor(|x| x.path_losses),
            tor(|x| x.timeouts),
            tor(|x| x.resyncs),
        );
    }
    s
}

/// The second table: rxe's other transport-error counters and the packets sent.
pub fn error_rows(r: &ModeRecord) -> String {
    let mut s = String::new();
    for t in &r.tests {
        let _ = writeln!(
            s,
            "{:<8} {:<5} {:<18} {:>12} {:>12} {:>12} {:>12} {:>12} {:>17}",
            r.mode,
            r.pmtu,
            t.label,
            t.pair("rcvd_rnr_err"),
            t.pair("send_rnr_err"),
            t.pair("retry_rnr_exceeded_err"),
            t.pair("send_err"),
            t.pair("link_downed"),
            t.pair("sent_pkts"),
        );
    }
    s
}

/// Goodput ratios of one round, in percent: each mode against the direct link for the same
/// test, and reorder against wire, for each rate test. Keys: (pmtu, label, column), in the
/// order the tests came.
pub fn ratios(round: &[&ModeRecord]) -> Vec<((u32, String), &'static str, f64)> {
    let mut order: Vec<(u32, String)> = Vec::new();
    let mut v: BTreeMap<(String, u32, String), f64> = BTreeMap::new();
    for r in round {
        for t in &r.tests {
            let Some(p) = t.perf.filter(|p| p.unit.is_rate()) else {
                continue;
            };
            let k = (r.pmtu, t.label.clone());
            if !order.contains(&k) {
                order.push(k.clone());
            }
            v.insert((r.mode.clone(), r.pmtu, t.label.clone()), p.value);
        }
    }
    let mut out = Vec::new();
    for k in order {
        let get = |m: &str| v.get(&(m.to_string(), k.0, k.1.clone())).copied();
        if let Some(d) = get("direct").filter(|d| *d > 0.0) {
            for m in ["wire", "ecmp", "spray", "reorder"] {
                if let Some(x) = get(m) {
                    out.push((k.clone(), m, 100.0 * x / d));
                }
            }
        }
        if let (Some(w), Some(r)) = (get("wire").filter(|w| *w > 0.0), get("reorder")) {
            out.push((k.clone(), "reorder/wire", 100.0 * r / w));
        }
    }
    out
}

/// The ratio table over every round: one column per mode; with several rounds each cell is
/// the median over the rounds, then every round's value.
pub fn ratio_table(records: &[ModeRecord]) -> String {
    let mut rounds: Vec<u32> = records.iter().map(|r| r.round).collect();
    rounds.sort_unstable();
    rounds.dedup();
    let mut order: Vec<(u32, String)> = Vec::new();
    let mut cells: BTreeMap<((u32, String), &'static str), Vec<f64>> = BTreeMap::new();
    for round in &rounds {
        let rs: Vec<&ModeRecord> = records.iter().filter(|r| r.round == *round).collect();
        for (k, col, pct) in ratios(&rs) {
            if !order.contains(&k) {
                order.push(k.clone());
            }
            cells.entry((k, col)).or_default().push(pct.round());
        }
    }
    if order.is_empty() {
        return String::new();
    }
    let n = rounds.len();
    let mut s = if n > 1 {
        format!("goodput vs direct, median of {n} rounds (each round: direct and the modes back to back)\n")
    } else {
        "goodput vs direct, same run\n".to_string()
    };
    let cols = ["wire", "ecmp", "spray", "reorder", "reorder/wire"];
    let _ = write!(s, "{:<5} {:<18}", "pmtu", "test");
    for c in cols {
        let _ = write!(s, " {c:<19}");
    }
    s.push('\n');
    for k in order {
        let _ = write!(s, "{:<5} {:<18}", k.0, k.1);
        for c in cols {
            let cell = match cells.get(&(k.clone(), c)) {
                None => "-".to_string(),
                Some(v) if v.len() == 1 => format!("{:.0}%", v[0]),
                Some(v) => {
                    let all: Vec<String> = v.iter().map(|x| format!("{x:.0}")).collect();
                    format!("{:.0}% ({})", median(v.clone()), all.join("/"))
                }
            };
            let _ = write!(s, " {cell:<19}");
        }
        s.push('\n');
    }
    s
}

/// Everything a run printed, from its records: both tables (per round when there are several),
/// the ratio table, the CPU, guest, thread and lateness lines, and the legend.
pub fn summary(records: &[ModeRecord]) -> String {
    let mut s = String::from(
        "Per test; guests' rxe counters as server/client, grown during that test alone:\n",
    );
    let rounds = records.iter().map(|r| r.round).max().unwrap_or(0);
    let _ = writeln!(
        s,
        "{:<8} {:<5} {:<18} {:<9} {:<12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9}",
        "mode",
        "pmtu",
        "test",
        "rc",
        "result",
        "oos_req",
        "dup_req",
        "seq_nak",
        "retries",
        "retry_exc",
        "path_lost",
        "hold_to",
        "resync"
    );
    let by_round = |f: &dyn Fn(&ModeRecord) -> String| {
        let mut out = String::new();
        for round in 1..=rounds {
            if rounds > 1 {
                let _ = writeln!(out, "round {round}");
            }
            for r in records.iter().filter(|r| r.round == round) {
                out += &f(r);
            }
        }
        out
    };
    s += &by_round(&counter_rows);
    s += "\nPer test, rxe's other transport-error counters and the packets sent, server/client:\n";
    let _ = writeln!(
        s,
        "{:<8} {:<5} {:<18} {:>12} {:>12} {:>12} {:>12} {:>12} {:>17}",
        "mode",
        "pmtu",
        "test",
        "rnr_nak_rcvd",
        "rnr_nak_sent",
        "rnr_exc",
        "send_err",
        "link_down",
        "sent_pkts"
    );
    s += &by_round(&error_rows);
    let table = ratio_table(records);
    if !table.is_empty() {
        s.push('\n');
        s += &table;
    }
    s += "\nCPU of the rack's switches and fabric (user + system) over each mode's whole run:\n";
    for r in records {
        if let Some(u) = &r.usage {
            let _ = writeln!(s, "{u}");
        }
    }
    s += "\nThe guests during their tests (NIC interrupts and packets per interrupt, vCPU time in ticks):\n";
    for r in records {
        let _ = writeln!(
            s,
            "{} {}: server {}; client {}",
            r.mode, r.pmtu, r.guests[0], r.guests[1]
        );
    }
    if records.iter().any(|r| !r.threads.is_empty()) {
        s += "\nThe guests' qemu threads on the host (THREADS=1), per test over its middle 90% of packets: CPU\nseconds, seconds waiting for a CPU, voluntary/involuntary context switches:\n";
        for r in records {
            for l in &r.threads {
                let _ = writeln!(s, "{l}");
            }
        }
    }
    let notes: Vec<String> = records.iter().flat_map(ModeRecord::notes).collect();
    if !notes.is_empty() {
        s += "\nPackets lost on a guest's side of its ToR (the ToRs sampled at each test's end):\n";
        for l in &notes {
            let _ = writeln!(s, "{l}");
        }
    }
    s += "\nHow late the emulated paths released packets against their delay and rate (the emulating thread's wake-up and loop latency):\n";
    for r in records {
        if let Some(l) = &r.lateness {
            let _ = writeln!(s, "{} {}: {l}", r.mode, r.pmtu);
        }
    }
    s += LEGEND;
    s
}

const LEGEND: &str =
    "Counters, per test, server/client (the server is the responder, the client the requester;
with -b each is both): oos_req, dup_req: out_of_seq_request, duplicate_request (responder);
seq_nak, retries, retry_exc: rcvd_seq_err, completer_retry_err, retry_exceeded_err
(requester); rnr_nak_rcvd, rnr_exc: rcvd_rnr_err, retry_rnr_exceeded_err (requester);
rnr_nak_sent: send_rnr_err (responder); send_err, link_down: send_err, link_downed.
path_lost, hold_to, resync: the ToRs' losses found by path order, hold timeouts and resyncs, tor-b (towards the server) /
tor-a (towards the client), over the mode's whole run (on its first row).
rc: perftest's exit status, server/client. Results: bandwidth tests BW average (with -b both
directions together), atomic tests MsgRate; latency tests t_avg.
";

#[cfg(test)]
mod tests {
    use super::super::guest::Unit;
    use super::*;

    fn row(label: &str, program: &str, value: f64, counters: &[(&str, i64, i64)]) -> TestRow {
        let side = |g: usize| {
            Some(
                counters
                    .iter()
                    .map(|(k, s, c)| (k.to_string(), if g == 0 { *s } else { *c }))
                    .collect(),
            )
        };
        TestRow {
            label: label.into(),
            program: program.into(),
            rc: [Some(0), Some(0)],
            perf: Some(Perf {
                value,
                unit: if program.ends_with("_lat") {
                    Unit::Us
                } else {
                    Unit::Mbps
                },
            }),
            hw: [side(0), side(1)],
            tors: None,
        }
    }

    const CLEAN: &[(&str, i64, i64)] = &[
        ("out_of_seq_request", 0, 0),
        ("duplicate_request", 0, 0),
        ("rcvd_seq_err", 0, 0),
        ("completer_retry_err", 0, 0),
        ("retry_exceeded_err", 0, 0),
    ];

    fn record(round: u32, mode: &str, tests: Vec<TestRow>) -> ModeRecord {
        ModeRecord {
            round,
            mode: mode.into(),
            pmtu: 1024,
            loss: String::new(),
            tests,
            tors: [None, None],
            guests: Default::default(),
            usage: None,
            lateness: None,
            threads: Vec::new(),
        }
    }

    #[test]
    fn reorder_on_a_clean_fabric_fails_on_any_host_error() {
        let ok = record(
            1,
            "reorder",
            vec![row("write_bw", "ib_write_bw", 100.0, CLEAN)],
        );
        assert!(ok.failures(false).is_empty());
        let mut bad = ok.clone();
        bad.tests[0] = row(
            "write_bw",
            "ib_write_bw",
            100.0,
            &[
                ("out_of_seq_request", 3, 0),
                ("duplicate_request", 0, 0),
                ("rcvd_seq_err", 0, 2),
                ("completer_retry_err", 0, 0),
            ],
        );
        let f = bad.failures(false);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(
            f[0].contains("the server's out_of_seq_request is 3"),
            "{f:?}"
        );
        assert!(f[1].contains("the client's rcvd_seq_err is 2"), "{f:?}");
        // A counter the guest did not report is a failure too.
        bad.tests[0].hw[1] = None;
        assert!(bad
            .failures(false)
            .iter()
            .any(|l| l.contains("did not report")));
        // Loss: host errors are allowed, hold timeouts are required.
        let mut lossy = bad.clone();
        lossy.loss = "0 0.01 0 0".into();
        lossy.tors = [Some(TorSums::default()), Some(TorSums::default())];
        assert_eq!(lossy.failures(false).len(), 1);
        assert!(lossy.failures(false)[0].contains("no loss declared"));
        // THREADS on and no report.
        assert!(ok.failures(true)[0].contains("no thread report"));
    }

    #[test]
    fn errors_after_a_packet_lost_inside_a_host_are_noted_not_failed() {
        use super::super::tors::TorTest;
        let errors = [
            ("out_of_seq_request", 1, 0),
            ("duplicate_request", 0, 0),
            ("rcvd_seq_err", 0, 1),
            ("completer_retry_err", 0, 3),
            ("sent_pkts", 5_000, 20_545),
        ];
        let mut r = record(
            1,
            "reorder",
            vec![row("write_bw-q8", "ib_write_bw", 80.0, &errors)],
        );
        // Not sampled: the errors fail the run.
        assert_eq!(r.failures(false).len(), 3, "{:?}", r.failures(false));
        assert!(r.notes().is_empty());
        // The client's rxe sent one packet more than ToR A sprayed, and ToR A's host port
        // dropped nothing: lost in the client's host.
        r.tests[0].tors = Some(TorTest {
            sprayed: [20_544, 5_000],
            switch_drops: [0, 0],
        });
        assert_eq!(r.tests[0].host_lost(1), Some(1));
        assert_eq!(r.tests[0].host_lost(0), Some(0));
        assert!(r.failures(false).is_empty(), "{:?}", r.failures(false));
        let n = r.notes();
        assert_eq!(n.len(), 1);
        assert!(n[0].contains("the client's rxe sent 1 packet(s)"), "{n:?}");
        // The switch received everything the client sent: the errors are the switch's.
        r.tests[0].tors = Some(TorTest {
            sprayed: [20_545, 5_000],
            switch_drops: [0, 0],
        });
        assert_eq!(r.failures(false).len(), 3);
        // A ToR dropped something itself (either of them): the switch's too.
        for drops in [[1, 0], [0, 1]] {
            r.tests[0].tors = Some(TorTest {
                sprayed: [20_544, 5_000],
                switch_drops: drops,
            });
            assert_eq!(r.tests[0].host_lost(1), None);
            assert_eq!(r.failures(false).len(), 3);
            assert!(r.notes().is_empty());
        }
        // One packet lost explains a few out-of-sequence requests, not hundreds.
        let mut many = record(
            1,
            "reorder",
            vec![row(
                "write_bw-q8",
                "ib_write_bw",
                80.0,
                &[
                    ("out_of_seq_request", 500, 0),
                    ("duplicate_request", 0, 0),
                    ("rcvd_seq_err", 0, 1),
                    ("completer_retry_err", 0, 1),
                    ("sent_pkts", 5_000, 20_545),
                ],
            )],
        );
        many.tests[0].tors = Some(TorTest {
            sprayed: [20_544, 5_000],
            switch_drops: [0, 0],
        });
        let f = many.failures(false);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].contains("more than the 1 packet(s) lost"), "{f:?}");
        // A window that took in the next test's packets (the ToR counted more than the guest
        // sent) leaves that test and the next without an excuse.
        let mut skewed = r.clone();
        skewed.mode = "reorder".into();
        skewed.tests = vec![r.tests[0].clone(), r.tests[0].clone()];
        skewed.tests[0].tors = Some(TorTest {
            sprayed: [20_600, 5_000],
            switch_drops: [0, 0],
        });
        skewed.tests[1].tors = Some(TorTest {
            sprayed: [20_544, 5_000],
            switch_drops: [0, 0],
        });
        assert_eq!(skewed.host_losses(1), 0);
        assert_eq!(skewed.failures(false).len(), 6);
        // Under ECMP the ToRs spray nothing: no note whatever the counts.
        r.mode = "ecmp".into();
        r.tests[0].tors = Some(TorTest {
            sprayed: [0, 0],
            switch_drops: [0, 0],
        });
        assert!(r.notes().is_empty());
    }

    #[test]
    fn spray_must_show_reordering_and_other_modes_must_complete() {
        let quiet = record(
            1,
            "spray",
            vec![
                row("write_bw", "ib_write_bw", 10.0, CLEAN),
                row("read_lat", "ib_read_lat", 9.0, CLEAN),
            ],
        );
        let f = quiet.failures(false);
        assert_eq!(f.len(), 1, "latency tests have nothing to reorder: {f:?}");
        let reads = record(
            1,
            "spray",
            vec![row(
                "read_bw",
                "ib_read_bw",
                10.0,
                &[("completer_retry_err", 0, 5)],
            )],
        );
        assert!(reads.failures(false).is_empty());
        let mut stuck = record(
            1,
            "ecmp",
            vec![row(
                "write_bw",
                "ib_write_bw",
                10.0,
                &[("retry_exceeded_err", 0, 1)],
            )],
        );
        stuck.tests[0].rc = [Some(0), None];
        let f = stuck.failures(false);
        assert!(
            f[0].contains("did not complete (rc server 0, client none)"),
            "{f:?}"
        );
        assert!(
            f[1].contains("the client's retry_exceeded_err is 1"),
            "{f:?}"
        );
    }

    #[test]
    fn ratios_per_round_and_their_medians() {
        let mut recs = Vec::new();
        for (round, direct, wire, reorder) in [
            (1, 200.0, 100.0, 90.0),
            (2, 200.0, 100.0, 100.0),
            (3, 100.0, 100.0, 80.0),
        ] {
            recs.push(record(
                round,
                "direct",
                vec![
                    row("write_bw", "ib_write_bw", direct, CLEAN),
                    row("write_lat", "ib_write_lat", 5.0, CLEAN),
                ],
            ));
            recs.push(record(
                round,
                "wire",
                vec![row("write_bw", "ib_write_bw", wire, CLEAN)],
            ));
            recs.push(record(
                round,
                "reorder",
                vec![row("write_bw", "ib_write_bw", reorder, CLEAN)],
            ));
        }
        let r1: Vec<&ModeRecord> = recs.iter().filter(|r| r.round == 1).collect();
        let r = ratios(&r1);
        assert_eq!(r.len(), 3, "{r:?}");
        assert_eq!(r[2], ((1024, "write_bw".to_string()), "reorder/wire", 90.0));
        let t = ratio_table(&recs);
        assert!(
            t.starts_with("goodput vs direct, median of 3 rounds"),
            "{t}"
        );
        let line = t.lines().find(|l| l.starts_with("1024  write_bw")).unwrap();
        // wire: 50, 50, 100 -> 50; reorder/wire: 90, 100, 80 -> 90.
        assert!(line.contains("50% (50/50/100)"), "{line}");
        assert!(line.contains("90% (90/100/80)"), "{line}");
        assert!(!t.contains("write_lat"), "latency is not a goodput: {t}");
        let s = summary(&recs);
        assert!(s.contains("round 3\n"), "{s}");
        assert!(
            s.contains("reorder  1024  write_bw           0/0       80 Mb/s"),
            "{s}"
        );
    }

    #[test]
    fn a_lossy_reorder_run_whose_tor_counters_did_not_parse_fails_as_not_checked() {
        // The files a run leaves: ToR B's counter file garbled (a `sprayctl` that failed
        // half-way), ToR A's fine.
        let dir = std::env::temp_dir().join(format!("rxerack-garbled-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (garbled, good) = (dir.join("counters-b.json"), dir.join("counters-a.json"));
        std::fs::write(&garbled, "{\"ok\":true,\"data\":{\"reorder\":{\"timeo").unwrap();
        std::fs::write(
            &good,
            r#"{"ok":true,"data":{"reorder":{"timeouts":2,"path_losses":5,"resyncs":0}}}"#,
        )
        .unwrap();
        let files = |tors: [Option<std::path::PathBuf>; 2]| super::super::RunFiles {
            dir: dir.clone(),
            tors,
            ..Default::default()
        };
        let run = |f| super::super::record(1, "reorder", 1024, "ib_write_bw", "0 0.01 0 0", &f);
        let r = run(files([Some(garbled.clone()), Some(good.clone())]));
        let missing = run(files([Some(good.clone()), Some(dir.join("absent.json"))]));
        let both = run(files([Some(good.clone()), Some(good.clone())]));
        std::fs::remove_dir_all(&dir).unwrap();

        assert_eq!(r.tors[0], None, "the garbled file gives no sums");
        let f = r.failures(false);
        assert!(
            f.iter().any(|l| l.contains(
                "losses declared by the ToRs not checked: the counters of tor-b (sprayctl --json show counters) are missing or did not parse"
            )),
            "{f:?}"
        );
        // ToR A's losses alone do not pass the check while ToR B's counters are unknown.
        assert!(!f.iter().any(|l| l.contains("no loss declared")), "{f:?}");
        let f = missing.failures(false);
        assert!(
            f.iter()
                .any(|l| l.contains("not checked: the counters of tor-a ")),
            "{f:?}"
        );
        // Both read: the check runs, and these counters pass it.
        assert!(
            !both
                .failures(false)
                .iter()
                .any(|l| l.contains("not checked") || l.contains("no loss declared")),
            "{:?}",
            both.failures(false)
        );
        // Without loss nothing is asked of the ToRs' counters.
        let mut clean = record(
            1,
            "reorder",
            vec![row("write_bw", "ib_write_bw", 1.0, CLEAN)],
        );
        assert!(clean.failures(false).is_empty());
        clean.loss = "0 0.01 0 0".into();
        assert_eq!(
            clean.failures(false),
            vec!["reorder 1024 with loss '0 0.01 0 0': losses declared by the ToRs not checked: the counters of tor-b and tor-a (sprayctl --json show counters) are missing or did not parse"]
        );
    }

    #[test]
    fn switch_answers() {
        let c =
            r#"{"ok":true,"data":{"reorder":{"timeouts":4,"path_losses":3,"resyncs":2,"late":0}}}"#;
        assert_eq!(
            TorSums::from_counters_json(c),
            Some(TorSums {
                timeouts: 4,
                path_losses: 3,
                resyncs: 2
            })
        );
        assert_eq!(TorSums::from_counters_json("{}"), None);
        let p = r#"{"ok":true,"data":[{"name":"h1","rx_pkts":7},{"name":"u0","rx_pkts":9}]}"#;
        assert_eq!(host_port_packets(p), Some(7));
        assert_eq!(host_port_packets("nope"), None);
    }
}
