//! `sprayrack`: writes the configuration of one ToR of a rack pair, for the network-namespace
//! topology of `scripts/netns-rack.sh` (interfaces named like the ports: `h1`.., `u0`..;
//! addresses and MACs as the in-process rack pair uses them, see `sprayswitch_tools::topo`).

use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use sprayswitch::engine::SprayPolicy;
use sprayswitch_tools::topo::{tor_config_text, PathSpec, RackPairSpec, TorText};

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
    /// Port backend: af_xdp, af_packet or auto.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// Spray policy (ecmp, round_robin, random, weighted, least_loaded, flowlet).
    #[arg(long, default_value = "round_robin")]
    policy: String,
    /// Turn the reorder stage off (spray without reorder).
    #[arg(long)]
    no_reorder: bool,
    /// Gap hold timeout, microseconds.
    #[arg(long, default_value_t = 5000)]
    hold_us: u64,
    /// Learning window of a new stream, microseconds.
    #[arg(long, default_value_t = 5000)]
    learn_us: u64,
    /// Ethernet MTU of every port.
    #[arg(long, default_value_t = 1500)]
    mtu: u16,
    /// Pin the worker to this core.
    #[arg(long)]
    core: Option<usize>,
    /// Idle policy of the workers: backoff, wait (event-driven) or spin.
    #[arg(long, default_value = "backoff")]
    idle: String,
    /// Longest idle wait in microseconds.
    #[arg(long, default_value_t = 50)]
    idle_us: u32,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let policy: SprayPolicy = match cli.policy.parse() {
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
    let t = TorText {
        host_backend: cli.backend.clone(),
        uplink_backend: cli.backend.clone(),
        host_interface_prefix: None,
        mtu: cli.mtu,
        core: cli.core,
        idle: cli.idle.clone(),
        idle_us: cli.idle_us,
        reorder: !cli.no_reorder,
        hold_us: cli.hold_us,
        learn_us: cli.learn_us,
    };
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
