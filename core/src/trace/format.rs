//! Reading RAPIDS RMM's CSV log format (`Thread,Time,Action,Pointer,Size,Stream`),
//! plain or gzip, streamed and validated: every error names its line.

use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::PointerMap;

/// The header every RMM log starts with.
pub const HEADER: &str = "Thread,Time,Action,Pointer,Size,Stream";

/// Why a trace could not be read. Line numbers count from 1, the header being line 1.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read (a gzip stream that breaks off
    /// or is corrupt is a [`TraceError::Row`] at the line it stops in).
    #[error("{path}: cannot read the trace: {error}")]
    Io {
        /// The file.
        path: String,
        /// What the OS or decompressor said (in the message, so not also
        /// the error's `source()`: a report of the chain says it once).
        error: std::io::Error,
    },
    /// The first line is not the RMM header.
    #[error("{path}: line 1: expected the RMM header `{HEADER}`, found `{found}`")]
    Header {
        /// The file.
        path: String,
        /// The header found.
        found: String,
    },
    /// A row is malformed.
    #[error("{path}: line {line}: {why}")]
    Row {
        /// The file.
        path: String,
        /// Line number.
        line: u64,
        /// What is wrong.
        why: String,
    },
    /// The trace holds no allocation.
    #[error("{path}: the trace holds no allocation")]
    Empty {
        /// The file.
        path: String,
    },
    /// The trace goes on past the most rows its reader was given
    /// ([`Trace::from_bytes_at_most`]): rows read, kept or skipped.
    #[error("{path}: more than {max} rows, the most this reader takes")]
    TooManyRows {
        /// The file.
        path: String,
        /// The most rows allowed.
        max: usize,
    },
}

/// What a trace row does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// `allocate`.
    Allocate,
    /// `free` or `deallocate`.
    Free,
}

/// One row of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEvent {
    /// Allocate or free.
    pub action: Action,
    /// The pointer, as logged; reused after it is freed.
    pub pointer: u64,
    /// Bytes.
    pub size: u64,
    /// Line in the file (for messages).
    pub line: u64,
}

/// A validated trace: every free matches a live allocation, sizes are positive.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Trace {
    /// A name (the file stem).
    pub name: String,
    /// The events in order.
    pub events: Vec<TraceEvent>,
    /// `allocate failure` rows skipped.
    pub skipped_failures: u64,
    /// Peak of live requested bytes over the trace.
    pub peak_live: u64,
    /// Largest single allocation.
    pub largest: u64,
}

fn parse_u64(field: &str, what: &str) -> Result<u64, String> {
    let f = field.trim();
    let r = if let Some(hex) = f.strip_prefix("0x").or_else(|| f.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16)
    } else {
        f.parse::<u64>()
    };
    r.map_err(|_| format!("{what} `{f}` is not a non-negative integer"))
}

/// Which rows of a log the reader keeps, by their `Stream` column.
enum Streams<'a> {
    /// Every row; the column is not read (PyTorch's and RMM's logs hold
    /// stream pointers of their own).
    All,
    /// The rows of this stream.
    Only(u64),
    /// Every row, noting each stream as it first appears.
    Seen(&'a mut Vec<u64>),
}

/// The longest line the reader accepts. An RMM log row is about 60 bytes; a
/// longer line means the wrong file, and is refused without reading it whole.
pub const MAX_LINE: usize = 64 * 1024;

/// Counts lines as bytes pass through, and fails the read once a line grows
/// past [`MAX_LINE`], so a file with a 1 GB line costs 64 KiB, not 1 GB.
/// Turns a lone CR (old Mac files) into LF and drops the CR of a CRLF, so
/// lines end in LF alone: its count and the CSV reader's agree. Notes the
/// line where the stream under it broke off (a truncated gzip).
struct LineLimit<R> {
    inner: R,
    line: u64,
    run: usize,
    /// The last byte read was a CR (now an LF): an LF next is its pair.
    after_cr: bool,
    too_long: std::rc::Rc<std::cell::Cell<Option<u64>>>,
    broke_at: std::rc::Rc<std::cell::Cell<Option<u64>>>,
}

impl<R> LineLimit<R> {
    /// Counts the lines of `data`, which holds no CR and does not follow
    /// one: it passes through as it is. Finds the line ends with `memchr`
    /// (a trace is read through here byte for byte otherwise, a quarter of
    /// the harness's time replaying one).
    fn pass_lf_only(&mut self, data: &[u8]) -> std::io::Result<()> {
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', data) {
            self.check_run(end - start)?;
            self.line += 1;
            self.run = 0;
            start = end + 1;
        }
        self.check_run(data.len() - start)
    }

    /// Adds `bytes` to the current line's length: past [`MAX_LINE`], the
    /// line is too long.
    fn check_run(&mut self, bytes: usize) -> std::io::Result<()> {
        self.run += bytes;
        if self.run > MAX_LINE {
            self.too_long.set(Some(self.line));
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "line too long",
            ));
        }
        Ok(())
    }

    /// Turns the CRs of `buf[..n]` into LFs and drops the LF of each CRLF,
    /// in place, counting lines: the bytes kept.
    fn rewrite_crs(&mut self, buf: &mut [u8], n: usize) -> std::io::Result<usize> {
        let mut kept = 0;
        for i in 0..n {
            let mut b = buf[i];
            let after_cr = std::mem::replace(&mut self.after_cr, b == b'\r');
            if b == b'\n' && after_cr {
                continue;
            }
            if b == b'\r' {
                b = b'\n';
            }
            buf[kept] = b;
            kept += 1;
            if b == b'\n' {
                self.line += 1;
                self.run = 0;
            } else {
                self.check_run(1)?;
            }
        }
        Ok(kept)
    }
}

impl<R: Read> Read for LineLimit<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let n = self.inner.read(buf).inspect_err(|_| {
                self.broke_at.set(Some(self.line));
            })?;
            let kept = if !self.after_cr && memchr::memchr(b'\r', &buf[..n]).is_none() {
                self.pass_lf_only(&buf[..n])?;
                n
            } else {
                self.rewrite_crs(buf, n)?
            };
            // Only the LF of a CRLF whose CR came in the last read: read
            // on (0 would say the file ended).
            if kept > 0 || n == 0 {
                return Ok(kept);
            }
        }
    }
}

/// The decompressor under a gzip trace, its errors marked as the stream's
/// (a truncated or corrupt file), not the OS's.
struct Decompressing<R>(R);

/// An error of the compressed stream itself.
#[derive(Debug)]
struct StreamBroken(std::io::Error);

impl std::fmt::Display for StreamBroken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for StreamBroken {}

impl<R: Read> Read for Decompressing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf).map_err(|e| {
            let kind = e.kind();
            // The OS's own errors under the decompressor stay the OS's.
            if e.raw_os_error().is_some() {
                e
            } else {
                std::io::Error::new(kind, StreamBroken(e))
            }
        })
    }
}

/// `x` rounded up to PyTorch's 512-byte granularity, at least 512, held at
/// the largest such multiple where it would overflow (`as u64` already held
/// a product past `u64::MAX` at `u64::MAX`).
fn granule(x: u64) -> u64 {
    crate::round_up(x, 512).max(512)
}

impl Trace {
    /// Reads a trace file, plain or gzip-compressed (detected by its magic
    /// bytes), streaming: memory grows with the events, not with the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Trace, TraceError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|error| TraceError::Io {
            path: shown.clone(),
            error,
        })?;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(|n| {
                n.trim_end_matches(".gz")
                    .trim_end_matches(".csv")
                    .to_string()
            })
            .unwrap_or_else(|| shown.clone());
        Self::from_reader(&name, file).map_err(|e| match e {
            // Name the file the user gave, not its stem, when it cannot be read.
            TraceError::Io { error, .. } => TraceError::Io { path: shown, error },
            e => e,
        })
    }

    /// Parses a trace from bytes, plain or gzip.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<Trace, TraceError> {
        Self::from_reader(name, bytes)
    }

    /// [`Trace::from_bytes`], refusing a trace of more than `max_rows` rows
    /// (events, and rows a trace skips such as `allocate failure`) as soon as
    /// it reads one more ([`TraceError::TooManyRows`]):
    /// a few MB of gzip can hold GBs of rows, and a reader with bounded
    /// memory (a browser tab) must stop before it runs out.
    ///
    /// ```
    /// use vrampool::Trace;
    /// use vrampool::trace::TraceError;
    /// let csv = "Thread,Time,Action,Pointer,Size,Stream\n\
    ///            0,0,allocate,0x10,4096,0x0\n0,0,free,0x10,4096,0x0\n";
    /// assert_eq!(Trace::from_bytes_at_most("t", csv.as_bytes(), 2)?.events.len(), 2);
    /// let refused = Trace::from_bytes_at_most("t", csv.as_bytes(), 1);
    /// assert!(matches!(refused, Err(TraceError::TooManyRows { max: 1, .. })));
    /// # Ok::<(), TraceError>(())
    /// ```
    pub fn from_bytes_at_most(
        name: &str,
        bytes: &[u8],
        max_rows: usize,
    ) -> Result<Trace, TraceError> {
        Self::from_reader_at_most(name, bytes, max_rows)
    }

    /// Parses a trace from any reader, plain or gzip (detected by its magic
    /// bytes), streaming. `name` is used in messages.
    pub fn from_reader(name: &str, reader: impl Read) -> Result<Trace, TraceError> {
        Self::from_reader_at_most(name, reader, usize::MAX)
    }

    fn from_reader_at_most(
        name: &str,
        reader: impl Read,
        max_rows: usize,
    ) -> Result<Trace, TraceError> {
        use std::io::BufRead;
        let io = |error| TraceError::Io {
            path: name.to_string(),
            error,
        };
        let mut reader = std::io::BufReader::new(reader);
        // gzip's two magic bytes, which a reader may hand over one at a time
        // (a pipe): read until there are two or the input ends, then put
        // them back in front.
        let mut magic = Vec::with_capacity(2);
        while magic.len() < 2 {
            let buf = reader.fill_buf().map_err(io)?;
            if buf.is_empty() {
                break;
            }
            let n = buf.len().min(2 - magic.len());
            magic.extend_from_slice(&buf[..n]);
            reader.consume(n);
        }
        let gzip = magic == [0x1f, 0x8b];
        let reader = std::io::Cursor::new(magic).chain(reader);
        if gzip {
            Self::parse_reader(
                name,
                &mut Decompressing(flate2::read::MultiGzDecoder::new(reader)),
                &mut Streams::All,
                max_rows,
            )
        } else {
            Self::parse_reader(name, &mut { reader }, &mut Streams::All, max_rows)
        }
    }

    /// Parses plain CSV text.
    pub fn parse(name: &str, text: &[u8]) -> Result<Trace, TraceError> {
        Self::parse_reader(name, &mut { text }, &mut Streams::All, usize::MAX)
    }

    /// Parses the rows of one stream of plain CSV text (the `Stream` column:
    /// a CUDA stream in PyTorch's and RMM's logs, the pool a request went to
    /// in an engine's recording, see [`PoolKey`](crate::trace::PoolKey)),
    /// checking its rows as [`Trace::parse`] does (other streams' rows only
    /// for their column count, action and stream, and their `allocate failure` rows are
    /// counted in [`Trace::skipped_failures`] too). A stream with no
    /// allocation is [`TraceError::Empty`].
    ///
    /// ```
    /// use vrampool::Trace;
    /// let csv = "Thread,Time,Action,Pointer,Size,Stream\n\
    ///            0,0,allocate,0x10,4096,0x0\n0,0,allocate,0x20,8192,0x7\n\
    ///            0,0,free,0x10,4096,0x0\n0,0,free,0x20,8192,0x7\n";
    /// assert_eq!(Trace::streams("log", csv.as_bytes())?, vec![0, 7]);
    /// let seven = Trace::parse_stream("log", csv.as_bytes(), 7)?;
    /// assert_eq!((seven.events.len(), seven.peak_live), (2, 8192));
    /// # Ok::<(), vrampool::trace::TraceError>(())
    /// ```
    pub fn parse_stream(name: &str, text: &[u8], stream: u64) -> Result<Trace, TraceError> {
        Self::parse_reader(name, &mut { text }, &mut Streams::Only(stream), usize::MAX)
    }

    /// The distinct values of the `Stream` column of plain CSV text, in the
    /// order they first appear (every row checked as [`Trace::parse`] does;
    /// `name` is used in messages).
    pub fn streams(name: &str, text: &[u8]) -> Result<Vec<u64>, TraceError> {
        let mut seen = Vec::new();
        Self::parse_reader(
            name,
            &mut { text },
            &mut Streams::Seen(&mut seen),
            usize::MAX,
        )?;
        Ok(seen)
    }

    /// One body for every source (the reader taken as `dyn Read`: the
    /// parser is the page's largest function, and a copy a source made the
    /// wasm larger).
    fn parse_reader(
        name: &str,
        text: &mut dyn Read,
        streams: &mut Streams<'_>,
        max_rows: usize,
    ) -> Result<Trace, TraceError> {
        let too_long = std::rc::Rc::new(std::cell::Cell::new(None));
        let broke_at = std::rc::Rc::new(std::cell::Cell::new(None));
        let text = LineLimit {
            inner: text,
            line: 1,
            run: 0,
            after_cr: false,
            too_long: too_long.clone(),
            broke_at: broke_at.clone(),
        };
        // No quoting: an RMM log quotes nothing, and a stray `"` would make
        // the reader gather every line after it into one field.
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(true)
            .flexible(true)
            .quoting(false)
            .from_reader(text);
        // A read error is a line too long, a broken gzip stream, or the OS.
        let read_err = |e: csv::Error, fallback_line: u64| {
            if let Some(line) = too_long.get() {
                return TraceError::Row {
                    path: name.to_string(),
                    line,
                    why: format!(
                        "line longer than {} KiB (an RMM log row is about 60 bytes): is this an RMM log?",
                        MAX_LINE / 1024
                    ),
                };
            }
            let line = e.position().map_or(fallback_line, |p| p.line());
            let why = e.to_string();
            match e.into_kind() {
                // The decompressor's errors: the file ends, or turns to
                // noise, part way.
                csv::ErrorKind::Io(error)
                    if error.get_ref().is_some_and(|e| e.is::<StreamBroken>()) =>
                {
                    TraceError::Row {
                        path: name.to_string(),
                        line: broke_at.get().unwrap_or(line),
                        why: format!(
                            "the compressed stream breaks off here ({error}): the file is truncated \
                             or corrupt; copy or download it again"
                        ),
                    }
                }
                csv::ErrorKind::Io(error) => TraceError::Io {
                    path: name.to_string(),
                    error,
                },
                _ => TraceError::Row {
                    path: name.to_string(),
                    line,
                    why,
                },
            }
        };
        let row_err = |line: u64, why: String| TraceError::Row {
            path: name.to_string(),
            line,
            why,
        };
        let headers = rdr.headers().map_err(|e| read_err(e, 1))?.clone();
        // A byte-order mark (Excel's "CSV UTF-8") is no part of the first name.
        let cols: Vec<&str> = headers
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 {
                    c.trim_start_matches('\u{feff}')
                } else {
                    c
                }
            })
            .map(str::trim)
            .collect();
        if cols != HEADER.split(',').collect::<Vec<_>>() {
            return Err(TraceError::Header {
                path: name.to_string(),
                found: cols.join(","),
            });
        }
        let mut trace = Trace {
            name: name.to_string(),
            ..Default::default()
        };
        let mut live: PointerMap<u64, u64> = PointerMap::default();
        let mut cur = 0u64;
        let mut record = csv::StringRecord::new();
        let mut rows = 0usize;
        loop {
            let more = rdr.read_record(&mut record).map_err(|e| read_err(e, 0))?;
            if !more {
                break;
            }
            rows += 1;
            if rows > max_rows {
                return Err(TraceError::TooManyRows {
                    path: name.to_string(),
                    max: max_rows,
                });
            }
            let line = record.position().map_or(0, |p| p.line());
            if record.len() != 6 {
                return Err(row_err(
                    line,
                    format!("expected 6 columns ({HEADER}), found {}", record.len()),
                ));
            }
            let action = match record[2].trim() {
                "allocate" => Action::Allocate,
                "free" | "deallocate" => Action::Free,
                "allocate failure" => {
                    trace.skipped_failures += 1;
                    continue;
                }
                other => {
                    return Err(row_err(
                        line,
                        format!(
                            "unknown action `{other}` (expected allocate, free, deallocate or allocate failure)"
                        ),
                    ));
                }
            };
            if !matches!(streams, Streams::All) {
                let stream = parse_u64(&record[5], "stream").map_err(|w| row_err(line, w))?;
                match streams {
                    Streams::Only(keep) if stream != *keep => continue,
                    Streams::Seen(seen) if !seen.contains(&stream) => seen.push(stream),
                    _ => {}
                }
            }
            let pointer = parse_u64(&record[3], "pointer").map_err(|w| row_err(line, w))?;
            let size = parse_u64(&record[4], "size").map_err(|w| row_err(line, w))?;
            let size = match action {
                Action::Allocate => {
                    if size == 0 {
                        return Err(row_err(line, "allocation of size 0".into()));
                    }
                    if live.insert(pointer, size).is_some() {
                        return Err(row_err(
                            line,
                            format!("pointer {pointer:#x} allocated again before it was freed"),
                        ));
                    }
                    cur = cur.checked_add(size).ok_or_else(|| {
                        row_err(
                            line,
                            "live bytes exceed 2^64: are the sizes in bytes?".into(),
                        )
                    })?;
                    trace.peak_live = trace.peak_live.max(cur);
                    trace.largest = trace.largest.max(size);
                    size
                }
                Action::Free => {
                    let Some(s) = live.remove(&pointer) else {
                        return Err(row_err(
                            line,
                            format!(
                                "free of pointer {pointer:#x}, which is not live (never allocated, or freed twice)"
                            ),
                        ));
                    };
                    cur -= s;
                    s
                }
            };
            trace.events.push(TraceEvent {
                action,
                pointer,
                size,
                line,
            });
        }
        if trace.peak_live == 0 {
            return Err(TraceError::Empty {
                path: name.to_string(),
            });
        }
        Ok(trace)
    }

    /// Number of allocations.
    pub fn allocations(&self) -> usize {
        self.events
            .iter()
            .filter(|e| e.action == Action::Allocate)
            .count()
    }

    /// Returns a copy with every size divided by `scale` (at least 1 byte), so a
    /// trace larger than a device can run on it.
    pub fn scaled(&self, scale: u64) -> Trace {
        let scale = scale.max(1);
        self.map_sizes(|s| (s / scale).max(1))
    }

    /// Returns a copy with every size multiplied by `factor` and rounded up to
    /// PyTorch's 512-byte granularity: the same workload with bigger or smaller
    /// tensors (a batch size ×1.1, say), to check a policy is not tuned to one
    /// exact set of sizes. A size a factor takes past what a `u64` counts is
    /// held at the largest it can (so [`Trace::largest`] says it fits no
    /// buffer), never wrapped round to a small one.
    pub fn resized(&self, factor: f64) -> Trace {
        self.map_sizes(|s| granule((s as f64 * factor).ceil() as u64))
    }

    /// Returns a copy with every distinct size multiplied by its own factor in
    /// `1 ± spread`, drawn from a hash of the size and `seed`, and rounded up
    /// to 512 bytes: the same workload with the ratios between its tensor
    /// sizes changed (every tensor of one size still gets one new size), to
    /// check a policy is not tuned to them. [`Trace::resized`] keeps the
    /// ratios.
    ///
    /// ```
    /// use vrampool::trace::{Action, Trace, TraceEvent};
    /// let ev = |action, pointer, size| TraceEvent { action, pointer, size, line: 0 };
    /// let t = Trace {
    ///     events: vec![ev(Action::Allocate, 1, 1 << 20), ev(Action::Allocate, 2, 1 << 20),
    ///                  ev(Action::Allocate, 3, 3 << 20)],
    ///     ..Trace::default()
    /// };
    /// let j = t.jittered(0.1, 7);
    /// let sizes: Vec<u64> = j.events.iter().map(|e| e.size).collect();
    /// assert_eq!(sizes[0], sizes[1]); // one size, one new size
    /// for (new, old) in sizes.iter().zip([1u64 << 20, 1 << 20, 3 << 20]) {
    ///     let f = *new as f64 / old as f64;
    ///     assert!((0.9..=1.1 + 512.0 / old as f64).contains(&f) && new % 512 == 0);
    /// }
    /// assert_eq!(j.peak_live, sizes.iter().sum::<u64>());
    /// assert_eq!(t.jittered(0.1, 7).events[2].size, sizes[2]); // the same seed, the same sizes
    /// ```
    pub fn jittered(&self, spread: f64, seed: u64) -> Trace {
        self.map_sizes(|s| {
            // splitmix64 of (size, seed): a fixed, well-spread hash.
            let mut h = s ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            h ^= h >> 31;
            let u = (h >> 11) as f64 / (1u64 << 53) as f64;
            granule((s as f64 * (1.0 + spread * (2.0 * u - 1.0))).ceil() as u64)
        })
    }

    fn map_sizes(&self, f: impl Fn(u64) -> u64) -> Trace {
        let mut t = self.clone();
        let (mut cur, mut peak, mut largest) = (0u64, 0u64, 0u64);
        for e in &mut t.events {
            e.size = f(e.size);
            match e.action {
                Action::Allocate => {
                    cur = cur.saturating_add(e.size);
                    peak = peak.max(cur);
                    largest = largest.max(e.size);
                }
                Action::Free => cur = cur.saturating_sub(e.size),
            }
        }
        t.peak_live = peak;
        t.largest = largest;
        t
    }
}
