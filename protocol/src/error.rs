//! Errors a client sees: SQLSTATE codes and the fields of ErrorResponse / NoticeResponse.

use std::borrow::Cow;
use std::fmt;

/// A five-character SQLSTATE code (PostgreSQL Appendix A).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SqlState(pub [u8; 5]);

impl SqlState {
    pub const SUCCESSFUL_COMPLETION: SqlState = SqlState(*b"00000");
    pub const WARNING: SqlState = SqlState(*b"01000");
    pub const NO_ACTIVE_SQL_TRANSACTION: SqlState = SqlState(*b"25P01");
    pub const ACTIVE_SQL_TRANSACTION: SqlState = SqlState(*b"25001");
    pub const IN_FAILED_SQL_TRANSACTION: SqlState = SqlState(*b"25P02");
    pub const CONNECTION_EXCEPTION: SqlState = SqlState(*b"08000");
    pub const CONNECTION_FAILURE: SqlState = SqlState(*b"08006");
    pub const PROTOCOL_VIOLATION: SqlState = SqlState(*b"08P01");
    pub const FEATURE_NOT_SUPPORTED: SqlState = SqlState(*b"0A000");
    pub const INVALID_AUTHORIZATION_SPECIFICATION: SqlState = SqlState(*b"28000");
    pub const INVALID_PASSWORD: SqlState = SqlState(*b"28P01");
    pub const CONFIG_FILE_ERROR: SqlState = SqlState(*b"F0000");
    pub const INVALID_CATALOG_NAME: SqlState = SqlState(*b"3D000");
    pub const SYNTAX_ERROR: SqlState = SqlState(*b"42601");
    pub const UNDEFINED_COLUMN: SqlState = SqlState(*b"42703");
    pub const UNDEFINED_FUNCTION: SqlState = SqlState(*b"42883");
    pub const UNDEFINED_TABLE: SqlState = SqlState(*b"42P01");
    pub const UNDEFINED_OBJECT: SqlState = SqlState(*b"42704");
    pub const DUPLICATE_PREPARED_STATEMENT: SqlState = SqlState(*b"42P05");
    pub const DUPLICATE_CURSOR: SqlState = SqlState(*b"42P03");
    pub const INVALID_SQL_STATEMENT_NAME: SqlState = SqlState(*b"26000");
    pub const INVALID_CURSOR_NAME: SqlState = SqlState(*b"34000");
    pub const DATATYPE_MISMATCH: SqlState = SqlState(*b"42804");
    pub const INDETERMINATE_DATATYPE: SqlState = SqlState(*b"42P18");
    pub const AMBIGUOUS_FUNCTION: SqlState = SqlState(*b"42725");
    pub const CANNOT_COERCE: SqlState = SqlState(*b"42846");
    pub const INVALID_PARAMETER_VALUE: SqlState = SqlState(*b"22023");
    pub const INVALID_TEXT_REPRESENTATION: SqlState = SqlState(*b"22P02");
    pub const INVALID_BINARY_REPRESENTATION: SqlState = SqlState(*b"22P03");
    pub const INVALID_DATETIME_FORMAT: SqlState = SqlState(*b"22007");
    pub const DATETIME_FIELD_OVERFLOW: SqlState = SqlState(*b"22008");
    pub const NUMERIC_VALUE_OUT_OF_RANGE: SqlState = SqlState(*b"22003");
    pub const DIVISION_BY_ZERO: SqlState = SqlState(*b"22012");
    pub const STRING_DATA_RIGHT_TRUNCATION: SqlState = SqlState(*b"22001");
    pub const CHARACTER_NOT_IN_REPERTOIRE: SqlState = SqlState(*b"22021");
    pub const INVALID_ESCAPE_SEQUENCE: SqlState = SqlState(*b"22025");
    pub const ARRAY_SUBSCRIPT_ERROR: SqlState = SqlState(*b"2202E");
    pub const NULL_VALUE_NOT_ALLOWED: SqlState = SqlState(*b"22004");
    pub const INVALID_DATETIME_FORMAT_TZ: SqlState = SqlState(*b"22009");
    pub const UNIQUE_VIOLATION: SqlState = SqlState(*b"23505");
    pub const NOT_NULL_VIOLATION: SqlState = SqlState(*b"23502");
    pub const QUERY_CANCELED: SqlState = SqlState(*b"57014");
    pub const IDLE_IN_TRANSACTION_SESSION_TIMEOUT: SqlState = SqlState(*b"25P03");
    /// PostgreSQL 17's `transaction_timeout`.
    pub const TRANSACTION_TIMEOUT: SqlState = SqlState(*b"25P04");
    pub const ADMIN_SHUTDOWN: SqlState = SqlState(*b"57P01");
    pub const IDLE_SESSION_TIMEOUT: SqlState = SqlState(*b"57P05");
    pub const TOO_MANY_CONNECTIONS: SqlState = SqlState(*b"53300");
    pub const OUT_OF_MEMORY: SqlState = SqlState(*b"53200");
    pub const PROGRAM_LIMIT_EXCEEDED: SqlState = SqlState(*b"54000");
    pub const CANT_CHANGE_RUNTIME_PARAM: SqlState = SqlState(*b"55P02");
    pub const INTERNAL_ERROR: SqlState = SqlState(*b"XX000");

    pub fn as_str(&self) -> &str {
        // SAFETY-free: codes are built only from ASCII literals or validated wire bytes.
        std::str::from_utf8(&self.0).unwrap_or("XX000")
    }
}

impl fmt::Debug for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Severity of an ErrorResponse / NoticeResponse (field `S` and, non-localized, `V`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Error,
    Fatal,
    Panic,
    Warning,
    Notice,
    Debug,
    Info,
    Log,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "ERROR",
            Severity::Fatal => "FATAL",
            Severity::Panic => "PANIC",
            Severity::Warning => "WARNING",
            Severity::Notice => "NOTICE",
            Severity::Debug => "DEBUG",
            Severity::Info => "INFO",
            Severity::Log => "LOG",
        }
    }
}

/// An error (or notice) as the client will see it. Built by whoever detects the problem;
/// encoded by `backend::write_error` / `backend::write_notice`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgError {
    pub severity: Severity,
    pub code: SqlState,
    pub message: Cow<'static, str>,
    pub detail: Option<String>,
    pub hint: Option<String>,
    /// 1-based character position in the query string (field `P`).
    pub position: Option<u32>,
    /// The database object the error is about (fields `s`, `t`, `c`, `n`), as PostgreSQL
    /// reports integrity violations; drivers expose them (psycopg's `diag.constraint_name`,
    /// JDBC's `ServerErrorMessage.getConstraint`) and ORMs map errors by them. Boxed: errors
    /// travel in every `Result` of the query path, and this is rare.
    pub object: Option<Box<ErrorObject>>,
}

/// See [`PgError::object`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorObject {
    pub schema: Option<String>,
    pub table: Option<String>,
    pub column: Option<String>,
    pub constraint: Option<String>,
}

impl PgError {
    pub fn new(code: SqlState, message: impl Into<Cow<'static, str>>) -> PgError {
        PgError {
            severity: Severity::Error,
            code,
            message: message.into(),
            detail: None,
            hint: None,
            position: None,
            object: None,
        }
    }

    /// A FATAL error: the connection ends after it is sent.
    pub fn fatal(code: SqlState, message: impl Into<Cow<'static, str>>) -> PgError {
        PgError {
            severity: Severity::Fatal,
            ..PgError::new(code, message)
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> PgError {
        self.detail = Some(detail.into());
        self
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> PgError {
        self.hint = Some(hint.into());
        self
    }

    pub fn with_position(mut self, position: u32) -> PgError {
        self.position = Some(position);
        self
    }

    /// Name the object the error is about (see [`PgError::object`]).
    pub fn with_object(mut self, object: ErrorObject) -> PgError {
        self.object = Some(Box::new(object));
        self
    }
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} ({})",
            self.severity.as_str(),
            self.message,
            self.code
        )
    }
}

impl std::error::Error for PgError {}
