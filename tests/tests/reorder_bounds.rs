//! Memory stays within the configured caps: a million distinct QPs and random PSN jumps never
//! grow the reorder state, never stall an established stream beyond its own hold timeout, and
//! 100k streams of state fit in 64 MiB (packet buffers excluded). A counting allocator measures
//! the live heap.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use sprayswitch::ids::PortId;
use sprayswitch::meta::{MetaKind, QpRef, RoceMeta};
use sprayswitch::pkt::Pkt;
use sprayswitch::reorder::{Insert, ReorderConfig, ReorderCore, StreamKey};
use sprayswitch::rng::Rng;
use sprayswitch::wire::Psn;

struct Counting;

thread_local! {
    // Per thread: the two tests of this file run in parallel threads.
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    // `try_with`: the allocator may be called while thread-local storage is torn down.
    let _ = LIVE.try_with(|l| l.set(l.get() + delta));
}

// SAFETY: forwards to the system allocator; only tracks the live byte count.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        track(l.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        track(-(l.size() as isize));
        // SAFETY: `p` came from `System.alloc` with this layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        track(n as isize - l.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What the engine hands over with a request of stream `key` (from no sender the pairing
/// hears of) spanning `span` PSNs from `psn`, `len` bytes.
fn request(key: StreamKey, psn: Psn, span: u32, len: u32) -> RoceMeta {
    let StreamKey::Request { local, qpn } = key else {
        panic!("a request stream's key");
    };
    let qp = QpRef {
        local,
        remote: 0,
        sport: 0,
        qpn,
    };
    RoceMeta {
        span,
        len,
        ..RoceMeta::new(qp, psn, MetaKind::Request { read_len: None })
    }
}

fn live() -> isize {
    LIVE.with(Cell::get)
}

#[test]
fn a_million_qps_and_random_psn_jumps_stay_within_the_caps() {
    let cfg = ReorderConfig {
        max_streams: 65_536,
        max_rings: 1024,
        hold_timeout_ns: 500_000,
        learn_ns: 0,
        ..ReorderConfig::default()
    };
    let mut core: ReorderCore<u64> = ReorderCore::new(cfg);
    let mut out = Vec::with_capacity(1 << 16);
    let mut rng = Rng::new(99);
    let good = StreamKey::Request { local: 1, qpn: 7 };
    let mut good_next = 0u32;
    let mut good_released = Vec::new();
    let mut now = 0u64;
    // Warm up the established stream, then measure.
    for _ in 0..1000 {
        core.handle_packet(
            0,
            &request(good, Psn::new(good_next), 1, 100),
            u64::from(good_next),
            now,
            &mut out,
        );
        good_next += 1;
        now += 100;
    }
    out.clear();
    let before = live();
    let state_before = core.state_bytes();
    for i in 0..1_000_000u64 {
        now += 100;
        // Garbage: a new QP every packet, random PSN; every 7th hits one QP with random jumps.
        let qpn = if i % 7 == 0 {
            0xABCDE
        } else {
            (i as u32).wrapping_mul(2_654_435_761) & 0xFF_FFFF
        };
        let key = StreamKey::Request {
            local: 2 + (i % 3) as u128,
            qpn,
        };
        let r = core.handle_packet(
            0,
            &request(key, Psn::new(rng.next_u64() as u32), 1, 1000),
            1 << 40 | i,
            now,
            &mut out,
        );
        assert_ne!(r, Insert::Duplicate, "distinct items are never merged");
        // The established stream keeps going, two packets swapped every 100.
        if i % 50 == 0 {
            let (a, b) = if good_next.is_multiple_of(100) {
                (good_next + 1, good_next)
            } else {
                (good_next, good_next + 1)
            };
            core.handle_packet(
                0,
                &request(good, Psn::new(a), 1, 100),
                u64::from(a),
                now,
                &mut out,
            );
            core.handle_packet(
                0,
                &request(good, Psn::new(b), 1, 100),
                u64::from(b),
                now,
                &mut out,
            );
            good_next += 2;
        }
        if i % 64 == 0 {
            core.poll(now, &mut out);
        }
        good_released.extend(out.drain(..).filter(|x| *x < 1 << 40));
        assert!(core.held() <= cfg.max_rings * cfg.window as usize);
    }
    core.poll(now + 1_000_000, &mut out);
    good_released.extend(out.drain(..).filter(|x| *x < 1 << 40));
    let t = core.totals();
    eprintln!(
        "flood: {t:?}, heap growth {} bytes, state {} -> {} bytes",
        live() - before,
        state_before,
        core.state_bytes()
    );
    assert!(t.streams <= cfg.max_streams as u64);
    assert!(t.table_full > 0, "the flood hit the stream cap");
    assert!(
        live() - before < 4 << 20,
        "heap grew {} bytes",
        live() - before
    );
    assert!(core.state_bytes() <= state_before + (1 << 20));
    // The established stream: every packet, in order, none held until a timeout.
    let want: Vec<u64> = (1000..u64::from(good_next)).collect();
    assert_eq!(good_released, want);
    let good_stats = core
        .streams()
        .find(|(k, _, _)| *k == good)
        .map(|(_, _, s)| s);
    if let Some(s) = good_stats {
        assert_eq!(s.timeouts, 0);
    }
}

#[test]
fn a_hundred_thousand_streams_fit_in_64_mib() {
    let before = live();
    let cfg = ReorderConfig {
        max_streams: 100_000,
        learn_ns: 0,
        ..ReorderConfig::default()
    };
    let mut core: ReorderCore<(PortId, Pkt)> = ReorderCore::new(cfg);
    let mut out = Vec::new();
    let pkt = Pkt::with_capacity(64);
    for q in 0..100_000u32 {
        let key = StreamKey::Request {
            local: u128::from(q % 64),
            qpn: q,
        };
        core.handle_packet(
            0,
            &request(key, Psn::new(q), 1, 64),
            (0, pkt.clone()),
            0,
            &mut out,
        );
    }
    // Packet buffers excluded: drop what was released before measuring.
    out.clear();
    let used = live() - before;
    eprintln!(
        "100k streams: {} bytes live, state_bytes {}",
        used,
        core.state_bytes()
    );
    assert_eq!(core.totals().streams, 100_000);
    assert!(used < 64 << 20, "{used} bytes");
    assert!(core.state_bytes() < 64 << 20);
}
