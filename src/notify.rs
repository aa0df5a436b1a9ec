//! LISTEN, UNLISTEN, NOTIFY and `pg_notify()` on the embedded compute, as a client of
//! PostgreSQL sees them (its `async.c`); docs/ARCHITECTURE.md, "LISTEN and NOTIFY", has the
//! rules and where they differ (ordering across shards, the per-session limit).
//!
//! - A session's NOTIFYs and LISTEN/UNLISTENs wait in its [`Pending`] until its transaction
//!   ends; on commit [`Listeners::end_transaction`] applies the listens and returns the
//!   notifications as one [`Batch`], which the engine hands to its own shard's
//!   [`Listeners::deliver`] and sends to every other shard.
//! - A listening session's [`Inbox`] queues references into the batches; the connection
//!   drains it before ReadyForQuery and, while it waits for the client outside any
//!   transaction, through [`shards::engine::Engine::idle`]. A session that never listened
//!   has no inbox: its cost is one empty `Option` read per wait.
//!
//! Written here rather than taken from a crate: it is a few maps glued to the shard's mesh and
//! to the connection's wait, which no library knows about.

use std::cell::{Cell, RefCell};
use std::collections::{HashSet, VecDeque};
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};

use protocol::{PgError, SqlState};

/// PostgreSQL's `NAMEDATALEN - 1`: the longest channel name.
pub(crate) const MAX_CHANNEL_BYTES: usize = 63;
/// PostgreSQL's `NOTIFY_PAYLOAD_MAX_LENGTH` (8000 with the default block size): a payload must
/// be shorter.
pub(crate) const PAYLOAD_LIMIT_BYTES: usize = 8000;
/// Bytes of notifications one session may have waiting (channel, payload and 32 bytes of
/// bookkeeping each), e.g. a listener that stays in a transaction block while others notify.
/// What arrives beyond this is not kept, and the session ends with FATAL 54000 when it next
/// waits outside a transaction: it never carries on as though it had heard everything.
/// PostgreSQL bounds its one shared queue (8 GB) instead and fails the senders' commits;
/// here a sender's commit never waits on a listener.
const MAX_QUEUED_BYTES: usize = 64 << 20;
/// How much one wake of an idle connection writes before the connection flushes it and asks
/// again, so a long queue goes out in socket-sized pieces.
const DRAIN_BYTES: usize = 64 << 10;

/// One committed transaction's notifications, shared by every shard that delivers them.
pub struct Batch {
    /// The sending session's process id, as its BackendKeyData gave it.
    pub pid: i32,
    pub items: Vec<(String, String)>,
}

/// Check a channel name and payload as `Async_Notify` does (22023); `pg_notify` calls this,
/// and NOTIFY, whose channel the parser already cut to 63 bytes.
pub(crate) fn check(channel: &str, payload: &str) -> Result<(), PgError> {
    let invalid = |m: &str| {
        Err(PgError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            m.to_string(),
        ))
    };
    if channel.is_empty() {
        return invalid("channel name cannot be empty");
    }
    if channel.len() > MAX_CHANNEL_BYTES {
        return invalid("channel name too long");
    }
    if payload.len() >= PAYLOAD_LIMIT_BYTES {
        return invalid("payload string too long");
    }
    Ok(())
}

/// What a session's open transaction will do to its notifications at commit.
#[derive(Default)]
pub(crate) struct Pending {
    /// LISTEN (`Some(true)`), UNLISTEN (`Some(false)`) of a channel, or UNLISTEN * (`None` for
    /// the channel), in the order run.
    listens: Vec<(Option<String>, bool)>,
    notifies: Vec<(String, String)>,
    /// The pairs in `notifies`, once there are enough that a scan would cost: PostgreSQL
    /// dedups with a hash table too.
    seen: Option<HashSet<(String, String)>>,
}

impl Pending {
    pub(crate) fn listen(&mut self, channel: &str) {
        self.listens.push((Some(channel.to_string()), true));
    }

    /// UNLISTEN `channel`, or every channel.
    pub(crate) fn unlisten(&mut self, channel: Option<&str>) {
        self.listens.push((channel.map(str::to_string), false));
    }

    pub(crate) fn notify(&mut self, channel: String, payload: String) {
        const SCAN_UP_TO: usize = 16;
        let pair = (channel, payload);
        let duplicate = match &mut self.seen {
            Some(seen) => !seen.insert(pair.clone()),
            None => self.notifies.contains(&pair),
        };
        if duplicate {
            return;
        }
        if self.seen.is_none() && self.notifies.len() >= SCAN_UP_TO {
            let seen = self.notifies.iter().chain([&pair]).cloned().collect();
            self.seen = Some(seen);
        }
        self.notifies.push(pair);
    }

    fn is_empty(&self) -> bool {
        self.listens.is_empty() && self.notifies.is_empty()
    }
}

/// A listening session's channels and the notifications waiting for it.
#[derive(Default)]
pub(crate) struct Inbox {
    channels: RefCell<HashSet<String>>,
    queue: RefCell<VecDeque<(Arc<Batch>, u32)>>,
    /// What `queue` holds, counted as [`MAX_QUEUED_BYTES`] counts it.
    queued_bytes: Cell<usize>,
    waker: Cell<Option<Waker>>,
    overflowed: Cell<bool>,
    /// In its shard's [`Listeners`]: while it listens on some channel.
    registered: Cell<bool>,
}

impl Inbox {
    fn push(&self, batch: &Arc<Batch>, item: usize) {
        let (channel, payload) = &batch.items[item];
        let bytes = self.queued_bytes.get() + channel.len() + payload.len() + 32;
        if bytes > MAX_QUEUED_BYTES {
            self.overflowed.set(true);
        } else {
            self.queued_bytes.set(bytes);
            self.queue
                .borrow_mut()
                .push_back((batch.clone(), item as u32));
        }
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// Append waiting notifications to `out` as NotificationResponse messages, until `out`
    /// holds `limit` bytes. Those of a channel the session no longer listens on are dropped:
    /// PostgreSQL, too, looks at the session's channels when it reads a notification, not
    /// when it was sent.
    fn drain_up_to(&self, out: &mut Vec<u8>, limit: usize) {
        let channels = self.channels.borrow();
        let mut queue = self.queue.borrow_mut();
        while out.len() < limit {
            let Some((batch, item)) = queue.pop_front() else {
                break;
            };
            let (channel, payload) = &batch.items[item as usize];
            let bytes = channel.len() + payload.len() + 32;
            self.queued_bytes.set(self.queued_bytes.get() - bytes);
            if channels.contains(channel) {
                protocol::backend::write_notification(out, batch.pid, channel, payload);
            }
        }
    }

    /// Append every waiting notification to `out` (see [`Inbox::drain_up_to`]).
    pub(crate) fn drain(&self, out: &mut Vec<u8>) {
        self.drain_up_to(out, usize::MAX);
    }

    /// Wait until notifications are waiting, then append some to `out` (the caller writes
    /// them and asks again); fail once more arrived than the session may hold. Cancel safe.
    pub(crate) async fn wait(&self, out: &mut Vec<u8>) -> Result<(), PgError> {
        poll_fn(|cx| {
            if self.overflowed.get() {
                return Poll::Ready(Err(PgError::fatal(
                    SqlState::PROGRAM_LIMIT_EXCEEDED,
                    "too many notifications waiting for this session",
                )
                .with_detail(format!(
                    "More than {} MiB of notifications arrived while the session was in a \
                     transaction block or not reading them.",
                    MAX_QUEUED_BYTES >> 20
                ))));
            }
            let start = out.len();
            // Stops at DRAIN_BYTES or an empty queue; it may write nothing, when what waited
            // was only for channels no longer listened to.
            self.drain_up_to(out, start + DRAIN_BYTES);
            if out.len() == start {
                self.waker.set(Some(cx.waker().clone()));
                return Poll::Pending;
            }
            Poll::Ready(Ok(()))
        })
        .await
    }
}

/// A session's side of it: what its transaction will do, and its inbox once it has listened.
#[derive(Default)]
pub(crate) struct SessionNotify {
    pub(crate) pending: Pending,
    inbox: Option<Rc<Inbox>>,
}

impl SessionNotify {
    /// The inbox, once the session has committed a LISTEN (or UNLISTEN).
    pub(crate) fn inbox(&self) -> Option<&Rc<Inbox>> {
        self.inbox.as_ref()
    }
}

/// One shard's listening sessions.
#[derive(Default)]
pub(crate) struct Listeners {
    inboxes: RefCell<Vec<Rc<Inbox>>>,
}

impl Listeners {
    /// The session's transaction ended: on commit apply its LISTEN/UNLISTENs, then return its
    /// notifications for every shard to deliver (the caller sends them); on rollback forget
    /// both. Applying listens first makes a session that LISTENs and NOTIFYs one channel in one
    /// transaction hear itself, as in PostgreSQL.
    pub(crate) fn end_transaction(
        &self,
        session: &mut SessionNotify,
        pid: i32,
        commit: bool,
    ) -> Option<Arc<Batch>> {
        if session.pending.is_empty() {
            return None;
        }
        let pending = std::mem::take(&mut session.pending);
        if !commit {
            return None;
        }
        for (channel, listen) in pending.listens {
            if !listen && session.inbox.is_none() {
                continue;
            }
            let inbox = session.inbox.get_or_insert_with(Rc::default);
            let mut channels = inbox.channels.borrow_mut();
            match (channel, listen) {
                (Some(channel), true) => {
                    channels.insert(channel);
                }
                (Some(channel), false) => {
                    channels.remove(&channel);
                }
                (None, _) => channels.clear(),
            }
        }
        if let Some(inbox) = &session.inbox {
            // A session that listens on nothing is no listener (and what waits in its queue
            // is for channels it no longer hears: `drain_up_to` drops it).
            let listening = !inbox.channels.borrow().is_empty();
            if listening != inbox.registered.get() {
                inbox.registered.set(listening);
                if listening {
                    self.inboxes.borrow_mut().push(inbox.clone());
                } else {
                    self.remove(inbox);
                }
            }
        }
        (!pending.notifies.is_empty()).then(|| {
            Arc::new(Batch {
                pid,
                items: pending.notifies,
            })
        })
    }

    /// Hand a committed batch to this shard's sessions that listen on its channels.
    pub(crate) fn deliver(&self, batch: &Arc<Batch>) {
        for inbox in self.inboxes.borrow().iter() {
            let channels = inbox.channels.borrow();
            for (i, (channel, _)) in batch.items.iter().enumerate() {
                if channels.contains(channel) {
                    inbox.push(batch, i);
                }
            }
        }
    }

    /// The session ended.
    pub(crate) fn close(&self, session: &mut SessionNotify) {
        session.pending = Pending::default();
        if let Some(inbox) = session.inbox.take() {
            if inbox.registered.get() {
                self.remove(&inbox);
            }
        }
    }

    fn remove(&self, inbox: &Rc<Inbox>) {
        self.inboxes.borrow_mut().retain(|i| !Rc::ptr_eq(i, inbox));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(out: &[u8]) -> Vec<(i32, String, String)> {
        let mut got = Vec::new();
        let mut rest = out;
        while let Some((frame, n)) = protocol::wire::split_frame(rest, 1 << 20).unwrap() {
            match protocol::backend::BackendMessage::parse(frame).unwrap() {
                protocol::backend::BackendMessage::NotificationResponse {
                    process_id,
                    channel,
                    payload,
                } => got.push((process_id, channel.to_string(), payload.to_string())),
                other => panic!("unexpected {other:?}"),
            }
            rest = &rest[n..];
        }
        got
    }

    #[test]
    fn a_transaction_delivers_at_commit_once_per_pair_in_order() {
        let shard = Listeners::default();
        let mut listener = SessionNotify::default();
        listener.pending.listen("a");
        assert!(shard.end_transaction(&mut listener, 1, true).is_none());
        let mut sender = SessionNotify::default();
        for (c, p) in [("a", "1"), ("b", "x"), ("a", "2"), ("a", "1")] {
            sender.pending.notify(c.into(), p.into());
        }
        let batch = shard.end_transaction(&mut sender, 7, true).unwrap();
        assert_eq!(batch.items.len(), 3, "the repeated pair is sent once");
        shard.deliver(&batch);
        let mut out = Vec::new();
        listener.inbox().unwrap().drain(&mut out);
        assert_eq!(
            messages(&out),
            [(7, "a".into(), "1".into()), (7, "a".into(), "2".into())]
        );
    }

    #[test]
    fn rollback_forgets_and_unlisten_drops_what_waits() {
        let shard = Listeners::default();
        let mut s = SessionNotify::default();
        s.pending.listen("a");
        s.pending.notify("a".into(), "lost".into());
        assert!(shard.end_transaction(&mut s, 1, false).is_none());
        assert!(s.inbox().is_none(), "a rolled-back LISTEN does not listen");
        assert!(shard.inboxes.borrow().is_empty());
        s.pending.unlisten(None);
        shard.end_transaction(&mut s, 1, true);
        assert!(s.inbox().is_none(), "UNLISTEN alone makes no inbox");
        s.pending.listen("a");
        s.pending.listen("b");
        s.pending.notify("a".into(), "self".into());
        let batch = shard.end_transaction(&mut s, 1, true).unwrap();
        shard.deliver(&batch);
        let mut out = Vec::new();
        s.inbox().unwrap().drain(&mut out);
        assert_eq!(messages(&out), [(1, "a".into(), "self".into())]);
        // Waiting when the session stops listening: PostgreSQL checks the channel when it
        // reads a notification, so neither reaches the client.
        let other = Arc::new(Batch {
            pid: 2,
            items: vec![("a".into(), "1".into()), ("b".into(), "2".into())],
        });
        shard.deliver(&other);
        s.pending.unlisten(Some("a"));
        shard.end_transaction(&mut s, 1, true);
        out.clear();
        s.inbox().unwrap().drain(&mut out);
        assert_eq!(messages(&out), [(2, "b".into(), "2".into())]);
        shard.deliver(&other);
        s.pending.unlisten(None);
        shard.end_transaction(&mut s, 1, true);
        out.clear();
        s.inbox().unwrap().drain(&mut out);
        assert!(out.is_empty());
        assert!(shard.inboxes.borrow().is_empty(), "no longer a listener");
        assert_eq!(s.inbox().unwrap().queued_bytes.get(), 0);
    }

    #[test]
    fn a_session_that_lets_too_much_wait_ends_with_54000() {
        let shard = Listeners::default();
        let mut s = SessionNotify::default();
        s.pending.listen("c");
        shard.end_transaction(&mut s, 1, true);
        let batch = Arc::new(Batch {
            pid: 2,
            items: vec![("c".into(), "p".repeat(7999))],
        });
        // (Each counts 1 + 7999 + 32 bytes.)
        for _ in 0..MAX_QUEUED_BYTES / 8032 {
            shard.deliver(&batch);
        }
        let inbox = s.inbox().unwrap().clone();
        assert!(!inbox.overflowed.get());
        // Drained a piece per wake while within the limit.
        let mut out = Vec::new();
        futures_lite::future::block_on(inbox.wait(&mut out)).unwrap();
        assert!(out.len() >= DRAIN_BYTES && out.len() < DRAIN_BYTES + 8100);
        for _ in 0..100 {
            shard.deliver(&batch);
        }
        let e = futures_lite::future::block_on(inbox.wait(&mut out)).unwrap_err();
        assert_eq!(e.code, SqlState::PROGRAM_LIMIT_EXCEEDED);
    }

    #[test]
    fn many_notifies_dedup_through_the_set() {
        let mut p = Pending::default();
        for i in 0..100 {
            p.notify("c".into(), (i % 40).to_string());
        }
        assert_eq!(p.notifies.len(), 40);
        assert_eq!(p.notifies[39].1, "39");
    }

    #[test]
    fn channel_and_payload_limits_are_postgres_own() {
        assert!(check("", "").is_err());
        assert!(check(&"c".repeat(63), &"p".repeat(7999)).is_ok());
        assert!(check(&"c".repeat(64), "").is_err());
        assert!(check("c", &"p".repeat(8000)).is_err());
    }
}
