//! What a guest's console log says about its tests (the lines `scripts/rxe-guest.sh`'s /init
//! prints): each test's exit status, what it did to the guest's rxe hw counters (read before and
//! after it: they are per device, so a sum over several tests would hide which test erred),
//! perftest's result line, and what the guest's vCPU and NIC did.

use serde::{Deserialize, Serialize};

/// The result perftest printed for a test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Perf {
    /// The figure: Mbit/s (bandwidth tests; with `-b` both directions together), operations
    /// per second (atomic tests, counted by message rate: each carries 8 bytes), or the mean
    /// latency in microseconds (latency tests).
    pub value: f64,
    /// `Mb/s`, `op/s` or `us`.
    pub unit: Unit,
}

/// The unit of a [`Perf`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unit {
    /// Megabits per second.
    #[serde(rename = "Mb/s")]
    Mbps,
    /// Operations per second.
    #[serde(rename = "op/s")]
    Ops,
    /// Microseconds.
    #[serde(rename = "us")]
    Us,
}

impl Unit {
    /// As the tables print it.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Mbps => "Mb/s",
            Unit::Ops => "op/s",
            Unit::Us => "us",
        }
    }

    /// A throughput (a goodput ratio means something), not a latency.
    pub fn is_rate(self) -> bool {
        self != Unit::Us
    }
}

/// The lines of test `n` of `role` (`server` or `client`), from its START line to its END line.
fn section<'a>(log: &'a str, role: &str, n: usize) -> Option<Vec<&'a str>> {
    let start = format!("=== {role} START {n} ");
    let end = format!("=== {role} END {n} ");
    let mut lines = log.lines().map(|l| l.trim_end_matches('\r'));
    lines.find(|l| l.contains(&start))?;
    let mut out = Vec::new();
    for l in lines {
        if l.contains(&end) {
            out.push(l);
            return Some(out);
        }
        out.push(l);
    }
    None
}

/// perftest's exit status of test `n` (`None`: the guest never finished it).
pub fn exit_status(log: &str, role: &str, n: usize) -> Option<i32> {
    let end = format!("=== {role} END {n} ");
    log.lines()
        .filter(|l| l.contains(&end))
        .filter_map(|l| {
            l.rsplit_once("rc=")
                .and_then(|(_, rc)| rc.trim().parse().ok())
        })
        .next_back()
}

/// `name=value` pairs of a `stats WHEN hw` line.
fn counters(words: &[&str]) -> Vec<(String, i64)> {
    words
        .iter()
        .filter_map(|w| {
            let (k, v) = w.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// How much each rxe hw counter of the guest grew over test `n`; `None` when the guest did not
/// print both readings (it died, or the test never started).
pub fn hw_delta(log: &str, role: &str, n: usize) -> Option<Vec<(String, i64)>> {
    let lines = section(log, role, n)?;
    let (mut before, mut after) = (None, None);
    for l in lines {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() >= 3 && w[0] == "stats" && w[2] == "hw" {
            match w[1] {
                "before" => before = Some(counters(&w[3..])),
                "after" => after = Some(counters(&w[3..])),
                _ => {}
            }
        }
    }
    let (before, after) = (before?, after?);
    Some(
        after
            .into_iter()
            .filter_map(|(k, a)| {
                let b = before.iter().find(|(bk, _)| *bk == k)?.1;
                Some((k, a - b))
            })
            .collect(),
    )
}

/// The result line of test `n` (the first numeric line after perftest's `#bytes` header) read
/// as the program `program` reports: bandwidth tests' BW average (MB/s, column 4), atomics'
/// MsgRate (Mpps, column 5), latency tests' t_avg (us, column 6).
pub fn perf(log: &str, role: &str, n: usize, program: &str) -> Option<Perf> {
    let lines = section(log, role, n)?;
    let mut header = false;
    for l in lines {
        if l.contains("#bytes") {
            header = true;
            continue;
        }
        let w: Vec<&str> = l.split_whitespace().collect();
        if !header || w.len() < 4 || !w[0].bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let col = |i: usize| w.get(i).and_then(|v| v.parse::<f64>().ok());
        return if program.ends_with("_lat") {
            col(5).map(|v| Perf {
                value: v,
                unit: Unit::Us,
            })
        } else if program.starts_with("ib_atomic_") {
            col(4).map(|v| Perf {
                value: (v * 1e6).round(),
                unit: Unit::Ops,
            })
        } else {
            col(3).map(|v| Perf {
                value: (v * 8.0).round(),
                unit: Unit::Mbps,
            })
        };
    }
    None
}

/// What a guest's vCPU and NIC did during all its tests (the readings around each, summed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct GuestStats {
    /// NIC receive interrupts.
    pub interrupts: i64,
    /// Packets the NIC moved (both ways).
    pub packets: i64,
    /// vCPU time in USER_HZ ticks: user, system, softirq, idle.
    pub user: i64,
    /// System time.
    pub system: i64,
    /// Softirq time.
    pub softirq: i64,
    /// Idle time.
    pub idle: i64,
}

/// The guest's [`GuestStats`] from its console log.
pub fn guest_stats(log: &str) -> GuestStats {
    let mut s = GuestStats::default();
    for l in log.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() < 4 || w[0] != "stats" {
            continue;
        }
        let sign = if w[1] == "before" { -1 } else { 1 };
        let f = |i: usize| w.get(i).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        match w[2] {
            // user nice system idle iowait irq softirq
            "cpu" => {
                s.user += sign * f(3);
                s.system += sign * f(5);
                s.idle += sign * f(6);
                s.softirq += sign * f(9);
            }
            "irq" => s.interrupts += sign * f(3),
            // rx N tx M
            "rx" => s.packets += sign * (f(3) + f(5)),
            _ => {}
        }
    }
    s
}

impl std::fmt::Display for GuestStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per = if self.interrupts > 0 {
            self.packets as f64 / self.interrupts as f64
        } else {
            0.0
        };
        write!(
            f,
            "{} interrupts, {per:.1} packets each; cpu ticks user {} system {} softirq {} idle {}",
            self.interrupts, self.user, self.system, self.softirq, self.idle
        )
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A client console with one WRITE test, as a guest prints it (trimmed).
    pub(crate) const CLIENT: &str = "[guest 8.15] === client START 1 ib_write_bw -s 65536 -n 300\r
  stats before cpu 75 0 475 185 0 0 4
  stats before irq 22
  stats before rx 22 tx 28
  stats before hw completer_retry_err=0 duplicate_request=0 out_of_seq_request=0 rcvd_seq_err=0 sent_pkts=0
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      300              2.91               2.66   \t\t   0.000043
---------------------------------------------------------------------------------------
  stats after cpu 622 0 534 292 0 0 190
  stats after irq 410
  stats after rx 1672 tx 30591
  stats after hw completer_retry_err=89 duplicate_request=0 out_of_seq_request=0 rcvd_seq_err=121 sent_pkts=30539
[guest 17.60] === client END 1 ib_write_bw rc=0
[guest 17.70] === client START 2 ib_read_lat -s 64 -n 1000
  stats before hw rcvd_seq_err=121
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]
 64      1000          310.2          2210.9       400.1              411.70         60.2
[guest 19.00] === client START 3 ib_atomic_bw -o 64 -n 2000
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 8          2000             0.10               0.09   \t\t   0.011250
[guest 20.00] === client END 3 ib_atomic_bw rc=1
";

    #[test]
    fn a_test_reads_back_from_the_console() {
        assert_eq!(exit_status(CLIENT, "client", 1), Some(0));
        assert_eq!(exit_status(CLIENT, "client", 2), None);
        assert_eq!(exit_status(CLIENT, "client", 3), Some(1));
        let d = hw_delta(CLIENT, "client", 1).unwrap();
        assert!(d.contains(&("rcvd_seq_err".to_string(), 121)), "{d:?}");
        assert!(d.contains(&("sent_pkts".to_string(), 30539)));
        // Test 2 never ended: no reading after it.
        assert_eq!(hw_delta(CLIENT, "client", 2), None);
        assert_eq!(
            perf(CLIENT, "client", 1, "ib_write_bw"),
            Some(Perf {
                value: 21.0,
                unit: Unit::Mbps
            })
        );
        assert_eq!(
            perf(CLIENT, "client", 2, "ib_read_lat"),
            None,
            "no END line"
        );
        assert_eq!(
            perf(CLIENT, "client", 3, "ib_atomic_bw"),
            Some(Perf {
                value: 11250.0,
                unit: Unit::Ops
            })
        );
    }

    #[test]
    fn guest_stats_sum_the_readings_around_each_test() {
        let s = guest_stats(CLIENT);
        assert_eq!((s.interrupts, s.packets), (388, 1672 + 30591 - 22 - 28));
        assert_eq!((s.user, s.system, s.idle, s.softirq), (547, 59, 107, 186));
        assert!(
            s.to_string()
                .starts_with("388 interrupts, 83.0 packets each"),
            "{s}"
        );
    }
}
