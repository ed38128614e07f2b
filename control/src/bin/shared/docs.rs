//! Man pages and shell completions of a binary, generated from its clap definition by clap's
//! own generators (clap_mangen, clap_complete): `NAME man --out DIR` and `NAME completions
//! --shell SHELL [--out DIR]`, which `scripts/package.sh` runs to fill the Debian package.
//! Nothing here is hand-written documentation: a new subcommand or option appears in both on
//! the next build.
//!
//! These two commands are parsed apart from the binary's own command line (when they are its
//! first argument), so that neither the man pages, the completions nor `--help` list them
//! (clap_complete lists hidden subcommands). They shadow no subcommand: neither binary has one
//! of those names.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{FromArgMatches, Subcommand};
use clap_complete::Shell;

/// The generator commands.
#[derive(Subcommand)]
enum Generate {
    /// Write the man pages (NAME.1, and NAME-SUB.1 per subcommand) into a directory.
    Man {
        /// The directory (created if missing).
        #[arg(long)]
        out: PathBuf,
    },
    /// Print the shell completion script, or write it into a directory.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        #[arg(long)]
        shell: Shell,
        /// Write it into this directory (named as the shell looks for it) instead.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// When the first argument is `man` or `completions`, writes them for the command `cli`
/// builds and returns the exit code (the files written are listed on stdout); otherwise
/// `None`, for the binary's own command line.
pub(crate) fn generate_if_asked(cli: impl FnOnce() -> clap::Command) -> Option<ExitCode> {
    let first = std::env::args_os().nth(1)?;
    if first != "man" && first != "completions" {
        return None;
    }
    let cmd = cli();
    let name = cmd.get_name().to_string();
    let parser = Generate::augment_subcommands(
        clap::Command::new("generate")
            .bin_name(name.clone())
            .subcommand_required(true)
            .disable_help_subcommand(true),
    );
    let matches = parser.get_matches();
    let gen = Generate::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let written = match gen {
        Generate::Man { out } => write_man(cmd, &out),
        Generate::Completions { shell, out } => {
            write_completions(cmd, shell, out.as_deref()).map(|p| p.into_iter().collect())
        }
    };
    Some(match written {
        Ok(paths) => {
            for p in paths {
                println!("{}", p.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{name}: {e:#}");
            ExitCode::FAILURE
        }
    })
}

/// Writes `NAME.1` and one `NAME-SUB.1` per subcommand into `out` (created if missing), and
/// returns the pages of `NAME` that `out` holds then, sorted.
///
/// # Errors
/// `out` cannot be created, written or read.
fn write_man(cmd: clap::Command, out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let name = cmd.get_name().to_string();
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    // As clap_mangen::generate_to, with the binary's name and version as every page's source
    // (a subcommand has no version of its own). Built first: that names the subcommands
    // `NAME-SUB`.
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let source = format!("{name} {}", cmd.get_version().unwrap_or_default());
    fn generate(cmd: &clap::Command, source: &str, out: &Path) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            generate(sub, source, out)?;
        }
        clap_mangen::Man::new(cmd.clone())
            .source(source)
            .generate_to(out)
            .map(drop)
    }
    generate(&cmd, &source, out)
        .with_context(|| format!("writing man pages into {}", out.display()))?;
    let sub = format!("{name}-");
    let mut written: Vec<PathBuf> = std::fs::read_dir(out)
        .with_context(|| format!("reading {}", out.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "1"))
        .filter(|p| {
            p.file_stem()
                .and_then(|s| s.to_str())
                .is_some_and(|s| s == name || s.starts_with(&sub))
        })
        .collect();
    written.sort();
    Ok(written)
}

/// Writes `shell`'s completion script for `cmd` to stdout, or into directory `out` under the
/// name that shell looks for (`NAME.bash`, `_NAME`, `NAME.fish`, ...), returning that path.
///
/// # Errors
/// `out` cannot be created or written.
fn write_completions(
    mut cmd: clap::Command,
    shell: Shell,
    out: Option<&Path>,
) -> anyhow::Result<Option<PathBuf>> {
    let name = cmd.get_name().to_string();
    match out {
        None => {
            // Into memory first: clap_complete panics when its writer fails (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, name, &mut script);
            std::io::stdout()
                .write_all(&script)
                .context("writing to stdout")?;
            Ok(None)
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let path = clap_complete::generate_to(shell, &mut cmd, name, dir)
                .with_context(|| format!("writing {shell} completions into {}", dir.display()))?;
            Ok(Some(path))
        }
    }
}
