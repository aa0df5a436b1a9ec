//! Timers for code running on a shard, whichever socket path the shard uses.
//!
//! On the io_uring path the shard's driver owns the thread's sleep (see `uring`), so timers
//! are kept in its wheel and bound its wait; glommio's timers would only fire when glommio's
//! own loop next runs. On the glommio path this is glommio's timer.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

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
