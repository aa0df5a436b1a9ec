//! Read replicas (`--read-replicas on`, the default): shard 1 keeps a copy of the compute's
//! tables and serves reads from it only when it provably holds every acknowledged write —
//! checked with real clients against the real server, the counters in `ringwire.shard_stats`
//! saying which path ran, and PostgreSQL as the reference for results after DDL.

mod common;

use std::time::Duration;

use common::client::{connect_on_shard, connect_to, linearizability, text_rows};
use common::postgres::Postgres;
use common::ringwire::Ringwire;
use common::{eventually, eventually_ok};
use tokio_postgres::Client;

/// What a simple query answered: rows as text, or the SQLSTATE.
async fn outcome(client: &Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    match client.simple_query(sql).await {
        Ok(msgs) => Ok(text_rows(msgs)),
        Err(e) => Err(e
            .code()
            .map_or_else(|| format!("client error {e}"), |c| c.code().to_string())),
    }
}

/// A counter of `shard` in `ringwire.shard_stats` (NULL as -1).
async fn stat(client: &Client, shard: usize, column: &str) -> i64 {
    let rows = outcome(
        client,
        &format!("select {column} from ringwire.shard_stats where shard = {shard}"),
    )
    .await
    .unwrap();
    rows[0][0].as_deref().map_or(-1, |v| v.parse().unwrap())
}

/// Linearizability with replicas: one writer on each shard, readers on both, every read
/// must see every write acknowledged before it started, and never go backwards. Run twice:
/// as shipped, and with every shipment to the replica held 2 ms (a hidden test flag), so
/// shard 1's replica is often behind acknowledged writes of shard 0's writer. The test
/// asserts that the replica served reads and, in the delayed run, was found behind (reads
/// then wait for it), so it covers the freshness check itself: with `ts > applied` removed
/// from `Replica::peek`, the delayed run fails with "stale read" (checked by hand).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replica_reads_are_linearizable_with_writers_on_both_shards() {
    for delay_us in ["0", "2000"] {
        linearizable_run(delay_us).await;
    }
}

async fn linearizable_run(delay_us: &'static str) {
    let rw = Ringwire::start(&["--shards", "2", "--replica-ship-delay-us", delay_us]);
    let setup = connect_on_shard(&rw.connection_string("postgres"), 0).await;
    setup
        .batch_execute(
            "create table lin (k int4 primary key, v int8 not null);
             insert into lin values (1, 0), (2, 0)",
        )
        .await
        .unwrap();
    let writers = [
        connect_on_shard(&rw.connection_string("postgres"), 0).await,
        connect_on_shard(&rw.connection_string("postgres"), 1).await,
    ];
    // Readers mostly on the replica's shard; one on the compute's for the other direction.
    let readers = [
        connect_on_shard(&rw.connection_string("postgres"), 1).await,
        connect_on_shard(&rw.connection_string("postgres"), 1).await,
        connect_on_shard(&rw.connection_string("postgres"), 0).await,
    ];
    let stats = connect_on_shard(&rw.connection_string("postgres"), 1).await;
    let hits_before = stat(&stats, 1, "replica_hits").await;
    let stale_before = stat(&stats, 1, "replica_stale").await;

    let reads = linearizability(
        writers.into(),
        readers.into(),
        Duration::from_secs(3),
        &format!("ship delay {delay_us} µs"),
    )
    .await;
    let hits = stat(&stats, 1, "replica_hits").await - hits_before;
    let stale = stat(&stats, 1, "replica_stale").await - stale_before;
    eprintln!(
        "ship delay {delay_us} µs: {reads} reads, shard 1 replica hits {hits}, stale {stale}"
    );
    assert!(hits > 0, "shard 1's replica served no read");
    if delay_us != "0" {
        assert!(
            stale > 0,
            "with shipments held, the replica was never behind: the freshness check went untested"
        );
    }
}

/// DDL and writes, then reads on the replica's shard: every read gives what PostgreSQL gives
/// and what the compute's shard gives, and the replica served reads after every kind of DDL
/// (CREATE TABLE, CREATE INDEX, ALTER TABLE ADD PRIMARY KEY / UNIQUE, DROP INDEX, TRUNCATE,
/// DROP TABLE and re-CREATE with other columns). DDL comes from both shards.
#[tokio::test]
async fn reads_on_the_replica_after_ddl_match_postgres_and_the_compute() {
    let pg = Postgres::start();
    let rw = Ringwire::start(&["--shards", "2"]);
    let pg_client = connect_to(&pg.connection_string()).await;
    let on_compute = connect_on_shard(&rw.connection_string("postgres"), 0).await;
    let on_replica = connect_on_shard(&rw.connection_string("postgres"), 1).await;

    // (statement, which ringwire shard runs it, reads to compare afterwards)
    let steps: &[(&str, usize, &[&str])] = &[
        (
            "create table d (id int4, v text, n int8)",
            0,
            &["select * from d order by id"],
        ),
        (
            "insert into d values (1, 'a', 10), (2, 'b', 20), (3, 'c', 30), (4, 'd', 40)",
            1,
            &[
                "select * from d order by id",
                "select v from d where id = 3",
            ],
        ),
        (
            "create index d_v_idx on d (v)",
            0,
            &["select id from d where v = 'c'", "select count(*) from d"],
        ),
        (
            "alter table d add primary key (id)",
            1,
            &[
                "select v, n from d where id = 2",
                "select * from d order by id desc",
            ],
        ),
        (
            "alter table d add constraint d_n_key unique (n)",
            0,
            &[
                "select id from d where n = 40",
                "select id from d where n >= 20 order by id",
            ],
        ),
        (
            "update d set n = n + 1 where id <= 2",
            0,
            &[
                "select * from d order by id",
                "select id from d where n = 11",
            ],
        ),
        (
            "delete from d where v = 'b'",
            1,
            &[
                "select * from d order by id",
                "select id from d where v = 'b'",
            ],
        ),
        (
            "drop index d_v_idx",
            1,
            &["select id from d where v = 'c'", "select sum(n) from d"],
        ),
        (
            "truncate d",
            0,
            &["select * from d order by id", "select count(*) from d"],
        ),
        (
            "insert into d values (7, 'x', 70)",
            0,
            &["select * from d", "select v from d where id = 7"],
        ),
        ("drop table d", 1, &["select * from d"]),
        (
            "create table d (a text, b int4 not null, c bool)",
            0,
            &["select * from d"],
        ),
        (
            "insert into d values ('p', 1, true), ('q', 2, null)",
            0,
            &[
                "select * from d order by b",
                "select a from d where c is null",
            ],
        ),
    ];
    let hits_before = stat(&on_replica, 1, "replica_hits").await;
    let mut reads = 0;
    let mut mismatches = Vec::new();
    for (sql, shard, queries) in steps {
        let writer = if *shard == 0 {
            &on_compute
        } else {
            &on_replica
        };
        let expected = outcome(&pg_client, sql).await;
        let actual = outcome(writer, sql).await;
        assert_eq!(
            expected.is_ok(),
            actual.is_ok(),
            "{sql}: postgres {expected:?}, ringwire {actual:?}"
        );
        for q in *queries {
            let pg_rows = outcome(&pg_client, q).await;
            let replica_rows = outcome(&on_replica, q).await;
            let compute_rows = outcome(&on_compute, q).await;
            reads += 1;
            if pg_rows != replica_rows || compute_rows != replica_rows {
                mismatches.push(format!(
                    "after {sql}: {q}\n  postgres {pg_rows:?}\n  replica  {replica_rows:?}\n  \
                     compute  {compute_rows:?}"
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    // "select * from d" after DROP TABLE fails at planning on every shard (42P01), so it
    // reaches no replica; every other read may. Shipping races the next query only when
    // the DDL ran on shard 0, so allow a few fallbacks.
    let hits = stat(&on_replica, 1, "replica_hits").await - hits_before;
    assert!(
        hits >= reads as i64 - 1 - 5,
        "the replica served {hits} of {reads} reads after DDL"
    );
}

/// A transaction block on the replica's shard reads its snapshot from the replica while
/// another shard updates the same rows hundreds of times (past the compaction trigger): the
/// replica keeps the versions the block holds, the block keeps reading its snapshot locally,
/// and once it ends the replica compacts back to one version per row. A block that writes
/// reads its own writes (at the compute), and after ROLLBACK they are gone.
#[tokio::test]
async fn a_block_on_the_replica_keeps_its_snapshot_and_replica_versions_stay_bounded() {
    let rw = Ringwire::start(&["--shards", "2"]);
    let writer = connect_on_shard(&rw.connection_string("postgres"), 0).await;
    let block = connect_on_shard(&rw.connection_string("postgres"), 1).await;
    let stats = connect_on_shard(&rw.connection_string("postgres"), 1).await;
    writer
        .batch_execute(
            "create table hot (id int4 primary key, v int8 not null);
             insert into hot values (1,0),(2,0),(3,0),(4,0),(5,0),(6,0),(7,0),(8,0),(9,0),(10,0)",
        )
        .await
        .unwrap();
    let sum = |rows: Result<Vec<Vec<Option<String>>>, String>| -> i64 {
        rows.unwrap()[0][0].as_deref().unwrap().parse().unwrap()
    };

    block.batch_execute("begin").await.unwrap();
    assert_eq!(sum(outcome(&block, "select sum(v) from hot").await), 0);
    let update = writer
        .prepare("update hot set v = v + 1 where id = $1")
        .await
        .unwrap();
    for i in 0..300 {
        writer.execute(&update, &[&(i % 10 + 1)]).await.unwrap();
    }
    // The replica has applied the updates (its applied timestamp reached the last commit)
    // yet keeps the versions the block's snapshot needs.
    eventually(
        Duration::from_secs(5),
        "the replica applied the updates",
        async || stat(&stats, 1, "replica_applied").await >= 301,
    )
    .await;
    let hits_before = stat(&stats, 1, "replica_hits").await;
    for _ in 0..5 {
        assert_eq!(
            sum(outcome(&block, "select sum(v) from hot").await),
            0,
            "the block's snapshot changed"
        );
    }
    // 5 block reads and the stats query's own... none: shard_stats is not a replica read.
    assert_eq!(
        stat(&stats, 1, "replica_hits").await - hits_before,
        5,
        "the block's snapshot reads were not served by the replica"
    );
    assert!(
        stat(&stats, 1, "replica_versions").await > 10,
        "the replica dropped versions a held snapshot needs"
    );
    block.batch_execute("commit").await.unwrap();
    assert_eq!(sum(outcome(&block, "select sum(v) from hot").await), 300);

    // With the snapshot gone, the replica's compaction (timer or commit count) brings it back
    // to one version per row.
    eventually_ok(
        Duration::from_secs(5),
        "replica versions are back to 10 after the snapshot ended",
        async || match stat(&stats, 1, "replica_versions").await {
            10 => Ok(()),
            versions => Err(format!("they stayed at {versions}")),
        },
    )
    .await;

    // A writing block reads its own intents: that read goes to the compute.
    block.batch_execute("begin").await.unwrap();
    block
        .batch_execute("update hot set v = 1000 where id = 1")
        .await
        .unwrap();
    let hits_before = stat(&stats, 1, "replica_hits").await;
    assert_eq!(
        sum(outcome(&block, "select sum(v) from hot").await),
        300 - 30 + 1000
    );
    assert_eq!(stat(&stats, 1, "replica_hits").await, hits_before);
    block.batch_execute("rollback").await.unwrap();
    assert_eq!(sum(outcome(&block, "select sum(v) from hot").await), 300);
}

/// `--read-replicas off`: shard 1 sends every read to the compute, and the replica columns
/// of `ringwire.shard_stats` are NULL.
#[tokio::test]
async fn read_replicas_off_sends_reads_to_the_compute() {
    let rw = Ringwire::start(&["--shards", "2", "--read-replicas", "off"]);
    let c = connect_on_shard(&rw.connection_string("postgres"), 1).await;
    c.batch_execute("create table o (a int4); insert into o values (1)")
        .await
        .unwrap();
    let sent = stat(&c, 1, "requests_sent").await;
    for _ in 0..5 {
        assert_eq!(
            outcome(&c, "select a from o").await.unwrap(),
            vec![vec![Some("1".to_string())]]
        );
    }
    assert_eq!(stat(&c, 1, "requests_sent").await - sent, 5);
    assert_eq!(stat(&c, 1, "replica_hits").await, 0);
    assert_eq!(stat(&c, 1, "replica_applied").await, -1, "no replica: NULL");
}
