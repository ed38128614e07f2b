//! Zero allocations per packet in steady state: a worker routes and sprays bursts of RoCE
//! packets while a counting allocator watches the thread that drives it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};

use sprayswitch::engine::SprayPolicy;
use sprayswitch::port::mem::{self, MemPort};
use sprayswitch::port::{Pkt, Port};
use sprayswitch::reorder::Passthrough;
use sprayswitch::testkit::{roce_frame, tor_tables};
use sprayswitch::worker::{Worker, WorkerConfig};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MEASURING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards every call to the system allocator unchanged; only counts allocations made
// while the current thread measures.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if MEASURING.with(Cell::get) {
            // Relaxed: a counter read by the same thread after the measured section.
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if MEASURING.with(Cell::get) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn run(policy: SprayPolicy, dst: Ipv4Addr, uplinks: usize) -> (usize, u64) {
    let tables = tor_tables(2, uplinks, policy);
    let mut far: Vec<MemPort> = Vec::new();
    let mut near: Vec<Box<dyn Port>> = Vec::new();
    for p in &tables.ports {
        let (a, b) = mem::link(&format!("far-{}", p.name), &p.name, 1024);
        far.push(a);
        near.push(Box::new(b));
    }
    let (mut w, counters) =
        Worker::standalone(tables, near, WorkerConfig::default(), Box::new(Passthrough));
    let template = roce_frame(0, dst, 0x11, 0, 1024);
    let mut pool: Vec<Pkt> = (0..64).map(|_| Pkt::from_slice(&template)).collect();
    let mut batch: Vec<Pkt> = Vec::with_capacity(64);
    let mut sink: Vec<Pkt> = Vec::with_capacity(256);
    let mut now = 1_000u64;
    let mut round = |measure: bool| {
        MEASURING.with(|m| m.set(measure));
        for _ in 0..32 {
            if let Some(mut p) = pool.pop() {
                p.data_mut()[..42].copy_from_slice(&template[..42]);
                batch.push(p);
            }
        }
        while !batch.is_empty() {
            far[0].tx_burst(now, &mut batch);
        }
        now += 1_000;
        w.iterate(now);
        w.iterate(now + 20_000);
        for f in far.iter_mut().skip(1) {
            f.rx_burst(now, &mut sink, 256);
        }
        pool.append(&mut sink);
        MEASURING.with(|m| m.set(false));
    };
    for _ in 0..200 {
        round(false);
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    let tx_before = counters.tx_pkts.get();
    for _ in 0..2_000 {
        round(true);
    }
    (
        ALLOCS.load(Ordering::Relaxed) - before,
        counters.tx_pkts.get() - tx_before,
    )
}

#[test]
fn routing_and_spraying_allocate_nothing_per_packet() {
    for (policy, dst, uplinks) in [
        (SprayPolicy::RoundRobin, Ipv4Addr::new(10, 9, 1, 2), 4),
        (SprayPolicy::Flowlet, Ipv4Addr::new(10, 9, 1, 2), 4),
        (SprayPolicy::LeastLoaded, Ipv4Addr::new(10, 9, 1, 2), 4),
        (SprayPolicy::Ecmp, Ipv4Addr::new(10, 0, 1, 2), 0),
    ] {
        let (allocs, forwarded) = run(policy, dst, uplinks);
        assert_eq!(forwarded, 64_000, "{policy:?}: every packet forwarded");
        assert_eq!(
            allocs, 0,
            "{policy:?}: {allocs} allocations for {forwarded} packets"
        );
    }
}
