//! Collectives as workloads of the simulator: ring AllReduce (NCCL's ring: reduce-scatter then
//! all-gather, 2(n-1) steps, each send waiting for the previous step's data from the rank
//! before), halving-doubling AllReduce (recursive halving, then recursive doubling: 2 log2 n
//! steps with partner `r xor 2^k`), and AlltoAll (every rank to every other at once, as
//! DeepEP's dispatch and combine do).
//!
//! A collective becomes flows and [`Gates`]: each step's flow of a rank waits for the gate its
//! inputs open. A step is taken as complete when its sender has the last ACK (the simulator's
//! completion), half a round trip later than the receiver has the data that NCCL would react
//! to. Each (rank, peer, channel) has one long-lived QP, connected once per job, as a
//! communicator's are (the run must use long-lived QPs). Iterations follow one another: the
//! next one starts when every flow of the last has completed. The first iteration's time
//! counts from the start, so it includes the QPs' RDMA CM connection (a few microseconds).
//!
//! Sizes are as `nccl-tests` defines them: for AllReduce the buffer of each rank, for AlltoAll
//! each rank's whole send buffer (each peer gets `size / n`; the self copy does not cross the
//! NIC). Algorithm bandwidth is `size / time`; bus bandwidth multiplies it by `2(n-1)/n`
//! (AllReduce) or `(n-1)/n` (AlltoAll).

use super::workload::Flow;
use super::{Gates, SimOutcome};

/// Which collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algo {
    /// Ring AllReduce.
    Ring,
    /// Halving-doubling (Rabenseifner) AllReduce; the ranks must be a power of two.
    HalvingDoubling,
    /// AlltoAll.
    AllToAll,
}

impl Algo {
    /// Every algorithm.
    pub const ALL: [Algo; 3] = [Algo::Ring, Algo::HalvingDoubling, Algo::AllToAll];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Ring => "ring",
            Algo::HalvingDoubling => "hd",
            Algo::AllToAll => "alltoall",
        }
    }

    /// By name.
    ///
    /// # Errors
    /// An unknown name.
    pub fn parse(s: &str) -> Result<Algo, String> {
        Algo::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| format!("collective '{s}': use ring, hd or alltoall"))
    }

    /// `nccl-tests`' bus bandwidth factor for `n` ranks.
    pub fn bus_factor(self, n: u32) -> f64 {
        let n = f64::from(n.max(1));
        match self {
            Algo::Ring | Algo::HalvingDoubling => 2.0 * (n - 1.0) / n,
            Algo::AllToAll => (n - 1.0) / n,
        }
    }
}

/// One job's collective.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// The collective.
    pub algo: Algo,
    /// Its ranks' hosts, in rank order (a host may carry several ranks; they share its NIC).
    pub hosts: Vec<u32>,
    /// Size, bytes, as `nccl-tests` counts it.
    pub size: u64,
    /// Channels: QPs per peer pair, each carrying its share of the data.
    pub channels: u32,
    /// Iterations, one after the other.
    pub iterations: u32,
    /// When its first iteration starts, ns.
    pub start_ns: u64,
}

/// What [`plan`] makes of jobs: the flows, their gates, and which flows make up each
/// iteration of each job.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Every flow, numbered from 0.
    pub flows: Vec<Flow>,
    /// Their gates.
    pub gates: Gates,
    /// Per job, per iteration: its flows (a range of ids).
    pub iterations: Vec<Vec<std::ops::Range<u32>>>,
}

/// The UDP source port of the QP from `src` to `dst` for `channel` of job `job`: one QP per
/// rank pair and channel (ports from 0xC000, as RNICs pick them).
fn sport(job: usize, channel: u32, src: u32, dst: u32) -> u16 {
    let h = (job as u32)
        .wrapping_mul(0x9E37_79B9)
        .wrapping_add(channel.wrapping_mul(0x85EB_CA6B))
        ^ src.wrapping_mul(0xC2B2_AE35)
        ^ dst.wrapping_mul(0x27D4_EB2F);
    0xC000 | ((h >> 7) as u16 & 0x3FFF)
}

struct Builder {
    plan: Plan,
}

impl Builder {
    fn gate(&mut self, count: u32) -> u32 {
        self.plan.gates.count.push(count);
        (self.plan.gates.count.len() - 1) as u32
    }

    /// A flow of `bytes` from `src` to `dst`, waiting for `wait`; returns its id.
    fn flow(&mut self, (src, dst): (u32, u32), bytes: u64, sport: u16, start: u64) -> u32 {
        let id = self.plan.flows.len() as u32;
        self.plan.flows.push(Flow {
            id,
            src,
            dst,
            bytes: bytes.max(1),
            start_ns: start,
            sport: Some(sport),
        });
        self.plan.gates.wait.push(None);
        self.plan.gates.signals.push(Vec::new());
        id
    }
}

/// The flows and gates of `jobs`, in job order. Ranks of one job on the same host exchange
/// nothing over the fabric (their steps are taken as done at once: an NVLink hop).
///
/// # Errors
/// A job with fewer than two ranks, a halving-doubling job whose ranks are not a power of two,
/// no channel or iteration, or a size too small to give each flow a byte.
pub fn plan(jobs: &[Job]) -> Result<Plan, String> {
    let mut b = Builder {
        plan: Plan::default(),
    };
    for (j, job) in jobs.iter().enumerate() {
        let n = job.hosts.len() as u32;
        if n < 2 || job.channels == 0 || job.iterations == 0 {
            return Err(format!(
                "job {j}: at least two ranks, a channel and an iteration"
            ));
        }
        if job.algo == Algo::HalvingDoubling && !n.is_power_of_two() {
            return Err(format!(
                "job {j}: halving-doubling needs 2^k ranks, not {n}"
            ));
        }
        let mut iters = Vec::new();
        // The gate the next iteration's first flows wait for (none for the first).
        let mut barrier: Option<u32> = None;
        for _ in 0..job.iterations {
            let first = b.plan.flows.len() as u32;
            match job.algo {
                Algo::Ring => ring(&mut b, j, job, barrier),
                Algo::HalvingDoubling => halving_doubling(&mut b, j, job, barrier),
                Algo::AllToAll => all_to_all(&mut b, j, job, barrier),
            }
            let last = b.plan.flows.len() as u32;
            // Every flow of this iteration counts towards the next one's start.
            let next = b.gate(last - first);
            for id in first..last {
                b.plan.gates.signals[id as usize].push(next);
            }
            barrier = Some(next);
            iters.push(first..last);
        }
        b.plan.iterations.push(iters);
    }
    Ok(b.plan)
}

/// Ring AllReduce: per channel, the buffer's share in n chunks; at step s (0..2(n-1)) rank r
/// sends one chunk to r+1, the send of step s > 0 waiting for the chunk of step s-1 from r-1.
fn ring(b: &mut Builder, j: usize, job: &Job, barrier: Option<u32>) {
    let n = job.hosts.len() as u32;
    let chunk = job.size.div_ceil(u64::from(n) * u64::from(job.channels));
    for c in 0..job.channels {
        // prev[r]: the flow rank r sent at the last step (None: none, or a local hop).
        let mut prev: Vec<Option<u32>> = vec![None; n as usize];
        for s in 0..2 * (n - 1) {
            let mut now: Vec<Option<u32>> = vec![None; n as usize];
            for r in 0..n {
                let (src, dst) = (job.hosts[r as usize], job.hosts[((r + 1) % n) as usize]);
                if src == dst {
                    continue;
                }
                let id = b.flow((src, dst), chunk, sport(j, c, src, dst), job.start_ns);
                let before = prev[((r + n - 1) % n) as usize];
                let wait = match (s, before) {
                    (0, _) => barrier,
                    (_, Some(p)) => {
                        let g = b.gate(1);
                        b.plan.gates.signals[p as usize].push(g);
                        Some(g)
                    }
                    // The chunk came over a local hop: waits as the step before it did.
                    (_, None) => barrier,
                };
                b.plan.gates.wait[id as usize] = wait;
                now[r as usize] = Some(id);
            }
            prev = now;
        }
    }
}

/// Halving-doubling: log2 n steps of recursive halving (step k: partner r xor 2^k, half of
/// what is left), then log2 n of recursive doubling (partner r xor 2^(L-1-k), the amounts
/// back up); each step waits for both what the rank sent and what it received at the last.
fn halving_doubling(b: &mut Builder, j: usize, job: &Job, barrier: Option<u32>) {
    let n = job.hosts.len() as u32;
    let l = n.trailing_zeros();
    let per_channel = job.size.div_ceil(u64::from(job.channels));
    for c in 0..job.channels {
        let mut prev: Vec<Vec<u32>> = vec![Vec::new(); n as usize];
        for step in 0..2 * l {
            let (partner_bit, bytes) = if step < l {
                (1 << step, per_channel >> (step + 1))
            } else {
                let k = step - l;
                (1 << (l - 1 - k), per_channel << k >> l)
            };
            let mut now: Vec<Vec<u32>> = vec![Vec::new(); n as usize];
            let mut ids: Vec<Option<u32>> = vec![None; n as usize];
            for r in 0..n {
                let p = r ^ partner_bit;
                let (src, dst) = (job.hosts[r as usize], job.hosts[p as usize]);
                if src == dst {
                    continue;
                }
                ids[r as usize] =
                    Some(b.flow((src, dst), bytes, sport(j, c, src, dst), job.start_ns));
            }
            for r in 0..n {
                let Some(id) = ids[r as usize] else { continue };
                let p = (r ^ partner_bit) as usize;
                // What r sent and what it received at the last step.
                let inputs: Vec<u32> = prev[r as usize].clone();
                let wait = if step == 0 || inputs.is_empty() {
                    barrier
                } else {
                    let g = b.gate(inputs.len() as u32);
                    for &f in &inputs {
                        b.plan.gates.signals[f as usize].push(g);
                    }
                    Some(g)
                };
                b.plan.gates.wait[id as usize] = wait;
                now[r as usize].push(id);
                now[p].push(id);
            }
            prev = now;
        }
    }
}

/// AlltoAll: every rank sends `size / n` to every other at once, split over the channels.
fn all_to_all(b: &mut Builder, j: usize, job: &Job, barrier: Option<u32>) {
    let n = job.hosts.len() as u64;
    let bytes = (job.size / n).div_ceil(u64::from(job.channels));
    for c in 0..job.channels {
        for (r, &src) in job.hosts.iter().enumerate() {
            for k in 1..n as usize {
                let dst = job.hosts[(r + k) % n as usize];
                if src == dst {
                    continue;
                }
                let id = b.flow((src, dst), bytes, sport(j, c, src, dst), job.start_ns);
                b.plan.gates.wait[id as usize] = barrier;
            }
        }
    }
}

/// The ideal time of one iteration of a collective alone on a non-blocking fabric: the bytes
/// each rank's NIC must send (`size` times the bus factor, as `nccl-tests` compares bus
/// bandwidth with the line rate) at `host_bps`, plus one crossing of the fabric
/// (`crossing_ns`: a packet there and its ACK back). The later steps' latency overlaps with
/// the other channels' data when messages are large; when they are small it dominates, and
/// the ratio to this ideal shows it.
pub fn ideal_ns(job: &Job, host_bps: u64, crossing_ns: u64) -> u64 {
    let bytes = job.size as f64 * job.algo.bus_factor(job.hosts.len() as u32);
    (bytes * 8e9 / host_bps as f64) as u64 + crossing_ns
}

/// One iteration's result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IterationResult {
    /// Job.
    pub job: usize,
    /// Iteration.
    pub iteration: u32,
    /// From its first flow's start to its last flow's completion, ns (`None`: unfinished).
    pub time_ns: Option<u64>,
}

/// Each iteration's completion time from a run of `plan`.
pub fn iterations(plan: &Plan, out: &SimOutcome) -> Vec<IterationResult> {
    let mut v = Vec::new();
    for (j, iters) in plan.iterations.iter().enumerate() {
        for (i, range) in iters.iter().enumerate() {
            let flows = &out.flows[range.start as usize..range.end as usize];
            let start = flows.iter().map(|f| f.start_ns).min();
            let end = flows
                .iter()
                .map(|f| f.fct_ns.map(|d| f.start_ns + d))
                .collect::<Option<Vec<u64>>>()
                .and_then(|e| e.into_iter().max());
            v.push(IterationResult {
                job: j,
                iteration: i as u32,
                time_ns: match (start, end) {
                    (Some(s), Some(e)) => Some(e.saturating_sub(s)),
                    _ => None,
                },
            });
        }
    }
    v
}

/// A collective's figures in one run (one scheme, one RNIC kind).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The scheme.
    pub scheme: super::topo::Scheme,
    /// The RNICs.
    pub receiver: sprayswitch_models::rnic::ReceiverMode,
    /// Job.
    pub job: usize,
    /// The collective.
    pub algo: Algo,
    /// Ranks.
    pub ranks: u32,
    /// Size, bytes (as `nccl-tests` counts it).
    pub size: u64,
    /// Each iteration's time, ns (`None`: unfinished), in order.
    pub times_ns: Vec<Option<u64>>,
    /// Its ideal time alone on a non-blocking fabric, ns.
    pub ideal_ns: u64,
    /// The run's counters (shared by every job of the run): drops, NAKs the receivers sent,
    /// NAKs that reached the senders, packets out of sequence at the receivers, packets
    /// resent, uplink imbalance (busiest over mean, averaged over leaves).
    pub drops: u64,
    /// See `drops`.
    pub naks: u64,
    /// See `drops`.
    pub naks_received: u64,
    /// See `drops`.
    pub out_of_sequence: u64,
    /// See `drops`.
    pub retransmitted: u64,
    /// See `drops`.
    pub imbalance: f64,
}

impl Row {
    /// The `q` quantile of the finished iterations' times, ns.
    pub fn quantile_ns(&self, q: f64) -> Option<u64> {
        let mut v: Vec<u64> = self.times_ns.iter().flatten().copied().collect();
        v.sort_unstable();
        sprayswitch_packet::percentile::quantile(&v, q)
    }

    /// Algorithm bandwidth at the median time, GB/s.
    pub fn algbw_gbs(&self) -> f64 {
        self.quantile_ns(0.5)
            .map_or(0.0, |t| self.size as f64 / t.max(1) as f64)
    }

    /// Bus bandwidth at the median time, GB/s.
    pub fn busbw_gbs(&self) -> f64 {
        self.algbw_gbs() * self.algo.bus_factor(self.ranks)
    }
}

/// The rows of one run of `plan` (made of `jobs`) on `t`.
pub fn rows(jobs: &[Job], plan: &Plan, out: &SimOutcome, t: &super::topo::Topology) -> Vec<Row> {
    let its = iterations(plan, out);
    let step = super::ideal_fct_ns(t, 1, u64::from(t.pmtu), false);
    let imbalance =
        out.uplink_imbalance.iter().sum::<f64>() / out.uplink_imbalance.len().max(1) as f64;
    jobs.iter()
        .enumerate()
        .map(|(j, job)| Row {
            scheme: out.scheme,
            receiver: out.receiver,
            job: j,
            algo: job.algo,
            ranks: job.hosts.len() as u32,
            size: job.size,
            times_ns: its
                .iter()
                .filter(|i| i.job == j)
                .map(|i| i.time_ns)
                .collect(),
            ideal_ns: ideal_ns(job, t.host_bps(), step),
            drops: out.drops,
            naks: out.naks,
            naks_received: out.naks_received,
            out_of_sequence: out.out_of_sequence,
            retransmitted: out.retransmitted,
            imbalance,
        })
        .collect()
}

/// Bytes as `64K`, `16M`, `1G` (powers of 1024) when exact.
pub fn size_text(b: u64) -> String {
    for (unit, s) in [(1u64 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")] {
        if b >= unit && b.is_multiple_of(unit) {
            return format!("{}{s}", b / unit);
        }
    }
    b.to_string()
}

/// A size: bytes, or with a K, M or G suffix (powers of 1024).
///
/// # Errors
/// Not a number, or zero.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    match num.parse::<u64>() {
        Ok(n) if n > 0 => n
            .checked_mul(mult)
            .ok_or_else(|| format!("size '{s}': too large")),
        _ => Err(format!("size '{s}': a positive number of bytes, K, M or G")),
    }
}

/// The rows as a table.
pub fn table(rows: &[Row]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<16} {:<5} {:>3} {:<8} {:>5} {:>6} {:>5} {:>9} {:>9} {:>9} {:>7} {:>7} {:>6} {:>7} {:>13} {:>8} {:>8} {:>6}",
        "scheme", "rnic", "job", "coll", "ranks", "size", "iters", "p50 ms", "p99 ms", "ideal ms",
        "x ideal", "algbw", "busbw", "drops", "NAKs s/r", "seq err", "retrans", "imbal"
    );
    for r in rows {
        let ms = |v: Option<u64>| v.map_or("-".to_string(), |ns| format!("{:.3}", ns as f64 / 1e6));
        let done = r.times_ns.iter().flatten().count();
        let _ = writeln!(
            s,
            "{:<16} {:<5} {:>3} {:<8} {:>5} {:>6} {:>5} {:>9} {:>9} {:>9.3} {:>7.2} {:>7.1} {:>6.1} {:>7} {:>13} {:>8} {:>8} {:>6.2}",
            r.scheme.name(),
            crate::rack::demo::receiver_name(r.receiver),
            r.job,
            r.algo.name(),
            r.ranks,
            size_text(r.size),
            format!("{done}/{}", r.times_ns.len()),
            ms(r.quantile_ns(0.5)),
            ms(r.quantile_ns(0.99)),
            r.ideal_ns as f64 / 1e6,
            r.quantile_ns(0.5).map_or(f64::NAN, |t| t as f64 / r.ideal_ns.max(1) as f64),
            r.algbw_gbs(),
            r.busbw_gbs(),
            r.drops,
            format!("{}/{}", r.naks, r.naks_received),
            r.out_of_sequence,
            r.retransmitted,
            r.imbalance
        );
    }
    s
}

/// The rows as CSV, one line per row.
pub fn csv(rows: &[Row]) -> String {
    use std::fmt::Write as _;
    let mut s = String::from(
        "scheme,rnic,job,collective,ranks,size,iterations,finished,p50_ns,p99_ns,ideal_ns,algbw_gbs,busbw_gbs,drops,naks,naks_received,out_of_sequence,retransmitted,imbalance\n",
    );
    for r in rows {
        let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{:.3},{:.3},{},{},{},{},{},{:.4}",
            r.scheme.name(),
            crate::rack::demo::receiver_name(r.receiver),
            r.job,
            r.algo.name(),
            r.ranks,
            r.size,
            r.times_ns.len(),
            r.times_ns.iter().flatten().count(),
            opt(r.quantile_ns(0.5)),
            opt(r.quantile_ns(0.99)),
            r.ideal_ns,
            r.algbw_gbs(),
            r.busbw_gbs(),
            r.drops,
            r.naks,
            r.naks_received,
            r.out_of_sequence,
            r.retransmitted,
            r.imbalance
        );
    }
    s
}

/// The rows as JSON (every iteration's time included).
pub fn json(rows: &[Row]) -> String {
    let v: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "scheme": r.scheme.name(),
                "rnic": crate::rack::demo::receiver_name(r.receiver),
                "job": r.job,
                "collective": r.algo.name(),
                "ranks": r.ranks,
                "size": r.size,
                "times_ns": r.times_ns,
                "p50_ns": r.quantile_ns(0.5),
                "p99_ns": r.quantile_ns(0.99),
                "ideal_ns": r.ideal_ns,
                "algbw_gbs": r.algbw_gbs(),
                "busbw_gbs": r.busbw_gbs(),
                "drops": r.drops,
                "naks": r.naks,
                "naks_received": r.naks_received,
                "out_of_sequence": r.out_of_sequence,
                "retransmitted": r.retransmitted,
                "imbalance": r.imbalance,
            })
        })
        .collect();
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

/// Adds `background` flows (numbered from 0, in start order, starting no earlier than the
/// collectives' flows) to `plan`, after its own, each on a QP of its own (a UDP source port
/// outside the collectives' range), waiting for nothing.
pub fn add_background(plan: &mut Plan, background: &[Flow]) {
    let base = plan.flows.len() as u32;
    for f in background {
        let id = base + f.id;
        plan.flows.push(Flow {
            id,
            sport: Some(0x8000 | (id % 0x4000) as u16),
            ..*f
        });
        plan.gates.wait.push(None);
        plan.gates.signals.push(Vec::new());
    }
}

/// Completion time (p50 over iterations) against size, log-log, a line per scheme, RNIC kind
/// and collective.
pub fn svg(rows: &[Row]) -> String {
    use std::collections::BTreeMap;
    use std::fmt::Write as _;
    let (w, h) = (760.0, 460.0);
    let (x0, y0, pw, ph) = (70.0, 30.0, 480.0, 360.0);
    let mut lines: BTreeMap<String, (String, Vec<(f64, f64)>)> = BTreeMap::new();
    for r in rows {
        let Some(t) = r.quantile_ns(0.5) else {
            continue;
        };
        let key = format!(
            "{} {} {}",
            r.algo.name(),
            r.scheme.name(),
            crate::rack::demo::receiver_name(r.receiver)
        );
        let colour = super::report::scheme_colour(r.scheme).to_string();
        lines
            .entry(key)
            .or_insert_with(|| (colour, Vec::new()))
            .1
            .push(((r.size as f64).log2(), (t as f64 / 1e6).log10()));
    }
    let pts = lines.values().flat_map(|(_, v)| v.iter().copied());
    let (mut xmin, mut xmax, mut ymin, mut ymax) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in pts {
        xmin = xmin.min(x);
        xmax = xmax.max(x);
        ymin = ymin.min(y.floor());
        ymax = ymax.max(y.ceil());
    }
    if xmin > xmax {
        (xmin, xmax, ymin, ymax) = (0.0, 1.0, 0.0, 1.0);
    }
    let xspan = (xmax - xmin).max(1.0);
    let yspan = (ymax - ymin).max(1.0);
    let px = |x: f64| x0 + (x - xmin) / xspan * pw;
    let py = |y: f64| y0 + ph - (y - ymin) / yspan * ph;
    let mut s = crate::svg::begin(w, h);
    let _ = writeln!(
        s,
        "<rect x=\"{x0}\" y=\"{y0}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#888\"/>"
    );
    let mut x = xmin.ceil();
    while x <= xmax {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            px(x),
            y0 + ph + 14.0,
            size_text(2f64.powf(x) as u64)
        );
        x += 2.0;
    }
    let mut y = ymin;
    while y <= ymax {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            x0 - 4.0,
            py(y) + 4.0,
            10f64.powf(y)
        );
        y += 1.0;
    }
    crate::svg::axis_titles(
        &mut s,
        (x0, y0, pw, ph),
        "size (nccl-tests)",
        32.0,
        "completion time, ms (p50 over iterations)",
        50.0,
    );
    let dashes = ["", " stroke-dasharray=\"6 3\"", " stroke-dasharray=\"2 2\""];
    for (i, (label, (colour, pts))) in lines.iter().enumerate() {
        let mut pts = pts.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let style = dashes[Algo::ALL
            .iter()
            .position(|a| label.starts_with(a.name()))
            .unwrap_or(0)];
        let _ = writeln!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"{style}/>",
            path.join(" ")
        );
        crate::svg::legend_entry(
            &mut s,
            (x0 + pw + 16.0, y0 + 14.0 * i as f64 + 10.0),
            colour,
            style,
            label,
        );
    }
    s.push_str("</svg>\n");
    s
}
