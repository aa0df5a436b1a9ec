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

/// A new session that landed on `shard`: connections land by the kernel's hash (TCP) or the
/// shards' round robin (Unix), so open until one does.
pub async fn connect_on_shard(conninfo: &str, shard: usize) -> Client {
    for _ in 0..200 {
        let c = connect_to(conninfo).await;
        if shard_of(&c).await == shard {
            return c;
        }
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
