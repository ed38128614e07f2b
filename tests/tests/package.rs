//! The Debian package (`scripts/package.sh`, docs/packaging.md) and what it ships.
//!
//! - The man pages and shell completions, generated from the binaries' clap definitions, name
//!   every subcommand of `sprayswitch` and `sprayctl`. The list of subcommands the pages are
//!   checked against is read from each binary's `--help`, not from the generators' input.
//! - The package itself (release build, as root; the debug run lists it as ignored): its
//!   control data and file list; installed with dpkg into a throwaway root, where its
//!   maintainer script creates the user `sprayswitch`; its unit passes `systemd-analyze
//!   verify` there. Then the switch is started as the unit starts it: the unit's `ExecStart`
//!   (paths moved into the throwaway root and a temporary run directory), as an unprivileged
//!   user (`nobody`: the `sprayswitch` user exists only in the throwaway root) holding exactly
//!   the unit's capabilities (ambient, bounding set, no new privileges) under the 8 MiB
//!   locked-memory limit systemd gives services. It forwards pings between two hosts over
//!   AF_XDP veths; the unit's `ExecReload` applies a good file and fails on a bad one, which
//!   changes nothing; SIGTERM stops it cleanly. Without any one of the unit's capabilities it
//!   stops at the step that needs that capability, with an error naming the port and the
//!   step.
//!
//! systemd itself is not running here: what only systemd does (User=, the sandboxing
//! settings, Restart=, RuntimeDirectory=) is checked by `systemd-analyze verify` and by
//! reading the unit, not by running it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sprayswitch_tests::netns::{available, veth, ChildGuard, Netns};
use sprayswitch_tests::{bin_dir, interop_required, repo_root, skip, wait_for};

/// The subcommands `BIN --help` lists (without `help`).
fn subcommands(bin: &Path) -> Vec<String> {
    let out = Command::new(bin).arg("--help").output().expect("--help");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let subs: Vec<String> = text
        .lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| *s != "help")
        .map(String::from)
        .collect();
    assert!(
        !subs.is_empty(),
        "no subcommands in {}:\n{text}",
        bin.display()
    );
    assert!(
        !subs.iter().any(|s| s == "man" || s == "completions"),
        "the generator commands are not part of the command line: {subs:?}"
    );
    subs
}

/// Roff text as it reads: `\-` is a hyphen.
fn unroff(page: &str) -> String {
    page.replace("\\-", "-")
}

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("ssw-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn man_pages_and_completions_name_every_subcommand() {
    let dir = bin_dir(&["sprayswitch", "sprayctl"]);
    let scratch = Scratch::new("docs");
    for name in ["sprayswitch", "sprayctl"] {
        let bin = dir.join(name);
        let subs = subcommands(&bin);
        let man = scratch.0.join("man");
        run(Command::new(&bin).args(["man", "--out"]).arg(&man));
        let main = unroff(&std::fs::read_to_string(man.join(format!("{name}.1"))).unwrap());
        for sub in &subs {
            assert!(
                main.contains(&format!("{name}-{sub}(1)")),
                "{name}.1 does not mention {sub}:\n{main}"
            );
            let page = man.join(format!("{name}-{sub}.1"));
            let text = unroff(&std::fs::read_to_string(&page).unwrap_or_else(|e| {
                panic!("{}: {e}", page.display());
            }));
            assert!(
                text.contains(&format!(".SH NAME\n{name}-{sub} - ")),
                "{text}"
            );
            assert!(text.contains(&format!("{name} {sub}")), "{text}");
        }
        for hidden in ["man", "completions"] {
            assert!(!main.contains(&format!("{name}-{hidden}(1)")), "{main}");
        }
        for (shell, check) in [("bash", "bash"), ("zsh", "zsh"), ("fish", "fish")] {
            let out = run(Command::new(&bin).args(["completions", "--shell", shell]));
            let script = String::from_utf8_lossy(&out.stdout).to_string();
            for sub in &subs {
                assert!(script.contains(sub.as_str()), "{shell} {name}: no {sub}");
            }
            assert!(!script.contains("completions"), "{shell} {name}: {script}");
            let file = scratch.0.join(format!("{name}.{shell}"));
            std::fs::write(&file, &script).unwrap();
            // The script parses in its shell, where that shell is installed.
            match Command::new(check).arg("-n").arg(&file).output() {
                Ok(o) => assert!(
                    o.status.success(),
                    "{check} -n {name}: {}",
                    String::from_utf8_lossy(&o.stderr)
                ),
                Err(_) => eprintln!("{check} is not installed: {name}.{shell} not parsed"),
            }
        }
    }
}

/// The unit's `[Service]` settings this test uses.
struct Unit {
    user: String,
    environment: Vec<(String, String)>,
    exec_start: String,
    exec_reload: String,
    ambient: BTreeSet<String>,
    bounding: BTreeSet<String>,
    settings: Vec<(String, String)>,
}

impl Unit {
    fn parse(text: &str) -> Unit {
        let mut settings = Vec::new();
        let mut section = "";
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line;
            } else if let Some((k, v)) = line.split_once('=') {
                if section == "[Service]" && !line.starts_with('#') {
                    settings.push((k.to_string(), v.to_string()));
                }
            }
        }
        let one = |key: &str| {
            let v: Vec<&String> = settings
                .iter()
                .filter(|(k, _)| k == key)
                .map(|(_, v)| v)
                .collect();
            assert_eq!(v.len(), 1, "{key} in the unit: {v:?}");
            v[0].clone()
        };
        let caps = |key: &str| -> BTreeSet<String> {
            one(key)
                .split_whitespace()
                .map(|c| {
                    c.to_ascii_lowercase()
                        .trim_start_matches("cap_")
                        .to_string()
                })
                .collect()
        };
        Unit {
            user: one("User"),
            environment: one("Environment")
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            exec_start: one("ExecStart"),
            exec_reload: one("ExecReload"),
            ambient: caps("AmbientCapabilities"),
            bounding: caps("CapabilityBoundingSet"),
            settings,
        }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.settings
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The capability's bit in /proc's `CapEff` (the four a backend may need).
fn cap_bit(name: &str) -> u32 {
    match name {
        "net_admin" => 12,
        "net_raw" => 13,
        "ipc_lock" => 14,
        "bpf" => 39,
        other => panic!("the unit grants {other}, which no backend needs (docs/packaging.md)"),
    }
}

/// Where the installed package is, and where a unit's paths go instead.
struct Layout {
    root: PathBuf,
    run: PathBuf,
}

impl Layout {
    /// A unit command line for instance `inst`, its paths moved: `/usr/bin` and
    /// `/etc/sprayswitch` into the throwaway root, `/run/sprayswitch` into `run`.
    fn command(&self, line: &str, inst: &str) -> Vec<String> {
        line.replace("%i", inst)
            .split_whitespace()
            .map(|a| {
                for (from, to) in [
                    ("/usr/bin/", self.root.join("usr/bin")),
                    ("/etc/sprayswitch/", self.root.join("etc/sprayswitch")),
                    ("/run/sprayswitch/", self.run.clone()),
                ] {
                    if let Some(rest) = a.strip_prefix(from) {
                        return to.join(rest).display().to_string();
                    }
                }
                a.to_string()
            })
            .collect()
    }
}

/// Uid and gid the switch runs as here.
const NOBODY: &str = "65534";
/// The RLIMIT_MEMLOCK a service gets when its unit sets none: 8 MiB (systemd's
/// `DefaultLimitMEMLOCK=8M`, as Debian 12's /etc/systemd/system.conf shows it).
const SERVICE_MEMLOCK: &str = "--memlock=8388608";

/// `argv` as the unit runs it, in namespace `ns`: the memlock limit, then nobody with
/// exactly `caps` (ambient, inheritable and bounding set) and no new privileges.
fn as_service(ns: &Netns, unit: &Unit, caps: &BTreeSet<String>, argv: &[String]) -> Command {
    let list: String = std::iter::once("-all".to_string())
        .chain(caps.iter().map(|c| format!("+{c}")))
        .collect::<Vec<_>>()
        .join(",");
    let mut c = Command::new("ip");
    c.args([
        "netns",
        "exec",
        &ns.name,
        "prlimit",
        SERVICE_MEMLOCK,
        "setpriv",
    ])
    .args([
        &format!("--reuid={NOBODY}"),
        &format!("--regid={NOBODY}"),
        "--clear-groups",
    ])
    .arg(format!("--inh-caps={list}"))
    .arg(format!("--ambient-caps={list}"))
    .arg(format!("--bounding-set={list}"))
    .args(["--no-new-privs", "--"])
    .args(argv)
    .envs(unit.environment.iter().map(|(k, v)| (k, v)));
    c
}

/// Pings `dst` from `ns` `count` times; how many answers came back.
fn ping(ns: &Netns, dst: &str, count: u32) -> u32 {
    let out = ns.exec(&[
        "ping",
        "-c",
        &count.to_string(),
        "-i",
        "0.1",
        "-W",
        "2",
        "-q",
        dst,
    ]);
    String::from_utf8_lossy(&out.stdout)
        .split(',')
        .find_map(|p| p.trim().strip_suffix(" received"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Two hosts (10.91.1.2, 10.91.2.2) on veths h1, h2 of a switch namespace.
struct Topology {
    sw: Netns,
    a: Netns,
    b: Netns,
}

impl Topology {
    fn new() -> Topology {
        let t = Topology {
            sw: Netns::new("pkg-sw"),
            a: Netns::new("pkg-a"),
            b: Netns::new("pkg-b"),
        };
        for (host, port, i) in [(&t.a, "h1", 1), (&t.b, "h2", 2)] {
            veth(
                &t.sw,
                port,
                &format!("02:5d:01:01:00:0{i}"),
                host,
                "eth0",
                &format!("02:5d:03:00:00:0{i}"),
            );
            host.ip(&["addr", "add", &format!("10.91.{i}.2/24"), "dev", "eth0"]);
            host.ip(&["route", "add", "default", "via", &format!("10.91.{i}.1")]);
        }
        t
    }
}

/// The instance's configuration: both hosts' ports on AF_XDP.
const INSTANCE_CONFIG: &str = r#"# The package test's switch: two hosts, AF_XDP.
[switch]
name = "pkgtest"
workers = 1

[[port]]
name = "h1"
role = "downlink"
backend = "af_xdp"
interface = "h1"
mac = "02:5d:01:01:00:01"
addresses = ["10.91.1.1/24"]

[[port]]
name = "h2"
role = "downlink"
backend = "af_xdp"
interface = "h2"
mac = "02:5d:01:01:00:02"
addresses = ["10.91.2.1/24"]
"#;

/// Builds the package with scripts/package.sh into `out`; its path.
fn build_package(out: &Path) -> PathBuf {
    let o = run(Command::new(repo_root().join("scripts/package.sh"))
        .env("DEB_OUT", out)
        .stderr(Stdio::inherit()));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let deb = PathBuf::from(text.lines().last().unwrap_or_default().trim());
    assert!(
        deb.extension().is_some_and(|e| e == "deb") && deb.exists(),
        "package.sh said: {text}"
    );
    deb
}

/// `dpkg-deb -I`'s control data and conffiles, and the package's file list.
fn check_contents(deb: &Path) {
    let info = String::from_utf8_lossy(&run(Command::new("dpkg-deb").arg("-I").arg(deb)).stdout)
        .to_string();
    for want in [
        "Package: sprayswitch",
        "Architecture: amd64",
        "Depends: libc6",
        "systemd | adduser",
        "postinst",
        "prerm",
        "postrm",
    ] {
        assert!(info.contains(want), "control data lacks {want}:\n{info}");
    }
    let package = run(Command::new("dpkg-deb").arg("-f").arg(deb).arg("Package"));
    assert_eq!(
        String::from_utf8_lossy(&package.stdout).trim(),
        "sprayswitch"
    );
    let ctrl = Scratch::new("pkg-ctrl");
    run(Command::new("dpkg-deb").arg("-e").arg(deb).arg(&ctrl.0));
    assert_eq!(
        std::fs::read_to_string(ctrl.0.join("conffiles")).unwrap(),
        "/etc/sprayswitch/sprayswitch.toml\n"
    );
    let list = String::from_utf8_lossy(&run(Command::new("dpkg-deb").arg("-c").arg(deb)).stdout)
        .to_string();
    let files: BTreeSet<&str> = list
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .map(|p| p.trim_start_matches('.'))
        .collect();
    let mut want = vec![
        "/usr/bin/sprayswitch".to_string(),
        "/usr/bin/sprayctl".to_string(),
        "/etc/sprayswitch/sprayswitch.toml".to_string(),
        "/usr/lib/systemd/system/sprayswitch@.service".to_string(),
        "/usr/lib/sysusers.d/sprayswitch.conf".to_string(),
        "/usr/share/doc/sprayswitch/packaging.md".to_string(),
        "/usr/share/doc/sprayswitch/copyright".to_string(),
    ];
    let dir = bin_dir(&["sprayswitch", "sprayctl"]);
    for name in ["sprayswitch", "sprayctl"] {
        want.push(format!("/usr/share/man/man1/{name}.1.gz"));
        for sub in subcommands(&dir.join(name)) {
            want.push(format!("/usr/share/man/man1/{name}-{sub}.1.gz"));
        }
        want.push(format!("/usr/share/bash-completion/completions/{name}"));
        want.push(format!("/usr/share/zsh/vendor-completions/_{name}"));
        want.push(format!("/usr/share/fish/vendor_completions.d/{name}.fish"));
    }
    for w in &want {
        assert!(files.contains(w.as_str()), "the package lacks {w}:\n{list}");
    }
}

/// `cargo install --path control` into `root` works and installs both binaries (in this
/// target directory: the release build package.sh made is reused).
fn cargo_install(root: &Path) {
    let target = bin_dir(&["sprayswitch"])
        .parent()
        .expect("target/<profile>")
        .to_path_buf();
    run(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(repo_root())
            .args([
                "install", "--locked", "--quiet", "--path", "control", "--root",
            ])
            .arg(root)
            .env("CARGO_TARGET_DIR", target)
            .stderr(Stdio::inherit()),
    );
    for name in ["sprayswitch", "sprayctl"] {
        let out = run(Command::new(root.join("bin").join(name)).arg("--version"));
        assert!(String::from_utf8_lossy(&out.stdout).starts_with(name));
    }
}

/// Installs `deb` into `root` with dpkg, maintainer scripts included (run outside a chroot
/// with DPKG_ROOT set; the throwaway root has no other packages, so dependencies are not
/// checked).
fn install(deb: &Path, root: &Path) {
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    run(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--force-script-chrootless", "--force-depends", "-i"])
        .arg(deb));
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap_or_default();
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with("sprayswitch:") && l.ends_with(":/usr/sbin/nologin")),
        "postinst created no user sprayswitch: {passwd}"
    );
    // The conffile is what the binary's `show-config` prints, and a valid configuration.
    let conffile = root.join("etc/sprayswitch/sprayswitch.toml");
    let shown = run(Command::new(root.join("usr/bin/sprayswitch")).arg("show-config"));
    assert_eq!(std::fs::read(&conffile).unwrap(), shown.stdout);
    run(Command::new(root.join("usr/bin/sprayswitch"))
        .arg("--config")
        .arg(&conffile)
        .arg("check"));
}

/// `systemd-analyze verify` of an instance in the throwaway root (with the host's targets,
/// which the unit refers to): no error, no warning.
fn verify_unit(root: &Path) {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        skip(
            "the_package_installs_and_forwards_with_only_its_units_capabilities (unit check)",
            "systemd-analyze is not installed",
        );
        return;
    }
    let units = root.join("usr/lib/systemd/system");
    for e in std::fs::read_dir("/usr/lib/systemd/system")
        .unwrap()
        .flatten()
    {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "target" || x == "slice") {
            let _ = std::fs::copy(&p, units.join(e.file_name()));
        }
    }
    let out = Command::new("systemd-analyze")
        .args(["--man=no", &format!("--root={}", root.display())])
        .args(["verify", "sprayswitch@pkgtest.service"])
        .output()
        .expect("systemd-analyze");
    assert!(
        out.status.success() && out.stderr.is_empty() && out.stdout.is_empty(),
        "systemd-analyze verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits up to `secs` for `child` to exit; its status, or `None` (still running).
fn wait_exit(child: &mut std::process::Child, secs: f64) -> Option<std::process::ExitStatus> {
    wait_for(secs, || child.try_wait().ok().flatten())
}

/// A handle appending to `path` (stdout and stderr each take one: appends do not overwrite
/// each other).
fn log_to(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
}

/// The switch's log so far.
fn log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "release build: builds the release package (scripts/test.sh runs it)"
)]
fn the_package_installs_and_forwards_with_only_its_units_capabilities() {
    let test = "the_package_installs_and_forwards_with_only_its_units_capabilities";
    if !available(test) {
        return;
    }
    let has_cargo_deb = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_cargo_deb && !interop_required() {
        skip(
            test,
            "cargo-deb is not installed (scripts/test.sh installs it)",
        );
        return;
    }
    let scratch = Scratch::new("pkg");
    let deb = build_package(&scratch.0.join("out"));
    check_contents(&deb);
    cargo_install(&scratch.0.join("cargo-root"));
    let layout = Layout {
        root: scratch.0.join("root"),
        run: scratch.0.join("run"),
    };
    install(&deb, &layout.root);
    verify_unit(&layout.root);

    let unit = Unit::parse(
        &std::fs::read_to_string(
            layout
                .root
                .join("usr/lib/systemd/system/sprayswitch@.service"),
        )
        .unwrap(),
    );
    assert_eq!(unit.user, "sprayswitch");
    assert_eq!(
        unit.ambient, unit.bounding,
        "ambient and bounding sets differ"
    );
    for (k, v) in [
        ("Restart", "on-failure"),
        ("NoNewPrivileges", "yes"),
        ("RuntimeDirectory", "sprayswitch"),
    ] {
        assert_eq!(unit.get(k), Some(v), "{k}");
    }
    let mask: u64 = unit.ambient.iter().map(|c| 1u64 << cap_bit(c)).sum();

    // The run directory, as RuntimeDirectory= makes it: owned by the service's user.
    std::fs::create_dir_all(&layout.run).unwrap();
    run(Command::new("chown")
        .arg(format!("{NOBODY}:{NOBODY}"))
        .arg(&layout.run));
    let inst = "pkgtest";
    let config = layout.root.join(format!("etc/sprayswitch/{inst}.toml"));
    std::fs::write(&config, INSTANCE_CONFIG).unwrap();
    let topo = Topology::new();
    let start = layout.command(&unit.exec_start, inst);
    let reload = layout.command(&unit.exec_reload, inst);

    // Without one of its capabilities the switch stops at the step that needs it.
    for missing in &unit.ambient {
        let mut fewer = unit.ambient.clone();
        fewer.remove(missing);
        let logfile = scratch.0.join(format!("without-{missing}.log"));
        let mut child = ChildGuard(
            as_service(&topo.sw, &unit, &fewer, &start)
                .stdout(log_to(&logfile))
                .stderr(log_to(&logfile))
                .spawn()
                .expect("sprayswitch"),
        );
        let status = wait_exit(&mut child.0, 20.0)
            .unwrap_or_else(|| panic!("without {missing} it runs: {}", log(&logfile)));
        let said = log(&logfile);
        assert!(!status.success(), "without {missing}: {said}");
        let step = match missing.as_str() {
            "net_raw" => "creating the AF_XDP socket: Operation not permitted",
            "net_admin" | "bpf" => "creating the XSKMAP: Operation not permitted",
            "ipc_lock" => "UMEM: No buffer space available",
            other => panic!("no expectation for {other}"),
        };
        assert!(
            said.contains("sprayswitch: port h1: ") && said.contains(step),
            "without {missing}: {said}"
        );
        eprintln!("without {missing}: {}", said.trim_end());
    }

    // With all of them it forwards.
    let logfile = scratch.0.join("switch.log");
    let mut child = ChildGuard(
        as_service(&topo.sw, &unit, &unit.ambient, &start)
            .stdout(log_to(&logfile))
            .stderr(log_to(&logfile))
            .spawn()
            .expect("sprayswitch"),
    );
    let up = wait_for(20.0, || {
        if log(&logfile).contains("switch pkgtest running") {
            return Some(true);
        }
        child.0.try_wait().ok().flatten().map(|_| false)
    });
    assert_eq!(
        up,
        Some(true),
        "the switch did not start: {}",
        log(&logfile)
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.0.id())).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(field("Uid:"), NOBODY, "{status}");
    assert_eq!(
        u64::from_str_radix(&field("CapEff:"), 16).unwrap(),
        mask,
        "{status}"
    );
    assert!(log(&logfile).contains("af_xdp"), "{}", log(&logfile));
    // The first packet to a host not yet resolved waits for its ARP answer: warm up.
    ping(&topo.a, "10.91.2.2", 2);
    assert_eq!(ping(&topo.a, "10.91.2.2", 10), 10, "{}", log(&logfile));

    // `systemctl reload`: the unit's ExecReload, as the same user, applies a good file ...
    let reloaded = as_service(&topo.sw, &unit, &unit.ambient, &reload)
        .output()
        .expect("sprayctl");
    assert!(
        reloaded.status.success(),
        "reload: {}{}",
        String::from_utf8_lossy(&reloaded.stdout),
        String::from_utf8_lossy(&reloaded.stderr)
    );
    // ... and fails on a file the switch refuses, which changes nothing.
    std::fs::write(
        &config,
        INSTANCE_CONFIG.replace("workers = 1", "workers = \"many\""),
    )
    .unwrap();
    let refused = as_service(&topo.sw, &unit, &unit.ambient, &reload)
        .output()
        .expect("sprayctl");
    assert!(!refused.status.success(), "a bad file was applied");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("workers"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(ping(&topo.a, "10.91.2.2", 5), 5, "{}", log(&logfile));

    // SIGTERM (systemctl stop) ends it cleanly: Restart=on-failure leaves it stopped.
    // SAFETY: kill(2) on the PID of the child this test started and still owns.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let started = Instant::now();
    let status = wait_exit(&mut child.0, 10.0).expect("the switch ignored SIGTERM");
    assert!(status.success(), "{status}: {}", log(&logfile));
    assert!(started.elapsed() < Duration::from_secs(10));
}
