//! A port backed by capture files, as DPDK's pcap driver: it receives the frames of a pcap or
//! pcapng file (at their recorded pace, or as fast as the switch takes them) and writes what it
//! transmits to a pcap file. With it `sprayswitch` runs offline over a capture and shows what it
//! would have done.
//!
//! Replay allocates one buffer per frame read from the file; this backend is for offline runs,
//! not for measuring the forwarding path.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use super::{LinkState, Port};
use crate::pcap::{CaptureError, CaptureReader, PcapWriter};
use crate::pkt::Pkt;
use crate::time::wall_ns;

/// How fast a capture is replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Keep the gaps between frames as recorded (the first frame goes out at once).
    Recorded,
    /// As fast as the worker polls.
    Fast,
}

impl core::str::FromStr for Pace {
    type Err = String;
    /// `recorded` or `fast`, as configuration files name them.
    fn from_str(s: &str) -> Result<Pace, String> {
        match s {
            "recorded" => Ok(Pace::Recorded),
            "fast" => Ok(Pace::Fast),
            other => Err(format!("'{other}': use 'recorded' or 'fast'")),
        }
    }
}

/// A capture-file port.
pub struct PcapPort {
    name: String,
    reader: Option<CaptureReader>,
    pending: Option<(u64, Pkt)>,
    pace: Pace,
    start: Option<(u64, u64)>,
    writer: Option<PcapWriter<BufWriter<File>>>,
    finished: bool,
    /// Why reading stopped early, if it did.
    pub read_error: Option<String>,
    write_errors: u64,
}

impl PcapPort {
    /// A port that replays `input` (if any) and writes what it sends to `output` (if any).
    ///
    /// # Errors
    /// [`CaptureError`] when the input cannot be opened or is not a capture, or the output
    /// cannot be created.
    pub fn new(
        name: &str,
        input: Option<&Path>,
        output: Option<&Path>,
        pace: Pace,
    ) -> Result<PcapPort, CaptureError> {
        let reader = input.map(CaptureReader::open).transpose()?;
        let writer = output.map(PcapWriter::create).transpose()?;
        Ok(PcapPort {
            name: name.to_string(),
            finished: reader.is_none(),
            reader,
            pending: None,
            pace,
            start: None,
            writer,
            read_error: None,
            write_errors: 0,
        })
    }

    /// Frames written to the output so far.
    pub fn frames_written(&self) -> u64 {
        self.writer.as_ref().map_or(0, |w| w.frames_written())
    }

    /// Frames that could not be written (I/O errors).
    pub fn write_errors(&self) -> u64 {
        self.write_errors
    }

    fn fill_pending(&mut self) {
        if self.pending.is_some() || self.finished {
            return;
        }
        let Some(r) = self.reader.as_mut() else {
            self.finished = true;
            return;
        };
        match r.next_frame(|f| (f.ts_ns, Pkt::from_slice(f.data))) {
            Ok(Some(next)) => self.pending = Some(next),
            Ok(None) => self.finished = true,
            Err(e) => {
                log::warn!("port {}: replay stopped: {e}", self.name);
                self.read_error = Some(e.to_string());
                self.finished = true;
            }
        }
    }
}

impl Port for PcapPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, now: u64, out: &mut Vec<Pkt>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            self.fill_pending();
            let Some((ts, _)) = self.pending.as_ref() else {
                break;
            };
            let ts = *ts;
            if self.pace == Pace::Recorded {
                let (now0, ts0) = *self.start.get_or_insert((now, ts));
                if ts.saturating_sub(ts0) > now.saturating_sub(now0) {
                    break;
                }
            }
            if let Some((_, mut p)) = self.pending.take() {
                p.rx_ns = now;
                out.push(p);
                n += 1;
            }
        }
        n
    }

    fn tx_burst(&mut self, now: u64, pkts: &mut Vec<Pkt>) -> usize {
        let n = pkts.len();
        if let Some(w) = self.writer.as_mut() {
            for p in pkts.iter() {
                if w.write_frame(wall_ns(now), p.data()).is_err() {
                    self.write_errors += 1;
                }
            }
        }
        pkts.clear();
        n
    }

    fn link_state(&self) -> LinkState {
        LinkState::Up
    }

    fn tx_backlog(&self) -> usize {
        0
    }

    fn rx_finished(&self) -> bool {
        self.finished && self.pending.is_none()
    }

    fn flush(&mut self) {
        if let Some(w) = self.writer.as_mut() {
            if w.flush().is_err() {
                self.write_errors += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/rxe-rc-ops.pcap")
    }

    #[test]
    fn replays_fast_and_writes() {
        let dir = std::env::temp_dir().join(format!("ss-pcapport-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out_path = dir.join("out.pcap");
        let mut p = PcapPort::new("p", Some(&sample()), Some(&out_path), Pace::Fast).unwrap();
        let mut got = Vec::new();
        while !p.rx_finished() {
            p.rx_burst(0, &mut got, 32);
        }
        assert_eq!(got.len(), 70);
        assert_eq!(p.tx_burst(5, &mut got), 70);
        p.flush();
        assert_eq!(p.frames_written(), 70);
        let mut r = CaptureReader::open(&out_path).unwrap();
        let mut n = 0;
        while r.next_frame(|_| ()).unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, 70);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn recorded_pace_waits_for_the_gaps() {
        // Frames 20 and 21 of the sample are 1.59 s apart.
        let mut p = PcapPort::new("p", Some(&sample()), None, Pace::Recorded).unwrap();
        let mut got = Vec::new();
        let t0 = 1_000;
        p.rx_burst(t0, &mut got, 100);
        let first = got.len();
        assert!((1..70).contains(&first), "{first}");
        p.rx_burst(t0 + 10_000_000, &mut got, 100);
        assert!(got.len() < 21, "the 1.6 s gap is kept: {}", got.len());
        p.rx_burst(t0 + 10_000_000_000, &mut got, 100);
        assert_eq!(got.len(), 70);
        assert!(p.rx_finished());
    }

    #[test]
    fn missing_input_is_an_error() {
        assert!(PcapPort::new("p", Some(Path::new("/no/such.pcap")), None, Pace::Fast).is_err());
    }
}
