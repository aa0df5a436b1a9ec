//! Shared test support: a real ringwire process and a real PostgreSQL 15, each on a free port.
#![allow(dead_code)]

pub mod client;
pub mod pgbench;
pub mod postgres;
pub mod ringwire;
pub mod wire;

use std::time::{Duration, Instant};

/// Run `cmd` (psql, pgbench) with `stdin` as its input, to its end: its exit status and
/// everything it wrote. A command that exits before reading all of it (psql refusing a COPY)
/// is not an error here; its output says what happened.
pub fn output_with_stdin(cmd: &mut std::process::Command, stdin: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let _ = child.stdin.take().expect("piped stdin").write_all(stdin);
    child.wait_with_output().expect("wait for the command")
}

/// Run a set-up command to its end; panics naming `what`, with its output, unless it
/// succeeds.
pub fn succeed(what: &str, cmd: &mut std::process::Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {cmd:?}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Ask `check` every 20 ms until it returns true; panics naming `what` (a condition: "the
/// replica serves reads") and `within` if it has not after `within`.
pub async fn eventually(within: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) {
    eventually_ok(within, what, async || holds(check().await)).await;
}

/// [`eventually`] for a check that says what it saw: `Ok(())` once `what` holds, until then
/// `Err` describing the state, which the panic repeats.
pub async fn eventually_ok(
    within: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> Result<(), String>,
) {
    let deadline = Instant::now() + within;
    while let Err(state) = check().await {
        assert!(
            Instant::now() < deadline,
            "{}",
            timed_out(within, what, &state)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [`eventually`] for a blocking check (a psql run, a read of /proc) in code that is not
/// async, asked every `every`: a check that starts a process is asked less often.
pub fn eventually_blocking(
    within: Duration,
    every: Duration,
    what: &str,
    mut check: impl FnMut() -> bool,
) {
    eventually_blocking_ok(within, every, what, || holds(check()));
}

/// [`eventually_ok`] for a blocking check, asked every `every`.
pub fn eventually_blocking_ok(
    within: Duration,
    every: Duration,
    what: &str,
    mut check: impl FnMut() -> Result<(), String>,
) {
    let deadline = Instant::now() + within;
    while let Err(state) = check() {
        assert!(
            Instant::now() < deadline,
            "{}",
            timed_out(within, what, &state)
        );
        std::thread::sleep(every);
    }
}

/// A true/false check as an [`eventually_ok`] one, with nothing to describe.
fn holds(ok: bool) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(String::new())
    }
}

fn timed_out(within: Duration, what: &str, state: &str) -> String {
    let sep = if state.is_empty() { "" } else { ": " };
    format!("timed out after {within:?} waiting until {what}{sep}{state}")
}
