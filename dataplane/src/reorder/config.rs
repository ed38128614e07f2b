//! The reorder core's limits and timers ([`ReorderConfig`]), and the fixed bounds every part
//! shares.

/// How many times `idle_evict_ns` a response stream with requests still unanswered is kept.
pub const READ_WAIT_FACTOR: u64 = 10;

/// How many hold timeouts a Go-Back-N host's gap is held once the host has NAKed it (see
/// `super::loss::hold_limit`).
pub const NAKED_WAIT_FACTOR: u64 = 64;

/// Packets one stream holds beyond its ring's window, in windows: 4 (1024 packets at the
/// default window of 256).
pub(super) const FAR_WINDOWS: usize = 4;

/// How far (in PSNs) a host's ACK or NAK may lie behind the switch's expected PSN for the
/// stream, and a requester's retransmission behind what the switch saw: what is in flight
/// between the switch and the host, with room to spare.
pub(super) const HOST_PSN_REACH: u32 = 1 << 16;

/// PSNs ahead of a stream's expected PSN beyond which a packet starts a new sequence even
/// without an idle time (a QP re-created without CM at once).
pub(super) const NEW_SEQUENCE_AHEAD: u32 = 1 << 22;

/// Limits and timers of a reorder core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReorderConfig {
    /// Ring size `W` in PSNs (a power of two, 64 to 4096).
    pub window: u32,
    /// Streams tracked at once.
    pub max_streams: usize,
    /// Streams that may hold packets at once (each holding stream uses one ring of `window`
    /// slots).
    pub max_rings: usize,
    /// Bytes held at once, all streams together.
    pub max_held_bytes: usize,
    /// How long a gap may stay open before its PSN is declared lost.
    pub hold_timeout_ns: u64,
    /// How long a new stream collects packets before choosing its starting PSN.
    pub learn_ns: u64,
    /// A stream idle this long is forgotten; one with READ, atomic or FLUSH requests still
    /// unanswered, `READ_WAIT_FACTOR` (10) times as long.
    pub idle_evict_ns: u64,
    /// Outstanding READ/atomic ranges tracked per QP. Above what any requester may have
    /// outstanding (Soft-RoCE allows 128, ConnectX 16), so that no range is forgotten while its
    /// responses can still come.
    pub max_reads: usize,
    /// The prefix lengths (IPv4, IPv6) of a sender's address that all hosts behind one
    /// source ToR share: path stamps ([`crate::wire::stamp`]) of those hosts are taken as
    /// one counter's (per lane and priority), so each proves the others' gaps. (32, 128):
    /// each host on its own.
    pub stamp_source_prefix: (u8, u8),
}

impl Default for ReorderConfig {
    fn default() -> Self {
        ReorderConfig {
            window: 256,
            max_streams: 131_072,
            max_rings: 1024,
            max_held_bytes: 64 << 20,
            hold_timeout_ns: 500_000,
            learn_ns: 100_000,
            idle_evict_ns: 2_000_000_000,
            max_reads: 256,
            stamp_source_prefix: (32, 128),
        }
    }
}

impl ReorderConfig {
    /// Checks the limits.
    ///
    /// # Errors
    /// A message naming the field.
    pub fn check(&self) -> Result<(), String> {
        if !self.window.is_power_of_two() || !(64..=4096).contains(&self.window) {
            return Err(format!(
                "window {}: a power of two from 64 to 4096",
                self.window
            ));
        }
        if self.max_streams == 0 || self.max_rings == 0 || self.max_reads == 0 {
            return Err("max_streams, max_rings and max_reads must be at least 1".into());
        }
        if self.max_streams > super::index::MAX_STREAMS {
            return Err(format!(
                "max_streams {}: at most {} (67 million)",
                self.max_streams,
                super::index::MAX_STREAMS
            ));
        }
        let (v4, v6) = self.stamp_source_prefix;
        if v4 > 32 || v6 > 128 {
            return Err(format!(
                "stamp_source_prefix [{v4}, {v6}]: at most 32 (IPv4) and 128 (IPv6) bits"
            ));
        }
        Ok(())
    }

    /// The ring's index mask (`window - 1`).
    #[inline]
    pub(super) fn mask(&self) -> u32 {
        self.window - 1
    }
}
