//! PostgreSQL's binary format: what `*_send` writes and `*_recv` reads.
//!
//! All integers are big-endian. Decoding never trusts a count from the bytes: every length and
//! element count is checked against the bytes actually present before anything is allocated.

use super::datetime::{DATE_END, DATE_MIN, TIMESTAMP_END, TIMESTAMP_MIN, USECS_PER_DAY};
use super::numeric::{NBASE, SIGN_NAN, SIGN_NEG, SIGN_NINF, SIGN_PINF, SIGN_POS};
use super::{json, text, Interval, Numeric, Scalar, Type, Value};
use crate::error::{PgError, SqlState};

/// Largest array dimension count PostgreSQL accepts (`MAXDIM`).
const MAXDIM: i32 = 6;

/// Appends the binary form of `value` (a value of type `ty`) to `out`.
///
/// `Value::Null` at the top level writes nothing; the caller writes length -1.
pub fn encode(value: &Value, ty: Type, out: &mut Vec<u8>) {
    debug_assert!(
        super::value_matches(value, ty),
        "value {value:?} does not belong to type {ty:?}"
    );
    match value {
        Value::Array(items) => encode_array(items, ty.scalar, out),
        _ => encode_scalar(value, ty.scalar, out),
    }
}

fn encode_scalar(value: &Value, scalar: Scalar, out: &mut Vec<u8>) {
    match value {
        Value::Null => {}
        Value::Bool(b) => out.push(u8::from(*b)),
        Value::Int2(v) => out.extend_from_slice(&v.to_be_bytes()),
        Value::Int4(v) => out.extend_from_slice(&v.to_be_bytes()),
        Value::Int8(v) => out.extend_from_slice(&v.to_be_bytes()),
        Value::Float4(v) => out.extend_from_slice(&v.to_bits().to_be_bytes()),
        Value::Float8(v) => out.extend_from_slice(&v.to_bits().to_be_bytes()),
        Value::Numeric(n) => {
            let (sign, weight, dscale, digits) = n.binary_parts();
            out.reserve(8 + 2 * digits.len());
            out.extend_from_slice(&(digits.len() as i16).to_be_bytes());
            out.extend_from_slice(&weight.to_be_bytes());
            out.extend_from_slice(&sign.to_be_bytes());
            out.extend_from_slice(&dscale.to_be_bytes());
            for d in digits {
                out.extend_from_slice(&d.to_be_bytes());
            }
        }
        Value::Text(s) => {
            if scalar == Scalar::Jsonb {
                out.push(1);
            }
            out.extend_from_slice(s.as_bytes());
        }
        Value::Bytea(b) => out.extend_from_slice(b),
        Value::Date(d) => out.extend_from_slice(&d.to_be_bytes()),
        Value::Time(t) | Value::Timestamp(t) | Value::Timestamptz(t) => {
            out.extend_from_slice(&t.to_be_bytes())
        }
        Value::Interval(iv) => {
            out.extend_from_slice(&iv.micros.to_be_bytes());
            out.extend_from_slice(&iv.days.to_be_bytes());
            out.extend_from_slice(&iv.months.to_be_bytes());
        }
        Value::Uuid(u) => out.extend_from_slice(u),
        Value::Array(_) => debug_assert!(false, "nested arrays are not supported"),
    }
}

fn encode_array(items: &[Value], scalar: Scalar, out: &mut Vec<u8>) {
    let ndim: i32 = if items.is_empty() { 0 } else { 1 };
    let has_null = items.iter().any(Value::is_null);
    out.extend_from_slice(&ndim.to_be_bytes());
    out.extend_from_slice(&i32::from(has_null).to_be_bytes());
    out.extend_from_slice(&Type::scalar(scalar).oid().to_be_bytes());
    if items.is_empty() {
        return;
    }
    out.extend_from_slice(&(items.len() as i32).to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    for item in items {
        if item.is_null() {
            out.extend_from_slice(&(-1i32).to_be_bytes());
            continue;
        }
        let len_at = out.len();
        out.extend_from_slice(&[0; 4]);
        encode_scalar(item, scalar, out);
        let len = (out.len() - len_at - 4) as i32;
        out[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding

fn bad_format() -> PgError {
    PgError::new(
        SqlState::INVALID_BINARY_REPRESENTATION,
        "incorrect binary data format",
    )
}

fn insufficient() -> PgError {
    PgError::new(
        SqlState::INVALID_BINARY_REPRESENTATION,
        "insufficient data left in message",
    )
}

/// A cursor over untrusted bytes; every read checks what is left.
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], PgError> {
        if self.b.len() < n {
            return Err(insufficient());
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }

    fn i16(&mut self) -> Result<i16, PgError> {
        Ok(i16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u16(&mut self) -> Result<u16, PgError> {
        Ok(u16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn i32(&mut self) -> Result<i32, PgError> {
        Ok(i32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u32(&mut self) -> Result<u32, PgError> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn i64(&mut self) -> Result<i64, PgError> {
        Ok(i64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn finish(&self) -> Result<(), PgError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(bad_format())
        }
    }
}

/// Parses the binary form of a value of type `ty`.
pub fn decode(ty: Type, bytes: &[u8]) -> Result<Value, PgError> {
    if ty.array {
        return decode_array(ty.scalar, bytes);
    }
    decode_scalar(ty.scalar, bytes)
}

fn decode_scalar(scalar: Scalar, bytes: &[u8]) -> Result<Value, PgError> {
    let mut r = Reader { b: bytes };
    let v = match scalar {
        Scalar::Bool => Value::Bool(r.take(1)?[0] != 0),
        Scalar::Int2 => Value::Int2(r.i16()?),
        Scalar::Int4 => Value::Int4(r.i32()?),
        Scalar::Int8 => Value::Int8(r.i64()?),
        Scalar::Float4 => Value::Float4(f32::from_bits(r.u32()?)),
        Scalar::Float8 => Value::Float8(f64::from_bits(r.i64()? as u64)),
        Scalar::Numeric => Value::Numeric(decode_numeric(&mut r)?),
        Scalar::Text | Scalar::Varchar | Scalar::Bpchar | Scalar::Unknown => {
            let s = text::validate_utf8(r.take(bytes.len())?)?;
            Value::Text(s.to_owned())
        }
        Scalar::Name => {
            let s = text::validate_utf8(r.take(bytes.len())?)?;
            if s.len() >= 64 {
                return Err(PgError::new(SqlState(*b"42622"), "identifier too long")
                    .with_detail(format!("Identifier must be less than {} characters.", 64)));
            }
            Value::Text(s.to_owned())
        }
        // `void_recv` accepts and ignores whatever it is given.
        Scalar::Void => {
            r.take(bytes.len())?;
            Value::Text(String::new())
        }
        Scalar::Json => {
            let s = text::validate_utf8(r.take(bytes.len())?)?;
            json::validate_json(s)?;
            Value::Text(s.to_owned())
        }
        Scalar::Jsonb => {
            let version = r.take(1)?[0];
            if version != 1 {
                return Err(PgError::new(
                    SqlState::INVALID_BINARY_REPRESENTATION,
                    format!("unsupported jsonb version number {version}"),
                ));
            }
            let s = text::validate_utf8(r.take(bytes.len() - 1)?)?;
            Value::Text(json::normalize_jsonb(s)?)
        }
        Scalar::Bytea => Value::Bytea(r.take(bytes.len())?.to_vec()),
        Scalar::Date => {
            let d = r.i32()?;
            if d != i32::MIN && d != i32::MAX && !(DATE_MIN..DATE_END).contains(&(d as i64)) {
                return Err(PgError::new(
                    SqlState::DATETIME_FIELD_OVERFLOW,
                    "date out of range",
                ));
            }
            Value::Date(d)
        }
        Scalar::Time => {
            let t = r.i64()?;
            if !(0..=USECS_PER_DAY).contains(&t) {
                return Err(PgError::new(
                    SqlState::DATETIME_FIELD_OVERFLOW,
                    "time out of range",
                ));
            }
            Value::Time(t)
        }
        Scalar::Timestamp | Scalar::Timestamptz => {
            let t = r.i64()?;
            if t != i64::MIN && t != i64::MAX && !(TIMESTAMP_MIN..TIMESTAMP_END).contains(&t) {
                return Err(PgError::new(
                    SqlState::DATETIME_FIELD_OVERFLOW,
                    "timestamp out of range",
                ));
            }
            if scalar == Scalar::Timestamp {
                Value::Timestamp(t)
            } else {
                Value::Timestamptz(t)
            }
        }
        Scalar::Interval => {
            let micros = r.i64()?;
            let days = r.i32()?;
            let months = r.i32()?;
            Value::Interval(Interval {
                months,
                days,
                micros,
            })
        }
        Scalar::Uuid => Value::Uuid(r.take(16)?.try_into().expect("16 bytes")),
    };
    r.finish()?;
    Ok(v)
}

/// `numeric_recv`.
fn decode_numeric(r: &mut Reader) -> Result<Numeric, PgError> {
    let ndigits = r.i16()?;
    if ndigits < 0 {
        return Err(PgError::new(
            SqlState::INVALID_BINARY_REPRESENTATION,
            "invalid length in external \"numeric\" value",
        ));
    }
    let weight = r.i16()?;
    let sign = r.u16()?;
    if !matches!(sign, SIGN_POS | SIGN_NEG | SIGN_NAN | SIGN_PINF | SIGN_NINF) {
        return Err(PgError::new(
            SqlState::INVALID_BINARY_REPRESENTATION,
            "invalid sign in external \"numeric\" value",
        ));
    }
    let dscale = r.u16()?;
    if dscale > super::numeric::NUMERIC_DSCALE_MAX as u16 {
        return Err(PgError::new(
            SqlState::INVALID_BINARY_REPRESENTATION,
            "invalid scale in external \"numeric\" value",
        ));
    }
    // Bounded by the bytes present (2 per digit) before allocating.
    let raw = r.take(ndigits as usize * 2)?;
    let mut digits = Vec::with_capacity(ndigits as usize);
    for pair in raw.chunks_exact(2) {
        let d = i16::from_be_bytes([pair[0], pair[1]]) as i32;
        if !(0..NBASE).contains(&d) {
            return Err(PgError::new(
                SqlState::INVALID_BINARY_REPRESENTATION,
                "invalid digit in external \"numeric\" value",
            ));
        }
        digits.push(d);
    }
    Numeric::from_binary_parts(sign, weight, dscale, digits)
}

/// `array_recv` for one-dimensional arrays with lower bound 1 (and empty arrays).
fn decode_array(scalar: Scalar, bytes: &[u8]) -> Result<Value, PgError> {
    let mut r = Reader { b: bytes };
    let ndim = r.i32()?;
    let flags = r.i32()?;
    let element_oid = r.u32()?;
    if ndim < 0 {
        return Err(PgError::new(
            SqlState::INVALID_BINARY_REPRESENTATION,
            format!("invalid number of dimensions: {ndim}"),
        ));
    }
    if ndim > MAXDIM {
        return Err(PgError::new(
            SqlState::PROGRAM_LIMIT_EXCEEDED,
            format!("number of array dimensions ({ndim}) exceeds the maximum allowed ({MAXDIM})"),
        ));
    }
    if flags != 0 && flags != 1 {
        return Err(PgError::new(
            SqlState::INVALID_BINARY_REPRESENTATION,
            "invalid array flags",
        ));
    }
    let expected = Type::scalar(scalar).oid();
    if element_oid != expected {
        return Err(PgError::new(
            SqlState::DATATYPE_MISMATCH,
            format!(
                "binary data has array element type {element_oid} instead of expected {expected} ({})",
                Type::scalar(scalar).name()
            ),
        ));
    }
    if ndim == 0 {
        r.finish()?;
        return Ok(Value::Array(Vec::new()));
    }
    if ndim > 1 {
        return Err(PgError::new(
            SqlState::FEATURE_NOT_SUPPORTED,
            "multidimensional arrays are not supported",
        ));
    }
    let len = r.i32()?;
    let lower_bound = r.i32()?;
    if len < 0 {
        return Err(PgError::new(
            SqlState::INVALID_BINARY_REPRESENTATION,
            "invalid array dimension",
        ));
    }
    if lower_bound != 1 {
        return Err(PgError::new(
            SqlState::FEATURE_NOT_SUPPORTED,
            "arrays with lower bounds other than 1 are not supported",
        ));
    }
    // Every element takes at least its 4-byte length word.
    if len as usize > r.b.len() / 4 {
        return Err(insufficient());
    }
    let mut items = Vec::with_capacity(len as usize);
    for _ in 0..len {
        let elen = r.i32()?;
        if elen == -1 {
            items.push(Value::Null);
            continue;
        }
        if elen < 0 {
            return Err(PgError::new(
                SqlState::INVALID_BINARY_REPRESENTATION,
                format!("invalid array element length {elen}"),
            ));
        }
        let body = r.take(elen as usize)?;
        items.push(decode_scalar(scalar, body)?);
    }
    r.finish()?;
    Ok(Value::Array(items))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_header_counts_are_bounded() {
        // Claims 2^31-1 elements in 20 bytes: rejected before any allocation.
        let mut b = Vec::new();
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.extend_from_slice(&23u32.to_be_bytes());
        b.extend_from_slice(&i32::MAX.to_be_bytes());
        b.extend_from_slice(&1i32.to_be_bytes());
        assert_eq!(b.len(), 20);
        let e = decode(Type::array_of(Scalar::Int4), &b).unwrap_err();
        assert_eq!(e.code, SqlState::INVALID_BINARY_REPRESENTATION);
        // A numeric claiming 32767 digits with none present.
        let e = decode(
            Type::scalar(Scalar::Numeric),
            &[0x7f, 0xff, 0, 0, 0, 0, 0, 0],
        )
        .unwrap_err();
        assert_eq!(e.code, SqlState::INVALID_BINARY_REPRESENTATION);
    }

    #[test]
    fn recv_checks_like_postgres() {
        let int4 = Type::scalar(Scalar::Int4);
        assert!(decode(int4, &[0, 0, 0]).is_err());
        assert!(decode(int4, &[0, 0, 0, 1, 0]).is_err());
        assert_eq!(
            decode(int4, &[0xff, 0xff, 0xff, 0xfe]).unwrap(),
            Value::Int4(-2)
        );
        let date = Type::scalar(Scalar::Date);
        assert_eq!(
            decode(date, &i32::MAX.to_be_bytes()).unwrap(),
            Value::Date(i32::MAX)
        );
        assert!(decode(date, &(DATE_END as i32).to_be_bytes()).is_err());
        let time = Type::scalar(Scalar::Time);
        assert!(decode(time, &(-1i64).to_be_bytes()).is_err());
        let numeric = Type::scalar(Scalar::Numeric);
        // One digit 10000: invalid.
        assert!(decode(numeric, &[0, 1, 0, 0, 0, 0, 0, 0, 0x27, 0x10]).is_err());
        // Bad sign.
        assert!(decode(numeric, &[0, 0, 0, 0, 0x12, 0x34, 0, 0]).is_err());
        // Digits hidden by dscale are truncated like numeric_recv does: 1.2345 with dscale 2.
        let v = decode(numeric, &[0, 2, 0, 0, 0, 0, 0, 2, 0, 1, 0x09, 0x29]).unwrap();
        assert_eq!(v, Value::Numeric(Numeric::parse("1.23").unwrap()));
        let jsonb = Type::scalar(Scalar::Jsonb);
        assert!(decode(jsonb, b"\x02{}").is_err());
        assert_eq!(
            decode(jsonb, b"\x01{\"b\":1,\"a\":2}").unwrap(),
            Value::Text("{\"a\": 2, \"b\": 1}".into())
        );
        let wrong_elem = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20];
        assert_eq!(
            decode(Type::array_of(Scalar::Int4), &wrong_elem)
                .unwrap_err()
                .code,
            SqlState::DATATYPE_MISMATCH
        );
    }
}
