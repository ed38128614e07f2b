//! `sprayswitch-sim` on a small leaf-spine (4 leaves x 4 spines, 4 hosts each, 100 Gbit/s):
//! the real switches in virtual time. A flow alone completes in its ideal time; the same seed
//! gives the same results; with AliStorage flows at 50% load, spray + reorder beats ECMP on
//! average and p99 slowdown, and Go-Back-N receivers behind it see no NAK and no
//! retransmission.

use sprayswitch_tools::sim::report::slowdowns;
use sprayswitch_tools::sim::topo::{Scheme, Topology};
use sprayswitch_tools::sim::workload::{poisson, Flow, Pattern, SizeCdf};
use sprayswitch_tools::sim::{ideal_fct_ns, run, SimOpts, SimOutcome};
use sprayswitch_tools::traffic::dcqcn::DcqcnConfig;
use sprayswitch_tools::traffic::rnic::ReceiverMode;

fn small() -> Topology {
    Topology::parse(
        "leaves = 4\nspines = 4\nhosts_per_leaf = 4\nhost_rate_gbps = 100\nfabric_rate_gbps = 100\n\
         link_delay_ns = 1000\nbuffer_packets = 4096\necn_kmin_kb = 100\necn_kmax_kb = 400\necn_pmax = 0.2\n",
    )
    .unwrap()
}

fn opts(scheme: Scheme) -> SimOpts {
    let t = small();
    SimOpts {
        dcqcn: Some(DcqcnConfig::conweave(t.host_bps())),
        topology: t,
        scheme,
        receiver: ReceiverMode::Gbn,
        step_ns: 100,
        drain_ns: 20_000_000,
        progress: false,
    }
}

fn run_one(scheme: Scheme, flows: &[Flow]) -> SimOutcome {
    run(&opts(scheme), flows).unwrap()
}

#[test]
fn a_flow_alone_completes_in_its_ideal_time() {
    for bytes in [1_000u64, 64_000, 1_000_000] {
        let flows = [Flow {
            id: 0,
            src: 0,
            dst: 5,
            bytes,
            start_ns: 1_000,
        }];
        for scheme in [Scheme::Ecmp, Scheme::SprayReorder] {
            let r = run_one(scheme, &flows);
            let fct = r.flows[0].fct_ns.expect("finished");
            let ideal = ideal_fct_ns(&small(), bytes, 1024);
            let ratio = fct as f64 / ideal as f64;
            assert!(
                (0.9..1.1).contains(&ratio),
                "{} bytes, {}: FCT {fct} ns, ideal {ideal} ns",
                bytes,
                scheme.name()
            );
        }
    }
}

#[test]
fn spray_with_reorder_beats_ecmp_on_average_and_p99_and_go_back_n_sees_nothing() {
    let t = small();
    let cdf = SizeCdf::embedded("alistorage2019").unwrap();
    let flows = poisson(
        &cdf,
        t.leaves,
        t.hosts_per_leaf,
        t.spines,
        t.fabric_bps(),
        0.5,
        2_000_000,
        Pattern::Uniform,
        11,
    );
    assert!(flows.len() > 300, "{}", flows.len());
    let ecmp = run_one(Scheme::Ecmp, &flows);
    let sr = run_one(Scheme::SprayReorder, &flows);
    let table = sprayswitch_tools::sim::report::table(&[ecmp.clone(), sr.clone()]);
    for r in [&ecmp, &sr] {
        assert!(r.flows.iter().all(|f| f.fct_ns.is_some()), "{table}");
    }
    let (e, s) = (slowdowns(&ecmp).0, slowdowns(&sr).0);
    assert!(s.avg < e.avg && s.p99 < e.p99, "{table}");
    assert_eq!((sr.naks, sr.retransmitted, sr.drops), (0, 0, 0), "{table}");
    // The same seed, the same flows, the same completion times.
    let again = run_one(Scheme::SprayReorder, &flows);
    let fct = |r: &SimOutcome| r.flows.iter().map(|f| f.fct_ns).collect::<Vec<_>>();
    assert_eq!(fct(&sr), fct(&again));
}
