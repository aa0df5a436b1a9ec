//! The one place all tuning lives. Built from the CLI in the binary, validated by
//! [`ServerConfig::preflight`] before any executor starts: a bad setting is one clear sentence
//! and a non-zero exit, never a panic inside a shard.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::auth::AuthStore;

/// Where shards run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// One shard per listed CPU, each pinned to it.
    Pinned(Vec<usize>),
    /// N shards, unpinned (the kernel schedules them).
    Unpinned(usize),
}

impl Placement {
    pub fn shard_count(&self) -> usize {
        match self {
            Placement::Pinned(cores) => cores.len(),
            Placement::Unpinned(n) => *n,
        }
    }
}

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub placement: Placement,
    /// Connections open at once across all shards; one more gets FATAL 53300.
    pub max_connections: usize,
    /// Largest frontend message accepted (PostgreSQL's own limit is 1 GiB); larger is 08P01.
    pub max_message_bytes: usize,
    /// Who may connect and how they prove it: the host-based rules and the users, loaded and
    /// checked before any shard starts, swapped whole on SIGHUP (see [`crate::auth`]).
    pub auth: Arc<AuthStore>,
    /// glommio's registered I/O memory per shard. It is locked memory, so the sum over shards
    /// must fit RLIMIT_MEMLOCK (8 MiB on the project's machines; glommio's default is 10 MiB).
    pub io_memory_bytes: usize,
    /// Time a client gets from connect to ReadyForQuery (PostgreSQL's authentication_timeout).
    pub startup_timeout: Duration,
    /// Hidden benchmark mode: answer every Query with prebuilt reply bytes, bypassing SQL.
    pub wire_floor: bool,
    /// io_uring path: how long a quiet shard polls before it sleeps, while the machine has
    /// CPU to spare (zero: never).
    pub idle_spin: Duration,
    /// io_uring path: a shard serving more TCP connections than another hands a new one to the
    /// least loaded (false: TCP connections stay where SO_REUSEPORT put them; Unix-domain ones
    /// are always dealt, the kernel does not spread them at all).
    pub balance_connections: bool,
    /// Shard threads run as SCHED_BATCH (`--sched-batch`): woken, they do not preempt.
    pub sched_batch: bool,
    /// Which socket path the shards use.
    pub io: IoMode,
    /// Also listen on the Unix-domain socket `DIR/.s.PGSQL.<port>`, as PostgreSQL does.
    pub unix_socket_dir: Option<std::path::PathBuf>,
    /// `--tls-cert`/`--tls-key`/`--tls-mode`, loaded and checked at startup.
    pub tls: crate::tls::Tls,
    /// Connections open at once on one shard (None: only the global limit); one more gets
    /// FATAL 53300 like the global limit.
    pub max_connections_per_shard: Option<usize>,
    /// Record per-statement metrics (`--metrics on`); off only to measure what recording costs.
    pub metrics_enabled: bool,
}

/// The socket path under the connection state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoMode {
    /// The shard's own io_uring (multishot accept/recv, batched sends): see `uring`.
    Uring,
    /// glommio's TcpStream/UnixStream.
    Glommio,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:6875".parse().expect("literal address"),
            placement: Placement::Unpinned(1),
            max_connections: 1024,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            auth: Arc::new(AuthStore::trust()),
            io_memory_bytes: DEFAULT_IO_MEMORY_BYTES,
            startup_timeout: Duration::from_secs(60),
            wire_floor: false,
            idle_spin: DEFAULT_IDLE_SPIN,
            balance_connections: true,
            sched_batch: false,
            io: IoMode::Uring,
            unix_socket_dir: None,
            tls: crate::tls::Tls::default(),
            max_connections_per_shard: None,
            metrics_enabled: true,
        }
    }
}

/// How long a quiet shard on the io_uring path polls before it sleeps, while the machine has
/// CPU to spare (see `uring::Driver::spin_idle`). 50 µs covers a lone client's next query
/// (~5 µs after its reply) and an upstream PostgreSQL's reply to a point query (15-40 µs);
/// measured in docs/PERF.md ("Session 7").
pub const DEFAULT_IDLE_SPIN: Duration = Duration::from_micros(50);
/// 64 MiB: far above any statement a driver sends, far below PostgreSQL's 1 GiB, so one client
/// cannot make a shard buffer gigabytes.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 << 20;
/// 512 KiB per shard: ringwire does no storage I/O through glommio, so this only has to cover
/// glommio's own small buffers; 16 shards fit in 8 MiB of memlock.
pub const DEFAULT_IO_MEMORY_BYTES: usize = 512 << 10;
/// glommio never reserves less than this, whatever it is asked for.
const GLOMMIO_MIN_IO_MEMORY_BYTES: usize = 64 << 10;

impl ServerConfig {
    /// Check the machine can run this configuration. Every error is one sentence for the
    /// operator.
    pub fn preflight(&self) -> Result<(), String> {
        let shards = self.placement.shard_count();
        if shards == 0 {
            return Err("no shards configured: --cores must list at least one CPU and --shards must be at least 1".into());
        }
        if self.max_connections == 0 {
            return Err("--max-connections must be at least 1".into());
        }
        if self.max_connections_per_shard == Some(0) {
            return Err("--max-connections-per-shard must be at least 1".into());
        }
        if self.max_message_bytes < 1024 {
            return Err(format!(
                "--max-message-bytes {} is too small: clients' startup and auth messages need at least 1024",
                self.max_message_bytes
            ));
        }
        if let Placement::Pinned(cores) = &self.placement {
            let online = online_cpus()?;
            for core in cores {
                if !online.contains(core) {
                    return Err(format!(
                        "--cores lists CPU {core}, but this process may only run on CPUs {}",
                        format_cpus(&online)
                    ));
                }
            }
            let mut sorted = cores.clone();
            sorted.sort_unstable();
            sorted.dedup();
            if sorted.len() != cores.len() {
                return Err("--cores lists a CPU twice; one shard per core".into());
            }
        }
        let per_shard = self.io_memory_bytes.max(GLOMMIO_MIN_IO_MEMORY_BYTES);
        let needed = per_shard.saturating_mul(shards);
        let limit = memlock_limit_bytes();
        if let Some(limit) = limit {
            if needed > limit {
                return Err(format!(
                    "{shards} shards need {needed} bytes of locked memory ({per_shard} each) but RLIMIT_MEMLOCK is {limit}: \
                     raise it (ulimit -l) or lower --io-memory-bytes"
                ));
            }
        }
        io_uring_usable()
    }
}

/// CPUs this process may run on (its affinity mask, which already excludes offline CPUs).
pub fn online_cpus() -> Result<Vec<usize>, String> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most size_of::<cpu_set_t>().
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(format!(
                "cannot read this process's CPU affinity: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

fn format_cpus(cpus: &[usize]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The soft RLIMIT_MEMLOCK, or None when unlimited.
pub fn memlock_limit_bytes() -> Option<usize> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(lim.rlim_cur as usize)
}

/// Try to create a small ring: fails clearly where io_uring is disabled (seccomp, the
/// `kernel.io_uring_disabled` sysctl, old kernels) instead of letting glommio panic later.
fn io_uring_usable() -> Result<(), String> {
    match io_uring::IoUring::new(8) {
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "io_uring is not usable on this machine ({e}); ringwire needs Linux 5.8+ with io_uring enabled \
             (check the kernel.io_uring_disabled sysctl and seccomp policy)"
        )),
    }
}

/// Parse a CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("invalid CPU list {s:?}: expected numbers and ranges like 0-3,8");
        match part.split_once('-') {
            Some((a, b)) => {
                let a: usize = a.trim().parse().map_err(|_| bad())?;
                let b: usize = b.trim().parse().map_err(|_| bad())?;
                if a > b || b - a > 4096 {
                    return Err(bad());
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    if cpus.is_empty() {
        return Err(format!("invalid CPU list {s:?}: it names no CPU"));
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cpu_list("1").unwrap(), vec![1]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert!(parse_cpu_list(",").is_err());
    }

    #[test]
    fn preflight_names_the_problem() {
        let cfg = ServerConfig {
            placement: Placement::Pinned(vec![100_000]),
            ..Default::default()
        };
        assert!(cfg.preflight().unwrap_err().contains("CPU 100000"));
        let cfg = ServerConfig {
            placement: Placement::Unpinned(0),
            ..Default::default()
        };
        assert!(cfg.preflight().is_err());
        if memlock_limit_bytes().is_some() {
            let cfg = ServerConfig {
                io_memory_bytes: 1 << 40,
                ..Default::default()
            };
            assert!(cfg.preflight().unwrap_err().contains("RLIMIT_MEMLOCK"));
        }
        ServerConfig::default().preflight().unwrap();
    }
}
