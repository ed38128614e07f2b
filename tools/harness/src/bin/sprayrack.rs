//! `sprayrack`: writes the configuration of one ToR of a rack pair, for the network-namespace
//! topology of `scripts/netns-rack.sh` (interfaces named like the ports: `h1`.., `u0`..;
//! addresses and MACs as the in-process rack pair uses them, see `sprayswitch_harness::rack::topo`).

use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use sprayswitch_harness::rack::topo::{tor_config_text, PathSpec, RackPairSpec, TorArgs};

#[derive(Clone, Copy, ValueEnum)]
enum Rack {
    A,
    B,
}

#[derive(Parser)]
#[command(
    name = "sprayrack",
    version,
    about = "Print the configuration of one ToR of a rack pair on real interfaces"
)]
struct Cli {
    /// Which ToR.
    #[arg(long, value_enum)]
    rack: Rack,
    /// Hosts per rack (downlinks h1..hN).
    #[arg(long, default_value_t = 2)]
    hosts: usize,
    /// Fabric paths (uplinks u0..u(N-1)).
    #[arg(long, default_value_t = 4)]
    paths: usize,
    #[command(flatten)]
    tor: TorArgs,
    /// Pin the worker to this core.
    #[arg(long)]
    core: Option<usize>,
    /// Idle policy of the workers: backoff, wait (event-driven) or spin.
    #[arg(long, default_value = "backoff")]
    idle: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let policy = match cli.tor.spray_policy() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sprayrack: {e}");
            return ExitCode::FAILURE;
        }
    };
    let spec = RackPairSpec {
        hosts: cli.hosts,
        paths: vec![PathSpec::delay(0); cli.paths],
        policy,
        ..RackPairSpec::default()
    };
    let rack = match cli.rack {
        Rack::A => 1,
        Rack::B => 2,
    };
    let t = cli.tor.tor_text(&cli.idle, cli.core);
    // Refuse to print something the switch would refuse.
    let text = match tor_config_text(&spec, rack, &t) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sprayrack: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    print!("{text}");
    ExitCode::SUCCESS
}
