//! The latency meter's run (`rocelat`): probes from a host of rack A to a host of rack B,
//! through the two ToRs and the fabric, and, in the same run, over a direct link with the same
//! one-way delay as the fastest fabric path: the cost of the switches, side by side.

use hdrhistogram::Histogram;
use sprayswitch::port::fault::{FaultConfig, FaultInjector};
use sprayswitch::port::mem;
use sprayswitch_packet::lat::{probe_path, LatOpts};
use std::net::IpAddr;

use crate::rack::topo::{PathSpec, RackPair, RackPairSpec};

/// Measures through the rack pair (spray + reorder at the ToRs; UD probes pass the reorder
/// stage untouched) and, in the same run, over a direct link. Returns (switched, direct).
///
/// # Errors
/// When the rack pair cannot be built.
pub fn measure(opts: &LatOpts) -> anyhow::Result<(Histogram<u64>, Histogram<u64>)> {
    let spec = RackPairSpec {
        paths: opts
            .path_delays_us
            .iter()
            .map(|d| PathSpec::delay(d * 1000))
            .collect(),
        ..RackPairSpec::default()
    };
    let mut rp = RackPair::start(&spec)?;
    let (a, b) = (&rp.hosts_a[0], &rp.hosts_b[0]);
    // (address, MAC): the probe leaves a1 towards its gateway.
    let src = (IpAddr::V4(a.ip4), a.mac);
    let dst = (IpAddr::V4(b.ip4), a.gw_mac);
    let b_mac = b.mac;
    // Split borrows: hosts of two vectors.
    let (ha, hb) = (&mut rp.hosts_a, &mut rp.hosts_b);
    let switched = probe_path(opts, &mut ha[0].port, &mut hb[0].port, src, dst);
    rp.stop();

    // Direct: the same two hosts back to back over the fastest path's delay.
    let min_delay = opts.path_delays_us.iter().copied().min().unwrap_or(0) * 1000;
    let (x, mut y) = mem::link("a", "b", 8192);
    let mut x = FaultInjector::new(
        x,
        FaultConfig {
            delay_ns: min_delay,
            ..FaultConfig::default()
        },
    );
    let direct = probe_path(opts, &mut x, &mut y, src, (dst.0, b_mac));
    Ok((switched, direct))
}
