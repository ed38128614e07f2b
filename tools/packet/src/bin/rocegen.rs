//! `rocegen`: the RoCEv2 traffic generator on a real interface. Run `rocegen responder` on one
//! host and `rocegen requester --peer ADDR` on another: the requester connects its QPs with RDMA
//! CM and posts WRITEs, READs or SENDs; the responder behaves as a Go-Back-N (ConnectX-5,
//! Soft-RoCE), selective-repeat (ConnectX-6/7) or ideal RNIC. Both print a report (JSON with
//! `--json`). The host's own address, MAC and default gateway are read from the interface.

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use sprayswitch::port::Port;
use sprayswitch::wire::Pmtu;
use sprayswitch_models::dcqcn::DcqcnConfig;
use sprayswitch_models::rnic::ReceiverMode;
use sprayswitch_packet::gen::{run_requester, run_responder, GenOpts, Local, Op, ResponderOpts};

#[derive(Clone, Copy, ValueEnum)]
enum Backend {
    /// AF_PACKET: the host's kernel keeps its interface (ARP, other traffic).
    AfPacket,
    /// AF_XDP: faster, but the interface's queue 0 belongs to rocegen while it runs (the
    /// kernel stops seeing its frames, ARP included).
    AfXdp,
}

#[derive(Clone, Copy, ValueEnum)]
enum OpArg {
    Write,
    Read,
    Send,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    /// Drop out-of-order requests, NAK the expected PSN once (ConnectX-5, Soft-RoCE).
    Gbn,
    /// Accept out of order into a bitmap, NAK the expected PSN at once (ConnectX-6/7).
    Sr,
    /// Accept anything.
    Ideal,
}

#[derive(Parser)]
#[command(
    name = "rocegen",
    version,
    about = "RoCEv2 traffic generator with RNIC models, on a real interface"
)]
struct Cli {
    /// Interface to use.
    #[arg(long, short, global = true, default_value = "eth0")]
    interface: String,
    /// How to open it.
    #[arg(long, value_enum, global = true, default_value = "af-packet")]
    backend: Backend,
    /// This host's IPv4 address (default: the interface's).
    #[arg(long, global = true)]
    ip: Option<Ipv4Addr>,
    /// The gateway (default: the default route's, out of the interface).
    #[arg(long, global = true)]
    gateway: Option<Ipv4Addr>,
    /// RoCE path MTU.
    #[arg(long, global = true, default_value_t = 1024)]
    pmtu: u32,
    /// Print the report as JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    role: Role,
}

#[derive(Subcommand)]
enum Role {
    /// Connect QPs to a responder and run a workload.
    Requester {
        /// The responder's address.
        #[arg(long)]
        peer: Ipv4Addr,
        /// Queue pairs.
        #[arg(long, default_value_t = 4)]
        qps: u32,
        /// Operation.
        #[arg(long, value_enum, default_value = "write")]
        op: OpArg,
        /// Message size, bytes.
        #[arg(long, default_value_t = 65536)]
        size: u32,
        /// Messages per QP.
        #[arg(long, default_value_t = 100)]
        messages: u32,
        /// Packets in flight per QP.
        #[arg(long, default_value_t = 64)]
        window: u32,
        /// Open-loop rate per QP, Mbit/s (default: as fast as the window allows).
        #[arg(long)]
        rate_mbps: Option<f64>,
        /// Retransmit only NAKed packets (use against `--mode sr`).
        #[arg(long)]
        selective: bool,
        /// Retransmission timeout, ms (perftest's default is 67).
        #[arg(long, default_value_t = 67)]
        timeout_ms: u64,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 60.0)]
        deadline: f64,
        /// First UDP source port (QP i uses base + i).
        #[arg(long, default_value_t = 49152)]
        sport_base: u16,
        /// Run DCQCN on every QP with this profile: conweave, connectx or paper (see
        /// `sprayswitch_models::dcqcn`); each QP starts at --line-rate-gbps and slows down on CNPs.
        #[arg(long)]
        dcqcn: Option<String>,
        /// The NIC's line rate for DCQCN, Gbit/s.
        #[arg(long, default_value_t = 10.0)]
        line_rate_gbps: f64,
    },
    /// Serve every QP that connects, until SIGINT/SIGTERM or idle.
    Responder {
        /// RNIC behaviour.
        #[arg(long, value_enum, default_value = "gbn")]
        mode: ModeArg,
        /// Coalesce: one ACK per this many requests (and at message ends).
        #[arg(long, default_value_t = 8)]
        ack_every: u32,
        /// Exit after this many seconds without traffic, once a QP connected.
        #[arg(long, default_value_t = 2.0)]
        idle_exit: f64,
        /// DCQCN's notification point: at most one CNP per QP per this many microseconds for
        /// CE-marked requests (0: send none).
        #[arg(long, default_value_t = 50)]
        cnp_interval_us: u64,
    },
}

#[cfg(target_os = "linux")]
fn run(cli: Cli) -> anyhow::Result<()> {
    use sprayswitch::port::afpacket::AfPacketPort;
    use sprayswitch::port::sys;
    use sprayswitch::port::xdp::{XdpOptions, XdpUmem};
    use std::os::fd::AsRawFd;

    let ctl = sys::ioctl_socket()?;
    let ifn = &cli.interface;
    let mac = sys::ifmac(ctl.as_raw_fd(), ifn).with_context(|| format!("interface {ifn}"))?;
    let ip = match cli.ip {
        Some(a) => a,
        None => sys::ifaddr4(ctl.as_raw_fd(), ifn)
            .with_context(|| format!("{ifn} has no IPv4 address: give --ip"))?,
    };
    let gateway = cli
        .gateway
        .or_else(|| sys::default_gateway4(ifn))
        .with_context(|| format!("no default route out of {ifn}: give --gateway"))?;
    let pmtu = Pmtu::new(cli.pmtu)
        .map_err(|v| anyhow::anyhow!("--pmtu {v}: use 256, 512, 1024, 2048 or 4096"))?;
    let local = Local { mac, ip, gateway };
    let mut umem = XdpUmem::new(8192, 4096)?;
    let mut port: Box<dyn Port> = match cli.backend {
        Backend::AfPacket => Box::new(AfPacketPort::open(ifn, ifn)?),
        Backend::AfXdp => Box::new(umem.open(ifn, &XdpOptions::new(ifn))?),
    };
    match cli.role {
        Role::Requester {
            peer,
            qps,
            op,
            size,
            messages,
            window,
            rate_mbps,
            selective,
            timeout_ms,
            deadline,
            sport_base,
            dcqcn,
            line_rate_gbps,
        } => {
            anyhow::ensure!(
                line_rate_gbps.is_finite() && line_rate_gbps > 0.0,
                "--line-rate-gbps {line_rate_gbps}: give a rate above 0"
            );
            let dcqcn = dcqcn
                .map(|p| DcqcnConfig::named(&p, (line_rate_gbps * 1e9) as u64))
                .transpose()
                .map_err(|e| anyhow::anyhow!("--dcqcn: {e}"))?;
            let o = GenOpts {
                qps,
                op: match op {
                    OpArg::Write => Op::Write,
                    OpArg::Read => Op::Read,
                    OpArg::Send => Op::Send,
                },
                size,
                messages,
                window,
                rate_bps: rate_mbps.map(|m| (m * 1e6) as u64),
                pmtu,
                selective,
                timeout: Duration::from_millis(timeout_ms),
                deadline: Duration::from_secs_f64(deadline),
                sport_base,
                dcqcn,
            };
            let r = run_requester(port.as_mut(), &local, peer, &o)?;
            if cli.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "{}/{} messages in {:.3} s: goodput {:.1} Mbit/s; completion us p50 {:.0} p90 {:.0} p99 {:.0} p99.9 {:.0} max {:.0}; NAKs {}, retransmitted {}, timeouts {}, sent/needed {:.3}; CNPs {}, rate cuts {}",
                    r.completed, r.posted, r.seconds, r.goodput_bps / 1e6,
                    r.completion_us[0], r.completion_us[1], r.completion_us[2], r.completion_us[3], r.completion_us[4],
                    r.naks, r.retransmitted, r.timeouts, r.sent_ratio, r.cnps, r.rate_cuts
                );
            }
            anyhow::ensure!(
                r.completed == r.posted,
                "{} of {} messages did not complete",
                r.posted - r.completed,
                r.posted
            );
        }
        Role::Responder {
            mode,
            ack_every,
            idle_exit,
            cnp_interval_us,
        } => {
            let stop = Arc::new(AtomicBool::new(false));
            for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
                signal_hook::flag::register(sig, stop.clone())?;
            }
            let mode = match mode {
                ModeArg::Gbn => ReceiverMode::Gbn,
                ModeArg::Sr => ReceiverMode::Sr,
                ModeArg::Ideal => ReceiverMode::Ideal,
            };
            log::info!("responder on {ifn} ({ip}, gateway {gateway})");
            let ro = ResponderOpts {
                mode,
                ack_every,
                pmtu,
                idle_exit: Duration::from_secs_f64(idle_exit),
                cnp_interval_ns: (cnp_interval_us > 0).then(|| cnp_interval_us * 1000),
            };
            let r = run_responder(port.as_mut(), &local, &ro, &stop)?;
            if cli.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "{} QPs: {} requests accepted, {} out of sequence, {} duplicates, {} NAKs sent, {} marked CE, {} CNPs sent",
                    r.qps, r.accepted, r.out_of_sequence, r.duplicates, r.naks, r.ce_marked, r.cnps_sent
                );
            }
        }
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn run(_: Cli) -> anyhow::Result<()> {
    anyhow::bail!("rocegen opens real interfaces: Linux only")
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rocegen: {e:#}");
            ExitCode::FAILURE
        }
    }
}
