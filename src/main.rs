//! `ringwire`: serve the PostgreSQL wire protocol on every configured core.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use ringwire::engine::Frontend;
use shards::config::{
    parse_cpu_list, AuthMethod, Placement, ServerConfig, DEFAULT_IO_MEMORY_BYTES,
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

    /// Largest message a client may send, in bytes; a larger one ends its connection with 08P01.
    #[arg(long, default_value_t = DEFAULT_MAX_MESSAGE_BYTES)]
    max_message_bytes: usize,

    /// How clients authenticate: `trust` lets everyone in (the loopback default); `password`
    /// asks for a cleartext password checked against --user / --users-file.
    #[arg(long, value_enum, default_value_t = AuthArg::Trust)]
    auth: AuthArg,

    /// A user for --auth password, as NAME:PASSWORD. Repeatable.
    #[arg(long = "user", value_name = "NAME:PASSWORD")]
    users: Vec<String>,

    /// A file of users for --auth password: one NAME:PASSWORD per line; blank lines and lines
    /// starting with # are ignored.
    #[arg(long)]
    users_file: Option<std::path::PathBuf>,

    /// Registered io_uring memory per shard, in bytes. It is locked memory: the total over all
    /// shards must fit RLIMIT_MEMLOCK (checked at startup).
    #[arg(long, default_value_t = DEFAULT_IO_MEMORY_BYTES)]
    io_memory_bytes: usize,

    /// Seconds a client has from connecting to finishing authentication.
    #[arg(long, default_value_t = 60)]
    startup_timeout_secs: u64,

    /// Benchmark only: answer every simple Query with the prebuilt reply of a one-row
    /// `SELECT * FROM t`, bypassing SQL. This is the "wire floor" the full path is compared to.
    #[arg(long, hide = true)]
    wire_floor: bool,

    /// Log level: error, warn, info, debug or trace.
    #[arg(long, default_value = "info")]
    log_level: log::LevelFilter,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum AuthArg {
    Trust,
    Password,
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
    let mut users = HashMap::new();
    for u in &cli.users {
        let (name, password) = parse_user(u, "--user")?;
        users.insert(name, password);
    }
    if let Some(path) = &cli.users_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read --users-file {}: {e}", path.display()))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, password) = parse_user(line, &format!("{}:{}", path.display(), i + 1))?;
            users.insert(name, password);
        }
    }
    Ok(ServerConfig {
        listen: cli.listen,
        placement,
        max_connections: cli.max_connections,
        max_message_bytes: cli.max_message_bytes,
        auth: match cli.auth {
            AuthArg::Trust => AuthMethod::Trust,
            AuthArg::Password => AuthMethod::Password,
        },
        users,
        io_memory_bytes: cli.io_memory_bytes,
        startup_timeout: Duration::from_secs(cli.startup_timeout_secs),
        wire_floor: cli.wire_floor,
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    env_logger::Builder::new()
        .filter_level(cli.log_level)
        .format_timestamp_millis()
        .init();
    let config = match build_config(cli).and_then(|c| c.preflight().map(|()| c)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ringwire: {e}");
            return ExitCode::from(2);
        }
    };
    let listeners = match shards::runtime::bind(&config) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ringwire: {e}");
            return ExitCode::from(2);
        }
    };
    // Tests and scripts read this line to find the port when --listen used port 0.
    println!(
        "ringwire listening on {} with {} shard(s)",
        listeners.local_addr,
        config.placement.shard_count()
    );
    log::info!(
        "placement {:?}, auth {:?}, max {} connections",
        config.placement,
        config.auth,
        config.max_connections
    );
    let shared = ringwire::dispatch::Shared::new(config.placement.shard_count());
    match shards::runtime::run(config, listeners, move |mesh| {
        Frontend::new(mesh, shared.clone())
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringwire: {e}");
            ExitCode::FAILURE
        }
    }
}
