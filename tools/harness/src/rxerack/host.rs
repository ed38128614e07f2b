//! What the host's processes did: CPU time and wake-ups of the switches and forwarders (from
//! `/proc`), and how late the emulated paths released packets (from the lines the rack or the
//! fabric prints as it stops).

use std::path::Path;

/// CPU seconds (user + system) and wake-ups (voluntary context switches, all threads) of a
/// process.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// CPU seconds.
    pub cpu_s: f64,
    /// Times its threads went to sleep and were woken: each a context switch taken from a
    /// guest's core.
    pub wakeups: u64,
}

/// User + system ticks from the text of `/proc/PID/stat` (fields 14 and 15, counted after the
/// command name, which may hold spaces).
pub fn stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime 15.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// `voluntary_ctxt_switches` from the text of a `/proc/PID/task/TID/status`.
pub fn voluntary_switches(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The [`Usage`] of process `pid` now; `None` when it is gone.
pub fn usage(pid: u32) -> Option<Usage> {
    let proc = Path::new("/proc").join(pid.to_string());
    let ticks = stat_ticks(&std::fs::read_to_string(proc.join("stat")).ok()?)?;
    let mut wakeups = 0;
    if let Ok(tasks) = std::fs::read_dir(proc.join("task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("status")) {
                wakeups += voluntary_switches(&s);
            }
        }
    }
    Some(Usage {
        cpu_s: ticks as f64 / sprayswitch::port::sys::clock_ticks() as f64,
        wakeups,
    })
}

/// How late one direction's packets left the emulated paths, over all paths.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Lateness {
    /// Packets released.
    pub packets: u64,
    /// Mean lateness, microseconds.
    pub mean_us: f64,
    /// Share later than 100 us.
    pub over_100us: f64,
    /// Share later than 1 ms.
    pub over_1ms: f64,
}

/// [`Lateness`] of direction `dir` (`a->b` or `b->a`) from the `path N: DIR released late by
/// <=10us N, <=50us N, ..., >5ms N, mean X us` lines of `logs`.
pub fn lateness(dir: &str, logs: &[String]) -> Lateness {
    let needle = format!("{dir} released late by");
    let (mut n, mut weighted, mut le100, mut over1ms) = (0u64, 0f64, 0u64, 0u64);
    for log in logs {
        for l in log.lines().filter(|l| l.contains(&needle)) {
            let w: Vec<&str> = l.split_whitespace().collect();
            let (mut m, mut mean) = (0u64, 0f64);
            for i in 0..w.len().saturating_sub(1) {
                let count = || w[i + 1].trim_end_matches(',').parse::<u64>().unwrap_or(0);
                match w[i] {
                    "<=10us" | "<=50us" | "<=100us" => {
                        le100 += count();
                        m += count();
                    }
                    "<=5ms" | ">5ms" => {
                        over1ms += count();
                        m += count();
                    }
                    b if b.starts_with("<=") || b.starts_with('>') => m += count(),
                    "mean" => mean = w[i + 1].parse().unwrap_or(0.0),
                    _ => {}
                }
            }
            n += m;
            weighted += mean * m as f64;
        }
    }
    if n == 0 {
        return Lateness::default();
    }
    Lateness {
        packets: n,
        mean_us: weighted / n as f64,
        over_100us: (n - le100) as f64 / n as f64,
        over_1ms: over1ms as f64 / n as f64,
    }
}

/// `a->b 31011 packets released a mean 170 us late, 23.2% over 100 us, 5.26% over 1 ms`.
pub fn lateness_line(dir: &str, l: &Lateness) -> String {
    if l.packets == 0 {
        return format!("{dir} no packets released");
    }
    format!(
        "{dir} {} packets released a mean {:.0} us late, {:.1}% over 100 us, {:.2}% over 1 ms",
        l.packets,
        l.mean_us,
        100.0 * l.over_100us,
        100.0 * l.over_1ms
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_texts() {
        let stat =
            "4242 (qemu system x86) S 1 4242 4242 0 -1 4194560 100 0 0 0 350 150 0 0 20 0 3 0";
        assert_eq!(stat_ticks(stat), Some(500));
        assert_eq!(stat_ticks("garbage"), None);
        assert_eq!(
            voluntary_switches(
                "Name:\tx\nvoluntary_ctxt_switches:\t77\nnonvoluntary_ctxt_switches:\t3\n"
            ),
            77
        );
        let me = usage(std::process::id()).expect("this process");
        assert!(me.cpu_s >= 0.0);
    }

    #[test]
    fn lateness_over_every_path_of_a_direction() {
        let log = "path 0: a->b released late by <=10us 10, <=50us 20, <=100us 10, <=500us 5, <=1ms 3, <=5ms 1, >5ms 1, mean 100.0 us
path 0: b->a released late by <=10us 7, <=50us 0, <=100us 0, <=500us 0, <=1ms 0, <=5ms 0, >5ms 0, mean 2.0 us
path 1: a->b released late by <=10us 50, <=50us 0, <=100us 0, <=500us 0, <=1ms 0, <=5ms 0, >5ms 0, mean 4.0 us
";
        let l = lateness("a->b", &[log.to_string()]);
        assert_eq!(l.packets, 100);
        assert!((l.mean_us - (100.0 * 50.0 + 4.0 * 50.0) / 100.0).abs() < 1e-9);
        assert!((l.over_100us - 0.10).abs() < 1e-9);
        assert!((l.over_1ms - 0.02).abs() < 1e-9);
        assert_eq!(
            lateness_line("a->b", &l),
            "a->b 100 packets released a mean 52 us late, 10.0% over 100 us, 2.00% over 1 ms"
        );
        assert_eq!(lateness("x->y", &[log.into()]).packets, 0);
    }
}
