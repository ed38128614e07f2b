//! The `sprayswitch` binary as an operator runs it: configuration checks, offline runs over
//! capture files, and a clean shutdown on SIGTERM that flushes what was queued.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sprayswitch"));
    c.current_dir(root()).env("RUST_LOG", "warn");
    c
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sprayswitch-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn pcap_config(dir: &Path, pace: &str) -> PathBuf {
    let text = format!(
        r#"
[switch]
name = "offline"

[[port]]
name = "in"
role = "downlink"
mac = "52:54:00:99:00:01"
backend = "pcap"
pcap_in = "tests/data/rxe-rc-ops.pcap"
pace = "{pace}"
addresses = ["10.99.0.254/24"]

[[port]]
name = "u0"
role = "uplink"
mac = "02:00:00:00:01:00"
peer_mac = "02:00:00:00:02:00"
backend = "pcap"
pcap_out = "{out0}"

[[port]]
name = "u1"
role = "uplink"
mac = "02:00:00:00:01:01"
peer_mac = "02:00:00:00:02:01"
backend = "pcap"
pcap_out = "{out1}"

[[uplink_group]]
name = "fabric"
ports = ["u0", "u1"]

[[route]]
prefix = "10.99.0.1/32"
group = "fabric"
"#,
        out0 = dir.join("u0.pcap").display(),
        out1 = dir.join("u1.pcap").display()
    );
    let path = dir.join("switch.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn frames(path: &Path) -> usize {
    let mut r = sprayswitch::pcap::CaptureReader::open(path).unwrap();
    let mut n = 0;
    while r.next_frame(|_| ()).unwrap().is_some() {
        n += 1;
    }
    n
}

/// Frames in a capture whose opcode asks for responses (READ, atomics, FLUSH, ATOMIC WRITE)
/// and the others.
fn asking_and_not(path: &Path) -> (usize, usize) {
    let mut r = sprayswitch::pcap::CaptureReader::open(path).unwrap();
    let (mut asking, mut not) = (0, 0);
    while let Some(ask) = r
        .next_frame(|f| {
            sprayswitch::wire::classify(f.data, sprayswitch::wire::Pmtu::DEFAULT)
                .ok()
                .and_then(|c| c.roce().map(|r| r.bth.opcode.asks_for_responses()))
                .unwrap_or(false)
        })
        .unwrap()
    {
        if ask {
            asking += 1;
        } else {
            not += 1;
        }
    }
    (asking, not)
}

#[test]
fn check_validates_and_reports_errors_with_their_field() {
    let out = bin().arg("check").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("configuration is valid"));
    let dir = tmp("check");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[[port]]\nname = \"a\"\nrole = \"downlink\"\nmac = \"02:00:00:00:00:01\"\n[[route]]\nprefix = \"10.0.0.0/8\"\nport = \"zz\"\n").unwrap();
    let out = bin()
        .args(["--config", bad.to_str().unwrap(), "check"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("route[0].port: unknown port 'zz'"), "{err}");
    let out = bin().arg("run").output().unwrap();
    assert!(!out.status.success(), "mem ports cannot run standalone");
    assert!(String::from_utf8_lossy(&out.stderr).contains("backend 'mem'"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn runs_offline_over_a_capture_and_sprays_it() {
    let dir = tmp("offline");
    let cfg = pcap_config(&dir, "fast");
    let out = bin()
        .args(["--config", cfg.to_str().unwrap(), "run", "--no-socket"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 40 frames of the capture go to 10.99.0.1 through the switch's MAC: the READ and atomic
    // requests on the QP's hashed uplink, the rest round robin over 2.
    let (u0, u1) = (
        asking_and_not(&dir.join("u0.pcap")),
        asking_and_not(&dir.join("u1.pcap")),
    );
    assert_eq!(u0.0 + u0.1 + u1.0 + u1.1, 40);
    assert!(u0.0 + u1.0 > 0, "the capture has READs or atomics");
    assert!(u0.0 == 0 || u1.0 == 0, "one uplink for them: {u0:?} {u1:?}");
    assert!(u0.1.abs_diff(u1.1) <= 1, "the rest sprayed: {u0:?} {u1:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("drop_not_for_us: 30"), "{stdout}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sigterm_stops_cleanly_and_flushes() {
    let dir = tmp("sigterm");
    // Recorded pace: the capture pauses 1.6 s after frame 20, so the switch is mid-replay.
    let cfg = pcap_config(&dir, "recorded");
    let mut child = bin()
        .args(["--config", cfg.to_str().unwrap(), "run"])
        .arg("--socket")
        .arg(dir.join("ctl.sock"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("sprayswitch did not stop within 10 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status:?}");
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("rx "), "counters printed: {stdout}");
    // What was forwarded before the signal is in the output files, complete.
    let n = frames(&dir.join("u0.pcap")) + frames(&dir.join("u1.pcap"));
    assert!((1..40).contains(&n), "{n} frames flushed before the pause");
    std::fs::remove_dir_all(&dir).ok();
}

fn sprayctl(sock: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_sprayctl"))
        .arg("--socket")
        .arg(sock)
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

#[test]
fn sighup_reloads_a_valid_file_and_refuses_a_bad_one() {
    let dir = tmp("sighup");
    let sock = dir.join("ctl.sock");
    let cfg = pcap_config(&dir, "fast");
    // No replay: the switch runs until it is told to stop.
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "pcap_in = \"tests/data/rxe-rc-ops.pcap\"\npace = \"fast\"",
        &format!("pcap_out = \"{}\"", dir.join("in.pcap").display()),
    );
    std::fs::write(&cfg, &text).unwrap();
    let child = bin()
        .args(["--config", cfg.to_str().unwrap(), "run", "--socket"])
        .arg(&sock)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let policy = || sprayctl(&sock, &["show", "counters"])["data"]["spray_policy"].clone();
    let t0 = Instant::now();
    while policy() != "round_robin" {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the control socket never answered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let hup = |pid: u32| {
        assert!(Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap()
            .success())
    };
    // A valid change: applied.
    std::fs::write(
        &cfg,
        text.replace(
            "[switch]\nname = \"offline\"",
            "[switch]\nname = \"offline\"\nspray_policy = \"ecmp\"",
        ),
    )
    .unwrap();
    hup(child.id());
    let t0 = Instant::now();
    while policy() != "ecmp" {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "SIGHUP did not apply the file"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // A bad file: nothing changes.
    std::fs::write(
        &cfg,
        text.replace("group = \"fabric\"", "group = \"nowhere\""),
    )
    .unwrap();
    hup(child.id());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(policy(), "ecmp");
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("SIGHUP reload refused") && err.contains("nowhere"),
        "{err}"
    );
    assert!(!sock.exists(), "the socket is removed at exit");
    std::fs::remove_dir_all(&dir).ok();
}
