//! Upstream mode runs each client upstream as the user and database it logged in to ringwire
//! with (`--upstream-login client`, the default), as PgBouncer and PostgreSQL itself do.
//!
//! A real PostgreSQL 15 with roles that have SCRAM-SHA-256 passwords (alice, bob), an md5
//! password (carol) and none (dave), its pg_hba requiring scram/md5 for them; ringwire in front
//! with a users file copied from `pg_authid`. Checked with tokio-postgres through ringwire:
//! identity (`current_user`, `session_user`, `current_database()`), privileges (42501 with
//! PostgreSQL's message), isolation of pools under concurrent load (pipelining on and off),
//! every credential path (SCRAM pass-through, md5 hash, cleartext, trust), the errors when
//! ringwire has nothing the upstream accepts, and `--upstream-login url`.

mod common;

use std::time::{Duration, Instant};

use common::eventually_blocking_ok;
use common::postgres::Postgres;
use common::ringwire::Ringwire;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

/// The roles, their passwords, and the upstream's pg_hba.
fn upstream() -> Postgres {
    let pg = Postgres::start();
    pg.query_value(
        "set password_encryption = 'scram-sha-256'; \
         create role alice login password 'alice-pw'; \
         create role bob login password 'bob-pw'; \
         set password_encryption = 'md5'; \
         create role carol login password 'carol-pw'; \
         create role dave login; \
         create table only_alice (x int); insert into only_alice values (42); \
         grant select on only_alice to alice",
    );
    // Not in the transaction block one -c makes.
    pg.query_value("create database appdb owner alice");
    pg.write_hba(
        "local all all trust\n\
         host replication all 127.0.0.1/32 trust\n\
         host all postgres 127.0.0.1/32 trust\n\
         host all dave 127.0.0.1/32 trust\n\
         host all carol 127.0.0.1/32 md5\n\
         host all all 127.0.0.1/32 scram-sha-256\n",
    );
    pg.query_value("select pg_reload_conf()");
    pg
}

/// `name:rolpassword` for every role with a password, as an operator would copy them.
fn users_file(pg: &Postgres, dir: &std::path::Path) -> std::path::PathBuf {
    let out = std::process::Command::new("psql")
        .args(["-X", "-h", "127.0.0.1", "-p", &pg.port.to_string()])
        .args(["-U", "postgres", "-d", "postgres", "-At", "-c"])
        .arg("select rolname || ':' || rolpassword from pg_authid where rolpassword is not null")
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("alice:SCRAM-SHA-256$") && text.contains("carol:md5"),
        "{text}"
    );
    let path = dir.join("users");
    std::fs::write(&path, text).unwrap();
    path
}

struct Setup {
    pg: Postgres,
    dir: std::path::PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let pg = upstream();
        let dir = std::env::temp_dir().join(format!(
            "ringwire-upstream-users-{}-{}",
            std::process::id(),
            pg.port
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Setup { pg, dir }
    }

    /// ringwire with this hba (and the users file from pg_authid) in front of the upstream.
    fn ringwire(&self, hba: &str, extra: &[&str]) -> Ringwire {
        let users = users_file(&self.pg, &self.dir);
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let hba_path = self.dir.join(format!("hba-{n}"));
        std::fs::write(&hba_path, hba).unwrap();
        let url = self.pg.url();
        let mut args = vec![
            "--upstream",
            url.as_str(),
            "--hba-file",
            hba_path.to_str().unwrap(),
            "--users-file",
            users.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        Ringwire::start(&args)
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The upstream's backends of `users` (an SQL list: `'alice', 'bob'`).
fn backends(pg: &Postgres, users: &str) -> usize {
    pg.query_value(&format!(
        "select count(*) from pg_stat_activity where usename in ({users})"
    ))
    .parse()
    .unwrap()
}

/// Wait (at most `within`) until the upstream has `want` backends of `users`: a backend
/// exits a moment after ringwire closes its connection.
fn backends_settle_at(pg: &Postgres, users: &str, want: usize, within: Duration) {
    eventually_blocking_ok(
        within,
        Duration::from_millis(50),
        &format!("{users} have {want} connections"),
        || match backends(pg, users) {
            got if got == want => Ok(()),
            got => Err(format!("they have {got}")),
        },
    );
}

/// ringwire's rules: dave by trust, everyone else md5 (which, as in PostgreSQL, is SCRAM for
/// users whose secret is a SCRAM verifier).
const HBA_MD5: &str = "local all dave trust\n\
                       host all dave 0.0.0.0/0 trust\n\
                       local all all md5\n\
                       host all all 0.0.0.0/0 md5\n";

async fn try_connect(
    rw: &Ringwire,
    user: &str,
    password: &str,
    db: &str,
) -> Result<Client, tokio_postgres::Error> {
    let mut conn = format!(
        "host=127.0.0.1 port={} user={user} dbname={db} connect_timeout=20",
        rw.port
    );
    if !password.is_empty() {
        conn.push_str(&format!(" password={password}"));
    }
    let (client, connection) = tokio_postgres::connect(&conn, NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// The error of a login that must fail.
fn refused(result: Result<Client, tokio_postgres::Error>) -> tokio_postgres::Error {
    match result {
        Ok(_) => panic!("the login was accepted"),
        Err(e) => e,
    }
}

async fn connect(rw: &Ringwire, user: &str, password: &str, db: &str) -> Client {
    try_connect(rw, user, password, db)
        .await
        .unwrap_or_else(|e| panic!("connect as {user} to {db}: {e}"))
}

async fn identity(c: &Client) -> (String, String, String) {
    let row = c
        .query_one(
            "select current_user::text, session_user::text, current_database()::text",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

fn ids(user: &str, db: &str) -> (String, String, String) {
    (user.into(), user.into(), db.into())
}

fn code(e: &tokio_postgres::Error) -> String {
    e.code()
        .map_or_else(|| format!("no SQLSTATE: {e}"), |c| c.code().to_string())
}

/// The server's message (a FATAL at login is a database error too).
fn msg(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_run_upstream_as_themselves_with_scram_and_md5_pass_through() {
    let s = Setup::new();
    let rw = s.ringwire(HBA_MD5, &["--shards", "1", "--upstream-pool-size", "2"]);
    // SCRAM users (pass-through of the ClientKey), the md5 user (the stored hash) and the
    // trust user, each on the database it asked for.
    let alice = connect(&rw, "alice", "alice-pw", "appdb").await;
    let bob = connect(&rw, "bob", "bob-pw", "postgres").await;
    let carol = connect(&rw, "carol", "carol-pw", "postgres").await;
    let dave = connect(&rw, "dave", "", "postgres").await;
    assert_eq!(identity(&alice).await, ids("alice", "appdb"));
    assert_eq!(identity(&bob).await, ids("bob", "postgres"));
    assert_eq!(identity(&carol).await, ids("carol", "postgres"));
    assert_eq!(identity(&dave).await, ids("dave", "postgres"));
    // The startup ParameterStatus is the user's own, as PostgreSQL reports it.
    let shown = bob
        .simple_query("show session_authorization")
        .await
        .unwrap()
        .into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        });
    assert_eq!(shown.as_deref(), Some("bob"));

    // Privileges are the user's: alice may read her table (on the postgres database), bob is
    // refused with PostgreSQL's own error, word for word.
    let alice_pg = connect(&rw, "alice", "alice-pw", "postgres").await;
    let x: i32 = alice_pg
        .query_one("select x from only_alice", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(x, 42);
    let via = bob
        .query("select x from only_alice", &[])
        .await
        .unwrap_err();
    assert_eq!(via.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE));
    let direct = {
        let conn = format!(
            "host=127.0.0.1 port={} user=bob password=bob-pw dbname=postgres",
            s.pg.port
        );
        let (c, connection) = tokio_postgres::connect(&conn, NoTls).await.unwrap();
        tokio::spawn(async move {
            let _ = connection.await;
        });
        c.query("select x from only_alice", &[]).await.unwrap_err()
    };
    assert_eq!(
        via.as_db_error().unwrap().message(),
        direct.as_db_error().unwrap().message()
    );
    // Inside a transaction and after SET ROLE-free work, still the client's own.
    bob.batch_execute("begin").await.unwrap();
    assert_eq!(identity(&bob).await, ids("bob", "postgres"));
    bob.batch_execute("commit").await.unwrap();
    // What upstream saw: connections logged in as each user, none as another's.
    let seen = s.pg.query_value(
        "select string_agg(distinct usename || '@' || datname, ',' order by usename || '@' || datname) \
         from pg_stat_activity where usename in ('alice','bob','carol','dave')",
    );
    assert_eq!(
        seen,
        "alice@appdb,alice@postgres,bob@postgres,carol@postgres,dave@postgres"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_passwords_and_missing_credentials_are_clear_errors() {
    let s = Setup::new();
    s.pg.query_value("alter system set log_connections = on");
    s.pg.query_value("select pg_reload_conf()");
    let rw = s.ringwire(HBA_MD5, &["--shards", "1"]);
    // Warm up: one good login, so the log already has a line per upstream connection.
    let _ok = connect(&rw, "alice", "alice-pw", "postgres").await;
    std::thread::sleep(Duration::from_millis(300));
    let received = |log: &str| log.matches("connection received").count();
    let before = received(&s.pg.log());
    assert!(
        before > 0,
        "the upstream logs no connections: the check below would prove nothing"
    );
    // A wrong password is refused by ringwire itself, and nothing is tried upstream.
    let e = refused(try_connect(&rw, "bob", "not-bobs", "postgres").await);
    assert_eq!(code(&e), "28P01", "{e}");
    assert!(
        msg(&e).contains("password authentication failed for user \"bob\""),
        "{e}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        received(&s.pg.log()),
        before,
        "a refused client reached the upstream"
    );

    // A database the upstream does not have: its own error and SQLSTATE, at login.
    let e = refused(try_connect(&rw, "alice", "alice-pw", "nodb").await);
    assert_eq!(code(&e), "3D000", "{e}");
    assert!(msg(&e).contains("database \"nodb\" does not exist"), "{e}");

    // ringwire lets everyone in (trust) but holds only SCRAM verifiers: nothing answers the
    // upstream's SCRAM exchange for bob, so bob gets 28000 naming what is missing.
    let trusting = s.ringwire(
        "host all all 0.0.0.0/0 trust\nlocal all all trust\n",
        &["--shards", "1"],
    );
    let started = Instant::now();
    let e = refused(try_connect(&trusting, "bob", "", "postgres").await);
    assert_eq!(code(&e), "28000", "{e}");
    assert!(msg(&e).contains("SCRAM"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    // The md5 user's hash still answers the upstream's md5 challenge under trust.
    let carol = connect(&trusting, "carol", "", "postgres").await;
    assert_eq!(identity(&carol).await, ids("carol", "postgres"));

    // A verifier for the right password but another salt (made by ringwire from --user):
    // the client's proof is good for ringwire, but not for the upstream's verifier.
    let other_salt = s.ringwire(HBA_MD5, &["--shards", "1", "--user", "bob:bob-pw"]);
    let e = refused(try_connect(&other_salt, "bob", "bob-pw", "postgres").await);
    assert_eq!(code(&e), "28000", "{e}");
    assert!(msg(&e).contains("pg_authid"), "{e}");

    // An upstream that cannot be reached: 08006, not a hang.
    let mut gone = Setup::new();
    let rw_gone = gone.ringwire(HBA_MD5, &["--shards", "1"]);
    gone.pg.kill();
    let started = Instant::now();
    let e = refused(try_connect(&rw_gone, "alice", "alice-pw", "postgres").await);
    assert_eq!(code(&e), "08006", "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}

/// A client already logged in whose statement needs a new upstream connection that the
/// upstream refuses gets the upstream's own error, not 08006 (drivers and pools such as
/// pgjdbc and HikariCP take class 08 to mean the client's connection is broken), and its
/// connection keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_upstream_login_that_is_refused_gives_its_own_error() {
    let s = Setup::new();
    let rw = s.ringwire(HBA_MD5, &["--shards", "1"]);
    let holder = connect(&rw, "alice", "alice-pw", "postgres").await;
    // The pool's one connection is held by an open transaction...
    holder.batch_execute("begin; select 1").await.unwrap();
    // ...and the upstream allows alice no second one.
    s.pg.query_value("alter role alice connection limit 1");
    let other = connect(&rw, "alice", "alice-pw", "postgres").await;
    let e = other.simple_query("select 2").await.unwrap_err();
    assert_eq!(code(&e), "53300", "{e}");
    assert_eq!(msg(&e), "too many connections for role \"alice\"");
    // The same with the extended protocol.
    let e = other
        .query_one("select $1::int", &[&3i32])
        .await
        .unwrap_err();
    assert_eq!(code(&e), "53300", "{e}");
    // A password changed upstream: class 28 (which one depends on what no longer matches).
    s.pg.query_value(
        "alter role alice connection limit -1; \
         set password_encryption = 'scram-sha-256'; \
         alter role alice password 'rotated-pw'",
    );
    let e = other.simple_query("select 4").await.unwrap_err();
    assert!(code(&e).starts_with("28"), "{e}");
    // Neither client lost its connection: once the holder commits, its connection serves
    // the other.
    holder.batch_execute("commit").await.unwrap();
    let row = other.query_one("select 5::int", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 5);
    assert_eq!(identity(&holder).await, ids("alice", "postgres"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleartext_clients_log_in_upstream_with_the_password_they_sent() {
    let s = Setup::new();
    // --auth password: the client's cleartext password is checked against the verifier,
    // and kept in the session to answer the upstream's SCRAM (alice) or md5 (carol).
    let rw = s.ringwire(
        "host all all 0.0.0.0/0 password\nlocal all all password\n",
        &["--shards", "1"],
    );
    let alice = connect(&rw, "alice", "alice-pw", "appdb").await;
    assert_eq!(identity(&alice).await, ids("alice", "appdb"));
    let carol = connect(&rw, "carol", "carol-pw", "postgres").await;
    assert_eq!(identity(&carol).await, ids("carol", "postgres"));
    let e = refused(try_connect(&rw, "alice", "wrong", "appdb").await);
    assert_eq!(code(&e), "28P01", "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_login_keeps_everyone_as_the_url_user() {
    let s = Setup::new();
    let rw = s.ringwire(HBA_MD5, &["--shards", "1", "--upstream-login", "url"]);
    let alice = connect(&rw, "alice", "alice-pw", "appdb").await;
    assert_eq!(identity(&alice).await, ids("postgres", "postgres"));
    // Everyone is the URL's superuser: bob reads alice's table.
    let bob = connect(&rw, "bob", "bob-pw", "postgres").await;
    assert!(bob.query("select x from only_alice", &[]).await.is_ok());
}

/// Many clients of two users (and two databases) on one shard with a small pool, hammering
/// simple, extended and transactional statements at once: each always sees its own identity.
/// `cap`: `--upstream-max-connections`, below what the two pools would open.
async fn isolation_under_load(pipeline: &str, cap: Option<&str>) {
    let s = Setup::new();
    let mut args = vec![
        "--shards",
        "1",
        "--upstream-pool-size",
        "2",
        "--upstream-pipeline",
        pipeline,
    ];
    args.extend(
        cap.map(|n| ["--upstream-max-connections", n])
            .iter()
            .flatten(),
    );
    let rw = s.ringwire(HBA_MD5, &args);
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (user, pw, db) = if i % 2 == 0 {
            ("alice", "alice-pw", "appdb")
        } else {
            ("bob", "bob-pw", "postgres")
        };
        let c = connect(&rw, user, pw, db).await;
        tasks.push(tokio::spawn(async move {
            let want = ids(user, db);
            let stmt = c
                .prepare("select current_user::text, session_user::text, current_database()::text")
                .await
                .unwrap();
            for round in 0..60 {
                let got = match round % 3 {
                    0 => identity(&c).await,
                    1 => {
                        let r = c.query_one(&stmt, &[]).await.unwrap();
                        (r.get(0), r.get(1), r.get(2))
                    }
                    _ => {
                        let rows = c
                            .simple_query(
                                "begin; select current_user || ',' || session_user || ',' || current_database(); commit",
                            )
                            .await
                            .unwrap();
                        let v = rows
                            .iter()
                            .find_map(|m| match m {
                                tokio_postgres::SimpleQueryMessage::Row(r) => {
                                    r.get(0).map(str::to_string)
                                }
                                _ => None,
                            })
                            .unwrap();
                        let mut p = v.split(',').map(str::to_string);
                        (p.next().unwrap(), p.next().unwrap(), p.next().unwrap())
                    }
                };
                assert_eq!(got, want, "round {round} of a {user} client");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // At most pool-size connections per (user, database) on the one shard. Without a cap each
    // pool keeps what it opened; under one, a key whose clients finished first may have had
    // every connection closed for the other key's waiting clients.
    let least = if cap.is_some() { 0 } else { 1 };
    for (user, db) in [("alice", "appdb"), ("bob", "postgres")] {
        let n: usize = s
            .pg
            .query_value(&format!(
                "select count(*) from pg_stat_activity where usename = '{user}' and datname = '{db}'"
            ))
            .parse()
            .unwrap();
        assert!((least..=2).contains(&n), "{n} connections of {user}@{db}");
    }
    if let Some(cap) = cap {
        let n = backends(&s.pg, "'alice', 'bob'");
        assert!(
            n <= cap.parse().unwrap(),
            "{n} connections over a cap of {cap}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_never_mix_users_under_load() {
    isolation_under_load("off", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipes_never_mix_users_under_load() {
    isolation_under_load("on", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_under_a_connection_cap_never_mix_users_or_stall() {
    isolation_under_load("off", Some("3")).await;
}

/// `--upstream-max-connections` caps the connections to the upstream over every user and
/// database: a client that needs one when the cap is reached closes another user's idle
/// connection, or waits until one is given back, and the upstream never holds more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_holds_over_every_user() {
    let s = Setup::new();
    let rw = s.ringwire(
        HBA_MD5,
        &["--shards", "1", "--upstream-max-connections", "2"],
    );
    let settles_at =
        |users: &str, want: usize| backends_settle_at(&s.pg, users, want, Duration::from_secs(5));
    let all = "'alice', 'bob', 'carol'";
    let alice = connect(&rw, "alice", "alice-pw", "postgres").await;
    alice.batch_execute("begin; select 1").await.unwrap();
    let bob = connect(&rw, "bob", "bob-pw", "postgres").await;
    bob.batch_execute("begin; select 1").await.unwrap();
    settles_at(all, 2);
    // Both connections are in transactions: carol's login waits for one.
    let port = rw.port;
    let carol = tokio::spawn(async move {
        let conn =
            format!("host=127.0.0.1 port={port} user=carol password=carol-pw dbname=postgres");
        let (client, connection) = tokio_postgres::connect(&conn, NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!carol.is_finished(), "carol logged in over the cap");
    assert_eq!(backends(&s.pg, all), 2);
    // alice's connection, given back, is closed for carol (nobody of alice's waits for it).
    alice.batch_execute("commit").await.unwrap();
    let carol = tokio::time::timeout(Duration::from_secs(10), carol)
        .await
        .expect("carol still waits after alice's connection was given back")
        .unwrap();
    assert_eq!(identity(&carol).await, ids("carol", "postgres"));
    settles_at("'alice'", 0);
    settles_at(all, 2);
    // carol's connection is idle now and bob's in a transaction: alice's next statement
    // closes carol's at once rather than wait.
    let started = Instant::now();
    assert_eq!(identity(&alice).await, ids("alice", "postgres"));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    settles_at("'carol'", 0);
    settles_at(all, 2);
    bob.batch_execute("commit").await.unwrap();
    assert_eq!(identity(&carol).await, ids("carol", "postgres"));
    settles_at(all, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_or_statement_waiting_on_a_full_cap_times_out() {
    let s = Setup::new();
    let rw = s.ringwire(
        HBA_MD5,
        &[
            "--shards",
            "1",
            "--upstream-max-connections",
            "2",
            "--upstream-wait-timeout-secs",
            "1",
        ],
    );
    let alice = connect(&rw, "alice", "alice-pw", "postgres").await;
    let carol = connect(&rw, "carol", "carol-pw", "postgres").await;
    carol.batch_execute("select 1").await.unwrap();
    alice.batch_execute("begin; select 1").await.unwrap();
    let bob = connect(&rw, "bob", "bob-pw", "postgres").await;
    bob.batch_execute("begin; select 1").await.unwrap();
    // Both connections the cap allows are in transactions (carol's went to bob): carol's
    // statement waits for one, and a new user's login too, until the wait timeout.
    let started = Instant::now();
    let err = carol.batch_execute("select 1").await.unwrap_err();
    let waited = started.elapsed();
    assert_eq!(code(&err), "53300", "{err}");
    assert_eq!(
        msg(&err),
        "timed out after 1 s waiting for an upstream connection"
    );
    let detail = err
        .as_db_error()
        .and_then(|d| d.detail())
        .unwrap_or_default();
    assert!(
        detail.contains("All 2 of this shard's connections")
            && detail.contains("(--upstream-max-connections)"),
        "{detail}"
    );
    assert!(
        (Duration::from_secs(1)..Duration::from_secs(10)).contains(&waited),
        "{waited:?}"
    );
    let started = Instant::now();
    let err = refused(try_connect(&rw, "dave", "", "postgres").await);
    assert_eq!(code(&err), "53300", "{err}");
    assert_eq!(
        msg(&err),
        "timed out after 1 s waiting for an upstream connection"
    );
    assert!(started.elapsed() >= Duration::from_secs(1));
    // Once a transaction ends, both go on.
    alice.batch_execute("commit").await.unwrap();
    assert_eq!(identity(&carol).await, ids("carol", "postgres"));
    bob.batch_execute("commit").await.unwrap();
    let dave = connect(&rw, "dave", "", "postgres").await;
    assert_eq!(identity(&dave).await, ids("dave", "postgres"));
}

/// PgBouncer's `auth_query` against `pg_authid`, run as the URL's superuser.
const AUTH_QUERY: &str = "SELECT rolpassword FROM pg_authid WHERE rolname = $1 AND rolcanlogin";

impl Setup {
    /// ringwire with no users file: secrets come from the upstream through `auth_query`.
    fn ringwire_with_auth_query(&self, auth_query: &str) -> Ringwire {
        let hba_path = self.dir.join("hba-auth-query");
        std::fs::write(&hba_path, HBA_MD5).unwrap();
        let url = self.pg.url();
        Ringwire::start(&[
            "--upstream",
            &url,
            "--hba-file",
            hba_path.to_str().unwrap(),
            "--upstream-auth-query",
            auth_query,
        ])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_users_file_secrets_come_from_the_upstream_auth_query() {
    let s = Setup::new();
    let rw = s.ringwire_with_auth_query(AUTH_QUERY);
    // SCRAM (alice) and md5 (carol) users log in with their passwords, and run upstream as
    // themselves (SCRAM pass-through with the verifier the query read).
    let alice = connect(&rw, "alice", "alice-pw", "postgres").await;
    assert_eq!(identity(&alice).await, ids("alice", "postgres"));
    let carol = connect(&rw, "carol", "carol-pw", "appdb").await;
    assert_eq!(identity(&carol).await, ids("carol", "appdb"));
    // A wrong password and an unknown user get the same 28P01 as from PostgreSQL.
    for (user, password) in [("alice", "wrong"), ("carol", "wrong"), ("mallory", "x")] {
        let err = refused(try_connect(&rw, user, password, "postgres").await);
        assert_eq!(code(&err), "28P01", "{user}: {err}");
        assert_eq!(
            msg(&err),
            format!("password authentication failed for user \"{user}\"")
        );
    }
    // Nothing is cached: a password changed upstream counts from the next login.
    s.pg.query_value("alter role alice password 'alice-new'");
    let err = refused(try_connect(&rw, "alice", "alice-pw", "postgres").await);
    assert_eq!(code(&err), "28P01", "{err}");
    let alice2 = connect(&rw, "alice", "alice-new", "postgres").await;
    assert_eq!(identity(&alice2).await, ids("alice", "postgres"));
    // A role that may not log in has no secret for the query to find.
    s.pg.query_value("alter role bob nologin");
    let err = refused(try_connect(&rw, "bob", "bob-pw", "postgres").await);
    assert_eq!(code(&err), "28P01", "{err}");
    // A query the upstream rejects is a startup error that names it, not every client's FATAL.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ringwire"))
        .args(["--listen", "127.0.0.1:0", "--upstream", &s.pg.url()])
        .args([
            "--upstream-auth-query",
            "SELECT nope FROM pg_authid WHERE rolname = $1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--upstream-auth-query failed on 127.0.0.1:")
            && stderr.contains("column \"nope\" does not exist"),
        "{stderr}"
    );
    // One that starts failing later (here: its function is dropped) is a FATAL 28000 at login
    // that names the upstream's error, and the other logins go on.
    s.pg.query_value(
        "create function secret_of(name) returns text language sql security definer \
         as 'select rolpassword from pg_authid where rolname = $1 and rolcanlogin'",
    );
    let via_function = s.ringwire_with_auth_query("SELECT secret_of($1)");
    let carol2 = connect(&via_function, "carol", "carol-pw", "postgres").await;
    assert_eq!(identity(&carol2).await, ids("carol", "postgres"));
    s.pg.query_value("drop function secret_of(name)");
    let err = refused(try_connect(&via_function, "alice", "alice-new", "postgres").await);
    assert_eq!(code(&err), "28000", "{err}");
    assert!(
        msg(&err).starts_with("could not look up the password of user \"alice\" upstream")
            && msg(&err).contains("function secret_of(unknown) does not exist"),
        "{err}"
    );
    assert_eq!(identity(&carol2).await, ids("carol", "postgres"));
    // The connections the query used went back clean: alice still works on the first server.
    assert_eq!(identity(&alice).await, ids("alice", "postgres"));
}

#[test]
fn a_connection_cap_below_the_shard_count_is_a_startup_error() {
    let s = Setup::new();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ringwire"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--shards",
            "2",
            "--upstream",
            &s.pg.url(),
        ])
        .args(["--upstream-max-connections", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--upstream-max-connections 1 is less than the 2 shards"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_of_a_user_nobody_uses_are_closed() {
    let s = Setup::new();
    let rw = s.ringwire(
        HBA_MD5,
        &["--shards", "1", "--upstream-idle-timeout-secs", "1"],
    );
    let bob = connect(&rw, "bob", "bob-pw", "postgres").await;
    assert_eq!(identity(&bob).await, ids("bob", "postgres"));
    drop(bob);
    // bob's idle connection is closed.
    backends_settle_at(&s.pg, "'bob'", 0, Duration::from_secs(10));
    // A new client of bob's gets a fresh connection.
    let bob = connect(&rw, "bob", "bob-pw", "postgres").await;
    assert_eq!(identity(&bob).await, ids("bob", "postgres"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_reads_run_as_the_client_too() {
    let s = Setup::new();
    // The standby has the primary's roles, verifiers and pg_hba (copied by the base backup).
    let standby = Postgres::start_standby(&s.pg);
    let replica = standby.url();
    let rw = s.ringwire(HBA_MD5, &["--shards", "1", "--replica", &replica]);
    let alice = connect(&rw, "alice", "alice-pw", "postgres").await;
    let bob = connect(&rw, "bob", "bob-pw", "postgres").await;
    for _ in 0..50 {
        let row = alice
            .query_one("select current_user::text, x from only_alice", &[])
            .await
            .unwrap();
        assert_eq!(
            (row.get::<_, String>(0), row.get::<_, i32>(1)),
            ("alice".into(), 42)
        );
        let e = bob
            .query("select x from only_alice", &[])
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The reads that went to the standby ran there as their users, not as the URL's.
    let users_on_standby = standby.query_value(
        "select string_agg(distinct usename::text, ',' order by usename::text) from pg_stat_activity \
         where usename in ('alice', 'bob')",
    );
    assert_eq!(users_on_standby, "alice,bob");
    // A standby whose own pg_hba refuses one user stays in rotation for the others: carol's
    // reads run on the primary, alice's still on the standby, on the same connection (taking
    // the standby out of rotation would also close its idle connections).
    standby.write_hba(
        "local all all trust\n\
         host all postgres 127.0.0.1/32 trust\n\
         host all carol 127.0.0.1/32 reject\n\
         host all all 127.0.0.1/32 scram-sha-256\n",
    );
    standby.query_value("select pg_reload_conf()");
    let carol = connect(&rw, "carol", "carol-pw", "postgres").await;
    let mut alice_backends = std::collections::HashSet::new();
    for _ in 0..10 {
        assert_eq!(
            on_standby(&carol).await,
            (false, None),
            "carol read on the standby"
        );
        let (standby_read, pid) = on_standby(&alice).await;
        assert!(
            standby_read,
            "the standby's refusal of carol took it out of rotation for alice"
        );
        alice_backends.insert(pid);
    }
    assert_eq!(alice_backends.len(), 1, "{alice_backends:?}");
}

/// Whether `c`'s next read runs on the standby, and there the backend's pid.
async fn on_standby(c: &Client) -> (bool, Option<i32>) {
    let row = c
        .query_one("select pg_is_in_recovery(), pg_backend_pid()", &[])
        .await
        .unwrap();
    let standby: bool = row.get(0);
    (standby, standby.then(|| row.get(1)))
}

/// `RESET ALL` does not undo `role` or `session_authorization`, so a pooled connection must
/// never carry them to the next client, however the client set them: `SET SESSION ROLE`,
/// `SET "Role" = …`, or the startup packet (`options=-c role=…`). With `--upstream-login url`
/// every client shares one pool (the worst case: the URL's user is the superuser); one shard
/// and one connection make every client reuse the connection the previous one had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_one_client_sets_never_reaches_the_next() {
    let s = Setup::new();
    let rw = s.ringwire(
        HBA_MD5,
        &[
            "--shards",
            "1",
            "--upstream-login",
            "url",
            "--upstream-pool-size",
            "1",
        ],
    );
    for set in [
        "set session role alice",
        "set \"Role\" = alice",
        "set session_authorization = alice",
    ] {
        let a = connect(&rw, "bob", "bob-pw", "postgres").await;
        a.batch_execute(set)
            .await
            .unwrap_or_else(|e| panic!("{set}: {e}"));
        assert_eq!(identity(&a).await.0, "alice", "{set} took effect");
        drop(a);
        let b = connect(&rw, "bob", "bob-pw", "postgres").await;
        assert_eq!(
            identity(&b).await,
            ids("postgres", "postgres"),
            "after {set}"
        );
    }
    let conn = format!(
        "host=127.0.0.1 port={} user=bob password=bob-pw dbname=postgres options='-c role=alice'",
        rw.port
    );
    let (a, connection) = tokio_postgres::connect(&conn, NoTls).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    assert_eq!(
        identity(&a).await.0,
        "alice",
        "the startup role took effect"
    );
    drop(a);
    let b = connect(&rw, "bob", "bob-pw", "postgres").await;
    assert_eq!(
        identity(&b).await,
        ids("postgres", "postgres"),
        "after a startup role"
    );
}

/// A session pinned from its startup (here by a startup `role`, which every login checks
/// upstream) keeps the connection its login was checked on: one upstream login per client,
/// as a direct client has, counted in PostgreSQL's own log. Before, that connection was
/// closed and the session's first statement logged in again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_pinned_at_login_keeps_the_connection_it_was_checked_on() {
    let s = Setup::new();
    s.pg.query_value("grant alice to bob");
    s.pg.query_value("alter system set log_connections = on");
    s.pg.query_value("select pg_reload_conf()");
    let upstream_logins = || {
        s.pg.log()
            .matches("connection authorized: user=bob")
            .count()
    };
    // (The reload reaches new backends once the postmaster has read it: wait for one of ours.)
    common::eventually_blocking(
        Duration::from_secs(10),
        Duration::from_millis(50),
        "log_connections takes effect",
        || {
            s.pg.query_value("select 1");
            s.pg.log().contains("connection authorized: user=postgres")
        },
    );
    let rw = s.ringwire(HBA_MD5, &["--shards", "1"]);
    let conn = format!(
        "host=127.0.0.1 port={} user=bob password=bob-pw dbname=postgres options='-c role=alice'",
        rw.port
    );
    for round in 1..=2 {
        let (a, connection) = tokio_postgres::connect(&conn, NoTls).await.unwrap();
        let task = tokio::spawn(async move {
            let _ = connection.await;
        });
        assert_eq!(
            identity(&a).await.0,
            "alice",
            "the startup role took effect"
        );
        a.batch_execute("select 1; begin; select 2; commit")
            .await
            .unwrap();
        drop(a);
        task.await.unwrap();
        // The log line is written as the backend starts; no backend of this client's may
        // start after its statements ran, so the count is final once they answered.
        assert_eq!(
            upstream_logins(),
            round,
            "upstream logins after {round} client(s)"
        );
    }
}
