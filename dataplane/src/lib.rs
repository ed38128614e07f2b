//! sprayswitch dataplane: a userspace, poll-mode top-of-rack switch for RoCEv2 traffic.
//!
//! The crate is layered, from the top down in the order of the modules below: a module imports
//! only modules listed after it (`tests/tests/layering.rs` checks it).
//!
//! - [`switch`]: the workers together, with the control side's handles; [`worker`]: one poll
//!   loop owning ports, an engine and a reorder stage; [`stats`]: the switch's counter tables
//!   (per worker, per port, drops by reason).
//! - [`capture`] and [`idle`]: packet capture at the worker and the idle policy of a poll loop.
//! - [`engine`]: the per-packet decision (routing, neighbours, spraying, the fast path). It
//!   returns one [`engine::Decision`]: the verdict with the reorder facts, what a host's packet
//!   tells the reorder stage, and the host-CNP flag.
//! - [`health`]: path health of uplink groups: probes between ToRs, members taken out of the
//!   spray set while they fail (through the status board of [`tables`]).
//! - [`reorder`]: the reorder stage (per-stream slots, the response direction, QP pairing,
//!   path evidence); it reads the tables, never the engine.
//! - [`counters`]: how a counter table is declared.
//! - [`port`]: the port backends (memory, pcap, AF_PACKET, AF_XDP, DPDK, tap, fault
//!   injection); [`pcap`]: the capture file format.
//! - [`testkit`]: tables and frames for tests and benchmarks (the `testkit` feature or this
//!   crate's own tests; never part of a switch).
//! - [`tables`]: the switch's model of itself: ports and their roles, uplink groups, routes,
//!   neighbours, the spray policy, and the live port status board.
//! - [`egress`]: a port's egress queue: its rate, ECN marking on its depth, the pauses its
//!   peer asks for.
//! - [`meta`]: the RoCE facts a packet is classified into once, which the engine hands the
//!   reorder stage.
//! - [`pkt`]: the packet and its buffer (heap, frame area, DPDK mbuf).
//! - [`wire`]: byte views over RoCEv2 headers, ICRC, PSN arithmetic, frame classification,
//!   path stamps, the switch's own ARP/ND/ICMP frames and checksums. Pure functions over
//!   `&[u8]`: no I/O, no clock, no allocation.
//! - [`time`], [`rng`], [`prefetch`] (cache-line hints), [`ids`] (port index, integer-keyed
//!   map): leaves.

#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod switch;
pub mod worker;
pub mod stats;
pub mod capture;
pub mod idle;
pub mod engine;
pub mod health;
pub mod reorder;
pub mod counters;
pub mod port;
pub mod pcap;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod tables;
pub mod egress;
pub mod meta;
pub mod pkt;
pub mod wire;
pub mod time;
pub mod rng;
pub mod prefetch;
pub mod ids;
