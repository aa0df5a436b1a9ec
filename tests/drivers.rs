//! Stock drivers, unchanged, against ringwire and against PostgreSQL 15: each tells the same
//! story (`tests/drivers/*`: literals, typed parameters, a table written with prepared
//! statements, commit and rollback, errors with their SQLSTATE and constraint name, statement
//! reuse) and prints one line per step; ringwire's lines must equal PostgreSQL's. The same story
//! then runs through ringwire's upstream mode (`--upstream`) in front of that PostgreSQL.
//!
//! Drivers: psycopg 3 (libpq), asyncpg (its own binary protocol implementation), node-postgres
//! (with pg-cursor), pgx v5 (Go), pgjdbc. Each is fetched once from its package registry into
//! `CARGO_TARGET_TMPDIR/drivers` (PyPI, npm, the Go module proxy, Maven Central) and reused;
//! python3, npm, go, mvn and java must be on the PATH (they are on this project's machines).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use common::postgres::Postgres;
use common::ringwire::Ringwire;

const PSYCOPG: &str = "psycopg[binary]==3.3.9";
const ASYNCPG: &str = "asyncpg==0.32.0";
const NODE_PG: &str = "pg@8.23.1";
const NODE_PG_CURSOR: &str = "pg-cursor@2.22.0";
const PGJDBC: &str = "org.postgresql:postgresql:42.7.4";

fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/drivers")
}

fn cache() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("drivers")
}

/// `dir`, made by `make` unless an earlier run finished it (a marker file says so). One
/// set-up at a time: tests of the same driver share the directory.
fn prepared(name: &str, make: impl FnOnce(&Path)) -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = cache().join(name);
    let done = dir.join(".ready");
    if !done.exists() {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        make(&dir);
        std::fs::write(&done, b"").unwrap();
    }
    dir
}

/// A short stable tag for pinned package versions (a cache directory per set of versions).
fn tag(versions: &[&str]) -> String {
    versions
        .iter()
        .flat_map(|v| v.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '.'))
        .collect()
}

/// A cache name that changes when any of `files` (under tests/drivers) changes, so an edited
/// program is built again.
fn versioned(name: &str, files: &[&str]) -> String {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    for f in files {
        std::fs::read(sources().join(f))
            .unwrap_or_else(|e| panic!("read tests/drivers/{f}: {e}"))
            .hash(&mut h);
    }
    format!("{name}-{:016x}", h.finish())
}

fn python() -> PathBuf {
    prepared(&format!("python-{}", tag(&[PSYCOPG, ASYNCPG])), |dir| {
        common::succeed(
            "pip install",
            Command::new("python3")
                .args(["-m", "pip", "install", "--quiet", "--target"])
                .arg(dir)
                .args([PSYCOPG, ASYNCPG]),
        )
    })
}

/// The command that tells `driver`'s story against `host`/`port`.
fn story(driver: &str, host: &str, port: u16) -> Command {
    let src = sources();
    let port = port.to_string();
    match driver {
        "psycopg" | "asyncpg" => {
            let mut cmd = Command::new("python3");
            cmd.env("PYTHONPATH", python())
                .arg(src.join(format!("python/{driver}_story.py")))
                .args([host, &port]);
            cmd
        }
        "node-postgres" => {
            let dir = prepared(
                &format!("node-{}", tag(&[NODE_PG, NODE_PG_CURSOR])),
                |dir| {
                    common::succeed(
                        "npm install",
                        Command::new("npm")
                            .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
                            .arg(dir)
                            .args([NODE_PG, NODE_PG_CURSOR]),
                    )
                },
            );
            let mut cmd = Command::new("node");
            cmd.env("NODE_PATH", dir.join("node_modules"))
                .arg(src.join("node/pg_story.js"))
                .args([host, &port]);
            cmd
        }
        "pgx" => {
            let name = versioned("go", &["go/go.mod", "go/go.sum", "go/main.go"]);
            let dir = prepared(&name, |dir| {
                common::succeed(
                    "go build",
                    Command::new("go")
                        .current_dir(src.join("go"))
                        .args(["build", "-o"])
                        .arg(dir.join("pgxstory"))
                        .arg("."),
                )
            });
            let mut cmd = Command::new(dir.join("pgxstory"));
            cmd.args([host, &port]);
            cmd
        }
        "pgjdbc" => {
            let name = versioned("java", &["java/JdbcStory.java"]);
            let dir = prepared(&name, |dir| {
                common::succeed(
                    "mvn dependency:copy",
                    Command::new("mvn")
                        .args(["-q", "-B", "dependency:copy"])
                        .arg(format!("-Dartifact={PGJDBC}"))
                        .arg(format!("-DoutputDirectory={}", dir.display())),
                );
                common::succeed(
                    "javac",
                    Command::new("javac")
                        .arg("-cp")
                        .arg(dir.join("postgresql-42.7.4.jar"))
                        .arg("-d")
                        .arg(dir)
                        .arg(src.join("java/JdbcStory.java")),
                );
            });
            let mut cmd = Command::new("java");
            cmd.arg("-cp")
                .arg(format!(
                    "{}:{}",
                    dir.join("postgresql-42.7.4.jar").display(),
                    dir.display()
                ))
                .arg("JdbcStory")
                .args([host, &port]);
            cmd
        }
        other => panic!("no story for {other}"),
    }
}

/// The story's lines; panics (with its output) if the driver failed. `listen`: the story ends
/// with a second session that LISTENs and waits for two notifications from the first (left
/// out where sessions of several drivers share two upstream connections: each listener pins
/// one until it disconnects, and two listeners would leave their notifiers none).
fn tell(driver: &str, server: &str, host: &str, port: u16, listen: bool) -> String {
    let mut cmd = story(driver, host, port);
    if !listen {
        cmd.env("STORY_NO_LISTEN", "1");
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{driver}: cannot run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{driver} against {server} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// PostgreSQL's story, then ringwire's (embedded compute), then ringwire's in front of that
/// PostgreSQL: all three must be the same lines.
fn same_story_everywhere(driver: &str) {
    let pg = Postgres::start();
    let want = tell(driver, "PostgreSQL", "127.0.0.1", pg.port, true);
    assert!(
        want.lines().count() >= 8,
        "{driver} told too short a story:\n{want}"
    );
    let heard = want.lines().find(|l| l.starts_with("notifies"));
    assert!(
        heard.is_some_and(|l| l.contains("hello") && l.contains("again")),
        "{driver}'s listener did not hear PostgreSQL's notifications:\n{want}"
    );
    let own = want.lines().find(|l| l.starts_with("own notification"));
    assert!(
        own.is_some_and(|l| l.to_lowercase().contains("true")),
        "{driver}: PostgreSQL's own notification did not name the listener's pid:\n{want}"
    );
    // JDBC speaks TCP only; the others use the test transport (TCP, or the Unix socket under
    // RINGWIRE_TEST_TRANSPORT=unix).
    let host = |rw: &Ringwire| {
        if driver == "pgjdbc" {
            "127.0.0.1".to_string()
        } else {
            rw.host().to_string()
        }
    };
    let rw = Ringwire::start(&[]);
    let got = tell(driver, "ringwire", &host(&rw), rw.port, true);
    assert_eq!(got, want, "{driver}: ringwire (left) vs PostgreSQL (right)");
    let upstream = pg.url();
    let relay = Ringwire::start(&["--upstream", &upstream, "--upstream-pool-size", "2"]);
    let got = tell(
        driver,
        "ringwire --upstream",
        &host(&relay),
        relay.port,
        true,
    );
    assert_eq!(
        got, want,
        "{driver}: ringwire --upstream (left) vs PostgreSQL (right)"
    );
}

const DRIVERS: [&str; 5] = ["psycopg", "asyncpg", "node-postgres", "pgx", "pgjdbc"];

/// Every driver's story at once through upstream mode with two upstream connections on one
/// shard, so the drivers' sessions keep taking over each other's connections between
/// transactions: each with its own startup parameters to replay (pgjdbc sends
/// `extra_float_digits` and `DateStyle`), its own statement names to map, and its own way of
/// using the protocol (pgx's cached statements, pgjdbc's named statements, pg-cursor's
/// portals across Flushes). Each must still tell PostgreSQL's story
/// word for word. (Each driver's table is its own, so the stories do not meet in the data.)
#[test]
fn every_driver_at_once_through_two_upstream_connections() {
    let pg = Postgres::start();
    let want: Vec<String> = DRIVERS
        .iter()
        .map(|d| tell(d, "PostgreSQL", "127.0.0.1", pg.port, false))
        .collect();
    let upstream = pg.url();
    let relay = Ringwire::start(&[
        "--shards",
        "1",
        "--upstream",
        &upstream,
        "--upstream-pool-size",
        "2",
    ]);
    let port = relay.port;
    let got: Vec<String> = std::thread::scope(|scope| {
        let runs: Vec<_> = DRIVERS
            .iter()
            .map(|d| {
                scope.spawn(move || {
                    tell(
                        d,
                        "ringwire --upstream, all at once",
                        "127.0.0.1",
                        port,
                        false,
                    )
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for ((driver, got), want) in DRIVERS.iter().zip(&got).zip(&want) {
        assert_eq!(
            got, want,
            "{driver}: ringwire --upstream with every driver at once (left) vs PostgreSQL (right)"
        );
    }
}

#[test]
fn psycopg() {
    same_story_everywhere("psycopg");
}

#[test]
fn asyncpg() {
    same_story_everywhere("asyncpg");
}

#[test]
fn node_postgres() {
    same_story_everywhere("node-postgres");
}

#[test]
fn pgx() {
    same_story_everywhere("pgx");
}

#[test]
fn pgjdbc() {
    same_story_everywhere("pgjdbc");
}
