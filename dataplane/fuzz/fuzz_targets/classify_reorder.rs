//! Fuzzes classification followed by the reorder core: arbitrary frames, each either arriving
//! for a local host (reordered) or sent by one (observed: READ ranges, NAK/ACK resync), with
//! clock ticks and timer polls in between. Nothing may panic, and every packet inserted must
//! come out exactly once unless it was discarded as a duplicate of a held one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sprayswitch::engine::forward::{host_observation, towards_host};
use sprayswitch::meta::{PathStamp, RoceMeta};
use sprayswitch::reorder::{Insert, ReorderConfig, ReorderCore};
use sprayswitch::wire::{classify, Pmtu};

fuzz_target!(|data: &[u8]| {
    let cfg = ReorderConfig {
        window: 64,
        max_streams: 8,
        max_rings: 4,
        max_held_bytes: 4096,
        hold_timeout_ns: 1000,
        learn_ns: 300,
        idle_evict_ns: 5000,
        max_reads: 4,
        // Senders' stamps taken per /24 and /64: several hosts behind one counter.
        stamp_source_prefix: (24, 64),
    };
    let mut core: ReorderCore<u32> = ReorderCore::new(cfg);
    let mut out = Vec::new();
    let (mut inserted, mut discarded, mut released) = (0u64, 0u64, 0u64);
    let mut now = 0u64;
    let mut rest = data;
    let mut id = 0u32;
    while rest.len() >= 3 {
        let op = rest[0];
        let len = usize::from(u16::from_le_bytes([rest[1], rest[2]])) % 256;
        rest = &rest[3..];
        let frame = &rest[..len.min(rest.len())];
        rest = &rest[frame.len()..];
        now += u64::from(op >> 2) * 50;
        match op & 3 {
            0 | 1 => {
                let Ok(c) = classify(frame, Pmtu::DEFAULT) else {
                    continue;
                };
                let Some(r) = c.roce() else { continue };
                if op & 3 == 0 {
                    // Four fabric paths, chosen by the input: path-order loss detection is fuzzed
                    // too, with the frame's UDP checksum as its path stamp (as the engine reads
                    // it) and the stamp's evidence handled as the stage does.
                    let l4 = usize::from(r.ip.l4_offset);
                    let seq = frame
                        .get(l4 + 6..l4 + 8)
                        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
                    // Lanes too: the input's bit 6 reads the stamp with three lane bits.
                    let stamp = PathStamp::read(seq, op >> 7, ((op >> 6) & 1) * 3);
                    let m = towards_host(r, Pmtu::DEFAULT, frame.len(), (op >> 2) & 3, stamp);
                    let m = RoceMeta {
                        span: m.span.min(1 << 16),
                        ..m
                    };
                    inserted += 1;
                    id += 1;
                    let res = core.handle_packet(0, &m, id, now, &mut out);
                    if matches!(res, Insert::Duplicate | Insert::Stale) {
                        discarded += 1;
                    }
                } else if let Some(m) = host_observation(r, Pmtu::DEFAULT, frame.len()) {
                    core.handle_host(0, &m, now, &mut out);
                }
            }
            _ => core.poll(now, &mut out),
        }
        released += out.len() as u64;
        out.clear();
        assert!(core.held_bytes() <= cfg.max_held_bytes);
    }
    core.poll(u64::MAX / 2, &mut out);
    released += out.len() as u64;
    assert_eq!(core.held(), 0, "everything is released in the end");
    assert_eq!(
        released + discarded,
        inserted,
        "each packet out exactly once, or discarded as a duplicate"
    );
});
