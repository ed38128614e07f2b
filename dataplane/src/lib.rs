//! sprayswitch dataplane: a userspace, poll-mode top-of-rack switch for RoCEv2 traffic.
//!
//! The crate is layered; each module imports only modules listed before it (tests aside,
//! which share `testkit`: tables and frames for tests and benchmarks, built with the `testkit`
//! feature or in this crate's own tests, never part of a switch):
//!
//! - [`wire`]: byte views over RoCEv2 headers, ICRC, PSN arithmetic, frame classification and
//!   the fixed offsets the fast path reads (`wire::classify::plain_v4`). Pure functions over
//!   `&[u8]`: no I/O, no clock, no allocation.
//! - [`pcap`], [`time`], [`rng`], [`ids`] (port index, integer-keyed map), [`counters`] (how a
//!   counter table is declared): leaves.
//! - [`meta`]: the RoCE facts the engine hands the reorder stage (above `wire`).
//! - [`port`]: the packet type and the port backends (memory, pcap, AF_PACKET, AF_XDP,
//!   tap, fault injection); [`capture`] and [`idle`] build on it.
//! - [`egress`]: a port's egress queue: its rate, ECN marking on its depth, the pauses its
//!   peer asks for (over `port` and `wire`).
//! - [`engine`]: the per-packet decision (tables, routing, spraying, the fast path, answers
//!   to ARP/ND/echo). It returns one [`engine::Decision`]: the verdict with the reorder facts,
//!   what a host's packet tells the reorder stage, and the host-CNP flag.
//! - [`health`]: path health of uplink groups: probes between ToRs, members taken out of the
//!   spray set while they fail (over `engine`'s tables and status board).
//! - [`reorder`]: the reorder stage (per-stream rings, the response direction, QP pairing);
//!   reads the engine's tables, never its decision code.
//! - [`stats`]: the switch's counter tables (per worker, per port, drops by reason).
//! - [`worker`]: one poll loop owning ports, an engine and a reorder stage; [`switch`]: the
//!   workers together, with the control side's handles.

#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod capture;
pub mod counters;
pub mod egress;
pub mod engine;
pub mod health;
pub mod idle;
pub mod ids;
pub mod meta;
pub mod pcap;
pub mod pkt;
pub mod port;
pub mod reorder;
pub mod rng;
pub mod stats;
pub mod switch;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod time;
pub mod wire;
pub mod worker;
