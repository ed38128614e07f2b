//! `vethbench`: forwarding throughput of the port backends on veth pairs in namespaces, against
//! the kernel's bridge and IP forwarding. The logic is [`sprayswitch_harness::vethbench`].

use std::process::ExitCode;

use clap::Parser;
use sprayswitch_harness::vethbench::{run, Opts};

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run(&Opts::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vethbench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
