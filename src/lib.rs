//! The `ringwire` binary's library half: what answers SQL on a shard.
//!
//! - [`engine`]: the per-shard [`engine::Frontend`], implementing `shards::engine::Engine`:
//!   statement text → sqlparser → [`engine::Plan`] → replies.
//! - [`sql`]: typed expressions (planning, evaluation, PostgreSQL's typing rules).
//! - [`settings`]: session settings (GUCs) with SET/SHOW/RESET semantics.
//!
//! The path of a Query: `shards` frames and parses the message, calls
//! `Frontend::simple_query`, which parses with sqlparser, plans each statement, evaluates it and
//! writes RowDescription/DataRow/CommandComplete into the connection's write buffer.

pub mod compute;
pub mod dispatch;
pub mod engine;
pub mod settings;
pub mod sql;
