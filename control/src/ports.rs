//! Opens the ports a validated configuration describes, before any worker starts: capture
//! replays, AF_XDP and AF_PACKET interfaces, DPDK devices. The AF_XDP ports of one worker share
//! one UMEM (frames move between them as descriptors). `auto` ports try AF_XDP and fall back to
//! AF_PACKET with the reason logged. DPDK ports start EAL first (once, with `[dpdk] eal_args`).
//! Any failure is an error naming the port.

use anyhow::{bail, Context};
use sprayswitch::ids::PortId;
use sprayswitch::port::pcap::PcapPort;
use sprayswitch::port::Port;

use crate::config::{Backend, Validated};
#[cfg(target_os = "linux")]
use crate::config::{RealKind, XdpModeChoice};

/// The opened ports, in table order, and which of them replay a capture.
pub struct Opened {
    /// Ports in table order.
    pub ports: Vec<Box<dyn Port>>,
    /// Ports that replay a capture (the run ends when all of them have).
    pub replaying: Vec<PortId>,
    /// One line per port: what it ended up as.
    pub report: Vec<String>,
}

/// Opens every port of `v`.
///
/// # Errors
/// The first port that cannot be opened, with what to do about it.
pub fn open_ports(v: &Validated) -> anyhow::Result<Opened> {
    open_ports_with_mem(v, |i| {
        bail!(
            "port {}: backend 'mem' ports exist only inside one process (the tests, the demo and \
             sprayrackd build them); to run this binary give each port a real backend (af_xdp, \
             af_packet, auto) or pcap",
            v.tables.ports[i].name
        )
    })
}

/// As [`open_ports`], with the `mem` ports made by `mem(index)`: a program that builds
/// in-process links (the one-process rack) hands them in; every other port opens as usual.
///
/// # Errors
/// The first port that cannot be opened, or `mem`'s error.
pub fn open_ports_with_mem(
    v: &Validated,
    mut mem: impl FnMut(usize) -> anyhow::Result<Box<dyn Port>>,
) -> anyhow::Result<Opened> {
    let n = v.tables.ports.len();
    let mut slots: Vec<Option<Box<dyn Port>>> = (0..n).map(|_| None).collect();
    let mut replaying = Vec::new();
    let mut report = vec![String::new(); n];
    let owner = |i: usize| {
        v.run
            .assignment
            .as_ref()
            .map_or(i % v.run.workers.max(1), |a| a[i])
    };
    for (i, (info, b)) in v.tables.ports.iter().zip(&v.backends).enumerate() {
        match b {
            Backend::Mem => {
                report[i] = "in-process link".into();
                slots[i] = Some(mem(i)?);
            }
            Backend::Pcap {
                input,
                output,
                pace,
            } => {
                let p = PcapPort::new(&info.name, input.as_deref(), output.as_deref(), *pace)
                    .with_context(|| format!("port {}", info.name))?;
                if input.is_some() {
                    replaying.push(i as PortId);
                }
                report[i] = "pcap".into();
                slots[i] = Some(Box::new(p));
            }
            Backend::Real { .. } | Backend::Dpdk { .. } => {}
        }
    }
    open_dpdk(v, &mut slots, &mut report)?;
    #[cfg(target_os = "linux")]
    open_real(v, &owner, &mut slots, &mut report)?;
    #[cfg(not(target_os = "linux"))]
    if let Some(i) = v
        .backends
        .iter()
        .position(|b| matches!(b, Backend::Real { .. }))
    {
        let _ = owner;
        bail!(
            "port {}: real ports (AF_XDP, AF_PACKET) need Linux",
            v.tables.ports[i].name
        );
    }
    let ports = slots
        .into_iter()
        .map(|p| p.expect("every backend kind is opened above"))
        .collect();
    Ok(Opened {
        ports,
        replaying,
        report,
    })
}

#[cfg(target_os = "linux")]
fn open_real(
    v: &Validated,
    owner: &dyn Fn(usize) -> usize,
    slots: &mut [Option<Box<dyn Port>>],
    report: &mut [String],
) -> anyhow::Result<()> {
    use sprayswitch::port::afpacket::AfPacketPort;
    use sprayswitch::port::xdp::{XdpMode, XdpOptions, XdpUmem};

    for w in 0..v.run.workers.max(1) {
        // This worker's AF_XDP candidates, sharing one UMEM sized for all of them.
        let mine: Vec<usize> = (0..slots.len())
            .filter(|&i| owner(i) == w)
            .filter(|&i| {
                matches!(
                    &v.backends[i],
                    Backend::Real {
                        kind: RealKind::AfXdp | RealKind::Auto,
                        ..
                    }
                )
            })
            .collect();
        let mut umem = if mine.is_empty() {
            None
        } else {
            let biggest = mine
                .iter()
                .map(|&i| u32::from(v.tables.ports[i].mtu))
                .max()
                .unwrap_or(1500);
            // A frame holds the kernel's 256-byte headroom, Ethernet, a VLAN tag and the MTU.
            let frame = if biggest + 18 + 256 <= 2048 {
                2048
            } else {
                4096
            };
            // Each candidate's fill rings (one per queue) and transmit ring full, a receive
            // ring's worth in the switch, and its `rx_buffers` for what the switch keeps: the
            // worker looks at how much of this is free to know when its reorder stage must give
            // up gaps (`Worker::relieve_pools`).
            let frames = mine
                .iter()
                .map(|&i| match &v.backends[i] {
                    Backend::Real {
                        rings: (ring, fill),
                        queues,
                        rx_buffers,
                        ..
                    } => {
                        u64::from(*queues) * u64::from(*fill)
                            + 2 * u64::from(*ring)
                            + u64::from(*rx_buffers)
                    }
                    _ => 0,
                })
                .sum::<u64>()
                // Whole pages of 64 KiB (kernels before 5.9 refuse a UMEM of part pages).
                .next_multiple_of(32)
                .min(1 << 24) as u32;
            Some(XdpUmem::new(frames, frame).with_context(|| {
                format!(
                    "worker {w}: allocating a {} MiB UMEM",
                    (u64::from(frames) * u64::from(frame)) >> 20
                )
            })?)
        };
        for i in 0..slots.len() {
            if owner(i) != w {
                continue;
            }
            let Backend::Real {
                kind,
                interface,
                queues,
                xdp_mode,
                rings,
                busy_poll_us,
                rx_buffers,
            } = &v.backends[i]
            else {
                continue;
            };
            let name = &v.tables.ports[i].name;
            let xdp = |umem: &mut Option<XdpUmem>| {
                let mut o = XdpOptions::new(interface);
                o.queues = *queues;
                (o.ring_size, o.fill_size) = *rings;
                o.busy_poll_us = *busy_poll_us;
                o.mode = match xdp_mode {
                    XdpModeChoice::Auto => None,
                    XdpModeChoice::Native => Some(XdpMode::Native),
                    XdpModeChoice::Skb => Some(XdpMode::Skb),
                };
                umem.as_mut()
                    .expect("a UMEM exists for every AF_XDP candidate")
                    .open(name, &o)
            };
            let xdp_report = |p: &sprayswitch::port::xdp::XdpPort| {
                format!(
                    "af_xdp {} mode on {interface}, queues {} ({}), rings {}/{} fill{}",
                    p.mode().name(),
                    queues,
                    p.queue_modes().join(" "),
                    rings.0,
                    rings.1,
                    if p.busy_poll() { ", busy polling" } else { "" }
                )
            };
            let port: Box<dyn Port> = match kind {
                RealKind::AfXdp => {
                    let p = xdp(&mut umem)?;
                    report[i] = xdp_report(&p);
                    Box::new(p)
                }
                RealKind::AfPacket => {
                    report[i] = format!("af_packet on {interface}, {rx_buffers} buffers");
                    Box::new(AfPacketPort::open_with(name, interface, *rx_buffers)?)
                }
                RealKind::Auto => match xdp(&mut umem) {
                    Ok(p) => {
                        report[i] = xdp_report(&p);
                        Box::new(p)
                    }
                    Err(e) => {
                        log::warn!("{e}; falling back to AF_PACKET");
                        report[i] = format!(
                            "af_packet on {interface}, {rx_buffers} buffers (AF_XDP refused: {e})"
                        );
                        Box::new(AfPacketPort::open_with(name, interface, *rx_buffers)?)
                    }
                },
            };
            slots[i] = Some(port);
        }
    }
    Ok(())
}

/// Opens the DPDK ports of `v`, starting EAL first.
#[cfg(all(feature = "dpdk", target_os = "linux"))]
fn open_dpdk(
    v: &Validated,
    slots: &mut [Option<Box<dyn Port>>],
    report: &mut [String],
) -> anyhow::Result<()> {
    use sprayswitch::port::dpdk::{init_eal, DpdkOptions, DpdkPort};

    let Some(run) = &v.dpdk else {
        return Ok(());
    };
    init_eal(&run.eal_args)?;
    for (i, b) in v.backends.iter().enumerate() {
        let Backend::Dpdk {
            device,
            queues,
            ring,
        } = b
        else {
            continue;
        };
        let info = &v.tables.ports[i];
        let o = DpdkOptions {
            device: device.clone(),
            queues: *queues,
            mtu: info.mtu,
            mbufs: run.mbufs,
            ring: *ring,
        };
        let p = DpdkPort::open(&info.name, &o)?;
        let m = p.mac();
        report[i] = format!(
            "dpdk {} ({}) queues {queues}, rings {ring}, device mac \
             {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            p.device(),
            p.driver(),
            m[0],
            m[1],
            m[2],
            m[3],
            m[4],
            m[5]
        );
        slots[i] = Some(Box::new(p));
    }
    Ok(())
}

/// Without the `dpdk` feature a DPDK port is an error that says how to get one.
#[cfg(not(all(feature = "dpdk", target_os = "linux")))]
fn open_dpdk(
    v: &Validated,
    _slots: &mut [Option<Box<dyn Port>>],
    _report: &mut [String],
) -> anyhow::Result<()> {
    if let Some(i) = v
        .backends
        .iter()
        .position(|b| matches!(b, Backend::Dpdk { .. }))
    {
        bail!(
            "port {}: this sprayswitch was built without DPDK: build it with `cargo build \
             --release --features dpdk` (needs DPDK 22.11's libdpdk-dev and pkg-config), on Linux",
            v.tables.ports[i].name
        );
    }
    Ok(())
}

/// Without the feature, a DPDK port is refused before anything opens.
#[cfg(all(test, not(all(feature = "dpdk", target_os = "linux"))))]
mod tests {
    use crate::config::Config;

    /// The refusal says how to build a switch that has DPDK ports.
    #[test]
    fn a_dpdk_port_without_the_feature_says_how_to_get_one() {
        let text = format!(
            "{}\n[[port]]\nname = \"x\"\nbackend = \"dpdk\"\ndevice = \"0000:3b:00.0\"\n\
             role = \"downlink\"\nmac = \"02:00:00:00:00:09\"\n[dpdk]\neal_args = []\n",
            crate::config::DEFAULT_CONFIG
        );
        let v = Config::parse(&text, "t").unwrap().validate().unwrap();
        let e = super::open_ports_with_mem(&v, |_| {
            Ok(Box::new(sprayswitch::port::mem::link("m", "n", 16).0))
        })
        .err()
        .expect("refused")
        .to_string();
        assert!(
            e.starts_with("port x: this sprayswitch was built without DPDK"),
            "{e}"
        );
        assert!(e.contains("--features dpdk"), "{e}");
    }
}
