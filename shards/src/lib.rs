//! Thread-per-core serving: one pinned glommio executor per shard, each owning its listening
//! socket, its connections and its engine.
//!
//! - [`config`]: the validated [`config::ServerConfig`] and the startup checks.
//! - [`runtime`]: binds SO_REUSEPORT listeners, starts the shards, wires the cancel mesh.
//! - `shard`: per-shard state (engine, cancel tokens, process ids).
//! - `conn`: one connection's state machine (startup → auth → ready ⇄ in-query), flushing once
//!   per batch of replies.
//! - [`auth`]: host-based rules, users' SCRAM/md5 secrets, the authentication exchanges;
//!   the tables are one `Arc` snapshot per connection, swapped whole on SIGHUP.
//! - [`engine`]: the [`engine::Engine`] trait the SQL side implements.
//! - [`limits`]: `statement_timeout` and `idle_in_transaction_session_timeout`.
//! - [`uring`]: the shard's own io_uring socket path (the default); [`time`]: timers that
//!   work on both paths.
//! - [`tls`]: SSLRequest/direct TLS negotiation and the plain-or-TLS stream under `conn`.
//! - [`metrics`]: per-shard histograms and counters of the serving layer, merged on demand;
//!   [`side`]: side listeners (the metrics endpoint) served by a shard on either path.
//! - [`connect`]: outbound connections over the shard's socket path; `relay`: the
//!   connection loop of upstream mode, which hands client messages to [`engine::Engine::relay`].
//!
//! What crosses cores: only CancelRequests (over flume channels, to the shard whose id is in
//! the process id) and the connection count (one atomic add per connect).

pub mod auth;
pub mod config;
mod conn;
pub mod connect;
pub mod engine;
pub mod limits;
pub mod metrics;
mod relay;
pub mod runtime;
mod shard;
pub mod side;
pub mod time;
pub mod tls;
pub mod uring;

pub use shard::shard_of_process_id;
