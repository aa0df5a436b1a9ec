//! The io_uring socket path: one ring per shard that owns the shard's sockets.
//!
//! Why not glommio's sockets: measured on this project's 2-core machine, glommio's
//! `TcpStream` tries a plain non-blocking `recv`/`send` first and arms an io_uring poll only
//! on EAGAIN, and an idle glommio executor parks through several `io_uring_enter` calls plus a
//! `membarrier` per wake-up: ~6-10 syscalls per query at 1 connection, 2.45 at 64. Here:
//!
//! - **Accept** is one multishot ACCEPT per listening socket (TCP and Unix).
//! - **Receive** is one multishot RECV per connection into a provided-buffer ring. The driver
//!   copies each completion's bytes into the connection's inbox and gives the buffer back at
//!   once, so a slow connection never holds ring buffers.
//! - **Send**: a connection's replies are appended to its outbox. The driver queues one SEND
//!   per connection that has something to say, for all connections together, and submits
//!   them in the same `io_uring_enter` that waits for the next completions.
//!
//! So in steady state a turn of the shard costs one `io_uring_enter`, whatever the number of
//! connections that were served in it.
//!
//! # How the ring runs inside glommio
//! The driver is a glommio task that never lets the executor go idle: it reaps completions,
//! wakes the connection tasks they concern, and yields (`yield_task_queue_now`) so those tasks
//! run in the same executor loop. glommio's own per-loop work (its preemption timer, its
//! parking through three rings and a membarrier) only runs when its preemption timer expires.
//!
//! When there is nothing to do the driver first polls the ring's memory for a while if the
//! machine has CPU to spare (`Driver::spin_idle`, `SpareCpu`), then blocks in
//! `io_uring_enter(GETEVENTS)` on its own ring, with a timeout: the next timer of the shard's
//! [`crate::time`] wheel, capped at [`PARK_CAP`]. It may only block if no other task of the
//! shard is runnable. glommio does not expose its run queue, but `executor_stats()` hands out
//! (and resets) the number of tasks run since the last call: the driver yields its task queue,
//! which ends glommio's pass over the queue right after the driver, and looks at that count
//! one pass later. If the pass ran the
//! driver alone, no other task was woken and the queue holds only the driver.
//!
//! What wakes a parked shard:
//! - its sockets (completions on the ring);
//! - its timers (the wait's timeout);
//! - messages from other shards (mesh, cancels): the sender pushes into the flume channel,
//!   then rings this shard's [`Doorbell`] (an eventfd write) only if the shard announced it is
//!   parked. The ring always holds a READ on that eventfd.
//!
//! Nothing in the shard may therefore rely on glommio timers or cross-thread glommio wake-ups
//! in this mode: timers go through [`crate::time`], cross-shard messages through the mesh.
//!
//! # Setup flags
//! `SINGLE_ISSUER | DEFER_TASKRUN` (Linux 6.1): completion work runs only when this thread
//! enters the ring to wait, never as an interrupt of the shard's user code, and one
//! `io_uring_enter` reaps everything that arrived since the last. With `TASKRUN_FLAG` the kernel
//! also marks the ring when such work is queued, which is what the poll before parking reads.
//! Falls back to the same without `TASKRUN_FLAG` (no polling), `COOP_TASKRUN`, then no flags,
//! on older kernels.
//!
//! # Safety of in-flight operations
//! - A SEND points into a socket's `sending` vector; it is only touched (swapped, cleared)
//!   when no send is in flight, and the socket stays in the driver's table until every
//!   operation on it has completed.
//! - Provided buffers and the buffer ring live as long as the driver, which lives as long as
//!   the shard thread (the ring is dropped with it, which cancels everything).
//! - The doorbell READ points into a boxed `u64` owned by the driver.

use std::cell::{Cell, RefCell, UnsafeCell};
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{fence, AtomicBool, AtomicU16, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures_lite::{AsyncRead, AsyncWrite};
use io_uring::{cqueue, opcode, squeue, types, IoUring};

/// Longest the driver sleeps in the ring without looking around (a safety net: everything
/// that should wake the shard does so through the ring).
pub const PARK_CAP: Duration = Duration::from_millis(50);
/// Submission queue entries. The completion queue is 8 times larger: multishot operations
/// post many completions per submission.
const SQ_ENTRIES: u32 = 512;
/// Provided receive buffers per shard, and their size: 4 MiB of plain (not locked) memory.
const RECV_BUFFERS: u16 = 256;
const RECV_BUFFER_BYTES: usize = 16 << 10;
const BUFFER_GROUP: u16 = 0;
/// A connection's unread input above which its receive is paused (cancelled) until the
/// connection task has consumed half of it: a client cannot make the shard buffer more.
const INBOX_HIGH: usize = 1 << 20;
/// The first bytes a connection receives (its startup and authentication messages: each at
/// most 64 KiB, as PostgreSQL allows) are wiped from the receive buffer and the inbox once
/// copied on, so no password or SCRAM proof lingers in memory the ring reuses. Later bytes
/// are not (no memset on the steady-state path).
const WIPE_FIRST_BYTES: usize = 192 << 10;
/// A connection's unsent output above which its task waits before writing more: a client that
/// stops reading stops being served, instead of growing the shard's memory.
const OUTBOX_HIGH: usize = 1 << 20;

// user_data = index << 8 | kind.
const KIND_RECV: u64 = 1;
const KIND_SEND: u64 = 2;
const KIND_ACCEPT: u64 = 3;
const KIND_BELL: u64 = 4;
const KIND_CANCEL: u64 = 5;
const KIND_CONNECT: u64 = 6;

fn user_data(index: usize, kind: u64) -> u64 {
    (index as u64) << 8 | kind
}

/// Who is on the other end of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Tcp(SocketAddr),
    /// A Unix-domain socket client (PostgreSQL's `local` connection type).
    Unix,
}

/// Can this kernel run the io_uring socket path? Checked once at startup; `Err` says why not.
pub fn probe() -> Result<(), String> {
    let (ring, _) = build_ring().map_err(|e| format!("cannot create an io_uring: {e}"))?;
    let mut probe = io_uring::Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| format!("cannot probe io_uring opcodes: {e}"))?;
    for (code, name) in [
        (opcode::AcceptMulti::CODE, "ACCEPT"),
        (opcode::RecvMulti::CODE, "RECV"),
        (opcode::Send::CODE, "SEND"),
        (opcode::Read::CODE, "READ"),
        (opcode::AsyncCancel::CODE, "ASYNC_CANCEL"),
    ] {
        if !probe.is_supported(code) {
            return Err(format!("io_uring lacks {name}"));
        }
    }
    // Multishot receive into a buffer ring needs Linux 6.0; registering a ring proves it.
    BufRing::new(&ring).map_err(|e| format!("io_uring provided-buffer rings unavailable: {e}"))?;
    if !ring.params().is_feature_ext_arg() {
        return Err("io_uring lacks timed waits (EXT_ARG, Linux 5.11)".into());
    }
    let (major, minor) = kernel_version();
    if (major, minor) < (6, 0) {
        return Err(format!(
            "multishot receive needs Linux 6.0, this is {major}.{minor}"
        ));
    }
    Ok(())
}

fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// The shard's ring, and whether the kernel flags deferred completions in its memory
/// (`IORING_SETUP_TASKRUN_FLAG`), which `Driver::spin_idle` polls.
fn build_ring() -> io::Result<(IoUring, bool)> {
    let cq = SQ_ENTRIES * 8;
    if let Ok(ring) = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag()
        .setup_cqsize(cq)
        .build(SQ_ENTRIES)
    {
        return Ok((ring, true));
    }
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(cq)
        .build(SQ_ENTRIES)
        .or_else(|_| {
            IoUring::builder()
                .setup_coop_taskrun()
                .setup_cqsize(cq)
                .build(SQ_ENTRIES)
        })
        .or_else(|_| IoUring::builder().setup_cqsize(cq).build(SQ_ENTRIES))
        .map(|ring| (ring, false))
}

/// Whether the machine has CPU to spare. Polling makes a CPU look busy, so it is judged in
/// probe windows in which no shard polls: one window of `SPARE_WINDOW` in `SPARE_EVERY`, on
/// the coarse clock that every shard reads alike. The idle and iowait time of all CPUs over
/// the probe (`/proc/stat`; a thread asleep in `io_uring_enter` with requests in flight, as
/// every parked shard is, counts as iowait) must be at least `SPARE_CPUS` for the shards to
/// poll until the next probe. A probe's verdict is up to a second old, and load can arrive in
/// between: so each coarse tick (4 ms) the shard also reads how many threads are runnable
/// (`/proc/loadavg`), and does not poll while the others (the count includes this one)
/// outnumber the CPUs. (Not "all of them": the count is taken as the shard goes quiet, when
/// the client it just answered is usually waking, and at one connection in upstream mode that
/// vetoed most polls.)
struct SpareCpu {
    /// `/proc/stat`, kept open (None: unreadable, so never spare).
    stat: Option<std::fs::File>,
    /// The probe under way: when it started (coarse clock) and the idle time then.
    probe: Cell<Option<(Duration, Duration)>>,
    spare: Cell<bool>,
    /// `/proc/loadavg`, kept open (None: unreadable, so never spare).
    loadavg: Option<std::fs::File>,
    /// CPUs online.
    cpus: usize,
    /// The coarse tick of the last runnable count, and whether it was at most `cpus`.
    uncrowded: Cell<(Duration, bool)>,
}

/// 100 ms in every second: `/proc/stat` counts in hundredths of a second, so a probe of
/// 100 ms on 2 CPUs resolves a tenth of a CPU.
const SPARE_WINDOW: Duration = Duration::from_millis(100);
const SPARE_EVERY: u128 = 10;
/// On the 2-core machine a lone connection leaves 0.4-0.8 CPU idle, four busy connections none
/// (docs/PERF.md, "Session 7").
const SPARE_CPUS: f64 = 0.3;

impl SpareCpu {
    fn new() -> SpareCpu {
        SpareCpu {
            stat: std::fs::File::open("/proc/stat").ok(),
            probe: Cell::new(None),
            spare: Cell::new(false),
            loadavg: std::fs::File::open("/proc/loadavg").ok(),
            // SAFETY: plain sysconf query.
            cpus: unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize,
            uncrowded: Cell::new((Duration::MAX, false)),
        }
    }

    /// May the shard poll now? Never in a probe window; otherwise the last probe's verdict,
    /// unless threads queue for a CPU. Costs a `pread` of `/proc/stat` twice per probe and one
    /// of `/proc/loadavg` per coarse tick in which it is asked.
    fn spare(&self, tick: Duration) -> bool {
        let probing = (tick.as_millis() / SPARE_WINDOW.as_millis()).is_multiple_of(SPARE_EVERY);
        match (probing, self.probe.get()) {
            (true, None) => {
                self.probe.set(
                    self.stat
                        .as_ref()
                        .and_then(idle_time)
                        .map(|idle| (tick, idle)),
                );
                self.spare.set(false);
            }
            (false, Some((at, idle0))) => {
                self.probe.set(None);
                let wall = tick.saturating_sub(at).as_secs_f64();
                let free = self
                    .stat
                    .as_ref()
                    .and_then(idle_time)
                    .map(|idle| idle.saturating_sub(idle0).as_secs_f64());
                self.spare
                    .set(wall > 0.0 && free.is_some_and(|free| free >= SPARE_CPUS * wall));
            }
            _ => {}
        }
        !probing && self.spare.get() && self.uncrowded(tick)
    }

    fn uncrowded(&self, tick: Duration) -> bool {
        let (at, uncrowded) = self.uncrowded.get();
        if at == tick {
            return uncrowded;
        }
        let uncrowded = self
            .loadavg
            .as_ref()
            .and_then(runnable_threads)
            .is_some_and(|running| running <= self.cpus + 1);
        self.uncrowded.set((tick, uncrowded));
        uncrowded
    }
}

/// The number of runnable threads on the machine, the caller included: the numerator of
/// `/proc/loadavg`'s fourth field ("0.52 0.58 0.59 3/312 4242").
fn runnable_threads(loadavg: &std::fs::File) -> Option<usize> {
    let mut buf = [0u8; 128];
    let field = proc_text(loadavg, &mut buf)?
        .split_ascii_whitespace()
        .nth(3)?;
    field.split('/').next()?.parse().ok()
}

/// All CPUs' idle plus iowait time since boot: the fourth and fifth numbers of `/proc/stat`'s
/// first line ("cpu  7284667 286193 1724814 1624409 886215 ..."), in USER_HZ ticks.
fn idle_time(stat: &std::fs::File) -> Option<Duration> {
    let mut buf = [0u8; 256];
    let line = proc_text(stat, &mut buf)?.lines().next()?;
    let mut fields = line.split_ascii_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let mut fields = fields.skip(3);
    let idle: u64 = fields.next()?.parse().ok()?;
    let iowait: u64 = fields.next()?.parse().ok()?;
    // SAFETY: plain sysconf query.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_nanos(
        (idle + iowait).saturating_mul(1_000_000_000 / hz),
    ))
}

/// The start of a `/proc` file (as much as fits `buf`), read afresh from offset 0 through a
/// descriptor kept open: one `pread`, no open or seek.
fn proc_text<'a>(file: &std::fs::File, buf: &'a mut [u8]) -> Option<&'a str> {
    use std::os::unix::fs::FileExt;
    let n = file.read_at(buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()
}

/// The provided-buffer ring the kernel receives into.
struct BufRing {
    /// `RECV_BUFFERS` entries, page-aligned, shared with the kernel.
    entries: *mut types::BufRingEntry,
    layout: std::alloc::Layout,
    buffers: Box<[UnsafeCell<u8>]>,
    tail: Cell<u16>,
}

impl BufRing {
    fn new(ring: &IoUring) -> io::Result<BufRing> {
        let layout = std::alloc::Layout::from_size_align(
            RECV_BUFFERS as usize * std::mem::size_of::<types::BufRingEntry>(),
            4096,
        )
        .expect("constant layout");
        // SAFETY: non-zero size; zeroed memory is a valid (empty) ring.
        let entries = unsafe { std::alloc::alloc_zeroed(layout) } as *mut types::BufRingEntry;
        if entries.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        let buffers: Box<[UnsafeCell<u8>]> = (0..RECV_BUFFERS as usize * RECV_BUFFER_BYTES)
            .map(|_| UnsafeCell::new(0))
            .collect();
        let ring_buf = BufRing {
            entries,
            layout,
            buffers,
            tail: Cell::new(0),
        };
        // SAFETY: `entries` is page-aligned and lives as long as the BufRing, which is dropped
        // only after the ring (see Driver's field order) or after unregistering (probe).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                entries as u64,
                RECV_BUFFERS,
                BUFFER_GROUP,
                0,
            )?;
        }
        for bid in 0..RECV_BUFFERS {
            ring_buf.give_back(bid);
        }
        ring_buf.publish();
        Ok(ring_buf)
    }

    /// Zero the first `len` bytes of buffer `bid` (before giving it back).
    fn wipe(&self, bid: u16, len: usize) {
        let start = bid as usize * RECV_BUFFER_BYTES;
        for cell in &self.buffers[start..start + len.min(RECV_BUFFER_BYTES)] {
            // SAFETY: as in `buffer`: the kernel does not write it until it is given back.
            unsafe { *cell.get() = 0 };
        }
    }

    fn buffer(&self, bid: u16, len: usize) -> &[u8] {
        let start = bid as usize * RECV_BUFFER_BYTES;
        let cells = &self.buffers[start..start + len.min(RECV_BUFFER_BYTES)];
        // SAFETY: the kernel wrote this buffer and handed it to us (its completion was
        // reaped); it will not write it again until we give it back.
        unsafe { std::slice::from_raw_parts(cells.as_ptr() as *const u8, cells.len()) }
    }

    /// Put buffer `bid` back at the tail (visible to the kernel after [`BufRing::publish`]).
    fn give_back(&self, bid: u16) {
        let tail = self.tail.get();
        let mask = RECV_BUFFERS - 1;
        // SAFETY: index within the ring; only this thread writes entries.
        let entry = unsafe { &mut *self.entries.add((tail & mask) as usize) };
        entry.set_addr(self.buffers[bid as usize * RECV_BUFFER_BYTES].get() as u64);
        entry.set_len(RECV_BUFFER_BYTES as u32);
        entry.set_bid(bid);
        self.tail.set(tail.wrapping_add(1));
    }

    fn publish(&self) {
        // SAFETY: the tail field overlays the first entry's reserved field, per the ABI.
        let tail = unsafe { &*(types::BufRingEntry::tail(self.entries) as *const AtomicU16) };
        tail.store(self.tail.get(), Ordering::Release);
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.entries as *mut u8, self.layout) };
    }
}

/// Read `clock` (a `CLOCK_MONOTONIC*` id) as the time since the clock's zero.
fn clock_now(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec we own; the monotonic clock ids exist on every kernel this
    // runs on (2.6.32+), so the call cannot fail.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// `CLOCK_MONOTONIC_COARSE`: `CLOCK_MONOTONIC` as of the last kernel tick, read from the vDSO
/// without the TSC: a few ns, where a precise read costs 30-40 ns on this VM. Turns run once
/// or more per query at low concurrency, so the driver's per-turn reads (stalls, "is a timer
/// due?") use this one, and the precise clock only when a timer may be due.
fn coarse_now() -> Duration {
    clock_now(libc::CLOCK_MONOTONIC_COARSE)
}

/// Puts [`Instant`]s (std's `CLOCK_MONOTONIC`) on the coarse clock's scale, which is the same
/// clock truncated to the last tick: the precise time is always in `[coarse, coarse + res)`.
struct CoarseScale {
    base: Instant,
    base_mono: Duration,
    res: Duration,
}

impl CoarseScale {
    fn new() -> CoarseScale {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes one timespec we own.
        unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
        CoarseScale {
            base: Instant::now(),
            base_mono: clock_now(libc::CLOCK_MONOTONIC),
            res: Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32),
        }
    }

    fn on_scale(&self, at: Instant) -> Duration {
        self.base_mono + at.saturating_duration_since(self.base)
    }
}

/// Wakes a shard parked in its ring from another thread.
pub struct Doorbell {
    parked: AtomicBool,
    /// Set by every `ring`: something may be waiting in the shard's channels. The driver
    /// looks at its channels only when this is set, so a turn with no cross-shard traffic
    /// costs one atomic swap instead of a lock per channel (flume locks even to find a
    /// channel empty: ~2.5% of a shard's CPU at 4 connections, measured with perf).
    mail: AtomicBool,
    eventfd: OwnedFd,
}

impl Doorbell {
    pub fn new() -> io::Result<Doorbell> {
        // SAFETY: plain syscall; the fd is owned below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Doorbell {
            parked: AtomicBool::new(false),
            mail: AtomicBool::new(false),
            // SAFETY: a fresh fd we own.
            eventfd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Call after making something visible to the shard (a channel send): mark the mail, and
    /// if the shard is parked, or about to park, wake it. Costs an atomic store, a fence and a
    /// load when it is not.
    pub fn ring(&self) {
        // Release: whoever takes `mail` sees the message sent before it.
        self.mail.store(true, Ordering::Release);
        // Pairs with the fence in `Driver::park`: either the shard sees `mail` when it looks
        // before sleeping, or we see `parked` and write the eventfd.
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed) && self.parked.swap(false, Ordering::AcqRel) {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a local to an eventfd we own. A failure (counter
            // overflow) means the shard is already signalled.
            unsafe { libc::write(self.eventfd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }
}

/// One connection's I/O state, shared by the driver and the connection's [`UringStream`].
struct Socket {
    fd: OwnedFd,
    index: usize,
    /// Received bytes not yet read by the connection task: `inbox[in_pos..]`.
    inbox: RefCell<Vec<u8>>,
    in_pos: Cell<usize>,
    reader: Cell<Option<Waker>>,
    eof: Cell<bool>,
    /// A receive or send failed; every later read and write fails with this errno.
    error: Cell<Option<i32>>,
    recv_armed: Cell<bool>,
    /// Receive paused because the inbox is full.
    recv_paused: Cell<bool>,
    /// How many more received bytes are wiped once copied on ([`WIPE_FIRST_BYTES`]).
    wipe_left: Cell<usize>,
    /// Replies not yet handed to the kernel.
    outbox: RefCell<Vec<u8>>,
    /// The bytes of the SEND in flight, and how many of them the kernel has taken.
    sending: RefCell<Vec<u8>>,
    sent: Cell<usize>,
    send_in_flight: Cell<bool>,
    writer: Cell<Option<Waker>>,
    /// The connection task dropped its stream: finish sending, then close.
    closing: Cell<bool>,
    cancel_sent: Cell<bool>,
    /// Queued in the driver's `dirty` list.
    dirty: Cell<bool>,
}

impl Socket {
    fn wake_reader(&self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }

    fn wake_writer(&self) {
        if let Some(w) = self.writer.take() {
            w.wake();
        }
    }

    fn fail(&self, errno: i32) {
        if self.error.get().is_none() {
            self.error.set(Some(errno));
        }
        self.outbox.borrow_mut().clear();
        self.wake_reader();
        self.wake_writer();
    }

    fn finished(&self) -> bool {
        self.closing.get()
            && !self.recv_armed.get()
            && !self.send_in_flight.get()
            && (self.outbox.borrow().is_empty() || self.error.get().is_some())
    }
}

struct Listener {
    fd: OwnedFd,
    unix: bool,
    /// Its own accept handler (a side listener such as `--metrics-listen`); None: the
    /// shard's pgwire handler.
    on_accept: Option<Rc<dyn Fn(UringStream, Peer)>>,
}

/// What the driver does with a freshly accepted connection (spawn its task).
pub type OnAccept = Box<dyn Fn(UringStream, Peer)>;

/// Where a freshly accepted pgwire connection goes: `Some` keeps it on this shard, `None`
/// means it was handed to another shard (which calls [`Driver::adopt`]).
pub type Deal = Box<dyn Fn(OwnedFd, Peer) -> Option<(OwnedFd, Peer)>>;

/// A shard's io_uring and everything attached to it.
pub struct Driver {
    // Field order matters: the ring is dropped (cancelling every operation) before the
    // buffers it points into.
    ring: RefCell<IoUring>,
    bufs: BufRing,
    sockets: RefCell<Vec<Option<Rc<Socket>>>>,
    free: RefCell<Vec<usize>>,
    /// Sockets with something for the driver to submit (send, re-arm, cancel).
    dirty: RefCell<Vec<Rc<Socket>>>,
    dirty_spare: Cell<Vec<Rc<Socket>>>,
    listeners: RefCell<Vec<Listener>>,
    on_accept: RefCell<Option<OnAccept>>,
    deal: RefCell<Option<Deal>>,
    /// Accepts to re-arm (after an error such as EMFILE, at the given time).
    accept_retry: RefCell<Vec<(usize, Instant)>>,
    bell: std::sync::Arc<Doorbell>,
    bell_buf: Box<UnsafeCell<u64>>,
    timers: RefCell<BTreeMap<(Instant, u64), Waker>>,
    next_timer: Cell<u64>,
    /// Drains messages from other shards; returns how many it handled. Called only when the
    /// doorbell says there is mail.
    inbox: RefCell<Option<Box<dyn Fn() -> usize>>>,
    /// Entries waiting for room in the submission queue.
    backlog: RefCell<Vec<squeue::Entry>>,
    /// SENDs queued since the last `io_uring_enter` (see `park`).
    sends_queued: Cell<u32>,
    /// The kernel can bound the wait for more than one completion (Linux 6.12).
    min_timeout: bool,
    /// ShardStream connections in progress (upstream mode), by socket index.
    connecting: RefCell<std::collections::HashMap<usize, Rc<Connecting>>>,
    /// How long a quiet driver polls before it sleeps (see `spin_idle`).
    spin: Cell<Duration>,
    /// The ring flags deferred completions in memory: without it polling cannot see them, so
    /// the driver never spins.
    taskrun_flag: bool,
    /// Polls only while this says the machine has CPU to spare.
    spare_cpu: SpareCpu,
    clock: CoarseScale,
    /// The earliest timer or accept retry, on the coarse scale (`Duration::MAX`: none). May be
    /// earlier than the truth (a cancelled timer); `fire_timers` recomputes it.
    next_due: Cell<Duration>,
    /// The shard's metrics when recording is on: told of every turn, whose one clock read
    /// times the receives it reaped and the statements that ended before it.
    metrics: Option<Rc<crate::metrics::ShardMetrics>>,
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<Driver>>> = const { RefCell::new(None) };
}

/// The driver of the shard running on this thread, if it uses the io_uring path.
pub fn current() -> Option<Rc<Driver>> {
    CURRENT.with(|c| c.borrow().clone())
}

impl Driver {
    /// Create the shard's ring and arm the listeners. Runs on the shard's thread.
    pub fn new(
        listeners: Vec<(OwnedFd, bool)>,
        bell: std::sync::Arc<Doorbell>,
    ) -> io::Result<Rc<Driver>> {
        let (ring, taskrun_flag) = build_ring()?;
        let bufs = BufRing::new(&ring)?;
        let min_timeout = ring.params().is_feature_min_timeout();
        let driver = Rc::new(Driver {
            ring: RefCell::new(ring),
            bufs,
            sockets: RefCell::new(Vec::new()),
            free: RefCell::new(Vec::new()),
            dirty: RefCell::new(Vec::new()),
            dirty_spare: Cell::new(Vec::new()),
            listeners: RefCell::new(
                listeners
                    .into_iter()
                    .map(|(fd, unix)| Listener {
                        fd,
                        unix,
                        on_accept: None,
                    })
                    .collect(),
            ),
            on_accept: RefCell::new(None),
            deal: RefCell::new(None),
            accept_retry: RefCell::new(Vec::new()),
            bell,
            bell_buf: Box::new(UnsafeCell::new(0)),
            timers: RefCell::new(BTreeMap::new()),
            next_timer: Cell::new(0),
            inbox: RefCell::new(None),
            backlog: RefCell::new(Vec::new()),
            sends_queued: Cell::new(0),
            min_timeout,
            connecting: RefCell::new(std::collections::HashMap::new()),
            // Sleep at once until told otherwise (`set_spin`): the load generator's client
            // side runs on this driver too.
            spin: Cell::new(Duration::ZERO),
            taskrun_flag,
            spare_cpu: SpareCpu::new(),
            clock: CoarseScale::new(),
            next_due: Cell::new(Duration::MAX),
            metrics: crate::metrics::current().filter(|m| m.enabled),
        });
        if let Some(m) = &driver.metrics {
            m.defer_to_driver();
        }
        for i in 0..driver.listeners.borrow().len() {
            driver.arm_accept(i);
        }
        driver.arm_bell();
        CURRENT.with(|c| *c.borrow_mut() = Some(driver.clone()));
        Ok(driver)
    }

    /// Set what happens to accepted connections and how cross-shard messages are drained.
    pub fn set_handlers(&self, on_accept: OnAccept, inbox: Box<dyn Fn() -> usize>) {
        *self.on_accept.borrow_mut() = Some(on_accept);
        *self.inbox.borrow_mut() = Some(inbox);
    }

    /// Deal accepted pgwire connections over the shards (side listeners keep theirs): the
    /// kernel spreads few TCP connections unevenly, and has no SO_REUSEPORT for Unix sockets
    /// (every shard accepts on the same socket and one of them tends to win every time).
    pub fn set_deal(&self, deal: Deal) {
        *self.deal.borrow_mut() = Some(deal);
    }

    /// Accept on one more listening socket, with its own handler (not the shard's pgwire
    /// handler): how a side listener such as `--metrics-listen` is served on this path.
    pub fn add_listener(&self, fd: OwnedFd, on_accept: Rc<dyn Fn(UringStream, Peer)>) {
        let i = {
            let mut listeners = self.listeners.borrow_mut();
            listeners.push(Listener {
                fd,
                unix: false,
                on_accept: Some(on_accept),
            });
            listeners.len() - 1
        };
        self.arm_accept(i);
    }

    /// How long a quiet driver polls before sleeping (see `spin_idle`).
    pub fn set_spin(&self, spin: Duration) {
        self.spin.set(spin);
    }

    /// Poll instead of sleeping, for up to `spin`, while the machine has CPU to spare (see
    /// `SpareCpu`; `tick` is this turn's coarse clock): hand over the queued sends, then watch
    /// memory the kernel and other shards write — the ring's "task work pending" flag
    /// (`IORING_SETUP_TASKRUN_FLAG`), the completion queue, the doorbell's mail flag — without a
    /// system call. Returns true when
    /// something arrived (its completions posted), false when the time ran out and the caller
    /// should park.
    ///
    /// Why: at low concurrency the next event (a client's next query, an upstream reply, a
    /// reply from another shard) usually comes within microseconds, and sleeping makes it
    /// pay a thread wake-up on both sides (the sender's `try_to_wake_up`, an idle vCPU's exit
    /// and this thread's switch back in). Measured in docs/PERF.md ("Session 7").
    fn spin_idle(&self, tick: Duration) -> bool {
        let spin = self.spin.get();
        // Only with CPU to spare: where clients (or an upstream PostgreSQL) share the shard's
        // cores and keep them busy, polling takes from them more CPU than the wake-up it saves
        // (at 4-64 connections on the 2-core machine, docs/PERF.md).
        if spin.is_zero() || !self.taskrun_flag || !self.spare_cpu.spare(tick) {
            return false;
        }
        let started = Instant::now();
        if self.sends_queued.get() > 0 || !self.backlog.borrow().is_empty() {
            // One enter hands over the sends (and re-armed receives), and runs the completions
            // already waiting if the kernel flagged any (then there is nothing to spin for).
            let waiting = self.ring.borrow_mut().submission().taskrun();
            self.submit();
            if waiting {
                return true;
            }
        }
        let mut ring = self.ring.borrow_mut();
        let mut i = 0u32;
        loop {
            if ring.submission().taskrun() {
                // Deferred completions wait for this thread: `submit` sees the flag and its
                // enter carries GETEVENTS, which runs them.
                if let Err(e) = ring.submit() {
                    if e.raw_os_error() != Some(libc::EBUSY) {
                        log::error!("io_uring submit failed: {e}");
                    }
                }
                return true;
            }
            if !ring.completion().is_empty() || self.inbox_pending() {
                return true;
            }
            i += 1;
            // A precise clock read costs 30-40 ns here; one every 32 polls is enough.
            if i.is_multiple_of(32) && started.elapsed() >= spin {
                return false;
            }
            std::hint::spin_loop();
        }
    }

    fn push(&self, entry: squeue::Entry) {
        self.backlog.borrow_mut().push(entry);
    }

    /// Move queued entries into the submission queue, submitting (without waiting) if it is
    /// full.
    fn fill_sq(&self, ring: &mut IoUring) {
        let mut backlog = self.backlog.borrow_mut();
        let mut i = 0;
        while i < backlog.len() {
            // SAFETY: every entry's buffers are kept alive until completion (module docs).
            let pushed = unsafe { ring.submission().push(&backlog[i]).is_ok() };
            if pushed {
                i += 1;
            } else if let Err(e) = ring.submit() {
                log::error!("io_uring submit failed: {e}");
                break;
            }
        }
        backlog.drain(..i);
    }

    fn arm_accept(&self, i: usize) {
        let entry = opcode::AcceptMulti::new(types::Fd(self.listeners.borrow()[i].fd.as_raw_fd()))
            .flags(libc::SOCK_CLOEXEC)
            .build()
            .user_data(user_data(i, KIND_ACCEPT));
        self.push(entry);
    }

    fn arm_bell(&self) {
        let entry = opcode::Read::new(
            types::Fd(self.bell.eventfd.as_raw_fd()),
            self.bell_buf.get().cast(),
            8,
        )
        .build()
        .user_data(user_data(0, KIND_BELL));
        self.push(entry);
    }

    fn arm_recv(&self, sock: &Socket) {
        sock.recv_armed.set(true);
        let entry = opcode::RecvMulti::new(types::Fd(sock.fd.as_raw_fd()), BUFFER_GROUP)
            .build()
            .user_data(user_data(sock.index, KIND_RECV));
        self.push(entry);
    }

    fn mark_dirty(&self, sock: &Rc<Socket>) {
        if !sock.dirty.replace(true) {
            self.dirty.borrow_mut().push(sock.clone());
        }
    }

    /// Queue what dirty sockets need: their next send, a paused receive resumed, the cancel of
    /// a closing socket's receive.
    fn flush_dirty(&self) {
        // Swap in the (empty) spare list so the steady state reuses two allocations.
        let mut dirty = self.dirty_spare.take();
        std::mem::swap(&mut dirty, &mut *self.dirty.borrow_mut());
        for sock in dirty.drain(..) {
            sock.dirty.set(false);
            if sock.error.get().is_none() {
                self.start_send(&sock);
            }
            if sock.closing.get() {
                if sock.recv_armed.get() && !sock.cancel_sent.replace(true) {
                    let entry = opcode::AsyncCancel::new(user_data(sock.index, KIND_RECV))
                        .build()
                        .user_data(user_data(sock.index, KIND_CANCEL));
                    self.push(entry);
                }
            } else if !sock.recv_armed.get()
                && !sock.recv_paused.get()
                && !sock.eof.get()
                && sock.error.get().is_none()
            {
                self.arm_recv(&sock);
            }
            self.maybe_release(&sock);
        }
        self.dirty_spare.set(dirty);
    }

    fn start_send(&self, sock: &Socket) {
        if sock.send_in_flight.get() {
            return;
        }
        let mut sending = sock.sending.borrow_mut();
        if sock.sent.get() == sending.len() {
            let mut outbox = sock.outbox.borrow_mut();
            if outbox.is_empty() {
                return;
            }
            sending.clear();
            std::mem::swap(&mut *sending, &mut *outbox);
            sock.sent.set(0);
            sock.wake_writer();
        }
        let rest = &sending[sock.sent.get()..];
        let entry = opcode::Send::new(
            types::Fd(sock.fd.as_raw_fd()),
            rest.as_ptr(),
            rest.len() as u32,
        )
        .flags(libc::MSG_NOSIGNAL)
        .build()
        .user_data(user_data(sock.index, KIND_SEND));
        sock.send_in_flight.set(true);
        self.sends_queued.set(self.sends_queued.get() + 1);
        self.push(entry);
    }

    /// Close and forget a socket once its task is gone and nothing of it is in flight.
    fn maybe_release(&self, sock: &Socket) {
        if sock.finished() {
            let index = sock.index;
            // Dropping the last Rc closes the fd.
            if self.sockets.borrow_mut()[index].take().is_some() {
                self.free.borrow_mut().push(index);
            }
        }
    }

    /// Handle every completion already posted. Returns how many there were.
    fn reap(&self) -> usize {
        let mut ring = self.ring.borrow_mut();
        let mut n = 0;
        let mut gave_back = false;
        let mut received = false;
        // Completions are copied out one at a time so handlers may queue new entries.
        while let Some(cqe) = ring.completion().next() {
            n += 1;
            let ud = cqe.user_data();
            let index = (ud >> 8) as usize;
            match ud & 0xff {
                KIND_RECV => {
                    received |= cqe.result() > 0;
                    gave_back |= self.on_recv(index, &cqe);
                }
                KIND_SEND => self.on_send(index, cqe.result()),
                KIND_ACCEPT => self.on_accept(index, &cqe),
                KIND_BELL => self.arm_bell(),
                KIND_CONNECT => self.on_connect(index, cqe.result()),
                _ => {} // KIND_CANCEL: the cancelled operation reports on its own.
            }
        }
        if gave_back {
            self.bufs.publish();
        }
        drop(ring);
        if received {
            crate::time::new_turn();
        }
        if let Some(metrics) = &self.metrics {
            metrics.note_turn(received);
        }
        n
    }

    fn socket(&self, index: usize) -> Option<Rc<Socket>> {
        self.sockets.borrow().get(index).cloned().flatten()
    }

    /// Returns true if a buffer was given back to the ring.
    fn on_recv(&self, index: usize, cqe: &cqueue::Entry) -> bool {
        let res = cqe.result();
        let more = cqueue::more(cqe.flags());
        let bid = cqueue::buffer_select(cqe.flags());
        let Some(sock) = self.socket(index) else {
            if let Some(bid) = bid {
                self.bufs.give_back(bid);
                return true;
            }
            return false;
        };
        if !more {
            sock.recv_armed.set(false);
        }
        let mut gave_back = false;
        if res > 0 {
            if let Some(bid) = bid {
                let data = self.bufs.buffer(bid, res as usize);
                if !sock.closing.get() {
                    let mut inbox = sock.inbox.borrow_mut();
                    inbox.extend_from_slice(data);
                    let received = data.len();
                    let wipe = sock.wipe_left.get();
                    if wipe > 0 {
                        self.bufs.wipe(bid, received);
                        sock.wipe_left.set(wipe.saturating_sub(received));
                    }
                    if inbox.len() - sock.in_pos.get() > INBOX_HIGH
                        && sock.recv_armed.get()
                        && !sock.recv_paused.get()
                    {
                        // Pause: cancel the multishot receive; resumed by `poll_read`.
                        sock.recv_paused.set(true);
                        self.push(
                            opcode::AsyncCancel::new(user_data(index, KIND_RECV))
                                .build()
                                .user_data(user_data(index, KIND_CANCEL)),
                        );
                    }
                }
                self.bufs.give_back(bid);
                gave_back = true;
            }
            sock.wake_reader();
        } else if res == 0 {
            sock.eof.set(true);
            sock.wake_reader();
        } else {
            let errno = -res;
            match errno {
                // Cancelled by us (pause or close), or the buffer ring ran dry: the data is
                // still in the socket; re-armed by flush_dirty unless paused or closing.
                libc::ECANCELED | libc::ENOBUFS => {}
                _ => sock.fail(errno),
            }
        }
        if !sock.recv_armed.get() {
            self.mark_dirty(&sock);
        }
        gave_back
    }

    fn on_send(&self, index: usize, res: i32) {
        let Some(sock) = self.socket(index) else {
            return;
        };
        sock.send_in_flight.set(false);
        if res < 0 {
            sock.fail(-res);
        } else {
            sock.sent.set(sock.sent.get() + res as usize);
        }
        // The rest of a short send, or what was appended meanwhile.
        self.mark_dirty(&sock);
    }

    fn on_accept(&self, listener: usize, cqe: &cqueue::Entry) {
        let res = cqe.result();
        if !cqueue::more(cqe.flags()) {
            // The multishot accept ended (an error such as EMFILE): retry shortly.
            let at = Instant::now() + Duration::from_millis(10);
            self.accept_retry.borrow_mut().push((listener, at));
            self.due_by(at);
        }
        if res < 0 {
            log::warn!("accept failed: {}", io::Error::from_raw_os_error(-res));
            return;
        }
        // SAFETY: the kernel just gave us this descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(res) };
        let (unix, own_handler) = {
            let l = &self.listeners.borrow()[listener];
            (l.unix, l.on_accept.clone())
        };
        let peer = if unix {
            Peer::Unix
        } else {
            let sock = socket2::SockRef::from(&fd);
            let _ = sock.set_nodelay(true);
            match sock.peer_addr().ok().and_then(|a| a.as_socket()) {
                Some(addr) => Peer::Tcp(addr),
                None => return, // Gone already.
            }
        };
        let kept = match (&own_handler, &*self.deal.borrow()) {
            (None, Some(deal)) => deal(fd, peer),
            _ => Some((fd, peer)),
        };
        if let Some((fd, peer)) = kept {
            self.serve_socket(fd, peer, own_handler);
        }
    }

    /// Serve a connection another shard accepted and dealt to this one.
    pub fn adopt(&self, fd: OwnedFd, peer: Peer) {
        self.serve_socket(fd, peer, None);
    }

    /// Arm a connected socket's receive and hand its stream to `handler`, or to the shard's
    /// pgwire handler.
    fn serve_socket(
        &self,
        fd: OwnedFd,
        peer: Peer,
        handler: Option<Rc<dyn Fn(UringStream, Peer)>>,
    ) {
        let sock = self.register(fd);
        self.arm_recv(&sock);
        let stream = UringStream {
            driver: current().expect("the driver is installed on its shard thread"),
            sock,
        };
        if let Some(handler) = handler {
            handler(stream, peer);
        } else if let Some(on_accept) = &*self.on_accept.borrow() {
            on_accept(stream, peer);
        }
    }

    /// Give a socket a slot in the driver's table (its index is in every user_data).
    fn register(&self, fd: OwnedFd) -> Rc<Socket> {
        let index = self.free.borrow_mut().pop().unwrap_or_else(|| {
            let mut sockets = self.sockets.borrow_mut();
            sockets.push(None);
            sockets.len() - 1
        });
        let sock = Rc::new(Socket {
            fd,
            index,
            inbox: RefCell::new(Vec::new()),
            in_pos: Cell::new(0),
            reader: Cell::new(None),
            eof: Cell::new(false),
            error: Cell::new(None),
            recv_armed: Cell::new(false),
            recv_paused: Cell::new(false),
            wipe_left: Cell::new(WIPE_FIRST_BYTES),
            outbox: RefCell::new(Vec::new()),
            sending: RefCell::new(Vec::new()),
            sent: Cell::new(0),
            send_in_flight: Cell::new(false),
            writer: Cell::new(None),
            closing: Cell::new(false),
            cancel_sent: Cell::new(false),
            dirty: Cell::new(false),
        });
        self.sockets.borrow_mut()[index] = Some(sock.clone());
        sock
    }

    /// Open an outbound connection on this shard's ring (IORING_OP_CONNECT on a fresh
    /// non-blocking socket); once connected it is served by the same multishot receive and
    /// batched sends as an accepted one. TCP sockets get TCP_NODELAY.
    pub fn connect(self: &Rc<Self>, addr: socket2::SockAddr) -> io::Result<Connect> {
        let tcp = addr.as_socket().is_some();
        let socket = socket2::Socket::new(
            addr.domain(),
            socket2::Type::STREAM.nonblocking().cloexec(),
            None,
        )?;
        if tcp {
            socket.set_nodelay(true)?;
        }
        let sock = self.register(socket.into());
        let pending = Rc::new(Connecting {
            addr,
            result: Cell::new(None),
            waker: Cell::new(None),
            abandoned: Cell::new(false),
        });
        // SAFETY: the address lives in `pending`, which the driver's table keeps alive until
        // the operation completes (`on_connect` removes it).
        let entry = opcode::Connect::new(
            types::Fd(sock.fd.as_raw_fd()),
            pending.addr.as_ptr().cast(),
            pending.addr.len(),
        )
        .build()
        .user_data(user_data(sock.index, KIND_CONNECT));
        self.connecting
            .borrow_mut()
            .insert(sock.index, pending.clone());
        self.push(entry);
        Ok(Connect {
            driver: self.clone(),
            sock: Some(sock),
            pending,
        })
    }

    fn on_connect(&self, index: usize, res: i32) {
        let Some(pending) = self.connecting.borrow_mut().remove(&index) else {
            return;
        };
        pending.result.set(Some(res));
        if pending.abandoned.get() {
            if let Some(sock) = self.socket(index) {
                sock.closing.set(true);
                self.mark_dirty(&sock);
            }
        } else if let Some(w) = pending.waker.take() {
            w.wake();
        }
    }

    fn fire_timers(&self, now: Instant) -> usize {
        let n = self.fire_due(now);
        let next = self.next_deadline();
        self.next_due
            .set(next.map_or(Duration::MAX, |at| self.clock.on_scale(at)));
        n
    }

    fn fire_due(&self, now: Instant) -> usize {
        let mut n = 0;
        loop {
            let mut timers = self.timers.borrow_mut();
            match timers.first_key_value() {
                Some((&(at, _), _)) if at <= now => {
                    let (_, waker) = timers.pop_first().expect("peeked");
                    drop(timers);
                    waker.wake();
                    n += 1;
                }
                _ => break,
            }
        }
        let mut retry = self.accept_retry.borrow_mut();
        if retry.is_empty() {
            return n;
        }
        let due: Vec<usize> = retry
            .iter()
            .filter(|(_, at)| *at <= now)
            .map(|(i, _)| *i)
            .collect();
        retry.retain(|(_, at)| *at > now);
        drop(retry);
        for i in due {
            self.arm_accept(i);
            n += 1;
        }
        n
    }

    fn due_by(&self, at: Instant) {
        self.next_due
            .set(self.next_due.get().min(self.clock.on_scale(at)));
    }

    /// A timer may be due at coarse time `tick`.
    fn maybe_due(&self, tick: Duration) -> bool {
        let due = self.next_due.get();
        due != Duration::MAX && tick + 2 * self.clock.res >= due
    }

    fn next_deadline(&self) -> Option<Instant> {
        let timer = self.timers.borrow().first_key_value().map(|(k, _)| k.0);
        let retry = self.accept_retry.borrow().iter().map(|(_, at)| *at).min();
        match (timer, retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn drain_inbox(&self) -> usize {
        // Taken before draining: a message sent during the drain either is drained now or
        // sets `mail` again for the next turn.
        // A plain load first: the swap is a locked instruction, and most turns have no mail.
        if !self.bell.mail.load(Ordering::Relaxed) || !self.bell.mail.swap(false, Ordering::AcqRel)
        {
            return 0;
        }
        match &*self.inbox.borrow() {
            Some(f) => f(),
            None => 0,
        }
    }

    /// Other shards left messages that `drain_inbox` has not taken yet.
    fn inbox_pending(&self) -> bool {
        self.bell.mail.load(Ordering::Acquire)
    }

    /// Submit everything queued and sleep until a completion, the next timer or a doorbell.
    ///
    /// The SENDs submitted by this same call usually complete inline (loopback, room in the
    /// socket buffer), and their completions would end the wait at once: one extra
    /// `io_uring_enter` per turn, two per query at one connection. So the wait asks for one
    /// completion more than the sends it submits. A send that cannot complete inline (a client
    /// not reading) must not hold up everyone else: with Linux 6.12's min-wait the kernel
    /// returns on any single completion after 50 µs; without it the wait is capped at 1 ms.
    fn park(&self) {
        self.bell.parked.store(true, Ordering::Relaxed);
        // Pairs with the fence in `Doorbell::ring`.
        fence(Ordering::SeqCst);
        let sends = self.sends_queued.replace(0);
        let mut wait = 1 + sends as usize;
        if self.inbox_pending() {
            wait = 0; // Just submit; the messages are handled next turn.
        }
        let mut timeout = if self.maybe_due(coarse_now() + PARK_CAP) {
            match self.next_deadline() {
                Some(at) => at.saturating_duration_since(Instant::now()).min(PARK_CAP),
                None => PARK_CAP,
            }
        } else {
            // Nothing due before the cap, whatever the coarse clock's lag: no precise read.
            PARK_CAP
        };
        let mut min_wait_usec = 0;
        if sends > 0 {
            if self.min_timeout {
                min_wait_usec = 50;
            } else {
                timeout = timeout.min(Duration::from_millis(1));
            }
        }
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new()
            .timespec(&ts)
            .min_wait_usec(min_wait_usec);
        let mut ring = self.ring.borrow_mut();
        self.fill_sq(&mut ring);
        match ring.submitter().submit_with_args(wait, &args) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                ) => {}
            Err(e) => log::error!("io_uring wait failed: {e}"),
        }
        self.bell.parked.store(false, Ordering::Relaxed);
    }

    /// Submit without waiting (entries queued while the shard is busy).
    fn submit(&self) {
        let mut ring = self.ring.borrow_mut();
        self.fill_sq(&mut ring);
        self.sends_queued.set(0);
        if let Err(e) = ring.submit() {
            if e.raw_os_error() != Some(libc::EBUSY) {
                log::error!("io_uring submit failed: {e}");
            }
        }
    }

    /// The shard's I/O loop; runs for the life of the shard.
    pub async fn run(self: Rc<Self>) {
        // 0: working. 1: quiet once, the task counter was reset. 2+: checking the counter.
        let mut quiet = 0u32;
        let mut busy_turns = 0u32;
        // Executor stalls: the time from one driver turn to the next is spent in other tasks
        // (plus this turn's own short work); past `STALL_THRESHOLD` it is counted
        // (docs/ARCHITECTURE.md). Both this and the timers read the coarse clock once per
        // turn (see `coarse_now`): stalls are timed to one kernel tick (4 ms here; the
        // threshold is 10 ms), and the precise clock is read only when a timer may be due.
        let metrics = crate::metrics::current().filter(|m| m.enabled);
        let mut last_turn: Option<Duration> = None;
        loop {
            let tick = coarse_now();
            if let Some(m) = &metrics {
                if let Some(at) = last_turn {
                    let gap = tick.saturating_sub(at);
                    if gap >= crate::metrics::STALL_THRESHOLD {
                        m.record_stall(gap);
                    }
                }
                last_turn = Some(tick);
            }
            self.flush_dirty();
            let timers = if self.maybe_due(tick) {
                self.fire_timers(Instant::now())
            } else {
                0
            };
            let work = self.reap() + self.drain_inbox() + timers;
            if work > 0 {
                quiet = 0;
                busy_turns += 1;
                if busy_turns >= 8 {
                    // Busy for a while without parking: hand the sends over anyway.
                    self.flush_dirty();
                    self.submit();
                    busy_turns = 0;
                }
                glommio::executor().yield_task_queue_now().await;
                continue;
            }
            quiet += 1;
            let tasks = glommio::executor().executor_stats().tasks_executed();
            if quiet >= 2 && tasks <= 1 && !glommio::executor().need_preempt() {
                // The last pass of the task queue ran the driver alone: nothing else is
                // runnable, so sleeping in the ring starves no one.
                self.flush_dirty();
                if self.spin_idle(tick) {
                    // Something arrived while polling: reap it now.
                    quiet = 0;
                    continue;
                } else {
                    self.park();
                    quiet = 0;
                    busy_turns = 0;
                    // The sleep is not a stall: count from its end, the next turn.
                    last_turn = None;
                    // Straight to reaping what woke us: a yield here would cost one more pass
                    // of glommio's loop per query at low concurrency, and nothing else can
                    // have become runnable while the thread slept.
                    continue;
                }
            }
            glommio::executor().yield_task_queue_now().await;
        }
    }

    /// Register a timer; the driver wakes `waker` at `at`. Returns its key for cancelling.
    pub(crate) fn add_timer(&self, at: Instant, waker: Waker) -> (Instant, u64) {
        let id = self.next_timer.get();
        self.next_timer.set(id + 1);
        self.timers.borrow_mut().insert((at, id), waker);
        self.due_by(at);
        (at, id)
    }

    pub(crate) fn update_timer(&self, key: (Instant, u64), waker: &Waker) -> bool {
        match self.timers.borrow_mut().get_mut(&key) {
            Some(w) => {
                if !w.will_wake(waker) {
                    *w = waker.clone();
                }
                true
            }
            None => false,
        }
    }

    pub(crate) fn cancel_timer(&self, key: (Instant, u64)) {
        self.timers.borrow_mut().remove(&key);
    }

    /// Connections currently held (for tests and metrics).
    pub fn open_sockets(&self) -> usize {
        self.sockets.borrow().iter().filter(|s| s.is_some()).count()
    }
}

/// An outbound connection in progress; see [`Driver::connect`].
struct Connecting {
    addr: socket2::SockAddr,
    /// The CONNECT's result (0 or -errno), once it completed.
    result: Cell<Option<i32>>,
    waker: Cell<Option<Waker>>,
    /// The [`Connect`] future was dropped before the CONNECT completed: close on completion.
    abandoned: Cell<bool>,
}

/// Resolves to the connected stream. Dropping it early closes the socket once the kernel is
/// done with the CONNECT (the address it reads must outlive the operation).
pub struct Connect {
    driver: Rc<Driver>,
    sock: Option<Rc<Socket>>,
    pending: Rc<Connecting>,
}

impl std::future::Future for Connect {
    type Output = io::Result<UringStream>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.pending.result.get() {
            None => {
                self.pending.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
            Some(res) => {
                let sock = self.sock.take().expect("Connect polled after completion");
                if res < 0 {
                    sock.closing.set(true);
                    self.driver.mark_dirty(&sock);
                    return Poll::Ready(Err(io::Error::from_raw_os_error(-res)));
                }
                self.driver.arm_recv(&sock);
                Poll::Ready(Ok(UringStream {
                    driver: self.driver.clone(),
                    sock,
                }))
            }
        }
    }
}

impl Drop for Connect {
    fn drop(&mut self) {
        if let Some(sock) = self.sock.take() {
            if self.pending.result.get().is_some() {
                sock.closing.set(true);
                self.driver.mark_dirty(&sock);
            } else {
                self.pending.abandoned.set(true);
            }
        }
    }
}

/// A connection on the shard's ring, as an `AsyncRead + AsyncWrite` for the state machine.
///
/// Writes are write-behind: `poll_write` appends to the outbox and returns at once; the driver
/// sends at its next turn. The outbox holds at most [`OUTBOX_HIGH`] bytes; beyond that
/// `poll_write` takes what fits and waits.
pub struct UringStream {
    driver: Rc<Driver>,
    sock: Rc<Socket>,
}

impl AsyncRead for UringStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let sock = &self.sock;
        let mut inbox = sock.inbox.borrow_mut();
        let pos = sock.in_pos.get();
        if pos < inbox.len() {
            let n = buf.len().min(inbox.len() - pos);
            buf[..n].copy_from_slice(&inbox[pos..pos + n]);
            if pos + n == inbox.len() {
                if sock.wipe_left.get() > 0 {
                    inbox.fill(0);
                }
                inbox.clear();
                sock.in_pos.set(0);
            } else {
                sock.in_pos.set(pos + n);
            }
            if sock.recv_paused.get() && inbox.len() - sock.in_pos.get() <= INBOX_HIGH / 2 {
                sock.recv_paused.set(false);
                drop(inbox);
                self.driver.mark_dirty(sock);
            }
            return Poll::Ready(Ok(n));
        }
        if let Some(errno) = sock.error.get() {
            return Poll::Ready(Err(io::Error::from_raw_os_error(errno)));
        }
        if sock.eof.get() {
            return Poll::Ready(Ok(0));
        }
        sock.reader.set(Some(cx.waker().clone()));
        Poll::Pending
    }
}

impl AsyncWrite for UringStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let sock = &self.sock;
        if let Some(errno) = sock.error.get() {
            return Poll::Ready(Err(io::Error::from_raw_os_error(errno)));
        }
        let mut outbox = sock.outbox.borrow_mut();
        let room = OUTBOX_HIGH.saturating_sub(outbox.len());
        if room == 0 {
            sock.writer.set(Some(cx.waker().clone()));
            return Poll::Pending;
        }
        // Take no more than fits: `write_all` comes back for the rest once the kernel has
        // taken some, so a large reply waits here instead of piling up in the outbox.
        let n = buf.len().min(room);
        outbox.extend_from_slice(&buf[..n]);
        drop(outbox);
        self.driver.mark_dirty(sock);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl Drop for UringStream {
    fn drop(&mut self) {
        // The driver sends what is left, cancels the receive, then closes the socket.
        self.sock.closing.set(true);
        self.sock.reader.take();
        self.sock.writer.take();
        self.driver.mark_dirty(&self.sock);
    }
}
