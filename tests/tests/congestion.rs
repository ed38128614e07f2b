//! Congestion signals end to end, in virtual time: an 8:1 incast at 100 Gbit/s through the real
//! ToRs (spray, reorder, egress queues with their rates, ECN marking, pauses) between RNIC
//! models running DCQCN (`sprayswitch_harness::rack::incast`). With marking, DCQCN holds the
//! receiver's ToR port near the marking thresholds and nothing is lost; without it the queue sits
//! at its cap and drops; a receiver that pauses its port now and then loses nothing while the
//! queue stays within its bound.

use sprayswitch_harness::rack::incast::{run, scenarios, IncastOpts, IncastOutcome};

/// The demo's scenario of that name, as the demo runs it.
fn scenario(name: &str) -> IncastOpts {
    scenarios()
        .into_iter()
        .find(|o| o.name.starts_with(name))
        .unwrap_or_else(|| panic!("no incast scenario '{name}'"))
}

fn report(r: &IncastOutcome) -> String {
    sprayswitch_harness::rack::incast::table(std::slice::from_ref(r))
}

#[test]
fn with_marking_dcqcn_keeps_the_host_port_near_kmax_loses_nothing_and_fills_the_port() {
    let o = scenario("ecn");
    let kmax = o.ecn.expect("the scenario marks").kmax_bytes;
    let r = run(&o).unwrap();
    let t = report(&r);
    assert_eq!(r.drops, 0, "{t}");
    assert_eq!(r.retransmitted, 0, "{t}");
    assert!(r.marked_all > 0 && r.cnps > 0, "{t}");
    assert!(
        r.queue_p99 <= kmax + r.bdp_bytes,
        "p99 {} above Kmax {} + BDP {}\n{t}",
        r.queue_p99,
        kmax,
        r.bdp_bytes
    );
    assert!(r.goodput_bps >= 0.9 * r.port_rate_bps as f64, "{t}");
}

#[test]
fn without_marking_the_queue_sits_at_its_cap_and_drops() {
    let o = scenario("no ecn");
    let cap = o.tx_queue_limit as u64 * 1000;
    let r = run(&o).unwrap();
    let t = report(&r);
    assert!(r.drops > 0, "{t}");
    assert_eq!((r.marked_all, r.cnps), (0, 0), "{t}");
    assert!(
        r.queue_p50 >= cap,
        "p50 {} below the cap's {cap}\n{t}",
        r.queue_p50
    );
}

#[test]
fn a_host_that_pauses_its_port_loses_nothing_up_to_the_bound() {
    let o = scenario("ecn, host pauses");
    let p = o.pause.expect("the scenario pauses");
    let r = run(&o).unwrap();
    let t = report(&r);
    assert_eq!(r.drops, 0, "{t}");
    assert_eq!(r.retransmitted, 0, "{t}");
    let pauses = (p.to_ns - p.from_ns).div_ceil(p.every_ns);
    let want = pauses * p.length_ns;
    assert!(
        r.paused_ns.abs_diff(want) <= pauses * 1_000,
        "paused {} ns, want {want}\n{t}",
        r.paused_ns
    );
    assert!(
        r.marked_host_port > 0,
        "the queue the pauses build marks\n{t}"
    );
}
