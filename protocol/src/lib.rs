//! Sans-IO PostgreSQL v3 wire protocol: bytes in, typed messages out; typed messages in, bytes
//! appended to the caller's buffer out. No sockets, no async, no SQL.
//!
//! - [`wire`]: framing (`split_frame` checks the length before the body is awaited), a bounds-
//!   checked [`wire::Reader`], the `begin_message`/`finish_message` back-patching writers.
//! - [`frontend`]: the startup packets and client messages, borrowed from the read buffer; plus
//!   encoders for clients (load generator, tests).
//! - [`backend`]: server message encoders writing into the write buffer; plus a decoder.
//! - [`types`]: OIDs, [`types::Value`], and text/binary value formats.
//! - [`error`]: SQLSTATEs and [`error::PgError`], which becomes an ErrorResponse.
//! - `fuzzing` (hidden): the decoders driven as a connection drives them, invariants asserted;
//!   shared by the `cargo fuzz` targets in `fuzz/` and the property tests.
//!
//! Data flow in a server: socket bytes → `split_frame` → `FrontendMessage::parse` → (the
//! connection state machine in `shards`) → `backend::write_*` → socket.

pub mod backend;
pub mod error;
pub mod frontend;
#[doc(hidden)]
pub mod fuzzing;
pub mod types;
pub mod wire;

pub use error::{PgError, Severity, SqlState};
pub use wire::Format;
