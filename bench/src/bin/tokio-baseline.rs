//! `tokio-baseline`: the benchmark's reference point — a small PostgreSQL wire-protocol server
//! built the way a Rust developer would otherwise build one: the `pgwire` crate on a
//! multi-threaded Tokio runtime. It is never part of the ringwire binary.
//!
//! It answers exactly the benchmark workloads with the rows PostgreSQL would give:
//!
//! - `SELECT 1` → one int4 `1` (column `?column?`);
//! - `SELECT * FROM t` → the one row of a one-row table `t (a int4)`: `1`;
//! - `SELECT abalance FROM pgbench_accounts WHERE aid = N` → one int4 row for 1 <= N <= 100000
//!   (a real lookup in an in-memory vector, initially all 0), no row otherwise;
//! - `UPDATE pgbench_accounts SET abalance = abalance + X WHERE aid = N` → `UPDATE 1` after an
//!   atomic add on that row (`UPDATE 0` outside the range);
//! - `BEGIN` / `COMMIT` / `END` → the tags, so pgbench-style scripts run (no isolation: this is
//!   a baseline, not a database).
//!
//! SQL is recognised by a token matcher, not parsed: it is a baseline, not a SQL engine.
//! Anything else is a 42601 error. Both the simple and the extended protocol work; `N` and `X`
//! may be literals or `$n` parameters (text or binary int4/int8).

use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use clap::Parser;
use futures::{stream, Sink};
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{DataRowEncoder, FieldFormat, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireServerHandlers, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::tokio::process_socket;
use tokio::net::TcpListener;

/// pgbench's scale 1: aids 1..=100000.
const ACCOUNTS: usize = 100_000;

#[derive(Parser, Debug)]
#[command(
    name = "tokio-baseline",
    version,
    about = "pgwire + Tokio baseline server for ringwire-bench"
)]
struct Cli {
    /// Address to listen on; port 0 picks a free port (printed on stdout).
    #[arg(long, default_value = "127.0.0.1:5433")]
    listen: SocketAddr,
    /// Tokio worker threads (default: one per CPU).
    #[arg(long)]
    threads: Option<usize>,
}

/// A value in a statement: a literal, or the `$n` parameter (0-based here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arg {
    Literal(i64),
    Param(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Statement {
    SelectOne,
    SelectT,
    SelectBalance { aid: Arg },
    UpdateBalance { delta: Arg, aid: Arg },
    Begin,
    Commit,
}

impl Statement {
    fn param_count(&self) -> usize {
        let count = |a: &Arg| match a {
            Arg::Param(i) => i + 1,
            Arg::Literal(_) => 0,
        };
        match self {
            Statement::SelectBalance { aid } => count(aid),
            Statement::UpdateBalance { delta, aid } => count(delta).max(count(aid)),
            _ => 0,
        }
    }

    /// Column name of the single int4 result column, if the statement returns rows.
    fn column(&self) -> Option<&'static str> {
        match self {
            Statement::SelectOne => Some("?column?"),
            Statement::SelectT => Some("a"),
            Statement::SelectBalance { .. } => Some("abalance"),
            _ => None,
        }
    }
}

fn user_error(code: &str, message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_owned(),
        code.to_owned(),
        message,
    )))
}

/// Split into words and the punctuation that matters here; `-` stays in words (`-5`).
fn tokens(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in sql.chars() {
        if c.is_whitespace() || "=+*,()".contains(c) {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word).to_ascii_lowercase());
            }
            if !c.is_whitespace() {
                out.push(c.to_string());
            }
        } else {
            word.push(c);
        }
    }
    if !word.is_empty() {
        out.push(word.to_ascii_lowercase());
    }
    out
}

fn arg(token: &str) -> Option<Arg> {
    match token.strip_prefix('$') {
        Some(n) => n
            .parse::<usize>()
            .ok()
            .filter(|&n| n >= 1)
            .map(|n| Arg::Param(n - 1)),
        None => token.parse::<i64>().ok().map(Arg::Literal),
    }
}

/// The token matcher: one statement, without its trailing `;`.
fn parse_statement(sql: &str) -> PgWireResult<Statement> {
    let t = tokens(sql.trim().trim_end_matches(';'));
    let t: Vec<&str> = t.iter().map(String::as_str).collect();
    let statement = match t.as_slice() {
        ["select", "1"] => Some(Statement::SelectOne),
        ["select", "*", "from", "t"] => Some(Statement::SelectT),
        ["select", "abalance", "from", "pgbench_accounts", "where", "aid", "=", aid] => {
            arg(aid).map(|aid| Statement::SelectBalance { aid })
        }
        ["update", "pgbench_accounts", "set", "abalance", "=", "abalance", "+", delta, "where", "aid", "=", aid] => {
            arg(delta)
                .zip(arg(aid))
                .map(|(delta, aid)| Statement::UpdateBalance { delta, aid })
        }
        ["begin"] | ["start", "transaction"] => Some(Statement::Begin),
        ["commit"] | ["end"] => Some(Statement::Commit),
        _ => None,
    };
    statement.ok_or_else(|| {
        user_error(
            "42601",
            format!(
                "tokio-baseline only answers the benchmark statements, not {:?}",
                sql.trim()
            ),
        )
    })
}

/// The server state: `t`'s one row is a constant; pgbench_accounts is a vector of atomics.
struct Baseline {
    /// Index 0 is unused so that `aid` indexes directly.
    abalance: Vec<AtomicI32>,
}

impl Baseline {
    fn new() -> Baseline {
        Baseline {
            abalance: (0..=ACCOUNTS).map(|_| AtomicI32::new(0)).collect(),
        }
    }

    fn schema(statement: &Statement, format: FieldFormat) -> Vec<FieldInfo> {
        statement
            .column()
            .map(|name| {
                FieldInfo::new(name.to_owned(), None, None, Type::INT4, format).with_type_size(4)
            })
            .into_iter()
            .collect()
    }

    fn execute(
        &self,
        statement: &Statement,
        args: &dyn Fn(Arg) -> PgWireResult<i64>,
        format: FieldFormat,
    ) -> PgWireResult<Response> {
        let account = |aid: Arg| -> PgWireResult<Option<&AtomicI32>> {
            let aid = args(aid)?;
            Ok(usize::try_from(aid)
                .ok()
                .filter(|&a| (1..=ACCOUNTS).contains(&a))
                .map(|a| &self.abalance[a]))
        };
        let rows = match statement {
            Statement::SelectOne | Statement::SelectT => vec![1],
            Statement::SelectBalance { aid } => account(*aid)?
                .map(|a| a.load(Ordering::Relaxed))
                .into_iter()
                .collect(),
            Statement::UpdateBalance { delta, aid } => {
                let delta = i32::try_from(args(*delta)?)
                    .map_err(|_| user_error("22003", "integer out of range".to_owned()))?;
                let updated = match account(*aid)? {
                    Some(a) => {
                        a.fetch_add(delta, Ordering::Relaxed);
                        1
                    }
                    None => 0,
                };
                return Ok(Response::Execution(Tag::new("UPDATE").with_rows(updated)));
            }
            Statement::Begin => return Ok(Response::TransactionStart(Tag::new("BEGIN"))),
            Statement::Commit => return Ok(Response::TransactionEnd(Tag::new("COMMIT"))),
        };
        let schema = Arc::new(Self::schema(statement, format));
        let mut encoder = DataRowEncoder::new(schema.clone());
        let mut encoded = Vec::with_capacity(rows.len());
        for value in rows {
            encoder.encode_field(&value)?;
            encoded.push(Ok(encoder.take_row()));
        }
        Ok(Response::Query(QueryResponse::new(
            schema,
            stream::iter(encoded),
        )))
    }
}

#[async_trait]
impl NoopStartupHandler for Baseline {}

#[async_trait]
impl SimpleQueryHandler for Baseline {
    async fn do_query<C>(&self, _client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let no_params = |_: Arg| Err(user_error("08P01", "there is no parameter $1".to_owned()));
        let mut responses = Vec::new();
        for sql in query.split(';').filter(|s| !s.trim().is_empty()) {
            // PostgreSQL stops at the first failing statement of a simple query.
            match parse_statement(sql).and_then(|s| {
                let literal = |a: Arg| match a {
                    Arg::Literal(v) => Ok(v),
                    Arg::Param(_) => no_params(a),
                };
                self.execute(&s, &literal, FieldFormat::Text)
            }) {
                Ok(r) => responses.push(r),
                Err(PgWireError::UserError(e)) => {
                    responses.push(Response::Error(e));
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if responses.is_empty() {
            responses.push(Response::EmptyQuery);
        }
        Ok(responses)
    }
}

struct Parser_;

#[async_trait]
impl QueryParser for Parser_ {
    type Statement = Statement;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        parse_statement(sql).map(Some)
    }

    fn get_parameter_types(&self, statement: &Statement) -> PgWireResult<Vec<Type>> {
        Ok(vec![Type::INT4; statement.param_count()])
    }

    fn get_result_schema(
        &self,
        statement: &Statement,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        let format = format.map_or(FieldFormat::Text, |f| f.format_for(0));
        Ok(Baseline::schema(statement, format))
    }
}

/// A bound parameter as an integer: text, or binary int2/int4/int8 by length.
fn param_value(portal: &Portal<Statement>, i: usize) -> PgWireResult<i64> {
    let raw = portal
        .parameters
        .get(i)
        .ok_or_else(|| user_error("08P01", format!("there is no parameter ${}", i + 1)))?
        .as_ref()
        .ok_or_else(|| user_error("22004", "null value not allowed".to_owned()))?;
    if portal.parameter_format.is_binary(i) {
        match raw.len() {
            2 => Ok(i16::from_be_bytes([raw[0], raw[1]]) as i64),
            4 => Ok(i32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]) as i64),
            8 => Ok(i64::from_be_bytes(raw[..8].try_into().unwrap_or([0; 8]))),
            _ => Err(user_error(
                "22P03",
                "incorrect binary data format in bind parameter".to_owned(),
            )),
        }
    } else {
        let text = std::str::from_utf8(raw).unwrap_or("");
        text.trim().parse::<i64>().map_err(|_| {
            user_error(
                "22P02",
                format!("invalid input syntax for type integer: \"{text}\""),
            )
        })
    }
}

#[async_trait]
impl ExtendedQueryHandler for Baseline {
    type Statement = Statement;
    type QueryParser = Parser_;

    fn query_parser(&self) -> Arc<Parser_> {
        Arc::new(Parser_)
    }

    async fn do_query<C>(
        &self,
        _client: &mut C,
        portal: &Portal<Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statement = portal.statement.statement;
        let args = |a: Arg| match a {
            Arg::Literal(v) => Ok(v),
            Arg::Param(i) => param_value(portal, i),
        };
        self.execute(&statement, &args, portal.result_column_format.format_for(0))
    }
}

struct Handlers {
    baseline: Arc<Baseline>,
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.baseline.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.baseline.clone()
    }

    fn startup_handler(&self) -> Arc<impl pgwire::api::auth::StartupHandler> {
        self.baseline.clone()
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let threads = cli
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if threads == 0 {
        eprintln!("tokio-baseline: --threads must be at least 1");
        return std::process::ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tokio-baseline: cannot start the Tokio runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        let listener = match TcpListener::bind(cli.listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("tokio-baseline: cannot listen on {}: {e}", cli.listen);
                return std::process::ExitCode::from(1);
            }
        };
        let addr = listener.local_addr().unwrap_or(cli.listen);
        // The smoke test and scripts read the port from this line.
        println!("tokio-baseline listening on {addr} with {threads} worker threads");
        let handlers = Arc::new(Handlers {
            baseline: Arc::new(Baseline::new()),
        });
        loop {
            match listener.accept().await {
                Ok((socket, _)) => {
                    let handlers = handlers.clone();
                    tokio::spawn(async move { process_socket(socket, None, handlers).await });
                }
                Err(e) => {
                    eprintln!("tokio-baseline: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matcher_knows_the_benchmark_statements_and_nothing_else() {
        assert_eq!(parse_statement("select 1").unwrap(), Statement::SelectOne);
        assert_eq!(
            parse_statement(" SELECT * FROM t; ").unwrap(),
            Statement::SelectT
        );
        assert_eq!(
            parse_statement("SELECT abalance FROM pgbench_accounts WHERE aid = $1").unwrap(),
            Statement::SelectBalance { aid: Arg::Param(0) }
        );
        assert_eq!(
            parse_statement("UPDATE pgbench_accounts SET abalance = abalance + -42 WHERE aid = 7")
                .unwrap(),
            Statement::UpdateBalance {
                delta: Arg::Literal(-42),
                aid: Arg::Literal(7)
            }
        );
        assert_eq!(
            parse_statement("update pgbench_accounts set abalance=abalance+$1 where aid=$2")
                .unwrap()
                .param_count(),
            2
        );
        for bad in [
            "select 2",
            "select * from u",
            "drop table t",
            "select abalance from pgbench_accounts where aid = x",
        ] {
            assert!(parse_statement(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn updates_change_what_selects_return() {
        let b = Baseline::new();
        let lit = |a: Arg| match a {
            Arg::Literal(v) => Ok(v),
            Arg::Param(_) => unreachable!(),
        };
        let update = Statement::UpdateBalance {
            delta: Arg::Literal(5),
            aid: Arg::Literal(3),
        };
        let Response::Execution(tag) = b.execute(&update, &lit, FieldFormat::Text).unwrap() else {
            panic!()
        };
        assert_eq!(tag, Tag::new("UPDATE").with_rows(1));
        assert_eq!(b.abalance[3].load(Ordering::Relaxed), 5);
        let outside = Statement::UpdateBalance {
            delta: Arg::Literal(5),
            aid: Arg::Literal(100_001),
        };
        b.execute(&outside, &lit, FieldFormat::Text).unwrap();
        assert!(
            b.abalance
                .iter()
                .map(|a| a.load(Ordering::Relaxed))
                .sum::<i32>()
                == 5
        );
    }
}
