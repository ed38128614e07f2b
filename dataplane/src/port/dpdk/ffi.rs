//! The declarations of `shim.c`'s functions and structs (the only DPDK symbols the Rust side
//! uses; DPDK's own structs never cross). Each mirrors its C definition field by field.

use std::ffi::{c_char, c_int, c_void};

/// `struct ss_rx`: one received packet.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct RxDesc {
    pub(super) m: *mut c_void,
    pub(super) data: *mut u8,
    pub(super) len: u32,
    pub(super) room: u32,
    pub(super) segs: u16,
}

impl Default for RxDesc {
    fn default() -> Self {
        RxDesc {
            m: std::ptr::null_mut(),
            data: std::ptr::null_mut(),
            len: 0,
            room: 0,
            segs: 0,
        }
    }
}

/// `struct ss_info`.
#[repr(C)]
pub(super) struct Info {
    pub(super) driver: [c_char; 64],
    pub(super) max_rx_queues: u16,
    pub(super) max_tx_queues: u16,
    pub(super) max_rx_pktlen: u32,
    pub(super) max_mtu: u16,
}

/// `struct ss_stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Stats {
    pub(super) ipackets: u64,
    pub(super) opackets: u64,
    pub(super) imissed: u64,
    pub(super) ierrors: u64,
    pub(super) oerrors: u64,
    pub(super) rx_nombuf: u64,
}

extern "C" {
    pub(super) fn ss_eal_init(argc: c_int, argv: *mut *mut c_char) -> c_int;
    pub(super) fn ss_thread_register() -> c_int;
    pub(super) fn ss_headroom() -> u32;
    pub(super) fn ss_strerror(e: c_int) -> *const c_char;
    pub(super) fn ss_port_by_name(name: *const c_char, port: *mut u16, probed: *mut c_int)
        -> c_int;
    pub(super) fn ss_port_info(port: u16, out: *mut Info) -> c_int;
    pub(super) fn ss_pool_create(
        name: *const c_char,
        n: u32,
        data_room: u16,
        port: u16,
        err: *mut c_int,
    ) -> *mut c_void;
    pub(super) fn ss_pool_cache() -> u32;
    pub(super) fn ss_pool_free(mp: *mut c_void);
    pub(super) fn ss_pool_avail(mp: *const c_void) -> u32;
    pub(super) fn ss_pool_in_use(mp: *const c_void) -> u32;
    pub(super) fn ss_port_start(
        port: u16,
        queues: u16,
        ring: *mut u16,
        mp: *mut c_void,
        mtu: u16,
        step: *mut c_int,
        promisc: *mut c_int,
    ) -> c_int;
    pub(super) fn ss_port_close(port: u16, started: c_int, remove: c_int);
    pub(super) fn ss_mac(port: u16, out: *mut u8);
    pub(super) fn ss_link_up(port: u16) -> c_int;
    pub(super) fn ss_stats(port: u16, out: *mut Stats) -> c_int;
    pub(super) fn ss_rx_burst(port: u16, q: u16, out: *mut RxDesc, n: u16, lost: *mut u64) -> u16;
    pub(super) fn ss_mbuf_read(m: *const c_void, dst: *mut u8);
    pub(super) fn ss_tx_burst(
        port: u16,
        q: u16,
        m: *mut *mut c_void,
        lens: *const u32,
        n: u16,
    ) -> u16;
    pub(super) fn ss_mbuf_from(
        mp: *mut c_void,
        src: *const u8,
        len: u32,
        data: *mut *mut u8,
        room: *mut u32,
    ) -> *mut c_void;
}
