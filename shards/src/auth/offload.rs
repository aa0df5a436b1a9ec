//! CPU-heavy authentication work (PBKDF2, for method `password` against a SCRAM verifier) off
//! the shard threads, so one login does not stall the shard's other connections.
//!
//! Why not glommio's `spawn_blocking`: its completion reaches the shard as a cross-thread
//! glommio wake-up, which on the io_uring socket path is only noticed when glommio's own loop
//! next runs (see `uring`): measured, a `password` login took ~800 ms there (debug build)
//! instead of the ~50 ms PBKDF2 costs in that build. Instead a small process-wide pool runs
//! the work and the waiting connection checks for the result on the shard's own timer
//! ([`crate::time::sleep`]), which works on both socket paths. The check costs one timer per
//! [`POLL_INTERVAL`] for the one connection that waits, and adds at most that much latency.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send>;

/// How often a waiting connection looks for its result. PBKDF2 at 4096 iterations takes
/// about 0.7 ms in a release build on the project's machine (README, Authentication), so
/// a login waits about 1 ms.
const POLL_INTERVAL: Duration = Duration::from_millis(1);
/// Pool threads, at most: password logins are rare next to queries; more would only compete
/// with the shards for cores.
const THREADS_MAX: usize = 4;

/// The pool's queue; `None` if no thread could be started.
fn pool() -> Option<&'static flume::Sender<Job>> {
    static POOL: OnceLock<Option<flume::Sender<Job>>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = flume::unbounded::<Job>();
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(THREADS_MAX);
        let mut started = 0;
        for i in 0..threads {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("auth-kdf-{i}"))
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        // A panic is a bug in the job; it must not take the thread with it.
                        let _ = catch_unwind(AssertUnwindSafe(job));
                    }
                });
            match spawned {
                Ok(_) => started += 1,
                Err(e) => log::error!("cannot start authentication worker thread {i}: {e}"),
            }
        }
        (started > 0).then_some(tx)
    })
    .as_ref()
}

/// Run `work` on the pool and wait for its result without blocking the shard. `None` if it
/// could not run (no worker thread, or the work panicked).
pub(crate) async fn run<R: Send + 'static>(work: impl FnOnce() -> R + Send + 'static) -> Option<R> {
    let (tx, rx) = flume::bounded(1);
    pool()?
        .send(Box::new(move || {
            let _ = tx.send(work());
        }))
        .ok()?;
    loop {
        match rx.try_recv() {
            Ok(result) => return Some(result),
            Err(flume::TryRecvError::Empty) => crate::time::sleep(POLL_INTERVAL).await,
            Err(flume::TryRecvError::Disconnected) => return None,
        }
    }
}
