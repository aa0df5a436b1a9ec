//! Start the real `ringwire` binary on a free loopback port for a test, and stop it after.
//!
//! `RINGWIRE_TEST_TRANSPORT=unix` runs the suite's stock clients over the Unix-domain socket:
//! the server also listens in a fresh socket directory, and [`Ringwire::host`],
//! [`Ringwire::connection_string`], [`Ringwire::psql`] and [`Ringwire::pgbench`] point there.
//! Tests that speak raw bytes over `TcpStream`, or that test TCP itself (host-based auth rules
//! on client addresses), keep using TCP.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

pub struct Ringwire {
    pub port: u16,
    child: Child,
    /// With `RINGWIRE_TEST_TRANSPORT=unix`: the directory holding `.s.PGSQL.<port>`.
    socket_dir: Option<SocketDir>,
}

/// True when the stock clients of this test run should connect over the Unix socket.
pub fn unix_transport() -> bool {
    match std::env::var("RINGWIRE_TEST_TRANSPORT").as_deref() {
        Ok("unix") => true,
        Ok("tcp") | Err(_) => false,
        Ok(other) => panic!("RINGWIRE_TEST_TRANSPORT={other}: expected tcp or unix"),
    }
}

/// A fresh directory for one server's socket file, removed at drop.
struct SocketDir(PathBuf);

impl SocketDir {
    fn new() -> SocketDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ringwire-sock-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create socket dir");
        SocketDir(dir)
    }

    fn as_str(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Ringwire {
    /// `ringwire --listen 127.0.0.1:0 --shards 2 EXTRA...` (EXTRA may set its own --listen and
    /// --shards/--cores); waits for the "listening on" line.
    /// Set RINGWIRE_TEST_LOG=1 to see the server's log on stderr.
    pub fn start(extra: &[&str]) -> Ringwire {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ringwire"));
        if !extra.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        if !extra.iter().any(|a| *a == "--cores" || *a == "--shards") {
            cmd.args(["--shards", "2"]);
        }
        let socket_dir =
            (unix_transport() && !extra.contains(&"--unix-socket-dir")).then(SocketDir::new);
        if let Some(dir) = &socket_dir {
            cmd.args(["--unix-socket-dir", dir.as_str()]);
        }
        cmd.args(extra).stdout(Stdio::piped()).stdin(Stdio::null());
        if std::env::var_os("RINGWIRE_TEST_LOG").is_none() {
            cmd.stderr(Stdio::null());
        }
        let mut child = cmd.spawn().expect("spawn ringwire");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            // Keep draining so the server never blocks on a full pipe.
            for _ in lines {}
        });
        let line = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!("ringwire did not print its listening line within 30 s (args {extra:?})");
            }
        };
        let port = line
            .split_whitespace()
            .find_map(|w| w.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()))
            .unwrap_or_else(|| panic!("no port in ringwire's first line: {line:?}"));
        Ringwire {
            port,
            child,
            socket_dir,
        }
    }

    /// The TCP address (always served, whatever the test transport).
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// What libpq-style clients pass as `host`: the loopback address, or the socket directory
    /// under `RINGWIRE_TEST_TRANSPORT=unix`.
    pub fn host(&self) -> &str {
        match &self.socket_dir {
            Some(dir) => dir.as_str(),
            None => "127.0.0.1",
        }
    }

    /// A libpq-style connection string for `user`.
    pub fn connection_string(&self, user: &str) -> String {
        format!(
            "host={} port={} user={user} dbname=postgres",
            self.host(),
            self.port
        )
    }

    /// `psql -X -h HOST -p PORT -U postgres -d postgres`, ready for more arguments.
    pub fn psql(&self) -> Command {
        let mut cmd = Command::new("psql");
        cmd.args(["-X", "-h", self.host(), "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", "postgres"])
            .env("PGCONNECT_TIMEOUT", "10");
        cmd
    }

    /// Stock pgbench against this server (see [`super::pgbench::run_on`]).
    pub fn pgbench(&self, args: &[&str]) -> String {
        super::pgbench::run_on(self.host(), self.port, args)
    }

    /// Panics if the server process has exited (a crashed shard takes the process down).
    pub fn assert_alive(&mut self) {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            panic!("ringwire exited: {status}");
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Ringwire {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The resident set size of process `pid`, in KiB (`VmRSS` of /proc/PID/status).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}
