//! The faults that spraying spreads, on the demo's rack pair and in the fabric simulator, both
//! on their own clocks (virtual time: every run the same, on every machine): a fabric path
//! that dies, loses 30% or flaps mid-transfer leaves the spray set in time and the transfers
//! keep most of the fabric; a path losing 1% stays; a ToR that restarts and a host that stops
//! answering lose no transfer; a spine that dies leaves every leaf's spray set.
//!
//! The targets (#39): dead out within 1 ms, 30% within 10 ms, at least 0.65 of the
//! four paths' capacity and never below ECMP on the same fault, no healthy path out.
//!
//! Release builds only: each scenario drives two ToRs, four hosts and the fabric through every
//! 500 ns step of a few hundred simulated milliseconds (a few seconds optimised, minutes not);
//! `scripts/test.sh` runs this binary with `--release`.

use sprayswitch_harness::rack::demo::{self, DemoOpts, FaultTiming, Mode, Outcome};
use sprayswitch_harness::sim::topo::{Scheme, SpineFault, Topology};
use sprayswitch_harness::sim::workload::{Arrivals, Pattern, SizeCdf};
use sprayswitch_harness::sim::{run, SimOpts};
use sprayswitch_models::rnic::ReceiverMode;

const RECEIVERS: [ReceiverMode; 2] = [ReceiverMode::Gbn, ReceiverMode::Sr];

/// The demo on its own clock with `path_loss` as `fault` says.
fn opts(path_loss: &[f64], fault: FaultTiming) -> DemoOpts {
    DemoOpts {
        virtual_step_ns: Some(500),
        path_loss: path_loss.to_vec(),
        fault,
        ..DemoOpts::default()
    }
}

fn at(ms: f64) -> FaultTiming {
    FaultTiming {
        at_ms: ms,
        ..FaultTiming::default()
    }
}

fn row(o: &Outcome) -> String {
    demo::table(std::slice::from_ref(o))
}

/// One of four paths dies, or starts losing 30%, 100 ms into each of the demo's workloads at
/// full size (the colliding QPs move 32 MiB, about 350 ms), against either receiver: spray +
/// reorder takes it out in time, finishes every transfer, keeps 0.65 of the capacity and at
/// least ECMP's goodput, and takes no other path out. (The full size: what a loss costs
/// before the path is out, a requester's 67 ms retransmission timeout now and then, weighs
/// four times as much in a transfer a quarter as long.)
#[test]
#[cfg_attr(debug_assertions, ignore = "release build (scripts/test.sh)")]
fn a_dead_or_lossy_path_leaves_the_spray_set_and_goodput_holds() {
    for (loss, within_ms) in [(1.0, 1.0), (0.3, 10.0)] {
        let o = opts(&[0.0, loss, 0.0, 0.0], at(100.0));
        for w in demo::workloads(1.0) {
            for rnic in RECEIVERS {
                let ecmp = demo::run(&o, &w, Mode::Ecmp, rnic).unwrap();
                let sr = demo::run(&o, &w, Mode::SprayReorder, rnic).unwrap();
                let t = format!("{}{}", row(&ecmp), row(&sr));
                assert_eq!(sr.completed, sr.posted, "every transfer completes\n{t}");
                let out = sr.path_out_ms.unwrap_or(f64::INFINITY);
                assert!(out <= within_ms, "out after {out} ms\n{t}");
                assert!(sr.of_capacity >= 0.65, "{t}");
                assert!(sr.goodput_bps >= ecmp.goodput_bps, "{t}");
                assert_eq!(sr.healthy_outs + ecmp.healthy_outs, 0, "{t}");
            }
        }
    }
}

/// The colliding-QP workload at a quarter of its size (8 MiB, about 90 ms at the fabric's 1
/// Gbit/s), against either receiver: a path that dies for 5 ms of every 50 from 20 ms on is
/// out within 1 ms of its first failure and the transfers complete; a path losing 1% from the
/// start stays in ToR A's spray set, and so does every path when all four lose 1%.
#[test]
#[cfg_attr(debug_assertions, ignore = "release build (scripts/test.sh)")]
fn a_flapping_path_goes_out_and_one_percent_stays_in() {
    let flap = FaultTiming {
        at_ms: 20.0,
        flap_ms: Some((5.0, 45.0)),
        ..FaultTiming::default()
    };
    let w = &demo::workloads(0.25)[0];
    for rnic in RECEIVERS {
        let o = demo::run(
            &opts(&[0.0, 1.0, 0.0, 0.0], flap),
            w,
            Mode::SprayReorder,
            rnic,
        )
        .unwrap();
        assert_eq!(o.completed, o.posted, "{}", row(&o));
        assert!(o.path_out_ms.is_some_and(|ms| ms <= 1.0), "{}", row(&o));
        for loss in [[0.0, 0.01, 0.0, 0.0], [0.01; 4]] {
            let o = opts(&loss, FaultTiming::default());
            let r = demo::run(&o, w, Mode::SprayReorder, rnic).unwrap();
            assert_eq!(r.completed, r.posted, "{}", row(&r));
            assert_eq!(r.path_out_ms, None, "a path losing 1% stays\n{}", row(&r));
            assert_eq!(r.healthy_outs, 0, "{}", row(&r));
        }
    }
}

/// ToR B crashes 20 ms in (everything it held and knew is lost) and is back 10 ms later; host
/// b1 drops whatever reaches it for 20 ms: every transfer of both workloads (at a quarter of
/// their size) completes, against either receiver, and no healthy path is taken out.
#[test]
#[cfg_attr(debug_assertions, ignore = "release build (scripts/test.sh)")]
fn a_tor_restart_and_a_silent_host_lose_no_transfer() {
    let restart = DemoOpts {
        restart_b_ms: Some((20.0, 10.0)),
        ..opts(&[], FaultTiming::default())
    };
    let silent = DemoOpts {
        silent_host_ms: Some((20.0, 20.0)),
        ..opts(&[], FaultTiming::default())
    };
    for o in [restart, silent] {
        for w in demo::workloads(0.25) {
            for rnic in RECEIVERS {
                let r = demo::run(&o, &w, Mode::SprayReorder, rnic).unwrap();
                assert_eq!(r.completed, r.posted, "{}", row(&r));
                assert_eq!(r.healthy_outs, 0, "{}", row(&r));
            }
        }
    }
}

/// In the simulator's 4 x 4 leaf-spine (8 hosts per leaf, AliStorage flows at 50% for 4 ms),
/// spine 2 dies 2 ms in: every leaf takes it out of its spray set within 1 ms, every flow
/// finishes, and no healthy spine goes out. Without path health the same run leaves flows
/// unfinished.
#[test]
#[cfg_attr(debug_assertions, ignore = "release build (scripts/test.sh)")]
fn a_dead_spine_leaves_every_leafs_spray_set() {
    let mut t = Topology::parse(
        "leaves = 4\nspines = 4\nhosts_per_leaf = 8\nhost_rate_gbps = 100\nfabric_rate_gbps = 100\n\
         link_delay_ns = 1000\nbuffer_packets = 4096\necn_kmin_kb = 100\necn_kmax_kb = 400\necn_pmax = 0.2\n",
    )
    .unwrap();
    t.spine_faults = vec![SpineFault {
        spine: 2,
        at_ms: 2.0,
        loss: 1.0,
        for_ms: None,
    }];
    let cdf = SizeCdf::embedded("alistorage2019").unwrap();
    let flows = Arrivals::on(&t, 0.5, 4_000_000, Pattern::Uniform, 1).flows(&cdf);
    let opts = |health: bool| {
        let mut topology = t.clone();
        topology.health = health;
        SimOpts::new(topology, Scheme::SprayReorder, ReceiverMode::Gbn)
    };
    let r = run(&opts(true), &flows).unwrap();
    let unfinished = r.flows.iter().filter(|f| f.fct_ns.is_none()).count();
    assert_eq!(unfinished, 0, "of {}", r.flows.len());
    assert_eq!(r.fault_out_ns.len(), 4, "{:?}", r.fault_out_ns);
    for (leaf, out) in r.fault_out_ns.iter().enumerate() {
        assert!(
            out.is_some_and(|ns| ns <= 1_000_000),
            "leaf {leaf}: {:?}",
            r.fault_out_ns
        );
    }
    assert_eq!(r.false_outs, 0);
    let without = run(&opts(false), &flows).unwrap();
    assert!(
        without.flows.iter().any(|f| f.fct_ns.is_none()),
        "without path health a dead spine strands flows"
    );
}
