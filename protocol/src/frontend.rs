//! Messages a client sends: the untagged startup packets and the tagged messages after them.
//!
//! Every message borrows from the connection's read buffer (no copy); counts read from the wire
//! (parameter types, format codes, parameter values) are checked against the bytes actually
//! present before anything is sized from them. `encode_*` functions build the same messages, for
//! the load generator and tests.

use crate::error::{PgError, SqlState};
use crate::wire::{
    begin_message, finish_message, malformed, put_cstr, put_i16, put_i32, Format, Frame, Reader,
};

/// PostgreSQL's `MAX_STARTUP_PACKET_LENGTH`: a startup packet larger than this is refused.
pub const MAX_STARTUP_PACKET_BYTES: usize = 10_000;
pub const PROTOCOL_3_0: u32 = 3 << 16;
pub const SSL_REQUEST_CODE: u32 = (1234 << 16) | 5679;
pub const GSSENC_REQUEST_CODE: u32 = (1234 << 16) | 5680;
pub const CANCEL_REQUEST_CODE: u32 = (1234 << 16) | 5678;

/// The first packet of a connection (no tag byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartupRequest<'a> {
    /// StartupMessage; `version` is `major << 16 | minor`.
    Startup {
        version: u32,
        params: StartupParams<'a>,
    },
    SslRequest,
    GssEncRequest,
    /// CancelRequest. The key is 4 bytes in protocol 3.0 and up to 256 in 3.2.
    Cancel {
        process_id: i32,
        secret_key: &'a [u8],
    },
}

/// The `name\0value\0...\0` list of a StartupMessage, validated at decode time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartupParams<'a> {
    raw: &'a [u8],
}

impl<'a> StartupParams<'a> {
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let mut r = Reader::new(self.raw);
        std::iter::from_fn(move || {
            if r.remaining() <= 1 {
                return None;
            }
            // Validated in `StartupRequest::parse`, so these reads cannot fail.
            let name = r.cstr().ok()?;
            let value = r.cstr().ok()?;
            Some((name, value))
        })
    }

    /// The value of parameter `name`: the last one given, as PostgreSQL reads a startup
    /// packet that names a parameter twice.
    pub fn get(&self, name: &str) -> Option<&'a str> {
        self.iter()
            .filter(|(n, _)| *n == name)
            .last()
            .map(|(_, v)| v)
    }
}

/// Split a startup packet (4-byte length, then body) off the front of `buf`.
pub fn split_startup(buf: &[u8]) -> Result<Option<(&[u8], usize)>, PgError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if len < 8 || len as usize > MAX_STARTUP_PACKET_BYTES {
        return Err(PgError::fatal(
            SqlState::PROTOCOL_VIOLATION,
            "invalid length of startup packet",
        ));
    }
    let len = len as usize;
    if buf.len() < len {
        return Ok(None);
    }
    Ok(Some((&buf[4..len], len)))
}

impl<'a> StartupRequest<'a> {
    /// Parse the body returned by [`split_startup`]. Errors are FATAL: nothing is established yet.
    pub fn parse(body: &'a [u8]) -> Result<StartupRequest<'a>, PgError> {
        let fatal = |e: PgError| PgError {
            severity: crate::error::Severity::Fatal,
            ..e
        };
        let mut r = Reader::new(body);
        let code = r.u32().map_err(fatal)?;
        match code {
            SSL_REQUEST_CODE if r.remaining() == 0 => Ok(StartupRequest::SslRequest),
            GSSENC_REQUEST_CODE if r.remaining() == 0 => Ok(StartupRequest::GssEncRequest),
            CANCEL_REQUEST_CODE => {
                let process_id = r.i32().map_err(fatal)?;
                let secret_key = r.rest();
                if secret_key.len() < 4 || secret_key.len() > 256 {
                    return Err(fatal(malformed("invalid cancel key length")));
                }
                Ok(StartupRequest::Cancel {
                    process_id,
                    secret_key,
                })
            }
            version if version >> 16 == 3 => {
                let raw = r.rest();
                // Validate the whole list once so `StartupParams::iter` is infallible.
                let mut check = Reader::new(raw);
                loop {
                    let name = check.cstr().map_err(fatal)?;
                    if name.is_empty() {
                        break;
                    }
                    check.cstr().map_err(fatal)?;
                }
                check.finish().map_err(fatal)?;
                Ok(StartupRequest::Startup {
                    version,
                    params: StartupParams { raw },
                })
            }
            other => Err(PgError::fatal(
                SqlState::FEATURE_NOT_SUPPORTED,
                format!(
                    "unsupported frontend protocol {}.{}: server supports 3.0 to 3.0",
                    other >> 16,
                    other & 0xffff
                ),
            )),
        }
    }
}

/// Statement or portal, as named by Describe and Close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Statement,
    Portal,
}

impl Target {
    fn parse(b: u8) -> Result<Target, PgError> {
        match b {
            b'S' => Ok(Target::Statement),
            b'P' => Ok(Target::Portal),
            _ => Err(PgError::new(
                SqlState::PROTOCOL_VIOLATION,
                format!("invalid DESCRIBE/CLOSE message subtype {}", b),
            )),
        }
    }

    fn code(self) -> u8 {
        match self {
            Target::Statement => b'S',
            Target::Portal => b'P',
        }
    }
}

/// A list of big-endian 32-bit OIDs, borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Oids<'a> {
    raw: &'a [u8],
}

impl<'a> Oids<'a> {
    pub fn len(&self) -> usize {
        self.raw.len() / 4
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = u32> + 'a {
        self.raw
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
    }
}

/// A Bind message. Counts and lengths were checked against the body at decode time, so the
/// accessors cannot fail on a malformed message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bind<'a> {
    pub portal: &'a str,
    pub statement: &'a str,
    param_formats: &'a [u8],
    param_count: usize,
    params: &'a [u8],
    result_formats: &'a [u8],
}

fn format_at(codes: &[u8], i: usize) -> Format {
    // The 0 / 1 / n rule: no codes means text, one code applies to all.
    let n = codes.len() / 2;
    let at = match n {
        0 => return Format::Text,
        1 => 0,
        _ => i,
    };
    match codes.get(at * 2..at * 2 + 2) {
        Some(&[_, 1]) => Format::Binary,
        _ => Format::Text,
    }
}

impl<'a> Bind<'a> {
    pub fn param_count(&self) -> usize {
        self.param_count
    }

    pub fn param_format(&self, i: usize) -> Format {
        format_at(self.param_formats, i)
    }

    /// Parameter values in order; `None` is SQL NULL.
    pub fn params(&self) -> impl Iterator<Item = Option<&'a [u8]>> + 'a {
        let mut r = Reader::new(self.params);
        (0..self.param_count).map(move |_| {
            let len = r.i32().unwrap_or(-1);
            if len < 0 {
                None
            } else {
                r.bytes(len as usize).ok()
            }
        })
    }

    /// The number of result format codes the client sent (0, 1, or one per column).
    pub fn result_format_count(&self) -> usize {
        self.result_formats.len() / 2
    }

    pub fn result_format(&self, column: usize) -> Format {
        format_at(self.result_formats, column)
    }

    pub fn result_format_codes(&self) -> impl ExactSizeIterator<Item = Format> + 'a {
        self.result_formats.chunks_exact(2).map(|c| {
            if c == [0, 1] {
                Format::Binary
            } else {
                Format::Text
            }
        })
    }

    fn parse(r: &mut Reader<'a>) -> Result<Bind<'a>, PgError> {
        let portal = r.cstr()?;
        let statement = r.cstr()?;
        let param_formats = format_codes(r)?;
        let param_count = count(r)?;
        let start = r.rest();
        for _ in 0..param_count {
            let len = r.i32()?;
            if len < -1 {
                return Err(malformed("invalid parameter length"));
            }
            if len > 0 {
                r.bytes(len as usize)?;
            }
        }
        let params = &start[..start.len() - r.remaining()];
        let result_formats = format_codes(r)?;
        if param_formats.len() / 2 > 1 && param_formats.len() / 2 != param_count {
            return Err(PgError::new(
                SqlState::PROTOCOL_VIOLATION,
                format!(
                    "bind message has {} parameter formats but {} parameters",
                    param_formats.len() / 2,
                    param_count
                ),
            ));
        }
        Ok(Bind {
            portal,
            statement,
            param_formats,
            param_count,
            params,
            result_formats,
        })
    }
}

/// A 16-bit count, which the caller then checks against the bytes that follow.
fn count(r: &mut Reader<'_>) -> Result<usize, PgError> {
    let n = r.i16()?;
    if n < 0 {
        return Err(malformed("negative count"));
    }
    Ok(n as usize)
}

/// A count-prefixed list of 16-bit format codes, each validated; bounded by the body length.
fn format_codes<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], PgError> {
    let n = count(r)?;
    let codes = r.bytes(n * 2)?;
    for c in codes.chunks_exact(2) {
        Format::from_code(i16::from_be_bytes([c[0], c[1]]))?;
    }
    Ok(codes)
}

/// Whether `tag` starts a message a client may send after startup. Checked on the tag byte
/// alone, so garbage is refused before its claimed body is waited for.
pub fn is_frontend_tag(tag: u8) -> bool {
    matches!(
        tag,
        b'Q' | b'P'
            | b'B'
            | b'D'
            | b'E'
            | b'C'
            | b'S'
            | b'H'
            | b'X'
            | b'p'
            | b'd'
            | b'c'
            | b'f'
            | b'F'
    )
}

/// A tagged message from the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrontendMessage<'a> {
    Query {
        sql: &'a str,
    },
    Parse {
        name: &'a str,
        sql: &'a str,
        param_types: Oids<'a>,
    },
    Bind(Bind<'a>),
    Describe {
        target: Target,
        name: &'a str,
    },
    Execute {
        portal: &'a str,
        max_rows: i32,
    },
    Close {
        target: Target,
        name: &'a str,
    },
    Sync,
    Flush,
    Terminate,
    /// `p`: PasswordMessage, SASLInitialResponse or SASLResponse. Which one is known only to the
    /// authentication step that asked for it, so the body is handed over raw.
    Password {
        body: &'a [u8],
    },
    CopyData {
        data: &'a [u8],
    },
    CopyDone,
    CopyFail {
        message: &'a str,
    },
    /// `F`: the legacy fast-path function call; decoded so it can be refused cleanly.
    FunctionCall,
}

impl<'a> FrontendMessage<'a> {
    /// The message's type byte.
    pub fn tag(&self) -> u8 {
        match self {
            FrontendMessage::Query { .. } => b'Q',
            FrontendMessage::Parse { .. } => b'P',
            FrontendMessage::Bind(_) => b'B',
            FrontendMessage::Describe { .. } => b'D',
            FrontendMessage::Execute { .. } => b'E',
            FrontendMessage::Close { .. } => b'C',
            FrontendMessage::Sync => b'S',
            FrontendMessage::Flush => b'H',
            FrontendMessage::Terminate => b'X',
            FrontendMessage::Password { .. } => b'p',
            FrontendMessage::CopyData { .. } => b'd',
            FrontendMessage::CopyDone => b'c',
            FrontendMessage::CopyFail { .. } => b'f',
            FrontendMessage::FunctionCall => b'F',
        }
    }

    /// Parse a frame returned by [`crate::wire::split_frame`]. An unknown tag is FATAL (as in
    /// PostgreSQL: nothing after it can be trusted); a malformed body is an ERROR.
    pub fn parse(frame: Frame<'a>) -> Result<FrontendMessage<'a>, PgError> {
        let mut r = Reader::new(frame.body);
        let msg = match frame.tag {
            b'Q' => FrontendMessage::Query { sql: r.cstr()? },
            b'P' => {
                let name = r.cstr()?;
                let sql = r.cstr()?;
                let n = count(&mut r)?;
                let param_types = Oids {
                    raw: r.bytes(n * 4)?,
                };
                FrontendMessage::Parse {
                    name,
                    sql,
                    param_types,
                }
            }
            b'B' => FrontendMessage::Bind(Bind::parse(&mut r)?),
            b'D' => {
                let target = Target::parse(r.u8()?)?;
                FrontendMessage::Describe {
                    target,
                    name: r.cstr()?,
                }
            }
            b'E' => {
                let portal = r.cstr()?;
                FrontendMessage::Execute {
                    portal,
                    max_rows: r.i32()?,
                }
            }
            b'C' => {
                let target = Target::parse(r.u8()?)?;
                FrontendMessage::Close {
                    target,
                    name: r.cstr()?,
                }
            }
            b'S' => FrontendMessage::Sync,
            b'H' => FrontendMessage::Flush,
            b'X' => FrontendMessage::Terminate,
            b'p' => return Ok(FrontendMessage::Password { body: frame.body }),
            b'd' => return Ok(FrontendMessage::CopyData { data: frame.body }),
            b'c' => FrontendMessage::CopyDone,
            b'f' => FrontendMessage::CopyFail { message: r.cstr()? },
            b'F' => return Ok(FrontendMessage::FunctionCall),
            tag => {
                return Err(PgError::fatal(
                    SqlState::PROTOCOL_VIOLATION,
                    format!("invalid frontend message type {tag}"),
                ))
            }
        };
        r.finish()?;
        Ok(msg)
    }
}

/// The fields of a SASLInitialResponse (`p` sent in answer to AuthenticationSASL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaslInitialResponse<'a> {
    pub mechanism: &'a str,
    /// `None` when the client sent length -1.
    pub data: Option<&'a [u8]>,
}

impl<'a> SaslInitialResponse<'a> {
    pub fn parse(body: &'a [u8]) -> Result<SaslInitialResponse<'a>, PgError> {
        let mut r = Reader::new(body);
        let mechanism = r.cstr()?;
        let len = r.i32()?;
        let data = if len < 0 {
            None
        } else {
            Some(r.bytes(len as usize)?)
        };
        r.finish()?;
        Ok(SaslInitialResponse { mechanism, data })
    }
}

/// The password of a PasswordMessage (cleartext or `md5...`).
pub fn parse_password(body: &[u8]) -> Result<&str, PgError> {
    let mut r = Reader::new(body);
    let password = r.cstr()?;
    r.finish()?;
    Ok(password)
}

// ---- encoders (clients, the load generator, tests) ----

pub fn encode_startup(out: &mut Vec<u8>, version: u32, params: &[(&str, &str)]) {
    let start = out.len();
    out.extend_from_slice(&[0, 0, 0, 0]);
    put_i32(out, version as i32);
    for (name, value) in params {
        put_cstr(out, name);
        put_cstr(out, value);
    }
    out.push(0);
    finish_message(out, start);
}

pub fn encode_ssl_request(out: &mut Vec<u8>) {
    put_i32(out, 8);
    put_i32(out, SSL_REQUEST_CODE as i32);
}

pub fn encode_gssenc_request(out: &mut Vec<u8>) {
    put_i32(out, 8);
    put_i32(out, GSSENC_REQUEST_CODE as i32);
}

pub fn encode_cancel(out: &mut Vec<u8>, process_id: i32, secret_key: &[u8]) {
    put_i32(out, 12 + secret_key.len() as i32);
    put_i32(out, CANCEL_REQUEST_CODE as i32);
    put_i32(out, process_id);
    out.extend_from_slice(secret_key);
}

pub fn encode_query(out: &mut Vec<u8>, sql: &str) {
    let start = begin_message(out, b'Q');
    put_cstr(out, sql);
    finish_message(out, start);
}

pub fn encode_parse(out: &mut Vec<u8>, name: &str, sql: &str, param_types: &[u32]) {
    let start = begin_message(out, b'P');
    put_cstr(out, name);
    put_cstr(out, sql);
    put_i16(out, param_types.len() as i16);
    for oid in param_types {
        put_i32(out, *oid as i32);
    }
    finish_message(out, start);
}

pub fn encode_bind(
    out: &mut Vec<u8>,
    portal: &str,
    statement: &str,
    param_formats: &[Format],
    params: &[Option<&[u8]>],
    result_formats: &[Format],
) {
    let start = begin_message(out, b'B');
    put_cstr(out, portal);
    put_cstr(out, statement);
    put_i16(out, param_formats.len() as i16);
    for f in param_formats {
        put_i16(out, f.code());
    }
    put_i16(out, params.len() as i16);
    for p in params {
        match p {
            None => put_i32(out, -1),
            Some(v) => {
                put_i32(out, v.len() as i32);
                out.extend_from_slice(v);
            }
        }
    }
    put_i16(out, result_formats.len() as i16);
    for f in result_formats {
        put_i16(out, f.code());
    }
    finish_message(out, start);
}

pub fn encode_describe(out: &mut Vec<u8>, target: Target, name: &str) {
    let start = begin_message(out, b'D');
    out.push(target.code());
    put_cstr(out, name);
    finish_message(out, start);
}

pub fn encode_execute(out: &mut Vec<u8>, portal: &str, max_rows: i32) {
    let start = begin_message(out, b'E');
    put_cstr(out, portal);
    put_i32(out, max_rows);
    finish_message(out, start);
}

pub fn encode_close(out: &mut Vec<u8>, target: Target, name: &str) {
    let start = begin_message(out, b'C');
    out.push(target.code());
    put_cstr(out, name);
    finish_message(out, start);
}

/// Sync, Flush, Terminate, CopyDone: messages with an empty body.
pub fn encode_empty(out: &mut Vec<u8>, tag: u8) {
    let start = begin_message(out, tag);
    finish_message(out, start);
}

pub fn encode_password(out: &mut Vec<u8>, password: &str) {
    let start = begin_message(out, b'p');
    put_cstr(out, password);
    finish_message(out, start);
}

pub fn encode_sasl_initial_response(out: &mut Vec<u8>, mechanism: &str, data: &[u8]) {
    let start = begin_message(out, b'p');
    put_cstr(out, mechanism);
    put_i32(out, data.len() as i32);
    out.extend_from_slice(data);
    finish_message(out, start);
}

pub fn encode_sasl_response(out: &mut Vec<u8>, data: &[u8]) {
    let start = begin_message(out, b'p');
    out.extend_from_slice(data);
    finish_message(out, start);
}

pub fn encode_copy_data(out: &mut Vec<u8>, data: &[u8]) {
    let start = begin_message(out, b'd');
    out.extend_from_slice(data);
    finish_message(out, start);
}

pub fn encode_copy_fail(out: &mut Vec<u8>, message: &str) {
    let start = begin_message(out, b'f');
    put_cstr(out, message);
    finish_message(out, start);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::split_frame;

    fn one(bytes: &[u8]) -> FrontendMessage<'_> {
        let (frame, n) = split_frame(bytes, 1 << 20).unwrap().unwrap();
        assert_eq!(n, bytes.len());
        FrontendMessage::parse(frame).unwrap()
    }

    #[test]
    fn startup_round_trips() {
        let mut b = Vec::new();
        encode_startup(
            &mut b,
            PROTOCOL_3_0,
            &[("user", "alice"), ("database", "db")],
        );
        let (body, n) = split_startup(&b).unwrap().unwrap();
        assert_eq!(n, b.len());
        let StartupRequest::Startup { version, params } = StartupRequest::parse(body).unwrap()
        else {
            panic!("not a startup")
        };
        assert_eq!(version, PROTOCOL_3_0);
        assert_eq!(
            params.iter().collect::<Vec<_>>(),
            vec![("user", "alice"), ("database", "db")]
        );
        assert_eq!(params.get("database"), Some("db"));

        for (enc, want) in [
            (
                encode_ssl_request as fn(&mut Vec<u8>),
                StartupRequest::SslRequest,
            ),
            (encode_gssenc_request, StartupRequest::GssEncRequest),
        ] {
            let mut b = Vec::new();
            enc(&mut b);
            let (body, _) = split_startup(&b).unwrap().unwrap();
            assert_eq!(StartupRequest::parse(body).unwrap(), want);
        }
        let mut b = Vec::new();
        encode_cancel(&mut b, 42, &7i32.to_be_bytes());
        assert_eq!(b.len(), 16);
        let (body, _) = split_startup(&b).unwrap().unwrap();
        assert_eq!(
            StartupRequest::parse(body).unwrap(),
            StartupRequest::Cancel {
                process_id: 42,
                secret_key: &7i32.to_be_bytes()
            }
        );
    }

    #[test]
    fn bad_startup_packets_are_fatal() {
        assert!(split_startup(&[0, 0, 0, 4]).is_err());
        assert!(split_startup(&[0, 1, 0, 0]).is_err());
        let mut b = Vec::new();
        encode_startup(&mut b, 2 << 16, &[]);
        let (body, _) = split_startup(&b).unwrap().unwrap();
        let e = StartupRequest::parse(body).unwrap_err();
        assert_eq!(e.code, SqlState::FEATURE_NOT_SUPPORTED);
        // Missing final terminator.
        let body = [0u8, 3, 0, 0, b'u', 0, b'a', 0];
        assert_eq!(
            StartupRequest::parse(&body).unwrap_err().severity,
            crate::error::Severity::Fatal
        );
    }

    #[test]
    fn every_frontend_message_round_trips() {
        let mut b = Vec::new();
        encode_query(&mut b, "select 1");
        assert_eq!(one(&b), FrontendMessage::Query { sql: "select 1" });

        b.clear();
        encode_parse(&mut b, "s1", "select $1", &[23, 25]);
        let FrontendMessage::Parse {
            name,
            sql,
            param_types,
        } = one(&b)
        else {
            panic!()
        };
        assert_eq!((name, sql), ("s1", "select $1"));
        assert_eq!(param_types.iter().collect::<Vec<_>>(), vec![23, 25]);

        b.clear();
        encode_bind(
            &mut b,
            "p",
            "s1",
            &[Format::Binary],
            &[Some(&[0, 0, 0, 1]), None, Some(b"")],
            &[Format::Text, Format::Binary],
        );
        let FrontendMessage::Bind(bind) = one(&b) else {
            panic!()
        };
        assert_eq!(
            (bind.portal, bind.statement, bind.param_count()),
            ("p", "s1", 3)
        );
        assert_eq!(
            bind.params().collect::<Vec<_>>(),
            vec![Some(&[0u8, 0, 0, 1][..]), None, Some(&b""[..])]
        );
        assert_eq!(bind.param_format(2), Format::Binary);
        assert_eq!(
            (bind.result_format(0), bind.result_format(1)),
            (Format::Text, Format::Binary)
        );
        assert_eq!(bind.result_format_count(), 2);

        for target in [Target::Statement, Target::Portal] {
            b.clear();
            encode_describe(&mut b, target, "x");
            assert_eq!(one(&b), FrontendMessage::Describe { target, name: "x" });
            b.clear();
            encode_close(&mut b, target, "");
            assert_eq!(one(&b), FrontendMessage::Close { target, name: "" });
        }
        b.clear();
        encode_execute(&mut b, "", 10);
        assert_eq!(
            one(&b),
            FrontendMessage::Execute {
                portal: "",
                max_rows: 10
            }
        );
        for (tag, want) in [
            (b'S', FrontendMessage::Sync),
            (b'H', FrontendMessage::Flush),
            (b'X', FrontendMessage::Terminate),
            (b'c', FrontendMessage::CopyDone),
        ] {
            b.clear();
            encode_empty(&mut b, tag);
            assert_eq!(one(&b), want);
        }
        b.clear();
        encode_password(&mut b, "secret");
        let FrontendMessage::Password { body } = one(&b) else {
            panic!()
        };
        assert_eq!(parse_password(body).unwrap(), "secret");
        b.clear();
        encode_sasl_initial_response(&mut b, "SCRAM-SHA-256", b"n,,n=,r=abc");
        let FrontendMessage::Password { body } = one(&b) else {
            panic!()
        };
        assert_eq!(
            SaslInitialResponse::parse(body).unwrap(),
            SaslInitialResponse {
                mechanism: "SCRAM-SHA-256",
                data: Some(b"n,,n=,r=abc")
            }
        );
        b.clear();
        encode_sasl_response(&mut b, b"c=biws");
        assert_eq!(one(&b), FrontendMessage::Password { body: b"c=biws" });
        b.clear();
        encode_copy_data(&mut b, b"1\t2\n");
        assert_eq!(one(&b), FrontendMessage::CopyData { data: b"1\t2\n" });
        b.clear();
        encode_copy_fail(&mut b, "nope");
        assert_eq!(one(&b), FrontendMessage::CopyFail { message: "nope" });
    }

    #[test]
    fn malformed_bodies_are_errors_not_panics() {
        // Bind claiming 1000 parameters in a short body.
        let body = b"\0\0\0\0\x03\xe8\0\0\0\x01x\0\0";
        let e = FrontendMessage::parse(Frame { tag: b'B', body }).unwrap_err();
        assert_eq!(e.code, SqlState::PROTOCOL_VIOLATION);
        // Parse claiming 30000 parameter types.
        let e = FrontendMessage::parse(Frame {
            tag: b'P',
            body: b"\0\0\x75\x30",
        })
        .unwrap_err();
        assert_eq!(e.code, SqlState::PROTOCOL_VIOLATION);
        // Bad format code.
        let e = FrontendMessage::parse(Frame {
            tag: b'B',
            body: b"\0\0\0\x01\0\x07\0\0\0\0",
        })
        .unwrap_err();
        assert_eq!(e.code, SqlState::INVALID_PARAMETER_VALUE);
        // Trailing bytes after Sync.
        assert!(FrontendMessage::parse(Frame {
            tag: b'S',
            body: b"x"
        })
        .is_err());
        // Unknown tag is fatal.
        let e = FrontendMessage::parse(Frame {
            tag: b'z',
            body: b"",
        })
        .unwrap_err();
        assert_eq!(e.severity, crate::error::Severity::Fatal);
        // Describe with a bad subtype.
        assert!(FrontendMessage::parse(Frame {
            tag: b'D',
            body: b"Q\0"
        })
        .is_err());
        // Invalid UTF-8 in a query.
        let e = FrontendMessage::parse(Frame {
            tag: b'Q',
            body: b"\xc3\x28\0",
        })
        .unwrap_err();
        assert_eq!(e.code, SqlState::CHARACTER_NOT_IN_REPERTOIRE);
    }
}
