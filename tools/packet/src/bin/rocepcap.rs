//! `rocepcap`: writes captures of RoCEv2 RC WRITE ONLY frames of many QPs, a replay source for
//! benchmarks (DPDK's `net_pcap` with `rx_pcap=FILE`, or a `backend = "pcap"` port).
//!
//! **One capture** (`--out` once): what a source ToR's host port receives, one frame per QP in
//! turn (`--run` frames per turn), each QP's PSNs counting up from its own start. Replayed from
//! memory (`infinite_rx=1`) it wraps around and every QP's PSNs start over: fine where PSNs do not
//! matter (a source ToR forwarding and spraying), not for a destination's reorder stage.
//!
//! **One capture per uplink** (`--out` once per path): what a destination ToR's uplinks receive
//! from a source ToR that sprayed the same sequence over them. The sent sequence goes to the
//! paths in chunks of `--chunk` frames, chunk `c` to path `c mod paths`, so a receiver that polls
//! the paths in turn, `--chunk` frames from each (the burst of sprayswitch and of DPDK's
//! examples: 32), gets the frames back in the order they were sent: every QP in order. With
//! `--lag N` the last path is slower: its capture starts with N chunks of other traffic (QPs of
//! another host, `--filler-ip`, in order among themselves) before its share, so each of its
//! chunks arrives N polling rounds late: a QP sending one frame in `qps` is then reordered by
//! about `N x paths x chunk / qps` of its PSNs (for 64 QPs over 4 paths, N = depth / 2). Read
//! straight from the file (not `infinite_rx`), PSNs keep counting as long as the capture lasts:
//! write as many frames as the run needs (`--per-qp`).
//!
//! `--stamps` writes path stamps ([`sprayswitch::wire::stamp`]: one counter per source host, as
//! a source ToR's worker per host, skipping 0) into the UDP checksum; the filler has none.
//! The frames go from `--src-ip` and the `--srcs` addresses after it (QP i from the (i mod
//! srcs)-th) to `--dst-ip` and the `--dsts` addresses after it (QP i to the (i mod dsts)-th),
//! UDP source port `--sport-base + QP`, DestQP `0x100 + QP` (the filler's `0x80_0000 + QP`); a
//! frame of `--frame-bytes` (without FCS) carries `frame-bytes - 74` bytes after its RETH.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use sprayswitch::pcap::PcapWriter;
use sprayswitch::wire::{
    parse_mac, stamp, BthRepr, ExtRepr, IpRepr, Opcode, Psn, RethRepr, RoceFrameRepr,
};

/// Bytes of a WRITE ONLY frame around its payload: Ethernet, IPv4, UDP, BTH, RETH, ICRC.
const OVERHEAD: usize = 14 + 20 + 8 + 12 + 16 + 4;
/// Where the UDP header starts in these frames (Ethernet, IPv4 without options).
const L4: usize = 14 + 20;
/// DestQP of the filler's QP 0.
const FILLER_QP: u32 = 0x80_0000;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "rocepcap",
    version,
    about = "Writes pcaps of RoCEv2 RC WRITE ONLY frames of many QPs (a replay source for benchmarks)"
)]
struct Cli {
    /// The capture to write; once per path to spray over several (a destination's uplinks).
    #[arg(long, required = true)]
    out: Vec<PathBuf>,
    /// Queue pairs, 1 to 65536.
    #[arg(long, default_value_t = 64)]
    qps: u32,
    /// Frames per QP (the captures hold qps x this many, and the filler).
    #[arg(long, default_value_t = 64)]
    per_qp: u32,
    /// Frames a QP sends in a row at its turn.
    #[arg(long, default_value_t = 1)]
    run: u32,
    /// Frame size without FCS, bytes: 74 (no payload) to 9000.
    #[arg(long, default_value_t = 90)]
    frame_bytes: usize,
    /// Frames of the sent sequence per chunk sprayed to one path (several paths).
    #[arg(long, default_value_t = 32)]
    chunk: u32,
    /// Chunks of filler ahead of the last path's share: how many polling rounds it lags.
    #[arg(long, default_value_t = 0)]
    lag: u32,
    /// Write path stamps into the UDP checksum (one counter per source host).
    #[arg(long)]
    stamps: bool,
    /// Source MAC.
    #[arg(long, default_value = "02:5a:00:00:01:02")]
    src_mac: String,
    /// Destination MAC (the switch port's): once, or once per path.
    #[arg(long, default_value = "02:5a:01:01:00:01")]
    dst_mac: Vec<String>,
    /// First source address.
    #[arg(long, default_value = "10.1.1.2")]
    src_ip: Ipv4Addr,
    /// Source addresses, counting up from --src-ip (QP i comes from the (i mod srcs)-th).
    #[arg(long, default_value_t = 1)]
    srcs: u32,
    /// Source address of the filler.
    #[arg(long, default_value = "10.1.250.2")]
    filler_ip: Ipv4Addr,
    /// First destination address.
    #[arg(long, default_value = "198.18.1.2")]
    dst_ip: Ipv4Addr,
    /// Destination addresses, counting up from --dst-ip (QP i goes to the (i mod dsts)-th).
    #[arg(long, default_value_t = 8)]
    dsts: u32,
    /// UDP source port of QP 0 (QP i uses base + i, wrapping within 49152-65535).
    #[arg(long, default_value_t = 49152)]
    sport_base: u16,
}

/// What the frames are built from, checked.
struct Plan {
    cli: Cli,
    src_mac: [u8; 6],
    dst_macs: Vec<[u8; 6]>,
    payload: Vec<u8>,
}

impl Plan {
    fn new(cli: Cli) -> anyhow::Result<Plan> {
        anyhow::ensure!(
            (1..=65_536).contains(&cli.qps),
            "--qps {}: 1 to 65536",
            cli.qps
        );
        anyhow::ensure!(cli.per_qp >= 1, "--per-qp: at least 1");
        anyhow::ensure!(cli.run >= 1, "--run: at least 1");
        anyhow::ensure!(cli.chunk >= 1, "--chunk: at least 1");
        anyhow::ensure!(
            (OVERHEAD..=9000).contains(&cli.frame_bytes),
            "--frame-bytes {}: {OVERHEAD} to 9000",
            cli.frame_bytes
        );
        anyhow::ensure!(
            (cli.frame_bytes - OVERHEAD).is_multiple_of(4),
            "--frame-bytes {}: {OVERHEAD} plus a multiple of 4 (a RoCE payload is padded to 4 bytes)",
            cli.frame_bytes
        );
        anyhow::ensure!(cli.dsts >= 1, "--dsts: at least 1");
        anyhow::ensure!(cli.srcs >= 1, "--srcs: at least 1");
        let paths = cli.out.len();
        anyhow::ensure!(
            cli.lag == 0 || paths > 1,
            "--lag: needs several paths (--out once per path)"
        );
        anyhow::ensure!(
            cli.dst_mac.len() == 1 || cli.dst_mac.len() == paths,
            "--dst-mac: once, or once per --out ({paths})"
        );
        let src_mac = parse_mac(&cli.src_mac).map_err(|e| anyhow::anyhow!("--src-mac: {e}"))?;
        let dst_macs = cli
            .dst_mac
            .iter()
            .map(|m| parse_mac(m).map_err(|e| anyhow::anyhow!("--dst-mac: {e}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let payload = vec![0x5Au8; cli.frame_bytes - OVERHEAD];
        Ok(Plan {
            cli,
            src_mac,
            dst_macs,
            payload,
        })
    }

    fn paths(&self) -> usize {
        self.cli.out.len()
    }

    /// Frame `k` (0, 1, ...) of QP `q`, to path `path`: the filler's QP when `filler`.
    fn frame(
        &self,
        q: u32,
        k: u32,
        path: usize,
        filler: bool,
        stamp: u16,
    ) -> anyhow::Result<Vec<u8>> {
        let cli = &self.cli;
        let dst = Ipv4Addr::from(u32::from(cli.dst_ip).wrapping_add(q % cli.dsts));
        let src = match filler {
            true => cli.filler_ip,
            false => Ipv4Addr::from(u32::from(cli.src_ip).wrapping_add(q % cli.srcs)),
        };
        let ip = IpRepr::between(src.into(), dst.into()).context("addresses of one family")?;
        let start = q.wrapping_mul(7919) & 0xff_ffff;
        let dest_qp = if filler { FILLER_QP + q } else { 0x100 + q };
        let bth = BthRepr::new(Opcode::RcWriteOnly, dest_qp, Psn::new(start).add(k));
        let ext = ExtRepr {
            reth: Some(RethRepr {
                virtual_address: 0x1000 + u64::from(k) * self.payload.len() as u64,
                rkey: 5,
                dma_len: self.payload.len() as u32,
            }),
            ..ExtRepr::default()
        };
        let sport = 49_152 + ((u32::from(cli.sport_base) + q) % 16_384) as u16;
        let dst_mac = self.dst_macs[path.min(self.dst_macs.len() - 1)];
        let mut f = RoceFrameRepr {
            udp_src_port: sport,
            ..RoceFrameRepr::new(self.src_mac, dst_mac, ip, bth)
        }
        .with_ext(ext)
        .with_payload(&self.payload)
        .to_vec()
        .map_err(|e| anyhow::anyhow!("building a frame: {e:?}"))?;
        anyhow::ensure!(f.len() == cli.frame_bytes, "frame of {} bytes", f.len());
        // The UDP checksum is outside the ICRC: the stamp changes nothing else.
        stamp::put(&mut f, L4, stamp);
        Ok(f)
    }

    /// Every frame in the order written, to `emit(path, timestamp ns, frame)`.
    fn write(
        &self,
        mut emit: impl FnMut(usize, u64, &[u8]) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let cli = &self.cli;
        let paths = self.paths();
        let last = paths - 1;
        // The last path's filler first: the lag, in chunks of in-order frames of other QPs.
        for n in 0..u64::from(cli.lag) * u64::from(cli.chunk) {
            let q = (n % u64::from(cli.qps)) as u32;
            let k = (n / u64::from(cli.qps)) as u32;
            let f = self.frame(q, k, last, true, 0)?;
            emit(last, n * 10, &f)?;
        }
        let mut stampers = vec![stamp::Stamper::new(0, 0); cli.srcs.min(cli.qps) as usize];
        let mut sent = 0u64;
        let turns = cli.per_qp.div_ceil(cli.run);
        for turn in 0..turns {
            for q in 0..cli.qps {
                let first = turn * cli.run;
                for k in first..(first + cli.run).min(cli.per_qp) {
                    let path = ((sent / u64::from(cli.chunk)) % paths as u64) as usize;
                    let s = match cli.stamps {
                        true => stampers[(q % cli.srcs) as usize].stamp(),
                        false => 0,
                    };
                    let f = self.frame(q, k, path, false, s)?;
                    emit(path, sent * 10, &f)?;
                    sent += 1;
                }
            }
        }
        Ok(())
    }
}

fn run(cli: Cli) -> anyhow::Result<u64> {
    let plan = Plan::new(cli)?;
    let mut writers = plan
        .cli
        .out
        .iter()
        .map(|p| PcapWriter::create(p).with_context(|| format!("creating {}", p.display())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    plan.write(|path, ts, f| Ok(writers[path].write_frame(ts, f)?))?;
    let mut n = 0;
    for w in &mut writers {
        w.flush()?;
        n += w.frames_written();
    }
    Ok(n)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (qps, bytes, paths) = (cli.qps, cli.frame_bytes, cli.out.len());
    let out = cli.out[0].display().to_string();
    match run(cli) {
        Ok(n) => {
            match paths {
                1 => println!("{out}: {n} frames of {bytes} bytes, {qps} QPs"),
                _ => println!(
                    "{out} and {} more: {n} frames of {bytes} bytes, {qps} QPs over {paths} paths",
                    paths - 1
                ),
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rocepcap: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprayswitch::wire::{classify, Pmtu};
    use std::collections::HashMap;

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("rocepcap").chain(args.iter().copied())).unwrap()
    }

    /// The frames of each path, in file order.
    fn paths_of(c: Cli) -> Vec<Vec<Vec<u8>>> {
        let plan = Plan::new(c).unwrap();
        let mut out = vec![Vec::new(); plan.paths()];
        plan.write(|p, _, f| {
            out[p].push(f.to_vec());
            Ok(())
        })
        .unwrap();
        out
    }

    /// A receiver polling the paths in turn, `chunk` frames from each, until all are empty.
    fn polled(paths: &[Vec<Vec<u8>>], chunk: usize) -> Vec<Vec<u8>> {
        let mut at = vec![0; paths.len()];
        let mut got = Vec::new();
        while at.iter().zip(paths).any(|(a, p)| *a < p.len()) {
            for (a, p) in at.iter_mut().zip(paths) {
                let end = (*a + chunk).min(p.len());
                got.extend(p[*a..end].iter().cloned());
                *a = end;
            }
        }
        got
    }

    /// (source, DestQP, PSN, stamp) of a frame, read back by the switch's own classifier.
    fn key(f: &[u8]) -> (std::net::IpAddr, u32, u32, u16) {
        let c = classify(f, Pmtu::DEFAULT).unwrap();
        let r = c.roce().unwrap();
        let l4 = usize::from(r.ip.l4_offset);
        let s = u16::from_be_bytes([f[l4 + 6], f[l4 + 7]]);
        (r.ip.src, r.bth.dest_qp, r.bth.psn.value(), s)
    }

    /// Per QP, how far behind the newest PSN seen each arriving PSN is (0: in order).
    fn depth(frames: &[Vec<u8>]) -> u32 {
        let mut top: HashMap<u32, u32> = HashMap::new();
        let mut worst = 0;
        for f in frames {
            let (_, qp, psn, _) = key(f);
            let t = top.entry(qp).or_insert(psn);
            if psn > *t {
                *t = psn;
            } else {
                worst = worst.max(*t - psn);
            }
        }
        worst
    }

    #[test]
    fn one_capture_is_every_qp_in_turn_with_psns_counting_up() {
        let p = paths_of(cli(&[
            "--out",
            "a",
            "--qps",
            "3",
            "--per-qp",
            "2",
            "--frame-bytes",
            "98",
        ]));
        assert_eq!(p.len(), 1);
        let keys: Vec<_> = p[0].iter().map(|f| (key(f).1, key(f).2)).collect();
        let s = |q: u32| q * 7919;
        assert_eq!(
            keys,
            vec![
                (0x100, s(0)),
                (0x101, s(1)),
                (0x102, s(2)),
                (0x100, s(0) + 1),
                (0x101, s(1) + 1),
                (0x102, s(2) + 1)
            ]
        );
        assert!(p[0].iter().all(|f| f.len() == 98 && key(f).3 == 0));
    }

    #[test]
    fn chunks_polled_in_turn_come_back_in_order_and_a_lag_reorders_by_its_depth() {
        let base = [
            "--out", "0", "--out", "1", "--out", "2", "--out", "3", "--qps", "64", "--per-qp",
            "200",
        ];
        let even = paths_of(cli(&base));
        assert!(even.iter().all(|p| p.len() == 64 * 200 / 4));
        assert_eq!(depth(&polled(&even, 32)), 0);
        // Polled in other bursts than the chunks, the same captures arrive reordered.
        assert!(depth(&polled(&even, 48)) > 0);
        for (lag, want) in [("2", 4), ("8", 16)] {
            let mut args = base.to_vec();
            args.extend(["--lag", lag]);
            let lagged = paths_of(cli(&args));
            let got = polled(&lagged, 32);
            assert_eq!(got.len(), 64 * 200 + 32 * lag.parse::<usize>().unwrap());
            let d = depth(&got);
            assert!((want - 1..=want).contains(&d), "lag {lag}: depth {d}");
            // The filler is the last path's first frames, in order among themselves.
            let filler = &lagged[3][..32 * lag.parse::<usize>().unwrap()];
            assert!(filler
                .iter()
                .all(|f| key(f).1 >= FILLER_QP && key(f).3 == 0));
            assert_eq!(depth(filler), 0);
        }
    }

    #[test]
    fn stamps_count_up_per_source_on_every_path_and_never_are_zero() {
        let p = paths_of(cli(&[
            "--out",
            "0",
            "--out",
            "1",
            "--qps",
            "10",
            "--srcs",
            "3",
            "--per-qp",
            "50",
            "--stamps",
            "--lag",
            "1",
            "--dst-mac",
            "02:00:00:00:00:01",
            "--dst-mac",
            "02:00:00:00:00:02",
        ]));
        let mut sent: HashMap<std::net::IpAddr, Vec<u16>> = HashMap::new();
        for (i, path) in p.iter().enumerate() {
            let mut last: HashMap<std::net::IpAddr, u16> = HashMap::new();
            for f in path {
                assert_eq!(f[5], i as u8 + 1, "the path's own MAC");
                let (src, qp, _, s) = key(f);
                if qp >= FILLER_QP {
                    continue;
                }
                assert_ne!(s, 0);
                if let Some(l) = last.insert(src, s) {
                    assert!(s > l, "path {i}: stamps rise per source");
                }
                sent.entry(src).or_default().push(s);
            }
        }
        assert_eq!(sent.len(), 3);
        for stamps in sent.values_mut() {
            stamps.sort_unstable();
            let want: Vec<u16> = (1..=stamps.len() as u16).collect();
            assert_eq!(*stamps, want, "one counter per source, no gaps");
        }
    }

    #[test]
    fn bad_arguments_are_refused() {
        for args in [
            &["--out", "a", "--lag", "1"][..],
            &[
                "--out",
                "a",
                "--out",
                "b",
                "--dst-mac",
                "02:00:00:00:00:01",
                "--dst-mac",
                "02:00:00:00:00:02",
                "--dst-mac",
                "02:00:00:00:00:03",
            ],
            &["--out", "a", "--frame-bytes", "60"],
            &["--out", "a", "--frame-bytes", "100"],
            &["--out", "a", "--qps", "0"],
            &["--out", "a", "--run", "0"],
            &["--out", "a", "--dst-mac", "nonsense"],
        ] {
            assert!(Plan::new(cli(args)).is_err(), "{args:?}");
        }
    }
}
