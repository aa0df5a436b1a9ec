//! Hostile and broken clients against one real `ringwire` process: each must end only its own
//! connection — with a FATAL 08P01 ErrorResponse where the server can still answer, or a clean
//! close — while a bystander connection opened before all of them, and fresh connections after
//! each, keep getting `select 1` answered, and the process stays up.
//!
//! Also CancelRequest, across shards: a right key cancels (57014 within 2 s, the connection
//! lives on), a wrong key does nothing.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use common::ringwire::Ringwire;
use protocol::backend::BackendMessage;
use protocol::frontend;
use protocol::wire::split_frame;
use protocol::Format;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

/// How long any single reply may take. Generous for a loaded CI box; everything here is local.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// One message as received, owned so it outlives the read buffer.
struct Received {
    tag: u8,
    body: Vec<u8>,
}

impl std::fmt::Debug for Received {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match BackendMessage::parse(protocol::wire::Frame {
            tag: self.tag,
            body: &self.body,
        }) {
            Ok(m) => write!(f, "{m:?}"),
            Err(_) => write!(
                f,
                "undecodable {:?} {}",
                self.tag as char,
                self.body.escape_ascii()
            ),
        }
    }
}

impl Received {
    fn parse(&self) -> BackendMessage<'_> {
        BackendMessage::parse(protocol::wire::Frame {
            tag: self.tag,
            body: &self.body,
        })
        .unwrap_or_else(|e| panic!("undecodable {:?} message: {e}", self.tag as char))
    }

    /// `(severity, SQLSTATE)` of an ErrorResponse.
    fn error(&self) -> Option<(String, String)> {
        match self.parse() {
            BackendMessage::ErrorResponse(f) => {
                Some((f.severity().to_string(), f.code().to_string()))
            }
            _ => None,
        }
    }
}

/// A raw protocol connection: bytes out, decoded messages in.
struct Raw {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// How a read ended.
#[derive(Debug, PartialEq, Eq)]
enum Ending {
    /// The server closed the connection (EOF or reset) after the messages returned.
    Closed,
    /// The wanted message arrived.
    Done,
}

/// Where the server listens; cheap to clone into a scenario task.
#[derive(Clone)]
struct Server {
    addr: String,
    connection_string: String,
}

impl Server {
    fn of(rw: &Ringwire) -> Server {
        Server {
            addr: rw.addr(),
            connection_string: rw.connection_string("postgres"),
        }
    }
}

impl Raw {
    async fn connect(server: &Server) -> Raw {
        let stream = TcpStream::connect(&server.addr)
            .await
            .expect("connect to ringwire");
        stream.set_nodelay(true).expect("nodelay");
        Raw {
            stream,
            buf: Vec::new(),
        }
    }

    /// Connect and complete a trust-auth startup; returns the BackendKeyData.
    async fn established(server: &Server) -> (Raw, i32, i32) {
        let mut raw = Raw::connect(server).await;
        let mut out = Vec::new();
        frontend::encode_startup(
            &mut out,
            frontend::PROTOCOL_3_0,
            &[("user", "hostile"), ("database", "postgres")],
        );
        raw.send(&out).await;
        let (msgs, ending) = raw.read_until_ready(1).await;
        assert_eq!(ending, Ending::Done, "startup did not finish: {msgs:?}");
        let key = msgs
            .iter()
            .find_map(|m| match m.parse() {
                BackendMessage::BackendKeyData {
                    process_id,
                    secret_key,
                } => Some((process_id, secret_key)),
                _ => None,
            })
            .expect("BackendKeyData at startup");
        (raw, key.0, key.1)
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream
            .write_all(bytes)
            .await
            .expect("send to ringwire");
    }

    /// Send, tolerating a server that already closed on us (the point of some tests).
    async fn send_lossy(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes).await;
    }

    /// Read messages until `ready` ReadyForQuery messages arrived or the server closed.
    async fn read_until_ready(&mut self, ready: usize) -> (Vec<Received>, Ending) {
        let mut seen = 0;
        self.read_until(|m| {
            if m.tag == b'Z' {
                seen += 1;
            }
            seen == ready
        })
        .await
    }

    /// Read messages until `stop` says so or the server closes; panics after [`REPLY_TIMEOUT`].
    async fn read_until(
        &mut self,
        mut stop: impl FnMut(&Received) -> bool,
    ) -> (Vec<Received>, Ending) {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        let mut msgs = Vec::new();
        loop {
            while let Some((frame, n)) =
                split_frame(&self.buf, usize::MAX).expect("ringwire sent a bad frame header")
            {
                let m = Received {
                    tag: frame.tag,
                    body: frame.body.to_vec(),
                };
                self.buf.drain(..n);
                let done = stop(&m);
                msgs.push(m);
                if done {
                    return (msgs, Ending::Done);
                }
            }
            let mut chunk = [0u8; 8192];
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.stream.read(&mut chunk)).await {
                Err(_) => panic!("no reply within {REPLY_TIMEOUT:?}; so far {msgs:?}"),
                Ok(Ok(0)) | Ok(Err(_)) => {
                    assert!(
                        self.buf.is_empty(),
                        "connection closed inside a message: {:?}",
                        self.buf
                    );
                    return (msgs, Ending::Closed);
                }
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Read everything until the server closes.
    async fn read_to_close(&mut self) -> Vec<Received> {
        let (msgs, ending) = self.read_until(|_| false).await;
        assert_eq!(ending, Ending::Closed);
        msgs
    }
}

/// The server's answer to a connection it must end: nothing, or exactly one FATAL with one of
/// `codes`, and then the close.
fn assert_fatal_or_silent_close(what: &str, msgs: &[Received], codes: &[&str]) {
    match msgs {
        [] => {}
        [only] => {
            let (severity, code) = only
                .error()
                .unwrap_or_else(|| panic!("{what}: expected FATAL, got {:?}", only.parse()));
            assert_eq!(severity, "FATAL", "{what}: {:?}", only.parse());
            assert!(
                codes.contains(&code.as_str()),
                "{what}: SQLSTATE {code}, expected one of {codes:?}: {:?}",
                only.parse()
            );
        }
        more => panic!("{what}: expected at most one FATAL before the close, got {more:?}"),
    }
}

/// Exactly one FATAL with `code`, then the close.
fn assert_fatal(what: &str, msgs: &[Received], code: &str) {
    assert_eq!(
        msgs.len(),
        1,
        "{what}: expected one FATAL {code} then close, got {msgs:?}"
    );
    assert_fatal_or_silent_close(what, msgs, &[code]);
}

async fn client(server: &Server) -> Client {
    let (client, connection) = tokio::time::timeout(
        REPLY_TIMEOUT,
        tokio_postgres::connect(&server.connection_string, NoTls),
    )
    .await
    .expect("connect timed out")
    .expect("a normal client connects");
    tokio::spawn(connection);
    client
}

async fn select_one(client: &Client) {
    let row = tokio::time::timeout(REPLY_TIMEOUT, client.query_one("select 1", &[]))
        .await
        .expect("select 1 timed out")
        .expect("select 1 answered");
    assert_eq!(row.get::<_, i32>(0), 1);
}

/// After every hostile client: the bystander and a fresh client are served, the process lives.
async fn assert_unharmed(rw: &mut Ringwire, server: &Server, bystander: &Client, after: &str) {
    rw.assert_alive();
    let fresh = client(server).await;
    select_one(&fresh).await;
    select_one(bystander).await;
    rw.assert_alive();
    eprintln!("ok: {after}");
}

/// Deterministic noise (xorshift), so a failure reproduces.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn query(sql: &[u8]) -> Vec<u8> {
    let mut out = vec![b'Q'];
    out.extend_from_slice(&(sql.len() as u32 + 5).to_be_bytes());
    out.extend_from_slice(sql);
    out.push(0);
    out
}

type Scenario = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Each scenario runs as its own task, so a failing one is reported and the rest still run;
/// after each, the bystander, a fresh client and the process are checked (those failures stop
/// the test: the server is then hurt, and later results would mean nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_clients_end_only_their_own_connection() {
    // A connection limit too, so connections that leak their slot show up as refusals.
    let mut rw = Ringwire::start(&["--max-message-bytes", "65536", "--max-connections", "100"]);
    let server = Server::of(&rw);
    let bystander = client(&server).await;
    select_one(&bystander).await;

    // Started first and checked last: abandoned `select pg_sleep(5)`s sleep through the rest.
    let sleepers_started = Instant::now();
    let scenarios: Vec<(&str, Scenario)> = vec![
        (
            "abandoned pg_sleep(5) holds up nobody",
            Box::pin(abandoned_sleepers(server.clone())),
        ),
        (
            "HTTP request as startup",
            Box::pin(http_request_as_startup(server.clone())),
        ),
        (
            "random garbage before startup",
            Box::pin(random_garbage_before_startup(server.clone())),
        ),
        (
            "data pipelined after SSLRequest",
            Box::pin(data_after_ssl_request(server.clone())),
        ),
        (
            "impossible startup lengths",
            Box::pin(impossible_startup_lengths(server.clone())),
        ),
        (
            "unknown message types after startup",
            Box::pin(unknown_message_types(server.clone())),
        ),
        (
            "unknown message type refused from its header",
            Box::pin(unknown_message_type_header_only(server.clone())),
        ),
        (
            "messages over --max-message-bytes",
            Box::pin(oversized_messages(server.clone())),
        ),
        (
            "truncated messages then close",
            Box::pin(truncated_messages(server.clone())),
        ),
        (
            "Bind claiming 30000 parameters",
            Box::pin(bind_with_30000_parameters(server.clone())),
        ),
        (
            "invalid UTF-8 in a query",
            Box::pin(invalid_utf8(server.clone())),
        ),
        (
            "200 connections dropped mid-startup",
            Box::pin(dropped_mid_startup(server.clone())),
        ),
    ];
    let mut failures = Vec::new();
    for (name, scenario) in scenarios {
        if let Err(e) = tokio::spawn(scenario).await {
            let why = match e.try_into_panic() {
                Ok(p) => p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default(),
                Err(e) => e.to_string(),
            };
            failures.push(format!("{name}: {why}"));
        }
        assert_unharmed(&mut rw, &server, &bystander, name).await;
    }

    // The abandoned sleepers wake up and write into dead sockets.
    tokio::time::sleep(Duration::from_millis(5_500).saturating_sub(sleepers_started.elapsed()))
        .await;
    assert_unharmed(
        &mut rw,
        &server,
        &bystander,
        "abandoned pg_sleep(5), after waking",
    )
    .await;
    assert!(
        failures.is_empty(),
        "{} hostile-input scenario(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Clients that send `select pg_sleep(5)` and vanish: four of them, so (hashed over two shards)
/// both shards very likely hold one. Others must be served meanwhile.
async fn abandoned_sleepers(server: Server) {
    for _ in 0..4 {
        let (mut raw, _, _) = Raw::established(&server).await;
        raw.send(&query(b"select pg_sleep(5)")).await;
        drop(raw);
    }
    let started = Instant::now();
    for _ in 0..4 {
        select_one(&client(&server).await).await;
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "sleeping, abandoned queries held up others: {:?}",
        started.elapsed()
    );
}

/// An HTTP request reads as a 1.2 GB startup packet: refused at once.
async fn http_request_as_startup(server: Server) {
    let mut raw = Raw::connect(&server).await;
    raw.send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    assert_fatal(
        "HTTP request as startup",
        &raw.read_to_close().await,
        "08P01",
    );
}

/// Random garbage: the length it happens to start with decides whether the server answers (bad
/// length: 08P01; a plausible length with a nonsense version: 0A000, as PostgreSQL) or waits for
/// more, in which case our half-close must end it quietly.
async fn random_garbage_before_startup(server: Server) {
    for seed in 1..=8u64 {
        let mut raw = Raw::connect(&server).await;
        raw.send_lossy(&noise(seed, 64 + seed as usize * 37)).await;
        let _ = raw.stream.shutdown().await;
        let msgs = raw.read_to_close().await;
        assert_fatal_or_silent_close(&format!("garbage seed {seed}"), &msgs, &["08P01", "0A000"]);
    }
}

/// Bytes pipelined behind an SSLRequest, before the server's answer (CVE-2021-23214).
async fn data_after_ssl_request(server: Server) {
    let mut raw = Raw::connect(&server).await;
    let mut out = Vec::new();
    frontend::encode_ssl_request(&mut out);
    out.extend_from_slice(b"\x16\x03\x01 not a startup");
    raw.send(&out).await;
    // ringwire refuses before answering 'N'; had the bytes arrived in two segments, 'N' would
    // come first and the garbage would then fail as a startup packet. Either way: FATAL 08P01.
    let mut first = [0u8; 1];
    match tokio::time::timeout(REPLY_TIMEOUT, raw.stream.read(&mut first))
        .await
        .expect("no answer to SSLRequest")
    {
        Ok(1) if first[0] == b'N' => {}
        Ok(1) => raw.buf.push(first[0]),
        other => panic!("SSLRequest with trailing data: closed without a reply ({other:?})"),
    }
    assert_fatal("data after SSLRequest", &raw.read_to_close().await, "08P01");
}

/// Startup packets with impossible lengths: the answer must not wait for a body.
async fn impossible_startup_lengths(server: Server) {
    for len in [3i32, 100_000, -1] {
        let mut raw = Raw::connect(&server).await;
        raw.send(&len.to_be_bytes()).await;
        assert_fatal(
            &format!("startup length {len}"),
            &raw.read_to_close().await,
            "08P01",
        );
    }
}

/// Garbage after a good startup: an unknown message type ends the connection. The random case
/// half-closes, since its length field may announce more than we send.
async fn unknown_message_types(server: Server) {
    for (what, bytes, half_close) in [
        ("message type 0x01", b"\x01\x00\x00\x00\x04".to_vec(), false),
        (
            "message type 'z' with a body",
            b"z\x00\x00\x00\x08abcd".to_vec(),
            false,
        ),
        (
            "random bytes after startup",
            [b"\x07".to_vec(), noise(99, 200)].concat(),
            true,
        ),
    ] {
        let (mut raw, _, _) = Raw::established(&server).await;
        raw.send_lossy(&bytes).await;
        if half_close {
            let _ = raw.stream.shutdown().await;
            assert_fatal_or_silent_close(what, &raw.read_to_close().await, &["08P01"]);
        } else {
            assert_fatal(what, &raw.read_to_close().await, "08P01");
        }
    }
}

/// PostgreSQL checks the type byte before reading the body (`SocketBackend` in postgres.c), so
/// an unknown type is refused even when the announced body never comes.
async fn unknown_message_type_header_only(server: Server) {
    let (mut raw, _, _) = Raw::established(&server).await;
    raw.send(b"z\x00\x00\x10\x00").await;
    let started = Instant::now();
    let msgs = raw.read_until(|m| m.tag == b'E').await.0;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the unknown type waited for its body: {:?}",
        started.elapsed()
    );
    assert_fatal("message type 'z', header only", &msgs, "08P01");
}

/// A message longer than --max-message-bytes: refused from its header, before any body.
async fn oversized_messages(server: Server) {
    for len in [65_537u32, 1 << 30, i32::MAX as u32] {
        let (mut raw, _, _) = Raw::established(&server).await;
        let mut header = vec![b'Q'];
        header.extend_from_slice(&len.to_be_bytes());
        raw.send(&header).await;
        let started = Instant::now();
        let msgs = raw.read_until(|m| m.tag == b'E').await.0;
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the oversize error waited {:?}",
            started.elapsed()
        );
        assert_fatal(&format!("message of {len} bytes"), &msgs, "08P01");
        assert!(raw.read_to_close().await.is_empty());
    }
    // The same with a real, oversized body: still refused.
    let (mut raw, _, _) = Raw::established(&server).await;
    raw.send_lossy(&query(&vec![b' '; 70_000])).await;
    assert_fatal("70 kB query", &raw.read_to_close().await, "08P01");
    // Exactly at the limit is an ordinary message.
    let (mut raw, _, _) = Raw::established(&server).await;
    let mut sql = b"select 1".to_vec();
    sql.resize(65_536 - 5, b' ');
    raw.send(&query(&sql)).await;
    let (msgs, ending) = raw.read_until_ready(1).await;
    assert_eq!(ending, Ending::Done);
    assert!(
        msgs.iter().any(|m| matches!(
            m.parse(),
            BackendMessage::CommandComplete { tag: "SELECT 1" }
        )),
        "{msgs:?}"
    );
}

/// A truncated message, then the client goes away (half-closed, and fully closed); and a
/// truncated startup packet.
async fn truncated_messages(server: Server) {
    for half_close in [true, false] {
        let (mut raw, _, _) = Raw::established(&server).await;
        let mut partial = query(b"select 'this query never finishes arriving'");
        partial.truncate(20);
        raw.send(&partial).await;
        if half_close {
            raw.stream.shutdown().await.expect("shutdown");
            assert!(
                raw.read_to_close().await.is_empty(),
                "the server answered a truncated message"
            );
        } else {
            drop(raw);
        }
    }
    let mut raw = Raw::connect(&server).await;
    let mut out = Vec::new();
    frontend::encode_startup(&mut out, frontend::PROTOCOL_3_0, &[("user", "hostile")]);
    raw.send(&out[..out.len() - 3]).await;
    raw.stream.shutdown().await.expect("shutdown");
    assert!(
        raw.read_to_close().await.is_empty(),
        "the server answered a truncated startup packet"
    );
}

/// Bind claiming 30000 parameters in a 10-byte body: an ERROR for that message only; after
/// Sync the connection works.
async fn bind_with_30000_parameters(server: Server) {
    let (mut raw, _, _) = Raw::established(&server).await;
    let mut out = Vec::new();
    frontend::encode_parse(&mut out, "", "select 1", &[]);
    out.push(b'B');
    let body: &[u8] = b"\0\0\0\0\x75\x30\0\0\0\x01";
    out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    out.extend_from_slice(body);
    frontend::encode_execute(&mut out, "", 0);
    frontend::encode_empty(&mut out, b'S');
    frontend::encode_bind(&mut out, "", "", &[], &[], &[Format::Text]);
    frontend::encode_execute(&mut out, "", 0);
    frontend::encode_empty(&mut out, b'S');
    raw.send(&out).await;
    let (msgs, ending) = raw.read_until_ready(2).await;
    assert_eq!(ending, Ending::Done, "{msgs:?}");
    let kinds: Vec<String> = msgs.iter().map(|m| describe(&m.parse())).collect();
    assert_eq!(
        kinds,
        [
            "ParseComplete",
            "ERROR 08P01",
            "ReadyForQuery I",
            "BindComplete",
            "DataRow [\"1\"]",
            "CommandComplete SELECT 1",
            "ReadyForQuery I"
        ],
        "Bind with 30000 parameters"
    );
}

/// Invalid UTF-8 in a query: 22021 for that query, the connection goes on.
async fn invalid_utf8(server: Server) {
    let (mut raw, _, _) = Raw::established(&server).await;
    raw.send(&[query(b"select '\xc3\x28'"), query(b"select 1")].concat())
        .await;
    let (msgs, _) = raw.read_until_ready(2).await;
    let kinds: Vec<String> = msgs.iter().map(|m| describe(&m.parse())).collect();
    assert_eq!(
        kinds,
        [
            "ERROR 22021",
            "ReadyForQuery I",
            "RowDescription",
            "DataRow [\"1\"]",
            "CommandComplete SELECT 1",
            "ReadyForQuery I"
        ],
        "invalid UTF-8"
    );
}

/// 200 connections opened at once and dropped mid-startup (half silent, half with part of a
/// startup packet). With --max-connections 100, leaked slots would refuse the 90 clients after.
async fn dropped_mid_startup(server: Server) {
    let mut startup = Vec::new();
    frontend::encode_startup(
        &mut startup,
        frontend::PROTOCOL_3_0,
        &[("user", "hostile"), ("database", "postgres")],
    );
    let mut dropped = Vec::new();
    for i in 0..200 {
        let mut raw = Raw::connect(&server).await;
        if i % 2 == 0 {
            raw.send(&startup[..1 + i % (startup.len() - 1)]).await;
        }
        dropped.push(raw);
    }
    drop(dropped);
    // The server sees the closes asynchronously: retry for a few seconds, then every slot must
    // be back (the bystander and the four sleepers hold five of the 100).
    let mut refused = None;
    for _ in 0..30 {
        let mut clients = Vec::new();
        refused = None;
        for _ in 0..90 {
            match tokio_postgres::connect(&server.connection_string, NoTls).await {
                Ok((c, conn)) => {
                    tokio::spawn(conn);
                    clients.push(c);
                }
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        if refused.is_none() {
            for c in &clients {
                select_one(c).await;
            }
            return;
        }
        drop(clients);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("connection slots leaked after 200 dropped startups: {refused:?}");
}

/// A short description of a message for sequence assertions.
fn describe(m: &BackendMessage<'_>) -> String {
    match m {
        BackendMessage::ErrorResponse(f) => format!("{} {}", f.severity(), f.code()),
        BackendMessage::ReadyForQuery { status } => {
            format!("ReadyForQuery {}", status.code() as char)
        }
        BackendMessage::DataRow { values } => {
            let v: Vec<String> = values
                .iter()
                .map(|v| {
                    v.map(|b| String::from_utf8_lossy(b).into_owned())
                        .unwrap_or("NULL".into())
                })
                .collect();
            format!("DataRow {v:?}")
        }
        BackendMessage::CommandComplete { tag } => format!("CommandComplete {tag}"),
        BackendMessage::RowDescription { .. } => "RowDescription".into(),
        other => format!("{other:?}"),
    }
}

/// Open tokio-postgres clients until they cover both shards (the kernel hashes connections over
/// them), returning each with its shard.
async fn clients_on_both_shards(server: &Server, at_least: usize) -> Vec<(Client, usize)> {
    let mut clients = Vec::new();
    for _ in 0..32 {
        let c = client(server).await;
        let pid: i32 = c
            .query_one("select pg_backend_pid()", &[])
            .await
            .expect("pg_backend_pid()")
            .get(0);
        clients.push((c, shards::shard_of_process_id(pid)));
        let on_zero = clients.iter().filter(|(_, s)| *s == 0).count();
        if clients.len() >= at_least && on_zero > 0 && on_zero < clients.len() {
            return clients;
        }
    }
    panic!("32 connections never covered both shards");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_request_cancels_across_shards_and_a_wrong_key_does_nothing() {
    let mut rw = Ringwire::start(&["--shards", "2"]);
    let server = Server::of(&rw);

    // Sleepers on both shards. Each cancel arrives on a connection the kernel hashes to either
    // shard, so both same-shard and cross-shard delivery happen (all six landing on their
    // target's shard has odds of 1 in 64 per run).
    let clients = clients_on_both_shards(&server, 6).await;
    let mut tokens = Vec::new();
    let mut sleeps = Vec::new();
    for (c, shard) in clients {
        tokens.push((c.cancel_token(), shard));
        sleeps.push(tokio::spawn(async move {
            let result = c.simple_query("select pg_sleep(10)").await.map(|_| ());
            (c, result, Instant::now())
        }));
    }
    // Let every query reach the server first: a cancel arriving while idle is forgotten.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cancelled_at = Instant::now();
    for (token, _) in &tokens {
        token.cancel_query(NoTls).await.expect("send CancelRequest");
    }
    for (sleep, (_, shard)) in sleeps.into_iter().zip(&tokens) {
        let (c, result, finished) = tokio::time::timeout(REPLY_TIMEOUT, sleep)
            .await
            .expect("cancelled query hung")
            .expect("task");
        let e = result.expect_err("pg_sleep(10) was not cancelled");
        assert_eq!(
            e.code(),
            Some(&SqlState::QUERY_CANCELED),
            "shard {shard}: {e}"
        );
        let took = finished.duration_since(cancelled_at);
        assert!(
            took < Duration::from_secs(2),
            "shard {shard}: the cancel took {took:?}"
        );
        select_one(&c).await;
    }
    rw.assert_alive();

    // A wrong key (or a key for another process, or a 3.2-style long key with the right first
    // four bytes) does nothing, wherever it lands: the query runs to its end.
    let (mut victim, pid, secret) = Raw::established(&server).await;
    victim.send(&query(b"select pg_sleep(1)")).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let mut long_key = secret.to_be_bytes().to_vec();
    long_key.extend_from_slice(&[0; 28]);
    let wrong: [(i32, Vec<u8>); 4] = [
        (pid, (secret ^ 1).to_be_bytes().to_vec()),
        (pid, (!secret).to_be_bytes().to_vec()),
        (pid ^ 1, secret.to_be_bytes().to_vec()),
        (pid, long_key),
    ];
    for _ in 0..4 {
        for (process_id, key) in &wrong {
            send_cancel(&server, *process_id, key).await;
        }
    }
    let (msgs, ending) = victim.read_until_ready(1).await;
    assert_eq!(ending, Ending::Done);
    let kinds: Vec<String> = msgs.iter().map(|m| describe(&m.parse())).collect();
    assert_eq!(
        kinds,
        [
            "RowDescription",
            "DataRow [\"\"]",
            "CommandComplete SELECT 1",
            "ReadyForQuery I"
        ],
        "wrong-key cancel"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "pg_sleep(1) ended early: {:?}",
        started.elapsed()
    );

    // Control: the same raw path with the right key does cancel, so the above could have failed.
    victim.send(&query(b"select pg_sleep(10)")).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    send_cancel(&server, pid, &secret.to_be_bytes()).await;
    let (msgs, _) = victim.read_until_ready(1).await;
    let kinds: Vec<String> = msgs.iter().map(|m| describe(&m.parse())).collect();
    assert_eq!(
        kinds,
        ["ERROR 57014", "ReadyForQuery I"],
        "right-key cancel over a raw connection"
    );
    rw.assert_alive();
}

/// Send one CancelRequest on its own connection and wait for the server to close it (it never
/// answers one).
async fn send_cancel(server: &Server, process_id: i32, key: &[u8]) {
    let mut raw = Raw::connect(server).await;
    let mut out = Vec::new();
    frontend::encode_cancel(&mut out, process_id, key);
    raw.send(&out).await;
    assert!(
        raw.read_to_close().await.is_empty(),
        "the server answered a CancelRequest"
    );
}

/// Statements a client nests deep — an operator chain of thousands of terms, a cast chain,
/// JSON nested thousands deep in a literal or a parameter — are planned and evaluated by
/// recursion: each gets PostgreSQL's answer (the same value, or 54001 past the depth limit),
/// and the process lives on with its acknowledged rows. Before, `select 1+1+…` with about 800
/// terms (and JSON 7,000 deep) overflowed a shard's stack and aborted the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_expressions_get_an_answer_or_54001_and_the_process_lives() {
    use common::client::{connect, connect_to};
    use common::postgres::Postgres;
    let mut rw = Ringwire::start(&["--shards", "1"]);
    let pg = Postgres::start();
    let through = connect(&rw).await;
    let at_pg = connect_to(&pg.connection_string()).await;
    through
        .batch_execute("create table kept (x int); insert into kept values (1)")
        .await
        .unwrap();
    let chain = |n: usize, op: &str, term: &str| format!("select {}", vec![term; n].join(op));
    let value = |rows: Vec<tokio_postgres::SimpleQueryMessage>| {
        rows.iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                _ => None,
            })
            .expect("a row")
    };
    for sql in [
        chain(3000, "+", "1"),
        chain(5000, " and ", "true"),
        format!("select 1{}", "::int".repeat(1000)),
        format!("select '{}{}'::jsonb", "[".repeat(5000), "]".repeat(5000)),
    ] {
        let want = value(at_pg.simple_query(&sql).await.unwrap());
        let got = value(through.simple_query(&sql).await.unwrap());
        assert_eq!(got, want, "{}", &sql[..40]);
    }
    let too_deep = chain(100_000, "+", "1");
    let e = through.simple_query(&too_deep).await.unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("54001"), "{e:?}");
    for kind in ["json", "jsonb"] {
        let doc = format!("{}{}", "[".repeat(20_000), "]".repeat(20_000));
        let sql = format!("select $1::text::{kind} is not null");
        let e = through.query(&sql, &[&doc]).await.unwrap_err();
        assert_eq!(e.code().map(|c| c.code()), Some("54001"), "{kind}: {e:?}");
    }
    rw.assert_alive();
    let fresh = connect(&rw).await;
    let kept = value(
        fresh
            .simple_query("select count(*) from kept")
            .await
            .unwrap(),
    );
    assert_eq!(kept, "1");
}
