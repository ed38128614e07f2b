//! One probe session: this ToR and one peer ToR over one member uplink. What this side sent,
//! what it heard of the peer's probes, and the peer's reports of what arrived of its own.

use std::collections::VecDeque;
use std::net::IpAddr;

use crate::wire::probe::{ProbeRepr, FLAG_SPRAYING};

/// Reports the short loss window spans (the peer's last reports of this side's probes).
pub const FAST_WINDOW: usize = 64;
/// Reports the long loss window spans.
pub const SLOW_WINDOW: usize = 1024;

/// Loss of this side's probes over a window, as the peer's reports tell it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowLoss {
    /// Probes of this side the window spans.
    pub sent: u32,
    /// Of those, the ones that did not arrive.
    pub lost: u32,
}

impl WindowLoss {
    /// The loss ratio (0 to 1).
    pub fn ratio(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            f64::from(self.lost) / f64::from(self.sent)
        }
    }
}

/// A point of the peer's reports: the highest sequence number of this side it had received,
/// and how many of this side's probes it had received by then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Report {
    top: u32,
    count: u32,
    /// When it arrived.
    at: u64,
}

/// One (member, peer) session.
#[derive(Debug)]
pub(super) struct Session {
    /// The peer ToR's address.
    pub(super) peer: IpAddr,
    /// This side's session number (never 0).
    session: u32,
    /// The last sequence number sent.
    seq: u32,
    /// When this side began probing: silence counts from here until something is heard.
    started: u64,
    /// The peer's session whose probes this side counts, and how many of them came, the
    /// highest sequence number among them, and when the last came.
    heard_session: u32,
    heard_count: u32,
    heard_top: u32,
    last_heard: Option<u64>,
    /// The peer sprays over this path (its last probe said so).
    pub(super) peer_sprays: bool,
    /// The peer's send times (its clock, microseconds) of the first and the last of its probes
    /// heard in its current session.
    peer_sent: Option<(u32, u32)>,
    /// The peer's reports of this side's current session, newest last, at most
    /// [`SLOW_WINDOW`] + 1.
    reports: VecDeque<Report>,
}

impl Session {
    pub(super) fn new(peer: IpAddr, session: u32, now: u64) -> Session {
        Session {
            peer,
            session: session.max(1),
            seq: 0,
            started: now,
            heard_session: 0,
            heard_count: 0,
            heard_top: 0,
            last_heard: None,
            peer_sprays: false,
            peer_sent: None,
            reports: VecDeque::with_capacity(SLOW_WINDOW + 1),
        }
    }

    /// The next probe to send at `now`; `spraying`: this side sprays over the path now.
    pub(super) fn next_probe(&mut self, spraying: bool, now: u64) -> ProbeRepr {
        self.seq = self.seq.wrapping_add(1);
        ProbeRepr {
            flags: if spraying { FLAG_SPRAYING } else { 0 },
            session: self.session,
            seq: self.seq,
            rx_session: self.heard_session,
            rx_count: self.heard_count,
            rx_top: self.heard_top,
            tx_us: (now / 1000) as u32,
        }
    }

    /// A probe of the peer's arrived.
    pub(super) fn heard(&mut self, p: &ProbeRepr, now: u64) {
        if p.session != self.heard_session {
            // The peer (re)started: count its new session from here; its counts of ours start
            // again too.
            self.heard_session = p.session;
            self.heard_count = 0;
            self.heard_top = 0;
            self.reports.clear();
            self.peer_sent = None;
        }
        self.heard_count = self.heard_count.wrapping_add(1);
        if p.seq > self.heard_top {
            self.heard_top = p.seq;
        }
        self.last_heard = Some(now);
        // The peer's send times, as it counts them (FIFO path: they rise).
        self.peer_sent.get_or_insert((p.tx_us, p.tx_us)).1 = p.tx_us;
        self.peer_sprays = p.flags & FLAG_SPRAYING != 0;
        if p.rx_session != self.session {
            // Counts of another session of ours (from before a restart), or none yet.
            return;
        }
        let r = Report {
            top: p.rx_top,
            count: p.rx_count,
            at: now,
        };
        match self.reports.back() {
            // Reports rise with the peer's count. One whose top goes back is older news (a
            // probe of the peer's that a faster path would have overtaken: not on a FIFO path,
            // but never trusted); one whose count goes back while its top goes on is a peer
            // that started counting again (it restarted and drew the same session): its counts
            // start a new series.
            Some(b) if r.top < b.top => return,
            Some(b) if r.count < b.count => self.reports.clear(),
            Some(b) if (b.top, b.count) == (r.top, r.count) => return,
            _ => {}
        }
        if self.reports.len() > SLOW_WINDOW {
            self.reports.pop_front();
        }
        self.reports.push_back(r);
    }

    /// Whether nothing was heard from the peer for longer than `quiet_ns` (counting from the
    /// start of the session while nothing was heard at all).
    pub(super) fn silent(&self, now: u64, quiet_ns: u64) -> bool {
        now.saturating_sub(self.last_heard.unwrap_or(self.started)) > quiet_ns
    }

    /// When the peer was last heard.
    pub(super) fn last_heard(&self) -> Option<u64> {
        self.last_heard
    }

    /// The peer's send times (its clock, microseconds) of the first and the last probe heard.
    pub(super) fn peer_sent(&self) -> Option<(u32, u32)> {
        self.peer_sent
    }

    /// Loss of this side's probes over the peer's last `window` reports, once they span at
    /// least half that many probes (`None` before).
    pub(super) fn loss(&self, window: usize) -> Option<WindowLoss> {
        self.loss_after(window, 0)
    }

    /// [`Session::loss`] over the reports that arrived at or after `since` only (what came
    /// before a member changed state is not held against it after).
    pub(super) fn loss_after(&self, window: usize, since: u64) -> Option<WindowLoss> {
        let newest = *self.reports.back()?;
        // Reports are in arrival order.
        let after = self.reports.len() - self.reports.partition_point(|r| r.at < since);
        let k = window.min(after.checked_sub(1)?);
        let oldest = *self.reports.get(self.reports.len() - 1 - k)?;
        loss_between(oldest, newest, (window / 2) as u32)
    }

    /// The newest report, if it arrived at or after `since` (where a clean period that began
    /// then is measured from).
    pub(super) fn mark_since(&self, since: u64) -> Option<Report> {
        self.reports.back().copied().filter(|r| r.at >= since)
    }

    /// Loss of this side's probes since report `from` (`None` before it spans `min` probes).
    pub(super) fn loss_since(&self, from: Report, min: u32) -> Option<WindowLoss> {
        loss_between(from, *self.reports.back()?, min)
    }
}

fn loss_between(oldest: Report, newest: Report, min: u32) -> Option<WindowLoss> {
    let sent = newest.top.wrapping_sub(oldest.top);
    if sent < min.max(1) {
        return None;
    }
    let got = newest.count.wrapping_sub(oldest.count).min(sent);
    Some(WindowLoss {
        sent,
        lost: sent - got,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer_probe(
        session: u32,
        seq: u32,
        rx_session: u32,
        rx_count: u32,
        rx_top: u32,
    ) -> ProbeRepr {
        ProbeRepr {
            flags: FLAG_SPRAYING,
            session,
            seq,
            rx_session,
            rx_count,
            rx_top,
            tx_us: seq * 50,
        }
    }

    #[test]
    fn loss_is_what_the_peer_did_not_receive_of_ours() {
        let peer = "10.2.1.1".parse().unwrap();
        let mut s = Session::new(peer, 9, 0);
        // The peer received 3 of every 4 of our probes.
        let mut count = 0;
        for top in 1..=1200u32 {
            if top % 4 != 0 {
                count += 1;
            }
            s.heard(&peer_probe(5, top, 9, count, top), u64::from(top) * 100);
        }
        let l = s.loss(FAST_WINDOW).unwrap();
        assert_eq!(l.sent, 64);
        assert_eq!(l.lost, 16);
        assert!((s.loss(SLOW_WINDOW).unwrap().ratio() - 0.25).abs() < 0.01);
        assert!(s.peer_sprays);
        assert_eq!(
            s.next_probe(true, 0).rx_count,
            1200,
            "we heard every probe of the peer's"
        );
        assert_eq!(s.peer_sent(), Some((50, 60_000)));
    }

    #[test]
    fn counts_of_another_session_and_reports_that_go_back_are_ignored() {
        let peer = "10.2.1.1".parse().unwrap();
        let mut s = Session::new(peer, 9, 0);
        s.heard(&peer_probe(5, 1, 8, 100, 100), 1);
        assert!(
            s.mark_since(0).is_none(),
            "counts of an old session of ours"
        );
        s.heard(&peer_probe(5, 2, 9, 10, 10), 2);
        s.heard(&peer_probe(5, 3, 9, 9, 9), 3);
        assert_eq!(s.mark_since(2).map(|r| r.top), Some(10));
        assert!(s.mark_since(3).is_none(), "it came before");
        // The peer counts again from 1 with the same session (restarted, same draw): a new
        // series, not 90% loss.
        s.heard(&peer_probe(5, 4, 9, 1, 100), 4);
        s.heard(&peer_probe(5, 5, 9, 50, 149), 5);
        assert_eq!(s.loss(2).map(|l| (l.sent, l.lost)), Some((49, 0)));
        // The peer restarts: its counts of our probes start again, and so do ours of its.
        s.heard(&peer_probe(6, 1, 9, 0, 0), 4);
        assert_eq!(s.next_probe(false, 0).rx_count, 1);
        assert_eq!(s.next_probe(false, 0).rx_session, 6);
        assert_eq!(
            s.peer_sent(),
            Some((50, 50)),
            "counted from the new session"
        );
    }

    #[test]
    fn silence_counts_from_the_start_until_something_is_heard() {
        let peer = "10.2.1.1".parse().unwrap();
        let mut s = Session::new(peer, 1, 1000);
        assert!(!s.silent(1300, 300));
        assert!(s.silent(1301, 300));
        s.heard(&peer_probe(5, 1, 0, 0, 0), 2000);
        assert!(!s.silent(2300, 300));
        assert!(s.silent(2301, 300));
        assert!(s.loss(FAST_WINDOW).is_none(), "no report of ours yet");
    }
}
