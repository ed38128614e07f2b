//! Forwarding decisions over classified frames: routing, neighbours and ARP/ND, answers to the
//! switch's own addresses, spraying. Pure logic: it reads no clock (the worker passes `now`)
//! and moves no packets (the worker does).
//!
//! It reads the immutable [`crate::tables::Tables`] snapshot the control side publishes (a
//! worker looks at the newest once per loop iteration, never per packet). Neighbours learned
//! from ARP and ND are kept per worker ([`neigh`]) and shared with the other workers through
//! bounded channels.
//!
//! The files: [`forward`] the per-packet decision, [`fast`] its shortcut for RoCE data to known
//! destinations, [`neigh`] the neighbour table, [`spray`] the uplink choice. The frames the
//! switch answers with (ARP, ND, echo) and the path stamps are wire formats
//! ([`crate::wire::control`], [`crate::wire::stamp`]); the routes are [`crate::tables::fib`].

pub mod fast;
pub mod forward;
pub mod neigh;
pub mod spray;

pub use forward::{Decision, Engine, Verdict};
pub use neigh::{build_resolve, NeighborTable, ResolveRequest};
pub use spray::Sprayer;

/// Declares the drop reasons: the enum, its count, the list in counter order, and each
/// reason's exported name and help text, from one table.
macro_rules! drop_reasons {
    ($( $variant:ident, $name:literal, $help:literal; )*) => {
        /// Why a packet was dropped. Each reason is a counter (`show counters`'s `drops`, the
        /// `sprayswitch_drop_packets_total{reason=...}` series).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum DropReason {
            $( #[doc = $help] $variant, )*
        }

        impl DropReason {
            /// Number of reasons.
            pub const COUNT: usize = [$( stringify!($variant), )*].len();

            /// Every reason, in counter order.
            pub const ALL: [DropReason; Self::COUNT] = [$( DropReason::$variant, )*];

            /// Its name (the JSON key and the `reason` label).
            pub fn name(self) -> &'static str {
                match self { $( DropReason::$variant => $name, )* }
            }

            /// What it means.
            pub fn help(self) -> &'static str {
                match self { $( DropReason::$variant => $help, )* }
            }
        }
    };
}

drop_reasons! {
    Malformed, "malformed", "The frame did not parse.";
    NotForUs, "not_for_us", "Destination MAC is neither the port's nor broadcast or multicast.";
    UnsupportedEthertype, "unsupported_ethertype", "An EtherType the switch does not route.";
    NoRoute, "no_route", "No route to the destination.";
    TtlExpired, "ttl_expired", "TTL or hop limit would reach zero.";
    Unresolved, "unresolved", "Next hop's MAC unknown (a resolution request was sent).";
    PortDown, "port_down", "The egress port is down.";
    AllUplinksDown, "all_uplinks_down", "Every uplink of the group is down.";
    MtuExceeded, "mtu_exceeded", "Larger than the egress port's MTU.";
    LocalUnsupported, "local_unsupported", "Addressed to the switch but not something it answers (TCP to the switch, ...).";
    BadIpChecksum, "bad_ip_checksum", "IPv4 header checksum wrong.";
    TxQueueFull, "tx_queue_full", "The egress transmit queue stayed full.";
    BadPause, "bad_pause", "A MAC Control frame that is no well-formed PAUSE or PFC frame (wrong length, unknown opcode).";
    NotRoutable, "not_routable", "Link-local or multicast traffic that is not for the switch.";
}
