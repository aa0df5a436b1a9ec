//! The timestamp oracle: commit timestamps in one total order, and read timestamps that make
//! reads strict serializable without a cross-core round trip.
//!
//! - [`Frontiers`]: one cache-line-padded slot per shard holding the newest timestamp whose
//!   commits are all applied ("the read frontier"). Only the sequencer writes the slots; shard
//!   `i` only reads slot `i`. A read takes its timestamp from its own shard's slot: one load of a
//!   line that changes once per commit batch, never a write, never a round trip.
//! - [`Holds`]: which old snapshots are still in use, so the compute can drop versions no read
//!   can need. Each shard publishes the oldest snapshot its open transaction blocks hold in its
//!   own padded slot (written when a block opens or closes, never per query); the compute takes
//!   the minimum when it compacts.
//! - [`Sequencer`]: the sans-IO core of the commit path. It hands out timestamps to commit
//!   requests in batches (everything that arrived while the previous batch was being applied
//!   travels as one batch), and says when a batch may be published.
//!
//! # Why the fast path is always fresh
//! A commit is acknowledged to its client only after the sequencer has (1) seen every compute
//! worker involved apply it, and (2) stored its timestamp (or a later one) into *every* shard's
//! slot. Any read that starts after that acknowledgement — on any shard — therefore loads a slot
//! value ≥ the commit's timestamp, and reads at it. The cost of strictness is moved to the
//! write path (one store per shard per commit batch), which is where the batching is. The
//! linearizability test in the root crate fails if a shard reads a cached or stale slot value
//! (see `tests/linearizable.rs`).

use std::sync::atomic::{AtomicU64, Ordering};

/// A logical timestamp. 0 is "before everything"; the first commit gets 1.
pub type Timestamp = u64;

/// One slot per cache line (128 bytes covers adjacent-line prefetching on x86), so a store to
/// one shard's slot never invalidates another shard's line.
#[repr(align(128))]
#[derive(Default)]
struct Slot(AtomicU64);

/// Per-shard read frontiers. Shared (`Arc`) between the sequencer and the shards.
pub struct Frontiers {
    slots: Box<[Slot]>,
}

impl Frontiers {
    pub fn new(shards: usize) -> Frontiers {
        Frontiers {
            slots: (0..shards).map(|_| Slot::default()).collect(),
        }
    }

    pub fn shards(&self) -> usize {
        self.slots.len()
    }

    /// The read timestamp for a read starting now on `shard`.
    #[inline]
    pub fn read(&self, shard: usize) -> Timestamp {
        self.slots[shard].0.load(Ordering::Acquire)
    }

    /// Make `ts` readable on every shard. Called only by the sequencer, with non-decreasing
    /// values, after everything at or below `ts` is applied.
    pub fn publish(&self, ts: Timestamp) {
        for slot in self.slots.iter() {
            let previous = slot.0.swap(ts, Ordering::Release);
            debug_assert!(
                previous <= ts,
                "frontier went backwards: {previous} -> {ts}"
            );
        }
    }
}

/// Snapshot holds: per shard, the oldest timestamp one of its transaction blocks still reads
/// at, and the compaction bound — the highest timestamp the compute has proposed to compact
/// below. Shared (`Arc`) between the compute and the shards.
///
/// # Why a hold and a compaction cannot miss each other
/// A shard holds `ts` by storing it in its slot and *then* loading the bound
/// ([`Holds::try_hold`]); the compute raises the bound to its candidate and *then* loads every
/// slot ([`Holds::horizon`]). All four accesses are `SeqCst`, so in their single total order
/// either the compute's slot loads come after the shard's store (the horizon is at most `ts`),
/// or the shard's bound load comes after the compute's bound store (the shard sees a bound
/// above `ts` and must take a newer snapshot). A successful hold is therefore never compacted
/// away, at no cost to reads: the slot is written when a block opens or closes, and read only by
/// the compute when it compacts.
pub struct Holds {
    /// Per shard: the oldest held snapshot, [`Holds::NONE`] if none.
    slots: Box<[Slot]>,
    bound: Slot,
}

impl Holds {
    /// "No snapshot held" in a slot.
    pub const NONE: Timestamp = Timestamp::MAX;

    pub fn new(shards: usize) -> Holds {
        Holds {
            slots: (0..shards)
                .map(|_| Slot(AtomicU64::new(Self::NONE)))
                .collect(),
            bound: Slot::default(),
        }
    }

    /// Shard `shard` starts holding a snapshot at `ts` while its oldest hold so far is
    /// `oldest` (None: it holds nothing). True: `ts` is safe until the shard publishes a hold
    /// above it. False: compaction may already have passed `ts`; the caller takes a newer
    /// timestamp (the frontier is never below the bound) and tries again.
    pub fn try_hold(&self, shard: usize, ts: Timestamp, oldest: Option<Timestamp>) -> bool {
        if oldest.is_some_and(|o| o <= ts) {
            // An older hold, checked when it was taken, already keeps `ts` readable.
            return true;
        }
        self.slots[shard].0.store(ts, Ordering::SeqCst);
        self.bound.0.load(Ordering::SeqCst) <= ts
    }

    /// Shard `shard`'s oldest hold is now `oldest` (None: none). Only for raising a hold (a
    /// block ended); lowering goes through [`Holds::try_hold`].
    pub fn release_to(&self, shard: usize, oldest: Option<Timestamp>) {
        self.slots[shard]
            .0
            .store(oldest.unwrap_or(Self::NONE), Ordering::SeqCst);
    }

    /// The compute wants to compact below `candidate` (at most its last published frontier):
    /// returns the timestamp it may compact below, `min(candidate, every shard's hold)`.
    pub fn horizon(&self, candidate: Timestamp) -> Timestamp {
        self.bound.0.fetch_max(candidate, Ordering::SeqCst);
        self.slots
            .iter()
            .map(|s| s.0.load(Ordering::SeqCst))
            .fold(candidate, Timestamp::min)
    }

    /// Shard `shard`'s published hold (None: none).
    pub fn held(&self, shard: usize) -> Option<Timestamp> {
        let v = self.slots[shard].0.load(Ordering::Relaxed);
        (v != Self::NONE).then_some(v)
    }
}

/// The sequencer's bookkeeping. The owner (a task on one shard) feeds it requests and
/// completions; it never blocks and owns no channels, so it is tested on its own.
#[derive(Debug)]
pub struct Sequencer<R> {
    /// The last timestamp handed out.
    last_assigned: Timestamp,
    /// Requests waiting for the next batch.
    waiting: Vec<R>,
    /// The batch being applied: its highest timestamp.
    in_flight: Option<Timestamp>,
    /// Sizes of the batches formed so far (for the per-shard batch-size counters).
    batches: u64,
    batched_requests: u64,
}

impl<R> Default for Sequencer<R> {
    fn default() -> Self {
        Sequencer {
            last_assigned: 0,
            waiting: Vec::new(),
            in_flight: None,
            batches: 0,
            batched_requests: 0,
        }
    }
}

impl<R> Sequencer<R> {
    pub fn new() -> Sequencer<R> {
        Sequencer::default()
    }

    /// Queue a commit request for the next batch.
    pub fn submit(&mut self, request: R) {
        self.waiting.push(request);
    }

    /// If no batch is in flight and requests are waiting, form the next batch: every waiting
    /// request gets the next timestamp, in arrival order. The caller applies them and then calls
    /// [`Sequencer::applied`].
    pub fn next_batch(&mut self) -> Option<Vec<(Timestamp, R)>> {
        if self.in_flight.is_some() || self.waiting.is_empty() {
            return None;
        }
        let batch: Vec<(Timestamp, R)> = self
            .waiting
            .drain(..)
            .map(|r| {
                self.last_assigned += 1;
                (self.last_assigned, r)
            })
            .collect();
        self.batches += 1;
        self.batched_requests += batch.len() as u64;
        self.in_flight = Some(self.last_assigned);
        Some(batch)
    }

    /// The in-flight batch is applied everywhere; returns the timestamp to publish.
    pub fn applied(&mut self) -> Timestamp {
        self.in_flight
            .take()
            .expect("applied() without a batch in flight")
    }

    pub fn last_assigned(&self) -> Timestamp {
        self.last_assigned
    }

    pub fn has_batch_in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// (batches formed, requests in them): the mean batch size is their ratio.
    pub fn batch_stats(&self) -> (u64, u64) {
        (self.batches, self.batched_requests)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn batches_take_everything_waiting_and_one_batch_flies_at_a_time() {
        let mut s = Sequencer::new();
        assert!(s.next_batch().is_none());
        s.submit("a");
        s.submit("b");
        let batch = s.next_batch().unwrap();
        assert_eq!(batch, vec![(1, "a"), (2, "b")]);
        s.submit("c");
        assert!(
            s.next_batch().is_none(),
            "a second batch must wait for the first to apply"
        );
        assert_eq!(s.applied(), 2);
        assert_eq!(s.next_batch().unwrap(), vec![(3, "c")]);
        assert_eq!(s.applied(), 3);
        assert_eq!(s.batch_stats(), (2, 3));
    }

    #[test]
    fn slots_are_separate_cache_lines() {
        assert!(std::mem::align_of::<Slot>() >= 128);
        let f = Frontiers::new(4);
        let a = &f.slots[0] as *const Slot as usize;
        let b = &f.slots[1] as *const Slot as usize;
        assert!(b - a >= 128);
    }

    /// A hold that `try_hold` accepted is never passed by a horizon, however the compute's
    /// bound moves concurrently: a compute thread raises its candidate as fast as it can and
    /// records every horizon it computes; shard threads hold the frontier they read, check
    /// that no horizon so far exceeded it while they hold it, then release and repeat.
    #[test]
    fn an_accepted_hold_is_never_compacted_past() {
        const ROUNDS: u64 = 20_000;
        let frontiers = Arc::new(Frontiers::new(2));
        let holds = Arc::new(Holds::new(2));
        let max_horizon = Arc::new(AtomicU64::new(0));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let compute = {
            let (f, h, m, done) = (
                frontiers.clone(),
                holds.clone(),
                max_horizon.clone(),
                done.clone(),
            );
            std::thread::spawn(move || {
                let mut ts = 0;
                while !done.load(Ordering::Relaxed) {
                    ts += 1;
                    f.publish(ts);
                    let horizon = h.horizon(ts);
                    m.fetch_max(horizon, Ordering::SeqCst);
                }
            })
        };
        let shards: Vec<_> = (0..2)
            .map(|shard| {
                let (f, h, m) = (frontiers.clone(), holds.clone(), max_horizon.clone());
                std::thread::spawn(move || {
                    let mut retries = 0u64;
                    for _ in 0..ROUNDS {
                        let mut ts = f.read(shard);
                        while !h.try_hold(shard, ts, None) {
                            retries += 1;
                            ts = f.read(shard);
                        }
                        for _ in 0..20 {
                            let seen = m.load(Ordering::SeqCst);
                            assert!(seen <= ts, "shard {shard} holds {ts}, compacted to {seen}");
                        }
                        h.release_to(shard, None);
                    }
                    retries
                })
            })
            .collect();
        for s in shards {
            s.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        compute.join().unwrap();
    }

    #[test]
    fn holds_follow_the_oldest_and_an_older_hold_covers_a_newer_one() {
        let h = Holds::new(2);
        assert_eq!(h.horizon(10), 10);
        assert!(!h.try_hold(0, 5, None), "the bound already passed 5");
        assert!(h.try_hold(0, 10, None));
        assert_eq!(h.horizon(20), 10);
        assert!(h.try_hold(0, 15, Some(10)), "covered by the hold at 10");
        assert_eq!(h.held(0), Some(10));
        h.release_to(0, Some(15));
        assert_eq!(h.horizon(20), 15);
        h.release_to(0, None);
        assert_eq!(h.held(0), None);
        assert_eq!(h.horizon(30), 30);
    }

    /// Publish-before-acknowledge makes every later read fresh, on every shard: a writer thread
    /// publishes ts and only then announces it; reader threads that see the announcement must
    /// read a frontier at least that large from their own slot.
    #[test]
    fn a_read_after_an_acknowledged_publish_sees_it_on_every_shard() {
        let f = Arc::new(Frontiers::new(3));
        let acked = Arc::new(AtomicU64::new(0));
        let writer = {
            let (f, acked) = (f.clone(), acked.clone());
            std::thread::spawn(move || {
                for ts in 1..=20_000u64 {
                    f.publish(ts);
                    acked.store(ts, Ordering::Release); // the "acknowledgement"
                }
            })
        };
        let readers: Vec<_> = (0..3)
            .map(|shard| {
                let (f, acked) = (f.clone(), acked.clone());
                std::thread::spawn(move || {
                    let mut last = 0;
                    while last < 20_000 {
                        let seen_ack = acked.load(Ordering::Acquire);
                        let read_ts = f.read(shard);
                        assert!(
                            read_ts >= seen_ack,
                            "shard {shard} read {read_ts} after ack {seen_ack}"
                        );
                        assert!(read_ts >= last, "shard {shard} went backwards");
                        last = read_ts;
                    }
                })
            })
            .collect();
        writer.join().unwrap();
        for r in readers {
            r.join().unwrap();
        }
    }
}
