//! Upstream mode: health of idle pooled connections. A connection idle at least
//! `--upstream-check-delay-secs` answers an empty Query before a client gets it; one that
//! fails (terminated while idle, or a backend that hangs: SIGSTOP here, which keeps its socket
//! open and silent, as a host gone without a FIN would) is replaced without the client seeing
//! it. One idle `--upstream-idle-timeout-secs` is closed.

mod common;

use std::time::{Duration, Instant};

use common::client::connect;
use common::eventually_blocking;
use common::postgres::Postgres;
use common::ringwire::Ringwire;
use tokio_postgres::{Client, SimpleQueryMessage};

fn start(pg: &Postgres, extra: &[&str]) -> Ringwire {
    let url = pg.url();
    let mut args = vec![
        "--shards",
        "1",
        "--upstream",
        &url,
        "--upstream-pool-size",
        "1",
    ];
    args.extend_from_slice(extra);
    Ringwire::start(&args)
}

/// The upstream backend's pid, through ringwire (any error fails the test).
async fn backend_pid(client: &Client) -> String {
    client
        .simple_query("select pg_backend_pid()")
        .await
        .expect("select pg_backend_pid() through ringwire")
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .expect("a row")
}

/// Client backends of the server other than the asking one.
fn client_backends(pg: &Postgres) -> Vec<String> {
    pg.query_value(
        "select coalesce(string_agg(pid::text, ',' order by pid), '') from pg_stat_activity \
         where backend_type = 'client backend' and pid <> pg_backend_pid()",
    )
    .split(',')
    .filter(|p| !p.is_empty())
    .map(str::to_string)
    .collect()
}

/// Send `sig` to the backend process `pid` (the tests run as root; PostgreSQL as `postgres`).
fn signal(pid: &str, sig: libc::c_int) {
    let pid: libc::pid_t = pid.parse().expect("a pid");
    // SAFETY: kill(2) has no memory effects on this process.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_that_died_or_hangs_is_replaced_unseen() {
    let pg = Postgres::start();
    // Check every connection handed out (delay 0), and never time idle ones out.
    let rw = start(
        &pg,
        &[
            "--upstream-check-delay-secs",
            "0",
            "--upstream-idle-timeout-secs",
            "0",
        ],
    );
    let client = connect(&rw).await;
    let first = backend_pid(&client).await;

    // Terminated while idle in the pool (its socket reports the end, or the check fails).
    assert_eq!(
        pg.query_value(&format!("select pg_terminate_backend({first})")),
        "t"
    );
    eventually_blocking(
        Duration::from_secs(5),
        Duration::from_millis(20),
        &format!("backend {first} exited"),
        || !client_backends(&pg).contains(&first),
    );
    let started = Instant::now();
    let second = backend_pid(&client).await;
    assert_ne!(second, first);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );

    // Hung while idle: stopped, its socket open and silent. The empty-Query check gets no
    // answer within its 2 s limit and a new connection serves the statement.
    signal(&second, libc::SIGSTOP);
    let started = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(10), backend_pid(&client)).await;
    let took = started.elapsed();
    signal(&second, libc::SIGCONT);
    let third = outcome.expect("the statement did not complete within 10 s");
    assert_ne!(third, second);
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(5),
        "the check should have waited about its 2 s limit, took {took:?}"
    );
    // Another statement on the fresh connection: no check failure, no wait.
    let started = Instant::now();
    assert_eq!(backend_pid(&client).await, third);
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_idle_past_the_idle_timeout_are_closed() {
    let pg = Postgres::start();
    let rw = start(&pg, &["--upstream-idle-timeout-secs", "1"]);
    let client = connect(&rw).await;
    let pid = backend_pid(&client).await;
    assert!(client_backends(&pg).contains(&pid));
    // Closed within 1.25 × the timeout by the pool's reaper, with no client activity.
    let started = Instant::now();
    eventually_blocking(
        Duration::from_secs(4),
        Duration::from_millis(50),
        "the idle connection is closed",
        || !client_backends(&pg).contains(&pid),
    );
    assert!(started.elapsed() >= Duration::from_millis(500));
    // The client is unaffected: its next statement opens a new connection.
    assert_ne!(backend_pid(&client).await, pid);
}

/// When a host hangs, every idle connection to it hangs: one failed check must not be
/// followed by one more check timeout per idle connection (4 × 2 s here). The connections
/// idle longer than the one that failed are closed unchecked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failed_check_does_not_make_a_client_wait_for_each_idle_connection() {
    let pg = Postgres::start();
    let url = pg.url();
    let rw = Ringwire::start(&[
        "--shards",
        "1",
        "--upstream",
        &url,
        "--upstream-pool-size",
        "4",
        "--upstream-check-delay-secs",
        "0",
        "--upstream-idle-timeout-secs",
        "0",
    ]);
    // Four clients in transactions at once: four upstream connections, all idle afterwards.
    let mut clients = Vec::new();
    let mut pids = Vec::new();
    for _ in 0..4 {
        let c = connect(&rw).await;
        c.batch_execute("begin").await.unwrap();
        pids.push(backend_pid(&c).await);
        clients.push(c);
    }
    for c in &clients {
        c.batch_execute("commit").await.unwrap();
    }
    pids.sort();
    pids.dedup();
    assert_eq!(pids.len(), 4, "four upstream connections: {pids:?}");
    for pid in &pids {
        signal(pid, libc::SIGSTOP);
    }
    let started = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(15), backend_pid(&clients[0])).await;
    let took = started.elapsed();
    for pid in &pids {
        signal(pid, libc::SIGCONT);
    }
    let fresh = outcome.expect("the statement did not complete within 15 s");
    assert!(!pids.contains(&fresh), "served by a stopped backend");
    assert!(
        took < Duration::from_millis(3500),
        "one check timeout (2 s) and a connect, not one per idle connection: took {took:?}"
    );
}
