//! `--metrics-listen` in upstream mode: `GET /metrics` against a running server relaying to
//! a real PostgreSQL, gathered from both shards over the mesh: client connections,
//! statements relayed, upstream connections open/idle/in use and clients waiting per host.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::client::connect;
use common::eventually;
use common::postgres::Postgres;
use common::ringwire::Ringwire;
use tokio_postgres::Client;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

/// ringwire with `args` and `--metrics-listen` on a free port; that port.
fn start_with_metrics(args: &[&str]) -> (Ringwire, u16) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut args = args.to_vec();
    args.extend_from_slice(&["--metrics-listen", &listen]);
    (Ringwire::start(&args), port)
}

/// `GET /metrics`, parsed into `name{labels}` → value.
fn scrape(port: u16) -> HashMap<String, f64> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the metrics port");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).expect("read the reply");
    assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
    let body = reply.split_once("\r\n\r\n").expect("headers end").1;
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').expect("`name value`");
            (k.to_string(), v.parse::<f64>().expect("a number"))
        })
        .collect()
}

/// The sum of every series of `name` (over shards and hosts).
fn sum(m: &HashMap<String, f64>, name: &str) -> f64 {
    let prefix = format!("{name}{{");
    let found: Vec<f64> = m
        .iter()
        .filter(|(k, _)| k.starts_with(&prefix))
        .map(|(_, v)| *v)
        .collect();
    assert!(!found.is_empty(), "no {name} in the scrape: {m:?}");
    found.iter().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_in_upstream_mode_show_clients_statements_and_pools() {
    let pg = Postgres::start();
    // Two shards, one upstream connection each: clients queue for it.
    let (rw, metrics_port) = start_with_metrics(&[
        "--shards",
        "2",
        "--upstream",
        &pg.url(),
        "--upstream-pool-size",
        "1",
    ]);
    let host = format!("127.0.0.1:{}", pg.port);

    let before = scrape(metrics_port);
    assert_eq!(before.get("ringwire_shard_up{shard=\"0\"}"), Some(&1.0));
    assert_eq!(before.get("ringwire_shard_up{shard=\"1\"}"), Some(&1.0));
    assert_eq!(sum(&before, "ringwire_upstream_client_connections"), 0.0);

    let holder = connect(&rw).await;
    for i in 0..20 {
        holder.simple_query(&format!("select {i}")).await.unwrap();
    }
    // Holds its shard's only connection.
    holder.batch_execute("begin").await.unwrap();
    holder.simple_query("select 1").await.unwrap();

    // Ten more clients, each running one statement: those on the holder's shard wait.
    let mut waiters = Vec::new();
    for _ in 0..10 {
        let c = connect(&rw).await;
        waiters.push(tokio::spawn(async move {
            c.simple_query("select 2").await.unwrap();
            c
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pending = waiters.iter().filter(|w| !w.is_finished()).count();
    let during = scrape(metrics_port);
    assert_eq!(sum(&during, "ringwire_upstream_client_connections"), 11.0);
    // 20 + begin + select 1 + a select per client that ran.
    assert!(sum(&during, "ringwire_upstream_statements_total") >= 22.0);
    assert_eq!(
        sum(&during, "ringwire_upstream_clients_waiting"),
        pending as f64,
        "{during:?}"
    );
    assert!(pending >= 1, "no client landed on the holder's shard");
    let in_use_key = |shard: usize| {
        format!(
            "ringwire_upstream_connections_in_use{{shard=\"{shard}\",role=\"primary\",host=\"{host}\"}}"
        )
    };
    let in_use: f64 = (0..2)
        .map(|s| during.get(&in_use_key(s)).copied().unwrap_or(0.0))
        .sum();
    assert_eq!(in_use, 1.0, "only the holder has a connection: {during:?}");
    assert_eq!(
        sum(&during, "ringwire_upstream_connections_open"),
        2.0 - f64::from(u8::from(
            // The other shard opened its connection only if a client landed there.
            pending == 10
        ))
    );

    holder.batch_execute("commit").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut clients = vec![holder];
    for w in waiters {
        clients.push(
            tokio::time::timeout(deadline - Instant::now(), w)
                .await
                .expect("a waiting client was never served")
                .unwrap(),
        );
    }
    let after = scrape(metrics_port);
    assert_eq!(sum(&after, "ringwire_upstream_clients_waiting"), 0.0);
    assert_eq!(sum(&after, "ringwire_upstream_connections_in_use"), 0.0);
    assert_eq!(
        sum(&after, "ringwire_upstream_connections_idle"),
        sum(&after, "ringwire_upstream_connections_open")
    );
    assert!(sum(&after, "ringwire_upstream_statements_total") >= 33.0);
    // No replicas: the replica series exist and are zero.
    assert_eq!(sum(&after, "ringwire_upstream_replica_reads_total"), 0.0);
    // Clients that leave leave the gauge.
    drop(clients);
    eventually(
        Duration::from_secs(5),
        "client connections are counted down",
        async || {
            sum(
                &scrape(metrics_port),
                "ringwire_upstream_client_connections",
            ) == 0.0
        },
    )
    .await;
}

/// Until a read on `client` is served by the standby (at most 10 s).
async fn until_standby_serves(client: &Client, what: &str) {
    eventually(Duration::from_secs(10), what, async || {
        client
            .query_one("select pg_is_in_recovery()", &[])
            .await
            .unwrap()
            .get::<_, bool>(0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_replica_reads_transactions_and_reads_sent_to_the_primary() {
    let primary = Postgres::start();
    let standby = Postgres::start_standby(&primary);
    let (rw, metrics_port) = start_with_metrics(&[
        "--shards",
        "1",
        "--upstream",
        &primary.url(),
        "--replica",
        &standby.url(),
    ]);
    let client = connect(&rw).await;
    client
        .batch_execute("create table kv (k int primary key, v int); insert into kv values (1, 1)")
        .await
        .unwrap();
    // Until a read reaches the standby.
    until_standby_serves(&client, "a read reaches the replica").await;
    // A write the text scan sends to the standby (`lower(int)` here writes): refused there,
    // run again on the primary. One retry, and its statement counted once.
    client
        .batch_execute(
            "create function lower(x int) returns int language sql \
             as $$ update kv set v = v where k = 1 returning x $$",
        )
        .await
        .unwrap();
    until_standby_serves(&client, "the standby comes back").await;
    let before = scrape(metrics_port);
    client.simple_query("select lower(5)").await.unwrap();
    let after = scrape(metrics_port);
    let delta = |name: &str| sum(&after, name) - sum(&before, name);
    assert_eq!(
        delta("ringwire_upstream_replica_retries_total"),
        1.0,
        "{after:?}"
    );
    assert_eq!(
        delta("ringwire_upstream_statements_total"),
        1.0,
        "{after:?}"
    );

    client.batch_execute("begin read only").await.unwrap();
    let r = client
        .query_one("select pg_is_in_recovery()", &[])
        .await
        .unwrap();
    assert!(r.get::<_, bool>(0));
    client.batch_execute("commit").await.unwrap();
    // Replay paused after a write: the next strict read goes to the primary.
    standby.query_value("select pg_wal_replay_pause()");
    client
        .batch_execute("update kv set v = 2 where k = 1")
        .await
        .unwrap();
    let r = client
        .query_one("select pg_is_in_recovery()", &[])
        .await
        .unwrap();
    assert!(!r.get::<_, bool>(0));

    let m = scrape(metrics_port);
    assert!(
        sum(&m, "ringwire_upstream_replica_reads_total") >= 1.0,
        "{m:?}"
    );
    assert_eq!(sum(&m, "ringwire_upstream_replica_transactions_total"), 1.0);
    assert!(sum(&m, "ringwire_upstream_replica_sent_to_primary_total") >= 1.0);
    let replica_open = format!(
        "ringwire_upstream_connections_open{{shard=\"0\",role=\"replica\",host=\"127.0.0.1:{}\"}}",
        standby.port
    );
    assert_eq!(m.get(&replica_open), Some(&1.0), "{m:?}");
    standby.query_value("select pg_wal_replay_resume()");
}

/// `--upstream-pipeline on`: a unit that runs for `--upstream-pipeline-slow-ms` at the head
/// of its pipe has its shape remembered (counted once); a quick run of that shape (alone)
/// forgets it, so the next slow run, on a pipe again, counts again. Quick reads count
/// nothing. (The limit is 150 ms, so that a loaded machine does not make a quick read slow.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_pipelined_statements_found_slow() {
    let pg = Postgres::start();
    let (rw, metrics_port) = start_with_metrics(&[
        "--shards",
        "1",
        "--upstream",
        &pg.url(),
        "--upstream-pipeline",
        "on",
        "--upstream-pipeline-slow-ms",
        "150",
    ]);
    let slow = || {
        sum(
            &scrape(metrics_port),
            "ringwire_upstream_pipeline_slow_units_total",
        )
    };
    let c = connect(&rw).await;
    for i in 0..20 {
        c.simple_query(&format!("select {i}")).await.unwrap();
    }
    assert_eq!(slow(), 0.0);
    // A client that leaves its 30 MB result unread for 400 ms (with a 16 KiB receive buffer:
    // more than every buffer on the way holds, so PostgreSQL waits for it): that is the
    // client's time, not the statement's (a pipe's head clock stops while nobody reads).
    {
        use common::wire::{read_messages, simple_query, startup_message};
        use tokio::io::AsyncWriteExt;
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(16 << 10).unwrap();
        let mut raw = socket.connect(rw.addr().parse().unwrap()).await.unwrap();
        // tokio-postgres's startup parameters: the same settings as `c`, so the same pipes.
        raw.write_all(&startup_message(&[
            ("client_encoding", "UTF8"),
            ("user", "postgres"),
            ("database", "postgres"),
        ]))
        .await
        .unwrap();
        assert_eq!(
            read_messages(&mut raw).await.last().map(|m| m.0),
            Some(b'Z')
        );
        raw.write_all(&simple_query(
            "select repeat('x', 1000) from generate_series(1, 30000)",
        ))
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let reply = read_messages(&mut raw).await;
        assert_eq!(reply.iter().filter(|m| m.0 == b'D').count(), 30000);
        assert_eq!(reply.last().map(|m| m.0), Some(b'Z'));
    }
    assert_eq!(
        slow(),
        0.0,
        "a result its client read 400 ms late was found slow"
    );
    let sleep = async |secs: &str| {
        c.simple_query(&format!("select pg_sleep({secs})"))
            .await
            .unwrap();
    };
    sleep("0.5").await;
    assert_eq!(slow(), 1.0, "a 500 ms unit was not found slow");
    // A quick run alone forgets it; the next slow run is on a pipe and found again.
    sleep("0").await;
    sleep("0.5").await;
    assert_eq!(slow(), 2.0, "a quick run did not forget the shape");
    // A different quick shape is untouched.
    c.simple_query("select 1 + 1").await.unwrap();
    assert_eq!(slow(), 2.0);
}
