//! PostgreSQL value types: OIDs, the in-memory [`Value`], and the text and binary wire formats.
//!
//! - [`Type`]: the scalar types ringwire speaks and one-dimensional arrays of them, with
//!   PostgreSQL's OIDs (`pg_type.oid`), `typlen`, `format_type` names and cast-name lookup.
//! - [`Value`]: one datum. Times are kept in PostgreSQL's own epoch and units (microseconds or
//!   days since 2000-01-01), so the binary format is a byte swap away. [`compare`] orders two
//!   values the way PostgreSQL's btree operators do.
//! - [`text`] / [`binary`]: encode into a caller's buffer (no other allocation), decode from a
//!   borrowed slice with PostgreSQL's SQLSTATEs and messages. Text output matches PostgreSQL 15
//!   byte for byte for `DateStyle = ISO, MDY`, `IntervalStyle = postgres`, `bytea_output = hex`
//!   and the session's `TimeZone` and `extra_float_digits` ([`TextContext`], [`TimeZone`]).
//! - [`Numeric`]: arbitrary-precision `numeric` in PostgreSQL's base-10000 layout, with its
//!   arithmetic and rounding rules. [`json`]: `json` validation and canonical `jsonb` text.
//! - Private helpers: `datetime` (calendar, date/time/interval text), `float` (float text),
//!   `timezone` (zone rules via chrono-tz).
//!
//! `tests/types_vs_postgres.rs` (root package) checks all of this against a real PostgreSQL 15.

pub type Oid = u32;

/// A scalar type ringwire can store and send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scalar {
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
    /// `name` (OID 19, 64-byte identifier type): what `current_user`, `current_database()` and
    /// `current_schema()` return. Held as `Value::Text`.
    Name,
    /// `void` (OID 2278): the result of `pg_sleep()`; its text form is the empty string.
    Void,
    /// The type of an untyped literal or parameter before it is resolved (`unknown`, OID 705).
    Unknown,
}

/// A column or parameter type: a scalar, or a one-dimensional array of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Type {
    pub scalar: Scalar,
    pub array: bool,
}

/// Calendar interval, as PostgreSQL stores it: the three fields are independent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Interval {
    pub months: i32,
    pub days: i32,
    pub micros: i64,
}

/// One datum. `Null` is typed by the column or parameter it belongs to.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int2(i16),
    Int4(i32),
    Int8(i64),
    Float4(f32),
    Float8(f64),
    Numeric(Numeric),
    /// text, varchar, bpchar, json and jsonb all hold UTF-8 text; the column type says which.
    Text(String),
    Bytea(Vec<u8>),
    /// Days since 2000-01-01 (PostgreSQL's epoch). `i32::MIN`/`i32::MAX` are -infinity/infinity.
    Date(i32),
    /// Microseconds since midnight.
    Time(i64),
    /// Microseconds since 2000-01-01 00:00:00 (UTC for timestamptz). `i64::MIN`/`i64::MAX` are
    /// -infinity/infinity.
    Timestamp(i64),
    Timestamptz(i64),
    Interval(Interval),
    Uuid([u8; 16]),
    /// Elements of a one-dimensional array; the element type comes from the column's [`Type`].
    Array(Vec<Value>),
}

pub mod binary;
mod datetime;
/// PostgreSQL's calendar arithmetic (Julian days), shared with the SQL layer's date functions.
pub mod calendar {
    pub use super::datetime::{date2j, days_in_month, j2date, POSTGRES_EPOCH_JDATE};
}
mod float;
pub mod json;
pub mod numeric;
pub mod text;
mod timezone;

pub use numeric::Numeric;
pub use timezone::TimeZone;

use std::cmp::Ordering;

/// Per scalar: (scalar, oid, array oid, typlen, format_type name, array name).
const TYPES: [(Scalar, Oid, Oid, i16, &str, &str); 22] = [
    (Scalar::Bool, 16, 1000, 1, "boolean", "boolean[]"),
    (Scalar::Int2, 21, 1005, 2, "smallint", "smallint[]"),
    (Scalar::Int4, 23, 1007, 4, "integer", "integer[]"),
    (Scalar::Int8, 20, 1016, 8, "bigint", "bigint[]"),
    (Scalar::Float4, 700, 1021, 4, "real", "real[]"),
    (
        Scalar::Float8,
        701,
        1022,
        8,
        "double precision",
        "double precision[]",
    ),
    (Scalar::Numeric, 1700, 1231, -1, "numeric", "numeric[]"),
    (Scalar::Text, 25, 1009, -1, "text", "text[]"),
    (
        Scalar::Varchar,
        1043,
        1015,
        -1,
        "character varying",
        "character varying[]",
    ),
    (Scalar::Bpchar, 1042, 1014, -1, "character", "character[]"),
    (Scalar::Bytea, 17, 1001, -1, "bytea", "bytea[]"),
    (Scalar::Date, 1082, 1182, 4, "date", "date[]"),
    (
        Scalar::Time,
        1083,
        1183,
        8,
        "time without time zone",
        "time without time zone[]",
    ),
    (
        Scalar::Timestamp,
        1114,
        1115,
        8,
        "timestamp without time zone",
        "timestamp without time zone[]",
    ),
    (
        Scalar::Timestamptz,
        1184,
        1185,
        8,
        "timestamp with time zone",
        "timestamp with time zone[]",
    ),
    (Scalar::Interval, 1186, 1187, 16, "interval", "interval[]"),
    (Scalar::Uuid, 2950, 2951, 16, "uuid", "uuid[]"),
    (Scalar::Json, 114, 199, -1, "json", "json[]"),
    (Scalar::Jsonb, 3802, 3807, -1, "jsonb", "jsonb[]"),
    (Scalar::Name, 19, 1003, 64, "name", "name[]"),
    // `void` has no array type either.
    (Scalar::Void, 2278, 0, 4, "void", "void[]"),
    // `unknown` is a pseudo-type of length -2 (a C string); it has no array type, so its
    // "array" OID is 0 and never matches.
    (Scalar::Unknown, 705, 0, -2, "unknown", "unknown[]"),
];

impl Scalar {
    fn row(self) -> &'static (Scalar, Oid, Oid, i16, &'static str, &'static str) {
        let row = &TYPES[self as usize];
        debug_assert_eq!(row.0, self, "TYPES is in declaration order");
        row
    }
}

impl Type {
    pub const fn scalar(scalar: Scalar) -> Type {
        Type {
            scalar,
            array: false,
        }
    }

    pub const fn array_of(scalar: Scalar) -> Type {
        Type {
            scalar,
            array: true,
        }
    }

    /// The element type of an array type (the type itself for a scalar).
    pub const fn element(self) -> Type {
        Type {
            scalar: self.scalar,
            array: false,
        }
    }

    /// `pg_type.oid`.
    pub fn oid(self) -> Oid {
        let row = self.scalar.row();
        if self.array {
            row.2
        } else {
            row.1
        }
    }

    pub fn from_oid(oid: Oid) -> Option<Type> {
        if oid == 0 {
            return None;
        }
        TYPES.iter().find_map(|row| {
            if row.1 == oid {
                Some(Type::scalar(row.0))
            } else if row.2 == oid {
                Some(Type::array_of(row.0))
            } else {
                None
            }
        })
    }

    /// `pg_type.typlen`, as RowDescription reports it: -1 for variable length.
    pub fn typlen(self) -> i16 {
        if self.array {
            -1
        } else {
            self.scalar.row().3
        }
    }

    /// The name `format_type` prints: `integer`, `timestamp with time zone`, `integer[]`.
    pub fn name(self) -> &'static str {
        let row = self.scalar.row();
        if self.array {
            row.5
        } else {
            row.4
        }
    }

    /// Resolves a type name as written in a cast or column definition (`int`, `double
    /// precision`, `varchar`, `timestamptz`, `text[]`, `_int4`); case and inner whitespace
    /// are not significant. Type modifiers (`varchar(10)`) are the caller's to strip.
    pub fn from_sql_name(name: &str) -> Option<Type> {
        let mut normalized = String::with_capacity(name.len());
        for word in name.split_ascii_whitespace() {
            if !normalized.is_empty() {
                normalized.push(' ');
            }
            normalized.push_str(&word.to_ascii_lowercase());
        }
        let mut base = normalized.as_str();
        let mut array = false;
        if let Some(stripped) = base.strip_suffix("[]") {
            base = stripped.trim_end();
            array = true;
        } else if let Some(stripped) = base.strip_prefix('_') {
            base = stripped;
            array = true;
        }
        let scalar = match base {
            "bool" | "boolean" => Scalar::Bool,
            "int2" | "smallint" => Scalar::Int2,
            "int" | "int4" | "integer" => Scalar::Int4,
            "int8" | "bigint" => Scalar::Int8,
            "float4" | "real" => Scalar::Float4,
            "float" | "float8" | "double precision" => Scalar::Float8,
            "numeric" | "decimal" => Scalar::Numeric,
            "text" => Scalar::Text,
            "varchar" | "character varying" => Scalar::Varchar,
            "bpchar" | "char" | "character" => Scalar::Bpchar,
            "bytea" => Scalar::Bytea,
            "date" => Scalar::Date,
            "time" | "time without time zone" => Scalar::Time,
            "timestamp" | "timestamp without time zone" => Scalar::Timestamp,
            "timestamptz" | "timestamp with time zone" => Scalar::Timestamptz,
            "interval" => Scalar::Interval,
            "uuid" => Scalar::Uuid,
            "json" => Scalar::Json,
            "jsonb" => Scalar::Jsonb,
            "name" => Scalar::Name,
            "void" if !array => Scalar::Void,
            "unknown" if !array => Scalar::Unknown,
            _ => return None,
        };
        Some(Type { scalar, array })
    }
}

/// Session settings that change how values are written and read as text.
#[derive(Clone, Debug, PartialEq)]
pub struct TextContext {
    /// `TimeZone`: timestamptz output is shown in it, and input without an offset is read in it.
    pub time_zone: TimeZone,
    /// `extra_float_digits` (-15..=3): above 0, floats print in shortest round-trip form;
    /// otherwise with `15 + n` (float8) or `6 + n` (float4) significant digits.
    pub extra_float_digits: i32,
}

impl Default for TextContext {
    fn default() -> Self {
        TextContext {
            time_zone: TimeZone::Utc,
            extra_float_digits: 1,
        }
    }
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

/// Whether `value` is a valid in-memory form for a column of type `ty` (NULL fits any type).
pub fn value_matches(value: &Value, ty: Type) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => ty.array && items.iter().all(|v| scalar_matches(v, ty.scalar)),
        v => !ty.array && scalar_matches(v, ty.scalar),
    }
}

fn scalar_matches(value: &Value, scalar: Scalar) -> bool {
    matches!(
        (value, scalar),
        (Value::Null, _)
            | (Value::Bool(_), Scalar::Bool)
            | (Value::Int2(_), Scalar::Int2)
            | (Value::Int4(_), Scalar::Int4)
            | (Value::Int8(_), Scalar::Int8)
            | (Value::Float4(_), Scalar::Float4)
            | (Value::Float8(_), Scalar::Float8)
            | (Value::Numeric(_), Scalar::Numeric)
            | (
                Value::Text(_),
                Scalar::Text
                    | Scalar::Varchar
                    | Scalar::Bpchar
                    | Scalar::Json
                    | Scalar::Jsonb
                    | Scalar::Name
                    | Scalar::Void
                    | Scalar::Unknown
            )
            | (Value::Bytea(_), Scalar::Bytea)
            | (Value::Date(_), Scalar::Date)
            | (Value::Time(_), Scalar::Time)
            | (Value::Timestamp(_), Scalar::Timestamp)
            | (Value::Timestamptz(_), Scalar::Timestamptz)
            | (Value::Interval(_), Scalar::Interval)
            | (Value::Uuid(_), Scalar::Uuid)
    )
}

/// PostgreSQL's float ordering: NaN equals NaN and sorts above everything; -0 equals 0.
fn cmp_f64(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).expect("neither is NaN"),
    }
}

fn as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Int2(x) => Some(*x as i64),
        Value::Int4(x) => Some(*x as i64),
        Value::Int8(x) => Some(*x),
        _ => None,
    }
}

fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Float4(x) => Some(*x as f64),
        Value::Float8(x) => Some(*x),
        Value::Numeric(n) => Some(n.to_f64()),
        _ => as_i64(v).map(|i| i as f64),
    }
}

/// Interval comparison key (`interval_cmp_value`): months count as 30 days, days as 24 hours.
fn interval_key(iv: &Interval) -> i128 {
    let day = datetime::USECS_PER_DAY as i128;
    iv.micros as i128 + iv.days as i128 * day + iv.months as i128 * 30 * day
}

/// Date as a timestamp at midnight, keeping the infinities.
fn date_as_timestamp(d: i32) -> i64 {
    match d {
        i32::MAX => i64::MAX,
        i32::MIN => i64::MIN,
        _ => d as i64 * datetime::USECS_PER_DAY,
    }
}

/// Orders two non-NULL values the way PostgreSQL's btree operators do: numbers across integer
/// widths, floats and numeric; text and bytea bytewise (the C collation); dates against
/// timestamps; intervals by their 30-day-month span; arrays element by element with NULL
/// elements after all others and a shorter prefix first.
///
/// Returns `None` when either side is NULL or the two values are not comparable.
pub fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    use Value::*;
    Some(match (a, b) {
        (Null, _) | (_, Null) => return None,
        (Bool(x), Bool(y)) => x.cmp(y),
        (Numeric(x), Numeric(y)) => x.cmp(y),
        (Numeric(x), other) | (other, Numeric(x)) if as_i64(other).is_some() => {
            let y = numeric::Numeric::from_i64(as_i64(other).expect("checked"));
            let ord = x.cmp(&y);
            if matches!(a, Numeric(_)) {
                ord
            } else {
                ord.reverse()
            }
        }
        _ if as_i64(a).is_some() && as_i64(b).is_some() => as_i64(a)?.cmp(&as_i64(b)?),
        _ if as_f64(a).is_some() && as_f64(b).is_some() => cmp_f64(as_f64(a)?, as_f64(b)?),
        (Text(x), Text(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Bytea(x), Bytea(y)) => x.cmp(y),
        (Date(x), Date(y)) => x.cmp(y),
        (Date(x), Timestamp(y)) => date_as_timestamp(*x).cmp(y),
        (Timestamp(x), Date(y)) => x.cmp(&date_as_timestamp(*y)),
        (Time(x), Time(y)) => x.cmp(y),
        (Timestamp(x), Timestamp(y)) => x.cmp(y),
        (Timestamptz(x), Timestamptz(y)) => x.cmp(y),
        (Interval(x), Interval(y)) => interval_key(x).cmp(&interval_key(y)),
        (Uuid(x), Uuid(y)) => x.cmp(y),
        (Array(x), Array(y)) => {
            for (p, q) in x.iter().zip(y.iter()) {
                let ord = match (p.is_null(), q.is_null()) {
                    (true, true) => Ordering::Equal,
                    (true, false) => Ordering::Greater,
                    (false, true) => Ordering::Less,
                    _ => compare(p, q)?,
                };
                if ord != Ordering::Equal {
                    return Some(ord);
                }
            }
            x.len().cmp(&y.len())
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
