//! `sprayrackd`: a rack pair in one process, its hosts on real interfaces: two sprayswitch ToRs
//! and the fabric emulator's paths between them, driven by one thread (see
//! `sprayswitch_harness::rack::real`). Each ToR answers `sprayctl` on its own control socket.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use sprayswitch_control::server::ControlServer;
use sprayswitch_harness::rack::fabric::parse_impairments;
use sprayswitch_harness::rack::real::{OneRack, OneRackSpec};
use sprayswitch_harness::rack::topo::{RackPairSpec, TorArgs};

#[derive(Parser)]
#[command(
    name = "sprayrackd",
    version,
    about = "Run a rack pair (two sprayswitch ToRs and the fabric emulator) in one process, \
             hosts on real interfaces"
)]
struct Cli {
    /// Hosts per rack: ToR A's host port hN opens interface HOST_PREFIX_A + N, ToR B's
    /// HOST_PREFIX_B + N.
    #[arg(long, default_value_t = 1)]
    hosts: usize,
    /// Interface name prefix of ToR A's hosts.
    #[arg(long, default_value = "a-h")]
    host_prefix_a: String,
    /// Interface name prefix of ToR B's hosts.
    #[arg(long, default_value = "b-h")]
    host_prefix_b: String,
    /// A fabric path and its impairments, once per path (uplinks u0.. of both ToRs):
    /// `delay_us=N,jitter_us=N,loss=P,rate_mbps=N` (any of them; empty: a clean path).
    #[arg(long = "path", required = true, allow_hyphen_values = true)]
    paths: Vec<String>,
    #[command(flatten)]
    tor: TorArgs,
    /// Idle policy of the rack thread: wait (event-driven), backoff or spin.
    #[arg(long, default_value = "wait")]
    idle: String,
    /// Directory of the control sockets `tor-a.sock` and `tor-b.sock` (none: no sockets).
    #[arg(long)]
    socket_dir: Option<PathBuf>,
    /// Seed of the fabric's losses and the spray policies.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop after this many seconds (default: at SIGINT/SIGTERM).
    #[arg(long)]
    duration: Option<f64>,
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let policy = cli.tor.spray_policy()?;
    let paths = cli
        .paths
        .iter()
        .map(|p| parse_impairments(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if cli.hosts == 0 || cli.hosts > 64 {
        anyhow::bail!("--hosts {}: from 1 to 64", cli.hosts);
    }
    let spec = OneRackSpec {
        pair: RackPairSpec {
            hosts: cli.hosts,
            paths: paths.clone(),
            policy,
            seed: cli.seed,
            ..RackPairSpec::default()
        },
        tor: cli.tor.tor_text(&cli.idle, None),
        host_prefixes: [cli.host_prefix_a.clone(), cli.host_prefix_b.clone()],
    };
    let mut servers = Vec::new();
    for t in ["tor-a", "tor-b"] {
        let sock = cli.socket_dir.as_ref().map(|d| d.join(format!("{t}.sock")));
        servers.push(ControlServer::bind(sock.as_deref(), None)?);
        if let Some(s) = &sock {
            log::info!("{t}: control socket {}", s.display());
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    let mut rack = OneRack::start(&spec)?;
    for line in &rack.report {
        log::info!("{line}");
    }
    for (i, p) in paths.iter().enumerate() {
        log::info!(
            "path {i}: delay {} us, jitter {} us, loss {}, rate {}",
            p.delay_ns / 1000,
            p.jitter_ns / 1000,
            p.loss,
            p.rate_bps
                .map_or("unlimited".into(), |r| format!("{} Mbit/s", r / 1_000_000))
        );
    }
    log::info!(
        "rack running: tor-a, tor-b and {} paths in one thread",
        paths.len()
    );
    let started = Instant::now();
    let mut last_periodic = Instant::now();
    while !stop.load(Ordering::Relaxed)
        && !cli
            .duration
            .is_some_and(|d| started.elapsed().as_secs_f64() >= d)
    {
        let mut busy = false;
        for (server, ctl) in servers.iter_mut().zip(rack.controls.iter_mut()) {
            busy |= server.poll(ctl);
        }
        if last_periodic.elapsed() >= Duration::from_secs(1) {
            for ctl in &mut rack.controls {
                ctl.periodic();
            }
            last_periodic = Instant::now();
        }
        if !busy {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    drop(servers);
    let stats = rack.path_stats.clone();
    let stopped = rack.stop();
    println!("rack ran {:.1} s", started.elapsed().as_secs_f64());
    for (name, s) in ["tor-a", "tor-b"].iter().zip(&stopped) {
        let st = &s.stats;
        println!(
            "{name}: rx {} tx {} pkts, sprayed {}, hashed {}, drops {}, held {} (losses by path order {}, timeouts {}, resyncs {}), unsent {}",
            st.rx_pkts,
            st.tx_pkts,
            st.sprayed,
            st.hashed,
            st.drops_total(),
            st.reorder.held_total,
            st.reorder.path_losses,
            st.reorder.timeouts,
            st.reorder.resyncs,
            s.unsent
        );
    }
    for (i, (ab, ba)) in stats.iter().enumerate() {
        use sprayswitch::port::fault::FaultStats as F;
        println!(
            "path {i}: a->b offered {} lost {} queue drops {}; b->a offered {} lost {} queue drops {}",
            F::get(&ab.offered),
            F::get(&ab.dropped),
            F::get(&ab.queue_drops),
            F::get(&ba.offered),
            F::get(&ba.dropped),
            F::get(&ba.queue_drops)
        );
        println!("path {i}: a->b released late by {}", ab.lateness());
        println!("path {i}: b->a released late by {}", ba.lateness());
    }
    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sprayrackd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
