//! Building blocks for benchmarks and allocation tests that drive one worker by hand: a ToR's
//! tables without a configuration file, and RoCE frames as a host behind it sends them.
//! (Whole topologies from configuration live in `sprayswitch-harness`'s `rack::topo`.)

use std::net::{IpAddr, Ipv4Addr};

use crate::tables::{
    ip_key, Neighbor, PortInfo, Role, RouteTarget, SprayPolicy, Tables, UplinkGroup,
};
use crate::wire::{BthRepr, ExtRepr, IpRepr, Opcode, Pmtu, Psn, RethRepr, RoceFrameRepr};

/// MAC of ToR port `i`.
pub fn port_mac(i: usize) -> [u8; 6] {
    [0x02, 0x10, 0, 0, 0, i as u8]
}

/// MAC of the host behind downlink `i` (or the peer of uplink `i`).
pub fn peer_mac(i: usize) -> [u8; 6] {
    [0x02, 0x20, 0, 0, 0, i as u8]
}

/// Tables of a ToR with `downlinks` host ports (`d0`.., host `10.0.<i>.2` behind gateway
/// `10.0.<i>.1`, statically resolved) and `uplinks` uplink ports (`u0`..) in one group that
/// carries `10.9.0.0/16`.
pub fn tor_tables(downlinks: usize, uplinks: usize, policy: SprayPolicy) -> Tables {
    let mut ports = Vec::new();
    for i in 0..downlinks {
        ports.push(PortInfo {
            name: format!("d{i}"),
            mac: port_mac(i),
            role: Role::Downlink,
            mtu: 1500,
            pmtu: Pmtu::DEFAULT,
            pmtu_fixed: false,
            rate_burst_bytes: None,
            rate_bps: None,
            ecn: None,
            peer_mac: None,
            addresses: vec![(IpAddr::V4(Ipv4Addr::new(10, 0, i as u8, 1)), 24)],
            admin_up: true,
            path_pin: Default::default(),
        });
    }
    for u in 0..uplinks {
        let i = downlinks + u;
        ports.push(PortInfo {
            name: format!("u{u}"),
            mac: port_mac(i),
            role: Role::Uplink,
            mtu: 1500,
            pmtu: Pmtu::DEFAULT,
            pmtu_fixed: false,
            rate_burst_bytes: None,
            rate_bps: None,
            ecn: None,
            peer_mac: Some(peer_mac(i)),
            addresses: vec![],
            admin_up: true,
            path_pin: Default::default(),
        });
    }
    let mut t = Tables::new(ports);
    for i in 0..downlinks {
        let host = IpAddr::V4(Ipv4Addr::new(10, 0, i as u8, 2));
        t.neighbors.insert(
            ip_key(host),
            Neighbor {
                mac: peer_mac(i),
                port: i as u16,
            },
        );
    }
    if uplinks > 0 {
        t.groups.push(UplinkGroup {
            name: "fabric".into(),
            ports: (downlinks as u16..(downlinks + uplinks) as u16).collect(),
            weights: vec![1; uplinks],
            loss_detection: crate::tables::LossDetection::default(),
            path_stamps: true,
            health: None,
        });
        if let Ok(p) = "10.9.0.0/16".parse() {
            t.fib.insert(p, RouteTarget::Group(0));
        }
    }
    t.policy = policy;
    t
}

/// The PSN of a RoCEv2 frame, for tests that check order.
///
/// # Panics
/// When the frame is not RoCEv2.
pub fn psn_of(frame: &[u8]) -> u32 {
    crate::wire::classify(frame, crate::wire::Pmtu::DEFAULT)
        .ok()
        .and_then(|c| c.roce().map(|r| r.bth.psn.value()))
        .expect("a RoCEv2 frame")
}

/// An RC WRITE ONLY frame from the host behind downlink `from` to `dst`, `payload` bytes long.
pub fn roce_frame(from: usize, dst: Ipv4Addr, qp: u32, psn: u32, payload: usize) -> Vec<u8> {
    let body = vec![0x5A; payload];
    let ip = IpRepr::V4 {
        src: Ipv4Addr::new(10, 0, from as u8, 2),
        dst,
        id: 0,
    };
    let bth = BthRepr::new(Opcode::RcWriteOnly, qp, Psn::new(psn));
    let reth = RethRepr {
        virtual_address: 0,
        rkey: 1,
        dma_len: payload as u32,
    };
    RoceFrameRepr {
        udp_src_port: 49152 + (qp & 0x3FFF) as u16,
        ..RoceFrameRepr::new(peer_mac(from), port_mac(from), ip, bth)
    }
    .with_ext(ExtRepr {
        reth: Some(reth),
        ..ExtRepr::default()
    })
    .with_payload(&body)
    .to_vec()
    .unwrap_or_default()
}
