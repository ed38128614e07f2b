//! Reading captures: what each frame is, how a stream's PSNs arrived, and what two capture
//! points of the same traffic say together.

pub mod ackloop;
pub mod analyze;
pub mod decode;
pub mod transit;

/// An analysis over two captures of the same traffic, taken at two points on one clock
/// ([`transit::Transit`], [`ackloop::AckLoop`]).
pub trait CapturePair {
    /// Takes a frame of the first capture (A), with its timestamp.
    fn add_a(&mut self, ts_ns: u64, frame: &[u8]);
    /// Takes a frame of the second capture (B), with its timestamp.
    fn add_b(&mut self, ts_ns: u64, frame: &[u8]);
}
