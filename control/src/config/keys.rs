//! The configuration reference: every key of the file with its type, default, allowed values
//! and meaning, in one table ([`SECTIONS`]).
//!
//! `docs/configuration.md` (`sprayswitch config-reference`) and the annotated default
//! (`sprayswitch show-config`) are rendered from it ([`super::reference`]). The table does not
//! restate what the code decides: a default is read from the section's `Default`, the serde
//! default or the constant the validator applies when the key is absent, and the bounds the
//! validator checks in this crate are the constants below, which `validate` reads. The tests
//! at the bottom hold the table to the model: the keys are exactly the serde fields of each
//! section; each default, written out, validates to what omitting the key gives; each range is
//! what validation accepts at both ends and refuses just outside them (which also covers the
//! bounds the dataplane checks itself: `window`, `pmax`, the named choices).
//!
//! It is not the validator: cross-key rules (`tx_queue_limit` at least `burst`, a fill ring at
//! least its ring) are stated in words and checked only in `validate`.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use sprayswitch::health::MAX_PEERS;
use sprayswitch::port::pcap::Pace;
use sprayswitch::tables::{HealthSpec, LossDetection};

use super::choice::XdpModeChoice;
use super::{default_backend, default_mtu, DpdkSection, ReorderSection, SwitchSection};
use WhenUnset::{Means, Required, Value};

// Bounds and defaults the validator applies (`validate` reads these).

/// `[switch] workers`.
pub(super) const WORKERS: Ints = Ints::new(1, 64);
/// `[switch] burst`.
pub(super) const BURST: Ints = Ints::new(1, 1024);
/// `[switch] path_stamp_lanes`.
pub(super) const PATH_STAMP_LANES: Ints = Ints::powers_of_two(1, 8);
/// `[[port]] mtu`.
pub(super) const MTU: Ints = Ints::new(68, 9000);
/// `[[port]] rate_gbps`.
pub(super) const RATE_GBPS: Floats = Floats::above(0.0, 1000.0);
/// `[[port]] queues`.
pub(super) const QUEUES: Ints = Ints::new(1, 64);
/// `[[port]] queues` when absent.
pub(super) const DEFAULT_QUEUES: u32 = 1;
/// `[[port]] ring_size`.
pub(super) const RING_SIZE: Ints = Ints::powers_of_two(64, 32768);
/// `[[port]] ring_size` when absent.
pub(super) const DEFAULT_RING_SIZE: u32 = 1024;
/// Largest `[[port]] fill_ring_size` (the smallest is the port's `ring_size`).
pub(super) const FILL_RING_MAX: u32 = 65536;
/// `[[port]] busy_poll_us`.
pub(super) const BUSY_POLL_US: Ints = Ints::new(1, 1000);
/// `[[port]] rx_buffers`.
pub(super) const RX_BUFFERS: Ints = Ints::new(64, 1 << 20);
/// Receive buffers of an AF_PACKET or AF_XDP port beyond its rings when `rx_buffers` is not
/// given (AF_PACKET's own pool; AF_XDP: its share of the worker's UMEM).
pub(super) const DEFAULT_RX_BUFFERS: u32 = 4096;
/// `[[port]] xdp_mode` when absent.
pub(super) const DEFAULT_XDP_MODE: XdpModeChoice = XdpModeChoice::Auto;
/// `[[port]] pace` when absent.
pub(super) const DEFAULT_PACE: Pace = Pace::Recorded;
/// `[reorder] hold_timeout_us` and `[[port]] hold_timeout_us`.
pub(super) const HOLD_TIMEOUT_US: Ints = Ints::at_least(1);
/// Each of `[[uplink_group]] weights`.
pub(super) const GROUP_WEIGHT: Ints = Ints::new(1, 1_000_000);
/// `[[uplink_group]] path_stamps` when absent.
pub(super) const DEFAULT_PATH_STAMPS: bool = false;
/// `health.interval_us`.
pub(super) const HEALTH_INTERVAL_US: Ints = Ints::new(10, 1_000_000);
/// `health.detect_intervals`.
pub(super) const DETECT_INTERVALS: Ints = Ints::new(2, 100);
/// `health.loss_out`.
pub(super) const LOSS_OUT: Floats = Floats::new(0.001, 0.5);
/// `health.fast_loss_out` (and at least `loss_out`).
pub(super) const FAST_LOSS_OUT: Floats = Floats::new(0.05, 1.0);
/// `health.restore_ms`.
pub(super) const RESTORE_MS: Ints = Ints::new(1, 3_600_000);
/// `ecn.kmin_kb` and `ecn.kmax_kb`.
pub(super) const ECN_KB: Floats = Floats::new(0.0, 1e6);
/// `[dpdk] mbufs`.
pub(super) const DPDK_MBUFS: Ints = Ints::new(1024, 1 << 22);
/// Mbufs per DPDK port pool when `[dpdk] mbufs` is not given: its receive and transmit rings
/// (1024 descriptors each), plus what the switch holds (egress queues and reorder rings keep
/// received packets in their mbufs).
pub(super) const DEFAULT_DPDK_MBUFS: u32 = 16 * 1024;

// Bounds the dataplane checks (`ReorderConfig::check`, `EcnProfile::check`); the tests probe
// that the two agree.

/// `[reorder] window`.
const WINDOW: Ints = Ints::powers_of_two(64, 4096);
/// `[reorder] max_streams`, `max_rings`, `max_reads`.
const AT_LEAST_ONE: Ints = Ints::at_least(1);
/// `ecn.pmax`.
const PMAX: Floats = Floats::new(0.0, 1.0);
/// `health.peers`: how many.
const HEALTH_PEERS: Ints = Ints::new(1, MAX_PEERS as u64);

// The names of the choices, as their `FromStr` reads them.

const IDLE: &[&str] = &["backoff", "wait", "spin"];
const SPRAY_POLICIES: &[&str] = &[
    "round_robin",
    "random",
    "weighted",
    "least_loaded",
    "flowlet",
    "ecmp",
];
const ECN_WORDS: &[&str] = &["off", "for_rate"];
const LOSS_RECOVERY: &[&str] = &["nak_first", "release_run"];
const DOWNLINK_MODES: &[&str] = &["reorder", "nak_filter", "pass"];
const RNICS: &[&str] = &["go_back_n", "selective_repeat"];
const BACKENDS: &[&str] = &["mem", "pcap", "af_xdp", "af_packet", "auto", "dpdk"];
const XDP_MODES: &[&str] = &["auto", "native", "skb"];
const ROLES: &[&str] = &["downlink", "uplink"];
const PACES: &[&str] = &["recorded", "fast"];
const LOSS_DETECTION: &[&str] = &["path_order", "timeout"];

/// Whole numbers from `lo` to `hi` (no upper bound: `None`), or only the powers of two among
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ints {
    /// Smallest allowed.
    pub lo: u64,
    /// Largest allowed, if any.
    pub hi: Option<u64>,
    /// Powers of two only.
    pub powers_of_two: bool,
}

impl Ints {
    const fn new(lo: u64, hi: u64) -> Ints {
        Ints {
            lo,
            hi: Some(hi),
            powers_of_two: false,
        }
    }

    const fn at_least(lo: u64) -> Ints {
        Ints {
            lo,
            hi: None,
            powers_of_two: false,
        }
    }

    const fn powers_of_two(lo: u64, hi: u64) -> Ints {
        Ints {
            lo,
            hi: Some(hi),
            powers_of_two: true,
        }
    }

    /// True when `v` is allowed.
    pub fn admits(self, v: u64) -> bool {
        v >= self.lo
            && self.hi.is_none_or(|hi| v <= hi)
            && (!self.powers_of_two || v.is_power_of_two())
    }
}

impl fmt::Display for Ints {
    /// `1 to 64`, `at least 1`, `1, 2, 4 or 8`, `a power of two from 64 to 4096`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.hi, self.powers_of_two) {
            (None, _) => write!(f, "at least {}", self.lo),
            (Some(hi), false) => write!(f, "{} to {hi}", self.lo),
            (Some(hi), true) if hi <= self.lo.max(1) << 3 => {
                let all: Vec<String> = (0..64)
                    .map(|s| self.lo.max(1) << s)
                    .take_while(|v| *v <= hi)
                    .map(|v| v.to_string())
                    .collect();
                match all.split_last() {
                    Some((last, rest)) if !rest.is_empty() => {
                        write!(f, "{} or {last}", rest.join(", "))
                    }
                    _ => write!(f, "{}", all.join("")),
                }
            }
            (Some(hi), true) => write!(f, "a power of two from {} to {hi}", self.lo),
        }
    }
}

/// Numbers from `lo` (or just above it) to `hi`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Floats {
    /// Smallest allowed (or the bound just below it).
    pub lo: f64,
    /// Largest allowed.
    pub hi: f64,
    /// `lo` itself is not allowed.
    pub above_lo: bool,
}

impl Floats {
    const fn new(lo: f64, hi: f64) -> Floats {
        Floats {
            lo,
            hi,
            above_lo: false,
        }
    }

    const fn above(lo: f64, hi: f64) -> Floats {
        Floats {
            lo,
            hi,
            above_lo: true,
        }
    }

    /// True when `v` is allowed (a NaN or an infinity never is).
    pub fn admits(self, v: f64) -> bool {
        v.is_finite() && (v > self.lo || (!self.above_lo && v == self.lo)) && v <= self.hi
    }
}

impl fmt::Display for Floats {
    /// `0.001 to 0.5`, `above 0, at most 1000`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.above_lo {
            write!(f, "above {}, at most {}", self.lo, self.hi)
        } else {
            write!(f, "{} to {}", self.lo, self.hi)
        }
    }
}

/// What a key may be set to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Range {
    /// Any value of its type.
    Any,
    /// Whole numbers.
    Int(Ints),
    /// Numbers.
    Float(Floats),
    /// An array of this many entries.
    Entries(Ints),
    /// One of these names.
    Choices(&'static [&'static str]),
    /// A rule in words (a format, or a tie to other keys).
    Rule(&'static str),
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Range::Any => f.write_str("any"),
            Range::Int(i) => write!(f, "{i}"),
            Range::Float(x) => write!(f, "{x}"),
            Range::Entries(i) => write!(f, "{i} entries"),
            Range::Choices(names) => {
                let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
                match quoted.split_last() {
                    Some((last, rest)) if !rest.is_empty() => {
                        write!(f, "one of {} or {last}", rest.join(", "))
                    }
                    _ => f.write_str(&quoted.join("")),
                }
            }
            Range::Rule(text) => f.write_str(text),
        }
    }
}

/// What holds when a key is absent.
#[derive(Debug, Clone, Copy)]
pub enum WhenUnset {
    /// The file must give it.
    Required,
    /// This value (TOML), read from the default the parser or validator applies.
    Value(fn() -> String),
    /// This, in words (no single value stands for it: "twice `ring_size`", "off").
    Means(&'static str),
}

impl WhenUnset {
    /// The value as TOML, if there is one.
    pub fn value(&self) -> Option<String> {
        match self {
            WhenUnset::Value(v) => Some(v()),
            _ => None,
        }
    }
}

/// One key of a section.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// Its name in the file.
    pub name: &'static str,
    /// Its TOML type, in words.
    pub ty: &'static str,
    /// What holds when it is absent.
    pub default: WhenUnset,
    /// What it may be set to.
    pub range: Range,
    /// Conditions that involve other keys, in words (empty: none).
    pub requires: &'static str,
    /// What it means, for the operator: one to three lines.
    pub meaning: &'static str,
    /// The inline-table section its value is (`health` opens `uplink_group.health`).
    pub opens: Option<&'static str>,
}

impl Key {
    const fn new(
        name: &'static str,
        ty: &'static str,
        default: WhenUnset,
        range: Range,
        meaning: &'static str,
    ) -> Key {
        Key {
            name,
            ty,
            default,
            range,
            requires: "",
            meaning,
            opens: None,
        }
    }

    const fn requires(self, requires: &'static str) -> Key {
        Key { requires, ..self }
    }

    const fn opens(self, section: &'static str) -> Key {
        Key {
            opens: Some(section),
            ..self
        }
    }

    /// The range, with what it requires of other keys: `1 to 64`, `at least 1; downlinks
    /// only`.
    pub fn range_text(&self) -> String {
        match (self.range, self.requires) {
            (r, "") => r.to_string(),
            (Range::Any, req) => req.to_string(),
            (r, req) => format!("{r}; {req}"),
        }
    }
}

/// How a section is written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `[name]`, once.
    Table,
    /// `[[name]]`, any number of times.
    ArrayOfTables,
    /// `key = { ... }` inside another section.
    Inline,
}

/// A section of the file and its keys.
#[derive(Debug, Clone, Copy)]
pub struct Section {
    /// Its path: `switch`, `port`, `uplink_group.health`, `ecn`.
    pub name: &'static str,
    /// How the file writes it: `[switch]`, `[[port]]`, `health = { ... }`.
    pub header: &'static str,
    /// Table, array of tables or inline table.
    pub form: Form,
    /// What it is, for the operator.
    pub about: &'static str,
    /// Its keys, in the order the reference lists them.
    pub keys: &'static [Key],
}

impl Section {
    /// The key `name`, if the section has it.
    pub fn key(&self, name: &str) -> Option<&'static Key> {
        self.keys.iter().find(|k| k.name == name)
    }
}

/// The section `name` (`switch`, `port`, `uplink_group.health`, ...).
pub fn section(name: &str) -> Option<&'static Section> {
    SECTIONS.iter().find(|s| s.name == name)
}

/// `v` as a TOML value (`1`, `"backoff"`, `[32, 128]`).
fn toml<T: Serialize>(v: T) -> String {
    toml::Value::try_from(v).map_or_else(|e| format!("<{e}>"), |v| v.to_string())
}

/// The name among `names` that reads as `value`, as a TOML string.
fn choice<T: FromStr + PartialEq>(value: T, names: &[&str]) -> String {
    names
        .iter()
        .find(|n| n.parse::<T>().is_ok_and(|v| v == value))
        .map_or_else(|| "<unnamed>".to_string(), toml)
}

/// The health defaults, as the dataplane keeps them.
fn health() -> HealthSpec {
    HealthSpec::new(Vec::new())
}

const STRING: &str = "string";
const INTEGER: &str = "integer";
const FLOAT: &str = "float";
const BOOLEAN: &str = "boolean";
const STRINGS: &str = "array of strings";
const INTEGERS: &str = "array of integers";
const ECN: &str = "string or inline table";

/// Every section and key of the configuration file.
pub static SECTIONS: &[Section] = &[
    Section {
        name: "switch",
        header: "[switch]",
        form: Form::Table,
        about: "The switch as a whole: its workers, how they poll, how RoCE is sprayed over \
                uplink groups, and ECN marking on the egress queues.",
        keys: &[
            Key::new(
                "name",
                STRING,
                Value(|| toml(SwitchSection::default().name)),
                Range::Any,
                "The switch's name, in logs and metrics, and in the default control socket \
                 path `/run/sprayswitch/NAME.sock`.",
            ),
            Key::new(
                "workers",
                INTEGER,
                Value(|| toml(SwitchSection::default().workers)),
                Range::Int(WORKERS),
                "Worker threads. Each polls its share of the ports (`[[port]] worker`) and runs \
                 its own reorder stage.",
            ),
            Key::new(
                "cores",
                INTEGERS,
                Means("workers are not pinned"),
                Range::Rule("at least one core per worker"),
                "CPU core of each worker, in worker order. Pin workers to isolated cores for \
                 steady latency.",
            ),
            Key::new(
                "idle",
                STRING,
                Value(|| toml(SwitchSection::default().idle)),
                Range::Choices(IDLE),
                "What an idle worker does: `backoff` spins, yields, then waits for packets; \
                 `wait` waits at once (event-driven: shared cores, real-time priority); `spin` \
                 never sleeps (lowest latency, a whole core per worker).",
            ),
            Key::new(
                "idle_sleep_us",
                INTEGER,
                Value(|| toml(SwitchSection::default().idle_sleep_us)),
                Range::Any,
                "Longest an idle worker waits per iteration, microseconds (0 counts as 1); a \
                 packet on one of its ports ends the wait earlier.",
            ),
            Key::new(
                "burst",
                INTEGER,
                Value(|| toml(SwitchSection::default().burst)),
                Range::Int(BURST),
                "Packets received or sent per call on a port. Larger bursts cost less per \
                 packet and add latency under load.",
            ),
            Key::new(
                "flush_us",
                INTEGER,
                Value(|| toml(SwitchSection::default().flush_us)),
                Range::Any,
                "Longest a packet waits in a transmit buffer for its burst to fill, \
                 microseconds.",
            ),
            Key::new(
                "tx_queue_limit",
                INTEGER,
                Value(|| toml(SwitchSection::default().tx_queue_limit)),
                Range::Rule("at least `burst`"),
                "Packets a port's egress queue holds while the port pushes back (its transmit \
                 ring is full); beyond it packets are dropped and counted (`tx_queue_drops`).",
            ),
            Key::new(
                "spray_policy",
                STRING,
                Value(|| toml(SwitchSection::default().spray_policy.text())),
                Range::Choices(SPRAY_POLICIES),
                "How RoCE is spread over an uplink group: per packet `round_robin`, `random`, \
                 `weighted` (by the group's `weights`) or `least_loaded`; `flowlet` moves a flow \
                 only after an idle gap; `ecmp` hashes each flow onto one uplink (the baseline).",
            ),
            Key::new(
                "flowlet_gap_us",
                INTEGER,
                Value(|| toml(SwitchSection::default().flowlet_gap_us)),
                Range::Any,
                "Idle gap after which `flowlet` may move a flow to another uplink, \
                 microseconds.",
            ),
            Key::new(
                "seed",
                INTEGER,
                Value(|| toml(SwitchSection::default().seed)),
                Range::Any,
                "Seed of the workers' random choices (`random` and `flowlet` spraying); each \
                 worker derives its own from it.",
            ),
            Key::new(
                "ecn",
                ECN,
                Means("no marking"),
                Range::Choices(ECN_WORDS),
                "ECN marking on every port's egress queue (a `[[port]]` may set its own): \
                 thresholds (below), or `for_rate`: 100/400 KB and 0.2 (the ConWeave/HPCC \
                 setting at 100 Gbit/s) scaled by each port's `rate_gbps`.",
            )
            .requires("or `{ kmin_kb, kmax_kb, pmax }`; `for_rate` needs every port's `rate_gbps`")
            .opens("ecn"),
            Key::new(
                "path_stamp_lanes",
                INTEGER,
                Value(|| toml(SwitchSection::default().path_stamp_lanes)),
                Range::Int(PATH_STAMP_LANES),
                "Path-stamp counters a ToR keeps, one per worker: the same on every ToR of the \
                 fabric, and at least `workers` where a group has `path_stamps`. Each doubling \
                 halves how far apart two stamps still compare.",
            ),
        ],
    },
    Section {
        name: "reorder",
        header: "[reorder]",
        form: Form::Table,
        about: "The reorder stage towards the hosts (downlinks): per stream (a QP's \
                direction), it holds packets that arrive ahead of a gap until the gap fills or \
                is declared lost, so the hosts' RNICs see their PSNs in order.",
        keys: &[
            Key::new(
                "enabled",
                BOOLEAN,
                Value(|| toml(ReorderSection::default().enabled)),
                Range::Any,
                "Reorder RoCE towards the hosts. `false` sprays without reordering: for \
                 comparison only, the RNICs then see the fabric's reordering as loss.",
            ),
            Key::new(
                "window",
                INTEGER,
                Value(|| toml(ReorderSection::default().window)),
                Range::Int(WINDOW),
                "Ring of each holding stream, in PSNs: how far past a gap packets are held. A \
                 packet beyond it releases held packets to make room.",
            ),
            Key::new(
                "max_streams",
                INTEGER,
                Value(|| toml(ReorderSection::default().max_streams)),
                Range::Int(AT_LEAST_ONE),
                "Streams tracked at once, per worker.",
            ),
            Key::new(
                "max_rings",
                INTEGER,
                Value(|| toml(ReorderSection::default().max_rings)),
                Range::Int(AT_LEAST_ONE),
                "Streams holding packets at once, per worker; each takes one ring of `window` \
                 slots, allocated at start.",
            ),
            Key::new(
                "max_held_mib",
                INTEGER,
                Value(|| toml(ReorderSection::default().max_held_mib)),
                Range::Any,
                "Packet bytes a worker's reorder stage holds at once, MiB (2^20 bytes).",
            ),
            Key::new(
                "hold_timeout_us",
                INTEGER,
                Value(|| toml(ReorderSection::default().hold_timeout_us)),
                Range::Int(HOLD_TIMEOUT_US),
                "How long a gap may stay open before its packet is declared lost, \
                 microseconds: the backstop behind path-order loss detection. A downlink's \
                 `hold_timeout_us` overrides it.",
            ),
            Key::new(
                "learn_us",
                INTEGER,
                Value(|| toml(ReorderSection::default().learn_us)),
                Range::Any,
                "How long a new stream collects packets before it picks the PSN it starts \
                 from, microseconds.",
            ),
            Key::new(
                "idle_evict_ms",
                INTEGER,
                Value(|| toml(ReorderSection::default().idle_evict_ms)),
                Range::Any,
                "Idle time after which a stream is forgotten, milliseconds; ten times as long \
                 while its READ, atomic or FLUSH requests are not all answered.",
            ),
            Key::new(
                "max_reads",
                INTEGER,
                Value(|| toml(ReorderSection::default().max_reads)),
                Range::Int(AT_LEAST_ONE),
                "Outstanding READ and atomic ranges remembered per QP pair: keep it above what \
                 any requester may have outstanding (ConnectX 16, Soft-RoCE 128).",
            ),
            Key::new(
                "stamp_source_prefix",
                "array of 2 integers",
                Value(|| toml(ReorderSection::default().stamp_source_prefix)),
                Range::Rule("IPv4 length 0 to 32, IPv6 length 0 to 128"),
                "Prefix lengths `[IPv4, IPv6]` of the remote racks' subnets: path stamps of \
                 hosts under one prefix count as one sequence, so each host's packets prove its \
                 neighbours' losses. `[32, 128]`: each host on its own.",
            ),
            Key::new(
                "mode",
                STRING,
                Value(|| toml(ReorderSection::default().mode.text())),
                Range::Choices(DOWNLINK_MODES),
                "What downlinks do with the fabric's reordering of RoCE: `reorder` holds and \
                 releases in PSN order (every RNIC; the only mode that keeps a WRITE's data \
                 placed before a later WRITE's), `nak_filter` forwards at once and drops the \
                 host's NAKs for PSNs still on their way (selective-repeat RNICs only: \
                 `rnic`), `pass` forwards and judges nothing. A downlink's `mode` overrides it.",
            ),
            Key::new(
                "rnic",
                STRING,
                Value(|| toml(ReorderSection::default().rnic.text())),
                Range::Choices(RNICS),
                "The hosts' RNICs: `go_back_n` (ConnectX-5, Soft-RoCE) or `selective_repeat` \
                 (ConnectX-6 Dx/7 in lossy mode, IRN). It decides `loss_recovery` when that is \
                 not given and whether `nak_filter` is allowed. A downlink's `rnic` overrides \
                 it.",
            ),
            Key::new(
                "loss_recovery",
                STRING,
                Means("what `rnic` needs: `nak_first` for `go_back_n`, `release_run` for `selective_repeat`"),
                Range::Choices(LOSS_RECOVERY),
                "What a declared loss releases towards a host: `nak_first` for Go-Back-N RNICs \
                 (ConnectX-5, Soft-RoCE), `release_run` for selective repeat (ConnectX-6/7). A \
                 downlink's `loss_recovery` overrides it.",
            ),
        ],
    },
    Section {
        name: "port",
        header: "[[port]]",
        form: Form::ArrayOfTables,
        about: "One per port, at least one: a downlink towards this rack's hosts or an uplink \
                into the fabric, how it is opened (its backend), and the switch's addresses \
                on it.",
        keys: &[
            Key::new(
                "name",
                STRING,
                Required,
                Range::Rule("1 to 32 letters, digits, `-`, `_` or `.`; unique"),
                "The port's name, in routes, groups, counters and `sprayctl`.",
            ),
            Key::new(
                "backend",
                STRING,
                Value(|| toml(default_backend().text())),
                Range::Choices(BACKENDS),
                "How the port is opened: `af_xdp`, `af_packet` or `auto` (AF_XDP, else \
                 AF_PACKET, with the reason logged) on a Linux interface; `dpdk` on a DPDK \
                 device; `pcap` over capture files; `mem` in-process (tests, demo).",
            ),
            Key::new(
                "interface",
                STRING,
                Means("the port's name"),
                Range::Rule("1 to 15 characters, no `/` or spaces; one port each"),
                "AF_XDP and AF_PACKET: the Linux interface to open.",
            ),
            Key::new(
                "queues",
                INTEGER,
                Value(|| toml(DEFAULT_QUEUES)),
                Range::Int(QUEUES),
                "AF_XDP and DPDK: receive queues to open (0 to `queues` - 1), spread by the \
                 NIC's RSS. A member of a group with `path_stamps` needs 1.",
            ),
            Key::new(
                "device",
                STRING,
                Means("none (a `dpdk` port needs one)"),
                Range::Rule("one port each"),
                "DPDK: the device: a PCI address (`0000:3b:00.0`), a vdev of `[dpdk] eal_args` \
                 (`net_af_packet0`) or a vdev's whole devargs (`net_af_packet0,iface=eth0`).",
            ),
            Key::new(
                "xdp_mode",
                STRING,
                Value(|| choice(DEFAULT_XDP_MODE, XDP_MODES)),
                Range::Choices(XDP_MODES),
                "AF_XDP: the XDP hook: `native` (in the driver), `skb` (generic: slower, works \
                 on any interface) or `auto` (native, else skb).",
            ),
            Key::new(
                "ring_size",
                INTEGER,
                Value(|| toml(DEFAULT_RING_SIZE)),
                Range::Int(RING_SIZE),
                "AF_XDP: entries of the receive, transmit and completion rings; DPDK: \
                 descriptors of each receive and transmit queue.",
            ),
            Key::new(
                "fill_ring_size",
                INTEGER,
                Means("twice `ring_size`"),
                Range::Rule("a power of two from `ring_size` to 65536"),
                "AF_XDP: entries of the fill ring. Smaller than the receive ring, it drops \
                 frames when the receive ring is full.",
            ),
            Key::new(
                "busy_poll_us",
                INTEGER,
                Means("off"),
                Range::Int(BUSY_POLL_US),
                "AF_XDP: busy-poll the NIC for up to this long per receive, microseconds \
                 (`SO_BUSY_POLL` with `SO_PREFER_BUSY_POLL`, Linux 5.11+).",
            ),
            Key::new(
                "rx_buffers",
                INTEGER,
                Value(|| toml(DEFAULT_RX_BUFFERS)),
                Range::Int(RX_BUFFERS),
                "AF_XDP and AF_PACKET: receive buffers beyond the rings, what the switch can \
                 keep of the port's packets at once (egress queues, reorder rings). A worker's \
                 AF_XDP ports share one UMEM; DPDK ports use `[dpdk] mbufs`.",
            ),
            Key::new(
                "role",
                STRING,
                Required,
                Range::Choices(ROLES),
                "`downlink`: hosts of this rack; RoCE towards them goes through the reorder \
                 stage. `uplink`: the fabric; traffic to other racks is sprayed over uplink \
                 groups.",
            ),
            Key::new(
                "mac",
                STRING,
                Required,
                Range::Rule("a unicast MAC, `02:5a:01:01:00:01`"),
                "The port's own MAC: the source of routed frames and the answer to ARP and \
                 neighbour solicitations for its addresses.",
            ),
            Key::new(
                "mtu",
                INTEGER,
                Value(|| toml(default_mtu())),
                Range::Int(MTU),
                "Ethernet MTU of the port: the largest IP packet.",
            ),
            Key::new(
                "pmtu",
                INTEGER,
                Means(
                    "the largest that fits `mtu` (1024 for 1500), replaced by what traffic shows",
                ),
                Range::Rule("256, 512, 1024, 2048 or 4096"),
                "RoCE path MTU of the hosts behind the port (how many PSNs a READ takes); set \
                 it when they use a smaller one than `mtu` allows.",
            ),
            Key::new(
                "rate_gbps",
                FLOAT,
                Means("not known"),
                Range::Float(RATE_GBPS),
                "Line rate, Gbit/s: the egress queue holds the port to it, it weighs spraying \
                 (a group's default `weights`) and scales `ecn = \"for_rate\"`.",
            ),
            Key::new(
                "addresses",
                STRINGS,
                Means("none"),
                Range::Rule("`ADDRESS/LENGTH`, a host address; no overlap with another port's"),
                "The switch's addresses on this port (`10.1.1.1/24`, `fd00:1:1::1/64`): each \
                 makes its prefix a connected route, and the switch answers ARP, neighbour \
                 solicitations and pings for it.",
            ),
            Key::new(
                "peer_mac",
                STRING,
                Means("none"),
                Range::Rule("a MAC; an uplink in a group needs it"),
                "Uplinks: the MAC of the next hop at the other end (the spine or the peer ToR).",
            ),
            Key::new(
                "worker",
                INTEGER,
                Means("round robin: port i on worker i mod `workers`"),
                Range::Rule("below `[switch] workers`"),
                "Worker that polls the port.",
            ),
            Key::new(
                "pcap_in",
                STRING,
                Means("nothing replayed"),
                Range::Any,
                "`pcap` backend: capture file to replay as received on the port.",
            ),
            Key::new(
                "pcap_out",
                STRING,
                Means("nothing written"),
                Range::Any,
                "`pcap` backend: capture file that gets what the port sends.",
            ),
            Key::new(
                "pace",
                STRING,
                Value(|| choice(DEFAULT_PACE, PACES)),
                Range::Choices(PACES),
                "`pcap` backend: replay with the gaps between frames as `recorded`, or as \
                 `fast` as the worker polls.",
            ),
            Key::new(
                "hold_timeout_us",
                INTEGER,
                Means("`[reorder] hold_timeout_us`"),
                Range::Int(HOLD_TIMEOUT_US),
                "Hold timeout of the streams towards this downlink, microseconds.",
            )
            .requires("downlinks only"),
            Key::new(
                "loss_recovery",
                STRING,
                Means("`[reorder] loss_recovery`"),
                Range::Choices(LOSS_RECOVERY),
                "What a declared loss releases towards this downlink's hosts (as `[reorder] \
                 loss_recovery`): for a rack whose hosts differ in their RNICs.",
            )
            .requires("downlinks only"),
            Key::new(
                "mode",
                STRING,
                Means("`[reorder] mode`"),
                Range::Choices(DOWNLINK_MODES),
                "What this downlink does with the fabric's reordering (as `[reorder] mode`): \
                 `nak_filter` needs `rnic = \"selective_repeat\"`.",
            )
            .requires("downlinks only"),
            Key::new(
                "rnic",
                STRING,
                Means("`[reorder] rnic`"),
                Range::Choices(RNICS),
                "The RNICs of this downlink's hosts (as `[reorder] rnic`).",
            )
            .requires("downlinks only"),
            Key::new(
                "ecn",
                ECN,
                Means("`[switch] ecn`"),
                Range::Choices(ECN_WORDS),
                "ECN marking on this port's egress queue, in place of `[switch] ecn`; `off` \
                 marks nothing.",
            )
            .requires("or `{ kmin_kb, kmax_kb, pmax }`; `for_rate` needs `rate_gbps`")
            .opens("ecn"),
        ],
    },
    Section {
        name: "ecn",
        header: "ecn = { ... }",
        form: Form::Inline,
        about: "ECN marking thresholds on an egress queue's depth, WRED-style, as the inline \
                table of `[switch] ecn` or a `[[port]] ecn`: no mark below `kmin_kb`, a \
                probability rising to `pmax` at `kmax_kb`, every ECN-capable packet above. \
                The depth is the queue's own: what the reorder stage holds for a host is \
                shown with it but not marked on.",
        keys: &[
            Key::new(
                "kmin_kb",
                FLOAT,
                Required,
                Range::Float(ECN_KB),
                "Queue depth where marking starts, KB (1 KB = 1000 bytes).",
            ),
            Key::new(
                "kmax_kb",
                FLOAT,
                Required,
                Range::Float(ECN_KB),
                "Queue depth where the probability reaches `pmax`, KB; above it every \
                 ECN-capable packet is marked.",
            )
            .requires("at least `kmin_kb`"),
            Key::new(
                "pmax",
                FLOAT,
                Required,
                Range::Float(PMAX),
                "Marking probability at `kmax_kb`.",
            ),
        ],
    },
    Section {
        name: "uplink_group",
        header: "[[uplink_group]]",
        form: Form::ArrayOfTables,
        about: "Uplinks that RoCE to a remote prefix is sprayed over (a `[[route]]` names the \
                group), and how the ToR at the other end tells loss from reordering on them.",
        keys: &[
            Key::new(
                "name",
                STRING,
                Required,
                Range::Rule("unique, not a port's name"),
                "The group's name, for the routes' `group`.",
            ),
            Key::new(
                "ports",
                STRINGS,
                Required,
                Range::Rule("uplinks with a `peer_mac`, each once"),
                "Member uplinks, by port name.",
            ),
            Key::new(
                "weights",
                INTEGERS,
                Means("by the members' `rate_gbps`, else equal"),
                Range::Int(GROUP_WEIGHT),
                "Share of each member under `spray_policy = \"weighted\"`, in `ports` order.",
            )
            .requires("one per member"),
            Key::new(
                "loss_detection",
                STRING,
                Value(|| choice(LossDetection::default(), LOSS_DETECTION)),
                Range::Choices(LOSS_DETECTION),
                "How the receiving ToR tells loss from reordering on what the members deliver: \
                 `path_order` when each member is one FIFO path (a two-tier leaf-spine), \
                 `timeout` for a LAG or several paths behind one member.",
            ),
            Key::new(
                "path_stamps",
                BOOLEAN,
                Value(|| toml(DEFAULT_PATH_STAMPS)),
                Range::Any,
                "Stamp RoCE sent over the members (in the UDP checksum) and read and clear the \
                 stamps of what arrives, so any later packet of a host proves a path for all its \
                 QPs. Every ToR at the other end must have it on, or its hosts see bad checksums.",
            )
            .requires(
                "`loss_detection = \"path_order\"`, one receive queue per member, \
                 `path_stamp_lanes` at least `workers`",
            ),
            Key::new(
                "health",
                "inline table",
                Means("no probing: a member leaves the spray set only when its carrier drops"),
                Range::Any,
                "Path health: probe the ToRs at the other end over every member, and take a \
                 failing member (dead, lossy, flapping) out of the spray set while it fails.",
            )
            .opens("uplink_group.health"),
        ],
    },
    Section {
        name: "uplink_group.health",
        header: "health = { ... }",
        form: Form::Inline,
        about: "Path health of an `[[uplink_group]]`, as an inline table: `health = { peers = \
                [\"10.2.1.1\"] }`. A member is dead after `detect_intervals` probes missed, \
                lossy above `fast_loss_out` or `loss_out`; it comes back after `restore_ms` \
                clean.",
        keys: &[
            Key::new(
                "peers",
                STRINGS,
                Required,
                Range::Entries(HEALTH_PEERS),
                "An address of each ToR at the other end of the members, routed over this \
                 group; each is probed over every member and must list this switch's source.",
            )
            .requires("each routed over this group"),
            Key::new(
                "source",
                STRINGS,
                Means("the switch's first address of each peer's family, in port order"),
                Range::Rule("addresses of this switch, one per family"),
                "The address probes come from.",
            ),
            Key::new(
                "interval_us",
                INTEGER,
                Value(|| toml(health().interval_ns / 1000)),
                Range::Int(HEALTH_INTERVAL_US),
                "Time between two probes of one member to one peer, microseconds.",
            ),
            Key::new(
                "detect_intervals",
                INTEGER,
                Value(|| toml(health().detect_intervals)),
                Range::Int(DETECT_INTERVALS),
                "Intervals without a probe from a peer after which a member is dead (BFD's \
                 detect multiplier).",
            ),
            Key::new(
                "fast_loss_out",
                FLOAT,
                Value(|| toml(health().fast_loss_out)),
                Range::Float(FAST_LOSS_OUT),
                "Loss over the last 64 probes at which a member goes out at once.",
            )
            .requires("at least `loss_out`"),
            Key::new(
                "loss_out",
                FLOAT,
                Value(|| toml(health().loss_out)),
                Range::Float(LOSS_OUT),
                "Loss over the last 1024 probes at which a member goes out: where recovering \
                 from its losses costs the hosts more than the member carries.",
            ),
            Key::new(
                "restore_ms",
                INTEGER,
                Value(|| toml(health().restore_ns / 1_000_000)),
                Range::Int(RESTORE_MS),
                "How long a member must stay clean before it comes back, milliseconds; doubled \
                 each time it fails again soon after, up to 32 times.",
            ),
        ],
    },
    Section {
        name: "route",
        header: "[[route]]",
        form: Form::ArrayOfTables,
        about: "Static routes, looked up by longest prefix. The ports' addresses add their \
                connected prefixes on their own.",
        keys: &[
            Key::new(
                "prefix",
                STRING,
                Required,
                Range::Rule("`ADDRESS/LENGTH`, IPv4 or IPv6; one route each"),
                "Destination prefix.",
            ),
            Key::new(
                "port",
                STRING,
                Means("none"),
                Range::Rule("a port's name; a route has `port` or `group`"),
                "Out this port: to the destination itself, or to the gateway `via`.",
            ),
            Key::new(
                "group",
                STRING,
                Means("none"),
                Range::Rule("an uplink group's name"),
                "Sprayed over this uplink group.",
            ),
            Key::new(
                "via",
                STRING,
                Means("none: the destination is on `port`"),
                Range::Rule("an address inside one of `port`'s addresses"),
                "Gateway on `port`.",
            ),
        ],
    },
    Section {
        name: "neighbor",
        header: "[[neighbor]]",
        form: Form::ArrayOfTables,
        about: "Static neighbours: next hops with a fixed MAC, in place of learning it by ARP \
                or neighbour discovery.",
        keys: &[
            Key::new(
                "ip",
                STRING,
                Required,
                Range::Rule("an IPv4 or IPv6 address; once"),
                "The neighbour's address.",
            ),
            Key::new("mac", STRING, Required, Range::Rule("a MAC"), "Its MAC."),
            Key::new(
                "port",
                STRING,
                Required,
                Range::Rule("a port's name"),
                "The port it is on.",
            ),
        ],
    },
    Section {
        name: "dpdk",
        header: "[dpdk]",
        form: Form::Table,
        about: "How DPDK's EAL starts, for `backend = \"dpdk\"` ports (a binary built with \
                `--features dpdk`); without such a port the section is an error.",
        keys: &[
            Key::new(
                "eal_args",
                STRINGS,
                Value(|| toml(DpdkSection::default().eal_args)),
                Range::Rule("not `-h`, `--help` or `--mbuf-pool-ops-name`"),
                "EAL's arguments, as for any DPDK program: `[\"-a\", \"0000:3b:00.0\", \"-l\", \
                 \"0\"]`, or `[\"--no-huge\", \"-m\", \"512\", \"--vdev\", \
                 \"net_af_packet0,iface=eth0\"]`.",
            ),
            Key::new(
                "mbufs",
                INTEGER,
                Value(|| toml(DEFAULT_DPDK_MBUFS)),
                Range::Int(DPDK_MBUFS),
                "Mbufs in each DPDK port's pool: its receive rings, a transmit ring, and what \
                 the switch holds (egress queues and reorder rings keep packets in their \
                 mbufs).",
            )
            .requires("at least (`queues` + 1) × `ring_size` + 1024 for every DPDK port"),
        ],
    },
];

#[cfg(test)]
mod tests;
