//! `sprayswitch-demo`: a rack pair in one process (two ToRs running the embedded default
//! configuration and its mirror, 2 hosts per rack, 4 rate-limited fabric paths with skewed
//! delays) runs the same RDMA WRITE workloads under ECMP, spraying without reordering, and
//! spraying with sprayswitch's reordering, against Go-Back-N and selective-repeat RNIC models,
//! and by default once more with 1% loss on one path (the colliding-QP workload), so that
//! recovery shows next to ECMP's. It prints a table and writes an SVG plot. Then an 8:1 incast
//! at 100 Gbit/s in virtual time (the same switches, driven on a simulated clock) with and
//! without ECN marking, with DCQCN senders, and with a receiving host that pauses its port. No
//! privileges needed.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use sprayswitch_harness::rack::demo::{
    ordering_table, ordering_workload, receiver_name, run, svg, table, workloads, DemoOpts,
    FaultTiming, Mode,
};
use sprayswitch_models::rnic::ReceiverMode;

#[derive(Parser)]
#[command(
    name = "sprayswitch-demo",
    version,
    about = "Spray with and without reordering against ECMP, in one process"
)]
struct Cli {
    /// One-way delay of each of the fabric paths, microseconds (the number of values is the
    /// number of paths; the embedded default ToR has 4 uplinks).
    #[arg(long, value_delimiter = ',', default_value = "2,10,25,50")]
    path_delays_us: Vec<u64>,
    /// Rate of each fabric path, Mbit/s.
    #[arg(long, default_value_t = 250)]
    path_rate_mbps: u64,
    /// Loss probability of each fabric path, e.g. 0,0.01,0,0 (1: a dead path): every scenario
    /// runs with it (instead of loss-free plus one lossy scenario).
    #[arg(long, value_delimiter = ',')]
    path_loss: Option<Vec<f64>>,
    /// The loss of --path-loss begins this many milliseconds into each scenario (a path that
    /// fails mid-transfer) instead of at its start.
    #[arg(long, default_value_t = 0.0)]
    fault_at_ms: f64,
    /// ... and ends after this many milliseconds (the path is repaired).
    #[arg(long)]
    fault_for_ms: Option<f64>,
    /// ... or comes and goes: lossy for ON ms, clean for OFF ms, again and again (a flapping
    /// path), e.g. 5,45.
    #[arg(long, value_delimiter = ',')]
    flap_ms: Option<Vec<f64>>,
    /// Turn path health off (failing paths stay in the spray set).
    #[arg(long)]
    no_health: bool,
    /// ToR B restarts this many ms into each scenario (its process crashes and starts again
    /// with nothing of its state), down for --tor-down-ms; with --virtual-time.
    #[arg(long)]
    restart_tor_b_at_ms: Option<f64>,
    /// How long a restarting ToR B is down, ms.
    #[arg(long, default_value_t = 50.0)]
    tor_down_ms: f64,
    /// Host b1 stops answering this many ms into each scenario (its NIC drops what reaches
    /// it) for --host-silent-ms.
    #[arg(long)]
    host_silent_at_ms: Option<f64>,
    /// How long host b1 does not answer, ms.
    #[arg(long, default_value_t = 100.0)]
    host_silent_ms: f64,
    /// Each ToR uplink receives into a pool of this many frames, as an AF_PACKET port does
    /// (4096 there): what the reorder stage holds pins them.
    #[arg(long)]
    uplink_pool_frames: Option<u32>,
    /// The loss of the one lossy scenario added to the loss-free table (colliding-QP
    /// workload), per path.
    #[arg(long, value_delimiter = ',', default_value = "0,0.01,0,0")]
    lossy_scenario: Vec<f64>,
    /// Do not add the lossy scenario.
    #[arg(long)]
    no_lossy: bool,
    /// Hold timeout of the reorder stage, microseconds (the backstop behind path-order loss
    /// detection).
    #[arg(long, default_value_t = 5000)]
    hold_timeout_us: u64,
    /// Longest a scenario may run, seconds (spraying without reordering may never finish).
    #[arg(long, default_value_t = 3.0)]
    deadline: f64,
    /// Requester window per QP, in packets.
    #[arg(long, default_value_t = 32)]
    window: u32,
    /// Take each host's path stamps on their own at the destination ToR (by default a rack's
    /// hosts are one source: `stamp_source_prefix` of the rack's subnet).
    #[arg(long)]
    stamp_per_host: bool,
    /// Scales the amount of data per QP (1.0: 32 MB per workload).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Fabrics to run: ecmp, spray, spray+reorder, spray+nak_filter (selective-repeat
    /// receivers only: the switch refuses it towards Go-Back-N RNICs).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ecmp,spray,spray+reorder,spray+nak_filter",
        value_parser = fabric
    )]
    fabrics: Vec<Mode>,
    /// Receiver models to run: gbn, sr, ideal.
    #[arg(long, value_delimiter = ',', default_value = "gbn,sr", value_parser = receiver)]
    receivers: Vec<ReceiverMode>,
    /// Where to write the SVG plot.
    #[arg(long, default_value = "sprayswitch-demo.svg")]
    svg: PathBuf,
    /// Seed of the port choices, starting PSNs and spray policy.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Leave out the incast table.
    #[arg(long)]
    no_incast: bool,
    /// Leave out the ordering table (write then flag).
    #[arg(long)]
    no_ordering: bool,
    /// Only the incast table.
    #[arg(long)]
    incast_only: bool,
    /// Run the scenarios on a clock of their own, advanced in steps of 500 ns with the ToRs'
    /// workers driven by it: the same table on every run and machine, no scheduling stalls
    /// (the incast table always runs so).
    #[arg(long)]
    virtual_time: bool,
}

/// A fabric mode by its name in the table.
fn fabric(name: &str) -> Result<Mode, String> {
    Mode::ALL
        .into_iter()
        .find(|m| m.name() == name)
        .ok_or_else(|| {
            format!("unknown fabric '{name}' (ecmp, spray, spray+reorder, spray+nak_filter)")
        })
}

/// A receiver model by its name in the table.
fn receiver(name: &str) -> Result<ReceiverMode, String> {
    [ReceiverMode::Gbn, ReceiverMode::Sr, ReceiverMode::Ideal]
        .into_iter()
        .find(|r| receiver_name(*r) == name)
        .ok_or_else(|| format!("unknown receiver '{name}' (gbn, sr, ideal)"))
}

fn main() -> ExitCode {
    // The switches' own log (path health changes, with RUST_LOG=warn or info); quiet by default.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("error")).init();
    let cli = Cli::parse();
    if cli.path_delays_us.len() != 4 {
        eprintln!("sprayswitch-demo: the embedded default ToR has 4 uplinks: give 4 path delays");
        return ExitCode::FAILURE;
    }
    for l in cli.path_loss.iter().flatten().chain(&cli.lossy_scenario) {
        if !(0.0..=1.0).contains(l) {
            eprintln!("sprayswitch-demo: loss {l}: a probability from 0 to 1 (1: a dead path)");
            return ExitCode::FAILURE;
        }
    }
    if cli
        .uplink_pool_frames
        .is_some_and(|n| !(16..=1 << 20).contains(&n))
    {
        eprintln!("sprayswitch-demo: --uplink-pool-frames: 16 to 1048576");
        return ExitCode::FAILURE;
    }
    let times = [
        Some(cli.fault_at_ms),
        cli.fault_for_ms,
        cli.restart_tor_b_at_ms,
        Some(cli.tor_down_ms),
        cli.host_silent_at_ms,
        Some(cli.host_silent_ms),
    ];
    let flaps = cli.flap_ms.iter().flatten().copied();
    if times
        .into_iter()
        .flatten()
        .chain(flaps)
        .any(|t| !(0.0..=1e6).contains(&t))
    {
        eprintln!("sprayswitch-demo: fault times are milliseconds from 0 to 1000000");
        return ExitCode::FAILURE;
    }
    if cli.path_loss.as_ref().is_some_and(|l| l.len() != 4) || cli.lossy_scenario.len() != 4 {
        eprintln!("sprayswitch-demo: give one loss probability per path (4)");
        return ExitCode::FAILURE;
    }
    if cli
        .flap_ms
        .as_ref()
        .is_some_and(|f| f.len() != 2 || f[0] == 0.0)
    {
        eprintln!("sprayswitch-demo: --flap-ms ON,OFF: two durations, ON above 0");
        return ExitCode::FAILURE;
    }
    if cli.hold_timeout_us == 0 {
        eprintln!("sprayswitch-demo: --hold-timeout-us must be at least 1");
        return ExitCode::FAILURE;
    }
    let opts = DemoOpts {
        path_delays_us: cli.path_delays_us.clone(),
        path_rate_mbps: cli.path_rate_mbps,
        path_loss: cli.path_loss.clone().unwrap_or_default(),
        hold_timeout_us: cli.hold_timeout_us,
        deadline_s: cli.deadline,
        window: cli.window,
        seed: cli.seed,
        virtual_step_ns: cli.virtual_time.then_some(500),
        stamp_per_host: cli.stamp_per_host,
        fault: FaultTiming {
            at_ms: cli.fault_at_ms,
            for_ms: cli.fault_for_ms,
            flap_ms: cli.flap_ms.as_ref().map(|v| (v[0], v[1])),
        },
        health: !cli.no_health,
        restart_b_ms: cli.restart_tor_b_at_ms.map(|at| (at, cli.tor_down_ms)),
        silent_host_ms: cli.host_silent_at_ms.map(|at| (at, cli.host_silent_ms)),
        uplink_pool_frames: cli.uplink_pool_frames,
    };
    println!(
        "fabric: 4 paths x {} Mbit/s, one-way delays {:?} us; 2 hosts per rack; RDMA WRITEs; {}",
        opts.path_rate_mbps,
        opts.path_delays_us,
        if cli.virtual_time {
            "virtual time"
        } else {
            "real time"
        }
    );
    if cli.incast_only {
        return incast();
    }
    let all = workloads(cli.scale);
    let mut scenarios: Vec<(DemoOpts, _)> = all.iter().map(|w| (opts.clone(), w.clone())).collect();
    if cli.path_loss.is_none() && !cli.no_lossy {
        // The colliding-QP workload once more with loss on one path.
        if let Some(w) = all.iter().find(|w| w.colliding) {
            let lossy = DemoOpts {
                path_loss: cli.lossy_scenario.clone(),
                ..opts.clone()
            };
            scenarios.push((lossy, w.clone()));
        }
    }
    let mut rows = Vec::new();
    for (o, w) in &scenarios {
        for r in &cli.receivers {
            for m in cli.fabrics.iter().filter(|m| m.serves(*r)) {
                match run(o, w, *m, *r) {
                    Ok(o) => rows.push(o),
                    Err(e) => {
                        eprintln!("sprayswitch-demo: {e:#}");
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
    }
    print!("{}", table(&rows));
    if !cli.no_ordering {
        // Write-then-flag on every QP, loss-free, for the receivers and fabrics asked for.
        let w = ordering_workload(cli.scale);
        let mut order = Vec::new();
        for r in &cli.receivers {
            for m in cli.fabrics.iter().filter(|m| m.serves(*r)) {
                match run(&opts, &w, *m, *r) {
                    Ok(o) => order.push(o),
                    Err(e) => {
                        eprintln!("sprayswitch-demo: {e:#}");
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
        println!(
            "\nordering: {} QPs per host pair, each writing {} KiB then an 8-byte flag, {} times; \
             a flag before its data: the responder placed the flag while data before it was \
             still missing",
            w.qps_per_host,
            w.message / 1024,
            w.messages
        );
        print!("{}", ordering_table(&order));
    }
    match std::fs::write(&cli.svg, svg(&rows)) {
        Ok(()) => println!("plot: {}", cli.svg.display()),
        Err(e) => {
            eprintln!("sprayswitch-demo: cannot write {}: {e}", cli.svg.display());
            return ExitCode::FAILURE;
        }
    }
    if cli.no_incast {
        return ExitCode::SUCCESS;
    }
    incast()
}

/// The incast table: 8 senders in rack A write to one host in rack B at 100 Gbit/s, in
/// virtual time.
fn incast() -> ExitCode {
    use sprayswitch_harness::rack::incast;
    let mut rows = Vec::new();
    for o in incast::scenarios() {
        match incast::run(&o) {
            Ok(r) => rows.push(r),
            Err(e) => {
                eprintln!("sprayswitch-demo: {e:#}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!(
        "\nincast: 8 senders in rack A -> 1 host in rack B; every port 100 Gbit/s, 4 paths of 1 us; \
         virtual time, 20 ms (the first 2 not counted); DCQCN (ConWeave profile); ECN Kmin 100 KB, Kmax 400 KB, Pmax 0.2; \
         q = the receiver's ToR port (with what its reorder stage holds)"
    );
    print!("{}", incast::table(&rows));
    ExitCode::SUCCESS
}
