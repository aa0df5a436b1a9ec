//! What one shard owns: its engine, its connections' cancel tokens, and its end of the cancel
//! mesh. Nothing here is shared with another core except the read-only config, the connection
//! counts ([`Load`], touched once per connect/disconnect, never per query) and the channels.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::config::ServerConfig;
use crate::engine::{CancelToken, Engine};
use crate::metrics::ShardMetrics;
use crate::uring::Doorbell;

/// A CancelRequest that arrived on another shard, forwarded to the owner.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CancelMessage {
    pub process_id: i32,
    pub secret_key: i32,
}

/// Process ids carry the owning shard in their high bits: `(shard + 1) << SHARD_SHIFT | serial`.
/// The top bit stays clear so ids are positive, as PostgreSQL's are. The `+ 1` keeps every id
/// at or above 2^22, Linux's largest possible pid (`PID_MAX_LIMIT` on 64-bit): through
/// `--upstream`, a notification carries the sending backend's real pid, and a client that
/// skips notifications naming its own BackendKeyData pid must never skip another session's.
const SHARD_SHIFT: u32 = 22;
const SERIAL_MASK: u32 = (1 << SHARD_SHIFT) - 1;
pub const MAX_SHARDS: usize = (1 << (31 - SHARD_SHIFT)) - 1;

fn process_id(shard: usize, serial: u32) -> i32 {
    ((shard as u32 + 1) << SHARD_SHIFT | serial) as i32
}

/// The shard that handed out `process_id`; an id ringwire never hands out (below 2^22, or
/// negative) maps past every shard.
pub fn shard_of_process_id(process_id: i32) -> usize {
    (process_id as u32 >> SHARD_SHIFT).wrapping_sub(1) as usize
}

pub(crate) struct Shard<E: Engine> {
    pub id: usize,
    pub engine: E,
    pub config: Arc<ServerConfig>,
    cancels: RefCell<HashMap<i32, (i32, Rc<CancelToken>)>>,
    cancel_mesh: Vec<flume::Sender<CancelMessage>>,
    bells: Arc<Vec<Arc<Doorbell>>>,
    next_serial: Cell<u32>,
    pub load: Arc<Load>,
    /// With `ServerConfig::wire_floor`: the prebuilt reply to every Query.
    pub wire_floor_reply: Option<Vec<u8>>,
    /// This shard's metrics (installed when the shard started, see `metrics::current`).
    pub metrics: Rc<ShardMetrics>,
}

impl<E: Engine> Shard<E> {
    pub fn new(
        id: usize,
        engine: E,
        config: Arc<ServerConfig>,
        cancel_mesh: Vec<flume::Sender<CancelMessage>>,
        bells: Arc<Vec<Arc<Doorbell>>>,
        load: Arc<Load>,
    ) -> Shard<E> {
        assert!(
            id < MAX_SHARDS,
            "shard id {id} does not fit in a process id"
        );
        Shard {
            id,
            engine,
            wire_floor_reply: config.wire_floor.then(wire_floor_reply),
            config,
            cancels: RefCell::new(HashMap::new()),
            cancel_mesh,
            bells,
            next_serial: Cell::new(1),
            load,
            metrics: crate::metrics::current().expect("metrics are installed when a shard starts"),
        }
    }

    /// A process id unique among this shard's open connections.
    pub fn next_process_id(&self) -> i32 {
        let cancels = self.cancels.borrow();
        loop {
            let serial = self.next_serial.get();
            self.next_serial.set((serial + 1) & SERIAL_MASK);
            if serial == 0 {
                continue;
            }
            let pid = process_id(self.id, serial);
            if !cancels.contains_key(&pid) {
                return pid;
            }
        }
    }

    /// Remember a connection's cancel token under a fresh random secret, which is returned for
    /// BackendKeyData.
    pub fn register_cancel(&self, process_id: i32, token: Rc<CancelToken>) -> i32 {
        let secret = random_i32();
        self.cancels
            .borrow_mut()
            .insert(process_id, (secret, token));
        secret
    }

    pub fn unregister_cancel(&self, process_id: i32) {
        self.cancels.borrow_mut().remove(&process_id);
    }

    /// A CancelRequest arrived on this shard: cancel locally or forward to the owning shard.
    /// A wrong key or unknown process does nothing and says nothing, as in PostgreSQL.
    pub fn route_cancel(&self, process_id: i32, secret_key: &[u8]) {
        let Ok(key) = <[u8; 4]>::try_from(secret_key) else {
            return; // ringwire hands out 4-byte keys; a longer one cannot be ours.
        };
        let msg = CancelMessage {
            process_id,
            secret_key: i32::from_be_bytes(key),
        };
        let owner = shard_of_process_id(process_id);
        if owner == self.id {
            self.apply_cancel(msg);
        } else if let Some(tx) = self.cancel_mesh.get(owner) {
            // A full or closed channel means the owner is gone or drowning; a cancel is
            // best-effort in PostgreSQL too.
            let _ = tx.try_send(msg);
            self.bells[owner].ring();
        }
    }

    pub fn apply_cancel(&self, msg: CancelMessage) {
        if let Some((secret, token)) = self.cancels.borrow().get(&msg.process_id) {
            if constant_time_eq(&secret.to_ne_bytes(), &msg.secret_key.to_ne_bytes()) {
                token.cancel();
            }
        }
    }

    /// Count a new connection; false if it is over the global or this shard's limit (it is
    /// counted all the same, and must be closed with [`Shard::connection_closed`]).
    pub fn connection_opened(&self) -> bool {
        let before = self.load.total.fetch_add(1, Ordering::Relaxed);
        let here = self.load.live[self.id].fetch_add(1, Ordering::Relaxed);
        before < self.config.max_connections
            && self
                .config
                .max_connections_per_shard
                .is_none_or(|limit| here < limit)
    }

    pub fn connection_closed(&self) {
        self.load.total.fetch_sub(1, Ordering::Relaxed);
        self.load.live[self.id].fetch_sub(1, Ordering::Relaxed);
    }
}

/// Client connections, in all and per shard, shared by every shard. Touched when a connection
/// opens or closes, and read to place a new one; never on the query path.
pub struct Load {
    total: AtomicUsize,
    /// Connections each shard serves.
    live: Vec<AtomicUsize>,
    /// Connections dealt to each shard that it has not adopted yet (see [`Load::place`]).
    pending: Vec<AtomicUsize>,
}

impl Load {
    pub fn new(shards: usize) -> Load {
        Load {
            total: AtomicUsize::new(0),
            live: (0..shards).map(|_| AtomicUsize::new(0)).collect(),
            pending: (0..shards).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    fn weight(&self, shard: usize) -> usize {
        self.live[shard].load(Ordering::Relaxed) + self.pending[shard].load(Ordering::Relaxed)
    }

    /// The shard that should serve a connection accepted on shard `me` (None: accepted off
    /// the shards): the one serving the fewest, `me` unless another serves strictly fewer.
    /// SO_REUSEPORT spreads connections by a hash of their addresses, which leaves few
    /// connections badly spread (4 clients land 4/0 or 3/1 on two shards 5 times in 8),
    /// and Unix-domain sockets have no spreading at all. A shard that is sent one counts it
    /// as pending until it adopts it ([`Load::adopted`]), so a burst of accepts on one shard
    /// does not pile onto the same idle one.
    pub fn place(&self, me: Option<usize>) -> usize {
        let mut best = me.unwrap_or(0);
        let mut best_weight = self.weight(best);
        for shard in 0..self.live.len() {
            let w = self.weight(shard);
            if w < best_weight {
                (best, best_weight) = (shard, w);
            }
        }
        if Some(best) != me {
            self.pending[best].fetch_add(1, Ordering::Relaxed);
        }
        best
    }

    /// Shard `shard` started serving a connection [`Load::place`] sent it (or could not send
    /// it after all).
    pub fn adopted(&self, shard: usize) {
        self.pending[shard].fetch_sub(1, Ordering::Relaxed);
    }
}

/// The reply to `SELECT * FROM t` over a one-row, one-int4-column table, as PostgreSQL sends
/// it: what the wire-floor benchmark answers to every Query.
fn wire_floor_reply() -> Vec<u8> {
    use protocol::backend::{self, DataRowWriter, FieldDescription, TransactionStatus};
    let mut out = Vec::new();
    let field = FieldDescription {
        name: "a",
        table_oid: 0,
        column_id: 0,
        type_oid: 23,
        type_len: 4,
        type_modifier: -1,
        format: protocol::Format::Text,
    };
    backend::write_row_description(&mut out, &[field]);
    let mut row = DataRowWriter::begin(&mut out);
    row.value(b"1");
    row.finish();
    backend::write_command_complete(&mut out, "SELECT 1");
    backend::write_ready_for_query(&mut out, TransactionStatus::Idle);
    out
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 32 random bits from the kernel (getrandom(2)): cancel keys must not be guessable.
pub(crate) fn random_i32() -> i32 {
    let mut buf = [0u8; 4];
    fill_random(&mut buf);
    i32::from_ne_bytes(buf)
}

/// Fill `buf` from the kernel's CSPRNG (getrandom(2)): cancel keys, SCRAM nonces and salts.
pub(crate) fn fill_random(buf: &mut [u8]) {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: writes at most the remaining bytes of `buf`.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n > 0 {
            filled += n as usize;
        } else if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            panic!("getrandom failed: {}", std::io::Error::last_os_error());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_ids_stay_above_every_linux_pid_and_name_their_shard() {
        for shard in [0, 1, MAX_SHARDS - 1] {
            for serial in [1, SERIAL_MASK] {
                let pid = process_id(shard, serial);
                assert!(pid >= 1 << 22, "{pid} could be an upstream backend's pid");
                assert_eq!(shard_of_process_id(pid), shard);
            }
        }
        // Ids ringwire never hands out name no shard, so their cancels go nowhere.
        for pid in [0, 1, (1 << 22) - 1, -1, i32::MIN] {
            assert!(shard_of_process_id(pid) >= MAX_SHARDS, "{pid}");
        }
    }
}
