//! When a stream gives up on its gap: path order proves it lost ([`check`]), its hold timer
//! runs out ([`hold_limit`]), or its buffers are needed ([`give_up`]); and what each direction
//! releases then so that the host's RNIC asks for the missing packet at once.

use super::config::NAKED_WAIT_FACTOR;
use super::evidence::PathEvidence;
use super::held::Held;
use super::paths::Proof;
use super::request::RequestStream;
use super::response::ResponseStream;
use super::skew::SKEW_TIMEOUT_FACTOR;
use super::stream::{LossRecovery, Phase, Stream, StreamId, StreamKey};
use crate::wire::Psn;

/// How long the gap of `s` may stay open before it is given up: its hold timeout, but for a
/// stream over path-order paths at least [`SKEW_TIMEOUT_FACTOR`] times the paths' `skew`
/// ([`super::skew`]: a shorter timeout gives up on packets still on their way); and a
/// Go-Back-N host that has NAKed the gap (the switch saw its NAK go out, over a fabric path)
/// gets [`NAKED_WAIT_FACTOR`] times as long. Its sender has been told and resends from the
/// gap, after whatever its own send queue holds (the RNIC models' hosts and Soft-RoCE guests
/// take milliseconds under load); releasing what is held before that gains nothing, because
/// the host drops every packet out of sequence, and costs what the switch held for it: each
/// packet must then come again. The idle eviction and the window bound what the stream may
/// hold meanwhile.
pub(super) fn hold_limit<T>(s: &Stream<T>, skew: Option<u64>) -> u64 {
    let limit = match skew {
        Some(k) if s.paths.tracked() => s.timeout.max(k.saturating_mul(SKEW_TIMEOUT_FACTOR)),
        _ => s.timeout,
    };
    if s.recovery == LossRecovery::NakFirst && s.paths.host_naked_psn(s.expected) {
        limit.saturating_mul(NAKED_WAIT_FACTOR)
    } else {
        limit
    }
}

/// When stream `s`'s timer next needs looking at (`u64::MAX`: never): its learning window's
/// end, or when its gap has been open [`hold_limit`] long.
pub(super) fn deadline<T>(s: &Stream<T>, skew: Option<u64>) -> u64 {
    match s.phase {
        Phase::Learning { until, .. } => until,
        Phase::Active if s.held > 0 => s.gap_since.saturating_add(hold_limit(s, skew)),
        Phase::Active => u64::MAX,
    }
}

/// Gives up on the gap of the stream `h` holds (its hold timed out, or its buffers are
/// needed).
pub(super) fn give_up<T>(h: Held<'_, T>) {
    match h.s.key {
        StreamKey::Request { .. } => RequestStream(h).give_up(),
        StreamKey::Response { .. } => ResponseStream(h).give_up(),
    }
}

/// Ends the learning of a request stream whose lowest PSN held is `min` before its window
/// (which ends at `until`) does when the fabric's paths show where the stream starts: every
/// path-order path that is up has delivered, since learning began, a PSN of the stream or a
/// later stamp of its source. A path is one FIFO and the host sends in PSN order, so a PSN
/// below `min` would have come before them: none can still come. It is the proof of a gap just
/// below `min` ([`super::paths`]), so a path the stream has not used blocks as it does for a
/// young stream's gap (after 1024 packets only the paths it uses count), and the window stays
/// the backstop: for a QP pinned to one uplink (READ requests) whose source sends nothing on
/// the others, or a first message of fewer packets than there are paths. Without it, the first
/// packets of every QP the switch saw no CM exchange for wait the whole window.
fn learn_from_paths<T>(
    r: &mut RequestStream<'_, T>,
    ev: &mut PathEvidence,
    id: StreamId,
    (min, until): (Psn, u64),
) {
    if r.now >= until {
        // The window has ended (its timer has not run yet): nothing to prove.
        r.finish_learning();
        return;
    }
    let (proof, wait) = ev.proof(r.s, min.sub(1), r.now);
    if proof == Proof::Missing {
        if let Some(wait) = wait {
            ev.wait(r.s, id, wait, true);
        }
        return;
    }
    r.totals.learned_by_paths += 1;
    r.finish_learning();
}

/// Declares the gap at stream `id`'s expected PSN lost if every fabric path the stream uses
/// has delivered above it ([`super::paths`]), and recovers as its downlink chose.
///
/// A response stream's requester retries a READ or atomic only when a response or ACK comes
/// whose PSN is past that request's last (rxe's completer, `check_psn`: a response out of
/// sequence within the READ is dropped without a word; ConnectX as modelled does the same). So
/// a lost response is acted on once a fill of a later request is held: that one goes out at
/// once, out of sequence, and the requester retries from the first response it is missing.
/// The rest stays; the retry's first response releases it in order (the retry's copies of
/// what is held are dropped here as duplicates). Until a later request's fill comes nothing
/// would make the requester retry sooner, so the gap waits (the hold timeout is the backstop).
/// The responder answers the retry from the gap again, below what the paths delivered: that
/// starts the paths' new pass.
pub(super) fn check<T>(mut h: Held<'_, T>, ev: &mut PathEvidence, id: StreamId) {
    if h.s.held == 0 {
        return;
    }
    if let Phase::Learning { min, until, .. } = h.s.phase {
        // Once learning ends, the gap now in front (a packet of the first burst lost) may be
        // proven already.
        let mut r = RequestStream(h);
        learn_from_paths(&mut r, ev, id, (min, until));
        h = r.0;
        if h.s.held == 0 || h.s.learning() {
            return;
        }
    }
    let (proof, wait) = ev.proof(h.s, h.s.expected, h.now);
    if proof == Proof::Missing {
        // A stamp of its source on the path that blocks may prove it: wait for one.
        if let Some(wait) = wait {
            ev.wait(h.s, id, wait, false);
        }
        return;
    }
    if h.s.paths.is_deferred() {
        // Declared already; it waits for an earlier gap's retransmission.
        return;
    }
    let mut response = match h.s.key {
        StreamKey::Response { .. } => {
            let r = ResponseStream(h);
            let trigger = r.trigger();
            // Towards a nak_filter downlink nothing is released (the requester has the later
            // responses already and asked for the missing one): the declaration is what lets
            // its READ retry go on.
            if trigger.is_none() && !r.s.nak_filter {
                return;
            }
            Ok((r, trigger))
        }
        StreamKey::Request { .. } => Err(RequestStream(h)),
    };
    let h: &mut Held<'_, T> = match &mut response {
        Ok((r, _)) => &mut r.0,
        Err(r) => &mut r.0,
    };
    let e = h.s.expected;
    ev.detected(h.now.saturating_sub(h.s.paths.opened(h.s.gap_since)));
    h.totals.path_losses += 1;
    if proof == Proof::Stamps {
        h.totals.stamp_losses += 1;
    }
    h.s.stats.path_losses += 1;
    h.s.paths.declared(e);
    match response {
        Ok((mut r, trigger)) => {
            r.s.paths.new_pass(false);
            r.s.gap_since = r.now;
            if let Some(trigger) = trigger {
                r.release_trigger(trigger);
            }
        }
        Err(mut r) => match r.s.recovery {
            LossRecovery::ReleaseRun => {
                // A selective-repeat RNIC NAKs the first out-of-sequence packet after a gap,
                // once, until the gap fills: a second gap released before the first one's
                // retransmission passed would get no NAK, and wait for the requester's
                // timeout. So it waits here until then (see `ReorderCore::handle_packet`).
                if !r.s.paths.defer() {
                    r.release_run();
                }
            }
            // The first held packet goes out of sequence: the RNIC NAKs the gap.
            LossRecovery::NakFirst => r.release_first(),
        },
    }
}
