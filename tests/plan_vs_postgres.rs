//! Differential test of the table planner (`sql::plan`) against PostgreSQL 15.
//!
//! The same schema is created in PostgreSQL (executed) and in an in-memory catalog (each
//! CREATE planned by ringwire and applied), and the two catalogs must agree: column types,
//! NOT NULL, and the names, columns and kinds of the indexes PostgreSQL chose. Then:
//! - each query or DML statement is prepared in PostgreSQL (no execution) and planned by
//!   ringwire: parameter types, output column names and types must be identical, or both
//!   must fail with the same SQLSTATE, message and position;
//! - each DDL and COPY statement is executed in PostgreSQL inside a rolled-back transaction
//!   and planned by ringwire: both fail alike, or both succeed (for CREATE, naming the same
//!   indexes).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::postgres::Postgres;
use protocol::types::{TextContext, Type};
use ringwire::compute::{IndexDef, TableDef, TableRef};
use ringwire::sql::plan::{plan_table_statement, Catalog, TablePlan};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use tokio_postgres::{GenericClient, NoTls};

/// Created in both systems, in order. `t_a_key` and `acc_bid_idx` exist before the tables
/// whose generated names would collide with them.
const SCHEMA: &[&str] = &[
    "create table t_a_key (z int)",
    "create table t (a int primary key, b text not null default 'x', c numeric, d int unique)",
    "create table acc (aid int not null primary key, bid int, abalance int, filler char(84))",
    "create index on acc (bid)",
    "create index on acc (bid)",
    "create table m (k1 int, k2 text, v bigint, primary key (k1, k2))",
    "create index on m (v)",
    "create unique index m_k2 on m (k2, k1)",
    "create table s (x smallint primary key, y varchar(20) unique, j json, f float8, \
     ts timestamp, r real, flag boolean, day date, u uuid, bs bytea, iv interval)",
    "create table hist (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22)) \
     with (fillfactor = 100)",
    "create table \"Quoted\" (\"Id\" int primary key, \"Name\" text unique, unique (\"Id\", \"Name\"))",
    "create table dup (a int unique, b int constraint dup_named unique, unique (a), \
     unique (b, a), primary key (b, a))",
];

/// Prepared in PostgreSQL, planned by ringwire.
const QUERIES: &[&str] = &[
    // ----- output columns
    "select * from t",
    "select t.* from t",
    "select x.*, x.a from t x",
    "select * from public.t",
    "select public.t.a from t",
    "select a, b as bee, c + 1, d * 2 as \"D2\", 'lit', a::int8, b || '!', -a from t",
    "select case when a > 1 then c end, case when a > 1 then c else 0 end from t",
    "select coalesce(c, 0), greatest(a, d), lower(b), length(b), now() from t",
    "select \"Id\", \"Name\" from \"Quoted\"",
    "select * from s",
    "select x + 1, f * 2, r + 1, ts + interval '1 day', day + 1, not flag from s",
    "select $1, a from t",
    "select $1::int8 + a from t",
    // ----- aggregates and grouping
    "select count(*) from t",
    "select count(*), count(c), count(distinct b), sum(a), sum(c), avg(a), avg(c), min(b), max(d) from t",
    "select sum(x), avg(x), sum(f), avg(f), sum(r), avg(r), min(y), max(ts), sum(iv), max(day) from s",
    "select sum(v), avg(v), max(k2) from m",
    "select b, count(*) from t group by b",
    "select b, count(*) from t group by 1",
    "select b as k, count(*) from t group by k",
    "select b || '!' as k, count(*) from t group by b || '!'",
    "select (c + 1) * 2 from t group by c + 1",
    "select t.c, count(*) from t group by c",
    "select a, b, count(*) from t group by a",
    "select a, b from t group by a order by c",
    "select b, count(*) from t group by b having count(*) > 1",
    "select b, count(*) from t group by b having max(c) > 1 order by count(*) desc, max(a)",
    "select 1 from t having true",
    "select count(*) from t where a > $1 group by b having sum(d) > $2",
    "select k1, k2, v from m group by k1, k2",
    "select b from t group by c",
    "select x.b from t x group by c",
    "select * from t group by b",
    "select count(*) from t order by b",
    "select c from t group by c having b = 'x'",
    "select b, count(*) from t",
    "select c from t group by c + 1",
    "select v from m group by k1",
    "select a as b from t group by b",
    "select a from t group by count(*)",
    "select count(*) as n from t group by 1",
    "select 1 from t group by 2",
    "select 1 from t group by 1.5",
    "select 1 from t group by 'x'",
    "select j from s group by 1",
    "select b as k, c as k from t group by k",
    "select sum(count(*)) from t",
    "select a from t where count(*) > 1",
    "select count() from t",
    "select b, count(*) from t group by b order by b",
    "select b from t group by b order by count(*)",
    "select 1 from t order by count(*)",
    "select a, count(*) from t order by 1",
    "select b from t group by b having a > 1",
    "select a from t group by a having b = 'x'",
    "select t.* from t group by a",
    "select max(a) + min(d), avg(distinct c) from t",
    "select count(*) from t where a = 1 group by a having count(*) > $1",
    "select a from t where a = any($1)",
    "select * from t where a = $1::int8",
    "select max(j) from s",
    "select max(u) from s",
    "select max(flag) from s",
    "select max(bs) from s",
    "select sum(b) from t",
    "select sum('1') from t",
    "select max('a') from t",
    "select count($1) from t",
    "select sum($1) from t",
    "select count($1::int) from t",
    "select avg(a, d) from t",
    // ----- ORDER BY, DISTINCT, LIMIT
    "select b as x, c from t order by x desc, 2, a + 1 nulls first",
    "select b as a from t order by a",
    "select a + 1 from t order by a + 1",
    "select distinct b, c from t order by c, 1",
    "select distinct b from t order by b desc",
    "select b, count(*) from t group by 1 order by 3",
    "select 1 from t order by 0",
    "select 1 from t order by -1",
    "select b from t order by 1.5",
    "select 1 from t order by true",
    "select 1 from t order by null",
    "select 1 from t order by 'x'",
    "select b as a, c as a from t order by a",
    "select a, a from t order by a",
    "select distinct b from t order by a",
    "select distinct b from t order by a + 1",
    "select j from s order by 1",
    "select j from s order by j",
    "select distinct j from s",
    "select distinct *, j from s",
    "select j, * from s order by 1",
    "select distinct * from acc",
    "select * from acc where filler = $1",
    "select a from t order by zz",
    "select * from t order by 5",
    "select distinct a, b from t order by a + 1",
    "select a from t limit 10 offset 5",
    "select a from t limit $1 offset $2",
    "select a from t limit a",
    "select a from t offset a",
    "select a from t limit zz",
    "select a from t limit 'x'",
    "select a from t limit 1.5",
    "select a from t limit count(*)",
    "select a from t fetch first 3 rows only",
    "select a from t limit all",
    // ----- WHERE and parameters
    "select abalance from acc where aid = $1",
    "select * from m where v > $1 and k2 = $2",
    "select * from t where a = $1 or b = $2",
    "select * from t where a between $1 and $2",
    "select * from t where a in ($1, $2)",
    "select * from t where b like $1",
    "select * from s where x = $1 and y = $2 and ts < $3",
    "select * from t where $1 is null",
    "select * from t where a = $1 and d = $1",
    "select a from t where a",
    "select a from t where b",
    "select a from t where 'x'",
    // ----- errors in FROM and column references
    "select * from nosuch",
    "select * from foo.t",
    "select * from t_pkey",
    "select zz from t",
    "select t.zz from t",
    "select x.a from t",
    "select t.a from t as x",
    "select a from t x where t.a = 1",
    "select public.t.a from t x",
    "select y.* from t",
    "select a.b.c.d from t",
    "select \"id\" from \"Quoted\"",
    "select * from quoted",
    // ----- INSERT
    "insert into t values (1)",
    "insert into t (a, c, b) values (1.6, 2, 'z'), (2, 3.25, default)",
    "insert into t values (1, default, default)",
    "insert into t default values",
    "insert into t (a) values ($1) returning *",
    "insert into t as x (a) values (1) returning *, x.a + 1 as next, c",
    "insert into t (a) values (1) returning 'k', $1",
    "insert into acc (aid, bid, abalance, filler) values ($1, $2, $3, $4)",
    "insert into hist (tid, bid, aid, delta, mtime) values ($1, $2, $3, $4, current_timestamp)",
    "insert into s (x, y, ts, f, r) values (2.5::numeric, 12, now(), 1, 1.5)",
    "insert into s (flag, day, iv, u) values ('t', '2024-01-01', '1 day', gen_random_uuid())",
    "insert into t values ($1, $2), ($3, $4)",
    "insert into nosuch values (1)",
    "insert into t_pkey values (1)",
    "insert into t values (1, 2, 3, 4, 5)",
    "insert into t (a, b) values (1)",
    "insert into t (a, b) values (1, 'x'::text), (2)",
    "insert into t (a, zz) values (1, 2)",
    "insert into t (a, a) values (1, 2)",
    "insert into t (a) values ('x'::text)",
    "insert into t (a) values ('abc')",
    "insert into t (a) values (true)",
    "insert into s (flag) values (1)",
    "insert into s (x) values (1.5::float8)",
    "insert into s (day) values (now())",
    "insert into s (u) values ('x'::text)",
    "insert into t values (a)",
    "insert into t values (t.a)",
    "insert into t (a) values (default + 1)",
    "insert into t (a) values (count(*))",
    "insert into t (a) values (1) returning zz",
    "insert into t (a) values (1) returning count(*)",
    "insert into t (a) values ($1::text)",
    // ----- UPDATE and DELETE
    "update acc set abalance = abalance + $1 where aid = $2",
    "update acc set abalance = abalance + 1, filler = default where aid = 3 returning abalance",
    "update t set a = c",
    "update t as x set b = x.b || '!' where x.a = $1 returning x.*",
    "update t set b = $1, c = $2, d = $3 where a = $4",
    "update nosuch set a = 1",
    "update t_pkey set a = 1",
    "update t set zz = 1",
    "update t set t.a = 1",
    "update t set a = 'x'::text",
    "update t set a = 'abc'",
    "update t set a = 1, a = 2",
    "update t set a = count(*)",
    "update t set a = 1 where zz = 1",
    "update t set a = 1 where a",
    "update t set a = 1 returning count(*)",
    "update t set zz = 1, a = yy",
    "update t set a = 1, a = 2 where zz = 1",
    "update t set a = 1, a = 2",
    "insert into t (a) values (3000000000)",
    "insert into t (a) values (1 / 0)",
    "insert into t (a) values (1), ('2')",
    "insert into t (b) values ($1) returning a",
    "insert into t (a, zz) values (1, yy)",
    "insert into t (a) values (1, yy)",
    "delete from m where k1 = $1 and k2 = $2 returning v, *",
    "delete from t",
    "delete from t x where x.a > $1 returning x.b",
    "delete from nosuch",
    "delete from t where zz = 1",
    "delete from t where count(*) > 1",
];

/// Executed in PostgreSQL (rolled back), planned by ringwire.
const DDL: &[&str] = &[
    "create table u (id int primary key, name varchar(20) not null default 'n', \
     price numeric(10, 2) default 1.5, qty smallint default 2.6, code text unique, \
     at timestamptz, tags text[], fl double precision)",
    "create table u (a int unique, unique (a), b int constraint foo unique)",
    "create table u (a int primary key unique)",
    "create table if not exists t (a int)",
    "create table if not exists u (a int unique, b int, unique (a, b), unique (b, a))",
    "create table t (a int)",
    "create table t_pkey (a int)",
    "create table u (a int, a text)",
    "create table u (a foo)",
    "create table u (a Foo.Bar)",
    "create table u (a int primary key, b int primary key)",
    "create table u (a int primary key, b int, primary key (b))",
    "create table u (a int, b int, c int, primary key (a), primary key (b))",
    "create table u (a int, primary key (zz))",
    "create table u (a int, unique (zz))",
    "create table u (a int, primary key (a, a))",
    "create table u (a int, unique (a, a))",
    "create table u (a int default 'abc')",
    "create table u (a int default 'abc'::text)",
    "create table u (a int default 1.6)",
    "create table u (a int default a)",
    "create table u (a int default zz)",
    "create table u (a void)",
    "create table u (a int null not null)",
    "create table u (a int not null null)",
    "create table u (a int default 1 default 2)",
    "create table u (a int, b int default 1 default 2)",
    "create table u (a int constraint t unique)",
    "create table u (a int constraint foo unique, b int constraint foo unique)",
    "create table foo.x (a int)",
    "create table public.u (a int)",
    "create table u (j json unique)",
    "create table u (a int, j json, primary key (a, j))",
    "create index on s (j)",
    "create index on t (c)",
    "create index on t (b)",
    "create index on t (c desc, a)",
    "create unique index on public.t (c, a)",
    "create index if not exists t_pkey on t using btree (b)",
    "create index if not exists t_c_idx on t (c)",
    "create index on nosuch (a)",
    "create index on t (zz)",
    "create index t_pkey on t (b)",
    "create index on foo.t (a)",
    "drop table t, acc cascade",
    "drop table if exists nosuch, t",
    "drop table nosuch",
    "drop table t_pkey",
    "drop table if exists nosuch, t_pkey",
    "drop index acc_bid_idx",
    "drop index if exists acc_bid_idx1, nosuch",
    "drop index t",
    "drop index nosuch",
    "truncate t",
    "truncate table t, public.acc restart identity",
    "truncate nosuch",
    "truncate t_pkey",
];

/// COPY statements: run in PostgreSQL with no rows, planned by ringwire.
const COPY: &[&str] = &[
    "copy t from stdin",
    "copy t (c, a) from stdin with (format csv, header, delimiter '|', null 'x')",
    "copy t from stdin csv header",
    "copy t to stdout",
    "copy t (b, a) to stdout (format csv)",
    "copy (select a, count(*) from t group by a order by 1) to stdout",
    "copy t from stdin (format xml)",
    "copy t from stdin (delimiter 'a')",
    "copy t from stdin (delimiter '\\')",
    "copy t from stdin (quote '\"')",
    "copy t from stdin (escape '\"')",
    "copy t from stdin (format csv, delimiter ',', quote ',')",
    "copy t from stdin (delimiter ',', null 'a,b')",
    "copy t from stdin (format csv, null 'a\"b')",
    "copy t from stdin (delimiter ',', delimiter ';')",
    "copy t (a, zz) from stdin",
    "copy t (a, a) from stdin",
    "copy nosuch from stdin",
    "copy t_pkey to stdout",
    "copy (select zz from t) to stdout",
];

#[derive(Default)]
struct MemCatalog {
    tables: Vec<TableRef>,
}

impl Catalog for MemCatalog {
    fn table(&self, name: &str) -> Option<TableRef> {
        self.tables.iter().find(|t| t.name == name).cloned()
    }
    fn relation_exists(&self, name: &str) -> bool {
        self.tables.iter().any(|t| {
            t.name == name
                || t.primary_key.iter().any(|i| i.name == name)
                || t.indexes.iter().any(|i| i.name == name)
        })
    }
}

impl MemCatalog {
    /// Applies a CREATE plan (the catalog part the lead's engine does for real).
    fn apply(&mut self, plan: TablePlan) {
        match plan {
            TablePlan::CreateTable { mut def, .. } => {
                def.id = self.tables.len() as u32 + 1;
                self.tables.push(Arc::new(def));
            }
            TablePlan::CreateIndex { table, index, .. } => {
                let t = self
                    .tables
                    .iter_mut()
                    .find(|t| t.name == table)
                    .expect("table exists");
                let mut def: TableDef = (**t).clone();
                def.indexes.push(index);
                *t = Arc::new(def);
            }
            other => panic!("not a CREATE: {other:?}"),
        }
    }
}

#[derive(Debug, PartialEq)]
enum Outcome {
    /// Parameter type OIDs, output columns (name, type OID).
    Described {
        params: Vec<u32>,
        columns: Vec<(String, u32)>,
    },
    /// A statement that succeeded, with what it is compared by (index names for CREATE).
    Done(String),
    Error {
        code: String,
        message: String,
        position: Option<u32>,
    },
}

fn pg_error(e: &tokio_postgres::Error, sql: &str) -> Outcome {
    let db = e
        .as_db_error()
        .unwrap_or_else(|| panic!("{sql}: not a server error: {e}"));
    let position = match db.position() {
        Some(tokio_postgres::error::ErrorPosition::Original(p)) => Some(*p),
        _ => None,
    };
    Outcome::Error {
        code: db.code().code().to_string(),
        message: db.message().to_string(),
        position,
    }
}

/// Plans `sql`; `fold`: as the simple protocol does (constants evaluated while planning), else
/// as Parse does (PostgreSQL's prepare analyses but does not plan).
fn ringwire_plan(
    sql: &str,
    catalog: &MemCatalog,
    fold: bool,
) -> (Result<Option<TablePlan>, Outcome>, Vec<Type>) {
    let stmts = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .unwrap_or_else(|e| panic!("{sql}: sqlparser: {e}"));
    let [stmt] = stmts.as_slice() else {
        panic!("{sql}: one statement expected")
    };
    let mut params = Vec::new();
    let planned = plan_table_statement(
        stmt,
        catalog,
        &mut params,
        sql,
        &TextContext::default(),
        fold,
    )
    .map_err(|e| Outcome::Error {
        code: e.code.as_str().to_string(),
        message: e.message.to_string(),
        position: e.position,
    });
    (planned, params)
}

fn described(plan: &TablePlan, params: &[Type]) -> Outcome {
    let cols = |c: &[(String, Type)]| c.iter().map(|(n, t)| (n.clone(), t.oid())).collect();
    let columns = match plan {
        TablePlan::Select(s) => cols(&s.columns),
        TablePlan::Insert(i) => cols(&i.returning_columns),
        TablePlan::Update(u) => cols(&u.returning_columns),
        TablePlan::Delete(d) => cols(&d.returning_columns),
        other => panic!("not a query or DML: {other:?}"),
    };
    Outcome::Described {
        params: params.iter().map(|t| t.oid()).collect(),
        columns,
    }
}

/// Index names of a created table (PostgreSQL: the catalog; ringwire: the plan), sorted, each
/// with its column names and kind.
fn index_summary(def: &TableDef) -> String {
    let mut out: Vec<String> = Vec::new();
    let describe = |ix: &IndexDef, kind: &str| {
        let cols: Vec<&str> = ix
            .columns
            .iter()
            .map(|c| def.columns[*c].name.as_str())
            .collect();
        format!("{} {kind}({})", ix.name, cols.join(","))
    };
    if let Some(pk) = &def.primary_key {
        out.push(describe(pk, "primary"));
    }
    for ix in &def.indexes {
        out.push(describe(ix, if ix.unique { "unique" } else { "index" }));
    }
    out.sort();
    out.join("; ")
}

const INDEX_QUERY: &str = "select i.indexrelid::regclass::text, i.indisprimary, i.indisunique, \
     (select string_agg(a.attname, ',' order by k.n) \
        from unnest(i.indkey) with ordinality k(attnum, n) \
        join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum) \
     from pg_index i where i.indrelid = $1::text::regclass";

async fn pg_index_summary(client: &impl GenericClient, table: &str) -> String {
    let quoted = format!("\"{table}\"");
    let rows = client
        .query(INDEX_QUERY, &[&quoted])
        .await
        .expect("index query");
    let mut out: Vec<String> = rows
        .iter()
        .map(|r| {
            let name: String = r.get(0);
            let name = name.trim_matches('"').to_string();
            let kind = if r.get::<_, bool>(1) {
                "primary"
            } else if r.get::<_, bool>(2) {
                "unique"
            } else {
                "index"
            };
            format!("{name} {kind}({})", r.get::<_, String>(3))
        })
        .collect();
    out.sort();
    out.join("; ")
}

/// Columns of a table in PostgreSQL: (name, type OID, NOT NULL).
async fn pg_columns(client: &impl GenericClient, table: &str) -> Vec<(String, u32, bool)> {
    let quoted = format!("\"{table}\"");
    client
        .query(
            "select attname::text, atttypid, attnotnull from pg_attribute \
             where attrelid = $1::text::regclass and attnum > 0 and not attisdropped order by attnum",
            &[&quoted],
        )
        .await
        .expect("column query")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

fn ringwire_columns(def: &TableDef) -> Vec<(String, u32, bool)> {
    def.columns
        .iter()
        .map(|c| (c.name.clone(), c.ty.oid(), c.not_null))
        .collect()
}

/// Runs `sql` in PostgreSQL inside a transaction that is rolled back; for a CREATE, what it
/// created.
async fn pg_ddl(client: &mut tokio_postgres::Client, sql: &str) -> Outcome {
    let tx = client.transaction().await.expect("begin");
    let result = tx.batch_execute(sql).await;
    let outcome = match result {
        Err(e) => pg_error(&e, sql),
        Ok(()) => {
            let lower = sql.to_lowercase();
            if lower.starts_with("create table") {
                let name = created_table_name(sql);
                let cols = pg_columns(&tx, &name).await;
                Outcome::Done(format!("{cols:?} {}", pg_index_summary(&tx, &name).await))
            } else if lower.starts_with("create") {
                Outcome::Done(pg_index_summary(&tx, "t").await)
            } else {
                Outcome::Done(String::new())
            }
        }
    };
    tx.rollback().await.expect("rollback");
    outcome
}

/// The table a CREATE TABLE in [`DDL`] names (u, or t for the IF NOT EXISTS case).
fn created_table_name(sql: &str) -> String {
    let rest = sql
        .trim_start_matches("create table ")
        .trim_start_matches("if not exists ")
        .trim_start_matches("public.");
    rest.split([' ', '('])
        .next()
        .unwrap_or_default()
        .to_string()
}

fn ringwire_ddl(sql: &str, catalog: &MemCatalog) -> Outcome {
    let (planned, _) = ringwire_plan(sql, catalog, true);
    match planned {
        Err(e) => e,
        Ok(None) => panic!("{sql}: not planned"),
        Ok(Some(TablePlan::CreateTable { def, if_not_exists })) => {
            if if_not_exists && catalog.relation_exists(&def.name) {
                // The applier sends the NOTICE and keeps the existing table.
                let existing = catalog.table(&def.name).expect("a table");
                return Outcome::Done(format!(
                    "{:?} {}",
                    ringwire_columns(&existing),
                    index_summary(&existing)
                ));
            }
            Outcome::Done(format!(
                "{:?} {}",
                ringwire_columns(&def),
                index_summary(&def)
            ))
        }
        Ok(Some(TablePlan::CreateIndex {
            table,
            index,
            if_not_exists,
        })) => {
            let mut def = (*catalog.table(&table).expect("table")).clone();
            if !(if_not_exists && catalog.relation_exists(&index.name)) {
                def.indexes.push(index);
            }
            Outcome::Done(index_summary(&def))
        }
        Ok(Some(_)) => Outcome::Done(String::new()),
    }
}

/// Runs a COPY in PostgreSQL on a connection of its own (dropped afterwards, unread output
/// and all): COPY FROM gets no rows, so nothing changes.
async fn pg_copy(sql: &str, connection_string: &str) -> Outcome {
    let (client, connection) = tokio_postgres::connect(connection_string, NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(connection);
    let outcome = if sql.contains(" from stdin") {
        match client.copy_in::<_, bytes::Bytes>(sql).await {
            Ok(sink) => {
                let mut sink = Box::pin(sink);
                sink.as_mut()
                    .finish()
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: finish: {e}"));
                Outcome::Done(String::new())
            }
            Err(e) => pg_error(&e, sql),
        }
    } else {
        match client.copy_out(sql).await {
            Ok(_) => Outcome::Done(String::new()),
            Err(e) => pg_error(&e, sql),
        }
    };
    drop(client);
    task.abort();
    outcome
}

fn ringwire_copy(sql: &str, catalog: &MemCatalog) -> Outcome {
    match ringwire_plan(sql, catalog, true).0 {
        Err(e) => e,
        Ok(Some(TablePlan::CopyFrom { .. } | TablePlan::CopyTo { .. })) => {
            Outcome::Done(String::new())
        }
        Ok(other) => panic!("{sql}: planned as {other:?}"),
    }
}

/// None if the outcomes agree. Errors agree in SQLSTATE, message and position.
fn difference(pg: &Outcome, rw: &Outcome) -> Option<String> {
    (pg != rw).then(|| format!("postgres {pg:?}\n  ringwire {rw:?}"))
}

#[test]
fn table_plans_match_postgres() {
    let pg = Postgres::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let failures = runtime.block_on(async {
        let (mut client, connection) = tokio_postgres::connect(&pg.connection_string(), NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        let mut failures = Vec::new();

        // The schema, in both systems; then the catalogs must agree.
        let mut catalog = MemCatalog::default();
        for sql in SCHEMA {
            client
                .batch_execute(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            match ringwire_plan(sql, &catalog, true).0 {
                Ok(Some(plan)) => catalog.apply(plan),
                other => panic!("{sql}: {other:?}"),
            }
        }
        let mut tables: BTreeMap<String, TableRef> = BTreeMap::new();
        for t in &catalog.tables {
            tables.insert(t.name.clone(), t.clone());
        }
        for (name, def) in &tables {
            let expected = format!(
                "{:?} {}",
                pg_columns(&client, name).await,
                pg_index_summary(&client, name).await
            );
            let actual = format!("{:?} {}", ringwire_columns(def), index_summary(def));
            if expected != actual {
                failures.push(format!(
                    "[schema] {name}\n  postgres {expected}\n  ringwire {actual}"
                ));
            }
        }

        for sql in QUERIES {
            let expected = match client.prepare(sql).await {
                Ok(stmt) => Outcome::Described {
                    params: stmt.params().iter().map(|t| t.oid()).collect(),
                    columns: stmt
                        .columns()
                        .iter()
                        .map(|c| (c.name().to_string(), c.type_().oid()))
                        .collect(),
                },
                Err(e) => pg_error(&e, sql),
            };
            let actual = match ringwire_plan(sql, &catalog, false) {
                (Ok(Some(plan)), params) => described(&plan, &params),
                (Ok(None), _) => panic!("{sql}: not planned"),
                (Err(e), _) => e,
            };
            if let Some(diff) = difference(&expected, &actual) {
                failures.push(format!("{sql}\n  {diff}"));
            }
        }

        for sql in DDL {
            let expected = pg_ddl(&mut client, sql).await;
            let actual = ringwire_ddl(sql, &catalog);
            if let Some(diff) = difference(&expected, &actual) {
                failures.push(format!("[ddl] {sql}\n  {diff}"));
            }
        }

        for sql in COPY {
            let expected = pg_copy(sql, &pg.connection_string()).await;
            let actual = ringwire_copy(sql, &catalog);
            if let Some(diff) = difference(&expected, &actual) {
                failures.push(format!("[copy] {sql}\n  {diff}"));
            }
        }
        failures
    });
    let total = tables_len() + QUERIES.len() + DDL.len() + COPY.len();
    eprintln!("{total} checks, {} differ", failures.len());
    assert!(
        failures.is_empty(),
        "{} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn tables_len() -> usize {
    SCHEMA
        .iter()
        .filter(|s| s.starts_with("create table"))
        .count()
}
