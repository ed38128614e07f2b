//! The analysis behind `scripts/rxe-rack.sh` (`rxerack`): the script boots the Soft-RoCE guests,
//! the rack and the taps; this reads what they left (the guests' console logs, the switches'
//! answers, the rack's logs, `/proc`) into one record per mode run, checks it, and prints the
//! tables over every round.
//!
//! - [`profile`]: the perftest lists and each test's name in the tables;
//! - [`guest`]: a guest's console log (exit status, rxe counters per test, perftest's result);
//! - [`host`]: CPU and wake-ups of the host's processes, how late the emulated paths were;
//! - [`threads`]: the guests' qemu threads sampled on the host, reported per test;
//! - [`tors`]: the ToRs' counters sampled at each test's end (host-side loss per test);
//! - [`report`]: the record, its checks and the tables.

pub mod guest;
pub mod host;
pub mod profile;
pub mod report;
pub mod threads;
pub mod tors;

use std::path::{Path, PathBuf};

use report::{ModeRecord, TestRow, TorSums};

/// What a mode run left, for [`record`].
#[derive(Debug, Clone, Default)]
pub struct RunFiles {
    /// The run's directory: the guests' consoles are `srv-MODE-PMTU.log` and
    /// `cli-MODE-PMTU.log` in it, what `rxerack usage` read of the processes
    /// `usage-MODE-PMTU.txt`.
    pub dir: PathBuf,
    /// `sprayctl --json show ports` of both ToRs: the guests' packets are what the host ports
    /// `h1` received.
    pub ports: Vec<PathBuf>,
    /// The wire forwarder's log: the guests' packets are what its one path carried.
    pub wire_log: Option<PathBuf>,
    /// `sprayctl --json show counters` of ToR B and ToR A.
    pub tors: [Option<PathBuf>; 2],
    /// Logs with the emulated paths' lateness lines.
    pub late_logs: Vec<PathBuf>,
    /// The thread sample file (THREADS=1).
    pub threads: Option<PathBuf>,
    /// The ToR sample file ([`tors`]).
    pub tor_samples: Option<PathBuf>,
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// The record of `mode` at `pmtu` in `round`, over the `;`-separated `tests`.
pub fn record(
    round: u32,
    mode: &str,
    pmtu: u32,
    tests: &str,
    loss: &str,
    files: &RunFiles,
) -> ModeRecord {
    let srv = read(&files.dir.join(format!("srv-{mode}-{pmtu}.log")));
    let cli = read(&files.dir.join(format!("cli-{mode}-{pmtu}.log")));
    let list = profile::split_tests(tests);
    let labels = profile::labels(&list);
    let tor_tests = files
        .tor_samples
        .as_ref()
        .map(|p| tors::per_test(&read(p), list.len()))
        .unwrap_or_default();
    let rows = list
        .iter()
        .zip(&labels)
        .enumerate()
        .map(|(i, (t, label))| {
            let n = i + 1;
            let program = profile::program(t);
            TestRow {
                label: label.clone(),
                program: program.to_string(),
                rc: [
                    guest::exit_status(&srv, "server", n),
                    guest::exit_status(&cli, "client", n),
                ],
                perf: guest::perf(&cli, "client", n, program),
                hw: [
                    guest::hw_delta(&srv, "server", n),
                    guest::hw_delta(&cli, "client", n),
                ],
                tors: tor_tests.get(i).copied().flatten(),
            }
        })
        .collect();
    let tor = |p: &Option<PathBuf>| {
        p.as_ref()
            .and_then(|p| TorSums::from_counters_json(&read(p)))
    };
    let logs: Vec<String> = files.late_logs.iter().map(|p| read(p)).collect();
    let lateness = (!logs.is_empty()).then(|| {
        format!(
            "{}; {}",
            host::lateness_line("a->b", &host::lateness("a->b", &logs)),
            host::lateness_line("b->a", &host::lateness("b->a", &logs))
        )
    });
    let usage = read_usage(&read(&files.dir.join(format!("usage-{mode}-{pmtu}.txt")))).map(|u| {
        let packets = match &files.wire_log {
            Some(l) => wire_packets(&read(l)),
            None if !files.ports.is_empty() => files
                .ports
                .iter()
                .map(|p| report::host_port_packets(&read(p)))
                .sum(),
            None => None,
        };
        usage_line(mode, pmtu, &u, packets)
    });
    ModeRecord {
        round,
        mode: mode.to_string(),
        pmtu,
        loss: loss.to_string(),
        tests: rows,
        tors: [tor(&files.tors[0]), tor(&files.tors[1])],
        guests: [guest::guest_stats(&srv), guest::guest_stats(&cli)],
        usage,
        lateness,
        threads: files
            .threads
            .as_ref()
            .map(|p| threads::report(&read(p), mode, pmtu, &labels))
            .unwrap_or_default(),
    }
}

/// What `rxerack usage` printed, read back.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageText {
    /// Seconds since the mode started.
    pub wall_s: f64,
    /// Said after the mode in the CPU line.
    pub note: Option<String>,
    /// Each process.
    pub procs: Vec<(String, host::Usage)>,
}

/// What `rxerack usage` printed: `wall_s SECONDS`, `note TEXT` (optional), then
/// `proc NAME CPU_SECONDS WAKEUPS` per process. `None` when there is no wall time.
pub fn read_usage(text: &str) -> Option<UsageText> {
    let mut wall = None;
    let mut note = None;
    let mut procs = Vec::new();
    for l in text.lines() {
        if let Some(n) = l.strip_prefix("note ") {
            note = Some(n.trim().to_string());
            continue;
        }
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["wall_s", v] => wall = v.parse().ok(),
            ["proc", name, cpu, wakeups] => procs.push((
                name.to_string(),
                host::Usage {
                    cpu_s: cpu.parse().unwrap_or(0.0),
                    wakeups: wakeups.parse().unwrap_or(0),
                },
            )),
            _ => {}
        }
    }
    Some(UsageText {
        wall_s: wall?,
        note,
        procs,
    })
}

/// The lines of a [`read_usage`] text.
pub fn usage_text(wall_s: f64, note: Option<&str>, procs: &[(String, host::Usage)]) -> String {
    let mut s = format!("wall_s {wall_s:.3}\n");
    if let Some(n) = note {
        s += &format!("note {n}\n");
    }
    for (name, u) in procs {
        s += &format!("proc {name} {:.2} {}\n", u.cpu_s, u.wakeups);
    }
    s
}

/// The CPU line of a mode: `MODE PMTU (NOTE): NAME CPUs ... in WALLs (C cores); W wake-ups for
/// N packets from the guests (R per packet)`.
pub fn usage_line(mode: &str, pmtu: u32, u: &UsageText, packets: Option<u64>) -> String {
    let wall_s = u.wall_s;
    let mut cpu = 0.0;
    let mut wakeups = 0;
    let mut names = String::new();
    for (name, p) in &u.procs {
        cpu += p.cpu_s;
        wakeups += p.wakeups;
        names += &format!(" {name} {:.1}s", p.cpu_s);
    }
    let per = match packets {
        Some(n) if n > 0 => format!("{:.2}", wakeups as f64 / n as f64),
        _ => "-".into(),
    };
    let cores = if wall_s > 0.0 { cpu / wall_s } else { 0.0 };
    let note = u
        .note
        .as_ref()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    format!(
        "{mode} {pmtu}{note}:{names} in {wall_s:.0}s ({cores:.2} cores); {wakeups} wake-ups for {} packets from the guests ({per} per packet)",
        packets.map_or("?".to_string(), |n| n.to_string())
    )
}

/// Packets the wire forwarder carried both ways, from its `path 0: a->b rx N ...; b->a rx M`
/// line.
pub fn wire_packets(log: &str) -> Option<u64> {
    let l = log.lines().find(|l| l.starts_with("path 0: a->b rx "))?;
    let mut total = 0;
    for part in l.split(';') {
        let w: Vec<&str> = part.split_whitespace().collect();
        let i = w.iter().position(|x| *x == "rx")?;
        total += w.get(i + 1)?.parse::<u64>().ok()?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_from_the_files_a_mode_run_leaves() {
        let dir = std::env::temp_dir().join(format!("rxerack-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cli-reorder-1024.log"), guest::tests::CLIENT).unwrap();
        std::fs::write(
            dir.join("usage-reorder-1024.txt"),
            "wall_s 24\nproc rack 2.2 77761\n",
        )
        .unwrap();
        let counters = dir.join("tor-b.json");
        std::fs::write(
            &counters,
            r#"{"data":{"reorder":{"timeouts":1,"resyncs":0}}}"#,
        )
        .unwrap();
        let files = RunFiles {
            dir: dir.clone(),
            tors: [Some(counters), None],
            ..RunFiles::default()
        };
        let r = record(
            2,
            "reorder",
            1024,
            "ib_write_bw -s 65536 -n 300;ib_read_lat -s 64",
            "",
            &files,
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(r.round, 2);
        assert_eq!(r.tests.len(), 2);
        assert_eq!(r.tests[0].rc, [None, Some(0)], "no server console");
        assert_eq!(r.tests[0].counter(1, "rcvd_seq_err"), Some(121));
        assert_eq!(
            r.tors[0],
            Some(TorSums {
                timeouts: 1,
                path_losses: 0,
                resyncs: 0
            })
        );
        assert_eq!(
            r.usage.as_deref(),
            Some("reorder 1024: rack 2.2s in 24s (0.09 cores); 77761 wake-ups for ? packets from the guests (- per packet)")
        );
        assert!(r.lateness.is_none());
        let f = r.failures(false);
        assert!(
            f.iter()
                .any(|l| l.contains("did not complete (rc server none, client 0)")),
            "{f:?}"
        );
        assert!(
            f.iter()
                .any(|l| l.contains("the client's rcvd_seq_err is 121")),
            "{f:?}"
        );
    }

    #[test]
    fn usage_and_wire_lines() {
        let u = host::Usage {
            cpu_s: 2.2,
            wakeups: 77761,
        };
        let text = UsageText {
            wall_s: 24.0,
            note: None,
            procs: vec![("rack".to_string(), u)],
        };
        assert_eq!(
            usage_line("reorder", 1024, &text, Some(61430)),
            "reorder 1024: rack 2.2s in 24s (0.09 cores); 77761 wake-ups for 61430 packets from the guests (1.27 per packet)"
        );
        let wire = UsageText {
            note: Some("path delay_us=30".into()),
            ..text.clone()
        };
        assert!(usage_line("wire", 1024, &wire, None)
            .starts_with("wire 1024 (path delay_us=30): rack 2.2s"));
        assert_eq!(
            wire_packets(
                "x\npath 0: a->b rx 40095 lost 0 overflow 0; b->a rx 19920 lost 0 overflow 0\n"
            ),
            Some(60015)
        );
        assert_eq!(wire_packets("nothing"), None);
        assert_eq!(
            read_usage(&usage_text(24.0, None, &text.procs)),
            Some(text.clone())
        );
        assert_eq!(
            read_usage(&usage_text(24.0, Some("path delay_us=30"), &text.procs)),
            Some(wire)
        );
        assert_eq!(read_usage("proc x 1 2"), None);
    }
}
