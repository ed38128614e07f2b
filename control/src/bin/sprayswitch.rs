//! `sprayswitch`: the switch.
//!
//! `sprayswitch check` validates a configuration (the embedded default unless `--config`),
//! `sprayswitch show-config` prints the annotated default, `sprayswitch run` runs the switch
//! until SIGINT/SIGTERM, a `--duration`, or the end of every replayed capture. The unlisted
//! `sprayswitch man --out DIR` and `sprayswitch completions --shell SHELL` write this command
//! line's man pages and shell completions (the Debian package ships them; docs/packaging.md).
//! `sprayswitch config-reference` writes docs/configuration.md, the reference of every key.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use sprayswitch::engine::DropReason;
use sprayswitch::switch::Stats;
use sprayswitch_control::ctl::Control;
use sprayswitch_control::ports::open_ports;
use sprayswitch_control::server::ControlServer;
use sprayswitch_control::{Backend, Config, Validated, DEFAULT_CONFIG};

#[path = "shared/docs.rs"]
mod docs;

#[derive(Parser)]
#[command(
    name = "sprayswitch",
    version,
    about = "Userspace RoCEv2 top-of-rack switch: per-packet spraying with per-QP reordering"
)]
struct Cli {
    /// Configuration file (TOML). Default: the embedded demo configuration.
    #[arg(long, short, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Validate the configuration and print what it describes.
    Check,
    /// Print the embedded default configuration, each key annotated with its type, default,
    /// range and meaning.
    ShowConfig,
    /// Write the configuration reference (every key: type, default, range, meaning) as
    /// Markdown.
    ConfigReference {
        /// File to write (`-`: standard output).
        #[arg(long, default_value = sprayswitch_control::config::reference::REFERENCE_PATH)]
        out: PathBuf,
    },
    /// Run the switch.
    Run {
        /// Stop after this many seconds.
        #[arg(long)]
        duration: Option<f64>,
        /// Print counters every this many seconds (0: only at the end).
        #[arg(long, default_value_t = 0.0)]
        stats_interval: f64,
        /// Control socket for sprayctl (mode 0600). Default: /run/sprayswitch/<switch name>.sock.
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Run without a control socket.
        #[arg(long, conflicts_with = "socket")]
        no_socket: bool,
        /// Serve Prometheus metrics at http://ADDR/metrics (loopback only), e.g. 127.0.0.1:9464.
        #[arg(long)]
        metrics: Option<std::net::SocketAddr>,
    },
}

/// Where and how the control plane listens.
struct ControlOpts {
    socket: Option<PathBuf>,
    metrics: Option<std::net::SocketAddr>,
}

fn load_config(path: &Option<PathBuf>) -> anyhow::Result<Config> {
    Ok(match path {
        Some(p) => Config::load(p)?,
        None => Config::parse(DEFAULT_CONFIG, "<embedded default>")?,
    })
}

fn load(path: &Option<PathBuf>) -> anyhow::Result<Validated> {
    Ok(load_config(path)?.validate()?)
}

/// Writes the configuration reference to `out` (`-`: standard output), creating its directory.
fn write_reference(out: &std::path::Path) -> anyhow::Result<()> {
    let text = sprayswitch_control::config::reference::markdown();
    if out == std::path::Path::new("-") {
        print!("{text}");
        return Ok(());
    }
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(out, text).with_context(|| format!("writing {}", out.display()))?;
    println!("wrote {}", out.display());
    Ok(())
}

fn describe(v: &Validated) {
    let t = &v.tables;
    println!(
        "switch {}: {} ports, {} uplink groups, {} routes, {} workers, spray policy {}",
        v.name,
        t.ports.len(),
        t.groups.len(),
        t.fib.len(),
        v.run.workers,
        t.policy.name()
    );
    for (p, b) in t.ports.iter().zip(&v.backends) {
        let addrs: Vec<String> = p
            .addresses
            .iter()
            .map(|(a, l)| format!("{a}/{l}"))
            .collect();
        let backend = match b {
            Backend::Mem => "mem".to_string(),
            Backend::Real {
                kind,
                interface,
                queues,
                xdp_mode,
                rings,
                busy_poll_us,
                rx_buffers,
            } => format!(
                "{kind:?} on {interface} (queues {queues}, xdp mode {xdp_mode:?}, rings {}/{} \
                 fill, busy poll {}, {rx_buffers} receive buffers)",
                rings.0,
                rings.1,
                busy_poll_us.map_or("off".into(), |u| format!("{u} us"))
            ),
            Backend::Dpdk {
                device,
                queues,
                ring,
            } => format!("dpdk {device} (queues {queues}, rings {ring})"),
            Backend::Pcap { input, output, .. } => format!(
                "pcap in={} out={}",
                input
                    .as_ref()
                    .map_or("-".into(), |p| p.display().to_string()),
                output
                    .as_ref()
                    .map_or("-".into(), |p| p.display().to_string())
            ),
        };
        println!(
            "  port {:<8} {:?} mtu {} pmtu {} {} [{}]",
            p.name,
            p.role,
            p.mtu,
            p.pmtu.bytes(),
            backend,
            addrs.join(", ")
        );
    }
    for g in &t.groups {
        let names: Vec<&str> = g
            .ports
            .iter()
            .map(|i| t.ports[usize::from(*i)].name.as_str())
            .collect();
        println!(
            "  group {} = {} weights {:?}",
            g.name,
            names.join(","),
            g.weights
        );
    }
    for (pre, target) in t.fib.iter() {
        println!("  route {pre} -> {target:?}");
    }
}

fn print_stats(s: &Stats) {
    println!(
        "rx {} pkts {} bytes, tx {} pkts {} bytes, replies {}, sprayed {}, hashed {}, fast path {}",
        s.rx_pkts, s.rx_bytes, s.tx_pkts, s.tx_bytes, s.replies, s.sprayed, s.hashed, s.fast_path
    );
    for r in DropReason::ALL {
        let n = s.dropped(r);
        if n > 0 {
            println!("  drop_{}: {n}", r.name());
        }
    }
    for p in &s.ports {
        println!(
            "  port {:<8} rx {:>10} tx {:>10} tx_busy {} tx_queue_drops {} backend_drops {}",
            p.name, p.rx_pkts, p.tx_pkts, p.tx_busy, p.tx_queue_drops, p.backend_drops
        );
    }
    // The reorder stage's totals that moved (all of them are in `sprayctl show counters`).
    let moved: Vec<String> = s
        .reorder
        .rows()
        .into_iter()
        .filter(|r| r.value > 0)
        .map(|r| format!("{} {}", r.name, r.value))
        .collect();
    if !moved.is_empty() {
        println!("  reorder: {}", moved.join(", "));
    }
}

fn run(
    cfg: Config,
    path: Option<PathBuf>,
    duration: Option<f64>,
    interval: f64,
    copts: ControlOpts,
) -> anyhow::Result<()> {
    let v = cfg.validate()?;
    let opened = open_ports(&v)?;
    for (info, what) in v.tables.ports.iter().zip(&opened.report) {
        log::info!("port {}: {what}", info.name);
    }
    let (ports, replaying, report) = (opened.ports, opened.replaying, opened.report);
    let socket = copts.socket.clone();
    let mut server = ControlServer::bind(socket.as_deref(), copts.metrics)?;
    if let Some(p) = &socket {
        log::info!("control socket {}", p.display());
    }
    if let Some(a) = server.metrics_addr() {
        log::info!("metrics at http://{a}/metrics");
    }

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, hup.clone())
        .context("installing the SIGHUP handler")?;
    let name = v.name.clone();
    let switch = v.clone().start(ports)?;
    log::info!("switch {name} running");
    let mut ctl = Control::new(switch, cfg, v, path);
    ctl.set_backends(report);
    let start = Instant::now();
    let mut last = Instant::now();
    let mut last_periodic = Instant::now();
    loop {
        // The control thread: requests and scrapes, reloads, periodic work.
        if !server.poll(&mut ctl) {
            std::thread::sleep(Duration::from_millis(5));
        }
        if hup.swap(false, Ordering::Relaxed) {
            match ctl.handle(&sprayswitch_control::ctl::Request::Reload { file: None }) {
                Ok(_) => {}
                Err(e) => log::error!("SIGHUP reload refused, nothing changed: {e}"),
            }
        }
        if last_periodic.elapsed() >= Duration::from_secs(1) {
            ctl.periodic();
            last_periodic = Instant::now();
        }
        let switch = ctl.switch();
        if stop.load(Ordering::Relaxed) {
            log::info!("signal received, stopping");
            break;
        }
        if duration.is_some_and(|d| start.elapsed().as_secs_f64() >= d) {
            break;
        }
        if !replaying.is_empty() && switch.drained(&replaying) {
            // Give the workers a moment to flush what the last frames produced.
            std::thread::sleep(Duration::from_millis(50));
            log::info!("every replayed capture has ended");
            break;
        }
        if interval > 0.0 && last.elapsed().as_secs_f64() >= interval {
            print_stats(&switch.stats());
            last = Instant::now();
        }
    }
    drop(server);
    let stopped = ctl.into_switch().stop();
    print_stats(&stopped.stats);
    if stopped.unsent > 0 {
        println!(
            "{} packets could not be sent before shutdown",
            stopped.unsent
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    if let Some(done) = docs::generate_if_asked(Cli::command) {
        return done;
    }
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::ShowConfig => {
            print!(
                "{}",
                sprayswitch_control::config::reference::annotated_default()
            );
            Ok(())
        }
        Cmd::ConfigReference { out } => write_reference(&out),
        Cmd::Check => load(&cli.config).map(|v| {
            describe(&v);
            println!("configuration is valid");
        }),
        Cmd::Run {
            duration,
            stats_interval,
            socket,
            no_socket,
            metrics,
        } => load_config(&cli.config).and_then(|cfg| {
            let socket = if no_socket {
                None
            } else {
                Some(socket.unwrap_or_else(|| {
                    PathBuf::from(format!("/run/sprayswitch/{}.sock", cfg.switch.name))
                }))
            };
            run(
                cfg,
                cli.config.clone(),
                duration,
                stats_interval,
                ControlOpts { socket, metrics },
            )
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sprayswitch: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap's own consistency checks of the command line (names, conflicts, defaults), which
    /// the man pages and completions are generated from.
    #[test]
    fn the_command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
