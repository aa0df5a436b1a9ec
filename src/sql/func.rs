//! Built-in functions of the expression layer: their signatures (for overload resolution in
//! [`super::expr`]) and implementations, plus the date/time arithmetic, LIKE matching, MD5 and
//! randomness they need.

use std::cell::Cell;

use protocol::error::{PgError, SqlState};
use protocol::types::calendar::{date2j, days_in_month, j2date, POSTGRES_EPOCH_JDATE};
use protocol::types::{Interval, Numeric, Scalar, TextContext, TimeZone, Type, Value};

use super::{
    as_f64, division_by_zero, feature_not_supported, out_of_range, text_in, ArOp, DtOp, EvalEnv,
    Imp, Num, Sig, BOOL, BYTEA, DATE, FLOAT4, FLOAT8, INT2, INT4, INT8, INTERVAL, NAME, NUMERIC,
    TEXT, TIME, TIMESTAMP, TIMESTAMPTZ, UUID, VOID,
};

/// What `version()` returns; also the `server_version` the lead reports at startup.
pub const VERSION_STRING: &str = "PostgreSQL 16.0 (ringwire 0.1.0) on x86_64-pc-linux-gnu";

/// A built-in function implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Func {
    Version,
    CurrentDatabase,
    CurrentSchema,
    CurrentUser,
    CurrentSetting,
    BackendPid,
    Sleep,
    Notify,
    Now,
    StatementTimestamp,
    ClockTimestamp,
    CurrentDate,
    LocalTimestamp,
    LocalTime,
    Abs(Num),
    Length,
    LengthBpchar,
    OctetLength,
    Lower,
    Upper,
    Initcap,
    Substr,
    SubstrBytea,
    Btrim,
    Ltrim,
    Rtrim,
    Replace,
    Strpos,
    Left,
    Right,
    Repeat,
    Reverse,
    Lpad,
    Rpad,
    SplitPart,
    StartsWith,
    Ascii,
    Chr,
    ToHex,
    Md5,
    Md5Bytea,
    RoundF8,
    RoundN,
    RoundNScale,
    TruncF8,
    TruncN,
    TruncNScale,
    FloorF8,
    FloorN,
    CeilF8,
    CeilN,
    SqrtF8,
    SqrtN,
    Random,
    GenRandomUuid,
    Extract,
    TimezoneOfTstz,
    TimezoneOfTs,
    Concat,
    ConcatWs,
    LikeEscape,
}

impl Func {
    pub(crate) fn strict(self) -> bool {
        // pg_notify reads a NULL channel as empty (an error) and a NULL payload as empty.
        !matches!(self, Func::Concat | Func::ConcatWs | Func::Notify)
    }

    /// Volatile in PostgreSQL's sense: may return a different result within one statement,
    /// so it is evaluated per row and never once as an index key.
    pub(crate) fn volatile(self) -> bool {
        matches!(
            self,
            Func::Sleep | Func::Notify | Func::ClockTimestamp | Func::Random | Func::GenRandomUuid
        )
    }

    /// Immutable in PostgreSQL's sense and independent of the session: safe to fold.
    pub(crate) fn immutable(self) -> bool {
        !matches!(
            self,
            Func::Version
                | Func::CurrentDatabase
                | Func::CurrentSchema
                | Func::CurrentUser
                | Func::CurrentSetting
                | Func::BackendPid
                | Func::Sleep
                | Func::Notify
                | Func::Now
                | Func::StatementTimestamp
                | Func::ClockTimestamp
                | Func::CurrentDate
                | Func::LocalTimestamp
                | Func::LocalTime
                | Func::Random
                | Func::GenRandomUuid
                | Func::Extract
                | Func::TimezoneOfTstz
                | Func::TimezoneOfTs
                | Func::Concat
                | Func::ConcatWs
        )
    }
}

/// Names [`signatures`] knows; each has at least one signature in [`build_signatures`].
const FUNCTION_NAMES: &[&str] = &[
    "version",
    "current_database",
    "current_schema",
    "current_setting",
    "pg_backend_pid",
    "pg_sleep",
    "pg_notify",
    "now",
    "transaction_timestamp",
    "statement_timestamp",
    "clock_timestamp",
    "abs",
    "length",
    "char_length",
    "character_length",
    "octet_length",
    "lower",
    "upper",
    "initcap",
    "substr",
    "substring",
    "btrim",
    "ltrim",
    "rtrim",
    "replace",
    "strpos",
    "left",
    "right",
    "repeat",
    "reverse",
    "lpad",
    "rpad",
    "split_part",
    "starts_with",
    "ascii",
    "chr",
    "to_hex",
    "md5",
    "round",
    "trunc",
    "floor",
    "ceil",
    "ceiling",
    "sqrt",
    "mod",
    "power",
    "pow",
    "random",
    "gen_random_uuid",
    "extract",
    "timezone",
];

/// Candidate signatures of a function by (lower-case) name; empty if there is no such function.
pub(crate) fn signatures(name: &str) -> &'static [Sig] {
    static TABLE: std::sync::OnceLock<super::SigTable> = std::sync::OnceLock::new();
    super::lookup_sigs(&TABLE, FUNCTION_NAMES, build_signatures, name)
}

fn build_signatures(name: &str) -> Vec<Sig> {
    use Func as F;
    let f = |args: &[Type], ret: Type, func: Func| Sig::new(args, ret, Imp::Func(func));
    let nums = [
        (INT2, Num::I2),
        (INT4, Num::I4),
        (INT8, Num::I8),
        (FLOAT4, Num::F4),
        (FLOAT8, Num::F8),
        (NUMERIC, Num::N),
    ];
    match name {
        "version" => vec![f(&[], TEXT, F::Version)],
        "current_database" => vec![f(&[], NAME, F::CurrentDatabase)],
        "current_schema" => vec![f(&[], NAME, F::CurrentSchema)],
        "current_setting" => vec![
            f(&[TEXT], TEXT, F::CurrentSetting),
            f(&[TEXT, BOOL], TEXT, F::CurrentSetting),
        ],
        "pg_backend_pid" => vec![f(&[], INT4, F::BackendPid)],
        "pg_sleep" => vec![f(&[FLOAT8], VOID, F::Sleep)],
        "pg_notify" => vec![f(&[TEXT, TEXT], VOID, F::Notify)],
        "now" | "transaction_timestamp" => vec![f(&[], TIMESTAMPTZ, F::Now)],
        "statement_timestamp" => vec![f(&[], TIMESTAMPTZ, F::StatementTimestamp)],
        "clock_timestamp" => vec![f(&[], TIMESTAMPTZ, F::ClockTimestamp)],
        "abs" => nums.iter().map(|(t, n)| f(&[*t], *t, F::Abs(*n))).collect(),
        "length" => vec![
            f(&[TEXT], INT4, F::Length),
            f(&[super::BPCHAR], INT4, F::LengthBpchar),
            f(&[BYTEA], INT4, F::OctetLength),
        ],
        "char_length" | "character_length" => vec![
            f(&[TEXT], INT4, F::Length),
            f(&[super::BPCHAR], INT4, F::LengthBpchar),
        ],
        "octet_length" => vec![
            f(&[TEXT], INT4, F::OctetLength),
            f(&[BYTEA], INT4, F::OctetLength),
        ],
        "lower" => vec![f(&[TEXT], TEXT, F::Lower)],
        "upper" => vec![f(&[TEXT], TEXT, F::Upper)],
        "initcap" => vec![f(&[TEXT], TEXT, F::Initcap)],
        "substr" | "substring" => vec![
            f(&[TEXT, INT4], TEXT, F::Substr),
            f(&[TEXT, INT4, INT4], TEXT, F::Substr),
            f(&[BYTEA, INT4], BYTEA, F::SubstrBytea),
            f(&[BYTEA, INT4, INT4], BYTEA, F::SubstrBytea),
        ],
        "btrim" => vec![f(&[TEXT], TEXT, F::Btrim), f(&[TEXT, TEXT], TEXT, F::Btrim)],
        "ltrim" => vec![f(&[TEXT], TEXT, F::Ltrim), f(&[TEXT, TEXT], TEXT, F::Ltrim)],
        "rtrim" => vec![f(&[TEXT], TEXT, F::Rtrim), f(&[TEXT, TEXT], TEXT, F::Rtrim)],
        "replace" => vec![f(&[TEXT, TEXT, TEXT], TEXT, F::Replace)],
        "strpos" => vec![f(&[TEXT, TEXT], INT4, F::Strpos)],
        "left" => vec![f(&[TEXT, INT4], TEXT, F::Left)],
        "right" => vec![f(&[TEXT, INT4], TEXT, F::Right)],
        "repeat" => vec![f(&[TEXT, INT4], TEXT, F::Repeat)],
        "reverse" => vec![f(&[TEXT], TEXT, F::Reverse)],
        "lpad" => vec![
            f(&[TEXT, INT4], TEXT, F::Lpad),
            f(&[TEXT, INT4, TEXT], TEXT, F::Lpad),
        ],
        "rpad" => vec![
            f(&[TEXT, INT4], TEXT, F::Rpad),
            f(&[TEXT, INT4, TEXT], TEXT, F::Rpad),
        ],
        "split_part" => vec![f(&[TEXT, TEXT, INT4], TEXT, F::SplitPart)],
        "starts_with" => vec![f(&[TEXT, TEXT], BOOL, F::StartsWith)],
        "ascii" => vec![f(&[TEXT], INT4, F::Ascii)],
        "chr" => vec![f(&[INT4], TEXT, F::Chr)],
        "to_hex" => vec![f(&[INT4], TEXT, F::ToHex), f(&[INT8], TEXT, F::ToHex)],
        "md5" => vec![f(&[TEXT], TEXT, F::Md5), f(&[BYTEA], TEXT, F::Md5Bytea)],
        "round" => vec![
            f(&[FLOAT8], FLOAT8, F::RoundF8),
            f(&[NUMERIC], NUMERIC, F::RoundN),
            f(&[NUMERIC, INT4], NUMERIC, F::RoundNScale),
        ],
        "trunc" => vec![
            f(&[FLOAT8], FLOAT8, F::TruncF8),
            f(&[NUMERIC], NUMERIC, F::TruncN),
            f(&[NUMERIC, INT4], NUMERIC, F::TruncNScale),
        ],
        "floor" => vec![
            f(&[FLOAT8], FLOAT8, F::FloorF8),
            f(&[NUMERIC], NUMERIC, F::FloorN),
        ],
        "ceil" | "ceiling" => {
            vec![
                f(&[FLOAT8], FLOAT8, F::CeilF8),
                f(&[NUMERIC], NUMERIC, F::CeilN),
            ]
        }
        "sqrt" => vec![
            f(&[FLOAT8], FLOAT8, F::SqrtF8),
            f(&[NUMERIC], NUMERIC, F::SqrtN),
        ],
        "mod" => vec![
            Sig::new(&[INT2, INT2], INT2, Imp::Arith(ArOp::Mod, Num::I2)),
            Sig::new(&[INT4, INT4], INT4, Imp::Arith(ArOp::Mod, Num::I4)),
            Sig::new(&[INT8, INT8], INT8, Imp::Arith(ArOp::Mod, Num::I8)),
            Sig::new(&[NUMERIC, NUMERIC], NUMERIC, Imp::Arith(ArOp::Mod, Num::N)),
        ],
        "power" | "pow" => vec![
            Sig::new(&[FLOAT8, FLOAT8], FLOAT8, Imp::Arith(ArOp::Pow, Num::F8)),
            Sig::new(&[NUMERIC, NUMERIC], NUMERIC, Imp::Arith(ArOp::Pow, Num::N)),
        ],
        "random" => vec![f(&[], FLOAT8, F::Random)],
        "gen_random_uuid" => vec![f(&[], UUID, F::GenRandomUuid)],
        "extract" => {
            let ret = NUMERIC;
            vec![
                f(&[TEXT, TIMESTAMPTZ], ret, F::Extract),
                f(&[TEXT, TIMESTAMP], ret, F::Extract),
                f(&[TEXT, DATE], ret, F::Extract),
                f(&[TEXT, TIME], ret, F::Extract),
                f(&[TEXT, INTERVAL], ret, F::Extract),
            ]
        }
        "timezone" => vec![
            f(&[TEXT, TIMESTAMPTZ], TIMESTAMP, F::TimezoneOfTstz),
            f(&[TEXT, TIMESTAMP], TIMESTAMPTZ, F::TimezoneOfTs),
        ],
        _ => Vec::new(),
    }
}

fn text_arg(v: &Value) -> Result<&str, PgError> {
    match v {
        Value::Text(s) => Ok(s),
        _ => Err(PgError::new(
            SqlState::INTERNAL_ERROR,
            "internal error: text argument expected",
        )),
    }
}

fn int_arg(v: &Value) -> Result<i64, PgError> {
    match v {
        Value::Int2(x) => Ok(*x as i64),
        Value::Int4(x) => Ok(*x as i64),
        Value::Int8(x) => Ok(*x),
        _ => Err(PgError::new(
            SqlState::INTERNAL_ERROR,
            "internal error: integer argument expected",
        )),
    }
}

fn numeric_arg(v: &Value) -> Result<&Numeric, PgError> {
    match v {
        Value::Numeric(n) => Ok(n),
        _ => Err(PgError::new(
            SqlState::INTERNAL_ERROR,
            "internal error: numeric argument expected",
        )),
    }
}

fn f64_arg(v: &Value) -> Result<f64, PgError> {
    as_f64(v).ok_or_else(|| {
        PgError::new(
            SqlState::INTERNAL_ERROR,
            "internal error: float argument expected",
        )
    })
}

/// Calls a function on evaluated arguments `args` (already NULL-checked if the function is
/// strict); `exprs` are the planned arguments, for their types.
pub(crate) fn call(
    f: Func,
    args: &mut [Value],
    exprs: &[super::TypedExpr],
    env: &mut EvalEnv,
) -> Result<Value, PgError> {
    use Func as F;
    let session = env.session;
    Ok(match f {
        F::Version => Value::Text(VERSION_STRING.to_string()),
        F::CurrentDatabase => Value::Text(session.database().to_string()),
        F::CurrentSchema => Value::Text("public".to_string()),
        F::CurrentUser => Value::Text(session.user().to_string()),
        F::CurrentSetting => {
            let name = text_arg(&args[0])?;
            let missing_ok = matches!(args.get(1), Some(Value::Bool(true)));
            match session.current_setting(name) {
                Some(v) => Value::Text(v),
                None if missing_ok => Value::Null,
                None => {
                    return Err(PgError::new(
                        SqlState::UNDEFINED_OBJECT,
                        format!("unrecognized configuration parameter \"{name}\""),
                    ))
                }
            }
        }
        F::BackendPid => Value::Int4(session.backend_pid()),
        F::Sleep => {
            let secs = f64_arg(&args[0])?;
            if secs > 0.0 {
                const MAX_SLEEP_US: f64 = u64::MAX as f64 / 2.0;
                let us = (secs * 1e6).min(MAX_SLEEP_US) as u64;
                env.sleep_us = env.sleep_us.saturating_add(us);
            }
            // void: an empty, non-NULL value on the wire.
            Value::Text(String::new())
        }
        F::Notify => {
            fn text_or_empty(v: &Value) -> Result<&str, PgError> {
                match v {
                    Value::Null => Ok(""),
                    v => text_arg(v),
                }
            }
            let (channel, payload) = (text_or_empty(&args[0])?, text_or_empty(&args[1])?);
            crate::notify::check(channel, payload)?;
            env.notifies
                .push((channel.to_string(), payload.to_string()));
            Value::Text(String::new())
        }
        F::Now => Value::Timestamptz(session.stamps().transaction_us),
        F::StatementTimestamp => Value::Timestamptz(session.stamps().statement_us),
        F::ClockTimestamp => Value::Timestamptz(clock_us()),
        F::CurrentDate => {
            let local = utc_to_local(session.stamps().transaction_us, session.text_context())?;
            Value::Date(local.div_euclid(USECS_PER_DAY) as i32)
        }
        F::LocalTimestamp => Value::Timestamp(utc_to_local(
            session.stamps().transaction_us,
            session.text_context(),
        )?),
        F::LocalTime => {
            let local = utc_to_local(session.stamps().transaction_us, session.text_context())?;
            Value::Time(local.rem_euclid(USECS_PER_DAY))
        }
        F::Abs(n) => match (n, &args[0]) {
            (Num::I2, Value::Int2(x)) => {
                Value::Int2(x.checked_abs().ok_or_else(|| out_of_range(INT2))?)
            }
            (Num::I4, Value::Int4(x)) => {
                Value::Int4(x.checked_abs().ok_or_else(|| out_of_range(INT4))?)
            }
            (Num::I8, Value::Int8(x)) => {
                Value::Int8(x.checked_abs().ok_or_else(|| out_of_range(INT8))?)
            }
            (Num::F4, Value::Float4(x)) => Value::Float4(x.abs()),
            (Num::F8, Value::Float8(x)) => Value::Float8(x.abs()),
            (Num::N, Value::Numeric(x)) => Value::Numeric(x.abs()),
            _ => return Err(feature_not_supported("abs of this type")),
        },
        F::Length => Value::Int4(text_arg(&args[0])?.chars().count() as i32),
        F::LengthBpchar => {
            Value::Int4(text_arg(&args[0])?.trim_end_matches(' ').chars().count() as i32)
        }
        F::OctetLength => match &args[0] {
            Value::Bytea(b) => Value::Int4(b.len() as i32),
            v => Value::Int4(text_arg(v)?.len() as i32),
        },
        F::Lower => Value::Text(text_arg(&args[0])?.to_lowercase()),
        F::Upper => Value::Text(text_arg(&args[0])?.to_uppercase()),
        F::Initcap => Value::Text(initcap(text_arg(&args[0])?)),
        F::Substr => {
            let s = text_arg(&args[0])?;
            let (start, len) = substr_range(args)?;
            Value::Text(s.chars().skip(start).take(len).collect())
        }
        F::SubstrBytea => {
            let Value::Bytea(b) = &args[0] else {
                return Err(feature_not_supported("substr"));
            };
            let (start, len) = substr_range(args)?;
            Value::Bytea(b.iter().skip(start).take(len).copied().collect())
        }
        F::Btrim | F::Ltrim | F::Rtrim => {
            let s = text_arg(&args[0])?;
            let set: Vec<char> = match args.get(1) {
                Some(v) => text_arg(v)?.chars().collect(),
                None => vec![' '],
            };
            let is_trim = |c: char| set.contains(&c);
            let out = match f {
                F::Btrim => s.trim_matches(is_trim),
                F::Ltrim => s.trim_start_matches(is_trim),
                _ => s.trim_end_matches(is_trim),
            };
            Value::Text(out.to_string())
        }
        F::Replace => {
            let s = text_arg(&args[0])?;
            let from = text_arg(&args[1])?;
            let to = text_arg(&args[2])?;
            Value::Text(if from.is_empty() {
                s.to_string()
            } else {
                s.replace(from, to)
            })
        }
        F::Strpos => {
            let s = text_arg(&args[0])?;
            let needle = text_arg(&args[1])?;
            Value::Int4(match s.find(needle) {
                Some(byte) => s[..byte].chars().count() as i32 + 1,
                None => 0,
            })
        }
        F::Left | F::Right => {
            let s = text_arg(&args[0])?;
            let n = int_arg(&args[1])?;
            let len = s.chars().count() as i64;
            let keep = if n >= 0 { n.min(len) } else { (len + n).max(0) } as usize;
            Value::Text(if f == F::Left {
                s.chars().take(keep).collect()
            } else {
                s.chars().skip(len as usize - keep).collect()
            })
        }
        F::Repeat => {
            let s = text_arg(&args[0])?;
            let n = int_arg(&args[1])?.max(0) as usize;
            const MAX_TEXT_BYTES: usize = (1 << 30) - 1;
            if s.len().saturating_mul(n) > MAX_TEXT_BYTES {
                return Err(PgError::new(
                    SqlState::PROGRAM_LIMIT_EXCEEDED,
                    "requested length too large",
                ));
            }
            Value::Text(s.repeat(n))
        }
        F::Reverse => Value::Text(text_arg(&args[0])?.chars().rev().collect()),
        F::Lpad | F::Rpad => {
            let s = text_arg(&args[0])?;
            let n = int_arg(&args[1])?.max(0) as usize;
            // PostgreSQL sizes the result for 4-byte characters and refuses one past its 1 GB
            // allocation limit before building anything; so do we, or `lpad('', 2147483647)`
            // would build gigabytes on the shard, stalling it for seconds.
            const MAX_TEXT_BYTES: usize = (1 << 30) - 1;
            if n.saturating_mul(4) > MAX_TEXT_BYTES {
                return Err(PgError::new(
                    SqlState::PROGRAM_LIMIT_EXCEEDED,
                    "requested length too large",
                ));
            }
            let fill: Vec<char> = match args.get(2) {
                Some(v) => text_arg(v)?.chars().collect(),
                None => vec![' '],
            };
            let chars: Vec<char> = s.chars().collect();
            if chars.len() >= n || fill.is_empty() {
                return Ok(Value::Text(chars.into_iter().take(n).collect()));
            }
            let pad: String = fill.iter().cycle().take(n - chars.len()).collect();
            Value::Text(if f == F::Lpad {
                format!("{pad}{s}")
            } else {
                format!("{s}{pad}")
            })
        }
        F::SplitPart => {
            let s = text_arg(&args[0])?;
            let delim = text_arg(&args[1])?;
            let n = int_arg(&args[2])?;
            if n == 0 {
                return Err(PgError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    "field position must not be zero",
                ));
            }
            let parts: Vec<&str> = if delim.is_empty() {
                vec![s]
            } else {
                s.split(delim).collect()
            };
            let idx = if n > 0 { n - 1 } else { parts.len() as i64 + n };
            Value::Text(
                usize::try_from(idx)
                    .ok()
                    .and_then(|i| parts.get(i))
                    .unwrap_or(&"")
                    .to_string(),
            )
        }
        F::StartsWith => Value::Bool(text_arg(&args[0])?.starts_with(text_arg(&args[1])?)),
        F::Ascii => Value::Int4(text_arg(&args[0])?.chars().next().map_or(0, |c| c as i32)),
        F::Chr => {
            let code = int_arg(&args[0])?;
            if code == 0 {
                return Err(PgError::new(
                    SqlState::PROGRAM_LIMIT_EXCEEDED,
                    "null character not permitted",
                ));
            }
            let c = u32::try_from(code)
                .ok()
                .and_then(char::from_u32)
                .ok_or_else(|| {
                    PgError::new(
                        SqlState::PROGRAM_LIMIT_EXCEEDED,
                        format!("requested character too large for encoding: {code}"),
                    )
                })?;
            Value::Text(c.to_string())
        }
        F::ToHex => Value::Text(match &args[0] {
            Value::Int4(x) => format!("{:x}", *x as u32),
            v => format!("{:x}", int_arg(v)? as u64),
        }),
        F::Md5 => Value::Text(hex(&md5(text_arg(&args[0])?.as_bytes()))),
        F::Md5Bytea => match &args[0] {
            Value::Bytea(b) => Value::Text(hex(&md5(b))),
            _ => return Err(feature_not_supported("md5 of this type")),
        },
        F::RoundF8 => Value::Float8(f64_arg(&args[0])?.round_ties_even()),
        F::TruncF8 => Value::Float8(f64_arg(&args[0])?.trunc()),
        F::FloorF8 => Value::Float8(f64_arg(&args[0])?.floor()),
        F::CeilF8 => Value::Float8(f64_arg(&args[0])?.ceil()),
        F::RoundN => Value::Numeric(numeric_arg(&args[0])?.round(0)),
        F::RoundNScale => {
            Value::Numeric(numeric_arg(&args[0])?.round(clamp_scale(int_arg(&args[1])?)))
        }
        F::TruncN => Value::Numeric(numeric_arg(&args[0])?.trunc(0)),
        F::TruncNScale => {
            Value::Numeric(numeric_arg(&args[0])?.trunc(clamp_scale(int_arg(&args[1])?)))
        }
        F::FloorN | F::CeilN => {
            let n = numeric_arg(&args[0])?;
            Value::Numeric(numeric_floor_ceil(n, f == F::CeilN)?)
        }
        F::SqrtF8 => {
            let x = f64_arg(&args[0])?;
            if x < 0.0 {
                return Err(PgError::new(
                    SqlState(*b"2201F"),
                    "cannot take square root of a negative number",
                ));
            }
            Value::Float8(x.sqrt())
        }
        F::SqrtN => Value::Numeric(numeric_sqrt(numeric_arg(&args[0])?)?),
        F::Random => Value::Float8(random_f64()),
        F::GenRandomUuid => {
            let mut b = random_bytes::<16>();
            b[6] = (b[6] & 0x0f) | 0x40;
            b[8] = (b[8] & 0x3f) | 0x80;
            Value::Uuid(b)
        }
        F::Extract => extract(
            text_arg(&args[0])?,
            &args[1],
            exprs[1].ty,
            session.text_context(),
        )?,
        F::TimezoneOfTstz | F::TimezoneOfTs => {
            let zone = text_arg(&args[0])?;
            let tz = TimeZone::parse(zone).map_err(|_| {
                PgError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!("time zone \"{zone}\" not recognized"),
                )
            })?;
            let ctx = TextContext {
                time_zone: tz,
                ..session.text_context().clone()
            };
            match (&args[1], f) {
                (Value::Timestamptz(t), F::TimezoneOfTstz) => {
                    Value::Timestamp(utc_to_local(*t, &ctx)?)
                }
                (Value::Timestamp(t), F::TimezoneOfTs) => {
                    Value::Timestamptz(local_to_utc(*t, &ctx)?)
                }
                _ => return Err(feature_not_supported("AT TIME ZONE of this type")),
            }
        }
        F::Concat | F::ConcatWs => {
            let tctx = session.text_context();
            let mut out = String::new();
            let (sep, rest, rest_types) = if f == F::ConcatWs {
                match &args[0] {
                    Value::Null => return Ok(Value::Null),
                    v => (Some(text_arg(v)?.to_string()), &args[1..], &exprs[1..]),
                }
            } else {
                (None, &args[..], exprs)
            };
            let mut first = true;
            for (v, e) in rest.iter().zip(rest_types) {
                if v.is_null() {
                    continue;
                }
                if let (Some(sep), false) = (&sep, first) {
                    out.push_str(sep);
                }
                first = false;
                match v {
                    Value::Text(s) => out.push_str(s),
                    other => {
                        let mut buf = Vec::new();
                        protocol::types::text::encode(other, e.ty, tctx, &mut buf);
                        out.push_str(&String::from_utf8_lossy(&buf));
                    }
                }
            }
            Value::Text(out)
        }
        F::LikeEscape => Value::Text(like_escape(text_arg(&args[0])?, text_arg(&args[1])?)?),
    })
}

fn clamp_scale(s: i64) -> i32 {
    const NUMERIC_MAX_SCALE: i64 = 1000;
    s.clamp(-NUMERIC_MAX_SCALE, NUMERIC_MAX_SCALE) as i32
}

/// 0-based start and length of `substr(x, from [, count])` in characters.
fn substr_range(args: &[Value]) -> Result<(usize, usize), PgError> {
    let from = int_arg(&args[1])?;
    let end = match args.get(2) {
        Some(c) => {
            let count = int_arg(c)?;
            if count < 0 {
                return Err(PgError::new(
                    SqlState(*b"22011"),
                    "negative substring length not allowed",
                ));
            }
            from.saturating_add(count)
        }
        None => i64::MAX,
    };
    let start = from.max(1);
    if end <= start {
        return Ok((0, 0));
    }
    // Both are positive here; `end - start` cannot overflow since `start >= 1`.
    Ok(((start - 1) as usize, (end - start) as usize))
}

fn initcap(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_alnum = false;
    for c in s.chars() {
        if prev_alnum {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        prev_alnum = c.is_alphanumeric();
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Numeric helpers
// ---------------------------------------------------------------------------------------------

/// `numeric % numeric`: `x - trunc(x / y) * y`; the result has the larger input scale.
pub(crate) fn numeric_mod(x: &Numeric, y: &Numeric) -> Result<Numeric, PgError> {
    if y.is_nan() || x.is_nan() {
        return Ok(Numeric::nan());
    }
    if *y == Numeric::zero() {
        return Err(division_by_zero());
    }
    if x.is_infinite() {
        return Ok(Numeric::nan());
    }
    if y.is_infinite() {
        return Ok(x.clone());
    }
    let q = x.div(y)?.trunc(0);
    x.sub(&q.mul(y)?)
}

fn numeric_floor_ceil(n: &Numeric, ceil: bool) -> Result<Numeric, PgError> {
    if n.is_nan() || n.is_infinite() {
        return Ok(n.clone());
    }
    let t = n.trunc(0);
    if t == *n {
        return Ok(t);
    }
    let one = Numeric::from_i64(1);
    match (ceil, n.is_negative()) {
        (true, false) => t.add(&one),
        (false, true) => t.sub(&one),
        _ => Ok(t),
    }
}

const NUMERIC_MIN_SIG_DIGITS: i32 = 16;
const NUMERIC_MAX_DISPLAY_SCALE: i32 = 1000;
/// Extra fractional digits carried by the iterative routines below before the final rounding.
const GUARD_DIGITS: i32 = 10;

/// Decimal exponent of the leading digit of a finite, nonzero value.
fn decimal_weight(x: f64) -> i32 {
    x.abs().log10().floor() as i32
}

fn numeric_from_f64_guess(v: f64) -> Result<Numeric, PgError> {
    // `{:e}` prints the shortest round-trip digits, which numeric input accepts.
    Numeric::parse(&format!("{v:e}"))
}

fn numeric_is_integer(n: &Numeric) -> bool {
    n.trunc(0) == *n
}

/// `sqrt(numeric)` to PostgreSQL's result scale (at least 16 significant digits), by Newton's
/// iteration from a float8 guess, correctly rounded.
pub(crate) fn numeric_sqrt(n: &Numeric) -> Result<Numeric, PgError> {
    if n.is_nan() {
        return Ok(Numeric::nan());
    }
    if n.is_negative() {
        return Err(PgError::new(
            SqlState(*b"2201F"),
            "cannot take square root of a negative number",
        ));
    }
    if n.is_infinite() {
        return Ok(n.clone());
    }
    const DEC_DIGITS: i32 = 4;
    let x = n.to_f64();
    // PostgreSQL estimates the result weight from the base-10000 weight of the argument.
    let weight = if n.is_zero() {
        0
    } else {
        decimal_weight(x).div_euclid(DEC_DIGITS)
    };
    let sweight = (weight + 1) * DEC_DIGITS / 2 - 1;
    let rscale = (NUMERIC_MIN_SIG_DIGITS - sweight)
        .max(n.dscale() as i32)
        .clamp(0, NUMERIC_MAX_DISPLAY_SCALE);
    if n.is_zero() {
        return Ok(Numeric::zero().round(rscale));
    }
    if !x.is_finite() {
        return Err(feature_not_supported(
            "sqrt of a numeric beyond float8 range",
        ));
    }
    let work = rscale + GUARD_DIGITS;
    let two = Numeric::from_i64(2);
    let mut y = numeric_from_f64_guess(x.sqrt())?;
    // Each step doubles the correct digits; the float8 guess has about 15.
    let mut correct = 15;
    while correct < work + sweight.max(0) + GUARD_DIGITS {
        y = y
            .add(&n.div_with_scale(&y, work)?)?
            .div_with_scale(&two, work)?;
        correct *= 2;
    }
    Ok(y.round(rscale))
}

/// `exp(z)` with `scale` fractional digits: argument halving, Taylor series, squaring.
fn numeric_exp(z: &Numeric, scale: i32) -> Result<Numeric, PgError> {
    let zf = z.to_f64();
    // Bring |z| below 0.01 by halving k times; squaring back loses about 0.3k digits.
    let halvings = if zf.abs() > 0.01 {
        (zf.abs() / 0.01).log2().ceil() as i32
    } else {
        0
    };
    let work = scale + GUARD_DIGITS + halvings;
    let mut r = z.clone();
    let two = Numeric::from_i64(2);
    for _ in 0..halvings {
        r = r.div_with_scale(&two, work)?;
    }
    let one = Numeric::from_i64(1);
    let mut sum = one.clone();
    let mut term = one;
    for n in 1..=10_000i64 {
        term = term.mul(&r)?.div_with_scale(&Numeric::from_i64(n), work)?;
        if term.is_zero() {
            break;
        }
        sum = sum.add(&term)?;
    }
    for _ in 0..halvings {
        sum = sum.mul(&sum)?.round(work);
    }
    Ok(sum.round(scale))
}

/// `ln(x)` for x > 0 with `scale` fractional digits: Halley's iteration on `exp`.
fn numeric_ln(x: &Numeric, scale: i32) -> Result<Numeric, PgError> {
    let xf = x.to_f64();
    if !xf.is_finite() || xf <= 0.0 {
        return Err(feature_not_supported(
            "logarithm of a numeric beyond float8 range",
        ));
    }
    let work = scale + GUARD_DIGITS;
    let two = Numeric::from_i64(2);
    let mut y = numeric_from_f64_guess(xf.ln())?;
    // Each step triples the correct digits.
    let mut correct = 15;
    while correct < work + GUARD_DIGITS {
        let e = numeric_exp(&y, work + decimal_weight(xf).max(0))?;
        let step = two.mul(&x.sub(&e)?)?.div_with_scale(&x.add(&e)?, work)?;
        y = y.add(&step)?;
        correct *= 3;
    }
    Ok(y.round(scale))
}

/// `numeric ^ numeric` following PostgreSQL's `power_var`: exact multiplication for integer
/// exponents, `exp(y * ln(x))` otherwise, with its result scale.
pub(crate) fn numeric_power(base: &Numeric, exp: &Numeric) -> Result<Numeric, PgError> {
    if base.is_nan() || exp.is_nan() {
        return Ok(Numeric::nan());
    }
    if base.is_infinite() || exp.is_infinite() {
        return Numeric::from_f64(float_power(base.to_f64(), exp.to_f64())?);
    }
    if base.is_zero() && exp.is_negative() {
        return Err(PgError::new(
            SqlState(*b"2201F"),
            "zero raised to a negative power is undefined",
        ));
    }
    let exp_is_int = numeric_is_integer(exp);
    if base.is_negative() && !exp_is_int {
        return Err(PgError::new(
            SqlState(*b"2201F"),
            "a negative number raised to a non-integer power yields a complex result",
        ));
    }
    let b = base.to_f64();
    let e = exp.to_f64();
    // Approximate decimal weight of the result; PostgreSQL truncates it toward zero.
    let val = if base.is_zero() {
        0.0
    } else {
        e * b.abs().log10()
    };
    if !val.is_finite() || val.abs() > 100_000.0 {
        return Err(PgError::new(
            SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
            "value overflows numeric format",
        ));
    }
    let rscale = (NUMERIC_MIN_SIG_DIGITS - val as i32)
        .max(base.dscale() as i32)
        .max(exp.dscale() as i32)
        .clamp(0, NUMERIC_MAX_DISPLAY_SCALE);
    if exp_is_int && e.abs() <= i32::MAX as f64 {
        // PostgreSQL 15 gives integer powers at least 16 fractional digits, more if the base
        // shows more.
        let rscale = NUMERIC_MIN_SIG_DIGITS
            .max(base.dscale() as i32)
            .clamp(0, NUMERIC_MAX_DISPLAY_SCALE);
        // Square-and-multiply; products are rounded to a working scale wide enough that the
        // final rounding sees the exact digits for the exponents queries use.
        let mut n = e.abs() as u64;
        let work = rscale + GUARD_DIGITS + (64 - n.leading_zeros() as i32);
        let mut acc = Numeric::from_i64(1);
        let mut sq = base.clone();
        while n > 0 {
            if n & 1 == 1 {
                acc = acc.mul(&sq)?.round(work);
            }
            n >>= 1;
            if n > 0 {
                sq = sq.mul(&sq)?.round(work);
            }
        }
        if e < 0.0 {
            return Numeric::from_i64(1).div_with_scale(&acc, rscale);
        }
        return Ok(acc.round(rscale));
    }
    if base.is_zero() {
        return Ok(Numeric::zero().round(rscale));
    }
    let sig_digits = (rscale + val as i32).max(0);
    let ln_weight = decimal_weight(b.abs().ln());
    let local = sig_digits - ln_weight + 8;
    let ln = numeric_ln(base, local)?;
    let product = ln.mul(exp)?.round(local);
    numeric_exp(&product, rscale)
}

/// `float8 ^ float8` with PostgreSQL's domain errors.
pub(crate) fn float_power(x: f64, y: f64) -> Result<f64, PgError> {
    if x.is_nan() {
        return Ok(if y == 0.0 { 1.0 } else { f64::NAN });
    }
    if y.is_nan() {
        return Ok(if x == 1.0 { 1.0 } else { f64::NAN });
    }
    if x == 0.0 && y < 0.0 {
        return Err(PgError::new(
            SqlState(*b"2201F"),
            "zero raised to a negative power is undefined",
        ));
    }
    if x < 0.0 && y.is_finite() && y.floor() != y {
        return Err(PgError::new(
            SqlState(*b"2201F"),
            "a negative number raised to a non-integer power yields a complex result",
        ));
    }
    let r = x.powf(y);
    if r.is_infinite() && x.is_finite() && y.is_finite() {
        return Err(PgError::new(
            SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
            "value out of range: overflow",
        ));
    }
    if r == 0.0 && x != 0.0 && x.is_finite() && y.is_finite() {
        return Err(PgError::new(
            SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
            "value out of range: underflow",
        ));
    }
    Ok(r)
}

// ---------------------------------------------------------------------------------------------
// Date and time
// ---------------------------------------------------------------------------------------------

pub(crate) const USECS_PER_DAY: i64 = 86_400_000_000;
const USECS_PER_SEC: i64 = 1_000_000;
const SECS_PER_DAY: f64 = 86_400.0;
const DAYS_PER_MONTH: f64 = 30.0;
/// Valid timestamps: 4714-11-24 BC .. 294277-01-01 (exclusive), as PostgreSQL.
const MIN_TIMESTAMP: i64 = -211_813_488_000_000_000;
const END_TIMESTAMP: i64 = 9_223_371_331_200_000_000;
/// Valid dates in days since 2000-01-01: 4714-11-24 BC .. 5874898-01-01 (exclusive).
const MIN_DATE: i64 = -POSTGRES_EPOCH_JDATE;
const END_DATE: i64 = 2_147_483_494 - POSTGRES_EPOCH_JDATE;

fn ts_out_of_range() -> PgError {
    out_of_range(TIMESTAMP)
}

fn valid_ts(t: i64) -> Result<i64, PgError> {
    if (MIN_TIMESTAMP..END_TIMESTAMP).contains(&t) {
        Ok(t)
    } else {
        Err(ts_out_of_range())
    }
}

fn ts_finite(t: i64) -> bool {
    t != i64::MIN && t != i64::MAX
}

fn date_finite(d: i32) -> bool {
    d != i32::MIN && d != i32::MAX
}

/// `timestamp + interval` on a local (wall-clock) timestamp.
fn ts_plus_interval(t: i64, iv: &Interval) -> Result<i64, PgError> {
    if !ts_finite(t) {
        return Ok(t);
    }
    let mut t = t;
    if iv.months != 0 || iv.days != 0 {
        let days = t.div_euclid(USECS_PER_DAY);
        let time = t.rem_euclid(USECS_PER_DAY);
        let (mut y, mut m, mut d) = j2date(days + POSTGRES_EPOCH_JDATE);
        if iv.months != 0 {
            let total = y * 12 + (m - 1) + iv.months as i64;
            y = total.div_euclid(12);
            m = total.rem_euclid(12) + 1;
            d = d.min(days_in_month(y, m));
        }
        let julian = date2j(y, m, d) + iv.days as i64;
        t = (julian - POSTGRES_EPOCH_JDATE)
            .checked_mul(USECS_PER_DAY)
            .and_then(|x| x.checked_add(time))
            .ok_or_else(ts_out_of_range)?;
        valid_ts(t)?;
    }
    valid_ts(t.checked_add(iv.micros).ok_or_else(ts_out_of_range)?)
}

fn neg_interval(iv: &Interval) -> Result<Interval, PgError> {
    let ovf = || out_of_range(INTERVAL);
    Ok(Interval {
        months: iv.months.checked_neg().ok_or_else(ovf)?,
        days: iv.days.checked_neg().ok_or_else(ovf)?,
        micros: iv.micros.checked_neg().ok_or_else(ovf)?,
    })
}

fn tstz_plus_interval(t: i64, iv: &Interval, tctx: &TextContext) -> Result<i64, PgError> {
    if !ts_finite(t) {
        return Ok(t);
    }
    let mut t = t;
    if iv.months != 0 || iv.days != 0 {
        // Calendar parts move the local wall clock, then the zone decides the offset again.
        let local = utc_to_local(t, tctx)?;
        let moved = ts_plus_interval(local, &Interval { micros: 0, ..*iv })?;
        t = local_to_utc(moved, tctx)?;
    }
    valid_ts(t.checked_add(iv.micros).ok_or_else(ts_out_of_range)?)
}

/// `interval_justify_hours`, as `timestamp - timestamp` applies it.
fn justify_hours(micros: i64) -> Interval {
    let mut days = micros / USECS_PER_DAY;
    let mut time = micros - days * USECS_PER_DAY;
    if days > 0 && time < 0 {
        time += USECS_PER_DAY;
        days -= 1;
    } else if days < 0 && time > 0 {
        time -= USECS_PER_DAY;
        days += 1;
    }
    Interval {
        months: 0,
        days: days as i32,
        micros: time,
    }
}

fn ts_minus_ts(a: i64, b: i64) -> Result<Interval, PgError> {
    if !ts_finite(a) || !ts_finite(b) {
        return Err(PgError::new(
            SqlState::DATETIME_FIELD_OVERFLOW,
            "cannot subtract infinite timestamps",
        ));
    }
    let d = a.checked_sub(b).ok_or_else(|| out_of_range(INTERVAL))?;
    Ok(justify_hours(d))
}

fn tsround(x: f64) -> f64 {
    const TS_PREC_INV: f64 = 1_000_000.0;
    (x * TS_PREC_INV).round_ties_even() / TS_PREC_INV
}

/// PostgreSQL 15's `interval_mul` / `interval_div` (fractional months spill into days, and
/// fractional days into time).
fn interval_scale(iv: &Interval, factor: f64, divide: bool) -> Result<Interval, PgError> {
    let ovf = || out_of_range(INTERVAL);
    let apply = |x: f64| if divide { x / factor } else { x * factor };
    let to_i32 = |x: f64| -> Result<i32, PgError> {
        if x.is_nan() || x > i32::MAX as f64 || x < i32::MIN as f64 {
            Err(ovf())
        } else {
            Ok(x as i32)
        }
    };
    let months = to_i32(apply(iv.months as f64))?;
    let mut days = to_i32(apply(iv.days as f64))?;
    let month_remainder_days = tsround((apply(iv.months as f64) - months as f64) * DAYS_PER_MONTH);
    let mut sec_remainder = tsround(
        (apply(iv.days as f64) - days as f64 + month_remainder_days - month_remainder_days.trunc())
            * SECS_PER_DAY,
    );
    if sec_remainder.abs() >= SECS_PER_DAY {
        let whole = (sec_remainder / SECS_PER_DAY).trunc();
        days = days.checked_add(whole as i32).ok_or_else(ovf)?;
        sec_remainder -= whole * SECS_PER_DAY;
    }
    days = days
        .checked_add(month_remainder_days as i32)
        .ok_or_else(ovf)?;
    let micros = (apply(iv.micros as f64) + sec_remainder * USECS_PER_SEC as f64).round_ties_even();
    if micros.is_nan() || micros < i64::MIN as f64 || micros >= -(i64::MIN as f64) {
        return Err(ovf());
    }
    Ok(Interval {
        months,
        days,
        micros: micros as i64,
    })
}

fn date_value(v: &Value) -> Result<i32, PgError> {
    match v {
        Value::Date(d) => Ok(*d),
        _ => Err(internal_dt()),
    }
}

fn ts_value(v: &Value) -> Result<i64, PgError> {
    match v {
        Value::Timestamp(t) | Value::Timestamptz(t) => Ok(*t),
        _ => Err(internal_dt()),
    }
}

fn iv_value(v: &Value) -> Result<Interval, PgError> {
    match v {
        Value::Interval(i) => Ok(*i),
        _ => Err(internal_dt()),
    }
}

fn time_value(v: &Value) -> Result<i64, PgError> {
    match v {
        Value::Time(t) => Ok(*t),
        _ => Err(internal_dt()),
    }
}

fn internal_dt() -> PgError {
    PgError::new(
        SqlState::INTERNAL_ERROR,
        "internal error: date/time operand",
    )
}

fn date_plus_days(d: i32, days: i64) -> Result<Value, PgError> {
    if !date_finite(d) {
        return Ok(Value::Date(d));
    }
    let r = d as i64 + days;
    if !(MIN_DATE..END_DATE).contains(&r) {
        return Err(out_of_range(DATE));
    }
    Ok(Value::Date(r as i32))
}

fn time_plus_micros(t: i64, micros: i64) -> i64 {
    (t as i128 + micros as i128).rem_euclid(USECS_PER_DAY as i128) as i64
}

/// Date/time operators (operands non-NULL and of the types `DtOp` documents).
pub(crate) fn datetime_op(op: DtOp, v: &[Value], tctx: &TextContext) -> Result<Value, PgError> {
    use DtOp as D;
    Ok(match op {
        D::DatePlusDays => date_plus_days(date_value(&v[0])?, expr_int(&v[1])?)?,
        D::DaysPlusDate => date_plus_days(date_value(&v[1])?, expr_int(&v[0])?)?,
        D::DateMinusDays => date_plus_days(date_value(&v[0])?, -expr_int(&v[1])?)?,
        D::DateMinusDate => {
            let (a, b) = (date_value(&v[0])?, date_value(&v[1])?);
            if !date_finite(a) || !date_finite(b) {
                return Err(PgError::new(
                    SqlState::DATETIME_FIELD_OVERFLOW,
                    "cannot subtract infinite dates",
                ));
            }
            Value::Int4(a - b)
        }
        D::TsPlusIv => Value::Timestamp(ts_plus_interval(ts_value(&v[0])?, &iv_value(&v[1])?)?),
        D::IvPlusTs => Value::Timestamp(ts_plus_interval(ts_value(&v[1])?, &iv_value(&v[0])?)?),
        D::TsMinusIv => Value::Timestamp(ts_plus_interval(
            ts_value(&v[0])?,
            &neg_interval(&iv_value(&v[1])?)?,
        )?),
        D::TstzPlusIv => Value::Timestamptz(tstz_plus_interval(
            ts_value(&v[0])?,
            &iv_value(&v[1])?,
            tctx,
        )?),
        D::IvPlusTstz => Value::Timestamptz(tstz_plus_interval(
            ts_value(&v[1])?,
            &iv_value(&v[0])?,
            tctx,
        )?),
        D::TstzMinusIv => Value::Timestamptz(tstz_plus_interval(
            ts_value(&v[0])?,
            &neg_interval(&iv_value(&v[1])?)?,
            tctx,
        )?),
        D::TsMinusTs | D::TstzMinusTstz => {
            Value::Interval(ts_minus_ts(ts_value(&v[0])?, ts_value(&v[1])?)?)
        }
        D::IvPlusIv | D::IvMinusIv => {
            let a = iv_value(&v[0])?;
            let b = iv_value(&v[1])?;
            let b = if op == D::IvMinusIv {
                neg_interval(&b)?
            } else {
                b
            };
            let ovf = || out_of_range(INTERVAL);
            Value::Interval(Interval {
                months: a.months.checked_add(b.months).ok_or_else(ovf)?,
                days: a.days.checked_add(b.days).ok_or_else(ovf)?,
                micros: a.micros.checked_add(b.micros).ok_or_else(ovf)?,
            })
        }
        D::IvMulF8 => Value::Interval(interval_scale(&iv_value(&v[0])?, f64_arg(&v[1])?, false)?),
        D::F8MulIv => Value::Interval(interval_scale(&iv_value(&v[1])?, f64_arg(&v[0])?, false)?),
        D::IvDivF8 => {
            let f = f64_arg(&v[1])?;
            if f == 0.0 {
                return Err(division_by_zero());
            }
            Value::Interval(interval_scale(&iv_value(&v[0])?, f, true)?)
        }
        D::TimePlusIv => Value::Time(time_plus_micros(
            time_value(&v[0])?,
            iv_value(&v[1])?.micros,
        )),
        D::IvPlusTime => Value::Time(time_plus_micros(
            time_value(&v[1])?,
            iv_value(&v[0])?.micros,
        )),
        D::TimeMinusIv => Value::Time(time_plus_micros(
            time_value(&v[0])?,
            iv_value(&v[1])?.micros.wrapping_neg(),
        )),
        D::TimeMinusTime => Value::Interval(Interval {
            months: 0,
            days: 0,
            micros: time_value(&v[0])? - time_value(&v[1])?,
        }),
        D::DatePlusTime | D::TimePlusDate => {
            let (d, t) = if op == D::DatePlusTime {
                (&v[0], &v[1])
            } else {
                (&v[1], &v[0])
            };
            let d = date_value(d)?;
            let t = time_value(t)?;
            Value::Timestamp(
                date_to_ts(d)?
                    .checked_add(t)
                    .map_or(Err(ts_out_of_range()), valid_ts)?,
            )
        }
        D::IvNeg => Value::Interval(neg_interval(&iv_value(&v[0])?)?),
    })
}

fn expr_int(v: &Value) -> Result<i64, PgError> {
    int_arg(v)
}

fn date_to_ts(d: i32) -> Result<i64, PgError> {
    match d {
        i32::MIN => Ok(i64::MIN),
        i32::MAX => Ok(i64::MAX),
        d => {
            let t = d as i64 * USECS_PER_DAY;
            if (MIN_TIMESTAMP..END_TIMESTAMP).contains(&t) {
                Ok(t)
            } else {
                Err(PgError::new(
                    SqlState::DATETIME_FIELD_OVERFLOW,
                    "date out of range for timestamp",
                ))
            }
        }
    }
}

fn ts_to_date(t: i64) -> i32 {
    match t {
        i64::MIN => i32::MIN,
        i64::MAX => i32::MAX,
        t => t.div_euclid(USECS_PER_DAY) as i32,
    }
}

/// Offset of the session zone at a UTC instant, in seconds east of Greenwich.
fn utc_offset_secs(utc: i64, tctx: &TextContext) -> Result<i64, PgError> {
    Ok(tctx.time_zone.offset_at_utc(utc) as i64)
}

/// UTC instant -> local wall-clock timestamp in the session (or given) zone.
pub(crate) fn utc_to_local(utc: i64, tctx: &TextContext) -> Result<i64, PgError> {
    if !ts_finite(utc) {
        return Ok(utc);
    }
    let off = utc_offset_secs(utc, tctx)?;
    valid_ts(utc + off * USECS_PER_SEC)
}

/// Local wall-clock timestamp -> UTC instant (DST gaps and overlaps resolved as PostgreSQL).
pub(crate) fn local_to_utc(local: i64, tctx: &TextContext) -> Result<i64, PgError> {
    if !ts_finite(local) {
        return Ok(local);
    }
    valid_ts(tctx.time_zone.local_to_utc(local))
}

/// Casts between date/time types (and to/from interval).
pub(crate) fn datetime_cast(
    v: Value,
    from: Type,
    to: Type,
    tctx: &TextContext,
) -> Result<Value, PgError> {
    use Scalar::*;
    Ok(match (from.scalar, to.scalar, &v) {
        (Date, Timestamp, Value::Date(d)) => Value::Timestamp(date_to_ts(*d)?),
        (Date, Timestamptz, Value::Date(d)) => {
            let local = date_to_ts(*d)?;
            Value::Timestamptz(local_to_utc(local, tctx)?)
        }
        (Timestamp, Date, Value::Timestamp(t)) => Value::Date(ts_to_date(*t)),
        (Timestamp, Time, Value::Timestamp(t)) => {
            if !ts_finite(*t) {
                return Ok(Value::Null);
            }
            Value::Time(t.rem_euclid(USECS_PER_DAY))
        }
        (Timestamp, Timestamptz, Value::Timestamp(t)) => {
            Value::Timestamptz(local_to_utc(*t, tctx)?)
        }
        (Timestamptz, Timestamp, Value::Timestamptz(t)) => {
            Value::Timestamp(utc_to_local(*t, tctx)?)
        }
        (Timestamptz, Date, Value::Timestamptz(t)) => {
            Value::Date(ts_to_date(utc_to_local(*t, tctx)?))
        }
        (Timestamptz, Time, Value::Timestamptz(t)) => {
            if !ts_finite(*t) {
                return Ok(Value::Null);
            }
            Value::Time(utc_to_local(*t, tctx)?.rem_euclid(USECS_PER_DAY))
        }
        (Time, Interval, Value::Time(t)) => Value::Interval(protocol::types::Interval {
            months: 0,
            days: 0,
            micros: *t,
        }),
        (Interval, Time, Value::Interval(iv)) => Value::Time(iv.micros.rem_euclid(USECS_PER_DAY)),
        _ => {
            // No direct rule: through the text form (the planner allowed it).
            let mut buf = Vec::new();
            protocol::types::text::encode(&v, from, tctx, &mut buf);
            return text_in(to, &String::from_utf8_lossy(&buf), tctx);
        }
    })
}

/// `extract(field from x)`: numeric, as PostgreSQL 14+.
fn extract(field: &str, v: &Value, ty: Type, tctx: &TextContext) -> Result<Value, PgError> {
    let unsupported = || {
        PgError::new(
            SqlState::FEATURE_NOT_SUPPORTED,
            format!(
                "unit \"{field}\" not supported for type {}",
                super::type_display_name(ty)
            ),
        )
    };
    let int = |x: i64| Ok(Value::Numeric(Numeric::from_i64(x)));
    let scaled = |micros: i64, scale: u32| -> Result<Value, PgError> {
        // micros / 10^(6 - scale) printed with `scale` decimals.
        let neg = micros < 0;
        let m = micros.unsigned_abs();
        let s = format!(
            "{}{}.{:06}",
            if neg { "-" } else { "" },
            m / 1_000_000,
            m % 1_000_000
        );
        let n = Numeric::parse(&s)?;
        Ok(Value::Numeric(n.round(scale as i32)))
    };
    let field = field.to_lowercase();
    match v {
        Value::Date(d) => {
            if !date_finite(*d) {
                return Ok(Value::Numeric(if *d > 0 {
                    Numeric::infinity()
                } else {
                    Numeric::neg_infinity()
                }));
            }
            if field == "epoch" {
                return int(*d as i64 * 86_400);
            }
            let (y, m, day) = j2date(*d as i64 + POSTGRES_EPOCH_JDATE);
            match field.as_str() {
                "hour" | "minute" | "second" | "milliseconds" | "microseconds" | "millisecond"
                | "microsecond" => Err(unsupported()),
                _ => calendar_field(&field, y, m, day, *d as i64)
                    .map_or_else(|| Err(unsupported()), int),
            }
        }
        Value::Timestamp(_) | Value::Timestamptz(_) => {
            let t = ts_value(v)?;
            if !ts_finite(t) {
                return Ok(Value::Numeric(if t > 0 {
                    Numeric::infinity()
                } else {
                    Numeric::neg_infinity()
                }));
            }
            if field == "epoch" {
                // Seconds since 1970-01-01 UTC (for timestamp: as if the wall clock were UTC).
                const EPOCH_DIFF_US: i64 = 946_684_800_000_000;
                return scaled(t + EPOCH_DIFF_US, 6);
            }
            let local = if matches!(v, Value::Timestamptz(_)) {
                utc_to_local(t, tctx)?
            } else {
                t
            };
            let days = local.div_euclid(USECS_PER_DAY);
            let time = local.rem_euclid(USECS_PER_DAY);
            let (y, m, d) = j2date(days + POSTGRES_EPOCH_JDATE);
            match field.as_str() {
                "hour" => int(time / 3_600_000_000),
                "minute" => int(time / 60_000_000 % 60),
                "second" => scaled(time % 60_000_000, 6),
                "milliseconds" | "millisecond" => {
                    let us = time % 60_000_000;
                    let s = format!("{}.{:03}", us / 1000, us % 1000);
                    Ok(Value::Numeric(Numeric::parse(&s)?))
                }
                "microseconds" | "microsecond" => int(time % 60_000_000),
                "timezone" if matches!(v, Value::Timestamptz(_)) => int(utc_offset_secs(t, tctx)?),
                _ => calendar_field(&field, y, m, d, days).map_or_else(|| Err(unsupported()), int),
            }
        }
        Value::Time(t) => match field.as_str() {
            "hour" => int(t / 3_600_000_000),
            "minute" => int(t / 60_000_000 % 60),
            "second" => scaled(t % 60_000_000, 6),
            "microseconds" | "microsecond" => int(t % 60_000_000),
            "epoch" => scaled(*t, 6),
            _ => Err(unsupported()),
        },
        Value::Interval(iv) => match field.as_str() {
            "year" | "years" => int(iv.months as i64 / 12),
            "month" | "months" => int(iv.months as i64 % 12),
            "day" | "days" => int(iv.days as i64),
            "hour" | "hours" => int(iv.micros / 3_600_000_000),
            "minute" | "minutes" => int(iv.micros / 60_000_000 % 60),
            "second" | "seconds" => scaled(iv.micros % 60_000_000, 6),
            "epoch" => {
                let secs_months =
                    iv.months as i64 / 12 * 31_557_600 + iv.months as i64 % 12 * 2_592_000;
                let total = (secs_months + iv.days as i64 * 86_400) * 1_000_000 + iv.micros;
                scaled(total, 6)
            }
            _ => Err(unsupported()),
        },
        _ => Err(unsupported()),
    }
}

fn calendar_field(field: &str, y: i64, m: i64, d: i64, days_since_2000: i64) -> Option<i64> {
    // ISO day of week: 2000-01-01 was a Saturday.
    let dow = (days_since_2000 + 6).rem_euclid(7);
    let year_for = |y: i64| if y > 0 { y } else { y - 1 };
    Some(match field {
        "year" => year_for(y),
        "month" => m,
        "day" => d,
        "quarter" => (m - 1) / 3 + 1,
        "dow" => dow,
        "isodow" => {
            if dow == 0 {
                7
            } else {
                dow
            }
        }
        "doy" => date2j(y, m, d) - date2j(y, 1, 1) + 1,
        "decade" => {
            let yy = year_for(y);
            if yy >= 0 {
                yy / 10
            } else {
                -((8 - (yy + 1)) / 10)
            }
        }
        "century" => {
            let yy = year_for(y);
            if yy > 0 {
                (yy + 99) / 100
            } else {
                -((99 - (yy - 1)) / 100)
            }
        }
        "millennium" => {
            let yy = year_for(y);
            if yy > 0 {
                (yy + 999) / 1000
            } else {
                -((999 - (yy - 1)) / 1000)
            }
        }
        "julian" => date2j(y, m, d),
        "week" => iso_week(y, m, d),
        _ => return None,
    })
}

fn iso_week(y: i64, m: i64, d: i64) -> i64 {
    let day_index = |y: i64, m: i64, d: i64| date2j(y, m, d);
    // Monday of ISO week 1 of year `y`: the week containing Jan 4.
    let week1_monday = |y: i64| {
        let jan4 = day_index(y, 1, 4);
        jan4 - (jan4 + 1).rem_euclid(7) + 1 - 1
    };
    let j = day_index(y, m, d);
    let mut start = week1_monday(y);
    if j < start {
        start = week1_monday(y - 1);
    } else if j >= week1_monday(y + 1) {
        start = week1_monday(y + 1);
    }
    (j - start) / 7 + 1
}

fn clock_us() -> i64 {
    const UNIX_TO_PG_EPOCH_US: i64 = 946_684_800_000_000;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    now - UNIX_TO_PG_EPOCH_US
}

// ---------------------------------------------------------------------------------------------
// LIKE
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum LikeToken<T> {
    AnySeq,
    AnyOne,
    Lit(T),
}

fn like_tokens<T: Copy + PartialEq>(
    pattern: &[T],
    backslash: T,
    percent: T,
    underscore: T,
) -> Vec<LikeToken<T>> {
    let mut out = Vec::with_capacity(pattern.len());
    let mut i = 0;
    while i < pattern.len() {
        let c = pattern[i];
        if c == backslash {
            // A trailing escape matches nothing (PostgreSQL returns false rather than erroring).
            match pattern.get(i + 1) {
                Some(n) => out.push(LikeToken::Lit(*n)),
                None => out.push(LikeToken::Lit(backslash)),
            }
            i += 2;
            continue;
        }
        out.push(if c == percent {
            LikeToken::AnySeq
        } else if c == underscore {
            LikeToken::AnyOne
        } else {
            LikeToken::Lit(c)
        });
        i += 1;
    }
    out
}

/// Wildcard matching with single-star backtracking: O(len(text) * len(pattern)) worst case.
fn like_match<T: Copy + PartialEq>(text: &[T], pat: &[LikeToken<T>]) -> bool {
    let (mut t, mut p) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pat.get(p) {
            Some(LikeToken::AnySeq) => {
                star = Some((p, t));
                p += 1;
            }
            Some(LikeToken::AnyOne) => {
                t += 1;
                p += 1;
            }
            Some(LikeToken::Lit(c)) if *c == text[t] => {
                t += 1;
                p += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pat[p..].iter().all(|tok| *tok == LikeToken::AnySeq)
}

pub(crate) fn like(text: &str, pattern: &str, case_insensitive: bool) -> bool {
    let (text, pattern) = if case_insensitive {
        (text.to_lowercase(), pattern.to_lowercase())
    } else {
        (text.to_string(), pattern.to_string())
    };
    let t: Vec<char> = text.chars().collect();
    let p: Vec<char> = pattern.chars().collect();
    like_match(&t, &like_tokens(&p, '\\', '%', '_'))
}

pub(crate) fn like_bytes(text: &[u8], pattern: &[u8]) -> bool {
    like_match(text, &like_tokens(pattern, b'\\', b'%', b'_'))
}

/// `like_escape(pattern, escape)`: rewrites a pattern with a custom escape character into one
/// using backslash.
fn like_escape(pattern: &str, escape: &str) -> Result<String, PgError> {
    let mut esc_chars = escape.chars();
    let esc = esc_chars.next();
    if esc_chars.next().is_some() {
        return Err(
            PgError::new(SqlState::INVALID_ESCAPE_SEQUENCE, "invalid escape string")
                .with_hint("Escape string must be empty or one character."),
        );
    }
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match esc {
            Some(e) if c == e => {
                out.push('\\');
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            }
            _ if c == '\\' => out.push_str("\\\\"),
            _ => out.push(c),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// MD5 and randomness
// ---------------------------------------------------------------------------------------------

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// RFC 1321 MD5.
fn md5(input: &[u8]) -> [u8; 16] {
    const S: [u32; 64] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5,
        9, 14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10,
        15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ];
    let k: [u32; 64] =
        std::array::from_fn(|i| ((i as f64 + 1.0).sin().abs() * 4_294_967_296.0) as u32);
    let (mut a0, mut b0, mut c0, mut d0) = (
        0x6745_2301u32,
        0xefcd_ab89u32,
        0x98ba_dcfeu32,
        0x1032_5476u32,
    );
    let mut msg = input.to_vec();
    let bit_len = (input.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_le_bytes());
    for chunk in msg.chunks_exact(64) {
        let m: [u32; 16] = std::array::from_fn(|i| {
            u32::from_le_bytes([
                chunk[4 * i],
                chunk[4 * i + 1],
                chunk[4 * i + 2],
                chunk[4 * i + 3],
            ])
        });
        let (mut a, mut b, mut c, mut d) = (a0, b0, c0, d0);
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let f = f.wrapping_add(a).wrapping_add(k[i]).wrapping_add(m[g]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(f.rotate_left(S[i]));
        }
        a0 = a0.wrapping_add(a);
        b0 = b0.wrapping_add(b);
        c0 = c0.wrapping_add(c);
        d0 = d0.wrapping_add(d);
    }
    let mut out = [0u8; 16];
    for (i, w) in [a0, b0, c0, d0].iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    let mut filled = 0;
    while filled < N {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`.
        let r = unsafe {
            libc::getrandom(
                buf[filled..].as_mut_ptr().cast::<libc::c_void>(),
                N - filled,
                0,
            )
        };
        if r <= 0 {
            // getrandom(2) only fails before the pool is seeded or on EINTR; fall back to the
            // per-thread generator rather than failing a query.
            for b in &mut buf[filled..] {
                *b = next_random() as u8;
            }
            break;
        }
        filled += r as usize;
    }
    buf
}

thread_local! {
    /// xorshift64* state for `random()`; seeded from the kernel on first use per thread.
    static RANDOM_STATE: Cell<u64> = const { Cell::new(0) };
}

fn next_random() -> u64 {
    RANDOM_STATE.with(|s| {
        let mut x = s.get();
        if x == 0 {
            let mut seed = [0u8; 8];
            // SAFETY: `seed` is a valid 8-byte buffer.
            let r = unsafe { libc::getrandom(seed.as_mut_ptr().cast::<libc::c_void>(), 8, 0) };
            x = if r == 8 {
                u64::from_le_bytes(seed)
            } else {
                clock_us() as u64
            };
            x |= 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    })
}

/// Uniform in [0, 1) with 53 random bits.
fn random_f64() -> f64 {
    (next_random() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_function_has_signatures() {
        for name in FUNCTION_NAMES {
            assert!(!signatures(name).is_empty(), "{name} has no signatures");
        }
        assert!(signatures("no_such_function").is_empty());
    }

    #[test]
    fn md5_matches_rfc_1321_vectors() {
        assert_eq!(hex(&md5(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(hex(&md5(b"a")), "0cc175b9c0f1b6a831c399e269772661");
        let long =
            b"12345678901234567890123456789012345678901234567890123456789012345678901234567890";
        assert_eq!(hex(&md5(long)), "57edf4a22be3c955ac49da2e2107b67a");
    }

    #[test]
    fn like_matches_postgresql_semantics() {
        assert!(like("abc", "a%", false));
        assert!(like("abc", "%c", false));
        assert!(like("a%c", "a\\%c", false));
        assert!(!like("abc", "a\\%c", false));
        assert!(like("ÀB", "àb", true));
        assert!(!like("aa", "%a%a%a%", false));
        assert!(like_bytes(b"ab", b"a_"));
        assert_eq!(like_escape("a#%b\\", "#").expect("valid"), "a\\%b\\\\");
        assert_eq!(like_escape("a\\b", "").expect("valid"), "a\\\\b");
        assert!(like_escape("a", "xy").is_err());
    }

    #[test]
    fn calendar_helpers_round_trip() {
        for (y, m, d) in [
            (2000, 1, 1),
            (2024, 2, 29),
            (1900, 3, 1),
            (-4713, 11, 24),
            (294276, 12, 31),
        ] {
            assert_eq!(j2date(date2j(y, m, d)), (y, m, d));
        }
        assert_eq!(date2j(2000, 1, 1), POSTGRES_EPOCH_JDATE);
        let iv = Interval {
            months: 1,
            days: 0,
            micros: 0,
        };
        // 2024-01-31 + 1 month = 2024-02-29 (clamped to the month's end)
        let jan31 = (date2j(2024, 1, 31) - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY;
        let feb29 = (date2j(2024, 2, 29) - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY;
        assert_eq!(ts_plus_interval(jan31, &iv).expect("in range"), feb29);
        assert!(ts_plus_interval(
            END_TIMESTAMP - 1,
            &Interval {
                months: 0,
                days: 1,
                micros: 0
            }
        )
        .is_err());
    }

    #[test]
    fn numeric_transcendentals_are_correctly_rounded() {
        let n = |s: &str| Numeric::parse(s).expect("numeric");
        let text = |v: Numeric| {
            let mut out = Vec::new();
            v.write_text(&mut out);
            String::from_utf8(out).expect("utf8")
        };
        assert_eq!(
            text(numeric_sqrt(&n("2")).expect("sqrt")),
            "1.414213562373095"
        );
        assert_eq!(
            text(numeric_power(&n("2"), &n("0.5")).expect("pow")),
            "1.4142135623730950"
        );
        assert_eq!(
            text(numeric_power(&n("2"), &n("-2")).expect("pow")),
            "0.2500000000000000"
        );
        assert!(numeric_power(&n("0"), &n("-1")).is_err());
        assert!(numeric_sqrt(&n("-1")).is_err());
    }
}
