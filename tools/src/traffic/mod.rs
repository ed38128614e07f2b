//! What the hosts of a rack send and how they react: RNIC models, the same models on a rack
//! pair on a virtual clock, the traffic generator and the latency meter.

pub mod dcqcn;
pub mod gen;
pub mod lat;
pub mod qp_rack;
pub mod rnic;
pub mod rxe;
