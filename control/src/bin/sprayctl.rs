//! `sprayctl`: talks to a running sprayswitch over its control socket. Prints tables by default,
//! the switch's JSON answer with `--json`. The protocol is one JSON request per line (see the
//! `ctl` module of sprayswitch-control). The unlisted `sprayctl man --out DIR` and
//! `sprayctl completions --shell SHELL` write this command line's man pages and shell
//! completions (the Debian package ships them; docs/packaging.md).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};
use serde_json::{json, Value};

#[path = "shared/docs.rs"]
mod docs;

#[derive(Parser)]
#[command(name = "sprayctl", version, about = "Control a running sprayswitch")]
struct Cli {
    /// The switch's control socket.
    #[arg(long, short, default_value = "/run/sprayswitch/tor-a.sock")]
    socket: PathBuf,
    /// Print the switch's JSON answer.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Show state: ports, uplinks, paths, routes, neighbors, streams, counters, hosts, queues,
    /// workers.
    Show {
        /// What to show.
        what: String,
        /// streams: how many (busiest first).
        #[arg(long)]
        top: Option<usize>,
        /// streams: only this destination QPN.
        #[arg(long)]
        qp: Option<u32>,
    },
    /// Change a setting: `spray-policy P`, `uplink NAME down|up`, `path NAME in|out|auto`,
    /// `hold-timeout US`.
    Set {
        /// spray-policy, uplink, path or hold-timeout.
        what: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// Capture a port's traffic: `start PORT FILE` or `stop PORT`.
    Capture {
        /// start or stop.
        action: String,
        /// The port.
        port: String,
        /// start: the pcap file to write (on the switch's machine).
        file: Option<PathBuf>,
    },
    /// Validate and apply a configuration file (default: the one the switch started with).
    Reload {
        /// The file.
        file: Option<PathBuf>,
    },
    /// `stats clear`: start a fresh measurement window (every `show` counts from now).
    Stats {
        /// clear.
        action: String,
    },
}

fn request(cli: &Cli) -> Result<Value, String> {
    Ok(match &cli.cmd {
        Cmd::Show { what, top, qp } => json!({"cmd": "show", "what": what, "top": top, "qp": qp}),
        Cmd::Set { what, args } => match (what.as_str(), args.as_slice()) {
            ("spray-policy", [p]) => json!({"cmd": "set-spray-policy", "policy": p}),
            ("uplink", [name, state]) => json!({"cmd": "set-uplink", "name": name, "state": state}),
            ("path", [name, pin]) => json!({"cmd": "set-path", "name": name, "pin": pin}),
            ("hold-timeout", [us]) => {
                let us: u64 = us
                    .parse()
                    .map_err(|_| format!("hold-timeout '{us}': microseconds"))?;
                json!({"cmd": "set-hold-timeout", "us": us})
            }
            _ => {
                return Err(
                    "set spray-policy POLICY | set uplink NAME down|up | set path NAME in|out|auto | set hold-timeout US"
                        .into(),
                )
            }
        },
        Cmd::Capture { action, port, file } => match (action.as_str(), file) {
            ("start", Some(f)) => {
                let abs = std::path::absolute(f).map_err(|e| format!("{}: {e}", f.display()))?;
                json!({"cmd": "capture-start", "port": port, "file": abs.display().to_string()})
            }
            ("stop", None) => json!({"cmd": "capture-stop", "port": port}),
            _ => return Err("capture start PORT FILE | capture stop PORT".into()),
        },
        Cmd::Reload { file } => match file {
            // The switch resolves relative paths from its own directory: send an absolute one.
            Some(f) => {
                let abs = std::path::absolute(f).map_err(|e| format!("{}: {e}", f.display()))?;
                json!({"cmd": "reload", "file": abs.display().to_string()})
            }
            None => json!({"cmd": "reload"}),
        },
        Cmd::Stats { action } => match action.as_str() {
            "clear" => json!({"cmd": "stats-clear"}),
            _ => return Err("stats clear".into()),
        },
    })
}

fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// A JSON array of flat objects as an aligned table; anything else as indented key: value lines.
fn render(v: &Value) -> String {
    match v {
        Value::Array(rows) if rows.iter().all(Value::is_object) => {
            let Some(Value::Object(first)) = rows.first() else {
                return "(none)\n".into();
            };
            let cols: Vec<&String> = first.keys().collect();
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| cols.iter().map(|c| cell(&r[c.as_str()])).collect())
                .collect();
            let width: Vec<usize> = cols
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    cells
                        .iter()
                        .map(|r| r[i].len())
                        .max()
                        .unwrap_or(0)
                        .max(c.len())
                })
                .collect();
            let mut out = String::new();
            let line = |vals: Vec<&str>| -> String {
                vals.iter()
                    .zip(&width)
                    .map(|(v, w)| format!("{v:<w$}"))
                    .collect::<Vec<_>>()
                    .join("  ")
                    .trim_end()
                    .to_string()
                    + "\n"
            };
            out += &line(cols.iter().map(|c| c.as_str()).collect());
            for r in &cells {
                out += &line(r.iter().map(String::as_str).collect());
            }
            out
        }
        Value::Object(m) => {
            let mut out = String::new();
            for (k, v) in m {
                match v {
                    Value::Object(inner) => {
                        out += &format!("{k}:\n");
                        for (k2, v2) in inner {
                            out += &format!("  {k2:<20} {}\n", cell(v2));
                        }
                    }
                    _ => out += &format!("{k:<22} {}\n", cell(v)),
                }
            }
            out
        }
        other => format!("{}\n", cell(other)),
    }
}

fn main() -> ExitCode {
    if let Some(done) = docs::generate_if_asked(Cli::command) {
        return done;
    }
    let cli = Cli::parse();
    let req = match request(&cli) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sprayctl: {e}");
            return ExitCode::from(2);
        }
    };
    let talk = || -> Result<Value, String> {
        let mut s = UnixStream::connect(&cli.socket).map_err(|e| {
            format!(
                "{}: {e} (is the switch running? is this its socket?)",
                cli.socket.display()
            )
        })?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        s.write_all(format!("{req}\n").as_bytes())
            .map_err(|e| e.to_string())?;
        let mut line = String::new();
        BufReader::new(&s)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        serde_json::from_str(&line).map_err(|e| format!("bad answer from the switch: {e}"))
    };
    match talk() {
        Ok(ans) => {
            if cli.json {
                println!("{ans}");
            }
            if ans["ok"] == Value::Bool(true) {
                if !cli.json {
                    print!("{}", render(&ans["data"]));
                    // What the answer leaves out (a worker that did not answer in time).
                    for w in ans["warnings"].as_array().into_iter().flatten() {
                        eprintln!("sprayctl: warning: {}", cell(w));
                    }
                }
                ExitCode::SUCCESS
            } else {
                if !cli.json {
                    eprintln!("sprayctl: {}", cell(&ans["error"]));
                }
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("sprayctl: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap's own consistency checks of the command line (names, conflicts, defaults), which
    /// the man pages and completions are generated from.
    #[test]
    fn the_command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
