//! The timestamp oracle: commit timestamps in one total order, and read timestamps that make
//! reads strict serializable without a cross-core round trip.
//!
//! - [`Frontiers`]: one cache-line-padded slot per shard holding the newest timestamp whose
//!   commits are all applied ("the read frontier"). Only the sequencer writes the slots; shard
//!   `i` only reads slot `i`. A read takes its timestamp from its own shard's slot: one load of a
//!   line that changes once per commit batch, never a write, never a round trip.
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
