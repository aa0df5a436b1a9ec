//! `ringwire`: serve the PostgreSQL wire protocol on every configured core.

use std::io::BufRead;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use ringwire::engine::Frontend;
use ringwire::upstream::{
    PoolTimers, Upstream, UpstreamConfig, UpstreamLogin, Upstreams, WalGeometry,
};
use shards::auth::{AuthSettings, AuthStore, Method, Secret};
use shards::config::{
    parse_cpu_list, IoMode, Placement, ServerConfig, DEFAULT_IO_MEMORY_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES,
};

#[derive(Parser, Debug)]
#[command(
    name = "ringwire",
    version,
    about = "A PostgreSQL wire-protocol frontend, thread-per-core on io_uring."
)]
struct Cli {
    /// Address to listen on for PostgreSQL clients. Port 0 picks a free port (printed at startup).
    #[arg(long, default_value = "127.0.0.1:6875")]
    listen: SocketAddr,

    /// CPUs to run on, one pinned shard per CPU: a list of numbers and ranges such as `0-7,12`.
    /// Default: one unpinned shard per CPU this process may use.
    #[arg(long, conflicts_with = "shards")]
    cores: Option<String>,

    /// Number of shards, not pinned to CPUs (the alternative to --cores).
    #[arg(long)]
    shards: Option<usize>,

    /// Connections open at once, across all shards; one more is refused with FATAL 53300.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,

    /// Connections open at once on one shard; one more is refused with FATAL 53300. Default:
    /// only the global --max-connections.
    #[arg(long, value_name = "N")]
    max_connections_per_shard: Option<usize>,

    /// TLS certificate chain (PEM, leaf first). With --tls-key, SSLRequest is answered `S`
    /// and direct TLS (ALPN `postgresql`) is accepted.
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<std::path::PathBuf>,

    /// TLS private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<std::path::PathBuf>,

    /// CA certificates (PEM) that client certificates must chain to, like PostgreSQL's
    /// ssl_ca_file: clients are asked for a certificate, and `cert` / `clientcert=verify-ca|
    /// verify-full` rules in --hba-file require one. The certificate, key and CA are re-read on
    /// SIGHUP.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<std::path::PathBuf>,

    /// `allow`: TLS for clients that ask, plaintext for the others; `require`: plaintext TCP
    /// startups are refused with 28000 (Unix-socket clients are local and exempt);
    /// `disable`: never TLS.
    #[arg(long, value_name = "MODE", default_value = "allow")]
    tls_mode: shards::tls::TlsMode,

    /// Largest message a client may send, in bytes; a larger one ends its connection with 08P01.
    #[arg(long, default_value_t = DEFAULT_MAX_MESSAGE_BYTES)]
    max_message_bytes: usize,

    /// How every client authenticates (PostgreSQL's methods): `trust` lets everyone in (the
    /// loopback default); `password` asks for the password in cleartext; `md5` runs md5 for
    /// users with an md5 secret and SCRAM for the others; `scram-sha-256` runs SCRAM. The same
    /// as a --hba-file of `local all all METHOD` and `host all all all METHOD`.
    #[arg(long, value_enum, default_value_t = AuthArg::Trust)]
    auth: AuthArg,

    /// Host-based rules instead of --auth, in pg_hba.conf syntax: `host|hostssl|hostnossl|local
    /// DATABASE USER [ADDRESS] METHOD` per line, first match wins, no match is refused.
    /// Re-read on SIGHUP.
    #[arg(long, value_name = "FILE", conflicts_with = "auth")]
    hba_file: Option<std::path::PathBuf>,

    /// A user, as NAME:PASSWORD (a SCRAM-SHA-256 verifier is derived at startup; the password
    /// is not kept). Repeatable; takes precedence over --users-file.
    #[arg(long = "user", value_name = "NAME:PASSWORD")]
    users: Vec<String>,

    /// A file of users: one NAME:SECRET per line, SECRET a PostgreSQL SCRAM-SHA-256 verifier or
    /// md5 hash (`ringwire passwd NAME` prints such a line; plaintext is refused). Blank lines
    /// and lines starting with # are ignored. Re-read on SIGHUP.
    #[arg(long, value_name = "FILE")]
    users_file: Option<std::path::PathBuf>,

    /// Registered io_uring memory per shard, in bytes. It is locked memory: the total over all
    /// shards must fit RLIMIT_MEMLOCK (checked at startup).
    #[arg(long, default_value_t = DEFAULT_IO_MEMORY_BYTES)]
    io_memory_bytes: usize,

    /// Socket path: `uring` (each shard's own io_uring: multishot accept and receive, sends
    /// batched per turn), `glommio` (glommio's sockets), or `auto`: uring where the kernel
    /// supports it (Linux 6.0+), else glommio with one log line saying why.
    #[arg(long, value_enum, default_value_t = IoArg::Auto, env = "RINGWIRE_IO")]
    io: IoArg,

    /// Also accept connections on the Unix-domain socket DIR/.s.PGSQL.<port>, as PostgreSQL
    /// does (`psql -h DIR -p PORT`).
    #[arg(long, value_name = "DIR")]
    unix_socket_dir: Option<std::path::PathBuf>,

    /// Seconds a client has from connecting to finishing authentication.
    #[arg(long, default_value_t = 60)]
    startup_timeout_secs: u64,

    /// Benchmark only: answer every simple Query with the prebuilt reply of a one-row
    /// `SELECT * FROM t`, bypassing SQL. This is the "wire floor" the full path is compared to.
    #[arg(long, hide = true)]
    wire_floor: bool,

    /// Upstream mode: relay every client to this PostgreSQL server instead of answering SQL
    /// here, as `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE` (or `?host=/socket/dir`).
    /// Each shard keeps its own pool of connections to it (transaction pooling).
    #[arg(long, value_name = "URL", env = "RINGWIRE_UPSTREAM")]
    upstream: Option<String>,

    /// Upstream mode: a hot standby streaming from the `--upstream` primary (repeatable; the
    /// environment variable takes a comma-separated list). Read-only autocommit statements
    /// and read-only transactions may go to it when it has provably replayed every commit
    /// acknowledged before they started (strict serializable); see docs/ARCHITECTURE.md,
    /// "Upstream mode".
    #[arg(
        long,
        value_name = "URL",
        env = "RINGWIRE_REPLICAS",
        value_delimiter = ','
    )]
    replica: Vec<String>,

    /// Upstream connections each shard may open per (user, database) and per host
    /// (upstream mode; PgBouncer's `pool_size`, per shard).
    #[arg(long, default_value_t = 16)]
    upstream_pool_size: usize,

    /// Upstream mode: most connections to each upstream host (the primary, and each
    /// replica) over every user, database and shard, to keep ringwire under the upstream's
    /// `max_connections` (PgBouncer's `max_db_connections`, over all databases). Each shard owns
    /// an equal share. A key that needs a connection when the share is used closes another
    /// key's longest-idle one, or waits. 0: no cap but `--upstream-pool-size` per key.
    #[arg(long, value_name = "N", default_value_t = 0)]
    upstream_max_connections: usize,

    /// Upstream mode: who clients' statements run as. `client`: each client as the user and
    /// database it logged in with (credentials from its own authentication: SCRAM
    /// pass-through, the stored md5 hash, or the cleartext password of `--auth password`).
    /// `url`: everyone as the `--upstream` URL's user on its database.
    #[arg(long, value_enum, default_value_t = LoginArg::Client)]
    upstream_login: LoginArg,

    /// Upstream mode: a pooled connection idle at least this long answers an empty Query
    /// before a client gets it; one that fails (or does not answer within 2 s) is replaced
    /// unseen (PgBouncer's `server_check_delay`). 0: check at every hand-out.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    upstream_check_delay_secs: u64,

    /// Upstream mode: close pooled connections idle this long, so keys (user, database)
    /// nobody uses any more hold no connections (PgBouncer's `server_idle_timeout`). 0: never.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    upstream_idle_timeout_secs: u64,

    /// Upstream mode: a statement that has waited this long for an upstream connection (all
    /// of its user and database's `--upstream-pool-size` busy, or the host at
    /// `--upstream-max-connections`) fails with 53300 and never runs; the client stays
    /// connected (PgBouncer's `query_wait_timeout`, which disconnects). A login waits as long,
    /// then gets the same as a FATAL. 0: wait as long as it takes.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    upstream_wait_timeout_secs: u64,

    /// Upstream mode: a client that holds an upstream connection with work open (a
    /// transaction, extended-protocol messages no Sync closed yet, a COPY) and sends nothing
    /// for this long is disconnected with FATAL 25P03, as PostgreSQL's
    /// `idle_in_transaction_session_timeout` does, and its work is rolled back, so the
    /// connection serves others again (PgBouncer's `idle_transaction_timeout`). With or
    /// without it, an `idle_in_transaction_session_timeout` the client or the server set ends
    /// the session as in PostgreSQL. 0: none.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    upstream_idle_transaction_timeout_secs: u64,

    /// Upstream mode: a query that returns the stored password (`rolpassword`: a SCRAM-SHA-256
    /// verifier or md5 hash) of the user in `$1`, run on the primary as the `--upstream` URL's
    /// user for a client whose user is not in `--users-file` (PgBouncer's `auth_query`; the
    /// last column of the first row, so PgBouncer's two-column queries work too), e.g.
    /// "SELECT rolpassword FROM pg_authid WHERE rolname = $1 AND rolcanlogin". No row or NULL:
    /// the login fails as for an unknown user.
    #[arg(long, value_name = "SQL")]
    upstream_auth_query: Option<String>,

    /// Upstream mode: pipeline independent autocommit reads (that lock no rows) of different
    /// clients (same settings) onto one upstream connection, each with its own Sync; see
    /// docs/ARCHITECTURE.md, "Pipelining several clients onto one connection", including the
    /// hazards that keep it off by default. `off`: every batch holds a connection of its own.
    #[arg(long, value_enum, default_value_t = OnOff::Off)]
    upstream_pipeline: OnOff,

    /// Upstream mode: most clients' statements in flight at once on one pipelined upstream
    /// connection.
    #[arg(long, value_name = "N", default_value_t = 16)]
    upstream_pipeline_depth: usize,

    /// Upstream mode, `--upstream-pipeline on`: a pipelined connection whose oldest statement
    /// has run this many milliseconds (or 16 times the shard's typical time, if more) takes
    /// no more clients' statements behind it while the pool has another connection, and
    /// statements of that shape (its words, literals left out) are kept apart so from their
    /// start, until one runs quicker (docs/ARCHITECTURE.md, pipelining hazard 1).
    #[arg(long, value_name = "MS", default_value_t = ringwire::upstream::PIPELINE_SLOW.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    upstream_pipeline_slow_ms: u64,

    /// Upstream mode: what a function, procedure or DO block may SET at session level (or
    /// `set_config(…, false)`) is unseen by the relay, so by default a connection whose
    /// client called one (by name, in its statement) goes back to the pool with its settings
    /// unknown, and its next user, the same client too, gets `RESET ALL` and its own settings
    /// replayed first: the setting lasts until the connection goes back (the end of the
    /// batch that ends its transaction) and does not reach another client, but for what the
    /// scan cannot see (triggers, views, overloads of built-in names, …: docs/ARCHITECTURE.md,
    /// "Code stored upstream"). `on` trusts that your functions leave no session setting
    /// behind and saves that replay (PgBouncer's assumption): one that does hands its
    /// setting to the connection's next client. (Such statements stay off
    /// `--upstream-pipeline` connections either way.)
    #[arg(long, value_enum, default_value_t = OnOff::Off)]
    upstream_trust_functions: OnOff,

    /// io_uring path: microseconds a quiet shard polls its ring and doorbell before it
    /// sleeps, while the machine has CPU to spare (a probe of 100 ms in every second found
    /// 0.3 CPU idle or more, and other runnable threads do not outnumber the CPUs); saves a
    /// thread wake-up per query at low concurrency. 0: sleep at once. At most 10000: a shard
    /// fires no timers while it polls.
    #[arg(long, value_name = "US", default_value_t = shards::config::DEFAULT_IDLE_SPIN.as_micros() as u64,
          value_parser = clap::value_parser!(u64).range(0..=10_000))]
    idle_spin_us: u64,

    /// io_uring path: a shard that serves more client connections than another hands each new
    /// one to the least loaded shard (one cross-core message per connection moved), so few
    /// connections spread evenly; `off`: TCP connections stay where the kernel's SO_REUSEPORT
    /// hash put them (4 clients land 3/1 or 4/0 on two shards 5 times in 8). Unix-domain
    /// connections are dealt either way.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    balance_connections: OnOff,

    /// Run the shard threads as SCHED_BATCH: a shard woken by a client's or an upstream's
    /// bytes does not preempt the thread that is running on that core, but waits for it to
    /// sleep or use up its slice, so several messages are ready when the shard runs and one
    /// turn serves them all. For hosts where many clients and an upstream PostgreSQL share the
    /// shards' cores (keeps `--upstream-pipeline on` batched); it costs latency wherever other
    /// CPU-bound work runs on those cores, since every wake-up then waits out a slice.
    #[arg(long, value_enum, default_value_t = OnOff::Off)]
    sched_batch: OnOff,

    /// Log level: error, warn, info, debug or trace. `info` logs one line per connection
    /// opened or closed and per error sent (with its SQLSTATE), never per successful
    /// statement. RUST_LOG, when set, overrides it (env_logger syntax, e.g. `ringwire=debug`).
    #[arg(long, default_value = "info")]
    log_level: log::LevelFilter,

    /// Serve `GET /metrics` (Prometheus text format) on this address, from shard 0.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,

    /// Per-statement recording (latency histograms, bytes, first byte, stalls): `off` only to
    /// measure what it costs. Connection and error counts are kept either way.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    metrics: OnOff,

    /// Every shard but the compute's keeps a read replica of every table, fed by the
    /// compute's commits, and serves reads from it when it provably holds every acknowledged
    /// write (else the read goes to the compute). Costs a copy of every table per shard.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    read_replicas: OnOff,

    /// Testing only: hold every shipment to the read replicas this long, so tests can make
    /// replicas lag and check that a stale replica is never read.
    #[arg(long, hide = true, value_name = "US", default_value_t = 0)]
    replica_ship_delay_us: u64,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Print a --users-file line for USER: reads the password from standard input (without
    /// echo, and twice, on a terminal) and prints `USER:SCRAM-SHA-256$...`.
    Passwd {
        user: String,
        /// Print PostgreSQL's md5 hash instead, for clients that speak only md5.
        #[arg(long)]
        md5: bool,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LoginArg {
    Client,
    Url,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum OnOff {
    On,
    Off,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum IoArg {
    Auto,
    Uring,
    Glommio,
}

/// The socket path to run: `--io auto` falls back to glommio where io_uring lacks what the
/// ring path needs; `--io uring` insists.
fn choose_io(arg: IoArg) -> Result<IoMode, String> {
    match arg {
        IoArg::Glommio => Ok(IoMode::Glommio),
        IoArg::Uring => shards::uring::probe()
            .map(|()| IoMode::Uring)
            .map_err(|why| format!("--io uring is not possible here: {why}")),
        IoArg::Auto => match shards::uring::probe() {
            Ok(()) => Ok(IoMode::Uring),
            Err(why) => {
                log::warn!("io_uring socket path unavailable ({why}); using glommio's sockets");
                Ok(IoMode::Glommio)
            }
        },
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum AuthArg {
    Trust,
    Password,
    Md5,
    #[value(name = "scram-sha-256")]
    ScramSha256,
}

fn parse_user(line: &str, origin: &str) -> Result<(String, String), String> {
    match line.split_once(':') {
        Some((name, password)) if !name.is_empty() => Ok((name.to_string(), password.to_string())),
        _ => Err(format!("{origin}: expected NAME:PASSWORD, got {line:?}")),
    }
}

fn build_config(cli: Cli) -> Result<ServerConfig, String> {
    let placement = match (&cli.cores, cli.shards) {
        (Some(cores), _) => Placement::Pinned(parse_cpu_list(cores)?),
        (None, Some(n)) => Placement::Unpinned(n),
        (None, None) => Placement::Unpinned(shards::config::online_cpus()?.len().max(1)),
    };
    let mut cli_users = Vec::new();
    for u in &cli.users {
        let (name, password) = parse_user(u, "--user")?;
        cli_users.push((name, Secret::scram_from_password(&password)));
    }
    let auth = AuthStore::load(AuthSettings {
        method: match cli.auth {
            AuthArg::Trust => Method::Trust,
            AuthArg::Password => Method::Password,
            AuthArg::Md5 => Method::Md5,
            AuthArg::ScramSha256 => Method::ScramSha256,
        },
        hba_file: cli.hba_file,
        users_file: cli.users_file,
        cli_users,
        // (Without --upstream, main refuses --upstream-auth-query before this.)
        lookup: cli.upstream_auth_query.is_some(),
    })?;
    Ok(ServerConfig {
        listen: cli.listen,
        placement,
        max_connections: cli.max_connections,
        max_message_bytes: cli.max_message_bytes,
        auth: Arc::new(auth),
        io_memory_bytes: cli.io_memory_bytes,
        startup_timeout: Duration::from_secs(cli.startup_timeout_secs),
        wire_floor: cli.wire_floor,
        idle_spin: Duration::from_micros(cli.idle_spin_us),
        balance_connections: cli.balance_connections == OnOff::On,
        sched_batch: cli.sched_batch == OnOff::On,
        io: choose_io(cli.io)?,
        unix_socket_dir: cli.unix_socket_dir,
        tls: shards::tls::Tls::load(
            cli.tls_mode,
            cli.tls_cert.as_deref(),
            cli.tls_key.as_deref(),
            cli.tls_ca.as_deref(),
        )?,
        max_connections_per_shard: cli.max_connections_per_shard,
        metrics_enabled: cli.metrics == OnOff::On,
    })
}

/// `--upstream` and `--replica`: parse the URLs and log in once, so a wrong address or
/// password is a startup error, and learn the primary's parameters (shown to clients at their
/// startup) and its WAL insert position (the oracle's first applied timestamp). A replica that
/// does not answer yet is only a warning (it joins the rotation when it does); one that
/// answers and is not a standby is an error.
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn upstream_config(
    url: &str,
    replicas: &[String],
    pool_size: usize,
    pipeline_depth: usize,
    login: UpstreamLogin,
    timers: PoolTimers,
    max_connections: usize,
    auth_query: Option<String>,
) -> Result<(Upstreams, Arc<Vec<(String, String)>>), String> {
    if pool_size == 0 {
        return Err("--upstream-pool-size must be at least 1".into());
    }
    if pipeline_depth == 0 {
        return Err("--upstream-pipeline-depth must be at least 1".into());
    }
    let mut config =
        UpstreamConfig::parse_url(url, pool_size).map_err(|e| format!("--upstream {e}"))?;
    config.timers = timers;
    let (handshake, position) = ringwire::upstream::client::probe(
        &config,
        (!replicas.is_empty()).then_some(ringwire::upstream::WAL_POSITION_QUERY),
        auth_query.as_deref(),
    )?;
    let (applied, wal) = match position {
        None => (0, WalGeometry::default()),
        Some(text) => {
            let (insert, wal) = WalGeometry::parse_insert_position(&text).ok_or_else(|| {
                format!(
                    "--upstream {}: cannot read its WAL position from {text:?}",
                    config.hosts_text()
                )
            })?;
            (wal.end_of_wal(insert), wal)
        }
    };
    let mut replica_configs = Vec::new();
    for url in replicas {
        let mut replica =
            UpstreamConfig::parse_url(url, pool_size).map_err(|e| format!("--replica {e}"))?;
        replica.timers = timers;
        if !replica.more_hosts.is_empty() || replica.read_write {
            return Err(format!(
                "--replica {url:?}: a replica URL names one host (give each replica its own \
                 --replica) and no target_session_attrs"
            ));
        }
        match ringwire::upstream::client::probe(&replica, Some("SELECT pg_is_in_recovery()"), None)
        {
            Ok((_, Some(r))) if r == "t" => {}
            Ok(_) => {
                return Err(format!(
                    "--replica {}: the server is not in recovery (not a standby)",
                    replica.address
                ))
            }
            Err(e) => log::warn!(
                "--replica {}: {e}; it joins when it answers",
                replica.address
            ),
        }
        replica_configs.push(Arc::new(replica));
    }
    let upstreams = Upstreams {
        primary: Arc::new(config),
        replicas: replica_configs,
        applied: Arc::new(std::sync::atomic::AtomicU64::new(applied)),
        wal,
        pipeline_depth,
        pipeline_slow: ringwire::upstream::PIPELINE_SLOW,
        trust_functions: false,
        login,
        max_connections,
        auth_query: auth_query.map(Arc::from),
    };
    Ok((upstreams, Arc::new(handshake.parameters)))
}

/// `ringwire passwd USER`: one users-file line on stdout.
fn passwd(user: &str, md5: bool) -> Result<(), String> {
    let password = read_password(&format!("Password for {user}: "))?;
    if password.is_empty() {
        // PostgreSQL refuses empty passwords too ("empty string is not a valid password").
        return Err("an empty password is not allowed".into());
    }
    if stdin_is_tty() && read_password("Again: ")? != password {
        return Err("the passwords do not match".into());
    }
    let secret = if md5 {
        Secret::md5_from_password(user, &password)
    } else {
        Secret::scram_from_password(&password)
    };
    println!("{user}:{secret}");
    Ok(())
}

fn stdin_is_tty() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(libc::STDIN_FILENO) == 1 }
}

/// One line from stdin, without its line ending; on a terminal, prompted and not echoed.
fn read_password(prompt: &str) -> Result<String, String> {
    let mut line = String::new();
    let read = |line: &mut String| {
        std::io::stdin()
            .lock()
            .read_line(line)
            .map_err(|e| format!("cannot read the password from stdin: {e}"))
    };
    if stdin_is_tty() {
        eprint!("{prompt}");
        // SAFETY: termios is plain data; tcgetattr fills it and tcsetattr reads it, both on
        // stdin, which is a terminal here.
        let saved = unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(libc::STDIN_FILENO, &mut t) != 0 {
                return Err("cannot read the terminal's settings".into());
            }
            let saved = t;
            t.c_lflag &= !libc::ECHO;
            libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &t);
            saved
        };
        let result = read(&mut line);
        // SAFETY: as above, restoring the settings read before.
        unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &saved) };
        eprintln!();
        result?;
    } else {
        read(&mut line)?;
    }
    let password = line.strip_suffix('\n').unwrap_or(&line);
    Ok(password.strip_suffix('\r').unwrap_or(password).to_string())
}

/// Stack size of every thread this process starts (shards included: glommio spawns them with
/// std's default, which `RUST_MIN_STACK` sets). Statements are planned and evaluated by
/// recursion over their expression trees, and a client decides how deep those are (`1+1+…`
/// with thousands of terms, JSON nested thousands deep): on std's 2 MiB a few thousand levels
/// overflowed the stack and aborted the process, dropping every connection and the embedded
/// compute's data. The space is reserved, not committed: only pages a deep statement touches
/// cost memory. The depth limits (`engine::MAX_EXPRESSION_OPERATORS`, json's `MAX_DEPTH`) keep
/// recursion well inside it.
const THREAD_STACK_BYTES: usize = 256 << 20;

fn main() -> ExitCode {
    // Before any thread starts: std reads it once, at the first spawn. (An operator's own
    // setting wins.)
    if std::env::var_os("RUST_MIN_STACK").is_none() {
        std::env::set_var("RUST_MIN_STACK", THREAD_STACK_BYTES.to_string());
    }
    let mut cli = Cli::parse();
    if let Some(Command::Passwd { user, md5 }) = cli.command.take() {
        return match passwd(&user, md5) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ringwire passwd: {e}");
                ExitCode::from(2)
            }
        };
    }
    let mut logger = env_logger::Builder::new();
    logger.filter_level(cli.log_level).format_timestamp_millis();
    if let Ok(spec) = std::env::var("RUST_LOG") {
        logger.parse_filters(&spec);
    }
    logger.init();
    let metrics_listen = cli.metrics_listen;
    let read_replicas = cli.read_replicas == OnOff::On;
    let replica_ship_delay = std::time::Duration::from_micros(cli.replica_ship_delay_us);
    let upstream = match cli.upstream.take() {
        None if !cli.replica.is_empty() => {
            eprintln!("ringwire: --replica needs --upstream (the primary)");
            return ExitCode::from(2);
        }
        None if cli.upstream_auth_query.is_some() => {
            eprintln!("ringwire: --upstream-auth-query needs --upstream");
            return ExitCode::from(2);
        }
        None => None,
        Some(url) => match upstream_config(
            &url,
            &cli.replica,
            cli.upstream_pool_size,
            match cli.upstream_pipeline {
                OnOff::On => cli.upstream_pipeline_depth,
                OnOff::Off => 1,
            },
            match cli.upstream_login {
                LoginArg::Client => UpstreamLogin::Client,
                LoginArg::Url => UpstreamLogin::Url,
            },
            PoolTimers {
                check_delay: std::time::Duration::from_secs(cli.upstream_check_delay_secs),
                idle_timeout: std::time::Duration::from_secs(cli.upstream_idle_timeout_secs),
                wait_timeout: std::time::Duration::from_secs(cli.upstream_wait_timeout_secs),
                idle_transaction_timeout: std::time::Duration::from_secs(
                    cli.upstream_idle_transaction_timeout_secs,
                ),
                ..PoolTimers::default()
            },
            cli.upstream_max_connections,
            cli.upstream_auth_query.clone(),
        ) {
            Ok((mut u, parameters)) => {
                u.pipeline_slow = std::time::Duration::from_millis(cli.upstream_pipeline_slow_ms);
                u.trust_functions = cli.upstream_trust_functions == OnOff::On;
                Some((u, parameters))
            }
            Err(e) => {
                eprintln!("ringwire: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let config = match build_config(cli).and_then(|c| c.preflight().map(|()| c)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ringwire: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some((u, _)) = &upstream {
        let shards = config.placement.shard_count();
        if u.max_connections > 0 && u.max_connections < shards {
            eprintln!(
                "ringwire: --upstream-max-connections {} is less than the {shards} shards: \
                 each shard needs a share of at least one connection",
                u.max_connections
            );
            return ExitCode::from(2);
        }
    }
    // Before the listening line: a SIGHUP from then on reloads instead of killing us.
    if let Err(e) = shards::auth::reload_on_sighup(config.auth.clone(), config.tls.clone()) {
        eprintln!("ringwire: {e}");
        return ExitCode::from(2);
    }
    let listeners = match shards::runtime::bind(&config) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ringwire: {e}");
            return ExitCode::from(2);
        }
    };
    // Bound here so "address in use" is a startup error; served by shard 0. Bound before
    // the listening line, so a client that saw that line can scrape.
    let metrics_listener = match metrics_listen.map(std::net::TcpListener::bind).transpose() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ringwire: cannot listen on --metrics-listen: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(l) = &metrics_listener {
        if let Ok(addr) = l.local_addr() {
            log::info!("metrics on http://{addr}/metrics");
        }
    }
    // Tests and scripts read this line to find the port when --listen used port 0.
    println!(
        "ringwire listening on {} with {} shard(s)",
        listeners.local_addr,
        config.placement.shard_count()
    );
    log::info!(
        "placement {:?}, auth {:?}, max {} connections, io {:?}",
        config.placement,
        config.auth,
        config.max_connections,
        config.io
    );
    if let Some(path) = &listeners.unix_path {
        log::info!("also listening on {}", path.display());
    }
    log::info!(
        "TLS {} (--tls-mode {:?})",
        if config.tls.enabled() { "on" } else { "off" },
        config.tls.mode
    );
    let metrics_listener = std::sync::Mutex::new(metrics_listener);
    let ran = match upstream {
        Some((upstream, parameters)) => {
            log::info!(
                "upstream mode: relaying to {}, replicas {:?}",
                upstream.primary.hosts_text(),
                upstream
                    .replicas
                    .iter()
                    .map(|r| r.address.to_string())
                    .collect::<Vec<_>>()
            );
            shards::runtime::run(config, listeners, move |mesh| {
                let shard = mesh.shard_id;
                let engine = Upstream::new(&upstream, parameters.clone(), mesh);
                if shard == 0 {
                    let listener = metrics_listener.lock().map(|mut l| l.take());
                    if let Ok(Some(listener)) = listener {
                        ringwire::metrics_http::spawn_with(listener, engine.scrape());
                    }
                }
                engine
            })
        }
        None => {
            let shared = ringwire::dispatch::Shared::with_read_replicas(
                config.placement.shard_count(),
                read_replicas,
                replica_ship_delay,
            );
            shards::runtime::run(config, listeners, move |mesh| {
                let shard = mesh.shard_id;
                let frontend = Frontend::new(mesh, shared.clone());
                if shard == 0 {
                    let listener = metrics_listener.lock().map(|mut l| l.take());
                    if let Ok(Some(listener)) = listener {
                        ringwire::metrics_http::spawn(listener, frontend.dispatcher());
                    }
                }
                frontend
            })
        }
    };
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringwire: {e}");
            ExitCode::FAILURE
        }
    }
}
