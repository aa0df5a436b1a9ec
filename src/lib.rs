//! The `ringwire` binary's library half: what answers SQL on a shard.
//!
//! - [`engine`]: the per-shard [`engine::Frontend`], implementing `shards::engine::Engine`:
//!   statement text → sqlparser → [`engine::Plan`] → replies.
//! - [`sql`]: typed expressions (planning, evaluation, PostgreSQL's typing rules).
//! - [`settings`]: session settings (GUCs) with SET/SHOW/RESET semantics.
//! - [`dispatch`]: the compute (tables, locks, commits, compaction) on shard 0 and the
//!   per-shard dispatcher that batches peeks and writes to it over the mesh.
//! - [`compute`]: multi-versioned tables and the executor of table plans.
//! - [`replica`]: the read replica of the compute's tables that every other shard keeps,
//!   fed with the compute's commits over the mesh, serving reads when provably fresh.
//! - `fuzzing` (hidden): statement text → plan → constant evaluation without a server, for
//!   the `sql_plan` fuzz target and `tests/sql_front_props.rs`.
//! - [`upstream`]: upstream mode (`--upstream`): the engine that relays every connection to
//!   a pool of PostgreSQL connections per shard instead of answering SQL itself.
//! - [`stats`]: per-shard counters and histograms and the `ringwire.shard_stats` /
//!   `ringwire.latency` / `ringwire.table_stats` relations that show them.
//! - [`metrics_http`]: `--metrics-listen`, the same numbers for Prometheus.
//! - `notify`: LISTEN / NOTIFY between the sessions of every shard.
//!
//! The path of a Query: `shards` frames and parses the message, calls
//! `Frontend::simple_query`, which parses with sqlparser, plans each statement, evaluates it and
//! writes RowDescription/DataRow/CommandComplete into the connection's write buffer.

pub mod compute;
pub mod dispatch;
pub mod engine;
#[doc(hidden)]
pub mod fuzzing;
pub mod metrics_http;
mod notify;
pub mod replica;
pub mod settings;
pub mod sql;
pub mod stats;
pub mod upstream;
