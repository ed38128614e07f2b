//! Both ways against Scapy's RoCEv2 layer (an independent implementation): we parse the frames
//! Scapy builds, and Scapy accepts (parses, and computes the same ICRC for) the frames we build.
//!
//! Needs python3 with scapy. When it is missing the tests say so and pass, unless
//! `SPRAYSWITCH_REQUIRE_INTEROP=1` (set by `scripts/test.sh` and CI), where they fail.

use std::net::Ipv4Addr;
use std::process::Command;

use serde_json::Value;
use sprayswitch::pcap::PcapWriter;
use sprayswitch::wire::{
    classify, AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, ExtRepr, FethRepr,
    IethRepr, ImmDtRepr, IpRepr, Opcode, Pmtu, Psn, RethRepr, RoceFrameRepr, Syndrome, VlanTag,
};
use sprayswitch_tests::{interop_required, read_capture, repo_root, scapy_available};

fn script() -> std::path::PathBuf {
    repo_root().join("tests/interop/scapy_roce.py")
}

fn need_scapy() -> bool {
    if scapy_available() {
        return true;
    }
    assert!(
        !interop_required(),
        "SPRAYSWITCH_REQUIRE_INTEROP=1 but python3 cannot import scapy.contrib.roce \
         (pip install scapy)"
    );
    sprayswitch_tests::skip(
        &sprayswitch_tests::current_test(),
        "python3 with scapy is not installed; run scripts/test.sh to include it",
    );
    false
}

fn run(args: &[&str]) -> Vec<Value> {
    let out = Command::new("python3")
        .arg(script())
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "scapy_roce.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn we_parse_what_scapy_builds() {
    if !need_scapy() {
        return;
    }
    let dir = tempdir("scapy-gen");
    let pcap = dir.join("scapy.pcap");
    let meta = run(&["gen", pcap.to_str().unwrap()]);
    let frames = read_capture(&pcap);
    assert_eq!(frames.len(), meta.len());
    assert!(frames.len() >= 50);
    for (f, m) in frames.iter().zip(&meta) {
        let name = m["name"].as_str().unwrap();
        let c = classify(f, Pmtu::DEFAULT).unwrap_or_else(|e| panic!("{name}: {e}"));
        let r = c.roce().unwrap_or_else(|| panic!("{name}: not RoCE"));
        assert_eq!(r.verify_icrc(f, c.eth.l3_offset), Ok(true), "{name}: ICRC");
        assert_eq!(
            u64::from(u8::from(r.bth.opcode)),
            m["opcode"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            u64::from(r.bth.dest_qp),
            m["dest_qp"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            u64::from(r.bth.psn.value()),
            m["psn"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(r.bth.ack_req, m["ack_req"].as_bool().unwrap(), "{name}");
        assert_eq!(r.bth.fecn, m["fecn"].as_bool().unwrap(), "{name}");
        assert_eq!(
            u64::from(r.payload_len),
            m["payload_len"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(r.ip.src.to_string(), m["src"].as_str().unwrap(), "{name}");
        assert_eq!(
            c.eth.vlan.map(|v| u64::from(v.vid)),
            m["vlan"].as_u64(),
            "{name}"
        );
        assert_eq!(
            r.reth.map(|x| u64::from(x.dma_len)),
            m["dma_len"].as_u64(),
            "{name}"
        );
        assert_eq!(
            r.aeth.map(|a| u64::from(u8::from(a.syndrome))),
            m["aeth_raw"].as_u64(),
            "{name}"
        );
        assert_eq!(
            r.aeth.map(|a| u64::from(a.msn)),
            m["msn"].as_u64(),
            "{name}"
        );
    }
}

#[test]
fn scapy_accepts_what_we_build() {
    if !need_scapy() {
        return;
    }
    let dir = tempdir("scapy-check");
    let pcap = dir.join("ours.pcap");
    let mut w = PcapWriter::create(&pcap).unwrap();
    let mut expected = Vec::new();
    let ext = ExtRepr {
        deth: Some(DethRepr {
            qkey: 0x8001_0000,
            src_qp: 0x12,
        }),
        feth: Some(FethRepr {
            placement_type: 1,
            selectivity: 0,
        }),
        reth: Some(RethRepr {
            virtual_address: 0x7f00_1234_5000,
            rkey: 0x1234,
            dma_len: 3000,
        }),
        atomic_eth: Some(AtomicEthRepr {
            virtual_address: 0x3000,
            rkey: 5,
            swap_add: 1,
            compare: 0,
        }),
        aeth: Some(AethRepr {
            syndrome: Syndrome::Ack { credits: 31 },
            msn: 9,
        }),
        atomic_ack_eth: Some(AtomicAckEthRepr { orig_data: 77 }),
        immdt: Some(ImmDtRepr { imm: 0xCAFE }),
        ieth: Some(IethRepr { rkey: 0x99 }),
    };
    let payload: Vec<u8> = (0..1021u32).map(|i| i as u8).collect();
    let mut n = 0u64;
    for op in Opcode::ALL {
        let body: &[u8] = if op.layout().unwrap().payload {
            &payload
        } else {
            &[]
        };
        for v6 in [false, true] {
            for vlan in [
                None,
                Some(VlanTag {
                    pcp: 3,
                    dei: false,
                    vid: 100,
                }),
            ] {
                let ip = if v6 {
                    IpRepr::V6 {
                        src: "fd99::2".parse().unwrap(),
                        dst: "fd99::1".parse().unwrap(),
                        flow_label: 7,
                    }
                } else {
                    IpRepr::V4 {
                        src: Ipv4Addr::new(10, 99, 0, 2),
                        dst: Ipv4Addr::new(10, 99, 0, 1),
                        id: n as u16,
                    }
                };
                let psn = Psn::new(0xFF_FFFF).add(n as u32);
                let frame = RoceFrameRepr {
                    src_mac: [0x52, 0x54, 0, 0x99, 0, 2],
                    dst_mac: [0x52, 0x54, 0, 0x99, 0, 1],
                    vlan,
                    ip,
                    tos: 0x02,
                    hop_limit: 64,
                    udp_src_port: 49441,
                    bth: BthRepr {
                        opcode: op,
                        solicited: false,
                        mig_req: false,
                        pad_count: 0,
                        tver: 0,
                        pkey: 0xFFFF,
                        fecn: n.is_multiple_of(3),
                        becn: n.is_multiple_of(5),
                        dest_qp: 0x11 + n as u32,
                        ack_req: n.is_multiple_of(2),
                        psn,
                    },
                    ext,
                    payload: body,
                }
                .to_vec()
                .unwrap();
                w.write_frame(n * 1000, &frame).unwrap();
                expected.push((u8::from(op), 0x11 + n as u32, psn.value()));
                n += 1;
            }
        }
    }
    // One frame with a corrupted ICRC: Scapy must notice, or the check below proves nothing.
    w.flush().unwrap();
    let mut bad = read_capture(&pcap).pop().unwrap();
    let last = bad.len() - 1;
    bad[last] ^= 0x01;
    w.write_frame(n * 1000, &bad).unwrap();
    w.flush().unwrap();
    drop(w);
    let mut seen = run(&["check", pcap.to_str().unwrap()]);
    let corrupted = seen.pop().unwrap();
    assert_eq!(
        corrupted["icrc_ok"],
        Value::Bool(false),
        "Scapy missed a corrupted ICRC"
    );
    assert_eq!(seen.len(), expected.len());
    for (s, (op, qp, psn)) in seen.iter().zip(expected) {
        let frame = s["frame"].as_u64().unwrap();
        assert_eq!(s["roce"], Value::Bool(true), "frame {frame}");
        assert_eq!(
            s["icrc_ok"],
            Value::Bool(true),
            "frame {frame}: Scapy computes another ICRC"
        );
        assert_eq!(s["opcode"].as_u64(), Some(u64::from(op)), "frame {frame}");
        assert_eq!(s["dest_qp"].as_u64(), Some(u64::from(qp)), "frame {frame}");
        assert_eq!(s["psn"].as_u64(), Some(u64::from(psn)), "frame {frame}");
    }
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sprayswitch-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
