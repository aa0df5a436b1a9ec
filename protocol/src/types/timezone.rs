//! The session time zone (`SET TimeZone`), as PostgreSQL 15 interprets it.
//!
//! `TimeZone::parse` follows `check_timezone`: a plain number is hours east of Greenwich (SQL
//! sign, `'-08'` is UTC-8, shown as `<-08>+08`); otherwise a zone name from the IANA database
//! (case-insensitive, shown in its canonical spelling); otherwise a POSIX zone spec without DST
//! rules, whose offset has the POSIX sign (`'UTC+3'` and `'+05:30'` are *west* of Greenwich).
//!
//! Zone rules come from `chrono-tz`, whose tables stop at 2037; PostgreSQL keeps applying the
//! zone's daylight-saving rule after that, so for later instants we borrow the rule of a year
//! between 2010 and 2037 with the same calendar (leap year, weekday of January 1).

use crate::error::{PgError, SqlState};
use chrono::{Datelike, NaiveDateTime, Offset, TimeZone as _};
use chrono_tz::Tz;

/// Seconds from 1970-01-01 (Unix epoch) to 2000-01-01 (PostgreSQL epoch).
const PG_EPOCH_UNIX_SECS: i64 = 946_684_800;
const SECS_PER_DAY: i64 = 86_400;
/// Range in which chrono represents instants; outside it the nearest edge's offset is used.
const CHRONO_SAFE_SECS: i64 = 8_000_000_000_000;
/// First instant the chrono-tz tables no longer describe: 2038-01-01 00:00:00 UTC.
const TABLE_END_UNIX_SECS: i64 = 2_145_916_800;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TimeZone {
    /// `UTC` (what `SET TimeZone = 'UTC'` selects).
    #[default]
    Utc,
    /// A zone set as a number of hours (`SET TimeZone = '-08'` or `5.5`): seconds east of
    /// Greenwich. `name()` prints PostgreSQL's POSIX form, `<-08>+08`.
    Fixed(i32),
    /// A POSIX zone spec without daylight-saving rules (`'UTC+3'`, `'<+07>-07'`, `'+05:30'`):
    /// `offset` is seconds east of Greenwich (the spec's sign inverted); `name` is the spec in
    /// upper case, which is what `SHOW TimeZone` prints.
    Posix { offset: i32, name: Box<str> },
    /// A zone from the IANA database.
    Named(Tz),
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

impl TimeZone {
    /// Interprets a `SET TimeZone` value, failing where PostgreSQL reports
    /// `invalid value for parameter "TimeZone": "..."` (SQLSTATE 22023).
    pub fn parse(name: &str) -> Result<TimeZone, PgError> {
        TimeZone::parse_opt(name).ok_or_else(|| {
            PgError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("invalid value for parameter \"TimeZone\": \"{name}\""),
            )
        })
    }

    fn parse_opt(name: &str) -> Option<TimeZone> {
        if let Some(hours) = parse_c_double(name) {
            if !hours.is_finite() || hours.abs() >= 168.0 {
                return None;
            }
            // PostgreSQL truncates to whole seconds.
            return Some(TimeZone::Fixed((hours * 3600.0) as i32));
        }
        if let Some(tz) = TimeZone::lookup_named(name) {
            return Some(tz);
        }
        let offset_west = parse_posix_fixed(name.as_bytes())?;
        Some(TimeZone::Posix {
            offset: -offset_west,
            name: name.to_ascii_uppercase().into(),
        })
    }

    /// A zone from the IANA database by name, case-insensitively (`Europe/Berlin`, `utc`).
    pub fn lookup_named(name: &str) -> Option<TimeZone> {
        if name.is_empty() || name.len() > 255 {
            return None;
        }
        let tz = name.parse::<Tz>().ok().or_else(|| {
            chrono_tz::TZ_VARIANTS
                .iter()
                .copied()
                .find(|t| t.name().eq_ignore_ascii_case(name))
        })?;
        if tz.name() == "UTC" {
            return Some(TimeZone::Utc);
        }
        Some(TimeZone::Named(tz))
    }

    /// What `SHOW TimeZone` prints.
    pub fn name(&self) -> String {
        match self {
            TimeZone::Utc => "UTC".to_string(),
            TimeZone::Fixed(east) => {
                let abs = east.unsigned_abs();
                let mut s = format!("{:02}", abs / 3600);
                if abs % 3600 != 0 {
                    s.push_str(&format!(":{:02}", abs % 3600 / 60));
                    if abs % 60 != 0 {
                        s.push_str(&format!(":{:02}", abs % 60));
                    }
                }
                if *east < 0 {
                    format!("<-{s}>+{s}")
                } else {
                    format!("<+{s}>-{s}")
                }
            }
            TimeZone::Posix { name, .. } => name.to_string(),
            TimeZone::Named(tz) => tz.name().to_string(),
        }
    }

    /// Offset from UTC, in seconds east, in effect at `utc` (microseconds since 2000-01-01 UTC).
    pub fn offset_at_utc(&self, utc: i64) -> i32 {
        match self {
            TimeZone::Utc => 0,
            TimeZone::Fixed(east) => *east,
            TimeZone::Posix { offset, .. } => *offset,
            TimeZone::Named(tz) => {
                let unix = utc.div_euclid(1_000_000) + PG_EPOCH_UNIX_SECS;
                let (unix, _) = map_into_table(*tz, unix);
                offset_of_utc(*tz, unix)
            }
        }
    }

    /// Offset, in seconds east, for a wall-clock time in this zone (microseconds since
    /// 2000-01-01 local). Times skipped by a spring-forward transition take the offset from
    /// before it, repeated times the offset from after it, as PostgreSQL does.
    pub fn offset_for_local(&self, local: i64) -> i32 {
        match self {
            TimeZone::Named(tz) => {
                let unix = local.div_euclid(1_000_000) + PG_EPOCH_UNIX_SECS;
                let (unix, _) = map_into_table(*tz, unix);
                let unix = unix.clamp(-CHRONO_SAFE_SECS, CHRONO_SAFE_SECS);
                let Some(naive) = naive_from_unix(unix) else {
                    return 0;
                };
                match tz.offset_from_local_datetime(&naive) {
                    chrono::LocalResult::Single(o) => o.fix().local_minus_utc(),
                    chrono::LocalResult::Ambiguous(_, later) => later.fix().local_minus_utc(),
                    chrono::LocalResult::None => offset_of_utc(*tz, unix - SECS_PER_DAY),
                }
            }
            other => other.offset_at_utc(local),
        }
    }

    /// Converts a wall-clock time in this zone to UTC (both microseconds since 2000-01-01).
    pub fn local_to_utc(&self, local: i64) -> i64 {
        local.saturating_sub(self.offset_for_local(local) as i64 * 1_000_000)
    }
}

fn naive_from_unix(unix: i64) -> Option<NaiveDateTime> {
    chrono::DateTime::from_timestamp(unix, 0).map(|d| d.naive_utc())
}

fn offset_of_utc(tz: Tz, unix: i64) -> i32 {
    let unix = unix.clamp(-CHRONO_SAFE_SECS, CHRONO_SAFE_SECS);
    match naive_from_unix(unix) {
        Some(naive) => tz.offset_from_utc_datetime(&naive).fix().local_minus_utc(),
        None => 0,
    }
}

/// Moves an instant past the end of chrono-tz's tables to the same moment of a same-calendar
/// year inside them, when the zone still observes daylight saving at the tables' end.
fn map_into_table(tz: Tz, unix: i64) -> (i64, bool) {
    if unix < TABLE_END_UNIX_SECS {
        return (unix, false);
    }
    // Does the zone change offsets in 2037? (January vs July, both hemispheres covered.)
    let jan = offset_of_utc(tz, 2_115_590_400); // 2037-01-15
    let jul = offset_of_utc(tz, 2_131_228_800); // 2037-07-15
    if jan == jul {
        return (unix, false);
    }
    let unix = unix.min(CHRONO_SAFE_SECS);
    let Some(naive) = naive_from_unix(unix) else {
        return (unix, false);
    };
    let year = naive.year();
    let leap = |y: i32| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let jan1 = |y: i32| chrono::NaiveDate::from_ymd_opt(y, 1, 1).expect("January 1 exists");
    let weekday = jan1(year).weekday();
    for candidate in (2010..=2037).rev() {
        if leap(candidate) == leap(year) && jan1(candidate).weekday() == weekday {
            let shift_days = (jan1(year) - jan1(candidate)).num_days();
            return (unix - shift_days * SECS_PER_DAY, true);
        }
    }
    (unix, false)
}

/// C's `strtod` over the whole string (leading whitespace allowed, nothing after the number).
fn parse_c_double(s: &str) -> Option<f64> {
    let t = s.trim_start_matches(|c: char| c.is_ascii() && is_space(c as u8));
    if t.is_empty()
        || t.bytes()
            .any(|b| !(b.is_ascii_digit() || b"+-.eE".contains(&b)))
    {
        return None;
    }
    t.parse::<f64>().ok()
}

/// `[name]offset` with name alphabetic or `<...>`, offset `[+-]hh[:mm[:ss]]`, POSIX sign
/// (positive = west). Returns seconds west. DST parts are not supported.
fn parse_posix_fixed(s: &[u8]) -> Option<i32> {
    let mut i = 0;
    if s.first() == Some(&b'<') {
        let close = s.iter().position(|&b| b == b'>')?;
        if close < 2 {
            return None;
        }
        i = close + 1;
    } else {
        while i < s.len() && s[i].is_ascii_alphabetic() {
            i += 1;
        }
    }
    let mut sign = 1;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        if s[i] == b'-' {
            sign = -1;
        }
        i += 1;
    }
    let mut parts = [0i32; 3];
    let mut nparts = 0;
    loop {
        let start = i;
        let mut v = 0i32;
        while i < s.len() && s[i].is_ascii_digit() && i - start < 3 {
            v = v * 10 + (s[i] - b'0') as i32;
            i += 1;
        }
        if i == start {
            return None;
        }
        parts[nparts] = v;
        nparts += 1;
        if nparts < 3 && i < s.len() && s[i] == b':' {
            i += 1;
            continue;
        }
        break;
    }
    if i != s.len() || parts[0] > 167 || parts[1] > 59 || parts[2] > 59 {
        return None;
    }
    Some(sign * (parts[0] * 3600 + parts[1] * 60 + parts[2]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2024-06-01 12:00:00 UTC in PostgreSQL microseconds.
    const JUNE_2024: i64 = 770_558_400_000_000;

    #[test]
    fn parse_like_postgres() {
        // (SET value, SHOW TimeZone, offset of 2024-06-01 12:00 UTC) from PostgreSQL 15.
        let cases = [
            ("UTC", "UTC", 0),
            ("utc", "UTC", 0),
            ("Europe/Berlin", "Europe/Berlin", 7200),
            ("europe/berlin", "Europe/Berlin", 7200),
            ("+05:30", "+05:30", -19800),
            ("-08", "<-08>+08", -28800),
            ("  -08", "<-08>+08", -28800),
            ("5.5", "<+05:30>-05:30", 19800),
            ("+3", "<+03>-03", 10800),
            ("1e1", "<+10>-10", 36000),
            ("UTC+3", "UTC+3", -10800),
            ("utc+3", "UTC+3", -10800),
            ("FOO+3", "FOO+3", -10800),
            ("3:00", "3:00", -10800),
            ("<+07>-07", "<+07>-07", 25200),
            ("-08:00", "-08:00", 28800),
            ("EST5EDT", "EST5EDT", -14400),
            ("GMT", "GMT", 0),
            ("Etc/GMT+3", "Etc/GMT+3", -10800),
            ("Asia/Kolkata", "Asia/Kolkata", 19800),
        ];
        for (input, shown, offset) in cases {
            let tz = TimeZone::parse(input).unwrap_or_else(|e| panic!("{input:?} rejected: {e}"));
            assert_eq!(tz.name(), shown, "{input:?}");
            assert_eq!(tz.offset_at_utc(JUNE_2024), offset, "{input:?}");
        }
        for bad in ["ABC", "Z", "PST", "", "Foo/Bar", "1:2:3:4"] {
            let e = TimeZone::parse(bad).unwrap_err();
            assert_eq!(
                e.message,
                format!("invalid value for parameter \"TimeZone\": \"{bad}\"")
            );
        }
    }

    #[test]
    fn transitions_follow_postgres() {
        let berlin = TimeZone::parse("Europe/Berlin").unwrap();
        // 1800: local mean time +00:53:28.
        assert_eq!(berlin.offset_at_utc(-6_311_347_200_000_000), 3208);
        // 2060-07-01: PostgreSQL still applies summer time.
        assert_eq!(berlin.offset_at_utc(1_909_180_800_000_000), 7200);
        assert_eq!(berlin.offset_at_utc(1_893_456_000_000_000), 3600); // 2060-01-01
                                                                       // 2024-03-31 02:30 does not exist: the pre-transition offset (+01) applies.
        let gap = 765_167_400_000_000; // 2024-03-31 02:30:00 as local microseconds
        assert_eq!(berlin.offset_for_local(gap), 3600);
        // 2024-10-27 02:30 happens twice: the later one (+01) is chosen.
        let overlap = 783_311_400_000_000; // 2024-10-27 02:30:00
        assert_eq!(berlin.offset_for_local(overlap), 3600);
        assert_eq!(berlin.offset_for_local(JUNE_2024), 7200);
    }
}
