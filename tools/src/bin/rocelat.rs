//! `rocelat`: one-way latency of timestamped RoCEv2 probes through a sprayswitch rack pair
//! (in one process) and, in the same run, over a direct link with the fastest path's delay.
//! Percentiles from HdrHistogram; `--log FILE` writes an HdrHistogram interval log.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use sprayswitch_tools::lat::{line, measure, LatOpts};

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
