//! sprayswitch control plane.
//!
//! - [`config`]: the TOML configuration model, its validation (errors name the field and the
//!   reason) and its translation into the dataplane's [`Tables`](sprayswitch::tables::Tables)
//!   and run settings.
//! - [`ctl`]: the control side of a running switch: requests (`sprayctl`), reload, metrics.
//! - [`server`]: its Unix control socket and Prometheus endpoint.
//! - [`ports`]: opens the ports a configuration describes (capture replay, AF_XDP, AF_PACKET)
//!   before any worker starts.
//!
//! The `sprayswitch` binary lives here, not in `dataplane/`, because it needs the
//! configuration, and the configuration needs the dataplane's types: the dependency runs one
//! way, control -> dataplane.

pub mod config;
pub mod ctl;
pub mod ports;
pub mod server;

pub use config::{Backend, Config, ConfigError, Validated, DEFAULT_CONFIG};
