//! A shard's upstream connections and prepared-statement names.
//!
//! Each shard owns its pool (no locks, no cross-core hop); a client borrows a connection for a
//! transaction (or for a batch of autocommit statements) and gives it back on ReadyForQuery
//! `I` with nothing outstanding. At most `pool_size_per_shard` are open; a client that finds
//! none free waits for one to come back.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use shards::connect::{connect, ShardStream};

use super::client::{startup, ReplyBuf};
use super::session::ClientStatement;
use super::UpstreamConfig;

/// Statements are keyed by what makes their plan: text, declared parameter types and the
/// session settings in effect (search_path changes what a name resolves to).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct StatementKey {
    pub sql: Box<str>,
    pub param_types: Box<[u8]>,
    pub settings: u64,
}

pub struct ShardUpstream {
    pub config: Arc<UpstreamConfig>,
    /// The server's startup ParameterStatus values.
    pub parameters: Arc<Vec<(String, String)>>,
    idle: RefCell<Vec<ServerConn>>,
    slots: Rc<Slots>,
    /// Upstream name (`ringwire_<id>`) of every statement some client of this shard prepared.
    statements: RefCell<HashMap<StatementKey, u32>>,
    next_statement: Cell<u32>,
}

/// The count of open connections and who waits for one; shared with each connection so
/// closing one frees its slot.
#[derive(Default)]
struct Slots {
    open: Cell<usize>,
    /// Clients waiting for a connection, first come first served.
    waiters: RefCell<VecDeque<Rc<Waiter>>>,
}

#[derive(Default)]
struct Waiter {
    waker: Cell<Option<Waker>>,
    /// Woken by a release: its turn to look. A waiter dropped with its turn unused passes it
    /// on, so a client that went away never swallows the wake-up.
    woken: Cell<bool>,
}

impl Slots {
    /// Wake the first waiter (one connection came back: one client can use it; waking all of
    /// them cost O(waiters) per release, measured at 512 clients).
    fn wake_first_waiter(&self) {
        let first = self.waiters.borrow_mut().pop_front();
        if let Some(w) = first {
            w.woken.set(true);
            if let Some(waker) = w.waker.take() {
                waker.wake();
            }
        }
    }
}

/// Frees its pool slot when the connection closes.
struct Slot(Rc<Slots>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.set(self.0.open.get() - 1);
        self.0.wake_first_waiter();
    }
}

/// One connection to the upstream server.
pub struct ServerConn {
    pub stream: ShardStream,
    pub buf: ReplyBuf,
    pub process_id: i32,
    pub secret_key: i32,
    /// Upstream statements prepared on this connection.
    pub prepared: HashSet<u32>,
    /// The client statement the unnamed upstream statement was last parsed from.
    pub unnamed: Option<Rc<ClientStatement>>,
    /// Fingerprint of the session settings in effect (0: the server's defaults).
    pub settings: u64,
    _slot: Slot,
}

impl ShardUpstream {
    pub fn new(config: Arc<UpstreamConfig>, parameters: Arc<Vec<(String, String)>>) -> Self {
        ShardUpstream {
            config,
            parameters,
            idle: RefCell::new(Vec::new()),
            slots: Rc::new(Slots::default()),
            statements: RefCell::new(HashMap::new()),
            next_statement: Cell::new(1),
        }
    }

    /// A connection for a client whose settings have fingerprint `settings`: an idle one
    /// with the same settings if there is one (no replay needed), else any idle one, else a
    /// new one while under the limit, else wait. Idle connections the server closed are
    /// dropped here (health check without a round trip: their socket reports end of stream).
    pub async fn acquire(&self, settings: u64) -> Result<ServerConn, String> {
        loop {
            let found = {
                let mut idle = self.idle.borrow_mut();
                let i = idle
                    .iter()
                    .rposition(|c| c.settings == settings)
                    .or_else(|| idle.len().checked_sub(1));
                i.map(|i| idle.swap_remove(i))
            };
            if let Some(mut conn) = found {
                if conn.alive().await {
                    return Ok(conn);
                }
                log::info!(
                    "upstream connection {} was closed while idle",
                    conn.process_id
                );
                continue;
            }
            if self.slots.open.get() < self.config.pool_size_per_shard {
                self.slots.open.set(self.slots.open.get() + 1);
                let slot = Slot(self.slots.clone());
                return self.open(slot).await;
            }
            WaitTurn {
                slots: &self.slots,
                me: None,
            }
            .await;
        }
    }

    async fn open(&self, slot: Slot) -> Result<ServerConn, String> {
        let mut stream = connect(&self.config.address)
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", self.config.address))?;
        let mut buf = ReplyBuf::default();
        let hs = startup(&mut stream, &mut buf, &self.config).await?;
        Ok(ServerConn {
            stream,
            buf,
            process_id: hs.process_id,
            secret_key: hs.secret_key,
            prepared: HashSet::new(),
            unnamed: None,
            settings: 0,
            _slot: slot,
        })
    }

    /// Take back a clean connection (ReadyForQuery `I`, nothing outstanding).
    pub fn release(&self, mut conn: ServerConn) {
        conn.buf.shrink_if_idle();
        self.idle.borrow_mut().push(conn);
        self.slots.wake_first_waiter();
    }

    /// The upstream statement id for `key`, assigned on first use.
    pub fn statement_id(&self, key: &StatementKey) -> u32 {
        if let Some(id) = self.statements.borrow().get(key) {
            return *id;
        }
        let id = self.next_statement.get();
        self.next_statement.set(id + 1);
        self.statements.borrow_mut().insert(key.clone(), id);
        id
    }

    /// Forget a statement whose plan the server refused to reuse (0A000): the next Parse of
    /// the same text gets a new upstream name, prepared afresh.
    pub fn forget_statement(&self, id: u32) {
        self.statements.borrow_mut().retain(|_, v| *v != id);
    }
}

impl ServerConn {
    /// False if the server closed the connection or sent something unasked (a FATAL before
    /// closing, e.g. on shutdown or idle_session_timeout).
    async fn alive(&mut self) -> bool {
        if !self.buf.data().is_empty() {
            return false;
        }
        let mut probe = [0u8; 1];
        let read = futures_lite::AsyncReadExt::read(&mut self.stream, &mut probe);
        futures_lite::future::poll_once(read).await.is_none()
    }
}

/// Wait until a connection is given back (or closed) by another client of the shard.
struct WaitTurn<'a> {
    slots: &'a Slots,
    me: Option<Rc<Waiter>>,
}

impl Future for WaitTurn<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match &self.me {
            None => {
                let me = Rc::new(Waiter::default());
                me.waker.set(Some(cx.waker().clone()));
                self.slots.waiters.borrow_mut().push_back(me.clone());
                self.me = Some(me);
                Poll::Pending
            }
            Some(me) if me.woken.get() => {
                self.me = None;
                Poll::Ready(())
            }
            Some(me) => {
                me.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        }
    }
}

impl Drop for WaitTurn<'_> {
    fn drop(&mut self) {
        if let Some(me) = self.me.take() {
            if me.woken.get() {
                self.slots.wake_first_waiter();
            } else {
                self.slots
                    .waiters
                    .borrow_mut()
                    .retain(|w| !Rc::ptr_eq(w, &me));
            }
        }
    }
}
