//! `sprayfabric`: the fabric emulator on real interfaces. Each `--path A:B,...` joins interface
//! A to interface B (both directions) with the given delay, jitter, loss and rate, standing in
//! for a spine switch (this kernel has no netem). Runs until SIGINT/SIGTERM or `--duration`.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, ValueEnum};
use sprayswitch::port::Port;
use sprayswitch::worker::IdlePolicy;
use sprayswitch_harness::rack::fabric::{parse_path, Fabric};

#[derive(Clone, Copy, ValueEnum)]
enum Backend {
    /// AF_XDP, falling back to AF_PACKET.
    Auto,
    /// AF_XDP only.
    #[value(alias = "af_xdp")]
    AfXdp,
    /// AF_PACKET only.
    #[value(alias = "af_packet")]
    AfPacket,
}

#[derive(Parser)]
#[command(
    name = "sprayfabric",
    version,
    about = "Fabric emulator: N paths between interface pairs with per-path delay, jitter, loss and rate"
)]
struct Cli {
    /// A path: `A:B[,delay_us=N][,jitter_us=N][,loss=P][,rate_mbps=N]`. Repeat per path.
    #[arg(long = "path", required = true)]
    paths: Vec<String>,
    /// How to open the interfaces.
    #[arg(long, value_enum, default_value = "auto")]
    backend: Backend,
    /// Seed of the random impairments.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Pin the forwarding thread to this core.
    #[arg(long)]
    core: Option<usize>,
    /// Idle policy: `backoff` (spin, yield, then wait for packets), `wait` (wait for packets at
    /// once; for shared cores and real-time priority) or `spin` (owns a core).
    #[arg(long, default_value = "backoff")]
    idle: String,
    /// Longest idle wait in microseconds (bounds how late delayed packets leave).
    #[arg(long, default_value_t = 50)]
    idle_us: u32,
    /// Stop after this many seconds.
    #[arg(long)]
    duration: Option<f64>,
}

#[cfg(target_os = "linux")]
fn open(
    backend: Backend,
    umem: &mut sprayswitch::port::xdp::XdpUmem,
    ifname: &str,
) -> anyhow::Result<Box<dyn Port>> {
    use sprayswitch::port::afpacket::AfPacketPort;
    use sprayswitch::port::xdp::XdpOptions;
    Ok(match backend {
        Backend::AfPacket => Box::new(AfPacketPort::open(ifname, ifname)?),
        Backend::AfXdp => Box::new(umem.open(ifname, &XdpOptions::new(ifname))?),
        Backend::Auto => match umem.open(ifname, &XdpOptions::new(ifname)) {
            Ok(p) => Box::new(p),
            Err(e) => {
                log::warn!("{e}; falling back to AF_PACKET");
                Box::new(AfPacketPort::open(ifname, ifname)?)
            }
        },
    })
}

#[cfg(target_os = "linux")]
fn run(cli: Cli) -> anyhow::Result<()> {
    use sprayswitch::port::xdp::XdpUmem;
    let mut umem = XdpUmem::new(XdpUmem::frames_for(cli.paths.len() * 2, 1024, 2048), 2048)
        .context("allocating the UMEM")?;
    let mut paths = Vec::new();
    for p in &cli.paths {
        let (a, b, spec) = parse_path(p)?;
        let pa = open(cli.backend, &mut umem, &a)?;
        let pb = open(cli.backend, &mut umem, &b)?;
        log::info!(
            "path {a} <-> {b}: delay {} us, jitter {} us, loss {}, rate {}",
            spec.delay_ns / 1000,
            spec.jitter_ns / 1000,
            spec.loss,
            spec.rate_bps
                .map_or("unlimited".into(), |r| format!("{} Mbit/s", r / 1_000_000))
        );
        paths.push((pa, pb, spec));
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    if let Some(d) = cli.duration {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs_f64(d));
            stop.store(true, Ordering::Relaxed);
        });
    }
    let idle =
        IdlePolicy::from_name(&cli.idle, cli.idle_us).map_err(|e| anyhow::anyhow!("--idle {e}"))?;
    let core = cli.core;
    let seed = cli.seed;
    let started = Instant::now();
    let report = std::thread::spawn(move || {
        if let Some(c) = core {
            if !core_affinity::set_for_current(core_affinity::CoreId { id: c }) {
                log::warn!("could not pin to core {c}");
            }
        }
        let mut f = Fabric::new(paths, seed);
        f.run(&stop, idle);
        f.report()
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the fabric thread panicked"))?;
    println!("fabric ran {:.1} s", started.elapsed().as_secs_f64());
    for (i, r) in report.iter().enumerate() {
        println!(
            "path {i}: a->b rx {} lost {} overflow {}; b->a rx {} lost {} overflow {}",
            r.rx[0], r.lost[0], r.overflow[0], r.rx[1], r.lost[1], r.overflow[1]
        );
        println!("path {i}: a->b released late by {}", r.late[0]);
        println!("path {i}: b->a released late by {}", r.late[1]);
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn run(_: Cli) -> anyhow::Result<()> {
    anyhow::bail!("sprayfabric opens real interfaces (AF_XDP, AF_PACKET): Linux only")
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sprayfabric: {e:#}");
            ExitCode::FAILURE
        }
    }
}
