//! Messages the server sends. Encoders append to the connection's write buffer (a `Vec<u8>`
//! reused across queries) and never allocate on their own; [`BackendMessage::parse`] decodes
//! them again for the load generator and the tests.

use crate::error::{PgError, Severity, SqlState};
use crate::types::Oid;
use crate::wire::{
    begin_message, finish_message, malformed, put_cstr, put_i16, put_i32, Format, Frame, Reader,
};

/// Transaction status of ReadyForQuery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransactionStatus {
    Idle,
    InBlock,
    Failed,
}

impl TransactionStatus {
    pub fn code(self) -> u8 {
        match self {
            TransactionStatus::Idle => b'I',
            TransactionStatus::InBlock => b'T',
            TransactionStatus::Failed => b'E',
        }
    }
}

/// One column of a RowDescription.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldDescription<'a> {
    pub name: &'a str,
    pub table_oid: Oid,
    pub column_id: i16,
    pub type_oid: Oid,
    pub type_len: i16,
    pub type_modifier: i32,
    pub format: Format,
}

// ---- encoders ----

pub fn write_auth_ok(out: &mut Vec<u8>) {
    write_auth(out, 0, &[]);
}

pub fn write_auth_cleartext(out: &mut Vec<u8>) {
    write_auth(out, 3, &[]);
}

pub fn write_auth_md5(out: &mut Vec<u8>, salt: [u8; 4]) {
    write_auth(out, 5, &salt);
}

/// AuthenticationSASL: the mechanisms offered, each NUL-terminated, then an empty one.
pub fn write_auth_sasl(out: &mut Vec<u8>, mechanisms: &[&str]) {
    let start = begin_message(out, b'R');
    put_i32(out, 10);
    for m in mechanisms {
        put_cstr(out, m);
    }
    out.push(0);
    finish_message(out, start);
}

pub fn write_auth_sasl_continue(out: &mut Vec<u8>, data: &[u8]) {
    write_auth(out, 11, data);
}

pub fn write_auth_sasl_final(out: &mut Vec<u8>, data: &[u8]) {
    write_auth(out, 12, data);
}

fn write_auth(out: &mut Vec<u8>, code: i32, data: &[u8]) {
    let start = begin_message(out, b'R');
    put_i32(out, code);
    out.extend_from_slice(data);
    finish_message(out, start);
}

pub fn write_parameter_status(out: &mut Vec<u8>, name: &str, value: &str) {
    let start = begin_message(out, b'S');
    put_cstr(out, name);
    put_cstr(out, value);
    finish_message(out, start);
}

pub fn write_backend_key_data(out: &mut Vec<u8>, process_id: i32, secret_key: i32) {
    let start = begin_message(out, b'K');
    put_i32(out, process_id);
    put_i32(out, secret_key);
    finish_message(out, start);
}

/// NotificationResponse: `process_id` is the notifying session's (its BackendKeyData).
pub fn write_notification(out: &mut Vec<u8>, process_id: i32, channel: &str, payload: &str) {
    let start = begin_message(out, b'A');
    put_i32(out, process_id);
    put_cstr(out, channel);
    put_cstr(out, payload);
    finish_message(out, start);
}

pub fn write_ready_for_query(out: &mut Vec<u8>, status: TransactionStatus) {
    out.extend_from_slice(&[b'Z', 0, 0, 0, 5, status.code()]);
}

pub fn write_row_description(out: &mut Vec<u8>, fields: &[FieldDescription<'_>]) {
    let start = begin_message(out, b'T');
    put_i16(out, fields.len() as i16);
    for f in fields {
        put_cstr(out, f.name);
        put_i32(out, f.table_oid as i32);
        put_i16(out, f.column_id);
        put_i32(out, f.type_oid as i32);
        put_i16(out, f.type_len);
        put_i32(out, f.type_modifier);
        put_i16(out, f.format.code());
    }
    finish_message(out, start);
}

/// Writes one DataRow in place: values are appended straight into the write buffer and the
/// lengths back-patched, so no value is staged anywhere else.
pub struct DataRowWriter<'o> {
    out: &'o mut Vec<u8>,
    start: usize,
    columns: i16,
}

impl<'o> DataRowWriter<'o> {
    pub fn begin(out: &'o mut Vec<u8>) -> DataRowWriter<'o> {
        let start = begin_message(out, b'D');
        put_i16(out, 0);
        DataRowWriter {
            out,
            start,
            columns: 0,
        }
    }

    pub fn null(&mut self) {
        put_i32(self.out, -1);
        self.columns += 1;
    }

    pub fn value(&mut self, bytes: &[u8]) {
        put_i32(self.out, bytes.len() as i32);
        self.out.extend_from_slice(bytes);
        self.columns += 1;
    }

    /// Let `write` append the value's bytes directly; its length is filled in afterwards.
    pub fn value_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let len_at = self.out.len();
        put_i32(self.out, 0);
        write(self.out);
        let len = (self.out.len() - len_at - 4) as i32;
        self.out[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
        self.columns += 1;
    }

    pub fn finish(self) {
        let at = self.start + 4;
        self.out[at..at + 2].copy_from_slice(&self.columns.to_be_bytes());
        finish_message(self.out, self.start);
    }
}

pub fn write_command_complete(out: &mut Vec<u8>, tag: &str) {
    let start = begin_message(out, b'C');
    put_cstr(out, tag);
    finish_message(out, start);
}

/// CommandComplete with the tag `"{verb} {count}"` (`SELECT 1`, `INSERT 0 5`), written in
/// place without formatting.
pub fn write_command_complete_parts(out: &mut Vec<u8>, verb: &str, count: &str) {
    let start = begin_message(out, b'C');
    out.extend_from_slice(verb.as_bytes());
    out.push(b' ');
    put_cstr(out, count);
    finish_message(out, start);
}

pub fn write_empty_query_response(out: &mut Vec<u8>) {
    out.extend_from_slice(&[b'I', 0, 0, 0, 4]);
}

pub fn write_parse_complete(out: &mut Vec<u8>) {
    out.extend_from_slice(&[b'1', 0, 0, 0, 4]);
}

pub fn write_bind_complete(out: &mut Vec<u8>) {
    out.extend_from_slice(&[b'2', 0, 0, 0, 4]);
}

pub fn write_close_complete(out: &mut Vec<u8>) {
    out.extend_from_slice(&[b'3', 0, 0, 0, 4]);
}

pub fn write_no_data(out: &mut Vec<u8>) {
    out.extend_from_slice(&[b'n', 0, 0, 0, 4]);
}

pub fn write_portal_suspended(out: &mut Vec<u8>) {
    out.extend_from_slice(&[b's', 0, 0, 0, 4]);
}

pub fn write_parameter_description(out: &mut Vec<u8>, types: &[Oid]) {
    let start = begin_message(out, b't');
    put_i16(out, types.len() as i16);
    for oid in types {
        put_i32(out, *oid as i32);
    }
    finish_message(out, start);
}

/// NegotiateProtocolVersion: the newest protocol version we support and the `_pq_.` options we
/// did not recognise. The protocol documentation says "minor version", but PostgreSQL sends the
/// whole version number (`3 << 16 | minor`), and clients read it that way.
pub fn write_negotiate_protocol_version<'a>(
    out: &mut Vec<u8>,
    newest_version: u32,
    unrecognized: impl ExactSizeIterator<Item = &'a str>,
) {
    let start = begin_message(out, b'v');
    put_i32(out, newest_version as i32);
    put_i32(out, unrecognized.len() as i32);
    for opt in unrecognized {
        put_cstr(out, opt);
    }
    finish_message(out, start);
}

pub fn write_error(out: &mut Vec<u8>, err: &PgError) {
    write_error_or_notice(out, b'E', err);
}

pub fn write_notice(out: &mut Vec<u8>, notice: &PgError) {
    write_error_or_notice(out, b'N', notice);
}

fn write_error_or_notice(out: &mut Vec<u8>, tag: u8, err: &PgError) {
    let start = begin_message(out, tag);
    let severity = err.severity.as_str();
    for (field, value) in [
        (b'S', severity),
        (b'V', severity),
        (b'C', err.code.as_str()),
        (b'M', &err.message),
    ] {
        out.push(field);
        put_cstr(out, value);
    }
    if let Some(detail) = &err.detail {
        out.push(b'D');
        put_cstr(out, detail);
    }
    if let Some(hint) = &err.hint {
        out.push(b'H');
        put_cstr(out, hint);
    }
    if let Some(position) = err.position {
        out.push(b'P');
        put_cstr(out, itoa_u32(position).as_str());
    }
    if let Some(object) = &err.object {
        for (field, value) in [
            (b's', &object.schema),
            (b't', &object.table),
            (b'c', &object.column),
            (b'n', &object.constraint),
        ] {
            if let Some(value) = value {
                out.push(field);
                put_cstr(out, value);
            }
        }
    }
    out.push(0);
    finish_message(out, start);
}

/// A tiny no-allocation integer formatter for the position field.
struct Digits {
    buf: [u8; 10],
    start: usize,
}

impl Digits {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[self.start..]).unwrap_or("0")
    }
}

fn itoa_u32(mut n: u32) -> Digits {
    let mut d = Digits {
        buf: [0; 10],
        start: 10,
    };
    loop {
        d.start -= 1;
        d.buf[d.start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return d;
        }
    }
}

/// CopyInResponse / CopyOutResponse: overall format and one format per column.
pub fn write_copy_response(out: &mut Vec<u8>, tag: u8, format: Format, columns: usize) {
    debug_assert!(tag == b'G' || tag == b'H' || tag == b'W');
    let start = begin_message(out, tag);
    out.push(format.code() as u8);
    put_i16(out, columns as i16);
    for _ in 0..columns {
        put_i16(out, format.code());
    }
    finish_message(out, start);
}

pub fn write_copy_data(out: &mut Vec<u8>, data: &[u8]) {
    let start = begin_message(out, b'd');
    out.extend_from_slice(data);
    finish_message(out, start);
}

pub fn write_copy_done(out: &mut Vec<u8>) {
    out.extend_from_slice(&[b'c', 0, 0, 0, 4]);
}

// ---- decoding (clients, the load generator, tests) ----

/// A message from the server, borrowed from the read buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendMessage<'a> {
    AuthenticationOk,
    AuthenticationCleartextPassword,
    AuthenticationMd5Password {
        salt: [u8; 4],
    },
    AuthenticationSasl {
        mechanisms: Vec<&'a str>,
    },
    AuthenticationSaslContinue {
        data: &'a [u8],
    },
    AuthenticationSaslFinal {
        data: &'a [u8],
    },
    ParameterStatus {
        name: &'a str,
        value: &'a str,
    },
    BackendKeyData {
        process_id: i32,
        secret_key: i32,
    },
    ReadyForQuery {
        status: TransactionStatus,
    },
    RowDescription {
        fields: Vec<FieldDescription<'a>>,
    },
    DataRow {
        values: Vec<Option<&'a [u8]>>,
    },
    CommandComplete {
        tag: &'a str,
    },
    EmptyQueryResponse,
    ErrorResponse(ErrorFields<'a>),
    NoticeResponse(ErrorFields<'a>),
    ParseComplete,
    BindComplete,
    CloseComplete,
    NoData,
    PortalSuspended,
    ParameterDescription {
        types: Vec<Oid>,
    },
    NegotiateProtocolVersion {
        newest_version: u32,
        unrecognized: Vec<&'a str>,
    },
    CopyInResponse {
        format: Format,
        columns: Vec<Format>,
    },
    CopyOutResponse {
        format: Format,
        columns: Vec<Format>,
    },
    CopyData {
        data: &'a [u8],
    },
    CopyDone,
    NotificationResponse {
        process_id: i32,
        channel: &'a str,
        payload: &'a str,
    },
}

/// The fields of an ErrorResponse or NoticeResponse, by their one-byte codes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorFields<'a> {
    pub fields: Vec<(u8, &'a str)>,
}

impl<'a> ErrorFields<'a> {
    pub fn get(&self, code: u8) -> Option<&'a str> {
        self.fields
            .iter()
            .find(|(c, _)| *c == code)
            .map(|(_, v)| *v)
    }
    pub fn code(&self) -> &'a str {
        self.get(b'C').unwrap_or("")
    }
    pub fn message(&self) -> &'a str {
        self.get(b'M').unwrap_or("")
    }
    pub fn severity(&self) -> &'a str {
        self.get(b'V').or(self.get(b'S')).unwrap_or("")
    }
}

impl<'a> BackendMessage<'a> {
    /// Parse one frame from [`crate::wire::split_frame`]. Counts are checked against the bytes
    /// present before any vector is sized from them.
    pub fn parse(frame: Frame<'a>) -> Result<BackendMessage<'a>, PgError> {
        let mut r = Reader::new(frame.body);
        let msg = match frame.tag {
            b'R' => match r.i32()? {
                0 => BackendMessage::AuthenticationOk,
                3 => BackendMessage::AuthenticationCleartextPassword,
                5 => {
                    let s = r.bytes(4)?;
                    BackendMessage::AuthenticationMd5Password {
                        salt: [s[0], s[1], s[2], s[3]],
                    }
                }
                10 => {
                    let mut mechanisms = Vec::new();
                    loop {
                        let m = r.cstr()?;
                        if m.is_empty() {
                            break;
                        }
                        mechanisms.push(m);
                    }
                    BackendMessage::AuthenticationSasl { mechanisms }
                }
                11 => return Ok(BackendMessage::AuthenticationSaslContinue { data: r.rest() }),
                12 => return Ok(BackendMessage::AuthenticationSaslFinal { data: r.rest() }),
                other => {
                    return Err(malformed(&format!(
                        "unsupported authentication request {other}"
                    )))
                }
            },
            b'S' => BackendMessage::ParameterStatus {
                name: r.cstr()?,
                value: r.cstr()?,
            },
            b'K' => BackendMessage::BackendKeyData {
                process_id: r.i32()?,
                secret_key: r.i32()?,
            },
            b'Z' => BackendMessage::ReadyForQuery {
                status: match r.u8()? {
                    b'I' => TransactionStatus::Idle,
                    b'T' => TransactionStatus::InBlock,
                    b'E' => TransactionStatus::Failed,
                    _ => return Err(malformed("bad transaction status")),
                },
            },
            b'T' => {
                let n = bounded_count(&mut r, 19)?;
                let mut fields = Vec::with_capacity(n);
                for _ in 0..n {
                    fields.push(FieldDescription {
                        name: r.cstr()?,
                        table_oid: r.u32()?,
                        column_id: r.i16()?,
                        type_oid: r.u32()?,
                        type_len: r.i16()?,
                        type_modifier: r.i32()?,
                        format: Format::from_code(r.i16()?)?,
                    });
                }
                BackendMessage::RowDescription { fields }
            }
            b'D' => {
                let n = bounded_count(&mut r, 4)?;
                let mut values = Vec::with_capacity(n);
                for _ in 0..n {
                    let len = r.i32()?;
                    values.push(if len < 0 {
                        None
                    } else {
                        Some(r.bytes(len as usize)?)
                    });
                }
                BackendMessage::DataRow { values }
            }
            b'C' => BackendMessage::CommandComplete { tag: r.cstr()? },
            b'I' => BackendMessage::EmptyQueryResponse,
            b'E' | b'N' => {
                let mut fields = Vec::new();
                loop {
                    let code = r.u8()?;
                    if code == 0 {
                        break;
                    }
                    fields.push((code, r.cstr()?));
                }
                let f = ErrorFields { fields };
                if frame.tag == b'E' {
                    BackendMessage::ErrorResponse(f)
                } else {
                    BackendMessage::NoticeResponse(f)
                }
            }
            b'1' => BackendMessage::ParseComplete,
            b'2' => BackendMessage::BindComplete,
            b'3' => BackendMessage::CloseComplete,
            b'n' => BackendMessage::NoData,
            b's' => BackendMessage::PortalSuspended,
            b't' => {
                let n = bounded_count(&mut r, 4)?;
                let mut types = Vec::with_capacity(n);
                for _ in 0..n {
                    types.push(r.u32()?);
                }
                BackendMessage::ParameterDescription { types }
            }
            b'v' => {
                let newest_version = r.u32()?;
                let n = r.i32()?;
                if n < 0 || n as usize > r.remaining() {
                    return Err(malformed("bad option count"));
                }
                let mut unrecognized = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    unrecognized.push(r.cstr()?);
                }
                BackendMessage::NegotiateProtocolVersion {
                    newest_version,
                    unrecognized,
                }
            }
            b'G' | b'H' => {
                let format = Format::from_code(r.u8()? as i16)?;
                let n = bounded_count(&mut r, 2)?;
                let mut columns = Vec::with_capacity(n);
                for _ in 0..n {
                    columns.push(Format::from_code(r.i16()?)?);
                }
                if frame.tag == b'G' {
                    BackendMessage::CopyInResponse { format, columns }
                } else {
                    BackendMessage::CopyOutResponse { format, columns }
                }
            }
            b'd' => return Ok(BackendMessage::CopyData { data: frame.body }),
            b'c' => BackendMessage::CopyDone,
            b'A' => BackendMessage::NotificationResponse {
                process_id: r.i32()?,
                channel: r.cstr()?,
                payload: r.cstr()?,
            },
            tag => {
                return Err(malformed(&format!(
                    "unknown backend message type {}",
                    tag.escape_ascii()
                )))
            }
        };
        r.finish()?;
        Ok(msg)
    }
}

/// A 16-bit count whose items take at least `min_item_bytes` each: refuse counts the remaining
/// body cannot possibly hold, before allocating for them.
fn bounded_count(r: &mut Reader<'_>, min_item_bytes: usize) -> Result<usize, PgError> {
    let n = r.i16()?;
    if n < 0 || n as usize * min_item_bytes > r.remaining() {
        return Err(malformed("count exceeds message length"));
    }
    Ok(n as usize)
}

impl ErrorFields<'_> {
    /// Rebuild an owned [`PgError`] (tests, and the upstream mode relaying errors).
    pub fn to_pg_error(&self) -> PgError {
        let severity = match self.severity() {
            "FATAL" => Severity::Fatal,
            "PANIC" => Severity::Panic,
            "WARNING" => Severity::Warning,
            "NOTICE" => Severity::Notice,
            "DEBUG" => Severity::Debug,
            "INFO" => Severity::Info,
            "LOG" => Severity::Log,
            _ => Severity::Error,
        };
        let code = self.code().as_bytes();
        let code = if code.len() == 5 {
            SqlState([code[0], code[1], code[2], code[3], code[4]])
        } else {
            SqlState::INTERNAL_ERROR
        };
        PgError {
            severity,
            code,
            message: self.message().to_string().into(),
            detail: self.get(b'D').map(str::to_string),
            hint: self.get(b'H').map(str::to_string),
            position: self.get(b'P').and_then(|p| p.parse().ok()),
            object: {
                let object = crate::error::ErrorObject {
                    schema: self.get(b's').map(str::to_string),
                    table: self.get(b't').map(str::to_string),
                    column: self.get(b'c').map(str::to_string),
                    constraint: self.get(b'n').map(str::to_string),
                };
                (object != crate::error::ErrorObject::default()).then(|| Box::new(object))
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::split_frame;

    fn parse_all(buf: &[u8]) -> Vec<BackendMessage<'_>> {
        let mut at = 0;
        let mut out = Vec::new();
        while let Some((frame, n)) = split_frame(&buf[at..], 1 << 20).unwrap() {
            out.push(BackendMessage::parse(frame).unwrap());
            at += n;
        }
        assert_eq!(at, buf.len(), "trailing partial message");
        out
    }

    #[test]
    fn the_object_an_error_is_about_round_trips() {
        let err = PgError::new(SqlState(*b"23505"), "duplicate key")
            .with_detail("Key (id)=(1) already exists.")
            .with_object(crate::error::ErrorObject {
                schema: Some("public".into()),
                table: Some("t".into()),
                column: None,
                constraint: Some("t_pkey".into()),
            });
        let mut b = Vec::new();
        write_error(&mut b, &err);
        let (frame, n) = split_frame(&b, 1 << 20).unwrap().unwrap();
        assert_eq!(n, b.len());
        let BackendMessage::ErrorResponse(fields) = BackendMessage::parse(frame).unwrap() else {
            panic!("not an ErrorResponse");
        };
        assert_eq!(fields.get(b'n'), Some("t_pkey"));
        assert_eq!(fields.get(b'c'), None);
        assert_eq!(fields.to_pg_error(), err);
        // Without an object, none of the fields is sent and none is parsed.
        let plain = PgError::new(SqlState(*b"22012"), "division by zero");
        let mut b = Vec::new();
        write_error(&mut b, &plain);
        let (frame, _) = split_frame(&b, 1 << 20).unwrap().unwrap();
        let BackendMessage::ErrorResponse(fields) = BackendMessage::parse(frame).unwrap() else {
            panic!("not an ErrorResponse");
        };
        assert_eq!(fields.to_pg_error(), plain);
    }

    #[test]
    fn every_backend_message_round_trips() {
        let mut b = Vec::new();
        write_auth_ok(&mut b);
        write_auth_cleartext(&mut b);
        write_auth_md5(&mut b, [1, 2, 3, 4]);
        write_auth_sasl(&mut b, &["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"]);
        write_auth_sasl_continue(&mut b, b"r=abc,s=xyz,i=4096");
        write_auth_sasl_final(&mut b, b"v=xyz");
        write_parameter_status(&mut b, "server_version", "16.0");
        write_backend_key_data(&mut b, 7, -9);
        write_ready_for_query(&mut b, TransactionStatus::Failed);
        let field = FieldDescription {
            name: "?column?",
            table_oid: 0,
            column_id: 0,
            type_oid: 23,
            type_len: 4,
            type_modifier: -1,
            format: Format::Binary,
        };
        write_row_description(&mut b, std::slice::from_ref(&field));
        let mut row = DataRowWriter::begin(&mut b);
        row.value(b"1");
        row.null();
        row.value_with(|o| o.extend_from_slice(b"hello"));
        row.value(b"");
        row.finish();
        write_command_complete(&mut b, "SELECT 1");
        write_empty_query_response(&mut b);
        let err = PgError::new(SqlState::SYNTAX_ERROR, "syntax error at or near \"x\"")
            .with_detail("d")
            .with_hint("h")
            .with_position(12);
        write_error(&mut b, &err);
        write_notice(
            &mut b,
            &PgError {
                severity: Severity::Warning,
                ..PgError::new(SqlState::WARNING, "w")
            },
        );
        write_parse_complete(&mut b);
        write_bind_complete(&mut b);
        write_close_complete(&mut b);
        write_no_data(&mut b);
        write_portal_suspended(&mut b);
        write_parameter_description(&mut b, &[23, 25]);
        write_negotiate_protocol_version(
            &mut b,
            crate::frontend::PROTOCOL_3_0,
            ["_pq_.foo"].into_iter(),
        );
        write_copy_response(&mut b, b'G', Format::Text, 2);
        write_copy_response(&mut b, b'H', Format::Binary, 1);
        write_copy_data(&mut b, b"1\t2\n");
        write_copy_done(&mut b);

        let msgs = parse_all(&b);
        let expected = vec![
            BackendMessage::AuthenticationOk,
            BackendMessage::AuthenticationCleartextPassword,
            BackendMessage::AuthenticationMd5Password { salt: [1, 2, 3, 4] },
            BackendMessage::AuthenticationSasl {
                mechanisms: vec!["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"],
            },
            BackendMessage::AuthenticationSaslContinue {
                data: b"r=abc,s=xyz,i=4096",
            },
            BackendMessage::AuthenticationSaslFinal { data: b"v=xyz" },
            BackendMessage::ParameterStatus {
                name: "server_version",
                value: "16.0",
            },
            BackendMessage::BackendKeyData {
                process_id: 7,
                secret_key: -9,
            },
            BackendMessage::ReadyForQuery {
                status: TransactionStatus::Failed,
            },
            BackendMessage::RowDescription {
                fields: vec![field],
            },
            BackendMessage::DataRow {
                values: vec![Some(b"1"), None, Some(b"hello"), Some(b"")],
            },
            BackendMessage::CommandComplete { tag: "SELECT 1" },
            BackendMessage::EmptyQueryResponse,
            BackendMessage::ErrorResponse(ErrorFields {
                fields: vec![
                    (b'S', "ERROR"),
                    (b'V', "ERROR"),
                    (b'C', "42601"),
                    (b'M', "syntax error at or near \"x\""),
                    (b'D', "d"),
                    (b'H', "h"),
                    (b'P', "12"),
                ],
            }),
            BackendMessage::NoticeResponse(ErrorFields {
                fields: vec![
                    (b'S', "WARNING"),
                    (b'V', "WARNING"),
                    (b'C', "01000"),
                    (b'M', "w"),
                ],
            }),
            BackendMessage::ParseComplete,
            BackendMessage::BindComplete,
            BackendMessage::CloseComplete,
            BackendMessage::NoData,
            BackendMessage::PortalSuspended,
            BackendMessage::ParameterDescription {
                types: vec![23, 25],
            },
            BackendMessage::NegotiateProtocolVersion {
                newest_version: 3 << 16,
                unrecognized: vec!["_pq_.foo"],
            },
            BackendMessage::CopyInResponse {
                format: Format::Text,
                columns: vec![Format::Text, Format::Text],
            },
            BackendMessage::CopyOutResponse {
                format: Format::Binary,
                columns: vec![Format::Binary],
            },
            BackendMessage::CopyData { data: b"1\t2\n" },
            BackendMessage::CopyDone,
        ];
        assert_eq!(msgs, expected);
        let BackendMessage::ErrorResponse(fields) = &msgs[13] else {
            unreachable!()
        };
        assert_eq!(fields.to_pg_error(), err);
    }

    #[test]
    fn hostile_counts_do_not_allocate() {
        // DataRow claiming 32767 columns in 2 bytes of body.
        assert!(BackendMessage::parse(Frame {
            tag: b'D',
            body: b"\x7f\xff"
        })
        .is_err());
        assert!(BackendMessage::parse(Frame {
            tag: b'T',
            body: b"\x7f\xff\0"
        })
        .is_err());
        assert!(BackendMessage::parse(Frame {
            tag: b'v',
            body: b"\0\0\0\0\x7f\xff\xff\xff"
        })
        .is_err());
    }
}
