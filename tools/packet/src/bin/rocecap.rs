//! `rocecap`: reads pcap/pcapng captures of RoCEv2 traffic.
//!
//! `rocecap decode FILE [--json]` prints one line (or JSON object) per frame;
//! `rocecap analyze FILE [--json]` prints one report per QP stream: PSN gaps, reordering depth,
//! retransmissions, NAKs, out-of-order fraction;
//! `rocecap transit A B [--json]` prints the transit time of the packets seen at both capture
//! points, per direction (p50, p90, p99, max), and what only one of them saw;
//! `rocecap loop A B [--quiet-us N] [--json]` splits RC requesters' ACK round trips into the
//! network out, the responder's turnaround, the network back and the requester's resume, and
//! sums the time the requesters sent nothing, by how full their window was.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use sprayswitch::pcap::CaptureReader;
use sprayswitch::wire::Pmtu;
use sprayswitch_packet::capture::decode::{decode, human_line};
use sprayswitch_packet::capture::CapturePair;

#[derive(Parser)]
#[command(
    name = "rocecap",
    version,
    about = "Decode and analyse captures of RoCEv2 traffic"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print one line per frame: addresses, ports, opcode, QP, PSN, flags, AETH, payload length,
    /// ICRC check, or why the frame could not be parsed. Non-RoCE frames are listed as such.
    Decode {
        /// A pcap or pcapng file with Ethernet frames.
        file: PathBuf,
        /// One JSON object per line instead of text.
        #[arg(long)]
        json: bool,
        /// Path MTU in bytes (256, 512, 1024, 2048 or 4096) used to size READ requests.
        #[arg(long, default_value_t = 1024, value_parser = parse_pmtu)]
        pmtu: u32,
    },
    /// Print one report per QP stream (source, destination, DestQP, direction): packets, PSN
    /// range, gaps, packets that arrived reordered and how deep, retransmissions, NAKs, and the
    /// out-of-order fraction.
    Analyze {
        /// A pcap or pcapng file with Ethernet frames.
        file: PathBuf,
        /// One JSON object per stream instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Transit time of RoCE packets between two capture points on one machine (one clock):
    /// packets seen once in each capture, per direction, p50/p90/p99/max; packets only one
    /// capture saw; identities repeated within a capture (retransmissions), left out.
    Transit {
        /// The first capture (pcap or pcapng).
        a: PathBuf,
        /// The second capture.
        b: PathBuf,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Where RC requesters' ACK round trips go, from two capture points on one machine: A near
    /// the requesters, B near the responders. Per positive ACK: the acknowledged request from A
    /// to B, the responder's turnaround at B, the ACK from B to A; a waiting requester's resume
    /// after the ACK; and the requesters' quiet spells by PSNs in flight when they began.
    Loop {
        /// The capture near the requesters (pcap or pcapng).
        a: PathBuf,
        /// The capture near the responders.
        b: PathBuf,
        /// A requester sending nothing for this long is waiting (microseconds).
        #[arg(long, default_value_t = 500)]
        quiet_us: u64,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Feeds every frame of capture `a` and of capture `b` to `pair`, with its timestamp.
fn read_pair(a: &PathBuf, b: &PathBuf, pair: &mut impl CapturePair) -> anyhow::Result<()> {
    for (file, first) in [(a, true), (b, false)] {
        let mut reader =
            CaptureReader::open(file).with_context(|| format!("cannot read {}", file.display()))?;
        while reader
            .next_frame(|f| {
                if first {
                    pair.add_a(f.ts_ns, f.data)
                } else {
                    pair.add_b(f.ts_ns, f.data)
                }
            })
            .with_context(|| format!("{}", file.display()))?
            .is_some()
        {}
    }
    Ok(())
}

fn run_loop(a: &PathBuf, b: &PathBuf, quiet_us: u64, json: bool) -> anyhow::Result<()> {
    let mut l = sprayswitch_packet::capture::ackloop::AckLoop::default();
    read_pair(a, b, &mut l)?;
    let r = l.report(quiet_us.saturating_mul(1_000));
    if json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!("{}", sprayswitch_packet::capture::ackloop::human(&r));
    }
    Ok(())
}

fn run_transit(a: &PathBuf, b: &PathBuf, json: bool) -> anyhow::Result<()> {
    let mut t = sprayswitch_packet::capture::transit::Transit::default();
    read_pair(a, b, &mut t)?;
    let r = t.report();
    if json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!("{}", sprayswitch_packet::capture::transit::human(&r));
    }
    Ok(())
}

fn run_analyze(file: &PathBuf, json: bool) -> anyhow::Result<()> {
    let mut reader =
        CaptureReader::open(file).with_context(|| format!("cannot read {}", file.display()))?;
    let mut a = sprayswitch_packet::capture::analyze::Analyzer::default();
    while reader
        .next_frame(|f| a.add(f.data))
        .with_context(|| format!("{}", file.display()))?
        .is_some()
    {}
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for r in a.reports() {
        let line = if json {
            serde_json::to_string(&r)?
        } else {
            sprayswitch_packet::capture::analyze::human(&r)
        };
        if writeln!(out, "{line}").is_err() {
            return Ok(());
        }
    }
    if !json {
        let _ = writeln!(out, "{} frames were not RoCEv2", a.other_frames);
    }
    out.flush().ok();
    Ok(())
}

fn parse_pmtu(s: &str) -> Result<u32, String> {
    let v: u32 = s.parse().map_err(|_| format!("'{s}' is not a number"))?;
    Pmtu::new(v)
        .map(|p| p.bytes())
        .map_err(|v| format!("{v} is not a path MTU: use 256, 512, 1024, 2048 or 4096"))
}

fn run_decode(file: &PathBuf, json: bool, pmtu: Pmtu) -> anyhow::Result<()> {
    let mut reader =
        CaptureReader::open(file).with_context(|| format!("cannot read {}", file.display()))?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut t0 = None;
    loop {
        let rec = reader
            .next_frame(|f| decode(f, pmtu))
            .with_context(|| format!("{}", file.display()))?;
        let Some(rec) = rec else { break };
        let line = if json {
            serde_json::to_string(&rec)?
        } else {
            let t = *t0.get_or_insert(rec.ts_ns);
            human_line(&rec, t)
        };
        if writeln!(out, "{line}").is_err() {
            // Reader went away (for example `| head`): stop quietly.
            return Ok(());
        }
    }
    out.flush().ok();
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.cmd {
        Cmd::Decode { file, json, pmtu } => {
            run_decode(file, *json, Pmtu::new(*pmtu).unwrap_or_default())
        }
        Cmd::Analyze { file, json } => run_analyze(file, *json),
        Cmd::Transit { a, b, json } => run_transit(a, b, *json),
        Cmd::Loop {
            a,
            b,
            quiet_us,
            json,
        } => run_loop(a, b, *quiet_us, *json),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rocecap: {e:#}");
            ExitCode::FAILURE
        }
    }
}
