//! Capture files: a streaming reader for pcap and pcapng (through `pcap-parser`) and a small
//! pcap writer (nanosecond timestamps, Ethernet link type) whose files tshark and tcpdump read.
//!
//! Used by the capture decoder, the pcap port and the pcap-writing middleware; never on the
//! forwarding path of a live port.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

use pcap_parser::pcapng::Block;
use pcap_parser::traits::{PcapNGPacketBlock, PcapReaderIterator};
use pcap_parser::{create_reader, PcapBlockOwned, PcapError};

/// Link type of Ethernet frames (LINKTYPE_ETHERNET).
pub const LINKTYPE_ETHERNET: u32 = 1;

/// Why a capture could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// Opening, reading or writing failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The file is empty.
    #[error("the file is empty, not a pcap or pcapng capture")]
    Empty,
    /// The file starts with neither a pcap nor a pcapng header.
    #[error("not a pcap or pcapng capture (unrecognised file header)")]
    NotACapture,
    /// The file ends in the middle of a record.
    #[error("the capture is cut short after frame {after_frame}")]
    Truncated {
        /// Last frame read completely.
        after_frame: u64,
    },
    /// A record could not be parsed.
    #[error("corrupt capture after frame {after_frame}: {detail}")]
    Corrupt {
        /// Last frame read completely.
        after_frame: u64,
        /// What the parser said.
        detail: String,
    },
}

/// One captured frame, borrowed from the reader until the next call.
#[derive(Debug, Clone, Copy)]
pub struct CapturedFrame<'a> {
    /// Frame number, from 1, as tshark counts.
    pub number: u64,
    /// Capture timestamp in nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Length of the frame on the wire (may exceed `data.len()` when the capture was snapped).
    pub orig_len: u32,
    /// Link type of the interface the frame was captured on.
    pub linktype: u32,
    /// The captured bytes.
    pub data: &'a [u8],
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    linktype: u32,
    units_per_sec: u64,
    offset_sec: i64,
}

/// Streaming reader of pcap and pcapng files.
pub struct CaptureReader {
    inner: Box<dyn PcapReaderIterator + Send>,
    legacy: Interface,
    interfaces: Vec<Interface>,
    frames: u64,
}

impl CaptureReader {
    /// Opens a capture file.
    ///
    /// # Errors
    /// [`CaptureError`] when the file cannot be opened or has no pcap/pcapng header.
    pub fn open(path: impl AsRef<Path>) -> Result<CaptureReader, CaptureError> {
        Self::from_reader(File::open(path)?)
    }

    /// Reads a capture from any byte stream.
    ///
    /// # Errors
    /// [`CaptureError`] when the stream has no pcap/pcapng header.
    pub fn from_reader(r: impl Read + Send + 'static) -> Result<CaptureReader, CaptureError> {
        let inner = create_reader(1 << 16, r).map_err(|e| match e {
            PcapError::Eof => CaptureError::Empty,
            PcapError::ReadError => CaptureError::Io(io::Error::other("read failed")),
            _ => CaptureError::NotACapture,
        })?;
        Ok(CaptureReader {
            inner,
            legacy: Interface {
                linktype: LINKTYPE_ETHERNET,
                units_per_sec: 1_000_000,
                offset_sec: 0,
            },
            interfaces: Vec::new(),
            frames: 0,
        })
    }

    /// Frames returned so far.
    pub fn frames_read(&self) -> u64 {
        self.frames
    }

    /// Calls `f` on the next frame and returns its result, or `None` at the end of the file.
    ///
    /// # Errors
    /// [`CaptureError`] on a truncated or corrupt record.
    pub fn next_frame<R>(
        &mut self,
        f: impl FnOnce(&CapturedFrame<'_>) -> R,
    ) -> Result<Option<R>, CaptureError> {
        let mut f = Some(f);
        loop {
            let (consumed, out) = match self.inner.next() {
                Ok((consumed, block)) => {
                    let frame = match &block {
                        PcapBlockOwned::LegacyHeader(h) => {
                            self.legacy = Interface {
                                linktype: h.network.0 as u32,
                                units_per_sec: if h.is_nanosecond_precision() {
                                    1_000_000_000
                                } else {
                                    1_000_000
                                },
                                offset_sec: 0,
                            };
                            None
                        }
                        PcapBlockOwned::Legacy(b) => Some(CapturedFrame {
                            number: self.frames + 1,
                            ts_ns: u64::from(b.ts_sec) * 1_000_000_000
                                + u64::from(b.ts_usec)
                                    * (1_000_000_000 / self.legacy.units_per_sec),
                            orig_len: b.origlen,
                            linktype: self.legacy.linktype,
                            data: b.data,
                        }),
                        PcapBlockOwned::NG(Block::SectionHeader(_)) => {
                            self.interfaces.clear();
                            None
                        }
                        PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                            self.interfaces.push(Interface {
                                linktype: idb.linktype.0 as u32,
                                units_per_sec: idb.ts_resolution().unwrap_or(1_000_000),
                                offset_sec: idb.ts_offset(),
                            });
                            None
                        }
                        PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                            let ifc = self
                                .interfaces
                                .get(epb.if_id as usize)
                                .copied()
                                .ok_or_else(|| CaptureError::Corrupt {
                                    after_frame: self.frames,
                                    detail: format!(
                                        "packet names interface {} that was never described",
                                        epb.if_id
                                    ),
                                })?;
                            let ticks = (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low);
                            Some(CapturedFrame {
                                number: self.frames + 1,
                                ts_ns: ticks_to_ns(ticks, ifc),
                                orig_len: epb.origlen,
                                linktype: ifc.linktype,
                                data: epb.packet_data(),
                            })
                        }
                        PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
                            let ifc = self.interfaces.first().copied().unwrap_or(self.legacy);
                            Some(CapturedFrame {
                                number: self.frames + 1,
                                ts_ns: 0,
                                orig_len: spb.origlen,
                                linktype: ifc.linktype,
                                data: spb.packet_data(),
                            })
                        }
                        PcapBlockOwned::NG(_) => None,
                    };
                    let out = frame.map(|fr| {
                        let call = f.take().expect("called once: we return right after");
                        call(&fr)
                    });
                    (consumed, out)
                }
                Err(PcapError::Eof) => return Ok(None),
                Err(PcapError::Incomplete(_)) => {
                    self.refill()?;
                    continue;
                }
                Err(PcapError::UnexpectedEof) => {
                    return Err(CaptureError::Truncated {
                        after_frame: self.frames,
                    })
                }
                Err(e) => {
                    return Err(CaptureError::Corrupt {
                        after_frame: self.frames,
                        detail: format!("{e:?}"),
                    })
                }
            };
            self.inner.consume(consumed);
            if out.is_some() {
                self.frames += 1;
                return Ok(out);
            }
        }
    }

    fn refill(&mut self) -> Result<(), CaptureError> {
        let before = self.inner.consumed();
        match self.inner.refill() {
            Ok(()) => Ok(()),
            Err(PcapError::BufferTooSmall) => {
                // A record larger than the buffer: grow (up to 16 MiB, far above any snaplen).
                if self.inner.grow(1 << 24) {
                    Ok(())
                } else {
                    Err(CaptureError::Corrupt {
                        after_frame: self.frames,
                        detail: "record larger than 16 MiB".into(),
                    })
                }
            }
            Err(PcapError::Eof) | Err(PcapError::UnexpectedEof) => Err(CaptureError::Truncated {
                after_frame: self.frames,
            }),
            Err(e) => Err(CaptureError::Corrupt {
                after_frame: self.frames,
                detail: format!("{e:?} (at byte {before})"),
            }),
        }
    }
}

fn ticks_to_ns(ticks: u64, ifc: Interface) -> u64 {
    let per = ifc.units_per_sec.max(1);
    let secs = ticks / per;
    let frac = ticks % per;
    let frac_ns = (u128::from(frac) * 1_000_000_000 / u128::from(per)) as u64;
    (secs as i64).saturating_add(ifc.offset_sec).max(0) as u64 * 1_000_000_000 + frac_ns
}

/// Writes a classic pcap file with nanosecond timestamps and the Ethernet link type.
pub struct PcapWriter<W: Write> {
    out: W,
    frames: u64,
}

impl PcapWriter<BufWriter<File>> {
    /// Creates (or truncates) a pcap file.
    ///
    /// # Errors
    /// I/O errors from creating the file or writing the header.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, CaptureError> {
        Self::new(BufWriter::new(File::create(path)?))
    }
}

impl<W: Write> PcapWriter<W> {
    /// Snap length written into the header.
    pub const SNAPLEN: u32 = 262_144;

    /// Writes the file header to `out`.
    ///
    /// # Errors
    /// I/O errors from writing the header.
    pub fn new(mut out: W) -> Result<Self, CaptureError> {
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&0xa1b2_3c4du32.to_le_bytes()); // nanosecond magic
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        h[16..20].copy_from_slice(&Self::SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out, frames: 0 })
    }

    /// Appends one frame captured at `ts_ns` (nanoseconds since the epoch). Frames longer than
    /// the snap length are cut to it, with their original length recorded.
    ///
    /// # Errors
    /// I/O errors from writing.
    pub fn write_frame(&mut self, ts_ns: u64, frame: &[u8]) -> Result<(), CaptureError> {
        let cap = frame.len().min(Self::SNAPLEN as usize);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&(cap as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(&frame[..cap])?;
        self.frames += 1;
        Ok(())
    }

    /// Frames written so far.
    pub fn frames_written(&self) -> u64 {
        self.frames
    }

    /// Flushes buffered output.
    ///
    /// # Errors
    /// I/O errors from flushing.
    pub fn flush(&mut self) -> Result<(), CaptureError> {
        self.out.flush()?;
        Ok(())
    }

    /// Flushes and returns the underlying writer.
    ///
    /// # Errors
    /// I/O errors from flushing.
    pub fn into_inner(mut self) -> Result<W, CaptureError> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn read_all(bytes: Vec<u8>) -> Result<Vec<(u64, u64, Vec<u8>)>, CaptureError> {
        let mut r = CaptureReader::from_reader(Cursor::new(bytes))?;
        let mut out = Vec::new();
        while let Some(f) = r.next_frame(|f| (f.number, f.ts_ns, f.data.to_vec()))? {
            out.push(f);
        }
        Ok(out)
    }

    #[test]
    fn writes_what_it_reads() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_frame(1_700_000_000_123_456_789, &[1, 2, 3])
            .unwrap();
        w.write_frame(1_700_000_001_000_000_001, &[4; 100]).unwrap();
        let bytes = w.into_inner().unwrap();
        let frames = read_all(bytes).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0], (1, 1_700_000_000_123_456_789, vec![1, 2, 3]));
        assert_eq!(frames[1].0, 2);
        assert_eq!(frames[1].1, 1_700_000_001_000_000_001);
    }

    #[test]
    fn bad_files_are_errors() {
        assert!(matches!(read_all(vec![]), Err(CaptureError::Empty)));
        assert!(matches!(
            read_all(b"hello, this is not a capture file at all".to_vec()),
            Err(CaptureError::NotACapture)
        ));
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_frame(0, &[9; 64]).unwrap();
        let mut bytes = w.into_inner().unwrap();
        bytes.truncate(bytes.len() - 10);
        assert!(matches!(
            read_all(bytes),
            Err(CaptureError::Truncated { after_frame: 0 })
        ));
    }

    #[test]
    fn reads_a_soft_roce_capture() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/rxe-rc-ops.pcap");
        let mut r = CaptureReader::open(path).unwrap();
        let mut n = 0;
        while r
            .next_frame(|f| assert_eq!(f.linktype, LINKTYPE_ETHERNET))
            .unwrap()
            .is_some()
        {
            n += 1;
        }
        assert_eq!(n, 70);
    }
}
