//! A throwaway PostgreSQL 15 server for differential tests.
//!
//! Needs the PostgreSQL 15 server binaries: `/usr/local/bin/{initdb,postgres,pg_ctl}` or
//! `/usr/lib/postgresql/15/bin/` (CI's `.ci/run` installs the `postgresql` package when
//! missing) and the `postgres` OS user. Tests run as root and PostgreSQL refuses to run as
//! root, so every server command goes through `runuser -u postgres`.

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::succeed;

/// How long the server may take to accept connections after it is started.
const STARTUP_WAIT_MAX: Duration = Duration::from_secs(60);

/// A running PostgreSQL; stopped and its data directory removed on drop.
pub struct Postgres {
    pub port: u16,
    dir: PathBuf,
    bin: PathBuf,
    child: Option<Child>,
}

/// A fresh temp dir owned by the `postgres` user, and the binaries' directory.
fn new_dir() -> (PathBuf, PathBuf) {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let bin = bin_dir();
    let dir = std::env::temp_dir().join(format!(
        "ringwire-pg-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create the PostgreSQL temp dir");
    let status = Command::new("chown")
        .arg("postgres:")
        .arg(&dir)
        .status()
        .expect("run chown");
    assert!(
        status.success(),
        "chown postgres {} failed (does user postgres exist?)",
        dir.display()
    );
    (bin, dir)
}

/// Directory holding `initdb`, `postgres` and `pg_ctl`.
fn bin_dir() -> PathBuf {
    if Path::new("/usr/local/bin/postgres").exists() && Path::new("/usr/local/bin/initdb").exists()
    {
        return PathBuf::from("/usr/local/bin");
    }
    let mut found: Vec<PathBuf> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("postgres").exists())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!(
            "PostgreSQL server binaries not found in /usr/local/bin or /usr/lib/postgresql/*/bin \
             (apt-get install postgresql)"
        )
    })
}

/// A client program: next to the server binaries if it is there, else on PATH (Debian's
/// `postgresql-client` wrappers in /usr/bin).
fn tool(bin: &Path, name: &str) -> PathBuf {
    let beside = bin.join(name);
    if beside.exists() {
        beside
    } else {
        PathBuf::from(name)
    }
}

/// A data directory made by `initdb` once per machine and PostgreSQL build, which
/// [`Postgres::start`] copies (0.15 s) instead of running `initdb` (about 1 s) for each
/// of the suite's servers. Made in a scratch directory and renamed into place, so concurrent
/// test binaries either see the whole template or none; the loser of a race discards its own.
/// It is never started itself: every server runs on a copy.
fn template(bin: &Path) -> PathBuf {
    const INITDB_ARGS: [&str; 5] = ["-A", "trust", "-U", "postgres", "--no-sync"];
    static TEMPLATE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            let version = Command::new(bin.join("postgres"))
                .arg("--version")
                .output()
                .expect("run postgres --version");
            let version = String::from_utf8_lossy(&version.stdout);
            // The build's version, the binary's path and mtime, and initdb's arguments name
            // the template, so a different or upgraded PostgreSQL (or other arguments) gets
            // its own.
            let stamp = fs::metadata(bin.join("postgres"))
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            std::hash::Hash::hash(&(version.trim(), bin, stamp, INITDB_ARGS), &mut hasher);
            let name = format!(
                "ringwire-pg-template-{:016x}",
                std::hash::Hasher::finish(&hasher)
            );
            let template = std::env::temp_dir().join(name);
            if template.join("PG_VERSION").exists() {
                return template;
            }
            let (_, scratch) = new_dir();
            let data = scratch.join("data");
            succeed(
                "initdb",
                as_postgres(&bin.join("initdb"))
                    .arg("-D")
                    .arg(&data)
                    .args(INITDB_ARGS),
            );
            // Fails when another process renamed its template into place first: use that one.
            let _ = fs::rename(&data, &template);
            let _ = fs::remove_dir_all(&scratch);
            assert!(
                template.join("PG_VERSION").exists(),
                "no template data directory at {}",
                template.display()
            );
            template
        })
        .clone()
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

fn as_postgres(program: &Path) -> Command {
    let mut cmd = Command::new("runuser");
    cmd.args(["-u", "postgres", "--"]).arg(program);
    cmd
}

impl Postgres {
    /// Creates a data directory (a copy of [`template`]), starts the server on a free port and waits
    /// (at most [`STARTUP_WAIT_MAX`]) until it accepts connections.
    ///
    /// # Panics
    /// When any step fails, with the step's output in the message.
    pub fn start() -> Postgres {
        let (bin, dir) = new_dir();
        let template = template(&bin);
        // `cp -a` as root keeps the files' owner (postgres) and modes (0700 on the data dir).
        succeed(
            "copying the template data directory",
            Command::new("cp")
                .arg("-a")
                .arg(&template)
                .arg(dir.join("data")),
        );
        Postgres::run(bin, dir)
    }

    /// A hot standby of `primary`, streaming from it: `pg_basebackup -R` (as the `postgres`
    /// user, WAL streamed during the copy, fast checkpoint, no fsync) into a temp dir, started
    /// on another free port. Returns once it is in recovery and has replayed everything the
    /// primary had written when it started. PostgreSQL 15's defaults already allow this
    /// (`wal_level=replica`, `max_wal_senders=10`, and initdb's `trust` hba lines for
    /// `replication` from 127.0.0.1), so the primary needs no restart.
    pub fn start_standby(primary: &Postgres) -> Postgres {
        let (bin, dir) = new_dir();
        succeed(
            "pg_basebackup",
            as_postgres(&tool(&bin, "pg_basebackup"))
                .args(["-h", "127.0.0.1", "-p", &primary.port.to_string()])
                .args(["-U", "postgres", "-D"])
                .arg(dir.join("data"))
                .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"]),
        );
        // The end of the primary's WAL: its insert position, or the page start when that is
        // just past a page header (always so after the backup's segment switch; the standby's
        // replay position stays at the page start until the next record is written).
        let target = primary.query_value(
            "select case when (l - '0/0') % 16777216 = 40 or (l - '0/0') % 8192 = 24 \
             then l - ((l - '0/0') % 8192) else l end \
             from (select pg_current_wal_insert_lsn() as l) as x",
        );
        let standby = Postgres::run(bin, dir);
        let deadline = Instant::now() + STARTUP_WAIT_MAX;
        loop {
            let caught_up = standby.query_value(&format!(
                "select pg_is_in_recovery() and pg_last_wal_replay_lsn() >= '{target}'"
            ));
            if caught_up == "t" {
                return standby;
            }
            assert!(
                Instant::now() < deadline,
                "the standby did not catch up with {target} within {STARTUP_WAIT_MAX:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The first column of the first row of `sql`, run with psql (empty for no row).
    ///
    /// # Panics
    /// When psql fails.
    pub fn query_value(&self, sql: &str) -> String {
        let out = Command::new(tool(&self.bin, "psql"))
            .args(["-X", "-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args([
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
            ])
            .arg(sql)
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    }

    /// Stop the server at once (`pg_ctl stop -m immediate`), as a crash would; the data
    /// directory stays until drop.
    pub fn kill(&mut self) {
        self.stop();
    }

    /// Start the server in `dir/data` on a free port.
    fn run(bin: PathBuf, dir: PathBuf) -> Postgres {
        // A port found free can be taken before the server binds it; try a few.
        let mut last_log = String::new();
        for _ in 0..3 {
            let mut pg = Postgres {
                port: free_port(),
                dir: dir.clone(),
                bin: bin.clone(),
                child: None,
            };
            match pg.spawn() {
                Ok(()) => return pg,
                Err(log) => {
                    last_log = log;
                    pg.stop();
                    pg.dir = PathBuf::new(); // keep the data dir for the next attempt
                }
            }
        }
        let _ = fs::remove_dir_all(&dir);
        panic!("PostgreSQL did not start within {STARTUP_WAIT_MAX:?}; server log:\n{last_log}");
    }

    /// Promote a standby to a primary (`pg_ctl promote -w`: returns once it accepts writes).
    ///
    /// # Panics
    /// When pg_ctl fails.
    pub fn promote(&self) {
        succeed(
            "pg_ctl promote",
            as_postgres(&self.bin.join("pg_ctl"))
                .arg("promote")
                .arg("-D")
                .arg(self.dir.join("data"))
                .args(["-w", "-t", "60"]),
        );
    }

    /// Start a server stopped by [`Postgres::kill`] again, on its port (a standby resumes
    /// streaming from where it was).
    ///
    /// # Panics
    /// When it does not start.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the server is running");
        if let Err(log) = self.spawn() {
            panic!("PostgreSQL did not restart; server log:\n{log}");
        }
    }

    /// Spawn the postmaster on `self.port` and wait until it accepts connections.
    fn spawn(&mut self) -> Result<(), String> {
        let log_path = self.dir.join(format!("server-{}.log", self.port));
        let log = fs::File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("open the server log");
        let seen = log.metadata().map_or(0, |m| m.len() as usize);
        let child = as_postgres(&self.bin.join("postgres"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(&self.dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=200",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log)
            .spawn()
            .expect("spawn postgres via runuser");
        self.child = Some(child);
        self.wait_ready(&log_path, seen)
    }

    /// Waits for "ready to accept connections" in the log (past its first `seen` bytes, from
    /// earlier runs) and a TCP connect to succeed.
    fn wait_ready(&mut self, log_path: &Path, seen: usize) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP_WAIT_MAX;
        loop {
            let log = fs::read_to_string(log_path).unwrap_or_default();
            // "…ready to accept connections", or "read-only connections" on a standby.
            if log
                .get(seen..)
                .unwrap_or_default()
                .contains("ready to accept ")
                && TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
            if exited || Instant::now() > deadline {
                return Err(log);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// URL of the `postgres` superuser on database `postgres` (ringwire's `--upstream` and
    /// `--replica`).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// libpq-style connection string (tokio-postgres `connect`).
    pub fn connection_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    /// Everything the server logged so far (all its runs on this data directory).
    pub fn log(&self) -> String {
        let mut all = String::new();
        for entry in fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with("server-") {
                all.push_str(&fs::read_to_string(entry.path()).unwrap_or_default());
            }
        }
        all
    }

    /// Replace pg_hba.conf (the caller then reloads with `select pg_reload_conf()`).
    pub fn write_hba(&self, contents: &str) {
        fs::write(self.dir.join("data").join("pg_hba.conf"), contents).expect("write pg_hba.conf");
    }

    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let data = self.dir.join("data");
        let stopped = as_postgres(&self.bin.join("pg_ctl"))
            .arg("stop")
            .arg("-D")
            .arg(&data)
            .args(["-m", "immediate", "-w", "-t", "30"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !stopped {
            // Fall back to signalling the postmaster directly.
            if let Some(pid) = fs::read_to_string(data.join("postmaster.pid"))
                .ok()
                .and_then(|s| s.lines().next().map(str::to_owned))
            {
                let _ = Command::new("kill").args(["-QUIT", pid.trim()]).status();
            }
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
        if !self.dir.as_os_str().is_empty() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}
