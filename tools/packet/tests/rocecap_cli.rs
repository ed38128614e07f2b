//! The `rocecap decode` command as a user runs it.

use std::process::Command;

use serde_json::Value;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .to_path_buf()
}

fn data(name: &str) -> PathBuf {
    repo_root().join("tests/data").join(name)
}

fn read_capture(path: &Path) -> Vec<Vec<u8>> {
    let mut r = sprayswitch::pcap::CaptureReader::open(path).unwrap();
    let mut v = Vec::new();
    while let Some(f) = r.next_frame(|f| f.data.to_vec()).unwrap() {
        v.push(f);
    }
    v
}

fn rocecap(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rocecap"))
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("rocecap runs")
}

#[test]
fn decodes_a_soft_roce_capture_as_text_and_json() {
    let path = data("rxe-reorder-nak-ipv6.pcap");
    let text = rocecap(&["decode", path.to_str().unwrap()]);
    assert!(text.status.success());
    let text = String::from_utf8(text.stdout).unwrap();
    assert_eq!(text.lines().count(), 145);
    assert!(text.lines().all(|l| l.ends_with("icrc ok")), "{text}");
    assert_eq!(text.matches("NAK_PSN_SEQ_ERR").count(), 4);
    assert!(text.contains("[fd99::2]:49476 > [fd99::1]:4791 RC_WRITE_FIRST"));

    let json = rocecap(&["decode", "--json", path.to_str().unwrap()]);
    assert!(json.status.success());
    let records: Vec<Value> = String::from_utf8(json.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 145);
    let nak = records
        .iter()
        .find(|r| r["aeth_syndrome"] == "NAK_PSN_SEQ_ERR")
        .unwrap();
    for key in [
        "frame",
        "src",
        "dst",
        "sport",
        "dport",
        "opcode",
        "dest_qp",
        "psn",
        "ack_req",
        "fecn",
        "becn",
        "msn",
        "payload_len",
        "icrc",
    ] {
        assert!(!nak[key].is_null(), "missing {key} in {nak}");
    }
    assert_eq!(nak["opcode"], "RC_ACK");
    assert_eq!(nak["icrc"], "ok");
    assert_eq!(records[0]["frame"], 1);
}

#[test]
fn reports_bad_icrc_malformed_and_non_roce_frames() {
    use sprayswitch::pcap::PcapWriter;
    let dir = std::env::temp_dir().join(format!("sprayswitch-rocecap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mixed.pcap");
    let good = read_capture(&data("rxe-rc-ops.pcap")).swap_remove(15);
    let mut bad_icrc = good.clone();
    *bad_icrc.last_mut().unwrap() ^= 0xFF;
    let mut bad_opcode = good.clone();
    bad_opcode[42] = 0x3F;
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&[
        0x52, 0x54, 0, 0x99, 0, 2, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1,
    ]);
    arp.extend_from_slice(&[
        0x52, 0x54, 0, 0x99, 0, 2, 10, 99, 0, 2, 0, 0, 0, 0, 0, 0, 10, 99, 0, 1,
    ]);
    let mut w = PcapWriter::create(&path).unwrap();
    for (i, f) in [&good, &bad_icrc, &bad_opcode, &arp, &good[..20].to_vec()]
        .iter()
        .enumerate()
    {
        w.write_frame(i as u64, f).unwrap();
    }
    drop(w.into_inner().unwrap());
    let out = rocecap(&["decode", "--json", path.to_str().unwrap()]);
    assert!(out.status.success());
    let recs: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs[0]["icrc"], "ok");
    assert_eq!(recs[1]["icrc"], "bad");
    assert_eq!(recs[2]["kind"], "error");
    assert_eq!(recs[2]["error_layer"], "bth");
    assert_eq!(recs[2]["error_offset"], 42);
    assert_eq!(recs[3]["kind"], "arp");
    assert_eq!(recs[3]["proto"], "arp-request");
    assert_eq!(recs[4]["kind"], "error");
    assert_eq!(recs[4]["error_layer"], "ipv4");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn missing_and_corrupt_files_fail_clearly() {
    let out = rocecap(&["decode", "no/such/file.pcap"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("cannot read no/such/file.pcap") && err.contains("No such file"),
        "{err}"
    );

    let out = rocecap(&["decode", "Cargo.toml"]);
    assert!(!out.status.success());
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("not a pcap or pcapng capture"));

    let dir = std::env::temp_dir().join(format!("sprayswitch-rocecap-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cut = dir.join("cut.pcap");
    let bytes = std::fs::read(data("rxe-rc-ops.pcap")).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
    let out = rocecap(&["decode", cut.to_str().unwrap()]);
    assert!(!out.status.success(), "a cut capture must not exit 0");
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("cut short after frame 68"));
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 68);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn rejects_a_bad_pmtu() {
    let out = rocecap(&[
        "decode",
        "--pmtu",
        "1500",
        data("rxe-rc-ops.pcap").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("not a path MTU"));
}

#[test]
fn analyze_reports_reordering_retransmissions_and_naks_per_qp() {
    let path = data("rxe-reorder-nak-ipv6.pcap");
    let out = rocecap(&["analyze", "--json", path.to_str().unwrap()]);
    assert!(out.status.success());
    let reports: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(reports.len(), 4, "request and response streams of two QPs");
    let find = |dir: &str, src: &str| {
        reports
            .iter()
            .find(|r| r["direction"] == dir && r["src"] == src)
            .unwrap()
    };
    // The netem-reordered WRITE stream of Soft-RoCE: reordered packets, go-back-N resends.
    let req = find("request", "10.99.0.2");
    assert_eq!(req["packets"], 113);
    assert!(req["reordered"].as_u64().unwrap() > 0 && req["retransmitted"].as_u64().unwrap() > 0);
    assert!(req["max_depth"].as_u64().unwrap() > 1);
    // Its responder's NAKs travel in the response stream.
    assert_eq!(find("response", "10.99.0.1")["naks"], 4);
    // The IPv6 QP was not reordered.
    assert_eq!(find("request", "fd99::2")["reordered"], 0);
    let text = rocecap(&["analyze", path.to_str().unwrap()]);
    assert!(String::from_utf8(text.stdout).unwrap().contains("naks 4"));
}

/// `rocecap transit` over two captures made from a real Soft-RoCE capture: the second sees every
/// frame 25 us later, except three it never got.
#[test]
fn transit_between_two_capture_points() {
    use sprayswitch::pcap::PcapWriter;
    use sprayswitch::wire::{classify, FrameClass, Pmtu};
    let frames = read_capture(&data("rxe-rc-ops.pcap"));
    let key = |f: &[u8]| match classify(f, Pmtu::DEFAULT).map(|c| c.class) {
        Ok(FrameClass::Roce(r)) => {
            Some((r.ip.src, r.ip.dst, r.bth.dest_qp, r.bth.psn, r.bth.opcode))
        }
        _ => None,
    };
    let keys: Vec<_> = frames.iter().map(|f| key(f)).collect();
    let unique: Vec<usize> = (0..frames.len())
        .filter(|&i| keys[i].is_some() && keys.iter().filter(|k| **k == keys[i]).count() == 1)
        .collect();
    assert!(unique.len() > 10);
    let lost = [unique[1], unique[5], unique[9]];
    let dir = std::env::temp_dir().join(format!("sprayswitch-transit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pa, pb) = (dir.join("a.pcap"), dir.join("b.pcap"));
    let mut a = PcapWriter::create(&pa).unwrap();
    let mut b = PcapWriter::create(&pb).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let ts = 1_000_000_000 + i as u64 * 1_000_000;
        a.write_frame(ts, f).unwrap();
        if !lost.contains(&i) {
            b.write_frame(ts + 25_000, f).unwrap();
        }
    }
    drop(a.into_inner().unwrap());
    drop(b.into_inner().unwrap());

    let out = rocecap(&[
        "transit",
        "--json",
        pa.to_str().unwrap(),
        pb.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["only_in_a"], 3, "{r}");
    assert_eq!(r["only_in_b"], 0, "{r}");
    let dirs = r["directions"].as_array().unwrap();
    assert_eq!(dirs.len(), 1, "{r}");
    assert_eq!(dirs[0]["direction"], "a_to_b");
    assert_eq!(dirs[0]["p50_us"], 25.0);
    assert_eq!(dirs[0]["max_us"], 25.0);
    let matched = dirs[0]["packets"].as_u64().unwrap();
    assert_eq!(matched as usize, unique.len() - 3, "{r}");

    // Swapped, the same packets go the other way.
    let out = rocecap(&["transit", pb.to_str().unwrap(), pa.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&format!("b to a: {matched} packets, transit p50 25.0 us")),
        "{text}"
    );
    assert!(text.contains("only in a: 0, only in b: 3"), "{text}");

    // A missing file is named.
    let out = rocecap(&["transit", pa.to_str().unwrap(), "/nonexistent.pcap"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent.pcap"));
    std::fs::remove_dir_all(&dir).ok();
}

/// `rocecap loop` over two capture points made from a real Soft-RoCE capture: the responder's
/// side sees every request 25 us later and every ACK 20 us earlier than the requester's side.
#[test]
fn ack_loop_between_two_capture_points() {
    use sprayswitch::pcap::PcapWriter;
    use sprayswitch::wire::{classify, Direction, Pmtu};
    let frames = read_capture(&data("rxe-rc-ops.pcap"));
    let dir = std::env::temp_dir().join(format!("sprayswitch-loop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pa, pb) = (dir.join("a.pcap"), dir.join("b.pcap"));
    let mut a = PcapWriter::create(&pa).unwrap();
    let mut b = PcapWriter::create(&pb).unwrap();
    let mut shifted = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let ts = 1_000_000_000 + i as u64 * 1_000_000;
        a.write_frame(ts, f).unwrap();
        let response = classify(f, Pmtu::DEFAULT)
            .ok()
            .and_then(|c| c.roce().map(|r| r.direction == Some(Direction::Response)))
            .unwrap_or(false);
        shifted.push((if response { ts - 20_000 } else { ts + 25_000 }, f));
    }
    shifted.sort_by_key(|(ts, _)| *ts);
    for (ts, f) in shifted {
        b.write_frame(ts, f).unwrap();
    }
    drop(a.into_inner().unwrap());
    drop(b.into_inner().unwrap());

    let out = rocecap(&["loop", "--json", pa.to_str().unwrap(), pb.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let acks = r["acks"].as_u64().unwrap();
    assert!(acks > 0, "{r}");
    assert_eq!(r["out"]["n"], acks);
    assert_eq!(
        (r["out"]["p10_us"].as_f64(), r["out"]["max_us"].as_f64()),
        (Some(25.0), Some(25.0)),
        "{r}"
    );
    assert_eq!(
        (r["back"]["p10_us"].as_f64(), r["back"]["max_us"].as_f64()),
        (Some(20.0), Some(20.0)),
        "{r}"
    );
    // The responder's part is what is left of the round trip.
    let rt = r["round_trip"]["p50_us"].as_f64().unwrap();
    let resp = r["responder"]["p50_us"].as_f64().unwrap();
    assert!(rt >= 1_000.0 && resp == rt - 45.0, "{r}");

    let out = rocecap(&["loop", pa.to_str().unwrap(), pb.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&format!("{acks} ACKs matched")), "{text}");
    let out = rocecap(&["loop", pa.to_str().unwrap(), "/nonexistent.pcap"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent.pcap"));
    std::fs::remove_dir_all(&dir).ok();
}
