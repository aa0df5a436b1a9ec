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

/// LISTEN, NOTIFY, UNLISTEN and `pg_notify` through psql, against PostgreSQL 15 and the
/// embedded compute, must print the same: a session hears itself; notifications of a
/// transaction arrive at its commit, before the next prompt, each (channel, payload) pair
/// once; a rolled-back or failed transaction sends nothing (also an implicit one, two
/// statements in one Query); LISTEN counts only once committed; PostgreSQL's errors for
/// empty and long channel names and long payloads. Before, each of these statements was
/// 0A000 "not supported".
#[test]
fn psql_listen_and_notify_print_what_postgres_prints() {
    let pg = common::postgres::Postgres::start();
    let rw = Ringwire::start(&[]);
    let script = r#"
listen ch;
notify ch, 'x';
select pg_notify('ch', 'y');
begin; notify ch, 'in tx'; notify ch, 'in tx'; notify "Ch", 'other'; notify ch, 'two'; commit;
begin; notify ch, 'rolled back'; rollback;
begin; notify ch, 'failed'; select 1/0; commit;
notify ch, 'implicit, then an error' \; select 1/0;
notify ch, 'implicit' \; select 2;
begin; listen later; notify later, 'heard at its own commit'; commit;
begin; listen never; rollback;
notify never, 'nobody';
select pg_notify('', 'x');
select pg_notify(null, 'x');
select pg_notify('ch', null);
select pg_notify(repeat('c', 64), 'x');
select pg_notify('ch', repeat('p', 8000));
select pg_notify('ch', repeat('p', 7999)) is null;
begin read only; notify ch, 'read only'; commit;
unlisten ch;
notify ch, 'after unlisten';
notify later, 'still listening';
unlisten *;
notify later, 'after unlisten *';
listen ch;
begin; notify ch, 'unlistened in the same transaction'; unlisten ch; commit;
listen ch;
discard all;
notify ch, 'after discard all';
select 'end';
"#;
    let run = |host: &str, port: u16| {
        let out = common::output_with_stdin(
            std::process::Command::new("psql")
                .args(["-X", "-a", "-h", host, "-p", &port.to_string()])
                .args(["-U", "postgres", "-d", "postgres", "-f", "-"]),
            script.as_bytes(),
        );
        // Process ids differ by nature; every notification here is the session's own.
        let pid = regex_free_pid_mask(&String::from_utf8_lossy(&out.stdout));
        (pid, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let want = run("127.0.0.1", pg.port);
    let got = run(rw.host(), rw.port);
    assert!(
        want.0.contains("\"ch\" with payload \"in tx\"") && want.1.contains("division by zero"),
        "the script did not run against PostgreSQL:\n{}\n{}",
        want.0,
        want.1
    );
    assert_eq!(got.0, want.0, "stdout: ringwire, then PostgreSQL");
    assert_eq!(got.1, want.1, "stderr: ringwire, then PostgreSQL");
}

/// "... from server process with PID 12345." → "... PID N."
fn regex_free_pid_mask(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("server process with PID ") {
            Some(at) => format!("{}server process with PID N.", &l[..at]),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A client that LISTENs and then only waits (tokio-postgres' connection stream, as
/// psycopg's `notifies()` and node-postgres' `notification` event wait) hears sessions of
/// every shard as they commit, each notification carrying its sender's process id; one sent
/// while the listener is inside a transaction block arrives after that block ends; nothing
/// after UNLISTEN. The same sequence against PostgreSQL must give the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_listener_hears_sessions_on_every_shard() {
    use common::client::{connect_on_shard, connect_to};
    let pg = common::postgres::Postgres::start();
    let rw = Ringwire::start(&["--shards", "2"]);
    let rw_conninfo = rw.connection_string("postgres");
    let mut transcripts = Vec::new();
    for server in ["postgres", "ringwire"] {
        let (listener, notifiers) = if server == "postgres" {
            let c = pg.connection_string();
            let l = common::client::listening(&c).await;
            (l, vec![connect_to(&c).await, connect_to(&c).await])
        } else {
            // The listener on shard 0 (misses kept open, as `connect_on_shard` does), one
            // notifier on each shard.
            let mut misses = Vec::new();
            let l = loop {
                let l = common::client::listening(&rw_conninfo).await;
                if common::client::shard_of(&l.0).await == 0 {
                    break l;
                }
                assert!(misses.len() < 200, "no listener landed on shard 0");
                misses.push(l);
            };
            let n0 = connect_on_shard(&rw_conninfo, 0).await;
            let n1 = connect_on_shard(&rw_conninfo, 1).await;
            (l, vec![n1, n0])
        };
        let (listener, heard) = listener;
        let mut pids = Vec::new();
        for n in &notifiers {
            let row = n.query_one("select pg_backend_pid()", &[]).await.unwrap();
            pids.push(row.get::<_, i32>(0));
        }
        let wait_for = |n| common::client::heard_lines(&heard, n);
        listener.batch_execute("listen jobs").await.unwrap();
        notifiers[0]
            .batch_execute("notify jobs, 'from the other shard'")
            .await
            .unwrap();
        // (The extended protocol, parameters bound: the implicit transaction ends at Sync.)
        notifiers[1]
            .execute(
                "select pg_notify($1, $2)",
                &[&"jobs", &"from its own shard"],
            )
            .await
            .unwrap();
        notifiers[0]
            .batch_execute("notify other, 'not listened to'")
            .await
            .unwrap();
        let mut transcript = vec![format!("{:?}", wait_for(2).await)];
        listener.batch_execute("begin; select 1").await.unwrap();
        notifiers[0]
            .batch_execute("notify jobs, 'while in a block'")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        transcript.push(format!("in the block: {}", heard.lock().unwrap().len()));
        listener.batch_execute("commit").await.unwrap();
        transcript.push(format!("{:?}", wait_for(3).await));
        listener.batch_execute("unlisten jobs").await.unwrap();
        notifiers[1]
            .batch_execute("notify jobs, 'after unlisten'")
            .await
            .unwrap();
        listener.batch_execute("select 1").await.unwrap();
        // One that arrived while the listener was in a block that then stops listening: it
        // is read after the UNLISTEN, so it is not heard.
        listener.batch_execute("listen jobs").await.unwrap();
        listener.batch_execute("begin").await.unwrap();
        notifiers[0]
            .batch_execute("notify jobs, 'unlistened before it was read'")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        listener
            .batch_execute("unlisten jobs; commit")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let heard = heard.lock().unwrap().clone();
        transcript.push(format!("at the end: {}", heard.len()));
        // Which notifier sent each: its pid, as its own pg_backend_pid() reports it.
        let senders: Vec<String> = heard
            .iter()
            .map(|(pid, _)| match pids.iter().position(|p| p == pid) {
                Some(i) => format!("notifier {i}"),
                None => format!("unknown pid {pid} (notifiers {pids:?})"),
            })
            .collect();
        transcript.push(format!("{senders:?}"));
        transcripts.push(transcript);
    }
    assert_eq!(
        transcripts[0][..2],
        [
            r#"["jobs: from the other shard", "jobs: from its own shard"]"#,
            "in the block: 2"
        ],
        "PostgreSQL: {:?}",
        transcripts[0]
    );
    assert_eq!(transcripts[1], transcripts[0], "ringwire, then PostgreSQL");
}

/// Between Execute and Sync an implicit transaction is open, and PostgreSQL holds a
/// notification until it ends: it comes with the Sync's reply, before ReadyForQuery, not while
/// the client waits mid-pipeline. Raw protocol against both servers; the tags they send must
/// be the same.
#[test]
fn a_notification_waits_for_the_end_of_an_implicit_transaction() {
    use protocol::frontend;
    use std::io::Write;
    let pg = common::postgres::Postgres::start();
    let rw = Ringwire::start(&[]);
    let rw_port = rw
        .addr()
        .rsplit_once(':')
        .unwrap()
        .1
        .parse::<u16>()
        .unwrap();
    // Every message's tag until ReadyForQuery or the `upto`th message, or until `quiet`
    // passes with nothing more.
    fn tags(stream: &mut std::net::TcpStream, upto: usize, quiet: Duration) -> String {
        let mut got = String::new();
        let mut buf = Vec::new();
        stream.set_read_timeout(Some(quiet)).unwrap();
        loop {
            while let Some((frame, n)) = protocol::wire::split_frame(&buf, 1 << 20).unwrap() {
                let tag = frame.tag;
                got.push(tag as char);
                buf.drain(..n);
                if tag == b'Z' || got.len() == upto {
                    return got;
                }
            }
            let mut chunk = [0u8; 8192];
            match common::wire::read_blocking(stream, &mut chunk) {
                Ok(0) => return got + " (closed)",
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(_) => return got,
            }
        }
    }
    let mut seen = Vec::new();
    for port in [pg.port, rw_port] {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let msg = common::wire::startup_message(&[("user", "postgres"), ("database", "postgres")]);
        s.write_all(&msg).unwrap();
        let login = tags(&mut s, usize::MAX, Duration::from_secs(10));
        s.write_all(&common::wire::simple_query("listen mid"))
            .unwrap();
        let listen = tags(&mut s, usize::MAX, Duration::from_secs(10));
        assert!(login.ends_with('Z') && listen == "CZ", "{login} {listen}");
        let mut msg = Vec::new();
        frontend::encode_parse(&mut msg, "", "select 1", &[]);
        frontend::encode_bind(&mut msg, "", "", &[], &[], &[]);
        frontend::encode_execute(&mut msg, "", 0);
        frontend::encode_empty(&mut msg, b'H');
        s.write_all(&msg).unwrap();
        // (ParseComplete, BindComplete, DataRow, CommandComplete: however slow the machine.)
        let before = tags(&mut s, 4, Duration::from_secs(10));
        let notify = std::process::Command::new("psql")
            .args([
                "-X",
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "postgres",
            ])
            .args(["-d", "postgres", "-c", "notify mid, 'x'"])
            .output()
            .unwrap();
        assert!(notify.status.success(), "{notify:?}");
        let during = tags(&mut s, usize::MAX, Duration::from_millis(500));
        let mut msg = Vec::new();
        frontend::encode_empty(&mut msg, b'S');
        s.write_all(&msg).unwrap();
        let at_sync = tags(&mut s, usize::MAX, Duration::from_secs(10));
        seen.push(format!(
            "before: {before}; during: {during}; at Sync: {at_sync}"
        ));
    }
    assert_eq!(seen[0], "before: 12DC; during: ; at Sync: AZ", "PostgreSQL");
    assert_eq!(seen[1], seen[0], "ringwire, then PostgreSQL");
}

/// `now()` is the transaction's start and `statement_timestamp()` the statement message's, as
/// in PostgreSQL: the same `now()` across a block's statements, one statement time for every
/// statement of one Query's text, a new one for every Execute (a resumed portal's too) and
/// none shared between Executes before one Sync. Each case's timestamps, 20 ms apart where
/// PostgreSQL would tell them apart, are reduced to the pattern of which ones are equal ("a b
/// a c"), and the patterns must be PostgreSQL's. (ringwire used to give `now()` the
/// statement's time, so a block's `now()` moved from statement to statement.)
#[test]
fn now_and_statement_timestamp_are_the_transactions_and_the_messages() {
    use protocol::frontend;
    let pg = common::postgres::Postgres::start();
    let rw = Ringwire::start(&["--shards", "1"]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pause = || tokio::time::sleep(Duration::from_millis(20));
    let stamps = "select now()::text, statement_timestamp()::text";
    let mut seen = Vec::new();
    for (conninfo, port) in [
        (pg.connection_string(), pg.port),
        (rw.connection_string("postgres"), rw.port),
    ] {
        let cases = rt.block_on(async {
            let mut c = common::client::connect_to(&conninfo).await;
            let mut cases = Vec::new();
            let texts = |msgs| -> Vec<String> {
                common::client::text_rows(msgs)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter(|v| !v.is_empty())
                    .collect()
            };
            // A block: BEGIN, then two statements apart.
            c.simple_query("begin").await.unwrap();
            pause().await;
            let mut block = texts(c.simple_query(stamps).await.unwrap());
            pause().await;
            block.extend(texts(c.simple_query(stamps).await.unwrap()));
            c.simple_query("commit").await.unwrap();
            cases.push(("block", block));
            // One Query's text, with a pause and a COMMIT inside it.
            let sql = format!(
                "{stamps}; select pg_sleep(0.02); begin; {stamps}; commit; {stamps}, \
                 current_timestamp::text"
            );
            cases.push(("one Query", texts(c.simple_query(&sql).await.unwrap())));
            // A portal fetched in three Executes inside a block.
            c.batch_execute(
                "create table stamps (id int4); insert into stamps values (1), (2), (3)",
            )
            .await
            .unwrap();
            let tx = c.transaction().await.unwrap();
            let portal = tx
                .bind(
                    "select now()::text, statement_timestamp()::text from stamps",
                    &[],
                )
                .await
                .unwrap();
            let mut fetched = Vec::new();
            for _ in 0..3 {
                pause().await;
                for row in tx.query_portal(&portal, 1).await.unwrap() {
                    fetched.push(row.get::<_, String>(0));
                    fetched.push(row.get::<_, String>(1));
                }
            }
            tx.commit().await.unwrap();
            cases.push(("portal", fetched));
            cases
        });
        let mut seen_here: Vec<String> = cases
            .into_iter()
            .map(|(name, values)| format!("{name}: {}", equal_pattern(&values)))
            .collect();
        // PostgreSQL starts this implicit transaction at the first Parse, microseconds before
        // the first Execute; ringwire at that Execute. So the pattern is taken of the two
        // now() values and of the two statement times apart.
        let mut msg = Vec::new();
        for sql in [stamps, "select pg_sleep(0.02)", stamps] {
            frontend::encode_parse(&mut msg, "", sql, &[]);
            frontend::encode_bind(&mut msg, "", "", &[], &[], &[]);
            frontend::encode_execute(&mut msg, "", 0);
        }
        frontend::encode_empty(&mut msg, b'S');
        let v = raw_values(port, &msg, 1);
        assert_eq!(v.len(), 4, "{v:?}");
        seen_here.push(format!(
            "Executes before one Sync, now(): {}; statement_timestamp(): {}",
            equal_pattern(&[v[0].clone(), v[2].clone()]),
            equal_pattern(&[v[1].clone(), v[3].clone()])
        ));
        // Two Queries in one write: the second starts when the first has ended, so its
        // statement time is after the first's last clock read.
        let mut msg = Vec::new();
        frontend::encode_query(&mut msg, "select pg_sleep(0.02), clock_timestamp()::text");
        frontend::encode_query(&mut msg, "select statement_timestamp()::text");
        let v = raw_values(port, &msg, 2);
        assert_eq!(v.len(), 2, "{v:?}");
        seen_here.push(format!(
            "a queued Query starts after the one before it ended: {}",
            sortable_time(&v[1]) > sortable_time(&v[0])
        ));
        seen.push(seen_here);
    }
    assert_eq!(
        seen[0],
        [
            "block: a b a c",
            "one Query: a a a a a a a",
            "portal: a b a c a d",
            "Executes before one Sync, now(): a a; statement_timestamp(): a b",
            "a queued Query starts after the one before it ended: true",
        ],
        "PostgreSQL"
    );
    assert_eq!(seen[1], seen[0], "ringwire, then PostgreSQL");
}

/// Raw protocol, in UTC: a startup, and once it is done (so the server waits for them)
/// `messages` in one write; every non-empty column value of the DataRows until `readies`
/// ReadyForQuery after the startup's.
fn raw_values(port: u16, messages: &[u8], readies: usize) -> Vec<String> {
    use protocol::backend::BackendMessage;
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let msg = common::wire::startup_message(&[
        ("user", "postgres"),
        ("database", "postgres"),
        ("TimeZone", "UTC"),
    ]);
    s.write_all(&msg).unwrap();
    let (mut buf, mut values, mut ready) = (Vec::new(), Vec::new(), 0);
    loop {
        while let Some((frame, n)) = protocol::wire::split_frame(&buf, 1 << 20).unwrap() {
            assert_ne!(frame.tag, b'E', "{:?}", String::from_utf8_lossy(frame.body));
            if frame.tag == b'Z' {
                ready += 1;
                if ready == 1 {
                    s.write_all(messages).unwrap();
                }
            }
            if let Ok(BackendMessage::DataRow { values: row }) = BackendMessage::parse(frame) {
                // Every value here is text; a void (pg_sleep) is empty.
                let row = row.into_iter().flatten().filter(|v| !v.is_empty());
                values.extend(row.map(|v| String::from_utf8(v.to_vec()).unwrap()));
            }
            buf.drain(..n);
        }
        if ready == 1 + readies {
            break;
        }
        let mut chunk = [0u8; 8192];
        let n = common::wire::read_blocking(&mut s, &mut chunk).unwrap();
        assert!(n > 0, "the server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
    }
    values
}

/// A `timestamptz` as PostgreSQL prints it in UTC (`2026-11-24 06:42:45.8282+00`, trailing
/// zeros of the fraction dropped), with the fraction padded back so that texts order as times.
fn sortable_time(text: &str) -> String {
    let text = text.trim_end_matches("+00");
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    format!("{whole}.{fraction:0<6}")
}

/// "a b a c" for [x, y, x, z]: which values are equal, in order of first appearance.
fn equal_pattern(values: &[String]) -> String {
    let mut firsts: Vec<&String> = Vec::new();
    let letters: Vec<String> = values
        .iter()
        .map(|v| {
            let i = firsts.iter().position(|f| *f == v).unwrap_or_else(|| {
                firsts.push(v);
                firsts.len() - 1
            });
            ((b'a' + i as u8) as char).to_string()
        })
        .collect();
    letters.join(" ")
}
