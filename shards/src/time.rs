//! Timers and statement clocks for code running on a shard, whichever socket path the shard
//! uses.
//!
//! On the io_uring path the shard's driver owns the thread's sleep (see `uring`), so timers
//! are kept in its wheel and bound its wait; glommio's timers would only fire when glommio's
//! own loop next runs. On the glommio path this is glommio's timer.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::uring::{self, Driver};

/// The longest a sleep lasts: a century. Flags take timeouts in seconds up to `u64::MAX`,
/// which no `Instant` can reach (adding it panics, and took the shard down); any sleep this
/// long is "never" to whoever asked for it.
const LONGEST_SLEEP: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// A future that completes `duration` from now (at most [`LONGEST_SLEEP`]).
pub fn sleep(duration: Duration) -> Sleep {
    let duration = duration.min(LONGEST_SLEEP);
    let deadline = Instant::now() + duration;
    match uring::current() {
        Some(driver) => Sleep::Uring {
            driver,
            deadline,
            key: None,
        },
        None => Sleep::Glommio(glommio::timer::Timer::new(duration)),
    }
}

pub enum Sleep {
    Glommio(glommio::timer::Timer),
    Uring {
        driver: Rc<Driver>,
        deadline: Instant,
        key: Option<(Instant, u64)>,
    },
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.get_mut() {
            Sleep::Glommio(timer) => Pin::new(timer).poll(cx).map(|_| ()),
            Sleep::Uring {
                driver,
                deadline,
                key,
            } => {
                if Instant::now() >= *deadline {
                    if let Some(k) = key.take() {
                        driver.cancel_timer(k);
                    }
                    return Poll::Ready(());
                }
                match key {
                    Some(k) if driver.update_timer(*k, cx.waker()) => {}
                    // Not registered yet, or fired early relative to our clock read: register.
                    _ => *key = Some(driver.add_timer(*deadline, cx.waker().clone())),
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Sleep::Uring {
            driver,
            key: Some(k),
            ..
        } = self
        {
            driver.cancel_timer(*k);
        }
    }
}

/// Microseconds since the Unix epoch, read now.
pub fn wall_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

thread_local! {
    /// The wall-clock read that statements starting in the io_uring driver's current turn may
    /// share (see [`turn_wall_us`]); None until one asks after the turn received bytes.
    static TURN_WALL: Cell<Option<i64>> = const { Cell::new(None) };
    static TURNS: Cell<u64> = const { Cell::new(0) };
}

/// The io_uring driver reaped received bytes: the turn's shared read is out of date.
pub(crate) fn new_turn() {
    TURN_WALL.set(None);
    TURNS.set(TURNS.get().wrapping_add(1));
}

/// How many driver turns received bytes so far on this thread (always 0 on glommio's
/// sockets). A connection's read that returns with this unchanged found its bytes already
/// buffered; one that waited for them was woken by a turn that received them.
pub(crate) fn turn() -> u64 {
    TURNS.get()
}

/// A wall-clock time no earlier than the arrival of every byte this shard's driver has
/// handed to a connection, and no later than now: read once after each driver turn that
/// received bytes, by the first statement that asks, and shared by the first statement each
/// connection starts from those bytes. At 64 connections one turn carries many statements;
/// each read the clock before (0.4% of the server's samples). Used only for a statement that
/// starts from bytes its connection waited for ([`StatementClock`]), so no statement of the
/// connection ended after them. glommio's sockets never get here: their turn count never
/// moves, so no read is fresh.
fn turn_wall_us() -> i64 {
    TURN_WALL.get().unwrap_or_else(|| {
        let us = wall_us();
        TURN_WALL.set(Some(us));
        us
    })
}

/// The time a statement starts at, as PostgreSQL stamps it: when its message arrived. The
/// connection loop sets `fresh` when bytes it waited for came in (it had finished everything
/// before them); the first statement started from them may take the driver turn's shared
/// read, which lies between their arrival and now. Taking it clears `fresh`, and so does the
/// loop once a message that runs SQL was handled, whether it took a time or not: any later
/// statement from the same bytes (a pipeline) reads the clock, so its time is after the end
/// of the statement before it.
#[derive(Clone, Copy)]
pub struct StatementClock<'a> {
    fresh: &'a Cell<bool>,
}

impl<'a> StatementClock<'a> {
    pub(crate) fn new(fresh: &'a Cell<bool>) -> StatementClock<'a> {
        StatementClock { fresh }
    }

    /// Microseconds since the Unix epoch at which the statement starting now started.
    pub fn start_us(self) -> i64 {
        if self.fresh.replace(false) {
            turn_wall_us()
        } else {
            wall_us()
        }
    }
}
