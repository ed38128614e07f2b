//! Fuzzes the whole parse path: classification of arbitrary frames under every path MTU, the
//! ICRC check, and re-reading every extension header the opcode claims. Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sprayswitch::wire::{classify, ExtRepr, Pmtu};

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
});
