//! Short demo runs. On the scenario's own clock (virtual time: the same figures on every run
//! and machine, whatever else shares its cores), the ordering of the results must hold: spray
//! with reorder well above ECMP when ECMP collides, never worse with many QPs, and the
//! Go-Back-N collapse without reorder. In real time (the ToRs on threads of their own, as
//! `sprayswitch-demo` runs by default), a run completes every transfer; how fast it goes there
//! depends on the machine's load, so that is not checked.

use sprayswitch_harness::rack::demo::{run, workloads, DemoOpts, Mode};
use sprayswitch_models::rnic::ReceiverMode;

#[test]
fn a_short_demo_orders_its_results_as_expected() {
    // The demo's own fabric (4 paths of 250 Mbit/s, 2 to 50 us), hold timeout and window, on
    // a clock advanced 1 us a step (a 1 KiB packet takes 33 us on a path).
    let opts = DemoOpts {
        virtual_step_ns: Some(1000),
        ..DemoOpts::default()
    };
    let ws = workloads(0.1);
    let mut by = std::collections::HashMap::new();
    for w in &ws {
        for m in Mode::ALL {
            let o = run(&opts, w, m, ReceiverMode::Gbn).unwrap();
            eprintln!(
                "{} {}: {:.0} Mb/s, {} NAKs, {} retransmitted, done {}/{}",
                w.name,
                m.name(),
                o.goodput_bps / 1e6,
                o.naks,
                o.retransmitted,
                o.completed,
                o.posted
            );
            by.insert((w.name, m), o);
        }
    }
    let g = |w: &str, m| by[&(w, m)].goodput_bps;
    // Few large QPs colliding under ECMP: spraying with reorder uses all four paths.
    assert!(g("few-large-qps", Mode::SprayReorder) > 2.5 * g("few-large-qps", Mode::Ecmp));
    let r = &by[&("few-large-qps", Mode::SprayReorder)];
    assert_eq!((r.naks, r.retransmitted, r.out_of_sequence), (0, 0, 0));
    assert_eq!(r.completed, r.posted);
    // Spraying without reorder against Go-Back-N collapses.
    let s = &by[&("few-large-qps", Mode::Spray)];
    assert!(
        s.retransmitted > 0 && s.naks > 0 && s.sent_ratio > 1.5,
        "{s:?}"
    );
    assert!(s.goodput_bps < g("few-large-qps", Mode::SprayReorder) / 2.0);
    // Many QPs hashed at random: never worse than ECMP.
    assert!(g("many-qps", Mode::SprayReorder) >= 0.95 * g("many-qps", Mode::Ecmp));
    assert_eq!(by[&("many-qps", Mode::SprayReorder)].naks, 0);
}

#[test]
fn a_real_time_demo_run_completes_every_transfer() {
    // Real time on a debug build and shared cores: slow paths (60 Mbit/s) so that the fabric
    // rather than the CPU sets the pace, and a hold timeout of 20 ms, above how long a thread
    // may wait for a core. Only completion is checked, with a deadline far beyond the second
    // or so the run takes (it ends when everything is done): a thread kept off a core may cost
    // retransmissions and time here, never a transfer.
    let opts = DemoOpts {
        deadline_s: 60.0,
        path_rate_mbps: 60,
        hold_timeout_us: 20_000,
        window: 64,
        ..DemoOpts::default()
    };
    let w = &workloads(0.1)[0];
    let o = run(&opts, w, Mode::SprayReorder, ReceiverMode::Gbn).unwrap();
    assert_eq!(o.completed, o.posted, "{o:?}");
    assert!(o.completed > 0);
}

#[test]
fn help_explains_every_knob() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sprayswitch-demo"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for knob in [
        "--path-delays-us",
        "--path-rate-mbps",
        "--deadline",
        "--window",
        "--scale",
        "--receivers",
        "--svg",
        "--seed",
    ] {
        assert!(text.contains(knob), "--help lacks {knob}");
    }
}
