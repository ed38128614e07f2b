//! `sprayswitch-demo`: a rack pair in one process (two ToRs running the embedded default
//! configuration and its mirror, 2 hosts per rack, 4 rate-limited fabric paths with skewed
//! delays) runs the same RDMA WRITE workloads under ECMP, spraying without reordering, and
//! spraying with sprayswitch's reordering, against Go-Back-N and selective-repeat RNIC models.
//! It prints a table and writes an SVG plot. No privileges needed.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use sprayswitch_tools::rack::demo::{run, svg, table, workloads, DemoOpts, Mode};
use sprayswitch_tools::traffic::rnic::ReceiverMode;

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
    /// Longest a scenario may run, seconds (spraying without reordering may never finish).
    #[arg(long, default_value_t = 3.0)]
    deadline: f64,
    /// Requester window per QP, in packets.
    #[arg(long, default_value_t = 32)]
    window: u32,
    /// Scales the amount of data per QP (1.0: 32 MB per workload).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Receiver models to run: gbn, sr, ideal.
    #[arg(long, value_delimiter = ',', default_value = "gbn,sr")]
    receivers: Vec<String>,
    /// Where to write the SVG plot.
    #[arg(long, default_value = "sprayswitch-demo.svg")]
    svg: PathBuf,
    /// Seed of the port choices, starting PSNs and spray policy.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.path_delays_us.len() != 4 {
        eprintln!("sprayswitch-demo: the embedded default ToR has 4 uplinks: give 4 path delays");
        return ExitCode::FAILURE;
    }
    let mut receivers = Vec::new();
    for r in &cli.receivers {
        receivers.push(match r.as_str() {
            "gbn" => ReceiverMode::Gbn,
            "sr" => ReceiverMode::Sr,
            "ideal" => ReceiverMode::Ideal,
            other => {
                eprintln!("sprayswitch-demo: unknown receiver '{other}' (gbn, sr, ideal)");
                return ExitCode::FAILURE;
            }
        });
    }
    let opts = DemoOpts {
        path_delays_us: cli.path_delays_us.clone(),
        path_rate_mbps: cli.path_rate_mbps,
        deadline_s: cli.deadline,
        window: cli.window,
        seed: cli.seed,
    };
    println!(
        "fabric: 4 paths x {} Mbit/s, one-way delays {:?} us; 2 hosts per rack; RDMA WRITEs",
        opts.path_rate_mbps, opts.path_delays_us
    );
    let mut rows = Vec::new();
    for w in workloads(cli.scale) {
        for r in &receivers {
            for m in Mode::ALL {
                match run(&opts, &w, m, *r) {
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
    match std::fs::write(&cli.svg, svg(&rows)) {
        Ok(()) => println!("plot: {}", cli.svg.display()),
        Err(e) => {
            eprintln!("sprayswitch-demo: cannot write {}: {e}", cli.svg.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
