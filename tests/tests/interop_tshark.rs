//! Wireshark's dissectors as an independent check: tshark decodes the CM REQ and REP MADs we
//! build (the offsets our snooping reads), and reads the pcap files our writer produces.
//!
//! Needs tshark. When it is missing the tests say so and pass, unless
//! `SPRAYSWITCH_REQUIRE_INTEROP=1` (set by `scripts/test.sh` and CI), where they fail.

use std::net::Ipv4Addr;
use std::process::Command;

use sprayswitch::pcap::PcapWriter;
use sprayswitch::wire::cm::{self, CmMessage, GSI_QKEY, MAD_LEN};
use sprayswitch::wire::{
    classify, BthRepr, DethRepr, ExtRepr, IpRepr, Opcode, Pmtu, Psn, RoceFrameRepr,
};
use sprayswitch_tests::interop_required;

fn have_tshark() -> bool {
    let ok = Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok || !interop_required(),
        "SPRAYSWITCH_REQUIRE_INTEROP=1 but tshark is not installed"
    );
    if !ok {
        eprintln!("SKIPPED: tshark is not installed; run scripts/test.sh to include it");
    }
    ok
}

fn cm_frame(m: &CmMessage, src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    let mut mad = [0u8; MAD_LEN];
    cm::emit(m, &mut mad).unwrap();
    let ip = IpRepr::V4 { src, dst, id: 1 };
    let bth = BthRepr::new(Opcode::UdSendOnly, 1, Psn::new(5));
    let deth = DethRepr {
        qkey: GSI_QKEY,
        src_qp: 1,
    };
    // CM MADs go out as rdma_cm sends them: not ECN-capable.
    RoceFrameRepr {
        tos: 0,
        ..RoceFrameRepr::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], ip, bth)
    }
    .with_ext(ExtRepr {
        deth: Some(deth),
        ..ExtRepr::default()
    })
    .with_payload(&mad)
    .to_vec()
    .unwrap()
}

#[test]
fn tshark_decodes_our_cm_req_and_rep_as_we_do() {
    if !have_tshark() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("sprayswitch-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cm.pcap");
    let req = CmMessage::Req {
        local_comm_id: 0x1122_3344,
        qpn: 0x00_0A1B,
        starting_psn: Psn::new(0x00C0_FFEE & 0xFF_FFFF),
    };
    let rep = CmMessage::Rep {
        local_comm_id: 0x5566_7788,
        remote_comm_id: 0x1122_3344,
        qpn: 0x00_0B2C,
        starting_psn: Psn::new(0x12_3456),
    };
    let mut w = PcapWriter::create(&path).unwrap();
    for (i, m) in [req, rep].iter().enumerate() {
        let f = cm_frame(m, Ipv4Addr::new(10, 1, 1, 2), Ipv4Addr::new(10, 2, 1, 2));
        // Our own parse of the frame agrees first.
        let c = classify(&f, Pmtu::DEFAULT).unwrap();
        let r = c.roce().unwrap();
        let mad = &f[usize::from(r.payload_offset)..][..usize::from(r.payload_len)];
        assert_eq!(cm::parse(mad), Ok(*m));
        w.write_frame(i as u64 * 1000, &f).unwrap();
    }
    drop(w.into_inner().unwrap());
    let out = Command::new("tshark")
        .args([
            "-r",
            path.to_str().unwrap(),
            "-T",
            "fields",
            "-E",
            "separator=,",
        ])
        .args([
            "-e",
            "infiniband.cm.req.localqpn",
            "-e",
            "infiniband.cm.req.startpsn",
        ])
        .args([
            "-e",
            "infiniband.cm.rep.localqpn",
            "-e",
            "infiniband.cm.rep.startpsn",
        ])
        .args(["-e", "infiniband.cm.rep.remotecommid"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let fields = |l: &str| -> Vec<u64> {
        l.split(',')
            .filter(|s| !s.is_empty())
            .map(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap())
            .collect()
    };
    assert_eq!(
        fields(lines[0]),
        vec![0x0A1B, 0xC0FFEE],
        "REQ: QPN and starting PSN, {text}"
    );
    assert_eq!(
        fields(lines[1]),
        vec![0x0B2C, 0x12_3456, 0x1122_3344],
        "REP: QPN, PSN, remote comm ID, {text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn tshark_reads_our_pcap_files() {
    if !have_tshark() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("sprayswitch-tshark-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ours.pcap");
    let mut w = PcapWriter::create(&path).unwrap();
    for i in 0..10u64 {
        let f = cm_frame(
            &CmMessage::Req {
                local_comm_id: i as u32,
                qpn: 1,
                starting_psn: Psn::new(0),
            },
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
        );
        w.write_frame(1_700_000_000_000_000_000 + i * 1_000_000, &f)
            .unwrap();
    }
    drop(w.into_inner().unwrap());
    let out = Command::new("tshark")
        .args([
            "-r",
            path.to_str().unwrap(),
            "-T",
            "fields",
            "-e",
            "frame.time_epoch",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let times: Vec<f64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(times.len(), 10);
    assert!(
        (times[1] - times[0] - 0.001).abs() < 1e-6,
        "nanosecond timestamps read back: {times:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
