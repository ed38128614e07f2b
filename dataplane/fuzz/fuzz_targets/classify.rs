//! Fuzzes the whole parse path: classification of arbitrary frames under every path MTU, the
//! ICRC check, and re-reading every extension header the opcode claims; the MAC Control parser
//! (PAUSE, PFC) and ECN marking over the same bytes. Nothing may panic; a mark changes at most
//! the two ECN bits and the IPv4 checksum, and a second mark changes nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sprayswitch::wire::ecn::{mark_ce, priority, Mark};
use sprayswitch::wire::{classify, ExtRepr, PauseFrame, Pmtu};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let pmtu = Pmtu::new(256 << (sel % 5)).unwrap_or_default();
    if let Ok(c) = classify(frame, pmtu) {
        if let Some(r) = c.roce() {
            let _ = r.verify_icrc(frame, c.eth.l3_offset);
            let _ = r.psn_span_for(Pmtu::new(4096).unwrap_or_default());
            let ext_at = usize::from(r.bth_offset) + 12;
            let ext = frame.get(ext_at..).unwrap_or(&[]);
            let parsed = ExtRepr::parse(r.bth.opcode, ext);
            assert!(
                parsed.is_ok(),
                "classify accepted a frame whose headers do not parse"
            );
        }
    }
    let _ = PauseFrame::parse(frame.get(14..).unwrap_or(&[]));
    let _ = priority(frame);
    let mut marked = frame.to_vec();
    if mark_ce(&mut marked) == Mark::Marked {
        let changed = marked.iter().zip(frame).filter(|(a, b)| a != b).count();
        assert!(changed <= 3, "a mark changed {changed} bytes");
        let again = marked.clone();
        assert_eq!(mark_ce(&mut marked), Mark::AlreadyCe);
        assert_eq!(marked, again);
    } else {
        assert_eq!(&marked[..], frame, "no mark, no change");
    }
});
