//! The ToRs' counters at the end of each test, sampled while the guests run: the RoCE packets
//! each ToR's engine sprayed into the fabric (in the rack each ToR has one host, so these are
//! the packets its guest sent that reached the switch) and what the switch dropped that could
//! have been such a packet (its host port's backend receive drops, and its own drops for any
//! reason a RoCE packet of the guest's could meet). With them a test's errors can be told
//! apart: packets a guest's rxe counted as sent that its ToR never received, while the ToR
//! dropped nothing, were lost inside the host (the guest's stack, qemu or the tap), before any
//! switch could see them.
//!
//! The sample file has a line `S ENDED SPRAYED_A SPRAYED_B DROPS_A DROPS_B` per sample: one
//! when the sampler starts (before the first test's traffic), then one a quarter second after
//! the client's console announces the end of each test (the guests wait a second after each
//! test and read their counters before starting the next one's traffic). A window that still
//! took in the next test's packets shows as a ToR counting more than its guest sent, and
//! [`super::report::ModeRecord::host_losses`] then trusts neither test.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What both ToRs counted over one test.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TorTest {
    /// RoCE packets ToR A (the client's) and ToR B (the server's) sprayed into the fabric.
    pub sprayed: [u64; 2],
    /// What ToR A and ToR B dropped that could have been their guest's RoCE packet (see
    /// [`switch_drops`]).
    pub switch_drops: [u64; 2],
}

/// One line of the sample file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    ended: usize,
    sprayed: [u64; 2],
    drops: [u64; 2],
}

fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter_map(|l| {
            let w: Vec<u64> = l
                .strip_prefix("S ")?
                .split_whitespace()
                .map(|v| v.parse().ok())
                .collect::<Option<_>>()?;
            let [ended, sa, sb, da, db] = w.as_slice() else {
                return None;
            };
            Some(Sample {
                ended: *ended as usize,
                sprayed: [*sa, *sb],
                drops: [*da, *db],
            })
        })
        .collect()
}

/// Per test (`tests` of them, in order): the counters' growth from the sample before it (the
/// end of the test before, or the first sample) to the sample at its end; `None` where either
/// is missing (a sampler that did not run, a test that never ended).
pub fn per_test(text: &str, tests: usize) -> Vec<Option<TorTest>> {
    let s = parse(text);
    let at = |ended: usize| s.iter().find(|x| x.ended == ended);
    (1..=tests)
        .map(|n| {
            let (a, b) = (at(n - 1)?, at(n)?);
            let d = |i: usize, f: fn(&Sample) -> [u64; 2]| f(b)[i].checked_sub(f(a)[i]);
            Some(TorTest {
                sprayed: [d(0, |x| x.sprayed)?, d(1, |x| x.sprayed)?],
                switch_drops: [d(0, |x| x.drops)?, d(1, |x| x.drops)?],
            })
        })
        .collect()
}

/// `sprayed` from `sprayctl --json show counters`' answer.
pub fn sprayed(counters_json: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(counters_json).ok()?;
    v.get("data")?.get("sprayed")?.as_u64()
}

/// The drop reasons a guest's RoCE packet towards the other rack can meet in its ToR (not
/// `not_for_us`, `unsupported_ethertype`, `not_routable` or `local_unsupported`, which the
/// guests' other frames meet: IPv6 neighbour traffic, multicast).
const ROCE_DROPS: [&str; 9] = [
    "malformed",
    "no_route",
    "ttl_expired",
    "unresolved",
    "port_down",
    "all_uplinks_down",
    "mtu_exceeded",
    "tx_queue_full",
    "bad_ip_checksum",
];

/// What a ToR dropped that could have been its guest's RoCE packet: the receive drops of host
/// port `h1`'s backend (`sprayctl --json show ports`) and the switch's drops for the reasons
/// in `ROCE_DROPS` (`show counters`).
pub fn switch_drops(ports_json: &str, counters_json: &str) -> Option<u64> {
    let c: serde_json::Value = serde_json::from_str(counters_json).ok()?;
    let d = c.get("data")?.get("drops")?;
    let mut n = 0;
    for k in ROCE_DROPS {
        n += d.get(k)?.as_u64()?;
    }
    Some(n + host_port_drops(ports_json)?)
}

/// The receive drops of host port `h1`'s backend from `sprayctl --json show ports`' answer.
fn host_port_drops(ports_json: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(ports_json).ok()?;
    let p = v
        .get("data")?
        .as_array()?
        .iter()
        .find(|p| p.get("name").and_then(|n| n.as_str()) == Some("h1"))?;
    let mut n = 0;
    for k in [
        "backend_drops",
        "backend_rx_dropped",
        "backend_rx_ring_full",
        "backend_rx_no_buffer",
        "backend_invalid",
    ] {
        n += p.get(k)?.as_u64()?;
    }
    Some(n)
}

/// How to ask the ToRs.
#[derive(Debug, Clone)]
pub struct Tors {
    /// The `sprayctl` binary.
    pub sprayctl: PathBuf,
    /// The control sockets of ToR A and ToR B.
    pub sockets: [PathBuf; 2],
}

impl Tors {
    fn ask(&self, tor: usize, what: &str) -> Option<String> {
        let out = std::process::Command::new(&self.sprayctl)
            .arg("-s")
            .arg(&self.sockets[tor])
            .args(["--json", "show", what])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// One sample line for `ended` tests; `None` when a ToR did not answer.
    fn line(&self, ended: usize) -> Option<String> {
        let mut s = [0u64; 2];
        let mut d = [0u64; 2];
        for t in 0..2 {
            let counters = self.ask(t, "counters")?;
            s[t] = sprayed(&counters)?;
            d[t] = switch_drops(&self.ask(t, "ports")?, &counters)?;
        }
        Some(format!("S {ended} {} {} {} {}", s[0], s[1], d[0], d[1]))
    }
}

/// Samples the ToRs into `out` (replacing what it held): once now, then after each test the client's
/// console (`client_log`) reports ended, until it reports `tests done` (or `give_up` passes).
///
/// # Errors
/// When `out` cannot be written.
pub fn sample(
    tors: &Tors,
    client_log: &Path,
    out: &Path,
    give_up: Duration,
) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::File::create(out)?;
    let start = std::time::Instant::now();
    let mut ended = 0;
    if let Some(l) = tors.line(0) {
        writeln!(f, "{l}")?;
    }
    while start.elapsed() < give_up {
        let log = std::fs::read_to_string(client_log).unwrap_or_default();
        let (_, now_ended) = super::threads::tests_seen(&log);
        if now_ended > ended {
            // The test's last packets are through the switches well within this; the next
            // test's start much later.
            std::thread::sleep(Duration::from_millis(250));
            ended = now_ended;
            if let Some(l) = tors.line(ended) {
                writeln!(f, "{l}")?;
            }
            continue;
        }
        if log.contains("tests done") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_test_growth_from_the_samples() {
        let text = "S 0 10 20 0 0\nS 1 110 70 0 0\ngarbage\nS 2 150 90 1 0\n";
        let t = per_test(text, 3);
        assert_eq!(
            t[0],
            Some(TorTest {
                sprayed: [100, 50],
                switch_drops: [0, 0]
            })
        );
        assert_eq!(
            t[1],
            Some(TorTest {
                sprayed: [40, 20],
                switch_drops: [1, 0]
            })
        );
        assert_eq!(t[2], None, "test 3 never ended");
        // A counter that went backwards (a restarted switch) gives nothing.
        assert_eq!(per_test("S 0 10 20 0 0\nS 1 5 70 0 0\n", 1), vec![None]);
    }

    #[test]
    fn counters_from_the_switch_answers() {
        assert_eq!(
            sprayed(r#"{"ok":true,"data":{"sprayed":1024,"hashed":119}}"#),
            Some(1024)
        );
        assert_eq!(sprayed(r#"{"ok":true,"data":{}}"#), None);
        let ports = r#"{"data":[{"name":"u0","backend_drops":9,"backend_rx_dropped":9,"backend_rx_ring_full":9,"backend_rx_no_buffer":9,"backend_invalid":9},
            {"name":"h1","backend_drops":1,"backend_rx_dropped":2,"backend_rx_ring_full":3,"backend_rx_no_buffer":4,"backend_invalid":5}]}"#;
        assert_eq!(host_port_drops(ports), Some(15));
        let mut drops: Vec<String> = ROCE_DROPS.iter().map(|k| format!("\"{k}\":1")).collect();
        drops.push("\"not_routable\":7".into());
        let counters = format!(
            r#"{{"data":{{"sprayed":5,"drops":{{{}}}}}}}"#,
            drops.join(",")
        );
        assert_eq!(
            switch_drops(ports, &counters),
            Some(15 + 9),
            "not_routable is not counted"
        );
    }
}
