//! One client's relay to the upstream server.
//!
//! The client's messages are forwarded in batches (everything it sent in one read). Each
//! forwarded message, and each reply ringwire answers itself, becomes an [`Expect`] in a queue;
//! the server's replies are matched against the queue in order, so the client gets exactly the
//! replies PostgreSQL would have sent, in PostgreSQL's order:
//!
//! - **Prepared statements.** A client's statement names map onto one per-shard upstream name
//!   per (text, parameter types, settings). A Parse of a statement the connection already has
//!   is not sent: its ParseComplete is made here, in its place in the queue. A Bind or Describe
//!   on a connection that lacks the statement sends a Parse first and swallows its reply.
//!   Close of a statement is answered here (the upstream statement stays for the next client).
//! - **Errors.** After an ErrorResponse the server skips to Sync; so does the queue (replies
//!   ringwire would have made in between are dropped, as PostgreSQL would not send them).
//! - **Transaction pooling.** The connection goes back to the shard's pool on ReadyForQuery
//!   `I` with nothing outstanding, unless the session pinned it (`classify`).
//! - **Settings.** Committed SETs (and the client's startup parameters) are replayed on a
//!   connection whose settings differ, as one swallowed Query in front of the batch:
//!   `RESET ALL; SET …`. A SET in a transaction that rolls back is never recorded.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::rc::Rc;

use futures_lite::{AsyncWrite, AsyncWriteExt};
use protocol::backend;
use protocol::frontend::{self, FrontendMessage, Target};
use protocol::wire::{put_cstr, split_frame};
use protocol::{PgError, Severity, SqlState};
use shards::engine::{no_statement, CancelToken, SessionStart};

use super::classify::{classify, deallocated, SetChange};
use super::pool::{ServerConn, ShardUpstream, StatementKey};

/// Replies piled up past this are written to the client mid-batch (a large result streams).
const CLIENT_FLUSH_BYTES: usize = 256 << 10;

/// A client's prepared statement.
pub struct ClientStatement {
    sql: Box<str>,
    /// Declared parameter types, as on the wire (big-endian OIDs).
    param_types: Box<[u8]>,
    /// Upstream statement id; `None` for the unnamed statement (relayed as unnamed).
    upstream: Option<u32>,
}

impl ClientStatement {
    fn upstream_name(&self) -> String {
        self.upstream
            .map_or_else(String::new, |id| format!("ringwire_{id}"))
    }

    fn encode_parse(&self, out: &mut Vec<u8>) {
        let types: Vec<u32> = self
            .param_types
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        frontend::encode_parse(out, &self.upstream_name(), &self.sql, &types);
    }
}

/// The message a queued reply answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Parse,
    Bind,
    Close,
    DescribeStatement,
    DescribePortal,
    Execute,
    Sync,
    /// A simple Query or a FunctionCall: ends with ReadyForQuery, errors do not skip.
    Query,
}

enum Done {
    Nothing,
    /// A Parse of this upstream statement, marked prepared on the connection when queued:
    /// unmarked if it fails or is skipped.
    Prepared(u32),
    /// A Parse of the unnamed statement from this client statement (marked when queued).
    Unnamed(Rc<ClientStatement>),
    /// Bind of this upstream statement (0A000 forgets it).
    Bound(u32),
    /// The settings replay finished: the connection has the session's settings.
    Settings(u64),
    /// A client Query and the SETs in it, pending once it completes.
    Query(Vec<SetChange>),
}

enum Expect {
    /// A reply the server sends. `emit: false` for messages ringwire added (their replies are
    /// swallowed; an ErrorResponse still reaches the client).
    Server { kind: Kind, emit: bool, done: Done },
    /// A reply ringwire makes in place of one the server is not asked for.
    Local(Local),
}

enum Local {
    ParseComplete,
    CloseComplete,
    Error(PgError),
    /// A Query answered here: CommandComplete with this tag, then ReadyForQuery.
    Command(&'static str),
}

/// One client's relay state (the engine's per-connection session).
pub struct Session {
    shard: Rc<ShardUpstream>,
    server: Option<ServerConn>,
    /// Transaction status of the last ReadyForQuery (`I`, `T`, `E`).
    tx: u8,
    statements: std::collections::HashMap<Box<str>, Rc<ClientStatement>>,
    /// `SET name TO value` for each startup parameter: RESET ALL returns to these.
    startup_sets: Vec<(String, String)>,
    /// Committed SETs, by lower-cased name.
    sets: Vec<(String, String)>,
    settings: u64,
    /// SETs of the open transaction, recorded if it commits.
    pending_sets: Vec<SetChange>,
    /// The transaction failed or was rolled back: drop `pending_sets` at its end.
    tx_rolled_back: bool,
    savepoint_in_tx: bool,
    /// The session holds state only its connection has: never give the connection back.
    pinned: bool,
    expect: VecDeque<Expect>,
    /// The first `must_answer` entries of `expect` will be answered without more client input
    /// (the client sent Sync, Flush or a Query after them).
    must_answer: usize,
    copy_in: bool,
    /// A reply made here was an error: drop client messages until Sync, as the server would.
    skip_until_sync: bool,
    to_send: Vec<u8>,
    /// The value of each reported parameter as this client was last shown it (startup, then
    /// ParameterStatus). A pooled connection's own changes (the settings replay's RESET ALL
    /// putting back another client's application_name) reach the client only where they
    /// change what it was shown, as PostgreSQL would report them.
    shown: Vec<(Box<str>, Box<str>)>,
}

fn fingerprint(startup: &[(String, String)], sets: &[(String, String)]) -> u64 {
    if startup.is_empty() && sets.is_empty() {
        return 0;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    startup.hash(&mut h);
    sets.hash(&mut h);
    h.finish() | 1
}

fn quote_literal(v: &str) -> String {
    format!("'{}'", v.replace('\'', "''"))
}

fn valid_guc_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

fn lost(why: &str) -> PgError {
    PgError::new(
        SqlState::CONNECTION_FAILURE,
        format!("the connection to the upstream server was lost: {why}"),
    )
}

impl Session {
    pub fn open(shard: Rc<ShardUpstream>, start: &SessionStart<'_>) -> Result<Session, PgError> {
        let mut startup_sets = Vec::new();
        let mut add = |name: &str, value: &str| {
            if valid_guc_name(name) {
                startup_sets.push((
                    name.to_ascii_lowercase(),
                    format!("SET {name} TO {}", quote_literal(value)),
                ));
            } else {
                log::info!("ignoring startup parameter {name:?}");
            }
        };
        for (name, value) in start.params.iter() {
            match name {
                "user" | "database" | "replication" => {}
                "options" => {
                    // `-c name=value` and `--name=value`, as PostgreSQL reads them.
                    let mut words = value.split_whitespace();
                    while let Some(w) = words.next() {
                        let setting = match w {
                            "-c" => words.next(),
                            _ => w.strip_prefix("-c").or_else(|| w.strip_prefix("--")),
                        };
                        if let Some((n, v)) = setting.and_then(|s| s.split_once('=')) {
                            add(&n.replace('-', "_"), v);
                        }
                    }
                }
                _ => add(name, value),
            }
        }
        let settings = fingerprint(&startup_sets, &[]);
        let mut session = Session {
            shard,
            server: None,
            tx: b'I',
            statements: Default::default(),
            startup_sets,
            sets: Vec::new(),
            settings,
            pending_sets: Vec::new(),
            tx_rolled_back: false,
            savepoint_in_tx: false,
            pinned: false,
            expect: VecDeque::new(),
            must_answer: 0,
            copy_in: false,
            skip_until_sync: false,
            to_send: Vec::new(),
            shown: Vec::new(),
        };
        session.shown = session
            .shard
            .parameters
            .iter()
            .map(|(name, value)| {
                let value = session.startup_value(name).unwrap_or(value);
                (name.as_str().into(), value.into())
            })
            .collect();
        Ok(session)
    }
}

/// Whether a ParameterStatus from the server tells the client something `shown` does not
/// have; records it there.
fn news(shown: &mut Vec<(Box<str>, Box<str>)>, raw: &[u8]) -> bool {
    let mut fields = raw.get(5..).unwrap_or_default().split(|&b| b == 0);
    let (Some(name), Some(value)) = (fields.next(), fields.next()) else {
        return true;
    };
    let (Ok(name), Ok(value)) = (std::str::from_utf8(name), std::str::from_utf8(value)) else {
        return true;
    };
    match shown.iter_mut().find(|(n, _)| &**n == name) {
        Some((_, shown)) if &**shown == value => false,
        Some((_, shown)) => {
            *shown = value.into();
            true
        }
        None => {
            shown.push((name.into(), value.into()));
            true
        }
    }
}

impl Session {
    /// The value the client asked for at startup, for the ParameterStatus it is shown.
    pub fn startup_value(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.startup_sets
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, stmt)| stmt.split_once(" TO '"))
            .map(|(_, v)| v.strip_suffix('\'').unwrap_or(v))
    }

    /// The client is gone. A clean connection goes back to the pool; one in a transaction is
    /// rolled back first (on a task of its own); one with replies outstanding or pinned state
    /// is closed, which makes the server roll back.
    pub fn close(&mut self) {
        let Some(mut server) = self.server.take() else {
            return;
        };
        let clean = self.expect.is_empty() && !self.copy_in;
        if clean && self.tx == b'I' && !self.pinned {
            self.shard.release(server);
        } else if clean && !self.pinned {
            let shard = self.shard.clone();
            glommio::spawn_local(async move {
                let mut q = Vec::new();
                frontend::encode_query(&mut q, "ROLLBACK");
                if server.stream.write_all(&q).await.is_err() {
                    return;
                }
                loop {
                    let frame = match server.buf.frame() {
                        Ok(Some((frame, len))) => {
                            Some((frame.tag, frame.body.first().copied(), len))
                        }
                        Ok(None) => None,
                        Err(_) => return,
                    };
                    match frame {
                        Some((tag, status, len)) => {
                            server.buf.consume(len);
                            if tag == b'Z' {
                                if status == Some(b'I') {
                                    shard.release(server);
                                }
                                return;
                            }
                        }
                        None => {
                            if server.buf.fill(&mut server.stream).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            })
            .detach();
        }
    }

    /// See [`shards::engine::Engine::relay`].
    pub async fn relay(
        &mut self,
        frames: &[u8],
        cancel: &CancelToken,
        out: &mut Vec<u8>,
        client: &mut (dyn AsyncWrite + Unpin),
    ) -> Result<(), PgError> {
        if self.server.is_none() {
            match self.shard.acquire(self.settings).await {
                Ok(server) => self.server = Some(server),
                Err(why) => {
                    log::warn!("upstream: {why}");
                    self.fail_locally(frames, out, lost(&why));
                    return Ok(());
                }
            }
        }
        self.to_send.clear();
        let settings_match = self
            .server
            .as_ref()
            .is_some_and(|s| s.settings == self.settings);
        if !settings_match && self.expect.is_empty() && self.tx == b'I' {
            self.queue_settings_replay();
        }
        let mut runs = false;
        let mut rest = frames;
        while let Some((frame, len)) =
            split_frame(rest, usize::MAX).expect("the connection loop checked the frames")
        {
            let raw = &rest[..len];
            rest = &rest[len..];
            runs |= matches!(frame.tag, b'Q' | b'E' | b'F');
            log::trace!("client {:?}", frame.tag as char);
            self.translate(frame.tag, raw)?;
        }
        if runs {
            // A cancel that arrived while nothing of this client ran is withdrawn.
            cancel.reset();
        }
        let server = self.server.as_mut().expect("acquired above");
        if !self.to_send.is_empty() {
            if let Err(e) = server.stream.write_all(&self.to_send).await {
                self.upstream_lost(out, &e.to_string());
                return Ok(());
            }
        }
        self.collect_replies(cancel, out, client).await;
        if self.expect.is_empty() && !self.copy_in && self.tx == b'I' && !self.pinned {
            if let Some(server) = self.server.take() {
                self.shard.release(server);
            }
        }
        Ok(())
    }

    fn queue_settings_replay(&mut self) {
        let mut q = String::from("RESET ALL");
        for (_, stmt) in self.startup_sets.iter().chain(self.sets.iter()) {
            q.push_str("; ");
            q.push_str(stmt);
        }
        frontend::encode_query(&mut self.to_send, &q);
        self.expect.push_back(Expect::Server {
            kind: Kind::Query,
            emit: false,
            done: Done::Settings(self.settings),
        });
        self.must_answer = self.expect.len();
    }

    fn push(&mut self, kind: Kind, emit: bool, done: Done) {
        self.expect.push_back(Expect::Server { kind, emit, done });
    }

    fn push_local(&mut self, local: Local) {
        if matches!(local, Local::Error(_)) {
            self.skip_until_sync = true;
        }
        self.expect.push_back(Expect::Local(local));
    }

    /// Queue one client message: forward it (rewritten where statement names are mapped) or
    /// answer it here.
    fn translate(&mut self, tag: u8, raw: &[u8]) -> Result<(), PgError> {
        if self.copy_in {
            // COPY FROM STDIN data goes straight through; the server ignores Flush and Sync
            // meanwhile. Anything else ends the copy (the server reports the violation).
            self.to_send.extend_from_slice(raw);
            if !matches!(tag, b'd' | b'H' | b'S') {
                self.copy_in = false;
                self.must_answer = self.expect.len();
            }
            return Ok(());
        }
        if self.skip_until_sync && tag != b'S' {
            return Ok(());
        }
        let frame = split_frame(raw, usize::MAX)
            .expect("checked")
            .expect("whole")
            .0;
        let msg = match FrontendMessage::parse(frame) {
            Ok(m) => m,
            Err(e) if e.severity == Severity::Fatal => return Err(e),
            // Malformed: let the server report it exactly as it would.
            Err(_) => {
                self.to_send.extend_from_slice(raw);
                let kind = match tag {
                    b'Q' | b'F' => Kind::Query,
                    b'P' => Kind::Parse,
                    b'B' => Kind::Bind,
                    b'D' => Kind::DescribePortal,
                    b'C' => Kind::Close,
                    b'E' => Kind::Execute,
                    _ => Kind::Sync,
                };
                self.push(kind, true, Done::Nothing);
                if kind == Kind::Query {
                    self.must_answer = self.expect.len();
                }
                return Ok(());
            }
        };
        match msg {
            FrontendMessage::Query { sql } => {
                if let Some(name) = deallocated(sql)
                    .filter(|n| self.tx != b'E' && self.statements.contains_key(n.as_str()))
                {
                    // SQL DEALLOCATE of a protocol-level statement: the server knows it only
                    // under ringwire's shared name, which stays for the shard's other clients.
                    self.statements.remove(name.as_str());
                    self.statements.remove("");
                    if let Some(s) = self.server.as_mut() {
                        s.unnamed = None;
                    }
                    self.push_local(Local::Command("DEALLOCATE"));
                    self.must_answer = self.expect.len();
                    return Ok(());
                }
                let sets = self.note_effects(sql);
                self.statements.remove("");
                if let Some(s) = self.server.as_mut() {
                    s.unnamed = None;
                }
                self.to_send.extend_from_slice(raw);
                self.push(Kind::Query, true, Done::Query(sets));
                self.must_answer = self.expect.len();
            }
            FrontendMessage::FunctionCall => {
                self.to_send.extend_from_slice(raw);
                self.push(Kind::Query, true, Done::Nothing);
                self.must_answer = self.expect.len();
            }
            FrontendMessage::Parse {
                name,
                sql,
                param_types,
            } => {
                if !name.is_empty() && self.statements.contains_key(name) {
                    self.push_local(Local::Error(PgError::new(
                        SqlState::DUPLICATE_PREPARED_STATEMENT,
                        format!("prepared statement \"{name}\" already exists"),
                    )));
                    return Ok(());
                }
                let fx = classify(sql);
                if fx.pins || !fx.sets.is_empty() || !self.pending_sets.is_empty() {
                    // Rare in prepared statements; not worth replaying.
                    self.pinned = true;
                }
                let types: Box<[u8]> = param_types.iter().flat_map(u32::to_be_bytes).collect();
                let upstream = (!name.is_empty()).then(|| {
                    self.shard.statement_id(&StatementKey {
                        sql: sql.into(),
                        param_types: types.clone(),
                        settings: self.settings,
                    })
                });
                let stmt = Rc::new(ClientStatement {
                    sql: sql.into(),
                    param_types: types,
                    upstream,
                });
                self.statements.insert(name.into(), stmt.clone());
                let server = self.server.as_mut().expect("held while translating");
                match upstream {
                    Some(id) if server.prepared.contains(&id) => {
                        self.push_local(Local::ParseComplete)
                    }
                    Some(id) => {
                        // Marked now, so later messages of this batch do not parse it again;
                        // undone if the Parse fails or is skipped.
                        server.prepared.insert(id);
                        stmt.encode_parse(&mut self.to_send);
                        self.push(Kind::Parse, true, Done::Prepared(id));
                    }
                    None => {
                        server.unnamed = Some(stmt.clone());
                        self.to_send.extend_from_slice(raw);
                        self.push(Kind::Parse, true, Done::Unnamed(stmt));
                    }
                }
            }
            FrontendMessage::Bind(bind) => {
                let Some(stmt) = self.statements.get(bind.statement).cloned() else {
                    self.push_local(Local::Error(no_statement(bind.statement)));
                    return Ok(());
                };
                self.ensure_prepared(&stmt);
                // Bind = portal, statement, then the rest unchanged.
                let body = &raw[5..];
                let portal_end = body.iter().position(|&b| b == 0).expect("parsed") + 1;
                let stmt_end = portal_end
                    + body[portal_end..]
                        .iter()
                        .position(|&b| b == 0)
                        .expect("parsed")
                    + 1;
                let start = protocol::wire::begin_message(&mut self.to_send, b'B');
                self.to_send.extend_from_slice(&body[..portal_end]);
                put_cstr(&mut self.to_send, &stmt.upstream_name());
                self.to_send.extend_from_slice(&body[stmt_end..]);
                protocol::wire::finish_message(&mut self.to_send, start);
                let done = stmt.upstream.map_or(Done::Nothing, Done::Bound);
                self.push(Kind::Bind, true, done);
            }
            FrontendMessage::Describe {
                target: Target::Statement,
                name,
            } => {
                let Some(stmt) = self.statements.get(name).cloned() else {
                    self.push_local(Local::Error(no_statement(name)));
                    return Ok(());
                };
                self.ensure_prepared(&stmt);
                frontend::encode_describe(
                    &mut self.to_send,
                    Target::Statement,
                    &stmt.upstream_name(),
                );
                self.push(Kind::DescribeStatement, true, Done::Nothing);
            }
            FrontendMessage::Describe {
                target: Target::Portal,
                ..
            } => {
                self.to_send.extend_from_slice(raw);
                self.push(Kind::DescribePortal, true, Done::Nothing);
            }
            FrontendMessage::Execute { .. } => {
                self.to_send.extend_from_slice(raw);
                self.push(Kind::Execute, true, Done::Nothing);
            }
            FrontendMessage::Close {
                target: Target::Statement,
                name,
            } => {
                // The upstream statement stays prepared for the shard's next client.
                self.statements.remove(name);
                self.push_local(Local::CloseComplete);
            }
            FrontendMessage::Close {
                target: Target::Portal,
                ..
            } => {
                self.to_send.extend_from_slice(raw);
                self.push(Kind::Close, true, Done::Nothing);
            }
            FrontendMessage::Sync => {
                self.skip_until_sync = false;
                self.to_send.extend_from_slice(raw);
                self.push(Kind::Sync, true, Done::Nothing);
                self.must_answer = self.expect.len();
            }
            FrontendMessage::Flush => {
                self.to_send.extend_from_slice(raw);
                self.must_answer = self.expect.len();
            }
            // Outside COPY these are ignored, per the protocol.
            FrontendMessage::CopyData { .. }
            | FrontendMessage::CopyDone
            | FrontendMessage::CopyFail { .. } => {}
            FrontendMessage::Terminate => {}
            FrontendMessage::Password { .. } => {
                return Err(PgError::fatal(
                    SqlState::PROTOCOL_VIOLATION,
                    "unexpected password message outside authentication",
                ))
            }
        }
        Ok(())
    }

    /// Parse `stmt` on the held connection first if it lacks it; the reply is swallowed.
    fn ensure_prepared(&mut self, stmt: &Rc<ClientStatement>) {
        let server = self.server.as_mut().expect("held while translating");
        let present = match stmt.upstream {
            Some(id) => server.prepared.contains(&id),
            None => server.unnamed.as_ref().is_some_and(|u| Rc::ptr_eq(u, stmt)),
        };
        if !present {
            stmt.encode_parse(&mut self.to_send);
            let done = match stmt.upstream {
                Some(id) => {
                    server.prepared.insert(id);
                    Done::Prepared(id)
                }
                None => {
                    server.unnamed = Some(stmt.clone());
                    Done::Unnamed(stmt.clone())
                }
            };
            self.push(Kind::Parse, false, done);
        }
    }

    /// What a simple Query does to session state: pins are noted now, its SETs returned to
    /// be recorded when it completes.
    fn note_effects(&mut self, sql: &str) -> Vec<SetChange> {
        let fx = classify(sql);
        if fx.pins {
            self.pinned = true;
        }
        if fx.savepoint {
            self.savepoint_in_tx = true;
        }
        if !fx.sets.is_empty() && self.savepoint_in_tx {
            // ROLLBACK TO may undo part of them; which part is not worth tracking.
            self.pinned = true;
        }
        fx.sets
    }

    /// At ReadyForQuery `I`: the transaction's SETs take effect if it committed.
    fn end_of_transaction(&mut self) {
        let changes = std::mem::take(&mut self.pending_sets);
        if !self.tx_rolled_back && !changes.is_empty() {
            let mut reset_all = false;
            for change in changes {
                match change {
                    SetChange::Set(name, stmt) => {
                        self.sets.retain(|(n, _)| *n != name);
                        self.sets.push((name, stmt));
                    }
                    SetChange::Reset(name) => self.sets.retain(|(n, _)| *n != name),
                    SetChange::ResetAll => {
                        self.sets.clear();
                        reset_all = true;
                    }
                }
            }
            self.settings = fingerprint(&self.startup_sets, &self.sets);
            if let Some(server) = self.server.as_mut() {
                // The server ran them; after RESET ALL it lost the startup values too, so the
                // next batch replays.
                server.settings = if reset_all { 0 } else { self.settings };
            }
        }
        self.tx_rolled_back = false;
        self.savepoint_in_tx = false;
    }

    /// Read the server's replies until every message the client will not follow up is
    /// answered, matching each against the queue.
    async fn collect_replies(
        &mut self,
        cancel: &CancelToken,
        out: &mut Vec<u8>,
        client: &mut (dyn AsyncWrite + Unpin),
    ) {
        loop {
            while self.must_answer > 0 {
                match self.expect.front() {
                    Some(Expect::Local(_)) => {
                        let Some(Expect::Local(local)) = self.expect.pop_front() else {
                            unreachable!()
                        };
                        self.must_answer -= 1;
                        match local {
                            Local::ParseComplete => backend::write_parse_complete(out),
                            Local::CloseComplete => backend::write_close_complete(out),
                            Local::Command(tag) => {
                                backend::write_command_complete(out, tag);
                                let status = match self.tx {
                                    b'T' => backend::TransactionStatus::InBlock,
                                    b'E' => backend::TransactionStatus::Failed,
                                    _ => backend::TransactionStatus::Idle,
                                };
                                backend::write_ready_for_query(out, status);
                            }
                            Local::Error(e) => {
                                backend::write_error(out, &e);
                                self.tx_rolled_back = true;
                                self.skip_to_sync();
                            }
                        }
                    }
                    _ => break,
                }
            }
            if self.must_answer == 0 {
                return;
            }
            if out.len() >= CLIENT_FLUSH_BYTES {
                let _ = client.write_all(out).await;
                out.clear();
            }
            let server = self.server.as_mut().expect("replies outstanding");
            let frame = match server.buf.frame() {
                Ok(f) => f.map(|(frame, len)| (frame.tag, len)),
                Err(e) => {
                    self.upstream_lost(out, &e.to_string());
                    return;
                }
            };
            let Some((tag, len)) = frame else {
                let filled = futures_lite::future::or(
                    async { Some(server.buf.fill(&mut server.stream).await) },
                    async {
                        cancel.cancelled().await;
                        None
                    },
                )
                .await;
                match filled {
                    Some(Ok(())) => {}
                    Some(Err(e)) => {
                        self.upstream_lost(out, &e.to_string());
                        return;
                    }
                    None => {
                        // This client's statement is the one running on this connection:
                        // pass the cancel on to its backend.
                        cancel.reset();
                        let config = self.shard.config.clone();
                        let (pid, key) = (server.process_id, server.secret_key);
                        glommio::spawn_local(async move {
                            super::client::send_cancel(&config, pid, key).await
                        })
                        .detach();
                    }
                }
                continue;
            };
            log::trace!("server {:?} must_answer {}", tag as char, self.must_answer);
            let stop = self.on_reply(tag, len, out);
            // Gone if the reply ended the connection.
            if let Some(server) = self.server.as_mut() {
                server.buf.consume(len);
            }
            if stop {
                return;
            }
        }
    }

    /// Handle the server's message at the front of the reply buffer. Returns true when the
    /// relay must wait for the client (COPY FROM STDIN began).
    fn on_reply(&mut self, tag: u8, len: usize, out: &mut Vec<u8>) -> bool {
        let server = self.server.as_ref().expect("replies outstanding");
        let raw = &server.buf.data()[..len];
        let Some(Expect::Server { kind, emit, .. }) = self.expect.front() else {
            unreachable!("local replies are written before waiting on the server")
        };
        let (kind, emit) = (*kind, *emit);
        let terminal = match (tag, kind) {
            // Asynchronous messages: notices, parameter changes, notifications.
            (b'N' | b'A', _) => {
                if emit {
                    out.extend_from_slice(raw);
                }
                return false;
            }
            (b'S', _) => {
                if news(&mut self.shown, raw) {
                    out.extend_from_slice(raw);
                }
                return false;
            }
            (b'E', _) => {
                let body = raw.get(5..).unwrap_or_default();
                if matches!(error_field(body, b'V').as_deref(), Some("FATAL" | "PANIC")) {
                    // The server is closing this connection (terminated, shut down): report
                    // it once, as the connection loss it is.
                    let why = error_field(body, b'M').unwrap_or_default();
                    self.upstream_lost(out, &why);
                    return true;
                }
                let code = error_field(body, b'C');
                out.extend_from_slice(raw);
                self.tx_rolled_back = true;
                if code.as_deref() == Some("0A000") {
                    if let Some(Expect::Server {
                        done: Done::Bound(id),
                        ..
                    }) = self.expect.front()
                    {
                        // "cached plan must not change result type": the next Parse of this
                        // text (by any client of the shard) prepares a new upstream statement.
                        // Statements already prepared keep failing, as PostgreSQL's own do:
                        // their clients hold the old row description.
                        self.shard.forget_statement(*id);
                    }
                }
                if matches!(kind, Kind::Query | Kind::Sync) {
                    // A Query goes on to its ReadyForQuery; an error at Sync (a failed
                    // commit of the implicit transaction) is followed by its ReadyForQuery.
                    return false;
                }
                if let Some(e) = self.expect.pop_front() {
                    self.undo(&e);
                }
                self.must_answer -= 1;
                self.skip_to_sync();
                return false;
            }
            (b'G', Kind::Query | Kind::Execute) => {
                out.extend_from_slice(raw);
                self.copy_in = true;
                self.must_answer = 0;
                return true;
            }
            (b'1', Kind::Parse)
            | (b'2', Kind::Bind)
            | (b'3', Kind::Close)
            | (b'T' | b'n', Kind::DescribeStatement | Kind::DescribePortal)
            | (b'C' | b'I' | b's', Kind::Execute)
            | (b'Z', Kind::Sync | Kind::Query) => true,
            (b't', Kind::DescribeStatement) => false,
            (b'T' | b'D' | b'C' | b'I' | b'H' | b'd' | b'c' | b'V' | b'W', Kind::Query)
            | (b'D' | b'H' | b'd' | b'c', Kind::Execute) => false,
            _ => {
                log::error!(
                    "upstream reply {:?} does not answer {kind:?}; closing the connection",
                    tag as char
                );
                self.upstream_lost(out, "the server's replies are out of step");
                return true;
            }
        };
        if tag == b'C' && raw.get(5..) == Some(b"ROLLBACK\0") {
            self.tx_rolled_back = true;
        }
        if emit {
            out.extend_from_slice(raw);
        }
        let status = raw.get(5).copied().unwrap_or(b'I');
        if tag == b'C' && matches!(raw.get(5..), Some(b"DISCARD ALL\0" | b"DEALLOCATE ALL\0")) {
            // The server dropped every prepared statement of this connection: the client's
            // (whatever their names upstream) and those other clients left for reuse.
            self.statements.clear();
            if let Some(server) = self.server.as_mut() {
                server.prepared.clear();
                server.unnamed = None;
            }
        }
        if !terminal {
            return false;
        }
        let Some(Expect::Server { done, .. }) = self.expect.pop_front() else {
            unreachable!()
        };
        self.must_answer -= 1;
        let server = self.server.as_mut().expect("held");
        match done {
            Done::Nothing | Done::Bound(_) | Done::Prepared(_) | Done::Unnamed(_) => {}
            Done::Settings(fp) => {
                server.settings = fp;
                // The replay is not the client's transaction.
                self.tx_rolled_back = false;
            }
            Done::Query(sets) => self.pending_sets.extend(sets),
        }
        if tag == b'Z' {
            if emit {
                self.tx = status;
            }
            if status == b'I' && emit {
                self.end_of_transaction();
            }
        }
        false
    }

    /// A queued Parse that failed or was skipped: the connection does not have the statement.
    fn undo(&mut self, e: &Expect) {
        let Some(server) = self.server.as_mut() else {
            return;
        };
        match e {
            Expect::Server {
                done: Done::Prepared(id),
                ..
            } => {
                server.prepared.remove(id);
            }
            Expect::Server {
                done: Done::Unnamed(stmt),
                ..
            } if server.unnamed.as_ref().is_some_and(|u| Rc::ptr_eq(u, stmt)) => {
                server.unnamed = None;
            }
            _ => {}
        }
    }

    /// After an error: drop queued replies up to the next Sync, which the server answers. A
    /// simple Query in between is dropped too: the server discards every message until Sync,
    /// Query included, and answers it nothing.
    fn skip_to_sync(&mut self) {
        while let Some(front) = self.expect.front() {
            if matches!(
                front,
                Expect::Server {
                    kind: Kind::Sync,
                    ..
                }
            ) {
                return;
            }
            if let Some(e) = self.expect.pop_front() {
                self.undo(&e);
            }
            self.must_answer = self.must_answer.saturating_sub(1);
        }
        // No Sync queued yet: the client's messages until its Sync are dropped here too.
        self.skip_until_sync = true;
    }

    /// The upstream connection failed: the client gets 08006 where its statement's outcome
    /// should have been, and ReadyForQuery for each Sync/Query it is owed; its transaction is
    /// gone (the server rolls it back) and the next statement gets a fresh connection.
    fn upstream_lost(&mut self, out: &mut Vec<u8>, why: &str) {
        log::warn!("upstream connection lost: {why}");
        self.server = None;
        let err = lost(why);
        let mut reported = false;
        let owed = self.must_answer;
        let mut tail_needs_sync = false;
        for (i, e) in self.expect.drain(..).enumerate() {
            let kind = match e {
                Expect::Server { kind, emit, .. } => {
                    if !emit && kind == Kind::Query {
                        continue; // the settings replay
                    }
                    Some(kind)
                }
                Expect::Local(_) => None,
            };
            if i >= owed {
                tail_needs_sync = true;
                continue;
            }
            match kind {
                Some(Kind::Query) => {
                    backend::write_error(out, &err);
                    backend::write_ready_for_query(out, protocol::backend::TransactionStatus::Idle);
                    reported = false;
                }
                Some(Kind::Sync) => {
                    if !reported {
                        backend::write_error(out, &err);
                    }
                    backend::write_ready_for_query(out, protocol::backend::TransactionStatus::Idle);
                    reported = false;
                }
                _ => {
                    if !reported {
                        backend::write_error(out, &err);
                        reported = true;
                    }
                }
            }
        }
        self.must_answer = 0;
        self.skip_until_sync = tail_needs_sync || reported;
        self.copy_in = false;
        self.tx = b'I';
        self.pending_sets.clear();
        self.tx_rolled_back = false;
        self.savepoint_in_tx = false;
        // Pinned state died with the connection.
        self.pinned = false;
    }

    /// No upstream connection could be had: answer the batch here with 08006.
    fn fail_locally(&mut self, frames: &[u8], out: &mut Vec<u8>, err: PgError) {
        let mut rest = frames;
        let mut reported = false;
        while let Ok(Some((frame, len))) = split_frame(rest, usize::MAX) {
            rest = &rest[len..];
            match frame.tag {
                b'Q' | b'F' => {
                    backend::write_error(out, &err);
                    backend::write_ready_for_query(out, protocol::backend::TransactionStatus::Idle);
                    reported = false;
                }
                b'S' => {
                    if !reported && !self.skip_until_sync {
                        backend::write_error(out, &err);
                    }
                    backend::write_ready_for_query(out, protocol::backend::TransactionStatus::Idle);
                    reported = false;
                    self.skip_until_sync = false;
                }
                b'H' | b'd' | b'c' | b'f' => {}
                _ => {
                    if !reported && !self.skip_until_sync {
                        backend::write_error(out, &err);
                        reported = true;
                    }
                }
            }
        }
        if reported {
            self.skip_until_sync = true;
        }
        self.tx = b'I';
    }
}

/// One field of an ErrorResponse body (`C` SQLSTATE, `V` severity, `M` message).
fn error_field(body: &[u8], code: u8) -> Option<String> {
    let mut i = 0;
    while i < body.len() && body[i] != 0 {
        let field = body[i];
        let end = i + 1 + body[i + 1..].iter().position(|&b| b == 0)?;
        if field == code {
            return std::str::from_utf8(&body[i + 1..end])
                .ok()
                .map(str::to_string);
        }
        i = end + 1;
    }
    None
}
