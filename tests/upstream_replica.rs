//! Upstream mode with a streaming replica (`--replica`): ringwire in front of a real
//! PostgreSQL 15 primary and a hot standby made with `pg_basebackup`. Reads are told apart by
//! `pg_is_in_recovery()` in the statement itself (true only on the standby), so each test
//! can assert both that reads reached the replica and that none of them was stale.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::postgres::Postgres;
use common::ringwire::Ringwire;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

fn start(primary: &Postgres, standby: &Postgres, shards: &str) -> Ringwire {
    let url = |pg: &Postgres| format!("postgres://postgres@127.0.0.1:{}/postgres", pg.port);
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

async fn connect(rw: &Ringwire) -> Client {
    let conn = rw.connection_string("postgres");
    let (client, connection) = tokio_postgres::connect(&conn, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect {conn}: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// The row of a simple query, as text.
async fn row(client: &Client, sql: &str) -> Vec<String> {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
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

/// Until a default-isolation read reaches the standby (it joins the rotation after its first
/// poll), at most 10 s.
async fn until_replica_serves(client: &Client) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !read(client).await.1 {
        assert!(
            Instant::now() < deadline,
            "no read reached the replica within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    for _ in 0..4 {
        let client = connect(&rw).await;
        let prepared = client
            .prepare("select v, pg_is_in_recovery() from kv where k = $1")
            .await
            .unwrap();
        let (done, on_replica, on_primary) = (done.clone(), on_replica.clone(), on_primary.clone());
        readers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !done.load(Ordering::Relaxed) {
                // Both protocols; any error fails the test.
                let replica = if n.is_multiple_of(2) {
                    read(&client).await.1
                } else {
                    let r = client.query_one(&prepared, &[&1i32]).await.unwrap();
                    r.get::<_, bool>(1)
                };
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
    let deadline = Instant::now() + Duration::from_secs(10);
    while read(client).await != (v, true) {
        assert!(Instant::now() < deadline, "the standby never served {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
        let deadline = Instant::now() + Duration::from_secs(10);
        while row(&probe, "select pg_is_in_recovery()").await[0] != "t" {
            assert!(Instant::now() < deadline, "the replica never served a read");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
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
