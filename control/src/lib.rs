//! sprayswitch control plane.
//!
//! - [`config`]: the TOML configuration model, its validation (errors name the field and the
//!   reason) and its translation into the dataplane's [`Tables`](sprayswitch::engine::Tables)
//!   and run settings.
//! - [`ports`]: opens the ports a configuration describes (capture replay, AF_XDP, AF_PACKET)
//!   before any worker starts.
//!
//! The `sprayswitch` binary lives here rather than in `dataplane/` (as the architecture notes
//! first had it) because it needs the configuration, and the configuration needs the dataplane's
//! types: the dependency runs one way, control -> dataplane.

pub mod config;
pub mod ports;

pub use config::{Backend, Config, ConfigError, Validated, DEFAULT_CONFIG};
