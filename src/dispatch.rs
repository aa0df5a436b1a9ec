//! The compute shard and the batching dispatcher that reaches it.
//!
//! **Where compute runs.** The compute worker — every table, the table locks, and the commit
//! sequencer — is a part of shard [`COMPUTE_SHARD`]'s engine, running as tasks on that shard's
//! executor (no extra threads: on a 2-core machine another thread would fight the shards and
//! the clients for the same cores). A statement from a connection on the compute shard calls
//! it directly: no message at all. From any other shard, requests queue in that shard's
//! [`Dispatcher`] outbox; the first request of an executor turn schedules a flush task, which
//! runs after every connection task that was ready in the same turn, so all of them travel as
//! one mesh message. The compute shard answers a batch with one message back (writes that must
//! wait for a lock answer on their own when they get it).
//!
//! **Timestamps.** Reads outside a transaction block read at their shard's frontier
//! (`oracle::Frontiers::read`, one local load). The compute shard commits a transaction by
//! giving it the next timestamp, stamping its intents, and publishing the timestamp to every
//! shard's frontier *before* it replies — so any read that starts after the client sees the
//! commit reads at or after it (strict serializability, see the oracle crate).
//!
//! **Writers** take table-level locks held to the end of their transaction (strict two-phase
//! locking; a lock cycle is a deadlock, 40P01). Inside a transaction block, reads see the
//! block's snapshot plus its own writes.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll, Waker};

use oracle::Frontiers;
use protocol::backend::DataRowWriter;
use protocol::types::{binary, text, TextContext, Type, Value};
use protocol::{Format, PgError, Severity, SqlState};
use shards::runtime::Mesh;

use crate::compute::exec;
use crate::compute::storage::{Table, View};
use crate::compute::{IndexDef, TableDef, TableId, TableRef, Timestamp, TxId};
use crate::sql::expr::SessionInfo;
use crate::sql::plan::{self, TablePlan};

/// The shard whose engine holds the compute worker and the sequencer.
pub const COMPUTE_SHARD: usize = 0;

/// State shared by every shard, created before they start.
pub struct Shared {
    pub frontiers: Arc<Frontiers>,
    /// The catalog as of the latest DDL. Shards copy it when `catalog_version` moves (a load
    /// per query) and plan against their copy; only DDL takes the write lock.
    catalog: RwLock<Catalog>,
    catalog_version: AtomicU64,
}

impl Shared {
    pub fn new(shards: usize) -> Arc<Shared> {
        Arc::new(Shared {
            frontiers: Arc::new(Frontiers::new(shards)),
            catalog: RwLock::new(Catalog::default()),
            catalog_version: AtomicU64::new(0),
        })
    }

    pub fn catalog_version(&self) -> u64 {
        self.catalog_version.load(Ordering::Acquire)
    }

    pub fn catalog_snapshot(&self) -> Catalog {
        self.catalog
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Tables and index names (one relation namespace, as in PostgreSQL).
#[derive(Clone, Default)]
pub struct Catalog {
    tables: BTreeMap<String, TableRef>,
    /// index name → table name
    indexes: BTreeMap<String, String>,
    next_id: TableId,
}

impl plan::Catalog for Catalog {
    fn table(&self, name: &str) -> Option<TableRef> {
        self.tables.get(name).cloned()
    }
    fn relation_exists(&self, name: &str) -> bool {
        self.tables.contains_key(name) || self.indexes.contains_key(name)
    }
}

/// What a remote peek needs of the session that sent it.
#[derive(Clone)]
pub struct SessionSnapshot {
    pub text: TextContext,
    pub user: String,
    pub database: String,
    pub process_id: i32,
    pub statement_timestamp_us: i64,
}

impl SessionInfo for SessionSnapshot {
    fn current_setting(&self, _name: &str) -> Option<String> {
        // Settings are not shipped with a peek; `current_setting()` in a table query is
        // answered as unknown (a known gap, see the compute issue's notes).
        None
    }
    fn text_context(&self) -> &TextContext {
        &self.text
    }
    fn database(&self) -> &str {
        &self.database
    }
    fn user(&self) -> &str {
        &self.user
    }
    fn backend_pid(&self) -> i32 {
        self.process_id
    }
    fn statement_timestamp_us(&self) -> i64 {
        self.statement_timestamp_us
    }
}

pub enum Request {
    /// Run a SELECT (or COPY TO's select) at `view`.
    Peek {
        plan: Arc<TablePlan>,
        params: Vec<Value>,
        view: View,
        session: SessionSnapshot,
        formats: Vec<Format>,
    },
    /// Run an INSERT/UPDATE/DELETE/TRUNCATE/COPY FROM as part of `tx`; with `autocommit`,
    /// commit it at once.
    Write {
        tx: TxId,
        plan: Arc<TablePlan>,
        params: Vec<Value>,
        copy_rows: Vec<Vec<Value>>,
        session: SessionSnapshot,
        formats: Vec<Format>,
        autocommit: bool,
    },
    Commit {
        tx: TxId,
    },
    Abort {
        tx: TxId,
    },
    Ddl {
        plan: Arc<TablePlan>,
    },
    /// Add an index (or the primary key) to a table that may hold rows.
    AddIndex {
        table: String,
        index: IndexDef,
        primary: bool,
    },
}

/// The answer to a request: encoded DataRows (in the formats asked for) and a row count.
#[derive(Default)]
pub struct Answer {
    pub rows: Vec<u8>,
    pub count: u64,
    pub notices: Vec<PgError>,
}

pub type Reply = Result<Answer, PgError>;

pub enum Message {
    Requests {
        from: usize,
        batch: Vec<(u64, Request)>,
    },
    Replies(Vec<(u64, Reply)>),
}

/// Encode one row as a DataRow in `formats` (missing formats are text).
pub fn write_data_row(
    row: &[Value],
    types: &[Type],
    formats: &[Format],
    ctx: &TextContext,
    out: &mut Vec<u8>,
) {
    let mut w = DataRowWriter::begin(out);
    for (i, value) in row.iter().enumerate() {
        if value.is_null() {
            w.null();
            continue;
        }
        match formats.get(i).copied().unwrap_or(Format::Text) {
            Format::Text => w.value_with(|o| text::encode(value, types[i], ctx, o)),
            Format::Binary => w.value_with(|o| binary::encode(value, types[i], o)),
        }
    }
    w.finish();
}

/// Wakes every waiter when table locks are released.
#[derive(Default)]
struct Notify {
    epoch: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

impl Notify {
    fn notify_all(&self) {
        self.epoch.set(self.epoch.get() + 1);
        for w in self.wakers.borrow_mut().drain(..) {
            w.wake();
        }
    }

    fn wait(&self) -> NotifyWait<'_> {
        NotifyWait {
            notify: self,
            epoch: self.epoch.get(),
        }
    }
}

struct NotifyWait<'a> {
    notify: &'a Notify,
    epoch: u64,
}

impl Future for NotifyWait<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.notify.epoch.get() != self.epoch {
            return Poll::Ready(());
        }
        self.notify.wakers.borrow_mut().push(cx.waker().clone());
        Poll::Pending
    }
}

/// The compute worker and sequencer (on [`COMPUTE_SHARD`] only).
pub struct Compute {
    shared: Arc<Shared>,
    tables: RefCell<HashMap<TableId, Table>>,
    /// table → the transaction holding its write lock
    locks: RefCell<HashMap<TableId, TxId>>,
    /// transaction → the table it is waiting to lock (for deadlock detection)
    waiting_for: RefCell<HashMap<TxId, TableId>>,
    /// transaction → tables it holds locks on (and may have intents in)
    tx_tables: RefCell<HashMap<TxId, Vec<TableId>>>,
    released: Notify,
    last_commit: Cell<Timestamp>,
}

fn deadlock() -> PgError {
    PgError::new(SqlState(*b"40P01"), "deadlock detected")
        .with_detail("Two transactions wait for table locks the other holds.")
        .with_hint("See server log for query details.")
}

impl Compute {
    pub fn new(shared: Arc<Shared>) -> Compute {
        Compute {
            shared,
            tables: RefCell::new(HashMap::new()),
            locks: RefCell::new(HashMap::new()),
            waiting_for: RefCell::new(HashMap::new()),
            tx_tables: RefCell::new(HashMap::new()),
            released: Notify::default(),
            last_commit: Cell::new(0),
        }
    }

    pub async fn handle(&self, request: Request) -> Reply {
        match request {
            Request::Peek {
                plan,
                params,
                view,
                session,
                formats,
            } => self.peek(&plan, &params, view, &session, &formats),
            Request::Write {
                tx,
                plan,
                params,
                copy_rows,
                session,
                formats,
                autocommit,
            } => {
                let result = self
                    .write(tx, &plan, &params, copy_rows, &session, &formats)
                    .await;
                if autocommit {
                    match &result {
                        Ok(_) => {
                            self.commit(tx);
                        }
                        Err(_) => self.abort(tx),
                    }
                }
                result
            }
            Request::Commit { tx } => {
                self.commit(tx);
                Ok(Answer::default())
            }
            Request::Abort { tx } => {
                self.abort(tx);
                Ok(Answer::default())
            }
            Request::Ddl { plan } => self.ddl(&plan).await,
            Request::AddIndex {
                table,
                index,
                primary,
            } => {
                self.add_index(&table, index, primary).await?;
                self.shared.catalog_version.fetch_add(1, Ordering::AcqRel);
                Ok(Answer::default())
            }
        }
    }

    fn peek(
        &self,
        plan: &TablePlan,
        params: &[Value],
        view: View,
        session: &SessionSnapshot,
        formats: &[Format],
    ) -> Reply {
        let (TablePlan::Select(select) | TablePlan::CopyTo { source: select, .. }) = plan else {
            return Err(PgError::new(
                SqlState::INTERNAL_ERROR,
                "peek of a non-SELECT plan",
            ));
        };
        let tables = self.tables.borrow();
        let table = tables.get(&select.table).ok_or_else(dropped_table)?;
        let types: Vec<Type> = select.columns.iter().map(|c| c.1).collect();
        let mut answer = Answer::default();
        let ctx = &session.text;
        let copy = match plan {
            TablePlan::CopyTo { format, .. } => Some(format),
            _ => None,
        };
        if let Some(format) = copy.filter(|f| f.header) {
            let names: Vec<Value> = select
                .columns
                .iter()
                .map(|c| Value::Text(c.0.clone()))
                .collect();
            let text_types = vec![
                Type {
                    scalar: protocol::types::Scalar::Text,
                    array: false
                };
                names.len()
            ];
            let start = protocol::wire::begin_message(&mut answer.rows, b'd');
            if format.csv {
                exec::format_copy_csv(&names, &text_types, ctx, &mut answer.rows);
            } else {
                exec::format_copy_text(&names, &text_types, ctx, &mut answer.rows);
            }
            protocol::wire::finish_message(&mut answer.rows, start);
        }
        answer.count = exec::select(table, select, params, view, session, &mut |row| {
            match copy {
                // COPY TO: one CopyData per row.
                Some(format) => {
                    let start = protocol::wire::begin_message(&mut answer.rows, b'd');
                    if format.csv {
                        exec::format_copy_csv(row, &types, ctx, &mut answer.rows);
                    } else {
                        exec::format_copy_text(row, &types, ctx, &mut answer.rows);
                    }
                    protocol::wire::finish_message(&mut answer.rows, start);
                }
                None => write_data_row(row, &types, formats, ctx, &mut answer.rows),
            }
            Ok(())
        })?;
        Ok(answer)
    }

    /// Take `table`'s write lock for `tx`, waiting while another transaction holds it.
    async fn lock(&self, table: TableId, tx: TxId) -> Result<(), PgError> {
        loop {
            let owner = self.locks.borrow().get(&table).copied();
            match owner {
                None => {
                    self.locks.borrow_mut().insert(table, tx);
                    self.tx_tables
                        .borrow_mut()
                        .entry(tx)
                        .or_default()
                        .push(table);
                    return Ok(());
                }
                Some(o) if o == tx => return Ok(()),
                Some(owner) => {
                    if self.waits_for(owner, tx) {
                        return Err(deadlock());
                    }
                    self.waiting_for.borrow_mut().insert(tx, table);
                    self.released.wait().await;
                    self.waiting_for.borrow_mut().remove(&tx);
                }
            }
        }
    }

    /// Whether `from` (transitively, through the locks it waits for) waits for `tx`: then `tx`
    /// waiting for `from` would close a cycle.
    fn waits_for(&self, mut from: TxId, tx: TxId) -> bool {
        let locks = self.locks.borrow();
        let waiting = self.waiting_for.borrow();
        for _ in 0..=locks.len() {
            match waiting.get(&from).and_then(|t| locks.get(t)) {
                Some(&next) if next == tx => return true,
                Some(&next) => from = next,
                None => return false,
            }
        }
        false
    }

    async fn write(
        &self,
        tx: TxId,
        plan: &TablePlan,
        params: &[Value],
        copy_rows: Vec<Vec<Value>>,
        session: &SessionSnapshot,
        formats: &[Format],
    ) -> Reply {
        let table_ids: Vec<TableId> = match plan {
            TablePlan::Insert(p) => vec![p.table],
            TablePlan::Update(p) => vec![p.table],
            TablePlan::Delete(p) => vec![p.table],
            TablePlan::CopyFrom { table, .. } => vec![table.id],
            TablePlan::Truncate { tables } => {
                let catalog = self
                    .shared
                    .catalog
                    .read()
                    .unwrap_or_else(|e| e.into_inner());
                let mut ids = Vec::new();
                for name in tables {
                    ids.push(
                        catalog
                            .tables
                            .get(name)
                            .ok_or_else(|| no_such_table(name))?
                            .id,
                    );
                }
                ids
            }
            _ => {
                return Err(PgError::new(
                    SqlState::INTERNAL_ERROR,
                    "write of a non-write plan",
                ))
            }
        };
        for id in &table_ids {
            self.lock(*id, tx).await?;
        }
        let mut tables = self.tables.borrow_mut();
        let mut answer = Answer::default();
        let ctx = &session.text;
        let (returning_types, mut sink): (Vec<Type>, Vec<Vec<Value>>) = (
            match plan {
                TablePlan::Insert(p) => p.returning_columns.iter().map(|c| c.1).collect(),
                TablePlan::Update(p) => p.returning_columns.iter().map(|c| c.1).collect(),
                TablePlan::Delete(p) => p.returning_columns.iter().map(|c| c.1).collect(),
                _ => vec![],
            },
            Vec::new(),
        );
        let mut out = |row: &[Value]| {
            sink.push(row.to_vec());
            Ok(())
        };
        let outcome = match plan {
            TablePlan::Insert(p) => {
                let t = tables.get_mut(&p.table).ok_or_else(dropped_table)?;
                exec::insert(t, p, params, tx, session, &mut out)?
            }
            TablePlan::Update(p) => {
                let t = tables.get_mut(&p.table).ok_or_else(dropped_table)?;
                exec::update(t, p, params, tx, session, &mut out)?
            }
            TablePlan::Delete(p) => {
                let t = tables.get_mut(&p.table).ok_or_else(dropped_table)?;
                exec::delete(t, p, params, tx, session, &mut out)?
            }
            TablePlan::CopyFrom { table, .. } => {
                let t = tables.get_mut(&table.id).ok_or_else(dropped_table)?;
                exec::insert_rows(t, copy_rows, tx, ctx)?
            }
            TablePlan::Truncate { .. } => {
                for id in &table_ids {
                    let t = tables.get_mut(id).ok_or_else(dropped_table)?;
                    t.truncate(tx)?;
                }
                exec::WriteOutcome { rows_affected: 0 }
            }
            _ => unreachable!("checked above"),
        };
        for row in &sink {
            write_data_row(row, &returning_types, formats, ctx, &mut answer.rows);
        }
        answer.count = outcome.rows_affected;
        Ok(answer)
    }

    /// Commit `tx`: one timestamp for all its tables, published to every shard before the
    /// caller replies. Returns the timestamp (the previous one if `tx` wrote nothing).
    pub fn commit(&self, tx: TxId) -> Timestamp {
        let held = self.tx_tables.borrow_mut().remove(&tx).unwrap_or_default();
        if held.is_empty() {
            return self.last_commit.get();
        }
        let ts = self.last_commit.get() + 1;
        let mut tables = self.tables.borrow_mut();
        let mut locks = self.locks.borrow_mut();
        for id in &held {
            if let Some(t) = tables.get_mut(id) {
                t.commit(tx, ts);
            }
            locks.remove(id);
        }
        self.last_commit.set(ts);
        self.shared.frontiers.publish(ts);
        drop((tables, locks));
        self.released.notify_all();
        ts
    }

    pub fn abort(&self, tx: TxId) {
        let held = self.tx_tables.borrow_mut().remove(&tx).unwrap_or_default();
        let mut tables = self.tables.borrow_mut();
        let mut locks = self.locks.borrow_mut();
        for id in &held {
            if let Some(t) = tables.get_mut(id) {
                t.abort(tx);
            }
            locks.remove(id);
        }
        drop((tables, locks));
        if !held.is_empty() {
            self.released.notify_all();
        }
    }

    /// DDL runs on the compute shard, takes the write lock of the tables it changes (so it
    /// waits for open writers), and bumps the catalog version every shard checks.
    async fn ddl(&self, plan: &TablePlan) -> Reply {
        let mut answer = Answer::default();
        match plan {
            TablePlan::CreateTable { def, if_not_exists } => {
                let mut catalog = self
                    .shared
                    .catalog
                    .write()
                    .unwrap_or_else(|e| e.into_inner());
                if catalog.tables.contains_key(&def.name) || catalog.indexes.contains_key(&def.name)
                {
                    if *if_not_exists {
                        answer.notices.push(notice(format!(
                            "relation \"{}\" already exists, skipping",
                            def.name
                        )));
                        return Ok(answer);
                    }
                    return Err(PgError::new(
                        SqlState(*b"42P07"),
                        format!("relation \"{}\" already exists", def.name),
                    ));
                }
                catalog.next_id += 1;
                let def: TableRef = Arc::new(TableDef {
                    id: catalog.next_id,
                    ..def.clone()
                });
                for index in def.primary_key.iter().chain(def.indexes.iter()) {
                    if catalog.relation_exists_name(&index.name) {
                        return Err(PgError::new(
                            SqlState(*b"42P07"),
                            format!("relation \"{}\" already exists", index.name),
                        ));
                    }
                }
                for index in def.primary_key.iter().chain(def.indexes.iter()) {
                    catalog.indexes.insert(index.name.clone(), def.name.clone());
                }
                catalog.tables.insert(def.name.clone(), def.clone());
                self.tables.borrow_mut().insert(def.id, Table::new(def));
            }
            TablePlan::DropTable { names, if_exists } => {
                for name in names {
                    let id = self
                        .shared
                        .catalog
                        .read()
                        .unwrap_or_else(|e| e.into_inner())
                        .tables
                        .get(name)
                        .map(|t| t.id);
                    let Some(id) = id else {
                        if *if_exists {
                            answer
                                .notices
                                .push(notice(format!("table \"{name}\" does not exist, skipping")));
                            continue;
                        }
                        return Err(no_such_table(name));
                    };
                    // Wait for writers, then drop; the DDL's own "transaction" is the drop.
                    let ddl_tx = u64::MAX - id as u64;
                    self.lock(id, ddl_tx).await?;
                    let mut catalog = self
                        .shared
                        .catalog
                        .write()
                        .unwrap_or_else(|e| e.into_inner());
                    catalog.tables.remove(name);
                    catalog.indexes.retain(|_, t| t != name);
                    self.tables.borrow_mut().remove(&id);
                    drop(catalog);
                    self.tx_tables.borrow_mut().remove(&ddl_tx);
                    self.locks.borrow_mut().remove(&id);
                    self.released.notify_all();
                }
            }
            TablePlan::DropIndex { names, if_exists } => {
                for name in names {
                    let table = self
                        .shared
                        .catalog
                        .read()
                        .unwrap_or_else(|e| e.into_inner())
                        .indexes
                        .get(name)
                        .cloned();
                    match table {
                        Some(table) => self.drop_index(&table, name).await?,
                        None if *if_exists => answer
                            .notices
                            .push(notice(format!("index \"{name}\" does not exist, skipping"))),
                        None => {
                            return Err(PgError::new(
                                SqlState::UNDEFINED_OBJECT,
                                format!("index \"{name}\" does not exist"),
                            ))
                        }
                    }
                }
            }
            TablePlan::CreateIndex {
                table,
                index,
                if_not_exists,
            } => {
                let exists = self
                    .shared
                    .catalog
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .relation_exists_name(&index.name);
                if exists && *if_not_exists {
                    answer.notices.push(notice(format!(
                        "relation \"{}\" already exists, skipping",
                        index.name
                    )));
                    return Ok(answer);
                }
                self.add_index(table, index.clone(), false).await?;
            }
            _ => {
                return Err(PgError::new(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    "this DDL is not supported by ringwire yet",
                ))
            }
        }
        self.shared.catalog_version.fetch_add(1, Ordering::AcqRel);
        Ok(answer)
    }
}

impl Compute {
    /// Rebuild `table` with one more index (or its primary key) under the table's write lock:
    /// the rows of the latest state are re-inserted into a new table, where the new index's
    /// uniqueness (and, for a primary key, NOT NULL) is checked; on any error the old table
    /// stays. The rebuilt rows are stamped with timestamp 0, so every snapshot sees them
    /// (PostgreSQL blocks readers for this DDL; ringwire lets older snapshots read the rebuilt
    /// table instead).
    async fn add_index(&self, table: &str, index: IndexDef, primary: bool) -> Result<(), PgError> {
        let def = {
            let catalog = self
                .shared
                .catalog
                .read()
                .unwrap_or_else(|e| e.into_inner());
            if catalog.relation_exists_name(&index.name) {
                return Err(PgError::new(
                    SqlState(*b"42P07"),
                    format!("relation \"{}\" already exists", index.name),
                ));
            }
            catalog
                .tables
                .get(table)
                .cloned()
                .ok_or_else(|| no_such_table(table))?
        };
        let ddl_tx = u64::MAX - def.id as u64;
        self.lock(def.id, ddl_tx).await?;
        let result = self.rebuild_with_index(&def, index, primary);
        // Release the DDL's lock whatever happened.
        self.tx_tables.borrow_mut().remove(&ddl_tx);
        self.locks.borrow_mut().remove(&def.id);
        self.released.notify_all();
        result
    }

    fn rebuild_with_index(
        &self,
        def: &TableRef,
        index: IndexDef,
        primary: bool,
    ) -> Result<(), PgError> {
        let mut new_def = (**def).clone();
        if primary {
            if new_def.primary_key.is_some() {
                return Err(PgError::new(
                    SqlState(*b"42P16"),
                    format!(
                        "multiple primary keys for table \"{}\" are not allowed",
                        def.name
                    ),
                ));
            }
            for &c in &index.columns {
                new_def.columns[c].not_null = true;
            }
            new_def.primary_key = Some(index.clone());
        } else {
            new_def.indexes.push(index.clone());
        }
        self.replace_table(def, Arc::new(new_def))?;
        let mut catalog = self
            .shared
            .catalog
            .write()
            .unwrap_or_else(|e| e.into_inner());
        catalog.indexes.insert(index.name.clone(), def.name.clone());
        Ok(())
    }

    /// Swap `def`'s table for one built to `new_def` holding the same latest rows (checked
    /// against `new_def`'s constraints), stamped with timestamp 0. Caller holds the table's
    /// write lock.
    fn replace_table(&self, def: &TableRef, new_def: TableRef) -> Result<(), PgError> {
        let mut rebuilt = Table::new(new_def.clone());
        let rebuild_tx = u64::MAX / 2 + def.id as u64;
        {
            let tables = self.tables.borrow();
            let old = tables.get(&def.id).ok_or_else(dropped_table)?;
            let ctx = TextContext::default();
            for (_, row) in old.scan(View::LATEST) {
                rebuilt.insert(rebuild_tx, row.to_vec(), &ctx)?;
            }
        }
        rebuilt.commit(rebuild_tx, 0);
        self.tables.borrow_mut().insert(def.id, rebuilt);
        let mut catalog = self
            .shared
            .catalog
            .write()
            .unwrap_or_else(|e| e.into_inner());
        catalog.tables.insert(def.name.clone(), new_def);
        Ok(())
    }

    /// `DROP INDEX name` on `table`: the table is rebuilt without it. The primary key's index
    /// cannot be dropped (PostgreSQL: 2BP01).
    async fn drop_index(&self, table: &str, name: &str) -> Result<(), PgError> {
        let def = {
            let catalog = self
                .shared
                .catalog
                .read()
                .unwrap_or_else(|e| e.into_inner());
            catalog
                .tables
                .get(table)
                .cloned()
                .ok_or_else(|| no_such_table(table))?
        };
        if def.primary_key.as_ref().is_some_and(|pk| pk.name == name) {
            return Err(PgError::new(
                SqlState(*b"2BP01"),
                format!("cannot drop index {name} because constraint {name} on table {table} requires it"),
            )
            .with_hint(format!("You can drop constraint {name} on table {table} instead.")));
        }
        let ddl_tx = u64::MAX - def.id as u64;
        self.lock(def.id, ddl_tx).await?;
        let mut new_def = (*def).clone();
        new_def.indexes.retain(|i| i.name != name);
        let result = self.replace_table(&def, Arc::new(new_def));
        if result.is_ok() {
            let mut catalog = self
                .shared
                .catalog
                .write()
                .unwrap_or_else(|e| e.into_inner());
            catalog.indexes.remove(name);
        }
        self.tx_tables.borrow_mut().remove(&ddl_tx);
        self.locks.borrow_mut().remove(&def.id);
        self.released.notify_all();
        result
    }
}

impl Catalog {
    fn relation_exists_name(&self, name: &str) -> bool {
        self.tables.contains_key(name) || self.indexes.contains_key(name)
    }
}

fn notice(message: String) -> PgError {
    PgError {
        severity: Severity::Notice,
        ..PgError::new(SqlState(*b"42P07"), message)
    }
}

fn no_such_table(name: &str) -> PgError {
    PgError::new(
        SqlState::UNDEFINED_TABLE,
        format!("table \"{name}\" does not exist"),
    )
}

fn dropped_table() -> PgError {
    PgError::new(
        SqlState::UNDEFINED_TABLE,
        "the table was dropped while the statement was planned",
    )
}

/// A reply being waited for.
#[derive(Default)]
struct Slot {
    reply: RefCell<Option<Reply>>,
    waker: RefCell<Option<Waker>>,
}

struct SlotWait(Rc<Slot>);

impl Future for SlotWait {
    type Output = Reply;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Reply> {
        match self.0.reply.borrow_mut().take() {
            Some(r) => Poll::Ready(r),
            None => {
                *self.0.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A shard's way to the compute: direct on the compute shard, batched messages elsewhere.
pub struct Dispatcher {
    pub shard_id: usize,
    mesh: Mesh<Message>,
    pub compute: Option<Rc<Compute>>,
    outbox: RefCell<Vec<(u64, Request)>>,
    flush_scheduled: Cell<bool>,
    next_id: Cell<u64>,
    waiting: RefCell<HashMap<u64, Rc<Slot>>>,
    /// Batches sent and requests in them (mean batch size = ratio).
    pub batches_sent: Cell<u64>,
    pub requests_sent: Cell<u64>,
}

impl Dispatcher {
    pub fn new(mesh: Mesh<Message>, shared: Arc<Shared>) -> Rc<Dispatcher> {
        let shard_id = mesh.shard_id;
        Rc::new(Dispatcher {
            shard_id,
            mesh,
            compute: (shard_id == COMPUTE_SHARD).then(|| Rc::new(Compute::new(shared))),
            outbox: RefCell::new(Vec::new()),
            flush_scheduled: Cell::new(false),
            next_id: Cell::new(0),
            waiting: RefCell::new(HashMap::new()),
            batches_sent: Cell::new(0),
            requests_sent: Cell::new(0),
        })
    }

    /// Send `request` to the compute and wait for its reply.
    pub async fn call(self: &Rc<Self>, request: Request) -> Reply {
        if let Some(compute) = &self.compute {
            return compute.handle(request).await;
        }
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let slot = Rc::new(Slot::default());
        self.waiting.borrow_mut().insert(id, slot.clone());
        self.outbox.borrow_mut().push((id, request));
        if !self.flush_scheduled.replace(true) {
            // Runs after the other tasks already queued in this turn: their requests join.
            let me = self.clone();
            glommio::spawn_local(async move { me.flush() }).detach();
        }
        SlotWait(slot).await
    }

    fn flush(&self) {
        self.flush_scheduled.set(false);
        let batch = std::mem::take(&mut *self.outbox.borrow_mut());
        if batch.is_empty() {
            return;
        }
        self.batches_sent.set(self.batches_sent.get() + 1);
        self.requests_sent
            .set(self.requests_sent.get() + batch.len() as u64);
        if !self.mesh.send(
            COMPUTE_SHARD,
            Message::Requests {
                from: self.shard_id,
                batch,
            },
        ) {
            log::error!("shard {}: the compute shard is gone", self.shard_id);
        }
    }

    /// A mesh message arrived on this shard.
    pub fn on_message(self: &Rc<Self>, msg: Message) {
        match msg {
            Message::Replies(replies) => {
                let mut waiting = self.waiting.borrow_mut();
                for (id, reply) in replies {
                    if let Some(slot) = waiting.remove(&id) {
                        *slot.reply.borrow_mut() = Some(reply);
                        if let Some(w) = slot.waker.borrow_mut().take() {
                            w.wake();
                        }
                    }
                }
            }
            Message::Requests { from, batch } => {
                let Some(compute) = self.compute.clone() else {
                    log::error!(
                        "shard {}: compute requests sent to a shard without compute",
                        self.shard_id
                    );
                    return;
                };
                let me = self.clone();
                glommio::spawn_local(async move {
                    // Reads answer together in one message; writes may wait for locks, so
                    // each answers when it is done.
                    let mut replies = Vec::with_capacity(batch.len());
                    for (id, request) in batch {
                        if matches!(request, Request::Write { .. } | Request::Ddl { .. }) {
                            let (compute, me) = (compute.clone(), me.clone());
                            glommio::spawn_local(async move {
                                let reply = compute.handle(request).await;
                                me.mesh.send(from, Message::Replies(vec![(id, reply)]));
                            })
                            .detach();
                        } else {
                            replies.push((id, compute.handle(request).await));
                        }
                    }
                    if !replies.is_empty() {
                        me.mesh.send(from, Message::Replies(replies));
                    }
                })
                .detach();
            }
        }
    }
}
