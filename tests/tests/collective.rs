//! Collectives in the fabric simulator (real switch code, virtual time): a collective alone
//! on an idle fabric finishes close to its ideal time; ring AllReduce's steps wait for each
//! other; a seed gives one result; spray + reorder leaves Go-Back-N receivers no sequence
//! error on any collective. Release builds only (scripts/test.sh runs them in their own step;
//! a debug build lists them as ignored).

use std::sync::Arc;

use sprayswitch_harness::sim::collective::{self, Algo, Job};
use sprayswitch_harness::sim::topo::{Scheme, Topology};
use sprayswitch_harness::sim::{run, SimOpts};
use sprayswitch_models::rnic::ReceiverMode;

/// 4 leaves x 4 spines, 4 hosts each, 100 Gbit/s, links of `delay_ns`, path MTU 4096.
fn small(delay_ns: u64) -> Topology {
    Topology::parse(&format!(
        "leaves = 4\nspines = 4\nhosts_per_leaf = 4\nhost_rate_gbps = 100\nfabric_rate_gbps = 100\n\
         link_delay_ns = {delay_ns}\nbuffer_packets = 4096\necn_kmin_kb = 100\necn_kmax_kb = 400\n\
         ecn_pmax = 0.2\npmtu = 4096\nhealth = false\n"
    ))
    .unwrap()
}

fn job(algo: Algo, size: u64) -> Job {
    Job {
        algo,
        hosts: (0..16).collect(),
        size,
        channels: 2,
        iterations: 3,
        start_ns: 0,
    }
}

/// The rows of `jobs` run under `scheme` towards `receiver` on `t`.
fn run_jobs(
    t: &Topology,
    jobs: &[Job],
    scheme: Scheme,
    receiver: ReceiverMode,
) -> Vec<collective::Row> {
    let plan = collective::plan(jobs).unwrap();
    let o = SimOpts {
        long_lived: true,
        drain_ns: 50_000_000,
        gates: Some(Arc::new(plan.gates.clone())),
        ..SimOpts::new(t.clone(), scheme, receiver)
    };
    let out = run(&o, &plan.flows).unwrap();
    let rows = collective::rows(jobs, &plan, &out, t);
    eprint!("{}", collective::table(&rows));
    rows
}

#[test]
#[cfg_attr(debug_assertions, ignore = "release build (scripts/test.sh)")]
fn a_collective_alone_finishes_within_ten_percent_of_its_ideal_time() {
    let t = small(1000);
    for algo in Algo::ALL {
        let rows = run_jobs(
            &t,
            &[job(algo, 4 << 20)],
            Scheme::SprayReorder,
            ReceiverMode::Gbn,
        );
        let r = &rows[0];
        assert!(
            r.times_ns.iter().all(Option::is_some),
            "every iteration finished"
        );
        let p50 = r.quantile_ns(0.5).unwrap() as f64;
        assert!(
            p50 <= 1.1 * r.ideal_ns as f64 && p50 >= 0.9 * r.ideal_ns as f64,
            "{}: {p50} ns against an ideal of {} ns",
            algo.name(),
            r.ideal_ns
        );
    }
}

#[test]
#[cfg_attr(debug_assertions, ignore = "release build (scripts/test.sh)")]
fn ring_steps_wait_for_each_other() {
    // Ten times the link delay: every one of the ring's 30 dependent steps waits for the data
    // of the one before, so the ring slows by about 30 crossings of the added delay; an
    // AlltoAll (no step waits) by about one.
    let (near, far) = (small(1000), small(10_000));
    let added = 4.0 * 9_000.0; // four links from host to host, each 9 us longer
    let time = |t: &Topology, algo| {
        let rows = run_jobs(t, &[job(algo, 256 << 10)], Scheme::Ecmp, ReceiverMode::Gbn);
        rows[0].quantile_ns(0.5).unwrap() as f64
    };
    let ring = time(&far, Algo::Ring) - time(&near, Algo::Ring);
    let a2a = time(&far, Algo::AllToAll) - time(&near, Algo::AllToAll);
    assert!(ring >= 25.0 * added, "ring slowed by {ring} ns");
    assert!(a2a <= 4.0 * added, "alltoall slowed by {a2a} ns");
}

#[test]
#[cfg_attr(debug_assertions, ignore = "release build (scripts/test.sh)")]
fn a_seed_gives_one_result() {
    let t = small(1000);
    let jobs = [job(Algo::AllToAll, 1 << 20)];
    let a = run_jobs(&t, &jobs, Scheme::SprayReorder, ReceiverMode::Sr);
    let b = run_jobs(&t, &jobs, Scheme::SprayReorder, ReceiverMode::Sr);
    assert_eq!(a, b);
}

#[test]
#[cfg_attr(debug_assertions, ignore = "release build (scripts/test.sh)")]
fn spray_and_reorder_leave_go_back_n_receivers_no_sequence_error() {
    // Spines of very different lengths (1 to 16 us a link): sprayed packets overtake each
    // other on every collective, even a QP's packets that its NIC's round robin over 30 QPs
    // spaces 10 us apart (AlltoAll).
    let t = Topology {
        spine_delays_ns: vec![1000, 4000, 8000, 16000],
        ..small(1000)
    };
    for algo in Algo::ALL {
        let spray = run_jobs(&t, &[job(algo, 1 << 20)], Scheme::Spray, ReceiverMode::Gbn);
        let reorder = run_jobs(
            &t,
            &[job(algo, 1 << 20)],
            Scheme::SprayReorder,
            ReceiverMode::Gbn,
        );
        assert!(
            spray[0].out_of_sequence > 0,
            "{}: spraying reorders",
            algo.name()
        );
        assert_eq!(reorder[0].out_of_sequence, 0, "{}", algo.name());
        assert_eq!((reorder[0].naks, reorder[0].retransmitted), (0, 0));
    }
}
