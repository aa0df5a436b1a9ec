//! `ringwire-bench`: a closed-loop PostgreSQL wire-protocol load generator, thread-per-core
//! like the server it measures.
//!
//! - [`config`]: the command line, validated into one [`config::BenchConfig`].
//! - [`workload`]: `--sql`/`--param`/`--file` compiled into prebuilt protocol messages; a
//!   per-connection [`workload::Cursor`] says what to send next.
//! - [`client`]: one connection — setup and auth, then the closed loop that encodes into a
//!   reused buffer and frames replies in place.
//! - [`ring`]: the timed loop on one raw io_uring per thread (the default driver). `--driver
//!   shards` runs each connection as a task on `shards::uring`, the server's own socket layer,
//!   instead (docs/PERF.md compares the two).
//! - [`runner`]: one concurrency level — client threads (glommio executors), the start gate,
//!   CPU and allocation sampling around the timed window, merging per-thread histograms.
//! - [`report`]: table rows and JSON lines.
//!
//! Flow: `BenchConfig` → for each concurrency level `runner::run_level` → threads run
//! `Connection::run` over the shared `Workload` → `LevelResult` → `report::LevelReport`.
//!
//! The Tokio/pgwire baseline server is a separate binary (`src/bin/tokio-baseline.rs`).

pub mod alloc;
pub mod auth;
pub mod client;
pub mod config;
pub mod report;
pub mod ring;
pub mod runner;
pub mod workload;

use std::process::ExitCode;

use config::BenchConfig;
use report::LevelReport;

/// Run every concurrency level and print the results. Exit status 1 if a level could not be
/// measured or a connection broke (the numbers are still printed); never a panic for either.
pub fn run(cfg: &BenchConfig) -> ExitCode {
    if let Err(e) = runner::preflight() {
        eprintln!("ringwire-bench: {e}");
        return ExitCode::from(2);
    }
    if !cfg.json {
        println!(
            "# {} mode, pipeline {}, {} client thread(s), {:?} driver, {:?} timed after {:?} warmup, server {}",
            cfg.workload.mode.as_str(),
            cfg.pipeline,
            cfg.threads,
            cfg.driver,
            cfg.duration,
            cfg.warmup,
            cfg.connect.addr
        );
        println!("{}", LevelReport::table_header());
    }
    let mut ok = true;
    for (level, &concurrency) in cfg.concurrency.iter().enumerate() {
        let result = runner::run_level(cfg, concurrency, cfg.seed.wrapping_add(level as u64));
        let report = LevelReport::new(cfg, result);
        if cfg.json {
            println!("{}", report.json());
        } else {
            println!("{}", report.table_row());
        }
        for line in report.lost_lines() {
            eprintln!("{line}");
        }
        if let Some(e) = &report.setup_error {
            eprintln!("ringwire-bench: concurrency {concurrency}: {e}");
        }
        ok &= report.setup_error.is_none() && report.lost.is_empty();
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
