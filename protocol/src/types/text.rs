//! PostgreSQL's text format: what `*_out` functions print and `*_in` functions accept.
//!
//! Output matches PostgreSQL 15 byte for byte with `DateStyle = ISO, MDY`,
//! `IntervalStyle = postgres` and `bytea_output = hex`; the session's `TimeZone` and
//! `extra_float_digits` come from [`TextContext`]. [`encode`] appends to the caller's buffer and
//! does not allocate otherwise. [`decode`] takes the value's bytes as they came off the wire.

use super::datetime::{self, DtKind};
use super::{float, json, Interval, Numeric, Scalar, TextContext, Type, Value};
use crate::error::{PgError, SqlState};

/// Appends the text form of `value` (a value of type `ty`) to `out`.
///
/// `Value::Null` at the top level writes nothing: on the wire a NULL column is length -1, which
/// the caller writes. Inside arrays NULL elements print as `NULL`.
pub fn encode(value: &Value, ty: Type, ctx: &TextContext, out: &mut Vec<u8>) {
    debug_assert!(
        super::value_matches(value, ty),
        "value {value:?} does not belong to type {ty:?}"
    );
    match value {
        Value::Array(items) => encode_array(items, ctx, out),
        _ => encode_scalar(value, ctx, out),
    }
}

fn encode_scalar(value: &Value, ctx: &TextContext, out: &mut Vec<u8>) {
    match value {
        Value::Null => {}
        Value::Bool(b) => out.push(if *b { b't' } else { b'f' }),
        Value::Int2(v) => write_int(*v as i64, out),
        Value::Int4(v) => write_int(*v as i64, out),
        Value::Int8(v) => write_int(*v, out),
        Value::Float4(v) => float::write_f32(*v, ctx.extra_float_digits, out),
        Value::Float8(v) => float::write_f64(*v, ctx.extra_float_digits, out),
        Value::Numeric(n) => n.write_text(out),
        Value::Text(s) => out.extend_from_slice(s.as_bytes()),
        Value::Bytea(b) => {
            out.reserve(2 + b.len() * 2);
            out.extend_from_slice(b"\\x");
            for &byte in b {
                out.push(HEX[(byte >> 4) as usize]);
                out.push(HEX[(byte & 15) as usize]);
            }
        }
        Value::Date(d) => datetime::write_date(*d, out),
        Value::Time(t) => datetime::write_time(*t, out),
        Value::Timestamp(t) => datetime::write_timestamp(*t, None, out),
        Value::Timestamptz(t) => datetime::write_timestamptz(*t, &ctx.time_zone, out),
        Value::Interval(iv) => datetime::write_interval(iv, out),
        Value::Uuid(u) => write_uuid(u, out),
        Value::Array(_) => {
            debug_assert!(false, "nested arrays are not supported");
        }
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn write_uuid(u: &[u8; 16], out: &mut Vec<u8>) {
    for (i, &b) in u.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push(b'-');
        }
        out.push(HEX[(b >> 4) as usize]);
        out.push(HEX[(b & 15) as usize]);
    }
}

/// Decimal digits of an integer, via a stack buffer.
pub(crate) fn write_int(v: i64, out: &mut Vec<u8>) {
    let mut buf = [0u8; 20];
    let mut n = buf.len();
    let mut x = v.unsigned_abs();
    loop {
        n -= 1;
        buf[n] = b'0' + (x % 10) as u8;
        x /= 10;
        if x == 0 {
            break;
        }
    }
    if v < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&buf[n..]);
}

fn array_isspace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// `array_out` for one dimension: elements are written in place and quoted afterwards when
/// PostgreSQL would quote them, so no temporary string is needed.
fn encode_array(items: &[Value], ctx: &TextContext, out: &mut Vec<u8>) {
    out.push(b'{');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if item.is_null() {
            out.extend_from_slice(b"NULL");
            continue;
        }
        let start = out.len();
        encode_scalar(item, ctx, out);
        let element = &out[start..];
        let mut need_quote = element.is_empty() || element.eq_ignore_ascii_case(b"NULL");
        let mut escapes = 0;
        for &c in element {
            if c == b'"' || c == b'\\' {
                need_quote = true;
                escapes += 1;
            } else if c == b'{' || c == b'}' || c == b',' || array_isspace(c) {
                need_quote = true;
            }
        }
        if need_quote {
            let len = out.len() - start;
            out.resize(out.len() + escapes + 2, 0);
            // Shift right to left, inserting the closing quote, escapes and opening quote.
            let mut dst = out.len() - 1;
            out[dst] = b'"';
            for src in (start..start + len).rev() {
                let c = out[src];
                dst -= 1;
                out[dst] = c;
                if c == b'"' || c == b'\\' {
                    dst -= 1;
                    out[dst] = b'\\';
                }
            }
            dst -= 1;
            debug_assert_eq!(dst, start);
            out[dst] = b'"';
        }
    }
    out.push(b'}');
}

// ---------------------------------------------------------------------------------------------
// Decoding

/// Parses the text form of a value of type `ty`.
pub fn decode(ty: Type, text: &[u8], ctx: &TextContext) -> Result<Value, PgError> {
    let s = validate_utf8(text)?;
    if ty.array {
        return decode_array(ty.scalar, s, ctx);
    }
    decode_scalar(ty.scalar, s, ctx)
}

/// Input must be valid UTF-8 without NUL bytes, as the server encoding requires.
pub(crate) fn validate_utf8(bytes: &[u8]) -> Result<&str, PgError> {
    let bad = |at: usize, len: usize| {
        let shown: Vec<String> = bytes[at..(at + len).min(bytes.len())]
            .iter()
            .map(|b| format!("0x{b:02x}"))
            .collect();
        PgError::new(
            SqlState::CHARACTER_NOT_IN_REPERTOIRE,
            format!(
                "invalid byte sequence for encoding \"UTF8\": {}",
                shown.join(" ")
            ),
        )
    };
    match std::str::from_utf8(bytes) {
        Ok(s) => match s.bytes().position(|b| b == 0) {
            Some(at) => Err(bad(at, 1)),
            None => Ok(s),
        },
        Err(e) => Err(bad(e.valid_up_to(), e.error_len().unwrap_or(1).max(1))),
    }
}

fn decode_scalar(scalar: Scalar, s: &str, ctx: &TextContext) -> Result<Value, PgError> {
    Ok(match scalar {
        Scalar::Bool => Value::Bool(parse_bool(s)?),
        Scalar::Int2 => {
            Value::Int2(parse_int(s, "smallint", i16::MIN as i64, i16::MAX as i64)? as i16)
        }
        Scalar::Int4 => {
            Value::Int4(parse_int(s, "integer", i32::MIN as i64, i32::MAX as i64)? as i32)
        }
        Scalar::Int8 => Value::Int8(parse_int(s, "bigint", i64::MIN, i64::MAX)?),
        Scalar::Float4 => Value::Float4(float::parse_f32(s)?),
        Scalar::Float8 => Value::Float8(float::parse_f64(s)?),
        Scalar::Numeric => Value::Numeric(Numeric::parse(s)?),
        Scalar::Text | Scalar::Varchar | Scalar::Bpchar | Scalar::Unknown => {
            Value::Text(s.to_owned())
        }
        Scalar::Json => {
            json::validate_json(s)?;
            Value::Text(s.to_owned())
        }
        Scalar::Jsonb => Value::Text(json::normalize_jsonb(s)?),
        Scalar::Name => Value::Text(clip_name(s).to_owned()),
        Scalar::Void => Value::Text(String::new()),
        Scalar::Bytea => Value::Bytea(parse_bytea(s)?),
        Scalar::Date => Value::Date(datetime::decode_datetime(DtKind::Date, s, ctx)? as i32),
        Scalar::Time => Value::Time(datetime::decode_datetime(DtKind::Time, s, ctx)?),
        Scalar::Timestamp => {
            Value::Timestamp(datetime::decode_datetime(DtKind::Timestamp, s, ctx)?)
        }
        Scalar::Timestamptz => {
            Value::Timestamptz(datetime::decode_datetime(DtKind::Timestamptz, s, ctx)?)
        }
        Scalar::Interval => Value::Interval(datetime::decode_interval(s)?),
        Scalar::Uuid => Value::Uuid(parse_uuid(s)?),
    })
}

/// `namein`: identifiers keep at most 63 bytes, cut at a character boundary.
pub(crate) fn clip_name(s: &str) -> &str {
    const NAMEDATALEN: usize = 64;
    if s.len() < NAMEDATALEN {
        return s;
    }
    let mut end = NAMEDATALEN - 1;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// `pg_strtoint16/32/64`: optional surrounding whitespace and sign, decimal digits only.
fn parse_int(s: &str, type_name: &str, min: i64, max: i64) -> Result<i64, PgError> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && is_space(b[i]) {
        i += 1;
    }
    let negative = match b.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let digits_start = i;
    // Accumulate negatively so i64::MIN parses.
    let mut acc: i64 = 0;
    let mut overflow = false;
    while i < b.len() && b[i].is_ascii_digit() {
        let d = (b[i] - b'0') as i64;
        match acc.checked_mul(10).and_then(|v| v.checked_sub(d)) {
            Some(v) => acc = v,
            None => overflow = true,
        }
        i += 1;
    }
    let no_digits = i == digits_start;
    while i < b.len() && is_space(b[i]) {
        i += 1;
    }
    if no_digits || i != b.len() {
        return Err(PgError::new(
            SqlState::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type {type_name}: \"{s}\""),
        ));
    }
    let value = if negative {
        Some(acc)
    } else {
        acc.checked_neg()
    };
    match value {
        Some(v) if !overflow && v >= min && v <= max => Ok(v),
        _ => Err(PgError::new(
            SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
            format!("value \"{s}\" is out of range for type {type_name}"),
        )),
    }
}

/// `parse_bool_with_len` after `boolin`'s whitespace trimming.
fn parse_bool(s: &str) -> Result<bool, PgError> {
    let t = s.trim_matches(|c: char| c.is_ascii() && is_space(c as u8));
    let lower = t.to_ascii_lowercase();
    let l = lower.as_str();
    let prefix_of = |word: &str, min_len: usize| l.len() >= min_len && word.starts_with(l);
    let result = match l.as_bytes().first() {
        Some(b't') if prefix_of("true", 1) => Some(true),
        Some(b'f') if prefix_of("false", 1) => Some(false),
        Some(b'y') if prefix_of("yes", 1) => Some(true),
        Some(b'n') if prefix_of("no", 1) => Some(false),
        Some(b'o') if prefix_of("on", 2) => Some(true),
        Some(b'o') if prefix_of("off", 2) => Some(false),
        Some(b'1') if l.len() == 1 => Some(true),
        Some(b'0') if l.len() == 1 => Some(false),
        _ => None,
    };
    result.ok_or_else(|| {
        PgError::new(
            SqlState::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type boolean: \"{s}\""),
        )
    })
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// `byteain`: `\x` hex format or the traditional escape format.
fn parse_bytea(s: &str) -> Result<Vec<u8>, PgError> {
    let b = s.as_bytes();
    if b.len() >= 2 && b[0] == b'\\' && b[1] == b'x' {
        let mut out = Vec::with_capacity((b.len() - 2) / 2);
        let mut i = 2;
        while i < b.len() {
            let c = b[i];
            if matches!(c, b' ' | b'\n' | b'\t' | b'\r') {
                i += 1;
                continue;
            }
            let bad_digit = |at: usize| {
                // Show the whole (possibly multibyte) character.
                let ch = s[at..].chars().next().unwrap_or('?');
                PgError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!("invalid hexadecimal digit: \"{ch}\""),
                )
            };
            let hi = hex_digit(c).ok_or_else(|| bad_digit(i))?;
            i += 1;
            if i >= b.len() {
                return Err(PgError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    "invalid hexadecimal data: odd number of digits",
                ));
            }
            let lo = hex_digit(b[i]).ok_or_else(|| bad_digit(i))?;
            i += 1;
            out.push(hi << 4 | lo);
        }
        return Ok(out);
    }
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
        } else if i + 3 < b.len()
            && (b'0'..=b'3').contains(&b[i + 1])
            && (b'0'..=b'7').contains(&b[i + 2])
            && (b'0'..=b'7').contains(&b[i + 3])
        {
            out.push((b[i + 1] - b'0') << 6 | (b[i + 2] - b'0') << 3 | (b[i + 3] - b'0'));
            i += 4;
        } else if b.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else {
            return Err(PgError::new(
                SqlState::INVALID_TEXT_REPRESENTATION,
                "invalid input syntax for type bytea",
            ));
        }
    }
    Ok(out)
}

/// `string_to_uuid`: 32 hex digits, a hyphen allowed after any group of four, optional braces.
fn parse_uuid(s: &str) -> Result<[u8; 16], PgError> {
    let err = || {
        PgError::new(
            SqlState::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type uuid: \"{s}\""),
        )
    };
    let b = s.as_bytes();
    let mut i = 0;
    let braces = b.first() == Some(&b'{');
    if braces {
        i = 1;
    }
    let mut out = [0u8; 16];
    for (k, byte) in out.iter_mut().enumerate() {
        let hi = b.get(i).and_then(|&c| hex_digit(c)).ok_or_else(err)?;
        let lo = b.get(i + 1).and_then(|&c| hex_digit(c)).ok_or_else(err)?;
        *byte = hi << 4 | lo;
        i += 2;
        if b.get(i) == Some(&b'-') && k % 2 == 1 && k < 15 {
            i += 1;
        }
    }
    if braces {
        if b.get(i) != Some(&b'}') {
            return Err(err());
        }
        i += 1;
    }
    if i != b.len() {
        return Err(err());
    }
    Ok(out)
}

fn malformed(s: &str, detail: &str) -> PgError {
    PgError::new(
        SqlState::INVALID_TEXT_REPRESENTATION,
        format!("malformed array literal: \"{s}\""),
    )
    .with_detail(detail)
}

fn multidimensional() -> PgError {
    PgError::new(
        SqlState::FEATURE_NOT_SUPPORTED,
        "multidimensional arrays and arrays with lower bounds other than 1 are not supported",
    )
}

/// `array_in` for one-dimensional arrays with lower bound 1.
fn decode_array(scalar: Scalar, s: &str, ctx: &TextContext) -> Result<Value, PgError> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && array_isspace(b[i]) {
        i += 1;
    }
    let mut declared_len: Option<i64> = None;
    if b.get(i) == Some(&b'[') {
        // "[lo:hi]=" or "[hi]="; only one dimension, lower bound 1.
        let close = s[i..]
            .find(']')
            .map(|k| k + i)
            .ok_or_else(|| malformed(s, "Missing \"]\" after array dimensions."))?;
        let inner = &s[i + 1..close];
        let (lo, hi) = match inner.split_once(':') {
            Some((lo, hi)) => (lo.trim(), hi.trim()),
            None => ("1", inner.trim()),
        };
        let parse = |t: &str| {
            t.parse::<i64>().map_err(|_| {
                malformed(
                    s,
                    "\"[\" must introduce explicitly-specified array dimensions.",
                )
            })
        };
        let (lo, hi) = (parse(lo)?, parse(hi)?);
        i = close + 1;
        if b.get(i) == Some(&b'[') {
            return Err(multidimensional());
        }
        if hi < lo {
            return Err(PgError::new(
                SqlState::ARRAY_SUBSCRIPT_ERROR,
                "upper bound cannot be less than lower bound",
            ));
        }
        if lo != 1 {
            return Err(multidimensional());
        }
        declared_len = Some(hi - lo + 1);
        while i < b.len() && array_isspace(b[i]) {
            i += 1;
        }
        if b.get(i) != Some(&b'=') {
            return Err(malformed(s, "Missing \"=\" after array dimensions."));
        }
        i += 1;
        while i < b.len() && array_isspace(b[i]) {
            i += 1;
        }
    }
    if b.get(i) != Some(&b'{') {
        return Err(malformed(
            s,
            "Array value must start with \"{\" or dimension information.",
        ));
    }
    i += 1;
    // Raw elements: (text with escapes resolved, was NULL).
    let mut elements: Vec<Option<String>> = Vec::new();
    let mut expect_element = false;
    loop {
        while i < b.len() && array_isspace(b[i]) {
            i += 1;
        }
        let Some(&c) = b.get(i) else {
            return Err(malformed(s, "Unexpected end of input."));
        };
        match c {
            b'}' if elements.is_empty() && !expect_element => {
                i += 1;
                break;
            }
            b'{' => {
                if elements.is_empty() && !expect_element {
                    return Err(multidimensional());
                }
                return Err(malformed(s, "Unexpected \"{\" character."));
            }
            b',' | b'}' => {
                return Err(malformed(
                    s,
                    &format!("Unexpected \"{}\" character.", c as char),
                ));
            }
            _ => {}
        }
        let mut value = String::new();
        let mut is_null = false;
        if c == b'"' {
            i += 1;
            loop {
                let Some(&d) = b.get(i) else {
                    return Err(malformed(s, "Unexpected end of input."));
                };
                match d {
                    b'"' => {
                        i += 1;
                        break;
                    }
                    b'\\' => {
                        let Some(ch) = s.get(i + 1..).and_then(|r| r.chars().next()) else {
                            return Err(malformed(s, "Unexpected end of input."));
                        };
                        value.push(ch);
                        i += 1 + ch.len_utf8();
                    }
                    _ => {
                        let ch = s[i..].chars().next().expect("in bounds");
                        value.push(ch);
                        i += ch.len_utf8();
                    }
                }
            }
        } else {
            // Unquoted: ends at an unescaped ',' or '}'; trailing unescaped whitespace is cut.
            let mut keep_len = 0; // length up to the last escaped or non-space character
            let mut had_escape = false;
            loop {
                let Some(&d) = b.get(i) else {
                    return Err(malformed(s, "Unexpected end of input."));
                };
                match d {
                    b',' | b'}' => break,
                    b'"' | b'{' => {
                        return Err(malformed(
                            s,
                            &format!("Unexpected \"{}\" character.", d as char),
                        ))
                    }
                    b'\\' => {
                        let Some(ch) = s.get(i + 1..).and_then(|r| r.chars().next()) else {
                            return Err(malformed(s, "Unexpected end of input."));
                        };
                        value.push(ch);
                        keep_len = value.len();
                        had_escape = true;
                        i += 1 + ch.len_utf8();
                    }
                    _ => {
                        let ch = s[i..].chars().next().expect("in bounds");
                        value.push(ch);
                        if !(ch.is_ascii() && array_isspace(ch as u8)) {
                            keep_len = value.len();
                        }
                        i += ch.len_utf8();
                    }
                }
            }
            value.truncate(keep_len);
            is_null = !had_escape && value.eq_ignore_ascii_case("NULL");
        }
        elements.push(if is_null { None } else { Some(value) });
        while i < b.len() && array_isspace(b[i]) {
            i += 1;
        }
        match b.get(i) {
            Some(b',') => {
                i += 1;
                expect_element = true;
            }
            Some(b'}') => {
                i += 1;
                break;
            }
            None => return Err(malformed(s, "Unexpected end of input.")),
            Some(_) => return Err(malformed(s, "Unexpected array element.")),
        }
    }
    while i < b.len() && array_isspace(b[i]) {
        i += 1;
    }
    if i != b.len() {
        return Err(malformed(s, "Junk after closing right brace."));
    }
    if let Some(n) = declared_len {
        if n != elements.len() as i64 {
            return Err(malformed(
                s,
                "Specified array dimensions do not match array contents.",
            ));
        }
    }
    let mut values = Vec::with_capacity(elements.len());
    for e in elements {
        values.push(match e {
            None => Value::Null,
            Some(text) => decode_scalar(scalar, &text, ctx)?,
        });
    }
    Ok(Value::Array(values))
}

/// Interval helper for callers that build intervals from text outside a column context.
pub fn parse_interval(text: &str) -> Result<Interval, PgError> {
    datetime::decode_interval(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(ty: Type, input: &str) -> String {
        let ctx = TextContext::default();
        let v = decode(ty, input.as_bytes(), &ctx).unwrap_or_else(|e| panic!("{input:?}: {e}"));
        let mut out = Vec::new();
        encode(&v, ty, &ctx, &mut out);
        String::from_utf8(out).unwrap()
    }

    fn err(ty: Type, input: &str) -> PgError {
        decode(ty, input.as_bytes(), &TextContext::default()).unwrap_err()
    }

    #[test]
    fn scalars_match_postgres() {
        let s = Type::scalar;
        assert_eq!(round(s(Scalar::Int4), " 12 "), "12");
        assert_eq!(round(s(Scalar::Int2), "+5"), "5");
        assert_eq!(round(s(Scalar::Int2), "-32768"), "-32768");
        assert_eq!(
            round(s(Scalar::Int8), "-9223372036854775808"),
            "-9223372036854775808"
        );
        assert_eq!(
            round(s(Scalar::Int8), "9223372036854775807"),
            "9223372036854775807"
        );
        let e = err(s(Scalar::Int4), "99999999999");
        assert_eq!(
            e.message,
            "value \"99999999999\" is out of range for type integer"
        );
        assert_eq!(e.code, SqlState::NUMERIC_VALUE_OUT_OF_RANGE);
        assert_eq!(
            err(s(Scalar::Int8), "9223372036854775808").code,
            SqlState::NUMERIC_VALUE_OUT_OF_RANGE
        );
        assert_eq!(
            err(s(Scalar::Int8), "abc").message,
            "invalid input syntax for type bigint: \"abc\""
        );
        assert_eq!(
            err(s(Scalar::Int2), "40000").message,
            "value \"40000\" is out of range for type smallint"
        );
        for bad in ["", " ", "1 2", "1.5", "0x10", "--1", "+"] {
            assert_eq!(
                err(s(Scalar::Int4), bad).code,
                SqlState::INVALID_TEXT_REPRESENTATION,
                "{bad:?}"
            );
        }
        for (input, want) in [
            ("yes", "t"),
            (" TRU ", "t"),
            ("of", "f"),
            ("ON", "t"),
            ("1", "t"),
            (" f", "f"),
            ("n", "f"),
        ] {
            assert_eq!(round(s(Scalar::Bool), input), want, "{input:?}");
        }
        assert_eq!(
            err(s(Scalar::Bool), "o").message,
            "invalid input syntax for type boolean: \"o\""
        );
        assert!(decode(s(Scalar::Bool), b"tr ue", &TextContext::default()).is_err());
        assert_eq!(round(s(Scalar::Bytea), "\\x00ff"), "\\x00ff");
        assert_eq!(round(s(Scalar::Bytea), "\\x00 ff\n"), "\\x00ff");
        assert_eq!(
            round(s(Scalar::Bytea), "abc\\\\\\001\\377"),
            "\\x6162635c01ff"
        );
        assert_eq!(round(s(Scalar::Bytea), ""), "\\x");
        assert_eq!(
            err(s(Scalar::Bytea), "\\x 0 0").message,
            "invalid hexadecimal digit: \" \""
        );
        assert_eq!(
            err(s(Scalar::Bytea), "\\x0").message,
            "invalid hexadecimal data: odd number of digits"
        );
        assert_eq!(
            err(s(Scalar::Bytea), "\\xzz").message,
            "invalid hexadecimal digit: \"z\""
        );
        assert_eq!(
            err(s(Scalar::Bytea), "\\9").message,
            "invalid input syntax for type bytea"
        );
        assert_eq!(
            err(s(Scalar::Bytea), "a\\400").message,
            "invalid input syntax for type bytea"
        );
        assert_eq!(
            err(s(Scalar::Bytea), "ab\\").message,
            "invalid input syntax for type bytea"
        );
        let u = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";
        assert_eq!(
            round(s(Scalar::Uuid), "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"),
            u
        );
        assert_eq!(
            round(s(Scalar::Uuid), "{a0eebc999c0b4ef8bb6d6bb9bd380a11}"),
            u
        );
        assert_eq!(
            round(s(Scalar::Uuid), "a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11"),
            u
        );
        for bad in [
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
            " a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "{a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11-",
            "a0e-ebc999c0b4ef8bb6d6bb9bd380a11",
        ] {
            assert_eq!(
                err(s(Scalar::Uuid), bad).message,
                format!("invalid input syntax for type uuid: \"{bad}\"")
            );
        }
        assert_eq!(
            err(s(Scalar::Text), "a\0b").code,
            SqlState::CHARACTER_NOT_IN_REPERTOIRE
        );
        let e = decode(s(Scalar::Text), b"a\xffb", &TextContext::default()).unwrap_err();
        assert_eq!(
            e.message,
            "invalid byte sequence for encoding \"UTF8\": 0xff"
        );
        assert_eq!(
            round(s(Scalar::Json), "{\"b\":1,  \"a\":2}"),
            "{\"b\":1,  \"a\":2}"
        );
        assert_eq!(
            round(s(Scalar::Jsonb), "{\"b\":1,  \"a\":2}"),
            "{\"a\": 2, \"b\": 1}"
        );
    }

    #[test]
    fn arrays_match_postgres() {
        let a = Type::array_of;
        assert_eq!(round(a(Scalar::Int4), "{1,NULL,3}"), "{1,NULL,3}");
        assert_eq!(round(a(Scalar::Int4), "{}"), "{}");
        assert_eq!(round(a(Scalar::Int4), "{ }"), "{}");
        assert_eq!(round(a(Scalar::Int4), "  {1, 2 } "), "{1,2}");
        assert_eq!(round(a(Scalar::Int4), "[1:2]={1,2}"), "{1,2}");
        assert_eq!(
            round(
                a(Scalar::Text),
                r#"{"a b","x\"y",NULL,"","null","NULL","{"," ","a,b", "\\"}"#
            ),
            r#"{"a b","x\"y",NULL,"","null","NULL","{"," ","a,b","\\"}"#
        );
        assert_eq!(round(a(Scalar::Text), "{a  , b c ,  d}"), r#"{a,"b c",d}"#);
        assert_eq!(
            round(a(Scalar::Text), r#"{a\ b,c\,d, \  e\ \ , "" }"#),
            r#"{"a b","c,d","  e  ",""}"#
        );
        assert_eq!(round(a(Scalar::Text), "{\"a\tb\",é}"), "{\"a\tb\",é}");
        assert_eq!(round(a(Scalar::Bytea), r#"{"\\x00ff"}"#), r#"{"\\x00ff"}"#);
        assert_eq!(round(a(Scalar::Float8), "{1.5,NaN}"), "{1.5,NaN}");
        assert_eq!(round(a(Scalar::Bool), "{t,f}"), "{t,f}");
        assert_eq!(round(a(Scalar::Interval), "{\"1 day\"}"), "{\"1 day\"}");
        assert_eq!(round(a(Scalar::Bpchar), "{\"ab \"}"), "{\"ab \"}");
        assert_eq!(
            round(a(Scalar::Timestamptz), "{\"2024-06-01 12:00+00\"}"),
            "{\"2024-06-01 12:00:00+00\"}"
        );
        let cases = [
            ("{1,}", "Unexpected \"}\" character."),
            ("{,1}", "Unexpected \",\" character."),
            ("{1,2", "Unexpected end of input."),
            ("{\"a\"b}", "Unexpected array element."),
            ("{1}x", "Junk after closing right brace."),
            (
                "1,2",
                "Array value must start with \"{\" or dimension information.",
            ),
            (
                "",
                "Array value must start with \"{\" or dimension information.",
            ),
            (
                "[1:3]={1,2}",
                "Specified array dimensions do not match array contents.",
            ),
        ];
        for (input, detail) in cases {
            let e = err(a(Scalar::Int4), input);
            assert_eq!(
                e.message,
                format!("malformed array literal: \"{input}\""),
                "{input:?}"
            );
            assert_eq!(e.detail.as_deref(), Some(detail), "{input:?}");
        }
        assert_eq!(
            err(a(Scalar::Int4), "{1 2}").message,
            "invalid input syntax for type integer: \"1 2\""
        );
        assert_eq!(
            err(a(Scalar::Int4), "{1,x}").message,
            "invalid input syntax for type integer: \"x\""
        );
        assert_eq!(
            err(a(Scalar::Int4), "{{1,2},{3,4}}").code,
            SqlState::FEATURE_NOT_SUPPORTED
        );
        assert_eq!(
            err(a(Scalar::Int4), "[0:1]={1,2}").code,
            SqlState::FEATURE_NOT_SUPPORTED
        );
    }
}
