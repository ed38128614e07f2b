//! The real-port backends against the Linux network stack: a host namespace sends UDP
//! datagrams over a veth to a port opened in a switch namespace; the test's loop answers each
//! one through the same port (turned around in place, so an AF_XDP port sends the received
//! UMEM frame back as a descriptor; and once more from a heap copy), and the host must receive
//! the answers. Needs root; reported as skipped otherwise (required in CI).

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use sprayswitch::pkt::Pkt;
use sprayswitch::port::afpacket::AfPacketPort;
use sprayswitch::port::xdp::{XdpMode, XdpOptions, XdpUmem};
use sprayswitch::port::{LinkState, Port};
use sprayswitch::time::now_ns;
use sprayswitch_tests::netns::{available, veth, Netns};

const HOST_MAC: &str = "02:00:00:00:77:01";
const PORT_MAC: &str = "02:00:00:00:77:02";

struct Pair {
    host: Netns,
    sw: Netns,
}

fn pair() -> Pair {
    let host = Netns::new("rp-h");
    let sw = Netns::new("rp-s");
    veth(&host, "a0", HOST_MAC, &sw, "b0", PORT_MAC);
    host.ip(&["addr", "add", "10.77.0.1/24", "dev", "a0"]);
    host.ip(&[
        "neigh",
        "add",
        "10.77.0.2",
        "lladdr",
        PORT_MAC,
        "dev",
        "a0",
        "nud",
        "permanent",
    ]);
    Pair { host, sw }
}

/// Turns a UDP/IPv4 frame around in place: swaps MACs, addresses and ports, clears the UDP
/// checksum (optional in IPv4); the IPv4 header checksum does not change.
fn turn_around(f: &mut [u8]) {
    turn_around_at(f, 14);
}

/// As [`turn_around`], for an IPv4 header at `l3` (18 behind a VLAN tag).
fn turn_around_at(f: &mut [u8], l3: usize) {
    for i in 0..6 {
        f.swap(i, 6 + i);
    }
    for i in 0..4 {
        f.swap(l3 + 12 + i, l3 + 16 + i);
    }
    f.swap(l3 + 20, l3 + 22);
    f.swap(l3 + 21, l3 + 23);
    f[l3 + 26] = 0;
    f[l3 + 27] = 0;
}

fn is_udp_to(f: &[u8], port: u16) -> bool {
    f.len() >= 42 && f[12..14] == [0x08, 0x00] && f[23] == 17 && f[36..38] == port.to_be_bytes()
}

/// A UDP/IPv4 datagram to `port` behind an 802.1Q tag with VLAN id `vid`.
fn is_tagged_udp_to(f: &[u8], vid: u16, port: u16) -> bool {
    f.len() >= 46
        && f[12..14] == [0x81, 0x00]
        && u16::from_be_bytes([f[14], f[15]]) & 0x0fff == vid
        && f[16..18] == [0x08, 0x00]
        && f[27] == 17
        && f[40..42] == port.to_be_bytes()
}

/// Receives until a datagram for UDP port 9999 arrives (others, if any, are ignored).
fn recv_udp(port: &mut dyn Port) -> Pkt {
    recv_matching(port, |f| is_udp_to(f, 9999))
}

fn send_all(port: &mut dyn Port, pkt: Pkt) {
    let mut q = vec![pkt];
    let deadline = Instant::now() + Duration::from_secs(5);
    while !q.is_empty() {
        assert!(Instant::now() < deadline, "the port never took the frame");
        port.tx_burst(now_ns(), &mut q);
        port.poll(now_ns());
    }
    // Let the kernel complete the transmission.
    for _ in 0..50 {
        port.poll(now_ns());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits for carrier: the kernel reports it (IFF_RUNNING) through its link watcher, up to a
/// second after the veth came up; frames sent before are lost.
fn wait_link_up(port: &mut dyn Port) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while port.link_state() != LinkState::Up {
        assert!(Instant::now() < deadline, "the port's link never came up");
        port.poll(now_ns());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The host sends two datagrams; the port answers the first with the received frame itself
/// and the second with a heap copy. Returns the answers the host got.
fn echo_through(p: &Pair, port: &mut dyn Port) -> Vec<Vec<u8>> {
    wait_link_up(port);
    std::thread::scope(|s| {
        let host = s.spawn(|| {
            p.host.enter();
            let sock = UdpSocket::bind("10.77.0.1:0").unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut answers = Vec::new();
            for msg in [&b"first: same frame"[..], &b"second: heap copy"[..]] {
                sock.send_to(msg, "10.77.0.2:9999").unwrap();
                let mut buf = [0u8; 2048];
                let (n, from) = sock.recv_from(&mut buf).expect("an answer");
                assert_eq!(from.to_string(), "10.77.0.2:9999");
                answers.push(buf[..n].to_vec());
            }
            answers
        });
        let mut first = recv_udp(port);
        turn_around(first.data_mut());
        send_all(port, first);
        let second = recv_udp(port);
        let mut copy = Pkt::from_slice(second.data());
        drop(second);
        turn_around(copy.data_mut());
        send_all(port, copy);
        host.join().unwrap()
    })
}

fn expect_answers(got: Vec<Vec<u8>>) {
    assert_eq!(
        got,
        vec![b"first: same frame".to_vec(), b"second: heap copy".to_vec()]
    );
}

#[test]
fn af_xdp_port_receives_and_transmits() {
    if !available("af_xdp_port_receives_and_transmits") {
        return;
    }
    let p = pair();
    for mode in [XdpMode::Native, XdpMode::Skb] {
        let (mut umem, mut port) = p.sw.run(|| {
            let mut umem = XdpUmem::new(4096, 4096).unwrap();
            let mut o = XdpOptions::new("b0");
            o.mode = Some(mode);
            let port = umem.open("b0", &o).unwrap_or_else(|e| panic!("{e}"));
            (umem, port)
        });
        assert_eq!(port.mode(), mode);
        expect_answers(echo_through(&p, &mut port));
        // Every frame is accounted for: free, in the fill ring, or still in flight.
        let area = umem.area().clone();
        drop(port);
        // Once the sockets are gone, frames the kernel held (the 2048-entry fill ring) are unreachable for good; those
        // given to packets all came back.
        assert!(
            area.free_frames() >= 4096 - 2048 - 2,
            "{}",
            area.free_frames()
        );
        let _ = &mut umem;
    }
}

/// An 802.1Q-tagged UDP/IPv4 frame (VLAN `vid`) from the host to the port, as the host's NIC
/// driver would hand it over (this kernel has no VLAN devices to make one).
fn tagged_udp(vid: u16, payload: &[u8]) -> Vec<u8> {
    let mac = |s: &str| -> Vec<u8> {
        s.split(':')
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect()
    };
    let mut f = Vec::new();
    f.extend(mac(PORT_MAC));
    f.extend(mac(HOST_MAC));
    f.extend([0x81, 0x00]);
    f.extend((0x2000 | vid).to_be_bytes()); // priority 1
    f.extend([0x08, 0x00]);
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 78, 0, 1, 10, 78, 0, 2,
    ];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let mut sum = 0u32;
    for w in ip.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.extend(ip);
    f.extend(4242u16.to_be_bytes());
    f.extend(9999u16.to_be_bytes());
    f.extend((8 + payload.len() as u16).to_be_bytes());
    f.extend([0, 0]);
    f.extend(payload);
    f
}

/// Receives on `port` until a frame matching `want` arrives (others are ignored).
fn recv_matching(port: &mut dyn Port, want: impl Fn(&[u8]) -> bool) -> Pkt {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut rx = Vec::with_capacity(32);
    loop {
        assert!(Instant::now() < deadline, "the frame never arrived");
        port.poll(now_ns());
        port.rx_burst(now_ns(), &mut rx, 32);
        if let Some(i) = rx.iter().position(|f| want(f.data())) {
            return rx.swap_remove(i);
        }
        rx.clear();
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn af_packet_port_keeps_vlan_tags() {
    if !available("af_packet_port_keeps_vlan_tags") {
        return;
    }
    // The receiving kernel strips 802.1Q tags into metadata before packet sockets see a frame;
    // the port puts them back. Both ends are AF_PACKET ports: the switch's answer (tag kept)
    // must reach the host's port tagged too.
    let p = pair();
    let mut port =
        p.sw.run(|| AfPacketPort::open("b0", "b0").unwrap_or_else(|e| panic!("{e}")));
    let mut host = p
        .host
        .run(|| AfPacketPort::open("a0", "a0").unwrap_or_else(|e| panic!("{e}")));
    for end in [&mut port, &mut host] {
        wait_link_up(end);
    }
    let sent = tagged_udp(7, b"tagged");
    send_all(&mut host, Pkt::from_slice(&sent));
    let mut frame = recv_matching(&mut port, |f| is_tagged_udp_to(f, 7, 9999));
    assert_eq!(
        frame.data(),
        &sent[..],
        "received as sent, tag and priority included"
    );
    turn_around_at(frame.data_mut(), 18);
    let answer = Pkt::from_slice(frame.data());
    send_all(&mut port, frame);
    let back = recv_matching(&mut host, |f| {
        f.len() >= 46 && f[12..14] == [0x81, 0x00] && f[46..] == *b"tagged"
    });
    assert_eq!(back.data(), answer.data());
    assert_eq!(port.dropped(), 0);
    assert_eq!(host.dropped(), 0);
}

#[test]
fn af_xdp_port_moves_frames_larger_than_a_umem_frame() {
    if !available("af_xdp_port_moves_frames_larger_than_a_umem_frame") {
        return;
    }
    // RoCE MTU 4096 needs frames of ~4.2 KB; a UMEM frame holds 2048 bytes. With multi-buffer
    // AF_XDP the kernel hands such a frame over as several descriptors and the port
    // reassembles it, then splits the answer again.
    let p = pair();
    for (ns, ifn) in [(&p.host, "a0"), (&p.sw, "b0")] {
        ns.ip(&["link", "set", ifn, "mtu", "9000"]);
    }
    let payload: Vec<u8> = (0..4200u32).map(|i| (i * 7 % 251) as u8).collect();
    for mode in [XdpMode::Native, XdpMode::Skb] {
        let mut port = p.sw.run(|| {
            let mut umem = XdpUmem::new(4096, 2048).unwrap();
            let mut o = XdpOptions::new("b0");
            o.mode = Some(mode);
            umem.open("b0", &o).unwrap_or_else(|e| panic!("{e}"))
        });
        assert!(
            port.multi_buffer(),
            "this kernel (6.6 or later) does multi-buffer"
        );
        wait_link_up(&mut port);
        let answer = std::thread::scope(|s| {
            let host = s.spawn(|| {
                p.host.enter();
                let sock = UdpSocket::bind("10.77.0.1:0").unwrap();
                sock.set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                sock.send_to(&payload, "10.77.0.2:9999").unwrap();
                let mut buf = vec![0u8; 9000];
                let (n, _) = sock.recv_from(&mut buf).expect("an answer");
                buf.truncate(n);
                buf
            });
            let mut frame = recv_udp(&mut port);
            assert_eq!(frame.len(), 14 + 20 + 8 + payload.len(), "{mode:?}");
            assert_eq!(
                &frame.data()[42..],
                &payload[..],
                "{mode:?}: reassembled in order"
            );
            turn_around(frame.data_mut());
            send_all(&mut port, frame);
            host.join().unwrap()
        });
        assert_eq!(
            answer, payload,
            "{mode:?}: the answer was split and rejoined"
        );
        assert_eq!(port.dropped(), 0, "{mode:?}");
    }
}

#[test]
fn af_xdp_port_takes_ring_sizes_and_busy_polling_and_says_how_each_queue_is_bound() {
    if !available("af_xdp_port_takes_ring_sizes_and_busy_polling_and_says_how_each_queue_is_bound")
    {
        return;
    }
    let p = pair();
    let mut port = p.sw.run(|| {
        let mut umem = XdpUmem::new(XdpUmem::frames_for(1, 512, 4096), 4096).unwrap();
        let mut o = XdpOptions::new("b0");
        (o.ring_size, o.fill_size) = (512, 4096);
        o.busy_poll_us = Some(20);
        // A fill ring below the receive ring is refused, naming the port.
        let mut small = o.clone();
        small.fill_size = 256;
        let e = umem.open("b0", &small).unwrap_err().to_string();
        assert!(e.starts_with("port b0: fill ring size"), "{e}");
        umem.open("b0", &o).unwrap_or_else(|e| panic!("{e}"))
    });
    // veth has no zero-copy mode: the kernel bound the socket in copy mode.
    assert_eq!(port.queue_modes(), vec!["copy"]);
    assert!(port.busy_poll(), "this kernel (6.x) has busy polling");
    expect_answers(echo_through(&p, &mut port));
    assert_eq!(port.dropped(), 0);
    // The kernel's statistics as the port's backend counters: nothing dropped here.
    let b = port.backend_counters();
    assert_eq!(
        (b.rx_dropped, b.rx_ring_full, b.invalid),
        (0, 0, 0),
        "{b:?}"
    );
}

/// The host sends 20 datagrams; the port receives them and they are kept (as the reorder
/// stage keeps packets behind a gap): the port's receive pool shows them taken, and has them
/// back once they are dropped. What the worker watches to keep a port receiving.
fn held_packets_pin_the_receive_pool(p: &Pair, port: &mut dyn Port) {
    wait_link_up(port);
    let pool = port.rx_pool().expect("a real port has a receive pool");
    assert!(pool.capacity() > 0);
    let before = pool.free();
    std::thread::scope(|s| {
        s.spawn(|| {
            p.host.enter();
            let sock = UdpSocket::bind("10.77.0.1:0").unwrap();
            for i in 0..20u8 {
                sock.send_to(&[i; 64], "10.77.0.2:9999").unwrap();
            }
        });
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut held, mut rx) = (Vec::new(), Vec::new());
    while held.len() < 20 {
        assert!(Instant::now() < deadline, "got {}", held.len());
        port.rx_burst(now_ns(), &mut rx, 32);
        held.extend(rx.drain(..).filter(|f| is_udp_to(f.data(), 9999)));
        port.poll(now_ns());
    }
    let pinned = before.saturating_sub(pool.free());
    assert!(pinned >= 20, "{pinned} buffers taken for 20 held packets");
    drop(held);
    // (An AF_XDP port hands freed frames to its fill ring on its next poll.)
    assert!(
        pool.free() + 20 >= before,
        "{} free again of {before}",
        pool.free()
    );
}

#[test]
fn held_packets_pin_each_backends_receive_pool() {
    if !available("held_packets_pin_each_backends_receive_pool") {
        return;
    }
    let p = pair();
    let mut port =
        p.sw.run(|| AfPacketPort::open("b0", "b0").unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(port.rx_pool().unwrap().capacity(), 4096);
    held_packets_pin_the_receive_pool(&p, &mut port);
    drop(port);
    let (_umem, mut port) = p.sw.run(|| {
        let mut umem = XdpUmem::new(8192, 2048).unwrap();
        let port = umem
            .open("b0", &XdpOptions::new("b0"))
            .unwrap_or_else(|e| panic!("{e}"));
        (umem, port)
    });
    held_packets_pin_the_receive_pool(&p, &mut port);
}

#[test]
fn af_packet_port_receives_and_transmits() {
    if !available("af_packet_port_receives_and_transmits") {
        return;
    }
    let p = pair();
    let mut port =
        p.sw.run(|| AfPacketPort::open("b0", "b0").unwrap_or_else(|e| panic!("{e}")));
    expect_answers(echo_through(&p, &mut port));
    assert_eq!(port.dropped(), 0);
}

#[test]
fn setup_errors_name_the_port() {
    if !available("setup_errors_name_the_port") {
        return;
    }
    let p = pair();
    p.sw.run(|| {
        let mut umem = XdpUmem::new(64, 2048).unwrap();
        let e = umem
            .open("up9", &XdpOptions::new("nosuch0"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("port up9: interface nosuch0"), "{e}");
        assert!(e.contains("no such interface"), "{e}");
        let e = AfPacketPort::open("dn3", "nosuch0")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("port dn3: interface nosuch0"), "{e}");

        // An MTU larger than any frame the switch handles (multi-buffer takes care of frames
        // larger than a UMEM frame, up to that).
        let out = std::process::Command::new("ip")
            .args(["link", "set", "b0", "mtu", "9500"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let e = umem
            .open("b0", &XdpOptions::new("b0"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("MTU 9500"), "{e}");
        assert!(e.contains("frames of up to 9216 bytes"), "{e}");
        std::process::Command::new("ip")
            .args(["link", "set", "b0", "mtu", "1500"])
            .output()
            .unwrap();

        // An XDP program that is not ours already on the interface: refused at attach (after
        // the socket bound and registered the UMEM); the UMEM stays usable for the next port.
        {
            use sprayswitch::port::sys;
            use sprayswitch::port::xdp::bpf::CountingSink;
            let other = CountingSink::attach(sys::ifindex("b0").unwrap(), XdpMode::Native)
                .unwrap_or_else(|e| panic!("{}: {}", e.what, e.source));
            let mut u = XdpUmem::new(4096, 4096).unwrap();
            let e = u
                .open("b0", &XdpOptions::new("b0"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("another XDP program"), "{e}");
            drop(other);
            let p = u.open("b0", &XdpOptions::new("b0"));
            assert!(p.is_ok(), "{:?}", p.err().map(|e| e.to_string()));
        }

        // A second program on an interface that has one.
        let mut u1 = XdpUmem::new(4096, 4096).unwrap();
        let _held = u1.open("b0", &XdpOptions::new("b0")).unwrap();
        let mut u2 = XdpUmem::new(4096, 4096).unwrap();
        let e = u2
            .open("b0-again", &XdpOptions::new("b0"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("port b0-again:"), "{e}");
        assert!(
            e.contains("another XDP program") || e.contains("still owned"),
            "{e}"
        );
    });
}

#[test]
fn the_counting_sink_counts_what_arrives() {
    if !available("the_counting_sink_counts_what_arrives") {
        return;
    }
    use sprayswitch::port::sys;
    use sprayswitch::port::xdp::bpf::CountingSink;
    let p = pair();
    let sink = p.host.run(|| {
        CountingSink::attach(sys::ifindex("a0").unwrap(), XdpMode::Native)
            .unwrap_or_else(|e| panic!("{}: {}", e.what, e.source))
    });
    let mut port =
        p.sw.run(|| AfPacketPort::open("b0", "b0").unwrap_or_else(|e| panic!("{e}")));
    let mut frames: Vec<Pkt> = (0..100u8).map(|i| Pkt::from_slice(&[i; 60])).collect();
    while !frames.is_empty() {
        port.tx_burst(now_ns(), &mut frames);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while sink.count() < 100 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(sink.count(), 100);
}

/// DPDK ports (`net_af_packet` vdevs on the veth): the same echo as for the other backends,
/// every mbuf back in its pool afterwards, and setup errors that say what to do. EAL starts
/// once per process, so every DPDK test of this binary uses [`dpdk::eal`].
#[cfg(feature = "dpdk")]
mod dpdk {
    use std::sync::atomic::{AtomicU32, Ordering};

    use sprayswitch::pkt::Pkt;
    use sprayswitch::port::dpdk::{init_eal, DpdkOptions, DpdkPort};
    use sprayswitch::port::Port;
    use sprayswitch_tests::netns::available;

    use super::{echo_through, expect_answers, pair, send_all, wait_link_up};

    fn eal_args() -> Vec<String> {
        [
            "--no-huge",
            "-m",
            "256",
            "--no-shconf",
            "--no-pci",
            "--no-telemetry",
            "-l",
            "0",
        ]
        .map(String::from)
        .to_vec()
    }

    fn eal() {
        init_eal(&eal_args()).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Options for a vdev on `iface`, with a name no other test of the process uses.
    fn on(iface: &str) -> DpdkOptions {
        static N: AtomicU32 = AtomicU32::new(0);
        DpdkOptions {
            device: format!(
                "net_af_packet_t{},iface={iface}",
                N.fetch_add(1, Ordering::Relaxed)
            ),
            queues: 1,
            mtu: 1500,
            mbufs: 4096,
            ring: sprayswitch::port::dpdk::RING,
        }
    }

    /// The veth pair with a DPDK port on the switch's end, EAL started; `None` when the test
    /// is skipped.
    fn opened(test: &str) -> Option<(super::Pair, DpdkPort)> {
        if !available(test) {
            return None;
        }
        eal();
        let p = pair();
        let port =
            p.sw.run(|| DpdkPort::open("b0", &on("b0")).unwrap_or_else(|e| panic!("{e}")));
        Some((p, port))
    }

    /// `on`'s options for the same device.
    fn o_ok(device: &str) -> DpdkOptions {
        DpdkOptions {
            device: device.into(),
            ..on("b0")
        }
    }

    #[test]
    fn dpdk_port_receives_and_transmits_and_returns_every_mbuf() {
        let Some((p, mut port)) = opened("dpdk_port_receives_and_transmits_and_returns_every_mbuf")
        else {
            return;
        };
        assert_eq!(port.driver(), "net_af_packet");
        // The device's MAC is the veth's.
        assert_eq!(port.mac(), [0x02, 0, 0, 0, 0x77, 0x02]);
        let idle = port.pool_in_use();
        // The first answer is the received mbuf turned around in place (no copy), the second
        // a heap copy the port copies into one of its mbufs.
        expect_answers(echo_through(&p, &mut port));
        assert_eq!(port.dropped(), 0);
        assert_eq!(port.linearized(), 0);
        assert_eq!(
            port.pool_in_use(),
            idle,
            "every mbuf is back in the pool (sent ones freed by the driver)"
        );
        // Received packets held by the switch keep their mbufs; dropping them returns them.
        let mut held = Vec::new();
        std::thread::scope(|s| {
            s.spawn(|| {
                p.host.enter();
                let sock = std::net::UdpSocket::bind("10.77.0.1:0").unwrap();
                for i in 0..20u8 {
                    sock.send_to(&[i; 64], "10.77.0.2:9999").unwrap();
                }
            });
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut rx = Vec::new();
        while held.len() < 20 {
            assert!(std::time::Instant::now() < deadline, "got {}", held.len());
            port.rx_burst(sprayswitch::time::now_ns(), &mut rx, 32);
            held.extend(rx.drain(..).filter(|f| super::is_udp_to(f.data(), 9999)));
        }
        assert!(port.pool_in_use() >= idle + 20);
        // The pool as the worker watches it says the same.
        let pool = port.rx_pool().expect("the port's mempool");
        assert_eq!(pool.free(), port.pool_available() as usize);
        assert_eq!(
            pool.capacity(),
            (port.pool_available() + port.pool_in_use()) as usize
        );
        drop(held);
        assert_eq!(port.pool_in_use(), idle);
    }

    #[test]
    fn dpdk_port_drops_and_counts_a_frame_larger_than_its_mtu() {
        let Some((_pair, mut port)) =
            opened("dpdk_port_drops_and_counts_a_frame_larger_than_its_mtu")
        else {
            return;
        };
        wait_link_up(&mut port);
        // A frame from another backend that no mbuf of a 1500-MTU port holds: taken (so it
        // blocks nothing behind it), dropped, counted.
        let mut q = vec![Pkt::from_slice(&[0u8; 4000]), Pkt::from_slice(&[0u8; 60])];
        let taken = port.tx_burst(sprayswitch::time::now_ns(), &mut q);
        assert_eq!(taken, 2);
        assert_eq!(port.dropped(), 1);
        send_all(&mut port, Pkt::from_slice(&[0u8; 60]));
    }

    /// The switch binary (built with the feature) with a vdev named in `[dpdk] eal_args`;
    /// then without `--no-huge` on a machine with no hugepages: the error says what to do.
    #[test]
    fn the_switch_binary_takes_a_vdev_from_eal_args_and_names_missing_hugepages() {
        if !available("the_switch_binary_takes_a_vdev_from_eal_args_and_names_missing_hugepages") {
            return;
        }
        let p = pair();
        let bin = sprayswitch_tests::bin_dir(&["sprayswitch"]).join("sprayswitch");
        let dir = std::env::temp_dir().join(format!("ssw-dpdk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let run = |eal: &str| {
            let cfg = dir.join("sw.toml");
            std::fs::write(
                &cfg,
                format!(
                    "[switch]\nname = \"dp\"\n[[port]]\nname = \"p0\"\nbackend = \"dpdk\"\n\
                     device = \"net_af_packet0\"\nrole = \"downlink\"\nmac = \"02:00:00:00:77:02\"\n\
                     addresses = [\"10.77.0.2/24\"]\n[dpdk]\neal_args = [{eal}]\nmbufs = 4096\n"
                ),
            )
            .unwrap();
            std::process::Command::new("ip")
                .args(["netns", "exec", &p.sw.name])
                .arg(&bin)
                .arg("--config")
                .arg(&cfg)
                .args([
                    "run",
                    "--duration",
                    "1",
                    "--no-socket",
                    "--stats-interval",
                    "0",
                ])
                .env("RUST_LOG", "info")
                .output()
                .expect("sprayswitch")
        };
        let vdev = "\"--vdev\", \"net_af_packet0,iface=b0\"";
        let out = run(&format!(
            "\"--no-huge\", \"-m\", \"256\", \"--no-shconf\", \"--no-pci\", \"-l\", \"0\", {vdev}"
        ));
        let said = String::from_utf8_lossy(&out.stderr).to_string()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{said}");
        assert!(
            said.contains("port p0: dpdk net_af_packet0 (net_af_packet) queues 1"),
            "{said}"
        );
        let huge: u64 = std::fs::read_dir("/sys/kernel/mm/hugepages")
            .map(|d| {
                d.flatten()
                    .filter_map(|e| std::fs::read_to_string(e.path().join("nr_hugepages")).ok())
                    .filter_map(|t| t.trim().parse::<u64>().ok())
                    .sum()
            })
            .unwrap_or(0);
        if huge == 0 {
            let out = run(&format!(
                "\"--no-shconf\", \"--no-pci\", \"-l\", \"0\", {vdev}"
            ));
            let said = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success());
            assert!(said.contains("no hugepages are reserved"), "{said}");
            assert!(said.contains("--no-huge"), "{said}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn dpdk_setup_errors_say_what_to_do() {
        if !available("dpdk_setup_errors_say_what_to_do") {
            return;
        }
        eal();
        // EAL runs once per process: other arguments are refused, the same ones accepted.
        let mut other = eal_args();
        other.push("--log-level=*:debug".into());
        let e = init_eal(&other).unwrap_err().to_string();
        assert!(e.contains("initialised already"), "{e}");
        assert!(init_eal(&eal_args()).is_ok());
        let p = pair();
        p.sw.run(|| {
            // The error opening `on("b0")` changed by `change`.
            let refused = |change: &dyn Fn(&mut DpdkOptions)| {
                let mut o = on("b0");
                change(&mut o);
                match DpdkPort::open("up1", &o) {
                    Ok(_) => panic!("{o:?} opened"),
                    Err(e) => e.to_string(),
                }
            };
            let e = refused(&|o| o.device = "0000:3b:00.0".into());
            assert!(
                e.starts_with("port up1: no DPDK device \"0000:3b:00.0\""),
                "{e}"
            );
            assert!(e.contains("--vdev"), "{e}");
            let e = refused(&|o| o.queues = 4);
            assert!(
                e.contains("has 1 receive/transmit queue pairs, 4 asked for"),
                "{e}"
            );
            let e = refused(&|o| o.mtu = 9000);
            assert!(e.contains("MTU 9000 is more than"), "{e}");
            assert!(e.contains("(MTU 1500)"), "{e}");
            let e = refused(&|o| o.mbufs = 1 << 24);
            assert!(e.contains("-m MB"), "{e}");
            // A pool its rings would empty: refused before the port starts.
            let e = refused(&|o| o.mbufs = 2048);
            assert!(
                e.contains("2048 mbufs are too few for 1 receive queue(s)"),
                "{e}"
            );
            assert!(e.contains("mbufs = 3648 or more"), "{e}");
            // A failed open removed the vdev it probed, and a closed port does too: the same
            // devargs open again.
            let mut o = on("b0");
            o.mbufs = 2048;
            assert!(DpdkPort::open("again", &o).is_err());
            let p1 = DpdkPort::open("again", &o_ok(&o.device)).unwrap_or_else(|e| panic!("{e}"));
            drop(p1);
            let p2 = DpdkPort::open("again", &o_ok(&o.device));
            assert!(p2.is_ok(), "{:?}", p2.err().map(|e| e.to_string()));
        });
    }
}
