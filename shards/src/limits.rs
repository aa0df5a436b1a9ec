//! Per-session time limits the state machine enforces, PostgreSQL's way:
//!
//! - `statement_timeout`: a statement still running after it is cancelled through the
//!   connection's [`CancelToken`], so it ends at its next cancellation point with ERROR 57014
//!   "canceling statement due to statement timeout" (a CancelRequest's 57014 says "user
//!   request"); the session lives on.
//! - `idle_in_transaction_session_timeout`: a client that leaves a transaction open and sends
//!   nothing for that long gets FATAL 25P03 and is disconnected, so it cannot hold a
//!   transaction's resources forever.
//!
//! Both are session settings (SET, RESET, `options=-c ...`); the engine reports them through
//! [`crate::engine::Engine::timeouts`], cached so the query path reads two integers. With
//! both at 0 (the default) no timer exists. Timers are [`crate::time::sleep`], which works on
//! both socket paths.
//!
//! The server-wide limits (connections, message size, startup time) live in
//! [`crate::config::ServerConfig`] and are enforced at accept and in the framing.

use std::future::Future;
use std::pin::{pin, Pin};
use std::task::Poll;
use std::time::Duration;

use protocol::{PgError, SqlState};

use crate::engine::CancelToken;

/// A session's time limits in milliseconds; 0 is "no limit", as in PostgreSQL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timeouts {
    pub statement_ms: u64,
    pub idle_in_transaction_ms: u64,
}

/// Run `statement`; if it has not finished after `timeout_ms` (0: never), cancel it with the
/// statement-timeout error and let it run to its cancellation point. The statement is never
/// dropped midway: the engine decides where it can stop cleanly.
pub(crate) async fn with_statement_timeout<F: Future>(
    statement: F,
    timeout_ms: u64,
    token: &CancelToken,
) -> F::Output {
    if timeout_ms == 0 {
        return statement.await;
    }
    let mut statement = pin!(statement);
    let mut timer = Some(crate::time::sleep(Duration::from_millis(timeout_ms)));
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = statement.as_mut().poll(cx) {
            return Poll::Ready(output);
        }
        if let Some(t) = timer.as_mut() {
            if Pin::new(t).poll(cx).is_ready() {
                timer = None;
                token.cancel_for_timeout();
                // The token woke the statement's waker if it was parked on it; poll once more
                // now so a statement that checks the token on every poll ends at once.
                return statement.as_mut().poll(cx);
            }
        }
        Poll::Pending
    })
    .await
}

/// Wait for `read`, unless the client stays silent for `timeout_ms` (0: wait forever): then
/// None. The read is dropped on timeout, which is fine: the connection ends.
pub(crate) async fn unless_idle_too_long<F: Future>(read: F, timeout_ms: u64) -> Option<F::Output> {
    if timeout_ms == 0 {
        return Some(read.await);
    }
    futures_lite::future::or(async { Some(read.await) }, async {
        crate::time::sleep(Duration::from_millis(timeout_ms)).await;
        None
    })
    .await
}

/// PostgreSQL's error for a statement cancelled by `statement_timeout`.
pub fn statement_timeout() -> PgError {
    PgError::new(
        SqlState::QUERY_CANCELED,
        "canceling statement due to statement timeout",
    )
}

/// PostgreSQL's FATAL for `idle_in_transaction_session_timeout`.
pub fn idle_in_transaction_timeout() -> PgError {
    PgError::fatal(
        SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
        "terminating connection due to idle-in-transaction timeout",
    )
}
