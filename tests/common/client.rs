//! tokio-postgres sessions for the tests: connect, and find or pick the shard a session is on.

use tokio_postgres::{Client, NoTls};

use super::ringwire::Ringwire;

/// A session on `conninfo`; its connection task runs on the test's runtime.
pub async fn connect_to(conninfo: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(conninfo, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect {conninfo}: {e}"));
    tokio::spawn(conn);
    client
}

/// A session on `rw` as `postgres` (over the test transport).
pub async fn connect(rw: &Ringwire) -> Client {
    connect_to(&rw.connection_string("postgres")).await
}

/// Which shard owns a session (the shard id is in the high bits of the process id).
pub async fn shard_of(client: &Client) -> usize {
    let pid: i32 = client
        .query_one("select pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    shards::shard_of_process_id(pid)
}

/// A new session that landed on `shard`. A new connection goes to the shard serving the
/// fewest (on a tie, or with `--balance-connections off`, where the kernel's hash put it), so
/// open until one lands there, keeping the misses open meanwhile: each miss leaves `shard`
/// serving fewer than the others.
pub async fn connect_on_shard(conninfo: &str, shard: usize) -> Client {
    let mut misses = Vec::new();
    for _ in 0..200 {
        let c = connect_to(conninfo).await;
        if shard_of(&c).await == shard {
            return c;
        }
        misses.push(c);
    }
    panic!("no connection landed on shard {shard} in 200 tries");
}

/// Sessions on every shard: open until each of `shards` shards has at least `per_shard`.
pub async fn spread(rw: &Ringwire, shards: usize, per_shard: usize) -> Vec<(usize, Client)> {
    let mut got = Vec::new();
    for _ in 0..200 {
        let c = connect(rw).await;
        let s = shard_of(&c).await;
        if got.iter().filter(|(x, _)| *x == s).count() < per_shard {
            got.push((s, c));
        }
        if (0..shards).all(|s| got.iter().filter(|(x, _)| *x == s).count() >= per_shard) {
            return got;
        }
    }
    panic!("could not get {per_shard} connections on each of {shards} shards");
}

/// The rows of a simple query's replies, every value as text (NULL as None).
pub fn text_rows(msgs: Vec<tokio_postgres::SimpleQueryMessage>) -> Vec<Vec<Option<String>>> {
    msgs.into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_string))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// The linearizability check the tests share: each writer bumps its own key of
/// `lin (k int4 primary key, v int8)` (keys 1, 2, … in writer order, rows already there) and
/// publishes each acknowledged value; each reader, alternating a prepared `select k, v from lin
/// order by k` and a simple-protocol point select per key, must see every key at least at the
/// value acknowledged before its read started, and never go back. Runs for `run`; panics on a
/// stale or backwards read (`label` says which run). Returns the number of reads.
pub async fn linearizability(
    writers: Vec<Client>,
    readers: Vec<Client>,
    run: std::time::Duration,
    label: &str,
) -> usize {
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::Arc;
    let keys = writers.len();
    let acked: Arc<Vec<AtomicI64>> = Arc::new((0..keys).map(|_| AtomicI64::new(0)).collect());
    let deadline = std::time::Instant::now() + run;
    let mut tasks = Vec::new();
    for (key, client) in writers.into_iter().enumerate() {
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            let stmt = client
                .prepare("update lin set v = $1 where k = $2")
                .await
                .unwrap();
            let mut v = 0i64;
            while std::time::Instant::now() < deadline {
                v += 1;
                let n = client
                    .execute(&stmt, &[&v, &(key as i32 + 1)])
                    .await
                    .unwrap();
                assert_eq!(n, 1);
                acked[key].store(v, Ordering::SeqCst);
            }
            0usize
        }));
    }
    for (i, client) in readers.into_iter().enumerate() {
        let (acked, label) = (acked.clone(), label.to_string());
        tasks.push(tokio::spawn(async move {
            let stmt = client
                .prepare("select k, v from lin order by k")
                .await
                .unwrap();
            let mut last = vec![0i64; keys];
            let mut reads = 0usize;
            while std::time::Instant::now() < deadline {
                let floor: Vec<i64> = acked.iter().map(|a| a.load(Ordering::SeqCst)).collect();
                let values: Vec<i64> = if (reads + i).is_multiple_of(2) {
                    let rows = client.query(&stmt, &[]).await.unwrap();
                    assert_eq!(rows.len(), keys, "a read lost committed rows");
                    rows.iter().map(|r| r.get(1)).collect()
                } else {
                    let mut values = Vec::new();
                    for k in 1..=keys {
                        let rows = text_rows(
                            client
                                .simple_query(&format!("select v from lin where k = {k}"))
                                .await
                                .unwrap(),
                        );
                        values.push(rows[0][0].as_deref().unwrap().parse().unwrap());
                    }
                    values
                };
                for (k, &v) in values.iter().enumerate() {
                    assert!(
                        v >= floor[k],
                        "stale read ({label}): key {} read {v} after {} was acknowledged",
                        k + 1,
                        floor[k]
                    );
                    assert!(
                        v >= last[k],
                        "read went backwards ({label}): key {} {v} after {}",
                        k + 1,
                        last[k]
                    );
                    last[k] = v;
                }
                reads += 1;
            }
            reads
        }));
    }
    let mut reads = 0;
    for t in tasks {
        reads += t.await.unwrap();
    }
    assert!(reads > 100, "too few reads to mean anything: {reads}");
    assert!(
        acked.iter().all(|a| a.load(Ordering::SeqCst) > 10),
        "too few writes to mean anything"
    );
    reads
}

/// What a [`listening`] session heard: (sender's process id, "channel: payload"), in order.
pub type Heard = std::sync::Arc<std::sync::Mutex<Vec<(i32, String)>>>;

/// A session on `conninfo` whose connection task records every notification it gets, as
/// a client that LISTENs and then waits (psycopg's `notifies()`, node-postgres'
/// `notification` event) sees them: without sending anything.
pub async fn listening(conninfo: &str) -> (Client, Heard) {
    let (client, mut conn) = tokio_postgres::connect(conninfo, NoTls).await.unwrap();
    let heard = Heard::default();
    let sink = heard.clone();
    tokio::spawn(async move {
        while let Some(Ok(m)) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                let line = format!("{}: {}", n.channel(), n.payload());
                sink.lock().unwrap().push((n.process_id(), line));
            }
        }
    });
    (client, heard)
}

/// The lines `heard` holds once it holds `n` (or after 5 s, whatever it holds then).
pub async fn heard_lines(heard: &Heard, n: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while heard.lock().unwrap().len() < n && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let heard = heard.lock().unwrap();
    heard.iter().map(|(_, line)| line.clone()).collect()
}
