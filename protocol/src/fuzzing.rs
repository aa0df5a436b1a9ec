//! The decoders driven the way a connection drives them, with their invariants asserted: the
//! shared body of the `cargo fuzz` targets (`fuzz/fuzz_targets/{startup,frontend_message}.rs`)
//! and of the property tests (`protocol/tests/decoder_props.rs`), so CI runs the same checks on
//! every change that a fuzzing session runs for hours.
//!
//! Not part of the protocol API: `#[doc(hidden)]`, no stability promised. Every function here
//! panics when an invariant breaks, which is what a fuzzer and a property test both report.
//!
//! Allocation is measured, not assumed, when the caller installs [`CountingAllocator`] as its
//! global allocator (the property tests and the fuzz targets do); without it the allocation
//! bounds are not checked (the counter stays at zero) and everything else still is.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use crate::backend::BackendMessage;
use crate::frontend::{self, FrontendMessage, StartupRequest, MAX_STARTUP_PACKET_BYTES};
use crate::types::{binary, text, Scalar, TextContext, Type};
use crate::wire::{frame_bytes_needed, split_frame, Frame};
use crate::{Format, PgError, Severity, SqlState};

// ---- allocation accounting ----

/// A global allocator that forwards to `System` and counts the bytes each thread asks for.
pub struct CountingAllocator;

thread_local! {
    /// Bytes requested by this thread since the counter was last reset. `const` initialisation
    /// and a destructor-free `Cell` keep the allocator from allocating to reach it.
    static ALLOCATED_BYTES: Cell<usize> = const { Cell::new(0) };
}

fn note_allocation(bytes: usize) {
    let _ = ALLOCATED_BYTES.try_with(|c| c.set(c.get().saturating_add(bytes)));
}

// SAFETY: every call forwards to `System` unchanged; the counter only observes sizes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Run `f` and return its result with the bytes it allocated on this thread (0 if
/// [`CountingAllocator`] is not the global allocator).
pub fn allocated_by<T>(f: impl FnOnce() -> T) -> (T, usize) {
    ALLOCATED_BYTES.with(|c| c.set(0));
    let out = f();
    let bytes = ALLOCATED_BYTES.with(|c| c.get());
    (out, bytes)
}

/// What an error may cost: its message (a short `format!`), independent of the input size.
pub const ERROR_ALLOCATION_BYTES_MAX: usize = 512;
/// Bytes a backend decode may allocate per input byte. The worst legal case is ErrorFields: one
/// `(u8, &str)` (24 bytes) per two input bytes is 12; `Vec` growth may double the capacity (24),
/// and the counter adds up every reallocation instead of tracking the peak (48). Anything that
/// sizes a vector from a count field instead of the bytes present blows far past this.
pub const BACKEND_ALLOCATION_BYTES_PER_INPUT_BYTE: usize = 64;

pub fn assert_backend_allocation_bounded(body_len: usize, allocated: usize) {
    let bound =
        BACKEND_ALLOCATION_BYTES_PER_INPUT_BYTE * (body_len + 1) + ERROR_ALLOCATION_BYTES_MAX;
    assert!(
        allocated <= bound,
        "decoding a {body_len}-byte body allocated {allocated} bytes (bound {bound})"
    );
}

/// Collection sizes in a decoded backend message against the bytes they were decoded from:
/// every element takes at least this many bytes of body.
pub fn assert_backend_counts_bounded(msg: &BackendMessage<'_>, body_len: usize) {
    let (items, min_item_bytes) = match msg {
        BackendMessage::DataRow { values } => (values.len(), 4),
        BackendMessage::RowDescription { fields } => (fields.len(), 19),
        BackendMessage::ParameterDescription { types } => (types.len(), 4),
        BackendMessage::AuthenticationSasl { mechanisms } => (mechanisms.len(), 1),
        BackendMessage::NegotiateProtocolVersion { unrecognized, .. } => (unrecognized.len(), 1),
        BackendMessage::CopyInResponse { columns, .. }
        | BackendMessage::CopyOutResponse { columns, .. } => (columns.len(), 2),
        BackendMessage::ErrorResponse(f) | BackendMessage::NoticeResponse(f) => (f.fields.len(), 2),
        _ => (0, 1),
    };
    assert!(
        items * min_item_bytes <= body_len,
        "{items} items of >= {min_item_bytes} bytes decoded from a {body_len}-byte body: {msg:?}"
    );
}

// ---- fuzz entry points: arbitrary bytes in, invariants asserted ----

/// The startup phase on arbitrary bytes: `split_startup` + `StartupRequest::parse` packet by
/// packet, whole and then delivered in pieces (sizes taken from the input), which must decode
/// to the same requests.
pub fn startup(data: &[u8]) {
    let whole = decode_startup(data);
    let chunked = decode_startup_chunked(data, &chunk_sizes(data));
    assert_eq!(
        chunked, whole,
        "the startup phase decoded differently in pieces"
    );
}

/// Client messages on arbitrary bytes. The first byte picks `--max-message-bytes` (unlimited,
/// or 4..=1020), the rest is the stream: framed and parsed whole, then in pieces (which must
/// agree up to the first fatal error), and every Bind's parameter values decoded as every
/// type in the format the Bind gives them.
pub fn frontend_message(data: &[u8]) {
    let Some((&first, stream)) = data.split_first() else {
        return;
    };
    let max_message_bytes = if first & 0x80 == 0 {
        usize::MAX
    } else {
        4 + usize::from(first & 0x7f) * 8
    };
    let whole = decode_frontend(stream, max_message_bytes);
    let chunked = decode_frontend_chunked(stream, &chunk_sizes(stream), max_message_bytes);
    assert_eq!(
        chunked, whole,
        "client messages decoded differently in pieces"
    );
    decode_bind_values(stream, max_message_bytes);
}

/// Piece sizes for a chunked delivery, derived from the input so a fuzzer explores them too.
fn chunk_sizes(data: &[u8]) -> Vec<usize> {
    let mut sizes: Vec<usize> = data
        .iter()
        .rev()
        .take(16)
        .map(|b| usize::from(b % 13) + 1)
        .collect();
    if sizes.is_empty() {
        sizes.push(1);
    }
    sizes
}

// ---- the decoders, driven the way a connection drives them ----

/// Split and parse every complete frame of `buf` as frontend messages, checking the framing
/// invariants and allocation along the way. Stops at the first fatal error or partial frame.
pub fn decode_frontend(buf: &[u8], max_message_bytes: usize) -> Vec<String> {
    let mut at = 0;
    let mut out = Vec::new();
    while let Some(n) = decode_frontend_one(&buf[at..], max_message_bytes, &mut out) {
        at += n;
    }
    out
}

/// Frame and parse one message off the front of `buf`, appending what it decoded to (or the
/// error) to `out`; the bytes consumed, or None at a partial frame or a fatal error.
fn decode_frontend_one(
    buf: &[u8],
    max_message_bytes: usize,
    out: &mut Vec<String>,
) -> Option<usize> {
    let (split, split_bytes) = allocated_by(|| split_frame(buf, max_message_bytes));
    match split {
        Ok(Some((frame, n))) => {
            assert_eq!(split_bytes, 0, "split_frame allocated on success");
            check_frame(buf, frame, n, max_message_bytes);
            let (parsed, parse_bytes) = allocated_by(|| FrontendMessage::parse(frame));
            match parsed {
                Ok(msg) => {
                    assert_eq!(
                        parse_bytes, 0,
                        "FrontendMessage::parse allocated on success: {msg:?}"
                    );
                    out.push(format!("{msg:?}"));
                }
                Err(e) => {
                    assert!(
                        parse_bytes <= ERROR_ALLOCATION_BYTES_MAX,
                        "a parse error allocated {parse_bytes} bytes"
                    );
                    check_error(&e);
                    // A body error is not fatal: the connection goes on with the next frame.
                    out.push(format!("error {}", e.code));
                }
            }
            Some(n)
        }
        Ok(None) => {
            assert_eq!(split_bytes, 0);
            if let Some(more) = frame_bytes_needed(buf) {
                assert_eq!(more, expected_missing(buf), "frame_bytes_needed is off");
            }
            None
        }
        Err(e) => {
            assert!(split_bytes <= ERROR_ALLOCATION_BYTES_MAX);
            assert_eq!(
                (e.severity, e.code),
                (Severity::Fatal, SqlState::PROTOCOL_VIOLATION),
                "framing errors are fatal 08P01"
            );
            out.push(format!("fatal {}", e.code));
            None
        }
    }
}

/// [`decode_frontend`] with the stream arriving in pieces of `chunks` bytes (cycled) into a
/// growing receive buffer, complete frames consumed after every piece as a connection does.
pub fn decode_frontend_chunked(
    stream: &[u8],
    chunks: &[usize],
    max_message_bytes: usize,
) -> Vec<String> {
    let mut received = Vec::new();
    let mut sent = 0;
    let mut out = Vec::new();
    let mut sizes = chunks.iter().copied().cycle();
    while sent < stream.len() {
        let size = sizes.next().unwrap_or(stream.len()).max(1);
        let end = (sent + size).min(stream.len());
        received.extend_from_slice(&stream[sent..end]);
        sent = end;
        loop {
            let before = out.len();
            match decode_frontend_one(&received, max_message_bytes, &mut out) {
                Some(n) => {
                    received.drain(..n);
                }
                None if out.len() > before => return out, // fatal: the connection ends
                None => break,
            }
        }
    }
    out
}

/// Split and parse startup packets off the front of `buf` until a StartupMessage, an error or
/// a partial packet, the way the server's startup phase does.
pub fn decode_startup(buf: &[u8]) -> Vec<String> {
    let mut at = 0;
    let mut out = Vec::new();
    while let Some(n) = decode_startup_one(&buf[at..], &mut out) {
        at += n;
    }
    out
}

/// One startup packet off the front of `buf`: the bytes consumed if the phase goes on (an
/// SSLRequest or GSSENCRequest was answered), None once it ended or needs more bytes.
fn decode_startup_one(buf: &[u8], out: &mut Vec<String>) -> Option<usize> {
    let (split, split_bytes) = allocated_by(|| frontend::split_startup(buf));
    match split {
        Ok(Some((body, n))) => {
            assert_eq!(split_bytes, 0);
            assert!(
                (8..=MAX_STARTUP_PACKET_BYTES).contains(&n),
                "startup packet of {n} bytes accepted"
            );
            assert!(n <= buf.len());
            assert_eq!(body.len() + 4, n);
            assert_eq!(body, &buf[4..n]);
            let (parsed, parse_bytes) = allocated_by(|| StartupRequest::parse(body));
            match parsed {
                Ok(req) => {
                    assert_eq!(parse_bytes, 0, "StartupRequest::parse allocated on success");
                    let done = matches!(
                        req,
                        StartupRequest::Startup { .. } | StartupRequest::Cancel { .. }
                    );
                    if let StartupRequest::Startup { params, .. } = req {
                        // Validated at parse time, so iteration sees every pair.
                        let pairs: Vec<_> = params.iter().collect();
                        out.push(format!("{req:?} {pairs:?}"));
                    } else {
                        out.push(format!("{req:?}"));
                    }
                    (!done).then_some(n)
                }
                Err(e) => {
                    assert!(parse_bytes <= ERROR_ALLOCATION_BYTES_MAX);
                    assert_eq!(
                        e.severity,
                        Severity::Fatal,
                        "startup errors are fatal: {e:?}"
                    );
                    check_error(&e);
                    out.push(format!("fatal {}", e.code));
                    None
                }
            }
        }
        Ok(None) => None,
        Err(e) => {
            assert!(split_bytes <= ERROR_ALLOCATION_BYTES_MAX);
            assert_eq!(
                (e.severity, e.code),
                (Severity::Fatal, SqlState::PROTOCOL_VIOLATION)
            );
            out.push(format!("fatal {}", e.code));
            None
        }
    }
}

/// [`decode_startup`] with the bytes arriving in pieces, as the server's startup loop reads.
pub fn decode_startup_chunked(stream: &[u8], chunks: &[usize]) -> Vec<String> {
    let mut received = Vec::new();
    let mut sent = 0;
    let mut out = Vec::new();
    let mut sizes = chunks.iter().copied().cycle();
    while sent < stream.len() {
        let end = (sent + sizes.next().unwrap_or(1).max(1)).min(stream.len());
        received.extend_from_slice(&stream[sent..end]);
        sent = end;
        loop {
            let before = out.len();
            match decode_startup_one(&received, &mut out) {
                Some(n) => {
                    received.drain(..n);
                }
                // The phase ended (a StartupMessage, a CancelRequest or a fatal error).
                None if out.len() > before => return out,
                None => break,
            }
        }
    }
    out
}

/// Every Bind in the stream: each parameter value decoded as every type, in the format the
/// Bind declares for it — what the engine does with a parameter once Parse typed it. Decoding
/// may fail (22P02 and friends) but must not panic, and must fail with a well-formed error.
fn decode_bind_values(stream: &[u8], max_message_bytes: usize) {
    let ctx = TextContext::default();
    let mut at = 0;
    while let Ok(Some((frame, n))) = split_frame(&stream[at..], max_message_bytes) {
        at += n;
        let Ok(FrontendMessage::Bind(bind)) = FrontendMessage::parse(frame) else {
            continue;
        };
        for (i, value) in bind.params().enumerate() {
            let Some(bytes) = value else { continue };
            for ty in all_types() {
                let decoded = match bind.param_format(i) {
                    Format::Text => text::decode(ty, bytes, &ctx),
                    Format::Binary => binary::decode(ty, bytes),
                };
                if let Err(e) = decoded {
                    check_error(&e);
                }
            }
        }
    }
}

/// Every parameter type the engine decodes: each scalar and its array.
pub fn all_types() -> impl Iterator<Item = Type> {
    use Scalar::*;
    const SCALARS: [Scalar; 22] = [
        Bool,
        Int2,
        Int4,
        Int8,
        Float4,
        Float8,
        Numeric,
        Text,
        Varchar,
        Bpchar,
        Bytea,
        Date,
        Time,
        Timestamp,
        Timestamptz,
        Interval,
        Uuid,
        Json,
        Jsonb,
        Name,
        Void,
        Unknown,
    ];
    SCALARS.into_iter().flat_map(|scalar| {
        [false, true]
            .into_iter()
            .map(move |array| Type { scalar, array })
    })
}

/// What a consumed frame must look like: within the limit, exactly the bytes it claimed.
pub fn check_frame(buf: &[u8], frame: Frame<'_>, consumed: usize, max_message_bytes: usize) {
    assert!(
        consumed <= buf.len(),
        "consumed {consumed} of {} bytes",
        buf.len()
    );
    assert_eq!(consumed, 5 + frame.body.len());
    assert!(
        frame.body.len() + 4 <= max_message_bytes,
        "a frame over the limit was accepted"
    );
    assert_eq!(frame.tag, buf[0]);
    assert_eq!(frame.body, &buf[5..consumed]);
}

/// An error that becomes an ErrorResponse: a five-character SQLSTATE and a message.
pub fn check_error(e: &PgError) {
    assert!(
        e.code.as_str().len() == 5 && e.code.as_str().is_ascii(),
        "bad SQLSTATE {:?}",
        e.code
    );
    assert!(!e.message.is_empty());
}

/// Bytes still missing from a partial frame, from its header.
pub fn expected_missing(partial: &[u8]) -> usize {
    let len = i32::from_be_bytes([partial[1], partial[2], partial[3], partial[4]]) as usize;
    1 + len - partial.len()
}
