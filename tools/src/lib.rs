//! Tools that ship with sprayswitch. This crate holds their logic so that tests can drive it; the
//! binaries under `src/bin/` are thin command-line front ends.
//!
//! - [`capture`]: reading captures: records per frame (`rocecap decode`), PSN arrival per
//!   stream (`rocecap analyze`), transit times between two capture points (`rocecap transit`)
//!   and an RC requester's ACK clock (`rocecap loop`).
//! - [`traffic`]: what hosts send: RNIC models (simple Go-Back-N and selective-repeat ends in
//!   [`traffic::rnic`], Soft-RoCE's state machines in [`traffic::rxe`]), those models on a rack
//!   pair driven on a virtual clock ([`traffic::qp_rack`], the oracle for the reorder engine),
//!   the generator over a port (`rocegen`) and the latency meter (`rocelat`).
//! - [`rack`]: where they run: in-process rack pairs ([`rack::topo`]), the fabric emulator
//!   (`sprayfabric`), a rack pair with its hosts on real interfaces (`sprayrackd`), the demo
//!   (`sprayswitch-demo`).
//! - [`sim`]: a leaf-spine fabric of real sprayswitch instances in virtual time, hosts
//!   running the RNIC models, flows from size distributions (`sprayswitch-sim`).
//! - [`rxerack`]: the analysis of `scripts/rxe-rack.sh`'s Soft-RoCE runs (`rxerack`).
//! - [`vethbench`]: the port backends on veth pairs in namespaces, against the kernel bridge.
//! - [`percentile`]: the one quantile helper of every report.
//! - [`svg`]: what the tools' SVG plots share.

pub mod capture;
pub mod percentile;
pub mod rack;
pub mod rxerack;
pub mod sim;
pub mod svg;
pub mod traffic;
pub mod vethbench;
