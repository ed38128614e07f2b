//! `rxerack`: the analysis of `scripts/rxe-rack.sh`'s runs (perftest between Soft-RoCE guests
//! through the rack). The script runs the guests and the rack; this lists the tests, samples the
//! guests' threads, turns what a mode run left into a checked record, and prints the tables.
//! The logic is [`sprayswitch_harness::rxerack`].

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use sprayswitch_harness::rxerack::report::{summary, ModeRecord};
use sprayswitch_harness::rxerack::threads::{sample_until_gone, Sampled};
use sprayswitch_harness::rxerack::{host, profile, record, usage_text, RunFiles};

#[derive(Parser)]
#[command(
    name = "rxerack",
    about = "Analysis of scripts/rxe-rack.sh runs: test lists, samples, records, tables"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The profile's tests with the name each has in the tables.
    List {
        /// `quick` (CI) or `full`.
        profile: String,
        /// A `;`-separated list that replaces the profile's tests.
        #[arg(long)]
        tests: Option<String>,
        /// RoCE path MTUs that replace the profile's (space-separated).
        #[arg(long)]
        pmtus: Option<String>,
        /// The modes the run will have (printed with the list).
        #[arg(long)]
        modes: Option<String>,
    },
    /// The profile's tests, `;`-separated (what the guests run).
    Tests {
        /// `quick` or `full`.
        profile: String,
    },
    /// The profile's RoCE path MTUs, space-separated.
    Pmtus {
        /// `quick` or `full`.
        profile: String,
    },
    /// CPU seconds and wake-ups of the named processes, read from /proc now, and the time since
    /// the mode started (what `mode` turns into the CPU line).
    Usage {
        /// When the mode started (seconds since the epoch, as `date +%s.%N` prints it).
        #[arg(long)]
        since: f64,
        /// Said after the mode in the CPU line (the wire's path, for example).
        #[arg(long)]
        note: Option<String>,
        /// Processes, as NAME=PID.
        procs: Vec<String>,
    },
    /// Samples the guests' qemu threads every 0.2 s into a file until both are gone.
    Sample {
        /// The server's qemu process and tap, PID:TAP.
        #[arg(long)]
        server: String,
        /// The client's qemu process and tap, PID:TAP.
        #[arg(long)]
        client: String,
        /// The client's console log (to see which test runs).
        #[arg(long = "client-log")]
        client_log: PathBuf,
        /// Where to append the samples.
        #[arg(long)]
        out: PathBuf,
    },
    /// Samples both ToRs' counters (what each sprayed, its host port's drops) at the start and
    /// at the end of each test the client's console reports, until it reports all done.
    Tors {
        /// The `sprayctl` binary.
        #[arg(long)]
        sprayctl: PathBuf,
        /// ToR A's control socket (the client's).
        #[arg(long = "sock-a")]
        sock_a: PathBuf,
        /// ToR B's control socket (the server's).
        #[arg(long = "sock-b")]
        sock_b: PathBuf,
        /// The client's console log.
        #[arg(long = "client-log")]
        client_log: PathBuf,
        /// Where to append the samples.
        #[arg(long)]
        out: PathBuf,
    },
    /// Turns what a mode run left into a record, appends it (one JSON line) to `--records`,
    /// and prints its failures; with `--check`, exits 1 when there is one.
    Mode {
        /// The run's directory (the guests' console logs and the usage line are in it).
        #[arg(long)]
        dir: PathBuf,
        /// Round, from 1.
        #[arg(long, default_value_t = 1)]
        round: u32,
        /// The mode.
        #[arg(long)]
        mode: String,
        /// RoCE path MTU.
        #[arg(long)]
        pmtu: u32,
        /// The tests the guests ran, `;`-separated.
        #[arg(long)]
        tests: String,
        /// The fabric's per-path loss (empty: none).
        #[arg(long, default_value = "")]
        loss: String,
        /// ToR B's `sprayctl --json show counters` (towards the server).
        #[arg(long = "tor-b")]
        tor_b: Option<PathBuf>,
        /// ToR A's (towards the client).
        #[arg(long = "tor-a")]
        tor_a: Option<PathBuf>,
        /// Logs with the emulated paths' lateness lines.
        #[arg(long = "late-log")]
        late_logs: Vec<PathBuf>,
        /// Both ToRs' `sprayctl --json show ports` (the guests' packets for the CPU line).
        #[arg(long = "ports-json")]
        ports_json: Vec<PathBuf>,
        /// The wire forwarder's log (the guests' packets for the CPU line).
        #[arg(long = "wire-log")]
        wire_log: Option<PathBuf>,
        /// The thread sample file (THREADS=1).
        #[arg(long)]
        threads: Option<PathBuf>,
        /// The ToR sample file (`rxerack tors`).
        #[arg(long = "tor-samples")]
        tor_samples: Option<PathBuf>,
        /// The records file to append to.
        #[arg(long)]
        records: PathBuf,
        /// Fail (exit 1) on what the run must not show.
        #[arg(long)]
        check: bool,
    },
    /// Prints the tables of every record.
    Summary {
        /// The records file.
        #[arg(long)]
        records: PathBuf,
    },
}

fn profile_of(name: &str) -> anyhow::Result<profile::Profile> {
    profile::profile(name).with_context(|| format!("profile '{name}': use 'quick' or 'full'"))
}

fn run(cli: Cli) -> anyhow::Result<bool> {
    match cli.cmd {
        Cmd::List {
            profile: p,
            tests,
            pmtus,
            modes,
        } => {
            let mut pr = profile_of(&p)?;
            if let Some(t) = tests.filter(|t| !t.trim().is_empty()) {
                pr.tests = profile::split_tests(&t);
            }
            let pmtus = match pmtus.filter(|m| !m.trim().is_empty()) {
                Some(m) => m,
                None => {
                    let v: Vec<String> = pr.pmtus.iter().map(|m| m.to_string()).collect();
                    v.join(" ")
                }
            };
            let modes = modes.map(|m| format!("; modes {m}")).unwrap_or_default();
            println!(
                "profile {p}: RoCE MTU {pmtus}{modes}; {} tests per mode and MTU:",
                pr.tests.len()
            );
            for (l, t) in profile::labels(&pr.tests).iter().zip(&pr.tests) {
                println!("  {l:<20} {t}");
            }
        }
        Cmd::Tests { profile: p } => println!("{}", profile_of(&p)?.tests.join(";")),
        Cmd::Pmtus { profile: p } => {
            let pmtus: Vec<String> = profile_of(&p)?
                .pmtus
                .iter()
                .map(|m| m.to_string())
                .collect();
            println!("{}", pmtus.join(" "));
        }
        Cmd::Usage { since, note, procs } => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64();
            let mut usage = Vec::new();
            for p in &procs {
                let Some((name, pid)) = p.split_once('=') else {
                    bail!("process '{p}': give NAME=PID");
                };
                let pid: u32 = pid
                    .parse()
                    .with_context(|| format!("process '{p}': bad PID"))?;
                usage.push((name.to_string(), host::usage(pid).unwrap_or_default()));
            }
            print!("{}", usage_text(now - since, note.as_deref(), &usage));
        }
        Cmd::Sample {
            server,
            client,
            client_log,
            out,
        } => {
            let parse = |role: &'static str, s: &str| -> anyhow::Result<Sampled> {
                let (pid, tap) = s
                    .split_once(':')
                    .with_context(|| format!("'{s}': give PID:TAP"))?;
                Ok(Sampled {
                    role,
                    pid: pid.parse().with_context(|| format!("'{s}': bad PID"))?,
                    tap: tap.to_string(),
                })
            };
            sample_until_gone(
                &[parse("srv", &server)?, parse("cli", &client)?],
                &client_log,
                &out,
            )?;
        }
        Cmd::Tors {
            sprayctl,
            sock_a,
            sock_b,
            client_log,
            out,
        } => {
            let tors = sprayswitch_harness::rxerack::tors::Tors {
                sprayctl,
                sockets: [sock_a, sock_b],
            };
            // A mode's guests give up long before this.
            sprayswitch_harness::rxerack::tors::sample(
                &tors,
                &client_log,
                &out,
                std::time::Duration::from_secs(3600),
            )
            .with_context(|| format!("{}", out.display()))?;
        }
        Cmd::Mode {
            dir,
            round,
            mode,
            pmtu,
            tests,
            loss,
            tor_b,
            tor_a,
            late_logs,
            ports_json,
            wire_log,
            threads,
            tor_samples,
            records,
            check,
        } => {
            let sampled = threads.is_some();
            let files = RunFiles {
                dir,
                ports: ports_json,
                wire_log,
                tors: [tor_b, tor_a],
                late_logs,
                threads,
                tor_samples,
            };
            let r = record(round, &mode, pmtu, &tests, &loss, &files);
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&records)
                .with_context(|| format!("{}", records.display()))?;
            writeln!(f, "{}", serde_json::to_string(&r)?)?;
            let failures = r.failures(sampled);
            for l in r.notes() {
                eprintln!("NOTE: {l}");
            }
            if check {
                for l in &failures {
                    eprintln!("FAIL: {l}");
                }
            }
            return Ok(!check || failures.is_empty());
        }
        Cmd::Summary { records } => {
            let text = std::fs::read_to_string(&records)
                .with_context(|| format!("{}", records.display()))?;
            let mut all = Vec::new();
            for (i, l) in text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                let r: ModeRecord = serde_json::from_str(l)
                    .with_context(|| format!("{} line {}", records.display(), i + 1))?;
                all.push(r);
            }
            print!("{}", summary(&all));
        }
    }
    Ok(true)
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("rxerack: {e:#}");
            ExitCode::from(2)
        }
    }
}
