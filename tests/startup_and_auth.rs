//! Startup checks (each a clear sentence and a non-zero exit), password authentication and the
//! connection limit, against the real binary.

mod common;

use std::process::Command;

use common::ringwire::Ringwire;
use tokio_postgres::{error::SqlState, NoTls};

fn ringwire_fails(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ringwire"))
        .args(args)
        .output()
        .expect("run ringwire");
    assert!(
        !out.status.success(),
        "ringwire {args:?} should have refused to start"
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !stderr.contains("panicked"),
        "ringwire {args:?} panicked: {stderr}"
    );
    stderr
}

#[test]
fn bad_settings_are_one_clear_sentence() {
    let e = ringwire_fails(&["--listen", "127.0.0.1:0", "--cores", "4000"]);
    assert!(e.contains("--cores lists CPU 4000"), "{e}");
    let e = ringwire_fails(&["--listen", "127.0.0.1:0", "--cores", "0-x"]);
    assert!(e.contains("invalid CPU list"), "{e}");
    // A shard fires no timers while it polls: an hour-long poll would stall them.
    let e = ringwire_fails(&["--listen", "127.0.0.1:0", "--idle-spin-us", "20000"]);
    assert!(e.contains("20000 is not in 0..=10000"), "{e}");
    let e = ringwire_fails(&[
        "--listen",
        "127.0.0.1:0",
        "--shards",
        "1",
        "--io-memory-bytes",
        "1099511627776",
    ]);
    assert!(e.contains("RLIMIT_MEMLOCK"), "{e}");
    let e = ringwire_fails(&["--listen", "127.0.0.1:0", "--auth", "password"]);
    assert!(e.contains("--auth password needs at least one user"), "{e}");
    let e = ringwire_fails(&["--listen", "not-an-address"]);
    assert!(e.contains("--listen"), "{e}");
    let e = ringwire_fails(&["--listen", "127.0.0.1:0", "--max-message-bytes", "10"]);
    assert!(e.contains("too small"), "{e}");
    // Address in use: a second server on the first one's port.
    let rw = Ringwire::start(&["--shards", "1"]);
    let blocker = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = blocker.local_addr().unwrap().port();
    let e = ringwire_fails(&["--listen", &format!("127.0.0.1:{port}"), "--shards", "1"]);
    assert!(
        e.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{e}"
    );
    drop(rw);
}

#[tokio::test]
async fn password_authentication() {
    let dir = std::env::temp_dir().join(format!("ringwire-users-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let users = dir.join("users");
    // bob's secret is PostgreSQL's md5 form, md5("hunter2" || "bob"): the file never holds
    // plaintext (tests/auth.rs covers SCRAM verifiers and `ringwire passwd`).
    std::fs::write(
        &users,
        "# test users\nbob:md5a2cc14bcc08bcb211f578153967abd6d\n",
    )
    .unwrap();
    let rw = Ringwire::start(&[
        "--auth",
        "password",
        "--user",
        "alice:s3cret",
        "--users-file",
        users.to_str().unwrap(),
    ]);
    for (user, password) in [("alice", "s3cret"), ("bob", "hunter2")] {
        let conn = format!("{} password={password}", rw.connection_string(user));
        let (client, c) = tokio_postgres::connect(&conn, NoTls)
            .await
            .unwrap_or_else(|e| panic!("{user}: {e}"));
        tokio::spawn(c);
        let who: String = client
            .query_one("select current_user::text", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(who, user);
    }
    // (An empty cleartext password gets PostgreSQL's own "empty password returned by client";
    // tests/auth.rs compares that case with PostgreSQL.)
    for (user, password) in [("alice", "wrong"), ("mallory", "s3cret"), ("bob", "s3cret")] {
        let conn = format!("{} password='{password}'", rw.connection_string(user));
        let err = tokio_postgres::connect(&conn, NoTls)
            .await
            .err()
            .unwrap_or_else(|| panic!("{user}/{password} got in"));
        assert_eq!(
            err.code(),
            Some(&SqlState::INVALID_PASSWORD),
            "{user}: {err}"
        );
        let message = err
            .as_db_error()
            .map(|e| e.message().to_string())
            .unwrap_or_default();
        assert_eq!(
            message,
            format!("password authentication failed for user \"{user}\"")
        );
    }
    // psql with PGPASSWORD, as an operator would.
    let out = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &rw.port.to_string(),
            "-U",
            "alice",
            "-X",
            "-At",
            "-c",
            "select 41 + 1",
        ])
        .env("PGPASSWORD", "s3cret")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "42\n", "{out:?}");
}

#[tokio::test]
async fn connections_over_the_limit_get_53300() {
    let rw = Ringwire::start(&["--max-connections", "3"]);
    let mut clients = Vec::new();
    for _ in 0..3 {
        let (client, c) = tokio_postgres::connect(&rw.connection_string("postgres"), NoTls)
            .await
            .unwrap();
        tokio::spawn(c);
        clients.push(client);
    }
    let err = tokio_postgres::connect(&rw.connection_string("postgres"), NoTls)
        .await
        .err()
        .expect("4th connection refused");
    assert_eq!(err.code(), Some(&SqlState::TOO_MANY_CONNECTIONS), "{err}");
    // Closing one frees its slot.
    drop(clients.pop());
    let mut ok = false;
    for _ in 0..50 {
        if let Ok((client, c)) =
            tokio_postgres::connect(&rw.connection_string("postgres"), NoTls).await
        {
            tokio::spawn(c);
            assert_eq!(
                client
                    .query_one("select 1", &[])
                    .await
                    .unwrap()
                    .get::<_, i32>(0),
                1
            );
            ok = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(ok, "a freed slot was never reusable");
    for c in &clients {
        assert_eq!(
            c.query_one("select 1", &[]).await.unwrap().get::<_, i32>(0),
            1
        );
    }
}

#[tokio::test]
async fn startup_parameters_apply_and_bad_ones_are_fatal() {
    let rw = Ringwire::start(&[]);
    let conn = format!(
        "{} application_name=app1 options='-c extra_float_digits=0 --TimeZone=Europe/Berlin'",
        rw.connection_string("postgres")
    );
    let (client, c) = tokio_postgres::connect(&conn, NoTls).await.unwrap();
    tokio::spawn(c);
    let row = client.query_one("select current_setting('application_name'), current_setting('extra_float_digits'), current_setting('TimeZone')", &[]).await.unwrap();
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, String>(1),
            row.get::<_, String>(2)
        ),
        ("app1".into(), "0".into(), "Europe/Berlin".into())
    );
    let conn = format!(
        "{} options='-c no_such_setting=1'",
        rw.connection_string("postgres")
    );
    let err = tokio_postgres::connect(&conn, NoTls)
        .await
        .err()
        .expect("unknown setting refused");
    assert_eq!(err.code(), Some(&SqlState::UNDEFINED_OBJECT), "{err}");
}

/// A startup packet that names a parameter twice gets the last value, as at PostgreSQL (here
/// the user, the database and a setting; before, the first won). A replication connection
/// (`replication=true` or `database`, as pg_basebackup and logical replication clients ask)
/// is refused with one clear FATAL, where before it was served as a plain session, and an
/// invalid value gets PostgreSQL's FATAL 22023. Each compared with PostgreSQL's own reply.
#[tokio::test]
async fn startup_packets_are_read_as_postgres_reads_them() {
    use common::wire::{error_field, read_messages, simple_query, startup_message};
    use tokio::io::AsyncWriteExt;
    let pg = common::postgres::Postgres::start();
    let rw = Ringwire::start(&[]);
    let pg_addr = format!("127.0.0.1:{}", pg.port);
    // The first reply to `params` on `addr`, then, if logged in, the row of `sql`.
    async fn login(addr: &str, params: &[(&str, &str)], sql: &str) -> Result<String, String> {
        let mut raw = tokio::net::TcpStream::connect(addr).await.unwrap();
        raw.write_all(&startup_message(params)).await.unwrap();
        let login = read_messages(&mut raw).await;
        match login.last() {
            Some((b'Z', _)) => {}
            Some((b'E', body)) => {
                return Err(format!(
                    "{} {} {}",
                    error_field(body, b'S'),
                    error_field(body, b'C'),
                    error_field(body, b'M')
                ))
            }
            other => panic!("{other:?}"),
        }
        raw.write_all(&simple_query(sql)).await.unwrap();
        let replies = read_messages(&mut raw).await;
        let row = replies.iter().find(|m| m.0 == b'D').expect("a row");
        Ok(String::from_utf8_lossy(&row.1[2..]).replace(|c: char| c.is_control(), "|"))
    }
    let twice = [
        ("user", "nosuchuser"),
        ("user", "postgres"),
        ("database", "nosuchdb"),
        ("database", "postgres"),
        ("application_name", "first"),
        ("application_name", "last"),
    ];
    let sql = "select current_user || ',' || current_database() || ',' || \
               current_setting('application_name')";
    let at_pg = login(&pg_addr, &twice, sql).await;
    assert!(
        at_pg
            .as_ref()
            .is_ok_and(|r| r.ends_with("postgres,postgres,last")),
        "{at_pg:?}"
    );
    assert_eq!(login(&rw.addr(), &twice, sql).await, at_pg);
    for (mode, fatal) in [
        (
            "true",
            "FATAL 0A000 ringwire does not serve replication connections",
        ),
        (
            "database",
            "FATAL 0A000 ringwire does not serve replication connections",
        ),
        (
            "ON",
            "FATAL 0A000 ringwire does not serve replication connections",
        ),
        (
            "xyz",
            "FATAL 22023 invalid value for parameter \"replication\": \"xyz\"",
        ),
    ] {
        let params = [("user", "postgres"), ("replication", mode)];
        let got = login(&rw.addr(), &params, "select 1").await;
        assert_eq!(got, Err(fatal.to_string()), "replication={mode}");
        if mode == "xyz" {
            assert_eq!(login(&pg_addr, &params, "select 1").await, got);
        }
    }
    for mode in ["false", "off", "0", "n"] {
        let params = [("user", "postgres"), ("replication", mode)];
        let at_pg = login(&pg_addr, &params, "select 1").await;
        assert!(at_pg.is_ok(), "{at_pg:?}");
        assert_eq!(
            login(&rw.addr(), &params, "select 1").await,
            at_pg,
            "replication={mode}"
        );
    }
}

/// The scheduling policy (`/proc` stat field 41) of each of `pid`'s threads named shard-*.
fn shard_policies(pid: u32) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap();
        if !comm.starts_with("shard-") {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap();
        // Fields after the parenthesised name start at field 3; policy is field 41.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let policy = after.split(' ').nth(41 - 3).unwrap().parse().unwrap();
        out.push((comm.trim().to_string(), policy));
    }
    out
}

/// `--sched-batch on`: every shard's executor thread is SCHED_BATCH, so a shard woken by a
/// client does not preempt the thread running on its core (docs/PERF.md, "Session 11"); by
/// default no shard thread is. Both serve queries.
#[tokio::test]
async fn shard_threads_run_as_sched_batch_when_asked() {
    const SCHED_OTHER: u32 = 0;
    const SCHED_BATCH: u32 = 3;
    for (flags, want) in [
        (&["--sched-batch", "on"][..], SCHED_BATCH),
        (&[][..], SCHED_OTHER),
    ] {
        let mut args = vec!["--shards", "2"];
        args.extend_from_slice(flags);
        let rw = Ringwire::start(&args);
        let (client, conn) = tokio_postgres::connect(&rw.connection_string("postgres"), NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let row = client.query_one("select 1::int4", &[]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), 1);
        // A shard that served nobody yet may still be naming its thread (CI once listed only
        // shard 1's), or be named and not yet have set its policy, which its executor does
        // first thing on that thread (CI once saw shard 1's at 0): look again for a while.
        let mut policies = shard_policies(rw.pid());
        for _ in 0..250 {
            if (0..2).all(|k| {
                policies
                    .iter()
                    .any(|(n, p)| n.starts_with(&format!("shard-{k}-")) && *p == want)
            }) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            policies = shard_policies(rw.pid());
        }
        for shard in 0..2 {
            let name = format!("shard-{shard}-");
            assert!(
                policies
                    .iter()
                    .any(|(n, p)| n.starts_with(&name) && *p == want),
                "{flags:?}: no thread {name}* with policy {want}: {policies:?}"
            );
        }
        assert!(
            policies
                .iter()
                .all(|(_, p)| *p != SCHED_BATCH || want == SCHED_BATCH),
            "{flags:?}: {policies:?}"
        );
    }
}
