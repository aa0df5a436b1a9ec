//! Observability against the real binary: `/metrics` scraped during a pgbench run agrees with
//! pgbench's own count, the HTTP endpoint refuses what it does not serve, and the SQL views
//! answer `psql` with one row per shard.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::ringwire::Ringwire;

/// A loopback port nothing listens on right now (for `--metrics-listen`).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

fn start(extra: &[&str]) -> (Ringwire, u16) {
    let metrics_port = free_port();
    let listen = format!("127.0.0.1:{metrics_port}");
    let mut args = vec!["--shards", "2", "--metrics-listen", &listen];
    args.extend_from_slice(extra);
    (Ringwire::start(&args), metrics_port)
}

/// Send `request` raw and return the whole reply (the server closes after one request).
fn http(port: u16, request: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the metrics port");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request).expect("send the request");
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).expect("read the reply");
    String::from_utf8(reply).expect("utf8 reply")
}

fn status(reply: &str) -> &str {
    reply.lines().next().unwrap_or("")
}

/// `GET /metrics`, parsed into `name{labels}` → value.
fn scrape(port: u16) -> HashMap<String, f64> {
    let reply = http(port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(status(&reply), "HTTP/1.1 200 OK", "{reply}");
    let body = reply.split_once("\r\n\r\n").expect("headers end").1;
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').expect("`name value`");
            (k.to_string(), v.parse::<f64>().expect("a number"))
        })
        .collect()
}

fn get(m: &HashMap<String, f64>, key: &str) -> f64 {
    *m.get(key)
        .unwrap_or_else(|| panic!("no {key} in the scrape"))
}

fn psql(port: u16, sql: &str) -> String {
    let out = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
        .args(["-X", "-v", "ON_ERROR_STOP=1", "-At", "-c", sql, "postgres"])
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("run psql (apt-get install postgresql-client)");
    assert!(
        out.status.success(),
        "psql -c {sql:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8")
}

/// One pgbench transaction: a point select and an update, each its own statement.
const SCRIPT: &str = "\\set k random(1, 100)\n\
                      SELECT v FROM metrics_t WHERE k = :k;\n\
                      UPDATE metrics_t SET v = v + 1 WHERE k = :k;\n";

/// Scrape before, during and after a pgbench run of [`SCRIPT`] in `mode`; the statement
/// counters and the histograms' counts must move by exactly what pgbench ran.
fn pgbench_counts_match(mode: &str, protocol: &str) {
    let (rw, mport) = start(&[]);
    psql(rw.port, "CREATE TABLE metrics_t (k int PRIMARY KEY, v int)");
    let values: Vec<String> = (1..=100).map(|k| format!("({k}, 0)")).collect();
    psql(
        rw.port,
        &format!("INSERT INTO metrics_t VALUES {}", values.join(", ")),
    );
    let script = std::env::temp_dir().join(format!("ringwire-metrics-{}-{mode}.sql", rw.port));
    std::fs::write(&script, SCRIPT).unwrap();
    let before = scrape(mport);
    let port = rw.port;
    let script_arg = script.to_str().unwrap().to_string();
    let mode_arg = mode.to_string();
    let bench = std::thread::spawn(move || {
        common::pgbench::run(
            port,
            &[
                "-n",
                "-f",
                &script_arg,
                "-c",
                "4",
                "-j",
                "2",
                "-T",
                "4",
                "-M",
                &mode_arg,
            ],
        )
    });
    // A scrape while pgbench runs answers, and already sees some of its statements.
    std::thread::sleep(Duration::from_millis(1500));
    let during = scrape(mport);
    let report = bench.join().expect("pgbench thread");
    let after = scrape(mport);
    let _ = std::fs::remove_file(&script);
    let (processed, failed) = common::pgbench::processed_and_failed(&report);
    assert_eq!(failed, 0, "{report}");
    assert!(processed > 0, "{report}");
    for kind in ["select", "update"] {
        let labels = format!("{{protocol=\"{protocol}\",kind=\"{kind}\"}}");
        let counter = format!("ringwire_statements_total{labels}");
        let count = format!("ringwire_statement_duration_seconds_count{labels}");
        let inf = format!(
            "ringwire_statement_duration_seconds_bucket{{protocol=\"{protocol}\",kind=\"{kind}\",le=\"+Inf\"}}"
        );
        let delta = |m: &HashMap<String, f64>, key: &str| get(m, key) - get(&before, key);
        assert!(
            delta(&during, &counter) > 0.0,
            "{kind}: nothing counted during the run"
        );
        // One statement of each kind per transaction.
        assert_eq!(
            delta(&after, &counter),
            processed as f64,
            "{kind} counter vs pgbench's {processed} transactions\n{report}"
        );
        assert_eq!(
            delta(&after, &count),
            processed as f64,
            "{kind} histogram count"
        );
        assert_eq!(delta(&after, &inf), processed as f64, "{kind} +Inf bucket");
        let p99 = format!(
            "ringwire_statement_duration_seconds_quantile{{protocol=\"{protocol}\",kind=\"{kind}\",quantile=\"0.99\"}}"
        );
        assert!(get(&after, &p99) > 0.0, "{kind}: p99 gauge is set");
    }
    assert_eq!(get(&after, "ringwire_shard_up{shard=\"0\"}"), 1.0);
    assert_eq!(get(&after, "ringwire_shard_up{shard=\"1\"}"), 1.0);
    // pgbench's 4 connections and every psql above were opened and closed.
    assert!(get(&after, "ringwire_connections_opened_total") >= 4.0 + 2.0);
    assert_eq!(
        get(&after, "ringwire_connections_opened_total"),
        get(&after, "ringwire_connections_closed_total") + get(&after, "ringwire_connections_open")
    );
    assert!(get(&after, "ringwire_first_byte_seconds_count") >= 2.0 * processed as f64);
    assert!(get(&after, "ringwire_received_bytes_total") > 0.0);
    assert!(get(&after, "ringwire_sent_bytes_total") > 0.0);
}

#[test]
fn scrape_during_pgbench_simple_matches_its_count() {
    pgbench_counts_match("simple", "simple");
}

#[test]
fn scrape_during_pgbench_prepared_matches_its_count() {
    pgbench_counts_match("prepared", "extended");
}

#[test]
fn errors_are_counted_by_sqlstate() {
    let (rw, mport) = start(&[]);
    let out = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &rw.port.to_string(),
            "-U",
            "postgres",
        ])
        .args([
            "-X",
            "-c",
            "SELEC 1",
            "-c",
            "SELECT 1/0",
            "-c",
            "SELEC 2",
            "postgres",
        ])
        .output()
        .expect("run psql");
    assert!(!out.status.success());
    let m = scrape(mport);
    assert_eq!(get(&m, "ringwire_errors_total{sqlstate=\"42601\"}"), 2.0);
    assert_eq!(get(&m, "ringwire_errors_total{sqlstate=\"22012\"}"), 1.0);
}

#[test]
fn endpoint_refuses_other_paths_methods_and_big_requests() {
    let (mut rw, mport) = start(&[]);
    let reply = http(mport, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status(&reply), "HTTP/1.1 404 Not Found", "{reply}");
    let reply = http(mport, b"GET /metricsx HTTP/1.1\r\n\r\n");
    assert_eq!(status(&reply), "HTTP/1.1 404 Not Found", "{reply}");
    for method in ["POST", "PUT", "DELETE"] {
        let reply = http(
            mport,
            format!("{method} /metrics HTTP/1.1\r\n\r\n").as_bytes(),
        );
        assert_eq!(status(&reply), "HTTP/1.1 405 Method Not Allowed", "{reply}");
        assert!(reply.contains("Allow: GET, HEAD\r\n"), "{reply}");
    }
    // A request that never ends its headers is cut off at the bound, not buffered on.
    let mut big = b"GET /metrics HTTP/1.1\r\nX-Filler: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 64 << 10));
    let reply = http(mport, &big);
    assert_eq!(
        status(&reply),
        "HTTP/1.1 431 Request Header Fields Too Large",
        "{reply}"
    );
    let reply = http(mport, b"\x16\x03\x01 not http\r\n\r\n");
    assert_eq!(status(&reply), "HTTP/1.1 400 Bad Request", "{reply}");
    // HEAD answers headers only.
    let reply = http(mport, b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status(&reply), "HTTP/1.1 200 OK", "{reply}");
    assert!(reply.ends_with("\r\n\r\n"), "{reply}");
    // Still serving, both the endpoint and SQL.
    assert_eq!(get(&scrape(mport), "ringwire_shard_up{shard=\"1\"}"), 1.0);
    assert_eq!(psql(rw.port, "SELECT 1").trim(), "1");
    rw.assert_alive();
}

#[test]
fn sql_views_show_one_row_per_shard() {
    let (rw, _) = start(&[]);
    for _ in 0..4 {
        psql(rw.port, "SELECT 1");
    }
    assert_eq!(
        psql(
            rw.port,
            "SELECT shard FROM ringwire.shard_stats ORDER BY shard"
        ),
        "0\n1\n"
    );
    // SHOW ringwire_stats is the same relation.
    let show = psql(rw.port, "SHOW ringwire_stats");
    assert_eq!(show.lines().count(), 2, "{show}");
    // The 4 psql runs above each ran one select; shard_stats sees them (and itself).
    let selects: i64 = psql(
        rw.port,
        "SELECT sum(count) FROM ringwire.latency \
         WHERE shard IS NOT NULL AND protocol = 'simple' AND kind = 'select'",
    )
    .trim()
    .parse()
    .unwrap();
    assert!(selects >= 4 + 2, "{selects}");
    // Merged rows (shard NULL) add up the per-shard ones.
    let per_shard = psql(
        rw.port,
        "SELECT shard, count FROM ringwire.latency WHERE protocol = 'simple' AND kind = 'select' ORDER BY shard",
    );
    let rows: Vec<(String, i64)> = per_shard
        .lines()
        .map(|l| {
            let (s, c) = l.split_once('|').unwrap();
            (s.to_string(), c.parse().unwrap())
        })
        .collect();
    assert_eq!(rows.len(), 3, "{per_shard}");
    assert_eq!(rows[2].0, "", "merged row last: {per_shard}");
    // The per-shard and merged rows come from the same gather.
    assert_eq!(rows[2].1, rows[0].1 + rows[1].1, "{per_shard}");
    let opened: i64 = psql(
        rw.port,
        "SELECT sum(connections_opened) FROM ringwire.shard_stats",
    )
    .trim()
    .parse()
    .unwrap();
    assert!(opened >= 9, "{opened}");
}

#[test]
fn metrics_off_records_no_statements_but_counts_connections() {
    let (rw, mport) = start(&["--metrics", "off"]);
    for _ in 0..3 {
        psql(rw.port, "SELECT 1");
    }
    let m = scrape(mport);
    assert_eq!(get(&m, "ringwire_metrics_enabled"), 0.0);
    assert_eq!(
        get(
            &m,
            "ringwire_statements_total{protocol=\"simple\",kind=\"select\"}"
        ),
        0.0
    );
    assert!(get(&m, "ringwire_connections_opened_total") >= 3.0);
}
