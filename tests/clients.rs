//! Stock clients against the real server: psql, pgbench (all three protocol modes and
//! pipelining) and tokio-postgres (binary formats, prepared statements, errors, cancel).

mod common;

use std::time::{Duration, Instant};

use common::ringwire::Ringwire;
use tokio_postgres::{error::SqlState, NoTls, SimpleQueryMessage};

fn psql(rw: &Ringwire, sql: &str) -> std::process::Output {
    rw.psql()
        .args(["-v", "ON_ERROR_STOP=1", "-At", "-c", sql])
        .output()
        .expect("run psql (apt-get install postgresql-client)")
}

fn psql_ok(rw: &Ringwire, sql: &str) -> String {
    let out = psql(rw, sql);
    assert!(
        out.status.success(),
        "psql -c {sql:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8")
}

#[test]
fn psql_runs_the_basics() {
    let rw = Ringwire::start(&[]);
    assert_eq!(psql_ok(&rw, "select 1"), "1\n");
    let version = psql_ok(&rw, "select version()");
    assert!(
        version.starts_with("PostgreSQL 16.0") && version.contains("ringwire"),
        "{version}"
    );
    let all = psql_ok(&rw, "show all");
    assert!(
        all.lines()
            .any(|l| l == "server_version|16.0|Shows the server version."),
        "{all}"
    );
    assert!(all.lines().any(|l| l.starts_with("TimeZone|UTC|")), "{all}");
    // psql sends the three statements as one Query; the transaction must open and close.
    assert_eq!(
        psql_ok(&rw, "begin; select 1; commit;"),
        "BEGIN\n1\nCOMMIT\n"
    );
    let out = psql(&rw, "select 1/0");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("division by zero"));
    let out = psql(&rw, "selec 1");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("syntax error at or near \"selec\""),
        "{out:?}"
    );
}

fn pgbench(rw: &Ringwire, script: &str, mode: &str) -> String {
    let dir = std::env::temp_dir().join(format!("ringwire-pgbench-{}-{mode}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("script.sql");
    std::fs::write(&file, script).unwrap();
    let file = file.to_str().unwrap();
    rw.pgbench(&[
        "-n", "-c", "16", "-j", "2", "-T", "2", "-M", mode, "-f", file,
    ])
}

#[test]
fn pgbench_select_1_in_every_protocol_mode_and_pipelined() {
    let rw = Ringwire::start(&[]);
    for mode in ["simple", "extended", "prepared"] {
        let report = pgbench(&rw, "select 1;\n", mode);
        let (processed, failed) = common::pgbench::processed_and_failed(&report);
        assert!(
            processed > 1000,
            "-M {mode}: only {processed} transactions:\n{report}"
        );
        assert_eq!(failed, 0, "-M {mode}:\n{report}");
    }
    // Pipeline mode needs the extended protocol.
    let report = pgbench(
        &rw,
        "\\startpipeline\nselect 1;\nselect 2;\nselect 3;\n\\endpipeline\n",
        "prepared",
    );
    let (processed, failed) = common::pgbench::processed_and_failed(&report);
    assert!(processed > 1000, "pipeline: {report}");
    assert_eq!(failed, 0, "pipeline: {report}");
}

async fn connect(rw: &Ringwire) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&rw.connection_string("postgres"), NoTls)
        .await
        .expect("connect");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

#[tokio::test]
async fn tokio_postgres_prepared_binary_and_errors() {
    let rw = Ringwire::start(&[]);
    let client = connect(&rw).await;

    // Binary results and parameters through a prepared statement.
    let stmt = client
        .prepare("select $1::int4 + 1, $2::text || '!', $3::float8 * 2, $4::bool")
        .await
        .unwrap();
    assert_eq!(stmt.params().len(), 4);
    let row = client
        .query_one(&stmt, &[&41i32, &"hi", &1.25f64, &true])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 42);
    assert_eq!(row.get::<_, String>(1), "hi!");
    assert_eq!(row.get::<_, f64>(2), 2.5);
    assert!(row.get::<_, bool>(3));
    // Reused many times.
    for i in 0..100i32 {
        let row = client
            .query_one(&stmt, &[&i, &"x", &0.0f64, &false])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i32>(0), i + 1);
    }
    let row = client
        .query_one("select 9223372036854775807::int8, null::text", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), i64::MAX);
    assert_eq!(row.get::<_, Option<String>>(1), None);

    // Errors carry PostgreSQL's SQLSTATEs and leave the connection usable.
    let err = client.query_one("select 1/0", &[]).await.unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::DIVISION_BY_ZERO));
    let err = client.simple_query("selec 1").await.unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::SYNTAX_ERROR));
    let err = client
        .simple_query("create view v as select 1")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED));
    assert_eq!(
        client
            .query_one("select 2", &[])
            .await
            .unwrap()
            .get::<_, i32>(0),
        2
    );

    // Several statements in one simple Query.
    let msgs = client.simple_query("select 1; select 'two'").await.unwrap();
    let values: Vec<String> = msgs
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap().to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(values, vec!["1", "two"]);
}

#[tokio::test]
async fn transactions_settings_and_backend_pid() {
    let rw = Ringwire::start(&[]);
    let mut client = connect(&rw).await;

    client
        .batch_execute("set application_name = 'clients-test'")
        .await
        .unwrap();
    let row = client
        .query_one("select current_setting('application_name')", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "clients-test");

    // A rolled-back SET is undone, as in PostgreSQL.
    let tx = client.transaction().await.unwrap();
    tx.batch_execute("set application_name = 'inside'")
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let row = client
        .query_one("show application_name", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "clients-test");

    // An error inside a transaction fails it until ROLLBACK.
    client.batch_execute("begin").await.unwrap();
    assert!(client.batch_execute("select 1/0").await.is_err());
    let err = client.batch_execute("select 1").await.unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::IN_FAILED_SQL_TRANSACTION));
    client.batch_execute("rollback").await.unwrap();
    assert_eq!(
        client
            .query_one("select 1", &[])
            .await
            .unwrap()
            .get::<_, i32>(0),
        1
    );

    // The per-shard plan cache must not serve a plan read in another TimeZone: the same text
    // gives a different instant after SET TimeZone.
    let q = "select '2024-01-01 00:00:00'::timestamptz = '2024-01-01 00:00:00+00'::timestamptz";
    for _ in 0..3 {
        assert!(client.query_one(q, &[]).await.unwrap().get::<_, bool>(0));
        let simple = client.simple_query(q).await.unwrap();
        assert!(matches!(&simple[1], SimpleQueryMessage::Row(r) if r.get(0) == Some("t")));
    }
    client
        .batch_execute("set timezone = 'Europe/Berlin'")
        .await
        .unwrap();
    assert!(!client.query_one(q, &[]).await.unwrap().get::<_, bool>(0));
    let simple = client.simple_query(q).await.unwrap();
    assert!(matches!(&simple[1], SimpleQueryMessage::Row(r) if r.get(0) == Some("f")));
    client.batch_execute("reset timezone").await.unwrap();

    // pg_backend_pid() matches BackendKeyData (what the cancel token carries).
    let pid: i32 = client
        .query_one("select pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    assert!(pid > 0);
}

#[tokio::test]
async fn cancel_reaches_the_owning_shard() {
    let rw = Ringwire::start(&["--shards", "2"]);
    // Several connections so that, with SO_REUSEPORT spreading them, cancels come in on both
    // shards' listeners for some of them.
    for _ in 0..4 {
        let client = connect(&rw).await;
        let token = client.cancel_token();
        let started = Instant::now();
        let sleeper = tokio::spawn(async move {
            client
                .simple_query("select pg_sleep(10)")
                .await
                .map(|_| client)
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        token.cancel_query(NoTls).await.unwrap();
        let err = match sleeper.await.unwrap() {
            Ok(_) => panic!("pg_sleep(10) was not cancelled"),
            Err(e) => e,
        };
        assert_eq!(err.code(), Some(&SqlState::QUERY_CANCELED));
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "cancel took {:?}",
            started.elapsed()
        );
    }
}
