//! Harnesses that run whole switches: the real sprayswitch code assembled into racks and
//! fabrics, with hosts running the RNIC models (`sprayswitch-models`) and the packet tools
//! (`sprayswitch-packet`) measuring them. The binaries under `src/bin/` are thin command-line
//! front ends; the tests of `tests/` drive the same code.
//!
//! - [`rack`]: in-process rack pairs ([`rack::topo`]), the fabric emulator (`sprayfabric`), a
//!   rack pair with its hosts on real interfaces (`sprayrackd`), incast, and the demo
//!   (`sprayswitch-demo`).
//! - [`qp_rack`]: the Soft-RoCE models on a rack pair driven on a virtual clock: the oracle
//!   for the reorder engine.
//! - [`sim`]: a leaf-spine fabric of real sprayswitch instances in virtual time, hosts
//!   running the RNIC models, flows from size distributions (`sprayswitch-sim`).
//! - [`latency`]: the latency meter through a rack pair and over a direct link (`rocelat`).
//! - [`rxerack`]: the analysis of `scripts/rxe-rack.sh`'s Soft-RoCE runs (`rxerack`).
//! - [`vethbench`]: the port backends on veth pairs in namespaces, against the kernel bridge.
//! - [`svg`]: what the harnesses' SVG plots share.

pub mod latency;
pub mod qp_rack;
pub mod rack;
pub mod rxerack;
pub mod sim;
pub mod svg;
pub mod vethbench;
