//! Wire-layer costs: classification per frame and the ICRC per 1 KB and 4 KB frame, each next to
//! a baseline measured in the same run (etherparse's own L2-L4 slicing; a bare CRC-32 over the
//! same bytes). `cargo bench -p sprayswitch --bench wire`.

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sprayswitch::wire::{
    classify, icrc, AethRepr, BthRepr, ExtRepr, IpRepr, Opcode, Pmtu, Psn, RethRepr, RoceFrameRepr,
    Syndrome, VlanTag,
};

fn frame(op: Opcode, payload: usize, v6: bool, vlan: bool) -> Vec<u8> {
    let body = vec![0x5Au8; payload];
    let ip = if v6 {
        IpRepr::V6 {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            flow_label: 0,
        }
    } else {
        IpRepr::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 1, 1),
            id: 1,
        }
    };
    let ext = ExtRepr {
        reth: Some(RethRepr {
            virtual_address: 0x1000,
            rkey: 1,
            dma_len: payload as u32,
        }),
        aeth: Some(AethRepr {
            syndrome: Syndrome::Ack { credits: 31 },
            msn: 1,
        }),
        ..ExtRepr::default()
    };
    let bth = BthRepr::new(op, 0x11, Psn::new(1000));
    RoceFrameRepr {
        vlan: vlan.then_some(VlanTag {
            pcp: 3,
            dei: false,
            vid: 100,
        }),
        udp_src_port: 49441,
        ..RoceFrameRepr::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], ip, bth)
    }
    .with_ext(ext)
    .with_payload(&body)
    .to_vec()
    .unwrap()
}

fn bench_classify(c: &mut Criterion) {
    let cases = [
        ("ack_ipv4", frame(Opcode::RcAcknowledge, 0, false, false)),
        (
            "write_first_1k_ipv4",
            frame(Opcode::RcWriteFirst, 1024, false, false),
        ),
        (
            "write_middle_1k_ipv6_vlan",
            frame(Opcode::RcWriteMiddle, 1024, true, true),
        ),
    ];
    let mut g = c.benchmark_group("classify");
    g.throughput(Throughput::Elements(1));
    for (name, f) in &cases {
        g.bench_function(format!("{name}/etherparse_sliced_baseline"), |b| {
            b.iter(|| black_box(etherparse::SlicedPacket::from_ethernet(black_box(f)).is_ok()))
        });
        g.bench_function(format!("{name}/classify"), |b| {
            b.iter(|| black_box(classify(black_box(f), Pmtu::DEFAULT).is_ok()))
        });
    }
    g.finish();
}

fn bench_icrc(c: &mut Criterion) {
    let mut g = c.benchmark_group("icrc");
    for payload in [1024usize, 4096] {
        let f = frame(Opcode::RcWriteMiddle, payload, false, false);
        let ip = &f[14..];
        g.throughput(Throughput::Bytes(ip.len() as u64));
        g.bench_function(format!("{payload}B/crc32fast_baseline"), |b| {
            b.iter(|| black_box(crc32fast::hash(black_box(ip))))
        });
        g.bench_function(format!("{payload}B/icrc_verify"), |b| {
            b.iter(|| black_box(icrc::verify(black_box(ip))))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_classify, bench_icrc);
criterion_main!(benches);
