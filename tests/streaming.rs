//! One large result, read slowly, costs bounded memory: a SELECT whose rows can stream (a scan
//! with no sort, aggregate or DISTINCT) is produced in chunks, each sent before the next is
//! made, from one held snapshot (docs/ARCHITECTURE.md, "Large results in chunks"). Checked on
//! the three read paths: the compute on the connection's own shard (shard 0), the read
//! replica (shard 1), and the request to shard 0's compute (shard 1, `--read-replicas off`);
//! results against PostgreSQL 15.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::eventually_blocking_ok;
use common::postgres::Postgres;
use common::ringwire::{rss_kib, Ringwire};
use protocol::frontend;
use sha2::{Digest, Sha256};

/// Rows of the narrow table: more than `exec::CHUNK_ROWS_VISITED` (65,536), so a selective
/// scan pauses on the visit limit too, and ~6 MB of text (~25 chunks).
const NARROW_ROWS: usize = 100_000;
/// Rows of the wide table: 20 MB, far more than the socket path and the kernel buffer
/// between a server and a client that does not read.
const WIDE_ROWS: usize = 2_000;
const WIDE_BYTES: usize = 10_000;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("rw-stream-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// COPY text for `narrow (id int primary key, a int, v text)`.
fn narrow_data(dir: &Path) -> PathBuf {
    let path = dir.join("narrow.tsv");
    let mut s = String::new();
    for i in 1..=NARROW_ROWS {
        s.push_str(&format!("{i}\t{}\tvalue-{:040}\n", i % 97, i * 7));
    }
    std::fs::write(&path, s).unwrap();
    path
}

/// COPY text for `wide (id int primary key, v text)`.
fn wide_data(dir: &Path) -> PathBuf {
    let path = dir.join("wide.tsv");
    let mut s = String::new();
    for i in 1..=WIDE_ROWS {
        let c = (b'a' + (i % 26) as u8) as char;
        s.push_str(&format!("{i}\t{}\n", c.to_string().repeat(WIDE_BYTES)));
    }
    std::fs::write(&path, s).unwrap();
    path
}

fn run_psql(mut cmd: Command, sql: &str) {
    let out = cmd
        .args(["-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {sql:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn pg_psql(pg: &Postgres) -> Command {
    let mut cmd = Command::new("psql");
    cmd.args(["-X", "-h", "127.0.0.1", "-p", &pg.port.to_string()])
        .args(["-U", "postgres", "-d", "postgres"]);
    cmd
}

fn load(psql: impl Fn() -> Command, table: &str, columns: &str, file: &Path) {
    run_psql(psql(), &format!("create table {table} ({columns})"));
    run_psql(psql(), &format!("\\copy {table} from '{}'", file.display()));
}

/// What a statement sent back, in order.
#[derive(Debug, Default)]
struct Reply {
    rows: u64,
    /// SHA-256 over the DataRow (or CopyData) bodies in order.
    digest: String,
    tag: String,
    error: Option<(String, String)>,
}

/// A blocking protocol client that reads only when told to: the slow reader.
struct Raw {
    stream: TcpStream,
    pid: i32,
    secret: i32,
}

impl Raw {
    fn connect(addr: &str) -> Raw {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut out = Vec::new();
        frontend::encode_startup(
            &mut out,
            frontend::PROTOCOL_3_0,
            &[("user", "postgres"), ("database", "postgres")],
        );
        stream.write_all(&out).unwrap();
        let mut raw = Raw {
            stream,
            pid: 0,
            secret: 0,
        };
        loop {
            let (tag, body) = raw.message();
            match tag {
                b'K' => {
                    raw.pid = i32::from_be_bytes(body[0..4].try_into().unwrap());
                    raw.secret = i32::from_be_bytes(body[4..8].try_into().unwrap());
                }
                b'E' => panic!("startup failed: {}", body.escape_ascii()),
                b'Z' => return raw,
                _ => {}
            }
        }
    }

    /// A session on `shard` of a ringwire server (the shard is in the process id's high bits).
    /// A new connection goes to the shard serving the fewest, so the misses stay open until
    /// one lands (as `common::client::connect_on_shard` does).
    fn on_shard(rw: &Ringwire, shard: usize) -> Raw {
        let mut misses = Vec::new();
        for _ in 0..200 {
            let raw = Raw::connect(&rw.addr());
            if shards::shard_of_process_id(raw.pid) == shard {
                return raw;
            }
            misses.push(raw);
        }
        panic!("no connection landed on shard {shard}");
    }

    /// Keep the receive window small, so what the server has sent ahead of a client that
    /// stops reading is little (the kernel's share of a stalled result).
    fn small_receive_buffer(&self) {
        use std::os::fd::AsRawFd;
        let size: libc::c_int = 64 << 10;
        // SAFETY: passes a valid int of the size given.
        let r = unsafe {
            libc::setsockopt(
                self.stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0, "setsockopt SO_RCVBUF");
    }

    fn send_query(&mut self, sql: &str) {
        let mut out = Vec::new();
        frontend::encode_query(&mut out, sql);
        self.stream.write_all(&out).unwrap();
    }

    fn message(&mut self) -> (u8, Vec<u8>) {
        let mut header = [0u8; 5];
        self.stream.read_exact(&mut header).expect("read header");
        let len = u32::from_be_bytes(header[1..5].try_into().unwrap()) as usize - 4;
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body).expect("read body");
        (header[0], body)
    }

    /// Read `n` DataRows of the reply under way and no more.
    fn read_rows(&mut self, n: usize, digest: &mut Sha256) {
        let mut got = 0;
        while got < n {
            let (tag, body) = self.message();
            match tag {
                b'D' | b'd' => {
                    digest.update(&body);
                    got += 1;
                }
                b'T' | b'H' => {}
                other => panic!("unexpected message {} mid-result", other as char),
            }
        }
    }

    /// Read the rest of the reply up to ReadyForQuery; `digest` carries rows read before.
    fn finish(&mut self, mut digest: Sha256, mut rows: u64) -> Reply {
        let mut reply = Reply::default();
        loop {
            let (tag, body) = self.message();
            match tag {
                b'D' | b'd' => {
                    digest.update(&body);
                    rows += 1;
                }
                b'C' => reply.tag = String::from_utf8_lossy(&body[..body.len() - 1]).into(),
                b'E' => {
                    let field = |f: u8| common::wire::error_field(&body, f);
                    reply.error = Some((field(b'C'), field(b'M')));
                }
                b'Z' => break,
                _ => {}
            }
        }
        reply.rows = rows;
        reply.digest = digest
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        reply
    }

    /// Parse and Bind `sql` to portal `portal`, then Execute it for `max_rows` and Flush.
    fn open_portal(&mut self, portal: &str, sql: &str, max_rows: i32) {
        let mut out = Vec::new();
        frontend::encode_parse(&mut out, "", sql, &[]);
        frontend::encode_bind(&mut out, portal, "", &[], &[], &[]);
        frontend::encode_execute(&mut out, portal, max_rows);
        frontend::encode_empty(&mut out, b'H');
        self.stream.write_all(&out).unwrap();
    }

    fn execute(&mut self, portal: &str, max_rows: i32) {
        let mut out = Vec::new();
        frontend::encode_execute(&mut out, portal, max_rows);
        frontend::encode_empty(&mut out, b'H');
        self.stream.write_all(&out).unwrap();
    }

    /// Read one Execute's reply: its rows, then "suspended" or its command tag.
    fn execute_reply(&mut self, digest: &mut Sha256) -> (u64, String) {
        let mut rows = Vec::new();
        let (n, end) = self.execute_rows(&mut rows);
        for r in rows {
            digest.update(&r);
        }
        (n, end)
    }

    /// Read one Execute's reply, appending its DataRow bodies to `out`.
    fn execute_rows(&mut self, out: &mut Vec<Vec<u8>>) -> (u64, String) {
        let mut rows = 0;
        loop {
            let (tag, body) = self.message();
            match tag {
                b'D' => {
                    out.push(body);
                    rows += 1;
                }
                b's' => return (rows, "suspended".into()),
                b'C' => {
                    return (
                        rows,
                        String::from_utf8_lossy(&body[..body.len() - 1]).into(),
                    )
                }
                b'E' => panic!("error: {}", body.escape_ascii()),
                _ => {}
            }
        }
    }

    fn sync(&mut self) {
        let mut out = Vec::new();
        frontend::encode_empty(&mut out, b'S');
        self.stream.write_all(&out).unwrap();
        while self.message().0 != b'Z' {}
    }

    fn query(&mut self, sql: &str) -> Reply {
        self.send_query(sql);
        self.finish(Sha256::new(), 0)
    }
}

fn shard_stats_value(rw: &Ringwire, column: &str) -> i64 {
    let out = rw
        .psql()
        .args([
            "-At",
            "-c",
            &format!("select max({column}) from ringwire.shard_stats"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn versions(rw: &Ringwire, table: &str) -> i64 {
    let out = rw
        .psql()
        .args([
            "-At",
            "-c",
            &format!("select versions from ringwire.table_stats where table_name = '{table}'"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// The three read paths of a ringwire server with two shards: (label, server index, shard).
const PATHS: [(&str, usize, usize); 4] = [
    ("compute on shard 0", 0, 0),
    ("replica on shard 1", 0, 1),
    ("compute on shard 0, replicas off", 1, 0),
    ("remote compute from shard 1", 1, 1),
];

fn servers() -> [Ringwire; 2] {
    [
        Ringwire::start(&["--shards", "2"]),
        Ringwire::start(&["--shards", "2", "--read-replicas", "off"]),
    ]
}

#[test]
fn large_results_match_postgres_on_every_path() {
    let dir = TempDir::new("match");
    let narrow = narrow_data(&dir.0);
    let pg = Postgres::start();
    let rws = servers();
    let columns = "id int primary key, a int, v text";
    load(|| pg_psql(&pg), "narrow", columns, &narrow);
    for rw in &rws {
        load(|| rw.psql(), "narrow", columns, &narrow);
    }
    let queries = [
        // Streams: ~25 chunks.
        "select * from narrow",
        // Streams, pausing on the visit limit (few rows pass the filter).
        "select id, v from narrow where a = 5",
        "select v, id + a from narrow where id > 1000 limit 30000 offset 20000",
        "select * from narrow offset 99990",
        "select * from narrow limit 0",
        // Materialized (sorted / aggregated): same answers as before.
        "select id from narrow order by a, id",
        "select a, count(*) from narrow group by a order by a",
        // COPY TO streams as CopyData.
        "copy narrow to stdout",
        "copy narrow (id, v) to stdout with (format csv, header)",
    ];
    let mut on_pg = Raw::connect(&format!("127.0.0.1:{}", pg.port));
    for sql in queries {
        let want = on_pg.query(sql);
        assert!(want.error.is_none(), "{sql}: {:?}", want.error);
        for (label, server, shard) in PATHS {
            let mut c = Raw::on_shard(&rws[server], shard);
            let got = c.query(sql);
            assert_eq!(
                (got.rows, &got.digest, &got.tag, &got.error),
                (want.rows, &want.digest, &want.tag, &want.error),
                "{sql} on the {label}"
            );
        }
    }
    // The extended protocol (Execute with no row limit) streams too.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for (label, server, shard) in PATHS {
            let conninfo = rws[server].connection_string("postgres");
            let c = common::client::connect_on_shard(&conninfo, shard).await;
            let rows = c.query("select id, a, v from narrow", &[]).await.unwrap();
            assert_eq!(rows.len(), NARROW_ROWS, "{label}");
            let ids: i64 = rows.iter().map(|r| r.get::<_, i32>(0) as i64).sum();
            assert_eq!(ids, (NARROW_ROWS * (NARROW_ROWS + 1) / 2) as i64, "{label}");
        }
    });
}

#[test]
fn slow_readers_of_a_large_result_cost_bounded_memory() {
    let dir = TempDir::new("rss");
    let wide = wide_data(&dir.0);
    for (i, rw) in servers().iter_mut().enumerate() {
        load(|| rw.psql(), "wide", "id int primary key, v text", &wide);
        let want = Raw::connect(&rw.addr()).query("select * from wide");
        assert_eq!(want.rows, WIDE_ROWS as u64);
        // Let the allocator settle after the load and the first full read.
        std::thread::sleep(Duration::from_millis(500));
        let before = rss_kib(rw.pid());
        // Four clients on each shard ask for the 20 MB result and read nothing.
        let mut stalled = Vec::new();
        for shard in [0, 1] {
            for _ in 0..4 {
                let mut c = Raw::on_shard(rw, shard);
                c.small_receive_buffer();
                c.send_query("select * from wide");
                stalled.push(c);
            }
        }
        std::thread::sleep(Duration::from_secs(3));
        let started = Instant::now();
        for shard in [0, 1] {
            let mut bystander = Raw::on_shard(rw, shard);
            assert_eq!(bystander.query("select count(*) from wide").rows, 1);
        }
        let bystanders = started.elapsed();
        let grown_mib = rss_kib(rw.pid()).saturating_sub(before) / 1024;
        eprintln!(
            "server {i}: RSS grew {grown_mib} MiB with 8 stalled readers of a 20 MB result; \
             bystanders answered in {bystanders:?}"
        );
        // What each stalled statement may hold: one chunk (256 KiB) and its socket path's
        // bounded output (1 MiB on io_uring); eight of them ~10 MiB. Materializing the result
        // would cost 8 x 20 MB.
        assert!(
            grown_mib < 48,
            "server {i}: RSS grew {grown_mib} MiB for 8 clients that do not read"
        );
        assert!(
            bystanders < Duration::from_secs(5),
            "bystanders waited {bystanders:?}"
        );
        // Each stalled client, once it reads, gets the whole result.
        for mut c in stalled {
            let got = c.finish(Sha256::new(), 0);
            assert_eq!((got.rows, &got.digest), (want.rows, &want.digest));
        }
        // Portals suspended after a few rows of the 20 MB result hold their place in the scan,
        // not the result.
        std::thread::sleep(Duration::from_millis(500));
        let before = rss_kib(rw.pid());
        let mut portals = Vec::new();
        for shard in [0, 1] {
            for _ in 0..4 {
                let mut c = Raw::on_shard(rw, shard);
                assert!(c.query("begin").error.is_none());
                c.open_portal("p", "select * from wide", 5);
                assert_eq!(
                    c.execute_reply(&mut Sha256::new()),
                    (5, "suspended".to_string())
                );
                portals.push(c);
            }
        }
        let grown_mib = rss_kib(rw.pid()).saturating_sub(before) / 1024;
        eprintln!("server {i}: RSS grew {grown_mib} MiB with 8 suspended portals over 20 MB");
        assert!(
            grown_mib < 48,
            "server {i}: RSS grew {grown_mib} MiB for 8 suspended portals"
        );
        for mut c in portals {
            c.execute("p", 0);
            let (rows, tag) = c.execute_reply(&mut Sha256::new());
            assert_eq!((rows, tag.as_str()), (WIDE_ROWS as u64 - 5, "SELECT 1995"));
            c.sync();
            assert!(c.query("commit").error.is_none());
        }
        rw.assert_alive();
        let stall_us = shard_stats_value(rw, "executor_stall_us_max");
        eprintln!("server {i}: longest executor stall {stall_us} us");
    }
}

/// A reader that pauses mid-result keeps reading its snapshot while other sessions update,
/// delete and insert and compaction runs; its hold keeps the old versions only until it ends,
/// and a reader that vanishes mid-result leaks no hold.
#[test]
fn a_paused_result_reads_one_snapshot_and_releases_it() {
    let dir = TempDir::new("snap");
    let wide = wide_data(&dir.0);
    let rws = servers();
    for rw in &rws {
        load(|| rw.psql(), "wide", "id int primary key, v text", &wide);
    }
    let mut round = 0;
    for (label, server, shard) in PATHS {
        let rw = &rws[server];
        round += 1;
        let mut writer = Raw::connect(&rw.addr());
        let want = writer.query("select * from wide");
        let live = want.rows as i64;
        let mut reader = Raw::on_shard(rw, shard);
        reader.small_receive_buffer();
        reader.send_query("select * from wide");
        let mut digest = Sha256::new();
        reader.read_rows(10, &mut digest);
        // Writes while the result is paused: every row changes, some go, some come.
        let fill = ((b'a' + round as u8) as char)
            .to_string()
            .repeat(WIDE_BYTES);
        assert!(writer
            .query(&format!("update wide set v = '{fill}'"))
            .error
            .is_none());
        assert!(writer
            .query("delete from wide where id % 10 = 0")
            .error
            .is_none());
        let new_id = 1_000_000 + round;
        assert!(writer
            .query(&format!("insert into wide values ({new_id}, 'new')"))
            .error
            .is_none());
        // Compaction runs every 50 ms; the paused statement's hold keeps what it reads.
        std::thread::sleep(Duration::from_millis(300));
        let held = versions(rw, "wide");
        assert!(
            held > live,
            "{label}: {held} versions while a result reads {live} rows of the old snapshot"
        );
        let got = reader.finish(digest, 10);
        assert!(got.error.is_none(), "{label}: {:?}", got.error);
        assert_eq!(
            (got.rows, &got.digest, got.tag.as_str()),
            (
                want.rows,
                &want.digest,
                format!("SELECT {}", want.rows).as_str()
            ),
            "{label}: the result is not the snapshot it started at"
        );
        let now_live = writer.query("select id from wide").rows as i64;
        wait_for_versions(rw, now_live, label, "after the result ended");

        // A reader that vanishes mid-result: its hold goes with it.
        let mut gone = Raw::on_shard(rw, shard);
        gone.small_receive_buffer();
        gone.send_query("select * from wide");
        gone.read_rows(10, &mut Sha256::new());
        assert!(writer
            .query(&format!("update wide set v = '{fill}x'"))
            .error
            .is_none());
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            versions(rw, "wide") > now_live,
            "{label}: the hold was not taken"
        );
        common::wire::reset_on_close(&gone.stream);
        drop(gone);
        wait_for_versions(rw, now_live, label, "after the reader vanished");
    }
}

fn wait_for_versions(rw: &Ringwire, live: i64, label: &str, when: &str) {
    eventually_blocking_ok(
        Duration::from_secs(10),
        Duration::from_millis(100),
        &format!("{label}: no snapshot is held {when}"),
        || match versions(rw, "wide") {
            v if v == live => Ok(()),
            v => Err(format!("{v} versions of {live} live rows")),
        },
    );
}

/// statement_timeout and a CancelRequest end a result that is being sent between chunks:
/// the rows already sent, then ERROR 57014 worded as PostgreSQL words it (checked against
/// PostgreSQL 15 with the same slow reader), then ReadyForQuery; the session goes on.
#[test]
fn timeout_and_cancel_end_a_result_between_chunks() {
    let dir = TempDir::new("cancel");
    let wide = wide_data(&dir.0);
    let pg = Postgres::start();
    load(|| pg_psql(&pg), "wide", "id int primary key, v text", &wide);
    let rws = servers();
    for rw in &rws {
        load(|| rw.psql(), "wide", "id int primary key, v text", &wide);
    }
    let pg_addr = format!("127.0.0.1:{}", pg.port);
    let timed_out = |mut c: Raw| -> Reply {
        c.small_receive_buffer();
        assert!(c.query("set statement_timeout = 300").error.is_none());
        c.send_query("select * from wide");
        std::thread::sleep(Duration::from_millis(1000));
        let got = c.finish(Sha256::new(), 0);
        assert_eq!(c.query("select 1").rows, 1, "the session goes on");
        got
    };
    let cancelled = |mut c: Raw, addr: &str| -> Reply {
        c.small_receive_buffer();
        c.send_query("select * from wide");
        std::thread::sleep(Duration::from_millis(300));
        let mut cancel = TcpStream::connect(addr).unwrap();
        let mut msg = Vec::new();
        msg.extend_from_slice(&16u32.to_be_bytes());
        msg.extend_from_slice(&80877102u32.to_be_bytes());
        msg.extend_from_slice(&c.pid.to_be_bytes());
        msg.extend_from_slice(&c.secret.to_be_bytes());
        cancel.write_all(&msg).unwrap();
        drop(cancel);
        std::thread::sleep(Duration::from_millis(300));
        let got = c.finish(Sha256::new(), 0);
        assert_eq!(c.query("select 1").rows, 1, "the session goes on");
        got
    };
    let want_timeout = timed_out(Raw::connect(&pg_addr));
    let want_cancel = cancelled(Raw::connect(&pg_addr), &pg_addr);
    for want in [&want_timeout, &want_cancel] {
        assert!(want.rows > 0 && want.rows < WIDE_ROWS as u64, "{want:?}");
        assert_eq!(want.error.as_ref().unwrap().0, "57014");
    }
    for (label, server, shard) in PATHS {
        let rw = &rws[server];
        let got = timed_out(Raw::on_shard(rw, shard));
        assert!(
            got.rows > 0 && got.rows < WIDE_ROWS as u64,
            "{label}: {got:?}"
        );
        assert_eq!(got.error, want_timeout.error, "{label}");
        let got = cancelled(Raw::on_shard(rw, shard), &rw.addr());
        assert!(
            got.rows > 0 && got.rows < WIDE_ROWS as u64,
            "{label}: {got:?}"
        );
        assert_eq!(got.error, want_cancel.error, "{label}");
        let live = Raw::connect(&rw.addr()).query("select id from wide").rows as i64;
        wait_for_versions(rw, live, label, "after the cancelled results");
    }
}

/// What a round of the portal test writes between Executes.
fn round_writes(round: usize) -> [String; 2] {
    [
        format!("update narrow set a = a + 1 where id % 50 = {round}"),
        format!("delete from narrow where id % 70 = {round}"),
    ]
}

/// Execute with a row limit over a streaming plan resumes a scan instead of materializing the
/// result: the same suspensions, rows and tags as PostgreSQL 15 — also while other sessions
/// change the table between Executes (a portal reads the snapshot it started at) — in and
/// outside a transaction block.
#[test]
fn portals_with_a_row_limit_resume_their_scan_like_postgres() {
    let dir = TempDir::new("portal");
    let narrow = narrow_data(&dir.0);
    let pg = Postgres::start();
    let rws = servers();
    let columns = "id int primary key, a int, v text";
    load(|| pg_psql(&pg), "narrow", columns, &narrow);
    for rw in &rws {
        load(|| rw.psql(), "narrow", columns, &narrow);
    }
    // (portal transcript: rows and ending of each Execute, digest of all rows)
    let run = |c: &mut Raw, writer: &mut Raw, in_block: bool, round: usize| {
        if in_block {
            assert!(c.query("begin").error.is_none());
        }
        // Before any writes both tables are in load order; after them PostgreSQL's heap has
        // moved updated rows to its end (a scan's order is unspecified), so later rounds read
        // everything and compare the rows sorted.
        let sql = if round == 1 {
            "select id, a, v from narrow where a <> 3 limit 60000"
        } else {
            "select id, a, v from narrow where a <> 3"
        };
        let mut rows = Vec::new();
        let mut transcript = Vec::new();
        c.open_portal("p", sql, 7000);
        loop {
            let (n, end) = c.execute_rows(&mut rows);
            let finished = end != "suspended";
            transcript.push((n, end));
            if finished {
                break;
            }
            if transcript.len() == 2 {
                // Other sessions write between Executes; the portal must not see it.
                for sql in round_writes(round) {
                    let r = writer.query(&sql);
                    assert!(r.error.is_none(), "{r:?}");
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            c.execute("p", if transcript.len() == 5 { 60000 } else { 7000 });
        }
        c.sync();
        if in_block {
            assert!(c.query("commit").error.is_none());
        }
        if round > 1 {
            rows.sort();
        }
        let digest: String = Sha256::digest(rows.concat())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        (transcript, digest)
    };
    let pg_addr = format!("127.0.0.1:{}", pg.port);
    let mut round = 0;
    for in_block in [false, true] {
        for (label, server, shard) in PATHS {
            round += 1;
            let want = run(
                &mut Raw::connect(&pg_addr),
                &mut Raw::connect(&pg_addr),
                in_block,
                round,
            );
            let rw = &rws[server];
            let got = run(
                &mut Raw::on_shard(rw, shard),
                &mut Raw::connect(&rw.addr()),
                in_block,
                round,
            );
            assert_eq!(got, want, "{label}, in a block: {in_block}");
            // The other server gets the same writes, so all three hold the same rows.
            let mut other = Raw::connect(&rws[1 - server].addr());
            for sql in round_writes(round) {
                assert!(other.query(&sql).error.is_none());
            }
        }
    }
}

/// DDL that rebuilds the table (here CREATE INDEX) while a result is paused renumbers its
/// rows: the result cannot resume, and ends with 40001 instead of wrong rows. (PostgreSQL
/// would make the DDL wait for the reader; ringwire takes no reader locks.)
#[test]
fn a_table_rebuilt_under_a_paused_result_ends_it_with_40001() {
    let dir = TempDir::new("ddl");
    let wide = wide_data(&dir.0);
    let rws = servers();
    for rw in &rws {
        load(|| rw.psql(), "wide", "id int primary key, v text", &wide);
    }
    for (round, (label, server, shard)) in PATHS.into_iter().enumerate() {
        let rw = &rws[server];
        let mut reader = Raw::on_shard(rw, shard);
        reader.small_receive_buffer();
        reader.send_query("select * from wide");
        let mut digest = Sha256::new();
        reader.read_rows(10, &mut digest);
        let mut writer = Raw::connect(&rw.addr());
        let r = writer.query(&format!("create index wide_{round} on wide (id)"));
        assert!(r.error.is_none(), "{label}: {r:?}");
        let got = reader.finish(digest, 10);
        let (code, message) = got.error.clone().unwrap_or_default();
        assert_eq!(code, "40001", "{label}: {got:?}");
        assert!(
            message.contains("altered during the statement"),
            "{message}"
        );
        assert!(got.rows < WIDE_ROWS as u64, "{label}: {got:?}");
        assert_eq!(reader.query("select count(*) from wide").rows, 1);
        wait_for_versions(rw, WIDE_ROWS as i64, label, "after the failed result");
    }
}
