//! The configuration reference as the binary writes it: `docs/configuration.md` is what the
//! table in control/src/config/keys.rs renders today, and `show-config` reads back as the
//! embedded default.

use std::path::{Path, PathBuf};
use std::process::Command;

use sprayswitch_control::config::reference::{markdown, REFERENCE_PATH};
use sprayswitch_control::Config;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .to_path_buf()
}

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sprayswitch"));
    c.current_dir(root()).env("RUST_LOG", "warn");
    c
}

#[test]
fn docs_configuration_md_is_current() {
    let committed = std::fs::read_to_string(root().join(REFERENCE_PATH)).unwrap_or_default();
    assert!(
        committed == markdown(),
        "docs/configuration.md is stale: run \
         `cargo run -p sprayswitch-control --bin sprayswitch -- config-reference`"
    );
}

#[test]
fn config_reference_writes_the_reference_where_it_is_told() {
    let dir = std::env::temp_dir().join(format!("sprayswitch-reference-{}", std::process::id()));
    let out = dir.join("nested").join("configuration.md");
    let run = bin()
        .args(["config-reference", "--out"])
        .arg(&out)
        .output()
        .expect("sprayswitch runs");
    assert!(run.status.success(), "{run:?}");
    assert_eq!(std::fs::read_to_string(&out).expect("written"), markdown());
    let _ = std::fs::remove_dir_all(&dir);

    let stdout = bin()
        .args(["config-reference", "--out", "-"])
        .output()
        .expect("sprayswitch runs");
    assert!(stdout.status.success(), "{stdout:?}");
    assert_eq!(String::from_utf8_lossy(&stdout.stdout), markdown());
}

#[test]
fn show_config_is_annotated_and_reads_back_as_the_default() {
    let out = bin().arg("show-config").output().expect("sprayswitch runs");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(
        text.contains("\n# integer, default 1, 1 to 64: Worker threads."),
        "{text}"
    );
    let back = Config::parse(&text, "<show-config>").expect("valid TOML");
    assert_eq!(back, Config::default_config());
    back.validate().expect("a valid configuration");
}
