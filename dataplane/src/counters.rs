//! How counters are declared: once, in a table.
//!
//! Each group of counters is one `counter_table!` invocation (the switch's in
//! [`crate::stats`], the reorder stage's in `reorder/totals.rs`): per row its field, its kind (a counter that only grows, a gauge that is
//! a current value, or a maximum), its unit, its scope (summed over the switch, per worker, per
//! port, per downlink), its exported Prometheus name and its help text. From a table come the
//! atomic struct its one writer counts into, the plain struct readers get, the sum over
//! workers (`merge`) and the rows the control plane prints as JSON and
//! Prometheus text (`rows()`). Drop reasons are one table too ([`crate::engine::DropReason`]).
//! Adding a counter is one line in its table. A leaf: it imports nothing of the crate.
//!
//! Each counter has exactly one writer (the worker that owns it), which increments with a
//! relaxed load and store (no read-modify-write instruction); anyone may read with a relaxed
//! load. Groups are cache-padded by their owners so that workers never share a cache line.

use std::sync::atomic::{AtomicU64, Ordering};

/// A single-writer counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the owning worker calls this: load and store are both relaxed, which is
    /// exact with one writer and lets readers see a recent value without stopping it.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Sets the value (gauges).
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    /// Reads the value (relaxed: a statistic).
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// How a value combines over workers and how it is exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only grows; summed; exported as a Prometheus counter (its name ends in `_total`).
    Counter,
    /// A current value; summed; exported as a gauge.
    Gauge,
    /// The largest value seen; the maximum over workers; exported as a gauge.
    Max,
}

/// What a value counts; a name that counts packets or bytes ends in `_packets` or `_bytes`
/// (before `_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Packets (frames).
    Packets,
    /// Bytes.
    Bytes,
    /// Events, streams or iterations (no unit suffix).
    Count,
}

/// Where a value is exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Once for the switch (summed over workers).
    Switch,
    /// Per worker only (a `worker` label): loop and stage figures whose sum means little.
    Worker,
    /// Both summed and per worker.
    SwitchAndWorker,
    /// Per port (`port` and `role` labels).
    Port,
    /// Per downlink port only (a `port` label): what the host behind it sent.
    Downlink,
    /// Per uplink port only (a `port` label): its path health.
    Uplink,
}

/// One row of a table with its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// Field name (the JSON key of `show counters` and `show ports`).
    pub name: &'static str,
    /// Exported Prometheus name.
    pub metric: &'static str,
    /// What it counts.
    pub help: &'static str,
    /// Its kind.
    pub kind: Kind,
    /// Its unit.
    pub unit: Unit,
    /// Where it is exported.
    pub scope: Scope,
    /// Its value.
    pub value: u64,
}

/// Declares one table of counters: the atomic struct its writer counts into (with `read` and
/// `publish`), the plain struct of values (with `rows` and `merge`), each with extra fields
/// that are not rows (given verbatim; the plain struct's extras must implement `Default`).
macro_rules! counter_table {
    (
        $(#[$am:meta])* atomic $Atomic:ident { $( $(#[$aem:meta])* $aextra:ident : $aety:ty, )* }
        $(#[$pm:meta])* plain $Plain:ident { $( $(#[$pem:meta])* $pextra:ident : $pety:ty, )* }
        rows {
            $( $name:ident : $kind:ident, $unit:ident, $scope:ident, $metric:literal, $help:literal; )*
        }
    ) => {
        $(#[$am])*
        #[derive(Debug, Default)]
        pub struct $Atomic {
            $( #[doc = $help] pub $name: $crate::counters::Counter, )*
            $( $(#[$aem])* pub $aextra: $aety, )*
        }

        impl $Atomic {
            /// The rows' current values (the extra fields of the plain struct are left at
            /// their defaults).
            #[allow(clippy::needless_update)]
            pub fn read(&self) -> $Plain {
                $Plain { $( $name: self.$name.get(), )* ..Default::default() }
            }

            /// Sets every row to `v`'s value (an owner that counts in plain integers publishes
            /// them this way).
            pub fn publish(&self, v: &$Plain) {
                $( self.$name.set(v.$name); )*
            }
        }

        $(#[$pm])*
        pub struct $Plain {
            $( #[doc = $help] pub $name: u64, )*
            $( $(#[$pem])* pub $pextra: $pety, )*
        }

        impl $Plain {
            /// Every row with its name, kind, unit, scope, help and value, in the table's order.
            pub fn rows(&self) -> Vec<$crate::counters::Row> {
                vec![$( $crate::counters::Row {
                    name: stringify!($name),
                    metric: $metric,
                    help: $help,
                    kind: $crate::counters::Kind::$kind,
                    unit: $crate::counters::Unit::$unit,
                    scope: $crate::counters::Scope::$scope,
                    value: self.$name,
                }, )*]
            }

            /// Takes an earlier reading `base` of the same counters away: counters then count
            /// what came after it (a measurement window); gauges and maxima stay as they are
            /// now. A counter below its base (a pause time cut short by XON) counts 0, never a
            /// wrapped figure. Extra fields are the caller's.
            pub fn subtract(&mut self, base: &$Plain) {
                $( if matches!($crate::counters::Kind::$kind, $crate::counters::Kind::Counter) {
                    self.$name = self.$name.saturating_sub(base.$name);
                } )*
            }

            /// Adds the rows of `other` (another worker's): counters and gauges add, maxima
            /// take the larger. Extra fields are the caller's.
            pub fn merge(&mut self, other: &$Plain) {
                $( self.$name = match $crate::counters::Kind::$kind {
                    $crate::counters::Kind::Max => self.$name.max(other.$name),
                    $crate::counters::Kind::Counter | $crate::counters::Kind::Gauge => {
                        self.$name.wrapping_add(other.$name)
                    }
                }; )*
            }
        }
    };
}
pub(crate) use counter_table;
