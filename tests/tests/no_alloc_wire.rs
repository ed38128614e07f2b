//! Classification and ICRC checks allocate nothing, on good and on malformed frames: a counting
//! global allocator watches the calls made by the measuring thread (the test harness's own
//! threads allocate at any time and must not count).

use sprayswitch::wire::{classify, Pmtu};
use sprayswitch_tests::{alloc_count, data, read_capture};

#[global_allocator]
static GLOBAL: alloc_count::Counting = alloc_count::Counting;

#[test]
fn classify_and_icrc_do_not_allocate() {
    let mut frames = Vec::new();
    for name in [
        "rxe-rc-ops.pcap",
        "rxe-reorder-nak-ipv6.pcap",
        "rxe-ud-uc.pcap",
    ] {
        frames.extend(read_capture(&data(name)));
    }
    // Malformed variants: cut at every 7th length, and with a corrupted opcode.
    let mut bad = Vec::new();
    for f in frames.iter().take(20) {
        for n in (0..f.len()).step_by(7) {
            bad.push(f[..n].to_vec());
        }
        let mut g = f.clone();
        g[42] = 0x3F;
        bad.push(g);
    }
    let before = alloc_count::count();
    alloc_count::measure(true);
    let mut ok = 0usize;
    let mut icrc_ok = 0usize;
    let mut errors = 0usize;
    for f in frames.iter().chain(bad.iter()) {
        match classify(f, Pmtu::DEFAULT) {
            Ok(c) => {
                ok += 1;
                if let Some(r) = c.roce() {
                    if r.verify_icrc(f, c.eth.l3_offset) == Ok(true) {
                        icrc_ok += 1;
                    }
                }
            }
            Err(_) => errors += 1,
        }
    }
    alloc_count::measure(false);
    let allocs = alloc_count::count() - before;
    assert_eq!(allocs, 0, "classification allocated {allocs} times");
    assert!(
        ok >= 230 && icrc_ok >= 230 && errors > 100,
        "{ok} {icrc_ok} {errors}"
    );
}
