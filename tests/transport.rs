//! The socket layer under the state machine, with real clients: Unix-domain sockets (psql,
//! pgbench, tokio-postgres), the socket file's lifecycle, replies of many megabytes, a client
//! that stops reading (backpressure, not memory), a client that resets mid-reply, and
//! connections that come and go in bulk.
//!
//! These run on whichever socket path the binary picks (`RINGWIRE_IO=uring|glommio` selects
//! one; CI runs the suite under both).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::ringwire::{rss_kib, Ringwire};
use protocol::frontend;
use tokio_postgres::NoTls;

/// A fresh directory for socket files, removed at drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("ringwire-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn arg(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn psql(host: &str, port: u16, sql: &str) -> String {
    let out = Command::new("psql")
        .args(["-X", "-A", "-t", "-h", host, "-p", &port.to_string()])
        .args(["-U", "postgres", "-d", "postgres", "-c", sql])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql -h {host} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn unix_socket_serves_psql_pgbench_and_tokio_postgres() {
    let dir = TempDir::new("unix");
    let rw = Ringwire::start(&["--unix-socket-dir", dir.arg()]);
    let socket = dir.path().join(format!(".s.PGSQL.{}", rw.port));
    assert!(socket.exists(), "no socket file at {}", socket.display());

    // libpq: a directory as host means the Unix socket in it.
    assert_eq!(psql(dir.arg(), rw.port, "select 40 + 2"), "42");
    psql(
        dir.arg(),
        rw.port,
        "create table over_unix (id int primary key, v text)",
    );
    psql(dir.arg(), rw.port, "insert into over_unix values (1, 'a')");
    // Written over Unix, read over TCP: the same server.
    assert_eq!(
        psql("127.0.0.1", rw.port, "select v from over_unix where id = 1"),
        "a"
    );

    let out = common::output_with_stdin(
        Command::new("pgbench")
            .args(["-n", "-h", dir.arg(), "-p", &rw.port.to_string()])
            .args(["-U", "postgres", "-c", "8", "-j", "2", "-T", "2"])
            .args(["-f", "/dev/stdin", "postgres"]),
        b"select v from over_unix where id = 1;\n",
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pgbench over Unix failed: {report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (processed, failed) = common::pgbench::processed_and_failed(&report);
    assert!(processed > 100, "pgbench over Unix processed {processed}");
    assert_eq!(failed, 0, "{report}");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let conn_str = format!(
            "host={} port={} user=postgres dbname=postgres",
            dir.arg(),
            rw.port
        );
        let (client, conn) = tokio_postgres::connect(&conn_str, NoTls).await.unwrap();
        tokio::spawn(conn);
        let row = client
            .query_one("select v from over_unix where id = $1", &[&1i32])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), "a");

        // Linux has no SO_REUSEPORT for Unix sockets, so the server deals local connections
        // over its shards itself, to the one serving fewer: with this session and eight more
        // open, the two shards serve 5 and 4.
        let mut per_shard = [0usize; 2];
        per_shard[common::client::shard_of(&client).await] += 1;
        let mut clients = Vec::new();
        for _ in 0..8 {
            let (client, conn) = tokio_postgres::connect(&conn_str, NoTls).await.unwrap();
            tokio::spawn(conn);
            let pid: i32 = client
                .query_one("select pg_backend_pid()", &[])
                .await
                .unwrap()
                .get(0);
            per_shard[shards::shard_of_process_id(pid)] += 1;
            clients.push(client);
        }
        assert_eq!(
            per_shard.iter().min().zip(per_shard.iter().max()),
            Some((&4, &5)),
            "Unix connections per shard: {per_shard:?}"
        );
    });
}

/// Few TCP connections spread evenly: a new connection goes to the shard serving the fewest,
/// so at every count the two shards differ by at most one (the kernel's SO_REUSEPORT hash
/// alone leaves 4 connections 3/1 or 4/0 5 times in 8), and connections that close count
/// no more. glommio's TCP path keeps the kernel's placement (its streams cannot give up their
/// descriptor), so there this only checks that every connection works.
#[tokio::test]
async fn few_connections_spread_evenly_over_the_shards() {
    use common::client::{connect, shard_of};
    let kernel_placed = std::env::var("RINGWIRE_IO").as_deref() == Ok("glommio")
        && !common::ringwire::unix_transport();
    let rw = Ringwire::start(&[]);
    let mut held = Vec::new();
    let mut per_shard = [0usize; 2];
    for n in 1..=8 {
        let c = connect(&rw).await;
        per_shard[shard_of(&c).await] += 1;
        held.push(c);
        assert!(
            kernel_placed || per_shard[0].abs_diff(per_shard[1]) <= 1,
            "after {n} connections: {per_shard:?} per shard"
        );
    }
    if kernel_placed {
        return;
    }
    // Close the four on shard 0: the next four all go there.
    let mut kept = Vec::new();
    for c in held {
        if shard_of(&c).await == 1 {
            kept.push(c);
        }
    }
    assert_eq!(kept.len(), 4);
    // The server sees the Terminates within microseconds; a second is plenty.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for n in 1..=4 {
        let c = connect(&rw).await;
        assert_eq!(
            shard_of(&c).await,
            0,
            "connection {n} after shard 0's closed"
        );
        kept.push(c);
    }
}

#[test]
fn socket_file_stale_is_replaced_live_is_refused() {
    let dir = TempDir::new("stale");
    // A stale file: a socket that was bound and abandoned, as after a crash.
    let free_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let stale = dir.path().join(format!(".s.PGSQL.{free_port}"));
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let listen = format!("127.0.0.1:{free_port}");
    let rw = Ringwire::start(&["--listen", &listen, "--unix-socket-dir", dir.arg()]);
    assert_eq!(psql(dir.arg(), rw.port, "select 1"), "1");

    // A second server whose socket file would be the same (same port number, another
    // loopback address) must not steal it.
    let second = format!("127.0.0.2:{free_port}");
    let out = Command::new(env!("CARGO_BIN_EXE_ringwire"))
        .args(["--listen", &second, "--shards", "1"])
        .args(["--unix-socket-dir", dir.arg()])
        .output()
        .expect("run ringwire");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "second server started: {stderr}");
    assert!(
        stderr.contains("another server is accepting connections there"),
        "{stderr}"
    );
    // And the first one still answers on it.
    assert_eq!(psql(dir.arg(), rw.port, "select 2"), "2");
}

/// A minimal blocking protocol client for what the drivers will not do on purpose.
struct Raw {
    stream: TcpStream,
}

impl Raw {
    fn connect(rw: &Ringwire) -> Raw {
        let mut stream = TcpStream::connect(rw.addr()).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut out = Vec::new();
        frontend::encode_startup(
            &mut out,
            frontend::PROTOCOL_3_0,
            &[("user", "postgres"), ("database", "postgres")],
        );
        stream.write_all(&out).unwrap();
        let mut raw = Raw { stream };
        raw.read_until_ready();
        raw
    }

    fn send_query(&mut self, sql: &str) {
        let mut out = Vec::new();
        frontend::encode_query(&mut out, sql);
        self.stream.write_all(&out).unwrap();
    }

    /// Read messages up to ReadyForQuery; returns (DataRow count, DataRow bytes).
    fn read_until_ready(&mut self) -> (usize, usize) {
        let (mut rows, mut bytes) = (0, 0);
        loop {
            let mut header = [0u8; 5];
            self.stream.read_exact(&mut header).expect("read header");
            let len = u32::from_be_bytes(header[1..5].try_into().unwrap()) as usize - 4;
            let mut body = vec![0u8; len];
            self.stream.read_exact(&mut body).expect("read body");
            match header[0] {
                b'D' => {
                    rows += 1;
                    bytes += len;
                }
                b'E' => panic!("server error: {}", body.escape_ascii()),
                b'Z' => return (rows, bytes),
                _ => {}
            }
        }
    }
}

#[test]
fn many_megabyte_replies_stream_whole_and_slow_readers_get_backpressure() {
    let mut rw = Ringwire::start(&["--shards", "1"]);
    let mut setup = Raw::connect(&rw);
    setup.send_query("create table big (id int primary key, v text)");
    setup.read_until_ready();
    for id in 1..=40 {
        setup.send_query(&format!(
            "insert into big values ({id}, repeat('y', 250000))"
        ));
        setup.read_until_ready();
    }
    drop(setup);

    // A 10 MB reply arrives whole and in order.
    let mut reader = Raw::connect(&rw);
    reader.send_query("select id, v from big order by id");
    let (rows, bytes) = reader.read_until_ready();
    assert_eq!(rows, 40);
    assert!(bytes > 40 * 250_000, "{bytes} bytes of rows");

    // Clients that ask for 10 MB 20 times over and never read: the server must not buffer
    // it all (that would be 200 MB each), and must go on serving others.
    let before = rss_kib(rw.pid());
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let mut c = Raw::connect(&rw);
        for _ in 0..20 {
            c.send_query("select id, v from big order by id");
        }
        stalled.push(c);
    }
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    let mut bystander = Raw::connect(&rw);
    bystander.send_query("select 1");
    assert_eq!(bystander.read_until_ready().0, 1);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a bystander waited {:?} while others stalled",
        started.elapsed()
    );
    let grown_mib = rss_kib(rw.pid()).saturating_sub(before) / 1024;
    eprintln!("RSS grew {grown_mib} MiB with 4 stalled readers");
    // What a stalled connection may hold: its statement's result, materialized by the
    // compute and encoded (2 x 10 MB here), plus its bounded output buffer. Unbounded
    // buffering of the 20 pipelined replies would be 4 x 200 MB.
    assert!(
        grown_mib < 200,
        "RSS grew {grown_mib} MiB for 4 clients that do not read"
    );
    // A stalled client that finally reads gets every byte of all 20 replies.
    let mut first = stalled.remove(0);
    for _ in 0..20 {
        let (rows, _) = first.read_until_ready();
        assert_eq!(rows, 40);
    }
    // A client blocked on a big reply that keeps sending (2 MB of small queries) has its
    // input paused, not buffered without bound; once it reads, every query is answered.
    let mut flooder = Raw::connect(&rw);
    flooder.send_query("select id, v from big order by id");
    let mut writer = flooder.stream.try_clone().unwrap();
    let flood = std::thread::spawn(move || {
        let mut batch = Vec::new();
        for _ in 0..100_000 {
            frontend::encode_query(&mut batch, "select 1");
        }
        writer.write_all(&batch).unwrap();
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(flooder.read_until_ready().0, 40);
    for _ in 0..100_000 {
        assert_eq!(flooder.read_until_ready().0, 1);
    }
    flood.join().unwrap();
    // Resetting the others mid-reply ends only their connections.
    for c in stalled {
        common::wire::reset_on_close(&c.stream);
        drop(c);
    }
    std::thread::sleep(Duration::from_millis(500));
    rw.assert_alive();
    let mut after = Raw::connect(&rw);
    after.send_query("select count(*) from big");
    assert_eq!(after.read_until_ready().0, 1);
}

#[test]
fn pipelined_queries_and_connection_churn() {
    let mut rw = Ringwire::start(&[]);
    // 2,000 queries written in one go before reading any answer.
    let mut c = Raw::connect(&rw);
    let mut batch = Vec::new();
    for i in 0..2000 {
        frontend::encode_query(&mut batch, &format!("select {i}"));
    }
    c.stream.write_all(&batch).unwrap();
    for _ in 0..2000 {
        assert_eq!(c.read_until_ready().0, 1);
    }
    // Connections opened and dropped in bulk, some mid-query, leave the server serving.
    for round in 0..5 {
        let conns: Vec<Raw> = (0..200).map(|_| Raw::connect(&rw)).collect();
        for (i, mut conn) in conns.into_iter().enumerate() {
            if (i + round) % 2 == 0 {
                conn.send_query("select pg_sleep(0.05)");
            }
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    rw.assert_alive();
    c.send_query("select 7");
    assert_eq!(c.read_until_ready().0, 1);
}
