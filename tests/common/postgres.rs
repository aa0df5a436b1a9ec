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

/// How long the server may take to accept connections after it is started.
const STARTUP_WAIT_MAX: Duration = Duration::from_secs(60);

/// A running PostgreSQL; stopped and its data directory removed on drop.
pub struct Postgres {
    pub port: u16,
    dir: PathBuf,
    bin: PathBuf,
    child: Option<Child>,
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
    /// Creates a data directory, runs `initdb`, starts the server on a free port and waits
    /// (at most [`STARTUP_WAIT_MAX`]) until it accepts connections.
    ///
    /// # Panics
    /// When any step fails, with the step's output in the message.
    pub fn start() -> Postgres {
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
        let data = dir.join("data");
        let out = as_postgres(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "--no-sync"])
            .output()
            .expect("run initdb via runuser");
        assert!(
            out.status.success(),
            "initdb failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // A port found free can be taken before the server binds it; try a few.
        let mut last_log = String::new();
        for _ in 0..3 {
            let port = free_port();
            let log_path = dir.join(format!("server-{port}.log"));
            let log = fs::File::create(&log_path).expect("create the server log");
            let child = as_postgres(&bin.join("postgres"))
                .arg("-D")
                .arg(&data)
                .args(["-p", &port.to_string(), "-k"])
                .arg(&dir)
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
            let mut pg = Postgres {
                port,
                dir: dir.clone(),
                bin: bin.clone(),
                child: Some(child),
            };
            match pg.wait_ready(&log_path) {
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

    /// Waits for "ready to accept connections" in the log and a TCP connect to succeed.
    fn wait_ready(&mut self, log_path: &Path) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP_WAIT_MAX;
        loop {
            let log = fs::read_to_string(log_path).unwrap_or_default();
            if log.contains("ready to accept connections")
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

    /// libpq-style connection string (tokio-postgres `connect`).
    pub fn connection_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
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
