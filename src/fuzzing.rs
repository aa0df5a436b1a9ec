//! The SQL front without a server: statement text → sqlparser → plan against a fixed catalog
//! → constant folding → evaluation of constant SELECTs, along both paths a statement takes in
//! `engine.rs` (a simple Query, literal lifting included, and a Parse followed by a Bind).
//! The shared body of the `sql_plan` fuzz target (`fuzz/fuzz_targets/sql_plan.rs`) and of the
//! property tests in `tests/sql_front_props.rs`, so CI runs the same checks every change.
//!
//! Not an API: `#[doc(hidden)]`, no stability promised. It panics when an invariant breaks —
//! a panic inside the planner, or an error that could not be sent as an ErrorResponse — which
//! is what a fuzzer and a property test both report. What it does not reach: table plans are
//! planned and folded but not executed (that is the compute, on shard 0), and statement
//! execution order (each statement is planned against the same catalog).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use protocol::types::{text, Scalar, TextContext, Type, Value};
use protocol::{PgError, Severity};

use crate::compute::{TableDef, TableRef};
use crate::engine::{maintenance_command, parse_sql, plan_statement, Plan};
use crate::settings::Settings;
use crate::sql::expr::{EvalEnv, SessionInfo};
use crate::sql::lift::{self, Literal};
use crate::sql::plan::{self as table_plan, TablePlan};

/// The tables every fuzz input plans against: pgbench's, and one with a column of every type
/// the engine has; plus the `ringwire.*` relations the server always has.
const SCHEMA: &[&str] = &[
    "create table pgbench_branches (bid int not null primary key, bbalance int, filler char(88))",
    "create table pgbench_tellers (tid int not null primary key, bid int, tbalance int, filler char(84))",
    "create table pgbench_accounts (aid int not null primary key, bid int, abalance int, filler char(84))",
    "create table pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22))",
    "create table t (id bigint primary key, b bool, i2 smallint, i4 int unique, i8 bigint, \
     f4 real, f8 double precision, n numeric, s text, v varchar(10), c char(3), by bytea, \
     d date, tm time, ts timestamp, tz timestamptz, iv interval, u uuid, j json, jb jsonb, \
     a int[], ta text[])",
];

/// A catalog with [`SCHEMA`]'s tables, built by planning its statements.
struct FuzzCatalog {
    tables: BTreeMap<String, TableRef>,
    /// Index names: tables and indexes share one namespace.
    indexes: BTreeSet<String>,
}

impl table_plan::Catalog for FuzzCatalog {
    fn table(&self, name: &str) -> Option<TableRef> {
        match name.strip_prefix("ringwire.") {
            Some(relation) => crate::stats::relation(relation),
            None => self.tables.get(name).cloned(),
        }
    }
    fn relation_exists(&self, name: &str) -> bool {
        self.tables.contains_key(name) || self.indexes.contains(name)
    }
}

impl FuzzCatalog {
    fn new() -> FuzzCatalog {
        let mut catalog = FuzzCatalog {
            tables: BTreeMap::new(),
            indexes: BTreeSet::new(),
        };
        let text = TextContext::default();
        for (n, ddl) in SCHEMA.iter().enumerate() {
            let stmts = parse_sql(ddl).unwrap_or_else(|e| panic!("{ddl}: {e:?}"));
            let (plan, _) = plan_statement(&stmts[0], &catalog, &mut Vec::new(), ddl, &text, true)
                .unwrap_or_else(|e| panic!("{ddl}: {e:?}"));
            let Plan::Table(plan) = plan else {
                panic!("{ddl} did not plan as DDL")
            };
            let TablePlan::CreateTable { def, .. } = &*plan else {
                panic!("{ddl} did not plan as CREATE TABLE")
            };
            let def: TableRef = Arc::new(TableDef {
                id: n as u32 + 1,
                ..def.clone()
            });
            for index in def.primary_key.iter().chain(def.indexes.iter()) {
                catalog.indexes.insert(index.name.clone());
            }
            catalog.tables.insert(def.name.clone(), def);
        }
        catalog
    }
}

/// The session an evaluated constant SELECT sees.
struct FuzzSession {
    settings: Settings,
}

impl SessionInfo for FuzzSession {
    fn current_setting(&self, name: &str) -> Option<String> {
        self.settings.get(name).map(str::to_string)
    }
    fn text_context(&self) -> &TextContext {
        self.settings.text_context()
    }
    fn database(&self) -> &str {
        "fuzz"
    }
    fn user(&self) -> &str {
        "fuzz"
    }
    fn backend_pid(&self) -> i32 {
        1
    }
    fn stamps(&self) -> crate::sql::expr::Stamps {
        // 2026-01-01 00:00:00 UTC in PostgreSQL's epoch: fixed, so runs are reproducible.
        let at = 820_540_800_000_000;
        crate::sql::expr::Stamps {
            statement_us: at,
            transaction_us: at,
        }
    }
}

thread_local! {
    static CATALOG: FuzzCatalog = FuzzCatalog::new();
    static SESSION: FuzzSession = FuzzSession { settings: Settings::new("fuzz") };
}

/// What one input did: statements planned, and errors (each checked to be sendable).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub planned: u32,
    pub errors: u32,
}

/// Statement text, as a Query or Parse message carries it (valid UTF-8 without NUL; anything
/// else is rejected by the message decoder before it gets here), through the SQL front.
pub fn sql_plan(data: &[u8]) -> Outcome {
    let mut outcome = Outcome::default();
    let Ok(sql) = std::str::from_utf8(data) else {
        return outcome;
    };
    if sql.contains('\0') {
        return outcome;
    }
    CATALOG.with(|catalog| {
        SESSION.with(|session| {
            simple_query(sql, catalog, session, &mut outcome);
            parse_then_bind(sql, catalog, session, &mut outcome);
        })
    });
    outcome
}

/// What `Frontend::simple_query_inner` does short of running table plans.
fn simple_query(sql: &str, catalog: &FuzzCatalog, session: &FuzzSession, outcome: &mut Outcome) {
    if maintenance_command(sql).is_some() {
        return;
    }
    lifted(sql, catalog, session);
    let text = session.text_context();
    let statements = match parse_sql(sql) {
        Ok(s) => s,
        Err(e) => return outcome.error(sql, &e),
    };
    for stmt in &statements {
        let mut params = Vec::new();
        match plan_statement(stmt, catalog, &mut params, sql, text, true) {
            // 42P02 in the server: a simple Query has no parameters to bind.
            Ok(_) if !params.is_empty() => outcome.errors += 1,
            Ok((plan, columns)) => {
                outcome.planned += 1;
                run_plan(sql, &plan, &columns, &[], session, outcome);
            }
            Err(e) => outcome.error(sql, &e),
        }
    }
}

/// What `Frontend::run_lifted` does: lift literals into parameters, plan the lifted text, and
/// convert each literal with its parameter's input function.
fn lifted(sql: &str, catalog: &FuzzCatalog, session: &FuzzSession) {
    let mut normalized = String::new();
    let mut literals: Vec<Literal<'_>> = Vec::new();
    if !lift::lift(sql, &mut normalized, &mut literals) {
        return;
    }
    assert!(
        literals.len() <= lift::LIFTED_MAX,
        "{} literals lifted from {sql:?}",
        literals.len()
    );
    let Ok(statements) = parse_sql(&normalized) else {
        return;
    };
    let [stmt] = statements.as_slice() else {
        return;
    };
    let mut params: Vec<Type> = literals
        .iter()
        .map(|l| Type {
            scalar: match l {
                Literal::Int4(_) => Scalar::Int4,
                Literal::Text(_) => Scalar::Unknown,
            },
            array: false,
        })
        .collect();
    let text = session.text_context();
    let Ok((plan, _)) = plan_statement(stmt, catalog, &mut params, &normalized, text, true) else {
        return;
    };
    if !matches!(plan, Plan::Table(_)) || params.len() != literals.len() {
        return;
    }
    for (literal, ty) in literals.iter().zip(&params) {
        let decoded = match literal {
            Literal::Int4(v) => text::decode(*ty, v.to_string().as_bytes(), text),
            Literal::Text(s) => text::decode(*ty, s.as_bytes(), text),
        };
        if let Err(e) = decoded {
            check_error(sql, &e);
        }
    }
}

/// A Parse of `sql` (planned without folding), then a Bind with every parameter NULL (folding,
/// where PostgreSQL reports errors in constants), then an Execute of a constant SELECT.
fn parse_then_bind(sql: &str, catalog: &FuzzCatalog, session: &FuzzSession, outcome: &mut Outcome) {
    let Ok(statements) = parse_sql(sql) else {
        return; // the same error as the simple path
    };
    let [stmt] = statements.as_slice() else {
        return; // 42601: a prepared statement holds one command
    };
    let mut params = Vec::new();
    let text = session.text_context();
    let (plan, columns) = match plan_statement(stmt, catalog, &mut params, sql, text, false) {
        Ok(p) => p,
        Err(e) => return outcome.error(sql, &e),
    };
    outcome.planned += 1;
    let nulls = vec![Value::Null; params.len()];
    match &plan {
        Plan::Select(select) => match select.folded() {
            Ok(folded) => run_plan(
                sql,
                &Plan::Select(folded),
                &columns,
                &nulls,
                session,
                outcome,
            ),
            Err(e) => outcome.error(sql, &e),
        },
        Plan::Table(table) => {
            if let Err(e) = table.folded() {
                outcome.error(sql, &e);
            }
        }
        _ => {}
    }
}

/// Evaluate a constant SELECT (table plans need the compute and are not run here).
fn run_plan(
    sql: &str,
    plan: &Plan,
    columns: &[(String, Type)],
    params: &[Value],
    session: &FuzzSession,
    outcome: &mut Outcome,
) {
    let Plan::Select(select) = plan else { return };
    let mut env = EvalEnv {
        params,
        row: &[],
        session,
        sleep_us: 0,
        notifies: Vec::new(),
    };
    let produced = select.eval_rows(&mut env, &mut |row: &[Value]| {
        assert_eq!(
            row.len(),
            columns.len(),
            "a row of {} values for {} columns: {sql:?}",
            row.len(),
            columns.len()
        );
        Ok(())
    });
    if let Err(e) = produced {
        outcome.error(sql, &e);
    }
}

impl Outcome {
    fn error(&mut self, sql: &str, e: &PgError) {
        check_error(sql, e);
        self.errors += 1;
    }
}

/// An error the client can be sent: a five-character SQLSTATE, a message, the severity of a
/// statement error, and a position (1-based, in characters) inside the statement text.
fn check_error(sql: &str, e: &PgError) {
    assert!(
        e.code.as_str().len() == 5 && e.code.as_str().is_ascii(),
        "bad SQLSTATE {:?} for {sql:?}",
        e.code
    );
    assert!(!e.message.is_empty(), "an empty error message for {sql:?}");
    assert_eq!(
        e.severity,
        Severity::Error,
        "planning {sql:?} failed with {e:?}"
    );
    if let Some(position) = e.position {
        let chars = sql.chars().count() as u32;
        assert!(
            (1..=chars + 1).contains(&position),
            "error position {position} outside the {chars}-character statement {sql:?}: {e:?}"
        );
    }
}
