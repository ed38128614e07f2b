//! `sprayswitch-sim`: what spraying does to flow completion times in a leaf-spine fabric, with
//! the real switch code in virtual time (see `sprayswitch_harness::sim`). Every scheme runs the
//! same flows; the table gives FCT slowdown (average and p99, overall, for the smallest 5% of
//! flows and the largest 5%), drops, NAKs, retransmissions and uplink imbalance.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use sprayswitch_harness::sim::topo::{Scheme, SpineFault, Topology};
use sprayswitch_harness::sim::workload::{Arrivals, Pattern, SizeCdf};
use sprayswitch_harness::sim::{collective, replay, report, run_all, Progress, SimOpts};
use sprayswitch_models::dcqcn::DcqcnConfig;
use sprayswitch_models::rnic::ReceiverMode;

#[derive(Parser)]
#[command(
    name = "sprayswitch-sim",
    version,
    about = "Flow completion times in a simulated leaf-spine of real sprayswitch ToRs"
)]
struct Cli {
    /// Topology file (TOML: leaves, spines, hosts_per_leaf, rates, delay, buffers, ECN);
    /// default: ConWeave's leaf-spine, 8 x 8, 16 hosts per leaf, 100 Gbit/s.
    #[arg(long)]
    topology: Option<PathBuf>,
    /// Flow sizes: an embedded distribution (alistorage2019, websearch, hadoop) or a CDF file
    /// (`<bytes> <cumulative percent>` per line).
    #[arg(long, default_value = "alistorage2019")]
    workload: String,
    /// Load on the ToR uplinks, 0 to 1.
    #[arg(long, default_value_t = 0.5)]
    load: f64,
    /// Simulated time flows arrive in, ms.
    #[arg(long, default_value_t = 10.0)]
    duration_ms: f64,
    /// After the last arrival, how long flows may still run, ms.
    #[arg(long, default_value_t = 20.0)]
    drain_ms: f64,
    /// Destinations: uniform (a random host of another rack), all-to-all (every other host in
    /// turn) or incast (every host to host 0; --load is then of host 0's link).
    #[arg(long, default_value = "uniform")]
    pattern: String,
    /// One long-lived QP per pair of hosts carrying all their flows as messages (a message's
    /// FCT counts from its posting), instead of one QP per flow.
    #[arg(long)]
    long_lived: bool,
    /// Runs at once, each on a thread of its own (default: the machine's cores); the output is
    /// the same for any number.
    #[arg(long)]
    jobs: Option<usize>,
    /// Schemes to compare on the same flows: ecmp, flowlet, spray, spray+reorder,
    /// spray+nak_filter (run towards selective-repeat receivers only).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ecmp,flowlet,spray,spray+reorder,spray+nak_filter"
    )]
    schemes: Vec<String>,
    /// Host RNICs: gbn, sr.
    #[arg(long, value_delimiter = ',', default_value = "gbn")]
    receivers: Vec<String>,
    /// DCQCN profile at the hosts (conweave, connectx, paper) or none.
    #[arg(long, default_value = "conweave")]
    dcqcn: String,
    /// Virtual time per step, ns.
    #[arg(long, default_value_t = 100)]
    step_ns: u64,
    /// Seed of the flows.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write every flow of every run as CSV here.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write the slowdown per size bin (20 bins of 5% of the flows) as CSV here.
    #[arg(long)]
    bins_csv: Option<PathBuf>,
    /// Write every run (summary, bins, per-leaf figures, every flow) as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw slowdown against flow size (average and p99 panels, a line per run) as SVG here.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// No progress bar on stderr (there is none either when stderr is not a terminal).
    #[arg(long)]
    quiet: bool,
    /// Exit with an error unless spray + reorder beats ECMP on average and p99 slowdown for
    /// every receiver (both must be among the schemes).
    #[arg(long)]
    check: bool,
    /// Instead of a fabric: run the demo's scenarios (its rack pair, paths and QPs; the
    /// colliding-QP workload once more with 1% loss on path 1, as the demo does) in the
    /// real-time in-process rack and in the simulator, and print their goodputs side by side.
    /// --check then fails unless every loss-free ECMP and spray + reorder pair agrees within
    /// 5%.
    #[arg(long)]
    replay_demo: bool,
    /// With --replay-demo: the demo's message counts scaled by this (0.05 to 4).
    #[arg(long, default_value_t = 1.0)]
    replay_scale: f64,
    /// A spine's paths fail mid-run: SPINE:AT_MS:LOSS[:FOR_MS] (loss of a crossing, 1: dead;
    /// repaired FOR_MS later); repeat for more. Added to the topology's `spine_faults`.
    #[arg(long, value_parser = spine_fault)]
    spine_fault: Vec<SpineFault>,
    /// Turn the leaves' path health off (failing spines stay in the spray set).
    #[arg(long)]
    no_health: bool,
    /// The hosts' RoCE path MTU (256 to 4096; overrides the topology's `pmtu`).
    #[arg(long)]
    pmtu: Option<u32>,
    /// Instead of independent flows: a collective job, ALGO:SIZE[:RANKS[:CHANNELS]] (ALGO
    /// ring, hd or alltoall; SIZE as nccl-tests counts it, with K, M or G; RANKS default every
    /// host; CHANNELS, QPs per peer pair, default 2); repeat for jobs sharing the fabric, their
    /// ranks placed one after the other. Long-lived QPs; --load then adds background flows
    /// only with --background.
    #[arg(long)]
    collective: Vec<String>,
    /// Iterations of each collective.
    #[arg(long, default_value_t = 5)]
    iterations: u32,
    /// Ranks per host (they share its NIC).
    #[arg(long, default_value_t = 1)]
    ranks_per_host: u32,
    /// Rank i's host is the (i / ranks-per-host)-th of the sequence 0, stride, 2 stride, ...,
    /// each lap over the hosts starting one further (1: packed rack by rack; the hosts per
    /// leaf: one rank per rack in turn).
    #[arg(long, default_value_t = 1)]
    rank_stride: u32,
    /// With --collective: every job's SIZE replaced by each of these in turn (a run per size).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<String>,
    /// With --collective: background flows from --workload at --load beside the collectives.
    #[arg(long)]
    background: bool,
}

fn spine_fault(s: &str) -> Result<SpineFault, String> {
    SpineFault::parse(s)
}

fn main() -> ExitCode {
    match real_main(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sprayswitch-sim: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn real_main(cli: Cli) -> anyhow::Result<()> {
    if cli.replay_demo {
        return replay_demo(&cli);
    }
    let mut topology = match &cli.topology {
        Some(p) => Topology::parse(
            &std::fs::read_to_string(p).with_context(|| format!("{}", p.display()))?,
        )
        .with_context(|| format!("{}", p.display()))?,
        None => Topology::default_topology(),
    };
    topology
        .spine_faults
        .extend(cli.spine_fault.iter().copied());
    if cli.no_health {
        topology.health = false;
    }
    if let Some(p) = cli.pmtu {
        topology.pmtu = p;
    }
    // The faults and path MTU given on the command line are checked as the file's are.
    topology.check().context("--spine-fault, --pmtu")?;
    let cdf = match SizeCdf::embedded(&cli.workload) {
        Ok(c) => c,
        Err(_) => {
            let p = PathBuf::from(&cli.workload);
            let text = std::fs::read_to_string(&p).with_context(|| {
                format!("workload '{}': not embedded, not a file", cli.workload)
            })?;
            SizeCdf::parse(&cli.workload, &text).map_err(|e| anyhow::anyhow!(e))?
        }
    };
    anyhow::ensure!(
        cli.load > 0.0 && cli.load <= 1.0,
        "--load {}: from above 0 to 1",
        cli.load
    );
    anyhow::ensure!(
        cli.duration_ms > 0.0 && cli.duration_ms <= 10_000.0,
        "--duration-ms {}: above 0, at most 10000 (10 s of arrivals)",
        cli.duration_ms
    );
    anyhow::ensure!(
        (0.0..=10_000.0).contains(&cli.drain_ms),
        "--drain-ms {}: 0 to 10000",
        cli.drain_ms
    );
    anyhow::ensure!(cli.step_ns >= 1, "--step-ns at least 1");
    let pattern = Pattern::parse(&cli.pattern).map_err(|e| anyhow::anyhow!("--pattern: {e}"))?;
    let schemes = cli
        .schemes
        .iter()
        .map(|s| Scheme::parse(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!(e))?;
    let receivers = cli
        .receivers
        .iter()
        .map(|r| match r.as_str() {
            "gbn" => Ok(ReceiverMode::Gbn),
            "sr" => Ok(ReceiverMode::Sr),
            other => Err(anyhow::anyhow!("--receivers {other}: use gbn or sr")),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let dcqcn = match cli.dcqcn.as_str() {
        "none" => None,
        p => Some(DcqcnConfig::named(p, topology.host_bps()).map_err(|e| anyhow::anyhow!(e))?),
    };
    if !cli.collective.is_empty() {
        return collectives(&cli, &topology, &cdf, &schemes, &receivers, dcqcn);
    }
    let duration_ns = (cli.duration_ms * 1e6) as u64;
    let arrivals = Arrivals::on(&topology, cli.load, duration_ns, pattern, cli.seed);
    if arrivals.per_host_bps() > topology.host_bps() as f64 {
        eprintln!(
            "sprayswitch-sim: warning: each host offers {:.1} Gbit/s, more than its {} Gbit/s link \
             (the load is of the uplinks; at this load the hosts' links are the bottleneck)",
            arrivals.per_host_bps() / 1e9,
            topology.host_rate_gbps
        );
    }
    let flows = arrivals.flows(&cdf);
    println!(
        "{} leaves x {} spines, {} hosts per leaf, hosts {} Gbit/s, fabric {} Gbit/s, links {} ns{}; \
         {} at {:.0}% load ({}), {} flows in {} ms (mean {:.0} B), {}; DCQCN {}; step {} ns",
        topology.leaves,
        topology.spines,
        topology.hosts_per_leaf,
        topology.host_rate_gbps,
        topology.fabric_rate_gbps,
        topology.link_delay_ns,
        if topology.spine_delays_ns.is_empty() {
            String::new()
        } else {
            format!(" (spines {:?} ns)", topology.spine_delays_ns)
        },
        cdf.name,
        cli.load * 100.0,
        match pattern {
            Pattern::Incast => "incast, of host 0's link",
            Pattern::AllToAll => "all-to-all, of the uplinks",
            Pattern::Uniform => "uniform, of the uplinks",
        },
        flows.len(),
        cli.duration_ms,
        cdf.mean(),
        if cli.long_lived { "long-lived QPs" } else { "a QP per flow" },
        cli.dcqcn,
        cli.step_ns
    );
    let mut opts = Vec::new();
    for r in &receivers {
        // NAK filtering is refused towards Go-Back-N RNICs, as the switch refuses it.
        for s in schemes.iter().filter(|s| s.serves(*r)) {
            opts.push(SimOpts {
                dcqcn,
                step_ns: cli.step_ns,
                drain_ns: (cli.drain_ms * 1e6) as u64,
                long_lived: cli.long_lived,
                ..SimOpts::new(topology.clone(), *s, *r)
            });
        }
    }
    let jobs = cli.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    anyhow::ensure!(jobs >= 1, "--jobs at least 1");
    use std::io::IsTerminal as _;
    let board = Board::new(&opts, !cli.quiet && std::io::stderr().is_terminal());
    let runs = run_all(&opts, &flows, jobs, &|i, p| board.update(i, p));
    board.finish();
    let runs = runs?;
    for out in &runs {
        wall_time(out);
    }
    print!("{}", report::table(&runs));
    println!("(slowdown = FCT / FCT alone on the fabric; bin1 = smallest 5% of flows, bin20 = largest 5%)");
    if let Some(p) = &cli.csv {
        let text: String = runs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let c = report::csv(r);
                if i == 0 {
                    c
                } else {
                    c.lines().skip(1).map(|l| format!("{l}\n")).collect()
                }
            })
            .collect();
        std::fs::write(p, text).with_context(|| format!("{}", p.display()))?;
    }
    if let Some(p) = &cli.bins_csv {
        std::fs::write(p, report::bins_csv(&runs)).with_context(|| format!("{}", p.display()))?;
    }
    if let Some(p) = &cli.json {
        std::fs::write(p, report::json(&runs)).with_context(|| format!("{}", p.display()))?;
    }
    if let Some(p) = &cli.svg {
        let title = format!(
            "{}, {:.0}% load, {} flows, {} x {} x {}",
            cdf.name,
            cli.load * 100.0,
            flows.len(),
            topology.leaves,
            topology.spines,
            topology.hosts_per_leaf
        );
        std::fs::write(p, report::svg(&runs, &title))
            .with_context(|| format!("{}", p.display()))?;
    }
    if cli.check {
        for r in &receivers {
            let find = |s: Scheme| {
                runs.iter()
                    .find(|o| o.scheme == s && o.receiver == *r)
                    .map(|o| report::slowdowns(o).0)
                    .with_context(|| format!("--check needs {} among the schemes", s.name()))
            };
            let (e, sr) = (find(Scheme::Ecmp)?, find(Scheme::SprayReorder)?);
            // Unfinished flows are left out of the slowdowns: a check must not pass on them.
            for o in runs.iter().filter(|o| o.receiver == *r) {
                let unfinished = o.flows.iter().filter(|f| f.fct_ns.is_none()).count();
                anyhow::ensure!(
                    unfinished == 0,
                    "check failed: {unfinished} flows of {} did not finish",
                    o.scheme.name()
                );
            }
            anyhow::ensure!(
                sr.avg < e.avg && sr.p99 < e.p99,
                "check failed: spray+reorder avg {:.2} p99 {:.2} against ecmp avg {:.2} p99 {:.2}",
                sr.avg,
                sr.p99,
                e.avg,
                e.p99
            );
            println!(
                "check: spray+reorder {:.2}x ECMP's average slowdown, {:.2}x its p99",
                sr.avg / e.avg,
                sr.p99 / e.p99
            );
        }
    }
    Ok(())
}

/// The progress bar: one line on stderr with a bar per run, redrawn as runs report.
struct Board {
    names: Vec<String>,
    state: std::sync::Mutex<Vec<Option<Progress>>>,
    on: bool,
}

impl Board {
    fn new(opts: &[SimOpts], on: bool) -> Board {
        Board {
            names: opts
                .iter()
                .map(|o| {
                    format!(
                        "{} {}",
                        o.scheme.name(),
                        sprayswitch_harness::rack::demo::receiver_name(o.receiver)
                    )
                })
                .collect(),
            state: std::sync::Mutex::new(vec![None; opts.len()]),
            on,
        }
    }

    fn update(&self, i: usize, p: Progress) {
        if !self.on {
            return;
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st[i] = Some(p);
        // The runs under way (at most --jobs), and how many are over.
        let over = st
            .iter()
            .flatten()
            .filter(|p| p.done == p.flows || p.now_ns >= p.end_ns)
            .count();
        let mut line = format!("\r{over}/{} runs done", st.len());
        for (k, s) in st.iter().enumerate() {
            let Some(p) = s else { continue };
            if p.done == p.flows || p.now_ns >= p.end_ns {
                continue;
            }
            let fill = ((p.now_ns as f64 / p.end_ns.max(1) as f64 * 20.0) as usize).min(20);
            line += &format!(
                " | {} [{}{}] {:.1} ms, {}/{} flows",
                self.names[k],
                "#".repeat(fill),
                ".".repeat(20 - fill),
                p.now_ns as f64 / 1e6,
                p.done,
                p.flows
            );
        }
        eprint!("{line}\x1b[K");
    }

    fn finish(&self) {
        if self.on {
            eprintln!();
        }
    }
}

/// `--replay-demo`: the demo's scenarios in the real-time rack and in the simulator.
fn replay_demo(cli: &Cli) -> anyhow::Result<()> {
    use sprayswitch_harness::rack::demo::{self, DemoOpts, Mode};
    anyhow::ensure!(
        (0.05..=4.0).contains(&cli.replay_scale),
        "--replay-scale {}: 0.05 to 4",
        cli.replay_scale
    );
    let d = DemoOpts::default();
    println!(
        "the demo's rack pair: paths {:?} us at {} Mbit/s each, window {} packets, seed {}; \
         the rack in real time and on its own clock, then the simulator",
        d.path_delays_us, d.path_rate_mbps, d.window, d.seed
    );
    let all = demo::workloads(cli.replay_scale);
    let mut scenarios: Vec<(DemoOpts, _)> = all.iter().map(|w| (d.clone(), w.clone())).collect();
    if let Some(w) = all.iter().find(|w| w.colliding) {
        let lossy = DemoOpts {
            path_loss: vec![0.0, 0.01, 0.0, 0.0],
            ..d.clone()
        };
        scenarios.push((lossy, w.clone()));
    }
    let mut rows = Vec::new();
    for (o, w) in &scenarios {
        for receiver in [ReceiverMode::Gbn, ReceiverMode::Sr] {
            for mode in Mode::ALL.into_iter().filter(|m| m.serves(receiver)) {
                rows.push(replay::compare(o, w, mode, receiver)?);
            }
        }
    }
    print!("{}", replay::table(&rows));
    if cli.check {
        for a in &rows {
            if a.real.mode != Mode::Spray && a.real.path_loss.iter().all(|l| *l == 0.0) {
                anyhow::ensure!(
                    (a.ratio() - 1.0).abs() <= 0.05,
                    "{} {} {}: the simulator's goodput is {:.3}x the real-time rack's",
                    a.real.workload,
                    a.real.mode.name(),
                    demo::receiver_name(a.real.receiver),
                    a.ratio()
                );
            }
        }
        println!("check: ECMP and spray + reorder within 5% of the real-time rack");
    }
    Ok(())
}

/// The jobs `--collective` names, placed one after the other on the hosts.
fn jobs_of(cli: &Cli, t: &Topology, size: Option<u64>) -> anyhow::Result<Vec<collective::Job>> {
    anyhow::ensure!(cli.ranks_per_host >= 1, "--ranks-per-host at least 1");
    anyhow::ensure!(cli.rank_stride >= 1, "--rank-stride at least 1");
    anyhow::ensure!(
        (1..=1000).contains(&cli.iterations),
        "--iterations 1 to 1000"
    );
    let hosts = t.hosts();
    let mut next = 0u32;
    let mut jobs = Vec::new();
    for spec in &cli.collective {
        let parts: Vec<&str> = spec.split(':').collect();
        anyhow::ensure!(
            (2..=4).contains(&parts.len()),
            "--collective {spec}: ALGO:SIZE[:RANKS[:CHANNELS]]"
        );
        let algo = collective::Algo::parse(parts[0]).map_err(|e| anyhow::anyhow!(e))?;
        let own = collective::parse_size(parts[1]).map_err(|e| anyhow::anyhow!(e))?;
        let ranks: u32 = match parts.get(2) {
            Some(r) => r
                .parse()
                .map_err(|_| anyhow::anyhow!("--collective {spec}: RANKS is a number"))?,
            None => hosts * cli.ranks_per_host,
        };
        let channels: u32 = match parts.get(3) {
            Some(c) => c
                .parse()
                .map_err(|_| anyhow::anyhow!("--collective {spec}: CHANNELS is a number"))?,
            None => 2,
        };
        anyhow::ensure!(
            (1..=64).contains(&channels),
            "--collective {spec}: 1 to 64 channels"
        );
        // Host k of the sequence is k x stride, wrapped onto the next offset each lap (with a
        // stride that divides the hosts, every host once per lap).
        let placed: Vec<u32> = (0..ranks)
            .map(|i| {
                let k = u64::from((next + i) / cli.ranks_per_host);
                let at = k * u64::from(cli.rank_stride);
                ((at % u64::from(hosts) + at / u64::from(hosts)) % u64::from(hosts)) as u32
            })
            .collect();
        next += ranks;
        jobs.push(collective::Job {
            algo,
            hosts: placed,
            size: size.unwrap_or(own),
            channels,
            iterations: cli.iterations,
            start_ns: 0,
        });
    }
    Ok(jobs)
}

/// `--collective`: the jobs (for each of `--sizes`) under every scheme and RNIC kind.
fn collectives(
    cli: &Cli,
    t: &Topology,
    cdf: &SizeCdf,
    schemes: &[Scheme],
    receivers: &[ReceiverMode],
    dcqcn: Option<DcqcnConfig>,
) -> anyhow::Result<()> {
    let sizes: Vec<Option<u64>> = if cli.sizes.is_empty() {
        vec![None]
    } else {
        cli.sizes
            .iter()
            .map(|s| collective::parse_size(s).map(Some))
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("--sizes: {e}"))?
    };
    let jobs_n = cli.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    println!(
        "{} leaves x {} spines, {} hosts per leaf, hosts {} Gbit/s, fabric {} Gbit/s, links {} ns, \
         path MTU {}; {} iterations; {} rank(s) per host, stride {}{}; DCQCN {}; step {} ns",
        t.leaves,
        t.spines,
        t.hosts_per_leaf,
        t.host_rate_gbps,
        t.fabric_rate_gbps,
        t.link_delay_ns,
        t.pmtu,
        cli.iterations,
        cli.ranks_per_host,
        cli.rank_stride,
        if cli.background {
            format!("; background {} at {:.0}% load", cdf.name, cli.load * 100.0)
        } else {
            String::new()
        },
        cli.dcqcn,
        cli.step_ns
    );
    let mut rows = Vec::new();
    for size in sizes {
        let jobs = jobs_of(cli, t, size)?;
        let mut plan = collective::plan(&jobs).map_err(|e| anyhow::anyhow!(e))?;
        if cli.background {
            // Background flows on QPs of their own beside the collectives' long-lived ones:
            // a distinct UDP source port each, ungated, numbered after the collectives'.
            let bg = Arrivals::on(
                t,
                cli.load,
                (cli.duration_ms * 1e6) as u64,
                Pattern::Uniform,
                cli.seed,
            )
            .flows(cdf);
            collective::add_background(&mut plan, &bg);
        }
        let gates = std::sync::Arc::new(plan.gates.clone());
        let mut opts = Vec::new();
        for r in receivers {
            for s in schemes.iter().filter(|s| s.serves(*r)) {
                opts.push(SimOpts {
                    dcqcn,
                    step_ns: cli.step_ns,
                    drain_ns: (cli.drain_ms * 1e6) as u64,
                    long_lived: true,
                    gates: Some(gates.clone()),
                    ..SimOpts::new(t.clone(), *s, *r)
                });
            }
        }
        use std::io::IsTerminal as _;
        let board = Board::new(&opts, !cli.quiet && std::io::stderr().is_terminal());
        let runs = run_all(&opts, &plan.flows, jobs_n, &|i, p| board.update(i, p));
        board.finish();
        for out in runs? {
            wall_time(&out);
            rows.extend(collective::rows(&jobs, &plan, &out, t));
        }
    }
    print!("{}", collective::table(&rows));
    println!(
        "(p50/p99 over iterations; ideal: alone on a non-blocking fabric; algbw = size / p50, \
         busbw = algbw x 2(n-1)/n (AllReduce) or (n-1)/n (AlltoAll), GB/s; counters for the \
         whole run)"
    );
    if let Some(p) = &cli.csv {
        std::fs::write(p, collective::csv(&rows)).with_context(|| format!("{}", p.display()))?;
    }
    if let Some(p) = &cli.json {
        std::fs::write(p, collective::json(&rows)).with_context(|| format!("{}", p.display()))?;
    }
    if let Some(p) = &cli.svg {
        std::fs::write(p, collective::svg(&rows)).with_context(|| format!("{}", p.display()))?;
    }
    if cli.check {
        for r in rows.iter().filter(|r| r.scheme == Scheme::SprayReorder) {
            anyhow::ensure!(
                r.times_ns.iter().all(Option::is_some),
                "check failed: {} job {} did not finish every iteration",
                r.algo.name(),
                r.job
            );
            if r.receiver == ReceiverMode::Gbn {
                anyhow::ensure!(
                    r.out_of_sequence == 0,
                    "check failed: spray+reorder gave Go-Back-N receivers {} packets out of sequence",
                    r.out_of_sequence
                );
            }
        }
        println!("check: spray+reorder finished every iteration, no sequence error at Go-Back-N receivers");
    }
    Ok(())
}

/// What a run cost in wall time, on stderr.
fn wall_time(out: &sprayswitch_harness::sim::SimOutcome) {
    eprintln!(
        "{} {}: {:.1} s wall for {:.2} ms simulated, {:.2} M switch packets/s of wall time",
        out.scheme.name(),
        sprayswitch_harness::rack::demo::receiver_name(out.receiver),
        out.wall_s,
        out.simulated_ns as f64 / 1e6,
        out.switch_tx_pkts as f64 / out.wall_s.max(1e-9) / 1e6
    );
}
