//! Middleware that writes the frames passing through any port to a pcap file that tshark reads:
//! received frames, transmitted frames, or both.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use super::{LinkState, Port};
use crate::pcap::{CaptureError, PcapWriter};
use crate::pkt::Pkt;
use crate::time::wall_ns;

/// Which direction a tap records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapDirection {
    /// Record received frames.
    pub rx: bool,
    /// Record transmitted frames.
    pub tx: bool,
}

/// A port wrapped with a pcap writer.
pub struct PcapTap<P: Port> {
    inner: P,
    writer: PcapWriter<BufWriter<File>>,
    dir: TapDirection,
    /// Packets at the front of the caller's transmit queue already written on an earlier call
    /// (the port refused them; the caller retries them first).
    tx_written: usize,
    errors: u64,
}

impl<P: Port> PcapTap<P> {
    /// Wraps `inner`, writing to a new file at `path`.
    ///
    /// # Errors
    /// When the file cannot be created.
    pub fn new(inner: P, path: &Path, dir: TapDirection) -> Result<Self, CaptureError> {
        Ok(PcapTap {
            inner,
            writer: PcapWriter::create(path)?,
            dir,
            tx_written: 0,
            errors: 0,
        })
    }

    /// Frames written.
    pub fn frames_written(&self) -> u64 {
        self.writer.frames_written()
    }

    /// The wrapped port.
    pub fn into_inner(mut self) -> P {
        let _ = self.writer.flush();
        self.inner
    }
}

impl<P: Port> Port for PcapTap<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn rx_burst(&mut self, now: u64, out: &mut Vec<Pkt>, max: usize) -> usize {
        let start = out.len();
        let n = self.inner.rx_burst(now, out, max);
        if self.dir.rx {
            for p in &out[start..start + n] {
                if self
                    .writer
                    .write_frame(wall_ns(p.rx_ns.max(now)), p.data())
                    .is_err()
                {
                    self.errors += 1;
                }
            }
        }
        n
    }

    fn tx_burst(&mut self, now: u64, pkts: &mut Vec<Pkt>) -> usize {
        if self.dir.tx {
            let skip = self.tx_written.min(pkts.len());
            for p in &pkts[skip..] {
                if self.writer.write_frame(wall_ns(now), p.data()).is_err() {
                    self.errors += 1;
                }
            }
        }
        let n = self.inner.tx_burst(now, pkts);
        self.tx_written = pkts.len();
        n
    }

    fn poll(&mut self, now: u64) {
        self.inner.poll(now)
    }

    fn link_state(&self) -> LinkState {
        self.inner.link_state()
    }

    fn tx_backlog(&self) -> usize {
        self.inner.tx_backlog()
    }

    fn rx_finished(&self) -> bool {
        self.inner.rx_finished()
    }

    fn wait_fds(&self, out: &mut Vec<std::os::fd::RawFd>) {
        self.inner.wait_fds(out)
    }

    fn rx_pool(&self) -> Option<std::sync::Arc<dyn super::RxPool>> {
        self.inner.rx_pool()
    }

    fn dropped(&self) -> u64 {
        self.inner.dropped()
    }

    fn backend_counters(&self) -> super::BackendCounters {
        self.inner.backend_counters()
    }

    fn flush(&mut self) {
        if self.writer.flush().is_err() {
            self.errors += 1;
        }
        self.inner.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcap::CaptureReader;
    use crate::port::mem;

    #[test]
    fn writes_each_frame_once_even_when_the_port_pushes_back() {
        let dir = std::env::temp_dir().join(format!("ss-tap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tap.pcap");
        let (a, mut b) = mem::link("a", "b", 2);
        let mut tap = PcapTap::new(a, &path, TapDirection { rx: true, tx: true }).unwrap();
        let mut q: Vec<Pkt> = (0..3u8).map(|i| Pkt::from_slice(&[i; 60])).collect();
        assert_eq!(tap.tx_burst(0, &mut q), 2);
        let mut sink = Vec::new();
        b.rx_burst(0, &mut sink, 8);
        assert_eq!(tap.tx_burst(1, &mut q), 1);
        b.tx_burst(2, &mut vec![Pkt::from_slice(&[9; 60])]);
        tap.rx_burst(3, &mut sink, 8);
        tap.flush();
        assert_eq!(tap.frames_written(), 4);
        let mut r = CaptureReader::open(&path).unwrap();
        let mut firsts = Vec::new();
        while let Some(x) = r.next_frame(|f| f.data[0]).unwrap() {
            firsts.push(x);
        }
        assert_eq!(firsts, vec![0, 1, 2, 9]);
        std::fs::remove_dir_all(&dir).ok();
    }
}
