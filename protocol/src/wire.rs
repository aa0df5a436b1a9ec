//! Framing and primitive readers/writers shared by both directions.
//!
//! Decoding is two-phase (STYLE.md): [`split_frame`] reads the 5-byte header and checks the
//! length against a caller-given maximum *before* anything else happens, and returns the body as
//! a borrowed slice of the caller's buffer; the message parsers then read fields from that slice
//! with a [`Reader`]. A frame error is fatal for the connection (the stream cannot be resynced);
//! a body error is an ordinary ERROR and the connection goes on.

use crate::error::{PgError, SqlState};

/// One tagged message, borrowed from the connection's read buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    pub tag: u8,
    pub body: &'a [u8],
}

/// Split one tagged message off the front of `buf`.
///
/// Returns `Ok(None)` when `buf` does not yet hold the whole message, `Ok(Some((frame,
/// consumed)))` when it does. The length field is checked against `max_message_bytes` before
/// waiting for the body, so an attacker cannot make us buffer a 2 GiB message.
pub fn split_frame(
    buf: &[u8],
    max_message_bytes: usize,
) -> Result<Option<(Frame<'_>, usize)>, PgError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let tag = buf[0];
    let len = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
    if len < 4 {
        return Err(PgError::fatal(
            SqlState::PROTOCOL_VIOLATION,
            format!(
                "invalid message length {len} for message type \"{}\"",
                tag.escape_ascii()
            ),
        ));
    }
    let len = len as usize;
    if len > max_message_bytes {
        return Err(PgError::fatal(
            SqlState::PROTOCOL_VIOLATION,
            format!("message of {len} bytes exceeds the limit of {max_message_bytes} bytes"),
        ));
    }
    let total = 1 + len;
    if buf.len() < total {
        return Ok(None);
    }
    Ok(Some((
        Frame {
            tag,
            body: &buf[5..total],
        },
        total,
    )))
}

/// How many more bytes a partial frame at the front of `buf` needs, when the header is known.
/// Lets the I/O layer size one read instead of growing the buffer step by step.
pub fn frame_bytes_needed(buf: &[u8]) -> Option<usize> {
    if buf.len() < 5 {
        return None;
    }
    let len = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
    let total = 1 + len.max(4) as usize;
    Some(total.saturating_sub(buf.len()))
}

/// A read past the end of a message body: PostgreSQL's `pq_copymsgbytes` error, word for word.
fn insufficient() -> PgError {
    PgError::new(
        SqlState::PROTOCOL_VIOLATION,
        "insufficient data left in message",
    )
}

/// The error every other malformed message body turns into (PostgreSQL: "invalid message
/// format").
pub(crate) fn malformed(what: &str) -> PgError {
    PgError::new(
        SqlState::PROTOCOL_VIOLATION,
        format!("invalid message format: {what}"),
    )
}

/// A cursor over a message body. Every read is bounds-checked and returns an error instead of
/// panicking: the bytes come from an untrusted peer.
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub fn rest(&self) -> &'a [u8] {
        self.buf
    }

    pub fn u8(&mut self) -> Result<u8, PgError> {
        let (&b, rest) = self.buf.split_first().ok_or_else(insufficient)?;
        self.buf = rest;
        Ok(b)
    }

    pub fn i16(&mut self) -> Result<i16, PgError> {
        let b = self.bytes(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub fn i32(&mut self) -> Result<i32, PgError> {
        let b = self.bytes(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u32(&mut self) -> Result<u32, PgError> {
        Ok(self.i32()? as u32)
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], PgError> {
        if self.buf.len() < n {
            return Err(insufficient());
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// A NUL-terminated string, validated as UTF-8 (the only client encoding ringwire accepts).
    pub fn cstr(&mut self) -> Result<&'a str, PgError> {
        let nul =
            memchr::memchr(0, self.buf).ok_or_else(|| malformed("missing string terminator"))?;
        let s = &self.buf[..nul];
        self.buf = &self.buf[nul + 1..];
        utf8(s)
    }

    /// Fails unless the whole body was consumed (PostgreSQL's `pq_getmsgend`, whose message
    /// this is, word for word).
    pub fn finish(&self) -> Result<(), PgError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(PgError::new(
                SqlState::PROTOCOL_VIOLATION,
                "invalid message format",
            ))
        }
    }
}

pub fn utf8(bytes: &[u8]) -> Result<&str, PgError> {
    std::str::from_utf8(bytes).map_err(|e| {
        // Like PostgreSQL, show the whole sequence the lead byte announces (as far as present).
        let bad = &bytes[e.valid_up_to()..];
        let announced = match bad[0] {
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => 1,
        };
        let shown: Vec<String> = bad
            .iter()
            .take(announced)
            .map(|b| format!("0x{b:02x}"))
            .collect();
        PgError::new(
            SqlState::CHARACTER_NOT_IN_REPERTOIRE,
            format!(
                "invalid byte sequence for encoding \"UTF8\": {}",
                shown.join(" ")
            ),
        )
    })
}

/// Start a tagged message in `out`; returns the offset to pass to [`finish_message`].
#[inline]
pub fn begin_message(out: &mut Vec<u8>, tag: u8) -> usize {
    out.push(tag);
    let start = out.len();
    out.extend_from_slice(&[0, 0, 0, 0]);
    start
}

/// Back-patch the length of the message begun at `start`.
#[inline]
pub fn finish_message(out: &mut [u8], start: usize) {
    let len = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

#[inline]
pub fn put_i16(out: &mut Vec<u8>, v: i16) {
    out.extend_from_slice(&v.to_be_bytes());
}

#[inline]
pub fn put_i32(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_be_bytes());
}

#[inline]
pub fn put_cstr(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

/// Value format code of Bind and RowDescription.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Text,
    Binary,
}

impl Format {
    pub fn from_code(code: i16) -> Result<Format, PgError> {
        match code {
            0 => Ok(Format::Text),
            1 => Ok(Format::Binary),
            _ => Err(PgError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("unsupported format code: {code}"),
            )),
        }
    }

    pub fn code(self) -> i16 {
        match self {
            Format::Text => 0,
            Format::Binary => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_frames_wait_and_oversized_frames_fail_before_the_body_arrives() {
        assert_eq!(split_frame(b"Q\0\0", 100).unwrap(), None);
        assert_eq!(split_frame(b"Q\0\0\0\x09abc", 100).unwrap(), None);
        assert_eq!(frame_bytes_needed(b"Q\0\0\0\x09abc"), Some(2));
        let (f, n) = split_frame(b"Q\0\0\0\x06a\0rest", 100).unwrap().unwrap();
        assert_eq!((f.tag, f.body, n), (b'Q', &b"a\0"[..], 7));
        let err = split_frame(b"Q\x7f\0\0\0", 1 << 20).unwrap_err();
        assert_eq!(err.code, SqlState::PROTOCOL_VIOLATION);
        assert_eq!(err.severity, crate::error::Severity::Fatal);
        assert!(split_frame(b"Q\0\0\0\x03", 100).is_err());
        assert!(split_frame(b"Q\xff\xff\xff\xff", 100).is_err());
    }

    #[test]
    fn reader_never_reads_past_the_end() {
        let mut r = Reader::new(b"ab");
        assert!(r.i32().is_err());
        assert!(r.cstr().is_err());
        let mut r = Reader::new(b"ab\0\xff\xfe\0");
        assert_eq!(r.cstr().unwrap(), "ab");
        assert_eq!(
            r.cstr().unwrap_err().code,
            SqlState::CHARACTER_NOT_IN_REPERTOIRE
        );
    }
}
