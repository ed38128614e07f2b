//! `sprayswitch-sim` on a small leaf-spine (4 leaves x 4 spines, 4 hosts each, 100 Gbit/s):
//! the real switches in virtual time. A flow alone completes in its ideal time; the same seed
//! gives the same results; with AliStorage flows at 50% load, spray + reorder beats ECMP on
//! average and p99 slowdown, and Go-Back-N receivers behind it see no NAK and no
//! retransmission.

use sprayswitch_harness::sim::report::slowdowns;
use sprayswitch_harness::sim::topo::{Scheme, Topology};
use sprayswitch_harness::sim::workload::{Arrivals, Flow, Pattern, SizeCdf};
use sprayswitch_harness::sim::{ideal_fct_ns, run, run_all, SimOpts, SimOutcome};
use sprayswitch_models::rnic::ReceiverMode;

fn small() -> Topology {
    Topology::parse(
        "leaves = 4\nspines = 4\nhosts_per_leaf = 4\nhost_rate_gbps = 100\nfabric_rate_gbps = 100\n\
         link_delay_ns = 1000\nbuffer_packets = 4096\necn_kmin_kb = 100\necn_kmax_kb = 400\necn_pmax = 0.2\n",
    )
    .unwrap()
}

fn opts(scheme: Scheme) -> SimOpts {
    SimOpts::new(small(), scheme, ReceiverMode::Gbn)
}

fn run_one(scheme: Scheme, flows: &[Flow]) -> SimOutcome {
    run(&opts(scheme), flows).unwrap()
}

#[test]
fn a_flow_alone_completes_in_its_ideal_time() {
    // Host 5 is in another rack than host 0, host 1 in the same one.
    for (dst, same_rack) in [(5, false), (1, true)] {
        for bytes in [1_000u64, 64_000, 1_000_000] {
            let flows = [Flow {
                id: 0,
                src: 0,
                dst,
                bytes,
                start_ns: 1_000,
                sport: None,
            }];
            for scheme in [Scheme::Ecmp, Scheme::SprayReorder] {
                let r = run_one(scheme, &flows);
                let fct = r.flows[0].fct_ns.expect("finished");
                let ideal = ideal_fct_ns(&small(), bytes, 1024, same_rack);
                assert_eq!(r.flows[0].ideal_ns, ideal);
                let ratio = fct as f64 / ideal as f64;
                assert!(
                    (0.9..1.1).contains(&ratio),
                    "{bytes} bytes to host {dst}, {}: FCT {fct} ns, ideal {ideal} ns",
                    scheme.name()
                );
            }
        }
    }
}

/// Long-lived QPs: messages far apart on one QP each complete in their ideal time, counted
/// from their posting; messages posted together queue behind each other on the QP.
#[test]
fn messages_on_a_long_lived_qp_complete_in_order_and_in_their_ideal_time() {
    let flow = |id: u32, bytes: u64, start_ns: u64| Flow {
        id,
        src: 0,
        dst: 5,
        bytes,
        start_ns,
        sport: None,
    };
    let mut o = opts(Scheme::SprayReorder);
    o.long_lived = true;
    let apart = [
        flow(0, 64_000, 1_000),
        flow(1, 1_000, 500_000),
        flow(2, 300_000, 1_000_000),
    ];
    let r = run(&o, &apart).unwrap();
    for f in &r.flows {
        let ratio = f.fct_ns.expect("finished") as f64 / f.ideal_ns as f64;
        assert!((0.9..1.1).contains(&ratio), "{f:?}");
    }
    // Three at once: in order, each one message's serialisation after the one before it
    // (the QP pipelines them: no round trip between messages).
    let together = [
        flow(0, 100_000, 600_000),
        flow(1, 100_000, 600_000),
        flow(2, 100_000, 600_000),
    ];
    let r = run(&o, &together).unwrap();
    let fct: Vec<u64> = r
        .flows
        .iter()
        .map(|f| f.fct_ns.expect("finished"))
        .collect();
    let one = ideal_fct_ns(&small(), 100_000, 1024, false) as f64;
    let serialise = (100_000.0 + 98.0 * 58.0) * 8.0 / 100.0;
    assert!(
        (fct[0] as f64 / one - 1.0).abs() < 0.1,
        "{fct:?} against {one}"
    );
    for k in 1..3 {
        let step = (fct[k] - fct[k - 1]) as f64;
        assert!(
            (step / serialise - 1.0).abs() < 0.1,
            "{fct:?}: {step} ns against {serialise}"
        );
    }
    // One QP: one request stream, at the receiver's leaf (leaf 1), which held something.
    assert_eq!(r.reorder_peak_streams, [0, 1, 0, 0]);
    assert!(r.reorder_peak_bytes[1] > 0 && r.reorder_peak_bytes[0] == 0);
}

/// Flows sharing one bottleneck (four senders of three racks into one host, 16 MB each, all
/// at once) share it fairly under DCQCN: every flow's average rate within 10% of the others'
/// mean, and together they keep at least 80% of the host link busy (DCQCN's rate cuts leave
/// some of it idle: about 85% here), with nothing dropped.
#[test]
fn flows_on_one_bottleneck_get_their_fair_share_under_dcqcn() {
    let t = small();
    let bytes = 16_000_000u64;
    let flows: Vec<Flow> = [4u32, 8, 12, 5]
        .iter()
        .enumerate()
        .map(|(i, src)| Flow {
            id: i as u32,
            src: *src,
            dst: 0,
            bytes,
            start_ns: 1_000,
            sport: None,
        })
        .collect();
    for scheme in [Scheme::Ecmp, Scheme::SprayReorder] {
        let r = run_one(scheme, &flows);
        let rates: Vec<f64> = r
            .flows
            .iter()
            .map(|f| bytes as f64 * 8e9 / f.fct_ns.expect("finished") as f64)
            .collect();
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        let shown = rates.iter().map(|r| r / 1e9).collect::<Vec<_>>();
        for x in &rates {
            assert!(
                (x / mean - 1.0).abs() < 0.10,
                "{}: rates {shown:?} Gbit/s",
                scheme.name()
            );
        }
        let used = rates.iter().sum::<f64>() / t.host_bps() as f64;
        assert!(
            used >= 0.8,
            "{}: rates {shown:?} Gbit/s: {used:.2} of the link",
            scheme.name()
        );
        assert_eq!(r.drops, 0, "{}", scheme.name());
    }
}

#[test]
fn spray_with_reorder_beats_ecmp_on_average_and_p99_and_go_back_n_sees_nothing() {
    let t = small();
    let cdf = SizeCdf::embedded("alistorage2019").unwrap();
    let flows = Arrivals::on(&t, 0.5, 2_000_000, Pattern::Uniform, 11).flows(&cdf);
    assert!(flows.len() > 300, "{}", flows.len());
    let ecmp = run_one(Scheme::Ecmp, &flows);
    let sr = run_one(Scheme::SprayReorder, &flows);
    let table = sprayswitch_harness::sim::report::table(&[ecmp.clone(), sr.clone()]);
    for r in [&ecmp, &sr] {
        assert!(r.flows.iter().all(|f| f.fct_ns.is_some()), "{table}");
    }
    let (e, s) = (slowdowns(&ecmp).0, slowdowns(&sr).0);
    assert!(s.avg < e.avg && s.p99 < e.p99, "{table}");
    assert_eq!((sr.naks, sr.retransmitted, sr.drops), (0, 0, 0), "{table}");
    // The same seed, the same flows, the same completion times, also when runs share the
    // machine's cores (two on threads of their own).
    let both = run_all(
        &[opts(Scheme::Ecmp), opts(Scheme::SprayReorder)],
        &flows,
        2,
        &|_, _| {},
    )
    .unwrap();
    let fct = |r: &SimOutcome| r.flows.iter().map(|f| f.fct_ns).collect::<Vec<_>>();
    assert_eq!(fct(&ecmp), fct(&both[0]));
    assert_eq!(fct(&sr), fct(&both[1]));
    assert_eq!(
        sprayswitch_harness::sim::report::json(&[ecmp, sr]),
        sprayswitch_harness::sim::report::json(&both)
    );
}

/// The demo's lossy scenario (1% loss on path 1 of 4, both ways) replayed in the simulator:
/// every message completes with spray + reorder and with ECMP, against Go-Back-N and selective
/// repeat, the leaf finds losses by path order, and spray + reorder keeps more than twice
/// ECMP's goodput (the colliding QPs share one path under ECMP).
#[test]
fn the_demos_lossy_scenario_completes_in_the_simulator() {
    use sprayswitch_harness::rack::demo::{self, DemoOpts, Mode};
    use sprayswitch_harness::sim::replay;
    let w = demo::workloads(0.25)
        .into_iter()
        .find(|w| w.colliding)
        .unwrap();
    let lossy = DemoOpts {
        path_loss: vec![0.0, 0.01, 0.0, 0.0],
        ..DemoOpts::default()
    };
    for receiver in [ReceiverMode::Gbn, ReceiverMode::Sr] {
        let hit = replay::simulate(&lossy, &w, Mode::SprayReorder, receiver).unwrap();
        let ecmp = replay::simulate(&lossy, &w, Mode::Ecmp, receiver).unwrap();
        for o in [&hit, &ecmp] {
            assert!(
                o.flows.iter().all(|f| f.fct_ns.is_some()),
                "{receiver:?} {:?}: unfinished",
                o.scheme
            );
        }
        let (g, e) = (replay::goodput_bps(&hit), replay::goodput_bps(&ecmp));
        eprintln!(
            "{receiver:?}: spray+reorder {:.1} Mb/s, ECMP {:.1} Mb/s with loss; path-order losses {}, \
             hold timeouts {}, detection p99 {:?} ns, NAKs {}, retransmitted {}",
            g / 1e6,
            e / 1e6,
            hit.path_losses,
            hit.reorder_timeouts,
            hit.detect_p99_ns,
            hit.naks,
            hit.retransmitted
        );
        assert!(
            hit.path_losses > 0,
            "{receiver:?}: no loss found by path order"
        );
        assert!(g > 2.0 * e, "{receiver:?}: {g} against ECMP's {e}");
    }
}
