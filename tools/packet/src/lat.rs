//! The latency meter: timestamped RoCEv2 probes (UD SEND ONLY carrying their send time) sent
//! over any pair of ports and timed where they arrive ([`probe_path`]). `rocelat` runs it
//! through a rack pair and over a direct link (`sprayswitch-harness`'s `latency`).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sprayswitch::pkt::Pkt;
use sprayswitch::port::Port;
use sprayswitch::wire::BthRepr;
use sprayswitch::wire::{classify, DethRepr, ExtRepr, IpRepr, Opcode, Pmtu, Psn, RoceFrameRepr};

/// Meter settings. `probe`'s `src`/`dst` are (address, MAC) of the sender and of the next hop.
#[derive(Debug, Clone, PartialEq)]
pub struct LatOpts {
    /// Probes per path.
    pub probes: u32,
    /// Gap between probes, microseconds.
    pub interval_us: u64,
    /// Probe payload bytes (at least 16).
    pub size: usize,
    /// One-way delays of the fabric paths, microseconds.
    pub path_delays_us: Vec<u64>,
}

impl Default for LatOpts {
    fn default() -> Self {
        LatOpts {
            probes: 2000,
            interval_us: 200,
            size: 64,
            path_delays_us: vec![2, 10, 25, 50],
        }
    }
}

fn probe(src: (IpAddr, [u8; 6]), dst: (IpAddr, [u8; 6]), seq: u32, t: u64, size: usize) -> Pkt {
    let mut payload = vec![0u8; size.max(16)];
    payload[..8].copy_from_slice(&t.to_be_bytes());
    payload[8..12].copy_from_slice(&seq.to_be_bytes());
    let Some(ip) = IpRepr::between(src.0, dst.0) else {
        return Pkt::with_capacity(0);
    };
    let bth = BthRepr::new(Opcode::UdSendOnly, 0x77, Psn::new(seq));
    let deth = DethRepr {
        qkey: 0x1111,
        src_qp: 0x66,
    };
    // Probes are not ECN-capable: a marking fabric must not mark them.
    let f = RoceFrameRepr {
        tos: 0,
        udp_src_port: 0xC000 | (seq as u16 & 0x3FFF),
        ..RoceFrameRepr::new(src.1, dst.1, ip, bth)
    }
    .with_ext(ExtRepr {
        deth: Some(deth),
        ..ExtRepr::default()
    })
    .with_payload(&payload)
    .to_vec()
    .unwrap_or_default();
    Pkt::from_slice(&f)
}

fn stamp_of(frame: &[u8]) -> Option<u64> {
    let c = classify(frame, Pmtu::DEFAULT).ok()?;
    let r = c.roce()?;
    let p = usize::from(r.payload_offset);
    Some(u64::from_be_bytes(frame.get(p..p + 8)?.try_into().ok()?))
}

/// Sends `opts.probes` timestamped probes from `src` (address, MAC) to `dst` (address, next-hop
/// MAC) out of `tx`, one per `opts.interval_us`, and records each one's one-way latency when it
/// arrives at `rx` (both ports in this process, so one clock). Works over any ports.
pub fn probe_path(
    opts: &LatOpts,
    tx: &mut dyn Port,
    rx: &mut dyn Port,
    src: (IpAddr, [u8; 6]),
    dst: (IpAddr, [u8; 6]),
) -> Histogram<u64> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).expect("bounds");
    let t0 = Instant::now();
    let mut next = 0u64;
    let mut sent = 0u32;
    let mut got = 0u32;
    let mut buf = Vec::with_capacity(64);
    let deadline = t0
        + Duration::from_micros(opts.interval_us * u64::from(opts.probes))
        + Duration::from_secs(2);
    while got < opts.probes && Instant::now() < deadline {
        let now = t0.elapsed().as_nanos() as u64 + 1;
        if sent < opts.probes && now >= next {
            let mut v = vec![probe(src, dst, sent, now, opts.size)];
            tx.tx_burst(now, &mut v);
            sent += 1;
            next = now + opts.interval_us * 1000;
        }
        // Moves time-driven work of the sending end (the direct link's delay).
        tx.poll(now);
        rx.rx_burst(now, &mut buf, 64);
        let at = t0.elapsed().as_nanos() as u64 + 1;
        for p in buf.drain(..) {
            if let Some(t) = stamp_of(p.data()) {
                let _ = h.record(at.saturating_sub(t).max(1));
                got += 1;
            }
        }
        // Two cores shared by two ToR workers and this thread: yield rather than spin.
        std::thread::yield_now();
    }
    h
}

/// Percentile line of a histogram, microseconds.
pub fn line(label: &str, h: &Histogram<u64>) -> String {
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    format!(
        "{label:<10} {:>8} probes  p50 {:>8.1} us  p90 {:>8.1}  p99 {:>8.1}  p99.9 {:>8.1}  max {:>8.1}",
        h.len(),
        us(0.5),
        us(0.9),
        us(0.99),
        us(0.999),
        h.max() as f64 / 1000.0
    )
}
