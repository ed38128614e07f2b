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
