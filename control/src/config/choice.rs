//! Named choices of the file (`role = "downlink"`, `backend = "af_xdp"`, ...): typed when they
//! are read, checked when the file is validated.
//!
//! A choice the file gets wrong is not a parse error: serde would report it with a line and
//! column but without the field's path, and every other problem is reported as
//! `port[2].role: reason`. So a [`Choice`] keeps the text and the outcome of parsing it, and
//! validation turns a bad one into a [`ConfigError`] that names its field.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};

use super::ConfigError;

/// The value a file names, or why the name is none of the values.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice<T> {
    text: String,
    value: Result<T, String>,
}

impl<T: FromStr<Err = String>> Choice<T> {
    /// The choice `text` names.
    pub fn new(text: &str) -> Choice<T> {
        Choice {
            text: text.to_string(),
            value: text.parse(),
        }
    }
}

impl<T: Copy> Choice<T> {
    /// The value, or a [`ConfigError`] for `field` with the reason its type gives.
    ///
    /// # Errors
    /// When the text names no value.
    pub fn get(&self, field: impl FnOnce() -> String) -> Result<T, ConfigError> {
        self.value.clone().map_err(|reason| ConfigError {
            field: field(),
            reason,
        })
    }

    /// The value, if the text names one.
    pub fn value(&self) -> Option<T> {
        self.value.as_ref().ok().copied()
    }
}

impl<T> Choice<T> {
    /// The text as the file has it.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl<'de, T: FromStr<Err = String>> Deserialize<'de> for Choice<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Ok(Choice::new(&text))
    }
}

/// How a port is realised, as `backend` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// `mem`: an in-memory link end.
    Mem,
    /// `pcap`: capture replay and/or output.
    Pcap,
    /// `af_xdp`.
    AfXdp,
    /// `af_packet`.
    AfPacket,
    /// `auto`: AF_XDP, falling back to AF_PACKET.
    Auto,
    /// `dpdk`: a DPDK ethdev (the binary needs the `dpdk` cargo feature).
    Dpdk,
}

impl BackendKind {
    /// Opens a Linux interface.
    pub fn is_real(self) -> bool {
        matches!(
            self,
            BackendKind::AfXdp | BackendKind::AfPacket | BackendKind::Auto
        )
    }
}

impl FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "mem" => BackendKind::Mem,
            "pcap" => BackendKind::Pcap,
            "af_xdp" => BackendKind::AfXdp,
            "af_packet" => BackendKind::AfPacket,
            "auto" => BackendKind::Auto,
            "dpdk" => BackendKind::Dpdk,
            other => {
                return Err(format!(
                    "'{other}': use 'mem', 'pcap', 'af_xdp', 'af_packet', 'auto' or 'dpdk'"
                ))
            }
        })
    }
}

/// The XDP hook an AF_XDP port asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpModeChoice {
    /// Native, falling back to skb.
    Auto,
    /// Native (driver) only.
    Native,
    /// Generic (skb) only.
    Skb,
}

impl FromStr for XdpModeChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "auto" => XdpModeChoice::Auto,
            "native" => XdpModeChoice::Native,
            "skb" => XdpModeChoice::Skb,
            other => return Err(format!("'{other}': use 'auto', 'native' or 'skb'")),
        })
    }
}

/// How the RNICs behind a downlink recover from what they see out of order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RnicKind {
    /// Go-Back-N (ConnectX-5, Soft-RoCE, most RNICs): out-of-order packets are dropped.
    GoBackN,
    /// Selective repeat (ConnectX-6 Dx/7 in lossy mode, IRN): out-of-order packets within the
    /// window are kept.
    SelectiveRepeat,
}

impl FromStr for RnicKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "go_back_n" => RnicKind::GoBackN,
            "selective_repeat" => RnicKind::SelectiveRepeat,
            other => return Err(format!("'{other}': use 'go_back_n' or 'selective_repeat'")),
        })
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Mem => "mem",
            BackendKind::Pcap => "pcap",
            BackendKind::AfXdp => "af_xdp",
            BackendKind::AfPacket => "af_packet",
            BackendKind::Auto => "auto",
            BackendKind::Dpdk => "dpdk",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_name_is_kept_for_validation_to_report_with_its_field() {
        let c: Choice<BackendKind> = Choice::new("netmap");
        assert_eq!(c.text(), "netmap");
        assert_eq!(c.value(), None);
        let e = c.get(|| "port[3].backend".into()).unwrap_err();
        assert_eq!(e.field, "port[3].backend");
        assert!(e.reason.starts_with("'netmap': use 'mem'"), "{e}");
        let ok: Choice<XdpModeChoice> = Choice::new("skb");
        assert_eq!(ok.get(String::new).unwrap(), XdpModeChoice::Skb);
    }

    #[test]
    fn every_backend_name_reads_back() {
        for k in [
            BackendKind::Mem,
            BackendKind::Pcap,
            BackendKind::AfXdp,
            BackendKind::AfPacket,
            BackendKind::Auto,
        ] {
            assert_eq!(k.to_string().parse::<BackendKind>(), Ok(k));
        }
    }
}
