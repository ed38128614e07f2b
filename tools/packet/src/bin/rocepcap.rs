//! `rocepcap`: writes a capture of RoCEv2 RC WRITE ONLY frames of many QPs, one frame per QP in
//! turn, each QP's PSNs counting up from its own start: a replay source for benchmarks (DPDK's
//! `net_pcap` with `rx_pcap=FILE,infinite_rx=1`, or a `backend = "pcap"` port). A replay that
//! wraps around starts every QP's PSNs over: fine where PSNs do not matter (a source ToR
//! forwarding and spraying), not for a destination's reorder stage.
//!
//! The frames go from `--src-ip` (one host) to `--dst-ip` and the addresses after it (one per
//! QP, up to `--dsts`), UDP source port `--sport-base + QP`, DestQP `0x100 + QP`; a frame of
//! `--frame-bytes` (without FCS) carries `frame-bytes - 74` bytes of payload after its RETH.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use sprayswitch::pcap::PcapWriter;
use sprayswitch::wire::{BthRepr, ExtRepr, IpRepr, Opcode, Psn, RethRepr, RoceFrameRepr};

/// Bytes of a WRITE ONLY frame around its payload: Ethernet, IPv4, UDP, BTH, RETH, ICRC.
const OVERHEAD: usize = 14 + 20 + 8 + 12 + 16 + 4;

#[derive(Parser)]
#[command(
    name = "rocepcap",
    version,
    about = "Writes a pcap of RoCEv2 RC WRITE ONLY frames of many QPs (a replay source for benchmarks)"
)]
struct Cli {
    /// The capture to write.
    #[arg(long)]
    out: PathBuf,
    /// Queue pairs, 1 to 65536.
    #[arg(long, default_value_t = 64)]
    qps: u32,
    /// Frames per QP (the file holds qps x this many).
    #[arg(long, default_value_t = 64)]
    per_qp: u32,
    /// Frame size without FCS, bytes: 74 (no payload) to 9000.
    #[arg(long, default_value_t = 90)]
    frame_bytes: usize,
    /// Source MAC.
    #[arg(long, default_value = "02:5a:00:00:01:02")]
    src_mac: String,
    /// Destination MAC (the switch port's).
    #[arg(long, default_value = "02:5a:01:01:00:01")]
    dst_mac: String,
    /// Source address.
    #[arg(long, default_value = "10.1.1.2")]
    src_ip: Ipv4Addr,
    /// First destination address.
    #[arg(long, default_value = "198.18.1.2")]
    dst_ip: Ipv4Addr,
    /// Destination addresses, counting up from --dst-ip (QP i goes to the (i mod dsts)-th).
    #[arg(long, default_value_t = 8)]
    dsts: u32,
    /// UDP source port of QP 0 (QP i uses base + i, wrapping within 49152-65535).
    #[arg(long, default_value_t = 49152)]
    sport_base: u16,
}

fn mac(s: &str) -> anyhow::Result<[u8; 6]> {
    let mut m = [0u8; 6];
    let parts: Vec<&str> = s.split(':').collect();
    anyhow::ensure!(parts.len() == 6, "MAC {s:?}: six hex bytes with ':'");
    for (b, p) in m.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).with_context(|| format!("MAC {s:?}"))?;
    }
    Ok(m)
}

fn run(cli: &Cli) -> anyhow::Result<u64> {
    anyhow::ensure!(
        (1..=65_536).contains(&cli.qps),
        "--qps {}: 1 to 65536",
        cli.qps
    );
    anyhow::ensure!(cli.per_qp >= 1, "--per-qp: at least 1");
    anyhow::ensure!(
        (OVERHEAD..=9000).contains(&cli.frame_bytes),
        "--frame-bytes {}: {OVERHEAD} to 9000",
        cli.frame_bytes
    );
    anyhow::ensure!(cli.dsts >= 1, "--dsts: at least 1");
    let (src_mac, dst_mac) = (mac(&cli.src_mac)?, mac(&cli.dst_mac)?);
    let payload = vec![0x5Au8; cli.frame_bytes - OVERHEAD];
    let mut w =
        PcapWriter::create(&cli.out).with_context(|| format!("creating {}", cli.out.display()))?;
    let first = u32::from(cli.dst_ip);
    for k in 0..cli.per_qp {
        for q in 0..cli.qps {
            let dst = Ipv4Addr::from(first.wrapping_add(q % cli.dsts));
            let ip = IpRepr::between(cli.src_ip.into(), dst.into())
                .context("addresses of one family")?;
            let start = q.wrapping_mul(7919) & 0xff_ffff;
            let bth = BthRepr::new(Opcode::RcWriteOnly, 0x100 + q, Psn::new(start).add(k));
            let ext = ExtRepr {
                reth: Some(RethRepr {
                    virtual_address: 0x1000 + u64::from(k) * payload.len() as u64,
                    rkey: 5,
                    dma_len: payload.len() as u32,
                }),
                ..ExtRepr::default()
            };
            let sport = 49_152 + ((u32::from(cli.sport_base) + q) % 16_384) as u16;
            let f = RoceFrameRepr {
                udp_src_port: sport,
                ..RoceFrameRepr::new(src_mac, dst_mac, ip, bth)
            }
            .with_ext(ext)
            .with_payload(&payload)
            .to_vec()
            .map_err(|e| anyhow::anyhow!("building a frame: {e:?}"))?;
            anyhow::ensure!(f.len() == cli.frame_bytes, "frame of {} bytes", f.len());
            w.write_frame(u64::from(k) * 1_000, &f)?;
        }
    }
    w.flush()?;
    Ok(w.frames_written())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(n) => {
            println!(
                "{}: {n} frames of {} bytes, {} QPs",
                cli.out.display(),
                cli.frame_bytes,
                cli.qps
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rocepcap: {e:#}");
            ExitCode::FAILURE
        }
    }
}
