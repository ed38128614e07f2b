//! End to end on real Linux network stacks: `scripts/netns-rack.sh` builds a rack pair in
//! network namespaces (four Linux hosts, two sprayswitch ToRs on AF_XDP, the fabric emulator
//! with four paths of 0/20/40/60 us), and the hosts talk through it.
//!
//! - Linux hosts with nothing but a default route ping each other and move data over TCP.
//! - RoCEv2 RDMA WRITEs from the traffic generator's requester (on host a1, over AF_PACKET) to a
//!   Go-Back-N responder (host b1) cross the sprayed fabric. A capture taken at b1 by tcpdump,
//!   read by the capture analyser, shows every request in PSN order with the reorder stage, and
//!   out of order without it.
//! - Taking one fabric path down in the middle of a transfer stalls no QP.
//!
//! Needs root; reported as skipped otherwise (required in CI, see scripts/test.sh). The rack
//! processes and namespaces are removed by a guard, also when an assertion fails.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sprayswitch::port::afpacket::AfPacketPort;
use sprayswitch::port::Port;
use sprayswitch::wire::{Pmtu, Psn};
use sprayswitch_harness::rack::topo::mac;
use sprayswitch_models::rnic::{Endpoint, ReceiverMode, Requester, Responder, Work};
use sprayswitch_packet::capture::analyze::Analyzer;
use sprayswitch_tests::netns::{available, ChildGuard};
use sprayswitch_tests::read_capture;

/// One rack at a time: the tests share the machine's two cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn bin_dir() -> PathBuf {
    sprayswitch_tests::bin_dir(&[
        "sprayswitch",
        "sprayfabric",
        "sprayrack",
        "sprayrackd",
        "sprayctl",
        "rocegen",
        "rocelat",
    ])
}

/// A running rack; torn down on drop.
struct Rack {
    name: String,
}

impl Rack {
    /// A rack named `tag` (plus this process's PID) with netns-rack.sh's settings `env`.
    ///
    /// The hold timeout is 20 ms unless `env` sets `HOLD_US`, as for the Soft-RoCE rack: the
    /// debug build's switch processes (what `cargo test` runs), the test's own hosts and tcpdump
    /// share two cores, and a process now and then waits longer than the default 5 ms for one;
    /// the gap it leaves at ToR B was then released as a loss and its packets came late
    /// (workspace runs of these tests failed so, in one of three, with nothing dropped
    /// anywhere). The tests here are about order and recovery, not about how soon a gap is
    /// given up.
    fn up(tag: &str, env: &[(&str, &str)]) -> Rack {
        let name = format!("{tag}{}", std::process::id());
        let rack = Rack { name };
        let out = Command::new(repo().join("scripts/netns-rack.sh"))
            .args(["up", &rack.name])
            .env("BIN", bin_dir())
            .env("HOLD_US", "20000")
            .envs(env.iter().copied())
            .output()
            .expect("netns-rack.sh");
        assert!(
            out.status.success(),
            "rack up failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        rack
    }

    fn ns(&self, n: &str) -> String {
        format!("ssr-{}-{n}", self.name)
    }

    fn exec(&self, n: &str, args: &[&str]) -> std::process::Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns(n)])
            .args(args)
            .output()
            .expect("ip netns exec")
    }

    /// Runs `f` on a thread inside namespace `n`.
    fn run<T: Send>(&self, n: &str, f: impl FnOnce() -> T + Send) -> T {
        let ns = self.ns(n);
        std::thread::scope(|s| {
            s.spawn(|| {
                sprayswitch_tests::netns::enter(&ns);
                f()
            })
            .join()
            .expect("thread in namespace")
        })
    }

    fn log(&self, which: &str) -> String {
        std::fs::read_to_string(format!("/run/sprayswitch-rack/{}/{which}.log", self.name))
            .unwrap_or_default()
    }
}

impl Drop for Rack {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/netns-rack.sh"))
            .args(["down", &self.name])
            .output();
    }
}

fn ping(rack: &Rack, from: &str, to: &str, count: u32) -> u32 {
    let out = rack.exec(
        from,
        &[
            "ping",
            "-c",
            &count.to_string(),
            "-i",
            "0.05",
            "-W",
            "2",
            "-q",
            to,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.split(',')
        .find_map(|p| p.trim().strip_suffix(" received"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Every ping of every case (from host, to address, count, what it shows) gets its answer.
fn pings_arrive(rack: &Rack, cases: &[(&str, &str, u32, &str)]) {
    for &(from, to, count, what) in cases {
        assert_eq!(ping(rack, from, to, count), count, "{what}");
    }
}

#[test]
fn linux_hosts_ping_and_talk_tcp_through_the_rack() {
    if !available("linux_hosts_ping_and_talk_tcp_through_the_rack") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rack = Rack::up("tcp", &[]);
    hosts_ping_and_talk_tcp(&rack);
    assert!(
        rack.log("tor-a").contains("af_xdp"),
        "{}",
        rack.log("tor-a")
    );
    // What each port was opened as: AF_XDP, its XDP mode, each queue bound in copy mode (veth
    // has no zero copy), its rings.
    let ports = tor_show(&rack, "tor-a", "ports");
    let backend = ports["data"][0]["backend"].as_str().unwrap_or_default();
    assert!(
        backend.starts_with("af_xdp ") && backend.contains("queues 1 (copy), rings 1024/2048 fill"),
        "{ports}"
    );
}

/// Linux hosts with nothing but a default route ping each other across the fabric and inside
/// rack A, and a1 sends 8 MB to b1 over TCP.
fn hosts_ping_and_talk_tcp(rack: &Rack) {
    // The first packet towards a host not yet resolved is dropped (counted) while the ToR asks
    // for its MAC; warm the neighbour tables up, then expect no loss.
    for (a, b) in [
        ("a1", "10.2.1.2"),
        ("b1", "10.1.1.2"),
        ("a2", "10.2.2.2"),
        ("a1", "10.1.2.2"),
    ] {
        ping(rack, a, b, 2);
    }
    pings_arrive(
        rack,
        &[
            ("a1", "10.2.1.2", 20, "a1 -> b1 across the fabric"),
            ("a2", "10.2.2.2", 20, "a2 -> b2 across the fabric"),
            ("a1", "10.1.2.2", 10, "a1 -> a2 inside rack A"),
        ],
    );
    assert_eq!(ping(rack, "a1", "10.1.1.1", 5), 5, "a1 -> its gateway");

    // 8 MB over TCP from a1 to b1 and an answer back.
    let listener = rack.run("b1", || TcpListener::bind("10.2.1.2:5001").expect("listen"));
    let data: Vec<u8> = (0..8u32 << 20).map(|i| (i * 7 + i / 4099) as u8).collect();
    let sum: u64 = data.iter().map(|&b| u64::from(b)).sum();
    std::thread::scope(|s| {
        let server = s.spawn(move || {
            // Never block forever: a failed connect must fail the test, not hang it.
            listener.set_nonblocking(true).unwrap();
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut c = loop {
                match listener.accept() {
                    Ok((c, _)) => break c,
                    Err(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(e) => return Err(format!("no connection from a1: {e}")),
                }
            };
            c.set_nonblocking(false).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut got = Vec::new();
            c.read_to_end(&mut got).expect("read");
            let sum: u64 = got.iter().map(|&b| u64::from(b)).sum();
            Ok((got.len(), sum))
        });
        rack.run("a1", || {
            let mut c = TcpStream::connect_timeout(
                &"10.2.1.2:5001".parse().unwrap(),
                Duration::from_secs(5),
            )
            .expect("connect a1 -> b1");
            c.write_all(&data).expect("send");
        });
        assert_eq!(server.join().unwrap(), Ok((data.len(), sum)));
    });
}

/// The same rack with every ToR port a DPDK port (a `net_af_packet` vdev on its veth; the
/// fabric emulator stays on AF_XDP): Linux hosts ping and talk TCP, and RoCE WRITEs sprayed
/// over the four skewed paths reach a Go-Back-N responder in order.
#[cfg(feature = "dpdk")]
#[test]
fn dpdk_ports_carry_the_rack() {
    if !available("dpdk_ports_carry_the_rack") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rack = Rack::up("dp", &[("BACKEND", "dpdk")]);
    for tor in ["tor-a", "tor-b"] {
        let log = rack.log(tor);
        assert!(
            log.contains("dpdk net_af_packet_h1 (net_af_packet)"),
            "{tor}: {log}"
        );
    }
    hosts_ping_and_talk_tcp(&rack);
    let (req, resp) = rocegen_across(&rack, "32", &[]);
    assert_eq!(req["completed"], 320);
    assert_eq!(resp["accepted"], 320 * 32);
    let b = tor_counters(&rack, "tor-b");
    assert!(
        b["data"]["reorder"]["held_total"].as_u64().unwrap_or(0) > 0,
        "ToR B reordered: {b}"
    );
}

/// Result of one RoCE transfer.
struct Transfer {
    completed: u64,
    posted: u64,
    out_of_sequence: u64,
    naks: u64,
    /// What the capture analyser read in the capture taken at b1: (requests, reordered).
    at_host: (u64, u64),
}

/// WRITEs from a1 to b1 over `qps` QPs, 32 packets outstanding on each; `mid` runs once,
/// halfway through.
fn roce_transfer(rack: &Rack, qps: u32, messages: u32, mid: &dyn Fn()) -> Transfer {
    roce_transfer_with(rack, qps, messages, 32, mid)
}

/// [`roce_transfer`] with `window` packets outstanding per QP.
fn roce_transfer_with(
    rack: &Rack,
    qps: u32,
    messages: u32,
    window: u32,
    mid: &dyn Fn(),
) -> Transfer {
    let cap = std::env::temp_dir().join(format!("ssw-rack-{}-{}.pcap", rack.name, qps));
    let mut tcpdump = ChildGuard(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &rack.ns("b1"),
                "tcpdump",
                "-i",
                "eth0",
                "-U",
            ])
            .args([
                "-w",
                cap.to_str().unwrap(),
                "udp port 4791 and dst host 10.2.1.2",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump (apt-get install tcpdump)"),
    );
    // tcpdump says "listening on" once its socket is open.
    let mut err = std::io::BufReader::new(tcpdump.0.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("listening") {
        // EOF (tcpdump exited) ends the loop with what it printed.
        if std::io::BufRead::read_line(&mut err, &mut said).unwrap_or(0) == 0 {
            break;
        }
    }
    assert!(said.contains("listening"), "tcpdump: {said}");

    let mut a = rack.run("a1", || {
        AfPacketPort::open("a1", "eth0").expect("port on a1")
    });
    let mut b = rack.run("b1", || {
        AfPacketPort::open("b1", "eth0").expect("port on b1")
    });
    let (ip_a, ip_b) = (Ipv4Addr::new(10, 1, 1, 2), Ipv4Addr::new(10, 2, 1, 2));
    let pmtu = Pmtu::DEFAULT;
    let mut pairs = Vec::new();
    for q in 0..qps {
        let (qpn_a, qpn_b) = (0x100 + q, 0x800 + q);
        let sport = 49152 + q as u16;
        let ea = Endpoint {
            mac: mac(1, 3, 1),
            gw_mac: mac(1, 1, 1),
            ip: IpAddr::V4(ip_a),
            peer_ip: IpAddr::V4(ip_b),
            peer_qpn: qpn_b,
            sport,
        };
        let eb = Endpoint {
            mac: mac(2, 3, 1),
            gw_mac: mac(2, 1, 1),
            ip: IpAddr::V4(ip_b),
            peer_ip: IpAddr::V4(ip_a),
            peer_qpn: qpn_a,
            sport,
        };
        let start = Psn::new(0x10_0000 * (q + 1));
        // Retransmission timeout 67 ms (perftest's default).
        let mut req = Requester::new(ea, start, pmtu, window, 67_000_000);
        let mut resp = Responder::new(eb, start, pmtu, 8);
        resp.set_mode(ReceiverMode::Gbn);
        for _ in 0..messages {
            req.post(Work::Write(16 * 1024));
        }
        pairs.push((qpn_a, qpn_b, req, resp));
    }
    let posted = u64::from(qps * messages);
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(60);
    let mut rx = Vec::with_capacity(64);
    let mut mid_done = false;
    while Instant::now() < deadline {
        let now = t0.elapsed().as_nanos() as u64 + 1;
        for (_, _, req, _) in pairs.iter_mut() {
            req.poll(now, &mut a);
        }
        let mut work = 0;
        a.rx_burst(now, &mut rx, 64);
        work += rx.len();
        for p in rx.drain(..) {
            // A host's own ARP or ND frames are shorter than a BTH: not for the QPs.
            let Some(q) = p.data().get(47..50) else {
                continue;
            };
            let qpn = u32::from_be_bytes([0, q[0], q[1], q[2]]);
            if let Some(x) = pairs.iter_mut().find(|x| x.0 == qpn) {
                x.2.handle(p.data(), now);
            }
        }
        b.rx_burst(now, &mut rx, 64);
        work += rx.len();
        for p in rx.drain(..) {
            // A host's own ARP or ND frames are shorter than a BTH: not for the QPs.
            let Some(q) = p.data().get(47..50) else {
                continue;
            };
            let qpn = u32::from_be_bytes([0, q[0], q[1], q[2]]);
            if let Some(x) = pairs.iter_mut().find(|x| x.1 == qpn) {
                x.3.handle(p.data(), now, &mut b);
            }
        }
        let completed: u64 = pairs.iter().map(|x| x.2.stats.completed).sum();
        if !mid_done && completed * 2 >= posted {
            mid();
            mid_done = true;
        }
        if pairs.iter().all(|x| x.2.done()) {
            break;
        }
        if work == 0 {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: SIGTERM to the tcpdump we started (its PID); it flushes and exits.
    unsafe { libc::kill(tcpdump.0.id() as i32, libc::SIGTERM) };
    let _ = tcpdump.0.wait();
    let mut an = Analyzer::default();
    for f in read_capture(&cap) {
        an.add(&f);
    }
    let _ = std::fs::remove_file(&cap);
    eprintln!(
        "{}: {} of {} WRITEs in {:.2} s; at b1: {} request packets, {} out of order; responder: {} out of sequence, {} NAKs",
        rack.name,
        pairs.iter().map(|x| x.2.stats.completed).sum::<u64>(),
        posted,
        t0.elapsed().as_secs_f64(),
        an.reports().iter().filter(|r| r.direction == "request").map(|r| r.packets).sum::<u64>(),
        an.reports().iter().filter(|r| r.direction == "request").map(|r| r.reordered).sum::<u64>(),
        pairs.iter().map(|x| x.3.stats.out_of_sequence).sum::<u64>(),
        pairs.iter().map(|x| x.3.stats.naks).sum::<u64>(),
    );
    // What the ToRs saw: a gap released by the hold timeout or by path order, a late packet.
    for tor in ["tor-a", "tor-b"] {
        let c = tor_counters(rack, tor);
        eprintln!("{tor} reorder: {}", c["data"]["reorder"]);
        eprintln!("{tor} drops: {}", c["data"]["drops"]);
    }
    let reqs: Vec<_> = an
        .reports()
        .into_iter()
        .filter(|r| r.direction == "request")
        .collect();
    Transfer {
        completed: pairs.iter().map(|x| x.2.stats.completed).sum(),
        posted,
        out_of_sequence: pairs.iter().map(|x| x.3.stats.out_of_sequence).sum(),
        naks: pairs.iter().map(|x| x.3.stats.naks).sum(),
        at_host: (
            reqs.iter().map(|r| r.packets).sum(),
            reqs.iter().map(|r| r.reordered).sum(),
        ),
    }
}

#[test]
fn roce_arrives_in_order_with_reorder_and_out_of_order_without() {
    if !available("roce_arrives_in_order_with_reorder_and_out_of_order_without") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    {
        let rack = Rack::up("ro", &[]);
        // Resolve b1 at ToR B before the transfer (the first packet would be dropped).
        ping(&rack, "a1", "10.2.1.2", 2);
        let t = roce_transfer(&rack, 4, 100, &|| {});
        assert_eq!(t.completed, t.posted, "every WRITE completes");
        // tcpdump may miss the first packets while it starts; the order of the rest is the point.
        assert!(
            t.at_host.0 > 3200,
            "requests captured at b1: {}",
            t.at_host.0
        );
        assert_eq!(
            t.at_host.1, 0,
            "spray + reorder: nothing out of order at the host"
        );
        assert_eq!(t.out_of_sequence, 0, "the Go-Back-N responder saw no gap");
        assert_eq!(t.naks, 0);
    }
    {
        let rack = Rack::up("nr", &[("REORDER", "0")]);
        ping(&rack, "a1", "10.2.1.2", 2);
        let t = roce_transfer(&rack, 4, 30, &|| {});
        assert!(
            t.at_host.1 > 0,
            "spray without reorder: requests arrive out of order at the host"
        );
        assert!(
            t.out_of_sequence > 0 && t.naks > 0,
            "and the responder NAKs"
        );
    }
}

#[test]
fn a_fabric_path_going_down_mid_transfer_stalls_no_qp() {
    if !available("a_fabric_path_going_down_mid_transfer_stalls_no_qp") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rack = Rack::up("pd", &[]);
    ping(&rack, "a1", "10.2.1.2", 2);
    let down = || {
        let out = rack.exec("tora", &["ip", "link", "set", "u2", "down"]);
        assert!(out.status.success());
    };
    let t = roce_transfer(&rack, 4, 100, &down);
    assert_eq!(t.completed, t.posted, "every QP finished its WRITEs");
}

/// Packets a ToR holds behind a loss keep the receive buffers of the uplinks they came in on.
/// With the ToRs' pools far smaller than what the QPs hold behind their gaps (AF_PACKET: 64
/// buffers per port; AF_XDP: rings of 64 and 64 buffers per port in the worker's one UMEM,
/// against 16 QPs of 256 packets in flight over a path losing 2%) and a hold timeout too long
/// to rescue anything (2 s), ToR B gives up its oldest gaps when a pool runs low: its uplinks
/// keep receiving the retransmissions that fill the gaps (AF_XDP's fill ring never runs
/// empty), and every WRITE completes without a gap waiting for its timeout. On each backend of its own.
/// (Without the give-ups the AF_PACKET rack completed 308 of the 640 WRITEs in 60 s, with 49
/// gaps left to their timeout.)
#[test]
fn small_receive_pools_never_stop_a_tors_ports() {
    if !available("small_receive_pools_never_stop_a_tors_ports") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (tag, backend, opened) in [
        ("pp", "af_packet", "af_packet on u0, 64 buffers"),
        ("px", "af_xdp", "on u0, queues 1 (copy), rings 64/128 fill"),
    ] {
        let rack = Rack::up(
            tag,
            &[
                ("BACKEND", backend),
                ("LOSS", "0 0.02 0 0"),
                ("HOLD_US", "2000000"),
                ("RX_BUFFERS", "64"),
                ("RING_SIZE", "64"),
            ],
        );
        assert!(rack.log("tor-b").contains(opened), "{}", rack.log("tor-b"));
        ping(&rack, "a1", "10.2.1.2", 2);
        let t = roce_transfer_with(&rack, 16, 40, 256, &|| {});
        assert_eq!(t.completed, t.posted, "{backend}: every WRITE completes");
        let ports = tor_show(&rack, "tor-b", "ports");
        for u in ports["data"].as_array().unwrap() {
            if u["role"] != "uplink" {
                continue;
            }
            // AF_XDP's pool running dry shows as its fill ring empty (the kernel's
            // rx_fill_ring_empty_descs). AF_PACKET's shows only as frames left in the kernel's
            // ring until it overflows, which a debug build's worker falling behind does too
            // (about 1% here): not asserted.
            if backend == "af_xdp" {
                assert_eq!(u["backend_rx_no_buffer"].as_u64(), Some(0), "{u}");
            }
        }
        let b = &tor_counters(&rack, "tor-b")["data"]["reorder"];
        assert!(
            b["pool_give_ups"].as_u64().unwrap() > 0,
            "{backend}: the pools ran low: {b}"
        );
        assert_eq!(
            b["timeouts"].as_u64(),
            Some(0),
            "{backend}: no gap waited for its timeout: {b}"
        );
    }
}

#[test]
fn rocegen_carries_roce_across_the_sprayed_fabric_in_order() {
    if !available("rocegen_carries_roce_across_the_sprayed_fabric_in_order") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rack = Rack::up("rg", &[]);
    let (req, resp) = rocegen_across(&rack, "32", &[]);
    assert_eq!(req["completed"], 320);
    assert_eq!(resp["accepted"], 320 * 32);
}

#[test]
fn roce_mtu_4096_crosses_the_rack_on_af_xdp_multi_buffer() {
    if !available("roce_mtu_4096_crosses_the_rack_on_af_xdp_multi_buffer") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Jumbo links everywhere, AF_XDP forced: 4096-byte RoCE payloads make ~4.2 KB frames,
    // larger than a UMEM frame, so every data packet crosses each switch as a multi-buffer frame.
    let rack = Rack::up("jm", &[("MTU", "9000"), ("BACKEND", "af_xdp")]);
    // A window of 4 messages per QP (about 256 jumbo frames in flight). With 32, the switches
    // of a debug build (what `cargo test` runs) fell behind in one of three workspace runs:
    // 2 NAKs, 28 requests out of sequence, repaired; the release build showed no drop and no
    // hold timeout in three runs by hand. The test is about multi-buffer frames, not load.
    let (req, resp) = rocegen_across(&rack, "4", &["--pmtu", "4096"]);
    assert_eq!(req["completed"], 320);
    // 32 KiB messages in 4096-byte packets.
    assert_eq!(resp["accepted"], 320 * 8);
    for tor in ["tor-a", "tor-b"] {
        let log = rack.log(tor);
        assert!(log.contains("multi-buffer"), "{tor}: {log}");
        assert!(!log.contains("AF_PACKET"), "{tor} fell back: {log}");
    }
}

#[test]
fn the_one_process_rack_forwards_sprays_and_reorders_like_the_split_one() {
    if !available("the_one_process_rack_forwards_sprays_and_reorders_like_the_split_one") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Both ToRs and the fabric in one process and one thread (sprayrackd), event-driven.
    let rack = Rack::up("one", &[("SHAPE", "one"), ("IDLE", "wait")]);
    for (a, b) in [("a1", "10.2.1.2"), ("b2", "10.1.2.2"), ("a1", "10.1.2.2")] {
        ping(&rack, a, b, 2);
    }
    pings_arrive(
        &rack,
        &[
            ("a1", "10.2.1.2", 10, "a1 -> b1 across the fabric"),
            ("b2", "10.1.2.2", 10, "b2 -> a2 across the fabric"),
            ("a1", "10.1.2.2", 5, "a1 -> a2 inside rack A"),
        ],
    );
    // RoCE WRITEs sprayed over the four skewed paths arrive in order at a Go-Back-N responder.
    let (req, resp) = rocegen_across(&rack, "32", &[]);
    assert_eq!(req["completed"], 320);
    assert_eq!(resp["accepted"], 320 * 32);
    // Each ToR answers on its own control socket, and ToR B's reorder stage did the work.
    let a = tor_counters(&rack, "tor-a");
    let b = tor_counters(&rack, "tor-b");
    let sprayed = a["data"]["sprayed"].as_u64().unwrap_or(0);
    let held = b["data"]["reorder"]["held_total"].as_u64().unwrap_or(0);
    assert!(sprayed >= 320 * 32, "ToR A sprayed the requests: {a}");
    assert!(
        held > 0,
        "the skewed paths reordered and ToR B held packets: {b}"
    );
    let log = rack.log("rack");
    assert!(
        log.contains("rack running") && log.contains("af_xdp"),
        "{log}"
    );
}

/// `sprayctl --json show counters` of ToR `tor` (`tor-a`, `tor-b`) of `rack`.
fn tor_counters(rack: &Rack, tor: &str) -> serde_json::Value {
    tor_show(rack, tor, "counters")
}

/// `sprayctl --json show WHAT` at a ToR.
fn tor_show(rack: &Rack, tor: &str, what: &str) -> serde_json::Value {
    let sock = format!("/run/sprayswitch-rack/{}/{tor}.sock", rack.name);
    let out = Command::new(bin_dir().join("sprayctl"))
        .args(["-s", &sock, "--json", "show", what])
        .output()
        .expect("sprayctl");
    assert!(
        out.status.success(),
        "{tor}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("counters JSON")
}

/// rocegen WRITEs from a1 to b1 over 8 QPs (40 messages of 32 KiB each, `window` outstanding
/// per QP, plus `extra` arguments), against a Go-Back-N responder at b1. Checks that every message completed
/// without a NAK and that the responder saw every request in order; returns both reports.
fn rocegen_across(
    rack: &Rack,
    window: &str,
    extra: &[&str],
) -> (serde_json::Value, serde_json::Value) {
    ping(rack, "a1", "10.2.1.2", 2);
    let gen = bin_dir().join("rocegen");
    let gen = gen.to_str().unwrap();
    let responder = ChildGuard(
        Command::new("ip")
            .args(["netns", "exec", &rack.ns("b1"), gen, "--json", "responder"])
            .args(["--mode", "gbn", "--idle-exit", "2"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("rocegen responder"),
    );
    let out = rack.exec(
        "a1",
        &[
            gen,
            "--json",
            "requester",
            "--peer",
            "10.2.1.2",
            "--qps",
            "8",
            "--messages",
            "40",
            "--size",
            "32768",
            "--window",
            window,
        ]
        .iter()
        .chain(extra)
        .copied()
        .collect::<Vec<_>>(),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "requester: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let req: serde_json::Value = serde_json::from_str(text.trim()).expect("requester JSON");
    let mut responder = responder;
    let mut rtext = String::new();
    responder
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut rtext)
        .unwrap();
    let _ = responder.0.wait();
    let resp: serde_json::Value = serde_json::from_str(rtext.trim()).expect("responder JSON");
    eprintln!("requester {req}\nresponder {resp}");
    for tor in ["tor-a", "tor-b"] {
        let c = tor_counters(rack, tor);
        eprintln!("{tor} reorder: {}", c["data"]["reorder"]);
        eprintln!("{tor} drops: {}", c["data"]["drops"]);
    }
    for ns in ["tora", "fab", "torb"] {
        let out = Command::new("ip")
            .args(["-n", &format!("ssr-{}-{ns}", rack.name), "-s", "link"])
            .output();
        if let Ok(o) = out {
            eprintln!("{ns} links:\n{}", String::from_utf8_lossy(&o.stdout));
        }
    }
    assert_eq!(req["completed"], req["posted"]);
    assert_eq!(req["naks"], 0);
    assert_eq!(resp["qps"], 8);
    assert_eq!(
        resp["out_of_sequence"], 0,
        "the Go-Back-N responder saw every request in order"
    );
    (req, resp)
}
