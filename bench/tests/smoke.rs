//! End to end: the real `tokio-baseline` binary on a free port, driven by the real
//! `ringwire-bench` binary (all three modes, a script file, a pipeline, errors, a dropped
//! server), and checked with psql and tokio-postgres so the baseline answers what PostgreSQL
//! would.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `tokio-baseline`, killed on drop.
struct Baseline {
    child: Child,
    port: u16,
}

impl Baseline {
    fn start() -> Baseline {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tokio-baseline"))
            .args(["--listen", "127.0.0.1:0", "--threads", "2"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start tokio-baseline");
        // "tokio-baseline listening on 127.0.0.1:PORT with N worker threads"
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("read the banner");
        let port = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("127.0.0.1:"))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        Baseline { child, port }
    }
}

impl Drop for Baseline {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bench(port: u16, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ringwire-bench"))
        .args(["--port", &port.to_string(), "--json", "--warmup", "200ms"])
        .args(args)
        .output()
        .expect("run ringwire-bench")
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect()
}

fn number(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("field {field} missing or not a number in {v}"))
}

/// Every field a report line promises, with sane values for an error-free run.
fn check_clean_level(v: &Value, concurrency: u64, mode: &str) {
    assert_eq!(v["concurrency"], concurrency, "{v}");
    assert_eq!(v["mode"], mode, "{v}");
    assert!(number(v, "qps") > 0.0, "{v}");
    assert!(number(v, "queries") > 0.0, "{v}");
    assert_eq!(v["errors"], 0, "{v}");
    assert_eq!(v["errors_by_sqlstate"], serde_json::json!({}), "{v}");
    assert_eq!(v["connections_lost"], 0, "{v}");
    let (mean, p50, p99, p999, max) = (
        number(v, "mean_us"),
        number(v, "p50_us"),
        number(v, "p99_us"),
        number(v, "p999_us"),
        number(v, "max_us"),
    );
    assert!(
        mean > 0.0 && p50 > 0.0 && p50 <= p99 && p99 <= p999 && p999 <= max,
        "{v}"
    );
    assert!(number(v, "client_cpu_us_per_query") > 0.0, "{v}");
    assert!(number(v, "client_cpu_cores") > 0.0, "{v}");
    assert!(number(v, "client_allocs_per_query") >= 0.0, "{v}");
    assert!(
        number(v, "duration_s") > 0.0
            && number(v, "threads") >= 1.0
            && number(v, "pipeline") >= 1.0,
        "{v}"
    );
}

#[test]
fn every_mode_drives_the_baseline_without_errors() {
    let server = Baseline::start();
    for mode in ["simple", "extended", "prepared"] {
        let out = bench(
            server.port,
            &[
                "--mode",
                mode,
                "--duration",
                "1s",
                "--concurrency",
                "1,4",
                "--threads",
                "2",
                "--sql",
                "SELECT abalance FROM pgbench_accounts WHERE aid = :aid",
                "--weight",
                "2",
                "--sql",
                "UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid",
                "--sql",
                "select * from t",
                "--param",
                "aid=1..100000",
                "--param",
                "delta=random(-5000, 5000)",
            ],
        );
        assert!(out.status.success(), "{mode}: {out:?}");
        let lines = json_lines(&out);
        assert_eq!(
            lines.len(),
            2,
            "{mode}: one line per concurrency level: {out:?}"
        );
        check_clean_level(&lines[0], 1, mode);
        check_clean_level(&lines[1], 4, mode);
    }
}

#[test]
fn scripts_and_pipelines_work() {
    let server = Baseline::start();
    let dir = std::env::temp_dir().join(format!("ringwire-bench-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("tpcb-ish.sql");
    std::fs::write(
        &script,
        "\\set aid random(1, 100000)\n\\set delta random(-5000, 5000)\nBEGIN;\n\
         UPDATE pgbench_accounts SET abalance = abalance + :delta\n  WHERE aid = :aid;\n\
         SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\nEND;\n",
    )
    .unwrap();
    // Every driver: the raw io_uring loop (default), a task per connection on the server's
    // own socket layer, and a glommio task and TcpStream per connection.
    for (mode, driver) in [
        ("simple", "uring"),
        ("extended", "uring"),
        ("extended", "shards"),
        ("prepared", "shards"),
        ("prepared", "glommio"),
    ] {
        let out = bench(
            server.port,
            &[
                "--driver",
                driver,
                "--mode",
                mode,
                "--duration",
                "1s",
                "--concurrency",
                "2",
                "--pipeline",
                "4",
                "--file",
                script.to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{out:?}");
        let lines = json_lines(&out);
        assert_eq!(lines.len(), 1);
        check_clean_level(&lines[0], 2, mode);
        assert_eq!(lines[0]["pipeline"], 4);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn errors_are_counted_by_sqlstate_and_the_loop_goes_on() {
    let server = Baseline::start();
    let out = bench(
        server.port,
        &[
            "--duration",
            "500ms",
            "--concurrency",
            "1",
            "--sql",
            "SELECT nope",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let lines = json_lines(&out);
    let v = &lines[0];
    assert_eq!(v["qps"], 0.0, "{v}");
    let errors = v["errors"].as_u64().unwrap();
    // Hundreds at least in half a second: the connection kept going after each error.
    assert!(errors > 100, "{v}");
    assert_eq!(v["errors_by_sqlstate"]["42601"], errors, "{v}");
    assert_eq!(v["connections_lost"], 0, "{v}");
}

#[test]
fn a_dropped_connection_is_reported_not_a_panic() {
    let mut server = Baseline::start();
    let port = server.port;
    let started = Instant::now();
    let bench = std::thread::spawn(move || {
        bench(
            port,
            &[
                "--duration",
                "3s",
                "--concurrency",
                "4",
                "--sql",
                "SELECT 1",
            ],
        )
    });
    std::thread::sleep(Duration::from_millis(1000));
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let out = bench.join().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the run ended on its own"
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "reported by the exit status, not a panic (101): {out:?}"
    );
    let lines = json_lines(&out);
    assert_eq!(lines[0]["connections_lost"], 4, "{out:?}");
    assert!(
        number(&lines[0], "queries") > 0.0,
        "the second before the drop was measured: {out:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("connection 0:") && !stderr.contains("panicked"),
        "{stderr}"
    );
}

#[test]
fn setup_failures_are_reported_not_a_panic() {
    // Nothing listens here: bind a port, then close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = bench(
        port,
        &[
            "--duration",
            "200ms",
            "--concurrency",
            "1",
            "--sql",
            "SELECT 1",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let lines = json_lines(&out);
    assert!(
        lines[0]["error"]
            .as_str()
            .unwrap()
            .contains("cannot connect"),
        "{out:?}"
    );
}

#[test]
fn psql_sees_what_postgresql_would_show() {
    if Command::new("psql").arg("--version").output().is_err() {
        eprintln!("psql not installed; skipping the psql check (tokio-postgres below still runs)");
        return;
    }
    let server = Baseline::start();
    let psql = |sql: &str| {
        let out = Command::new("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &server.port.to_string(),
                "-U",
                "postgres",
                "-Atc",
                sql,
            ])
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .expect("run psql");
        assert!(out.status.success(), "{sql}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(psql("select * from t"), "1\n");
    assert_eq!(psql("SELECT 1"), "1\n");
    assert_eq!(
        psql("UPDATE pgbench_accounts SET abalance = abalance + 5 WHERE aid = 3"),
        "UPDATE 1\n"
    );
    assert_eq!(
        psql("SELECT abalance FROM pgbench_accounts WHERE aid = 3"),
        "5\n"
    );
    assert_eq!(
        psql("SELECT abalance FROM pgbench_accounts WHERE aid = 100001"),
        ""
    );
}

#[test]
fn tokio_postgres_extended_protocol_with_binary_parameters() {
    let server = Baseline::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(
            &format!(
                "host=127.0.0.1 port={} user=postgres connect_timeout=10",
                server.port
            ),
            tokio_postgres::NoTls,
        )
        .await
        .unwrap();
        tokio::spawn(connection);
        let n = client
            .execute(
                "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
                &[&-7i32, &11i32],
            )
            .await
            .unwrap();
        assert_eq!(n, 1);
        let rows = client
            .query(
                "SELECT abalance FROM pgbench_accounts WHERE aid = $1",
                &[&11i32],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].get::<_, i32>(0), -7);
        let rows = client.query("select * from t", &[]).await.unwrap();
        assert_eq!((rows.len(), rows[0].get::<_, i32>("a")), (1, 1));
        let err = client.query("SELECT nope", &[]).await.unwrap_err();
        assert_eq!(err.code().map(|c| c.code()), Some("42601"));
    });
}
