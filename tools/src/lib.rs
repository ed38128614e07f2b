//! Tools that ship with sprayswitch. This crate holds their logic so that tests can drive it; the
//! binaries under `src/bin/` are thin command-line front ends.
//!
//! - [`decode`]: one record per captured frame, human-readable or JSON (`rocecap decode`).
//! - [`topo`]: in-process rack pairs (hosts, two ToRs, an N-path fault-injected fabric).
//! - [`fabric`]: the fabric emulator over any ports (`sprayfabric` runs it on real interfaces).
//! - [`transit`]: transit times between two capture points (`rocecap transit`).
//! - [`ackloop`]: where an RC requester's ACK clock spends its time (`rocecap loop`).
//! - [`qp_rack`]: Soft-RoCE QP models on the hosts of a rack pair driven on a virtual clock:
//!   the oracle for the reorder engine.
//! - [`rack`]: a rack pair in one process with its hosts on real interfaces (`sprayrackd`).
//! - [`rxe`]: an RNIC model of one RC/UC QP that follows Soft-RoCE's state machines (the
//!   oracle for the reorder engine).

pub mod ackloop;
pub mod analyze;
pub mod decode;
pub mod demo;
pub mod fabric;
pub mod gen;
pub mod lat;
pub mod qp_rack;
pub mod rack;
pub mod rnic;
pub mod rxe;
pub mod topo;
pub mod transit;

/// The `q` quantile of sorted nanosecond values, in microseconds (nearest rank below; 0 when
/// there are none).
pub fn quantile_us(sorted_ns: &[u64], q: f64) -> f64 {
    if sorted_ns.is_empty() {
        return 0.0;
    }
    let i = ((sorted_ns.len() as f64 * q) as usize).min(sorted_ns.len() - 1);
    sorted_ns[i] as f64 / 1_000.0
}

/// An analysis over two captures of the same traffic, taken at two points on one clock
/// ([`transit::Transit`], [`ackloop::AckLoop`]).
pub trait CapturePair {
    /// Takes a frame of the first capture (A), with its timestamp.
    fn add_a(&mut self, ts_ns: u64, frame: &[u8]);
    /// Takes a frame of the second capture (B), with its timestamp.
    fn add_b(&mut self, ts_ns: u64, frame: &[u8]);
}
