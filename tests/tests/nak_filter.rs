//! The two roads side by side on the demo's rack pair, on its own clock (the same figures on
//! every run): spraying with the destination ToR reordering (`reorder`) and with it filtering
//! the hosts' spurious NAKs (`nak_filter`), against selective-repeat RNIC models (which keep
//! what comes out of order, NAK their expected PSN at once, resend the NAKed PSN alone, and
//! ask again at once for a READ response overtaken by a later one).
//!
//! Loss-free, `nak_filter` must let no NAK reach a requester, cause no retransmission, hold no
//! byte, and keep reorder's goodput (0.98x) at a p50 completion time no higher; with 1% loss on
//! one path it must keep at least reorder's share of its loss-free goodput. The write+flag
//! workload measures what it costs: a flag in memory before the data it follows. Release
//! builds only (scripts/test.sh runs them in their own step; a debug build lists them as
//! ignored).

use sprayswitch_harness::rack::demo::{self, DemoOpts, Mode, Outcome, Workload};
use sprayswitch_models::rnic::ReceiverMode;

fn opts(loss: &[f64]) -> DemoOpts {
    DemoOpts {
        virtual_step_ns: Some(500),
        path_loss: loss.to_vec(),
        ..DemoOpts::default()
    }
}

fn run(o: &DemoOpts, w: &Workload, mode: Mode) -> Outcome {
    let r = demo::run(o, w, mode, ReceiverMode::Sr).expect("the rack pair runs");
    eprintln!(
        "{} {} loss {:?}: {:.0} Mb/s, p50 {:.3} ms, p99 {:.3} ms, NAKs {}/{}, retrans {}, \
         held {} B, read retries {}, responder duplicates {}, done {}/{}, RTOs {}",
        w.name,
        mode.name(),
        o.path_loss,
        r.goodput_bps / 1e6,
        r.percentile_ms(0.5),
        r.percentile_ms(0.99),
        r.naks_sent,
        r.naks,
        r.retransmitted,
        r.peak_held_bytes,
        r.read_retries,
        r.responder_duplicates,
        r.completed,
        r.posted,
        r.requester_timeouts,
    );
    assert_eq!(r.completed, r.posted, "every message completes");
    r
}

#[test]
#[cfg_attr(debug_assertions, ignore = "release build (scripts/test.sh)")]
fn loss_free_nak_filter_lets_no_nak_through_and_holds_nothing() {
    for w in demo::workloads(0.25) {
        let o = opts(&[]);
        let reorder = run(&o, &w, Mode::SprayReorder);
        let filter = run(&o, &w, Mode::SprayNakFilter);
        assert!(filter.naks_sent > 0, "{}: the hosts saw reordering", w.name);
        assert_eq!(
            (filter.naks, filter.retransmitted, filter.requester_timeouts),
            (0, 0, 0),
            "{}: no NAK reached a requester",
            w.name
        );
        assert_eq!(filter.peak_held_bytes, 0, "{}", w.name);
        assert!(reorder.peak_held_bytes > 0, "{}: reorder held", w.name);
        assert!(
            filter.goodput_bps >= 0.98 * reorder.goodput_bps,
            "{}: {:.0} against {:.0}",
            w.name,
            filter.goodput_bps,
            reorder.goodput_bps
        );
        assert!(
            filter.percentile_ms(0.5) <= reorder.percentile_ms(0.5),
            "{}: p50 {:.4} ms against {:.4} ms",
            w.name,
            filter.percentile_ms(0.5),
            reorder.percentile_ms(0.5)
        );
    }
}

#[test]
#[cfg_attr(debug_assertions, ignore = "release build (scripts/test.sh)")]
fn with_one_percent_loss_on_a_path_nak_filter_keeps_reorders_share() {
    let w = demo::workloads(0.5)
        .into_iter()
        .find(|w| w.colliding)
        .expect("the colliding workload");
    let share = |mode| {
        let free = run(&opts(&[]), &w, mode).goodput_bps;
        let lossy = run(&opts(&[0.0, 0.01, 0.0, 0.0]), &w, mode);
        assert!(
            lossy.naks > 0 && lossy.retransmitted > 0,
            "losses were NAKed"
        );
        lossy.goodput_bps / free
    };
    let (reorder, filter) = (share(Mode::SprayReorder), share(Mode::SprayNakFilter));
    eprintln!("share of the loss-free goodput: reorder {reorder:.4}, nak_filter {filter:.4}");
    assert!(filter >= reorder, "{filter:.4} against {reorder:.4}");
}

#[test]
#[cfg_attr(debug_assertions, ignore = "release build (scripts/test.sh)")]
fn a_requesters_spurious_read_retries_stay_at_its_tor() {
    let w = Workload {
        name: "reads",
        qps_per_host: 4,
        message: 16 * 1024,
        messages: 16,
        colliding: false,
        flag: false,
        read: true,
    };
    let o = opts(&[]);
    let spray = run(&o, &w, Mode::Spray);
    let reorder = run(&o, &w, Mode::SprayReorder);
    let filter = run(&o, &w, Mode::SprayNakFilter);
    assert_eq!(
        reorder.read_retries, 0,
        "in order, nothing to ask again for"
    );
    // Sprayed responses overtake each other: the requesters ask again at once.
    assert!(spray.read_retries > 0 && spray.responder_duplicates > 0);
    assert!(filter.read_retries > 0, "the requesters saw reordering");
    // Rack A's ToR kept every such retry back: the responders saw none.
    assert_eq!(filter.responder_duplicates, 0);
    assert_eq!(
        filter.tor_a_reorder.read_retries_filtered,
        filter.read_retries
    );
    assert_eq!(
        filter.tor_a_reorder.path_losses, 0,
        "{:?}",
        filter.tor_a_reorder
    );
    assert_eq!(filter.peak_held_bytes, 0);
    assert!(filter.goodput_bps >= 0.98 * reorder.goodput_bps);
}

#[test]
#[cfg_attr(debug_assertions, ignore = "release build (scripts/test.sh)")]
fn the_ordering_table_comes_from_a_run() {
    let w = demo::ordering_workload(0.25);
    let o = opts(&[]);
    let reorder = run(&o, &w, Mode::SprayReorder);
    let filter = run(&o, &w, Mode::SprayNakFilter);
    assert_eq!(
        reorder.flags_placed,
        reorder.posted / 2,
        "every flag placed"
    );
    assert_eq!(reorder.flags_early, 0, "reorder never places a flag early");
    assert!(
        filter.flags_early > 0,
        "an out-of-order-placing RNIC behind nak_filter: {} of {}",
        filter.flags_early,
        filter.flags_placed
    );
    // Go-Back-N receivers are refused the mode.
    assert!(!Mode::SprayNakFilter.serves(ReceiverMode::Gbn));
}
