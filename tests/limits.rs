//! Limits and timeouts against the real binary, with PostgreSQL 15 beside it where the
//! behaviour is PostgreSQL's: `statement_timeout` (57014, set by SET, by startup options, shown
//! by SHOW, undone by RESET; simple and extended protocol), `idle_in_transaction_session_timeout`
//! (FATAL 25P03), the startup timeout against a slowloris client (plaintext and mid-TLS
//! handshake), and the per-shard connection limit (53300, socket closed).
//!
//! These run on whichever socket path the binary picks (`RINGWIRE_IO=uring|glommio`).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::client::connect_on_shard;
use common::postgres::Postgres;
use common::ringwire::Ringwire;
use common::wire::{self, error_field, read_messages, simple_query, startup_message};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_postgres::NoTls;

async fn connect(conninfo: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect {conninfo}: {e}"));
    tokio::spawn(connection);
    client
}

async fn alive(client: &tokio_postgres::Client) {
    let one: i32 = client.query_one("select 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
}

/// (SQLSTATE, message) of a failed statement; panics if it succeeded.
async fn fails(client: &tokio_postgres::Client, sql: &str) -> (String, String) {
    let err = client
        .simple_query(sql)
        .await
        .err()
        .unwrap_or_else(|| panic!("{sql} succeeded"));
    let db = err.as_db_error().unwrap_or_else(|| panic!("{sql}: {err}"));
    (db.code().code().to_string(), db.message().to_string())
}

async fn show(client: &tokio_postgres::Client, name: &str) -> String {
    client
        .query_one(&format!("show {name}"), &[])
        .await
        .unwrap()
        .get(0)
}

/// Everything observable about statement_timeout on one server, for comparison.
async fn statement_timeout_story(conninfo: &str) -> Vec<String> {
    let mut story = Vec::new();
    let client = connect(conninfo).await;
    story.push(show(&client, "statement_timeout").await);
    client
        .simple_query("set statement_timeout = '200ms'")
        .await
        .unwrap();
    story.push(show(&client, "statement_timeout").await);
    let started = Instant::now();
    let (code, message) = fails(&client, "select pg_sleep(3)").await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(150) && waited < Duration::from_millis(2500),
        "the timeout fired after {waited:?}"
    );
    story.push(format!("{code} {message}"));
    // The session lives on, and so does the setting.
    story.push(format!(
        "{:?}",
        client.simple_query("select 1").await.map(|r| r.len())
    ));
    // The extended protocol (Parse/Bind/Execute) is limited too.
    let err = client
        .query("select pg_sleep($1)", &[&3.0f64])
        .await
        .expect_err("extended-protocol sleep must time out");
    let db = err.as_db_error().expect("a server error");
    story.push(format!("extended: {} {}", db.code().code(), db.message()));
    // A statement that finishes in time is untouched.
    story.push(format!(
        "{:?}",
        client.simple_query("select pg_sleep(0.05)").await.is_ok()
    ));
    // Inside a transaction the failed statement aborts the block, as any error does.
    client.simple_query("begin").await.unwrap();
    let _ = fails(&client, "select pg_sleep(3)").await;
    story.push(fails(&client, "select 1").await.0);
    client.simple_query("rollback").await.unwrap();
    client
        .simple_query("reset statement_timeout")
        .await
        .unwrap();
    story.push(show(&client, "statement_timeout").await);
    story.push(format!(
        "{:?}",
        client.simple_query("select pg_sleep(0.4)").await.is_ok()
    ));
    // From the startup packet's options, as libpq sends `options=-c ...`.
    let client = connect(&format!("{conninfo} options='-c statement_timeout=150'")).await;
    story.push(show(&client, "statement_timeout").await);
    story.push(fails(&client, "select pg_sleep(3)").await.1);
    story
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_timeout_as_postgres_does_it() {
    let pg = Postgres::start();
    let rw = Ringwire::start(&[]);
    let want = statement_timeout_story(&pg.connection_string()).await;
    let got = statement_timeout_story(&rw.connection_string("postgres")).await;
    assert_eq!(got, want);
    assert_eq!(
        want[2],
        "57014 canceling statement due to statement timeout"
    );
}

/// A statement waiting for a table lock another transaction holds: statement_timeout and a
/// CancelRequest end the wait with 57014, the session lives on, the holder is untouched, and no
/// cancel lingers to hit a later statement. `a` and `b` are two sessions on the same server.
async fn lock_wait_story(
    a: &tokio_postgres::Client,
    b: Arc<tokio_postgres::Client>,
) -> Vec<String> {
    let mut story = Vec::new();
    // (Two Query messages: a BEGIN inside one would take the CREATE into its block.)
    a.batch_execute(
        "drop table if exists lockwait; create table lockwait (v int4); \
         insert into lockwait values (1)",
    )
    .await
    .unwrap();
    a.batch_execute("begin; update lockwait set v = 2")
        .await
        .unwrap();
    b.batch_execute("set statement_timeout = '300ms'")
        .await
        .unwrap();
    let started = Instant::now();
    let (code, message) = tokio::time::timeout(
        Duration::from_secs(5),
        fails(&b, "update lockwait set v = 3"),
    )
    .await
    .expect("statement_timeout did not end the lock wait");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_millis(2500),
        "the lock wait timed out after {waited:?}"
    );
    story.push(format!("timeout: {code} {message}"));
    alive(&b).await;
    // A limit so short it fires while the write may still be on its way to the compute (from
    // shard 1): the wait must still end.
    b.batch_execute("set statement_timeout = '1ms'")
        .await
        .unwrap();
    let (code, _) = tokio::time::timeout(
        Duration::from_secs(5),
        fails(&b, "update lockwait set v = 3"),
    )
    .await
    .expect("a 1 ms statement_timeout did not end the lock wait");
    story.push(format!("1ms timeout: {code}"));
    // A CancelRequest ends a lock wait too ("user request").
    b.batch_execute("reset statement_timeout").await.unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { fails(&b, "update lockwait set v = 4").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "the update did not wait for the lock"
    );
    b.cancel_token().cancel_query(NoTls).await.unwrap();
    let (code, message) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the cancelled lock wait never ended")
        .unwrap();
    story.push(format!("cancel: {code} {message}"));
    // DDL waits for the table's writers too, and its wait ends the same two ways.
    b.batch_execute("set statement_timeout = '300ms'")
        .await
        .unwrap();
    for ddl in [
        "drop table lockwait",
        "create index lockwait_v on lockwait (v)",
        "alter table lockwait add primary key (v)",
    ] {
        let (code, message) = tokio::time::timeout(Duration::from_secs(5), fails(&b, ddl))
            .await
            .unwrap_or_else(|_| panic!("statement_timeout did not end the wait of {ddl}"));
        story.push(format!("{ddl}: {code} {message}"));
    }
    b.batch_execute("reset statement_timeout").await.unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { fails(&b, "drop table lockwait").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the drop did not wait for the lock");
    b.cancel_token().cancel_query(NoTls).await.unwrap();
    let (code, message) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the cancelled drop never ended")
        .unwrap();
    story.push(format!("drop cancel: {code} {message}"));
    // The holder commits its own write; no cancelled statement left anything behind.
    a.batch_execute("commit").await.unwrap();
    let v: i32 = b
        .query_one("select v from lockwait", &[])
        .await
        .unwrap()
        .get(0);
    story.push(format!("after: {v}"));
    // No cancel lingers: the next waits and writes of both sessions run to the end.
    b.batch_execute("begin; update lockwait set v = 5")
        .await
        .unwrap();
    let a_waits = a.batch_execute("update lockwait set v = 6");
    let b_commits = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        b.batch_execute("commit").await
    };
    let (a_done, b_done) = tokio::join!(a_waits, b_commits);
    story.push(format!("later: {:?} {:?}", a_done.is_ok(), b_done.is_ok()));
    let v: i32 = a
        .query_one("select v from lockwait", &[])
        .await
        .unwrap()
        .get(0);
    story.push(format!("final: {v}"));
    a.batch_execute("drop table lockwait").await.unwrap();
    story
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_waits_end_at_statement_timeout_and_cancel_as_postgres_does_it() {
    let pg = Postgres::start();
    let want = lock_wait_story(
        &connect(&pg.connection_string()).await,
        Arc::new(connect(&pg.connection_string()).await),
    )
    .await;
    assert_eq!(
        want,
        [
            "timeout: 57014 canceling statement due to statement timeout",
            "1ms timeout: 57014",
            "cancel: 57014 canceling statement due to user request",
            "drop table lockwait: 57014 canceling statement due to statement timeout",
            "create index lockwait_v on lockwait (v): 57014 canceling statement due to statement timeout",
            "alter table lockwait add primary key (v): 57014 canceling statement due to statement timeout",
            "drop cancel: 57014 canceling statement due to user request",
            "after: 2",
            "later: true true",
            "final: 6",
        ]
    );
    // The tables live on the compute shard (0): the waiting session on shard 0 waits in the
    // compute directly, on shard 1 through the dispatcher, whose cancel travels as a message.
    let rw = Ringwire::start(&["--shards", "2"]);
    let conninfo = rw.connection_string("postgres");
    let a = connect(&conninfo).await;
    for shard in 0..2 {
        let b = connect_on_shard(&conninfo, shard).await;
        let got = lock_wait_story(&a, Arc::new(b)).await;
        assert_eq!(got, want, "waiting session on shard {shard}");
    }
}

/// DDL in ringwire is not transactional, so a block cannot drop or re-index a table it has
/// written: that is refused with 0A000 (it used to wait for its own lock forever). The block
/// goes on, its other locks are kept, and DDL on tables it has not written still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_on_a_table_the_open_block_wrote_is_refused_not_hung() {
    let rw = Ringwire::start(&["--shards", "2"]);
    let conninfo = rw.connection_string("postgres");
    for shard in 0..2 {
        let a = connect_on_shard(&conninfo, shard).await;
        let other = connect(&conninfo).await;
        a.batch_execute(
            "drop table if exists own_w; drop table if exists own_x; drop table if exists own_y; \
             create table own_w (v int4); create table own_x (v int4); create table own_y (v int4)",
        )
        .await
        .unwrap();
        a.batch_execute("begin; insert into own_w values (1); insert into own_x values (1)")
            .await
            .unwrap();
        for ddl in [
            "drop table own_w",
            "create index own_w_v on own_w (v)",
            "alter table own_w add primary key (v)",
        ] {
            let (code, message) = tokio::time::timeout(Duration::from_secs(5), fails(&a, ddl))
                .await
                .unwrap_or_else(|_| panic!("{ddl} in the block that wrote the table hung"));
            assert_eq!(code, "0A000", "{ddl}: {message}");
            assert!(
                message.contains("which this transaction has written"),
                "{message}"
            );
            a.batch_execute(
                "rollback; begin; insert into own_w values (1); insert into own_x values (1)",
            )
            .await
            .unwrap();
        }
        // DDL on a table the block has not written runs, and leaves the block's locks alone.
        a.batch_execute("create index own_y_v on own_y (v)")
            .await
            .unwrap();
        let blocked = tokio::time::timeout(
            Duration::from_millis(300),
            other.batch_execute("insert into own_x values (2)"),
        )
        .await;
        assert!(blocked.is_err(), "the block's lock on own_x was lost");
        a.batch_execute("commit").await.unwrap();
        let n: i64 = other
            .query_one("select count(*) from own_x", &[])
            .await
            .unwrap()
            .get(0);
        // The insert that waited for the lock ran after the commit (its future was dropped
        // only after it was sent), so 1 or 2 rows; the block's own row is there.
        assert!(n >= 1, "{n}");
        other
            .batch_execute("drop table own_w; drop table own_x; drop table own_y")
            .await
            .unwrap();
    }
}

/// Open a raw session, set the idle-in-transaction limit, begin, and go quiet: what arrives?
async fn idle_in_transaction_story(port: u16) -> (String, String, String, bool, Duration) {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tcp.write_all(&startup_message(&[
        ("user", "postgres"),
        ("database", "postgres"),
    ]))
    .await
    .unwrap();
    let ready = read_messages(&mut tcp).await;
    assert_eq!(ready.last().map(|m| m.0), Some(b'Z'));
    for sql in ["set idle_in_transaction_session_timeout = '300ms'", "begin"] {
        tcp.write_all(&simple_query(sql)).await.unwrap();
        let replies = read_messages(&mut tcp).await;
        assert_eq!(replies.last().map(|m| m.0), Some(b'Z'), "{sql}");
    }
    let started = Instant::now();
    let unsolicited = read_messages(&mut tcp).await;
    let waited = started.elapsed();
    assert_eq!(unsolicited.len(), 1, "{unsolicited:?}");
    let body = &unsolicited[0].1;
    (
        error_field(body, b'S'),
        error_field(body, b'C'),
        error_field(body, b'M'),
        wire::is_closed(&mut tcp).await,
        waited,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_in_transaction_session_timeout_as_postgres_does_it() {
    let pg = Postgres::start();
    let rw = Ringwire::start(&[]);
    let want = idle_in_transaction_story(pg.port).await;
    let got = idle_in_transaction_story(rw.port).await;
    assert_eq!(
        (&got.0, &got.1, &got.2, got.3),
        (&want.0, &want.1, &want.2, want.3)
    );
    assert_eq!(
        (got.0.as_str(), got.1.as_str(), got.2.as_str(), got.3),
        (
            "FATAL",
            "25P03",
            "terminating connection due to idle-in-transaction timeout",
            true
        )
    );
    assert!(
        got.4 >= Duration::from_millis(250) && got.4 < Duration::from_secs(3),
        "{:?}",
        got.4
    );
    // Outside a transaction an idle session is left alone.
    let client = connect(&rw.connection_string("postgres")).await;
    client
        .simple_query("set idle_in_transaction_session_timeout = 100")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    alive(&client).await;
}

/// Send `bytes` one per `gap`, stopping when the server hangs up.
async fn trickle<W: tokio::io::AsyncWrite + Unpin>(wr: &mut W, bytes: &[u8], gap: Duration) {
    let started = Instant::now();
    for b in bytes {
        if wr.write_all(&[*b]).await.is_err() || started.elapsed() > Duration::from_secs(20) {
            return;
        }
        tokio::time::sleep(gap).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_clients_are_cut_off_at_the_startup_timeout() {
    let rw = Ringwire::start(&["--startup-timeout-secs", "2"]);
    // A startup packet at one byte every 300 ms would take ~12 s: cut off at 2 s.
    let packet = startup_message(&[("user", "postgres"), ("database", "postgres")]);
    let tcp = TcpStream::connect(("127.0.0.1", rw.port)).await.unwrap();
    let started = Instant::now();
    let (mut rd, mut wr) = tcp.into_split();
    let reader = tokio::spawn(async move {
        let messages = read_messages(&mut rd).await;
        (messages, started.elapsed(), wire::is_closed(&mut rd).await)
    });
    // Meanwhile, ordinary clients are served.
    let client = connect(&rw.connection_string("postgres")).await;
    alive(&client).await;
    trickle(&mut wr, &packet, Duration::from_millis(300)).await;
    let (messages, after, closed) = reader.await.unwrap();
    assert!(
        after >= Duration::from_millis(1800) && after < Duration::from_secs(6),
        "cut off after {after:?}"
    );
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(error_field(&messages[0].1, b'C'), "08006");
    assert_eq!(
        error_field(&messages[0].1, b'M'),
        "canceling authentication due to timeout"
    );
    assert!(closed);
    alive(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_shard_connection_limit_is_53300_and_a_closed_socket() {
    let rw = Ringwire::start(&[
        "--shards",
        "1",
        "--max-connections",
        "100",
        "--max-connections-per-shard",
        "2",
    ]);
    let conninfo = rw.connection_string("postgres");
    let mut clients = vec![connect(&conninfo).await, connect(&conninfo).await];
    // The third, raw: FATAL 53300, then the server closes the socket.
    let mut tcp = TcpStream::connect(("127.0.0.1", rw.port)).await.unwrap();
    tcp.write_all(&startup_message(&[("user", "postgres")]))
        .await
        .unwrap();
    let messages = read_messages(&mut tcp).await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    let body = &messages[0].1;
    assert_eq!(
        (error_field(body, b'S'), error_field(body, b'C')),
        ("FATAL".to_string(), "53300".to_string())
    );
    assert_eq!(error_field(body, b'M'), "sorry, too many clients already");
    assert!(wire::is_closed(&mut tcp).await);
    // A freed slot is usable again.
    drop(clients.pop());
    let mut reopened = None;
    for _ in 0..50 {
        if let Ok((client, c)) = tokio_postgres::connect(&conninfo, NoTls).await {
            tokio::spawn(c);
            reopened = Some(client);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reopened = reopened.expect("a freed slot was never reusable");
    alive(&reopened).await;
    alive(&clients[0]).await;
}

#[test]
fn a_zero_per_shard_limit_is_a_startup_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ringwire"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--max-connections-per-shard",
            "0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("--max-connections-per-shard must be at least 1"));
}
