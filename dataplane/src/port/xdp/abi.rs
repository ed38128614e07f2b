//! Kernel ABI of AF_XDP and bpf(2), as far as sprayswitch uses it (`linux/if_xdp.h`,
//! `linux/bpf.h`). Layouts are fixed by the kernel; sizes are checked by tests.

/// `AF_XDP` address family.
pub const AF_XDP: i32 = 44;
/// `SOL_XDP` socket option level.
pub const SOL_XDP: i32 = 283;

/// getsockopt: ring offsets for mmap.
pub const XDP_MMAP_OFFSETS: i32 = 1;
/// setsockopt: RX ring size.
pub const XDP_RX_RING: i32 = 2;
/// setsockopt: TX ring size.
pub const XDP_TX_RING: i32 = 3;
/// setsockopt: register the UMEM.
pub const XDP_UMEM_REG: i32 = 4;
/// setsockopt: fill ring size.
pub const XDP_UMEM_FILL_RING: i32 = 5;
/// setsockopt: completion ring size.
pub const XDP_UMEM_COMPLETION_RING: i32 = 6;
/// getsockopt: drop statistics.
pub const XDP_STATISTICS: i32 = 7;
/// getsockopt: options (zero-copy or not).
pub const XDP_OPTIONS: i32 = 8;
/// setsockopt: descriptors one `sendto` may send in copy mode (kernel 6.x; optional).
pub const XDP_MAX_TX_SKB_BUDGET: i32 = 9;
/// `XDP_OPTIONS` flag: bound in zero-copy mode.
pub const XDP_OPTIONS_ZEROCOPY: u32 = 1;

/// Bind flag: share the UMEM of `shared_umem_fd`.
pub const XDP_SHARED_UMEM: u16 = 1;
/// Bind flag: copy mode.
pub const XDP_COPY: u16 = 2;
/// Bind flag: the kernel sets `need_wakeup` flags on the rings.
pub const XDP_USE_NEED_WAKEUP: u16 = 8;
/// Bind flag: multi-buffer frames (a frame larger than a UMEM frame spans several
/// descriptors); Linux 6.6 or later. A property of the UMEM: sharers inherit it.
pub const XDP_USE_SG: u16 = 16;
/// Descriptor option: more descriptors of the same frame follow.
pub const XDP_PKT_CONTD: u32 = 1;
/// Program flag: the XDP program accepts multi-buffer frames.
pub const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
/// Ring flag: the kernel must be woken.
pub const XDP_RING_NEED_WAKEUP: u32 = 1;

/// mmap page offset of the RX ring.
pub const XDP_PGOFF_RX_RING: i64 = 0;
/// mmap page offset of the TX ring.
pub const XDP_PGOFF_TX_RING: i64 = 0x8000_0000;
/// mmap page offset of the fill ring.
pub const XDP_UMEM_PGOFF_FILL_RING: i64 = 0x1_0000_0000;
/// mmap page offset of the completion ring.
pub const XDP_UMEM_PGOFF_COMPLETION_RING: i64 = 0x1_8000_0000;

/// Headroom the kernel keeps in front of received data in each UMEM frame
/// (`XDP_PACKET_HEADROOM`).
pub const XDP_PACKET_HEADROOM: u32 = 256;

/// `struct xdp_umem_reg`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UmemReg {
    /// Start of the area.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Frame size.
    pub chunk_size: u32,
    /// Extra headroom per frame.
    pub headroom: u32,
    /// Flags (unaligned chunks ...), none used.
    pub flags: u32,
    /// TX metadata length, none used.
    pub tx_metadata_len: u32,
}

/// `struct xdp_ring_offset`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct RingOffset {
    /// Producer index.
    pub producer: u64,
    /// Consumer index.
    pub consumer: u64,
    /// Entries.
    pub desc: u64,
    /// Flags word.
    pub flags: u64,
}

/// `struct xdp_mmap_offsets`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct MmapOffsets {
    /// RX ring.
    pub rx: RingOffset,
    /// TX ring.
    pub tx: RingOffset,
    /// Fill ring.
    pub fr: RingOffset,
    /// Completion ring.
    pub cr: RingOffset,
}

/// `struct sockaddr_xdp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct SockaddrXdp {
    /// `AF_XDP`.
    pub family: u16,
    /// Bind flags.
    pub flags: u16,
    /// Interface index.
    pub ifindex: u32,
    /// Queue.
    pub queue_id: u32,
    /// Socket whose UMEM to share.
    pub shared_umem_fd: u32,
}

/// `struct xdp_desc`: an RX or TX descriptor.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XdpDesc {
    /// UMEM address of the data.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// Options (`XDP_PKT_CONTD` for multi-buffer frames).
    pub options: u32,
}

/// `struct xdp_statistics`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XdpStatistics {
    /// Dropped for reasons other than invalid descriptors.
    pub rx_dropped: u64,
    /// Invalid RX descriptors.
    pub rx_invalid_descs: u64,
    /// Invalid TX descriptors.
    pub tx_invalid_descs: u64,
    /// Dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the TX ring was empty on a wakeup.
    pub tx_ring_empty_descs: u64,
}

/// bpf(2) command: create a map.
pub const BPF_MAP_CREATE: i32 = 0;
/// bpf(2) command: look a map element up.
pub const BPF_MAP_LOOKUP_ELEM: i32 = 1;
/// Map type per-CPU array.
pub const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
/// bpf(2) command: update a map element.
pub const BPF_MAP_UPDATE_ELEM: i32 = 2;
/// bpf(2) command: load a program.
pub const BPF_PROG_LOAD: i32 = 5;
/// bpf(2) command: create a link.
pub const BPF_LINK_CREATE: i32 = 28;
/// Map type XSKMAP.
pub const BPF_MAP_TYPE_XSKMAP: u32 = 17;
/// Program type XDP.
pub const BPF_PROG_TYPE_XDP: u32 = 6;
/// Attach type XDP.
pub const BPF_XDP: u32 = 37;
/// Link flag: generic (skb) mode.
pub const XDP_FLAGS_SKB_MODE: u32 = 2;
/// Link flag: native (driver) mode.
pub const XDP_FLAGS_DRV_MODE: u32 = 4;

/// `bpf_attr` for `BPF_MAP_CREATE`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct MapCreateAttr {
    /// Map type.
    pub map_type: u32,
    /// Key size.
    pub key_size: u32,
    /// Value size.
    pub value_size: u32,
    /// Entries.
    pub max_entries: u32,
    /// Flags.
    pub map_flags: u32,
}

/// `bpf_attr` for `BPF_MAP_UPDATE_ELEM`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct MapUpdateAttr {
    /// Map.
    pub map_fd: u32,
    /// Padding.
    pub pad: u32,
    /// Pointer to the key.
    pub key: u64,
    /// Pointer to the value.
    pub value: u64,
    /// Flags (`BPF_ANY`).
    pub flags: u64,
}

/// `bpf_attr` for `BPF_PROG_LOAD`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct ProgLoadAttr {
    /// Program type.
    pub prog_type: u32,
    /// Instruction count.
    pub insn_cnt: u32,
    /// Pointer to the instructions.
    pub insns: u64,
    /// Pointer to the licence string.
    pub license: u64,
    /// Verifier log level.
    pub log_level: u32,
    /// Verifier log size.
    pub log_size: u32,
    /// Pointer to the verifier log.
    pub log_buf: u64,
    /// Kernel version (unused for XDP).
    pub kern_version: u32,
    /// Program flags.
    pub prog_flags: u32,
    /// Name.
    pub prog_name: [u8; 16],
    /// Offload target (none).
    pub prog_ifindex: u32,
    /// Expected attach type.
    pub expected_attach_type: u32,
}

/// `bpf_attr` for `BPF_LINK_CREATE`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct LinkCreateAttr {
    /// Program.
    pub prog_fd: u32,
    /// Interface index.
    pub target_ifindex: u32,
    /// Attach type.
    pub attach_type: u32,
    /// XDP mode flags.
    pub flags: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    #[test]
    fn layouts_match_the_kernel() {
        assert_eq!(size_of::<UmemReg>(), 32);
        assert_eq!(size_of::<RingOffset>(), 32);
        assert_eq!(size_of::<MmapOffsets>(), 128);
        assert_eq!(size_of::<SockaddrXdp>(), 16);
        assert_eq!(size_of::<XdpDesc>(), 16);
        assert_eq!(size_of::<XdpStatistics>(), 48);
        assert_eq!(size_of::<MapUpdateAttr>(), 32);
        assert_eq!(size_of::<ProgLoadAttr>(), 72);
        assert_eq!(size_of::<LinkCreateAttr>(), 16);
    }
}
