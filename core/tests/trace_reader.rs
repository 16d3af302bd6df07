//! The RMM CSV reader: good logs parse, bad ones give one clear error naming the line.

use std::io::Write;
use vrampool::{Trace, trace::TraceError};

const H: &str = "Thread,Time,Action,Pointer,Size,Stream\n";

fn parse(body: &str) -> Result<Trace, TraceError> {
    Trace::parse("t", format!("{H}{body}").as_bytes())
}

fn err(body: &str) -> String {
    parse(body).unwrap_err().to_string()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

#[test]
fn a_good_log_parses_with_its_peak() {
    let t = parse(
        "0,1.0,allocate,0x10,1000,0x0\n0,1.1,allocate,0x20,500,0x0\n0,1.2,free,0x10,1000,0x0\n\
         0,1.3,allocate failure,0x0,99999,0x0\n0,1.4,deallocate,0x20,500,0x0\n0,1.5,allocate,0x10,7,0x0\n",
    )
    .unwrap();
    assert_eq!(t.events.len(), 5);
    assert_eq!(t.peak_live, 1500);
    assert_eq!(t.largest, 1000);
    assert_eq!(t.skipped_failures, 1);
    assert_eq!(t.allocations(), 3);
    let s = t.scaled(10);
    assert_eq!((s.peak_live, s.largest), (150, 100));
}

#[test]
fn gzip_and_plain_read_the_same() {
    let text = format!("{H}0,1,allocate,0x10,4096,0x0\n0,2,free,0x10,4096,0x0\n");
    let gz = gzip(text.as_bytes());
    let a = Trace::from_bytes("plain", text.as_bytes()).unwrap();
    let b = Trace::from_bytes("gz", &gz).unwrap();
    assert_eq!(a.events, b.events);
    // Truncated gzip: an error naming the line and what to do, not a panic,
    // a silent short trace, or the decompressor's words alone.
    let e = Trace::from_bytes("cut", &gz[..gz.len() / 2]).unwrap_err();
    assert!(matches!(e, TraceError::Row { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("line") && msg.contains("truncated"), "{msg}");
    // Cut far into a long file: the line is where it broke off.
    let mut text = H.to_string();
    for i in 0..20_000u64 {
        text += &format!("0,{i},allocate,{:#x},4096,0x0\n", 0x10 + i * 0x1000);
    }
    let gz = gzip(text.as_bytes());
    let e = Trace::from_bytes("long", &gz[..gz.len() * 3 / 4]).unwrap_err();
    let TraceError::Row { line, .. } = e else {
        panic!("{e}")
    };
    assert!(line > 100, "broke off at line {line}");
}

/// A reader that hands over one byte a read, as a pipe may.
struct OneByteAtATime<'a>(&'a [u8]);

impl std::io::Read for OneByteAtATime<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let Some((&first, rest)) = self.0.split_first() else {
            return Ok(0);
        };
        let Some(out) = buf.first_mut() else {
            return Ok(0);
        };
        *out = first;
        self.0 = rest;
        Ok(1)
    }
}

#[test]
fn gzip_is_told_from_plain_text_by_a_reader_that_gives_a_byte_at_a_time() {
    // gzip's two magic bytes in two reads: it was read as plain text then.
    let text = format!("{H}0,1,allocate,0x10,4096,0x0\n0,2,free,0x10,4096,0x0\n");
    let gz = gzip(text.as_bytes());
    let want = Trace::from_bytes("plain", text.as_bytes()).unwrap().events;
    let b = Trace::from_reader("gz", OneByteAtATime(&gz)).unwrap();
    assert_eq!(b.events, want);
    let a = Trace::from_reader("plain", OneByteAtATime(text.as_bytes())).unwrap();
    assert_eq!(a.events, want);
    // Shorter than the magic: read as what it is.
    assert!(matches!(
        Trace::from_reader("one", OneByteAtATime(&[0x1f])),
        Err(TraceError::Header { .. })
    ));
    assert!(matches!(
        Trace::from_reader("none", OneByteAtATime(&[])),
        Err(TraceError::Header { .. })
    ));
}

#[test]
fn a_byte_order_mark_before_the_header_is_no_part_of_it() {
    // Excel's "CSV UTF-8" starts with one: it read as a header that looked
    // right and was refused.
    for end in ["\n", "\r\n"] {
        let text = format!(
            "\u{feff}{}{end}0,1,allocate,0x10,4096,0x0{end}0,2,free,0x10,4096,0x0{end}",
            H.trim_end()
        );
        for bytes in [text.as_bytes().to_vec(), gzip(text.as_bytes())] {
            let t = Trace::from_bytes("bom", &bytes).unwrap();
            assert_eq!((t.events.len(), t.peak_live), (2, 4096), "{end:?}");
        }
    }
    // Only before the first name: one inside the header is still refused.
    let text = "Thread,Time,\u{feff}Action,Pointer,Size,Stream\n";
    assert!(Trace::from_bytes("bom", text.as_bytes()).is_err());
}

#[test]
fn a_file_with_cr_line_ends_reads_as_one_with_lf() {
    // Excel's "CSV (Macintosh)": lines end in a lone CR. Over 64 KiB, the
    // line-length guard took the whole file for one line.
    let rows: Vec<String> = std::iter::once(H.trim_end().to_string())
        .chain((0..2000u64).flat_map(|i| {
            let p = 0x10 + i * 0x1000;
            [
                format!("0,{i},allocate,{p:#x},4096,0x0"),
                format!("0,{i},free,{p:#x},4096,0x0"),
            ]
        }))
        .collect();
    let t = Trace::from_bytes("mac", rows.join("\r").as_bytes()).unwrap();
    assert_eq!(t.events.len(), 4000);
    // Its lines are counted as such: a bad size on the fourth line says so,
    // in a CR file as in a CRLF one.
    for end in ["\r", "\r\n"] {
        let text = [
            H.trim_end(),
            "0,0,allocate,0x10,4096,0x0",
            "0,1,free,0x10,4096,0x0",
            "0,2,allocate,0x10,abc,0x0",
        ]
        .join(end);
        let e = Trace::from_bytes("bad", text.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 4: size `abc`"), "{end:?}: {e}");
    }
}

#[test]
fn bad_logs_name_the_line_and_the_problem() {
    let cases = [
        (
            "0,1,allocate,0x10,abc,0x0\n",
            "line 2: size `abc` is not a non-negative integer",
        ),
        (
            "0,1,allocate,0x10,-5,0x0\n",
            "line 2: size `-5` is not a non-negative integer",
        ),
        ("0,1,allocate,zz,5,0x0\n", "line 2: pointer `zz`"),
        ("0,1,allocate,0x10,0,0x0\n", "line 2: allocation of size 0"),
        ("0,1,grow,0x10,5,0x0\n", "line 2: unknown action `grow`"),
        (
            "0,1,allocate,0x10,5,0x0\n0,1,free,0x99,5,0x0\n",
            "line 3: free of pointer 0x99, which is not live",
        ),
        (
            "0,1,allocate,0x10,5,0x0\n0,1,free,0x10,5,0x0\n0,1,free,0x10,5,0x0\n",
            "line 4: free of pointer 0x10",
        ),
        (
            "0,1,allocate,0x10,5,0x0\n0,1,allocate,0x10,5,0x0\n",
            "line 3: pointer 0x10 allocated again",
        ),
        ("0,1,allocate,0x10,5\n", "line 2: expected 6 columns"),
        ("", "holds no allocation"),
    ];
    for (body, want) in cases {
        let got = err(body);
        assert!(
            got.contains(want),
            "for {body:?}: got `{got}`, want `{want}`"
        );
    }
    let e = Trace::parse("t", b"a,b,c\n0,1,2\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 1: expected the RMM header"), "{e}");
}

#[test]
fn a_missing_file_names_the_path() {
    let e = Trace::open("/nonexistent/trace.csv")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("/nonexistent/trace.csv: cannot read the trace:"),
        "{e}"
    );
}

#[test]
fn more_bad_logs_name_the_line_and_the_problem() {
    let cases: [(&[u8], &str); 7] = [
        (
            b"0,1,allocate,0x10,18446744073709551616,0x0\n",
            "line 2: size `18446744073709551616` is not a non-negative integer",
        ),
        (
            b"0,1,allocate,0x10,0x8000000000000000,0x0\n0,1,allocate,0x20,0x8000000000000000,0x0\n",
            "line 3: live bytes exceed 2^64",
        ),
        (b"0,1,allocate,0x10,\xff\xfe,0x0\n", "line 2"),
        (b"0,1,allo\0cate,0x10,5,0x0\n", "line 2: unknown action"),
        (
            b"0,1,\"allocate,0x10,5,0x0\n",
            "line 2: unknown action `\"allocate`",
        ),
        (b"", "holds no allocation"),
        (b"\n\n\n", "holds no allocation"),
    ];
    for (body, want) in cases {
        let text = [H.as_bytes(), body].concat();
        let got = Trace::parse("t", &text).unwrap_err().to_string();
        assert!(
            got.contains(want),
            "for {body:?}: got `{got}`, want `{want}`"
        );
    }
    // No header at all, and a header with a column missing.
    for (text, want) in [
        (&b""[..], "line 1: expected the RMM header"),
        (
            b"Thread,Time,Action,Pointer,Size\n",
            "found `Thread,Time,Action,Pointer,Size`",
        ),
    ] {
        let got = Trace::parse("t", text).unwrap_err().to_string();
        assert!(got.contains(want), "got `{got}`, want `{want}`");
    }
    // Gzip magic followed by garbage: an error saying so, not a panic.
    let e = Trace::from_bytes("junk", b"\x1f\x8b\x08\x00garbage").unwrap_err();
    assert!(
        matches!(e, TraceError::Row { line: 1, .. }) && e.to_string().contains("corrupt"),
        "{e}"
    );
    // A directory is not a trace.
    let e = Trace::open(env!("CARGO_MANIFEST_DIR"))
        .unwrap_err()
        .to_string();
    assert!(e.contains(": cannot read the trace: "), "{e}");
}

/// A reader of `header`, then a row that never ends: `len` bytes of digits,
/// produced lazily; counts what was read.
struct EndlessLine {
    header: &'static [u8],
    at: usize,
    len: usize,
    read: std::rc::Rc<std::cell::Cell<usize>>,
}

impl std::io::Read for EndlessLine {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let total = self.header.len() + self.len;
        let n = buf.len().min(total - self.at);
        for (i, b) in buf[..n].iter_mut().enumerate() {
            let k = self.at + i;
            *b = if k < self.header.len() {
                self.header[k]
            } else {
                b'9'
            };
        }
        self.at += n;
        self.read.set(self.at);
        Ok(n)
    }
}

#[test]
fn a_one_gigabyte_line_is_refused_without_reading_it() {
    let read = std::rc::Rc::new(std::cell::Cell::new(0));
    let line = EndlessLine {
        header: b"Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,",
        at: 0,
        len: 1 << 30,
        read: read.clone(),
    };
    let e = Trace::from_reader("huge", line).unwrap_err().to_string();
    assert!(e.contains("huge: line 2: line longer than 64 KiB"), "{e}");
    assert!(
        read.get() < 1 << 20,
        "read {} bytes of a 1 GiB line",
        read.get()
    );

    // The same line inside a gzip file of about 1 MB: 1024 gzip members of
    // 1 MiB of digits each, which the reader stops decompressing at 64 KiB.
    let member = |bytes: &[u8]| {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(bytes).unwrap();
        gz.finish().unwrap()
    };
    let mut file = member(b"Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,");
    let digits = member(&vec![b'9'; 1 << 20]);
    for _ in 0..1024 {
        file.extend_from_slice(&digits);
    }
    assert!(file.len() < 4 << 20, "{} bytes compressed", file.len());
    let e = Trace::from_bytes("huge.csv.gz", &file)
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2: line longer than 64 KiB"), "{e}");
}

#[test]
fn a_stray_quote_is_an_error_on_its_line_not_the_rest_of_the_file_in_one_field() {
    // An RMM log quotes nothing: the quote is part of the action, refused
    // on line 3, not the start of a field that swallows every line after it.
    let mut body = String::from("0,1,allocate,0x10,512,0x0\n0,1,\"allocate,0x20,512,0x0\n");
    for i in 0..10_000 {
        body.push_str(&format!("0,1,allocate,{:#x},512,0x0\n", 0x100 + i));
    }
    let e = err(&body);
    assert!(e.contains("line 3: unknown action `\"allocate`"), "{e}");
}

#[test]
fn a_small_gzip_of_millions_of_rows_stops_at_the_most_events_allowed() {
    // A million rows (about 20 MB of text) in a gzip of about 50 KB.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(H.as_bytes()).unwrap();
    for _ in 0..500_000 {
        gz.write_all(b"0,0,allocate,0x1,1,0\n0,0,free,0x1,1,0\n")
            .unwrap();
    }
    let file = gz.finish().unwrap();
    assert!(file.len() < 1 << 20, "{} bytes compressed", file.len());
    match Trace::from_bytes_at_most("bomb.csv.gz", &file, 1000) {
        Err(TraceError::TooManyRows { path, max }) => {
            assert_eq!((path.as_str(), max), ("bomb.csv.gz", 1000));
        }
        other => panic!(
            "expected TooManyRows, got {:?}",
            other.map(|t| t.events.len())
        ),
    }
    // Without a bound it reads them all.
    assert_eq!(
        Trace::from_bytes("bomb.csv.gz", &file)
            .unwrap()
            .events
            .len(),
        1_000_000
    );
}

#[test]
fn streams_are_read_only_where_asked_for_and_a_bad_one_names_its_line() {
    let log = "Thread,Time,Action,Pointer,Size,Stream\n\
               0,0,allocate,0x10,4096,0x0\n\
               0,0,allocate,0x20,8192,0x2a\n\
               0,0,free,0x20,8192,42\n\
               0,0,allocate,0x30,512,cuda\n";
    // `parse` does not read the column (logs from elsewhere put their own
    // things there).
    assert_eq!(Trace::parse("log", log.as_bytes()).unwrap().events.len(), 4);
    for e in [
        Trace::streams("log", log.as_bytes()).unwrap_err(),
        Trace::parse_stream("log", log.as_bytes(), 0x2a).unwrap_err(),
    ] {
        let s = e.to_string();
        assert!(s.contains("line 5") && s.contains("stream `cuda`"), "{s}");
    }
    let two = &log[..log.rfind("0,0,allocate,0x30").unwrap()];
    assert_eq!(Trace::streams("log", two.as_bytes()).unwrap(), vec![0, 42]);
    // Hex and decimal are one stream; the others' rows are left out.
    let t = Trace::parse_stream("log", two.as_bytes(), 42).unwrap();
    assert_eq!((t.events.len(), t.peak_live), (2, 8192));
    assert!(matches!(
        Trace::parse_stream("log", two.as_bytes(), 7),
        Err(TraceError::Empty { .. })
    ));
}

#[test]
fn a_hand_made_trace_that_breaks_the_readers_rules_replays_without_losing_a_block() {
    // Trace's fields are public: 0x10 allocated twice while live, a free of
    // 0x20 never allocated. Neither panics nor leaks.
    use vrampool::trace::{Action, EngineTarget, Replayer, TraceEvent};
    use vrampool::{Config, Engine, SimulatedDevice};
    let event = |action, pointer, size| TraceEvent {
        action,
        pointer,
        size,
        line: 0,
    };
    let trace = Trace {
        name: "hand-made".into(),
        events: vec![
            event(Action::Allocate, 0x10, 4096),
            event(Action::Allocate, 0x10, 8192),
            event(Action::Free, 0x20, 1 << 20),
            // Refused twice (larger than any buffer), freed twice.
            event(Action::Allocate, 0x30, 2 << 30),
            event(Action::Allocate, 0x30, 2 << 30),
            event(Action::Free, 0x30, 2 << 30),
            event(Action::Free, 0x30, 2 << 30),
        ],
        peak_live: 12288 + (4 << 30),
        largest: 2 << 30,
        ..Trace::default()
    };
    let mut engine = Engine::new(SimulatedDevice::new(1 << 30), Config::default()).unwrap();
    let mut replayer = Replayer::new(&trace);
    let mut target = EngineTarget::new(&mut engine, 0);
    while replayer.step(&mut target).unwrap() {}
    assert_eq!(replayer.counts().ooms, 2);
    assert_eq!(
        replayer.live_bytes(),
        12288,
        "the stray free frees nothing, each refused allocation's free its own"
    );
    let live = replayer.take_live();
    assert_eq!(live.len(), 2, "both blocks of 0x10 are handed back");
    for id in live {
        engine.free(id).unwrap();
    }
    assert_eq!(engine.stats().total.allocated_bytes.current, 0);
}

/// Hands out its bytes in the chunk sizes given, round and round: a reader
/// whose reads end anywhere, between the CR and LF of a CRLF too.
struct Chunked {
    bytes: Vec<u8>,
    at: usize,
    sizes: Vec<usize>,
    next: usize,
}

impl std::io::Read for Chunked {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let size = self.sizes[self.next % self.sizes.len()];
        self.next += 1;
        let n = size.min(buf.len()).min(self.bytes.len() - self.at);
        buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

proptest::proptest! {
    /// Lines ending in LF, CR or CRLF, mixed, read in chunks of any size:
    /// the same trace, or the same error on the same line, as the file with
    /// every line ending in LF (the reader finds LF-only chunks with memchr
    /// and rewrites the others byte by byte).
    #[test]
    fn any_line_ends_in_any_chunks_read_as_lf(
        ends in proptest::collection::vec(0..3usize, 2..60),
        sizes in proptest::collection::vec(
            proptest::prop_oneof![proptest::strategy::Just(1usize), 1..200usize],
            1..8,
        ),
        bad in proptest::option::of((0..60usize, 0..5usize)),
    ) {
        let mut lines = vec![H.trim_end().to_string()];
        for i in 1..ends.len() {
            let p = 0x10 + ((i as u64 - 1) / 2) * 0x1000;
            let action = if i % 2 == 1 { "allocate" } else { "free" };
            lines.push(format!("0,{i},{action},{p:#x},4096,0x0"));
        }
        // A bad line: a size that is no number, or a line of digits of
        // MAX_LINE - 1 to MAX_LINE + 2 bytes (too long from MAX_LINE + 1),
        // whatever ends it; either way the error names its line.
        let mut bad_line = None;
        if let Some((at, kind)) = bad {
            let at = (1 + at % ends.len()).min(lines.len());
            let line = match kind {
                0 => "0,9,allocate,0x99999,abc,0x0".to_string(),
                k => "9".repeat(vrampool::trace::MAX_LINE + k - 2),
            };
            lines.insert(at, line);
            bad_line = Some(at + 1);
        }
        let mut mixed = String::new();
        for (i, line) in lines.iter().enumerate() {
            mixed += line;
            mixed += ["\n", "\r", "\r\n"][ends[i % ends.len()]];
        }
        let lf = lines.join("\n") + "\n";
        let want = Trace::parse("t", lf.as_bytes()).map_err(|e| e.to_string());
        // A log with no bad line is a good one (allocate, free, in pairs).
        proptest::prop_assert_eq!(want.is_ok(), bad.is_none(), "{:?}", want.as_ref().err());
        let got = Trace::from_reader(
            "t",
            Chunked { bytes: mixed.into_bytes(), at: 0, sizes, next: 0 },
        )
        .map_err(|e| e.to_string());
        match (want, got) {
            (Ok(w), Ok(g)) => {
                proptest::prop_assert_eq!(&w.events, &g.events);
                proptest::prop_assert_eq!(w.peak_live, g.peak_live);
            }
            (Err(w), Err(g)) => {
                // Each side on its own, not only the two alike: the LF file
                // goes through the same reader.
                let at = format!("t: line {}: ", bad_line.unwrap_or(0));
                proptest::prop_assert!(w.starts_with(&at), "{} for {:?}", w, bad);
                proptest::prop_assert_eq!(w, g);
            }
            (w, g) => proptest::prop_assert!(false, "LF: {:?}\nmixed: {:?}", w.map(|t| t.events.len()), g.map(|t| t.events.len())),
        }
    }
}
