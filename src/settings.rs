//! Session settings (PostgreSQL's GUCs): the catalog of names ringwire knows, their defaults
//! and validation, `SET`/`SHOW`/`RESET` with transaction semantics (a `SET` inside a
//! transaction that rolls back is undone; `SET LOCAL` lasts until the transaction ends), and the
//! ParameterStatus reports drivers rely on.

use std::collections::BTreeMap;

use protocol::types::{TextContext, TimeZone};
use protocol::{PgError, SqlState};

/// What PostgreSQL version ringwire presents itself as. Drivers gate features on it; 16.0
/// is what ringwire's protocol behaviour matches (PostgreSQL 15/16 clients and servers).
pub const SERVER_VERSION: &str = "16.0";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Cannot be changed by a session (55P02).
    ReadOnly,
    Text,
    Bool,
    Int {
        min: i64,
        max: i64,
    },
    /// Milliseconds, accepting PostgreSQL's units (`5s`, `100ms`, `1min`).
    DurationMs,
    Enum(&'static [&'static str]),
    TimeZone,
    ClientEncoding,
    DateStyle,
    IntervalStyle,
    Isolation,
}

struct Def {
    name: &'static str,
    default: &'static str,
    /// GUC_REPORT: sent as ParameterStatus at startup and whenever it changes.
    report: bool,
    kind: Kind,
    description: &'static str,
}

/// The isolation levels a client may ask for, and the one ringwire runs for each (what SHOW
/// then prints). ringwire implements no level weaker than serializable; the SQL standard lets
/// an implementation run a stronger level than asked, and SHOW tells the truth about it
/// (docs/ARCHITECTURE.md, "Isolation").
const ISOLATION_LEVELS: &[(&str, &str)] = &[
    ("strict serializable", "strict serializable"),
    ("serializable", "serializable"),
    ("repeatable read", "serializable"),
    ("read committed", "serializable"),
    ("read uncommitted", "serializable"),
];

/// How a session's reads get their timestamp.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Isolation {
    /// The default: a read sees every write acknowledged before it started, on any shard (it
    /// reads at its shard's frontier, see the oracle crate).
    #[default]
    StrictSerializable,
    /// Reads at the compute's latest complete timestamp, without asking the oracle.
    Serializable,
}

/// `transaction_isolation`'s session value when it follows `default_transaction_isolation`
/// (never SET, or RESET).
const FOLLOW_DEFAULT: &str = "";

/// The catalog, sorted by name as `SHOW ALL` lists it.
const DEFS: &[Def] = &[
    Def {
        name: "application_name",
        default: "",
        report: true,
        kind: Kind::Text,
        description: "Sets the application name to be reported in statistics and logs.",
    },
    Def {
        name: "bytea_output",
        default: "hex",
        report: false,
        kind: Kind::Enum(&["hex"]),
        description: "Sets the output format for bytea.",
    },
    Def {
        name: "client_encoding",
        default: "UTF8",
        report: true,
        kind: Kind::ClientEncoding,
        description: "Sets the client's character set encoding.",
    },
    Def {
        name: "client_min_messages",
        default: "notice",
        report: false,
        kind: Kind::Enum(&[
            "debug5", "debug4", "debug3", "debug2", "debug1", "log", "notice", "warning", "error",
        ]),
        description: "Sets the message levels that are sent to the client.",
    },
    Def {
        name: "DateStyle",
        default: "ISO, MDY",
        report: true,
        kind: Kind::DateStyle,
        description: "Sets the display format for date and time values.",
    },
    Def {
        name: "default_transaction_isolation",
        default: "strict serializable",
        report: false,
        kind: Kind::Isolation,
        description: "Sets the transaction isolation level of each new transaction.",
    },
    Def {
        name: "default_transaction_read_only",
        default: "off",
        report: true,
        kind: Kind::Bool,
        description: "Sets the default read-only status of new transactions.",
    },
    Def {
        name: "extra_float_digits",
        default: "1",
        report: false,
        kind: Kind::Int { min: -15, max: 3 },
        description: "Sets the number of digits displayed for floating-point values.",
    },
    Def {
        name: "idle_in_transaction_session_timeout",
        default: "0",
        report: false,
        kind: Kind::DurationMs,
        description: "Sets the maximum allowed idle time between queries, when in a transaction.",
    },
    Def {
        name: "in_hot_standby",
        default: "off",
        report: true,
        kind: Kind::ReadOnly,
        description: "Shows whether hot standby is currently active.",
    },
    Def {
        name: "integer_datetimes",
        default: "on",
        report: true,
        kind: Kind::ReadOnly,
        description: "Shows whether datetimes are integer based.",
    },
    Def {
        name: "IntervalStyle",
        default: "postgres",
        report: true,
        kind: Kind::IntervalStyle,
        description: "Sets the display format for interval values.",
    },
    Def {
        name: "is_superuser",
        default: "on",
        report: true,
        kind: Kind::ReadOnly,
        description: "Shows whether the current user is a superuser.",
    },
    Def {
        name: "lock_timeout",
        default: "0",
        report: false,
        kind: Kind::DurationMs,
        description: "Sets the maximum allowed duration of any wait for a lock.",
    },
    Def {
        name: "max_identifier_length",
        default: "63",
        report: false,
        kind: Kind::ReadOnly,
        description: "Shows the maximum identifier length.",
    },
    Def {
        name: "search_path",
        default: "\"$user\", public",
        report: false,
        kind: Kind::Text,
        description: "Sets the schema search order for names that are not schema-qualified.",
    },
    Def {
        name: "server_encoding",
        default: "UTF8",
        report: true,
        kind: Kind::ReadOnly,
        description: "Shows the server (database) character set encoding.",
    },
    Def {
        name: "server_version",
        default: SERVER_VERSION,
        report: true,
        kind: Kind::ReadOnly,
        description: "Shows the server version.",
    },
    Def {
        name: "server_version_num",
        default: "160000",
        report: false,
        kind: Kind::ReadOnly,
        description: "Shows the server version as an integer.",
    },
    Def {
        name: "session_authorization",
        default: "",
        report: true,
        kind: Kind::ReadOnly,
        description: "Sets the session user name.",
    },
    Def {
        name: "standard_conforming_strings",
        default: "on",
        report: true,
        kind: Kind::Enum(&["on"]),
        description: "Causes '...' strings to treat backslashes literally.",
    },
    Def {
        name: "statement_timeout",
        default: "0",
        report: false,
        kind: Kind::DurationMs,
        description: "Sets the maximum allowed duration of any statement.",
    },
    Def {
        name: "TimeZone",
        default: "UTC",
        report: true,
        kind: Kind::TimeZone,
        description: "Sets the time zone for displaying and interpreting time stamps.",
    },
    Def {
        name: "transaction_isolation",
        default: FOLLOW_DEFAULT,
        report: false,
        kind: Kind::Isolation,
        description: "Sets the current transaction's isolation level.",
    },
    Def {
        name: "transaction_read_only",
        // (Never stored: see `Settings::read_only`.)
        default: "off",
        report: false,
        kind: Kind::Bool,
        description: "Sets the current transaction's read-only status.",
    },
];

fn find(name: &str) -> Option<usize> {
    DEFS.iter().position(|d| d.name.eq_ignore_ascii_case(name))
}

/// Session values and custom settings, as saved at a transaction's first change.
type Snapshot = (Vec<String>, BTreeMap<String, String>);

/// One session's settings.
#[derive(Clone)]
pub struct Settings {
    /// Session values, indexed like `DEFS`.
    values: Vec<String>,
    /// `SET LOCAL` values for the current transaction, shadowing `values`.
    local: BTreeMap<usize, String>,
    /// Custom placeholder settings (`myapp.user_id`), allowed as in PostgreSQL.
    custom: BTreeMap<String, String>,
    text: TextContext,
    /// `transaction_isolation` as the engine reads it per statement (no string compare).
    isolation: Isolation,
    /// `transaction_read_only`: writes fail with 25006. As in PostgreSQL it belongs to the
    /// transaction: each starts with `default_read_only` (a change of the default inside a
    /// transaction counts from the next), and only a block changes it for itself (`BEGIN
    /// READ ONLY`, `SET TRANSACTION`, `SET transaction_read_only`; outside a block a SET of
    /// it lasts no longer than its statement). Not kept in `values`, so RESET ALL and
    /// DISCARD ALL never carry it.
    read_only: bool,
    default_read_only: bool,
    /// `statement_timeout` and `idle_in_transaction_session_timeout` in milliseconds, read by
    /// the connection before every statement (kept current in `after_change`).
    timeouts: shards::limits::Timeouts,
    /// Session values as they were when the current transaction first changed one, restored
    /// on rollback.
    snapshot: Option<Box<Snapshot>>,
}

impl Settings {
    pub fn new(user: &str) -> Settings {
        let values = DEFS
            .iter()
            .map(|d| {
                if d.name == "session_authorization" {
                    user.to_string()
                } else {
                    d.default.to_string()
                }
            })
            .collect();
        Settings {
            values,
            local: BTreeMap::new(),
            custom: BTreeMap::new(),
            text: TextContext::default(),
            isolation: Isolation::default(),
            read_only: false,
            default_read_only: false,
            timeouts: shards::limits::Timeouts::default(),
            snapshot: None,
        }
    }

    /// The session's time limits (see `shards::limits`).
    pub fn timeouts(&self) -> shards::limits::Timeouts {
        self.timeouts
    }

    pub fn text_context(&self) -> &TextContext {
        &self.text
    }

    /// The isolation the current statement runs at (`SHOW transaction_isolation`).
    pub fn isolation(&self) -> Isolation {
        self.isolation
    }

    /// Whether the current statement runs in a read-only transaction (`BEGIN READ ONLY`,
    /// `SET TRANSACTION READ ONLY`, `default_transaction_read_only`).
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// `current_setting(name)` / `SHOW name`: None when the name is unknown.
    pub fn get(&self, name: &str) -> Option<&str> {
        match find(name) {
            Some(i) => {
                let value = self.local.get(&i).unwrap_or(&self.values[i]);
                if value == FOLLOW_DEFAULT && DEFS[i].name == "transaction_isolation" {
                    return self.get("default_transaction_isolation");
                }
                if DEFS[i].name == "transaction_read_only" {
                    return Some(if self.read_only { "on" } else { "off" });
                }
                Some(value)
            }
            None => self
                .custom
                .get(&name.to_ascii_lowercase())
                .map(String::as_str),
        }
    }

    /// The canonical spelling of a known name (`timezone` → `TimeZone`), for SHOW's column.
    pub fn canonical_name(name: &str) -> Option<&'static str> {
        find(name).map(|i| DEFS[i].name)
    }

    /// `SET [LOCAL] name = value` (value None = DEFAULT). `in_transaction`: whether an explicit
    /// or implicit transaction is open (LOCAL outside one has no effect, with a warning, as in
    /// PostgreSQL). Returns the ParameterStatus reports to send.
    pub fn set(
        &mut self,
        name: &str,
        value: Option<&str>,
        local: bool,
        in_block: bool,
        reports: &mut Vec<(&'static str, String)>,
    ) -> Result<(), PgError> {
        let Some(i) = find(name) else {
            if name.contains('.') {
                self.save_snapshot();
                let v = value.unwrap_or("").to_string();
                self.custom.insert(name.to_ascii_lowercase(), v);
                return Ok(());
            }
            return Err(unrecognized(name));
        };
        let def = &DEFS[i];
        if def.kind == Kind::ReadOnly {
            return Err(PgError::new(
                SqlState::CANT_CHANGE_RUNTIME_PARAM,
                format!("parameter \"{}\" cannot be changed", def.name),
            ));
        }
        if def.name == "transaction_read_only" {
            let on = match value {
                None => self.default_read_only,
                Some(v) => validate(def, v)? == "on",
            };
            if in_block {
                self.read_only = on;
            }
            return Ok(());
        }
        let canonical = match value {
            None => def.default.to_string(),
            Some(v) => validate(def, v)?,
        };
        let before = self.get(def.name).map(str::to_string);
        if local {
            if in_block {
                self.local.insert(i, canonical);
            }
        } else {
            self.save_snapshot();
            self.local.remove(&i);
            self.values[i] = canonical;
        }
        self.after_change(i, before, reports);
        if def.name == "default_transaction_read_only" && !in_block {
            self.read_only = self.default_read_only;
        }
        Ok(())
    }

    /// `RESET ALL`.
    /// `RESET ALL` (and `DISCARD ALL`). `transaction_isolation` is reset too: in ringwire it
    /// is a session setting (see [`Isolation`]), and a pooler's DISCARD ALL must clear it.
    pub fn reset_all(&mut self, reports: &mut Vec<(&'static str, String)>) {
        for def in DEFS {
            if def.kind != Kind::ReadOnly && def.name != "transaction_read_only" {
                let _ = self.set(def.name, None, false, false, reports);
            }
        }
        self.custom.clear();
    }

    fn save_snapshot(&mut self) {
        if self.snapshot.is_none() {
            self.snapshot = Some(Box::new((self.values.clone(), self.custom.clone())));
        }
    }

    fn after_change(
        &mut self,
        i: usize,
        before: Option<String>,
        reports: &mut Vec<(&'static str, String)>,
    ) {
        let def = &DEFS[i];
        let now = self.get(def.name).unwrap_or_default().to_string();
        if def.name == "TimeZone" || def.name == "extra_float_digits" {
            self.refresh_text_context();
        }
        if def.name == "statement_timeout" || def.name == "idle_in_transaction_session_timeout" {
            let ms = parse_duration_ms(&now).unwrap_or(0);
            if def.name == "statement_timeout" {
                self.timeouts.statement_ms = ms;
            } else {
                self.timeouts.idle_in_transaction_ms = ms;
            }
        }
        if def.name == "default_transaction_read_only" {
            self.default_read_only = now == "on";
        }
        if def.name.ends_with("transaction_isolation") {
            self.isolation = match self.get("transaction_isolation") {
                Some("serializable") => Isolation::Serializable,
                _ => Isolation::StrictSerializable,
            };
        }
        if def.report && before.as_deref() != Some(now.as_str()) {
            reports.push((def.name, now));
        }
    }

    fn refresh_text_context(&mut self) {
        let tz = self.get("TimeZone").unwrap_or("UTC");
        if let Ok(tz) = TimeZone::parse(tz) {
            self.text.time_zone = tz;
        }
        self.text.extra_float_digits = self
            .get("extra_float_digits")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
    }

    /// The transaction ended. On commit, session values stay; on rollback they return to the
    /// snapshot. `SET LOCAL` values end either way. Changed reported values are re-reported.
    pub fn end_transaction(&mut self, commit: bool, reports: &mut Vec<(&'static str, String)>) {
        // The common case, after every query: nothing was set in this transaction.
        if self.local.is_empty() && (self.snapshot.is_none() || commit) {
            self.snapshot = None;
            self.read_only = self.default_read_only;
            return;
        }
        let before: Vec<String> = (0..DEFS.len())
            .map(|i| self.get(DEFS[i].name).unwrap_or_default().to_string())
            .collect();
        self.local.clear();
        if let Some(snapshot) = self.snapshot.take() {
            if !commit {
                let (values, custom) = *snapshot;
                self.values = values;
                self.custom = custom;
            }
        }
        for (i, old) in before.into_iter().enumerate() {
            self.after_change(i, Some(old), reports);
        }
        self.read_only = self.default_read_only;
    }

    /// Every setting, for `SHOW ALL`: (name, value, description).
    pub fn all(&self) -> impl Iterator<Item = (&'static str, &str, &'static str)> + '_ {
        DEFS.iter()
            .map(move |d| (d.name, self.get(d.name).unwrap_or_default(), d.description))
    }

    /// The reported settings, for the ParameterStatus messages at startup.
    pub fn reported(&self) -> impl Iterator<Item = (&'static str, &str)> + '_ {
        DEFS.iter()
            .filter(|d| d.report)
            .map(move |d| (d.name, self.get(d.name).unwrap_or_default()))
    }

    /// Apply a startup parameter (they behave like SET at session start).
    pub fn apply_startup(&mut self, name: &str, value: &str) -> Result<(), PgError> {
        let mut ignored = Vec::new();
        self.set(name, Some(value), false, false, &mut ignored)?;
        self.snapshot = None;
        Ok(())
    }
}

fn unrecognized(name: &str) -> PgError {
    PgError::new(
        SqlState::UNDEFINED_OBJECT,
        format!("unrecognized configuration parameter \"{name}\""),
    )
}

fn invalid(def: &Def, value: &str) -> PgError {
    PgError::new(
        SqlState::INVALID_PARAMETER_VALUE,
        format!(
            "invalid value for parameter \"{}\": \"{}\"",
            def.name, value
        ),
    )
}

/// Check a value and return its canonical form (what SHOW prints afterwards).
fn validate(def: &Def, value: &str) -> Result<String, PgError> {
    let v = value.trim();
    match def.kind {
        Kind::ReadOnly => Ok(v.to_string()),
        Kind::Text => Ok(value.to_string()),
        Kind::Bool => match parse_bool(v) {
            Some(true) => Ok("on".into()),
            Some(false) => Ok("off".into()),
            None => Err(PgError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("parameter \"{}\" requires a Boolean value", def.name),
            )),
        },
        Kind::Int { min, max } => {
            let n: i64 = v.parse().map_err(|_| {
                PgError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!(
                        "invalid value for parameter \"{}\": \"{}\"",
                        def.name, value
                    ),
                )
            })?;
            if n < min || n > max {
                return Err(PgError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!(
                        "{n} is outside the valid range for parameter \"{}\" ({min} .. {max})",
                        def.name
                    ),
                ));
            }
            Ok(n.to_string())
        }
        Kind::DurationMs => {
            let ms = parse_duration_ms(v).ok_or_else(|| invalid(def, value))?;
            Ok(format_duration_ms(ms))
        }
        Kind::Enum(options) => options
            .iter()
            .find(|o| o.eq_ignore_ascii_case(v) || (**o == "on" && parse_bool(v) == Some(true)))
            .map(|o| o.to_string())
            .ok_or_else(|| invalid(def, value)),
        Kind::Isolation => {
            let lower = v.to_ascii_lowercase();
            ISOLATION_LEVELS
                .iter()
                .find(|(asked, _)| *asked == lower || asked.replace(' ', "_") == lower)
                .map(|(_, runs)| runs.to_string())
                .ok_or_else(|| invalid(def, value))
        }
        Kind::TimeZone => TimeZone::parse(v)
            .map(|tz| tz.name())
            .map_err(|_| invalid(def, value)),
        Kind::ClientEncoding => {
            let norm: String = v
                .chars()
                .filter(|c| c.is_ascii_alphanumeric())
                .collect::<String>()
                .to_ascii_lowercase();
            match norm.as_str() {
                "utf8" | "unicode" => Ok("UTF8".into()),
                "sqlascii" => Ok("SQL_ASCII".into()),
                _ => Err(invalid(def, value).with_detail(
                    "ringwire speaks only UTF8 (and SQL_ASCII, which it treats as UTF8).",
                )),
            }
        }
        Kind::DateStyle => {
            // Output style ISO is the only one implemented; the field order part only matters
            // for ambiguous input, where MDY (PostgreSQL's default) is used.
            let mut style_ok = true;
            for part in v.split(',').map(|p| p.trim().to_ascii_lowercase()) {
                match part.as_str() {
                    "iso" | "mdy" | "us" | "noneuropean" | "" => {}
                    _ => style_ok = false,
                }
            }
            if style_ok {
                Ok("ISO, MDY".into())
            } else {
                Err(invalid(def, value)
                    .with_detail("ringwire supports only DateStyle \"ISO, MDY\"."))
            }
        }
        Kind::IntervalStyle => {
            if v.eq_ignore_ascii_case("postgres") {
                Ok("postgres".into())
            } else {
                Err(invalid(def, value)
                    .with_detail("ringwire supports only IntervalStyle \"postgres\"."))
            }
        }
    }
}

pub fn parse_bool(v: &str) -> Option<bool> {
    let l = v.trim().to_ascii_lowercase();
    match l.as_str() {
        "on" | "true" | "yes" | "1" | "t" | "y" | "tr" | "tru" | "ye" => Some(true),
        "off" | "false" | "no" | "0" | "f" | "n" | "of" | "fa" | "fal" | "fals" => Some(false),
        _ => None,
    }
}

/// PostgreSQL's time units for GUCs: a bare number is milliseconds.
pub fn parse_duration_ms(v: &str) -> Option<u64> {
    let v = v.trim();
    let split = v
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let num: f64 = num.parse().ok()?;
    let factor = match unit.trim() {
        "" | "ms" => 1.0,
        "us" => 0.001,
        "s" => 1000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return None,
    };
    let ms = (num * factor).round();
    if !(0.0..=i32::MAX as f64).contains(&ms) {
        return None;
    }
    Some(ms as u64)
}

/// How SHOW prints a duration setting: the largest unit that divides it exactly.
pub fn format_duration_ms(ms: u64) -> String {
    if ms == 0 {
        return "0".into();
    }
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("min", 60_000),
        ("s", 1000),
    ] {
        if ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_show_and_transactional_rollback() {
        let mut s = Settings::new("alice");
        let mut reports = Vec::new();
        assert_eq!(s.get("timezone"), Some("UTC"));
        assert_eq!(s.get("session_authorization"), Some("alice"));
        s.set("application_name", Some("x"), false, true, &mut reports)
            .unwrap();
        assert_eq!(reports, vec![("application_name", "x".to_string())]);
        s.set("statement_timeout", Some("5000"), true, true, &mut reports)
            .unwrap();
        assert_eq!(s.get("statement_timeout"), Some("5s"));
        reports.clear();
        s.end_transaction(false, &mut reports);
        assert_eq!(s.get("application_name"), Some(""));
        assert_eq!(s.get("statement_timeout"), Some("0"));
        assert_eq!(reports, vec![("application_name", String::new())]);
        assert_eq!(
            s.set("nope", Some("1"), false, false, &mut reports)
                .unwrap_err()
                .code,
            SqlState::UNDEFINED_OBJECT
        );
        assert_eq!(
            s.set("server_version", Some("1"), false, false, &mut reports)
                .unwrap_err()
                .code,
            SqlState::CANT_CHANGE_RUNTIME_PARAM
        );
        assert_eq!(
            s.set("extra_float_digits", Some("9"), false, false, &mut reports)
                .unwrap_err()
                .code,
            SqlState::INVALID_PARAMETER_VALUE
        );
        s.set(
            "client_encoding",
            Some("'utf-8'".trim_matches('\'')),
            false,
            false,
            &mut reports,
        )
        .unwrap();
        assert_eq!(s.get("client_encoding"), Some("UTF8"));
        s.set("myapp.user_id", Some("42"), false, false, &mut reports)
            .unwrap();
        assert_eq!(s.get("MyApp.User_Id"), Some("42"));
    }

    #[test]
    fn transaction_isolation_follows_its_default_until_set() {
        let mut s = Settings::new("alice");
        let mut reports = Vec::new();
        assert_eq!(s.get("transaction_isolation"), Some("strict serializable"));
        assert_eq!(s.isolation(), Isolation::StrictSerializable);
        s.set(
            "default_transaction_isolation",
            Some("serializable"),
            false,
            false,
            &mut reports,
        )
        .unwrap();
        assert_eq!(s.get("transaction_isolation"), Some("serializable"));
        assert_eq!(s.isolation(), Isolation::Serializable);
        s.set(
            "transaction_isolation",
            Some("STRICT_SERIALIZABLE"),
            false,
            false,
            &mut reports,
        )
        .unwrap();
        assert_eq!(s.isolation(), Isolation::StrictSerializable);
        // A block's level, rolled back with it.
        s.set(
            "transaction_isolation",
            Some("read committed"),
            true,
            true,
            &mut reports,
        )
        .unwrap();
        assert_eq!(s.get("transaction_isolation"), Some("serializable"));
        assert_eq!(s.isolation(), Isolation::Serializable);
        s.end_transaction(false, &mut reports);
        assert_eq!(s.isolation(), Isolation::StrictSerializable);
        s.reset_all(&mut reports);
        assert_eq!(s.get("transaction_isolation"), Some("strict serializable"));
        assert_eq!(
            s.get("default_transaction_isolation"),
            Some("strict serializable")
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("1min"), Some(60_000));
        assert_eq!(parse_duration_ms("1500"), Some(1500));
        assert_eq!(format_duration_ms(60_000), "1min");
        assert_eq!(format_duration_ms(1500), "1500ms");
        assert_eq!(parse_duration_ms("abc"), None);
    }
}
