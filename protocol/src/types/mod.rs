//! PostgreSQL value types: OIDs, the in-memory [`Value`], and the text and binary wire formats.
//!
//! - [`Type`]: the scalar types ringwire speaks and one-dimensional arrays of them, with
//!   PostgreSQL's OIDs (`pg_type.oid`), so drivers that switch on OIDs work unchanged.
//! - [`Value`]: one datum. Times are kept in PostgreSQL's own epoch and units (microseconds or
//!   days since 2000-01-01), so the binary format is a byte swap away.
//! - `text` / `binary` submodules: encode into a caller's buffer, decode from a borrowed slice.
//!   Text output matches PostgreSQL byte for byte for the session settings ringwire reports
//!   (`DateStyle = ISO, MDY`, `IntervalStyle = postgres`, `extra_float_digits = 1`).

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

pub mod numeric;
pub use numeric::Numeric;
