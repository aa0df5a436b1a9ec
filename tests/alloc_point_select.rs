//! The steady-state path of a cached point select does no heap allocation (issue #3).
//!
//! The server runs in this process — the real shards, sockets and engine — and a real client
//! (tokio-postgres) drives it. A counting global allocator counts, per shard thread, every
//! allocation made while the engine runs: each engine call (Parse, Bind, Execute, a simple
//! Query, the end of a cycle, a mesh message) is wrapped so that its polls are counted, which
//! includes the compute's work on shard 0 for requests from shard 1. After warm-up, N repeated
//! point selects must add exactly zero, on the compute's shard (a function call to the compute)
//! and on another shard — served by its read replica (the default), and with
//! `--read-replicas off` as a batched request over the mesh and its reply — for a prepared
//! statement (Bind/Execute/Sync), an unnamed one (Parse/Bind/Describe/Execute/Sync) and the
//! simple protocol.
//!
//! What the connection state machine and the I/O layer allocate around the engine (outside
//! the engine calls) is printed, not asserted: that path belongs to `shards`.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bumpalo::Bump;
use common::client::shard_of;
use protocol::backend::TransactionStatus;
use protocol::frontend::{Bind, Oids};
use protocol::PgError;
use ringwire::dispatch::{Message, Shared};
use ringwire::engine::{Frontend, Portal, Prepared, Session};
use shards::config::{Placement, ServerConfig};
use shards::engine::{Cx, Engine, Execution, SessionStart};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

const SHARDS: usize = 2;

struct Counting;

thread_local! {
    /// This thread is shard `n` (set when its engine is built), or not a shard.
    static SHARD: Cell<Option<usize>> = const { Cell::new(None) };
    /// An engine call is running on this thread.
    static IN_ENGINE: Cell<bool> = const { Cell::new(false) };
}

/// Per shard: allocations inside engine calls, and all allocations on the shard's thread.
static ENGINE_ALLOCATIONS: [AtomicU64; SHARDS] = [AtomicU64::new(0), AtomicU64::new(0)];
static THREAD_ALLOCATIONS: [AtomicU64; SHARDS] = [AtomicU64::new(0), AtomicU64::new(0)];

fn count_one() {
    // `try_with`: allocations while thread-locals are torn down are not counted.
    let shard = SHARD.try_with(Cell::get).ok().flatten();
    if let Some(shard) = shard {
        THREAD_ALLOCATIONS[shard].fetch_add(1, Ordering::Relaxed);
        if IN_ENGINE.try_with(Cell::get).unwrap_or(false) {
            ENGINE_ALLOCATIONS[shard].fetch_add(1, Ordering::Relaxed);
        }
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; counting touches only
// const-initialised thread-locals and atomics, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn in_engine<T>(f: impl FnOnce() -> T) -> T {
    let outer = IN_ENGINE.replace(true);
    let result = f();
    IN_ENGINE.set(outer);
    result
}

/// A future whose every poll counts as engine work.
struct InEngine<F>(F);

impl<F: Future> Future for InEngine<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: the inner future is never moved out of the pinned wrapper.
        let inner = unsafe { self.map_unchecked_mut(|s| &mut s.0) };
        in_engine(|| inner.poll(cx))
    }
}

/// The real engine, with every call counted.
struct Counted(Frontend);

/// The same borrows, typed for the inner engine (the associated types are the same).
macro_rules! inner_cx {
    ($cx:expr) => {
        Cx {
            session: &mut *$cx.session,
            out: &mut *$cx.out,
            arena: $cx.arena,
            tx: &mut *$cx.tx,
            cancel: $cx.cancel,
            conn: $cx.conn,
            statements: &mut *$cx.statements,
            close_all_portals: &mut *$cx.close_all_portals,
            copy_in: &mut *$cx.copy_in,
            client: $cx.client.as_mut().map(|c| c.reborrow()),
            clock: $cx.clock,
            sync_follows: $cx.sync_follows,
        }
    };
}

impl Engine for Counted {
    type Session = Session;
    type Statement = Prepared;
    type Portal = Portal;
    type Message = Message;

    fn on_message(&self, msg: Message) {
        in_engine(|| self.0.on_message(msg))
    }
    fn open_session(&self, start: &SessionStart<'_>) -> Result<Session, PgError> {
        in_engine(|| self.0.open_session(start))
    }
    fn close_session(&self, session: &mut Session) {
        in_engine(|| self.0.close_session(session))
    }
    fn write_startup_parameters(&self, session: &Session, out: &mut Vec<u8>) {
        in_engine(|| self.0.write_startup_parameters(session, out))
    }
    async fn simple_query(&self, cx: &mut Cx<'_, Self>, sql: &str) -> Result<(), PgError> {
        InEngine(self.0.simple_query(&mut inner_cx!(cx), sql)).await
    }
    fn parse(
        &self,
        cx: &mut Cx<'_, Self>,
        sql: &str,
        param_types: Oids<'_>,
    ) -> Result<Rc<Prepared>, PgError> {
        in_engine(|| self.0.parse(&mut inner_cx!(cx), sql, param_types))
    }
    fn describe_statement(&self, statement: &Prepared, arena: &Bump, out: &mut Vec<u8>) {
        in_engine(|| self.0.describe_statement(statement, arena, out))
    }
    fn bind(
        &self,
        cx: &mut Cx<'_, Self>,
        statement: &Rc<Prepared>,
        bind: &Bind<'_>,
    ) -> Result<Portal, PgError> {
        in_engine(|| self.0.bind(&mut inner_cx!(cx), statement, bind))
    }
    fn describe_portal(&self, portal: &Portal, arena: &Bump, out: &mut Vec<u8>) {
        in_engine(|| self.0.describe_portal(portal, arena, out))
    }
    async fn copy_in_done(
        &self,
        cx: &mut Cx<'_, Self>,
        data: Result<Vec<u8>, PgError>,
    ) -> Result<(), PgError> {
        InEngine(self.0.copy_in_done(&mut inner_cx!(cx), data)).await
    }
    async fn sync(&self, cx: &mut Cx<'_, Self>) -> Result<(), PgError> {
        InEngine(self.0.sync(&mut inner_cx!(cx))).await
    }
    fn end_of_cycle(
        &self,
        session: &mut Session,
        tx: TransactionStatus,
        error_in_cycle: bool,
        out: &mut Vec<u8>,
    ) {
        in_engine(|| self.0.end_of_cycle(session, tx, error_in_cycle, out))
    }
    async fn execute(
        &self,
        cx: &mut Cx<'_, Self>,
        portal: &mut Portal,
        max_rows: u32,
    ) -> Result<Execution, PgError> {
        InEngine(self.0.execute(&mut inner_cx!(cx), portal, max_rows)).await
    }
}

/// Start the server in this process on a free port; it runs until the process exits.
fn start_server(read_replicas: bool) -> u16 {
    let config = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        placement: Placement::Unpinned(SHARDS),
        ..ServerConfig::default()
    };
    config.preflight().expect("this machine can run two shards");
    let listeners = shards::runtime::bind(&config).expect("bind");
    let port = listeners.local_addr.port();
    let shared = Shared::with_read_replicas(SHARDS, read_replicas, std::time::Duration::ZERO);
    std::thread::spawn(move || {
        shards::runtime::run(config, listeners, move |mesh| {
            SHARD.set(Some(mesh.shard_id));
            Counted(Frontend::new(mesh, shared.clone()))
        })
    });
    port
}

async fn connect(port: u16) -> Client {
    let (client, conn) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=postgres dbname=postgres"),
        NoTls,
    )
    .await
    .expect("connect");
    tokio::spawn(conn);
    client
}

fn engine_allocations() -> [u64; SHARDS] {
    [0, 1].map(|s| ENGINE_ALLOCATIONS[s].load(Ordering::SeqCst))
}

fn thread_allocations(shard: usize) -> u64 {
    THREAD_ALLOCATIONS[shard].load(Ordering::SeqCst)
}

const ROUNDS: usize = 500;

/// Run `query` ROUNDS times after a warm-up; returns the engine allocations it added on each
/// shard and the whole-thread allocations per query on `shard`.
async fn measure<F, Fut>(shard: usize, mut query: F) -> ([u64; SHARDS], f64)
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    for i in 0..ROUNDS {
        query(i).await;
    }
    let (engine_before, thread_before) = (engine_allocations(), thread_allocations(shard));
    for i in 0..ROUNDS {
        query(i).await;
    }
    let (engine_after, thread_after) = (engine_allocations(), thread_allocations(shard));
    let added = [0, 1].map(|s| engine_after[s] - engine_before[s]);
    let per_query = (thread_after - thread_before) as f64 / ROUNDS as f64;
    (added, per_query)
}

/// `counter` of `shard` in `ringwire.shard_stats`.
async fn stat(client: &Client, shard: usize, counter: &str) -> i64 {
    let msgs = client
        .simple_query(&format!(
            "select {counter} from ringwire.shard_stats where shard = {shard}"
        ))
        .await
        .unwrap();
    msgs.iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(|v| v.parse().unwrap()),
            _ => None,
        })
        .expect("a row for the shard")
}

/// Both servers run one after the other in one test: the allocation counters are global.
#[tokio::test]
async fn a_cached_point_select_does_not_allocate_in_the_engine() {
    point_selects_do_not_allocate(true).await;
    point_selects_do_not_allocate(false).await;
}

async fn point_selects_do_not_allocate(read_replicas: bool) {
    let port = start_server(read_replicas);
    let setup = connect(port).await;
    setup
        .batch_execute(
            "create table acc (aid int4 primary key, abalance int4 not null, filler text);
             insert into acc values (1, 10, 'a'), (2, 20, 'b'), (3, 30, 'c'), (4, 40, 'd')",
        )
        .await
        .unwrap();
    let mut on_shard: Vec<Option<Client>> = (0..SHARDS).map(|_| None).collect();
    for _ in 0..200 {
        let c = connect(port).await;
        let s = shard_of(&c).await;
        if on_shard[s].is_none() {
            on_shard[s] = Some(c);
        }
        if on_shard.iter().all(Option::is_some) {
            break;
        }
    }
    assert!(
        on_shard.iter().all(Option::is_some),
        "no connection on every shard"
    );
    let mut report = Vec::new();
    for (shard, client) in on_shard.iter().enumerate() {
        let client = client.as_ref().unwrap();
        let where_ = match (shard, read_replicas) {
            (0, _) => "the compute's shard",
            (_, true) => "a shard reading its replica",
            (_, false) => "a shard sending to the compute",
        };
        // Which path shard 1's reads took, checked after the measurements.
        let counter = if read_replicas {
            "replica_hits"
        } else {
            "requests_sent"
        };
        let path_before = stat(client, shard, counter).await;

        // Extended protocol, prepared once: Bind/Execute/Sync per query, binary formats.
        let stmt = client
            .prepare("select abalance from acc where aid = $1")
            .await
            .unwrap();
        let (added, per_query) = measure(shard, |i| {
            let stmt = &stmt;
            async move {
                let aid = (i % 4) as i32 + 1;
                let row = client.query_one(stmt, &[&aid]).await.unwrap();
                assert_eq!(row.get::<_, i32>(0), aid * 10);
            }
        })
        .await;
        report.push(format!(
            "replicas {read_replicas}, shard {shard} prepared: engine {added:?}, whole thread {per_query:.1}/query"
        ));
        assert_eq!(
            added,
            [0, 0],
            "prepared point select on {where_} allocated in the engine (per shard)"
        );

        // Extended protocol, unnamed statement: Parse (a plan-cache hit)/Describe/Bind/Execute.
        let (added, per_query) = measure(shard, |_| async move {
            let row = client
                .query_one("select abalance from acc where aid = $1", &[&3i32])
                .await
                .unwrap();
            assert_eq!(row.get::<_, i32>(0), 30);
        })
        .await;
        report.push(format!(
            "replicas {read_replicas}, shard {shard} unnamed: engine {added:?}, whole thread {per_query:.1}/query"
        ));
        assert_eq!(
            added,
            [0, 0],
            "unnamed point select on {where_} allocated in the engine"
        );

        // Simple protocol, the same text each time: a plan-cache hit, text format.
        let (added, per_query) = measure(shard, |_| async move {
            let msgs = client
                .simple_query("select abalance from acc where aid = 2")
                .await
                .unwrap();
            let value = msgs.iter().find_map(|m| match m {
                SimpleQueryMessage::Row(r) => r.get(0),
                _ => None,
            });
            assert_eq!(value, Some("20"));
        })
        .await;
        report.push(format!(
            "replicas {read_replicas}, shard {shard} simple: engine {added:?}, whole thread {per_query:.1}/query"
        ));
        assert_eq!(
            added,
            [0, 0],
            "simple-protocol point select on {where_} allocated in the engine"
        );

        // Simple protocol, a different literal each time: the literal is lifted into a
        // parameter (`sql::lift`), so every one of them runs the one cached plan.
        let (added, per_query) = measure(shard, |i| async move {
            let aid = i % 4 + 1;
            let msgs = client
                .simple_query(&format!("select abalance from acc where aid = {aid}"))
                .await
                .unwrap();
            let value = msgs.iter().find_map(|m| match m {
                SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                _ => None,
            });
            assert_eq!(value, Some((aid * 10).to_string()));
        })
        .await;
        report.push(format!(
            "replicas {read_replicas}, shard {shard} simple, varying literal: engine {added:?}, whole thread {per_query:.1}/query"
        ));
        assert_eq!(
            added,
            [0, 0],
            "simple-protocol point selects with new literals on {where_} allocated in the engine"
        );

        // The count is live: a statement the plan cache has not seen (its new literal is in
        // the select list, which is not lifted) is parsed and planned, which allocates, and is
        // counted on this shard.
        let before = engine_allocations();
        client
            .simple_query(&format!(
                "select abalance + {} from acc where aid = 1",
                7 + shard
            ))
            .await
            .unwrap();
        let after = engine_allocations();
        assert!(
            after[shard] > before[shard],
            "the counting allocator did not see the engine's allocations on shard {shard}"
        );
        if shard == 1 {
            // 4 kinds × 2 × ROUNDS point selects, plus the plan-miss statement above.
            let path = stat(client, shard, counter).await - path_before;
            assert!(
                path >= 8 * ROUNDS as i64,
                "shard 1's point selects did not go through {where_}: {counter} moved {path}"
            );
        }
    }
    // Outside the engine: the connection state machine, the socket layer and the mesh channel.
    eprintln!("{}", report.join("\n"));
}
