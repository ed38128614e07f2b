//! A frame area: one page-aligned memory region cut into equal frames, with a lock-free free
//! list. It is what an AF_XDP socket registers as its UMEM, and the buffer pool of the
//! AF_PACKET backend.
//!
//! Every frame has exactly one owner at a time: the free list, a [`Frame`] (inside a
//! [`Pkt`](super::Pkt)), or the kernel (a descriptor in a fill or transmit ring). A `Frame`
//! returns itself to the free list when dropped, from whatever thread drops it, so packets can
//! cross workers. It is not the place for anything that decides: it only hands out memory.

use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use crossbeam::queue::ArrayQueue;

/// The memory region and its free list.
#[derive(Debug)]
pub struct FrameArea {
    base: NonNull<u8>,
    bytes: usize,
    frame_size: u32,
    frames: u32,
    free: ArrayQueue<u64>,
}

// SAFETY: the region is plain memory owned by this value until drop. Concurrent access is to
// distinct frames only: a frame is reachable through exactly one owner (free list, one `Frame`,
// or the kernel), and the free list itself is a thread-safe queue.
unsafe impl Send for FrameArea {}
// SAFETY: see `Send`; shared references only read `base`/sizes and use the thread-safe queue.
unsafe impl Sync for FrameArea {}

impl FrameArea {
    /// Maps `frames` frames of `frame_size` bytes (a power of two, 2048 or 4096 for AF_XDP's
    /// aligned mode) and puts every one on the free list.
    ///
    /// # Errors
    /// `InvalidInput` for a bad size, or the error of `mmap`.
    pub fn new(frames: u32, frame_size: u32) -> io::Result<Arc<FrameArea>> {
        if !frame_size.is_power_of_two() || !(2048..=65536).contains(&frame_size) || frames == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "frame area of {frames} frames of {frame_size} bytes: frames must be a power of two \
                     between 2048 and 65536 bytes, at least one"
                ),
            ));
        }
        let bytes = frames as usize * frame_size as usize;
        // SAFETY: an anonymous private mapping with no address hint; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        let free = ArrayQueue::new(frames as usize);
        for i in 0..u64::from(frames) {
            // Cannot fail: the queue holds exactly `frames` entries.
            let _ = free.push(i * u64::from(frame_size));
        }
        Ok(Arc::new(FrameArea {
            base,
            bytes,
            frame_size,
            frames,
            free,
        }))
    }

    /// Start of the region (for UMEM registration).
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Size of the region in bytes.
    pub fn len_bytes(&self) -> usize {
        self.bytes
    }

    /// Frame size in bytes.
    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// Number of frames.
    pub fn frames(&self) -> u32 {
        self.frames
    }

    /// Frames on the free list now.
    pub fn free_frames(&self) -> usize {
        self.free.len()
    }

    /// Takes a free frame's address off the list (to give it to the kernel's fill ring).
    pub fn take(&self) -> Option<u64> {
        self.free.pop()
    }

    /// Puts a frame back (from the kernel's completion ring, or a dropped [`Frame`]). Any
    /// address inside the frame is accepted; the frame's start is stored.
    pub fn give_back(&self, addr: u64) {
        let start = addr & !u64::from(self.frame_size - 1);
        // Cannot overflow while ownership is kept (at most `frames` frames exist); if a bug
        // ever returned a frame twice the extra entry is dropped rather than corrupting memory.
        let _ = self.free.push(start);
    }

    /// A free frame as an owned [`Frame`], its data starting at the frame's start.
    pub fn alloc(self: &Arc<Self>) -> Option<Frame> {
        let addr = self.take()?;
        Some(Frame {
            area: self.clone(),
            addr,
        })
    }

    /// Takes ownership of the frame holding `addr` (a received descriptor). Returns `None` for
    /// an address outside the region.
    pub fn claim(self: &Arc<Self>, addr: u64) -> Option<Frame> {
        if addr >= self.bytes as u64 {
            return None;
        }
        Some(Frame {
            area: self.clone(),
            addr,
        })
    }
}

impl Drop for FrameArea {
    fn drop(&mut self) {
        // SAFETY: `base`/`bytes` are exactly what mmap returned; no `Frame` outlives the area
        // (each holds an `Arc` to it), and the sockets that registered it are closed before
        // their `Arc` is released.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.bytes);
        }
    }
}

/// One frame of a [`FrameArea`], owned. Its bytes run from its address to the frame's end.
/// Two words (packets carry it, so it is kept small).
#[derive(Debug)]
pub struct Frame {
    area: Arc<FrameArea>,
    /// [`GIVEN`] once handed to the kernel by [`Frame::into_addr`].
    addr: u64,
}

/// `Frame::addr` of a frame given away (no valid address is this large).
const GIVEN: u64 = u64::MAX;

impl Frame {
    /// Bytes from the frame's address to its end.
    #[inline]
    pub fn capacity(&self) -> usize {
        let size = self.area.frame_size as usize;
        size - (self.offset() & (size - 1))
    }

    #[inline]
    fn offset(&self) -> usize {
        // `addr` is a valid address while the frame is alive (only `into_addr`, which takes
        // the frame by value, sets GIVEN).
        self.addr as usize
    }

    /// The frame's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: offset + capacity ends at the frame's end, inside the region (the address was
        // checked at `claim`/`alloc`), and this `Frame` is the frame's only owner, so nothing
        // else writes it meanwhile.
        unsafe {
            std::slice::from_raw_parts(self.area.base.as_ptr().add(self.offset()), self.capacity())
        }
    }

    /// The frame's bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let cap = self.capacity();
        // SAFETY: as in `bytes`; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.area.base.as_ptr().add(self.offset()), cap) }
    }

    /// True when the frame is in `area`.
    pub fn belongs_to(&self, area: &FrameArea) -> bool {
        std::ptr::eq(Arc::as_ptr(&self.area), area)
    }

    /// Gives the frame up without returning it to the free list (the kernel owns it now) and
    /// returns its address.
    pub fn into_addr(mut self) -> u64 {
        std::mem::replace(&mut self.addr, GIVEN)
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        if self.addr != GIVEN {
            self.area.give_back(self.addr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pkt::Pkt;

    #[test]
    fn frames_come_back_when_dropped() {
        let area = FrameArea::new(4, 2048).unwrap();
        let a = area.alloc().unwrap();
        let b = area.claim(2048 + 256).unwrap();
        assert_eq!(b.capacity(), 2048 - 256);
        assert_eq!(area.free_frames(), 3);
        drop(a);
        drop(b);
        // Frame 1 was never taken off the list; claiming it and dropping it returns it again.
        assert_eq!(area.free_frames(), 4);
        assert!(area.claim(4 * 2048).is_none());
    }

    #[test]
    fn packets_in_frames_move_as_addresses() {
        let area = FrameArea::new(2, 4096).unwrap();
        let other = FrameArea::new(1, 4096).unwrap();
        let mut p = Pkt::in_frame(area.alloc().unwrap(), 0);
        p.set_data(&[1, 2, 3]);
        assert_eq!(p.data(), &[1, 2, 3]);
        let copy = p.clone();
        let p = p.into_frame_of(&other).unwrap_err();
        let (addr, len) = p.into_frame_of(&area).unwrap();
        assert_eq!(len, 3);
        assert_eq!(area.free_frames(), 1, "the kernel owns the frame now");
        area.give_back(addr + 100);
        assert_eq!(area.free_frames(), 2);
        assert_eq!(copy.data(), &[1, 2, 3]);
        assert!(
            copy.into_frame_of(&area).is_err(),
            "a clone lives on the heap"
        );
    }

    #[test]
    fn frames_cross_threads() {
        let area = FrameArea::new(64, 2048).unwrap();
        let pkts: Vec<Pkt> = (0..64)
            .map(|_| Pkt::in_frame(area.alloc().unwrap(), 60))
            .collect();
        assert_eq!(area.free_frames(), 0);
        std::thread::spawn(move || drop(pkts)).join().unwrap();
        assert_eq!(area.free_frames(), 64);
    }

    #[test]
    fn packets_stay_small() {
        assert_eq!(std::mem::size_of::<Frame>(), 16);
        assert!(
            std::mem::size_of::<Pkt>() <= 48,
            "{}",
            std::mem::size_of::<Pkt>()
        );
    }

    #[test]
    fn bad_sizes_are_refused() {
        assert!(FrameArea::new(1, 3000).is_err());
        assert!(FrameArea::new(0, 2048).is_err());
    }
}
