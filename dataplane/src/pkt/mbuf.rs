//! A DPDK mbuf owned by a [`Pkt`](super::Pkt): one segment and its bytes. The DPDK port
//! ([`crate::port::dpdk`]) receives into and transmits from these; a packet frees its mbuf back
//! to its pool when dropped, from whatever thread drops it.

use std::ffi::c_void;
use std::ptr::NonNull;

extern "C" {
    /// Frees an mbuf to its pool (the shim in `port/dpdk/shim.c`).
    fn ss_mbuf_free(m: *mut c_void);
}

/// One single-segment mbuf owned by a [`Pkt`], with its bytes.
#[derive(Debug)]
pub(crate) struct Mbuf {
    pub(crate) m: NonNull<c_void>,
    pub(crate) data: NonNull<u8>,
    pub(crate) room: usize,
}

// SAFETY: an Mbuf is the only reference to its mbuf (taken from a receive burst or allocated,
// reference count 1), so moving it moves the ownership; freeing it from any thread returns it
// to a multi-producer pool ring (see the module's notes).
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// The first segment's bytes, from the frame's start to the end of the buffer.
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `data..data + room` is the mbuf's data room from its data offset, owned by
        // this Mbuf while it lives.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.room) }
    }

    /// As [`Mbuf::bytes`], writable.
    #[inline]
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.data.as_ptr(), self.room) }
    }

    /// Gives the mbuf up (to a driver's transmit ring).
    pub(crate) fn into_raw(self) -> *mut c_void {
        let m = self.m.as_ptr();
        std::mem::forget(self);
        m
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: this Mbuf owns the mbuf (reference count 1); freed once, here.
        unsafe { ss_mbuf_free(self.m.as_ptr()) };
    }
}

impl Mbuf {
    /// The head mbuf (for a transmit descriptor).
    pub(crate) fn as_ptr(&self) -> *mut c_void {
        self.m.as_ptr()
    }
}
