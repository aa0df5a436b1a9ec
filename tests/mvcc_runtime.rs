//! The compute while it runs: old versions compacted once no snapshot needs them, the
//! `serializable` isolation level, and the per-shard counters in `ringwire.shard_stats` — all
//! through real clients against the real server.

mod common;

use std::time::{Duration, Instant};

use common::client::{connect, connect_on_shard, shard_of, text_rows};
use common::ringwire::Ringwire;
use common::{eventually, eventually_ok};
use tokio_postgres::{error::SqlState, Client, SimpleQueryMessage};

/// One connection on each of `shards` shards, in shard order.
async fn one_per_shard(rw: &Ringwire, shards: usize) -> Vec<Client> {
    let mut got: Vec<Option<Client>> = (0..shards).map(|_| None).collect();
    for _ in 0..200 {
        let c = connect(rw).await;
        let s = shard_of(&c).await;
        if got[s].is_none() {
            got[s] = Some(c);
        }
        if got.iter().all(Option::is_some) {
            return got.into_iter().map(Option::unwrap).collect();
        }
    }
    panic!("could not get a connection on each of {shards} shards");
}

/// Rows of a simple query, every value as text (NULL as None).
async fn simple_rows(client: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    text_rows(client.simple_query(sql).await.unwrap())
}

async fn one_value(client: &Client, sql: &str) -> String {
    let rows = simple_rows(client, sql).await;
    assert_eq!(rows.len(), 1, "{sql}: {rows:?}");
    rows[0][0].clone().expect("not null")
}

/// `ringwire.table_stats.versions` of `table`.
async fn versions(client: &Client, table: &str) -> i64 {
    one_value(
        client,
        &format!("select versions from ringwire.table_stats where table_name = '{table}'"),
    )
    .await
    .parse()
    .unwrap()
}

/// Counters of `shard` from `ringwire.shard_stats`, by column name.
struct Stats(Vec<(String, Option<String>)>);

impl Stats {
    async fn of(client: &Client, shard: usize) -> Stats {
        let msgs = client
            .simple_query(&format!(
                "select * from ringwire.shard_stats where shard = {shard}"
            ))
            .await
            .unwrap();
        let row = msgs
            .into_iter()
            .find_map(|m| match m {
                SimpleQueryMessage::Row(row) => Some(row),
                _ => None,
            })
            .expect("a row for the shard");
        Stats(
            row.columns()
                .iter()
                .enumerate()
                .map(|(i, c)| (c.name().to_string(), row.get(i).map(str::to_string)))
                .collect(),
        )
    }

    fn get(&self, name: &str) -> i64 {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no column {name}"))
            .1
            .as_deref()
            .map_or(-1, |v| v.parse().unwrap())
    }
}

/// A long transaction keeps reading its snapshot while other sessions update the same rows
/// hundreds of times (past the compute's compaction trigger), and the versions it needs are
/// kept; once it ends, compaction brings the table back to one version per row.
///
/// This fails if compaction ignores held snapshots: the block's reads would find rows whose
/// version at its snapshot was dropped (rows missing, sums changing), and debug builds assert
/// in the compute. It fails if nothing compacts while running: the version count stays in the
/// thousands.
#[tokio::test]
async fn a_held_snapshot_survives_compaction_and_versions_are_bounded_after_it() {
    let rw = Ringwire::start(&["--shards", "2"]);
    let conns = one_per_shard(&rw, 2).await;
    let (on_compute, remote) = (&conns[0], &conns[1]);
    on_compute
        .batch_execute(
            "create table hot (id int4 primary key, v int8 not null);
             insert into hot values (1,0),(2,0),(3,0),(4,0),(5,0),(6,0),(7,0),(8,0),(9,0),(10,0)",
        )
        .await
        .unwrap();
    assert_eq!(versions(on_compute, "hot").await, 10);

    // The long transaction, on the shard that is not the compute's: its hold crosses cores.
    let long = connect_on_shard(&rw.connection_string("postgres"), 1).await;
    long.batch_execute("begin").await.unwrap();
    let sum_before = one_value(&long, "select sum(v) from hot").await;
    assert_eq!(sum_before, "0");
    let stats = Stats::of(&long, 1).await;
    assert_eq!(stats.get("open_snapshots"), 1);
    assert!(stats.get("oldest_snapshot") >= 0, "the hold is shown");

    const ROUNDS: usize = 300; // > COMPACT_EVERY_COMMITS: compaction runs while it is open
    let update = "update hot set v = v + 1";
    for round in 0..ROUNDS {
        let writer = if round % 2 == 0 { on_compute } else { remote };
        assert_eq!(writer.execute(update, &[]).await.unwrap(), 10);
        if round % 50 == 0 {
            assert_eq!(
                one_value(&long, "select sum(v) from hot").await,
                sum_before,
                "the block's snapshot changed under compaction"
            );
            assert_eq!(
                one_value(&long, "select count(*) from hot").await,
                "10",
                "rows vanished from the block's snapshot"
            );
        }
    }
    assert_eq!(one_value(&long, "select sum(v) from hot").await, sum_before);
    assert_eq!(
        one_value(&long, "select v from hot where id = 7").await,
        "0",
        "an index lookup at the snapshot must find the old version"
    );
    let held = versions(on_compute, "hot").await;
    assert!(
        held >= (10 * ROUNDS) as i64,
        "versions newer than the held snapshot must stay: {held}"
    );
    // Others see the latest state meanwhile.
    assert_eq!(
        one_value(remote, "select sum(v) from hot").await,
        (10 * ROUNDS).to_string()
    );

    long.batch_execute("commit").await.unwrap();
    assert_eq!(Stats::of(&long, 1).await.get("open_snapshots"), 0);
    // Nothing is written any more: the compaction timer alone must bring it down.
    eventually_ok(
        Duration::from_secs(5),
        "versions are compacted to 10 after the snapshot ended",
        async || match versions(on_compute, "hot").await {
            10 => Ok(()),
            n => Err(format!("{n} versions")),
        },
    )
    .await;
    let index_entries = one_value(
        on_compute,
        "select index_entries from ringwire.table_stats where table_name = 'hot'",
    )
    .await;
    assert_eq!(index_entries, "10");

    // Without a held snapshot, many writes never let versions pile up.
    for _ in 0..ROUNDS {
        remote.execute(update, &[]).await.unwrap();
    }
    eventually(
        Duration::from_secs(5),
        "versions are compacted",
        async || versions(on_compute, "hot").await <= 10,
    )
    .await;
    assert_eq!(
        one_value(&long, "select sum(v) from hot").await,
        (20 * ROUNDS).to_string()
    );
}

/// SHOW tells the truth: the default is strict serializable (what ringwire runs, not
/// PostgreSQL's `read committed`); `serializable` reads skip the oracle, which the counters show.
#[tokio::test]
async fn serializable_reads_skip_the_oracle_and_show_says_so() {
    let rw = Ringwire::start(&["--shards", "2"]);
    let conns = one_per_shard(&rw, 2).await;
    let (writer, c) = (&conns[0], &conns[1]);
    writer
        .batch_execute("create table iso (id int4 primary key, v int4)")
        .await
        .unwrap();
    writer
        .batch_execute("insert into iso values (1, 10)")
        .await
        .unwrap();

    assert_eq!(
        one_value(c, "show transaction_isolation").await,
        "strict serializable"
    );
    assert_eq!(
        one_value(c, "show default_transaction_isolation").await,
        "strict serializable"
    );
    assert_eq!(
        one_value(c, "show transaction isolation level").await,
        "strict serializable"
    );

    // Strict reads take their timestamp from the shard's frontier: the oracle's fast path.
    let before = Stats::of(c, 1).await;
    for _ in 0..10 {
        assert_eq!(one_value(c, "select v from iso where id = 1").await, "10");
    }
    let after = Stats::of(c, 1).await;
    // 10 point selects and the second stats query itself.
    assert_eq!(
        after.get("oracle_fast_path_hits") - before.get("oracle_fast_path_hits"),
        11
    );
    assert_eq!(
        after.get("serializable_reads"),
        before.get("serializable_reads")
    );

    c.batch_execute("set transaction_isolation = 'serializable'")
        .await
        .unwrap();
    assert_eq!(
        one_value(c, "show transaction_isolation").await,
        "serializable"
    );
    let before = Stats::of(c, 1).await;
    for i in 0..10 {
        // Writes acknowledged on another shard are seen: with one compute its latest
        // timestamp includes every acknowledged commit.
        writer
            .execute("update iso set v = $1 where id = 1", &[&(100 + i)])
            .await
            .unwrap();
        assert_eq!(
            one_value(c, "select v from iso where id = 1").await,
            (100 + i).to_string()
        );
    }
    let after = Stats::of(c, 1).await;
    assert_eq!(
        after.get("serializable_reads") - before.get("serializable_reads"),
        11,
        "serializable reads must read at the compute's latest timestamp"
    );
    assert_eq!(
        after.get("oracle_fast_path_hits"),
        before.get("oracle_fast_path_hits"),
        "serializable reads must not ask the oracle"
    );

    // Weaker levels run as serializable, and SHOW says so.
    c.batch_execute("set transaction_isolation = 'read committed'")
        .await
        .unwrap();
    assert_eq!(
        one_value(c, "show transaction_isolation").await,
        "serializable"
    );
    // RESET follows default_transaction_isolation.
    c.batch_execute("reset transaction_isolation")
        .await
        .unwrap();
    assert_eq!(
        one_value(c, "show transaction_isolation").await,
        "strict serializable"
    );
    c.batch_execute("set default_transaction_isolation = 'serializable'")
        .await
        .unwrap();
    assert_eq!(
        one_value(c, "show transaction_isolation").await,
        "serializable"
    );
    c.batch_execute("set default_transaction_isolation = default")
        .await
        .unwrap();
    assert_eq!(
        one_value(c, "show transaction_isolation").await,
        "strict serializable"
    );
    let err = c
        .batch_execute("set transaction_isolation = 'chaos'")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::INVALID_PARAMETER_VALUE));

    // BEGIN ISOLATION LEVEL SERIALIZABLE: for this block only; its snapshot is the compute's
    // latest at its first read, and stays.
    c.batch_execute("begin isolation level serializable")
        .await
        .unwrap();
    assert_eq!(
        one_value(c, "show transaction_isolation").await,
        "serializable"
    );
    let before = Stats::of(c, 1).await;
    let first = one_value(c, "select v from iso where id = 1").await;
    writer
        .batch_execute("update iso set v = 7 where id = 1")
        .await
        .unwrap();
    assert_eq!(one_value(c, "select v from iso where id = 1").await, first);
    let after = Stats::of(c, 1).await;
    // Only the block's first read asked the compute for its latest timestamp.
    assert_eq!(
        after.get("serializable_reads") - before.get("serializable_reads"),
        1
    );
    assert_eq!(
        after.get("oracle_fast_path_hits"),
        before.get("oracle_fast_path_hits")
    );
    let err = c
        .batch_execute("set transaction_isolation = 'strict serializable'")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::ACTIVE_SQL_TRANSACTION));
    c.batch_execute("rollback").await.unwrap();
    assert_eq!(
        one_value(c, "show transaction_isolation").await,
        "strict serializable"
    );
    assert_eq!(one_value(c, "select v from iso where id = 1").await, "7");

    // A strict block's snapshot is its shard's frontier: one oracle read for the block.
    c.batch_execute("begin").await.unwrap();
    let before = Stats::of(c, 1).await;
    assert_eq!(one_value(c, "select v from iso where id = 1").await, "7");
    assert_eq!(one_value(c, "select v from iso where id = 1").await, "7");
    let after = Stats::of(c, 1).await;
    assert_eq!(
        after.get("oracle_fast_path_hits"),
        before.get("oracle_fast_path_hits"),
        "a block's reads reuse its snapshot"
    );
    c.batch_execute("commit").await.unwrap();
}

/// Per-shard counters, read with SQL: plan-cache hits move by exactly the repeated statements
/// on the connection's shard, requests by the statements sent to the compute, and the other
/// shard's counters do not move. With `--read-replicas off` every read on shard 1 is a
/// request to the compute, and requests of one executor turn share a batch.
#[tokio::test]
async fn shard_stats_count_plan_cache_hits_and_dispatched_requests_per_shard() {
    shard_stats_count(false).await;
}

/// The same with read replicas (the default): shard 1's reads are replica hits, not
/// requests, while nothing is being written.
#[tokio::test]
async fn shard_stats_count_replica_hits_per_shard() {
    shard_stats_count(true).await;
}

async fn shard_stats_count(replicas: bool) {
    let rw = Ringwire::start(&[
        "--shards",
        "2",
        "--read-replicas",
        if replicas { "on" } else { "off" },
    ]);
    let conns = one_per_shard(&rw, 2).await;
    conns[0]
        .batch_execute("create table s (id int4 primary key, v text)")
        .await
        .unwrap();
    conns[0]
        .batch_execute("insert into s values (1, 'one'), (2, 'two')")
        .await
        .unwrap();

    let all = simple_rows(
        &conns[0],
        "select shard, plan_cache_hits >= 0 from ringwire.shard_stats order by shard",
    )
    .await;
    assert_eq!(
        all,
        vec![
            vec![Some("0".to_string()), Some("t".to_string())],
            vec![Some("1".to_string()), Some("t".to_string())],
        ]
    );
    let err = conns[0]
        .batch_execute("insert into ringwire.shard_stats (shard) values (9)")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED));
    let err = conns[0]
        .batch_execute("select * from ringwire.nope")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::UNDEFINED_TABLE));

    for (shard, client) in conns.iter().enumerate() {
        let other = 1 - shard;
        // A statement text this shard has not seen yet.
        let sql = format!("select v from s where id = 1 and {shard} = {shard}");
        let before_other = Stats::of(client, other).await;
        let before = Stats::of(client, shard).await;
        const REPEATS: i64 = 10;
        for _ in 0..REPEATS {
            assert_eq!(one_value(client, &sql).await, "one");
        }
        let after = Stats::of(client, shard).await;
        let after_other = Stats::of(client, other).await;
        let moved = |name: &str| after.get(name) - before.get(name);
        // One miss for the first, a hit for each repeat, and a hit for the (repeated) stats
        // query itself.
        assert_eq!(moved("plan_cache_misses"), 1, "shard {shard}");
        assert_eq!(moved("plan_cache_hits"), REPEATS - 1 + 1, "shard {shard}");
        assert_eq!(
            after_other.get("plan_cache_hits"),
            before_other.get("plan_cache_hits"),
            "shard {other}'s counters moved for shard {shard}'s queries"
        );
        if shard == 0 {
            assert_eq!(
                moved("direct_requests"),
                REPEATS,
                "the compute shard calls directly"
            );
            assert_eq!(moved("requests_sent"), 0);
            assert_eq!(moved("replica_hits"), 0, "the compute shard has no replica");
        } else if replicas {
            assert_eq!(
                moved("replica_hits"),
                REPEATS,
                "every point select served by shard 1's replica"
            );
            assert_eq!(moved("replica_stale"), 0, "nothing was written meanwhile");
            assert_eq!(moved("requests_sent"), 0, "no read went to the compute");
            assert_eq!(moved("direct_requests"), 0);
        } else {
            assert_eq!(moved("replica_hits"), 0);
            assert_eq!(
                moved("requests_sent"),
                REPEATS,
                "one request per point select"
            );
            assert_eq!(
                moved("batches_sent"),
                REPEATS,
                "one query at a time: batches of one"
            );
            assert_eq!(moved("direct_requests"), 0);
        }

        // A prepared statement is planned once; its executions never look the cache up.
        let stmt = client
            .prepare("select v from s where id = $1")
            .await
            .unwrap();
        let before = Stats::of(client, shard).await;
        for _ in 0..REPEATS {
            let row = client.query_one(&stmt, &[&2i32]).await.unwrap();
            assert_eq!(row.get::<_, &str>(0), "two");
        }
        let after = Stats::of(client, shard).await;
        let moved = |name: &str| after.get(name) - before.get(name);
        assert_eq!(
            moved("plan_cache_hits"),
            1,
            "only the stats query looked up"
        );
        assert_eq!(moved("plan_cache_misses"), 0);
    }

    // Statements that differ only in a compared literal share one plan: the literal is lifted
    // into a parameter before the plan-cache lookup.
    let before = Stats::of(&conns[1], 1).await;
    for (id, v) in [(1, "one"), (2, "two"), (1, "one"), (2, "two")] {
        let sql = format!("select v, id from s where id = {id}");
        assert_eq!(one_value(&conns[1], &sql).await, v);
    }
    let after = Stats::of(&conns[1], 1).await;
    assert_eq!(
        after.get("plan_cache_misses") - before.get("plan_cache_misses"),
        1
    );
    assert_eq!(
        after.get("plan_cache_hits") - before.get("plan_cache_hits"),
        3 + 1
    );

    if replicas {
        return;
    }
    // Requests from many connections of one shard in the same executor turn travel together.
    let mut clients = Vec::new();
    while clients.len() < 8 {
        clients.push(std::sync::Arc::new(
            connect_on_shard(&rw.connection_string("postgres"), 1).await,
        ));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let tasks: Vec<_> = clients
            .iter()
            .map(|c| {
                let c = c.clone();
                tokio::spawn(async move {
                    for _ in 0..50 {
                        c.query_one("select v from s where id = 1", &[])
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let stats = Stats::of(&conns[1], 1).await;
        assert!(stats.get("requests_sent") >= stats.get("batches_sent"));
        if stats.get("batch_size_max") > 1 {
            assert!(stats.get("requests_sent") > stats.get("batches_sent"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "8 busy connections never shared a batch"
        );
    }
}

/// DDL on one shard invalidates the other shard's cached plans before their next lookup: a
/// table dropped and re-created with other columns is read with its new shape.
#[tokio::test]
async fn a_cached_plan_does_not_outlive_ddl_on_another_shard() {
    let rw = Ringwire::start(&["--shards", "2"]);
    let conns = one_per_shard(&rw, 2).await;
    conns[0]
        .batch_execute("create table re (a int4); insert into re values (1)")
        .await
        .unwrap();
    for _ in 0..2 {
        assert_eq!(
            simple_rows(&conns[1], "select * from re").await,
            vec![vec![Some("1".into())]]
        );
    }
    conns[0]
        .batch_execute(
            "drop table re; create table re (b text, c int4); insert into re values ('x', 2)",
        )
        .await
        .unwrap();
    assert_eq!(
        simple_rows(&conns[1], "select * from re").await,
        vec![vec![Some("x".into()), Some("2".into())]]
    );
}
