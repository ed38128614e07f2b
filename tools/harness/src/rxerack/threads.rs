//! Where the guests' core goes: their qemu threads sampled on the host every 0.2 s (CPU time,
//! time waiting for a CPU, context switches), reported per test over its middle 90% of packets.
//!
//! The sample file has a line `P TIME SERVER_PACKETS CLIENT_PACKETS STARTED ENDED` per sample
//! (the packets each guest's tap carried both ways; the tests the client's console announced),
//! followed by `T TIME ROLE TID IS_MAIN RUN_NS WAIT_NS VOLUNTARY INVOLUNTARY` per thread of each
//! guest's qemu (`/proc/PID/task/*/schedstat` and `status`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One guest to sample: its qemu process and the tap it is attached to.
#[derive(Debug, Clone)]
pub struct Sampled {
    /// `srv` or `cli`.
    pub role: &'static str,
    /// The qemu process.
    pub pid: u32,
    /// Its tap (as `/proc/PID/net/dev` names it).
    pub tap: String,
}

/// Packets both ways on `tap` in the text of a `/proc/PID/net/dev`.
pub fn tap_packets(net_dev: &str, tap: &str) -> u64 {
    let prefix = format!("{tap}:");
    net_dev
        .lines()
        .map(str::trim_start)
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|rest| {
            let f: Vec<u64> = rest
                .split_whitespace()
                .map(|v| v.parse().unwrap_or(0))
                .collect();
            f.get(1).copied().unwrap_or(0) + f.get(9).copied().unwrap_or(0)
        })
        .unwrap_or(0)
}

/// Tests the client's console started and ended so far.
pub fn tests_seen(console: &str) -> (usize, usize) {
    let started = console.matches("=== client START").count();
    let ended = console.matches("=== client END").count();
    (started, ended)
}

/// One sample of both guests at `now` (seconds), as the lines of the sample file.
fn sample(guests: &[Sampled; 2], client_log: &Path, now: f64) -> String {
    let mut p = format!("P {now:.6}");
    let mut t = String::new();
    for g in guests {
        let proc = PathBuf::from(format!("/proc/{}", g.pid));
        let dev = std::fs::read_to_string(proc.join("net/dev")).unwrap_or_default();
        let _ = write!(p, " {}", tap_packets(&dev, &g.tap));
        let Ok(tasks) = std::fs::read_dir(proc.join("task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(tid) = task.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            // Each file is read in one go: /proc makes it anew on every read.
            let Ok(sched) = std::fs::read_to_string(task.path().join("schedstat")) else {
                continue;
            };
            let mut s = sched.split_whitespace();
            let (Some(run), Some(wait)) = (s.next(), s.next()) else {
                continue;
            };
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map_or(0, |v| v.trim().parse::<u64>().unwrap_or(0))
            };
            let _ = write!(
                t,
                "\nT {now:.6} {} {tid} {} {run} {wait} {} {}",
                g.role,
                u8::from(tid == g.pid),
                field("voluntary_ctxt_switches:"),
                field("nonvoluntary_ctxt_switches:")
            );
        }
    }
    let (started, ended) = tests_seen(&std::fs::read_to_string(client_log).unwrap_or_default());
    let _ = write!(p, " {started} {ended}");
    p + &t
}

/// Samples `guests` every 0.2 s into `out` until both are gone.
///
/// # Errors
/// When `out` cannot be written.
pub fn sample_until_gone(
    guests: &[Sampled; 2],
    client_log: &Path,
    out: &Path,
) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out)?;
    while guests
        .iter()
        .any(|g| Path::new(&format!("/proc/{}", g.pid)).exists())
    {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        writeln!(f, "{}", sample(guests, client_log, now))?;
        f.flush()?;
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

#[derive(Default, Clone, Copy)]
struct ThreadSample {
    run: u64,
    wait: u64,
    vol: u64,
    inv: u64,
}

#[derive(Default)]
struct Samples {
    /// Per sample: time, packets of both guests, tests started, tests ended.
    p: Vec<(f64, u64, usize, usize)>,
    /// (sample index, role, tid) -> reading.
    t: BTreeMap<(usize, String, u32), ThreadSample>,
    /// (role, tid) -> the qemu main (I/O) thread.
    main: BTreeMap<(String, u32), bool>,
}

fn parse(text: &str) -> Samples {
    let mut s = Samples::default();
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        let num = |i: usize| w.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        match w.first() {
            Some(&"P") if w.len() >= 6 => {
                let tm = w[1].parse().unwrap_or(0.0);
                s.p.push((tm, num(2) + num(3), num(4) as usize, num(5) as usize));
            }
            Some(&"T") if w.len() >= 9 && !s.p.is_empty() => {
                let (role, tid) = (w[2].to_string(), num(3) as u32);
                s.main.insert((role.clone(), tid), num(4) == 1);
                s.t.insert(
                    (s.p.len() - 1, role, tid),
                    ThreadSample {
                        run: num(5),
                        wait: num(6),
                        vol: num(7),
                        inv: num(8),
                    },
                );
            }
            _ => {}
        }
    }
    s
}

/// The report of a sample file: per test (`labels`, in order) with enough packets, over the
/// middle 90% of the packets the two guests exchanged during it: each guest's qemu I/O thread
/// (the main loop: tap and virtio) and vCPU thread (its busiest other thread): CPU seconds,
/// seconds waiting for a CPU, voluntary/involuntary context switches; and the CPU seconds all
/// their threads had. One line per test, prefixed `MODE PMTU LABEL:`.
pub fn report(text: &str, mode: &str, pmtu: u32, labels: &[String]) -> Vec<String> {
    let s = parse(text);
    let n = s.p.len();
    let mut out = Vec::new();
    for (ti, label) in labels.iter().enumerate() {
        let t = ti + 1;
        let a = s.p.iter().position(|p| p.2 >= t);
        let mut b = s.p.iter().position(|p| p.3 >= t);
        // The last test: the guests may power off before a sample sees its end.
        if a.is_some() && b.is_none() && n > 0 && s.p[n - 1].2 == t {
            b = Some(n - 1);
        }
        let (Some(a), Some(b)) = (a, b) else { continue };
        let (pa, pb) = (s.p[a].1, s.p[b].1);
        if pb < pa + 200 {
            continue;
        }
        let span = (pb - pa) as f64;
        let (lo, hi) = (pa as f64 + 0.05 * span, pb as f64 - 0.05 * span);
        let i0 = (a..=b).find(|&i| s.p[i].1 as f64 >= lo);
        let i1 = (a..=b).find(|&i| s.p[i].1 as f64 >= hi);
        let (Some(i0), Some(i1)) = (i0, i1) else {
            continue;
        };
        if i1 <= i0 {
            continue;
        }
        let mut line = format!(
            "{mode} {pmtu} {label}: {:.2} s, {} packets:",
            s.p[i1].0 - s.p[i0].0,
            s.p[i1].1 - s.p[i0].1
        );
        let mut all = 0u64;
        for (role, name) in [("srv", "server"), ("cli", "client")] {
            let (mut io, mut vcpu, mut best) = (None, None, 0u64);
            for ((r, tid), &is_main) in &s.main {
                if r != role {
                    continue;
                }
                let (Some(x0), Some(x1)) = (
                    s.t.get(&(i0, r.clone(), *tid)),
                    s.t.get(&(i1, r.clone(), *tid)),
                ) else {
                    continue;
                };
                let d = x1.run.saturating_sub(x0.run);
                all += d;
                if is_main {
                    io = Some((*x0, *x1));
                } else if vcpu.is_none() || d > best {
                    best = d;
                    vcpu = Some((*x0, *x1));
                }
            }
            for (kind, pair) in [("io", io), ("vcpu", vcpu)] {
                let Some((x0, x1)) = pair else { continue };
                let _ = write!(
                    line,
                    " {name} {kind} {:.2} s, waited {:.2} s, {}/{} switches;",
                    x1.run.saturating_sub(x0.run) as f64 / 1e9,
                    x1.wait.saturating_sub(x0.wait) as f64 / 1e9,
                    x1.vol.saturating_sub(x0.vol),
                    x1.inv.saturating_sub(x0.inv)
                );
            }
        }
        let _ = write!(line, " all their threads {:.2} s", all as f64 / 1e9);
        out.push(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tap_packets_and_console_progress() {
        let dev = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
  a-h1: 1000      10    0    0    0     0          0         0     2000      20    0    0    0     0       0          0
    lo: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
";
        assert_eq!(tap_packets(dev, "a-h1"), 30);
        assert_eq!(tap_packets(dev, "b-h1"), 0);
        assert_eq!(
            tests_seen("=== client START 1 x\n=== client END 1 x rc=0\n=== client START 2 y\n"),
            (2, 1)
        );
    }

    #[test]
    fn a_report_covers_the_middle_of_each_test() {
        // Test 1 runs from sample 1 to sample 4 (1000 packets); the vCPU thread 11 of the
        // server runs 0.1 s per sample, its I/O thread 10 0.01 s.
        let mut text = String::new();
        for i in 0..6u64 {
            let (started, ended) = match i {
                0 => (0, 0),
                1..=3 => (1, 0),
                _ => (1, 1),
            };
            let pk = 250 * i.saturating_sub(0);
            text += &format!("P {}.0 {pk} 0 {started} {ended}\n", 100 + i);
            text += &format!(
                "T {}.0 srv 10 1 {} {} {} 0\n",
                100 + i,
                i * 10_000_000,
                i * 1_000_000,
                i
            );
            text += &format!(
                "T {}.0 srv 11 0 {} 0 0 {}\n",
                100 + i,
                i * 100_000_000,
                2 * i
            );
        }
        let r = report(
            &text,
            "reorder",
            1024,
            &["write_bw".into(), "read_bw".into()],
        );
        assert_eq!(r.len(), 1, "{r:?}");
        // Packets 250 (sample 1) to 1000 (sample 4): the middle 90% lies between samples 2 and 4.
        assert!(
            r[0].starts_with("reorder 1024 write_bw: 2.00 s, 500 packets:"),
            "{}",
            r[0]
        );
        assert!(
            r[0].contains("server io 0.02 s, waited 0.00 s, 2/0 switches;"),
            "{}",
            r[0]
        );
        assert!(
            r[0].contains("server vcpu 0.20 s, waited 0.00 s, 0/4 switches;"),
            "{}",
            r[0]
        );
        assert!(r[0].ends_with("all their threads 0.22 s"), "{}", r[0]);
    }
}
