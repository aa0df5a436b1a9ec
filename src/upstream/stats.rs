//! Upstream mode's metrics for `--metrics-listen`: what an operator of a pooler watches.
//!
//! Each shard counts in plain `Cell`s written only by itself ([`Counters`]); its pools are
//! read as they are when asked ([`super::pool::Pool::stats`]). A scrape on shard 0 asks every
//! other shard over the engine mesh ([`Message::Request`]; the mesh is drained by the io_uring
//! driver each turn and the target's doorbell rung, so a parked shard answers at once), waits
//! at most [`crate::dispatch::STATS_TIMEOUT`] for the replies, and renders what arrived; a
//! shard that did not answer is `ringwire_shard_up{shard="N"} 0`. Nothing is recorded per
//! statement but one add.

use std::cell::Cell;
use std::fmt::Write as _;

/// One shard's counters (monotonic, except `clients`).
#[derive(Default)]
pub struct Counters {
    /// Client connections open on this shard.
    pub clients: Cell<u64>,
    /// Statements relayed: simple Queries, Executes, FunctionCalls.
    pub statements: Cell<u64>,
    /// Autocommit read batches sent to a replica.
    pub replica_reads: Cell<u64>,
    /// Of replica reads and first batches of read-only transactions, those run again on the
    /// primary (the replica refused them or failed before any reply reached the client).
    pub replica_retries: Cell<u64>,
    /// Reads (or read-only transactions) that waited for a replica to catch up.
    pub replica_waits: Cell<u64>,
    /// Reads and read-only transactions that could have gone to a replica and went to the
    /// primary (none fresh enough in time, or none in rotation).
    pub sent_to_primary: Cell<u64>,
    /// Read-only transactions run on a replica.
    pub replica_transactions: Cell<u64>,
    /// Of those, ended by ringwire (read committed: the replica did not catch up in time).
    pub replica_transactions_failed: Cell<u64>,
    /// Of those, gone on at the primary (read committed, nothing in them yet that another
    /// connection would lack: the replica fell behind, failed, or hit a recovery conflict).
    pub replica_transactions_moved: Cell<u64>,
}

impl Counters {
    pub fn bump(cell: &Cell<u64>) {
        cell.set(cell.get() + 1);
    }

    fn snapshot(&self, hosts: Vec<HostStats>, slow_units: u64) -> ShardStats {
        ShardStats {
            clients: self.clients.get(),
            statements: self.statements.get(),
            replica_reads: self.replica_reads.get(),
            replica_retries: self.replica_retries.get(),
            replica_waits: self.replica_waits.get(),
            sent_to_primary: self.sent_to_primary.get(),
            replica_transactions: self.replica_transactions.get(),
            replica_transactions_failed: self.replica_transactions_failed.get(),
            replica_transactions_moved: self.replica_transactions_moved.get(),
            slow_units,
            hosts,
        }
    }
}

/// One pool (one upstream host) of one shard, as it is now.
#[derive(Clone, Debug, Default)]
pub struct HostStats {
    /// `primary` or `replica`.
    pub role: &'static str,
    pub address: String,
    /// Connections open (idle + in use, including one being opened).
    pub open: usize,
    pub idle: usize,
    /// Clients waiting for a connection.
    pub waiting: usize,
}

/// What a shard answers a scrape with.
#[derive(Clone, Debug, Default)]
pub struct ShardStats {
    pub clients: u64,
    pub statements: u64,
    pub replica_reads: u64,
    pub replica_retries: u64,
    pub replica_waits: u64,
    pub sent_to_primary: u64,
    pub replica_transactions: u64,
    pub replica_transactions_failed: u64,
    pub replica_transactions_moved: u64,
    /// Shapes of pipelined units found slow (`pipe.rs`, `SlowShapes`).
    pub slow_units: u64,
    pub hosts: Vec<HostStats>,
}

/// What upstream engines on different shards send each other.
pub enum Message {
    /// Shard `from` asks for this shard's [`ShardStats`] for scrape `id`.
    Request { from: usize, id: u64 },
    Reply {
        id: u64,
        shard: usize,
        stats: Box<ShardStats>,
    },
}

impl super::pool::ShardUpstream {
    /// This shard's counters and pools now.
    pub fn stats(&self) -> ShardStats {
        let mut hosts = vec![self.pools(super::pool::Host::Primary).stats("primary")];
        hosts.extend(
            (0..self.replicas.len())
                .map(|i| self.pools(super::pool::Host::Replica(i)).stats("replica")),
        );
        self.counters.snapshot(hosts, self.slow.marked.get())
    }
}

/// A per-shard series: name, type, help, value.
type ShardSeries = (
    &'static str,
    &'static str,
    &'static str,
    fn(&ShardStats) -> u64,
);
/// A per-host gauge: name, help, value.
type HostSeries = (&'static str, &'static str, fn(&HostStats) -> usize);

/// The Prometheus text exposition of every shard's answer (`None`: it did not answer).
pub fn render(shards: &[Option<ShardStats>]) -> String {
    let mut out = String::new();
    let mut family =
        |name: &str, kind: &str, help: &str, rows: &mut dyn Iterator<Item = (String, f64)>| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (labels, value) in rows {
                let _ = writeln!(out, "{name}{{{labels}}} {value}");
            }
        };
    let answered = || {
        shards
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
    };
    family(
        "ringwire_shard_up",
        "gauge",
        "1 if the shard answered this scrape in time",
        &mut shards
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("shard=\"{i}\""), f64::from(u8::from(s.is_some())))),
    );
    let per_shard: [ShardSeries; 10] = [
        (
            "ringwire_upstream_client_connections",
            "gauge",
            "client connections open",
            |s| s.clients,
        ),
        (
            "ringwire_upstream_statements_total",
            "counter",
            "statements relayed (Query, Execute, FunctionCall)",
            |s| s.statements,
        ),
        (
            "ringwire_upstream_replica_reads_total",
            "counter",
            "autocommit read batches sent to a replica",
            |s| s.replica_reads,
        ),
        (
            "ringwire_upstream_replica_retries_total",
            "counter",
            "replica reads and read-only transactions' first batches run again on the primary",
            |s| s.replica_retries,
        ),
        (
            "ringwire_upstream_replica_waits_total",
            "counter",
            "reads and read-only transactions that waited for a replica to catch up",
            |s| s.replica_waits,
        ),
        (
            "ringwire_upstream_replica_sent_to_primary_total",
            "counter",
            "reads and read-only transactions a replica could have served that went to the primary",
            |s| s.sent_to_primary,
        ),
        (
            "ringwire_upstream_replica_transactions_total",
            "counter",
            "read-only transactions run on a replica",
            |s| s.replica_transactions,
        ),
        (
            "ringwire_upstream_replica_transactions_failed_total",
            "counter",
            "read-only transactions on a replica ended with 40001 (the replica did not catch up)",
            |s| s.replica_transactions_failed,
        ),
        (
            "ringwire_upstream_replica_transactions_moved_total",
            "counter",
            "read-only transactions on a replica that went on at the primary (the replica fell behind or failed)",
            |s| s.replica_transactions_moved,
        ),
        (
            "ringwire_upstream_pipeline_slow_units_total",
            "counter",
            "pipelined units that ran so long that their statements' shape is now kept apart from other clients' units",
            |s| s.slow_units,
        ),
    ];
    for (name, kind, help, value) in per_shard {
        family(
            name,
            kind,
            help,
            &mut answered().map(|(i, s)| (format!("shard=\"{i}\""), value(s) as f64)),
        );
    }
    let per_host: [HostSeries; 4] = [
        (
            "ringwire_upstream_connections_open",
            "upstream connections open",
            |h| h.open,
        ),
        (
            "ringwire_upstream_connections_idle",
            "upstream connections idle in the pool",
            |h| h.idle,
        ),
        (
            "ringwire_upstream_connections_in_use",
            "upstream connections held by clients (or being opened)",
            |h| h.open.saturating_sub(h.idle),
        ),
        (
            "ringwire_upstream_clients_waiting",
            "clients waiting for an upstream connection",
            |h| h.waiting,
        ),
    ];
    for (name, help, value) in per_host {
        family(
            name,
            "gauge",
            help,
            &mut answered().flat_map(|(i, s)| {
                s.hosts.iter().map(move |h| {
                    (
                        format!("shard=\"{i}\",role=\"{}\",host=\"{}\"", h.role, h.address),
                        value(h) as f64,
                    )
                })
            }),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_and_missing_shards() {
        let one = ShardStats {
            clients: 2,
            statements: 7,
            hosts: vec![HostStats {
                role: "primary",
                address: "127.0.0.1:5432".into(),
                open: 3,
                idle: 1,
                waiting: 4,
            }],
            ..ShardStats::default()
        };
        let text = render(&[Some(one), None]);
        assert!(text.contains("ringwire_shard_up{shard=\"0\"} 1\n"));
        assert!(text.contains("ringwire_shard_up{shard=\"1\"} 0\n"));
        assert!(text.contains("ringwire_upstream_statements_total{shard=\"0\"} 7\n"));
        assert!(text.contains(
            "ringwire_upstream_connections_in_use{shard=\"0\",role=\"primary\",host=\"127.0.0.1:5432\"} 2\n"
        ));
        assert!(text.contains(
            "ringwire_upstream_clients_waiting{shard=\"0\",role=\"primary\",host=\"127.0.0.1:5432\"} 4\n"
        ));
        assert!(!text.contains("shard=\"1\"}} "));
    }
}
