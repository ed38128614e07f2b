//! `rocelat`: one-way latency of timestamped RoCEv2 probes through a sprayswitch rack pair
//! (in one process) and, in the same run, over a direct link with the fastest path's delay.
//! Percentiles from HdrHistogram; `--log FILE` writes an HdrHistogram interval log. With
//! `--tx [NETNS/]IF --rx [NETNS/]IF --to ADDR` it measures a path between two real interfaces
//! instead (AF_PACKET at both ends, one process and one clock).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use sprayswitch_harness::latency::measure;
use sprayswitch_packet::lat::{line, LatOpts};

#[derive(Parser)]
#[command(
    name = "rocelat",
    version,
    about = "RoCEv2 probe latency through sprayswitch, next to a direct link"
)]
struct Cli {
    /// Probes per path.
    #[arg(long, default_value_t = 2000)]
    probes: u32,
    /// Gap between probes, microseconds.
    #[arg(long, default_value_t = 200)]
    interval_us: u64,
    /// Probe payload, bytes (at least 16).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// One-way delay of each of the 4 fabric paths, microseconds.
    #[arg(long, value_delimiter = ',', default_value = "2,10,25,50")]
    path_delays_us: Vec<u64>,
    /// Write both histograms (tags "switched" and "direct") to this HdrHistogram interval log.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Real ports: send from this interface (`IF` or `NETNS/IF`), through its default gateway.
    /// With `--rx` and `--to`, measures that path instead of the in-process rack pair.
    #[arg(long, requires_all = ["rx", "to"])]
    tx: Option<String>,
    /// Real ports: receive on this interface (`IF` or `NETNS/IF`).
    #[arg(long, requires = "tx")]
    rx: Option<String>,
    /// Real ports: the probes' destination address (the receiving host's).
    #[arg(long, requires = "tx")]
    to: Option<std::net::Ipv4Addr>,
}

/// Opens `[NETNS/]IF` with AF_PACKET (inside the namespace when one is named) and returns the
/// port with the interface's address, MAC and default gateway.
#[cfg(target_os = "linux")]
fn open_real(
    spec: &str,
) -> anyhow::Result<(
    sprayswitch::port::afpacket::AfPacketPort,
    std::net::Ipv4Addr,
    [u8; 6],
    Option<std::net::Ipv4Addr>,
)> {
    use anyhow::Context;
    use sprayswitch::port::afpacket::AfPacketPort;
    use sprayswitch::port::sys;
    use std::os::fd::AsRawFd;
    let (ns, ifn) = match spec.split_once('/') {
        Some((n, i)) => (Some(n.to_string()), i.to_string()),
        None => (None, spec.to_string()),
    };
    std::thread::spawn(move || {
        if let Some(ns) = &ns {
            sys::enter_netns(ns).with_context(|| format!("entering network namespace {ns}"))?;
        }
        let ctl = sys::ioctl_socket()?;
        let ip = sys::ifaddr4(ctl.as_raw_fd(), &ifn)
            .with_context(|| format!("{ifn}: no IPv4 address"))?;
        let mac = sys::ifmac(ctl.as_raw_fd(), &ifn).with_context(|| format!("interface {ifn}"))?;
        let gw = sys::default_gateway4(&ifn);
        Ok((AfPacketPort::open(&ifn, &ifn)?, ip, mac, gw))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("opening {spec} panicked"))?
}

#[cfg(target_os = "linux")]
fn measure_real(
    opts: &LatOpts,
    tx: &str,
    rx: &str,
    to: std::net::Ipv4Addr,
) -> anyhow::Result<hdrhistogram::Histogram<u64>> {
    use sprayswitch_packet::gen::{resolve, Local};
    use sprayswitch_packet::lat::probe_path;
    use std::net::IpAddr;
    let (mut txp, ip, mac, gw) = open_real(tx)?;
    let (mut rxp, ..) = open_real(rx)?;
    // The next hop: the default gateway, or the destination itself when there is none.
    let hop = gw.unwrap_or(to);
    let local = Local {
        mac,
        ip,
        gateway: hop,
    };
    let hop_mac = resolve(&mut txp, &local, hop, std::time::Duration::from_secs(3))?;
    Ok(probe_path(
        opts,
        &mut txp,
        &mut rxp,
        (IpAddr::V4(ip), mac),
        (IpAddr::V4(to), hop_mac),
    ))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.path_delays_us.len() != 4 {
        eprintln!("rocelat: the embedded default ToR has 4 uplinks: give 4 path delays");
        return ExitCode::FAILURE;
    }
    let opts = LatOpts {
        probes: cli.probes,
        interval_us: cli.interval_us,
        size: cli.size,
        path_delays_us: cli.path_delays_us,
    };
    #[cfg(target_os = "linux")]
    if let (Some(tx), Some(rx), Some(to)) = (&cli.tx, &cli.rx, cli.to) {
        return match measure_real(&opts, tx, rx, to) {
            Ok(h) => {
                println!("{}", line(&format!("{tx} -> {rx}"), &h));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rocelat: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let (switched, direct) = match measure(&opts) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("rocelat: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", line("switched", &switched));
    println!("{}", line("direct", &direct));
    if let Some(path) = cli.log {
        let write = || -> anyhow::Result<()> {
            let mut file = std::fs::File::create(&path)?;
            let mut ser = V2DeflateSerializer::new();
            let mut w = IntervalLogWriterBuilder::new()
                .add_comment("rocelat: one-way probe latency in nanoseconds")
                .begin_log_with(&mut file, &mut ser)?;
            let d = std::time::Duration::from_secs(1);
            for (tag, h) in [("switched", &switched), ("direct", &direct)] {
                w.write_histogram(h, std::time::Duration::ZERO, d, Tag::new(tag))
                    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            }
            Ok(())
        };
        if let Err(e) = write() {
            eprintln!("rocelat: cannot write {}: {e:#}", path.display());
            return ExitCode::FAILURE;
        }
        println!("log: {}", path.display());
    }
    ExitCode::SUCCESS
}
