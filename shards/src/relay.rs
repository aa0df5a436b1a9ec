//! The connection loop of upstream mode: after startup and authentication (shared with the
//! embedded mode), the client's messages are framed here — header checked against
//! `--max-message-bytes`, unknown tags refused — and handed to [`Engine::relay`] in batches:
//! everything complete that the client sent since the last batch. The engine forwards them
//! upstream and returns the replies; this loop flushes them once per batch, as the embedded
//! mode does.
//!
//! Batching per read keeps the protocol's pipelining: a client that sends Parse/Bind/Execute/
//! Sync in one write costs one upstream write and one reply write.
//!
//! While it waits for the client, the loop also lets the engine pass on what the upstream
//! sends unasked ([`Engine::idle`]: notifications, notices), and ends a client that
//! holds upstream work open and stays silent past the engine's idle limit
//! ([`Engine::timeouts`]) with FATAL 25P03, as in the embedded mode.

use std::time::{Duration, Instant};

use futures_lite::future::or;
use futures_lite::{AsyncRead, AsyncWrite};
use protocol::frontend;
use protocol::wire::{frame_bytes_needed, split_frame};
use protocol::{PgError, Severity, SqlState};

use crate::conn::{flush, Conn, End, ReadBuf, FLUSH_BYTES};
use crate::engine::Engine;
use crate::limits;

pub(crate) async fn run<E: Engine, S: AsyncRead + AsyncWrite + Unpin>(
    mut conn: Conn<E>,
    stream: &mut S,
    rbuf: &mut ReadBuf,
    out: Vec<u8>,
) -> End {
    let end = serve(&mut conn, stream, rbuf, out).await;
    conn.shard.engine.close_session(&mut conn.session);
    end
}

async fn serve<E: Engine, S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Conn<E>,
    stream: &mut S,
    rbuf: &mut ReadBuf,
    mut out: Vec<u8>,
) -> End {
    let max = conn.shard.config.max_message_bytes;
    loop {
        // The complete frames at the front of the buffer, up to a Terminate.
        let data = rbuf.data();
        let mut n = 0;
        let mut terminate = false;
        let mut fatal = None;
        while n < data.len() {
            let tag = data[n];
            if !frontend::is_frontend_tag(tag) {
                fatal = Some(PgError::fatal(
                    SqlState::PROTOCOL_VIOLATION,
                    format!("invalid frontend message type {tag}"),
                ));
                break;
            }
            match split_frame(&data[n..], max) {
                Ok(Some((frame, len))) => {
                    if frame.tag == b'X' {
                        terminate = true;
                        break;
                    }
                    n += len;
                }
                Ok(None) => break,
                Err(e) => {
                    fatal = Some(e);
                    break;
                }
            }
        }
        if n > 0 {
            let shard = conn.shard.clone();
            let relayed = shard
                .engine
                .relay(
                    &mut conn.session,
                    &data[..n],
                    &conn.cancel,
                    &mut out,
                    stream,
                )
                .await;
            if let Err(e) = relayed {
                return fatal_end(stream, &mut out, e).await;
            }
            rbuf.consume(n);
        }
        if let Some(e) = fatal {
            return fatal_end(stream, &mut out, e).await;
        }
        if let Err(e) = flush(stream, &mut out).await {
            return End::Io(e);
        }
        if terminate {
            return End::Terminated;
        }
        if out.capacity() > FLUSH_BYTES * 4 {
            out = Vec::with_capacity(FLUSH_BYTES / 16);
        }
        rbuf.shrink_if_idle();
        let want = frame_bytes_needed(rbuf.data()).unwrap_or(5);
        let shard = conn.shard.clone();
        let limit_ms = shard.engine.timeouts(&conn.session).idle_in_transaction_ms;
        let deadline = (limit_ms > 0)
            .then(|| Instant::now().checked_add(Duration::from_millis(limit_ms)))
            .flatten();
        loop {
            // The client's bytes first, then what the upstream sent unasked, then the limit.
            let client = async { Wake::Client(rbuf.fill(stream, want).await) };
            let upstream = async {
                let session = &mut conn.session;
                Wake::Upstream(shard.engine.idle(session, &mut out).await)
            };
            let limit = async {
                match deadline {
                    Some(at) => {
                        crate::time::sleep(at.saturating_duration_since(Instant::now())).await
                    }
                    None => std::future::pending().await,
                }
                Wake::IdleTooLong
            };
            match or(client, or(upstream, limit)).await {
                Wake::Client(Ok(true)) => break,
                Wake::Client(Ok(false)) => return End::ClientClosed,
                Wake::Client(Err(e)) => return End::Io(e),
                Wake::Upstream(Ok(())) => {
                    if let Err(e) = flush(stream, &mut out).await {
                        return End::Io(e);
                    }
                }
                Wake::Upstream(Err(e)) => return fatal_end(stream, &mut out, e).await,
                Wake::IdleTooLong => {
                    let e = limits::idle_in_transaction_timeout();
                    return fatal_end(stream, &mut out, e).await;
                }
            }
        }
    }
}

/// What ended a wait for the client.
enum Wake {
    Client(std::io::Result<bool>),
    Upstream(Result<(), PgError>),
    IdleTooLong,
}

async fn fatal_end<S: AsyncWrite + Unpin>(stream: &mut S, out: &mut Vec<u8>, e: PgError) -> End {
    let e = PgError {
        severity: Severity::Fatal,
        ..e
    };
    protocol::backend::write_error(out, &e);
    let _ = flush(stream, out).await;
    End::Fatal(e)
}
