//! Property tests for the SQL front: whatever statement text a client sends, sqlparser, literal
//! lifting, the planner, constant folding and constant evaluation return a plan or an error the
//! client can be sent — never a panic. The same entry point, `ringwire::fuzzing::sql_plan`, is
//! the `sql_plan` fuzz target (`fuzz/`), so CI runs on every change what a fuzzing session runs
//! for hours: the captured seeds, the recorded findings, and a bounded number of generated and
//! mutated statements (`PROPTEST_CASES` raises it for a longer run).

use std::path::Path;
use std::sync::LazyLock;

use proptest::collection::vec;
use proptest::prelude::*;
use ringwire::fuzzing::sql_plan;

/// Every file under `fuzz/<dir>/sql_plan/`.
fn fuzz_inputs(dir: &str) -> Vec<Vec<u8>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(dir)
        .join("sql_plan");
    let Ok(entries) = std::fs::read_dir(&path) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .map(|e| e.expect("readable fuzz dir").path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read(f).expect("readable fuzz input"))
        .collect()
}

/// Statement texts captured from psql, pgbench and tokio-postgres (`scripts/capture.py`).
static SEEDS: LazyLock<Vec<String>> = LazyLock::new(|| {
    fuzz_inputs("seeds")
        .into_iter()
        .map(|s| String::from_utf8(s).expect("seeds are statement text"))
        .collect()
});

#[test]
fn captured_statements_plan_and_findings_stay_fixed() {
    assert!(SEEDS.len() >= 10, "only {} sql_plan seeds", SEEDS.len());
    let mut planned = 0;
    for seed in SEEDS.iter() {
        planned += sql_plan(seed.as_bytes()).planned;
    }
    // Real clients' statements mostly plan (psql's catalog queries are the exception: no
    // pg_catalog here).
    assert!(
        planned as usize >= SEEDS.len() / 2,
        "only {planned} plans from {} captured statements",
        SEEDS.len()
    );
    for input in fuzz_inputs("regressions") {
        sql_plan(&input);
    }
}

/// The harness plans for real: pgbench's statements plan on both paths, a syntax error and an
/// unknown table are errors, and constant SELECTs are evaluated (1/0 fails at evaluation).
#[test]
fn the_harness_plans_and_evaluates() {
    let ok = sql_plan(b"select abalance from pgbench_accounts where aid = 42");
    assert_eq!((ok.planned, ok.errors), (2, 0), "simple and extended paths");
    let ok = sql_plan(b"update pgbench_accounts set abalance = abalance + $1 where aid = $2");
    assert_eq!(
        (ok.planned, ok.errors),
        (1, 1),
        "$n plans only on the extended path (a simple Query gets 42P02)"
    );
    let bad = sql_plan(b"selec 1");
    assert_eq!((bad.planned, bad.errors), (0, 1));
    let missing = sql_plan(b"select * from no_such_table");
    assert_eq!((missing.planned, missing.errors), (0, 2));
    let div = sql_plan(b"select 1/0");
    assert!(div.errors >= 1, "1/0 was not evaluated: {div:?}");
    let types = sql_plan(
        b"select id, b, n, jb, a, ta from t where u = 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
    );
    assert_eq!(types.errors, 0, "{types:?}");
}

/// SQL-ish tokens: keywords, the catalog's names, literals of every kind, operators, casts.
const TOKENS: &[&str] = &[
    "select",
    "from",
    "where",
    "and",
    "or",
    "not",
    "insert",
    "into",
    "values",
    "update",
    "set",
    "delete",
    "returning",
    "order",
    "by",
    "group",
    "having",
    "limit",
    "offset",
    "as",
    "is",
    "null",
    "true",
    "false",
    "in",
    "between",
    "like",
    "case",
    "when",
    "then",
    "else",
    "end",
    "distinct",
    "count(*)",
    "sum(",
    "min(",
    "max(",
    "avg(",
    "coalesce(",
    "length(",
    "repeat(",
    "now()",
    "cast(",
    "begin",
    "commit",
    "rollback",
    "create",
    "table",
    "index",
    "on",
    "drop",
    "alter",
    "add",
    "primary",
    "key",
    "unique",
    "show",
    "reset",
    "all",
    "copy",
    "to",
    "stdin",
    "pgbench_accounts",
    "pgbench_branches",
    "pgbench_tellers",
    "pgbench_history",
    "t",
    "ringwire.shard_stats",
    "aid",
    "bid",
    "tid",
    "abalance",
    "delta",
    "mtime",
    "id",
    "b",
    "i2",
    "i4",
    "i8",
    "f4",
    "f8",
    "n",
    "s",
    "v",
    "c",
    "by",
    "d",
    "tm",
    "ts",
    "tz",
    "iv",
    "u",
    "j",
    "jb",
    "a",
    "ta",
    "0",
    "1",
    "-1",
    "2147483647",
    "2147483648",
    "-2147483648",
    "9223372036854775807",
    "9223372036854775808",
    "1e308",
    "1e-400",
    "0.5",
    "'nan'",
    "'infinity'",
    "''",
    "'x'",
    "'1'",
    "'2026-01-01'",
    "'24:00:00'",
    "'1 day'",
    "'{1,2}'",
    "'{\"a\":1}'",
    "'\\x00ff'",
    "E'\\\\'",
    "$1",
    "$2",
    "$0",
    "$99999",
    "::int",
    "::int2",
    "::int8",
    "::text",
    "::numeric",
    "::float4",
    "::date",
    "::timestamptz",
    "::interval",
    "::json",
    "::jsonb",
    "::bytea",
    "::uuid",
    "::int[]",
    "::bool",
    "::name",
    "(",
    ")",
    ",",
    ";",
    "*",
    "+",
    "-",
    "/",
    "%",
    "^",
    "||",
    "=",
    "<>",
    "<",
    ">",
    "<=",
    ">=",
    "[1]",
    "[0:2]",
    "->",
    "->>",
    "@>",
    "'",
    "\"",
    "--",
    "/*",
    "*/",
    "e'",
    "$$",
    "\u{e9}",
    "\u{1F600}",
];

fn token_soup() -> impl Strategy<Value = String> {
    vec(proptest::sample::select(TOKENS), 1..24).prop_map(|t| t.join(" "))
}

/// A statement shaped like the ones clients send, with a hole filled by tokens.
fn shaped() -> impl Strategy<Value = String> {
    let hole = vec(proptest::sample::select(TOKENS), 1..6).prop_map(|t| t.join(" "));
    (
        proptest::sample::select(
            &[
                "select {} from pgbench_accounts where aid = 1",
                "select aid from pgbench_accounts where {}",
                "select {}",
                "select 1 where {}",
                "update pgbench_accounts set abalance = {} where aid = 5",
                "insert into t (id, {}) values (1, 2)",
                "insert into t (id, n) values ({}, 1.5)",
                "delete from t where {} returning *",
                "select * from t order by {} limit 3",
                "select count(*) from t group by {}",
                "set {} = 1",
                "show {}",
                "create table x ({} int)",
                "begin isolation level {}",
            ][..],
        ),
        hole,
    )
        .prop_map(|(shape, hole)| shape.replacen("{}", &hole, 1))
}

/// A captured statement with some characters replaced, inserted or removed (at character
/// boundaries: the protocol only carries valid UTF-8).
fn mutated_seed() -> impl Strategy<Value = String> {
    (
        any::<prop::sample::Index>(),
        vec(
            (
                any::<prop::sample::Index>(),
                0u8..3,
                proptest::sample::select(TOKENS),
            ),
            1..4,
        ),
    )
        .prop_map(|(seed, edits)| {
            if SEEDS.is_empty() {
                return String::new();
            }
            let mut chars: Vec<char> = SEEDS[seed.index(SEEDS.len())].chars().collect();
            for (at, kind, token) in edits {
                let at = at.index(chars.len() + 1);
                match kind {
                    0 => {
                        chars.splice(at..at, token.chars());
                    }
                    1 if at < chars.len() => {
                        let end = (at + token.len()).min(chars.len());
                        chars.splice(at..end, token.chars());
                    }
                    _ if at < chars.len() => {
                        chars.remove(at);
                    }
                    _ => {}
                }
            }
            chars.into_iter().collect()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn token_soup_never_panics_the_sql_front(sql in token_soup()) {
        sql_plan(sql.as_bytes());
    }

    #[test]
    fn shaped_statements_never_panic_the_sql_front(sql in shaped()) {
        sql_plan(sql.as_bytes());
    }

    #[test]
    fn mutated_captured_statements_never_panic_the_sql_front(sql in mutated_seed()) {
        sql_plan(sql.as_bytes());
    }

    #[test]
    fn arbitrary_text_never_panics_the_sql_front(sql in "\\PC{0,64}") {
        sql_plan(sql.as_bytes());
    }
}

/// Padding to a length the server cannot hold is refused up front, as PostgreSQL refuses it,
/// instead of building a multi-gigabyte string on the shard (found reading the SQL functions
/// while writing the fuzz target).
#[test]
fn padding_to_a_huge_length_is_refused_quickly() {
    let started = std::time::Instant::now();
    for sql in [
        "select lpad('', 2147483647)",
        "select rpad('x', 2147483647, 'yz')",
        "select lpad('a', 300000000)",
    ] {
        let out = sql_plan(sql.as_bytes());
        assert!(out.errors >= 1, "{sql} was not refused: {out:?}");
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "refusing took {:?}",
        started.elapsed()
    );
}
