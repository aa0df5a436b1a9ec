//! The timed closed loop on one raw io_uring per client thread.
//!
//! Why not glommio's `TcpStream` for this part: profiled against pgbench on the 2-core
//! machine (64 connections, `select * from t`, tokio-baseline server), glommio's read path arms
//! a fresh poll request per read (a heap-allocated `Source`, two clock reads, an SQE and a CQE
//! per query) on top of a `send` and a `recv` syscall per query. That cost about as much client
//! CPU per query as pgbench (~7 µs) and drove 0.8-1.0x its queries/s. Here every connection
//! keeps one RECV and at most one SEND request in the ring; one `io_uring_enter` submits all
//! the sends and receives a batch of replies produced and waits for the next completions, and
//! the kernel does each receive when its data arrives: ~4.5 µs of client CPU per query, and one
//! connection's round trip fell from ~36 µs to ~12 µs. `--driver glommio` keeps the old path
//! for comparison.
//!
//! Setup (connect, auth, prepare) stays on glommio, and so does the thread itself: this loop
//! runs inside the executor's task and owns the thread until the level ends (nothing else is
//! scheduled on a client thread).
//!
//! # Safety of the in-flight buffers
//! A RECV points into a connection's read buffer and a SEND into its `out` vector. Neither is
//! moved, resized or dropped while its request is in flight: the read buffer is compacted or
//! grown only in [`Slot::start_recv`] (no read in flight), `out` is swapped with `next` only
//! when no send is in flight, and [`drive`] does not return before every request has completed
//! (a broken connection is shut down so its requests complete promptly).

use std::collections::VecDeque;
use std::io;
use std::mem;
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};

use crate::client::{scan_and_requeue, Connection, ThreadStats, Timeline};
use crate::workload::{Cursor, Workload};

/// After the window ends, queries still in flight get this long to answer; then their
/// connections are reported lost instead of hanging the run.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait in `io_uring_enter` before the loop looks at the clock again.
const WAIT_SLICE: Duration = Duration::from_millis(100);

const KIND_RECV: u64 = 0;
const KIND_SEND: u64 = 1;

struct Slot<'c> {
    id: usize,
    conn: &'c mut Connection,
    /// Requests encoded while `conn.out` is being written; swapped in when that write ends.
    next: Vec<u8>,
    /// Bytes of `conn.out` already written.
    written: usize,
    sending: bool,
    receiving: bool,
    /// When each in-flight query was written, oldest first.
    sent_at: VecDeque<Instant>,
    cursor: Cursor,
    /// The current query has seen an ErrorResponse.
    failed: bool,
    lost: bool,
}

impl Slot<'_> {
    fn fd(&self) -> types::Fd {
        types::Fd(self.conn.fd())
    }

    /// Queue a SEND of whatever is waiting, if nothing is being written now.
    fn start_send(&mut self, sq: &mut io_uring::SubmissionQueue<'_>, index: usize) {
        if self.sending || self.lost {
            return;
        }
        if self.written == self.conn.out.len() {
            self.conn.out.clear();
            self.written = 0;
            mem::swap(&mut self.conn.out, &mut self.next);
        }
        if self.conn.out.is_empty() {
            return;
        }
        let rest = &self.conn.out[self.written..];
        let sqe = opcode::Send::new(self.fd(), rest.as_ptr(), rest.len() as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(((index as u64) << 1) | KIND_SEND);
        push(sq, &sqe);
        self.sending = true;
    }

    /// Queue a RECV into the free end of the read buffer.
    fn start_recv(&mut self, sq: &mut io_uring::SubmissionQueue<'_>, index: usize) {
        debug_assert!(!self.receiving, "one read in flight per connection");
        if self.lost {
            return;
        }
        self.conn.rbuf.make_room();
        let fd = self.fd();
        let spare = self.conn.rbuf.spare();
        let sqe = opcode::Recv::new(fd, spare.as_mut_ptr(), spare.len() as u32)
            .build()
            .user_data(((index as u64) << 1) | KIND_RECV);
        push(sq, &sqe);
        self.receiving = true;
    }

    /// Report the connection lost and shut the socket down, so requests in flight on it
    /// complete now rather than never.
    fn lose(&mut self, why: String, stats: &ThreadStats) {
        if self.lost {
            return;
        }
        self.lost = true;
        stats
            .lost
            .borrow_mut()
            .push(format!("connection {}: {why}", self.id));
        // SAFETY: shutdown on a socket we own; it stays open (closed later by its owner).
        unsafe { libc::shutdown(self.conn.fd(), libc::SHUT_RDWR) };
    }
}

fn push(sq: &mut io_uring::SubmissionQueue<'_>, sqe: &io_uring::squeue::Entry) {
    // SAFETY: the buffers an entry points to outlive the request (module docs), and the queue
    // is sized for two requests per connection, which is the most that can be in flight.
    let pushed = unsafe { sq.push(sqe) };
    assert!(
        pushed.is_ok(),
        "submission queue sized for 2 requests per connection overflowed"
    );
}

/// Run the timed loop on `connections` until `timeline.end`, then let the queries in flight
/// finish. Returns which connections are still healthy (worth a polite Terminate).
pub fn drive(
    connections: &mut [(usize, Connection)],
    workload: &Workload,
    pipeline: usize,
    timeline: Timeline,
    stats: &ThreadStats,
    seed: u64,
) -> Vec<bool> {
    assert!(
        pipeline >= 1,
        "pipeline depth is validated to be at least 1"
    );
    let entries = (2 * connections.len() + 2).next_power_of_two() as u32;
    // DEFER_TASKRUN (Linux 6.1+): receives that complete while this thread is busy are
    // finished in one go at its next io_uring_enter instead of interrupting it one by one.
    // Older kernels refuse the flag; a plain ring works there too.
    let built = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries)
        .or_else(|_| IoUring::new(entries));
    let mut ring = match built {
        Ok(r) => r,
        Err(e) => {
            for (id, _) in connections.iter() {
                stats
                    .lost
                    .borrow_mut()
                    .push(format!("connection {id}: cannot create an io_uring: {e}"));
            }
            return vec![false; connections.len()];
        }
    };
    let mut slots: Vec<Slot<'_>> = connections
        .iter_mut()
        .map(|(id, conn)| Slot {
            id: *id,
            next: Vec::with_capacity(conn.out.capacity()),
            conn,
            written: 0,
            sending: false,
            receiving: false,
            sent_at: VecDeque::with_capacity(pipeline),
            cursor: workload.cursor(*id, seed),
            failed: false,
            lost: false,
        })
        .collect();
    let (submitter, mut sq, mut cq) = ring.split();
    let mut in_flight = 0usize;
    let now = Instant::now();
    for (index, slot) in slots.iter_mut().enumerate() {
        slot.conn.out.clear();
        for _ in 0..pipeline {
            workload.encode_next(&mut slot.cursor, &mut slot.next);
            slot.sent_at.push_back(now);
        }
        slot.start_send(&mut sq, index);
        slot.start_recv(&mut sq, index);
        in_flight += slot.sending as usize + slot.receiving as usize;
    }
    let wait = types::Timespec::from(WAIT_SLICE);
    let mut draining_since_deadline = false;
    while in_flight > 0 {
        sq.sync();
        let args = types::SubmitArgs::new().timespec(&wait);
        // Wake on the first completion: waiting for more would hold finished queries back and
        // add the client's own batching to the latencies it reports.
        match submitter.submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                ) => {}
            Err(e) => {
                // The ring itself failed: nothing more can be measured on this thread. Shut
                // every socket so the requests in flight complete, and keep reaping.
                for slot in &mut slots {
                    slot.lose(format!("io_uring_enter failed: {e}"), stats);
                }
            }
        }
        if !draining_since_deadline && Instant::now() > timeline.end + DRAIN_TIMEOUT {
            draining_since_deadline = true;
            for slot in slots.iter_mut().filter(|s| s.receiving || s.sending) {
                slot.lose(
                    format!("no reply within {DRAIN_TIMEOUT:?} after the end of the run"),
                    stats,
                );
            }
        }
        cq.sync();
        for cqe in &mut cq {
            in_flight -= 1;
            let index = (cqe.user_data() >> 1) as usize;
            let kind = cqe.user_data() & 1;
            let result = cqe.result();
            let slot = &mut slots[index];
            if kind == KIND_SEND {
                slot.sending = false;
                if slot.lost {
                    continue;
                }
                if result < 0 {
                    slot.lose(
                        format!("write failed: {}", io::Error::from_raw_os_error(-result)),
                        stats,
                    );
                    continue;
                }
                slot.written += result as usize;
                slot.start_send(&mut sq, index);
                in_flight += slot.sending as usize;
                continue;
            }
            slot.receiving = false;
            if slot.lost {
                continue;
            }
            if result < 0 {
                if -result == libc::EINTR || -result == libc::EAGAIN {
                    slot.start_recv(&mut sq, index);
                    in_flight += 1;
                } else {
                    slot.lose(
                        format!("read failed: {}", io::Error::from_raw_os_error(-result)),
                        stats,
                    );
                }
                continue;
            }
            if result == 0 {
                let why = format!(
                    "server closed the connection with {} queries in flight",
                    slot.sent_at.len()
                );
                slot.lose(why, stats);
                continue;
            }
            slot.conn.rbuf.end += result as usize;
            let Slot {
                conn,
                next,
                sent_at,
                cursor,
                failed,
                ..
            } = slot;
            let scanned = scan_and_requeue(
                conn.rbuf.pending(),
                failed,
                &timeline,
                stats,
                sent_at,
                workload,
                cursor,
                next,
            );
            match scanned {
                Ok(consumed) => conn.rbuf.start += consumed,
                Err(e) => {
                    slot.lose(e, stats);
                    continue;
                }
            }
            let was_sending = slot.sending;
            slot.start_send(&mut sq, index);
            in_flight += (slot.sending && !was_sending) as usize;
            if !slot.sent_at.is_empty() {
                slot.start_recv(&mut sq, index);
                in_flight += 1;
            }
        }
    }
    slots.iter().map(|s| !s.lost).collect()
}
