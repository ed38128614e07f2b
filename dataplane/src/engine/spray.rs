//! Spreading packets over the uplinks of a group.
//!
//! RoCEv2 packets follow the configured [`SprayPolicy`]; every other packet is hashed per flow
//! (ECMP) so that TCP and friends stay in order. Uplinks that are down (carrier or admin), or
//! out of the spray set (path health found them failing, or an operator pinned them out: see
//! [`crate::health`]), get nothing; the rest share the traffic. Choosing never allocates.

use crate::ids::PortId;
use crate::rng::Rng;
use crate::tables::{ip_key, SprayPolicy, StatusBoard, Tables, UplinkGroup};
use crate::wire::{IpSummary, L4Summary};

/// A 64-bit hash of the 5-tuple (addresses, protocol, ports).
#[inline]
pub fn flow_hash(ip: &IpSummary) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut mix = |v: u64| {
        h = (h ^ v).wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    };
    let (sp, dp) = match ip.l4 {
        L4Summary::Udp { src_port, dst_port }
        | L4Summary::Tcp {
            src_port, dst_port, ..
        } => (src_port, dst_port),
        _ => (0, 0),
    };
    let ports = u64::from(ip.protocol) << 32 | u64::from(sp) << 16 | u64::from(dp);
    match (ip.src, ip.dst) {
        (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
            flow_hash_v4(u32::from(s), u32::from(d), ports)
        }
        (s, d) => {
            let (s, d) = (ip_key(s), ip_key(d));
            mix(s as u64);
            mix((s >> 64) as u64);
            mix(d as u64);
            mix((d >> 64) as u64);
            mix(ports);
            avalanche(h)
        }
    }
}

/// [`flow_hash`] of an IPv4 5-tuple; `ports` is `protocol << 32 | src_port << 16 | dst_port`.
#[inline]
pub fn flow_hash_v4(src: u32, dst: u32, ports: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut mix = |v: u64| {
        h = (h ^ v).wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    };
    mix(u64::from(src) << 32 | u64::from(dst));
    mix(ports);
    avalanche(h)
}

/// Final avalanche so that the low bits (used for `%`) depend on every input bit.
#[inline]
fn avalanche(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// The members of `g` that are administratively up, as a bit mask (the first 64 members).
fn admin_mask(t: &Tables, g: &UplinkGroup) -> u64 {
    g.ports.iter().take(64).enumerate().fold(0, |m, (i, p)| {
        m | u64::from(t.ports.get(usize::from(*p)).is_some_and(|i| i.admin_up)) << i
    })
}

#[derive(Debug, Clone, Copy, Default)]
struct Flowlet {
    hash: u64,
    port: PortId,
    last_ns: u64,
}

const FLOWLET_SLOTS: usize = 4096;

/// What the sprayer needs to know of one packet: the policy it is sprayed by, its flow hash
/// (read by `ecmp` and `flowlet`) and the time (`flowlet`'s gaps).
#[derive(Debug, Clone, Copy)]
pub struct Pick {
    /// The policy for this packet (`ecmp` for what must not be sprayed).
    pub policy: SprayPolicy,
    /// Its 5-tuple hash ([`flow_hash`]).
    pub flow: u64,
    /// Now, in ns.
    pub now: u64,
}

/// Per-worker spraying state.
#[derive(Debug)]
pub struct Sprayer {
    rr: Vec<u64>,
    /// Round robin: the position among the group's live members that goes next.
    rr_next: Vec<u32>,
    /// Per group, the members that are administratively up (bit per member; groups of up to
    /// 64 members), as of the tables at `shaped_for`.
    admin_up: Vec<u64>,
    /// Address of the tables of the last [`Sprayer::reshape`].
    shaped_for: usize,
    /// The worker's loop iteration (0: not counted, read link state per packet).
    iteration: u64,
    /// Per group: the iteration its live members were read in, how many, which.
    live: Vec<(u64, usize, u64)>,
    wrr: Vec<Vec<i64>>,
    rng: Rng,
    flowlets: Box<[Flowlet]>,
}

impl Sprayer {
    /// State for up to `groups` groups; `seed` drives `random` and `flowlet`.
    pub fn new(groups: usize, seed: u64) -> Sprayer {
        Sprayer {
            rr: vec![0; groups],
            rr_next: vec![0; groups],
            admin_up: vec![0; groups],
            shaped_for: 0,
            iteration: 0,
            live: vec![(0, 0, 0); groups],
            wrr: vec![Vec::new(); groups],
            rng: Rng::new(seed),
            flowlets: vec![Flowlet::default(); FLOWLET_SLOTS].into_boxed_slice(),
        }
    }

    /// Resizes for a new table snapshot (not on the packet path).
    pub fn reshape(&mut self, t: &Tables) {
        self.rr.resize(t.groups.len(), 0);
        self.rr_next.resize(t.groups.len(), 0);
        self.admin_up = t.groups.iter().map(|g| admin_mask(t, g)).collect();
        self.shaped_for = t as *const Tables as usize;
        self.live = vec![(0, 0, 0); t.groups.len()];
        self.wrr.resize(t.groups.len(), Vec::new());
        for (i, g) in t.groups.iter().enumerate() {
            self.wrr[i].resize(g.ports.len(), 0);
        }
    }

    /// Starts a worker loop iteration: from now on the live members of a group are read from
    /// the status board once per iteration instead of per packet (the board itself changes
    /// once per iteration of the owning worker). Until the first call they are read per packet.
    pub fn begin_iteration(&mut self) {
        self.iteration = self.iteration.wrapping_add(1).max(1);
    }

    /// Reads the live members of group `gi` (at most 64): how many, and which as a bit mask.
    fn sample_live(
        &mut self,
        t: &Tables,
        gi: u16,
        g: &UplinkGroup,
        status: &StatusBoard,
        shaped: bool,
    ) -> (usize, u64) {
        let admin = match self.admin_up.get(usize::from(gi)) {
            Some(m) if shaped => *m,
            _ => admin_mask(t, g),
        };
        // Members with carrier, and of those the ones in the spray set (path health, pins).
        // When path health has taken every live member out, all of them carry on: a group
        // that loses alike everywhere is no better off empty.
        let (mut carrier, mut spray) = (0u64, 0u64);
        for (i, p) in g.ports.iter().enumerate() {
            if let Some(s) = status.get(usize::from(*p)) {
                carrier |= u64::from(s.is_up()) << i;
                spray |= u64::from(s.is_up() && s.sprayable()) << i;
            }
        }
        let mask = match spray & admin {
            0 => carrier & admin,
            m => m,
        };
        // All members live is the common case: no population count (a software one on
        // baseline x86-64).
        let all = u64::MAX >> (64 - g.ports.len().max(1));
        let n = if mask == all {
            g.ports.len()
        } else {
            mask.count_ones() as usize
        };
        if let (true, Some(slot)) = (shaped, self.live.get_mut(usize::from(gi))) {
            *slot = (self.iteration, n, mask);
        }
        (n, mask)
    }

    /// Picks the uplink of group `gi` for a packet, or `None` when every member is down.
    /// Always inlined: as a call its answer came back through the stack and the fast path
    /// waited on it (a tenth of `Engine::handle`'s samples in the source role).
    #[inline(always)]
    pub fn choose(
        &mut self,
        t: &Tables,
        gi: u16,
        status: &StatusBoard,
        pick: Pick,
    ) -> Option<PortId> {
        if pick.policy == SprayPolicy::RoundRobin {
            if let Some(k) = self.round_robin_turn(t, gi) {
                return t.groups.get(usize::from(gi))?.ports.get(k).copied();
            }
        }
        self.choose_general(t, gi, status, pick)
    }

    /// The common case of [`Sprayer::choose`] in a few instructions: round robin over a group
    /// whose members were all live when this iteration looked. Takes the turn and returns the
    /// member's position in the group; `None` (nothing taken) when the general case must
    /// decide. The same turn as the general case. Always inlined, as [`Sprayer::choose`].
    #[inline(always)]
    fn round_robin_turn(&mut self, t: &Tables, gi: u16) -> Option<usize> {
        if self.iteration == 0 || self.shaped_for != t as *const Tables as usize {
            return None;
        }
        let gi = usize::from(gi);
        let (it, n, _) = *self.live.get(gi)?;
        let next = self.rr_next.get_mut(gi)?;
        if it != self.iteration || n == 0 || n != t.groups.get(gi)?.ports.len() {
            return None;
        }
        let k = if (*next as usize) < n {
            *next as usize
        } else {
            0
        };
        *next = if k + 1 < n { (k + 1) as u32 } else { 0 };
        Some(k)
    }

    #[inline(never)]
    fn choose_general(
        &mut self,
        t: &Tables,
        gi: u16,
        status: &StatusBoard,
        pick: Pick,
    ) -> Option<PortId> {
        let Pick { policy, flow, now } = pick;
        let g = t.groups.get(usize::from(gi))?;
        let up = |p: PortId| {
            t.ports.get(usize::from(p)).is_some_and(|i| i.admin_up)
                && status.get(usize::from(p)).is_some_and(|s| s.is_up())
        };
        // Live members as a bit mask (one pass, no division); groups beyond 64 members count
        // them the slow way.
        let (n_up, mask) = if g.ports.len() <= 64 {
            let shaped = self.shaped_for == t as *const Tables as usize;
            match self.live.get(usize::from(gi)) {
                // Sampled already in this iteration.
                Some(&(it, n, mask)) if shaped && self.iteration != 0 && it == self.iteration => {
                    (n, Some(mask))
                }
                _ => {
                    let (n, mask) = self.sample_live(t, gi, g, status, shaped);
                    (n, Some(mask))
                }
            }
        } else {
            (g.ports.iter().filter(|p| up(**p)).count(), None)
        };
        // (Groups over 64 members: carrier and admin state only, no spray set.)
        if n_up == 0 {
            return None;
        }
        let nth_up = |k: usize| match mask {
            Some(mut m) => {
                for _ in 0..k {
                    m &= m - 1;
                }
                g.ports.get(m.trailing_zeros() as usize).copied()
            }
            None => g.ports.iter().copied().filter(|p| up(*p)).nth(k),
        };
        let gi = usize::from(gi);
        match policy {
            SprayPolicy::Ecmp => nth_up((flow % n_up as u64) as usize),
            SprayPolicy::RoundRobin => {
                // The next live member in turn; exact while the membership stands, and a
                // change (a link down or up) restarts the turn inside the new range.
                let next = self.rr_next.get_mut(gi)?;
                let k = if (*next as usize) < n_up {
                    *next as usize
                } else {
                    0
                };
                *next = if k + 1 < n_up { (k + 1) as u32 } else { 0 };
                if n_up == g.ports.len() {
                    g.ports.get(k).copied()
                } else {
                    nth_up(k)
                }
            }
            SprayPolicy::Random => nth_up(self.rng.below(n_up as u64) as usize),
            SprayPolicy::Weighted => self.weighted(g, gi, &up),
            SprayPolicy::LeastLoaded => {
                let c = self.rr.get_mut(gi)?;
                *c = c.wrapping_add(1);
                let start = (*c % g.ports.len() as u64) as usize;
                let mut best: Option<(usize, PortId)> = None;
                for k in 0..g.ports.len() {
                    let p = g.ports[(start + k) % g.ports.len()];
                    if !up(p) {
                        continue;
                    }
                    let b = status[usize::from(p)].backlog();
                    if best.is_none_or(|(bb, _)| b < bb) {
                        best = Some((b, p));
                    }
                }
                best.map(|(_, p)| p)
            }
            SprayPolicy::Flowlet => {
                let slot = &mut self.flowlets[(flow % FLOWLET_SLOTS as u64) as usize];
                let fresh = slot.hash == flow
                    && now.saturating_sub(slot.last_ns) < t.flowlet_gap_ns
                    && up(slot.port);
                if !fresh {
                    let k = self.rng.below(n_up as u64) as usize;
                    slot.port = nth_up(k)?;
                    slot.hash = flow;
                }
                slot.last_ns = now;
                Some(slot.port)
            }
        }
    }

    fn weighted(
        &mut self,
        g: &UplinkGroup,
        gi: usize,
        up: &impl Fn(PortId) -> bool,
    ) -> Option<PortId> {
        let cur = self.wrr.get_mut(gi)?;
        if cur.len() != g.ports.len() {
            cur.resize(g.ports.len(), 0);
        }
        let mut total = 0i64;
        let mut best: Option<usize> = None;
        for (i, p) in g.ports.iter().enumerate() {
            if !up(*p) {
                continue;
            }
            let w = i64::from(*g.weights.get(i).unwrap_or(&1));
            cur[i] += w;
            total += w;
            if best.is_none_or(|b| cur[i] > cur[b]) {
                best = Some(i);
            }
        }
        let b = best?;
        cur[b] -= total;
        Some(g.ports[b])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::PortStatus;
    use crate::tables::{LossDetection, PortInfo, Role};
    use crate::wire::Pmtu;
    use crossbeam::utils::CachePadded;
    use std::net::{IpAddr, Ipv4Addr};

    fn tables(weights: Vec<u32>) -> Tables {
        let ports = (0..weights.len())
            .map(|i| PortInfo {
                name: format!("u{i}"),
                mac: [2, 0, 0, 0, 1, i as u8],
                role: Role::Uplink,
                mtu: 1500,
                pmtu: Pmtu::DEFAULT,
                pmtu_fixed: false,
                rate_burst_bytes: None,
                rate_bps: None,
                ecn: None,
                peer_mac: Some([2, 0, 0, 0, 2, i as u8]),
                addresses: vec![],
                admin_up: true,
                path_pin: Default::default(),
            })
            .collect();
        let mut t = Tables::new(ports);
        t.groups.push(UplinkGroup {
            name: "fabric".into(),
            ports: (0..weights.len() as u16).collect(),
            weights,
            loss_detection: LossDetection::default(),
            path_stamps: false,
            health: None,
        });
        t
    }

    fn board(n: usize) -> Vec<CachePadded<PortStatus>> {
        (0..n)
            .map(|_| CachePadded::new(PortStatus::new_up()))
            .collect()
    }

    fn counts(
        t: &Tables,
        s: &StatusBoard,
        policy: SprayPolicy,
        n: usize,
        flows: u64,
    ) -> Vec<usize> {
        let mut sp = Sprayer::new(1, 42);
        sp.reshape(t);
        let mut c = vec![0; t.ports.len()];
        for i in 0..n {
            let p = sp
                .choose(
                    t,
                    0,
                    s,
                    Pick {
                        policy,
                        flow: (i as u64 % flows).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                        now: i as u64 * 1000,
                    },
                )
                .unwrap();
            c[usize::from(p)] += 1;
        }
        c
    }

    #[test]
    fn round_robin_is_exact_and_skips_down_uplinks() {
        let t = tables(vec![1; 4]);
        let s = board(4);
        assert_eq!(
            counts(&t, &s, SprayPolicy::RoundRobin, 4000, 1),
            vec![1000; 4]
        );
        s[2].set_up(false);
        let c = counts(&t, &s, SprayPolicy::RoundRobin, 3000, 1);
        assert_eq!(c, vec![1000, 1000, 0, 1000]);
        for st in s.iter() {
            st.set_up(false);
        }
        let mut sp = Sprayer::new(1, 1);
        assert_eq!(
            sp.choose(
                &t,
                0,
                &s,
                Pick {
                    policy: SprayPolicy::RoundRobin,
                    flow: 0,
                    now: 0
                }
            ),
            None
        );
    }

    #[test]
    fn weighted_within_two_percent() {
        let t = tables(vec![1, 2, 3, 4]);
        let s = board(4);
        let c = counts(&t, &s, SprayPolicy::Weighted, 100_000, 1);
        for (i, w) in [1.0, 2.0, 3.0, 4.0].iter().enumerate() {
            let share = c[i] as f64 / 100_000.0;
            assert!((share - w / 10.0).abs() <= 0.02 * w / 10.0, "{c:?}");
        }
    }

    #[test]
    fn ecmp_keeps_each_flow_on_one_uplink_and_spreads_flows() {
        let t = tables(vec![1; 4]);
        let s = board(4);
        let mut sp = Sprayer::new(1, 1);
        let mut used = [0; 4];
        for f in 0..1000u64 {
            let h = f.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x1234;
            let first = sp
                .choose(
                    &t,
                    0,
                    &s,
                    Pick {
                        policy: SprayPolicy::Ecmp,
                        flow: h,
                        now: 0,
                    },
                )
                .unwrap();
            for k in 0..10 {
                assert_eq!(
                    sp.choose(
                        &t,
                        0,
                        &s,
                        Pick {
                            policy: SprayPolicy::Ecmp,
                            flow: h,
                            now: k
                        }
                    )
                    .unwrap(),
                    first
                );
            }
            used[usize::from(first)] += 1;
        }
        assert!(used.iter().all(|u| *u > 150), "{used:?}");
    }

    #[test]
    fn random_and_least_loaded() {
        let t = tables(vec![1; 4]);
        let s = board(4);
        let c = counts(&t, &s, SprayPolicy::Random, 40_000, 1);
        assert!(c.iter().all(|x| (9_000..11_000).contains(x)), "{c:?}");
        s[0].set_backlog(5);
        s[1].set_backlog(1);
        s[2].set_backlog(9);
        s[3].set_backlog(1);
        let c = counts(&t, &s, SprayPolicy::LeastLoaded, 100, 1);
        assert_eq!((c[0], c[2]), (0, 0), "{c:?}");
        assert!(c[1] > 0 && c[3] > 0, "ties rotate: {c:?}");
    }

    #[test]
    fn flowlets_move_only_after_a_gap() {
        let mut t = tables(vec![1; 4]);
        t.flowlet_gap_ns = 100;
        let s = board(4);
        let mut sp = Sprayer::new(1, 5);
        let first = sp
            .choose(
                &t,
                0,
                &s,
                Pick {
                    policy: SprayPolicy::Flowlet,
                    flow: 77,
                    now: 0,
                },
            )
            .unwrap();
        for now in (10..1000).step_by(10) {
            assert_eq!(
                sp.choose(
                    &t,
                    0,
                    &s,
                    Pick {
                        policy: SprayPolicy::Flowlet,
                        flow: 77,
                        now
                    }
                )
                .unwrap(),
                first
            );
        }
        let mut moved = false;
        let mut now = 1000;
        for _ in 0..20 {
            now += 1000;
            moved |= sp
                .choose(
                    &t,
                    0,
                    &s,
                    Pick {
                        policy: SprayPolicy::Flowlet,
                        flow: 77,
                        now,
                    },
                )
                .unwrap()
                != first;
        }
        assert!(moved);
    }

    #[test]
    fn flow_hash_separates_flows() {
        let ip = |sport| IpSummary {
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 2, 2)),
            hop_limit: 64,
            tos: 0,
            protocol: 17,
            l4_offset: 34,
            end_offset: 100,
            l4: L4Summary::Udp {
                src_port: sport,
                dst_port: 4791,
            },
        };
        assert_eq!(flow_hash(&ip(49441)), flow_hash(&ip(49441)));
        assert_ne!(flow_hash(&ip(49441)), flow_hash(&ip(49442)));
        assert_eq!(
            "least_loaded".parse::<SprayPolicy>(),
            Ok(SprayPolicy::LeastLoaded)
        );
        assert!("spray"
            .parse::<SprayPolicy>()
            .unwrap_err()
            .contains("one of"));
    }
}
