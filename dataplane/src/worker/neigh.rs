//! Next hops that are not resolved yet: routed packets wait for them (see the module docs of
//! [`super`]), the engine's questions go out, and what is learned here is told to the other
//! workers.

use std::net::IpAddr;

use crossbeam::channel::TrySendError;

use super::Worker;
use crate::engine::build_resolve;
use crate::engine::{DropReason, ResolveRequest, Verdict};
use crate::ids::PortId;
use crate::pkt::Pkt;
use crate::tables::Tables;

/// Routed packets a worker holds while their next hops resolve.
pub const PARK_MAX: usize = 64;
/// Of those, at most this many for one next hop.
pub const PARK_PER_HOP: usize = 16;
/// Longest a packet is held for its next hop (the engine asks again at most every 100 ms while
/// packets for it keep coming).
pub const PARK_NS: u64 = 300_000_000;

/// A routed packet waiting for its next hop's address.
pub(super) struct Parked {
    pub(super) port: PortId,
    pub(super) next_hop: IpAddr,
    pub(super) since_ns: u64,
    pub(super) pkt: Pkt,
}

impl Worker {
    /// Holds a routed packet until `next_hop` resolves, within the bounds of the module docs.
    pub(super) fn park(&mut self, port: PortId, next_hop: IpAddr, pkt: Pkt, now: u64) {
        let same = self
            .parked
            .iter()
            .filter(|p| p.next_hop == next_hop)
            .count();
        if self.parked.len() >= PARK_MAX || same >= PARK_PER_HOP {
            self.sh.counters.count_drop(DropReason::Unresolved, 1);
            return;
        }
        self.sh.counters.parked.add(1);
        self.parked.push_back(Parked {
            port,
            next_hop,
            since_ns: now,
            pkt,
        });
    }

    /// Sends on, in the order they came, the held packets whose next hop is now known.
    pub(super) fn release_parked(&mut self, tables: &Tables, now: u64) {
        let mut i = 0;
        while i < self.parked.len() {
            if self
                .engine
                .neighbor(tables, self.parked[i].next_hop)
                .is_none()
            {
                i += 1;
                continue;
            }
            let Some(mut p) = self.parked.remove(i) else {
                break;
            };
            // What the packet told the reorder stage was taken when it first arrived: only its
            // verdict counts now.
            let verdict = self
                .engine
                .handle(tables, &self.sh.status, &mut p.pkt, now)
                .verdict;
            if let Verdict::Resolving { .. } = verdict {
                // Known, yet not usable (learned on another port than the route's): held once.
                self.sh.counters.count_drop(DropReason::Unresolved, 1);
            } else {
                self.dispatch(verdict, p.pkt, now);
            }
        }
        // What went to the reorder stage's queue goes to the stage now: this runs between the
        // steps of an iteration too (new neighbours from other workers, resolution effects).
        self.reorder_queued(now);
    }

    /// Drops (counted `unresolved`) held packets whose next hop did not answer in time, and
    /// asks again for the next hops of the others (the engine sends at most one request per
    /// next hop per 100 ms: a neighbour gets three within [`PARK_NS`], as a host's neighbour
    /// table gives it).
    pub(super) fn expire_parked(&mut self, now: u64) {
        while let Some(p) = self.parked.front() {
            if now.saturating_sub(p.since_ns) < PARK_NS {
                break;
            }
            self.parked.pop_front();
            self.sh.counters.count_drop(DropReason::Unresolved, 1);
        }
        // Packets for one next hop mostly sit next to each other: one question per run of them.
        let mut last = None;
        for p in &self.parked {
            if last != Some((p.port, p.next_hop)) {
                self.engine.ask_again(p.port, p.next_hop, now);
                last = Some((p.port, p.next_hop));
            }
        }
    }

    pub(super) fn send_resolve(&mut self, r: &ResolveRequest, now: u64) {
        let mut pkt = self.spare.pop().unwrap_or_else(|| Pkt::with_capacity(128));
        if build_resolve(&self.tables, r, &mut pkt) {
            self.sh.counters.resolve_sent.add(1);
            self.route_to(r.port, pkt, None, now);
        } else {
            self.spare.push(pkt);
        }
    }
}

impl Worker {
    /// Sends the questions the engine asked this iteration and tells the other workers the
    /// neighbours it learned.
    pub(super) fn neighbour_effects(&mut self, now: u64) {
        self.engine.take_resolve(&mut self.resolve);
        if !self.resolve.is_empty() {
            let reqs = std::mem::take(&mut self.resolve);
            for r in &reqs {
                self.send_resolve(r, now);
            }
            self.resolve = reqs;
            self.resolve.clear();
        }
        self.engine.take_learned(&mut self.learned);
        for (ip, n) in self.learned.drain(..) {
            for tx in &self.sh.neigh_tx {
                // A full channel only delays the other worker's learning until it sees the
                // neighbour's next ARP; never block the packet path for it.
                if let Err(TrySendError::Disconnected(_)) = tx.try_send((ip, n)) {
                    continue;
                }
            }
        }
    }
}
