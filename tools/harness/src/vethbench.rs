//! Forwarding throughput of the port backends (`vethbench`) on one veth topology, in one run, for:
//! a bare AF_XDP forward loop (the I/O ceiling: descriptors moved between two sockets sharing a
//! UMEM, nothing parsed), sprayswitch on AF_XDP, sprayswitch on AF_PACKET, the Linux bridge
//! (bridge-nf-call-* off) and Linux IP forwarding; and, when asked for (`--cases ...,dpdk`:
//! the sprayswitch binary must be built with `--features dpdk`), sprayswitch on DPDK ports
//! (`net_af_packet` vdevs on the same veths, EAL without hugepages).
//!
//! ```text
//!  [ns S] s0 ── p0 [ns W: the forwarder under test] p1 ── r0 [ns R]
//! ```
//!
//! An AF_XDP sender in S (pinned to core 0) blasts RoCEv2-shaped frames (RC WRITE ONLY, 64 QPs,
//! PSNs in order) at `--size` bytes; an XDP program on r0 counts and drops what arrives. The
//! userspace forwarders run pinned to core 1; the kernel forwards in the sender's softirq. Each case runs `--seconds`; the table
//! gives delivered packets per second, the loss, and machine CPU (all cores, from /proc/stat)
//! per delivered packet. Needs root. Everything lives in namespaces named `ssb-<pid>-*`,
//! removed on exit.

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use sprayswitch::pkt::Pkt;
use sprayswitch::port::sys;
use sprayswitch::port::xdp::bpf::CountingSink;
use sprayswitch::port::xdp::{XdpMode, XdpOptions, XdpUmem};
use sprayswitch::port::Port;
use sprayswitch::time::now_ns;
use sprayswitch::wire::{
    format_mac, BthRepr, ExtRepr, IpRepr, Opcode, Psn, RethRepr, RoceFrameRepr,
};
use sprayswitch_packet::percentile::median;

/// What to run.
#[derive(Debug, Parser)]
#[command(
    name = "vethbench",
    about = "Forwarding throughput on veth: bare AF_XDP loop, sprayswitch (AF_XDP, AF_PACKET, DPDK), Linux bridge, IP forwarding"
)]
pub struct Opts {
    /// Frame sizes to run (bytes, without FCS).
    #[arg(long, value_delimiter = ',', default_values_t = [64usize, 1100])]
    pub sizes: Vec<usize>,
    /// Seconds per case.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Also measure probe latency through each case (one hop: what it adds).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub latency: bool,
    /// Cases to run: bare, xdp, packet, dpdk, bridge, forward (default: all but dpdk, which
    /// needs a sprayswitch built with `--features dpdk`).
    #[arg(long, value_delimiter = ',')]
    pub cases: Vec<String>,
    /// Directory of the sprayswitch binary.
    #[arg(long, default_value = "target/release")]
    pub bin: String,
    /// Packets per receive burst, for the bare loop and sprayswitch alike (the switch's
    /// `burst`), so that both amortise their system calls the same way.
    #[arg(long, default_value_t = 64)]
    pub burst: usize,
    /// Rounds of the throughput cases, interleaved (every case once per round): the table
    /// shows each case's median and range, and the median of its per-round ratios.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
}

/// The sender's core; the forwarder under test runs on the other one. The kernel cases do
/// their forwarding in the sender's softirq (one core, no RPS).
const SENDER_CORE: usize = 0;
const FORWARDER_CORE: usize = 1;

const S_MAC: [u8; 6] = [2, 0x5b, 0, 0, 0, 1];
const P0_MAC: [u8; 6] = [2, 0x5b, 0, 0, 0, 2];
const P1_MAC: [u8; 6] = [2, 0x5b, 0, 0, 0, 3];
const R_MAC: [u8; 6] = [2, 0x5b, 0, 0, 0, 4];

fn sh(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .with_context(|| args.join(" "))?;
    if !out.status.success() {
        bail!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

struct Topo {
    s: String,
    w: String,
    r: String,
}

impl Topo {
    fn new() -> anyhow::Result<Topo> {
        let p = format!("ssb-{}", std::process::id());
        let t = Topo {
            s: format!("{p}-s"),
            w: format!("{p}-w"),
            r: format!("{p}-r"),
        };
        for ns in [&t.s, &t.w, &t.r] {
            sh(&["ip", "netns", "add", ns])?;
            sh(&[
                "ip",
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ])?;
        }
        sh(&[
            "ip",
            "-n",
            &t.s,
            "link",
            "add",
            "s0",
            "address",
            &format_mac(S_MAC),
            "type",
            "veth",
            "peer",
            "name",
            "p0",
            "address",
            &format_mac(P0_MAC),
            "netns",
            &t.w,
        ])?;
        sh(&[
            "ip",
            "-n",
            &t.r,
            "link",
            "add",
            "r0",
            "address",
            &format_mac(R_MAC),
            "type",
            "veth",
            "peer",
            "name",
            "p1",
            "address",
            &format_mac(P1_MAC),
            "netns",
            &t.w,
        ])?;
        for (ns, i) in [(&t.s, "s0"), (&t.w, "p0"), (&t.w, "p1"), (&t.r, "r0")] {
            sh(&["ip", "-n", ns, "link", "set", i, "up"])?;
        }
        Ok(t)
    }

    fn enter(ns: &str) -> anyhow::Result<()> {
        sys::enter_netns(ns).with_context(|| format!("entering {ns}"))
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        for ns in [&self.s, &self.w, &self.r] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

fn frame(size: usize, qp: u32, psn: u32, dst_mac: [u8; 6]) -> Vec<u8> {
    let ip = IpRepr::V4 {
        src: Ipv4Addr::new(10, 1, 0, 2),
        dst: Ipv4Addr::new(10, 2, 0, 2),
        id: 0,
    };
    let bth = BthRepr::new(Opcode::RcWriteOnly, 0x100 + qp, Psn::new(psn));
    let reth = RethRepr {
        virtual_address: 0,
        rkey: 1,
        dma_len: 0,
    };
    // Headers are 74 bytes (Ethernet, IPv4, UDP, BTH, RETH, ICRC): pad the payload to `size`.
    let pad = vec![0u8; size.saturating_sub(74)];
    RoceFrameRepr {
        udp_src_port: 49152 + qp as u16,
        ..RoceFrameRepr::new(S_MAC, dst_mac, ip, bth)
    }
    .with_ext(ExtRepr {
        reth: Some(reth),
        ..ExtRepr::default()
    })
    .with_payload(&pad)
    .to_vec()
    .unwrap_or_default()
}

/// Machine CPU time so far (user+nice+system+irq+softirq), in clock ticks.
fn cpu_ticks() -> u64 {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    s.lines()
        .next()
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .take(7)
                .enumerate()
                .filter(|(i, _)| *i != 3 && *i != 4) // idle, iowait
                .filter_map(|(_, v)| v.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0)
}

struct Row {
    case: &'static str,
    size: usize,
    /// Which round of `--repeat` it belongs to.
    round: usize,
    sent: u64,
    got: u64,
    secs: f64,
    cpu_s: f64,
    lat: Option<(f64, f64)>,
}

/// One line per case and size: median Mpps (and range over the rounds), the median of the
/// per-round ratios to the bare loop and to the bridge measured in the same round, CPU per
/// packet.
fn print_throughput(rows: &[Row], cases: &[&'static str], rounds: usize) {
    let mpps = |r: &Row| r.got as f64 / r.secs / 1e6;
    let find = |case: &str, size: usize, round: usize| {
        rows.iter()
            .find(|x| x.lat.is_none() && x.case == case && x.size == size && x.round == round)
    };
    println!(
        "{:<24} {:>6} {:>10} {:>16} {:>10} {:>10} {:>12}",
        "case", "bytes", "Mpps", "range", "vs bare", "vs bridge", "CPU us/pkt"
    );
    let mut sizes: Vec<usize> = rows
        .iter()
        .filter(|r| r.lat.is_none())
        .map(|r| r.size)
        .collect();
    sizes.dedup();
    for size in sizes {
        for &case in cases {
            let mine: Vec<&Row> = (0..rounds).filter_map(|k| find(case, size, k)).collect();
            if mine.is_empty() {
                continue;
            }
            let ratio = |base: &str| {
                let v: Vec<f64> = mine
                    .iter()
                    .filter_map(|r| find(base, size, r.round).map(|b| mpps(r) / mpps(b)))
                    .collect();
                let m = median(v);
                if m.is_finite() {
                    format!("{m:.2}x")
                } else {
                    "-".into()
                }
            };
            let all: Vec<f64> = mine.iter().map(|r| mpps(r)).collect();
            let lo = all.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = all.iter().copied().fold(0.0, f64::max);
            let cpu = median(
                mine.iter()
                    .map(|r| r.cpu_s * 1e6 / r.got.max(1) as f64)
                    .collect(),
            );
            let sent = median(mine.iter().map(|r| r.sent as f64).collect());
            println!(
                "{:<24} {:>6} {:>10.3} {:>16} {:>10} {:>10} {:>12.2}   (sent {sent:.0} in all)",
                case,
                size,
                median(all),
                format!("{lo:.3}-{hi:.3}"),
                ratio("bare AF_XDP loop"),
                ratio("Linux bridge"),
                cpu
            );
        }
    }
}

/// Runs the sender and sink around whatever forwards in W; returns (sent, received, seconds, cpu seconds).
/// Probe latency through the forwarder: AF_PACKET ports on s0 and r0, 2000 UD probes of 64
/// bytes, 100 us apart. Returns (p50, p99) in microseconds.
fn latency(t: &Topo, dst_mac: [u8; 6]) -> anyhow::Result<(f64, f64)> {
    use sprayswitch::port::afpacket::AfPacketPort;
    use sprayswitch_packet::lat::{probe_path, LatOpts};
    let open = |ns: &str, ifn: &'static str| -> anyhow::Result<AfPacketPort> {
        let ns = ns.to_string();
        std::thread::spawn(move || {
            Topo::enter(&ns)?;
            AfPacketPort::open(ifn, ifn).map_err(anyhow::Error::from)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("port setup panicked"))?
    };
    let mut tx = open(&t.s, "s0")?;
    let mut rx = open(&t.r, "r0")?;
    let opts = LatOpts {
        probes: 2000,
        interval_us: 100,
        size: 64,
        path_delays_us: Vec::new(),
    };
    let src = (IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2)), S_MAC);
    let dst = (IpAddr::V4(Ipv4Addr::new(10, 2, 0, 2)), dst_mac);
    let h = probe_path(&opts, &mut tx, &mut rx, src, dst);
    if h.len() < 1900 {
        bail!("only {} of 2000 probes arrived", h.len());
    }
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    Ok((us(0.5), us(0.99)))
}

/// Throughput (size > 0) or latency (size == 0) through whatever forwards in W.
fn measure(t: &Topo, size: usize, secs: f64, dst_mac: [u8; 6]) -> anyhow::Result<Outcome> {
    if size == 0 {
        let (p50, p99) = latency(t, dst_mac)?;
        return Ok(Outcome {
            lat: Some((p50, p99)),
            ..Outcome::default()
        });
    }
    let (sent, got, secs, cpu_s) = blast(t, size, secs, dst_mac)?;
    Ok(Outcome {
        sent,
        got,
        secs,
        cpu_s,
        lat: None,
    })
}

#[derive(Default)]
struct Outcome {
    sent: u64,
    got: u64,
    secs: f64,
    cpu_s: f64,
    lat: Option<(f64, f64)>,
}

fn blast(
    t: &Topo,
    size: usize,
    secs: f64,
    dst_mac: [u8; 6],
) -> anyhow::Result<(u64, u64, f64, f64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let r_ns = t.r.clone();
    let s_ns = t.s.clone();
    // The sink: an XDP program on r0 that counts and drops, no thread of its own.
    let sink = std::thread::spawn(move || -> anyhow::Result<CountingSink> {
        Topo::enter(&r_ns)?;
        let ifindex = sys::ifindex("r0")?;
        CountingSink::attach(ifindex, XdpMode::Native)
            .map_err(|e| anyhow::anyhow!("sink: {}: {}", e.what, e.source))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("sink setup panicked"))??;
    let frames: Vec<Vec<u8>> = (0..64u32).map(|q| frame(size, q, 0, dst_mac)).collect();
    let sender = {
        let stop = stop.clone();
        std::thread::spawn(move || -> anyhow::Result<u64> {
            Topo::enter(&s_ns)?;
            core_affinity::set_for_current(core_affinity::CoreId { id: SENDER_CORE });
            let mut u = XdpUmem::new(8192, 2048)?;
            let mut p = u.open("s0", &XdpOptions::new("s0"))?;
            let area = u.area().clone();
            let mut q: Vec<Pkt> = Vec::with_capacity(64);
            let mut sent = 0u64;
            let mut psn = 0u32;
            while !stop.load(Ordering::Relaxed) {
                while q.len() < 64 {
                    let Some(mut f) = area.alloc() else { break };
                    let src = &frames[q.len() % 64];
                    f.bytes_mut()[..src.len()].copy_from_slice(src);
                    let mut pkt = Pkt::in_frame(f, src.len());
                    // In-order PSNs per QP (bytes 50..53 of the BTH over IPv4).
                    let b = (psn / 64).to_be_bytes();
                    pkt.data_mut()[51..54].copy_from_slice(&b[1..4]);
                    psn = psn.wrapping_add(1);
                    q.push(pkt);
                }
                sent += p.tx_burst(now_ns(), &mut q) as u64;
                p.poll(now_ns());
            }
            Ok(sent)
        })
    };
    // Warm up, then measure a window.
    std::thread::sleep(Duration::from_millis(500));
    let (g0, c0, t0) = (sink.count(), cpu_ticks(), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (g1, c1, el) = (sink.count(), cpu_ticks(), t0.elapsed().as_secs_f64());
    stop.store(true, Ordering::Relaxed);
    let sent = sender
        .join()
        .map_err(|_| anyhow::anyhow!("sender panicked"))??;
    drop(sink);
    let hz = sys::clock_ticks() as f64;
    Ok((sent, g1 - g0, el, (c1 - c0) as f64 / hz))
}

fn switch_config(backend: &str, burst: usize) -> String {
    let text = switch_config_ports(backend, burst);
    if backend != "dpdk" {
        return text;
    }
    // Each port a net_af_packet vdev on its veth; EAL's main lcore on the forwarder's core
    // (the switch gives the thread its CPU set back and pins the worker there itself).
    text.replace(
        "name = \"p0\"\n",
        "name = \"p0\"\ndevice = \"net_af_packet_p0,iface=p0\"\n",
    )
    .replace(
        "name = \"p1\"\n",
        "name = \"p1\"\ndevice = \"net_af_packet_p1,iface=p1\"\n",
    ) + &format!(
        "[dpdk]\neal_args = [\"--no-huge\", \"-m\", \"256\", \"--no-shconf\", \"--no-pci\", \
         \"--no-telemetry\", \"-l\", \"{FORWARDER_CORE}\"]\nmbufs = 8192\n"
    )
}

fn switch_config_ports(backend: &str, burst: usize) -> String {
    format!(
        "[switch]\nname = \"bench\"\nworkers = 1\ncores = [{FORWARDER_CORE}]\nidle = \"spin\"\nburst = {burst}\n[reorder]\nenabled = true\n\
         [[port]]\nname = \"p0\"\nbackend = \"{backend}\"\nrole = \"downlink\"\nmac = \"{}\"\naddresses = [\"10.1.0.1/24\"]\n\
         [[port]]\nname = \"p1\"\nbackend = \"{backend}\"\nrole = \"downlink\"\nmac = \"{}\"\naddresses = [\"10.2.0.1/24\"]\n\
         [[neighbor]]\nip = \"10.2.0.2\"\nmac = \"{}\"\nport = \"p1\"\n",
        format_mac(P0_MAC),
        format_mac(P1_MAC),
        format_mac(R_MAC)
    )
}

fn run_case(t: &Topo, cli: &Opts, case: &'static str, size: usize) -> anyhow::Result<Row> {
    let ns = t.w.clone();
    let o = match case {
        "bare AF_XDP loop" => {
            let stop = Arc::new(AtomicBool::new(false));
            let st = stop.clone();
            let burst = cli.burst;
            let fwd = std::thread::spawn(move || -> anyhow::Result<()> {
                Topo::enter(&ns)?;
                core_affinity::set_for_current(core_affinity::CoreId { id: FORWARDER_CORE });
                let mut u = XdpUmem::new(8192, 2048)?;
                let mut a = u.open("p0", &XdpOptions::new("p0"))?;
                let mut b = u.open("p1", &XdpOptions::new("p1"))?;
                let mut v = Vec::with_capacity(burst);
                while !st.load(Ordering::Relaxed) {
                    let now = now_ns();
                    if a.rx_burst(now, &mut v, burst) > 0 {
                        b.tx_burst(now, &mut v);
                        v.clear();
                    }
                    b.poll(now);
                    a.poll(now);
                }
                Ok(())
            });
            std::thread::sleep(Duration::from_millis(300));
            let r = measure(t, size, cli.seconds, P0_MAC)?;
            stop.store(true, Ordering::Relaxed);
            fwd.join()
                .map_err(|_| anyhow::anyhow!("forwarder panicked"))??;
            r
        }
        "sprayswitch AF_XDP" | "sprayswitch AF_PACKET" | "sprayswitch DPDK" => {
            let backend = match case {
                "sprayswitch AF_XDP" => "af_xdp",
                "sprayswitch DPDK" => "dpdk",
                _ => "af_packet",
            };
            let log = std::env::temp_dir().join(format!("{}-{backend}.log", t.w));
            let cfg = std::env::temp_dir().join(format!("{}-{backend}.toml", t.w));
            std::fs::write(&cfg, switch_config(backend, cli.burst))?;
            let mut child = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &t.w,
                    &format!("{}/sprayswitch", cli.bin),
                    "--config",
                ])
                .arg(&cfg)
                .arg("run")
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log)?)
                .spawn()
                .context("starting sprayswitch")?;
            std::thread::sleep(Duration::from_millis(1500));
            if let Some(status) = child.try_wait()? {
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                let _ = std::fs::remove_file(&log);
                bail!("sprayswitch on {backend} exited at start ({status}): {said}");
            }
            let r = measure(t, size, cli.seconds, P0_MAC);
            // SAFETY: SIGTERM to the child we started, by its PID.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
            let _ = std::fs::remove_file(&cfg);
            let _ = std::fs::remove_file(&log);
            std::thread::sleep(Duration::from_millis(300));
            r?
        }
        "Linux bridge" => {
            let w = &t.w;
            sh(&[
                "ip",
                "netns",
                "exec",
                w,
                "sysctl",
                "-qw",
                "net.bridge.bridge-nf-call-iptables=0",
                "net.bridge.bridge-nf-call-ip6tables=0",
                "net.bridge.bridge-nf-call-arptables=0",
            ])
            .ok();
            sh(&["ip", "-n", w, "link", "add", "br0", "type", "bridge"])?;
            for i in ["p0", "p1"] {
                sh(&["ip", "-n", w, "link", "set", i, "master", "br0"])?;
            }
            sh(&["ip", "-n", w, "link", "set", "br0", "up"])?;
            let r = measure(t, size, cli.seconds, R_MAC);
            sh(&["ip", "-n", w, "link", "del", "br0"])?;
            r?
        }
        _ => {
            let w = &t.w;
            sh(&["ip", "-n", w, "addr", "add", "10.1.0.1/24", "dev", "p0"])?;
            sh(&["ip", "-n", w, "addr", "add", "10.2.0.1/24", "dev", "p1"])?;
            sh(&[
                "ip",
                "-n",
                w,
                "neigh",
                "replace",
                "10.2.0.2",
                "lladdr",
                &format_mac(R_MAC),
                "dev",
                "p1",
                "nud",
                "permanent",
            ])?;
            sh(&[
                "ip",
                "netns",
                "exec",
                w,
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1",
            ])?;
            let r = measure(t, size, cli.seconds, P0_MAC);
            sh(&[
                "ip",
                "netns",
                "exec",
                w,
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=0",
            ])?;
            sh(&["ip", "-n", w, "addr", "flush", "dev", "p0"])?;
            sh(&["ip", "-n", w, "addr", "flush", "dev", "p1"])?;
            r?
        }
    };
    Ok(Row {
        case,
        size,
        round: 0,
        sent: o.sent,
        got: o.got,
        secs: o.secs,
        cpu_s: o.cpu_s,
        lat: o.lat,
    })
}

/// Sets up the namespaces, runs every case asked for and prints the tables.
///
/// # Errors
/// When the namespaces cannot be made (it needs root) or a case fails.
pub fn run(cli: &Opts) -> anyhow::Result<()> {
    let t = Topo::new().context("setting up namespaces (needs root)")?;
    let cases = [
        "bare AF_XDP loop",
        "sprayswitch AF_XDP",
        "sprayswitch AF_PACKET",
        "sprayswitch DPDK",
        "Linux bridge",
        "Linux ip_forward",
    ];
    let mut rows = Vec::new();
    // Size 0: the latency pass (probes at a low rate), after the throughput passes.
    let sizes: Vec<usize> = cli
        .sizes
        .iter()
        .copied()
        .filter(|&s| s > 0)
        .chain(cli.latency.then_some(0))
        .collect();
    for &size in &sizes {
        let rounds = if size == 0 { 1 } else { cli.repeat.max(1) };
        for round in 0..rounds {
            for (case, key) in cases
                .into_iter()
                .zip(["bare", "xdp", "packet", "dpdk", "bridge", "forward"])
            {
                let asked = if cli.cases.is_empty() {
                    key != "dpdk"
                } else {
                    cli.cases.iter().any(|c| c == key)
                };
                if !asked {
                    continue;
                }
                let r =
                    run_case(&t, cli, case, size).with_context(|| format!("{case} at {size} B"))?;
                rows.push(Row { round, ..r });
            }
        }
    }
    print_throughput(&rows, &cases, cli.repeat.max(1));
    let lat: Vec<&Row> = rows.iter().filter(|r| r.lat.is_some()).collect();
    if !lat.is_empty() {
        println!("\none-way latency, 2000 UD probes of 64 B at 10 kpps (AF_PACKET at both hosts)");
        println!("{:<24} {:>10} {:>10}", "case", "p50 us", "p99 us");
        for r in lat {
            let (p50, p99) = r.lat.unwrap_or_default();
            println!("{:<24} {:>10.1} {:>10.1}", r.case, p50, p99);
        }
    }
    Ok(())
}
