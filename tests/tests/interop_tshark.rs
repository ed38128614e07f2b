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
        sprayswitch_tests::skip(
            &sprayswitch_tests::current_test(),
            "tshark is not installed; run scripts/test.sh to include it",
        );
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

/// An ECN-capable copy of a frame (ECT(0), as a RoCE NIC running DCQCN sends), the IPv4 header
/// checksum computed from scratch.
fn ect0(frame: &[u8]) -> Option<Vec<u8>> {
    let mut f = frame.to_vec();
    match f.get(12..14)? {
        [0x08, 0x00] => {
            f[15] = (f[15] & !3) | 2;
            f[24..26].copy_from_slice(&[0, 0]);
            let mut acc: u32 = f[14..34]
                .chunks(2)
                .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                .sum();
            while acc > 0xffff {
                acc = (acc & 0xffff) + (acc >> 16);
            }
            f[24..26].copy_from_slice(&(!(acc as u16)).to_be_bytes());
        }
        [0x86, 0xdd] => f[15] = (f[15] & !0x30) | 0x20,
        _ => return None,
    }
    Some(f)
}

/// Frames Soft-RoCE hosts sent (IPv4 and IPv6 captures; rxe sends them not ECN-capable, so they
/// pass a marking queue untouched), made ECN-capable and marked CE by a port's egress queue:
/// our capture decoder still finds every ICRC right (the ICRC covers the ECN bits as ones), and
/// tshark reads ECN = CE and a good IPv4 header checksum on every IPv4 frame.
#[test]
fn marked_frames_of_real_stacks_keep_their_icrc_and_header_checksum() {
    use sprayswitch::egress::{EcnProfile, EgressConfig, EgressQueue};
    use sprayswitch::pcap::CapturedFrame;
    use sprayswitch::pkt::Pkt;
    use sprayswitch::wire::ecn::{codepoint, Codepoint};
    use sprayswitch_packet::capture::decode::decode;
    use sprayswitch_tests::{data, read_capture};

    let every = EgressConfig {
        rate_bps: None,
        burst_bytes: None,
        ecn: Some(EcnProfile {
            kmin_bytes: 0,
            kmax_bytes: 0,
            pmax: 1.0,
        }),
    };
    let mut q = EgressQueue::new(every, 16, 1);
    // A frame that stays queued: every frame after it finds a depth above Kmax (0), so every
    // ECN-capable one is marked.
    assert!(q.enqueue(Pkt::from_slice(&[0u8; 64]), 0, 0));
    let mut marked: Vec<Vec<u8>> = Vec::new();
    for name in ["rxe-rc-ops.pcap", "rxe-reorder-nak-ipv6.pcap"] {
        for f in read_capture(&data(name)) {
            assert!(q.enqueue(Pkt::from_slice(&f), 0, 0));
            let p = q.ready.pop().unwrap();
            q.sent();
            assert_eq!(p.data(), &f[..], "not ECN-capable: untouched");
            let Some(e) = ect0(&f) else { continue };
            assert_eq!(codepoint(&e), Some(Codepoint::Ect0));
            assert!(q.enqueue(Pkt::from_slice(&e), 0, 0));
            let p = q.ready.pop().unwrap();
            q.sent();
            assert_eq!(codepoint(p.data()), Some(Codepoint::Ce));
            marked.push(p.data().to_vec());
        }
    }
    assert!(q.counts.ecn_marked > 20, "{}", q.counts.ecn_marked);
    assert_eq!(q.counts.ecn_marked as usize, marked.len());
    let mut v6 = 0;
    for (i, f) in marked.iter().enumerate() {
        let r = decode(
            &CapturedFrame {
                number: i as u64 + 1,
                ts_ns: 0,
                orig_len: f.len() as u32,
                linktype: 1,
                data: f,
            },
            Pmtu::DEFAULT,
        );
        if r.opcode.is_some() {
            assert_eq!(r.icrc, Some("ok"), "frame {i}");
        }
        v6 += usize::from(f[12..14] == [0x86, 0xdd]);
    }
    assert!(v6 > 0, "IPv6 frames were marked too");
    if !have_tshark() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("sprayswitch-tshark-ce-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("marked.pcap");
    let mut w = PcapWriter::create(&path).unwrap();
    for (i, f) in marked.iter().enumerate() {
        w.write_frame(i as u64 * 1000, f).unwrap();
    }
    drop(w.into_inner().unwrap());
    let out = Command::new("tshark")
        .args(["-r", path.to_str().unwrap(), "-o", "ip.check_checksum:TRUE"])
        .args(["-T", "fields", "-E", "separator=,"])
        .args(["-e", "ip.dsfield.ecn", "-e", "ip.checksum.status"])
        .args(["-e", "ipv6.tclass.ecn"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), marked.len(), "{text}");
    for (line, f) in text.lines().zip(&marked) {
        // ECN 3 (CE); IPv4 checksum status 1 (good).
        let want = if f[12..14] == [0x86, 0xdd] {
            ",,3"
        } else {
            "3,1,"
        };
        assert_eq!(line, want, "{text}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
