//! The command line, turned into one validated [`BenchConfig`] before any executor starts.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser};

use shards::config::{memlock_limit_bytes, online_cpus as allowed_cpus, parse_cpu_list};

use crate::client::ConnectParams;
use crate::workload::{Mode, Workload, WorkloadSpec};

/// glommio's registered (locked) memory per client thread. The generator does no file I/O, so
/// this only covers glommio's own buffers; it must fit RLIMIT_MEMLOCK times --threads.
pub const IO_MEMORY_BYTES: usize = 512 << 10;
/// More in-flight queries per connection than this is a mistake, not an experiment.
pub const MAX_PIPELINE: usize = 1024;
pub const MAX_THREADS: usize = 256;
pub const MAX_CONNECTIONS: usize = 100_000;

/// Closed-loop PostgreSQL wire-protocol load generator.
///
/// Opens N connections per concurrency level (authenticated before timing starts), keeps
/// --pipeline queries in flight on each, and reports throughput, latency percentiles, errors by
/// SQLSTATE and its own CPU time per query.
#[derive(Parser, Debug)]
#[command(name = "ringwire-bench", version)]
pub struct Cli {
    /// Server host name or address.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 5432)]
    pub port: u16,
    #[arg(long, short = 'U', default_value = "postgres")]
    pub user: String,
    /// Database name (default: the user name).
    #[arg(long, short = 'd')]
    pub database: Option<String>,
    /// Password for cleartext, md5 or SCRAM-SHA-256 authentication.
    #[arg(long, env = "PGPASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// A statement to run; `:name` refers to a --param variable. Repeat for a mix.
    #[arg(long)]
    pub sql: Vec<String>,
    /// Weight of the --sql just before it (default 1).
    #[arg(long)]
    pub weight: Vec<u32>,
    /// A variable: NAME=LO..HI (uniform, inclusive), NAME=N, or NAME=random(LO, HI).
    #[arg(long)]
    pub param: Vec<String>,
    /// A pgbench-like script (`\set NAME random(LO, HI)` and SQL lines ending in `;`), run in
    /// order; FILE@WEIGHT sets its weight. Repeat for a mix.
    #[arg(long)]
    pub file: Vec<String>,
    #[arg(long, value_enum, default_value = "simple")]
    pub mode: Mode,
    /// Queries in flight per connection, each with its own Sync (or Query).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Client threads, one glommio executor each; connections are spread over them.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Pin client thread i to CPU LIST[i % len], e.g. 0-1 or 2,3.
    #[arg(long)]
    pub client_cores: Option<String>,
    /// Timed window per concurrency level (e.g. 10s, 500ms, 1m).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Untimed run-in per level, after the connections are open.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Connection counts to run, one level after another.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64,128")]
    pub concurrency: Vec<usize>,
    /// One JSON object per concurrency level, one per line, instead of the table.
    #[arg(long)]
    pub json: bool,
    /// How the timed loop does its I/O: `uring` (one raw io_uring per thread, batched; see
    /// src/ring.rs for why), `shards` (a task per connection on the server's own socket layer,
    /// `shards::uring`: what a server shard runs on) or `glommio` (a glommio task and
    /// TcpStream per connection).
    #[arg(long, value_enum, default_value = "uring")]
    pub driver: Driver,
    /// Seed for the variables' random values (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Driver {
    Uring,
    Shards,
    Glommio,
}

/// Everything a run needs, checked.
#[derive(Debug)]
pub struct BenchConfig {
    pub connect: ConnectParams,
    pub workload: Arc<Workload>,
    pub pipeline: usize,
    pub threads: usize,
    pub client_cores: Option<Vec<usize>>,
    pub duration: Duration,
    pub warmup: Duration,
    pub concurrency: Vec<usize>,
    pub json: bool,
    pub driver: Driver,
    pub seed: u64,
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (number, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. 10s, 500ms, 1m"))?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "s" => value,
        "m" | "min" => value * 60.0,
        _ => {
            return Err(format!(
                "invalid duration {s:?}: the unit must be ms, s or m"
            ))
        }
    };
    if !(0.0..=86_400.0).contains(&seconds) {
        return Err(format!("duration {s:?} out of range"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

impl BenchConfig {
    /// Parse and validate. `Err` is a message for the user (clap's own errors, --help and
    /// --version exit directly, as clap does).
    pub fn from_args<I, T>(args: I) -> Result<BenchConfig, String>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let matches = Cli::command().get_matches_from(args);
        let cli = Cli::from_arg_matches(&matches).map_err(|e| e.to_string())?;
        // A --weight belongs to the closest --sql before it on the command line.
        let sql_at: Vec<usize> = matches
            .indices_of("sql")
            .map(|i| i.collect())
            .unwrap_or_default();
        let weight_at: Vec<usize> = matches
            .indices_of("weight")
            .map(|i| i.collect())
            .unwrap_or_default();
        let mut weights = vec![None; cli.sql.len()];
        for (w, at) in cli.weight.iter().zip(weight_at) {
            let owner = sql_at
                .iter()
                .rposition(|&s| s < at)
                .ok_or("--weight must follow the --sql it applies to")?;
            if weights[owner].replace(*w).is_some() {
                return Err(format!(
                    "--sql {:?} has two --weight values",
                    cli.sql[owner]
                ));
            }
        }
        Self::from_cli(cli, weights)
    }

    fn from_cli(cli: Cli, weights: Vec<Option<u32>>) -> Result<BenchConfig, String> {
        let mut spec = WorkloadSpec::default();
        for (sql, weight) in cli.sql.iter().zip(weights) {
            spec.sql.push((sql.clone(), weight.unwrap_or(1)));
        }
        for p in &cli.param {
            spec.params.push(WorkloadSpec::parse_param(p)?);
        }
        for f in &cli.file {
            let (path, weight) = match f.rsplit_once('@') {
                Some((path, w)) if w.chars().all(|c| c.is_ascii_digit()) && !w.is_empty() => (
                    path,
                    w.parse::<u32>()
                        .map_err(|_| format!("--file {f:?}: bad weight"))?,
                ),
                _ => (f.as_str(), 1),
            };
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read --file {path}: {e}"))?;
            spec.files.push((text, path.to_string(), weight));
        }
        if spec.sql.is_empty() && spec.files.is_empty() {
            return Err("nothing to run: give --sql 'SELECT 1' or --file SCRIPT".into());
        }
        let workload = spec.build(cli.mode)?;

        if cli.pipeline == 0 || cli.pipeline > MAX_PIPELINE {
            return Err(format!("--pipeline must be between 1 and {MAX_PIPELINE}"));
        }
        if cli.threads == 0 || cli.threads > MAX_THREADS {
            return Err(format!("--threads must be between 1 and {MAX_THREADS}"));
        }
        if cli.concurrency.is_empty()
            || cli
                .concurrency
                .iter()
                .any(|&c| c == 0 || c > MAX_CONNECTIONS)
        {
            return Err(format!(
                "--concurrency values must be between 1 and {MAX_CONNECTIONS}"
            ));
        }
        if cli.duration.is_zero() {
            return Err("--duration must be positive".into());
        }
        let client_cores = match &cli.client_cores {
            None => None,
            Some(list) => {
                let cores = parse_cpu_list(list)?;
                let allowed = allowed_cpus()?;
                if let Some(bad) = cores.iter().find(|c| !allowed.contains(c)) {
                    return Err(format!("--client-cores lists CPU {bad}, but this process may only run on {allowed:?}"));
                }
                Some(cores)
            }
        };
        if let Some(limit) = memlock_limit_bytes() {
            let needed = IO_MEMORY_BYTES * cli.threads;
            if needed > limit {
                return Err(format!(
                    "{} client threads need {needed} bytes of locked memory but RLIMIT_MEMLOCK is {limit}: raise it (ulimit -l) or use fewer --threads",
                    cli.threads
                ));
            }
        }
        let addr: SocketAddr = (cli.host.as_str(), cli.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve --host {}: {e}", cli.host))?
            .next()
            .ok_or_else(|| format!("--host {} resolves to no address", cli.host))?;
        let seed = cli.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
        Ok(BenchConfig {
            connect: ConnectParams {
                addr,
                database: cli.database.clone().unwrap_or_else(|| cli.user.clone()),
                user: cli.user,
                password: cli.password,
            },
            workload: Arc::new(workload),
            pipeline: cli.pipeline,
            threads: cli.threads,
            client_cores,
            duration: cli.duration,
            warmup: cli.warmup,
            concurrency: cli.concurrency,
            json: cli.json,
            driver: cli.driver,
            seed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> Result<BenchConfig, String> {
        BenchConfig::from_args(std::iter::once("ringwire-bench").chain(args.iter().copied()))
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("3h").is_err());
        assert!(parse_duration("x").is_err());
    }

    #[test]
    fn weights_follow_their_sql() {
        let c = config(&["--sql", "SELECT 1", "--sql", "SELECT 2", "--weight", "3"]).unwrap();
        let weights: Vec<u32> = c.workload.scripts.iter().map(|s| s.weight).collect();
        assert_eq!(weights, vec![1, 3]);
        assert!(config(&["--weight", "3", "--sql", "SELECT 1"])
            .unwrap_err()
            .contains("--weight"));
    }

    #[test]
    fn bad_settings_are_refused_before_anything_starts() {
        assert!(config(&[]).unwrap_err().contains("nothing to run"));
        assert!(config(&["--sql", "SELECT 1", "--pipeline", "0"]).is_err());
        assert!(config(&["--sql", "SELECT 1", "--threads", "0"]).is_err());
        assert!(config(&["--sql", "SELECT 1", "--concurrency", "0"]).is_err());
        assert!(config(&["--sql", "SELECT 1", "--client-cores", "100000"])
            .unwrap_err()
            .contains("CPU 100000"));
        assert!(config(&["--sql", "SELECT :x"]).unwrap_err().contains(":x"));
        let c = config(&["--sql", "SELECT 1", "--concurrency", "1,4", "-U", "bob"]).unwrap();
        assert_eq!(c.concurrency, vec![1, 4]);
        assert_eq!(c.connect.database, "bob");
    }
}
