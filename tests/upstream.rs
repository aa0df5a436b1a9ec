//! Upstream mode (`--upstream`): ringwire in front of a real PostgreSQL 15, with real clients
//! (tokio-postgres, psql, pgbench). Small pools (`--upstream-pool-size 1`, one or two shards)
//! make clients share upstream connections, which is what these tests are about: prepared
//! statements, settings, transactions, cancels and failures must behave per client as if each
//! had PostgreSQL to itself.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::client::{connect, connect_to};
use common::postgres::Postgres;
use common::ringwire::Ringwire;
use tokio_postgres::{error::SqlState, types::Type, Client, NoTls, SimpleQueryMessage};

fn start(pg: &Postgres, shards: &str, pool: &str) -> Ringwire {
    start_with(pg, shards, pool, &[])
}

/// [`start`] with more flags.
fn start_with(pg: &Postgres, shards: &str, pool: &str, extra: &[&str]) -> Ringwire {
    let url = pg.url();
    let mut args = vec![
        "--shards",
        shards,
        "--upstream",
        &url,
        "--upstream-pool-size",
        pool,
    ];
    args.extend_from_slice(extra);
    Ringwire::start(&args)
}

async fn direct(pg: &Postgres) -> Client {
    connect_to(&pg.connection_string()).await
}

fn first_value(messages: &[SimpleQueryMessage]) -> String {
    messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap_or("NULL").to_string()),
            _ => None,
        })
        .expect("a row")
}

async fn show(client: &Client, name: &str) -> String {
    first_value(&client.simple_query(&format!("show {name}")).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_and_extended_queries_with_statements_shared_across_pooled_connections() {
    let pg = Postgres::start();
    // One shard, one upstream connection: every client below runs on the same upstream
    // connection, so their statement names must be mapped apart.
    let rw = start(&pg, "1", "1");
    let a = connect(&rw).await;
    let b = connect(&rw).await;
    a.batch_execute(
        "create table kv (k int primary key, v text); insert into kv values (1, 'one'), (2, 'two')",
    )
    .await
    .unwrap();
    // Both clients' drivers name their first statement "s0": different texts, one name.
    let sa = a.prepare("select v from kv where k = $1").await.unwrap();
    let sb = b.prepare("select k, v from kv order by k").await.unwrap();
    for _ in 0..3 {
        let row = a.query_one(&sa, &[&2i32]).await.unwrap();
        assert_eq!(row.get::<_, &str>(0), "two");
        let rows = b.query(&sb, &[]).await.unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].get::<_, i32>(0), 2);
    }
    // The same text prepared by a third client reuses the shard's upstream statement.
    let c = connect(&rw).await;
    let sc = c.prepare("select v from kv where k = $1").await.unwrap();
    assert_eq!(
        c.query_one(&sc, &[&1i32]).await.unwrap().get::<_, &str>(0),
        "one"
    );
    // Closing a statement on one client leaves the others' working.
    drop(sc);
    assert_eq!(
        a.query_one(&sa, &[&1i32]).await.unwrap().get::<_, &str>(0),
        "one"
    );
    // Errors: a bad statement fails alone, the session goes on; parameter types flow through.
    let err = a.query("select * from nope", &[]).await.unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::UNDEFINED_TABLE));
    let n: i64 = a
        .query_one("select $1::int8 * 2", &[&21i64])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 42);
    // Results match PostgreSQL's own, binary formats included.
    let d = direct(&pg).await;
    let q = "select k, v, k::float8 / 3, now() - now() from kv order by k";
    let via: Vec<(i32, String, f64)> = a
        .query(q, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let own: Vec<(i32, String, f64)> = d
        .query(q, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(via, own);
    // The statement upstream is prepared once per connection, under ringwire's name.
    let names: i64 = first_value(
        &a.simple_query("select count(*) from pg_prepared_statements where name like 'ringwire_%'")
            .await
            .unwrap(),
    )
    .parse()
    .unwrap();
    assert!(names >= 2, "{names} ringwire statements upstream");
}

/// The relay tells a user's function from a built-in by `src/upstream/pg_catalog_functions.txt`
/// (`classify::runs_user_code`): it must hold every built-in of the PostgreSQL the tests run,
/// or calls of the missing ones would each cost a settings replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_function_list_is_postgres_own() {
    let pg = Postgres::start();
    let listed: std::collections::HashSet<&str> =
        include_str!("../src/upstream/pg_catalog_functions.txt")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect();
    let rows = direct(&pg)
        .await
        .query(
            "select distinct proname::text from pg_catalog.pg_proc \
             where pronamespace = 'pg_catalog'::regnamespace",
            &[],
        )
        .await
        .unwrap();
    let missing: Vec<String> = rows
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|n| !listed.contains(n.as_str()))
        .collect();
    assert!(rows.len() > 2000, "{} names", rows.len());
    assert!(
        missing.is_empty(),
        "not in pg_catalog_functions.txt (see scripts/pg_catalog_functions.sh): {missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_set_never_leaks_and_a_committed_one_follows_its_client() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", "1");
    let a = connect(&rw).await;
    let b = connect(&rw).await;
    let default = show(&b, "statement_timeout").await;
    a.batch_execute("begin; set statement_timeout = '1234s'; rollback")
        .await
        .unwrap();
    assert_eq!(show(&a, "statement_timeout").await, default);
    assert_eq!(show(&b, "statement_timeout").await, default);
    // A failed block's SET is rolled back too.
    a.batch_execute("begin; set statement_timeout = '99s'")
        .await
        .unwrap();
    assert!(a.batch_execute("select 1/0").await.is_err());
    a.batch_execute("commit").await.unwrap();
    assert_eq!(show(&a, "statement_timeout").await, default);
    // A committed SET stays with its client, on whatever connection it runs next, and never
    // reaches the other client on the same upstream connection.
    a.batch_execute("set statement_timeout = '4321s'")
        .await
        .unwrap();
    a.batch_execute("begin; set search_path = pg_catalog, public; commit")
        .await
        .unwrap();
    for _ in 0..3 {
        assert_eq!(show(&b, "statement_timeout").await, default);
        assert_eq!(show(&a, "statement_timeout").await, "4321s");
        assert_eq!(show(&a, "search_path").await, "pg_catalog, public");
        assert_eq!(show(&b, "search_path").await, "\"$user\", public");
    }
    a.batch_execute("reset statement_timeout").await.unwrap();
    assert_eq!(show(&a, "statement_timeout").await, default);
    assert_eq!(show(&a, "search_path").await, "pg_catalog, public");
    // Startup parameters are the client's own defaults.
    let c = connect_to(&format!(
        "{} application_name=upstream-test options='-c work_mem=7MB'",
        rw.connection_string("postgres")
    ))
    .await;
    assert_eq!(show(&c, "application_name").await, "upstream-test");
    assert_eq!(show(&c, "work_mem").await, "7MB");
    assert_ne!(show(&b, "work_mem").await, "7MB");
    // A list given at startup is a list (`SET search_path TO 'a,b'` would name one schema
    // "a,b"), as PostgreSQL itself reads it; and so is a value with a quote in it.
    let startup = " options='-c search_path=pg_catalog,public' application_name=O\\'Brien";
    let through = connect_to(&format!("{}{startup}", rw.connection_string("postgres"))).await;
    let at_pg = connect_to(&format!("{}{startup}", pg.connection_string())).await;
    for name in ["search_path", "application_name"] {
        assert_eq!(
            show(&through, name).await,
            show(&at_pg, name).await,
            "{name}"
        );
    }
    assert_eq!(show(&through, "search_path").await, "pg_catalog,public");
    assert_eq!(show(&through, "application_name").await, "O'Brien");
}

/// `BEGIN; SET a; SAVEPOINT s; [SET a again;] ROLLBACK TO s; COMMIT` keeps the first value, as
/// at PostgreSQL, with the savepoint statements sent as Queries or over the extended protocol
/// (pgjdbc's `setSavepoint` and `autosave` send them so). ROLLBACK TO's tag is `ROLLBACK`,
/// which marked the transaction rolled back: before, the commit then dropped every SET of it
/// from what the session replays, and the next statement ran with the server's default.
/// Now the session keeps its connection, which has the settings PostgreSQL kept (and a later
/// rolled-back SET does not make it replay over them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_before_a_savepoint_outlives_rollback_to() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", "2");
    let at_pg = direct(&pg).await;
    for extended in [false, true] {
        for again in [false, true] {
            let through = connect(&rw).await;
            for client in [&at_pg, &through] {
                client
                    .batch_execute("begin; set work_mem = '5MB'")
                    .await
                    .unwrap();
                let mut statements = vec!["savepoint s", "rollback to savepoint s"];
                if again {
                    statements.insert(1, "set work_mem = '6MB'");
                }
                for sql in statements {
                    if extended && !sql.starts_with("set") {
                        client.execute(sql, &[]).await.unwrap();
                    } else {
                        client.batch_execute(sql).await.unwrap();
                    }
                }
                client.batch_execute("commit").await.unwrap();
                // A later transaction whose SET rolls back changes nothing of that.
                client
                    .batch_execute("begin; set statement_timeout = '1s'; rollback")
                    .await
                    .unwrap();
            }
            let case = format!("extended: {extended}, set after the savepoint: {again}");
            assert_eq!(show(&at_pg, "work_mem").await, "5MB", "{case}");
            for _ in 0..3 {
                assert_eq!(show(&through, "work_mem").await, "5MB", "{case}");
            }
            at_pg.batch_execute("reset work_mem").await.unwrap();
        }
    }
    let other = connect(&rw).await;
    assert_ne!(show(&other, "work_mem").await, "5MB");
}

/// A `SET` sent as a prepared statement (pgjdbc's `Statement.execute`, pgx, Npgsql and
/// tokio-postgres's `execute` send every statement so, and Hikari's `connectionInitSql`
/// runs one on each connection) is recorded when its Execute completes, as a Query's SET is:
/// it follows its client to whatever connection it runs on next, never reaches another
/// client, and rolls back with its transaction, as at PostgreSQL (each step is compared with
/// PostgreSQL directly). Before, it pinned the session to its upstream connection for good:
/// with a pool of one, every other client then waited for a connection until it failed
/// with 53300.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_sent_as_a_prepared_statement_follows_its_client_and_pins_nothing() {
    let pg = Postgres::start();
    // One upstream connection, and a short wait for it: a pinned session would hold it.
    let rw = start_with(&pg, "1", "1", &["--upstream-wait-timeout-secs", "2"]);
    let at_pg = direct(&pg).await;
    let through = connect(&rw).await;
    let other = connect(&rw).await;
    let default = show(&other, "work_mem").await;
    let steps: &[(&[&str], &str)] = &[
        // Autocommit, unnamed statement.
        (&["set work_mem = '5MB'"], "5MB"),
        (&["reset work_mem"], "4MB"),
        // In a transaction that rolls back: undone.
        (&["set work_mem = '6MB'"], "6MB"),
        (&["begin", "set work_mem = '7MB'", "rollback"], "6MB"),
        // In one that commits, with COMMIT prepared while the SET is pending (pgjdbc's).
        (&["begin", "set work_mem = '8MB'", "commit"], "8MB"),
        // A failed transaction's SET is rolled back too.
        (&["begin", "set work_mem = '9MB'", "select 1/0"], "8MB"),
        // Undone by ROLLBACK TO, kept when before the savepoint (the session keeps its
        // connection from here: a SET after a savepoint pins it).
        (
            &[
                "begin",
                "set work_mem = '10MB'",
                "savepoint s",
                "set work_mem = '11MB'",
                "rollback to savepoint s",
                "commit",
            ],
            "10MB",
        ),
    ];
    // A named statement, run again after the setting changed.
    let set = through
        .prepare("set statement_timeout = '77s'")
        .await
        .unwrap();
    through.execute(&set, &[]).await.unwrap();
    through
        .batch_execute("set statement_timeout = '1s'")
        .await
        .unwrap();
    through.execute(&set, &[]).await.unwrap();
    assert_ne!(show(&other, "statement_timeout").await, "77s");
    assert_eq!(show(&through, "statement_timeout").await, "77s");
    // A statement prepared after a SET its transaction has not committed yet is analysed
    // under that setting (a typed literal is read by DateStyle then): its upstream statement
    // is the one for those settings, never handed to a client with others. (Before, the
    // session was pinned here.)
    let date = "select '01/02/2003'::date::text";
    // (A client with the same settings as `other` until then.)
    let fresh = connect(&rw).await;
    for client in [&at_pg, &fresh] {
        client
            .batch_execute("begin; set datestyle = 'ISO, DMY'")
            .await
            .unwrap();
        let dmy = client.prepare(date).await.unwrap();
        let got: String = client.query_one(&dmy, &[]).await.unwrap().get(0);
        assert_eq!(got, "2003-02-01");
        client
            .batch_execute("commit; reset datestyle")
            .await
            .unwrap();
    }
    let mdy = other.prepare(date).await.unwrap();
    let got: String = other.query_one(&mdy, &[]).await.unwrap().get(0);
    assert_eq!(got, "2003-01-02");
    for (i, (statements, expected)) in steps.iter().enumerate() {
        for client in [&at_pg, &through] {
            for sql in *statements {
                if client.execute(*sql, &[]).await.is_err() {
                    client.batch_execute("rollback").await.unwrap();
                }
            }
            assert_eq!(show(client, "work_mem").await, *expected, "step {i}");
        }
        if i < steps.len() - 1 {
            // Unpinned: the other client gets the one connection at once, with its own
            // settings; then `through` gets it back with its own.
            let started = Instant::now();
            assert_eq!(show(&other, "work_mem").await, default, "step {i}");
            assert!(started.elapsed() < Duration::from_secs(1), "step {i}");
            assert_eq!(show(&through, "work_mem").await, *expected, "step {i}");
        }
    }
}

/// What the review of the first version of the above found. A SET whose Bind and Execute
/// arrive in different writes is recorded (before, the ReadyForQuery of a Query earlier in
/// the first write dropped what the Bind noted, and the SET reached the next client on the
/// connection); a statement parsed after a SET that has not answered yet (no Sync after its
/// Execute) is never handed to a client with other settings; and neither is a statement
/// re-prepared on another connection after the settings it was parsed under went away (a
/// rolled-back transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_set_split_across_writes_is_recorded_and_keys_what_follows() {
    use protocol::frontend::{encode_bind, encode_empty, encode_execute, encode_parse};
    let pg = Postgres::start();
    let rw = start(&pg, "1", "1");
    let other = connect(&rw).await;
    let date = "select '01/02/2003'::date::text";
    // Bind in one write (behind a Query), Execute in the next.
    let mut a = raw_login(&rw);
    let mut first = protocol_query("select 1");
    encode_parse(&mut first, "", "set work_mem = '77MB'", &[]);
    encode_bind(&mut first, "", "", &[], &[], &[]);
    encode_empty(&mut first, b'H');
    raw_exchange_until(&mut a, &first, b'2', 1);
    let mut second = Vec::new();
    encode_execute(&mut second, "", 0);
    encode_empty(&mut second, b'S');
    raw_exchange(&mut a, &second, 1);
    assert_ne!(show(&other, "work_mem").await, "77MB");
    let shown = raw_exchange(&mut a, &protocol_query("show work_mem"), 1);
    assert!(shown.contains(&(b'D', Some("77MB".into()))), "{shown:?}");
    // A SET with no Sync after it, then a Parse in the next write.
    let mut first = Vec::new();
    encode_parse(&mut first, "", "set datestyle = 'ISO, DMY'", &[]);
    encode_bind(&mut first, "", "", &[], &[], &[]);
    encode_execute(&mut first, "", 0);
    std::io::Write::write_all(&mut a, &first).unwrap();
    // (Nothing answers it: a pause, so that ringwire reads the next write apart. Read with
    // it, the Parse would follow a SET of its own batch, a case that pins as well.)
    std::thread::sleep(Duration::from_millis(300));
    let mut second = Vec::new();
    encode_parse(&mut second, "d", date, &[]);
    encode_bind(&mut second, "", "d", &[], &[], &[]);
    encode_execute(&mut second, "", 0);
    encode_empty(&mut second, b'S');
    let got = raw_exchange(&mut a, &second, 1);
    assert!(got.contains(&(b'D', Some("2003-02-01".into()))), "{got:?}");
    // (Where it was analysed was not known when it was parsed: A kept its connection, which
    // closes with it.) B logs in as A did, so that only the DateStyle tells them apart.
    drop(a);
    let mut b = raw_login(&rw);
    let mut run = Vec::new();
    encode_parse(&mut run, "d", date, &[]);
    encode_bind(&mut run, "", "d", &[], &[], &[]);
    encode_execute(&mut run, "", 0);
    encode_empty(&mut run, b'S');
    let got = raw_exchange(&mut b, &run, 1);
    assert!(got.contains(&(b'D', Some("2003-01-02".into()))), "{got:?}");

    // Parsed in a transaction that rolls back, then bound on a connection that lacks it.
    let rw = start(&pg, "1", "2");
    let a = connect(&rw).await;
    a.batch_execute("begin; set datestyle = 'ISO, DMY'")
        .await
        .unwrap();
    let parsed = a.prepare(date).await.unwrap();
    a.batch_execute("rollback").await.unwrap();
    // The connection A gave back last is held, so A's next statement opens another.
    let holder = connect(&rw).await;
    holder.batch_execute("begin").await.unwrap();
    a.query_one(&parsed, &[]).await.unwrap();
    // Given back last: C with DMY committed is served there, and its statement must be
    // analysed under DMY.
    let c = connect(&rw).await;
    c.batch_execute("set datestyle = 'ISO, DMY'").await.unwrap();
    let dmy = c.prepare(date).await.unwrap();
    let got: String = c.query_one(&dmy, &[]).await.unwrap().get(0);
    assert_eq!(got, "2003-02-01");
    holder.batch_execute("commit").await.unwrap();
}

/// The replies `exchanges` gets on a raw connection to PostgreSQL directly and on one through
/// `rw` (each a list of [`raw_exchange`]s), which must be the same; PostgreSQL's, flattened.
fn same_replies_as_postgres(
    pg: &Postgres,
    rw: &Ringwire,
    mut exchanges: impl FnMut(&mut std::net::TcpStream) -> Vec<Vec<(u8, Option<String>)>>,
) -> Vec<(u8, Option<String>)> {
    let at_pg = exchanges(&mut raw_login_at(&format!("127.0.0.1:{}", pg.port)));
    let through = exchanges(&mut raw_login(rw));
    assert_eq!(through, at_pg, "ringwire (left) vs PostgreSQL (right)");
    at_pg.concat()
}

/// A client's Parse that fails, or that PostgreSQL skips after an earlier error of its batch,
/// makes no statement, and a Close it skips closes none: the same messages through ringwire
/// (pool of one, so that a statement another client prepared is answered from the cache) and
/// at PostgreSQL directly must get the same replies. Before, ringwire recorded the statement
/// when it relayed the Parse: a driver that prepares under the same name again after a
/// failure (node-postgres's named queries, pgx's statement cache) got 42P05 "already exists"
/// forever, and a statement the server skipped could be bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parse_that_failed_or_was_skipped_makes_no_statement() {
    use protocol::frontend::Target;
    use protocol::frontend::{
        encode_bind, encode_close, encode_empty, encode_execute, encode_parse,
    };
    let pg = Postgres::start();
    let rw = start(&pg, "1", "1");
    let parse = |out: &mut Vec<u8>, name: &str, sql: &str| encode_parse(out, name, sql, &[]);
    let run = |out: &mut Vec<u8>, name: &str| {
        encode_bind(out, "", name, &[], &[], &[]);
        encode_execute(out, "", 0);
    };
    let sync = |out: &mut Vec<u8>| encode_empty(out, b'S');
    // Each step: the messages, and how many ReadyForQuery end their replies.
    let mut steps: Vec<Vec<u8>> = Vec::new();
    // A Parse that fails, then the same name again.
    let mut m = Vec::new();
    parse(&mut m, "s1", "select 1/0x");
    sync(&mut m);
    steps.push(m);
    let mut m = Vec::new();
    parse(&mut m, "s1", "select 2");
    run(&mut m, "s1");
    sync(&mut m);
    steps.push(m);
    // A Parse skipped after an error: sent upstream, and (its text cached by another client)
    // answered here.
    for text in ["select 3", "select 4"] {
        let mut m = Vec::new();
        parse(&mut m, "e", "select 1/0x");
        parse(&mut m, "s2", text);
        sync(&mut m);
        steps.push(m);
        let mut m = Vec::new();
        run(&mut m, "s2");
        sync(&mut m);
        steps.push(m);
    }
    // A Close skipped after an error.
    let mut m = Vec::new();
    parse(&mut m, "s7", "select 7");
    sync(&mut m);
    steps.push(m);
    let mut m = Vec::new();
    parse(&mut m, "", "select 1/0");
    run(&mut m, "");
    encode_close(&mut m, Target::Statement, "s7");
    sync(&mut m);
    steps.push(m);
    let mut m = Vec::new();
    run(&mut m, "s7");
    sync(&mut m);
    steps.push(m);
    // Found in review: undone newest first. A Parse and a Close of it, both skipped: no s5.
    // A Close of s7 and a Parse of s7 again, both skipped: the first s7 stays.
    let mut m = Vec::new();
    parse(&mut m, "", "select 1/0");
    run(&mut m, "");
    parse(&mut m, "s5", "select 5");
    encode_close(&mut m, Target::Statement, "s5");
    encode_close(&mut m, Target::Statement, "s7");
    parse(&mut m, "s7", "select 77");
    sync(&mut m);
    steps.push(m);
    for name in ["s5", "s7"] {
        let mut m = Vec::new();
        run(&mut m, name);
        sync(&mut m);
        steps.push(m);
    }
    // Another client has "select 4" prepared on the pool's one connection.
    let other = connect(&rw).await;
    other.prepare("select 4").await.unwrap();
    let flat = same_replies_as_postgres(&pg, &rw, |a| {
        steps.iter().map(|m| raw_exchange(a, m, 1)).collect()
    });
    // (And it says what it checked: s1 ran, s2 did not exist, s7 ran.)
    assert!(flat.contains(&(b'D', Some("2".into()))), "{flat:?}");
    assert!(flat.contains(&(b'E', Some("26000".into()))), "{flat:?}");
    assert!(flat.contains(&(b'D', Some("7".into()))), "{flat:?}");
}

/// What a client pipelines without waiting is answered as PostgreSQL answers it: COPY data
/// sent in the same write as its COPY (simple and extended protocol, two COPYs in one
/// Query), a malformed Bind of an existing statement, a Flush with a body. Before, the data
/// was dropped (it came before the server's CopyInResponse) and the client hung, the Bind got
/// 26000 (relayed under the client's statement name, which the server does not know), and
/// the Flush put the relay out of step with the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_copy_data_and_malformed_messages_get_postgres_replies() {
    use protocol::frontend::{encode_bind, encode_copy_data, encode_empty, encode_execute};
    use protocol::frontend::{encode_parse, encode_query};
    let pg = Postgres::start();
    let rw = start(&pg, "1", "1");
    direct(&pg)
        .await
        .batch_execute("create table piped (a int); create table piped2 (a int)")
        .await
        .unwrap();
    let frame = |tag: u8, body: &[u8]| {
        let mut m = vec![tag];
        m.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    };
    let mut steps: Vec<(Vec<u8>, usize)> = Vec::new();
    let mut m = Vec::new();
    encode_query(&mut m, "copy piped from stdin");
    encode_copy_data(&mut m, b"1\n");
    encode_copy_data(&mut m, b"2\n");
    encode_empty(&mut m, b'c');
    steps.push((m, 1));
    let mut m = Vec::new();
    encode_query(&mut m, "copy piped from stdin; copy piped2 from stdin");
    encode_copy_data(&mut m, b"3\n");
    encode_empty(&mut m, b'c');
    encode_copy_data(&mut m, b"4\n");
    encode_empty(&mut m, b'c');
    steps.push((m, 1));
    let mut m = Vec::new();
    encode_parse(&mut m, "", "copy piped from stdin", &[]);
    encode_bind(&mut m, "", "", &[], &[], &[]);
    encode_execute(&mut m, "", 0);
    encode_copy_data(&mut m, b"5\n");
    encode_empty(&mut m, b'c');
    encode_empty(&mut m, b'S');
    steps.push((m, 1));
    // A statement, then a Bind of it with a truncated body.
    let mut m = Vec::new();
    encode_parse(&mut m, "s1", "select 1", &[]);
    encode_empty(&mut m, b'S');
    steps.push((m, 1));
    let mut m = frame(b'B', b"\0s1\0\0");
    encode_empty(&mut m, b'S');
    steps.push((m, 1));
    // A Flush with a body, a Sync, then a Query.
    let mut m = frame(b'H', b"xyz");
    encode_empty(&mut m, b'S');
    encode_query(&mut m, "select count(*) from piped");
    steps.push((m, 2));
    let mut m = Vec::new();
    encode_bind(&mut m, "", "s1", &[], &[], &[]);
    encode_execute(&mut m, "", 0);
    encode_empty(&mut m, b'S');
    encode_query(&mut m, "select count(*) from piped2");
    steps.push((m, 2));
    // Found in review. The data of an extended-protocol COPY in one write, its Sync in the
    // next (relayed as two batches); and a COPY that fails before copying, its data sent
    // along, then a COPY whose data the client sends once the server asks for it.
    let mut split = Vec::new();
    encode_parse(&mut split, "", "copy piped from stdin", &[]);
    encode_bind(&mut split, "", "", &[], &[], &[]);
    encode_execute(&mut split, "", 0);
    encode_copy_data(&mut split, b"6\n");
    encode_empty(&mut split, b'c');
    let mut sync = Vec::new();
    encode_empty(&mut sync, b'S');
    let mut failing = Vec::new();
    encode_query(&mut failing, "copy no_such_table from stdin");
    encode_copy_data(&mut failing, b"7\n");
    encode_empty(&mut failing, b'c');
    encode_query(&mut failing, "copy piped2 from stdin");
    let mut data = Vec::new();
    encode_copy_data(&mut data, b"8\n");
    encode_empty(&mut data, b'c');
    encode_query(&mut data, "select count(*) from piped2");
    let flat = same_replies_as_postgres(&pg, &rw, |a| {
        // (Each side starts from empty tables.)
        let mut t = vec![raw_exchange(
            a,
            &protocol_query("truncate piped, piped2"),
            1,
        )];
        for (m, ready) in &steps {
            t.push(raw_exchange(a, m, *ready));
        }
        std::io::Write::write_all(a, &split).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        t.push(raw_exchange(a, &sync, 1));
        t.push(raw_exchange_until(a, &failing, b'G', 1));
        t.push(raw_exchange(a, &data, 2));
        t
    });
    assert!(flat.contains(&(b'D', Some("4".into()))), "{flat:?}");
    assert!(flat.contains(&(b'E', Some("08P01".into()))), "{flat:?}");
    assert!(flat.contains(&(b'E', Some("42P01".into()))), "{flat:?}");
}

/// A `DO` block that SETs runs code ringwire does not follow: it pins its client, which keeps
/// the setting as at PostgreSQL, and the next client on the pool's one connection never
/// inherits it. Before, the connection went back to the pool holding the block's
/// search_path, labelled with the client's (default) settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_do_block_that_sets_keeps_its_setting_to_its_client() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", "1");
    let a = connect(&rw).await;
    a.batch_execute("do $$begin set search_path = pg_catalog; end$$")
        .await
        .unwrap();
    a.batch_execute("select 1").await.unwrap();
    assert_eq!(show(&a, "search_path").await, "pg_catalog");
    drop(a);
    let b = connect(&rw).await;
    assert_eq!(show(&b, "search_path").await, "\"$user\", public");
}

/// Code stored upstream is opaque to the relay's scan: a function, a procedure or a `DO`
/// block that SETs at run time leaves its setting in the backend's session. None of it may
/// reach the next client on the pool's one connection; the caller keeps it until the
/// connection goes back to the pool (inside its transaction, not in its next one). With
/// session 19's build the test fails at its first case: B reads A's tenant, 42.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_made_by_code_stored_upstream_never_reaches_another_client() {
    let pg = Postgres::start();
    direct(&pg)
        .await
        .batch_execute(
            "create function set_tenant(t int) returns void language plpgsql as \
               $$begin perform set_config('app.tenant', t::text, false); end$$;
             create function use_catalog_path() returns int language plpgsql as \
               $$begin set search_path = pg_catalog; return 1; end$$;
             create procedure raise_work_mem() language plpgsql as \
               $$begin set work_mem = '77MB'; end$$;",
        )
        .await
        .unwrap();
    let rw = start(&pg, "1", "1");
    let a = connect(&rw).await;
    let b = connect(&rw).await;
    let tenant = "select coalesce(current_setting('app.tenant', true), '')";
    let defaults = [
        show(&b, "search_path").await,
        show(&b, "work_mem").await,
        show(&b, "statement_timeout").await,
    ];
    let b_sees = || async {
        let got = [
            first_value(&b.simple_query(tenant).await.unwrap()),
            show(&b, "search_path").await,
            show(&b, "work_mem").await,
            show(&b, "statement_timeout").await,
        ];
        assert_eq!(got[0], "", "B got A's tenant");
        assert_eq!(got[1..], defaults, "B got A's settings");
    };
    let made = [
        "select set_tenant(42)",
        "select * from public.set_tenant(43)",
        "select use_catalog_path()",
        "call raise_work_mem()",
        // Spelled at run time: no word the scan could find.
        "do $$begin execute 'SE' || 'T statement_timeout = ''4242s'''; end$$",
    ];
    for sql in made {
        a.batch_execute(sql).await.unwrap();
        b_sees().await;
        assert_eq!(first_value(&a.simple_query(tenant).await.unwrap()), "");
    }
    // Through the extended protocol: a Bind of a prepared statement, and the unnamed
    // statement (Parse, Bind and Execute in one batch).
    a.execute("select set_tenant($1)", &[&7i32]).await.unwrap();
    b_sees().await;
    a.query_typed("select set_tenant($1)", &[(&8i32, Type::INT4)])
        .await
        .unwrap();
    b_sees().await;
    // A comment between the name and its `(`, and a built-in that runs a query's text.
    a.batch_execute("select set_tenant /* t */ (12)")
        .await
        .unwrap();
    b_sees().await;
    a.batch_execute("select query_to_xml('select set_tenant(13)', true, false, '')")
        .await
        .unwrap();
    b_sees().await;
    // Inside a transaction the caller sees its setting; a SET committed with it (which
    // marks the connection with the client's settings) does not carry the function's along.
    a.batch_execute("begin").await.unwrap();
    a.execute("select set_tenant($1)", &[&9i32]).await.unwrap();
    assert_eq!(first_value(&a.simple_query(tenant).await.unwrap()), "9");
    a.batch_execute("set statement_timeout = '55s'; commit")
        .await
        .unwrap();
    b_sees().await;
    assert_eq!(show(&a, "statement_timeout").await, "55s");
    a.batch_execute("select set_tenant(10); set work_mem = '5MB'")
        .await
        .unwrap();
    b_sees().await;
    assert_eq!(show(&a, "work_mem").await, "5MB");
    // The replay after such code gives a startup application_name back as PostgreSQL shows
    // it (cleaned to ASCII, quote and backslash kept).
    let startup = " application_name='O\\'Bri\\\\en \u{e9}t\u{e9}'";
    let through = connect_to(&format!("{}{startup}", rw.connection_string("postgres"))).await;
    let at_pg = connect_to(&format!("{}{startup}", pg.connection_string())).await;
    through
        .batch_execute("select set_tenant(11)")
        .await
        .unwrap();
    let shown = show(&at_pg, "application_name").await;
    assert_eq!(shown, "O'Bri\\en ??t??");
    assert_eq!(show(&through, "application_name").await, shown);
    drop((a, b, rw));
    // `--upstream-trust-functions on` takes PgBouncer's assumption, and with it the leak.
    let rw = start_with(&pg, "1", "1", &["--upstream-trust-functions", "on"]);
    let a = connect(&rw).await;
    let b = connect(&rw).await;
    a.batch_execute("select set_tenant(42)").await.unwrap();
    assert_eq!(first_value(&a.simple_query(tenant).await.unwrap()), "42");
    assert_eq!(first_value(&b.simple_query(tenant).await.unwrap()), "42");
}

/// What a call of code stored upstream costs, seen from the upstream (PostgreSQL's own
/// statement log): a statement that calls only built-ins adds nothing; a call of a user's
/// function adds one Query in the same write, which tidies the session and puts the
/// client's startup settings back, so the next batch needs no replay. The client's own SETs
/// follow that Query, each on its own; a SET still in flight in the same batch leaves the
/// settings to the next batch's replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_of_user_code_costs_one_query_in_the_same_write() {
    let pg = Postgres::start();
    let admin = direct(&pg).await;
    for sql in [
        "create function noop() returns int language plpgsql as $$begin return 1; end$$",
        "alter system set log_statement = 'all'",
        "select pg_reload_conf()",
    ] {
        admin.batch_execute(sql).await.unwrap();
    }
    let rw = start(&pg, "1", "1");
    let a = connect(&rw).await;
    // (The client's first batch replays its startup parameters onto the connection.)
    a.batch_execute("select 1").await.unwrap();
    let replay = "SELECT pg_catalog.set_config('client_encoding', 'UTF8', false)";
    // The statements logged after the `from` marker, up to the `to` one; ringwire's tidy
    // shown by what it starts with.
    let logged_between = |from: &str, to: &str| -> Vec<String> {
        let log = pg.log();
        let start = log
            .find(from)
            .unwrap_or_else(|| panic!("{from} not logged"));
        let end = start
            + log[start..]
                .find(to)
                .unwrap_or_else(|| panic!("{to} not logged"));
        // (Up to the start of the `to` marker's line.)
        let end = log[..end].rfind('\n').unwrap_or(end);
        log[start..end]
            .lines()
            .skip(1)
            .filter_map(|line| {
                let (_, rest) = line.split_once("LOG:  ")?;
                let sql = match rest.strip_prefix("statement: ") {
                    Some(sql) => sql,
                    None => rest.strip_prefix("execute ")?.split_once(": ")?.1,
                };
                Some(
                    if sql.starts_with("RESET ALL; RESET SESSION AUTHORIZATION;") {
                        if sql.contains(&format!("; {replay}")) {
                            "tidy and settings".to_string()
                        } else {
                            // (`tidy_and_release`, as the connection goes back.)
                            "RESET ALL and tidy".to_string()
                        }
                    } else if sql.starts_with("RESET SESSION AUTHORIZATION;") {
                        "tidy".to_string()
                    } else {
                        sql.to_string()
                    },
                )
            })
            .collect()
    };
    a.batch_execute("select 'marker-1'").await.unwrap();
    let builtins = "select lower('X'), count(*) over () from generate_series(1, 2)";
    for _ in 0..3 {
        a.batch_execute(builtins).await.unwrap();
    }
    a.batch_execute("select 'marker-2'").await.unwrap();
    a.batch_execute("select noop()").await.unwrap();
    a.batch_execute("select 'marker-3'").await.unwrap();
    // So too through the extended protocol (tokio-postgres prepares, then binds and executes
    // in a write of their own): the tidy follows the Sync.
    a.query("select noop()", &[]).await.unwrap();
    a.batch_execute("select 'marker-4'").await.unwrap();
    assert_eq!(logged_between("'marker-1'", "'marker-2'"), [builtins; 3]);
    assert_eq!(
        logged_between("'marker-2'", "'marker-3'"),
        ["select noop()", "tidy and settings"]
    );
    assert_eq!(
        logged_between("'marker-3'", "'marker-4'"),
        ["select noop()", "tidy and settings"]
    );
    // The client's SET is replayed behind the tidy, in a Query of its own.
    a.batch_execute("set work_mem = '5MB'").await.unwrap();
    a.batch_execute("select 'marker-5'").await.unwrap();
    a.batch_execute("select noop()").await.unwrap();
    a.batch_execute("select 'marker-6'").await.unwrap();
    assert_eq!(
        logged_between("'marker-5'", "'marker-6'"),
        ["select noop()", "tidy and settings", "set work_mem = '5MB'"]
    );
    // A SET in the same Query as the call: settled only when the Query completes, so the
    // tidy leaves the settings alone, and the next batch replays them, the new SET included.
    a.batch_execute("set work_mem = '6MB'; select noop()")
        .await
        .unwrap();
    a.batch_execute("select 'marker-7'").await.unwrap();
    assert_eq!(
        logged_between("'marker-6'", "'marker-7'"),
        [
            "set work_mem = '6MB'; select noop()",
            "tidy",
            "RESET ALL",
            replay,
            "set work_mem = '6MB'"
        ]
    );
    assert_eq!(show(&a, "work_mem").await, "6MB");
    // A startup parameter that cannot follow the tidy's SELECT in its transaction (the
    // transaction starts at the session's repeatable read; read committed may then not be set
    // after a query): that tidy fails, the connection is tidied as it goes back, and from
    // then on this session's tidies leave the settings to the replay.
    drop(a);
    let c = connect_to(&format!(
        "{} options='-c default_transaction_isolation=repeatable\\\\ read \
         -c transaction_isolation=read\\\\ committed'",
        rw.connection_string("postgres")
    ))
    .await;
    c.batch_execute("select 'marker-8'").await.unwrap();
    c.batch_execute("select noop()").await.unwrap();
    c.batch_execute("select 'marker-9'").await.unwrap();
    c.batch_execute("select noop()").await.unwrap();
    c.batch_execute("select 'marker-10'").await.unwrap();
    assert_eq!(
        logged_between("'marker-8'", "'marker-9'")[..3],
        ["select noop()", "tidy and settings", "RESET ALL and tidy"]
    );
    assert_eq!(
        logged_between("'marker-9'", "'marker-10'")[..3],
        ["select noop()", "tidy", "RESET ALL"]
    );
    assert_eq!(
        show(&c, "default_transaction_isolation").await,
        "repeatable read"
    );
}

/// Code stored upstream can leave more than settings in its backend's session, and `RESET
/// ALL` undoes none of it: a role or session authorization (the next client would run as
/// that role), session advisory locks, temporary tables and their rows, LISTEN, `WITH HOLD`
/// cursors. None of it reaches the next client of the connection, and the lock is let go as
/// soon as the client's batch is done (an idle pooled connection must not keep it). So too
/// after a client that called such code inside a transaction goes away; and inside a
/// transaction opened in the same write, nothing is tidied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_code_stored_upstream_leaves_in_a_session_never_reaches_another_client() {
    let pg = Postgres::start();
    let admin = direct(&pg).await;
    admin
        .batch_execute(
            "create role tenant_a; create role tenant_b;
             create function leave_state() returns void language plpgsql as $$begin
               perform pg_advisory_lock(4242);
               create temp table scratch(secret text);
               insert into scratch values ('tenant-a');
               listen tenant_a;
               execute 'declare held cursor with hold for select 1';
               perform set_config('role', 'tenant_a', false);
             end$$;
             create function become_tenant_b() returns void language plpgsql as \
               $$begin set session authorization tenant_b; end$$;",
        )
        .await
        .unwrap();
    let rw = start(&pg, "1", "1");
    let a = connect(&rw).await;
    let (b, b_heard) = common::client::listening(&rw.connection_string("postgres")).await;
    let state = "select current_user, session_user, \
                   (select count(*) from pg_locks \
                     where locktype = 'advisory' and pid = pg_backend_pid()), \
                   (select count(*) from pg_listening_channels()), \
                   (select count(*) from pg_cursors), \
                   to_regclass('pg_temp.scratch') is null";
    let clean = ["postgres", "postgres", "0", "0", "0", "t"].map(String::from);
    let b_sees_a_clean_session = async || {
        let rows = common::client::text_rows(b.simple_query(state).await.unwrap());
        let got: Vec<String> = rows[0]
            .iter()
            .map(|v| v.clone().unwrap_or_default())
            .collect();
        assert_eq!(got, clean, "B runs on what A's code left");
    };
    // Nobody holds the lock once A's batch is done.
    let lock_is_free = async || {
        let free = first_value(
            &admin
                .simple_query("select pg_try_advisory_lock(4242)")
                .await
                .unwrap(),
        ) == "t";
        if free {
            admin
                .batch_execute("select pg_advisory_unlock_all()")
                .await
                .unwrap();
        }
        free
    };
    a.batch_execute("select leave_state()").await.unwrap();
    common::eventually(
        Duration::from_secs(5),
        "the code's lock is let go",
        lock_is_free,
    )
    .await;
    b_sees_a_clean_session().await;
    // What the code listened to is not heard by the next client either.
    admin
        .batch_execute("notify tenant_a, 'for A only'")
        .await
        .unwrap();
    b.batch_execute("select 1").await.unwrap();
    a.batch_execute("select become_tenant_b()").await.unwrap();
    b_sees_a_clean_session().await;
    // Where the tidy cannot follow the call in its batch (the text does not tell whether a
    // transaction is open after it), it runs as the connection goes back.
    a.batch_execute("select leave_state(); begin; commit")
        .await
        .unwrap();
    common::eventually(Duration::from_secs(5), "the lock is let go", lock_is_free).await;
    b_sees_a_clean_session().await;
    // A client that leaves inside its transaction: rolled back, and cleaned after.
    let c = connect(&rw).await;
    c.batch_execute("begin; select leave_state()")
        .await
        .unwrap();
    drop(c);
    common::eventually(
        Duration::from_secs(5),
        "the lock is let go after C left",
        lock_is_free,
    )
    .await;
    b_sees_a_clean_session().await;
    // A BEGIN and the call in one write through the extended protocol (pgjdbc with autocommit
    // off sends this): inside the client's open transaction nothing is tidied away.
    {
        use common::wire::{frame, logged_in, read_messages, simple_query};
        use tokio::io::AsyncWriteExt;
        let mut batch = Vec::new();
        for sql in ["begin", "select leave_state()"] {
            let parse = [b"\0", sql.as_bytes(), b"\0\0\0"].concat();
            batch.extend(frame(b'P', &parse));
            batch.extend(frame(b'B', b"\0\0\0\0\0\0\0\0"));
            batch.extend(frame(b'E', b"\0\0\0\0\0"));
        }
        batch.extend(frame(b'S', b""));
        let mut raw = logged_in(&rw.addr()).await;
        raw.write_all(&batch).await.unwrap();
        let reply = read_messages(&mut raw).await;
        assert_eq!(
            reply.last().map(|m| (m.0, m.1.clone())),
            Some((b'Z', b"T".to_vec()))
        );
        raw.write_all(&simple_query("select current_user, (select count(*) from pg_cursors), to_regclass('pg_temp.scratch') is not null")).await.unwrap();
        let reply = read_messages(&mut raw).await;
        let row = reply.iter().find(|m| m.0 == b'D').expect("a row");
        let text = String::from_utf8_lossy(&row.1);
        assert!(
            text.contains("tenant_a") && text.ends_with("\u{1}1\0\0\0\u{1}t"),
            "{text:?}"
        );
        raw.write_all(&simple_query("rollback")).await.unwrap();
        read_messages(&mut raw).await;
    }
    b_sees_a_clean_session().await;
    assert_eq!(
        common::client::heard_lines(&b_heard, 1).await,
        Vec::<String>::new()
    );
}

/// A COMMIT or ROLLBACK inside a Query of several statements settles the SETs before it,
/// whatever follows: PostgreSQL keeps a SET committed before a later statement of the same
/// Query fails, and one made after a ROLLBACK. Each case runs through ringwire and directly,
/// and the values are compared after another client has used ringwire's one upstream
/// connection (so the client's settings must come from what ringwire recorded, not from what
/// the connection happens to hold); that client never sees them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_or_rollback_inside_a_query_settles_the_sets_before_it() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", "1");
    let other = connect(&rw).await;
    let defaults = [
        show(&other, "work_mem").await,
        show(&other, "statement_timeout").await,
    ];
    let cases: &[&[&str]] = &[
        &["set work_mem = '5MB'; commit; select 1/0"],
        &["begin; set work_mem = '6MB'; commit; select 1/0"],
        &["begin; set work_mem = '7MB'; rollback; set statement_timeout = '8s'"],
        &["begin; set work_mem = '3MB'", "commit; select 1/0"],
        &["begin; set work_mem = '9MB'; commit and chain; set statement_timeout = '7s'; rollback"],
        &["begin; set work_mem = '10MB'; rollback; select 1/0"],
        &["begin; set work_mem = '12MB'; /* c */ ; commit; set statement_timeout = '9s'; select 1/0"],
    ];
    for queries in cases {
        let through = connect(&rw).await;
        let at_pg = direct(&pg).await;
        for sql in *queries {
            let a = through
                .batch_execute(sql)
                .await
                .map_err(|e| e.code().cloned());
            let b = at_pg
                .batch_execute(sql)
                .await
                .map_err(|e| e.code().cloned());
            assert_eq!(a, b, "{sql}");
        }
        for (name, default) in ["work_mem", "statement_timeout"].iter().zip(&defaults) {
            assert_eq!(&show(&other, name).await, default, "{queries:?}: {name}");
            assert_eq!(
                show(&through, name).await,
                show(&at_pg, name).await,
                "{queries:?}: {name}"
            );
        }
    }
    // Where the scan's statements are not the server's (a `BEGIN ATOMIC` body's `;` and
    // `END`), nothing is settled mid-Query: the client may lose its SETs (the connection
    // replays for whoever is next), but a SET the server rolled back is never recorded.
    let through = connect(&rw).await;
    let at_pg = direct(&pg).await;
    let sql = "create or replace function f14() returns int language sql \
               begin atomic select 1; end; set work_mem = '14MB'; commit; \
               set statement_timeout = '3s'; rollback";
    through.batch_execute(sql).await.unwrap();
    at_pg.batch_execute(sql).await.unwrap();
    for (name, default) in ["work_mem", "statement_timeout"].iter().zip(&defaults) {
        assert_eq!(&show(&other, name).await, default, "begin atomic: {name}");
    }
    assert_eq!(
        show(&through, "statement_timeout").await,
        show(&at_pg, "statement_timeout").await
    );
    let work_mem = show(&through, "work_mem").await;
    assert!(
        work_mem == show(&at_pg, "work_mem").await || work_mem == defaults[0],
        "{work_mem}"
    );
    drop(through);
    // A SAVEPOINT after a COMMIT in one Query counts for the transaction after it, so a
    // RESET that its ROLLBACK TO undid is not recorded (the session keeps its connection)
    // and the connection never goes back to the pool with the SET it still has.
    let through = connect(&rw).await;
    let at_pg = direct(&pg).await;
    for sql in [
        "set work_mem = '13MB'",
        "select 1; commit; begin; savepoint t",
        "reset work_mem",
        "rollback to t; commit",
    ] {
        through.batch_execute(sql).await.unwrap();
        at_pg.batch_execute(sql).await.unwrap();
    }
    assert_eq!(
        show(&through, "work_mem").await,
        show(&at_pg, "work_mem").await
    );
    drop(through);
    assert_eq!(show(&other, "work_mem").await, defaults[0], "savepoint");
}

/// Settings written the ways the session scan once misread, each checked against what
/// PostgreSQL shows (A and B share ringwire's one upstream connection; at PostgreSQL they are
/// two sessions): a SET behind an `E'\''` literal, a SET ending in a `--` comment (replayed
/// in front of later ones), `SET TIME ZONE` undone by `RESET timezone`, `FROM CURRENT`, and
/// a setting the connection refuses when it is replayed there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_are_read_as_postgres_reads_them() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", "1");
    let (a, b) = (connect(&rw).await, connect(&rw).await);
    let (pa, pb) = (direct(&pg).await, direct(&pg).await);
    let steps: &[(&Client, &Client, &str)] = &[
        (&a, &pa, "select E'\\''; set work_mem = '71MB'; select ''"),
        (&a, &pa, "set statement_timeout = '12345' -- a note"),
        (&a, &pa, "set lock_timeout = '2345'"),
        (&b, &pb, "set work_mem = '5MB'"),
        (&a, &pa, "set time zone 'Asia/Tokyo'"),
        (&a, &pa, "reset timezone"),
        (&a, &pa, "set work_mem from current"),
        // A placeholder setting plpgsql later rejects: replayed onto the connection where B
        // loaded plpgsql, it fails alone (a warning), and A keeps its other settings.
        (&a, &pa, "set plpgsql.variable_conflict = 'bogus'"),
        (&b, &pb, "do $$ begin end $$"),
        (&b, &pb, "set work_mem = '6MB'"),
    ];
    for &(through, at_pg, sql) in steps {
        through.batch_execute(sql).await.unwrap();
        at_pg.batch_execute(sql).await.unwrap();
        for name in ["work_mem", "statement_timeout", "lock_timeout", "timezone"] {
            for (c, p) in [(&a, &pa), (&b, &pb)] {
                assert_eq!(
                    show(c, name).await,
                    show(p, name).await,
                    "after {sql:?}: {name}"
                );
            }
        }
    }
    // A SET committed by a COMMIT inside a Query that then fails: PostgreSQL keeps it for C
    // (ringwire drops it from C's settings, a known gap), and neither E, a client with no
    // startup parameters at all (so no settings), nor D, with the same settings as C, must
    // inherit it on the same upstream connection.
    drop((a, b));
    let (c, d, pd) = (connect(&rw).await, connect(&rw).await, direct(&pg).await);
    let mut e = raw_login(&rw);
    let sql = "set work_mem = '33MB'; commit; select 1/0";
    c.batch_execute(sql).await.unwrap_err();
    let default = show(&pd, "work_mem").await;
    let got = raw_exchange(&mut e, &protocol_query("show work_mem"), 1);
    assert_eq!(got[1], (b'D', Some(default.clone())), "{got:?}");
    assert_eq!(show(&d, "work_mem").await, default);
}

/// Startup parameters are checked at login, as PostgreSQL checks them: one the server
/// refuses is a FATAL with PostgreSQL's own SQLSTATE and message (it was a warning on every
/// statement), one it takes is in effect, and a refused login leaves nothing of its
/// parameters on the pooled connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_parameters_are_checked_at_login_as_postgres_checks_them() {
    let pg = Postgres::start();
    pg.query_value("create role lowly login; create schema \"My Schema\"");
    let rw = start(&pg, "1", "1");
    let login = |conninfo: String, user: &'static str, options: &'static str, app: &'static str| async move {
        let mut config: tokio_postgres::Config = conninfo.parse().unwrap();
        config.user(user).options(options).application_name(app);
        match config.connect(NoTls).await {
            Ok((client, conn)) => {
                tokio::spawn(conn);
                Ok(client)
            }
            Err(e) => Err(e
                .as_db_error()
                .map(|d| {
                    (
                        d.severity().to_string(),
                        d.code().clone(),
                        d.message().to_string(),
                        d.detail().map(str::to_string),
                    )
                })
                .unwrap_or_else(|| panic!("not a server's refusal: {e}"))),
        }
    };
    let cases = [
        ("postgres", "-c work_mem=banana", ""),
        ("postgres", "-c nosuch=1", ""),
        ("postgres", "-c role=nobody", ""),
        (
            "postgres",
            "-c work_mem=7MB -c nosuch.x=1 -c search_path=a,b",
            "",
        ),
        // A backslash keeps a space in the word, as PostgreSQL splits options: refused
        // unquoted (list syntax), let in quoted.
        ("postgres", r"-c search_path=public,My\ Schema", ""),
        ("postgres", r#"-c search_path=public,"My\ Schema""#, ""),
        // PostgreSQL lets a missing temp tablespace in at startup (and refuses it in a SET, so
        // through ringwire its statements run with the default, and a warning).
        ("postgres", "-c temp_tablespaces=nosuch", ""),
        ("lowly", "-c log_statement=all", ""),
        // Names no SET can spell: 42602 (with its DETAIL), a placeholder named by a keyword.
        ("postgres", "-c 9x.y=1", ""),
        ("postgres", "-c select.x=1", ""),
        ("postgres", "-c a.b$c=1", ""),
        // Checked (no such role; not the login user's to take), then without effect: the
        // session is the login user's.
        ("postgres", "-c session_authorization=lowly", ""),
        ("lowly", "-c session_authorization=postgres", ""),
        ("postgres", "-c session_authorization=nosuch", ""),
        // A transaction's characteristics: only the server's defaults pass (25001 else),
        // whatever a default_transaction_* before them says.
        ("postgres", "-c transaction_isolation=serializable", ""),
        ("postgres", "-c transaction_deferrable=on", ""),
        (
            "postgres",
            "-c default_transaction_isolation=serializable -c transaction_isolation=serializable",
            "",
        ),
        (
            "postgres",
            r"-c transaction_isolation=read\ committed -c transaction_read_only=on",
            "",
        ),
        // Refused twice: a refusal is not remembered as a pass.
        ("postgres", "-c work_mem=banana", ""),
        // With standard_conforming_strings off, a backslash escapes a quote in a plain
        // literal: the replayed value must still be one literal.
        (
            "postgres",
            "-c standard_conforming_strings=off",
            r"y\'; SET work_mem = '55MB'; --",
        ),
    ];
    for (user, options, app) in cases {
        let through = login(rw.connection_string("postgres"), user, options, app).await;
        let at_pg = login(pg.connection_string(), user, options, app).await;
        match (through, at_pg) {
            (Err(through), Err(at_pg)) => assert_eq!(through, at_pg, "{user} {options}"),
            (Ok(through), Ok(at_pg)) => {
                // (A placeholder's name, not its value, outlives RESET ALL on a pooled
                // connection: a known gap, so `nosuch.x` is compared only where it is set.)
                let placeholder = ["nosuch.x", "select.x", "a.b$c"]
                    .into_iter()
                    .find(|p| options.contains(*p));
                let names = [
                    "work_mem",
                    "search_path",
                    "application_name",
                    "session_authorization",
                    "is_superuser",
                ];
                for name in names.into_iter().chain(placeholder) {
                    let sql = format!("select current_setting('{name}', true)");
                    let value =
                        async |c: &Client| first_value(&c.simple_query(&sql).await.unwrap());
                    assert_eq!(
                        value(&through).await,
                        value(&at_pg).await,
                        "{user} {options}: {name}"
                    );
                }
            }
            (through, at_pg) => panic!(
                "{user} {options}: ringwire {:?}, PostgreSQL {:?}",
                through.err(),
                at_pg.err()
            ),
        }
    }
    // 42602 for a prefix reserved by a library loaded on the pooled connection (a DO block
    // loads plpgsql), where a fresh backend takes the placeholder: let in, with a warning on
    // the client's statements (the name `9x.y` above has the same SQLSTATE and is refused).
    let client = login(rw.connection_string("postgres"), "postgres", "", "")
        .await
        .unwrap();
    client.batch_execute("do $$ begin end $$").await.unwrap();
    drop(client);
    let reserved = login(
        rw.connection_string("postgres"),
        "postgres",
        "-c plpgsql.x=1",
        "",
    )
    .await;
    assert!(reserved.is_ok(), "{:?}", reserved.err());
    // A parameter only a backend's start can set, which PostgreSQL takes at login: no pooled
    // connection can be given it, so the login is refused, saying why.
    let Err(refused) = login(
        rw.connection_string("postgres"),
        "postgres",
        "-c log_connections=on",
        "",
    )
    .await
    else {
        panic!("log_connections at startup was let in");
    };
    assert_eq!(
        refused.1,
        SqlState::CANT_CHANGE_RUNTIME_PARAM,
        "{refused:?}"
    );
    // `-c work_mem=9MB -c nosuch=1`: work_mem was set on the pool's one connection before the
    // refusal; a client with no settings of its own, next on that connection, sees the
    // default.
    let refused = login(
        rw.connection_string("postgres"),
        "postgres",
        "-c work_mem=9MB -c nosuch=1",
        "",
    )
    .await;
    assert!(refused.is_err());
    let mut raw = raw_login(&rw);
    let got = raw_exchange(&mut raw, &protocol_query("show work_mem"), 1);
    assert_eq!(
        got[1],
        (b'D', Some(pg.query_value("show work_mem"))),
        "{got:?}"
    );
}

/// The ParameterStatus messages of a login to `addr` with `params` (trust auth), by name.
fn parameter_statuses(
    addr: &str,
    params: &[(&str, &str)],
) -> std::collections::BTreeMap<String, String> {
    use protocol::backend::BackendMessage;
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    let mut all = vec![("user", "postgres"), ("database", "postgres")];
    all.extend_from_slice(params);
    protocol::frontend::encode_startup(&mut out, protocol::frontend::PROTOCOL_3_0, &all);
    s.write_all(&out).unwrap();
    let (mut buf, mut shown) = (Vec::new(), std::collections::BTreeMap::new());
    loop {
        while let Some((frame, n)) = protocol::wire::split_frame(&buf, 1 << 30).unwrap() {
            match BackendMessage::parse(frame).unwrap() {
                BackendMessage::ParameterStatus { name, value } => {
                    shown.insert(name.to_string(), value.to_string());
                }
                BackendMessage::ReadyForQuery { .. } => return shown,
                BackendMessage::ErrorResponse(e) => panic!("{addr}: {}", e.message()),
                _ => {}
            }
            buf.drain(..n);
        }
        let mut chunk = [0u8; 8192];
        let n = common::wire::read_blocking(&mut s, &mut chunk).unwrap();
        assert!(n > 0, "{addr} closed the connection");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A client is told its startup parameters as PostgreSQL shows them (drivers read them:
/// psycopg builds its time zone from `TimeZone`, pgjdbc checks `DateStyle` and
/// `client_encoding`), not as it spelt them; both at the login that checks them and at a
/// later one with the same parameters, which is not checked again.
#[test]
fn parameter_status_shows_startup_values_as_postgres_shows_them() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", "1");
    let params = [
        ("DateStyle", "iso"),
        ("TimeZone", "europe/berlin"),
        ("client_encoding", "utf8"),
        ("IntervalStyle", "SQL_standard"),
        ("standard_conforming_strings", "yes"),
        ("application_name", "caf\u{e9}"),
    ];
    let at_pg = parameter_statuses(&format!("127.0.0.1:{}", pg.port), &params);
    assert_eq!(at_pg["TimeZone"], "Europe/Berlin");
    for login in ["checked", "remembered"] {
        let through = parameter_statuses(&rw.addr(), &params);
        assert_eq!(through, at_pg, "{login}");
    }
}

fn protocol_query(sql: &str) -> Vec<u8> {
    let mut out = Vec::new();
    protocol::frontend::encode_query(&mut out, sql);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_pins_its_connection_until_it_ends() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", "1");
    let a = connect(&rw).await;
    let b = connect(&rw).await;
    a.batch_execute("create table t (x int)").await.unwrap();
    a.batch_execute("begin; insert into t values (1)")
        .await
        .unwrap();
    let pid_in_tx = first_value(&a.simple_query("select pg_backend_pid()").await.unwrap());
    // A sees its own uncommitted row: the block stays on one upstream connection.
    assert_eq!(
        first_value(&a.simple_query("select count(*) from t").await.unwrap()),
        "1"
    );
    // B needs the only upstream connection, so it waits for A's transaction to end.
    let started = Instant::now();
    let waiter = tokio::spawn(async move {
        let n = first_value(&b.simple_query("select count(*) from t").await.unwrap());
        (n, started.elapsed(), b)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiter.is_finished(),
        "B ran while A's transaction held the connection"
    );
    a.batch_execute("commit").await.unwrap();
    let (n, waited, b) = waiter.await.unwrap();
    assert_eq!(n, "1", "B sees A's committed row");
    assert!(waited >= Duration::from_millis(500));
    // Both then run on the same pooled connection.
    let pid_b = first_value(&b.simple_query("select pg_backend_pid()").await.unwrap());
    assert_eq!(pid_b, pid_in_tx);
}

/// What a statement answers: its first value, or its SQLSTATE and message.
async fn answer(client: &Client, sql: &str) -> Result<String, (String, String)> {
    client
        .simple_query(sql)
        .await
        .map(|m| first_value(&m))
        .map_err(|e| {
            let db = e.as_db_error().expect("an error from the server");
            (db.code().code().to_string(), db.message().to_string())
        })
}

/// `lastval()` and `currval()` answer from what `nextval` left in the backend's session, and
/// a pooled backend's session is every client's that ran on it. Through ringwire a client
/// gets the value it drew where its connection came back to it untouched, and otherwise
/// PostgreSQL's answer for a session that never called `nextval` (55000) — not another
/// client's value, which is what a pooler without the check returns (this test got the other
/// client's number before). With and without pipelining; one shard, so the clients share
/// its pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lastval_and_currval_answer_a_clients_own_value_or_55000() {
    let pg = Postgres::start();
    let setup = direct(&pg).await;
    setup
        .batch_execute(
            "create sequence s; create table ids (id serial primary key, v text); \
             create function draw() returns bigint language sql as 'select nextval(''s'')'",
        )
        .await
        .unwrap();
    let fresh = direct(&pg).await;
    let never_lastval = answer(&fresh, "select lastval()").await.unwrap_err();
    let never_currval = answer(&fresh, "select currval('s')").await.unwrap_err();
    assert_eq!(never_lastval.0, "55000");
    for extra in [&[][..], &["--upstream-pipeline", "on"][..]] {
        // One upstream connection: every client runs on it in turn.
        let rw = start_with(&pg, "1", "1", extra);
        let a = connect(&rw).await;
        let b = connect(&rw).await;
        let a_next = answer(&a, "select nextval('s')").await.unwrap();
        assert_eq!(
            answer(&b, "select lastval()").await,
            Err(never_lastval.clone())
        );
        assert_eq!(
            answer(&b, "select currval('s')").await,
            Err(never_currval.clone())
        );
        // Prepared, then run after the other client's nextval: the same.
        let statement = b.prepare("select currval('s')").await.unwrap();
        let a_next2 = answer(&a, "select nextval('s')").await.unwrap();
        assert_ne!(a_next, a_next2);
        let e = b.query(&statement, &[]).await.unwrap_err();
        assert_eq!(e.code(), Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE));
        // A client's own value, in separate autocommit statements, as PDO's lastInsertId
        // asks for it.
        let mine = answer(&a, "select nextval('s')").await.unwrap();
        assert_eq!(answer(&a, "select lastval()").await, Ok(mine.clone()));
        assert_eq!(answer(&a, "select currval('s')").await, Ok(mine));
        a.batch_execute("insert into ids (v) values ('a')")
            .await
            .unwrap();
        let id = answer(&a, "select lastval()").await.unwrap();
        assert_eq!(answer(&a, "select max(id)::text from ids").await, Ok(id));
        // Interleaved on the one connection: each gets an error, never the other's number.
        let a_last = answer(&a, "select nextval('s')").await.unwrap();
        let b_last = answer(&b, "select nextval('s')").await.unwrap();
        assert_eq!(
            answer(&a, "select lastval()").await,
            Err(never_lastval.clone())
        );
        assert_eq!(
            answer(&b, "select lastval()").await,
            Err(never_lastval.clone())
        );
        assert_ne!(a_last, b_last);
        // Inside one transaction the value is the transaction's own.
        let in_tx = a
            .simple_query("begin; select nextval('s'); select lastval(); commit")
            .await
            .unwrap();
        let values: Vec<&str> = in_tx
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => r.get(0),
                _ => None,
            })
            .collect();
        assert_eq!(values.len(), 2);
        assert_eq!(values[0], values[1]);
        if !extra.is_empty() {
            // A pipelined unit may draw inside a function: B's connection, once a pipe's, is
            // not B's own any more.
            answer(&b, "select nextval('s')").await.unwrap();
            let drawn = answer(&a, "select draw()").await.unwrap();
            let got = answer(&b, "select lastval()").await;
            assert_ne!(got, Ok(drawn));
            assert_eq!(got, Err(never_lastval.clone()));
        }
    }
    // Two connections: a client's lastval goes back to the connection its nextval ran on
    // when that one is idle, though another was given back after it.
    let rw = start_with(&pg, "1", "2", &[]);
    let a = connect(&rw).await;
    let b = connect(&rw).await;
    b.batch_execute("begin").await.unwrap();
    b.simple_query("select 1").await.unwrap();
    let mine = answer(&a, "select nextval('s')").await.unwrap();
    b.batch_execute("commit").await.unwrap();
    assert_eq!(answer(&a, "select lastval()").await, Ok(mine));
}

/// A temporary table or a `WITH HOLD` cursor lives on the upstream connection it was made
/// on, so however it is made (`CREATE TEMP`, `SELECT … INTO TEMP`, `CREATE TABLE pg_temp.…`,
/// a `search_path` that starts with `pg_temp`, set or given at startup, `DECLARE … WITH HOLD`
/// over two lines) its session is pinned to that connection: the maker keeps seeing it and no
/// other client ever does, while the maker is connected or after it left, as with
/// PostgreSQL's own sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_session_makes_pins_it_and_no_other_client_sees_it() {
    let pg = Postgres::start();
    // Two upstream connections. Unpinned, the maker's connection would go back to the pool
    // and B would be served on it (the pool hands out the one given back last).
    let rw = start(&pg, "1", "2");
    let table = |n: u32| {
        let probe = format!("select count(*) from leak{n}");
        (probe, SqlState::UNDEFINED_TABLE)
    };
    let cases = [
        ("create temp table leak1 (a int)", table(1)),
        ("select 1 as a into temp leak2", table(2)),
        ("select 1 as a into temporary table leak3", table(3)),
        ("create table pg_temp.leak4 (a int)", table(4)),
        // PostgreSQL creates unqualified tables in pg_temp when it comes first in the path.
        (
            "set search_path = pg_temp, public; create table leak5 (a int)",
            table(5),
        ),
        (
            "declare leak6 cursor with\n hold for select 1",
            ("fetch all from leak6".into(), SqlState::INVALID_CURSOR_NAME),
        ),
        // The same path as a startup parameter: pinned from the start.
        ("create table leak7 (a int)", table(7)),
    ];
    for (i, (make, (probe, code))) in cases.iter().enumerate() {
        let missing = |e: tokio_postgres::Error, who: &str| {
            assert_eq!(e.code(), Some(code), "{make}: {who}: {e}");
        };
        let options = match i {
            6 => " options='-c search_path=pg_temp,public'",
            _ => "",
        };
        let a = connect_to(&format!("{}{options}", rw.connection_string("postgres"))).await;
        a.batch_execute(make).await.unwrap();
        let b = connect(&rw).await;
        missing(b.simple_query(probe).await.expect_err("B saw it"), "B");
        for _ in 0..3 {
            a.simple_query(probe).await.unwrap();
        }
        drop((a, b));
        // After A left: both upstream connections, each held by a transaction of its own.
        let (c1, c2) = (connect(&rw).await, connect(&rw).await);
        for c in [&c1, &c2] {
            c.batch_execute("begin").await.unwrap();
            missing(
                c.simple_query(probe).await.expect_err("it outlived A"),
                "after A",
            );
        }
    }
}

/// B's `insert` waits for the only upstream connection, which A's transaction holds, until
/// it fails (cancelled by `token` when `cancel`); the error and how long it took.
async fn blocked(
    b: Client,
    token: &tokio_postgres::CancelToken,
    cancel: bool,
) -> (tokio_postgres::Error, Duration, Client) {
    let started = Instant::now();
    let mut waiter = tokio::spawn(async move {
        let result = b.batch_execute("insert into t values (2)").await;
        (result, b)
    });
    let (result, b) = if cancel {
        // A cancel that reaches ringwire before the statement does is dropped (it was for
        // no statement), so cancel until it ends, as a user would.
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            token.cancel_query(NoTls).await.unwrap();
            if let Ok(done) = tokio::time::timeout(Duration::from_millis(500), &mut waiter).await {
                break done.unwrap();
            }
        }
    } else {
        tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("the wait did not end")
            .unwrap()
    };
    match result {
        Ok(()) => panic!("B ran while A's transaction held the only connection"),
        Err(e) => (e, started.elapsed(), b),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_waiting_for_a_busy_pool_times_out_or_is_cancelled_and_its_client_goes_on() {
    let pg = Postgres::start();
    let rw = start_with(&pg, "1", "1", &["--upstream-wait-timeout-secs", "2"]);
    let a = connect(&rw).await;
    let mut b = connect(&rw).await;
    let token = b.cancel_token();
    a.batch_execute("create table t (x int)").await.unwrap();
    a.batch_execute("begin; insert into t values (1)")
        .await
        .unwrap();
    // A cancel sent while B is idle is for no statement: B's next wait ends at the timeout.
    token.cancel_query(NoTls).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for round in 0..2 {
        let (err, waited, back) = blocked(b, &token, false).await;
        b = back;
        let db = err.as_db_error().expect("an ErrorResponse");
        assert_eq!(
            db.code(),
            &SqlState::TOO_MANY_CONNECTIONS,
            "round {round}: {err}"
        );
        assert_eq!(
            db.message(),
            "timed out after 2 s waiting for an upstream connection"
        );
        let detail = db.detail().unwrap_or_default();
        assert!(
            detail.contains("All 1 of this shard's connections")
                && detail.contains("(--upstream-pool-size)")
                && detail.contains("never ran"),
            "{detail}"
        );
        assert!(waited >= Duration::from_secs(2), "{waited:?}");
        assert!(waited < Duration::from_secs(10), "{waited:?}");
    }
    // The extended protocol too: the error, then ReadyForQuery at the Sync.
    let started = Instant::now();
    let err = b.query("select $1::int", &[&5i32]).await.unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::TOO_MANY_CONNECTIONS), "{err}");
    assert!(started.elapsed() >= Duration::from_secs(2));
    // A cancel while B waits ends its statement before the timeout, as PostgreSQL's own
    // cancel would.
    let (err, waited, back) = blocked(b, &token, true).await;
    b = back;
    let db = err.as_db_error().expect("an ErrorResponse");
    assert_eq!(db.code(), &SqlState::QUERY_CANCELED, "{err}");
    assert_eq!(db.message(), "canceling statement due to user request");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
    // None of B's inserts ran upstream, and B goes on once A's transaction ends.
    a.batch_execute("commit").await.unwrap();
    assert_eq!(
        first_value(&b.simple_query("select count(*) from t").await.unwrap()),
        "1"
    );
    let row = b.query_one("select $1::int + 1", &[&5i32]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 6);
}

/// Timer flags at their largest (u64::MAX seconds: "never", as far as anyone can tell) do not
/// break a shard: the idle reaper, the health-check delay and a wait for a busy pool all sleep
/// that long without overflowing the clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timer_flags_at_their_largest_are_accepted_and_work() {
    let pg = Postgres::start();
    let max = u64::MAX.to_string();
    let rw = start_with(
        &pg,
        "1",
        "1",
        &[
            "--upstream-idle-timeout-secs",
            &max,
            "--upstream-check-delay-secs",
            &max,
            "--upstream-wait-timeout-secs",
            &max,
        ],
    );
    let a = connect(&rw).await;
    let b = connect(&rw).await;
    a.batch_execute("begin; select 1").await.unwrap();
    // b waits for the only connection (a timer of u64::MAX seconds is armed), then gets it.
    let waiter = tokio::spawn(async move {
        let rows = b.simple_query("select 7").await.unwrap();
        (first_value(&rows), b)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "b did not wait for the connection");
    a.batch_execute("commit").await.unwrap();
    let (seven, b) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("b never got the connection")
        .unwrap();
    assert_eq!(seven, "7");
    for client in [&a, &b] {
        assert_eq!(
            first_value(&client.simple_query("select 1").await.unwrap()),
            "1"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_vanishes_mid_transaction_is_rolled_back_upstream() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", "1");
    let a = connect(&rw).await;
    a.batch_execute("create table t (x int)").await.unwrap();
    a.batch_execute("begin; insert into t values (1)")
        .await
        .unwrap();
    drop(a);
    let b = connect(&rw).await;
    assert_eq!(
        first_value(&b.simple_query("select count(*) from t").await.unwrap()),
        "0"
    );
    // The connection was reused, not left idle in transaction.
    let d = direct(&pg).await;
    let stuck = first_value(
        &d.simple_query(
            "select count(*) from pg_stat_activity where state like 'idle in transaction%'",
        )
        .await
        .unwrap(),
    );
    assert_eq!(stuck, "0");
}

/// A cancel that PostgreSQL delivers late (its signal lands after the statement it was for
/// ended) hits whatever that backend runs next. While client C is cancelled over and over,
/// clients B share the pool's one upstream connection with it, and not one of B's statements
/// may be cancelled: a connection a cancel was forwarded to is closed when it goes back, not
/// handed on. Before, about one B statement in a hundred was cancelled (PostgreSQL directly:
/// none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_that_lands_late_never_reaches_another_clients_statement() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", "1");
    let until = Instant::now() + Duration::from_secs(4);
    let c = connect(&rw).await;
    let token = c.cancel_token();
    let canceller = tokio::spawn(async move {
        let mut n = 0u64;
        while Instant::now() < until {
            // 1-23 ms apart, varied so that some land mid-statement and some at its end.
            n = n
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            tokio::time::sleep(Duration::from_millis(1 + (n >> 59) + (n >> 61))).await;
            token.cancel_query(NoTls).await.unwrap();
        }
    });
    let cancelled_c = tokio::spawn(async move {
        let mut cancelled = 0;
        while Instant::now() < until {
            if let Err(e) = c.simple_query("select pg_sleep(0.005)").await {
                assert_eq!(e.code(), Some(&SqlState::QUERY_CANCELED), "{e}");
                cancelled += 1;
            }
        }
        cancelled
    });
    let mut bs = Vec::new();
    for _ in 0..2 {
        let b = connect(&rw).await;
        bs.push(tokio::spawn(async move {
            let mut runs = 0;
            while Instant::now() < until {
                if let Err(e) = b.simple_query("select pg_sleep(0.02)").await {
                    panic!(
                        "run {runs} of a client nobody cancelled failed: {:?}",
                        e.as_db_error()
                    );
                }
                runs += 1;
            }
            runs
        }));
    }
    canceller.await.unwrap();
    let cancelled = cancelled_c.await.unwrap();
    let mut runs = 0;
    for b in bs {
        runs += b.await.unwrap();
    }
    assert!(cancelled > 0, "no statement of C was cancelled");
    assert!(runs > 20, "B ran {runs} statements");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_the_running_upstream_statement_only() {
    let pg = Postgres::start();
    let rw = start(&pg, "2", "2");
    for _ in 0..3 {
        let client = connect(&rw).await;
        let token = client.cancel_token();
        // A cancel while nothing runs is dropped: the next statement is not hit by it.
        token.cancel_query(NoTls).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            first_value(
                &client
                    .simple_query("select pg_sleep(0.3), 7")
                    .await
                    .unwrap()
            ),
            ""
        );
        let started = Instant::now();
        let mut sleeper = tokio::spawn(async move {
            client
                .simple_query("select pg_sleep(10)")
                .await
                .map(|_| client)
        });
        // A cancel that arrives before the statement reached the server is dropped (as above),
        // and on a loaded machine 300 ms may not be enough for it to get there: cancel again,
        // as a user would, until it ends.
        let outcome = loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            token.cancel_query(NoTls).await.unwrap();
            if let Ok(done) = tokio::time::timeout(Duration::from_millis(700), &mut sleeper).await {
                break done.unwrap();
            }
        };
        let err = match outcome {
            Ok(_) => panic!("pg_sleep(10) was not cancelled"),
            Err(e) => e,
        };
        assert_eq!(err.code(), Some(&SqlState::QUERY_CANCELED), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_connection_killed_mid_transaction_fails_with_08006_and_the_client_goes_on() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", "2");
    let a = connect(&rw).await;
    a.batch_execute("create table t (x int)").await.unwrap();
    a.batch_execute("begin; insert into t values (1)")
        .await
        .unwrap();
    let pid: i32 = first_value(&a.simple_query("select pg_backend_pid()").await.unwrap())
        .parse()
        .unwrap();
    let d = direct(&pg).await;
    d.execute("select pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let err = a
        .batch_execute("insert into t values (2)")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::CONNECTION_FAILURE), "{err}");
    // The client is still connected, outside any transaction, on a fresh upstream connection.
    assert_eq!(
        first_value(&a.simple_query("select count(*) from t").await.unwrap()),
        "0"
    );
    let stmt = a.prepare("select count(*) + $1 from t").await.unwrap();
    assert_eq!(
        a.query_one(&stmt, &[&1i64]).await.unwrap().get::<_, i64>(0),
        1
    );
    // An idle pooled connection that died is replaced without the client noticing.
    let pid: i32 = first_value(&a.simple_query("select pg_backend_pid()").await.unwrap())
        .parse()
        .unwrap();
    d.execute("select pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        a.query_one(&stmt, &[&2i64]).await.unwrap().get::<_, i64>(0),
        2
    );
}

fn psql(port: u16, sql: &str, stdin: &str) -> String {
    let out = common::output_with_stdin(
        Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args([
                "-U",
                "postgres",
                "-X",
                "-v",
                "ON_ERROR_STOP=1",
                "-At",
                "-c",
                sql,
            ])
            .arg("postgres"),
        stdin.as_bytes(),
    );
    assert!(
        out.status.success(),
        "psql -c {sql:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn psql_and_copy_from_stdin() {
    let pg = Postgres::start();
    let rw = start(&pg, "2", "2");
    psql(rw.port, "create table c (a int, b text)", "");
    psql(rw.port, "copy c from stdin", "1\tx\n2\ty\n");
    assert_eq!(
        psql(rw.port, "select string_agg(b, ',' order by a) from c", ""),
        "x,y\n"
    );
    // A failing COPY reports PostgreSQL's error and the same session goes on.
    let out = common::output_with_stdin(
        Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &rw.port.to_string()])
            .args(["-U", "postgres", "-X", "-At", "-c", "copy c from stdin"])
            .args(["-c", "select count(*) from c", "postgres"]),
        b"3\tz\nnot-a-number\tw\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid input syntax for type integer"),
        "{stderr}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2\n");
    assert_eq!(psql(rw.port, "select count(*) from c", ""), "2\n");
}

fn pgbench(port: u16, args: &[&str]) -> String {
    common::pgbench::run(port, args)
}

/// Consistency of the tpcb-like tables: each transaction adds the same delta to one account,
/// teller and branch and logs it in history (valid for one run after `-i`, which truncates
/// history and resets balances).
async fn assert_tpcb_consistent(pg: &Postgres, transactions: u64) {
    let d = direct(pg).await;
    let row = d
        .query_one(
            "select (select coalesce(sum(abalance), 0) from pgbench_accounts)::int8,
                    (select coalesce(sum(tbalance), 0) from pgbench_tellers)::int8,
                    (select coalesce(sum(bbalance), 0) from pgbench_branches)::int8,
                    (select coalesce(sum(delta), 0) from pgbench_history)::int8,
                    (select count(*) from pgbench_history)",
            &[],
        )
        .await
        .unwrap();
    let (a, t, b, h, n): (i64, i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    assert_eq!((a, t, b), (h, h, h), "balances disagree with history");
    assert_eq!(n as u64, transactions);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_through_ringwire_in_every_protocol_mode() {
    let pg = Postgres::start();
    let rw = start(&pg, "2", "2");
    pgbench(rw.port, &["-i", "-s", "1", "-q"]);
    let report = pgbench(rw.port, &["-S", "-c", "8", "-j", "2", "-T", "2"]);
    let (done, failed) = common::pgbench::processed_and_failed(&report);
    assert!(done > 0 && failed == 0, "{report}");
    // tpcb-like: more clients than upstream connections (2 shards × 2), so transactions
    // queue for connections. -j = -c: pgbench's prepared mode prepares synchronously, which
    // would block a thread's other clients while one holds a connection.
    for mode in ["simple", "extended", "prepared"] {
        pgbench(rw.port, &["-i", "-s", "1", "-q"]);
        let report = pgbench(rw.port, &["-M", mode, "-c", "6", "-j", "6", "-t", "50"]);
        let (done, failed) = common::pgbench::processed_and_failed(&report);
        assert_eq!((done, failed), (300, 0), "{mode}: {report}");
        assert_tpcb_consistent(&pg, 300).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_authentication_scram_and_md5() {
    let pg = Postgres::start();
    let d = direct(&pg).await;
    d.batch_execute(
        "set password_encryption = 'scram-sha-256'; create role s login password 'sécret';
         set password_encryption = 'md5'; create role m login password 'md5pw';
         grant all on schema public to s, m",
    )
    .await
    .unwrap();
    pg.write_hba(
        "local all all trust\nhost all postgres 127.0.0.1/32 trust\n\
         host all s 127.0.0.1/32 scram-sha-256\nhost all m 127.0.0.1/32 md5\n",
    );
    d.batch_execute("select pg_reload_conf()").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (user, password) in [("s", "s%C3%A9cret"), ("m", "md5pw")] {
        let url = format!(
            "postgres://{user}:{password}@127.0.0.1:{}/postgres",
            pg.port
        );
        // The URL's credentials log everyone in with `--upstream-login url` (and do ringwire's
        // own work in either mode); tests/upstream_users.rs covers clients as themselves.
        let rw = Ringwire::start(&[
            "--shards",
            "1",
            "--upstream",
            &url,
            "--upstream-login",
            "url",
        ]);
        let c = connect(&rw).await;
        assert_eq!(
            first_value(&c.simple_query("select current_user").await.unwrap()),
            user
        );
        // A wrong password is a startup error, not a broken server.
        let bad = format!("postgres://{user}:wrong@127.0.0.1:{}/postgres", pg.port);
        let out = Command::new(env!("CARGO_BIN_EXE_ringwire"))
            .args([
                "--listen",
                "127.0.0.1:0",
                "--shards",
                "1",
                "--upstream",
                &bad,
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("28P01"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_whose_result_type_changed_is_prepared_afresh_for_new_parses() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", "1");
    let a = connect(&rw).await;
    a.batch_execute("create table d (x int); insert into d values (1)")
        .await
        .unwrap();
    let old = a.prepare("select * from d").await.unwrap();
    assert_eq!(a.query(&old, &[]).await.unwrap()[0].len(), 1);
    direct(&pg)
        .await
        .batch_execute("alter table d add column y int default 5")
        .await
        .unwrap();
    // The statement prepared before keeps failing, as it does on PostgreSQL itself.
    let err = a.query(&old, &[]).await.unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{err}");
    // The same text prepared again, by this client or another, sees the new columns.
    let b = connect(&rw).await;
    let fresh = b.prepare("select * from d").await.unwrap();
    let rows = b.query(&fresh, &[]).await.unwrap();
    assert_eq!((rows[0].len(), rows[0].get::<_, i32>(1)), (2, 5));
    let again = a.prepare("select * from d").await.unwrap();
    assert_eq!(a.query(&again, &[]).await.unwrap()[0].len(), 2);
}

/// After a schema change, a statement a client parses is the new one, as at PostgreSQL, even
/// where ringwire answers the Parse from a connection that prepared the text before the
/// change. The client here sends what node-postgres sends for a named query (Parse, Bind,
/// Describe portal, Execute, Sync; then the same without the Parse): through ringwire and at
/// PostgreSQL it gets the same replies. Before, its every execution failed with 0A000 "cached
/// plan must not change result type" (node-postgres never parses a name again). A client
/// that holds the old row description (it described the statement before the change) still
/// gets 0A000, as at PostgreSQL, also on an upstream connection opened after the change,
/// where preparing the text again would have sent it rows of the new type under the old
/// description.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_parsed_after_a_schema_change_has_the_new_result_type() {
    use protocol::frontend::encode_parse;
    use protocol::frontend::Target;
    use protocol::frontend::{encode_bind, encode_describe, encode_empty, encode_execute};
    let pg = Postgres::start();
    let rw = start(&pg, "1", "1");
    let admin = direct(&pg).await;
    admin
        .batch_execute("create table d (x int); insert into d values (1)")
        .await
        .unwrap();
    let run = |m: &mut Vec<u8>, name: &str| {
        encode_bind(m, "", name, &[], &[], &[]);
        encode_execute(m, "", 0);
        encode_empty(m, b'S');
    };
    // A client that describes the statement (as pgx, pgjdbc and tokio-postgres do) and runs
    // it: the pool's one connection has it prepared.
    let mut old = raw_login(&rw);
    let mut m = Vec::new();
    encode_parse(&mut m, "s", "select * from d", &[]);
    encode_describe(&mut m, Target::Statement, "s");
    run(&mut m, "s");
    let replies = raw_exchange(&mut old, &m, 1);
    assert!(replies.contains(&(b'D', Some("1".into()))), "{replies:?}");
    admin
        .batch_execute("alter table d alter column x type text using 'changed'")
        .await
        .unwrap();
    let node_query = |parse: bool| {
        let mut m = Vec::new();
        if parse {
            encode_parse(&mut m, "q", "select * from d", &[]);
        }
        encode_bind(&mut m, "", "q", &[], &[], &[]);
        encode_describe(&mut m, Target::Portal, "");
        encode_execute(&mut m, "", 0);
        encode_empty(&mut m, b'S');
        m
    };
    let flat = same_replies_as_postgres(&pg, &rw, |c| {
        vec![
            raw_exchange(c, &node_query(true), 1),
            raw_exchange(c, &node_query(false), 1),
        ]
    });
    assert_eq!(
        flat.iter()
            .filter(|m| **m == (b'D', Some("changed".into())))
            .count(),
        2,
        "{flat:?}"
    );
    // The client that described it before the change keeps failing, as at PostgreSQL: on the
    // connection that has the old statement, and on one opened since.
    let refused = (b'E', Some("0A000".to_string()));
    let mut m = Vec::new();
    run(&mut m, "s");
    assert!(raw_exchange(&mut old, &m, 1).contains(&refused));
    let admin_pid: i32 = admin
        .query_one("select pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    end_client_backends(&pg, &[admin_pid]);
    for _ in 0..2 {
        let replies = raw_exchange(&mut old, &m, 1);
        assert!(replies.contains(&refused), "{replies:?}");
    }
    // Prepared again, it has the new type; a new node-postgres-like client works at once.
    let mut m = Vec::new();
    encode_parse(&mut m, "s2", "select * from d", &[]);
    run(&mut m, "s2");
    let replies = raw_exchange(&mut old, &m, 1);
    assert!(
        replies.contains(&(b'D', Some("changed".into()))),
        "{replies:?}"
    );
    let replies = raw_exchange(&mut raw_login(&rw), &node_query(true), 1);
    assert!(
        replies.contains(&(b'D', Some("changed".into()))),
        "{replies:?}"
    );
    // Found in review: a batch that continues an implicit transaction an earlier write left
    // open (an INSERT sent with Flush, answered, no Sync yet) is not run again, since the
    // error rolled back that INSERT too: the client learns it failed, never that it worked.
    admin
        .batch_execute("alter table d add column y int default 5")
        .await
        .unwrap();
    let mut c = raw_login(&rw);
    let mut m = Vec::new();
    encode_parse(&mut m, "", "insert into d values ('unsynced')", &[]);
    encode_bind(&mut m, "", "", &[], &[], &[]);
    encode_execute(&mut m, "", 0);
    encode_empty(&mut m, b'H');
    let replies = raw_exchange_until(&mut c, &m, b'C', 1);
    assert_eq!(replies.last(), Some(&(b'C', None)), "{replies:?}");
    let replies = raw_exchange(&mut c, &node_query(true), 1);
    let failed = replies.iter().any(|(tag, _)| *tag == b'E');
    let kept: i64 = admin
        .query_one("select count(*) from d where x = 'unsynced'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, i64::from(!failed), "{replies:?}");
}

/// A statement made with SQL `PREPARE` runs through the extended protocol too, as libpq's
/// `PQexecPrepared` and `PQdescribePrepared` run it: `PREPARE` pins the session, and Bind,
/// Describe and Close of a name the client never parsed go to its connection as they are.
/// Compared with PostgreSQL message for message. Before, each got 26000 from ringwire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_made_with_sql_prepare_runs_through_the_extended_protocol() {
    use protocol::frontend::Target;
    use protocol::frontend::{encode_bind, encode_close, encode_describe};
    use protocol::frontend::{encode_empty, encode_execute, encode_query};
    let pg = Postgres::start();
    let rw = start(&pg, "1", "1");
    let run = |m: &mut Vec<u8>, name: &str, arg: &[u8]| {
        encode_bind(m, "", name, &[], &[Some(arg)], &[]);
        encode_execute(m, "", 0);
        encode_empty(m, b'S');
    };
    let flat = same_replies_as_postgres(&pg, &rw, |c| {
        let mut steps = Vec::new();
        let mut m = Vec::new();
        encode_query(&mut m, "prepare byhand (int) as select $1 + 1");
        steps.push(raw_exchange(c, &m, 1));
        let mut m = Vec::new();
        run(&mut m, "byhand", b"41");
        steps.push(raw_exchange(c, &m, 1));
        let mut m = Vec::new();
        encode_describe(&mut m, Target::Statement, "byhand");
        encode_empty(&mut m, b'S');
        steps.push(raw_exchange(c, &m, 1));
        // A name that exists nowhere: the server's own 26000.
        let mut m = Vec::new();
        run(&mut m, "nosuch", b"1");
        steps.push(raw_exchange(c, &m, 1));
        // Closed by the protocol, it is gone for SQL too, and may be prepared again.
        let mut m = Vec::new();
        encode_close(&mut m, Target::Statement, "byhand");
        encode_empty(&mut m, b'S');
        encode_query(&mut m, "execute byhand (1)");
        encode_query(&mut m, "prepare byhand (int) as select $1 * 2");
        steps.push(raw_exchange(c, &m, 3));
        let mut m = Vec::new();
        run(&mut m, "byhand", b"21");
        steps.push(raw_exchange(c, &m, 1));
        steps
    });
    assert!(flat.contains(&(b'D', Some("42".into()))), "{flat:?}");
    assert_eq!(
        flat.iter()
            .filter(|m| m.1.as_deref() == Some("26000"))
            .count(),
        2,
        "{flat:?}"
    );
    assert_eq!(flat.last(), Some(&(b'Z', None)), "{flat:?}");
    assert!(flat.ends_with(&[
        (b'2', None),
        (b'D', Some("42".into())),
        (b'C', None),
        (b'Z', None)
    ]));
}

/// pgjdbc describes the portal of a statement's first named execution and reads later
/// results, in binary, by that description. After a schema change its statement must fail
/// with 0A000 as at PostgreSQL (pgjdbc then prepares it again), on the connection that has
/// the old statement and on one opened since, and the error must roll back what ran before
/// it in its transaction. Found by a black-box test in session 26: ringwire took the
/// statement as never described, prepared it afresh and sent bigint bytes under pgjdbc's
/// int4 description (a wrong value, no error). A client that describes the portal in the
/// same batch it runs (node-postgres) gets the new type without an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_whose_portal_was_described_keeps_its_result_type() {
    use protocol::frontend::{encode_bind, encode_describe, encode_empty, encode_execute};
    use protocol::frontend::{encode_parse, encode_query, Target};
    use protocol::Format;
    let pg = Postgres::start();
    let rw = start(&pg, "1", "1");
    let pg_url = pg.connection_string();
    let query = |c: &mut std::net::TcpStream, sql: &str| {
        let mut m = Vec::new();
        encode_query(&mut m, sql);
        raw_exchange(c, &m, 1)
    };
    let binary = |m: &mut Vec<u8>, name: &str| {
        encode_bind(m, "", name, &[], &[], &[Format::Binary]);
    };
    let flat = same_replies_as_postgres(&pg, &rw, |c| {
        let through_rw = c.peer_addr().unwrap().port() == rw.port;
        let psql = |sql: &str| {
            let out = Command::new("psql")
                .args([&pg_url, "-Atc", sql])
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        };
        psql("drop table if exists tj");
        let mut steps = vec![query(
            c,
            "create table tj (x int, y int); insert into tj values (1, 2)",
        )];
        let mut m = Vec::new();
        encode_parse(&mut m, "S_1", "select * from tj", &[]);
        binary(&mut m, "S_1");
        encode_describe(&mut m, Target::Portal, "");
        encode_execute(&mut m, "", 0);
        encode_empty(&mut m, b'S');
        steps.push(raw_exchange(c, &m, 1));
        let mut again = Vec::new();
        binary(&mut again, "S_1");
        encode_execute(&mut again, "", 0);
        encode_empty(&mut again, b'S');
        steps.push(raw_exchange(c, &again, 1));
        steps.push(query(c, "alter table tj alter column x type bigint"));
        steps.push(raw_exchange(c, &again, 1));
        if through_rw {
            // The pool's connection goes: the next one lacks the old statement.
            end_client_backends(&pg, &[]);
        }
        steps.push(raw_exchange(c, &again, 1));
        // What ran before the error in its transaction is rolled back.
        let mut m = Vec::new();
        encode_parse(&mut m, "", "insert into tj values (7, 7)", &[]);
        encode_bind(&mut m, "", "", &[], &[], &[]);
        encode_execute(&mut m, "", 0);
        binary(&mut m, "S_1");
        encode_execute(&mut m, "", 0);
        encode_empty(&mut m, b'S');
        steps.push(raw_exchange(c, &m, 1));
        steps.push(query(c, "select count(*) from tj where x = 7"));
        // A node-postgres-like client: its Bind, Describe portal and Execute in one batch.
        let mut m = Vec::new();
        encode_parse(&mut m, "q", "select x from tj", &[]);
        encode_bind(&mut m, "", "q", &[], &[], &[]);
        encode_describe(&mut m, Target::Portal, "");
        encode_execute(&mut m, "", 0);
        encode_empty(&mut m, b'S');
        steps.push(raw_exchange(c, &m, 1));
        steps
    });
    let refused = (b'E', Some("0A000".to_string()));
    assert_eq!(
        flat.iter().filter(|m| **m == refused).count(),
        3,
        "{flat:?}"
    );
    assert!(flat.contains(&(b'D', Some("0".into()))), "{flat:?}");
    assert!(flat.contains(&(b'D', Some("1".into()))), "{flat:?}");
}

/// psycopg sends `DEALLOCATE ALL` after every rollback once it has prepared a statement. In
/// a session that never pinned, it forgets the client's statements and pins nothing: another
/// client gets the pool's one connection at once. Before, it pinned the session, and the
/// other client waited until this one disconnected (53300 after the pool wait). The client's
/// replies are PostgreSQL's: a statement it deallocated is gone (26000), and its name may be
/// prepared again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deallocate_all_forgets_the_clients_statements_and_pins_nothing() {
    use protocol::frontend::encode_query;
    use protocol::frontend::{encode_bind, encode_empty, encode_execute, encode_parse};
    let pg = Postgres::start();
    let rw = start_with(&pg, "1", "1", &["--upstream-wait-timeout-secs", "3"]);
    let run = |m: &mut Vec<u8>, name: &str| {
        encode_bind(m, "", name, &[], &[], &[]);
        encode_execute(m, "", 0);
        encode_empty(m, b'S');
    };
    let other = std::cell::RefCell::new(raw_login(&rw));
    other
        .borrow()
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let flat = same_replies_as_postgres(&pg, &rw, |c| {
        let mut steps = Vec::new();
        let mut m = Vec::new();
        encode_parse(&mut m, "_pg3_0", "select 10", &[]);
        run(&mut m, "_pg3_0");
        steps.push(raw_exchange(c, &m, 1));
        for sql in ["BEGIN", "select 1", "ROLLBACK", "DEALLOCATE ALL"] {
            let mut m = Vec::new();
            encode_query(&mut m, sql);
            steps.push(raw_exchange(c, &m, 1));
        }
        if c.peer_addr().unwrap().port() == rw.port {
            // This client holds no connection now: the other gets the only one at once (a
            // read that waits past its 2 s timeout fails the test).
            let mut m = Vec::new();
            encode_query(&mut m, "select 2");
            let replies = raw_exchange(&mut other.borrow_mut(), &m, 1);
            assert!(replies.contains(&(b'D', Some("2".into()))), "{replies:?}");
        }
        let mut m = Vec::new();
        run(&mut m, "_pg3_0");
        steps.push(raw_exchange(c, &m, 1));
        let mut m = Vec::new();
        encode_parse(&mut m, "_pg3_0", "select 20", &[]);
        run(&mut m, "_pg3_0");
        steps.push(raw_exchange(c, &m, 1));
        steps
    });
    assert!(flat.contains(&(b'E', Some("26000".into()))), "{flat:?}");
    assert!(flat.contains(&(b'D', Some("20".into()))), "{flat:?}");
}

/// Code stored upstream can drop the statements ringwire prepared on its connection (a
/// function's `EXECUTE 'DEALLOCATE ALL'`). The next use of one there fails once, with
/// PostgreSQL's 26000 and a detail that says why, and the connection is closed as it goes
/// back: from then on every statement works, for this client and the shard's others,
/// including one prepared on that connection after the deallocation (a Parse of it again
/// there would fail with 42P05). Before, every later use failed, for every client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_code_upstream_deallocates_are_prepared_again() {
    let pg = Postgres::start();
    direct(&pg)
        .await
        .batch_execute(
            "create function drop_statements() returns void language plpgsql as \
               $$begin execute 'deallocate all'; end$$",
        )
        .await
        .unwrap();
    let rw = start(&pg, "1", "1");
    let a = connect(&rw).await;
    let b = connect(&rw).await;
    let sql = "select 41 + $1::int";
    let (sa, sb) = (a.prepare(sql).await.unwrap(), b.prepare(sql).await.unwrap());
    let answer = async |c: &Client, s| c.query_one(s, &[&1i32]).await.map(|r| r.get::<_, i32>(0));
    assert_eq!(answer(&a, &sa).await.unwrap(), 42);
    assert_eq!(answer(&b, &sb).await.unwrap(), 42);
    a.batch_execute("select drop_statements()").await.unwrap();
    // Prepared (and confirmed) on the pool's one connection after the deallocation.
    let later = b.prepare("select 1 + $1::int").await.unwrap();
    assert_eq!(answer(&b, &later).await.unwrap(), 2);
    let err = answer(&a, &sa).await.unwrap_err();
    let db = err.as_db_error().expect("a server error");
    assert_eq!(db.code(), &SqlState::INVALID_SQL_STATEMENT_NAME, "{db:?}");
    assert!(
        db.detail().is_some_and(|d| d.contains("deallocated")),
        "{db:?}"
    );
    for _ in 0..2 {
        assert_eq!(answer(&a, &sa).await.unwrap(), 42);
        assert_eq!(answer(&b, &sb).await.unwrap(), 42);
        assert_eq!(answer(&b, &later).await.unwrap(), 2);
    }
}

/// Terminate every client backend of `pg` but those in `keep`, and wait until they are gone:
/// each sent its FATAL before it exited, so ringwire sees an idle pooled connection of them
/// dead before it would use it (without the wait, CI once ran a batch on one whose FATAL
/// had not arrived yet: 08006).
fn end_client_backends(pg: &Postgres, keep: &[i32]) {
    let keep: Vec<String> = keep.iter().map(i32::to_string).collect();
    let keep = if keep.is_empty() {
        String::new()
    } else {
        format!("and pid not in ({})", keep.join(","))
    };
    let pids = pg.query_value(&format!(
        "with victims as materialized (select pid from pg_stat_activity \
           where pid <> pg_backend_pid() and backend_type = 'client backend' {keep}) \
         select coalesce(string_agg(pid::text, ','), '') from victims \
         where pg_terminate_backend(pid)"
    ));
    if pids.is_empty() {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let left = format!("select count(*) from pg_stat_activity where pid in ({pids})");
    while pg.query_value(&left) != "0" {
        assert!(Instant::now() < deadline, "backends {pids} still there");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A raw TCP session logged in as postgres with no other startup parameter (psycopg's
/// default; tokio-postgres always sends some), answered up to ReadyForQuery.
fn raw_login(rw: &Ringwire) -> std::net::TcpStream {
    raw_login_at(&rw.addr())
}

fn raw_login_at(addr: &str) -> std::net::TcpStream {
    raw_login_as(addr, "postgres")
}

/// [`raw_login_at`] as `user` (trusted) on database `postgres`.
fn raw_login_as(addr: &str, user: &str) -> std::net::TcpStream {
    use protocol::frontend;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    frontend::encode_startup(
        &mut out,
        frontend::PROTOCOL_3_0,
        &[("user", user), ("database", "postgres")],
    );
    assert_eq!(raw_exchange(&mut s, &out, 1).last().unwrap().0, b'Z');
    s
}

/// Send raw bytes, then read messages until `ready` ReadyForQuery; returns per message its
/// tag and the SQLSTATE of an ErrorResponse or the first column of a DataRow.
fn raw_exchange(
    stream: &mut std::net::TcpStream,
    bytes: &[u8],
    ready: usize,
) -> Vec<(u8, Option<String>)> {
    raw_exchange_until(stream, bytes, b'Z', ready)
}

/// [`raw_exchange`], reading until the `ready`th message tagged `last`. Bytes read past that
/// message are dropped: only for replies that end there.
fn raw_exchange_until(
    stream: &mut std::net::TcpStream,
    bytes: &[u8],
    last: u8,
    ready: usize,
) -> Vec<(u8, Option<String>)> {
    use protocol::backend::BackendMessage;
    use std::io::Write;
    stream.write_all(bytes).unwrap();
    let mut buf = Vec::new();
    let mut got = Vec::new();
    let mut seen = 0;
    while seen < ready {
        while let Some((frame, n)) = protocol::wire::split_frame(&buf, 1 << 30).unwrap() {
            let code = match BackendMessage::parse(frame) {
                Ok(BackendMessage::ErrorResponse(f)) => Some(f.code().to_string()),
                Ok(BackendMessage::DataRow { values }) => values
                    .first()
                    .copied()
                    .flatten()
                    .map(|v| String::from_utf8_lossy(v).into_owned()),
                _ => None,
            };
            got.push((frame.tag, code));
            if frame.tag == last {
                seen += 1;
            }
            buf.drain(..n);
            if seen >= ready {
                break;
            }
        }
        if seen >= ready {
            break;
        }
        let mut chunk = [0u8; 8192];
        let n = common::wire::read_blocking(stream, &mut chunk).unwrap();
        assert!(n > 0, "ringwire closed the connection; got {got:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
    got
}

/// A client that LISTENs and then waits (as psycopg's `notifies()` or node-postgres'
/// `notification` event do) gets each notification when it is sent, as from PostgreSQL:
/// ringwire reads the pinned connection while the client is idle. Before, a notification
/// reached the client only with the reply to its next statement, so one that waited never
/// got it. One sent while the listener is in a transaction arrives after its commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listening_client_gets_notifications_without_asking() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", "2");
    let mut seen = Vec::new();
    for conninfo in [pg.connection_string(), rw.connection_string("postgres")] {
        let (listener, got) = common::client::listening(&conninfo).await;
        let notifier = connect_to(&conninfo).await;
        listener.batch_execute("listen jobs").await.unwrap();
        notifier.batch_execute("notify jobs, 'one'").await.unwrap();
        notifier
            .batch_execute("select pg_notify('jobs', 'two')")
            .await
            .unwrap();
        let wait_for = |n| common::client::heard_lines(&got, n);
        assert_eq!(wait_for(2).await, ["jobs: one", "jobs: two"], "{conninfo}");
        listener.batch_execute("begin; select 1").await.unwrap();
        notifier
            .batch_execute("notify jobs, 'three'")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before_commit = got.lock().unwrap().len();
        listener.batch_execute("commit").await.unwrap();
        notifier.batch_execute("notify jobs, 'four'").await.unwrap();
        seen.push((before_commit, wait_for(4).await));
    }
    assert_eq!(seen[0].0, 2, "PostgreSQL delivers after the commit");
    assert_eq!(seen[1], seen[0], "ringwire, then PostgreSQL");
}

/// Every message until the server closes the connection (the login's 10 s read timeout
/// fails the test if it never does), as [`raw_exchange`] reports them.
fn raw_read_to_end(stream: &mut std::net::TcpStream) -> Vec<(u8, Option<String>)> {
    use protocol::backend::BackendMessage;
    let mut buf = Vec::new();
    std::io::Read::read_to_end(stream, &mut buf).expect("the server closes the connection");
    let mut got = Vec::new();
    let mut rest = &buf[..];
    while let Some((frame, n)) = protocol::wire::split_frame(rest, 1 << 30).unwrap() {
        let code = match BackendMessage::parse(frame) {
            Ok(BackendMessage::ErrorResponse(f)) => Some(format!("{} {}", f.code(), f.message())),
            _ => None,
        };
        got.push((frame.tag, code));
        rest = &rest[n..];
    }
    assert!(
        rest.is_empty(),
        "a partial message before the end: {rest:?}"
    );
    got
}

/// `idle_in_transaction_session_timeout` is the upstream backend's to enforce, and the client
/// gets what PostgreSQL sends it: FATAL 25P03, then the end of the connection, at the moment
/// the timeout fires — whether the client set it (also inside the transaction; also for a
/// failed one) or the server's configuration did (ALTER ROLE); likewise `idle_session_timeout`
/// (57P05) for a session pinned to its connection. The connection serves the next client at
/// once, its transaction rolled back. Before, the dead connection stayed
/// with the silent client (the pool's only one here: the next client waited for it), and
/// the client learnt of it at its next statement, as 08006.
#[test]
fn an_idle_transaction_timeout_ends_the_session_as_postgres_ends_it() {
    use protocol::frontend;
    let pg = Postgres::start();
    pg.query_value("create table idle_tx (x int)");
    pg.query_value("create role idler login");
    pg.query_value("grant all on idle_tx to idler");
    // (Timeouts of 1 s: long enough that the pauses between A's statements never reach them
    // on a loaded machine.)
    pg.query_value("alter role idler set idle_in_transaction_session_timeout = '1s'");
    let rw = start(&pg, "1", "1");
    let direct = format!("127.0.0.1:{}", pg.port);
    let cases: [(&str, &[&str]); 4] = [
        (
            "postgres",
            &[
                "begin",
                "set idle_in_transaction_session_timeout = '1s'",
                "insert into idle_tx values (1)",
            ],
        ),
        (
            "postgres",
            &[
                "set idle_in_transaction_session_timeout = 1000",
                "begin",
                "insert into idle_tx values (2)",
                "select 1/0",
            ],
        ),
        ("idler", &["begin", "insert into idle_tx values (3)"]),
        // Pinned outside a transaction: idle_session_timeout, 57P05.
        ("postgres", &["listen x", "set idle_session_timeout = '1s'"]),
    ];
    let mut transcripts = Vec::new();
    for addr in [direct.as_str(), rw.addr().as_str()] {
        let mut transcript = Vec::new();
        for (user, script) in cases {
            let mut a = raw_login_as(addr, user);
            for sql in script {
                let mut q = Vec::new();
                frontend::encode_query(&mut q, sql);
                transcript.extend(raw_exchange(&mut a, &q, 1));
            }
            // A says nothing more; B's statement (as the same user) needs A's connection, the
            // only one its pool may open.
            let started = Instant::now();
            let mut b = raw_login_as(addr, user);
            let mut q = Vec::new();
            frontend::encode_query(&mut q, "select count(*) from idle_tx");
            let b_got = raw_exchange(&mut b, &q, 1);
            assert_eq!(values(&b_got), ["0"], "{addr}: B sees no row of A's");
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{addr}: B waited {:?} for A's connection",
                started.elapsed()
            );
            transcript.extend(raw_read_to_end(&mut a));
        }
        transcripts.push(transcript);
    }
    let fatals = transcripts[0]
        .iter()
        .filter(|(tag, _)| *tag == b'E')
        .count();
    assert_eq!(fatals, 5, "PostgreSQL: {:?}", transcripts[0]);
    assert_eq!(transcripts[1], transcripts[0], "ringwire, then PostgreSQL");
}

/// A session pinned to its upstream connection (here by LISTEN) ends when that connection's
/// backend is terminated, as a PostgreSQL session does, with the server's FATAL: whether it
/// was idle or mid-statement. What it pinned cannot be rebuilt on another connection; before,
/// the client got 08006 once and went on without it (a LISTEN gone, so its notifications
/// never came). An unpinned client's transaction still fails with 08006 and the client goes
/// on (`an_upstream_connection_killed_mid_transaction_fails_with_08006_and_the_client_goes_on`).
#[test]
fn a_pinned_session_ends_with_its_upstream_connection() {
    use protocol::frontend;
    let pg = Postgres::start();
    let rw = start(&pg, "1", "2");
    let direct = format!("127.0.0.1:{}", pg.port);
    let query = |sql: &str| {
        let mut q = Vec::new();
        frontend::encode_query(&mut q, sql);
        q
    };
    let mut transcripts = Vec::new();
    for addr in [direct.as_str(), rw.addr().as_str()] {
        let mut transcript = Vec::new();
        for mid_statement in [false, true] {
            let mut a = raw_login_at(addr);
            transcript.extend(raw_exchange(&mut a, &query("listen x"), 1));
            let pid = values(&raw_exchange(&mut a, &query("select pg_backend_pid()"), 1));
            if mid_statement {
                std::io::Write::write_all(&mut a, &query("select pg_sleep(10)")).unwrap();
                std::thread::sleep(Duration::from_millis(300));
            }
            let killed = pg.query_value(&format!("select pg_terminate_backend({})", pid[0]));
            assert_eq!(killed, "t");
            transcript.extend(raw_read_to_end(&mut a));
        }
        transcripts.push(transcript);
    }
    let fatal = "57P01 terminating connection due to administrator command";
    assert_eq!(
        values(&transcripts[0])
            .iter()
            .filter(|v| *v == fatal)
            .count(),
        2,
        "PostgreSQL: {:?}",
        transcripts[0]
    );
    assert_eq!(transcripts[1], transcripts[0], "ringwire, then PostgreSQL");
}

/// The SQLSTATEs and first values in a [`raw_exchange`] transcript.
fn values(transcript: &[(u8, Option<String>)]) -> Vec<String> {
    transcript.iter().filter_map(|g| g.1.clone()).collect()
}

/// `--upstream-idle-transaction-timeout-secs` (PgBouncer's `idle_transaction_timeout`): a
/// client that holds the upstream connection with work open — a transaction block, or
/// extended-protocol messages no Sync closed — and says nothing for that long gets FATAL
/// 25P03 and is disconnected, its work rolled back, and the client waiting for the pool's
/// only connection gets it. A session pinned outside a transaction (LISTEN) and an idle
/// autocommit client are not cut.
#[test]
fn the_idle_transaction_limit_frees_a_held_connection() {
    use protocol::frontend;
    let pg = Postgres::start();
    pg.query_value("create table held (x int)");
    let rw = start_with(
        &pg,
        "1",
        "1",
        &["--upstream-idle-transaction-timeout-secs", "1"],
    );
    let addr = rw.addr();
    let query = |sql: &str| {
        let mut q = Vec::new();
        frontend::encode_query(&mut q, sql);
        q
    };
    let mut listener = raw_login_at(&addr);
    raw_exchange(&mut listener, &query("listen ch"), 1);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        values(&raw_exchange(&mut listener, &query("select 1"), 1)),
        ["1"]
    );
    drop(listener);
    let mut unsynced = Vec::new();
    frontend::encode_parse(&mut unsynced, "", "insert into held values (2)", &[]);
    frontend::encode_bind(&mut unsynced, "", "", &[], &[], &[]);
    frontend::encode_execute(&mut unsynced, "", 0);
    frontend::encode_empty(&mut unsynced, b'H');
    let held = [
        (
            "a transaction",
            query("begin; insert into held values (1)"),
            b'Z',
        ),
        ("an unsynced portal", unsynced, b'C'),
    ];
    for (what, bytes, last) in held {
        let mut a = raw_login_at(&addr);
        raw_exchange_until(&mut a, &bytes, last, 1);
        let started = Instant::now();
        let mut b = raw_login_at(&addr);
        let got = raw_exchange(&mut b, &query("select count(*) from held"), 1);
        let waited = started.elapsed();
        assert_eq!(values(&got), ["0"], "{what}: B sees none of A's rows");
        assert!(
            waited >= Duration::from_millis(600) && waited < Duration::from_secs(5),
            "{what}: B waited {waited:?}"
        );
        assert_eq!(
            raw_read_to_end(&mut a),
            [(
                b'E',
                Some("25P03 terminating connection due to idle-in-transaction timeout".into())
            )],
            "{what}"
        );
        // B, idle outside a transaction past the limit, goes on.
        std::thread::sleep(Duration::from_millis(1200));
        assert_eq!(values(&raw_exchange(&mut b, &query("select 2"), 1)), ["2"]);
    }
}

/// Extended-protocol messages up to a Flush, with the Execute (and Sync) to come, leave the
/// server an implicit transaction and an unnamed portal: pg-cursor (node-postgres) reads a
/// result that way, a few rows per Execute, outside any transaction. The connection stays with
/// that client until its Sync, as a backend of its own would: another client's statement
/// waits for it (before, it ran in between, on the same backend, which dropped the portal,
/// and the next Execute failed with 34000). A client that leaves in that state has its
/// connection closed, not pooled (a Sync would commit what it did). The transcript is
/// PostgreSQL's own.
#[test]
fn a_portal_read_across_flushes_keeps_its_connection_until_sync() {
    use protocol::frontend::{self, Target};
    let pg = Postgres::start();
    pg.query_value("create table left_behind (x int)");
    let rw = start(&pg, "1", "1");
    let mut first = Vec::new();
    frontend::encode_parse(&mut first, "", "select g from generate_series(1, 3) g", &[]);
    frontend::encode_bind(&mut first, "", "", &[], &[], &[]);
    frontend::encode_describe(&mut first, Target::Portal, "");
    frontend::encode_execute(&mut first, "", 1);
    frontend::encode_empty(&mut first, b'H');
    let mut rest = Vec::new();
    frontend::encode_execute(&mut rest, "", 0);
    frontend::encode_empty(&mut rest, b'S');
    let mut transcripts = Vec::new();
    let direct = format!("127.0.0.1:{}", pg.port);
    for addr in [direct.clone(), rw.addr()] {
        let addr = addr.as_str();
        let mut a = raw_login_at(addr);
        let mut b = raw_login_at(addr);
        let mut transcript = raw_exchange_until(&mut a, &first, b's', 1);
        // The other client's statement, sent now, must not run on A's backend in between:
        // through ringwire it waits for the one upstream connection.
        let mut q = Vec::new();
        frontend::encode_query(&mut q, "select 'b'");
        std::io::Write::write_all(&mut b, &q).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        if addr != direct {
            b.set_nonblocking(true).unwrap();
            let waiting = matches!(b.peek(&mut [0u8; 1]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
            b.set_nonblocking(false).unwrap();
            assert!(
                waiting,
                "B was answered while A's portal was open on the connection"
            );
        }
        transcript.extend(raw_exchange(&mut a, &rest, 1));
        let b_got = raw_exchange(&mut b, &[], 1);
        assert_eq!(values(&b_got), ["b"]);
        let rows = values(&transcript);
        assert_eq!(rows, ["1", "2", "3"], "{addr}: {transcript:?}");
        // A Query in between ends the implicit transaction and its portal, also one that
        // ringwire answers itself (SQL DEALLOCATE of a protocol-level statement).
        let mut named = Vec::new();
        frontend::encode_parse(&mut named, "s", "select 1", &[]);
        frontend::encode_empty(&mut named, b'S');
        transcript.extend(raw_exchange(&mut a, &named, 1));
        transcript.extend(raw_exchange_until(&mut a, &first, b's', 1));
        let mut deallocate = Vec::new();
        frontend::encode_query(&mut deallocate, "deallocate s");
        transcript.extend(raw_exchange(&mut a, &deallocate, 1));
        transcript.extend(raw_exchange(&mut a, &rest, 1));
        transcripts.push(transcript);
        // A client that leaves with its implicit transaction open: its insert is rolled
        // back, and nobody's statement runs inside it (and sees or commits the row).
        let mut c = raw_login_at(addr);
        let mut open = Vec::new();
        frontend::encode_parse(&mut open, "", "insert into left_behind values (1)", &[]);
        frontend::encode_bind(&mut open, "", "", &[], &[], &[]);
        frontend::encode_execute(&mut open, "", 0);
        frontend::encode_empty(&mut open, b'H');
        let got = raw_exchange_until(&mut c, &open, b'C', 1);
        assert_eq!(got.last().unwrap().0, b'C', "{got:?}");
        drop(c);
        let mut d = raw_login_at(addr);
        let mut probe = Vec::new();
        frontend::encode_query(&mut probe, "select count(*) from left_behind");
        let got = raw_exchange(&mut d, &probe, 1);
        assert_eq!(values(&got), ["0"], "{addr}");
    }
    assert_eq!(transcripts[1], transcripts[0], "ringwire, then PostgreSQL");
}

#[test]
fn malformed_and_misordered_messages_get_errors_and_the_session_goes_on() {
    use protocol::frontend::{self, Target};
    let pg = Postgres::start();
    let rw = start(&pg, "1", "1");
    let mut s = raw_login(&rw);
    let mut out = Vec::new();

    // Bind of a statement that does not exist, then messages that must be skipped to Sync.
    out.clear();
    frontend::encode_bind(&mut out, "", "nope", &[], &[], &[]);
    frontend::encode_execute(&mut out, "", 0);
    frontend::encode_empty(&mut out, b'S');
    let got = raw_exchange(&mut s, &out, 1);
    let tags: Vec<u8> = got.iter().map(|g| g.0).collect();
    assert_eq!(tags, b"EZ", "{got:?}");
    assert_eq!(got[0].1.as_deref(), Some("26000"));

    // A duplicate statement name, reported in place, after a good Parse's ParseComplete.
    out.clear();
    frontend::encode_parse(&mut out, "a", "select 1", &[]);
    frontend::encode_parse(&mut out, "a", "select 2", &[]);
    frontend::encode_describe(&mut out, Target::Statement, "a");
    frontend::encode_empty(&mut out, b'S');
    let got = raw_exchange(&mut s, &out, 1);
    let tags: Vec<u8> = got.iter().map(|g| g.0).collect();
    assert_eq!(tags, b"1EZ", "{got:?}");
    assert_eq!(got[1].1.as_deref(), Some("42P05"));

    // A Bind whose body is cut short: PostgreSQL's own error, and the session goes on.
    out.clear();
    out.extend_from_slice(&[b'B', 0, 0, 0, 9, 0, b'a', 0, 0, 5]);
    frontend::encode_empty(&mut out, b'S');
    frontend::encode_query(&mut out, "select 40 + 2");
    let got = raw_exchange(&mut s, &out, 2);
    assert!(got.iter().any(|g| g.0 == b'E'), "{got:?}");
    assert!(
        got.iter().any(|g| g.0 == b'D'),
        "the next Query ran: {got:?}"
    );
}

/// Every simple Query drops the server's unnamed statement, including the ones ringwire sends
/// on its own: the health check of an idle connection (`--upstream-check-delay-secs 0`: at
/// every hand-out) and the settings replay. The client never sent those, so its unnamed
/// statement must still work (pgx's describe-then-execute does exactly this).
#[test]
fn the_unnamed_statement_survives_ringwires_own_queries() {
    use protocol::frontend::{self, Target};
    let pg = Postgres::start();
    let rw = start_with(&pg, "1", "1", &["--upstream-check-delay-secs", "0"]);
    let mut s = raw_login(&rw);
    let mut out = Vec::new();

    for round in 0..3 {
        // Parse + Describe, then (another batch, so the connection goes back to the pool and
        // is checked when taken again) Bind + Execute of the unnamed statement.
        out.clear();
        frontend::encode_parse(&mut out, "", "select 41 + 1", &[]);
        frontend::encode_describe(&mut out, Target::Statement, "");
        frontend::encode_empty(&mut out, b'S');
        let tags: Vec<u8> = raw_exchange(&mut s, &out, 1).iter().map(|g| g.0).collect();
        assert_eq!(tags, b"1tTZ", "round {round}: Parse/Describe");
        if round == 2 {
            // Another client with other settings uses the one pooled connection in between,
            // so this client's next batch starts with ringwire's `RESET ALL; SET …` replay.
            let status = Command::new("psql")
                .env("PGAPPNAME", "another-client")
                .args(["-X", "-q", "-h", "127.0.0.1", "-p", &rw.port.to_string()])
                .args([
                    "-U",
                    "postgres",
                    "-d",
                    "postgres",
                    "-o",
                    "/dev/null",
                    "-c",
                    "select 1",
                ])
                .status()
                .expect("run psql");
            assert!(status.success());
        }
        out.clear();
        frontend::encode_bind(&mut out, "", "", &[], &[], &[]);
        frontend::encode_execute(&mut out, "", 0);
        frontend::encode_empty(&mut out, b'S');
        let got = raw_exchange(&mut s, &out, 1);
        let tags: Vec<u8> = got.iter().map(|g| g.0).collect();
        assert_eq!(
            tags, b"2DCZ",
            "round {round}: Bind/Execute of the unnamed statement: {got:?}"
        );
    }
}
