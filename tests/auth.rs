//! Authentication against the real binary, checked against PostgreSQL 15 itself: every method
//! with right, wrong and empty passwords and unknown users, host-based rules, SIGHUP reloads,
//! `ringwire passwd`, and verifiers that PostgreSQL made. Clients: tokio-postgres, psql and
//! pgbench.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::eventually;
use common::postgres::Postgres;
use common::ringwire::Ringwire;
use tokio_postgres::{Client, NoTls};

/// How a connection attempt ended: Ok, or the server's SQLSTATE and message.
type Outcome = Result<(), (String, String)>;

async fn connect(port: u16, user: &str, password: &str, dbname: &str) -> Outcome {
    let conn = format!(
        "host=127.0.0.1 port={port} user={user} dbname={dbname} password='{password}' connect_timeout=10"
    );
    match tokio_postgres::connect(&conn, NoTls).await {
        Ok((client, connection)) => {
            tokio::spawn(connection);
            let one: i32 = client
                .query_one("select 1", &[])
                .await
                .unwrap_or_else(|e| panic!("{user} got in but cannot query: {e}"))
                .get(0);
            assert_eq!(one, 1);
            Ok(())
        }
        Err(e) => match e.as_db_error() {
            Some(db) => Err((db.code().code().to_string(), db.message().to_string())),
            None => Err(("client".into(), e.to_string())),
        },
    }
}

/// psql's exit status and the FATAL line it printed (the part before it names the port).
fn psql(port: u16, user: &str, password: &str) -> (bool, String) {
    let out = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", user])
        .args(["-d", "postgres", "-X", "-At", "-w", "-c", "select 41 + 1"])
        .env("PGPASSWORD", password)
        .output()
        .expect("run psql (apt-get install postgresql-client)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let fatal = stderr
        .find("FATAL:")
        .map(|i| stderr[i..].lines().next().unwrap_or("").to_string())
        .unwrap_or_default();
    if out.status.success() {
        assert_eq!(String::from_utf8_lossy(&out.stdout), "42\n");
    }
    (out.status.success(), fatal)
}

async fn admin(pg: &Postgres) -> Client {
    let (client, connection) = tokio_postgres::connect(&pg.connection_string(), NoTls)
        .await
        .expect("connect to PostgreSQL as postgres");
    tokio::spawn(connection);
    client
}

/// Replace PostgreSQL's pg_hba.conf (written by the server itself, via COPY) and reload it.
async fn set_pg_hba(admin: &Client, lines: &[&str]) {
    let path: String = admin
        .query_one("select current_setting('hba_file')", &[])
        .await
        .unwrap()
        .get(0);
    let array = lines
        .iter()
        .map(|l| format!("'{}'", l.replace('\'', "''")))
        .collect::<Vec<_>>()
        .join(",");
    admin
        .batch_execute(&format!(
            "copy (select unnest(array[{array}])) to '{path}'; select pg_reload_conf();"
        ))
        .await
        .unwrap();
    // The postmaster re-reads the file on the SIGHUP pg_reload_conf sends; new backends fork
    // from it. It takes milliseconds; wait generously.
    tokio::time::sleep(Duration::from_millis(1000)).await;
}

/// Roles on PostgreSQL with the given password_encryption; returns `name:rolpassword` lines.
async fn create_roles(admin: &Client, roles: &[(&str, &str, &str)]) -> String {
    let mut lines = String::new();
    for (name, password, encryption) in roles {
        admin
            .batch_execute(&format!(
                "set password_encryption = '{encryption}'; create role {name} login password '{password}'"
            ))
            .await
            .unwrap();
        let secret: String = admin
            .query_one(
                "select rolpassword from pg_authid where rolname = $1",
                &[name],
            )
            .await
            .unwrap()
            .get(0);
        lines.push_str(&format!("{name}:{secret}\n"));
    }
    lines
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ringwire-auth-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(path: &Path, text: &str) -> String {
    std::fs::write(path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// `ringwire passwd [--md5] USER` with the password on stdin.
fn passwd(user: &str, password: &str, md5: bool) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ringwire"));
    cmd.arg("passwd");
    if md5 {
        cmd.arg("--md5");
    }
    let out = common::output_with_stdin(cmd.arg(user), format!("{password}\n").as_bytes());
    assert!(out.status.success(), "ringwire passwd {user}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Every method, on PostgreSQL and on ringwire with PostgreSQL's own verifiers in its users
/// file: the same outcome, SQLSTATE and message for each user and password, with
/// tokio-postgres and with psql.
#[tokio::test]
async fn every_method_behaves_as_postgres_does() {
    let pg = Postgres::start();
    let admin = admin(&pg).await;
    // m has an md5 secret, s a SCRAM verifier; nobody does not exist.
    let users = create_roles(
        &admin,
        &[("m", "mpw", "md5"), ("s", "spw", "scram-sha-256")],
    )
    .await;
    assert!(users.contains("m:md5") && users.contains("s:SCRAM-SHA-256$4096:"));
    let dir = temp_dir("methods");
    let users_file = write(&dir.join("users"), &users);
    let cases = [
        ("m", "mpw"),
        ("m", "wrong"),
        ("m", ""),
        ("s", "spw"),
        ("s", "wrong"),
        ("s", ""),
        ("nobody", "spw"),
    ];
    // What PostgreSQL does, spelled out, so the comparison cannot pass by both being broken.
    let expected_ok = |method: &str, user: &str, password: &str| match (method, user, password) {
        (_, "m", "mpw") => method != "scram-sha-256", // md5 secrets cannot do SCRAM
        (_, "s", "spw") => true,                      // md5 runs SCRAM for a SCRAM verifier
        _ => false,
    };
    for method in ["password", "md5", "scram-sha-256"] {
        set_pg_hba(
            &admin,
            &[
                "host all postgres 127.0.0.1/32 trust",
                &format!("host all all 127.0.0.1/32 {method}"),
            ],
        )
        .await;
        let rw = Ringwire::start(&["--auth", method, "--users-file", &users_file]);
        for (user, password) in cases {
            let want = connect(pg.port, user, password, "postgres").await;
            let got = connect(rw.port, user, password, "postgres").await;
            assert_eq!(got, want, "--auth {method}, {user}/{password:?}");
            assert_eq!(
                got.is_ok(),
                expected_ok(method, user, password),
                "--auth {method}, {user}/{password:?}: {got:?}"
            );
            if let Err((code, message)) = &got {
                // Wrong password and unknown user are indistinguishable.
                if !password.is_empty() || method != "password" {
                    assert_eq!(code, "28P01");
                    assert_eq!(
                        message,
                        &format!("password authentication failed for user \"{user}\"")
                    );
                }
            }
            if !password.is_empty() {
                // libpq treats an empty password as none; it never sends one.
                assert_eq!(
                    psql(rw.port, user, password),
                    psql(pg.port, user, password),
                    "psql, --auth {method}, {user}/{password:?}"
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Host-based rules: the same file on PostgreSQL and ringwire gives the same outcomes: first
/// match wins, a CIDR that does not contain the client is skipped, `reject`, and no match.
#[tokio::test]
async fn hba_rules_behave_as_postgres_does() {
    let pg = Postgres::start();
    let admin = admin(&pg).await;
    let users = create_roles(
        &admin,
        &[
            ("alice", "apw", "scram-sha-256"),
            ("bob", "bpw", "md5"),
            ("carol", "cpw", "scram-sha-256"),
        ],
    )
    .await;
    admin.batch_execute("create database db1").await.unwrap();
    let rules = [
        "# ringwire and PostgreSQL read this same file",
        "host all postgres 127.0.0.1/32 trust",
        "host db1 all 127.0.0.1/32 reject",
        "host all alice 10.0.0.0/8 trust   # not the client's network: skipped",
        "host all alice,bob 127.0.0.0/8 scram-sha-256",
        "hostssl all carol 0.0.0.0/0 trust # no TLS: never matches",
        "hostnossl postgres carol 127.0.0.1 255.255.255.255 password",
        "host all bob 127.0.0.1/32 trust   # shadowed by the scram rule above",
    ];
    set_pg_hba(&admin, &rules).await;
    let dir = temp_dir("hba");
    let hba = write(&dir.join("hba"), &rules.join("\n"));
    let users_file = write(&dir.join("users"), &users);
    let rw = Ringwire::start(&["--hba-file", &hba, "--users-file", &users_file]);
    let cases = [
        ("alice", "apw", "postgres", true),
        ("alice", "x", "postgres", false),
        // bob's md5 secret cannot pass scram-sha-256, and the later trust rule is not reached.
        ("bob", "bpw", "postgres", false),
        ("carol", "cpw", "postgres", true),
        ("carol", "x", "postgres", false),
        ("alice", "apw", "db1", false),       // reject
        ("carol", "cpw", "db1", false),       // reject
        ("dave", "x", "postgres", false),     // no entry
        ("carol", "cpw", "template1", false), // no entry
    ];
    for (user, password, db, ok) in cases {
        let want = connect(pg.port, user, password, db).await;
        let got = connect(rw.port, user, password, db).await;
        assert_eq!(got, want, "{user}/{password} to {db}");
        assert_eq!(got.is_ok(), ok, "{user}/{password} to {db}: {got:?}");
    }
    assert_eq!(
        connect(rw.port, "dave", "x", "postgres").await,
        Err((
            "28000".into(),
            "no pg_hba.conf entry for host \"127.0.0.1\", user \"dave\", database \"postgres\", no encryption".into()
        ))
    );
    assert_eq!(
        connect(rw.port, "alice", "apw", "db1").await,
        Err((
            "28000".into(),
            "pg_hba.conf rejects connection for host \"127.0.0.1\", user \"alice\", database \"db1\", no encryption".into()
        ))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `local` rules are for Unix-socket clients, `host` rules for TCP ones, and `--auth` covers
/// both.
#[tokio::test]
async fn local_rules_apply_to_unix_socket_clients() {
    let dir = temp_dir("local");
    let socket_dir = dir.join("sock");
    std::fs::create_dir_all(&socket_dir).unwrap();
    let socket_dir = socket_dir.to_str().unwrap();
    let hba = write(
        &dir.join("hba"),
        "local all all scram-sha-256\nhost all all all reject\n",
    );
    let rw = Ringwire::start(&[
        "--hba-file",
        &hba,
        "--user",
        "uma:uma-pw",
        "--unix-socket-dir",
        socket_dir,
    ]);
    let over_unix = |password: &str| {
        format!(
            "host={socket_dir} port={} user=uma dbname=postgres password={password}",
            rw.port
        )
    };
    let (client, connection) = tokio_postgres::connect(&over_unix("uma-pw"), NoTls)
        .await
        .expect("scram over the Unix socket");
    tokio::spawn(connection);
    assert_eq!(
        client
            .query_one("select 1", &[])
            .await
            .unwrap()
            .get::<_, i32>(0),
        1
    );
    let err = tokio_postgres::connect(&over_unix("wrong"), NoTls)
        .await
        .err()
        .unwrap();
    assert_eq!(err.code().unwrap().code(), "28P01", "{err}");
    assert_eq!(
        connect(rw.port, "uma", "uma-pw", "postgres").await,
        Err((
            "28000".into(),
            "pg_hba.conf rejects connection for host \"127.0.0.1\", user \"uma\", database \"postgres\", no encryption".into()
        ))
    );
    drop(rw);
    // Without a rule for them, Unix-socket clients get PostgreSQL's "[local]" refusal.
    let hba = write(&dir.join("hba2"), "host all all all trust\n");
    let rw = Ringwire::start(&["--hba-file", &hba, "--unix-socket-dir", socket_dir]);
    let err = tokio_postgres::connect(
        &format!(
            "host={socket_dir} port={} user=uma dbname=postgres",
            rw.port
        ),
        NoTls,
    )
    .await
    .err()
    .unwrap();
    assert_eq!(
        err.as_db_error().map(|e| e.message()),
        Some("no pg_hba.conf entry for host \"[local]\", user \"uma\", database \"postgres\", no encryption")
    );
    drop(rw);
    // --auth is one rule for both kinds of client.
    let rw = Ringwire::start(&["--auth", "trust", "--unix-socket-dir", socket_dir]);
    let (client, connection) = tokio_postgres::connect(
        &format!(
            "host={socket_dir} port={} user=uma dbname=postgres",
            rw.port
        ),
        NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    client.query_one("select 1", &[]).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A hand-driven SASL exchange over a raw socket, for the paths stock clients never take.
struct RawSasl {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
}

impl RawSasl {
    /// Connect as `user` and read AuthenticationSASL.
    async fn start(port: u16, user: &str) -> RawSasl {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let mut raw = RawSasl {
            stream,
            buf: Vec::new(),
        };
        let mut out = Vec::new();
        protocol::frontend::encode_startup(
            &mut out,
            protocol::frontend::PROTOCOL_3_0,
            &[("user", user), ("database", "postgres")],
        );
        raw.send(&out).await;
        let (tag, body) = raw.next().await;
        assert_eq!((tag, &body[..4]), (b'R', &10i32.to_be_bytes()[..]));
        assert_eq!(
            &body[4..],
            b"SCRAM-SHA-256\0\0",
            "only SCRAM-SHA-256 without TLS"
        );
        raw
    }

    async fn send(&mut self, bytes: &[u8]) {
        use tokio::io::AsyncWriteExt;
        self.stream.write_all(bytes).await.unwrap();
    }

    async fn next(&mut self) -> (u8, Vec<u8>) {
        use tokio::io::AsyncReadExt;
        loop {
            if let Some((frame, n)) = protocol::wire::split_frame(&self.buf, 1 << 20).unwrap() {
                let msg = (frame.tag, frame.body.to_vec());
                self.buf.drain(..n);
                return msg;
            }
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut chunk))
                .await
                .expect("the server answers within 10 s")
                .unwrap();
            assert!(n > 0, "the server closed without an answer");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// The next message must be a FATAL ErrorResponse: (SQLSTATE, message).
    async fn fatal(&mut self) -> (String, String) {
        let (tag, body) = self.next().await;
        assert_eq!(tag, b'E', "expected an ErrorResponse");
        let field = |code: u8| {
            body.split(|&b| b == 0)
                .find(|f| f.first() == Some(&code))
                .map(|f| String::from_utf8_lossy(&f[1..]).into_owned())
                .unwrap_or_default()
        };
        assert_eq!(field(b'S'), "FATAL");
        (field(b'C'), field(b'M'))
    }
}

/// SASL paths that libpq and tokio-postgres never take, driven by hand against `port` as
/// user `ray`: no initial response (the server asks for it with an empty SASLContinue) then a
/// wrong proof, a mechanism that was not offered, a message that is not a SASL response.
/// Returns what the server said each time.
async fn sasl_edge_cases(port: u16) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    let mut raw = RawSasl::start(port, "ray").await;
    let mut out = Vec::new();
    // SASLInitialResponse with length -1: no client-first-message yet.
    out.push(b'p');
    out.extend_from_slice(&0i32.to_be_bytes());
    out.extend_from_slice(b"SCRAM-SHA-256\0");
    out.extend_from_slice(&(-1i32).to_be_bytes());
    let len = (out.len() - 1) as i32;
    out[1..5].copy_from_slice(&len.to_be_bytes());
    raw.send(&out).await;
    assert_eq!(raw.next().await, (b'R', 11i32.to_be_bytes().to_vec()));
    out.clear();
    protocol::frontend::encode_sasl_response(&mut out, b"n,,n=,r=clientnonce");
    raw.send(&out).await;
    let (tag, body) = raw.next().await;
    assert_eq!((tag, &body[..4]), (b'R', &11i32.to_be_bytes()[..]));
    let server_first = String::from_utf8(body[4..].to_vec()).unwrap();
    assert!(
        server_first.starts_with("r=clientnonce") && server_first.ends_with(",i=4096"),
        "{server_first}"
    );
    let nonce = server_first[2..].split(',').next().unwrap().to_string();
    out.clear();
    let zero_proof = format!("{}=", "A".repeat(43)); // base64 of 32 zero bytes
    protocol::frontend::encode_sasl_response(
        &mut out,
        format!("c=biws,r={nonce},p={zero_proof}").as_bytes(),
    );
    raw.send(&out).await;
    seen.push(raw.fatal().await);

    let mut raw = RawSasl::start(port, "ray").await;
    out.clear();
    protocol::frontend::encode_sasl_initial_response(
        &mut out,
        "SCRAM-SHA-256-PLUS",
        b"p=tls-server-end-point,,n=,r=x",
    );
    raw.send(&out).await;
    seen.push(raw.fatal().await);

    let mut raw = RawSasl::start(port, "ray").await;
    out.clear();
    protocol::frontend::encode_query(&mut out, "select 1");
    raw.send(&out).await;
    seen.push(raw.fatal().await);
    seen
}

#[tokio::test]
async fn sasl_edge_cases_behave_as_postgres_does() {
    let pg = Postgres::start();
    let admin = admin(&pg).await;
    create_roles(&admin, &[("ray", "ray-pw", "scram-sha-256")]).await;
    set_pg_hba(
        &admin,
        &[
            "host all postgres 127.0.0.1/32 trust",
            "host all all 127.0.0.1/32 scram-sha-256",
        ],
    )
    .await;
    let rw = Ringwire::start(&["--auth", "scram-sha-256", "--user", "ray:ray-pw"]);
    let seen = sasl_edge_cases(rw.port).await;
    assert_eq!(seen, sasl_edge_cases(pg.port).await);
    let pair = |code: &str, message: &str| (code.to_string(), message.to_string());
    assert_eq!(
        seen,
        [
            pair("28P01", "password authentication failed for user \"ray\""),
            pair(
                "08P01",
                "client selected an invalid SASL authentication mechanism"
            ),
            pair("08P01", "expected SASL response, got message type 81"),
        ]
    );
    // The server lives on.
    assert_eq!(connect(rw.port, "ray", "ray-pw", "postgres").await, Ok(()));
}

fn sighup(rw: &Ringwire) {
    let status = Command::new("kill")
        .args(["-HUP", &rw.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// SIGHUP re-reads both files: a new user and a new rule take effect, open connections stay,
/// and a bad file changes nothing (and the next good one still loads).
#[tokio::test]
async fn sighup_reloads_users_and_rules_without_dropping_connections() {
    let dir = temp_dir("sighup");
    let hba_path = dir.join("hba");
    let users_path = dir.join("users");
    let hba = write(&hba_path, "host all all 127.0.0.1/32 md5\n");
    // `ringwire passwd` lines: a SCRAM verifier for ann, an md5 hash for cat.
    let ann = passwd("ann", "ann-pw", false);
    assert!(ann.starts_with("ann:SCRAM-SHA-256$4096:"), "{ann}");
    let cat = passwd("cat", "cat-pw", true);
    assert!(
        cat.starts_with("cat:md5") && cat.len() == "cat:md5".len() + 32 + 1,
        "{cat}"
    );
    let users = write(&users_path, &ann);
    let mut rw = Ringwire::start(&["--hba-file", &hba, "--users-file", &users]);
    let port = rw.port;

    let (open, connection) = tokio_postgres::connect(
        // Over TCP whatever the test transport: the rules in this test are `host` rules.
        &format!("host=127.0.0.1 port={port} user=ann dbname=postgres password=ann-pw"),
        NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    assert!(connect(port, "cat", "cat-pw", "postgres").await.is_err());

    write(&users_path, &format!("{ann}{cat}"));
    sighup(&rw);
    eventually(Duration::from_secs(15), "cat can log in", async || {
        connect(port, "cat", "cat-pw", "postgres").await.is_ok()
    })
    .await;
    assert_eq!(
        open.query_one("select 7", &[])
            .await
            .unwrap()
            .get::<_, i32>(0),
        7
    );

    // A plaintext password in the file: the reload is refused, the old tables stay.
    write(&users_path, &format!("{ann}cat:cat-pw\n"));
    write(&hba_path, "host all all 127.0.0.1/32 reject\n");
    sighup(&rw);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(connect(port, "cat", "cat-pw", "postgres").await, Ok(()));
    rw.assert_alive();

    // Fixed files load on the next SIGHUP: the rule now rejects everyone new.
    write(&users_path, &format!("{ann}{cat}"));
    sighup(&rw);
    eventually(
        Duration::from_secs(15),
        "the reject rule applies",
        async || connect(port, "cat", "cat-pw", "postgres").await.is_err(),
    )
    .await;
    assert_eq!(
        connect(port, "ann", "ann-pw", "postgres")
            .await
            .unwrap_err()
            .0,
        "28000"
    );
    assert_eq!(
        open.query_one("select 8", &[])
            .await
            .unwrap()
            .get::<_, i32>(0),
        8,
        "the reload dropped an open connection"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// pgbench with a password: every client (reconnecting per transaction with -C) runs SCRAM.
#[test]
fn pgbench_authenticates_with_scram() {
    let rw = Ringwire::start(&["--auth", "scram-sha-256", "--user", "postgres:bench-pw"]);
    let dir = temp_dir("pgbench");
    let script = write(&dir.join("select.sql"), "select 1;\n");
    let out = Command::new("pgbench")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &rw.port.to_string(),
            "-U",
            "postgres",
        ])
        .args(["-n", "-C", "-c", "4", "-t", "10", "-f", &script, "postgres"])
        .env("PGPASSWORD", "bench-pw")
        .output()
        .expect("run pgbench (apt-get install postgresql-client)");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{report}");
    assert_eq!(
        common::pgbench::processed_and_failed(&report),
        (40, 0),
        "{report}"
    );
    let out = Command::new("pgbench")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &rw.port.to_string(),
            "-U",
            "postgres",
        ])
        .args(["-n", "-t", "1", "-f", &script, "postgres"])
        .env("PGPASSWORD", "wrong")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("password authentication failed for user \"postgres\""),
        "{out:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn ringwire_fails(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ringwire"))
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .output()
        .expect("run ringwire");
    assert!(!out.status.success(), "ringwire {args:?} started");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

#[test]
fn bad_auth_files_are_one_clear_sentence() {
    let dir = temp_dir("bad");
    let missing = dir.join("missing");
    let e = ringwire_fails(&["--hba-file", missing.to_str().unwrap()]);
    assert!(e.contains("cannot read --hba-file"), "{e}");
    let hba = write(
        &dir.join("hba"),
        "host all all all trust\nhots all all all md5\n",
    );
    let e = ringwire_fails(&["--hba-file", &hba]);
    assert!(
        e.contains("hba line 2: invalid connection type \"hots\""),
        "{e}"
    );
    let users = write(&dir.join("users"), "bob:hunter2\n");
    let e = ringwire_fails(&["--auth", "md5", "--users-file", &users]);
    assert!(
        e.contains("users line 1: the secret of user \"bob\" is not a SCRAM-SHA-256 verifier"),
        "{e}"
    );
    assert!(
        !e.contains("hunter2"),
        "the error shows the plaintext password: {e}"
    );
    let e = ringwire_fails(&["--auth", "scram-sha-256"]);
    assert!(
        e.contains("--auth scram-sha-256 needs at least one user"),
        "{e}"
    );
    let e = ringwire_fails(&["--auth", "md5", "--hba-file", &hba]);
    assert!(e.contains("cannot be used with"), "{e}");
    let out = Command::new(env!("CARGO_BIN_EXE_ringwire"))
        .args(["passwd", "x"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty password"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Where `needle` occurs in the readable memory of process `pid` (its mappings read through
/// /proc/PID/mem; root, or the same user with ptrace allowed).
fn occurrences_in_memory(pid: u32, needle: &[u8]) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut found = Vec::new();
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let name = fields.get(5).copied().unwrap_or("");
        if !fields[1].starts_with('r') || name.starts_with("[v") {
            continue;
        }
        let (start, end) = fields[0].split_once('-').unwrap();
        let start = u64::from_str_radix(start, 16).unwrap();
        let end = u64::from_str_radix(end, 16).unwrap();
        // Only pages in memory (or swapped out) can hold anything: the rest of a mapping
        // (most of each thread's 256 MiB stack) reads as zeros. Runs of them are read whole,
        // so a needle across a page boundary is found.
        for (from, to) in touched_runs(pid, start, end) {
            let mut data = vec![0u8; (to - from) as usize];
            if mem.seek(SeekFrom::Start(from)).is_err() || mem.read_exact(&mut data).is_err() {
                continue; // a guard page or a mapping that went away
            }
            if let Some(at) = data.windows(needle.len()).position(|w| w == needle) {
                found.push(format!("{:#x} in {line}", from + at as u64));
            }
        }
    }
    found
}

/// The runs of pages between `start` and `end` in process `pid` that are present in memory
/// or swapped out (bits 63 and 62 of `/proc/PID/pagemap`'s entries); the whole range if the
/// pagemap cannot be read.
fn touched_runs(pid: u32, start: u64, end: u64) -> Vec<(u64, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    const PAGE: u64 = 4096;
    let pages = ((end - start) / PAGE) as usize;
    let mut entries = vec![0u8; pages * 8];
    let read = std::fs::File::open(format!("/proc/{pid}/pagemap")).and_then(|mut f| {
        f.seek(SeekFrom::Start(start / PAGE * 8))?;
        f.read_exact(&mut entries)
    });
    if read.is_err() {
        return vec![(start, end)];
    }
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for (i, e) in entries.chunks_exact(8).enumerate() {
        let entry = u64::from_le_bytes(e.try_into().unwrap());
        if entry & (3 << 62) == 0 {
            continue;
        }
        let page = start + i as u64 * PAGE;
        match runs.last_mut() {
            Some(run) if run.1 == page => run.1 = page + PAGE,
            _ => runs.push((page, page + PAGE)),
        }
    }
    runs
}

/// Once a client has logged in and gone, the server's memory holds neither its password nor
/// what stands for it: PBKDF2's SaltedPassword and SCRAM's ClientKey (which, with the stored
/// verifier, is enough to log in as the user elsewhere). The receive buffers, hashers, keys
/// and the stack the exchange ran on are wiped. Both password methods, with psql.
#[test]
fn no_password_or_key_outlives_the_login() {
    use base64::Engine as _;
    use hmac::{KeyInit, Mac};
    // Longer than the startup packet that stays in front of it in the receive buffer.
    let password = "Zq7-nowhere-else-93-".repeat(8);
    let password = password.as_str();
    let dir = temp_dir("wiped");
    let line = passwd("alice", password, false);
    let users = write(&dir.join("users"), &line);
    // alice:SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>
    let verifier = line.trim().split_once("SCRAM-SHA-256$").unwrap().1;
    let (iterations, rest) = verifier.split_once(':').unwrap();
    let salt = base64::engine::general_purpose::STANDARD
        .decode(rest.split_once('$').unwrap().0)
        .unwrap();
    let mut salted = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<sha2::Sha256>(
        password.as_bytes(),
        &salt,
        iterations.parse().unwrap(),
        &mut salted,
    );
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&salted).unwrap();
    mac.update(b"Client Key");
    let client_key = mac.finalize().into_bytes();
    for method in ["scram-sha-256", "password"] {
        let rw = Ringwire::start(&["--shards", "1", "--auth", method, "--users-file", &users]);
        let (ok, fatal) = psql(rw.port, "alice", password);
        assert!(ok, "{method}: {fatal}");
        std::thread::sleep(Duration::from_millis(200));
        for (what, needle) in [
            ("the password", password.as_bytes()),
            // A message only partly overwritten leaves its end behind.
            (
                "the end of the password",
                &password.as_bytes()[password.len() - 24..],
            ),
            ("the SaltedPassword", &salted[..]),
            ("the ClientKey", &client_key[..]),
        ] {
            let found = occurrences_in_memory(rw.pid(), needle);
            assert!(found.is_empty(), "{method}: {what} is still at {found:#?}");
        }
        // The scan finds what must be there: the StoredKey the server checks logins with.
        let stored_key = base64::engine::general_purpose::STANDARD
            .decode(rest.split_once('$').unwrap().1.split_once(':').unwrap().0)
            .unwrap();
        assert!(
            !occurrences_in_memory(rw.pid(), &stored_key).is_empty(),
            "{method}: the scan did not find the StoredKey"
        );
    }
}
