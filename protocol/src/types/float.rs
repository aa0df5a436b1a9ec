//! `float4`/`float8` text I/O the way PostgreSQL 15 does it.
//!
//! Output with `extra_float_digits > 0` is the shortest string that reads back to the same value
//! (PostgreSQL uses Ryu; Rust's `{:e}` formatting produces the same shortest, closest digits),
//! laid out with PostgreSQL's rule: plain notation when the decimal exponent is in
//! `-4..precision` (15 for float8, 6 for float4), otherwise `d.ddde±XX`. With
//! `extra_float_digits <= 0` it is C's `%.{N}g`. Everything is formatted in a stack buffer, so
//! nothing allocates except `out` growing.

use crate::error::{PgError, SqlState};
use std::fmt::Write as _;

/// A fixed-size formatting target; 64 bytes holds any `{:e}` or `%.17g` output of a double.
struct StackBuf {
    buf: [u8; 64],
    len: usize,
}

impl StackBuf {
    fn new() -> StackBuf {
        StackBuf {
            buf: [0; 64],
            len: 0,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::fmt::Write for StackBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(std::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Splits Rust's `{:e}` output (`-1.2345e-7`) into sign, digit string and decimal exponent.
fn split_exp(s: &[u8]) -> (bool, [u8; 40], usize, i32) {
    let mut digits = [0u8; 40];
    let mut n = 0;
    let mut i = 0;
    let negative = s.first() == Some(&b'-');
    if negative {
        i = 1;
    }
    while i < s.len() && s[i] != b'e' {
        if s[i] != b'.' && n < digits.len() {
            digits[n] = s[i];
            n += 1;
        }
        i += 1;
    }
    i += 1;
    let mut exp: i32 = 0;
    let eneg = s.get(i) == Some(&b'-');
    if eneg {
        i += 1;
    }
    while i < s.len() {
        exp = exp * 10 + (s[i] - b'0') as i32;
        i += 1;
    }
    (negative, digits, n, if eneg { -exp } else { exp })
}

/// Lays out `digits` (significant digits, no trailing zeros needed) times 10^exp.
fn layout(negative: bool, digits: &[u8], exp: i32, fixed_below: i32, out: &mut Vec<u8>) {
    if negative {
        out.push(b'-');
    }
    if exp >= -4 && exp < fixed_below {
        if exp < 0 {
            out.extend_from_slice(b"0.");
            for _ in 0..(-exp - 1) {
                out.push(b'0');
            }
            out.extend_from_slice(digits);
        } else {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.extend_from_slice(digits);
                for _ in digits.len()..int_len {
                    out.push(b'0');
                }
            } else {
                out.extend_from_slice(&digits[..int_len]);
                out.push(b'.');
                out.extend_from_slice(&digits[int_len..]);
            }
        }
    } else {
        out.push(digits[0]);
        if digits.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        out.push(if exp < 0 { b'-' } else { b'+' });
        let e = exp.unsigned_abs();
        if e >= 100 {
            out.push(b'0' + (e / 100) as u8);
        }
        out.push(b'0' + (e / 10 % 10) as u8);
        out.push(b'0' + (e % 10) as u8);
    }
}

fn special(v: f64, out: &mut Vec<u8>) -> bool {
    if v.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 { b"Infinity" } else { b"-Infinity" });
    } else if v == 0.0 {
        out.extend_from_slice(if v.is_sign_negative() { b"-0" } else { b"0" });
    } else {
        return false;
    }
    true
}

/// Shortest round-trip form of a double (`float8out` with `extra_float_digits > 0`).
pub(crate) fn write_shortest_f64(v: f64, out: &mut Vec<u8>) {
    if special(v, out) {
        return;
    }
    let mut buf = StackBuf::new();
    write!(buf, "{v:e}").expect("64 bytes hold any shortest double");
    let (neg, digits, n, exp) = split_exp(buf.as_bytes());
    layout(neg, &digits[..n], exp, 15, out);
}

/// Shortest round-trip form of a float (`float4out` with `extra_float_digits > 0`).
pub(crate) fn write_shortest_f32(v: f32, out: &mut Vec<u8>) {
    if special(v as f64, out) {
        return;
    }
    let mut buf = StackBuf::new();
    write!(buf, "{v:e}").expect("64 bytes hold any shortest float");
    let (neg, digits, n, exp) = split_exp(buf.as_bytes());
    layout(neg, &digits[..n], exp, 6, out);
}

/// C's `printf("%.*g", precision, v)` (glibc: exact decimal expansion, ties to even).
pub(crate) fn write_g(v: f64, precision: i32, out: &mut Vec<u8>) {
    if special(v, out) {
        return;
    }
    let p = precision.clamp(1, 17);
    let mut buf = StackBuf::new();
    write!(buf, "{:.*e}", (p - 1) as usize, v).expect("64 bytes hold %.17e");
    let (neg, digits, mut n, exp) = split_exp(buf.as_bytes());
    // %g drops trailing zeros (no '#' flag).
    while n > 1 && digits[n - 1] == b'0' {
        n -= 1;
    }
    layout(neg, &digits[..n], exp, p, out);
}

pub(crate) fn write_f64(v: f64, extra_float_digits: i32, out: &mut Vec<u8>) {
    if extra_float_digits > 0 {
        write_shortest_f64(v, out);
    } else {
        write_g(v, 15 + extra_float_digits, out);
    }
}

pub(crate) fn write_f32(v: f32, extra_float_digits: i32, out: &mut Vec<u8>) {
    if extra_float_digits > 0 {
        write_shortest_f32(v, out);
    } else {
        write_g(v as f64, 6 + extra_float_digits, out);
    }
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn hex_val(b: u8) -> Option<u32> {
    (b as char).to_digit(16)
}

/// strtod's hexadecimal form: `[+-]0x<hex>[.<hex>][p[+-]<dec>]`.
fn parse_hex_float(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let mut i = 0;
    let negative = match b.first() {
        Some(b'-') => {
            i = 1;
            true
        }
        Some(b'+') => {
            i = 1;
            false
        }
        _ => false,
    };
    if b.len() < i + 3 || b[i] != b'0' || (b[i + 1] | 0x20) != b'x' {
        return None;
    }
    i += 2;
    let mut mantissa: u64 = 0;
    let mut exp2: i64 = 0;
    let mut any = false;
    let mut seen_point = false;
    while i < b.len() {
        if b[i] == b'.' && !seen_point {
            seen_point = true;
        } else if let Some(d) = hex_val(b[i]) {
            any = true;
            if mantissa >> 56 == 0 {
                mantissa = mantissa << 4 | d as u64;
                if seen_point {
                    exp2 -= 4;
                }
            } else if !seen_point {
                exp2 += 4;
            }
        } else {
            break;
        }
        i += 1;
    }
    if !any {
        return None;
    }
    if i < b.len() && (b[i] | 0x20) == b'p' {
        i += 1;
        let mut eneg = false;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            eneg = b[i] == b'-';
            i += 1;
        }
        let start = i;
        let mut e: i64 = 0;
        while i < b.len() && b[i].is_ascii_digit() {
            e = (e * 10 + (b[i] - b'0') as i64).min(100_000);
            i += 1;
        }
        if i == start {
            return None;
        }
        exp2 += if eneg { -e } else { e };
    }
    if i != b.len() {
        return None;
    }
    let mut v = mantissa as f64;
    // Scale in steps so intermediate powers stay finite.
    let mut e = exp2.clamp(-3000, 3000) as i32;
    while e > 0 {
        let step = e.min(1000);
        v *= 2f64.powi(step);
        e -= step;
    }
    while e < 0 {
        let step = (-e).min(1000);
        v /= 2f64.powi(step);
        e += step;
    }
    Some(if negative { -v } else { v })
}

/// True when a decimal literal has a nonzero digit before its exponent.
fn has_nonzero_mantissa(s: &str) -> bool {
    s.bytes()
        .take_while(|&c| c != b'e' && c != b'E')
        .any(|c| (b'1'..=b'9').contains(&c))
}

enum FloatError {
    Syntax,
    Range,
}

fn parse_float_common<F>(text: &str, parse: F) -> Result<f64, FloatError>
where
    F: Fn(&str) -> Option<f64>,
{
    let trimmed = text.trim_matches(|c: char| c.is_ascii() && is_space(c as u8));
    if trimmed.is_empty() || trimmed.bytes().any(is_space) {
        return Err(FloatError::Syntax);
    }
    let lower_is_special = {
        let t = trimmed.trim_start_matches(['+', '-']);
        t.eq_ignore_ascii_case("inf")
            || t.eq_ignore_ascii_case("infinity")
            || t.eq_ignore_ascii_case("nan")
    };
    if lower_is_special {
        // Rust and strtod agree on these spellings; only one sign is allowed.
        return parse(trimmed).ok_or(FloatError::Syntax);
    }
    // Rust's parser would accept "infinity"-like words handled above and nothing else non-numeric;
    // reject forms strtod does not take but Rust might (none known), then check range.
    let v = match parse(trimmed) {
        Some(v) => v,
        None => parse_hex_float(trimmed).ok_or(FloatError::Syntax)?,
    };
    if v.is_infinite() || (v == 0.0 && has_nonzero_mantissa(trimmed) && !is_hex(trimmed)) {
        return Err(FloatError::Range);
    }
    Ok(v)
}

fn is_hex(s: &str) -> bool {
    let t = s.trim_start_matches(['+', '-']);
    t.len() > 1 && (t.starts_with("0x") || t.starts_with("0X"))
}

/// `float8in`.
pub(crate) fn parse_f64(text: &str) -> Result<f64, PgError> {
    parse_float_common(text, |s| s.parse::<f64>().ok()).map_err(|e| match e {
        FloatError::Syntax => PgError::new(
            SqlState::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type double precision: \"{text}\""),
        ),
        FloatError::Range => PgError::new(
            SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
            format!("\"{text}\" is out of range for type double precision"),
        ),
    })
}

/// `float4in`.
pub(crate) fn parse_f32(text: &str) -> Result<f32, PgError> {
    parse_float_common(text, |s| {
        if is_hex(s) {
            None
        } else {
            s.parse::<f32>().ok().map(|v| v as f64)
        }
    })
    .and_then(|v| {
        // Hex input arrives as f64; narrow it with the same range rule.
        let f = v as f32;
        if f.is_infinite() && v.is_finite() {
            Err(FloatError::Range)
        } else {
            Ok(f)
        }
    })
    .map_err(|e| match e {
        FloatError::Syntax => PgError::new(
            SqlState::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type real: \"{text}\""),
        ),
        FloatError::Range => PgError::new(
            SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
            format!("\"{text}\" is out of range for type real"),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s64(v: f64, efd: i32) -> String {
        let mut out = Vec::new();
        write_f64(v, efd, &mut out);
        String::from_utf8(out).unwrap()
    }

    fn s32(v: f32, efd: i32) -> String {
        let mut out = Vec::new();
        write_f32(v, efd, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn shortest_matches_postgres_layout() {
        // Expected strings are PostgreSQL 15's output with extra_float_digits = 1.
        assert_eq!(s64(1e15, 1), "1e+15");
        assert_eq!(s64(1e14, 1), "100000000000000");
        assert_eq!(s64(0.0001, 1), "0.0001");
        assert_eq!(s64(0.00001, 1), "1e-05");
        assert_eq!(s64(1.5e-7, 1), "1.5e-07");
        assert_eq!(s64(1e100, 1), "1e+100");
        assert_eq!(s64(-0.0, 1), "-0");
        assert_eq!(s64(123456789012345678.0, 1), "1.2345678901234568e+17");
        assert_eq!(s64(1e-310, 1), "1e-310");
        assert_eq!(s64(f64::MAX, 1), "1.7976931348623157e+308");
        assert_eq!(s64(f64::INFINITY, 1), "Infinity");
        assert_eq!(s64(f64::NAN, 1), "NaN");
        assert_eq!(s32(1e6, 1), "1e+06");
        assert_eq!(s32(100000.0, 1), "100000");
        assert_eq!(s32(1.1, 1), "1.1");
        assert_eq!(s32(f32::NEG_INFINITY, 1), "-Infinity");
    }

    #[test]
    fn printf_g_matches_postgres() {
        // PostgreSQL 15 with extra_float_digits = 0 and -15.
        assert_eq!(s64(1.1, 0), "1.1");
        assert_eq!(s32(0.1, 0), "0.1");
        assert_eq!(s64(1e15, 0), "1e+15");
        assert_eq!(s64(1e-5, 0), "1e-05");
        assert_eq!(s64(123456789012345678.0, 0), "1.23456789012346e+17");
        assert_eq!(s64(2.5, 0), "2.5");
        assert_eq!(s64(1.1e-300, 0), "1.1e-300");
        assert_eq!(s64(100.0, 0), "100");
        assert_eq!(s64(1.1, -15), "1");
        assert_eq!(s64(2.5, -15), "2");
        assert_eq!(s64(0.5, -15), "0.5");
        assert_eq!(s64(15.0, -15), "2e+01");
        assert_eq!(s32(25.0, -15), "2e+01");
    }

    #[test]
    fn parse_matches_postgres() {
        assert_eq!(parse_f64(" 1.5 ").unwrap(), 1.5);
        assert_eq!(parse_f64("0x10").unwrap(), 16.0);
        assert_eq!(parse_f64("-0x1.8p1").unwrap(), -3.0);
        assert_eq!(parse_f64("-Infinity").unwrap(), f64::NEG_INFINITY);
        assert!(parse_f64("nan").unwrap().is_nan());
        assert_eq!(parse_f64("1e-310").unwrap(), 1e-310);
        let e = parse_f64("1e400").unwrap_err();
        assert_eq!(
            e.message,
            "\"1e400\" is out of range for type double precision"
        );
        assert_eq!(e.code, SqlState::NUMERIC_VALUE_OUT_OF_RANGE);
        assert_eq!(
            parse_f64("1e-400").unwrap_err().code,
            SqlState::NUMERIC_VALUE_OUT_OF_RANGE
        );
        assert!(parse_f64("0e-400").is_ok());
        let e = parse_f64("abc").unwrap_err();
        assert_eq!(
            e.message,
            "invalid input syntax for type double precision: \"abc\""
        );
        assert!(parse_f64("").is_err());
        assert!(parse_f64("1 2").is_err());
        assert!(parse_f64("--1").is_err());
        assert_eq!(
            parse_f32("1e39").unwrap_err().message,
            "\"1e39\" is out of range for type real"
        );
        assert_eq!(
            parse_f32("1e-50").unwrap_err().code,
            SqlState::NUMERIC_VALUE_OUT_OF_RANGE
        );
        assert_eq!(parse_f32("1.1").unwrap(), 1.1f32);
    }
}
