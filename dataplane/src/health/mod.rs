//! Path health: which members of an uplink group are fit to carry sprayed traffic.
//!
//! Spraying puts every QP on every path, so a path that drops packets with its carrier up (a
//! dirty optic, a bad spine linecard) hurts every QP, where ECMP hurt only the flows hashed onto
//! it. A member leaves the spray set while it fails and comes back once it has been clean for a
//! while; ECMP-hashed traffic (RDMA CM, TCP) leaves it too.
//!
//! **How a failing path is found.** By probes, as BFD and Pingmesh do: every member of a group
//! with `health` sends a probe ([`crate::wire::probe`]) to each peer ToR every interval (50 us
//! by default), and the peer does the same back over the same member (in a two-tier leaf-spine
//! a member's traffic to a peer crosses one spine both ways). Each probe reports what its
//! sender received of the other side's, so each side knows the loss of its own direction, the
//! one its spraying uses, exactly and within a few intervals of traffic, whether or not data
//! flows. The destination ToR's own evidence (path order, stamps) cannot be used directly: it
//! knows what arrived late or never, not which path the source put it on.
//!
//! **When a member goes out**, for some peer:
//! - *dead*: nothing heard from the peer over it for `detect_intervals` intervals (5: 0.25 ms
//!   at the default 50 us; five probes in a row lost on a path losing 1% happens once in 10^10
//!   intervals, three, as BFD takes, once in 10^6: every minute), while the peer went on probing
//!   over another member, with little loss, for that long after the last probe of it that came
//!   (the probes carry their send time: a peer that stopped probing, or probes that are merely
//!   late, are not a dead path; silence is counted only up to when the port was last drained,
//!   so a worker that fell behind on it does not take its own backlog for death);
//! - *lossy, fast*: at least `fast_loss_out` (15%) of its last 64 probes lost: a path losing
//!   30% is out within 2.5 ms at the median and 5 ms at the 99th percentile (ten losses), one
//!   losing 1% stays in (the chance of ten losses in 64 at 1% is about 10^-9 per window);
//! - *lossy, slow*: at least `loss_out` (3%) of its last 1024 probes lost (50 ms);
//! - and the same over all peers at once: a member's own fault (its link, its spine) shows in
//!   every session, and its sessions' last `64 / peers` probes together are found as many times
//!   sooner (a spine losing 30% in the fabric simulator's 4-leaf fabric: 0.9 ms).
//!
//! In each case only when it is that much worse than the best other member (by half the
//! threshold, and beyond what chance gives a member losing like the best one: a Chernoff bound
//! at 10^-6 per window): when every member loses alike (congestion spread by the spraying
//! itself, or the peer gone) taking members out helps nobody. The sprayer never takes the last
//! members out: when every live member is out, it uses them all.
//!
//! **Why 3%.** A loss costs the hosts more than the lost packet: the requester resends, a
//! Go-Back-N RNIC everything after it, and sometimes waits for its retransmission timer. The
//! demo's rack (four paths, the RNIC models, reorder with path-order detection) keeps 0.94 of
//! capacity with one path at 1% loss, 0.83-0.84 at 2%, 0.51-0.77 at 5% and 0.24-0.69 at 10%,
//! while three clean paths keep 0.70: if a loss on a path costs `c` packets of capacity, the
//! path is worth keeping while its loss is below `1/c`, whatever the number of paths; the demo
//! measures `c` between 15 and 40, so the break-even lies between 2.5% and 7%. 3% keeps a
//! 1-2% path in and takes a 5% path out; `loss_out` sets it per group.
//!
//! **Coming back.** An out member comes back once it has been clean (heard every interval, its
//! loss at most half of `loss_out` over the whole time, or no worse than the best other member
//! by that much) for `restore_ms` (200 ms), not at the first good probe. A member that fails again
//! within eight restore times of coming back waits twice as long the next time, up to 32 times:
//! a flapping path stays out.
//!
//! **What it is not.** Per member, not per destination: a member that fails towards one peer
//! is out for every destination of its group. Probes need a sprayswitch at the other end (the
//! peer must list this switch among its peers), and the fabric must queue network control (DSCP
//! CS6) ahead of data, as datacenter switches do for routing protocols and BFD: a probe queued
//! behind a deep data queue looks lost. Its cost: a probe of 74 bytes per member, peer and
//! interval each way (at 50 us, 20,000 per second per session).
//!
//! The monitor is per worker, over the uplinks the worker owns: it sends their probes, takes
//! the peers' probes that arrive on them, and publishes each member's state through the status
//! board ([`crate::tables::status::PortStatus`]) and each session's loss through the
//! [`HealthBoard`], where the other workers' monitors compare their members with it. Pure logic
//! over `now`: it reads no clock.

mod session;

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::ids::PortId;
use crate::rng::Rng;
use crate::tables::status::StatusBoard;
use crate::tables::{HealthSpec, PathPin, Role, Tables};
use crate::wire::probe::{emit_frame, Probe, ProbeAddrs, ProbeRepr, FRAME_LEN_V6};

use session::{Report, Session};
pub use session::{WindowLoss, FAST_WINDOW, SLOW_WINDOW};

/// Peers one uplink group may probe.
pub const MAX_PEERS: usize = 64;

/// Longest the restore time grows for a flapping member (2^5 times `restore_ms`).
const MAX_PENALTY: u32 = 5;

/// A member that fails again within this many restore times of coming back flaps.
const FLAP_RESTORES: u64 = 8;

/// Loss rate assumed for a member that lost nothing: a window's losses are compared with at
/// least this.
const LOSS_FLOOR: f64 = 0.005;

/// How unlikely (as a natural logarithm) a window's losses must be for a member that loses like
/// the best other one before they count against it: 10^-6 per window.
const SIGNIFICANCE: f64 = 13.8;

/// Whether `l` is more loss than a member losing `base` (at least [`LOSS_FLOOR`]) shows by
/// chance: the Chernoff bound of the binomial tail, `n * D(lost/n || base)` in nats, at least
/// [`SIGNIFICANCE`]. Spread alike over every member (congestion that spraying spreads, a peer
/// that is gone), loss takes no member out however high it is: 20% everywhere makes 16 of 64
/// lost on one member an unremarkable window; 30% on one path beside clean ones is beyond
/// doubt within 32 probes.
fn worse_than(l: WindowLoss, base: f64) -> bool {
    let p = base.clamp(LOSS_FLOOR, 0.999);
    let a = l.ratio();
    if a <= p {
        return false;
    }
    let kl = |x: f64, y: f64| if x > 0.0 { x * (x / y).ln() } else { 0.0 };
    let d = kl(a, p) + kl(1.0 - a, 1.0 - p);
    f64::from(l.sent) * d >= SIGNIFICANCE
}

/// Whether member `m` is dead towards its peer `k` at `now`: nothing heard from the peer over it
/// for `detect_intervals` intervals (up to when its port was last drained), while the peer went
/// on probing, with little loss, over another member for that long after the last probe it sent
/// that reached us over `m` (or after it began, if none ever did). The second half compares the
/// peer's own send times, so neither a peer that stopped probing for a while (nothing comes
/// anywhere) nor probes that are merely late on one member (a sender or an emulated path that
/// fell behind) count as a dead path: only probes the peer sent, over this member, that never
/// came. When every member loses much, a few probes in a row lost on one is no news either.
fn dead_towards(
    m: &Member,
    k: usize,
    spec: &HealthSpec,
    group: &crate::tables::UplinkGroup,
    board: &HealthBoard,
    now: u64,
) -> bool {
    let Some(s) = m.sessions.get(k) else {
        return false;
    };
    let quiet = u64::from(spec.detect_intervals) * spec.interval_ns;
    if !s.silent(m.caught_up.min(now), quiet) {
        return false;
    }
    let others: Vec<Cell> = group
        .ports
        .iter()
        .filter(|&&o| o != m.port)
        .filter_map(|&o| board.get(o, k))
        .filter(|c| !c.silent && c.fast.is_some_and(|f| f < spec.fast_loss_out / 2.0))
        .collect();
    let since = match s.peer_sent() {
        Some((_, last)) => last,
        None => match others
            .iter()
            .filter_map(|c| c.peer_sent)
            .map(|p| p.0)
            .reduce(|a, b| if (b.wrapping_sub(a) as i32) < 0 { b } else { a })
        {
            Some(first) => first,
            None => return false,
        },
    };
    let quiet_us = (quiet / 1000) as i64;
    let dead = others.iter().any(|c| {
        c.peer_sent
            .is_some_and(|(_, last)| i64::from(last.wrapping_sub(since) as i32) > quiet_us)
    });
    dead
}

/// Where each (member, peer) session's loss is published for the other members' monitors:
/// one word per session.
#[derive(Debug)]
pub struct HealthBoard {
    /// Per session: its loss word and the peer's send times (first and last heard).
    cells: Box<[[AtomicU64; 2]]>,
}

/// One session's state as the board holds it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Cell {
    /// Nothing heard from the peer over the member for `detect_intervals`.
    pub silent: bool,
    /// Loss over the last [`FAST_WINDOW`] probes.
    pub fast: Option<f64>,
    /// Loss over the last [`SLOW_WINDOW`] probes.
    pub slow: Option<f64>,
    /// The peer's send times (its clock, microseconds) of the first and the last of its probes
    /// heard over the member.
    pub peer_sent: Option<(u32, u32)>,
}

const VALID: u64 = 1 << 63;
const SILENT: u64 = 1 << 62;
const HAS_FAST: u64 = 1 << 61;
const HAS_SLOW: u64 = 1 << 60;
const HEARD: u64 = 1 << 59;
const PPM_MASK: u64 = (1 << 20) - 1;

fn ppm(x: f64) -> u64 {
    ((x.clamp(0.0, 1.0) * 1e6).round() as u64).min(PPM_MASK)
}

impl Cell {
    fn pack(&self) -> [u64; 2] {
        let mut w = VALID;
        if self.silent {
            w |= SILENT;
        }
        if let Some(f) = self.fast {
            w |= HAS_FAST | ppm(f);
        }
        if let Some(s) = self.slow {
            w |= HAS_SLOW | ppm(s) << 20;
        }
        let mut t = 0;
        if let Some((first, last)) = self.peer_sent {
            w |= HEARD;
            t = u64::from(last) << 32 | u64::from(first);
        }
        [w, t]
    }

    fn unpack(w: u64, t: u64) -> Option<Cell> {
        (w & VALID != 0).then(|| Cell {
            silent: w & SILENT != 0,
            fast: (w & HAS_FAST != 0).then(|| (w & PPM_MASK) as f64 / 1e6),
            slow: (w & HAS_SLOW != 0).then(|| (w >> 20 & PPM_MASK) as f64 / 1e6),
            peer_sent: (w & HEARD != 0).then_some((t as u32, (t >> 32) as u32)),
        })
    }
}

impl HealthBoard {
    /// A board for `ports` ports.
    pub fn new(ports: usize) -> HealthBoard {
        HealthBoard {
            cells: (0..ports * MAX_PEERS)
                .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                .collect(),
        }
    }

    fn index(port: PortId, slot: usize) -> usize {
        usize::from(port) * MAX_PEERS + slot
    }

    /// Publishes session `slot` of `port` (its owner only). Relaxed: each word is read
    /// whole, and a reader that gets one word of this round and one of the last compares
    /// figures one interval apart, as good a comparison as the newest.
    pub fn set(&self, port: PortId, slot: usize, c: Cell) {
        if let Some(w) = self.cells.get(Self::index(port, slot)) {
            let [a, b] = c.pack();
            w[1].store(b, Ordering::Relaxed);
            w[0].store(a, Ordering::Relaxed);
        }
    }

    /// Session `slot` of `port`, if its owner published one.
    pub fn get(&self, port: PortId, slot: usize) -> Option<Cell> {
        let w = self.cells.get(Self::index(port, slot))?;
        Cell::unpack(w[0].load(Ordering::Relaxed), w[1].load(Ordering::Relaxed))
    }

    /// Forgets what `port` published (it left its group's health).
    pub fn clear(&self, port: PortId) {
        for slot in 0..MAX_PEERS {
            if let Some(w) = self.cells.get(Self::index(port, slot)) {
                w[0].store(0, Ordering::Relaxed);
            }
        }
    }
}

/// Where a member stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PathState {
    /// In the spray set.
    #[default]
    In,
    /// In, but a probe interval went by unheard, or its loss is over half a threshold.
    Suspect,
    /// Out of the spray set by its health.
    Out,
}

impl PathState {
    /// Its name in `show paths`.
    pub fn name(self) -> &'static str {
        match self {
            PathState::In => "in",
            PathState::Suspect => "suspect",
            PathState::Out => "out",
        }
    }
}

/// What one session shows, for `show paths`.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerReport {
    /// The peer ToR.
    pub peer: IpAddr,
    /// How long ago its last probe came over the member (`None`: never).
    pub heard_ago_ns: Option<u64>,
    /// Loss of this side's probes over the last [`FAST_WINDOW`].
    pub fast: Option<WindowLoss>,
    /// ... and over the last [`SLOW_WINDOW`].
    pub slow: Option<WindowLoss>,
    /// The peer sprays over this member.
    pub peer_sprays: bool,
}

/// A member's health as its owner last published it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PathReport {
    /// The member has health probing (its group has `health`).
    pub monitored: bool,
    /// Its state by health.
    pub state: PathState,
    /// The operator's pin.
    pub pin: PathPin,
    /// In the spray set now (state and pin together).
    pub sprayed: bool,
    /// Why it last changed state.
    pub reason: String,
    /// When it last changed state (the switch's clock, ns).
    pub since_ns: u64,
    /// Times it went out.
    pub outs: u64,
    /// The restore time in force (grown by flapping).
    pub restore_ns: u64,
    /// Per peer.
    pub peers: Vec<PeerReport>,
    /// Its last changes in or out of the spray set by health: (when, out), oldest first, at
    /// most [`EVENTS`].
    pub events: Vec<(u64, bool)>,
}

/// Changes a member's report keeps.
pub const EVENTS: usize = 16;

/// A probe frame to send.
#[derive(Debug, Clone, Copy)]
pub struct ProbeFrame {
    /// The member it goes out on.
    pub port: PortId,
    /// Its bytes.
    pub bytes: [u8; FRAME_LEN_V6],
    /// Its length.
    pub len: usize,
}

/// Why a member went out.
#[derive(Debug, Clone, PartialEq)]
enum Fault {
    Dead(IpAddr),
    Lossy {
        /// `None`: towards every peer together.
        peer: Option<IpAddr>,
        loss: f64,
        window: usize,
        best: f64,
    },
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Dead(p) => write!(f, "dead towards {p} (no probe heard while others are)"),
            Fault::Lossy {
                peer,
                loss,
                window,
                best,
            } => {
                match peer {
                    Some(p) => write!(f, "lossy towards {p}")?,
                    None => write!(f, "lossy towards every peer")?,
                }
                write!(
                    f,
                    ": {:.1}% of the last {window} probes lost (best other member {:.1}%)",
                    loss * 100.0,
                    best * 100.0
                )
            }
        }
    }
}

/// One uplink this worker owns.
#[derive(Debug)]
struct Member {
    port: PortId,
    group: u16,
    spec: Option<HealthSpec>,
    sessions: Vec<Session>,
    state: PathState,
    reason: String,
    since: u64,
    outs: u64,
    /// When it last came back in (for flap damping).
    back_at: Option<u64>,
    penalty: u32,
    /// While out: since when it has been clean, and where each session's reports stood then.
    clean_since: u64,
    marks: Vec<Option<Report>>,
    probes_tx: u64,
    probes_rx: u64,
    /// No peer's traffic arrives over it any more (as of the last poll).
    rx_dead: bool,
    /// Its last changes: (when, out).
    events: std::collections::VecDeque<(u64, bool)>,
    /// When its port's receive ring was last found drained: silence counts up to here, not
    /// up to now (a worker that fell behind has the peer's probes still in the ring).
    caught_up: u64,
}

impl Member {
    fn note(&mut self, now: u64, out: bool) {
        if self.events.len() == EVENTS {
            self.events.pop_front();
        }
        self.events.push_back((now, out));
    }

    /// A clean period starts (again) at `now`.
    fn restart_clean(&mut self, now: u64) {
        self.clean_since = now;
        self.marks.iter_mut().for_each(|m| *m = None);
    }

    fn restore_ns(&self) -> u64 {
        self.spec
            .as_ref()
            .map_or(0, |s| s.restore_ns << self.penalty)
    }
}

/// Counts of one member, for the port counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemberCounts {
    /// Probes sent.
    pub probes_tx: u64,
    /// Probes received from peers.
    pub probes_rx: u64,
    /// Times it went out.
    pub outs: u64,
    /// 0 in, 1 suspect, 2 out by health, 3 pinned out, 4 pinned in.
    pub state: u64,
    /// The worst loss of its last 64 probes towards any peer, parts per million.
    pub loss_ppm: u64,
}

/// The path health of one worker's uplinks.
#[derive(Debug)]
pub struct PathMonitor {
    members: Vec<Member>,
    next_due: Option<u64>,
    rng: Rng,
    outbox: Vec<ProbeFrame>,
    /// A member changed state since [`PathMonitor::take_changed`] last looked.
    changed: bool,
    /// Probes that matched no session (an unknown peer, or a port without health).
    pub unknown: u64,
}

impl PathMonitor {
    /// A monitor with nothing to watch yet; `seed` draws its session numbers.
    pub fn new(seed: u64) -> PathMonitor {
        PathMonitor {
            members: Vec::new(),
            next_due: None,
            rng: Rng::new(seed ^ 0x5052_4f42),
            outbox: Vec::new(),
            changed: true,
            unknown: 0,
        }
    }

    /// Whether a member changed state (or the monitor was configured) since the last call.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// Watches the uplinks among `owned` as `t` says: keeps the sessions that stay (same
    /// member, same peer, same interval), starts new ones, drops the rest.
    pub fn configure(
        &mut self,
        t: &Tables,
        owned: &[PortId],
        board: &HealthBoard,
        status: &StatusBoard,
        now: u64,
    ) {
        let mut old = std::mem::take(&mut self.members);
        for &port in owned {
            let Some(info) = t.ports.get(usize::from(port)) else {
                continue;
            };
            if info.role != Role::Uplink {
                continue;
            }
            let Some(gi) = t.groups.iter().position(|g| g.ports.contains(&port)) else {
                continue;
            };
            let spec = t.groups[gi].health.clone();
            let prev = old
                .iter()
                .position(|m| m.port == port)
                .map(|i| old.swap_remove(i));
            let mut m = match prev {
                Some(m) if m.spec == spec && m.group == gi as u16 => m,
                Some(m) => {
                    board.clear(port);
                    Member {
                        spec: spec.clone(),
                        group: gi as u16,
                        sessions: Vec::new(),
                        ..m
                    }
                }
                None => Member {
                    port,
                    group: gi as u16,
                    spec: spec.clone(),
                    sessions: Vec::new(),
                    state: PathState::In,
                    reason: String::new(),
                    since: now,
                    outs: 0,
                    back_at: None,
                    penalty: 0,
                    clean_since: now,
                    marks: Vec::new(),
                    probes_tx: 0,
                    probes_rx: 0,
                    rx_dead: false,
                    events: std::collections::VecDeque::with_capacity(EVENTS),
                    caught_up: now,
                },
            };
            if m.sessions.is_empty() {
                if let Some(s) = &spec {
                    m.sessions = s
                        .peers
                        .iter()
                        .map(|p| Session::new(*p, self.rng.next_u64() as u32, now))
                        .collect();
                    m.marks = vec![None; m.sessions.len()];
                    if m.state == PathState::Out {
                        m.clean_since = now;
                    }
                } else {
                    m.state = PathState::In;
                }
            }
            self.members.push(m);
        }
        for m in old {
            board.clear(m.port);
        }
        self.next_due = self.members.iter().any(|m| m.spec.is_some()).then_some(now);
        self.changed = true;
        self.publish(t, status, board, now);
    }

    /// Each member's place in the spray set (its state and its pin), to the status board, and
    /// whether it delivers anything, for [`PathMonitor::rx_dead`].
    fn publish(&mut self, t: &Tables, status: &StatusBoard, board: &HealthBoard, now: u64) {
        for i in 0..self.members.len() {
            let dead = self.delivers_nothing(&self.members[i], t, board, now);
            self.members[i].rx_dead = dead;
        }
        for m in &self.members {
            let pin = t
                .ports
                .get(usize::from(m.port))
                .map_or(PathPin::Auto, |p| p.path_pin);
            let sprayed = match pin {
                PathPin::In => true,
                PathPin::Out => false,
                PathPin::Auto => m.state != PathState::Out,
            };
            if let Some(st) = status.get(usize::from(m.port)) {
                st.set_sprayable(sprayed);
            }
        }
    }

    /// Whether no peer's traffic arrives over `port` any more, as of the last poll (see
    /// [`crate::tables::status::PortStatus::rx_dead`]).
    pub fn rx_dead(&self, port: PortId) -> bool {
        self.members.iter().any(|m| m.port == port && m.rx_dead)
    }

    /// When the monitor next has work (probes to send), if ever.
    pub fn next_due(&self) -> Option<u64> {
        self.next_due
    }

    /// The worker took a burst from `port` at `now`; `drained`: the port had no more (a burst
    /// shorter than the worker's). Until a port is drained, what it holds may be the probes
    /// whose absence would otherwise count as silence.
    #[inline]
    pub fn note_rx(&mut self, port: PortId, drained: bool, now: u64) {
        if drained {
            if let Some(m) = self.members.iter_mut().find(|m| m.port == port) {
                m.caught_up = now;
            }
        }
    }

    /// A probe arrived on `port` from `src`, its payload `payload`. False when no session
    /// takes it (counted in [`PathMonitor::unknown`]).
    pub fn handle(&mut self, port: PortId, src: IpAddr, payload: &[u8], now: u64) -> bool {
        let repr = Probe::new_checked(payload)
            .ok()
            .and_then(|v| ProbeRepr::parse(&v).ok());
        let found = repr.and_then(|p| {
            let m = self.members.iter_mut().find(|m| m.port == port)?;
            let s = m.sessions.iter_mut().find(|s| s.peer == src)?;
            s.heard(&p, now);
            m.probes_rx += 1;
            Some(())
        });
        if found.is_none() {
            self.unknown += 1;
        }
        found.is_some()
    }

    /// At `now`: sends the probes due and judges every member. Members' spray eligibility goes
    /// to `status`, sessions to `board`; probes wait in [`PathMonitor::take_probes`].
    pub fn poll(&mut self, t: &Tables, now: u64, board: &HealthBoard, status: &StatusBoard) {
        match self.next_due {
            Some(due) if now >= due => {}
            _ => return,
        }
        // Sessions to the board first, so that each member is judged against the others'
        // figures of this round where this worker owns them.
        let mut interval = u64::MAX;
        for m in &self.members {
            let Some(spec) = &m.spec else { continue };
            interval = interval.min(spec.interval_ns);
            let quiet = u64::from(spec.detect_intervals) * spec.interval_ns;
            let at = m.caught_up.min(now);
            for (k, s) in m.sessions.iter().enumerate() {
                board.set(
                    m.port,
                    k,
                    Cell {
                        silent: s.silent(at, quiet),
                        fast: s.loss(FAST_WINDOW).map(|l| l.ratio()),
                        slow: s.loss(SLOW_WINDOW).map(|l| l.ratio()),
                        peer_sent: s.peer_sent(),
                    },
                );
            }
        }
        for i in 0..self.members.len() {
            let before = self.members[i].state;
            self.judge(i, t, now, board);
            self.changed |= (before == PathState::Out) != (self.members[i].state == PathState::Out);
        }
        self.publish(t, status, board, now);
        // The probes go out after the new spray state is published and carry it: a member that
        // left the set says so in a probe that follows, on its FIFO path, everything sprayed
        // over it before; one that came back says so before anything sprayed over it again
        // (what other workers spray over it reaches this worker's queue for it after this).
        for m in &mut self.members {
            let Some(spec) = &m.spec else { continue };
            let info = &t.ports[usize::from(m.port)];
            let st = status.get(usize::from(m.port));
            let live = info.admin_up && st.is_some_and(|s| s.is_up());
            if !live {
                continue;
            }
            let spraying = st.is_some_and(|s| s.sprayable());
            for s in &mut m.sessions {
                let (Some(src), Some(peer_mac)) = (spec.source_for(s.peer), info.peer_mac) else {
                    continue;
                };
                let repr = s.next_probe(spraying, now);
                let mut f = ProbeFrame {
                    port: m.port,
                    bytes: [0; FRAME_LEN_V6],
                    len: 0,
                };
                let addrs = ProbeAddrs {
                    src_mac: info.mac,
                    dst_mac: peer_mac,
                    src,
                    dst: s.peer,
                };
                if let Ok(n) = emit_frame(&mut f.bytes, &addrs, &repr) {
                    f.len = n;
                    self.outbox.push(f);
                    m.probes_tx += 1;
                }
            }
        }
        self.next_due = (interval != u64::MAX).then(|| now + interval);
    }

    /// Whether no peer's traffic arrives over `m` any more: every peer is silent over it while
    /// heard over another member. Such a member proves nothing and holds nothing back:
    /// path-order loss detection stops waiting for it. (A peer that only stopped spraying over
    /// it says so in its probes, but those go ahead of its data, in the network-control class:
    /// what it sprayed before may still be queued behind them, so that is no proof.)
    fn delivers_nothing(&self, m: &Member, t: &Tables, board: &HealthBoard, now: u64) -> bool {
        let Some(spec) = &m.spec else { return false };
        let group = &t.groups[usize::from(m.group)];
        !m.sessions.is_empty()
            && (0..m.sessions.len()).all(|k| dead_towards(m, k, spec, group, board, now))
    }

    /// The worst fault of member `i` towards any peer, judged against the group's other
    /// members towards the same peer.
    fn fault(&self, i: usize, t: &Tables, now: u64, board: &HealthBoard) -> Option<Fault> {
        let m = &self.members[i];
        let spec = m.spec.as_ref()?;
        let group = &t.groups[usize::from(m.group)];
        for (k, s) in m.sessions.iter().enumerate() {
            let others: Vec<Cell> = group
                .ports
                .iter()
                .filter(|&&o| o != m.port)
                .filter_map(|&o| board.get(o, k))
                .collect();
            if dead_towards(m, k, spec, group, board, now) {
                return Some(Fault::Dead(s.peer));
            }
            // What the best other member loses (over its long window where it has one: the
            // steadier figure; a silent one loses everything; one without enough probes yet
            // does not count); none: no judgement.
            let best = others
                .iter()
                .filter_map(|c| {
                    if c.silent {
                        Some(1.0)
                    } else {
                        c.slow.or(c.fast)
                    }
                })
                .reduce(f64::min);
            let windows = [
                (FAST_WINDOW, spec.fast_loss_out, best),
                (SLOW_WINDOW, spec.loss_out, best),
            ];
            // Out, only the fast window and silence keep it out; the whole clean period is
            // judged when it ends.
            let windows = if m.state == PathState::Out {
                &windows[..1]
            } else {
                &windows[..]
            };
            for &(window, out, best) in windows {
                let Some(best) = best else { continue };
                if let Some(l) = s.loss_after(window, m.since) {
                    let loss = l.ratio();
                    if loss >= out && loss - best >= out / 2.0 && worse_than(l, best) {
                        return Some(Fault::Lossy {
                            peer: Some(s.peer),
                            loss,
                            window,
                            best,
                        });
                    }
                }
            }
        }
        if m.sessions.len() > 1 {
            return self.pooled_fault(m, spec, group, board);
        }
        None
    }

    /// The member's loss towards all its peers together, against the other members' alike: a
    /// fault of the member itself (its own link, or its spine) shows in every session, and
    /// pooled over the last `window / peers` probes of each it is found as many times sooner
    /// as there are peers. (A fault towards one peer alone is diluted here;
    /// [`PathMonitor::fault`] finds it session by session.)
    fn pooled_fault(
        &self,
        m: &Member,
        spec: &HealthSpec,
        group: &crate::tables::UplinkGroup,
        board: &HealthBoard,
    ) -> Option<Fault> {
        let windows = [
            (FAST_WINDOW, spec.fast_loss_out),
            (SLOW_WINDOW, spec.loss_out),
        ];
        let windows = if m.state == PathState::Out {
            &windows[..1]
        } else {
            &windows[..]
        };
        for &(window, out) in windows {
            // The best other member's loss over all peers (the mean of its sessions', a silent
            // one losing everything); none with figures for every peer: no judgement.
            let best = group
                .ports
                .iter()
                .filter(|&&o| o != m.port)
                .filter_map(|&o| {
                    let cells: Option<Vec<f64>> = (0..m.sessions.len())
                        .map(|k| {
                            board.get(o, k).and_then(|c| {
                                if c.silent {
                                    Some(1.0)
                                } else if window == FAST_WINDOW {
                                    c.fast
                                } else {
                                    c.slow
                                }
                            })
                        })
                        .collect();
                    cells.map(|v| v.iter().sum::<f64>() / v.len().max(1) as f64)
                })
                .reduce(f64::min)?;
            // As many probes as one session's window, from every session alike: the same
            // evidence in a fraction of the time.
            let each = (window / m.sessions.len()).max(8);
            let pooled = m
                .sessions
                .iter()
                .filter_map(|s| s.loss_after(each, m.since))
                .fold(WindowLoss { sent: 0, lost: 0 }, |a, l| WindowLoss {
                    sent: a.sent + l.sent,
                    lost: a.lost + l.lost,
                });
            if pooled.sent == 0 {
                continue;
            }
            let loss = pooled.ratio();
            if loss >= out && loss - best >= out / 2.0 && worse_than(pooled, best) {
                return Some(Fault::Lossy {
                    peer: None,
                    loss,
                    window: pooled.sent as usize,
                    best,
                });
            }
        }
        None
    }

    /// Moves member `i` in or out as its sessions say.
    fn judge(&mut self, i: usize, t: &Tables, now: u64, board: &HealthBoard) {
        if self.members[i].spec.is_none() {
            return;
        }
        let fault = self.fault(i, t, now, board);
        let name = &t.ports[usize::from(self.members[i].port)].name;
        let group = &t.groups[usize::from(self.members[i].group)];
        let m = &mut self.members[i];
        let spec = m.spec.clone().expect("checked above");
        let quiet = u64::from(spec.detect_intervals) * spec.interval_ns;
        match (m.state, fault) {
            (PathState::In | PathState::Suspect, Some(f)) => {
                let flapped = m
                    .back_at
                    .is_some_and(|b| now.saturating_sub(b) < FLAP_RESTORES * m.restore_ns());
                m.penalty = if flapped {
                    (m.penalty + 1).min(MAX_PENALTY)
                } else {
                    0
                };
                m.state = PathState::Out;
                m.reason = f.to_string();
                m.since = now;
                m.outs += 1;
                m.restart_clean(now);
                m.note(now, true);
                log::warn!(
                    "path {name} of group {} out of the spray set: {} (back after {} ms clean)",
                    group.name,
                    m.reason,
                    m.restore_ns() / 1_000_000
                );
            }
            (PathState::Out, Some(_)) => m.restart_clean(now),
            (PathState::Out, None) => {
                // Each session's first report of the clean period is where its loss counts
                // from.
                let since = m.clean_since;
                for (mark, s) in m.marks.iter_mut().zip(&m.sessions) {
                    if mark.is_none() {
                        *mark = s.mark_since(since);
                    }
                }
                if now.saturating_sub(m.clean_since) < m.restore_ns() {
                    return;
                }
                // Clean over the whole time: each session's loss since the marks at most half
                // of loss_out (or no worse than the best other member by that much).
                let min = (m.restore_ns() / spec.interval_ns / 4).max(1) as u32;
                let mut clean = true;
                for (k, s) in m.sessions.iter().enumerate() {
                    let best = group
                        .ports
                        .iter()
                        .filter(|&&o| o != m.port)
                        .filter_map(|&o| board.get(o, k))
                        .filter_map(|c| if c.silent { None } else { c.slow })
                        .reduce(f64::min)
                        .unwrap_or(0.0);
                    let ok = match m.marks.get(k).copied().flatten() {
                        Some(mark) => s
                            .loss_since(mark, min)
                            .is_some_and(|l| l.ratio() <= best + spec.loss_out / 2.0),
                        None => false,
                    };
                    clean &= ok && !s.silent(m.caught_up.min(now), quiet);
                }
                if clean {
                    m.state = PathState::In;
                    m.reason = format!(
                        "clean for {} ms",
                        now.saturating_sub(m.clean_since) / 1_000_000
                    );
                    m.since = now;
                    m.back_at = Some(now);
                    m.note(now, false);
                    log::info!(
                        "path {name} of group {} back in the spray set: {}",
                        group.name,
                        m.reason
                    );
                } else {
                    m.restart_clean(now);
                }
            }
            (PathState::In | PathState::Suspect, None) => {
                let at = m.caught_up.min(now);
                let suspect = m.sessions.iter().any(|s| {
                    s.silent(at, spec.interval_ns * 3 / 2)
                        || s.loss(FAST_WINDOW)
                            .is_some_and(|l| l.ratio() >= spec.fast_loss_out / 2.0)
                        || s.loss(SLOW_WINDOW)
                            .is_some_and(|l| l.ratio() >= spec.loss_out / 2.0)
                });
                m.state = if suspect {
                    PathState::Suspect
                } else {
                    PathState::In
                };
            }
        }
    }

    /// Probes to send (taken: the next poll fills it again).
    pub fn take_probes(&mut self) -> std::vec::Drain<'_, ProbeFrame> {
        self.outbox.drain(..)
    }

    /// Member `port`'s counts, if this monitor watches it.
    pub fn counts(&self, port: PortId, t: &Tables) -> Option<MemberCounts> {
        let m = self.members.iter().find(|m| m.port == port)?;
        let pin = t
            .ports
            .get(usize::from(port))
            .map_or(PathPin::Auto, |p| p.path_pin);
        let state = match (pin, m.state) {
            (PathPin::Out, _) => 3,
            (PathPin::In, _) => 4,
            (PathPin::Auto, PathState::In) => 0,
            (PathPin::Auto, PathState::Suspect) => 1,
            (PathPin::Auto, PathState::Out) => 2,
        };
        let loss = m
            .sessions
            .iter()
            .filter_map(|s| s.loss(FAST_WINDOW))
            .map(|l| ppm(l.ratio()))
            .max()
            .unwrap_or(0);
        Some(MemberCounts {
            probes_tx: m.probes_tx,
            probes_rx: m.probes_rx,
            outs: m.outs,
            state,
            loss_ppm: loss,
        })
    }

    /// The report of member `port` at `now`, if this monitor watches it.
    pub fn report(&self, port: PortId, t: &Tables, now: u64) -> Option<PathReport> {
        let m = self.members.iter().find(|m| m.port == port)?;
        let pin = t
            .ports
            .get(usize::from(port))
            .map_or(PathPin::Auto, |p| p.path_pin);
        Some(PathReport {
            monitored: m.spec.is_some(),
            state: m.state,
            pin,
            sprayed: match pin {
                PathPin::In => true,
                PathPin::Out => false,
                PathPin::Auto => m.state != PathState::Out,
            },
            reason: m.reason.clone(),
            since_ns: m.since,
            outs: m.outs,
            restore_ns: m.restore_ns(),
            peers: m
                .sessions
                .iter()
                .map(|s| PeerReport {
                    peer: s.peer,
                    heard_ago_ns: s.last_heard().map(|h| now.saturating_sub(h)),
                    fast: s.loss(FAST_WINDOW),
                    slow: s.loss(SLOW_WINDOW),
                    peer_sprays: s.peer_sprays,
                })
                .collect(),
            events: m.events.iter().copied().collect(),
        })
    }

    /// The ports it watches.
    pub fn ports(&self) -> impl Iterator<Item = PortId> + '_ {
        self.members.iter().map(|m| m.port)
    }
}

#[cfg(test)]
mod tests;
