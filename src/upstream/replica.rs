//! What a shard knows about each replica: how far it has replayed the primary's WAL, whether
//! it answers, and the poller that keeps both current.
//!
//! Freshness is proven from state, never asked per query: a read whose timestamp (the
//! oracle's applied LSN at its start) is at most a replica's last seen replay LSN may go to
//! that replica with no round trip. The poller asks `pg_last_wal_replay_lsn()` on a connection
//! of its own — every [`POLL_IDLE`] while nothing waits, every [`POLL_WHILE_WAITING`] while a
//! read waits for the replica to catch up (a waiting read hurries it). A replica that errs,
//! closes or does not answer within [`POLL_TIMEOUT`] is out of rotation until the poller
//! reconnects (back-off [`BACKOFF_MIN`]..[`BACKOFF_MAX`]) and a poll succeeds again.
//!
//! All timers are `shards::time::sleep` (glommio's timers would fire late on the io_uring
//! path).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use shards::connect::connect;
use shards::time::sleep;

use super::client::{parse_lsn, simple_value, startup, ReplyBuf};
use super::pool::Pools;

/// Between polls while no read waits: keeps the known replay LSN roughly current (so most
/// reads after a quiet spell need no wait) and notices a dead replica, at a cost of 10
/// queries a second per replica per shard.
pub const POLL_IDLE: Duration = Duration::from_millis(100);
/// Between polls while a read waits for this replica (one round trip each, on loopback
/// ~0.1 ms; streaming replay of a small commit takes about as long).
pub const POLL_WHILE_WAITING: Duration = Duration::from_millis(1);
/// A poll not answered by then takes the replica out of rotation.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(1);
/// Reconnect back-off while the replica is out of rotation (doubling).
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
pub const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Opening a connection to a replica (for the pool or the poller) that takes longer fails.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest a strict read waits for a replica to catch up before it goes to the primary.
pub const WAIT_MAX: Duration = Duration::from_millis(20);
/// A read waits for a replica only if its replay advanced (or was caught up) this recently;
/// one stuck longer (replay paused, a long query conflict) is out of rotation for strict
/// reads until it moves again, and reads go to the primary without waiting.
pub const STUCK_AFTER: Duration = Duration::from_millis(500);
/// Applied LSNs remembered with the instant each poll started, to date a replay position.
const SAMPLES_MAX: usize = 32;

/// A shard's view of one replica.
pub struct Replica {
    /// The shard's connections to it, one pool per (user, database).
    pub pools: Pools,
    /// Highest `pg_last_wal_replay_lsn()` seen.
    replay_lsn: Cell<u64>,
    /// Everything acknowledged before this instant is on the replica: the start of the
    /// latest poll whose applied LSN (read as it started) the replica has since replayed.
    fresh_as_of: Cell<Option<Instant>>,
    /// (start of a poll, applied LSN then), oldest first, for `fresh_as_of`.
    samples: RefCell<VecDeque<(Instant, u64)>>,
    /// The last poll that saw the replay position move or caught up.
    progressed_at: Cell<Option<Instant>>,
    /// In rotation: the last poll succeeded and no read has failed on it since.
    up: Cell<bool>,
    poller_started: Cell<bool>,
    /// Rung by waiting reads: poll now, and keep polling fast.
    hurry: Notify,
    /// Reads waiting for this replica's replay LSN to reach theirs.
    waiting: Cell<usize>,
}

impl Replica {
    pub fn new(pools: Pools) -> Replica {
        Replica {
            pools,
            replay_lsn: Cell::new(0),
            fresh_as_of: Cell::new(None),
            samples: RefCell::new(VecDeque::with_capacity(SAMPLES_MAX)),
            progressed_at: Cell::new(None),
            up: Cell::new(false),
            poller_started: Cell::new(false),
            hurry: Notify::default(),
            waiting: Cell::new(0),
        }
    }

    /// Its last poll succeeded and no read has failed on it since.
    pub fn in_rotation(&self) -> bool {
        self.up.get()
    }

    /// May serve a read at timestamp `lsn` (strict: it has replayed at least that far).
    pub fn serves(&self, lsn: u64) -> bool {
        self.up.get() && self.replay_lsn.get() >= lsn
    }

    /// May serve a read that accepts missing the commits of the last `bound`.
    pub fn serves_stale(&self, lsn: u64, bound: Duration, now: Instant) -> bool {
        self.serves(lsn)
            || self.up.get()
                && self
                    .fresh_as_of
                    .get()
                    .is_some_and(|t| now.saturating_duration_since(t) <= bound)
    }

    /// Worth waiting for: in rotation and replaying (not stuck).
    pub fn worth_waiting(&self, now: Instant) -> bool {
        self.up.get()
            && self
                .progressed_at
                .get()
                .is_some_and(|t| now.saturating_duration_since(t) <= STUCK_AFTER)
    }

    /// A poll that started at `started`, when the applied LSN was `need`, found the replay
    /// position at `lsn`.
    fn polled(&self, started: Instant, need: u64, lsn: u64) {
        let previous = self.replay_lsn.get();
        let lsn = lsn.max(previous);
        self.replay_lsn.set(lsn);
        if lsn > previous || lsn >= need {
            self.progressed_at.set(Some(started));
        }
        let mut samples = self.samples.borrow_mut();
        if samples.len() == SAMPLES_MAX {
            samples.pop_front();
        }
        samples.push_back((started, need));
        // The newest poll start whose applied LSN is replayed dates the replica.
        if let Some(i) = samples.iter().rposition(|&(_, applied)| applied <= lsn) {
            self.fresh_as_of.set(Some(samples[i].0));
            samples.drain(..i);
        }
    }

    /// A read failed on it: out of rotation until the poller finds it answering again.
    pub fn mark_down(&self, progress: &Notify, why: &str) {
        if self.up.replace(false) {
            log::warn!(
                "replica {} out of rotation: {why}",
                self.pools.config.address
            );
        }
        self.pools.drop_idle();
        self.hurry.notify();
        progress.notify();
    }

    /// Start this shard's poller for the replica, once.
    ///
    /// Takes references so the per-read call costs one `Cell` read: cloning the shared `Arc`
    /// per read would bounce its count between cores.
    pub fn start_poller(self: &Rc<Self>, applied: &Arc<AtomicU64>, progress: &Rc<Notify>) {
        if self.poller_started.replace(true) {
            return;
        }
        let (applied, progress) = (applied.clone(), progress.clone());
        let me = self.clone();
        glommio::spawn_local(async move { me.poll_forever(&applied, &progress).await }).detach();
    }

    /// A read waits: poll fast until it is done.
    pub fn wait_begins(&self) {
        self.waiting.set(self.waiting.get() + 1);
        self.hurry.notify();
    }

    pub fn wait_ends(&self) {
        self.waiting.set(self.waiting.get() - 1);
    }

    async fn poll_forever(&self, applied: &AtomicU64, progress: &Notify) {
        let config = self.pools.config.clone();
        let mut backoff = BACKOFF_MIN;
        let mut conn = None;
        loop {
            if conn.is_none() {
                let opened = with_timeout("connecting", CONNECT_TIMEOUT, async {
                    let mut stream = connect(&config.address).await.map_err(|e| e.to_string())?;
                    let mut buf = ReplyBuf::default();
                    startup(&mut stream, &mut buf, &config).await?;
                    Ok((stream, buf))
                })
                .await;
                match opened {
                    Ok(c) => conn = Some(c),
                    Err(why) => {
                        self.poll_failed(progress, &why);
                        sleep(backoff).await;
                        backoff = (backoff * 2).min(BACKOFF_MAX);
                        continue;
                    }
                }
            }
            let (stream, buf) = conn.as_mut().expect("connected above");
            let started = Instant::now();
            let need = applied.load(Ordering::SeqCst);
            let polled = with_timeout("polling the replay position", POLL_TIMEOUT, async {
                simple_value(stream, buf, "SELECT pg_last_wal_replay_lsn()")
                    .await
                    .map_err(String::from)
            })
            .await;
            match polled.map(|v| v.as_deref().and_then(parse_lsn)) {
                Ok(Some(lsn)) => {
                    backoff = BACKOFF_MIN;
                    self.polled(started, need, lsn);
                    if !self.up.replace(true) {
                        log::info!("replica {} in rotation", config.address);
                    }
                    progress.notify();
                }
                Ok(None) => {
                    // NULL: not in recovery (promoted, or not a standby at all). Its reads
                    // would not be ordered by the primary's WAL: never route to it.
                    self.poll_failed(progress, "it is not in recovery (not a standby)");
                    conn = None;
                    sleep(BACKOFF_MAX).await;
                    continue;
                }
                Err(why) => {
                    self.poll_failed(progress, &why);
                    conn = None;
                    sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    continue;
                }
            }
            let seen = self.hurry.generation();
            if self.waiting.get() > 0 {
                sleep(POLL_WHILE_WAITING).await;
            } else {
                futures_lite::future::or(sleep(POLL_IDLE), self.hurry.changed(seen)).await;
            }
        }
    }

    fn poll_failed(&self, progress: &Notify, why: &str) {
        if self.up.replace(false) {
            log::warn!(
                "replica {} out of rotation: {why}",
                self.pools.config.address
            );
        }
        self.pools.drop_idle();
        progress.notify();
    }
}

/// `f`, or an error naming `what` after `limit`.
pub async fn with_timeout<T>(
    what: &str,
    limit: Duration,
    f: impl Future<Output = Result<T, String>>,
) -> Result<T, String> {
    futures_lite::future::or(f, async {
        sleep(limit).await;
        Err(format!("{what}: no answer within {limit:?}"))
    })
    .await
}

/// A shard-local wake-up for any number of waiters: `notify` bumps a generation and wakes
/// everyone who waits for it to move.
#[derive(Default)]
pub struct Notify {
    generation: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

impl Notify {
    pub fn generation(&self) -> u64 {
        self.generation.get()
    }

    pub fn notify(&self) {
        self.generation.set(self.generation.get() + 1);
        let wakers = std::mem::take(&mut *self.wakers.borrow_mut());
        for w in wakers {
            w.wake();
        }
    }

    /// Completes once the generation differs from `seen`.
    pub fn changed(&self, seen: u64) -> Changed<'_> {
        Changed { notify: self, seen }
    }
}

pub struct Changed<'a> {
    notify: &'a Notify,
    seen: u64,
}

impl Future for Changed<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.notify.generation.get() != self.seen {
            return Poll::Ready(());
        }
        let mut wakers = self.notify.wakers.borrow_mut();
        if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
