//! The capture decoder: one record per frame of a pcap/pcapng file, printed by
//! `rocecap decode` as a line of text or a JSON object.

use std::fmt::Write as _;
use std::net::IpAddr;

use serde::Serialize;
use sprayswitch::pcap::{CapturedFrame, LINKTYPE_ETHERNET};
use sprayswitch::wire::{classify, FrameClass, L4Summary, ParseReason, Pmtu};

/// What the decoder says about one frame. Fields that do not apply are left out of the JSON.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FrameRecord {
    /// Frame number, from 1.
    pub frame: u64,
    /// Capture timestamp, nanoseconds since the epoch.
    pub ts_ns: u64,
    /// Length on the wire.
    pub len: u32,
    /// `roce`, `arp`, `ip` (non-RoCE IP), `l2` (other EtherType), `error` or `unsupported`.
    pub kind: &'static str,
    /// Outer VLAN id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// Source address (IP, or ARP sender).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src: Option<String>,
    /// Destination address (IP, or ARP target).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<String>,
    /// UDP/TCP source port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sport: Option<u16>,
    /// UDP/TCP destination port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dport: Option<u16>,
    /// For non-RoCE frames: `tcp`, `udp`, `icmp`, `icmpv6`, `nd`, `fragment`, `arp-request`, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proto: Option<String>,
    /// ECN codepoint of the IP header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecn: Option<u8>,
    /// BTH opcode name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opcode: Option<&'static str>,
    /// BTH opcode byte.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opcode_raw: Option<u8>,
    /// Destination QP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dest_qp: Option<u32>,
    /// PSN.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psn: Option<u32>,
    /// AckReq bit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_req: Option<bool>,
    /// FECN bit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fecn: Option<bool>,
    /// BECN bit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub becn: Option<bool>,
    /// AETH syndrome name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aeth_syndrome: Option<&'static str>,
    /// AETH syndrome byte.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aeth_raw: Option<u8>,
    /// AETH message sequence number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msn: Option<u32>,
    /// RETH DMA length.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dma_len: Option<u32>,
    /// Transport payload length (without pad and ICRC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_len: Option<u16>,
    /// `ok`, `bad`, or `unchecked` (snapped frame, IPv6 extension headers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icrc: Option<&'static str>,
    /// Why the frame could not be parsed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Layer where parsing stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_layer: Option<&'static str>,
    /// Offset of that layer in the frame.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_offset: Option<u16>,
}

impl FrameRecord {
    fn new(f: &CapturedFrame<'_>, kind: &'static str) -> FrameRecord {
        FrameRecord {
            frame: f.number,
            ts_ns: f.ts_ns,
            len: f.orig_len,
            kind,
            vlan: None,
            src: None,
            dst: None,
            sport: None,
            dport: None,
            proto: None,
            ecn: None,
            opcode: None,
            opcode_raw: None,
            dest_qp: None,
            psn: None,
            ack_req: None,
            fecn: None,
            becn: None,
            aeth_syndrome: None,
            aeth_raw: None,
            msn: None,
            dma_len: None,
            payload_len: None,
            icrc: None,
            error: None,
            error_layer: None,
            error_offset: None,
        }
    }
}

fn l4_name(l4: &L4Summary, nd: bool) -> String {
    match l4 {
        L4Summary::Udp { .. } => "udp".into(),
        L4Summary::Tcp { .. } => "tcp".into(),
        L4Summary::Icmpv4 { icmp_type, .. } => format!("icmp type {icmp_type}"),
        L4Summary::Icmpv6 { icmp_type, .. } if nd => format!("nd type {icmp_type}"),
        L4Summary::Icmpv6 { icmp_type, .. } => format!("icmpv6 type {icmp_type}"),
        L4Summary::Fragment => "fragment".into(),
        L4Summary::Other => "other".into(),
    }
}

fn reason_text(r: ParseReason) -> String {
    match r {
        ParseReason::Truncated { need, have } => {
            format!("truncated: need {need} bytes, have {have}")
        }
        ParseReason::BadHeader => "invalid header field".into(),
        ParseReason::UnknownOpcode(op) => format!("unknown opcode 0x{op:02x}"),
        ParseReason::UnsupportedTransport(op) => {
            format!("unsupported transport (opcode 0x{op:02x})")
        }
        ParseReason::BadTver(v) => format!("transport header version {v}"),
        ParseReason::UnexpectedPayload => "payload on an opcode that carries none".into(),
        ParseReason::UnsupportedArp => "ARP other than IPv4 over Ethernet".into(),
        ParseReason::TooManyVlanTags => "more than two VLAN tags".into(),
    }
}

fn addr(a: IpAddr) -> Option<String> {
    Some(a.to_string())
}

/// Decodes one captured frame. `pmtu` sizes READ requests (it does not change what is printed
/// today, but keeps the decoder's classification identical to the switch's).
pub fn decode(f: &CapturedFrame<'_>, pmtu: Pmtu) -> FrameRecord {
    if f.linktype != LINKTYPE_ETHERNET {
        let mut r = FrameRecord::new(f, "unsupported");
        r.error = Some(format!("link type {} is not Ethernet", f.linktype));
        return r;
    }
    let c = match classify(f.data, pmtu) {
        Ok(c) => c,
        Err(e) => {
            let mut r = FrameRecord::new(f, "error");
            r.error = Some(reason_text(e.reason));
            r.error_layer = Some(e.layer.name());
            r.error_offset = Some(e.offset);
            return r;
        }
    };
    let mut r;
    match c.class {
        FrameClass::Roce(roce) => {
            r = FrameRecord::new(f, "roce");
            r.src = addr(roce.ip.src);
            r.dst = addr(roce.ip.dst);
            if let Some((s, d)) = roce.ip.udp_ports() {
                r.sport = Some(s);
                r.dport = Some(d);
            }
            r.ecn = Some(roce.ip.ecn());
            r.opcode = Some(roce.bth.opcode.name());
            r.opcode_raw = Some(roce.bth.opcode.into());
            r.dest_qp = Some(roce.bth.dest_qp);
            r.psn = Some(roce.bth.psn.value());
            r.ack_req = Some(roce.bth.ack_req);
            r.fecn = Some(roce.bth.fecn);
            r.becn = Some(roce.bth.becn);
            if let Some(a) = roce.aeth {
                r.aeth_syndrome = Some(a.syndrome.name());
                r.aeth_raw = Some(a.syndrome.into());
                r.msn = Some(a.msn);
            }
            r.dma_len = roce.reth.map(|x| x.dma_len);
            r.payload_len = Some(roce.payload_len);
            let snapped = (f.data.len() as u64) < u64::from(f.orig_len)
                && usize::from(roce.icrc_offset) + 4 > f.data.len();
            r.icrc = Some(match roce.verify_icrc(f.data, c.eth.l3_offset) {
                _ if snapped => "unchecked",
                Ok(true) => "ok",
                Ok(false) => "bad",
                Err(_) => "unchecked",
            });
        }
        FrameClass::Ip(ip) => {
            r = FrameRecord::new(f, "ip");
            r.src = addr(ip.src);
            r.dst = addr(ip.dst);
            match ip.l4 {
                L4Summary::Udp { src_port, dst_port }
                | L4Summary::Tcp {
                    src_port, dst_port, ..
                } => {
                    r.sport = Some(src_port);
                    r.dport = Some(dst_port);
                }
                _ => {}
            }
            r.ecn = Some(ip.ecn());
            r.proto = Some(l4_name(&ip.l4, ip.is_neighbor_discovery()));
        }
        FrameClass::Arp(a) => {
            r = FrameRecord::new(f, "arp");
            r.src = Some(a.sender_ip.to_string());
            r.dst = Some(a.target_ip.to_string());
            r.proto = Some(
                match a.operation {
                    1 => "arp-request",
                    2 => "arp-reply",
                    _ => "arp-other",
                }
                .into(),
            );
        }
        FrameClass::OtherL2 => {
            r = FrameRecord::new(f, "l2");
            r.proto = Some(format!("ethertype 0x{:04x}", c.eth.ether_type));
        }
    }
    r.vlan = c.eth.vlan.map(|v| v.vid);
    r
}

/// Formats a record as one line of text. `t0_ns` is the first frame's timestamp, so that times
/// print relative to the start of the capture, as tshark does.
pub fn human_line(r: &FrameRecord, t0_ns: u64) -> String {
    let mut s = String::with_capacity(128);
    let rel = r.ts_ns.saturating_sub(t0_ns) as f64 / 1e9;
    let _ = write!(s, "{:>6} {:>11.6}", r.frame, rel);
    let endpoint = |a: &Option<String>, p: Option<u16>| match (a, p) {
        (Some(a), Some(p)) if a.contains(':') => format!("[{a}]:{p}"),
        (Some(a), Some(p)) => format!("{a}:{p}"),
        (Some(a), None) => a.clone(),
        _ => "-".into(),
    };
    if r.kind != "error" && r.kind != "unsupported" {
        let _ = write!(
            s,
            " {} > {}",
            endpoint(&r.src, r.sport),
            endpoint(&r.dst, r.dport)
        );
    }
    if let Some(v) = r.vlan {
        let _ = write!(s, " vlan {v}");
    }
    match r.kind {
        "roce" => {
            let _ = write!(
                s,
                " {} qp 0x{:06x} psn {}",
                r.opcode.unwrap_or("?"),
                r.dest_qp.unwrap_or(0),
                r.psn.unwrap_or(0)
            );
            let flags: Vec<&str> = [
                (r.ack_req == Some(true), "A"),
                (r.fecn == Some(true), "FECN"),
                (r.becn == Some(true), "BECN"),
            ]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, n)| *n)
            .collect();
            if !flags.is_empty() {
                let _ = write!(s, " [{}]", flags.join(","));
            }
            if let (Some(syn), Some(msn)) = (r.aeth_syndrome, r.msn) {
                let _ = write!(s, " {syn} msn {msn}");
            }
            if let Some(d) = r.dma_len {
                let _ = write!(s, " dma_len {d}");
            }
            let _ = write!(
                s,
                " len {} icrc {}",
                r.payload_len.unwrap_or(0),
                r.icrc.unwrap_or("?")
            );
        }
        "error" => {
            let _ = write!(
                s,
                " malformed at {} offset {}: {}",
                r.error_layer.unwrap_or("?"),
                r.error_offset.unwrap_or(0),
                r.error.as_deref().unwrap_or("")
            );
        }
        "unsupported" => {
            let _ = write!(s, " {}", r.error.as_deref().unwrap_or(""));
        }
        _ => {
            let _ = write!(s, " {} (not RoCE)", r.proto.as_deref().unwrap_or(r.kind));
        }
    }
    s
}
