//! Start the real `ringwire` binary on a free loopback port for a test, and stop it after.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub struct Ringwire {
    pub port: u16,
    child: Child,
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
        Ringwire { port, child }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A libpq-style connection string for `user`.
    pub fn connection_string(&self, user: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user={user} dbname=postgres",
            self.port
        )
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
