//! Shared test support: a real ringwire process and a real PostgreSQL 15, each on a free port.
#![allow(dead_code)]

pub mod client;
pub mod pgbench;
pub mod postgres;
pub mod ringwire;
pub mod wire;
