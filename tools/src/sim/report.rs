//! What the field reads from a simulation: FCT slowdown (a flow's completion time over its
//! ideal, the flow alone on the fabric) in 20 bins of 5% of the flows by size, average and p99
//! per bin and overall; the table, and every flow as CSV.

use std::fmt::Write as _;

use super::SimOutcome;

/// One flow's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowResult {
    /// Flow id.
    pub id: u32,
    /// Sender.
    pub src: u32,
    /// Receiver.
    pub dst: u32,
    /// Bytes.
    pub bytes: u64,
    /// When it was posted.
    pub start_ns: u64,
    /// Its completion time, first packet to last ACK (`None`: not finished).
    pub fct_ns: Option<u64>,
    /// The ideal: alone on the fabric.
    pub ideal_ns: u64,
}

impl FlowResult {
    /// FCT over the ideal (at least 1.0 is expected; finished flows only).
    pub fn slowdown(&self) -> Option<f64> {
        self.fct_ns
            .map(|f| (f as f64 / self.ideal_ns.max(1) as f64).max(1.0))
    }
}

/// Average and p99 slowdown of a set of flows.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Slowdown {
    /// Flows finished.
    pub flows: usize,
    /// Mean.
    pub avg: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest flow of the bin, bytes.
    pub max_bytes: u64,
}

fn summarise(flows: &[&FlowResult]) -> Slowdown {
    let mut s: Vec<f64> = flows.iter().filter_map(|f| f.slowdown()).collect();
    if s.is_empty() {
        return Slowdown::default();
    }
    s.sort_by(f64::total_cmp);
    let p99 = s[((s.len() as f64 * 0.99).ceil() as usize).clamp(1, s.len()) - 1];
    Slowdown {
        flows: s.len(),
        avg: s.iter().sum::<f64>() / s.len() as f64,
        p99,
        max_bytes: flows.iter().map(|f| f.bytes).max().unwrap_or(0),
    }
}

/// Overall, and per bin of 5% of the flows by size (smallest first), over the flows that
/// finished (the table counts the others apart; `--check` fails on any).
pub fn slowdowns(o: &SimOutcome) -> (Slowdown, Vec<Slowdown>) {
    let mut by_size: Vec<&FlowResult> = o.flows.iter().collect();
    by_size.sort_by_key(|f| (f.bytes, f.id));
    let overall = summarise(&by_size);
    let n = by_size.len();
    let bins = (0..20)
        .map(|b| summarise(&by_size[n * b / 20..n * (b + 1) / 20]))
        .collect();
    (overall, bins)
}

/// The table of several runs over the same flows.
pub fn table(runs: &[SimOutcome]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<14} {:<5} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>7}",
        "scheme",
        "rnic",
        "flows",
        "unfin",
        "avg",
        "p99",
        "avg <bin1",
        "p99 >bin20",
        "drops",
        "NAKs",
        "retrans",
        "imbal"
    );
    for r in runs {
        let (all, bins) = slowdowns(r);
        let unfinished = r.flows.iter().filter(|f| f.fct_ns.is_none()).count();
        let imbal = r.uplink_imbalance.iter().sum::<f64>() / r.uplink_imbalance.len().max(1) as f64;
        let _ = writeln!(
            s,
            "{:<14} {:<5} {:>7} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>10.2} {:>8} {:>8} {:>9} {:>7.2}",
            r.scheme.name(),
            crate::rack::demo::receiver_name(r.receiver),
            r.flows.len(),
            unfinished,
            all.avg,
            all.p99,
            bins.first().map_or(0.0, |b| b.avg),
            bins.last().map_or(0.0, |b| b.p99),
            r.drops,
            r.naks,
            r.retransmitted,
            imbal
        );
    }
    s
}

/// Every flow of a run as CSV (`id,src,dst,bytes,start_ns,fct_ns,ideal_ns,slowdown`; an
/// unfinished flow has empty FCT and slowdown).
pub fn csv(o: &SimOutcome) -> String {
    let mut s = String::from("scheme,rnic,id,src,dst,bytes,start_ns,fct_ns,ideal_ns,slowdown\n");
    for f in &o.flows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{}",
            o.scheme.name(),
            crate::rack::demo::receiver_name(o.receiver),
            f.id,
            f.src,
            f.dst,
            f.bytes,
            f.start_ns,
            f.fct_ns.map(|x| x.to_string()).unwrap_or_default(),
            f.ideal_ns,
            f.slowdown().map(|x| format!("{x:.4}")).unwrap_or_default()
        );
    }
    s
}

/// Slowdown per size bin, one line per bin and run: `bin,max_bytes,scheme,rnic,flows,avg,p99`.
pub fn bins_csv(runs: &[SimOutcome]) -> String {
    let mut s = String::from("bin,max_bytes,scheme,rnic,flows,avg,p99\n");
    for r in runs {
        let (_, bins) = slowdowns(r);
        for (i, b) in bins.iter().enumerate() {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{:.4},{:.4}",
                i + 1,
                b.max_bytes,
                r.scheme.name(),
                crate::rack::demo::receiver_name(r.receiver),
                b.flows,
                b.avg,
                b.p99
            );
        }
    }
    s
}
