//! Fuzzes the engine's fast path against its full path: two engines over the same tables and
//! status board, one with the fast path and one without, take the same frames and must agree
//! on every verdict, every byte and every fact for the reorder stage.
//!
//! Input: records of `[control, length (2 bytes, little endian), frame...]`. The control byte picks the receiving port
//! (bits 0-2), the destination address among the rack's hosts, the switch and remote hosts
//! (bits 3-5), whether to set the IPv4 checksum right after the rewrite (bit 6) and whether to
//! flip an uplink's link state first (bit 7). The frame's destination MAC becomes the receiving
//! port's and its IPv4 destination the chosen address when the frame is long enough, so that
//! arbitrary bytes reach the fast path's route cache rather than stopping at the first check.
#![no_main]

use std::sync::Arc;

use crossbeam::utils::CachePadded;
use libfuzzer_sys::fuzz_target;
use sprayswitch::wire::checksum::{fold, ones_sum};
use sprayswitch::tables::{PortStatus, SprayPolicy};
use sprayswitch::engine::Engine;
use sprayswitch::pkt::Pkt;
use sprayswitch::testkit::{port_mac, tor_tables};

const PORTS: usize = 6;
const DSTS: [[u8; 4]; 8] = [
    [10, 0, 0, 2],
    [10, 0, 1, 2],
    [10, 0, 1, 1],
    [10, 0, 0, 9],
    [10, 9, 1, 2],
    [10, 9, 7, 7],
    [10, 9, 7, 8],
    [192, 168, 5, 5],
];

fuzz_target!(|data: &[u8]| {
    let mut tables = tor_tables(2, 4, SprayPolicy::RoundRobin);
    tables.ports[3].mtu = 1000;
    let t = Arc::new(tables);
    let status: Vec<CachePadded<PortStatus>> =
        (0..PORTS).map(|_| CachePadded::new(PortStatus::new_up())).collect();
    let mut fast = Engine::new(&t, 3);
    let mut full = Engine::new(&t, 3);
    full.set_fast_path(false);
    let mut rest = data;
    let mut now = 0u64;
    while rest.len() >= 3 {
        let ctl = rest[0];
        let len = usize::from(u16::from_le_bytes([rest[1], rest[2]])).min(rest.len() - 3);
        let mut f = rest[3..3 + len].to_vec();
        rest = &rest[3 + len..];
        now += 1_000;
        fast.begin_iteration();
        full.begin_iteration();
        let rx = usize::from(ctl & 7) % PORTS;
        if ctl & 0x80 != 0 {
            let p = 2 + usize::from(ctl & 3);
            status[p].set_up(!status[p].is_up());
        }
        if f.len() >= 34 {
            f[0..6].copy_from_slice(&port_mac(rx));
            f[30..34].copy_from_slice(&DSTS[usize::from((ctl >> 3) & 7)]);
            if ctl & 0x40 != 0 {
                f[24] = 0;
                f[25] = 0;
                let c = fold(ones_sum(&f[14..34], 0));
                f[24..26].copy_from_slice(&c.to_be_bytes());
            }
        }
        let mut a = Pkt::from_slice(&f);
        a.rx_port = rx as u16;
        let mut b = a.clone();
        let va = fast.handle(&t, &status, &mut a, now);
        let vb = full.handle(&t, &status, &mut b, now);
        // The whole decision: verdict with the reorder facts, observation and CNP flag.
        assert_eq!(va, vb);
        assert_eq!(a.data(), b.data());
        assert_eq!(fast.stats, full.stats);
        for port in 0..PORTS as u16 {
            assert_eq!(fast.pmtu_of(&t, port), full.pmtu_of(&t, port));
        }
    }
});
