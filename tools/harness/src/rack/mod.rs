//! Where the switches run in tests and tools: in-process rack pairs, the fabric emulator between
//! them, a rack pair whose hosts are real interfaces, and the demo.

pub mod demo;
pub mod fabric;
pub mod incast;
pub mod real;
pub mod topo;
