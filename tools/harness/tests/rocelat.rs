//! The latency meter as a user runs it: every probe measured on both paths, percentiles
//! printed, the interval log readable.

use std::process::Command;

#[test]
fn measures_both_paths_and_writes_a_log() {
    let dir = std::env::temp_dir().join(format!("sprayswitch-rocelat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("lat.hlog");
    let out = Command::new(env!("CARGO_BIN_EXE_rocelat"))
        .args([
            "--probes",
            "300",
            "--interval-us",
            "100",
            "--log",
            log.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let p50 = |label: &str| -> f64 {
        let l = text.lines().find(|l| l.starts_with(label)).unwrap();
        assert!(l.contains(" 300 probes"), "{l}");
        l.split("p50")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(
        p50("switched") > p50("direct"),
        "two ToRs and the fabric cost more than a cable: {text}"
    );
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(log_text.contains("Tag=switched,") && log_text.contains("Tag=direct,"));
    // The log decodes with HdrHistogram's own reader.
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    let entries: Vec<_> = IntervalLogIterator::new(log_text.as_bytes())
        .filter_map(Result::ok)
        .collect();
    let histograms = entries
        .iter()
        .filter(|e| matches!(e, LogEntry::Interval(_)))
        .count();
    assert_eq!(histograms, 2);
    std::fs::remove_dir_all(&dir).ok();
}
