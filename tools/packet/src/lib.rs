//! Packet tools that ship with sprayswitch: each works on frames, over any port or capture, and
//! knows nothing of how a switch is assembled. The binaries under `src/bin/` are thin
//! command-line front ends.
//!
//! - [`capture`]: reading captures: records per frame (`rocecap decode`), PSN arrival per
//!   stream (`rocecap analyze`), transit times between two capture points (`rocecap transit`)
//!   and an RC requester's ACK clock (`rocecap loop`).
//! - [`gen`]: the traffic generator (`rocegen`): many QPs over a port, their ends the RNIC
//!   models of `sprayswitch-models`.
//! - [`lat`]: the latency meter's probes and timing over any pair of ports (`rocelat`, in
//!   `sprayswitch-harness`, runs it through a rack pair).
//! - [`percentile`]: the one quantile helper of every report.

pub mod capture;
pub mod gen;
pub mod lat;
pub mod percentile;
