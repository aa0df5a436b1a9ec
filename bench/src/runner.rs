//! One concurrency level: client threads (one glommio executor each) open their share of the
//! connections, everyone waits at a gate, the main thread fixes the timeline and samples the
//! process's CPU time and allocation count at the edges of the timed window, and the threads'
//! histograms and counters are merged at the end.

use std::rc::Rc;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use glommio::{LocalExecutorBuilder, Placement};
use hdrhistogram::Histogram;

use crate::client::{new_histogram, Connection, ThreadStats, Timeline, SETUP_TIMEOUT};
use crate::config::{BenchConfig, Driver, IO_MEMORY_BYTES};

/// What one level measured.
pub struct LevelResult {
    pub concurrency: usize,
    pub threads: usize,
    pub window: Duration,
    /// Queries completed without an error inside the window.
    pub queries: u64,
    pub latency_ns: Histogram<u64>,
    /// `(SQLSTATE, count, first message)`.
    pub errors: Vec<(String, u64, String)>,
    /// One line per connection that broke during the run.
    pub lost: Vec<String>,
    /// user + system CPU time of this process during the window.
    pub cpu: Duration,
    /// Heap allocations by this process during the window (None without the counting allocator).
    pub allocations: Option<u64>,
    /// Set when the level could not start (connections refused, ...): nothing was measured.
    pub setup_error: Option<String>,
}

/// Per-thread results, sent back when the executor finishes.
struct ThreadResult {
    queries: u64,
    latency_ns: Histogram<u64>,
    errors: Vec<([u8; 5], u64, String)>,
    lost: Vec<String>,
}

#[derive(Clone, Copy)]
struct Go {
    abort: bool,
    timeline: Timeline,
}

/// Threads block here (outside any timed section) until the main thread says go or abort.
struct Gate {
    go: Mutex<Option<Go>>,
    opened: Condvar,
}

impl Gate {
    fn wait(&self) -> Go {
        let mut go = self.go.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(g) = *go {
                return g;
            }
            go = self.opened.wait(go).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn open(&self, go: Go) {
        *self.go.lock().unwrap_or_else(|e| e.into_inner()) = Some(go);
        self.opened.notify_all();
    }
}

/// Connection `i` of `n` runs on thread `i % threads`: an even spread, and the first threads
/// get the remainder.
fn connections_of(thread: usize, threads: usize, concurrency: usize) -> Vec<usize> {
    (thread..concurrency).step_by(threads).collect()
}

/// Process CPU time (all threads), user + system.
pub fn process_cpu_time() -> Duration {
    // SAFETY: getrusage fills one rusage struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn sleep_until(t: Instant) {
    std::thread::sleep(t.saturating_duration_since(Instant::now()));
}

/// Check once, before any level, that a glommio executor can start here: a clear message
/// instead of a hung or panicking thread later.
pub fn preflight() -> Result<(), String> {
    LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(IO_MEMORY_BYTES)
        .make()
        .map(drop)
        .map_err(|e| format!("cannot start a glommio executor ({e}); io_uring must be enabled and RLIMIT_MEMLOCK large enough"))
}

/// `--driver shards`: this thread's `shards::uring` driver, the one every server shard runs on
/// its io_uring path, with no listeners; it is installed for this thread and runs as a task
/// until the executor ends.
fn start_shards_driver() -> Result<Rc<shards::uring::Driver>, String> {
    let bell = shards::uring::Doorbell::new()
        .map_err(|e| format!("cannot make the shards driver's doorbell: {e}"))?;
    let driver = shards::uring::Driver::new(Vec::new(), Arc::new(bell))
        .map_err(|e| format!("cannot start the shards io_uring driver: {e}"))?;
    driver.set_handlers(Box::new(|_, _| {}), Box::new(|| 0));
    glommio::spawn_local(driver.clone().run()).detach();
    Ok(driver)
}

pub fn run_level(cfg: &BenchConfig, concurrency: usize, level_seed: u64) -> LevelResult {
    let threads = cfg.threads.min(concurrency);
    let gate = Arc::new(Gate {
        go: Mutex::new(None),
        opened: Condvar::new(),
    });
    let (ready_tx, ready_rx) = mpsc::channel::<Option<String>>();
    let mut handles = Vec::with_capacity(threads);
    let mut setup_errors: Vec<String> = Vec::new();
    for t in 0..threads {
        let placement = match &cfg.client_cores {
            Some(cores) => Placement::Fixed(cores[t % cores.len()]),
            None => Placement::Unbound,
        };
        let ids = connections_of(t, threads, concurrency);
        let (gate, ready_tx) = (gate.clone(), ready_tx.clone());
        let (workload, params, pipeline, driver) = (
            cfg.workload.clone(),
            cfg.connect.clone(),
            cfg.pipeline,
            cfg.driver,
        );
        let spawned = LocalExecutorBuilder::new(placement)
            .name(&format!("bench-{t}"))
            .io_memory(IO_MEMORY_BYTES)
            .spawn(move || async move {
                let stats = Rc::new(ThreadStats::new());
                let mut failure = None;
                let ring = match driver {
                    Driver::Shards => match start_shards_driver() {
                        Ok(ring) => Some(ring),
                        Err(e) => {
                            failure = Some(e);
                            None
                        }
                    },
                    Driver::Uring | Driver::Glommio => None,
                };
                let opening: Vec<_> = ids
                    .iter()
                    .filter(|_| failure.is_none())
                    .map(|&id| {
                        let (workload, params) = (workload.clone(), params.clone());
                        glommio::spawn_local(async move {
                            Connection::open(&params, &workload, pipeline)
                                .await
                                .map(|c| (id, c))
                        })
                    })
                    .collect();
                let mut connections = Vec::with_capacity(opening.len());
                for task in opening {
                    match task.await {
                        Ok(c) => connections.push(c),
                        Err(e) => {
                            failure.get_or_insert(e);
                        }
                    }
                }
                let _ = ready_tx.send(failure);
                // Blocking here is fine: nothing else runs on this thread until the gate opens.
                let go = gate.wait();
                if !go.abort {
                    match driver {
                        Driver::Uring => {
                            let healthy = crate::ring::drive(
                                &mut connections,
                                &workload,
                                pipeline,
                                go.timeline,
                                &stats,
                                level_seed,
                            );
                            for ((_, conn), healthy) in connections.into_iter().zip(healthy) {
                                conn.close(healthy).await;
                            }
                        }
                        Driver::Glommio | Driver::Shards => {
                            let running: Vec<_> = connections
                                .into_iter()
                                .map(|(id, mut conn)| {
                                    let (workload, stats) = (workload.clone(), stats.clone());
                                    glommio::spawn_local(async move {
                                        let mut cursor = workload.cursor(id, level_seed);
                                        if let Err(e) = conn
                                            .run(
                                                &workload,
                                                &mut cursor,
                                                pipeline,
                                                go.timeline,
                                                &stats,
                                            )
                                            .await
                                        {
                                            stats
                                                .lost
                                                .borrow_mut()
                                                .push(format!("connection {id}: {e}"));
                                        }
                                    })
                                })
                                .collect();
                            for task in running {
                                task.await;
                            }
                        }
                    }
                }
                if let Some(ring) = ring {
                    // Dropped streams are sent out and closed by the driver's next turns.
                    let deadline = Instant::now() + Duration::from_secs(1);
                    while ring.open_sockets() > 0 && Instant::now() < deadline {
                        shards::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                let stats = Rc::try_unwrap(stats)
                    .unwrap_or_else(|_| unreachable!("every connection task has finished"));
                ThreadResult {
                    queries: stats.queries.get(),
                    latency_ns: stats.latency_ns.into_inner(),
                    errors: stats.errors.into_inner(),
                    lost: stats.lost.into_inner(),
                }
            });
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                setup_errors.push(format!("cannot start client thread {t}: {e}"));
                break;
            }
        }
    }
    drop(ready_tx);
    // Every connection's setup is bounded by SETUP_TIMEOUT; allow for slow thread start too.
    let deadline = Instant::now() + SETUP_TIMEOUT + Duration::from_secs(5);
    for _ in 0..handles.len() {
        match ready_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(None) => {}
            Ok(Some(e)) => setup_errors.push(e),
            Err(_) => {
                setup_errors.push("a client thread did not finish connecting in time".into());
                break;
            }
        }
    }

    let start = Instant::now();
    let timeline = Timeline {
        warmup_end: start + cfg.warmup,
        end: start + cfg.warmup + cfg.duration,
    };
    let abort = !setup_errors.is_empty();
    gate.open(Go { abort, timeline });
    let mut cpu = Duration::ZERO;
    let mut allocations = None;
    if !abort {
        sleep_until(timeline.warmup_end);
        let (cpu0, alloc0) = (process_cpu_time(), crate::alloc::allocations());
        sleep_until(timeline.end);
        let (cpu1, alloc1) = (process_cpu_time(), crate::alloc::allocations());
        cpu = cpu1.saturating_sub(cpu0);
        allocations = alloc0.zip(alloc1).map(|(a, b)| b - a);
    }

    let mut result = LevelResult {
        concurrency,
        threads,
        window: cfg.duration,
        queries: 0,
        latency_ns: new_histogram(),
        errors: Vec::new(),
        lost: Vec::new(),
        cpu,
        allocations,
        setup_error: None,
    };
    for (t, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(r) => {
                result.queries += r.queries;
                // Same bounds on every thread, so adding cannot fail.
                let _ = result.latency_ns.add(&r.latency_ns);
                for (code, n, message) in r.errors {
                    let code = String::from_utf8_lossy(&code).into_owned();
                    match result.errors.iter_mut().find(|(c, _, _)| *c == code) {
                        Some((_, total, _)) => *total += n,
                        None => result.errors.push((code, n, message)),
                    }
                }
                result.lost.extend(r.lost);
            }
            Err(e) => setup_errors.push(format!("client thread {t} failed: {e}")),
        }
    }
    result.errors.sort();
    if !setup_errors.is_empty() {
        result.setup_error = Some(setup_errors.join("; "));
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_spread_evenly() {
        assert_eq!(connections_of(0, 2, 5), vec![0, 2, 4]);
        assert_eq!(connections_of(1, 2, 5), vec![1, 3]);
        assert_eq!(connections_of(0, 1, 3), vec![0, 1, 2]);
    }

    #[test]
    fn cpu_time_moves_forward() {
        let a = process_cpu_time();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(process_cpu_time() > a);
    }
}
