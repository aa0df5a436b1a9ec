//! Upstream mode with pipelining (`--upstream-pipeline on`, off by default): autocommit units of
//! several clients share one upstream connection, each with its own Sync. One shard and a pool
//! of one or two connections force the sharing; every test checks that each client gets
//! exactly its own replies, errors and settings, as if it had PostgreSQL to itself.
//! (Run with `RINGWIRE_IO=glommio` for the glommio socket path.)

mod common;

use std::time::{Duration, Instant};

use common::client::{connect, connect_to, text_rows};
use common::postgres::Postgres;
use common::ringwire::{rss_kib, Ringwire};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

/// For tests of what happens to units queued behind a long one: without it, a unit does not
/// join a pipe whose head has run for 10 ms while the pool has another connection, and a
/// shape that ran that long gets a pipe nobody joins after (see
/// `a_long_read_does_not_hold_up_clients_that_come_after_it`).
const QUEUE_BEHIND_LONG_UNITS: [&str; 2] = ["--upstream-pipeline-slow-ms", "60000"];

fn start(pg: &Postgres, pool: &str, extra: &[&str]) -> Ringwire {
    let url = pg.url();
    let mut args = vec![
        "--shards",
        "1",
        "--upstream",
        &url,
        "--upstream-pool-size",
        pool,
        "--upstream-pipeline-depth",
        "16",
    ];
    // Off by default (docs/ARCHITECTURE.md says why); these tests are about it being on.
    if !extra.contains(&"--upstream-pipeline") {
        args.extend_from_slice(&["--upstream-pipeline", "on"]);
    }
    if let Ok(level) = std::env::var("RINGWIRE_TEST_LOG_LEVEL") {
        args.push("--log-level");
        args.push(Box::leak(level.into_boxed_str()));
    }
    args.extend_from_slice(extra);
    Ringwire::start(&args)
}

/// Give the pool's connections this client kind's settings: a connection whose settings
/// differ runs one batch alone (and comes back with them), so without this the first units
/// of a test would not share anything.
async fn warm(rw: &Ringwire, connections: usize) {
    let clients: Vec<Client> = futures_join(connections, |_| connect(rw)).await;
    let mut tx = Vec::new();
    for c in &clients {
        // A transaction holds its connection: `connections` of them open `connections`.
        c.batch_execute("begin; select 1").await.unwrap();
        tx.push(c);
    }
    for c in tx {
        c.batch_execute("commit").await.unwrap();
    }
}

async fn futures_join<T, F, Fut>(n: usize, f: F) -> Vec<T>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(f(i).await);
    }
    out
}

/// Many clients at once, simple and extended protocol interleaved, each with results only it
/// can expect (its number in every row, result sizes that differ per client): every reply
/// reaches the client that asked, in order. Fails if the pipe hands a reply to the wrong unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_each_get_exactly_their_own_replies() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", &[]);
    warm(&rw, 1).await;
    let mut tasks = Vec::new();
    for c in 0..24i32 {
        let client = connect(&rw).await;
        tasks.push(tokio::spawn(async move {
            // The same text for every client: one upstream statement, shared.
            let shared = client
                .prepare("select $1::int4 * 1000 + $2::int4, repeat('x', $1::int4)")
                .await
                .unwrap();
            for i in 0..40i32 {
                let rows = text_rows(
                    client
                        .simple_query(&format!(
                            "select {c}, {i}, g from generate_series(1, {c} + {i} % 3) g"
                        ))
                        .await
                        .unwrap(),
                );
                assert_eq!(rows.len() as i32, c + i % 3, "client {c} round {i}");
                for (k, row) in rows.iter().enumerate() {
                    let want = [c.to_string(), i.to_string(), (k + 1).to_string()];
                    let got: Vec<&str> = row.iter().map(|v| v.as_deref().unwrap()).collect();
                    assert_eq!(got, want, "client {c} round {i}");
                }
                let row = client.query_one(&shared, &[&c, &i]).await.unwrap();
                assert_eq!(row.get::<_, i32>(0), c * 1000 + i, "client {c} round {i}");
                assert_eq!(row.get::<_, String>(1).len() as i32, c);
                // A text only this client and round uses: a fresh Parse on the shared
                // connection, then Bind/Execute, then Close.
                let own = format!("select $1::text || '/{c}/{i}'");
                let row = client
                    .query_one(own.as_str(), &[&format!("c{c}")])
                    .await
                    .unwrap();
                assert_eq!(row.get::<_, String>(0), format!("c{c}/{c}/{i}"));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// An error aborts only its own unit: clients whose statements fail (simple and extended)
/// share the connection with clients whose statements succeed, and neither sees the other's
/// outcome; the failing clients go on normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_in_one_unit_leaves_the_other_units_alone() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", &[]);
    warm(&rw, 1).await;
    let mut tasks = Vec::new();
    for c in 0..16i32 {
        let client = connect(&rw).await;
        tasks.push(tokio::spawn(async move {
            let divide = client.prepare("select 100 / $1::int4").await.unwrap();
            for i in 0..40i32 {
                let failing = (c + i) % 2 == 0;
                let divisor = if failing { 0 } else { c + 1 };
                match client.query_one(&divide, &[&divisor]).await {
                    Ok(row) if !failing => assert_eq!(row.get::<_, i32>(0), 100 / (c + 1)),
                    Err(e) if failing => {
                        assert_eq!(e.code(), Some(&SqlState::DIVISION_BY_ZERO), "{e}")
                    }
                    other => panic!("client {c} round {i}: {other:?}"),
                }
                let simple = client
                    .simple_query(&format!("select {c} / {divisor}, {i}"))
                    .await;
                match simple {
                    Ok(m) if !failing => {
                        let rows = text_rows(m);
                        assert_eq!(rows[0][0].as_deref(), Some(&*((c / divisor).to_string())));
                        assert_eq!(rows[0][1].as_deref(), Some(&*i.to_string()));
                    }
                    Err(e) if failing => {
                        assert_eq!(e.code(), Some(&SqlState::DIVISION_BY_ZERO), "{e}")
                    }
                    other => panic!("client {c} round {i}: {other:?}"),
                }
            }
            // Still in a clean session: autocommit, nothing aborted.
            let rows = text_rows(client.simple_query("select 1").await.unwrap());
            assert_eq!(rows[0][0].as_deref(), Some("1"));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// Clients with different settings (search_path, TimeZone) never share a pipelined
/// connection: each sees its own tables and time zone, and a client with default settings
/// afterwards sees none of theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_with_different_settings_never_share_a_connection() {
    let pg = Postgres::start();
    let setup = connect_to(&pg.connection_string()).await;
    setup
        .batch_execute(
            "create schema s1; create schema s2;
             create table s1.t (v text); insert into s1.t values ('one');
             create table s2.t (v text); insert into s2.t values ('two');",
        )
        .await
        .unwrap();
    let rw = start(&pg, "2", &[]);
    let mut tasks = Vec::new();
    for c in 0..12usize {
        let client = connect(&rw).await;
        tasks.push(tokio::spawn(async move {
            let (schema, value, zone) = match c % 3 {
                0 => ("s1", "one", "UTC"),
                1 => ("s2", "two", "Asia/Tokyo"),
                _ => ("s1", "one", "America/Sao_Paulo"),
            };
            client
                .batch_execute(&format!(
                    "set search_path = {schema}; set timezone = '{zone}'"
                ))
                .await
                .unwrap();
            let prepared = client
                .prepare("select v, current_setting('TimeZone') from t")
                .await
                .unwrap();
            for i in 0..30 {
                let row = client.query_one(&prepared, &[]).await.unwrap();
                assert_eq!(
                    (
                        row.get::<_, String>(0).as_str(),
                        row.get::<_, String>(1).as_str()
                    ),
                    (value, zone),
                    "client {c} round {i}"
                );
                let rows = text_rows(
                    client
                        .simple_query("select v, current_setting('search_path') from t")
                        .await
                        .unwrap(),
                );
                assert_eq!(rows[0][0].as_deref(), Some(value), "client {c} round {i}");
                assert_eq!(rows[0][1].as_deref(), Some(schema), "client {c} round {i}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let fresh = connect(&rw).await;
    let rows = text_rows(
        fresh
            .simple_query("select current_setting('search_path'), current_setting('TimeZone')")
            .await
            .unwrap(),
    );
    let direct = text_rows(
        setup
            .simple_query("select current_setting('search_path'), current_setting('TimeZone')")
            .await
            .unwrap(),
    );
    assert_eq!(rows, direct);
}

/// A client that goes away while its unit is in flight on the shared connection: its replies
/// are dropped, the units of the others (before and after it) are answered, and the
/// connection serves on (a pool of one: had it been lost or left out of step, nothing would
/// run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_unit_costs_the_others_nothing() {
    use common::wire::{logged_in, simple_query};
    use tokio::io::AsyncWriteExt;
    let pg = Postgres::start();
    let rw = start(&pg, "1", &QUEUE_BEHIND_LONG_UNITS);
    warm(&rw, 1).await;
    for round in 0..3 {
        let before = connect(&rw).await;
        let after = connect(&rw).await;
        let mut raw = logged_in(&rw.addr()).await;
        let slow = tokio::spawn(async move {
            before
                .simple_query("select pg_sleep(0.4), 'before'")
                .await
                .unwrap()
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Queued behind `before`, with a result big enough to need several reads; then gone.
        raw.write_all(&simple_query(
            "select g, repeat('y', 100) from generate_series(1, 5000) g",
        ))
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(raw);
        let rows = text_rows(
            after
                .simple_query(&format!("select 'after', {round}"))
                .await
                .unwrap(),
        );
        assert_eq!(rows[0][0].as_deref(), Some("after"));
        assert_eq!(rows[0][1].as_deref(), Some(&*round.to_string()));
        let rows = text_rows(slow.await.unwrap());
        assert_eq!(rows[0][1].as_deref(), Some("before"));
    }
    let c = connect(&rw).await;
    let rows = text_rows(c.simple_query("select 42").await.unwrap());
    assert_eq!(rows[0][0].as_deref(), Some("42"));
}

/// Only reads that lock no rows share a pipe. A write can wait for a row lock; had it joined
/// a pipe, every client's unit queued behind it would wait too, invisibly to PostgreSQL's
/// deadlock detector. Here a third client's reads go on while another client's UPDATE waits
/// for a lock held by an open transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waiting_for_a_row_lock_holds_up_no_other_client() {
    let pg = Postgres::start();
    let rw = start(&pg, "3", &[]);
    warm(&rw, 3).await;
    let holder = connect(&rw).await;
    holder
        .batch_execute("create table kv (k int primary key, v int); insert into kv values (1, 0)")
        .await
        .unwrap();
    holder
        .batch_execute("begin; update kv set v = 1 where k = 1")
        .await
        .unwrap();
    let writer = connect(&rw).await;
    let waiting = tokio::spawn(async move {
        writer
            .simple_query("update kv set v = 2 where k = 1")
            .await
            .map(|_| ())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the UPDATE did not wait for the lock"
    );
    let reader = connect(&rw).await;
    for _ in 0..5 {
        let rows = tokio::time::timeout(
            Duration::from_secs(5),
            reader.simple_query("select v from kv where k = 1"),
        )
        .await
        .expect("a read waited behind an UPDATE waiting for a row lock")
        .unwrap();
        assert_eq!(text_rows(rows)[0][0].as_deref(), Some("0"));
    }
    holder.batch_execute("commit").await.unwrap();
    waiting.await.unwrap().unwrap();
    let rows = reader
        .simple_query("select v from kv where k = 1")
        .await
        .unwrap();
    assert_eq!(text_rows(rows)[0][0].as_deref(), Some("2"));
}

/// A long read on a pipe holds up only the units that joined before it had run long, and
/// only the first time its shape (its text without literals) runs: a pipe whose head has run
/// for `--upstream-pipeline-slow-ms` (10 ms) takes no new units while the pool has another
/// connection, and a batch of a shape that was that slow opens a pipe that nobody joins while
/// the pool has another connection. Without either, the quick reads here would wait the slow
/// one out on its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_read_does_not_hold_up_clients_that_come_after_it() {
    let pg = Postgres::start();
    let rw = start(&pg, "2", &[]);
    warm(&rw, 2).await;
    let slow = connect(&rw).await;
    let quick = connect(&rw).await;
    let sleep = |secs: &'static str| {
        let slow = &slow;
        async move {
            let rows = slow
                .simple_query(&format!("select pg_sleep({secs}), 'slept'"))
                .await
                .unwrap();
            assert_eq!(text_rows(rows)[0][1].as_deref(), Some("slept"));
        }
    };
    // The quick client's read; how long it took.
    let read = |n: i32| {
        let quick = &quick;
        async move {
            let started = Instant::now();
            let rows = quick
                .simple_query(&format!("select {n} + 1"))
                .await
                .unwrap();
            assert_eq!(text_rows(rows)[0][0], Some((n + 1).to_string()));
            started.elapsed()
        }
    };
    // 1. Reads that come while the long one runs go elsewhere.
    let (_, took) = tokio::join!(sleep("1"), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut took = Vec::new();
        for n in 0..3 {
            took.push(read(n).await);
        }
        took
    });
    for t in &took {
        assert!(
            *t < Duration::from_millis(500),
            "a read waited behind a long one that had run for 200 ms: {took:?}"
        );
    }
    // 2. The same shape again, with a read right behind it (well within 10 ms): the long one
    //    is in a pipe of its own now, which the read does not join.
    for _ in 0..2 {
        let (_, took) = tokio::join!(sleep("0.8"), async {
            tokio::time::sleep(Duration::from_millis(2)).await;
            read(7).await
        });
        assert!(
            took < Duration::from_millis(500),
            "a read waited behind a long read of a shape that was slow before: {took:?}"
        );
    }
    // Everyone still gets their own answers afterwards.
    sleep("0.01").await;
    assert!(read(41).await < Duration::from_secs(5));
}

/// The client whose session reads a pipe also writes the units queued behind its own. Before
/// units were bounded by `PIPE_REQUEST_BYTES`, a 16 MiB unit queued behind a sleeping one
/// made that write wait (PostgreSQL not reading), and a cancel of the reader's own statement
/// could end the write midway, with part of a message on the wire: the pipe then had to fail
/// (every unit 08006) rather than be reused with half a message (`Reading::drop` still does
/// that). Now a unit over 32 KiB does not join: it waits for the connection, so the reader's
/// statement runs alone and its cancel lands (57014), and the large statement runs after.
/// Nobody waits forever either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_unit_does_not_queue_behind_a_running_one_whose_cancel_then_lands() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", &QUEUE_BEHIND_LONG_UNITS);
    warm(&rw, 1).await;
    let reader = connect(&rw).await;
    let writer = connect(&rw).await;
    let token = reader.cancel_token();
    let a = tokio::spawn(async move { reader.simple_query("select pg_sleep(3)").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // 256 KiB in one Query: past `PIPE_REQUEST_BYTES` (a large Bind would reach the relay
    // before its Sync, and a batch without its Sync is not a unit). Not the 16 MiB the test
    // once sent: a debug build's shard spends seconds scanning that much SQL, and the cancel,
    // on the same shard, then came after the sleep had ended.
    let big = format!("select length('{}')", "x".repeat(256 << 10));
    let b = tokio::spawn(async move {
        let result = writer.simple_query(&big).await;
        (result, writer)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    token.cancel_query(NoTls).await.unwrap();
    let a = tokio::time::timeout(Duration::from_secs(20), a)
        .await
        .expect("the reader's statement did not end")
        .unwrap();
    let (b, writer) = tokio::time::timeout(Duration::from_secs(20), b)
        .await
        .expect("the large unit waits forever")
        .unwrap();
    assert_eq!(
        a.expect_err("the cancelled statement ran to its end")
            .code(),
        Some(&SqlState::QUERY_CANCELED)
    );
    assert_eq!(text_rows(b.unwrap())[0][0].as_deref(), Some("262144"));
    let rows = writer.simple_query("select length('abc')").await.unwrap();
    assert_eq!(text_rows(rows)[0][0].as_deref(), Some("3"));
}

/// Cancel on a shared connection. A cancel for a unit queued behind another client's is
/// held until that unit runs alone, then sent: the queued statement is cancelled, the one
/// ahead of it is not. A cancel for a unit that has another client's unit behind it is
/// withdrawn: the signal could land on the other client's statement, so neither is
/// cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_a_queued_unit_hits_only_its_own_statement() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", &QUEUE_BEHIND_LONG_UNITS);
    warm(&rw, 1).await;
    // Cancel the second of two units on the pipe.
    let first = connect(&rw).await;
    let second = connect(&rw).await;
    let token = second.cancel_token();
    let started = Instant::now();
    let a = tokio::spawn(async move { first.simple_query("select pg_sleep(1), 'a'").await });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let b = tokio::spawn(async move { second.simple_query("select pg_sleep(3), 'b'").await });
    tokio::time::sleep(Duration::from_millis(150)).await;
    token.cancel_query(NoTls).await.unwrap();
    let a = a.await.unwrap().expect("the unit ahead is not cancelled");
    assert_eq!(text_rows(a)[0][1].as_deref(), Some("a"));
    let err = b.await.unwrap().expect_err("the queued unit is cancelled");
    assert_eq!(err.code(), Some(&SqlState::QUERY_CANCELED), "{err}");
    // Cancelled once it ran alone, not after its 3 s.
    assert!(
        started.elapsed() < Duration::from_millis(2800),
        "{:?}",
        started.elapsed()
    );

    // Cancel the first of two: withdrawn, both complete. (The pipe a cancel was sent on
    // closed its connection as it retired, lest the signal land late: a new one first.)
    warm(&rw, 1).await;
    let first = connect(&rw).await;
    let second = connect(&rw).await;
    let token = first.cancel_token();
    // (Generous pauses: on a loaded machine `second`'s unit must be queued before the cancel,
    // or `first` runs alone and its cancel is rightly sent.)
    let a = tokio::spawn(async move { first.simple_query("select pg_sleep(3), 'a'").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let b = tokio::spawn(async move { second.simple_query("select pg_sleep(0.3), 'b'").await });
    tokio::time::sleep(Duration::from_millis(1000)).await;
    token.cancel_query(NoTls).await.unwrap();
    let a = a.await.unwrap().expect("withdrawn: not cancelled");
    assert_eq!(text_rows(a)[0][1].as_deref(), Some("a"));
    let b = b
        .await
        .unwrap()
        .expect("another client's unit is never hit");
    assert_eq!(text_rows(b)[0][1].as_deref(), Some("b"));
}

/// `--upstream-pipeline off` keeps every batch on a connection of its own, and the same
/// workload gives the same answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelining_off_still_answers_everyone() {
    let pg = Postgres::start();
    let rw = start(&pg, "2", &["--upstream-pipeline", "off"]);
    let mut tasks = Vec::new();
    for c in 0..8i32 {
        let client = connect(&rw).await;
        tasks.push(tokio::spawn(async move {
            let s = client.prepare("select $1::int4 + 1").await.unwrap();
            for i in 0..20i32 {
                let row = client.query_one(&s, &[&(c * 100 + i)]).await.unwrap();
                assert_eq!(row.get::<_, i32>(0), c * 100 + i + 1);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// A raw session (the same startup for every one, so all share one settings fingerprint).
async fn raw_session(rw: &Ringwire, recv_buffer: Option<u32>) -> tokio::net::TcpStream {
    use common::wire::{read_messages, startup_message};
    use tokio::io::AsyncWriteExt;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    if let Some(bytes) = recv_buffer {
        socket.set_recv_buffer_size(bytes).unwrap();
    }
    let mut stream = socket.connect(rw.addr().parse().unwrap()).await.unwrap();
    stream
        .write_all(&startup_message(&[
            ("user", "postgres"),
            ("database", "postgres"),
        ]))
        .await
        .unwrap();
    let ready = read_messages(&mut stream).await;
    assert_eq!(ready.last().map(|m| m.0), Some(b'Z'));
    stream
}

/// `select N + 1` on a raw session: the one value it returns.
async fn raw_select(mut stream: tokio::net::TcpStream, n: i32) -> i32 {
    use common::wire::{read_messages, simple_query};
    use tokio::io::AsyncWriteExt;
    stream
        .write_all(&simple_query(&format!("select {n} + 1")))
        .await
        .unwrap();
    let replies = read_messages(&mut stream).await;
    let row = replies.iter().find(|m| m.0 == b'D').expect("a row");
    let len = i32::from_be_bytes(row.1[2..6].try_into().unwrap()) as usize;
    std::str::from_utf8(&row.1[6..6 + len])
        .unwrap()
        .parse()
        .unwrap()
}

/// A client that asks for a 100 MB result on a shared connection and does not read it, while
/// other clients' units queue behind it on that connection: ringwire holds at most about a
/// megabyte of the result (PostgreSQL blocks on its send instead) and the pipe takes no new
/// units, so clients that come later are served on the other connection. The units queued
/// behind the unread result wait for it (the price of sharing a connection); once the client
/// reads, it gets the whole result and they get theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_a_large_result_costs_bounded_memory() {
    use common::wire::simple_query;
    use tokio::io::AsyncWriteExt;
    let pg = Postgres::start();
    let rw = start(&pg, "2", &QUEUE_BEHIND_LONG_UNITS);
    // Both pool connections get the raw sessions' settings.
    for _ in 0..2 {
        assert_eq!(raw_select(raw_session(&rw, None).await, 1).await, 2);
    }
    let mut slow = raw_session(&rw, Some(16 << 10)).await;
    let before = rss_kib(rw.pid());
    const ROWS: usize = 100_000;
    slow.write_all(&simple_query(&format!(
        "select repeat('x', 1000) from generate_series(1, {ROWS})"
    )))
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // These join the slow client's pipe; the one that reads finds the unread result.
    let mut queued = Vec::new();
    for i in 0..2 {
        let s = raw_session(&rw, None).await;
        queued.push(tokio::spawn(raw_select(s, 100 + i)));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let grown_mib = (rss_kib(rw.pid()).saturating_sub(before)) / 1024;
    assert!(
        grown_mib < 32,
        "a client that does not read a 100 MB result grew ringwire by {grown_mib} MiB"
    );
    // Later clients go to the other connection.
    let later = tokio::time::timeout(Duration::from_secs(20), async {
        for i in 0..4 {
            let s = raw_session(&rw, None).await;
            assert_eq!(raw_select(s, i).await, i + 1);
        }
    })
    .await;
    assert!(
        later.is_ok(),
        "clients that came later were stuck behind the unread result"
    );
    // The slow client reads now and gets every row and its tag; the queued units finish.
    read_result(&mut slow, ROWS, Duration::from_secs(60)).await;
    for (i, q) in queued.into_iter().enumerate() {
        let v = tokio::time::timeout(Duration::from_secs(20), q)
            .await
            .expect("a queued unit never finished")
            .unwrap();
        assert_eq!(v, 101 + i as i32);
    }
}

/// A client in the middle of reading a result runs another statement through the pool and
/// waits for it before reading on (pgx's `rows.Next()` loop with a query inside). If that
/// statement lands on the same pipe, its replies come after the whole result: with the reader
/// stopped at the 1 MiB buffer limit both would wait for each other for good. While units are
/// queued behind, a result of up to 8 MiB is read on, so this one (7 MB, more than the socket
/// buffers on the way to the client take; it deadlocked with the 1 MiB limit) is freed.
/// The result's unit has been at the head for far over 10 ms when the inner statement comes:
/// it joins anyway, since the pool (of one) has no other connection to give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_waits_for_a_query_queued_behind_its_own_result_is_not_deadlocked() {
    let pg = Postgres::start();
    let rw = start(&pg, "1", &[]);
    assert_eq!(raw_select(raw_session(&rw, None).await, 1).await, 2);
    // Twice: the first time, the result sits at the head of the pipe, unread, for far longer
    // than a slow statement runs; that must not make its shape a slow one (or, if it did,
    // the pipe of its own must still take the query inside, the pool having no other).
    for round in 0..2 {
        // The "rows.Next()" side: asks for 7,000 rows of 1,000 bytes and reads none yet.
        let mut reading = raw_session(&rw, Some(16 << 10)).await;
        const ROWS: usize = 7_000;
        ask_rows(&mut reading, ROWS).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        // The query inside the loop: queued behind that result on the only connection.
        let inner = raw_session(&rw, None).await;
        let inner = tokio::time::timeout(Duration::from_secs(20), raw_select(inner, 41))
            .await
            .unwrap_or_else(|_| {
                panic!("round {round}: the query behind the unread result never finished")
            });
        assert_eq!(inner, 42);
        // Then the loop reads on and gets every row.
        read_result(&mut reading, ROWS, Duration::from_secs(30)).await;
    }
}

/// Hazard 3 of ARCHITECTURE's pipelining: the reader does not read while it writes the units
/// queued behind the head. With a large result at the head and a unit of many megabytes
/// behind it, PostgreSQL blocked on sending the result (nobody read it) and so read nothing,
/// and the reader blocked on writing the unit: both clients, and every unit on the
/// connection, hung for good. Now a unit joins a pipe only while the requests queued on it fit
/// `PIPE_REQUEST_BYTES`, far less than the socket buffers on the way hold; this one waits for
/// the connection instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_statement_behind_a_large_result_does_not_deadlock_the_connection() {
    use common::wire::{read_messages, simple_query};
    use tokio::io::AsyncWriteExt;
    let pg = Postgres::start();
    let rw = start(&pg, "1", &[]);
    assert_eq!(raw_select(raw_session(&rw, None).await, 1).await, 2);
    // A result that streams for far longer than the large statement takes to arrive.
    const ROWS: usize = 300_000;
    let mut reading = raw_session(&rw, None).await;
    let mut large = raw_session(&rw, None).await;
    ask_rows(&mut reading, ROWS).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    const LITERAL: usize = 16 << 20;
    let sql = format!("select length('{}')", "x".repeat(LITERAL));
    let limit = Duration::from_secs(60);
    let result = read_result(&mut reading, ROWS, limit);
    let statement = async {
        large.write_all(&simple_query(&sql)).await.unwrap();
        read_messages(&mut large).await
    };
    let (result, replies) = tokio::join!(
        tokio::time::timeout(limit, result),
        tokio::time::timeout(limit, statement)
    );
    result.expect("the large result never finished");
    let replies = replies.expect("the large statement never finished");
    let row = replies.iter().find(|m| m.0 == b'D').expect("a row");
    assert_eq!(&row.1[6..], LITERAL.to_string().as_bytes());
}

/// Send `select repeat('x', 1000) from generate_series(1, rows)` on a raw session.
async fn ask_rows(stream: &mut tokio::net::TcpStream, rows: usize) {
    use tokio::io::AsyncWriteExt;
    let sql = format!("select repeat('x', 1000) from generate_series(1, {rows})");
    stream
        .write_all(&common::wire::simple_query(&sql))
        .await
        .unwrap();
}

/// Read a raw session's reply to `select repeat('x', 1000) from generate_series(1, rows)` up to
/// its ReadyForQuery, within `limit`: every row's bytes and the `SELECT rows` tag arrive.
async fn read_result(stream: &mut tokio::net::TcpStream, rows: usize, limit: Duration) {
    use tokio::io::AsyncReadExt;
    let mut bytes = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    let mut tail = Vec::new();
    let deadline = Instant::now() + limit;
    while !tail.ends_with(&[b'Z', 0, 0, 0, 5, b'I']) {
        assert!(Instant::now() < deadline, "the result never finished");
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "ringwire closed the client");
        bytes += n;
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > 64 {
            tail.drain(..tail.len() - 64);
        }
    }
    assert!(bytes > rows * 1000, "{bytes} bytes");
    let tag = format!("SELECT {rows}\0");
    assert!(
        tail.windows(tag.len()).any(|w| w == tag.as_bytes()),
        "no SELECT {rows} tag at the end"
    );
}

fn frontend_msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// A batch of Parse/Bind/Execute followed by a Query before any Sync: after an error in the
/// Execute, PostgreSQL skips everything up to the next Sync — on a shared connection that
/// would be other clients' units, and their replies would go to the wrong clients. Such a
/// batch must not share a connection: every other client still gets exactly its own rows,
/// and this client gets what PostgreSQL gives it (the Query is skipped, the Sync answered).
///
/// With pipelining off too: there the connection used to go back to the pool while the
/// server still skipped to this client's Sync, so the next client's statement was skipped and
/// it hung (and this client's Sync waited for the pool behind it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extended_error_before_a_query_without_sync_costs_others_nothing() {
    let pg = Postgres::start();
    for mode in ["on", "off"] {
        extended_error_story(&pg, mode).await;
    }
}

async fn extended_error_story(pg: &Postgres, mode: &str) {
    use common::wire::read_messages;
    use tokio::io::AsyncWriteExt;
    let rw = start(pg, "1", &["--upstream-pipeline", mode]);
    assert_eq!(raw_select(raw_session(&rw, None).await, 1).await, 2);
    let mut others = Vec::new();
    for c in 0..6i32 {
        let mut sessions = Vec::new();
        for _ in 0..20 {
            sessions.push(raw_session(&rw, None).await);
        }
        others.push(tokio::spawn(async move {
            for (i, s) in sessions.into_iter().enumerate() {
                let n = c * 1000 + i as i32;
                assert_eq!(
                    raw_select(s, n).await,
                    n + 1,
                    "client {c} got another's row"
                );
            }
        }));
    }
    let mut bad = raw_session(&rw, None).await;
    let mut batch = frontend_msg(b'P', b"\0select 1/0\0\0\0");
    batch.extend(frontend_msg(b'B', b"\0\0\0\0\0\0\0\0"));
    batch.extend(frontend_msg(b'E', b"\0\0\0\0\0"));
    batch.extend(frontend_msg(b'Q', b"select 1\0"));
    bad.write_all(&batch).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(30), read_messages(&mut bad))
        .await
        .expect("no reply to the batch");
    // PostgreSQL folds 1/0 when it plans the unnamed statement at Bind.
    let tags: Vec<u8> = first.iter().map(|m| m.0).collect();
    assert_eq!(tags, b"1E", "{first:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    bad.write_all(&frontend_msg(b'S', b"")).await.unwrap();
    let rest = tokio::time::timeout(Duration::from_secs(30), read_messages(&mut bad))
        .await
        .expect("no reply to the Sync");
    let tags: Vec<u8> = rest.iter().map(|m| m.0).collect();
    assert_eq!(
        tags, b"Z",
        "the skipped Query must not be answered: {rest:?}"
    );
    for t in others {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("a client hung")
            .unwrap();
    }
}
