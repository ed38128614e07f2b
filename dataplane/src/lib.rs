//! sprayswitch dataplane: a userspace, poll-mode top-of-rack switch for RoCEv2 traffic.
//!
//! The crate is layered with one-way dependencies (see `ARCHITECTURE.md` in the design notes):
//!
//! - [`wire`]: byte views over RoCEv2 headers, ICRC, PSN arithmetic and frame classification.
//!   Pure functions over `&[u8]`: no I/O, no clock, no allocation.
//!
//! - [`pcap`]: reading pcap/pcapng captures and writing pcap files (offline tools and the pcap
//!   port; not on the packet path).
//!
//! Later layers (engine, reorder, ports, worker) build on `wire` and never the other way round.

#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod capture;
pub mod counters;
pub mod engine;
pub mod idle;
pub mod pcap;
pub mod port;
pub mod reorder;
pub mod rng;
pub mod switch;
pub mod testkit;
pub mod time;
pub mod wire;
pub mod worker;
