//! Running the stock pgbench against a test server and reading its report.

use std::process::Command;

/// `pgbench -h 127.0.0.1 -p PORT -U postgres ARGS postgres`; panics with the report if it fails.
pub fn run(port: u16, args: &[&str]) -> String {
    run_on("127.0.0.1", port, args)
}

/// `pgbench -h HOST -p PORT -U postgres ARGS postgres` (HOST may be a socket directory).
pub fn run_on(host: &str, port: u16, args: &[&str]) -> String {
    let out = Command::new("pgbench")
        .args(["-h", host, "-p", &port.to_string(), "-U", "postgres"])
        .args(args)
        .arg("postgres")
        .output()
        .expect("run pgbench (apt-get install postgresql-client)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "pgbench {args:?} failed:\n{text}");
    text
}

/// (transactions processed, failed transactions) from a pgbench report.
pub fn processed_and_failed(report: &str) -> (u64, u64) {
    let num = |prefix: &str| {
        report
            .lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.split('/').next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    let processed = num("number of transactions actually processed:")
        .unwrap_or_else(|| panic!("no processed count in:\n{report}"));
    (
        processed,
        num("number of failed transactions:").unwrap_or(0),
    )
}
