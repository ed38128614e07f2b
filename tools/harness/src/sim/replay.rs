//! The demo's scenarios in the simulator: the same rack pair (two leaves of two hosts, a spine
//! per path with the path's rate and delay), the same QPs (hosts, UDP source ports, so ECMP
//! hashes them onto the same paths), the same messages, window, ACK interval and timeout, the
//! same loss per path and reorder timers and recovery, no DCQCN and no ECN (the demo has
//! neither), run in virtual time. [`compare`] runs a scenario in the in-process rack in real
//! time, in the same rack on the scenario's own clock, and in the simulated fabric, so that the
//! simulator can be checked against the rack it models (`sprayswitch-sim --replay-demo`).
//!
//! What differs: a demo path is one rate-limited link between the ToRs, a simulated one a spine
//! between two links of half its delay each (the spine's egress queue holds it to the path's
//! rate, and a lossy path's loss is split over its two links); the demo's hosts send as fast
//! as their window allows, the simulated ones at 10 Gbit/s; the simulated clock advances in
//! steps of 500 ns; and the losses fall on other packets (each link draws its own).

use crate::rack::demo::{self, DemoOpts, Mode, Workload};
use sprayswitch_models::rnic::ReceiverMode;

use super::topo::{host_ip, LeafReorder, Scheme, Topology};
use super::workload::Flow;
use super::{run, QpParams, SimOpts, SimOutcome};

/// The simulated rack pair of `d`: two leaves of two hosts, a spine per path.
///
/// # Errors
/// When `d`'s paths make no valid topology (none, or more than 64).
pub fn topology(d: &DemoOpts) -> anyhow::Result<Topology> {
    let spines = d.path_delays_us.len();
    let delays: Vec<String> = d
        .path_delays_us
        .iter()
        .map(|us| (us * 1000 / 2).to_string())
        .collect();
    let loss: Vec<String> = (0..spines)
        .map(|i| format!("{:?}", d.path_loss.get(i).copied().unwrap_or(0.0)))
        .collect();
    // ECN thresholds no queue reaches: the demo marks nothing.
    Topology::parse(&format!(
        "leaves = 2\nspines = {spines}\nhosts_per_leaf = 2\nhost_rate_gbps = 10\n\
         fabric_rate_gbps = {}\nlink_delay_ns = 0\nspine_delays_ns = [{}]\n\
         spine_loss = [{}]\nbuffer_packets = 8192\necn_kmin_kb = 1e9\necn_kmax_kb = 1e9\n\
         ecn_pmax = 0\n",
        d.path_rate_mbps as f64 / 1000.0,
        delays.join(", "),
        loss.join(", ")
    ))
}

/// The flows of workload `w`: every message of every QP the demo would open (the same UDP
/// source ports), posted at once, each QP's messages on one long-lived QP.
pub fn flows(d: &DemoOpts, w: &Workload) -> Vec<Flow> {
    let pairs: Vec<_> = (1..=2).map(|h| (host_ip(1, h), host_ip(2, h))).collect();
    let mut out = Vec::new();
    for qp in demo::plan_qps(d.seed, w, &pairs) {
        for _ in 0..w.messages {
            out.push(Flow {
                id: out.len() as u32,
                src: qp.pair as u32,
                dst: 2 + qp.pair as u32,
                bytes: u64::from(w.message),
                start_ns: 0,
                sport: Some(qp.sport),
            });
        }
    }
    out
}

/// The simulator's scheme for a demo mode.
pub fn scheme(mode: Mode) -> Scheme {
    match mode {
        Mode::Ecmp => Scheme::Ecmp,
        Mode::Spray => Scheme::Spray,
        Mode::SprayReorder => Scheme::SprayReorder,
        Mode::SprayNakFilter => Scheme::SprayNakFilter,
    }
}

/// Runs one demo scenario in the simulator.
///
/// # Errors
/// As [`topology`] and [`run`].
pub fn simulate(
    d: &DemoOpts,
    w: &Workload,
    mode: Mode,
    receiver: ReceiverMode,
) -> anyhow::Result<SimOutcome> {
    let mut leaf = LeafReorder::towards(receiver);
    // The demo's timers.
    leaf.config.hold_timeout_ns = d.hold_timeout_us * 1000;
    leaf.config.learn_ns = 5_000_000;
    let opts = SimOpts {
        topology: topology(d)?,
        scheme: scheme(mode),
        receiver,
        dcqcn: None,
        step_ns: 500,
        drain_ns: (d.deadline_s * 1e9) as u64,
        long_lived: true,
        progress: false,
        qp: QpParams {
            window: d.window,
            ack_every: 8,
            timeout_ns: 67_000_000,
        },
        leaf,
        gates: None,
    };
    run(&opts, &flows(d, w))
}

/// Goodput of a simulated run as the demo counts it: the bytes of the messages completed over
/// the time until the last completion (every message is posted at the start), or over the
/// whole run when some never completed (the demo's deadline).
pub fn goodput_bps(o: &SimOutcome) -> f64 {
    let done = o.flows.iter().filter(|f| f.fct_ns.is_some());
    let bytes: u64 = done.clone().map(|f| f.bytes).sum();
    let last = if o.flows.iter().any(|f| f.fct_ns.is_none()) {
        o.simulated_ns
    } else {
        done.filter_map(|f| f.fct_ns).max().unwrap_or(0)
    };
    if last == 0 {
        return 0.0;
    }
    bytes as f64 * 8e9 / last as f64
}

/// One scenario in the rack, in real time and in virtual time, and in the simulator.
#[derive(Debug, Clone)]
pub struct Agreement {
    /// The real-time rack's outcome.
    pub real: demo::Outcome,
    /// The same rack's on the scenario's own clock (`--virtual-time`).
    pub virt: demo::Outcome,
    /// The simulated one.
    pub sim: SimOutcome,
    /// Its goodput, bit/s.
    pub sim_goodput_bps: f64,
}

impl Agreement {
    /// Simulated goodput over the real-time rack's.
    pub fn ratio(&self) -> f64 {
        self.sim_goodput_bps / self.real.goodput_bps.max(1.0)
    }

    /// Simulated goodput over the virtual-time rack's.
    pub fn virtual_ratio(&self) -> f64 {
        self.sim_goodput_bps / self.virt.goodput_bps.max(1.0)
    }
}

/// Runs one scenario in the real-time rack, in the same rack on its own clock (steps of 500
/// ns), then in the simulator.
///
/// # Errors
/// As [`demo::run`] and [`simulate`].
pub fn compare(
    d: &DemoOpts,
    w: &Workload,
    mode: Mode,
    receiver: ReceiverMode,
) -> anyhow::Result<Agreement> {
    let real = demo::run(d, w, mode, receiver)?;
    let v = DemoOpts {
        virtual_step_ns: Some(500),
        ..d.clone()
    };
    let virt = demo::run(&v, w, mode, receiver)?;
    let sim = simulate(d, w, mode, receiver)?;
    let sim_goodput_bps = goodput_bps(&sim);
    Ok(Agreement {
        real,
        virt,
        sim,
        sim_goodput_bps,
    })
}

/// The comparison as a table.
pub fn table(rows: &[Agreement]) -> String {
    use std::fmt::Write as _;
    let width = rows
        .iter()
        .map(|a| demo::scenario(&a.real).len())
        .max()
        .unwrap_or(8)
        .max(8);
    let mut s = format!(
        "{:<width$} {:<14} {:<5} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>11} {:>11} {:>8} {:>8}\n",
        "scenario",
        "fabric",
        "rnic",
        "real Mb/s",
        "virt Mb/s",
        "sim Mb/s",
        "sim/real",
        "sim/virt",
        "NAKs re",
        "NAKs sim",
        "retx re",
        "retx sim",
        "lost re",
        "lost sim",
        "det re",
        "det sim"
    );
    let us = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    for a in rows {
        let _ = writeln!(
            s,
            "{:<width$} {:<14} {:<5} {:>10.1} {:>10.1} {:>10.1} {:>8.3} {:>8.3} {:>8} {:>8} {:>8} {:>8} {:>11} {:>11} {:>8} {:>8}",
            demo::scenario(&a.real),
            a.real.mode.name(),
            demo::receiver_name(a.real.receiver),
            a.real.goodput_bps / 1e6,
            a.virt.goodput_bps / 1e6,
            a.sim_goodput_bps / 1e6,
            a.ratio(),
            a.virtual_ratio(),
            a.real.naks,
            a.sim.naks,
            a.real.retransmitted,
            a.sim.retransmitted,
            format!("{}/{}", a.real.path_losses, a.real.reorder_timeouts),
            format!("{}/{}", a.sim.path_losses, a.sim.reorder_timeouts),
            us(a.real.detect_p99_us),
            us(a.sim.detect_p99_ns.map(|n| n as f64 / 1e3)),
        );
    }
    s.push_str(
        "(real: the in-process rack in real time; virt: the same rack on the scenario's own clock; \
         sim: the simulator; NAKs, retx, lost and det: real time against the simulator; \
         lost = gaps the destination ToR declared lost, by path order / after the hold timeout; \
         det = path-order detection p99, us)\n",
    );
    s
}
