//! Helpers shared by the end-to-end tests in `tests/tests/`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use sprayswitch::pcap::CaptureReader;
use sprayswitch::wire::{classify, ExtRepr, IpRepr, Pmtu, RoceFrameRepr};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A file under `tests/data/`.
pub fn data(name: &str) -> PathBuf {
    repo_root().join("tests/data").join(name)
}

/// Every frame of a capture, as owned bytes.
pub fn read_capture(path: &Path) -> Vec<Vec<u8>> {
    let mut r = CaptureReader::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut frames = Vec::new();
    while let Some(f) = r.next_frame(|f| f.data.to_vec()).expect("readable capture") {
        frames.push(f);
    }
    frames
}

/// Rebuilds a RoCEv2 frame with our own emitter from what our parser read out of it. Equal bytes
/// mean parser and emitter agree with whoever built the original, ICRC included.
pub fn rebuild(frame: &[u8]) -> Vec<u8> {
    let c = classify(frame, Pmtu::DEFAULT).expect("classifies");
    let r = c.roce().expect("RoCE frame");
    let l3 = usize::from(c.eth.l3_offset);
    let ip = match (r.ip.src, r.ip.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => IpRepr::V4 {
            src,
            dst,
            id: u16::from_be_bytes([frame[l3 + 4], frame[l3 + 5]]),
        },
        (IpAddr::V6(src), IpAddr::V6(dst)) => IpRepr::V6 {
            src,
            dst,
            flow_label: u32::from_be_bytes([0, frame[l3 + 1] & 0x0F, frame[l3 + 2], frame[l3 + 3]]),
        },
        _ => unreachable!("one IP version per header"),
    };
    let ext_at = usize::from(r.bth_offset) + 12;
    let ext = ExtRepr::parse(r.bth.opcode, &frame[ext_at..]).expect("extension headers");
    let payload = &frame[usize::from(r.payload_offset)..][..usize::from(r.payload_len)];
    let mut src_mac = [0u8; 6];
    src_mac.copy_from_slice(&c.eth.src);
    RoceFrameRepr {
        src_mac,
        dst_mac: c.eth.dst,
        vlan: c.eth.vlan,
        ip,
        tos: r.ip.tos,
        hop_limit: r.ip.hop_limit,
        udp_src_port: r.ip.udp_ports().expect("udp").0,
        bth: r.bth,
        ext,
        payload,
    }
    .to_vec()
    .expect("emits")
}

/// True when `python3 -c "import scapy.contrib.roce"` works.
pub fn scapy_available() -> bool {
    Command::new("python3")
        .args(["-c", "import scapy.contrib.roce"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Whether tests that need an external tool must run (`SPRAYSWITCH_REQUIRE_INTEROP=1`, set by
/// the project's test command and CI) or may be skipped with a message when it is missing.
pub fn interop_required() -> bool {
    std::env::var("SPRAYSWITCH_REQUIRE_INTEROP").is_ok_and(|v| v == "1")
}

/// Says that `test` does not run here and why: on stderr (which cargo shows only for a
/// failing test), and as a line `TEST: WHY` appended to the file named by
/// `SPRAYSWITCH_SKIP_LOG` when it is set. `scripts/test.sh` sets it and lists every skipped
/// test in its summary, so that a skip is never seen as a pass. Whether a skip is allowed at
/// all is the caller's to decide first ([`interop_required`], [`netns::available`]).
pub fn skip(test: &str, why: &str) {
    use std::io::Write as _;
    eprintln!("SKIPPED {test}: {why}");
    let Some(log) = std::env::var_os("SPRAYSWITCH_SKIP_LOG") else {
        return;
    };
    // One short append per line: the test threads and processes writing at once do not mix
    // their lines (O_APPEND).
    let line = format!("{test}: {why}\n");
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        panic!("{test} is skipped ({why}) but SPRAYSWITCH_SKIP_LOG cannot say so: {e}");
    }
}

/// The name of the test running on this thread (libtest names each test's thread after it),
/// for [`skip`] in helpers that are not told it.
pub fn current_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("an unnamed test")
        .to_string()
}

/// Network namespaces and veth pairs for the real-port tests.
pub mod netns;

pub mod alloc_count;

/// Frames as a Linux host sends them (RoCE WRITEs, ARP, ND, ICMP, TCP), for the in-process
/// topologies.
pub mod frames {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use sprayswitch::pkt::Pkt;
    use sprayswitch::wire::checksum::ipv6_l4_checksum;
    use sprayswitch::wire::control::{arp_request, neighbor_solicit};
    use sprayswitch::wire::frame::ipv4_header_checksum;
    use sprayswitch::wire::{BthRepr, ExtRepr, IpRepr, Opcode, Psn, RethRepr, RoceFrameRepr};
    use sprayswitch_harness::rack::topo::Host;

    /// An RC RDMA WRITE packet from `h` to `dst` (through the gateway) with QP, PSN and a
    /// payload whose first 4 bytes carry `tag`.
    pub fn roce_write(
        h: &Host,
        dst: IpAddr,
        qp: u32,
        psn: u32,
        sport: u16,
        len: usize,
        tag: u32,
    ) -> Pkt {
        let mut payload = vec![0xA5u8; len.max(4)];
        payload[..4].copy_from_slice(&tag.to_be_bytes());
        let ip = match dst {
            IpAddr::V4(d) => IpRepr::V4 {
                src: h.ip4,
                dst: d,
                id: 0,
            },
            IpAddr::V6(d) => IpRepr::V6 {
                src: h.ip6,
                dst: d,
                flow_label: 0,
            },
        };
        let bth = BthRepr {
            ack_req: true,
            ..BthRepr::new(Opcode::RcWriteOnly, qp, Psn::new(psn))
        };
        let reth = RethRepr {
            virtual_address: 0x1000,
            rkey: 7,
            dma_len: len as u32,
        };
        let f = RoceFrameRepr {
            udp_src_port: sport,
            ..RoceFrameRepr::new(h.mac, h.gw_mac, ip, bth)
        }
        .with_ext(ExtRepr {
            reth: Some(reth),
            ..ExtRepr::default()
        })
        .with_payload(&payload)
        .to_vec()
        .expect("emits");
        Pkt::from_slice(&f)
    }

    /// The 4-byte tag of a RoCE WRITE ONLY frame built by [`roce_write`].
    pub fn tag_of(frame: &[u8]) -> u32 {
        let c = sprayswitch::wire::classify(frame, sprayswitch::wire::Pmtu::DEFAULT).expect("RoCE");
        let r = c.roce().expect("RoCE");
        let p = usize::from(r.payload_offset);
        u32::from_be_bytes([frame[p], frame[p + 1], frame[p + 2], frame[p + 3]])
    }

    /// ARP request from `h` for `target`.
    pub fn arp_who_has(h: &Host, target: Ipv4Addr) -> Pkt {
        let mut b = [0u8; 60];
        let n = arp_request(&mut b, h.mac, h.ip4, target);
        Pkt::from_slice(&b[..n])
    }

    /// ARP reply from `h` to `to_mac`/`to_ip`.
    pub fn arp_reply(h: &Host, to_mac: [u8; 6], to_ip: Ipv4Addr) -> Pkt {
        let mut b = [0u8; 60];
        let n = arp_request(&mut b, h.mac, h.ip4, to_ip);
        let f = &mut b[..n];
        f[0..6].copy_from_slice(&to_mac);
        f[20..22].copy_from_slice(&2u16.to_be_bytes());
        f[32..38].copy_from_slice(&to_mac);
        Pkt::from_slice(f)
    }

    /// Neighbour solicitation from `h` for `target`.
    pub fn ns(h: &Host, target: Ipv6Addr) -> Pkt {
        let mut b = [0u8; 128];
        let n = neighbor_solicit(&mut b, h.mac, h.ip6, target);
        Pkt::from_slice(&b[..n])
    }

    /// Neighbour advertisement from `h` (answering `to`), as Linux sends it: solicited, override.
    pub fn na(h: &Host, to_mac: [u8; 6], to: Ipv6Addr) -> Pkt {
        let mut f = vec![0u8; 86];
        f[0..6].copy_from_slice(&to_mac);
        f[6..12].copy_from_slice(&h.mac);
        f[12..14].copy_from_slice(&0x86DDu16.to_be_bytes());
        f[14] = 0x60;
        f[18..20].copy_from_slice(&32u16.to_be_bytes());
        f[20] = 58;
        f[21] = 255;
        f[22..38].copy_from_slice(&h.ip6.octets());
        f[38..54].copy_from_slice(&to.octets());
        f[54] = 136;
        f[58] = 0x60;
        f[62..78].copy_from_slice(&h.ip6.octets());
        f[78] = 2;
        f[79] = 1;
        f[80..86].copy_from_slice(&h.mac);
        let c = ipv6_l4_checksum(&h.ip6.octets(), &to.octets(), 58, &f[54..86]);
        f[56..58].copy_from_slice(&c.to_be_bytes());
        Pkt::from_slice(&f)
    }

    /// ICMP echo request from `h` to `dst` (IPv4) with `seq`, 56 bytes of data as `ping` sends.
    pub fn ping4(h: &Host, dst: Ipv4Addr, seq: u16) -> Pkt {
        let mut f = vec![0u8; 14 + 20 + 8 + 56];
        f[0..6].copy_from_slice(&h.gw_mac);
        f[6..12].copy_from_slice(&h.mac);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&84u16.to_be_bytes());
        ip[4..6].copy_from_slice(&seq.to_be_bytes());
        ip[6] = 0x40;
        ip[8] = 64;
        ip[9] = 1;
        ip[12..16].copy_from_slice(&h.ip4.octets());
        ip[16..20].copy_from_slice(&dst.octets());
        let c = ipv4_header_checksum(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let icmp = &mut f[34..];
        icmp[0] = 8;
        icmp[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
        icmp[6..8].copy_from_slice(&seq.to_be_bytes());
        for (i, b) in icmp[8..].iter_mut().enumerate() {
            *b = i as u8;
        }
        let c = sprayswitch::wire::checksum::fold(sprayswitch::wire::checksum::ones_sum(icmp, 0));
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        Pkt::from_slice(&f)
    }

    /// ICMPv6 echo request from `h` to `dst`.
    pub fn ping6(h: &Host, dst: Ipv6Addr, seq: u16) -> Pkt {
        let mut f = vec![0u8; 14 + 40 + 8 + 56];
        f[0..6].copy_from_slice(&h.gw_mac);
        f[6..12].copy_from_slice(&h.mac);
        f[12..14].copy_from_slice(&0x86DDu16.to_be_bytes());
        f[14] = 0x60;
        f[18..20].copy_from_slice(&64u16.to_be_bytes());
        f[20] = 58;
        f[21] = 64;
        f[22..38].copy_from_slice(&h.ip6.octets());
        f[38..54].copy_from_slice(&dst.octets());
        f[54] = 128;
        f[58..60].copy_from_slice(&0x1234u16.to_be_bytes());
        f[60..62].copy_from_slice(&seq.to_be_bytes());
        let c = ipv6_l4_checksum(&h.ip6.octets(), &dst.octets(), 58, &f[54..]);
        f[56..58].copy_from_slice(&c.to_be_bytes());
        Pkt::from_slice(&f)
    }

    /// TCP segment from `h` to `dst` with the given ports and flags (SYN: 0x02).
    pub fn tcp4(h: &Host, dst: Ipv4Addr, sport: u16, dport: u16, seq: u32, flags: u8) -> Pkt {
        let mut f = vec![0u8; 14 + 20 + 20];
        f[0..6].copy_from_slice(&h.gw_mac);
        f[6..12].copy_from_slice(&h.mac);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&40u16.to_be_bytes());
        ip[6] = 0x40;
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&h.ip4.octets());
        ip[16..20].copy_from_slice(&dst.octets());
        let c = ipv4_header_checksum(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let t = &mut f[34..54];
        t[0..2].copy_from_slice(&sport.to_be_bytes());
        t[2..4].copy_from_slice(&dport.to_be_bytes());
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        t[12] = 0x50;
        t[13] = flags;
        t[14..16].copy_from_slice(&64240u16.to_be_bytes());
        Pkt::from_slice(&f)
    }
}

/// Polls `f` until it returns `Some`, for at most `secs` seconds.
pub fn wait_for<T>(secs: f64, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(secs);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// Reorder limits for tests on a shared 2-core machine: timers well above the 100 us path skew
/// of the test fabrics *and* above how long the scheduler may keep a worker off the CPU, so that
/// only real loss, never scheduling, ends a gap or a learning window.
pub fn shared_cpu_reorder() -> sprayswitch::reorder::ReorderConfig {
    sprayswitch::reorder::ReorderConfig {
        hold_timeout_ns: 5_000_000,
        learn_ns: 5_000_000,
        ..sprayswitch::reorder::ReorderConfig::default()
    }
}

/// The directory of the workspace's binaries (`target/<profile>`, next to this test's
/// executable). `cargo test --workspace` builds them; when a test of this crate runs alone,
/// the missing ones are built here.
pub fn bin_dir(want: &[&str]) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .to_path_buf();
    if want.iter().any(|b| !dir.join(b).exists()) {
        let release = dir.ends_with("release");
        let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        c.current_dir(repo_root()).args([
            "build",
            "--bins",
            "-p",
            "sprayswitch-control",
            "-p",
            "sprayswitch-packet",
            "-p",
            "sprayswitch-harness",
        ]);
        if release {
            c.arg("--release");
        }
        assert!(c.status().expect("cargo build").success());
    }
    dir
}
