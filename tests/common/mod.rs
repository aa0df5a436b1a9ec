//! Shared test support: a real ringwire process and a real PostgreSQL 15, each on a free port.
#![allow(dead_code)]

pub mod client;
pub mod pgbench;
pub mod postgres;
pub mod ringwire;
pub mod wire;

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
