//! Upstream mode with a streaming replica (`--replica`): ringwire in front of a real
//! PostgreSQL 15 primary and a hot standby made with `pg_basebackup`. Reads are told apart by
//! `pg_is_in_recovery()` in the statement itself (true only on the standby), so each test
//! can assert both that reads reached the replica and that none of them was stale.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::client::connect;
use common::postgres::Postgres;
use common::ringwire::Ringwire;
use common::{eventually, eventually_blocking};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

fn start(primary: &Postgres, standby: &Postgres, shards: &str) -> Ringwire {
    let url = |pg: &Postgres| pg.url();
    Ringwire::start(&[
        "--shards",
        shards,
        "--upstream",
        &url(primary),
        "--replica",
        &url(standby),
        "--upstream-pool-size",
        "4",
    ])
}

/// The row of a simple query, as text.
async fn row(client: &Client, sql: &str) -> Vec<String> {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL").to_string())
                    .collect(),
            ),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{sql}: no row"))
}

/// `select v, pg_is_in_recovery() from kv where k = 1`: (v, read on the standby).
const READ: &str = "select v, pg_is_in_recovery() from kv where k = 1";

async fn read(client: &Client) -> (i64, bool) {
    let r = row(client, READ).await;
    (r[0].parse().unwrap(), r[1] == "t")
}

/// [`read`], or its error.
async fn try_read(client: &Client) -> Result<(i64, bool), tokio_postgres::Error> {
    let messages = client.simple_query(READ).await?;
    let r = messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .expect("a row");
    Ok((r.get(0).unwrap().parse().unwrap(), r.get(1) == Some("t")))
}

/// Until a default-isolation read reaches the standby (it joins the rotation after its first
/// poll), at most 10 s.
async fn until_replica_serves(client: &Client) {
    eventually(
        Duration::from_secs(10),
        "a read reaches the replica",
        async || read(client).await.1,
    )
    .await;
}

async fn setup(rw: &Ringwire) -> Client {
    let w = connect(rw).await;
    w.batch_execute("create table kv (k int primary key, v bigint); insert into kv values (1, 0)")
        .await
        .unwrap();
    until_replica_serves(&w).await;
    w
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_after_acknowledged_writes_are_never_stale_and_most_reach_the_replica() {
    let primary = Postgres::start();
    let standby = Postgres::start_standby(&primary);
    // Two shards: the writer and the readers may sit on different shards, so the applied LSN
    // must cross shards.
    let rw = start(&primary, &standby, "2");
    let writer = setup(&rw).await;
    let simple = connect(&rw).await;
    let mut extended = connect(&rw).await;
    let prepared = extended
        .prepare("select v, pg_is_in_recovery() from kv where k = $1")
        .await
        .unwrap();
    let (mut on_replica, mut reads) = (0, 0);
    const WRITES: i64 = 200;
    for i in 1..=WRITES {
        // Acknowledged here; every read that starts after this must see it.
        if i % 2 == 0 {
            writer
                .execute("update kv set v = $1 where k = 1", &[&i])
                .await
                .unwrap();
        } else {
            writer
                .simple_query(&format!("update kv set v = {i} where k = 1"))
                .await
                .unwrap();
        }
        let (v, replica) = read(&simple).await;
        assert_eq!(v, i, "stale read (replica: {replica}) after write {i}");
        on_replica += usize::from(replica);
        let r = extended.query_one(&prepared, &[&1i32]).await.unwrap();
        let (v, replica): (i64, bool) = (r.get(0), r.get(1));
        assert_eq!(
            v, i,
            "stale prepared read (replica: {replica}) after write {i}"
        );
        on_replica += usize::from(replica);
        reads += 2;
    }
    // A transaction that writes, then a read: the COMMIT's position counts too.
    writer
        .batch_execute("begin; update kv set v = -1 where k = 1; commit")
        .await
        .unwrap();
    assert_eq!(read(&simple).await.0, -1);
    eprintln!("{on_replica} of {reads} reads on the replica");
    // Streaming replay of one small commit takes about a millisecond here and a strict read
    // waits up to 20 ms for it: most reads are served by the replica.
    assert!(
        on_replica * 2 >= reads,
        "only {on_replica} of {reads} reads reached the replica"
    );

    // What must go to the primary, whatever the replica has replayed.
    writer.batch_execute("create sequence s").await.unwrap();
    until_replica_serves(&simple).await;
    for sql in [
        "select pg_is_in_recovery() from kv where k = 1 for update",
        "select pg_is_in_recovery() from kv where k = 1 for share",
        "with d as (update kv set v = v where k = 1 returning v) select pg_is_in_recovery() from d",
        "select pg_is_in_recovery() from (select nextval('s')) x",
        "select pg_is_in_recovery() from (select random()) x",
    ] {
        assert_eq!(row(&simple, sql).await[0], "f", "{sql} went to the replica");
    }
    // Explicit transactions run on the primary, reads included.
    let in_tx = simple
        .simple_query("begin; select pg_is_in_recovery(); commit")
        .await
        .unwrap();
    let in_tx: Vec<&str> = in_tx
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0),
            _ => None,
        })
        .collect();
    assert_eq!(in_tx, ["f"]);
    let tx = extended.transaction().await.unwrap();
    let r = tx.query_one(&prepared, &[&1i32]).await.unwrap();
    assert!(
        !r.get::<_, bool>(1),
        "a read in a transaction went to the replica"
    );
    tx.commit().await.unwrap();
}

/// Autocommit writes every 2 ms for `d`.
async fn write_for(writer: &Client, i: &mut i64, d: Duration) {
    let deadline = Instant::now() + d;
    while Instant::now() < deadline {
        *i += 1;
        writer
            .execute("update kv set v = $1 where k = 1", &[&*i])
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_run_costs_no_client_errors_and_comes_back() {
    let primary = Postgres::start();
    let mut standby = Postgres::start_standby(&primary);
    let rw = start(&primary, &standby, "2");
    let writer = setup(&rw).await;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let on_replica = Arc::new(AtomicUsize::new(0));
    let on_primary = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    for k in 0..4 {
        let client = connect(&rw).await;
        let prepared = client
            .prepare("select v, pg_is_in_recovery() from kv where k = $1")
            .await
            .unwrap();
        let (done, on_replica, on_primary) = (done.clone(), on_replica.clone(), on_primary.clone());
        // Two readers run autocommit reads, two read-only transactions of two reads each
        // (read committed: a transaction the kill catches goes on at the primary).
        let in_transactions = k >= 2;
        readers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !done.load(Ordering::Relaxed) {
                if in_transactions && n.is_multiple_of(2) {
                    client.batch_execute("begin read only").await.unwrap();
                }
                // Both protocols; any error fails the test.
                let replica = if n.is_multiple_of(2) {
                    read(&client).await.1
                } else {
                    let r = client.query_one(&prepared, &[&1i32]).await.unwrap();
                    r.get::<_, bool>(1)
                };
                if in_transactions && !n.is_multiple_of(2) {
                    client.batch_execute("commit").await.unwrap();
                }
                let counter = if replica { &on_replica } else { &on_primary };
                counter.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
        }));
    }
    let mut i = 0i64;
    write_for(&writer, &mut i, Duration::from_millis(500)).await;
    let before = on_replica.load(Ordering::Relaxed);
    assert!(before > 0, "no read reached the replica before the kill");
    let mut standby = tokio::task::spawn_blocking(move || {
        standby.kill();
        standby
    })
    .await
    .unwrap();
    let killed = on_replica.load(Ordering::Relaxed);
    write_for(&writer, &mut i, Duration::from_millis(1000)).await;
    let primary_reads_while_down = on_primary.load(Ordering::Relaxed);
    // Reads went on (on the primary) while the replica was down.
    assert!(on_replica.load(Ordering::Relaxed) <= killed + 4 * 2);
    standby = tokio::task::spawn_blocking(move || {
        standby.restart();
        standby
    })
    .await
    .unwrap();
    // Back in rotation once the poller reaches it again (back-off at most 2 s) and it has
    // caught up.
    let deadline = Instant::now() + Duration::from_secs(15);
    let back = on_replica.load(Ordering::Relaxed);
    while on_replica.load(Ordering::Relaxed) == back {
        assert!(
            Instant::now() < deadline,
            "the replica did not come back within 15 s"
        );
        write_for(&writer, &mut i, Duration::from_millis(50)).await;
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.expect("a reader saw an error");
    }
    assert!(on_primary.load(Ordering::Relaxed) >= primary_reads_while_down);
    eprintln!(
        "replica reads {} before the kill, {} in all; primary reads {}",
        before,
        on_replica.load(Ordering::Relaxed),
        on_primary.load(Ordering::Relaxed)
    );
    drop(standby);
}

/// Wait until a strict read on `client` gets `v` from the standby, then pause its replay.
async fn paused_after_catching_up(standby: &Postgres, client: &Client, v: i64) {
    eventually(
        Duration::from_secs(10),
        &format!("the standby serves {v}"),
        async || read(client).await == (v, true),
    )
    .await;
    standby.query_value("select pg_wal_replay_pause()");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_replica_serves_only_reads_that_accept_staleness() {
    let primary = Postgres::start();
    let standby = Postgres::start_standby(&primary);
    let rw = start(&primary, &standby, "1");
    let writer = setup(&rw).await;
    let strict = connect(&rw).await;
    let bounded = connect(&rw).await;
    let serializable = connect(&rw).await;
    serializable
        .batch_execute("set default_transaction_isolation = serializable")
        .await
        .unwrap();
    // A serializable read may go to the standby (which refuses serializable itself: the
    // replica connection runs it at repeatable read).
    until_replica_serves(&serializable).await;
    // The same from startup, with a parameter after it: replayed as `set_config` SELECTs,
    // which a standby refuses at serializable, so it is replayed after the others.
    let from_startup = common::client::connect_to(&format!(
        "{} options='-c default_transaction_isolation=serializable -c application_name=late'",
        rw.connection_string("postgres")
    ))
    .await;
    eventually(
        Duration::from_secs(10),
        "a read with every startup parameter reaches the replica",
        async || {
            column(
                &from_startup,
                "select current_setting('application_name') || ' ' || pg_is_in_recovery()",
            )
            .await
                == ["late true"]
        },
    )
    .await;

    // Each write below is the first after the standby paused replay, having replayed
    // everything before: a read the applied LSN does not forbid the standby would see the
    // old value there. So each checks that its commit's position was recorded.
    //
    // A transaction in one Query: whether it committed is only known from its ReadyForQuery,
    // so the position is asked after it arrives, before it is released.
    paused_after_catching_up(&standby, &strict, 0).await;
    writer
        .batch_execute("begin; update kv set v = 7 where k = 1; commit")
        .await
        .unwrap();
    assert_eq!(read(&strict).await, (7, false));
    // Over the extended protocol, COMMIT on its own: the position is pipelined behind it.
    standby.query_value("select pg_wal_replay_resume()");
    paused_after_catching_up(&standby, &strict, 7).await;
    let mut writer = writer;
    let tx = writer.transaction().await.unwrap();
    tx.execute("update kv set v = $1 where k = 1", &[&8i64])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(read(&strict).await, (8, false));
    // An autocommit statement: pipelined behind it.
    standby.query_value("select pg_wal_replay_resume()");
    paused_after_catching_up(&standby, &strict, 8).await;
    writer
        .simple_query("update kv set v = 9 where k = 1")
        .await
        .unwrap();
    // Strict: never the old value, so the primary (after at most a short wait).
    for _ in 0..20 {
        assert_eq!(read(&strict).await, (9, false));
    }
    // A bound the replica's lag is within: the stale value from the replica is allowed.
    bounded
        .batch_execute("SET ringwire.max_replica_lag_ms = 600000")
        .await
        .unwrap();
    assert_eq!(read(&bounded).await, (8, true));
    // serializable alone allows 1 s; the pause is older than that by now.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(read(&serializable).await, (9, false));
    serializable
        .batch_execute("set ringwire.max_replica_lag_ms to '600000'")
        .await
        .unwrap();
    assert_eq!(read(&serializable).await, (8, true));
    // A rolled-back bound is never in effect.
    strict
        .batch_execute("begin; set ringwire.max_replica_lag_ms = 600000; rollback")
        .await
        .unwrap();
    assert_eq!(read(&strict).await, (9, false));
    // RESET returns the session to strict reads.
    bounded
        .batch_execute("reset ringwire.max_replica_lag_ms")
        .await
        .unwrap();
    assert_eq!(read(&bounded).await, (9, false));

    standby.query_value("select pg_wal_replay_resume()");
    until_replica_serves(&strict).await;
    assert_eq!(read(&strict).await.0, 9);
}

/// Index scans of pgbench_accounts the standby has run: pgbench -S's selects served there
/// (nothing else reads that table by index on the standby; the pollers read no table).
fn standby_account_reads(standby: &Postgres) -> i64 {
    standby
        .query_value(
            "select coalesce(sum(idx_scan), 0) from pg_stat_user_tables \
             where relname = 'pgbench_accounts'",
        )
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_with_a_replica_in_every_protocol_mode() {
    let primary = Postgres::start();
    let standby = Postgres::start_standby(&primary);
    let rw = start(&primary, &standby, "2");
    // -i loads with COPY FROM STDIN: nothing may be pipelined behind a COPY.
    common::pgbench::run(rw.port, &["-i", "-s", "1", "-q"]);
    drop(rw);
    for mode in ["simple", "extended", "prepared"] {
        // A fresh ringwire per mode: its upstream backends exit when it does, and a backend
        // flushes its statistics on exit (while connected, only every second or so).
        let rw = start(&primary, &standby, "2");
        let probe = connect(&rw).await;
        eventually(
            Duration::from_secs(10),
            "the replica serves a read",
            async || row(&probe, "select pg_is_in_recovery()").await[0] == "t",
        )
        .await;
        drop(probe);
        let before = standby_account_reads(&standby);
        let report = common::pgbench::run(
            rw.port,
            &["-M", mode, "-S", "-c", "8", "-j", "2", "-T", "2"],
        );
        let (done, failed) = common::pgbench::processed_and_failed(&report);
        assert!(done > 0 && failed == 0, "{mode}: {report}");
        // tpcb-like: writes in explicit transactions, all on the primary.
        let report = common::pgbench::run(rw.port, &["-M", mode, "-c", "4", "-j", "4", "-t", "50"]);
        let (writes, failed) = common::pgbench::processed_and_failed(&report);
        assert_eq!((writes, failed), (200, 0), "{mode}: {report}");
        drop(rw);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut served = 0;
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
            served = standby_account_reads(&standby) - before;
            if served as u64 * 2 >= done {
                break;
            }
        }
        eprintln!("{mode}: the standby served {served} of {done} selects");
        assert!(
            served as u64 * 2 >= done,
            "{mode}: the standby served {served} of {done} selects"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_text_scan_lets_through_is_retried_on_the_primary_and_recorded() {
    let primary = Postgres::start();
    let standby = Postgres::start_standby(&primary);
    let rw = start(&primary, &standby, "1");
    let writer = setup(&rw).await;
    // lower(int) is not PostgreSQL's lower(text): this one writes. The scan trusts the name
    // `lower`, so the statement goes to the standby, which refuses it with 25006; nothing of
    // it reached the client yet, so it runs again on the primary.
    writer
        .batch_execute(
            "create function lower(x int) returns int language sql \
             as $$ update kv set v = v + 1 where k = 1 returning x $$",
        )
        .await
        .unwrap();
    let reader = connect(&rw).await;
    until_replica_serves(&reader).await;
    until_replica_serves(&writer).await;
    // With replay paused, a read the applied LSN does not forbid the standby gets its
    // (stale) data: so the retried write must have raised it.
    standby.query_value("select pg_wal_replay_pause()");
    for i in 1..=5i64 {
        assert_eq!(row(&writer, "select lower(5)").await, ["5"]);
        assert_eq!(
            read(&reader).await,
            (i, false),
            "stale read after write {i}"
        );
    }
    standby.query_value("select pg_wal_replay_resume()");
    until_replica_serves(&reader).await;
    // The extended protocol too (the statement is prepared on both hosts).
    let stmt = writer.prepare("select lower($1::int)").await.unwrap();
    let r: i32 = writer.query_one(&stmt, &[&7i32]).await.unwrap().get(0);
    assert_eq!(r, 7);
    assert_eq!(read(&reader).await.0, 6);
}

/// The rows of `sql`'s first column, run in one simple Query (several statements allowed).
async fn column(client: &Client, sql: &str) -> Vec<String> {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap_or("NULL").to_string()),
            _ => None,
        })
        .collect()
}

/// The SQLSTATE of `sql`'s error (panics if it succeeds).
async fn error_code(client: &Client, sql: &str) -> (String, String) {
    let e = client
        .simple_query(sql)
        .await
        .err()
        .unwrap_or_else(|| panic!("{sql} succeeded"));
    let db = e
        .as_db_error()
        .unwrap_or_else(|| panic!("{sql}: not a server error: {e}"));
    (db.code().code().to_string(), db.message().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_transactions_run_on_the_replica_and_see_every_acknowledged_write() {
    let primary = Postgres::start();
    let standby = Postgres::start_standby(&primary);
    // Two shards: writer and reader may sit on different shards.
    let rw = start(&primary, &standby, "2");
    let writer = setup(&rw).await;
    let mut reader = connect(&rw).await;
    until_replica_serves(&reader).await;
    let prepared = reader
        .prepare("select v, pg_is_in_recovery() from kv where k = $1")
        .await
        .unwrap();

    // Linearizability: each write acknowledged through one connection is seen by a read-only
    // transaction begun afterwards on another, at both isolation levels and through both
    // protocols; most of them run on the standby.
    let (mut on_replica, mut transactions) = (0, 0);
    for i in 1..=60i64 {
        writer
            .execute("update kv set v = $1 where k = 1", &[&i])
            .await
            .unwrap();
        let (v, replica) = match i % 3 {
            0 => {
                let r = column(
                    &reader,
                    "BEGIN READ ONLY; select v || ' ' || pg_is_in_recovery() from kv where k = 1; COMMIT",
                )
                .await;
                let (v, replica) = r[0].split_once(' ').unwrap();
                // (bool || text is 'true'/'false', not 't'/'f'.)
                (v.parse().unwrap(), replica == "true")
            }
            1 => {
                reader
                    .batch_execute("START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    .await
                    .unwrap();
                let r = read(&reader).await;
                reader.batch_execute("COMMIT").await.unwrap();
                r
            }
            _ => {
                let tx = reader
                    .build_transaction()
                    .read_only(true)
                    .isolation_level(tokio_postgres::IsolationLevel::ReadCommitted)
                    .start()
                    .await
                    .unwrap();
                let r = tx.query_one(&prepared, &[&1i32]).await.unwrap();
                tx.commit().await.unwrap();
                (r.get(0), r.get(1))
            }
        };
        assert_eq!(
            v, i,
            "stale read-only transaction (replica: {replica}) after write {i}"
        );
        on_replica += usize::from(replica);
        transactions += 1;
    }
    eprintln!("{on_replica} of {transactions} read-only transactions on the replica");
    // Each read waits at most `replica::WAIT_MAX` (20 ms) for the standby to replay the write
    // just acknowledged, then goes to the primary: on a loaded machine (CI's debug build, both
    // cores busy) replay lags that long now and then. A quarter still shows the routing.
    assert!(
        on_replica * 4 >= transactions,
        "only {on_replica} of {transactions} read-only transactions reached the replica"
    );
    // After a replica transaction, the session's writes still go to the primary.
    reader
        .batch_execute("update kv set v = 100 where k = 1")
        .await
        .unwrap();
    assert_eq!(read(&writer).await.0, 100);

    // Read committed: a statement later in the transaction sees writes acknowledged before
    // it started. The standby applies each commit 300 ms late, so without a wait or a move
    // the read would be stale. A transaction of plain reads waits as a read does (20 ms),
    // then goes on at the primary; one with a cursor cannot move, and the relay waits for
    // the pinned replica to replay the write.
    standby.query_value("alter system set recovery_min_apply_delay = '300ms'");
    standby.query_value("select pg_reload_conf()");
    let mut writes = 0;
    for round in 0..6i64 {
        let movable = round % 2 == 0;
        until_replica_serves(&reader).await;
        reader.batch_execute("BEGIN READ ONLY").await.unwrap();
        if !movable {
            reader
                .batch_execute("DECLARE c CURSOR FOR SELECT 1")
                .await
                .unwrap();
        }
        let (before, replica) = read(&reader).await;
        assert!(
            replica,
            "round {round}: the transaction did not run on the replica"
        );
        writer
            .execute("update kv set v = v + 1 where k = 1", &[])
            .await
            .unwrap();
        writes += 1;
        let (after, replica) = match try_read(&reader).await {
            Ok(read) => read,
            // With a cursor the wait is bounded (1 s): a loaded machine (CI's debug build)
            // can replay the write later than that, and then the transaction is ended with
            // 40001, never answered stale. Such a round is inconclusive: the next one waits
            // again.
            Err(e) if !movable && e.code().is_some_and(|c| c.code() == "40001") => {
                eprintln!("round {round}: {e:?}");
                reader.batch_execute("ROLLBACK").await.unwrap();
                continue;
            }
            Err(e) => panic!("round {round}: {e:?}"),
        };
        assert_eq!(
            after,
            before + 1,
            "round {round}: a read-committed statement missed an acknowledged write \
             (a cursor: {})",
            !movable
        );
        // (A movable round is on the primary unless the machine stalled for the 300 ms.)
        assert!(
            replica || movable,
            "round {round}: with a cursor, the transaction left its replica"
        );
        reader.batch_execute("COMMIT").await.unwrap();
    }
    standby.query_value("alter system reset recovery_min_apply_delay");
    standby.query_value("select pg_reload_conf()");

    // default_transaction_read_only makes a plain BEGIN read-only: the replica.
    let defaults = connect(&rw).await;
    defaults
        .batch_execute("set default_transaction_read_only = on")
        .await
        .unwrap();
    until_replica_serves(&defaults).await;
    assert_eq!(
        column(&defaults, "begin; select pg_is_in_recovery(); commit").await,
        ["t"]
    );
    // ... and writes in it get PostgreSQL's 25006 (here from the standby).
    defaults.batch_execute("begin").await.unwrap();
    assert_eq!(row(&defaults, "select pg_is_in_recovery()").await, ["t"]);
    let (code, message) = error_code(&defaults, "insert into kv values (2, 2)").await;
    defaults.batch_execute("rollback").await.unwrap();
    // The same statement in a read-only transaction on the primary itself.
    let direct = {
        let (c, conn) = tokio_postgres::connect(&primary.connection_string(), NoTls)
            .await
            .unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        c
    };
    direct.batch_execute("begin read only").await.unwrap();
    let on_primary = error_code(&direct, "insert into kv values (2, 2)").await;
    direct.batch_execute("rollback").await.unwrap();
    assert_eq!((code.as_str(), &message), ("25006", &on_primary.1));
    assert_eq!(on_primary.0, "25006");
    // And in an explicit BEGIN READ ONLY, over the extended protocol.
    let tx = reader
        .build_transaction()
        .read_only(true)
        .start()
        .await
        .unwrap();
    let e = tx
        .execute("update kv set v = 0 where k = 1", &[])
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION)
    );
    drop(tx);
    assert_eq!(
        read(&writer).await.0,
        100 + writes,
        "the refused write changed nothing"
    );

    // A statement that would pin the session to its connection (kept, the replica connection
    // would serve the session's later writes) moves a transaction of plain reads to the
    // primary, where it runs and pins the session ...
    let pinned = connect(&rw).await;
    until_replica_serves(&pinned).await;
    pinned.batch_execute("begin read only").await.unwrap();
    assert_eq!(row(&pinned, "select pg_is_in_recovery()").await, ["t"]);
    pinned.batch_execute("prepare p as select 1").await.unwrap();
    assert_eq!(
        row(
            &pinned,
            "select pg_is_in_recovery(), current_setting('transaction_read_only')"
        )
        .await,
        ["f", "on"]
    );
    pinned.batch_execute("commit").await.unwrap();
    assert_eq!(column(&pinned, "execute p").await, ["1"]);
    // ... and is refused with 0A000 in one that cannot move (a cursor in it); the
    // transaction ends and the session carries on, its writes on the primary.
    until_replica_serves(&reader).await;
    reader
        .batch_execute("begin read only; declare c cursor for select 1")
        .await
        .unwrap();
    assert_eq!(row(&reader, "select pg_is_in_recovery()").await, ["t"]);
    let (code, message) = error_code(&reader, "prepare p as select 1").await;
    assert_eq!(code, "0A000", "{message}");
    reader.batch_execute("rollback").await.unwrap();
    reader
        .batch_execute("update kv set v = v where k = 1")
        .await
        .unwrap();

    // PostgreSQL itself: a hot standby refuses serializable (0A000).
    {
        let (c, conn) = tokio_postgres::connect(&standby.connection_string(), NoTls)
            .await
            .unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let (code, message) =
            error_code(&c, "begin isolation level serializable read only; select 1").await;
        assert_eq!(code, "0A000", "{message}");
    }
    // What stays on the primary: serializable (a standby refuses it), read-write, plain
    // BEGIN, and BEGIN; SET TRANSACTION READ ONLY (read-write when it began).
    until_replica_serves(&reader).await;
    for sql in [
        "begin isolation level serializable read only; select pg_is_in_recovery(); commit",
        "begin isolation level serializable, read only, deferrable; select pg_is_in_recovery(); commit",
        "begin read write; select pg_is_in_recovery(); commit",
        "begin; select pg_is_in_recovery(); commit",
        "begin; set transaction read only; select pg_is_in_recovery(); commit",
    ] {
        assert_eq!(column(&reader, sql).await, ["f"], "{sql}");
    }
    let tx = reader
        .build_transaction()
        .read_only(true)
        .isolation_level(tokio_postgres::IsolationLevel::Serializable)
        .start()
        .await
        .unwrap();
    let r = tx.query_one(&prepared, &[&1i32]).await.unwrap();
    assert!(
        !r.get::<_, bool>(1),
        "a serializable transaction ran on the replica"
    );
    tx.commit().await.unwrap();
    // A Query that ends the transaction and goes on cannot be split: all of it runs on the
    // primary (the write succeeds; on the standby it would have failed with 25006).
    assert_eq!(
        column(
            &reader,
            "begin read only; select pg_is_in_recovery(); commit; \
             update kv set v = 7 where k = 1 returning pg_is_in_recovery()"
        )
        .await,
        ["f", "f"]
    );
    assert_eq!(read(&writer).await.0, 7);

    // The same as four Queries in one batch: the transaction runs on the standby, and what
    // follows its COMMIT is routed afresh, so the write succeeds on the primary.
    {
        use common::wire::{logged_in, read_messages, simple_query};
        use tokio::io::AsyncWriteExt;
        until_replica_serves(&reader).await;
        let mut raw = logged_in(&rw.addr()).await;
        // Until this connection's shard routes reads to the standby (its poller starts with
        // the shard's first read).
        eventually(
            Duration::from_secs(10),
            "a read reaches the replica",
            async || {
                raw.write_all(&simple_query("select pg_is_in_recovery()"))
                    .await
                    .unwrap();
                read_messages(&mut raw)
                    .await
                    .iter()
                    .any(|(tag, body)| *tag == b'D' && body.ends_with(b"t"))
            },
        )
        .await;
        let mut batch = Vec::new();
        for sql in [
            "BEGIN READ ONLY",
            "select pg_is_in_recovery()::text",
            "COMMIT",
            "update kv set v = 8 where k = 1 returning pg_is_in_recovery()::text",
        ] {
            batch.extend_from_slice(&simple_query(sql));
        }
        raw.write_all(&batch).await.unwrap();
        let mut rows = Vec::new();
        for _ in 0..4 {
            for (tag, body) in read_messages(&mut raw).await {
                assert_ne!(tag, b'E', "{}", common::wire::error_field(&body, b'M'));
                if tag == b'D' {
                    rows.push(String::from_utf8_lossy(&body[6..]).to_string());
                }
            }
        }
        assert_eq!(rows, ["true", "false"]);
        assert_eq!(read(&writer).await.0, 8);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_replica_never_serves_a_stale_read_only_transaction() {
    let primary = Postgres::start();
    let standby = Postgres::start_standby(&primary);
    let rw = start(&primary, &standby, "1");
    let writer = setup(&rw).await;
    let reader = connect(&rw).await;

    // Replay paused after catching up: a transaction begun after a write goes to the
    // primary (the standby cannot have it).
    paused_after_catching_up(&standby, &reader, 0).await;
    writer
        .batch_execute("update kv set v = 1 where k = 1")
        .await
        .unwrap();
    for begin in [
        "begin read only",
        "start transaction isolation level repeatable read read only",
    ] {
        reader.batch_execute(begin).await.unwrap();
        assert_eq!(read(&reader).await, (1, false), "{begin}");
        reader.batch_execute("commit").await.unwrap();
    }
    standby.query_value("select pg_wal_replay_resume()");

    // Repeatable read on the replica: one snapshot, taken at the first statement; a write
    // acknowledged later is (rightly) not seen, and nothing waits for it.
    paused_after_catching_up(&standby, &reader, 1).await;
    reader
        .batch_execute("begin isolation level repeatable read read only")
        .await
        .unwrap();
    assert_eq!(read(&reader).await, (1, true));
    writer
        .batch_execute("update kv set v = 2 where k = 1")
        .await
        .unwrap();
    let started = Instant::now();
    assert_eq!(read(&reader).await, (1, true));
    assert!(started.elapsed() < Duration::from_millis(500));
    reader.batch_execute("commit").await.unwrap();
    standby.query_value("select pg_wal_replay_resume()");

    // Read committed on a replica that stops replaying mid-transaction: the next statement
    // cannot see the write acknowledged before it there. A transaction with nothing in it
    // but reads goes on at the primary, in both protocols, and stays there.
    let prepared = reader.prepare(READ).await.unwrap();
    let mut v = 2;
    for extended in [false, true] {
        paused_after_catching_up(&standby, &reader, v).await;
        reader.batch_execute("begin read only").await.unwrap();
        assert_eq!(read(&reader).await, (v, true));
        v += 1;
        writer
            .batch_execute(&format!("update kv set v = {v} where k = 1"))
            .await
            .unwrap();
        let moved = if extended {
            let r = reader.query_one(&prepared, &[]).await.unwrap();
            (r.get::<_, i64>(0), r.get::<_, bool>(1))
        } else {
            read(&reader).await
        };
        assert_eq!(moved, (v, false), "extended protocol: {extended}");
        assert_eq!(read(&reader).await, (v, false));
        assert_eq!(
            row(&reader, "show transaction_read_only").await,
            ["on"],
            "still a read-only transaction"
        );
        reader.batch_execute("commit").await.unwrap();
        standby.query_value("select pg_wal_replay_resume()");
        until_replica_serves(&reader).await;
    }

    // Nothing ran yet but its BEGIN: a `SET TRANSACTION` in the batch that moves works at
    // the primary, as it would have on the replica.
    paused_after_catching_up(&standby, &reader, v).await;
    reader.batch_execute("begin read only").await.unwrap();
    v += 1;
    writer
        .batch_execute(&format!("update kv set v = {v} where k = 1"))
        .await
        .unwrap();
    assert_eq!(
        row(
            &reader,
            "set transaction isolation level repeatable read; \
             select current_setting('transaction_isolation'), pg_is_in_recovery(), v \
             from kv where k = 1"
        )
        .await,
        ["repeatable read", "f", &v.to_string()]
    );
    reader.batch_execute("commit").await.unwrap();
    standby.query_value("select pg_wal_replay_resume()");
    until_replica_serves(&reader).await;

    // One with something in it that the primary would lack (a cursor here) cannot move:
    // it fails with 40001 (bounded) and the client stays connected.
    paused_after_catching_up(&standby, &reader, v).await;
    reader
        .batch_execute("begin read only; declare c cursor for select 1")
        .await
        .unwrap();
    assert_eq!(read(&reader).await, (v, true));
    v += 1;
    writer
        .batch_execute(&format!("update kv set v = {v} where k = 1"))
        .await
        .unwrap();
    let started = Instant::now();
    let (code, message) = error_code(&reader, READ).await;
    assert_eq!(code, "40001", "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    reader.batch_execute("rollback").await.unwrap();
    assert_eq!(read(&reader).await, (v, false));
    standby.query_value("select pg_wal_replay_resume()");
    until_replica_serves(&reader).await;
    assert_eq!(read(&reader).await, (v, true));

    // COMMIT AND CHAIN starts a new repeatable-read transaction on the same replica: its
    // snapshot must hold the write acknowledged before it began, which the paused replica
    // cannot have, so its first read fails with 40001 rather than read the old value.
    paused_after_catching_up(&standby, &reader, v).await;
    reader
        .batch_execute("begin isolation level repeatable read read only")
        .await
        .unwrap();
    assert_eq!(read(&reader).await, (v, true));
    v += 1;
    writer
        .batch_execute(&format!("update kv set v = {v} where k = 1"))
        .await
        .unwrap();
    reader.batch_execute("commit and chain").await.unwrap();
    let (code, message) = error_code(&reader, READ).await;
    assert_eq!(code, "40001", "{message}");
    reader.batch_execute("rollback").await.unwrap();
    standby.query_value("select pg_wal_replay_resume()");
    until_replica_serves(&reader).await;
    assert_eq!(read(&reader).await, (v, true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_dying_mid_transaction_moves_it_or_fails_it_with_08006_and_keeps_the_client() {
    let primary = Postgres::start();
    let mut standby = Postgres::start_standby(&primary);
    let rw = start(&primary, &standby, "1");
    let writer = setup(&rw).await;
    // Read committed with only reads in it, and what its text redoes (SET LOCAL, a
    // savepoint): it goes on at the primary, and they with it.
    let mover = connect(&rw).await;
    mover
        .batch_execute("begin read only; set local statement_timeout = '77s'; savepoint s")
        .await
        .unwrap();
    assert_eq!(read(&mover).await, (0, true));
    // With a cursor (state the primary's transaction would lack): it fails.
    let reader = connect(&rw).await;
    reader
        .batch_execute("begin read only; declare c cursor for select 1")
        .await
        .unwrap();
    assert_eq!(read(&reader).await, (0, true));
    let standby = tokio::task::spawn_blocking(move || {
        standby.kill();
        standby
    })
    .await
    .unwrap();
    assert_eq!(read(&mover).await, (0, false));
    mover.batch_execute("release s").await.unwrap();
    assert_eq!(row(&mover, "show statement_timeout").await, ["77s"]);
    assert_eq!(read(&mover).await, (0, false));
    mover.batch_execute("commit").await.unwrap();
    let (code, _) = error_code(&reader, READ).await;
    assert_eq!(code, "08006");
    // Connected, the transaction gone; the next transaction runs (on the primary).
    reader.batch_execute("rollback").await.unwrap();
    writer
        .batch_execute("update kv set v = 4 where k = 1")
        .await
        .unwrap();
    assert_eq!(
        column(
            &reader,
            "begin read only; select v from kv where k = 1; commit"
        )
        .await,
        ["4"]
    );
    assert_eq!(read(&reader).await, (4, false));
    drop(standby);
}

/// The SQLSTATE and message of a statement that must fail.
async fn failure(client: &Client, sql: &str) -> (String, String) {
    match client.batch_execute(sql).await {
        Ok(()) => panic!("{sql} succeeded"),
        Err(e) => match e.as_db_error() {
            Some(db) => (db.code().code().to_string(), db.message().to_string()),
            None => (String::new(), e.to_string()),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_follow_the_primary_to_a_promoted_standby() {
    let mut primary = Postgres::start();
    let mut standby = Postgres::start_standby(&primary);
    // Both hosts in the --upstream URL (libpq's multi-host syntax), the standby first:
    // ringwire takes the one that is not in recovery.
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres",
        standby.port, primary.port
    );
    let rw = Ringwire::start(&[
        "--shards",
        "2",
        "--upstream",
        &url,
        "--upstream-pool-size",
        "2",
    ]);
    let clients = [connect(&rw).await, connect(&rw).await, connect(&rw).await];
    let c = &clients[0];
    c.batch_execute("create table kv (k int primary key, v bigint); insert into kv values (1, 1)")
        .await
        .unwrap();
    for client in &clients {
        assert_eq!(
            row(client, "select v, pg_is_in_recovery() from kv").await,
            ["1", "f"]
        );
    }
    // A URL whose only host takes no writes is a startup error when writes are asked for.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ringwire"))
        .args(["--listen", "127.0.0.1:0", "--upstream"])
        .arg(format!(
            "postgres://postgres@127.0.0.1:{}/postgres?target_session_attrs=read-write",
            standby.port
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no upstream host takes writes") && stderr.contains("in hot standby"),
        "{stderr}"
    );
    // A cancel reaches the backend on the host the statement runs on.
    let sleeper = connect(&rw).await;
    let token = sleeper.cancel_token();
    let mut sleeping =
        tokio::spawn(async move { sleeper.batch_execute("select pg_sleep(30)").await });
    let err = loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        token.cancel_query(NoTls).await.unwrap();
        if let Ok(done) = tokio::time::timeout(Duration::from_millis(700), &mut sleeping).await {
            break done.unwrap().expect_err("pg_sleep(30) was not cancelled");
        }
    };
    assert_eq!(err.code().map(|c| c.code()), Some("57014"), "{err}");
    // The standby has the row before the primary goes.
    eventually_blocking(
        Duration::from_secs(10),
        Duration::from_millis(20),
        "the standby replayed the row",
        || standby.query_value("select count(*) from kv") == "1",
    );
    primary = tokio::task::spawn_blocking(move || {
        primary.kill();
        primary
    })
    .await
    .unwrap();
    // No host takes writes: statements fail with 08006 and the clients stay connected.
    for client in &clients {
        let (code, message) = failure(client, "update kv set v = 2 where k = 1").await;
        assert_eq!(code, "08006", "{message}");
        assert!(
            message.contains(&format!("127.0.0.1:{}: in hot standby", standby.port)),
            "{message}"
        );
    }
    standby.promote();
    // Every client goes on against the new primary, with what the old one committed.
    for (i, client) in clients.iter().enumerate() {
        client
            .batch_execute(&format!("update kv set v = v + {i} where k = 1"))
            .await
            .unwrap_or_else(|e| panic!("client {i} after the promotion: {e}"));
    }
    assert_eq!(
        row(c, "select v, pg_is_in_recovery() from kv").await,
        ["4", "f"]
    );
    let late = connect(&rw).await;
    assert_eq!(row(&late, "select v from kv").await, ["4"]);
    assert_eq!(standby.query_value("select v from kv"), "4");
    // The old primary comes back as a primary (nothing rebuilt it as a standby), and the new
    // one goes: the old is now the only host that takes writes, but it is on the timeline
    // the promotion left behind. Writes fail (08006, naming the fence) rather than land on
    // it, where they would be lost to the new primary's history (a split brain).
    let (primary, standby) = tokio::task::spawn_blocking(move || {
        primary.restart();
        standby.kill();
        (primary, standby)
    })
    .await
    .unwrap();
    assert_eq!(primary.query_value("select pg_is_in_recovery()"), "f");
    for client in clients.iter().chain([&late]) {
        let (code, message) = failure(client, "update kv set v = 100 where k = 1").await;
        assert_eq!(code, "08006", "{message}");
        assert!(
            message.contains(&format!("127.0.0.1:{}: fenced", primary.port)),
            "{message}"
        );
    }
    assert_eq!(primary.query_value("select v from kv"), "1");
    drop((primary, standby));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_read_committed_transactions_never_miss_an_acknowledged_write() {
    let primary = Postgres::start();
    let standby = Postgres::start_standby(&primary);
    let rw = start(&primary, &standby, "2");
    let writer = setup(&rw).await;
    // The highest value whose write was acknowledged (set after the ack).
    let acked = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let on_replica = Arc::new(AtomicUsize::new(0));
    let statements = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    for _ in 0..4 {
        let client = connect(&rw).await;
        until_replica_serves(&client).await;
        let (acked, done, on_replica, statements) = (
            acked.clone(),
            done.clone(),
            on_replica.clone(),
            statements.clone(),
        );
        readers.push(tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                client.batch_execute("begin read only").await.unwrap();
                // Each statement must see every write acknowledged before it started.
                for _ in 0..3 {
                    let floor = acked.load(Ordering::SeqCst);
                    let (v, replica) = read(&client).await;
                    assert!(v >= floor, "read {v} after {floor} was acknowledged");
                    on_replica.fetch_add(usize::from(replica), Ordering::Relaxed);
                    statements.fetch_add(1, Ordering::Relaxed);
                }
                client.batch_execute("commit").await.unwrap();
            }
        }));
    }
    let started = Instant::now();
    let mut i = 0i64;
    while started.elapsed() < Duration::from_secs(3) {
        i += 1;
        writer
            .execute("update kv set v = $1 where k = 1", &[&i])
            .await
            .unwrap();
        acked.store(i, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.expect("a reader saw a stale value or an error");
    }
    let (on_replica, statements) = (
        on_replica.load(Ordering::Relaxed),
        statements.load(Ordering::Relaxed),
    );
    eprintln!("{i} writes; {on_replica} of {statements} transaction statements on the replica");
    assert!(
        on_replica * 2 >= statements,
        "only {on_replica} of {statements} statements ran on the replica"
    );
}

/// A conflict with recovery (40001 from the standby: the replay of a cleanup cancels a read
/// whose snapshot still needs the rows) in a later batch of a read-committed read-only
/// transaction of plain reads: the batch runs again at the primary, where the transaction
/// goes on, and a SET made there after the move is the session's once it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_conflict_moves_a_read_committed_transaction_to_the_primary() {
    let primary = Postgres::start();
    let standby = Postgres::start_standby(&primary);
    // Replay waits for no standby query: a conflicting one is cancelled at once.
    standby.query_value("alter system set max_standby_streaming_delay = 0");
    standby.query_value("select pg_reload_conf()");
    let rw = start(&primary, &standby, "1");
    let writer = setup(&rw).await;
    let reader = connect(&rw).await;
    reader.batch_execute("begin read only").await.unwrap();
    assert_eq!(read(&reader).await, (0, true));
    // A read that takes 3 s on the standby, while the primary replaces the row it reads
    // and vacuums the old version away.
    let long = tokio::spawn(async move {
        let r = row(
            &reader,
            "select v, pg_is_in_recovery(), pg_sleep(3) from kv where k = 1",
        )
        .await;
        (reader, r)
    });
    // Once it runs there (a fixed sleep would race a loaded machine):
    eventually_blocking(
        Duration::from_secs(10),
        Duration::from_millis(50),
        "the long read runs on the standby",
        || {
            standby.query_value(
                "select count(*) from pg_stat_activity where state = 'active' \
             and query like 'select v, pg_is_in_recovery(), pg_sleep%'",
            ) == "1"
        },
    );
    writer
        .batch_execute("update kv set v = 1 where k = 1")
        .await
        .unwrap();
    writer.batch_execute("vacuum kv").await.unwrap();
    let (reader, r) = long.await.expect("the read failed");
    assert_eq!(r[..2], ["1", "f"], "run again on the primary");
    reader
        .batch_execute("set application_name = 'moved'")
        .await
        .unwrap();
    assert_eq!(read(&reader).await, (1, false));
    assert_eq!(
        row(&reader, "select current_setting('transaction_read_only')").await,
        ["on"]
    );
    reader.batch_execute("commit").await.unwrap();
    assert_eq!(row(&reader, "show application_name").await, ["moved"]);
}

/// A server whose own default isolation is repeatable read (here `ALTER DATABASE`): a plain
/// `BEGIN READ ONLY` there is repeatable read, whatever the session said (nothing), so its
/// transaction on a lagging replica does not move to the primary, where a new snapshot would
/// break it; it waits and fails with 40001 as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeatable_read_server_default_keeps_read_only_transactions_on_their_replica() {
    let primary = Postgres::start();
    primary.query_value(
        "alter database postgres set default_transaction_isolation = 'repeatable read'",
    );
    let standby = Postgres::start_standby(&primary);
    let rw = start(&primary, &standby, "1");
    let writer = setup(&rw).await;
    let reader = connect(&rw).await;
    paused_after_catching_up(&standby, &reader, 0).await;
    reader.batch_execute("begin read only").await.unwrap();
    assert_eq!(
        row(
            &reader,
            "select current_setting('transaction_isolation'), pg_is_in_recovery()"
        )
        .await,
        ["repeatable read", "t"]
    );
    writer
        .batch_execute("update kv set v = 1 where k = 1")
        .await
        .unwrap();
    let (code, message) = error_code(&reader, READ).await;
    assert_eq!(code, "40001", "{message}");
    reader.batch_execute("rollback").await.unwrap();
    standby.query_value("select pg_wal_replay_resume()");
    // The same with the isolation named: it moves.
    paused_after_catching_up(&standby, &reader, 1).await;
    reader
        .batch_execute("begin isolation level read committed read only")
        .await
        .unwrap();
    assert_eq!(
        row(
            &reader,
            "select current_setting('transaction_isolation'), pg_is_in_recovery()"
        )
        .await,
        ["read committed", "t"]
    );
    writer
        .batch_execute("update kv set v = 2 where k = 1")
        .await
        .unwrap();
    assert_eq!(read(&reader).await, (2, false));
    reader.batch_execute("commit").await.unwrap();
    standby.query_value("select pg_wal_replay_resume()");
}

/// PostgreSQL keeps the unnamed portal past a Sync inside a transaction block: a transaction
/// whose batch bound it without running it to the end cannot move (the portal would not
/// exist at the primary), so a later batch that executes it, with the replica behind, waits
/// and fails with 40001 (replay paused), not with 34000 "portal does not exist".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portal_bound_in_an_earlier_batch_keeps_its_transaction_on_the_replica() {
    use common::wire::{error_field, frame, logged_in, read_messages, simple_query};
    use tokio::io::AsyncWriteExt;
    let primary = Postgres::start();
    let standby = Postgres::start_standby(&primary);
    let rw = start(&primary, &standby, "1");
    let writer = setup(&rw).await;
    let reader = connect(&rw).await;
    paused_after_catching_up(&standby, &reader, 0).await;
    let mut raw = logged_in(&rw.addr()).await;
    raw.write_all(&simple_query("begin read only"))
        .await
        .unwrap();
    let reply = read_messages(&mut raw).await;
    assert_eq!(reply.last().map(|m| m.0), Some(b'Z'), "{reply:?}");
    let parse = [b"\0", READ.as_bytes(), b"\0\0\0"].concat();
    let mut batch = frame(b'P', &parse);
    batch.extend(frame(b'B', b"\0\0\0\0\0\0\0\0"));
    batch.extend(frame(b'S', b""));
    raw.write_all(&batch).await.unwrap();
    let reply = read_messages(&mut raw).await;
    assert_eq!(
        reply.iter().map(|m| m.0).collect::<Vec<_>>(),
        b"12Z",
        "{reply:?}"
    );
    writer
        .batch_execute("update kv set v = 1 where k = 1")
        .await
        .unwrap();
    let mut batch = frame(b'E', b"\0\0\0\0\0");
    batch.extend(frame(b'S', b""));
    raw.write_all(&batch).await.unwrap();
    let reply = read_messages(&mut raw).await;
    let error = reply.iter().find(|m| m.0 == b'E').expect("an error");
    assert_eq!(
        error_field(&error.1, b'C'),
        "40001",
        "{}",
        error_field(&error.1, b'M')
    );
    standby.query_value("select pg_wal_replay_resume()");
}

/// A read-committed read-only transaction carries `SET LOCAL` and its savepoints to the
/// primary when its replica falls behind (they run again there after the new BEGIN), and
/// moves there, rather than fail with 0A000, when it runs what a replica transaction cannot
/// (a session SET in a prepared statement, `COMMIT; UPDATE …` in one Query). Each part fails
/// on the build before (40001 or 0A000). Replay is paused, so a read that returns the latest
/// value and `pg_is_in_recovery() = false` ran on the primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_transaction_takes_its_local_settings_and_savepoints_along() {
    let primary = Postgres::start();
    let standby = Postgres::start_standby(&primary);
    let rw = start(&primary, &standby, "1");
    let writer = setup(&rw).await;
    let mut reader = connect(&rw).await;
    let mut v = 0;
    let write = async |v: &mut i64| {
        *v += 1;
        writer
            .batch_execute(&format!("update kv set v = {v} where k = 1"))
            .await
            .unwrap();
    };

    // SET LOCAL and a savepoint, in the BEGIN's Query and after a read.
    paused_after_catching_up(&standby, &reader, v).await;
    reader
        .batch_execute("begin read only; set local statement_timeout = '123s'")
        .await
        .unwrap();
    assert_eq!(read(&reader).await, (v, true));
    reader
        .batch_execute("savepoint s; set local work_mem = '9MB'")
        .await
        .unwrap();
    write(&mut v).await;
    assert_eq!(read(&reader).await, (v, false), "moved");
    assert_eq!(
        row(
            &reader,
            "select current_setting('statement_timeout'), current_setting('work_mem')"
        )
        .await,
        ["123s", "9MB"]
    );
    // The savepoint is there: rolling back to it undoes only what came after it.
    reader.batch_execute("rollback to s").await.unwrap();
    assert_eq!(
        row(
            &reader,
            "select current_setting('statement_timeout'), current_setting('work_mem'), \
             current_setting('transaction_read_only')"
        )
        .await,
        ["123s", "4MB", "on"]
    );
    reader.batch_execute("commit").await.unwrap();
    assert_eq!(row(&reader, "show statement_timeout").await, ["0"]);
    standby.query_value("select pg_wal_replay_resume()");

    // BEGIN and a read in one Query, then SET LOCAL over the extended protocol.
    paused_after_catching_up(&standby, &reader, v).await;
    assert_eq!(
        row(
            &reader,
            "begin read only; select v, pg_is_in_recovery() from kv"
        )
        .await,
        [v.to_string(), "t".to_string()]
    );
    reader
        .execute("set local work_mem = '7MB'", &[])
        .await
        .unwrap();
    write(&mut v).await;
    assert_eq!(read(&reader).await, (v, false), "moved");
    assert_eq!(row(&reader, "show work_mem").await, ["7MB"]);
    reader.batch_execute("commit").await.unwrap();
    standby.query_value("select pg_wal_replay_resume()");

    // A read in the BEGIN's own Query took a snapshot: after the move, `SET TRANSACTION`
    // fails with 25001 as it would have on the replica (it must not turn the moved
    // transaction repeatable read).
    paused_after_catching_up(&standby, &reader, v).await;
    row(
        &reader,
        "begin read only; select v, pg_is_in_recovery() from kv",
    )
    .await;
    write(&mut v).await;
    let (code, message) = error_code(
        &reader,
        "set transaction isolation level repeatable read; select 1",
    )
    .await;
    assert_eq!(code, "25001", "{message}");
    reader.batch_execute("rollback").await.unwrap();
    standby.query_value("select pg_wal_replay_resume()");

    // A session SET in a prepared statement would pin the session to its replica
    // connection: the transaction moves first, and the SET is the session's once it commits.
    paused_after_catching_up(&standby, &reader, v).await;
    let tx = reader
        .build_transaction()
        .read_only(true)
        .start()
        .await
        .unwrap();
    let on_standby: bool = tx
        .query_one("select pg_is_in_recovery()", &[])
        .await
        .unwrap()
        .get(0);
    assert!(on_standby);
    tx.execute("set application_name = 'carried'", &[])
        .await
        .unwrap();
    let r = tx.query_one(READ, &[]).await.unwrap();
    assert_eq!((r.get::<_, i64>(0), r.get::<_, bool>(1)), (v, false));
    tx.commit().await.unwrap();
    assert_eq!(row(&reader, "show application_name").await, ["carried"]);
    standby.query_value("select pg_wal_replay_resume()");

    // COMMIT and a write in one Query: it cannot be split, so the transaction moves and the
    // primary runs both; the write is acknowledged, so no read after it may miss it.
    let other = connect(&rw).await;
    paused_after_catching_up(&standby, &other, v).await;
    other.batch_execute("begin read only").await.unwrap();
    assert_eq!(read(&other).await, (v, true));
    v += 1;
    other
        .batch_execute(&format!("commit; update kv set v = {v} where k = 1"))
        .await
        .unwrap();
    assert_eq!(read(&other).await, (v, false));
    let fresh = connect(&rw).await;
    assert_eq!(read(&fresh).await, (v, false));
    standby.query_value("select pg_wal_replay_resume()");
    until_replica_serves(&fresh).await;
    assert_eq!(read(&fresh).await, (v, true));
}

/// A session SET once the transaction has a savepoint pins the session (which part a ROLLBACK
/// TO undoes is not tracked): in a replica transaction that can move, the transaction moves
/// to the primary first and the session keeps that connection; in one that cannot, the SET is
/// refused with 0A000, as other pinning statements are. (Before, it ran on the replica and
/// left the session pinned to the replica's connection: a debug build's assertion.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_set_after_a_savepoint_never_pins_a_replica_connection() {
    let primary = Postgres::start();
    let standby = Postgres::start_standby(&primary);
    let rw = start(&primary, &standby, "1");
    let _writer = setup(&rw).await;
    let reader = connect(&rw).await;
    reader
        .batch_execute("begin read only; savepoint s")
        .await
        .unwrap();
    assert_eq!(read(&reader).await, (0, true));
    reader
        .batch_execute("set search_path = pg_catalog, public")
        .await
        .unwrap();
    assert_eq!(read(&reader).await, (0, false), "moved");
    reader.batch_execute("commit").await.unwrap();
    assert_eq!(
        row(&reader, "show search_path").await,
        ["pg_catalog, public"]
    );
    // Pinned to its primary connection from now on: every read goes there.
    assert_eq!(read(&reader).await, (0, false));

    let other = connect(&rw).await;
    until_replica_serves(&other).await;
    other
        .batch_execute("begin read only; declare c cursor for select 1; savepoint s")
        .await
        .unwrap();
    assert_eq!(read(&other).await, (0, true));
    let (code, message) = error_code(&other, "set search_path = pg_catalog, public").await;
    assert_eq!(code, "0A000", "{message}");
    other.batch_execute("rollback").await.unwrap();
    assert_eq!(row(&other, "show search_path").await, ["\"$user\", public"]);
}

/// A read-only transaction on a replica whose client SETs and parses a statement in one
/// write: where the Parse is analysed is not known until the SET answers, so it would pin
/// the session (`Session::parse_settings`). The part runs on the primary instead (the
/// transaction moves), and the session is never pinned to its replica connection. On the
/// build before the fix, the session was pinned there, and at COMMIT the debug build's
/// assertion stopped the shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parse_after_a_set_in_one_write_never_pins_a_replica_connection() {
    use common::wire::{frame, logged_in, read_messages, simple_query};
    use tokio::io::AsyncWriteExt;
    let primary = Postgres::start();
    let standby = Postgres::start_standby(&primary);
    let rw = start(&primary, &standby, "1");
    let _writer = setup(&rw).await;
    let reader = connect(&rw).await;
    until_replica_serves(&reader).await;
    let mut raw = logged_in(&rw.addr()).await;
    raw.write_all(&simple_query("begin read only"))
        .await
        .unwrap();
    let reply = read_messages(&mut raw).await;
    assert_eq!(reply.last().map(|m| m.0), Some(b'Z'), "{reply:?}");
    let mut batch = simple_query("set work_mem = '5MB'");
    batch.extend(frame(b'P', b"\0select pg_is_in_recovery()::text\0\0\0"));
    batch.extend(frame(b'B', b"\0\0\0\0\0\0\0\0"));
    batch.extend(frame(b'E', b"\0\0\0\0\0"));
    batch.extend(frame(b'S', b""));
    raw.write_all(&batch).await.unwrap();
    let mut tags = Vec::new();
    for _ in 0..2 {
        let reply = read_messages(&mut raw).await;
        assert_eq!(reply.last().map(|m| m.0), Some(b'Z'), "{reply:?}");
        tags.extend(reply.iter().map(|m| m.0));
    }
    assert_eq!(tags, b"CZ12DCZ", "{tags:?}");
    for sql in ["commit", "show work_mem"] {
        raw.write_all(&simple_query(sql)).await.unwrap();
        let reply = read_messages(&mut raw).await;
        assert_eq!(reply.last().map(|m| m.0), Some(b'Z'), "{sql}: {reply:?}");
        if sql == "show work_mem" {
            let row = reply.iter().find(|m| m.0 == b'D').expect("a row");
            assert!(row.1.ends_with(b"5MB"), "{reply:?}");
        }
    }
    // The shard still serves.
    assert_eq!(row(&reader, "select 1").await, ["1"]);
}
