//! What a statement does to session state, read from its text without a full parse (the relay
//! must not pay for sqlparser per statement): SETs to replay on another upstream connection,
//! and everything a pooler cannot move between connections — which pins the client's session
//! to its upstream connection until it disconnects (as PgBouncer's session mode would).
//!
//! The scan is deliberately conservative: a false "pins" costs pooling for one client, a
//! missed one would leak state between clients.
//!
//! It runs on the shard, before the statement is relayed, for text of any size up to
//! `--max-message-bytes`: every pass over the whole text is a SIMD search (memchr) or
//! skips literals and comments with one, so a multi-megabyte statement holds the shard's other
//! clients up far less than the upstream takes to parse it.

use std::sync::LazyLock;

use memchr::memmem;

/// A session setting change, in effect once its transaction commits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetChange {
    /// `SET name ...`: the lower-cased name and the statement that sets it.
    Set(String, String),
    Reset(String),
    ResetAll,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Effects {
    pub sets: Vec<SetChange>,
    /// The session now holds state only its own upstream connection has.
    pub pins: bool,
    /// SAVEPOINT / ROLLBACK TO / RELEASE: SETs in the block may be partly undone.
    pub savepoint: bool,
    /// In a Query of several statements, one entry per statement the server answers with
    /// CommandComplete `COMMIT` or `ROLLBACK`, in order. The SETs before a COMMIT are
    /// committed there even if a later statement of the Query fails (`BEGIN; SET a = 1;
    /// COMMIT; SELECT 1/0`); those before a ROLLBACK are dropped even if later ones commit.
    /// Empty for one statement: its Query's ReadyForQuery says.
    pub ends: Vec<QueryEnd>,
}

/// See [`Effects::ends`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryEnd {
    /// Which statement of the Query (counting those the server answers, from 0): the relay
    /// settles SETs here only if this is the CommandComplete it counts, so a Query this scan
    /// splits otherwise than PostgreSQL (a `BEGIN ATOMIC` body) is never misread.
    pub statement: usize,
    /// How many of `sets` come between the previous entry and this one.
    pub sets_before: usize,
    /// COMMIT, END, ROLLBACK, ABORT (with or without AND CHAIN) end the transaction;
    /// ROLLBACK TO, whose tag is `ROLLBACK` too, does not.
    pub ends_tx: bool,
}

/// Split `sql` into statements at semicolons outside quotes, dollar quotes and comments (the
/// non-blank ones, by [`scan`]'s reading).
fn statements(sql: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for_each_statement(sql, |stmt| out.push(stmt));
    out
}

/// A setting that changes who the session is (GUC names are case-insensitive). PostgreSQL's
/// `RESET ALL` leaves both alone.
pub fn sets_identity(name: &str) -> bool {
    name.eq_ignore_ascii_case("role") || name.eq_ignore_ascii_case("session_authorization")
}

/// `s` past its leading whitespace and comments.
fn skip_blank(s: &str) -> &str {
    let mut rest = s.trim_start();
    loop {
        if let Some(r) = rest.strip_prefix("--") {
            rest = r.split_once('\n').map_or("", |(_, r)| r).trim_start();
        } else if rest.starts_with("/*") {
            rest = after_block_comment(rest).trim_start();
        } else {
            return rest;
        }
    }
}

/// Leading words of a statement, lower-cased, comments skipped.
fn words(stmt: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = stmt;
    while out.len() < n {
        rest = skip_blank(rest);
        if let Some(r) = rest.strip_prefix('"') {
            let (w, r) = r.split_once('"').unwrap_or((r, ""));
            out.push(w.to_string());
            rest = r;
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        out.push(rest[..end].to_ascii_lowercase());
        rest = &rest[end..];
    }
    out
}

/// What follows the block comment `s` starts with; comments nest, as in PostgreSQL. Empty if
/// it is never closed.
fn after_block_comment(s: &str) -> &str {
    let b = s.as_bytes();
    let (mut depth, mut i) = (0usize, 0);
    while let Some(p) = memchr::memchr2(b'/', b'*', &b[i..]) {
        i += p;
        match (b[i], b.get(i + 1).copied().unwrap_or(0)) {
            (b'/', b'*') => {
                depth += 1;
                i += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return &s[i..];
                }
            }
            _ => i += 1,
        }
    }
    ""
}

/// ASCII-case-insensitive substring search: candidates found by their first byte (memchr).
pub fn contains_ignore_case(hay: &[u8], needle: &[u8]) -> bool {
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    let (lower, upper) = (first.to_ascii_lowercase(), first.to_ascii_uppercase());
    memchr::memchr2_iter(lower, upper, hay).any(|i| {
        hay[i + 1..]
            .get(..rest.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(rest))
    })
}

/// The common case without allocating: one statement whose first word cannot change session
/// state, and no function call that could.
fn plainly_stateless(sql: &str) -> bool {
    let t = sql.trim_start();
    let first_end = t
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(t.len());
    let first = &t[..first_end];
    let stateless = [
        "select", "insert", "update", "delete", "begin", "commit", "end", "values", "table",
        "with", "copy", "vacuum", "analyze", "truncate", "show",
    ]
    .iter()
    .any(|w| first.eq_ignore_ascii_case(w));
    let one_statement = match memchr::memchr(b';', sql.as_bytes()) {
        None => true,
        Some(i) => sql[i + 1..].trim().is_empty(),
    };
    // `SELECT … INTO TEMP t` (also under WITH) creates a temporary table: such a read takes
    // the slow path, which looks for TEMP. INSERT INTO does not. (EXPLAIN always does: it
    // can run `CREATE TEMP TABLE … AS`.)
    let may_select_into = ["select", "with"]
        .iter()
        .any(|w| first.eq_ignore_ascii_case(w));
    stateless && one_statement && !STATELESS_MARKERS.any(sql, |k| k != INTO || may_select_into)
}

/// Text that marks a statement as one that may leave state on its connection whatever its
/// first word: session advisory locks, `set_config(…, false)`, `setseed` (the session's
/// random sequence, which RESET ALL does not reset), and `U&"…"` identifiers, whose escapes
/// can spell any of these (or SET ROLE) where the scan cannot read them; and `into`, which
/// matters after SELECT and WITH. ASCII-case-insensitive, searched for together a block at a
/// time (the text may be megabytes, and this runs on the shard for every statement).
static STATELESS_MARKERS: LazyLock<Needles> =
    LazyLock::new(|| Needles::new(&["into", "advisory", "set_config", "setseed", "u&\""]));
/// [`STATELESS_MARKERS`]' number of `into`.
const INTO: usize = 0;

/// What pins the session in [`classify`]: session-level advisory locks, `set_config`,
/// `setseed`, and `U&"…"` identifiers that may spell any of them.
static SESSION_FUNCTIONS: LazyLock<Needles> = LazyLock::new(|| {
    Needles::new(&[
        "pg_advisory_lock",
        "pg_try_advisory_lock",
        "set_config",
        "setseed",
        "u&\"",
    ])
});

/// Whether `sql` names `lastval` or `currval`, whose answers are what an earlier `nextval`
/// left in the backend's session (`Session::keep_sequence_state_own`). Anywhere in the text,
/// quoted or not, or a `U&"…"` identifier (whose escapes can spell them): a false match costs
/// one `DISCARD SEQUENCES`.
pub fn reads_sequence_state(sql: &str) -> bool {
    SEQUENCE_STATE.any(sql, |_| true)
}

/// The functions that read or write what a sequence leaves in the backend's session.
const SEQUENCE_FUNCTIONS: [&str; 4] = ["nextval", "setval", "lastval", "currval"];

static SEQUENCE_STATE: LazyLock<Needles> =
    LazyLock::new(|| Needles::new(&["lastval", "currval", "u&\""]));

/// Lower-case needles searched for in text of any case. Written here rather than with the
/// aho-corasick crate, which measured 0.46 GB/s on these needles (their first bytes in both
/// cases leave it no prefilter): the text is lower-cased a block at a time into a buffer on
/// the stack and each needle found with memchr's SIMD memmem: 1.5-2.6 GB/s for five needles
/// here (docs/PERF.md, session 15).
struct Needles {
    finders: Vec<memmem::Finder<'static>>,
    longest: usize,
}

impl Needles {
    fn new(needles: &[&'static str]) -> Needles {
        Needles {
            finders: needles.iter().map(|&n| memmem::Finder::new(n)).collect(),
            longest: needles.iter().map(|n| n.len()).max().unwrap_or(0),
        }
    }

    /// Whether a needle numbered `k` with `wanted(k)` occurs in `text`.
    fn any(&self, text: &str, wanted: impl Fn(usize) -> bool) -> bool {
        // Most statements are short: a small buffer spares zeroing the block's 4 KiB.
        const SHORT: usize = 256;
        if text.len() <= SHORT {
            return self.any_in(text.as_bytes(), &wanted, &mut [0u8; SHORT]);
        }
        self.any_in(text.as_bytes(), &wanted, &mut [0u8; 4 << 10])
    }

    fn any_in(&self, text: &[u8], wanted: &impl Fn(usize) -> bool, buf: &mut [u8]) -> bool {
        let block_len = buf.len();
        let mut start = 0;
        loop {
            let end = (start + block_len).min(text.len());
            let block = &mut buf[..end - start];
            block.copy_from_slice(&text[start..end]);
            block.make_ascii_lowercase();
            let found = self
                .finders
                .iter()
                .enumerate()
                .any(|(k, f)| wanted(k) && f.find(block).is_some());
            if found {
                return true;
            }
            if end == text.len() {
                return false;
            }
            // The blocks overlap by a needle's length less one: no match falls between them.
            start = end + 1 - self.longest;
        }
    }
}

/// Name a SET or RESET the way `SHOW` does, so that a RESET finds the SET it undoes: the
/// special forms (`TIME ZONE`, `SCHEMA`, `NAMES`, `XML OPTION`) become their settings'
/// names, and a quoted name is lower-cased (setting names ignore case, quoted or not).
fn canonical_setting(w: &mut Vec<String>) {
    let k = match w.first().map(String::as_str) {
        Some("set") if w.get(1).is_some_and(|s| s == "session") && w.len() > 2 => 2,
        Some("set" | "reset") if w.len() > 1 => 1,
        _ => return,
    };
    w[k] = w[k].to_ascii_lowercase();
    let next = w.get(k + 1).map(String::as_str);
    let (name, two_words) = match (w[k].as_str(), next) {
        ("time", Some("zone")) => ("timezone", true),
        ("xml", Some("option")) => ("xmloption", true),
        ("schema", _) => ("search_path", false),
        ("names", _) => ("client_encoding", false),
        _ => return,
    };
    w[k] = name.to_string();
    if two_words {
        w.remove(k + 1);
    }
}

/// Whether a DECLARE says `WITH HOLD` (any spacing, comments between): such a cursor outlives
/// its transaction on the upstream connection.
fn holds_cursor(stmt: &str) -> bool {
    let (mut with, mut hold) = (false, false);
    for_each_word(stmt, |word, _| {
        hold = with && word.eq_ignore_ascii_case("hold");
        with = word.eq_ignore_ascii_case("with");
        !hold
    });
    hold
}

/// Whether a startup parameter (`name`, and its value or the SET that replays it) makes the
/// session create temporary objects where it means plain ones: a `search_path` naming
/// `pg_temp` (see [`creates_temp_object`]).
pub fn startup_creates_temp_objects(name: &str, value: &str) -> bool {
    name.eq_ignore_ascii_case("search_path") && contains_ignore_case(value.as_bytes(), b"pg_temp")
}

/// Whether a startup parameter changes how the session's SQL is lexed, so that the scan
/// cannot read it (`standard_conforming_strings` off, see [`classify`]): the session is
/// pinned. `set` is the SET that replays the parameter.
pub fn startup_changes_lexing(name: &str, set: &str) -> bool {
    name.eq_ignore_ascii_case("standard_conforming_strings") && !turns_on_conforming_strings(set)
}

/// Whether `SET standard_conforming_strings {TO|=} value` turns it on (or to its default, on).
fn turns_on_conforming_strings(stmt: &str) -> bool {
    matches!(
        setting_value(stmt, "standard_conforming_strings").as_str(),
        "on" | "true" | "yes" | "1" | "default"
    )
}

/// The value a `SET name {TO|=} value` statement gives, unquoted and lower-cased; or a
/// startup parameter's `SELECT pg_catalog.set_config('name', 'value', false)`.
pub fn setting_value(stmt: &str, name: &str) -> String {
    let lower = stmt.to_ascii_lowercase();
    let Some(at) = lower.find(name) else {
        return String::new();
    };
    if let Some(literal) = lower[at + name.len()..].strip_prefix("', ") {
        let literal = literal.strip_prefix('e').unwrap_or(literal);
        return literal
            .strip_prefix('\'')
            .and_then(|v| v.split_once('\''))
            .map_or(String::new(), |(v, _)| v.trim().to_string());
    }
    let rest = lower[at + name.len()..].trim_start();
    let rest = rest
        .strip_prefix('=')
        .or_else(|| rest.strip_prefix("to "))
        .unwrap_or(rest)
        .trim()
        .trim_end_matches(';')
        .trim();
    rest.trim_matches(|c| c == '\'' || c == '"')
        .trim()
        .to_string()
}

/// Whether `stmt` creates a temporary object, which lives as long as the upstream
/// connection, or may make later statements do so: `SELECT … INTO TEMP[ORARY]` (what
/// `CREATE TEMP` in [`classify`]'s leading words does not see), a `CREATE` naming the
/// `pg_temp` schema (`CREATE TABLE pg_temp.x`), or a `SET` (`LOCAL` too) naming `pg_temp`
/// (a `search_path`, however spelt or quoted: PostgreSQL then creates unqualified tables
/// there).
fn creates_temp_object(stmt: &str) -> bool {
    let mut first = None;
    let (mut into, mut temp) = (false, false);
    for_each_word(stmt, |word, _| {
        let is = |w: &str| word.eq_ignore_ascii_case(w);
        first.get_or_insert(word);
        into |= is("into");
        temp |= is("temp") || is("temporary");
        true
    });
    // The schema may be quoted (`"pg_temp".x`, `SET search_path TO 'pg_temp'`), which the
    // words do not show: the text (a mention in a literal only costs a pin).
    let pg_temp = contains_ignore_case(stmt.as_bytes(), b"pg_temp");
    let is = |w: &str| first.is_some_and(|f: &str| f.eq_ignore_ascii_case(w));
    if is("create") || is("set") {
        pg_temp
    } else if is("explain") {
        // `EXPLAIN ANALYZE CREATE TEMP TABLE … AS`, `… CREATE TABLE pg_temp.x AS`.
        temp || pg_temp
    } else {
        into && (temp || pg_temp)
    }
}

/// Whether a `DO` block may leave session state behind. Its body is PL/pgSQL (or another
/// language) that no text scan follows, but it is text the client sent, unlike a function's:
/// a block with any word (in its code or its string literals, as `EXECUTE 'SET …'` writes
/// them) that starts what outlives a transaction — `SET`/`RESET` (PL/pgSQL runs them as
/// SQL), `LISTEN`, `PREPARE`, `DISCARD`, `LOAD`, temp tables, `WITH HOLD` cursors — pins its
/// session. Conservative: `UPDATE … SET` pins too, which costs that client pooling, where a
/// miss would hand its settings to the next client. (`set_config` and advisory locks are
/// found in any statement's text already.)
fn do_may_leave_state(stmt: &str) -> bool {
    const WORDS: &[&str] = &[
        "set",
        "reset",
        "listen",
        "prepare",
        "discard",
        "load",
        "temp",
        "temporary",
        "pg_temp",
        "hold",
    ];
    stmt.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| WORDS.iter().any(|k| w.eq_ignore_ascii_case(k)))
}

/// Whether a Query is only `DEALLOCATE [PREPARE] ALL` (psycopg sends it after every
/// rollback once it prepared a statement).
pub fn deallocates_all(sql: &str) -> bool {
    !sql.contains('"')
        && sole_deallocate(sql).is_some_and(|(_, w)| {
            let w: Vec<&str> = w.iter().map(String::as_str).collect();
            matches!(
                w.as_slice(),
                ["deallocate", "all"] | ["deallocate", "prepare", "all"]
            )
        })
}

/// The statement a Query that is only `DEALLOCATE [PREPARE] name` deallocates (lower-cased
/// unless double-quoted). None for anything else, `DEALLOCATE ALL` included, and for text this
/// cheap scan cannot vouch for (the server then sees it).
pub fn deallocated(sql: &str) -> Option<String> {
    let (stmt, w) = sole_deallocate(sql)?;
    let w: Vec<&str> = w.iter().map(String::as_str).collect();
    match w.as_slice() {
        ["deallocate", "prepare", name] | ["deallocate", name]
            if (stmt.contains('"') || *name != "all") && *name != "prepare" =>
        {
            Some(name.to_string())
        }
        _ => None,
    }
}

/// A Query that is one `DEALLOCATE` statement of plain words (letters, digits, `_`, double
/// quotes): that statement and its first words, as [`words`] reads them.
fn sole_deallocate(sql: &str) -> Option<(&str, Vec<String>)> {
    // (Blank statements before it are not statements: `; DEALLOCATE s` is one.)
    let start = sql.trim_start_matches(|c: char| c == ';' || c.is_whitespace());
    if words(start, 1).first().map(String::as_str) != Some("deallocate") {
        return None;
    }
    let parts: Vec<&str> = statements(sql)
        .into_iter()
        .filter(|s| !s.trim().is_empty())
        .collect();
    let [stmt] = parts.as_slice() else {
        return None;
    };
    let plain = stmt
        .chars()
        .all(|c| c.is_alphanumeric() || c == '_' || c == '"' || c.is_whitespace());
    plain.then(|| (*stmt, words(stmt, 4)))
}

pub fn classify(sql: &str) -> Effects {
    let mut fx = Effects::default();
    if plainly_stateless(sql) {
        return fx;
    }
    // Session-level advisory locks, set_config(..., false) and setseed live past the
    // transaction; a U&"…" identifier may spell any of them.
    if SESSION_FUNCTIONS.any(sql, |_| true) {
        fx.pins = true;
    }
    let (mut answered, mut sets_at_end) = (0, 0);
    for stmt in statements(sql) {
        if creates_temp_object(stmt) {
            fx.pins = true;
        }
        let mut w = words(stmt, 5);
        canonical_setting(&mut w);
        let w: Vec<&str> = w.iter().map(String::as_str).collect();
        let statement = answered;
        // (A statement of comments only gets no reply.)
        answered += usize::from(!skip_blank(stmt).is_empty());
        let ends_tx = match w.as_slice() {
            ["rollback", "to", ..] | ["rollback", "transaction" | "work", "to", ..] => Some(false),
            ["commit" | "rollback", "prepared", ..] => None,
            ["commit" | "end" | "rollback" | "abort", ..] => Some(true),
            _ => None,
        };
        if let Some(ends_tx) = ends_tx {
            fx.ends.push(QueryEnd {
                statement,
                sets_before: fx.sets.len() - sets_at_end,
                ends_tx,
            });
            sets_at_end = fx.sets.len();
        }
        match w.as_slice() {
            // Off for the rest of the transaction is off for the scans of its statements.
            ["set", "local", "standard_conforming_strings", ..]
                if !turns_on_conforming_strings(stmt) =>
            {
                fx.pins = true
            }
            ["set", "local" | "transaction" | "constraints", ..] => {}
            // The current value made the session's own: nothing changes (replayed as text it
            // would mean the default).
            ["set", "session", _, "from", "current", ..] | ["set", _, "from", "current", ..] => {}
            // RESET ALL does not reset the random sequence.
            ["set", "session", "seed", ..] | ["set", "seed", ..] => fx.pins = true,
            // With standard_conforming_strings off a backslash escapes a quote in any literal,
            // which this scan (reading as PostgreSQL's default does) would misread: such a
            // session keeps its connection. Setting it on (Rails does, on every connection)
            // changes nothing.
            ["set", "session", "standard_conforming_strings", ..]
            | ["set", "standard_conforming_strings", ..]
                if !turns_on_conforming_strings(stmt) =>
            {
                fx.pins = true
            }
            ["set", "session", "characteristics" | "authorization", ..]
            | ["set", "role", ..]
            | ["reset", "role" | "session", ..] => fx.pins = true,
            // `SET SESSION ROLE`, `SET "Role"`, `SET session_authorization = …`: RESET ALL does
            // not undo these, so a pooled connection would carry the identity to the next client.
            ["set", "session", name, ..] | ["set", name, ..] | ["reset", name, ..]
                if sets_identity(name) =>
            {
                fx.pins = true
            }
            ["set", "session", name, ..] | ["set", name, ..] => fx
                .sets
                .push(SetChange::Set(name.to_string(), stmt.trim().to_string())),
            ["reset", "all", ..] => fx.sets.push(SetChange::ResetAll),
            ["reset", name, ..] => fx.sets.push(SetChange::Reset(name.to_string())),
            ["discard", "all", ..] => {
                // DISCARD ALL is RESET ALL too (and drops the statements: see the relay).
                fx.pins = true;
                fx.sets.push(SetChange::ResetAll);
            }
            ["prepare" | "deallocate" | "listen" | "load" | "discard", ..] => fx.pins = true,
            ["create", "temp" | "temporary", ..]
            | ["create", "global" | "local", "temp" | "temporary", ..]
            | ["create", "or", "replace", "temp" | "temporary", ..] => fx.pins = true,
            ["declare", ..] if holds_cursor(stmt) => fx.pins = true,
            ["do", ..] if do_may_leave_state(stmt) => fx.pins = true,
            ["savepoint", ..] | ["release", ..] => fx.savepoint = true,
            ["rollback", "to", ..] | ["rollback", "transaction" | "work", "to", ..] => {
                fx.savepoint = true
            }
            _ => {}
        }
    }
    if answered < 2 {
        fx.ends.clear();
    }
    fx
}

/// Where a statement may run and what it does to the transaction, for replica routing and
/// for knowing when a commit's WAL position must be learnt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// Certainly reads only: may run on a hot standby (see [`read_only`]).
    pub read_only: bool,
    /// Certainly writes nothing and ends no write: transaction control, SET, SHOW (the
    /// complement of "may have written", which is everything else).
    pub writes: bool,
    pub tx: TxControl,
}

/// What a statement does to the transaction block, read from its leading words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxControl {
    /// Nothing: runs in the block if there is one, else as its own implicit transaction.
    None,
    /// BEGIN / START TRANSACTION.
    Begin,
    /// COMMIT / END / ROLLBACK / ABORT (without AND CHAIN): the session is idle after it.
    End,
    /// Anything the scan cannot predict (several statements mixing control and work,
    /// PREPARE TRANSACTION, AND CHAIN).
    Unsure,
}

/// Whether `sql` is certainly one autocommit read that leaves nothing behind on its
/// connection and takes no row lock, so it may share an upstream connection with other
/// clients' statements (the pipelining of `session.rs`): one statement, starting with SELECT,
/// VALUES, TABLE or WITH, that [`classify`] finds stateless (no SET, no advisory lock, no
/// `set_config`), with no transaction control (so its ReadyForQuery says `I`), and without the
/// words that could create session state through it (`into` of `SELECT … INTO`, `temp`,
/// `temporary`, `listen`, `notify`, `prepare`, `declare`, `copy`), the sequence functions
/// (`nextval`, `setval`, `lastval`, `currval`, bare or quoted: their session state is kept per
/// client only on connections of its own), or make it write or lock rows
/// (`insert`, `update`, `delete`, `merge`: data-modifying CTEs and `FOR [NO KEY] UPDATE`;
/// `share`: `FOR [KEY] SHARE`), nor call code stored upstream ([`runs_user_code`]). Writes
/// are left out because a write can wait for a row lock, and every unit queued behind it on
/// the pipe would wait too, where PostgreSQL's deadlock detector cannot see the wait
/// (docs/ARCHITECTURE.md, the pipelining hazards).
/// Allocation-free. Anything doubtful is `None`: it costs one batch the shared connection,
/// never another client's correctness.
///
/// If it is, the result is the statement's *shape*: a hash of its words, lower-cased, and
/// quoted identifiers as written, in order — the text without its literals, numbers,
/// operators and comments, so that `… WHERE aid = 17` and `… WHERE aid = 42` share one
/// (never 0). The pipelines remember the shapes that ran long (`SlowShapes`); the words are
/// scanned here anyway.
pub fn autocommit_shape(sql: &str) -> Option<u64> {
    if !plainly_stateless(sql)
        || unbalanced_quotes(sql)
        || sql.contains('\\')
        // What a function of the user's leaves in the session would reach the pipe's next
        // unit, another client's.
        || runs_user_code(sql)
    {
        return None;
    }
    let mut statements = 0;
    for_each_statement(sql, |_| statements += 1);
    if statements != 1 {
        return None;
    }
    let mut first = true;
    let mut ok = true;
    let mut shape = FNV_OFFSET;
    let mut hash = |bytes: &[u8], fold: bool| {
        for &c in bytes {
            let c = if fold { c.to_ascii_lowercase() } else { c };
            shape = (shape ^ u64::from(c)).wrapping_mul(FNV_PRIME);
        }
        shape = (shape ^ u64::from(b' ')).wrapping_mul(FNV_PRIME);
    };
    scan(sql, |i, token| {
        let word = match token {
            Token::Word(end) => &sql[i..end],
            // A quoted identifier names a table or column as a word does (ORMs quote every
            // name): hashed as written, quotes and case kept, as PostgreSQL reads it.
            Token::Quoted(end) => {
                hash(&sql.as_bytes()[i..end], false);
                let name = sql.get(i + 1..end.saturating_sub(1)).unwrap_or("");
                ok = !SEQUENCE_FUNCTIONS.contains(&name);
                return ok;
            }
            Token::Semicolon => return true,
        };
        hash(word.as_bytes(), true);
        let is = |list: &[&str]| list.iter().any(|w| word.eq_ignore_ascii_case(w));
        if first {
            first = false;
            ok = is(&["select", "values", "table", "with"]);
        } else if is(&[
            "into",
            "temp",
            "temporary",
            "listen",
            "notify",
            "prepare",
            "declare",
            "copy",
            "begin",
            "commit",
            "rollback",
            "savepoint",
            "insert",
            "update",
            "delete",
            "merge",
            "share",
        ]) {
            ok = false;
        } else if SEQUENCE_FUNCTIONS.iter().any(|f| {
            word.rsplit('.')
                .next()
                .is_some_and(|w| w.eq_ignore_ascii_case(f))
        }) {
            // What `nextval` and `setval` leave in the backend's session is what `lastval`
            // and `currval` read: on a connection of its own, the session keeps a client's own
            // value for it (`Session::keep_sequence_state_own`).
            ok = false;
        }
        ok
    });
    (ok && !first).then_some(shape.max(1))
}

/// Whether running `sql` inside a read-only read-committed transaction leaves nothing there
/// that a new transaction on another connection would lack once `replay` has run there, so
/// that the transaction may go on elsewhere (`Session::move_replica_tx`). Every statement of
/// `sql` must be one of:
/// - a plain read that leaves nothing behind and takes no lock ([`autocommit_shape`]: no SET,
///   cursor, advisory lock, sequence function or user code) and calls none of the built-ins
///   whose state lasts to the transaction's end (large-object descriptors, `lo_open` and the
///   rest; an exported snapshot);
/// - a BEGIN (inside a block, a warning and no more);
/// - what its own text redoes in the new transaction ([`replays_in_transaction`]), which is
///   appended to `replay`, each statement followed by `"\n;"` (a line comment at its end
///   stays its own).
///
/// On `false`, `replay` may hold part of `sql`'s statements.
pub fn movable_in_transaction(sql: &str, replay: &mut String) -> bool {
    if unbalanced_quotes(sql) {
        return false;
    }
    let (mut ok, mut statements) = (true, 0);
    for_each_statement(sql, |stmt| {
        statements += 1;
        ok = ok
            && if autocommit_shape(stmt).is_some() {
                !keeps_transaction_state(stmt)
            } else if begin_modes(stmt).is_some() {
                true
            } else if replays_in_transaction(stmt) {
                replay.push_str(stmt.trim());
                replay.push_str("\n;");
                true
            } else {
                false
            };
    });
    ok && statements > 0
}

/// A plain read's calls that leave state in its transaction: large-object descriptors and an
/// exported snapshot (see [`movable_in_transaction`]).
fn keeps_transaction_state(stmt: &str) -> bool {
    let mut keeps = false;
    for_each_word(stmt, |word, call| {
        let name = word.rsplit('.').next().unwrap_or(word).to_ascii_lowercase();
        keeps |= call
            && (name.starts_with("lo_")
                || matches!(name.as_str(), "loread" | "lowrite" | "pg_export_snapshot"));
        !keeps
    });
    keeps
}

/// Whether one statement inside a read-only transaction leaves nothing but what running its
/// own text again in a new transaction (after the same BEGIN, on a connection with the same
/// session settings) redoes: `SET LOCAL` of a plain setting, `SAVEPOINT` and `RELEASE`.
/// Not `ROLLBACK TO` (its transaction is marked rolled back anyway, see `Session`), not a
/// session-level `SET` (recorded at commit: `Session::pending_sets`), not what changes the
/// transaction's own modes, the identity, the client encoding, the random seed or how later
/// statements are scanned (`standard_conforming_strings`).
fn replays_in_transaction(stmt: &str) -> bool {
    let mut w = words(stmt, 4);
    if w.len() >= 2 && w[0] == "set" && w[1] == "local" {
        // (`U&"…"` may spell any name: read here as `u`.)
        if stmt.contains('&') {
            return false;
        }
        // `SET LOCAL name …` reads as `SET name …` for the setting's canonical name.
        w.remove(1);
        canonical_setting(&mut w);
        let name = w.get(1).map_or("", String::as_str);
        return !name.is_empty()
            && !sets_identity(name)
            && !classify(stmt).pins
            && !matches!(
                name.to_ascii_lowercase().as_str(),
                "transaction"
                    | "session"
                    | "constraints"
                    | "transaction_isolation"
                    | "transaction_read_only"
                    | "transaction_deferrable"
                    | "client_encoding"
                    | "standard_conforming_strings"
                    | "seed"
                    // Refused once the backend used a temporary table: a pooled primary
                    // connection may have.
                    | "temp_buffers"
            );
    }
    matches!(w.first().map(String::as_str), Some("savepoint" | "release"))
}

/// Whether running (or parsing) `sql` takes a snapshot, after which PostgreSQL refuses `SET
/// TRANSACTION` in the block (25001, "must be called before any query"): every statement but
/// those PostgreSQL runs without one (`PlannedStmtRequiresSnapshot`: transaction control,
/// SET, RESET, SHOW, LOCK, FETCH, LISTEN, NOTIFY, UNLISTEN, CHECKPOINT). Doubtful text
/// counts as taking one.
pub fn takes_snapshot(sql: &str) -> bool {
    let mut takes = false;
    for_each_statement(sql, |stmt| {
        let w = words(stmt, 1);
        takes |= !matches!(
            w.first().map(String::as_str),
            Some(
                "begin"
                    | "start"
                    | "set"
                    | "reset"
                    | "show"
                    | "savepoint"
                    | "release"
                    | "rollback"
                    | "commit"
                    | "end"
                    | "abort"
                    | "lock"
                    | "fetch"
                    | "listen"
                    | "notify"
                    | "unlisten"
                    | "checkpoint"
            )
        );
    });
    takes
}

/// FNV-1a, 64 bits: the shape hash (a few words per statement; no allocation, no table).
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// One batch's shape from its statements' ([`autocommit_shape`], in order).
pub fn combine_shapes(batch: u64, statement: u64) -> u64 {
    (batch.rotate_left(17) ^ statement)
        .wrapping_mul(FNV_PRIME)
        .max(1)
}

pub fn route(sql: &str) -> Route {
    let read_only = read_only(sql);
    if !read_only && unbalanced_quotes(sql) {
        return Route {
            read_only,
            writes: true,
            tx: TxControl::Unsure,
        };
    }
    let mut tx = TxControl::None;
    let mut writes = !read_only;
    if !read_only {
        let mut control_only = true;
        let mut n = 0;
        for_each_statement(sql, |stmt| {
            n += 1;
            let w = first_words(stmt);
            let lower = |s: &str, t: &str| s.eq_ignore_ascii_case(t);
            let first = w[0];
            let this = if ["begin", "start"].iter().any(|t| lower(first, t)) {
                TxControl::Begin
            } else if ["commit", "end", "rollback", "abort"]
                .iter()
                .any(|t| lower(first, t))
            {
                let chain = contains_ignore_case(stmt.as_bytes(), b"chain");
                let to = w[1..].iter().any(|x| lower(x, "to"));
                let prepared = lower(w[1], "prepared");
                match (chain, to, prepared) {
                    (false, false, false) => TxControl::End,
                    (false, true, false) => TxControl::None, // ROLLBACK TO SAVEPOINT
                    _ => TxControl::Unsure,
                }
            } else if lower(first, "prepare") && lower(w[1], "transaction") || lower(first, "copy")
            {
                // COPY: the server is in copy mode after it, so nothing may be pipelined
                // behind it.
                TxControl::Unsure
            } else {
                let harmless = ["savepoint", "release", "set", "reset", "show"]
                    .iter()
                    .any(|t| lower(first, t));
                control_only &= harmless;
                TxControl::None
            };
            tx = match (n, tx, this) {
                (_, TxControl::Unsure, _) | (_, _, TxControl::Unsure) => TxControl::Unsure,
                (_, t, TxControl::None) => t,
                (1, _, t) => t,
                // BEGIN; …; COMMIT in one Query: an error in between leaves the block open
                // and failed, so the outcome is not known from the text.
                _ => TxControl::Unsure,
            };
        });
        writes = !control_only;
    }
    Route {
        read_only,
        writes,
        tx,
    }
}

/// A transaction isolation level, as PostgreSQL runs it (`read uncommitted` is read committed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    ReadCommitted,
    RepeatableRead,
    Serializable,
}

impl Isolation {
    /// A `default_transaction_isolation` value (lower-cased, unquoted); `None` if unknown.
    pub fn from_setting(value: &str) -> Option<Isolation> {
        match value.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["serializable"] => Some(Isolation::Serializable),
            ["repeatable", "read"] => Some(Isolation::RepeatableRead),
            ["read", "committed" | "uncommitted"] | ["default"] => Some(Isolation::ReadCommitted),
            _ => None,
        }
    }
}

/// What a `BEGIN` / `START TRANSACTION` asks for; `None` fields: the session's defaults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxModes {
    pub read_only: Option<bool>,
    pub isolation: Option<Isolation>,
}

/// `sql` begins with one `BEGIN [WORK | TRANSACTION] [modes]` or `START TRANSACTION
/// [modes]` statement (modes: `ISOLATION LEVEL …`, `READ ONLY | READ WRITE`, `[NOT]
/// DEFERRABLE`, optionally comma-separated), and the modes it names; statements after it are
/// not read here. `None` for anything else, including text this scan cannot read with
/// certainty (odd quotes, a leading comment, unknown words): such a transaction goes to the
/// primary, as every transaction did before. Allocates only for text that starts with
/// `begin` or `start` (it runs at the start of every batch of an idle session).
pub fn begin_modes(sql: &str) -> Option<TxModes> {
    let t = sql.trim_start().as_bytes();
    let opens = t.len() >= 5
        && (t[..5].eq_ignore_ascii_case(b"begin") || t[..5].eq_ignore_ascii_case(b"start"));
    if !opens || unbalanced_quotes(sql) {
        return None;
    }
    let mut end = sql.len();
    scan(sql, |i, token| match token {
        Token::Semicolon => {
            end = i;
            false
        }
        Token::Word(_) | Token::Quoted(_) => true,
    });
    let stmt = &sql[..end];
    // Only words, commas, whitespace and comments may appear.
    let mut only_words = true;
    let stripped: String = {
        let mut s = String::new();
        for_each_word(stmt, |w, call| {
            only_words &= !call;
            s.push_str(w);
            s.push(' ');
            true
        });
        s
    };
    if !only_words || stmt.contains(['(', ')', '\'', '"', '$', '=']) {
        return None;
    }
    let words: Vec<String> = stripped
        .split_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    let mut w: &[String] = &words;
    match w {
        [a, b, ..] if a == "start" && b == "transaction" => w = &w[2..],
        [a, b, ..] if a == "begin" && (b == "work" || b == "transaction") => w = &w[2..],
        [a, ..] if a == "begin" => w = &w[1..],
        _ => return None,
    }
    let mut modes = TxModes::default();
    while !w.is_empty() {
        let s: Vec<&str> = w.iter().take(4).map(String::as_str).collect();
        let used = match s.as_slice() {
            ["isolation", "level", "serializable", ..] => {
                modes.isolation = Some(Isolation::Serializable);
                3
            }
            ["isolation", "level", "repeatable", "read", ..] => {
                modes.isolation = Some(Isolation::RepeatableRead);
                4
            }
            ["isolation", "level", "read", "committed" | "uncommitted", ..] => {
                modes.isolation = Some(Isolation::ReadCommitted);
                4
            }
            ["read", "only", ..] => {
                modes.read_only = Some(true);
                2
            }
            ["read", "write", ..] => {
                modes.read_only = Some(false);
                2
            }
            ["deferrable", ..] => 1,
            ["not", "deferrable", ..] => 2,
            _ => return None,
        };
        w = &w[used..];
    }
    Some(modes)
}

/// Where transaction control appears in a Query (or Parse) that runs inside a read-only
/// transaction on a replica, which must not run anything after the transaction ends there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxEnd {
    /// No statement that begins or ends a transaction.
    No,
    /// Only the last statement does (the session may be idle after it).
    Last,
    /// One does and another statement follows it, or the text cannot be read with certainty.
    Inside,
}

/// See [`TxEnd`]. Transaction control: BEGIN, START, COMMIT, END, ABORT, ROLLBACK (not
/// `ROLLBACK TO`), PREPARE TRANSACTION. With `skip_begin`, a first statement that is a
/// BEGIN is not counted (it opened the transaction being routed).
pub fn tx_end(sql: &str, skip_begin: bool) -> TxEnd {
    if odd_quotes(sql).0 || open_comment(sql) {
        return TxEnd::Inside;
    }
    let mut control_seen = false;
    let mut inside = false;
    let mut n = 0;
    for_each_statement(sql, |stmt| {
        n += 1;
        let w = first_words(stmt);
        let is = |s: &str, t: &str| s.eq_ignore_ascii_case(t);
        let control = ["begin", "start", "commit", "end", "abort"]
            .iter()
            .any(|t| is(w[0], t))
            || is(w[0], "rollback") && !w[1..].iter().any(|x| is(x, "to"))
            || is(w[0], "prepare") && is(w[1], "transaction");
        if control_seen {
            inside = true;
        }
        if control && !(skip_begin && n == 1 && (is(w[0], "begin") || is(w[0], "start"))) {
            control_seen = true;
        }
    });
    match (inside, control_seen) {
        (true, _) => TxEnd::Inside,
        (false, true) => TxEnd::Last,
        (false, false) => TxEnd::No,
    }
}

/// Call `f` for each statement of `sql` (split at semicolons outside quotes and comments),
/// without allocating.
fn for_each_statement<'a>(sql: &'a str, mut f: impl FnMut(&'a str)) {
    let mut start = 0;
    scan(sql, |i, token| {
        if let Token::Semicolon = token {
            if !sql[start..i].trim().is_empty() {
                f(&sql[start..i]);
            }
            start = i + 1;
        }
        true
    });
    if !sql[start..].trim().is_empty() {
        f(&sql[start..]);
    }
}

/// Call `f(word, followed_by_open_paren)` for each word (keyword or unquoted identifier) of
/// `sql` outside quotes and comments, until it returns false.
/// A statement's first three words ("" past its end), outside quotes and comments.
fn first_words(stmt: &str) -> [&str; 3] {
    let mut w = [""; 3];
    let mut k = 0;
    for_each_word(stmt, |word, _| {
        w[k] = word;
        k += 1;
        k < w.len()
    });
    w
}

fn for_each_word<'a>(sql: &'a str, mut f: impl FnMut(&'a str, bool) -> bool) {
    let b = sql.as_bytes();
    scan(sql, |i, token| match token {
        Token::Word(end) => {
            let mut j = end;
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            f(&sql[i..end], b.get(j) == Some(&b'('))
        }
        _ => true,
    });
}

enum Token {
    /// A word from here to the given end.
    Word(usize),
    /// A quoted identifier (`"Report"`), quotes included, from here to the given end.
    Quoted(usize),
    Semicolon,
}

/// A byte that can continue an identifier (PostgreSQL's `ident_cont`, plus `.` for qualified
/// names as the scan reads them).
fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'$' || c >= 0x80
}

/// The lexer under [`for_each_statement`] and [`for_each_word`]: skips string literals
/// (incl. `E'…'`), quoted identifiers, dollar quotes and comments; reports words and
/// semicolons. Anything it cannot read is skipped byte by byte, which only ever makes the
/// routing see fewer words — so [`read_only`] treats a quote it cannot close as "unsure".
fn scan(sql: &str, mut f: impl FnMut(usize, Token) -> bool) {
    let b = sql.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\'' | b'"' => {
                // E'…': a backslash escapes the next byte, `\'` included (the E must stand
                // alone: `tablE'x'` is no escape string).
                let escapes = c == b'\''
                    && i >= 1
                    && matches!(b[i - 1], b'E' | b'e')
                    && (i < 2 || !is_word_byte(b[i - 2]));
                let start = i;
                i += 1;
                // memchr: a literal may be megabytes, and the shard waits for this scan.
                while i < b.len() {
                    let next = if escapes {
                        memchr::memchr2(c, b'\\', &b[i..])
                    } else {
                        memchr::memchr(c, &b[i..])
                    };
                    match next {
                        Some(p) if b[i + p] == c => {
                            i += p;
                            break;
                        }
                        Some(p) => i += p + 2,
                        None => i = b.len(),
                    }
                }
                i += 1;
                if c == b'"' && !f(start, Token::Quoted(i.min(b.len()))) {
                    return;
                }
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                i = memchr::memchr(b'\n', &b[i..]).map_or(b.len(), |p| i + p);
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                // Comments nest in PostgreSQL: `/* /* */ still a comment */`.
                i = b.len() - after_block_comment(&sql[i..]).len();
            }
            b'$' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                i += 1; // $1: a parameter (a dollar quote's tag cannot start with a digit)
            }
            b'$' => {
                // A tag is an identifier without `$`: letters (any non-ASCII byte too),
                // digits after the first, underscores.
                let tag_end = b[i + 1..]
                    .iter()
                    .position(|c| !(c.is_ascii_alphanumeric() || *c == b'_' || *c >= 0x80))
                    .map(|p| i + 1 + p);
                match tag_end.filter(|e| b.get(*e) == Some(&b'$')) {
                    Some(e) => {
                        let tag = &sql[i..=e];
                        i = match memmem::find(&b[e + 1..], tag.as_bytes()) {
                            Some(p) => e + 1 + p + tag.len(),
                            None => b.len(),
                        };
                    }
                    None => i = tag_end.unwrap_or(b.len()), // $1: a parameter
                }
            }
            b';' => {
                if !f(i, Token::Semicolon) {
                    return;
                }
                i += 1;
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 => {
                let start = i;
                // `$` after the first character belongs to the identifier (`job$queue$`),
                // as in PostgreSQL's lexer: read as the start of a dollar quote, it would
                // hide every word up to a matching tag.
                while i < b.len() && is_word_byte(b[i]) {
                    i += 1;
                }
                // E'…' / B'…' / X'…' / U&'…' literals: the quote is handled next turn.
                if !f(start, Token::Word(i)) {
                    return;
                }
            }
            // Digits, operators, punctuation, whitespace: nothing to report up to the next
            // byte one of the arms above reads (long IN lists and VALUES rows are mostly
            // these).
            _ => {
                i += 1;
                while i < b.len() && !STARTS_TOKEN[usize::from(b[i])] {
                    i += 1;
                }
            }
        }
    }
}

/// The bytes [`scan`] may do something at: the first bytes of its match arms.
static STARTS_TOKEN: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        t[c] = matches!(b, b'\'' | b'"' | b'-' | b'/' | b'$' | b';' | b'_')
            || b.is_ascii_alphabetic()
            || b >= 0x80;
        c += 1;
    }
    t
};

/// Whether `sql` may run code stored upstream that this scan cannot read: a call of any
/// function that is not one of PostgreSQL's built-ins (a user's `set_tenant(42)` may run
/// `set_config(…, false)` or `SET search_path` inside), `CALL`, `DO` (whose body may spell
/// a SET at run time, `EXECUTE 'SE' || 'T …'`), and the built-ins that run a query given as
/// text ([`RUN_QUERY_TEXT`]). What such code leaves in the session is invisible to the
/// relay, so the connection goes back to its pool with its settings unknown
/// (`Session::give_back`) and whoever uses it next replays `RESET ALL` and their own SETs.
/// Conservative: a false "yes" costs that replay; a false "no" would let a function's SET
/// reach the next client.
///
/// A call is a name followed by `(` (comments between them are blank, as to PostgreSQL)
/// that is not a keyword taking a parenthesised list (`IN (`, `VALUES (`, `numeric(10, 2)`,
/// `ORDER BY (`: only reserved keywords, those that cannot name a function, and a few in
/// the place the grammar gives them), not a built-in from [`PG_CATALOG_FUNCTIONS`] (bare or
/// `pg_catalog.`), not a relation's column list (`INSERT INTO t (a, b)`, `AS t(a, b)`,
/// `WITH c (a) AS`, `CREATE FUNCTION f(int)`: the name right after one of
/// [`RELATION_WORDS`]), not `OVER (` / `FILTER (` after a call's `)`, and not
/// a statement's first word (`EXPLAIN (…)`, `COPY (…)`). Any quoted or otherwise qualified
/// name counts, and so does a name with a comment just before it. Left to the upstream,
/// unseen here: code a statement runs without naming it in call syntax (triggers, views,
/// column defaults, row security policies, operators, casts, domain checks, `p.full_name`
/// attribute notation), and a user's overload of a built-in's name (`public.lower(int)`
/// called as `lower(42)`; docs/ARCHITECTURE.md, "Code stored upstream", has the rest).
/// Allocation-free; a statement with neither `(` nor `;` is decided by its first word and
/// whether it says `execute`.
pub fn runs_user_code(sql: &str) -> bool {
    let b = sql.as_bytes();
    // (`EXECUTE name`, also under EXPLAIN or CREATE TABLE … AS: a statement prepared by
    // SQL PREPARE, which pins, or by ringwire, which may call anything.)
    let starts_code = |w: &str| word_in(w, &["do", "call"]);
    if memchr::memchr2(b'(', b';', b).is_none() {
        return starts_code(first_words(sql)[0]) || contains_ignore_case(b, b"execute");
    }
    let mut found = false;
    let mut statement_start = true;
    let mut first_word = "";
    // Where the previous word or quoted name ended, and what it was: the text between it
    // and the next tells a qualified name (`.`), a call's end (`)`) or a comment apart.
    let mut prev_end = 0;
    let mut prev_word = "";
    let mut prev_quoted = false;
    // The previous token was one of RELATION_WORDS / was (part of) the relation name after
    // one: a `(` after the name opens a column or parameter list, not a call.
    let (mut prev_relation_word, mut prev_relation_name) = (false, false);
    scan(sql, |start, token| {
        let (end, quoted) = match token {
            Token::Word(end) => (end, false),
            Token::Quoted(end) => (end, true),
            Token::Semicolon => {
                (statement_start, first_word) = (true, "");
                prev_end = start + 1;
                (prev_word, prev_relation_word, prev_relation_name) = ("", false, false);
                prev_quoted = false;
                return true;
            }
        };
        let word = &sql[start..end];
        let gap = &sql[prev_end..start];
        prev_end = end;
        // A comment before the name: read no further into it.
        let murky = gap.contains("--") || gap.contains("/*");
        let gap = gap.trim();
        let continues = !murky && (gap == "." || gap.is_empty() && prev_word.ends_with('.'));
        let relation_name =
            !murky && (gap.is_empty() && prev_relation_word || continues && prev_relation_name);
        let first = std::mem::take(&mut statement_start);
        if !quoted && word.eq_ignore_ascii_case("execute") {
            found = true;
            return false;
        }
        if first && !quoted {
            if starts_code(word) {
                found = true;
                return false;
            }
            first_word = word;
        }
        if !relation_name && !first && skip_blank(&sql[end..]).starts_with('(') {
            // The word just before (none if something else came between), and whether what
            // came before ends an operand: a literal, a quoted name, a name that is no
            // keyword. (What may follow a `)` is below.)
            let adjacent = if gap.is_empty() { prev_word } else { "" };
            let operand_before = if gap.is_empty() {
                prev_quoted
                    || !prev_word.is_empty()
                        && !word_in(prev_word, PAREN_KEYWORDS)
                        && !word_in(prev_word, BEFORE_OPERAND)
            } else {
                gap.ends_with(|c: char| c == '\'' || c.is_ascii_digit())
            };
            let call = murky
                || quoted
                || continues
                // `count(*) OVER (`: an operator after a call's `)`. (Not any name after a
                // `)`: `DISTINCT ON (id) f(id)` calls `f`.)
                || !(gap.ends_with(')') && word_in(word, AFTER_CALL)
                    || keyword_in_place(first_word, adjacent, operand_before, word)
                    // `UPDATE t SET (a, b) = …`
                    || gap.is_empty() && prev_relation_name && word.eq_ignore_ascii_case("set")
                    || builtin_or_keyword(word));
            if call {
                found = true;
                return false;
            }
        }
        prev_word = if quoted { "" } else { word };
        prev_quoted = quoted;
        prev_relation_word = !quoted && word_in(word, RELATION_WORDS);
        prev_relation_name = relation_name;
        true
    });
    found
}

/// Words after which the next name is a relation (or CTE, alias, routine being defined),
/// whose `(` opens a list of columns or parameters. Not `ON` or `USING`: `JOIN … ON f(x)`
/// and `DELETE … USING f(x)` call `f`. (`update`: for `UPDATE t SET (a, b)` and `DO UPDATE
/// SET (a, b)`.) Only the very next name: `GENERATED ALWAYS AS
/// (f(a))` calls `f`.
const RELATION_WORDS: &[&str] = &[
    "into",
    "update",
    "table",
    "exists",
    "as",
    "with",
    "recursive",
    "copy",
    "references",
    "view",
    "function",
    "procedure",
    "routine",
    "aggregate",
];

/// Keywords the grammar may follow with `(` that no user's function can be named
/// unquoted: reserved keywords, and the "column name" ones (type names, SQL-standard
/// function syntax). Others that may name a function are told apart by their place
/// ([`keyword_in_place`]); `OVER (`, `FILTER (`, `WITHIN GROUP (` and `OVERLAPS (` follow a
/// `)`. (Not `storage::quote_identifier`'s list, which has the type-or-function-name
/// keywords too: `isnull(a, b)` is a user's function in many a port from SQL Server.)
const PAREN_KEYWORDS: &[&str] = &[
    "select",
    "from",
    "where",
    "and",
    "or",
    "not",
    "in",
    "any",
    "all",
    "some",
    "array",
    "as",
    "on",
    "using",
    "group",
    "then",
    "else",
    "when",
    "case",
    "to",
    "lateral",
    "returning",
    "with",
    "limit",
    "offset",
    "having",
    "distinct",
    "union",
    "intersect",
    "except",
    "window",
    "cast",
    "for",
    "do",
    "table",
    "into",
    "only",
    "order",
    "check",
    "unique",
    "primary",
    "foreign",
    "references",
    "default",
    "constraint",
    "analyze",
    "analyse",
    "variadic",
    "fetch",
    "current_time",
    "current_timestamp",
    "localtime",
    "localtimestamp",
    // column-name keywords
    "exists",
    "values",
    "row",
    "between",
    "coalesce",
    "nullif",
    "greatest",
    "least",
    "extract",
    "overlay",
    "position",
    "substring",
    "trim",
    "treat",
    "normalize",
    "grouping",
    "xmlattributes",
    "xmlconcat",
    "xmlelement",
    "xmlexists",
    "xmlforest",
    "xmlnamespaces",
    "xmlparse",
    "xmlpi",
    "xmlroot",
    "xmlserialize",
    "xmltable",
    "decimal",
    "dec",
    "char",
    "character",
    "varchar",
    "nchar",
    "national",
    "float",
    "precision",
    "integer",
    "int",
    "smallint",
    "bigint",
    "real",
    "boolean",
    "numeric",
    "time",
    "timestamp",
    "interval",
    "bit",
    "setof",
];

/// A keyword that may name a function elsewhere but not where it stands: right after
/// `prev` (`ORDER BY (`, `GROUPING SETS (`, `PRIMARY KEY (`, `AT TIME ZONE (`,
/// `CHARACTER VARYING(`), in the statement that `first` begins (`INSERT … ON CONFLICT (`,
/// `COPY … FROM STDIN (FORMAT binary)`), or after an operand (`a JOIN (select …)`,
/// `x ILIKE (…)`: a call never follows an operand).
fn keyword_in_place(first: &str, prev: &str, operand_before: bool, word: &str) -> bool {
    let is = |w: &str, list: &[&str]| word_in(w, list);
    match () {
        _ if word.eq_ignore_ascii_case("by") => is(prev, &["order", "group", "partition"]),
        _ if word.eq_ignore_ascii_case("sets") => prev.eq_ignore_ascii_case("grouping"),
        _ if word.eq_ignore_ascii_case("key") => is(prev, &["primary", "foreign"]),
        _ if word.eq_ignore_ascii_case("zone") => prev.eq_ignore_ascii_case("time"),
        _ if word.eq_ignore_ascii_case("varying") => is(prev, &["character", "bit"]),
        _ if word.eq_ignore_ascii_case("conflict") => {
            prev.eq_ignore_ascii_case("on") && first.eq_ignore_ascii_case("insert")
        }
        _ if is(word, &["stdin", "stdout"]) => {
            is(prev, &["from", "to"]) && first.eq_ignore_ascii_case("copy")
        }
        _ if word.eq_ignore_ascii_case("join") => {
            operand_before
                || is(
                    prev,
                    &[
                        "inner", "left", "right", "full", "outer", "cross", "natural",
                    ],
                )
        }
        // (`like` is a built-in: `like(` is never a user's call anyway.)
        _ if word.eq_ignore_ascii_case("ilike") => {
            operand_before || prev.eq_ignore_ascii_case("not")
        }
        _ => false,
    }
}

/// Words that come right before an operand, so that a name after them may be a call:
/// keywords missing from [`PAREN_KEYWORDS`] (`LIKE join(…)`, `AT TIME ZONE join(…)`,
/// `CROSS JOIN join(…)`, `TRIM(BOTH join(…) FROM …)`, `FETCH FIRST join(n) ROWS`).
const BEFORE_OPERAND: &[&str] = &[
    "by",
    "like",
    "ilike",
    "similar",
    "join",
    "zone",
    "escape",
    "both",
    "leading",
    "trailing",
    "symmetric",
    "asymmetric",
    "placing",
    "first",
    "next",
    "document",
    "content",
    "is",
    "not",
];

/// Words that follow a call's `)` as part of its syntax and take a `(` themselves.
const AFTER_CALL: &[&str] = &["over", "filter", "within", "overlaps"];

/// Built-ins that run a query given to them as text, which may call anything:
/// `query_to_xml('select set_tenant(42)', …)`.
const RUN_QUERY_TEXT: &[&str] = &[
    "query_to_xml",
    "query_to_xmlschema",
    "query_to_xml_and_xmlschema",
    "ts_stat",
    "ts_rewrite",
];

/// PostgreSQL's built-in function names (`pg_catalog`), written by
/// `scripts/pg_catalog_functions.sh` from PostgreSQL 15. A newer version's built-ins are
/// not in it and only cost a false "user code" (a replay); a name listed here that an older
/// server lacks hides a user's function of that name there (on 13 or 14: `regexp_like`,
/// `string_to_table`, `date_bin` and the like, which PostgreSQL 14 and 15 added).
/// tests/upstream.rs checks it against the PostgreSQL the tests run.
pub const PG_CATALOG_FUNCTIONS: &str = include_str!("pg_catalog_functions.txt");

static BUILTINS: LazyLock<std::collections::HashSet<&'static str>> = LazyLock::new(|| {
    PG_CATALOG_FUNCTIONS
        .lines()
        .filter(|l| !l.starts_with('#') && !RUN_QUERY_TEXT.contains(l))
        .chain(PAREN_KEYWORDS.iter().copied())
        .collect()
});

fn word_in(word: &str, list: &[&str]) -> bool {
    list.iter().any(|w| word.eq_ignore_ascii_case(w))
}

/// An unquoted name before `(` that is a built-in function (bare or `pg_catalog.`) or a
/// keyword, ASCII-case-insensitively (unquoted names fold to lower case).
fn builtin_or_keyword(word: &str) -> bool {
    let name = match word.get(..11) {
        Some(p) if p.eq_ignore_ascii_case("pg_catalog.") => &word[11..],
        _ => word,
    };
    // (Built-in names are shorter; a longer one is no built-in.)
    let mut lower = [0u8; 64];
    if name.len() > lower.len() || name.contains('.') {
        return false;
    }
    let lower = &mut lower[..name.len()];
    lower.copy_from_slice(name.as_bytes());
    lower.make_ascii_lowercase();
    std::str::from_utf8(lower).is_ok_and(|n| BUILTINS.contains(n))
}

/// Words that make a statement unfit for a replica wherever they appear: writes (also inside
/// a CTE), `SELECT … INTO` (creates a table), `FOR UPDATE/SHARE` (row locks; `FOR` also ends
/// up here from `substring(x FOR n)`, which only costs a primary read), `LOCK`, sequences
/// (`nextval` and friends write or read session state), and `CALL`/`DO`.
const NOT_ON_A_REPLICA: &[&str] = &[
    "insert", "update", "delete", "merge", "into", "for", "lock", "nextval", "setval", "currval",
    "lastval", "call", "do", "copy", "notify", "listen",
];

/// Words that may be followed by `(` in a read-only statement: SQL keywords that take a
/// parenthesised list, and built-in functions that are immutable or stable (so they neither
/// write nor differ between primary and standby). Any other `name(` is a function call that
/// may be volatile or user-defined (and could write): the statement goes to the primary.
const CALLABLE_ON_A_REPLICA: &[&str] = &[
    // keywords
    "select",
    "from",
    "where",
    "and",
    "or",
    "not",
    "in",
    "exists",
    "any",
    "all",
    "some",
    "as",
    "on",
    "using",
    "join",
    "values",
    "row",
    "array",
    "over",
    "filter",
    "partition",
    "by",
    "when",
    "then",
    "else",
    "case",
    "is",
    "distinct",
    "like",
    "ilike",
    "between",
    "with",
    "union",
    "intersect",
    "except",
    "lateral",
    "within",
    "group",
    "order",
    "having",
    "limit",
    "offset",
    "cast",
    "coalesce",
    "nullif",
    "greatest",
    "least",
    "extract",
    "overlay",
    "position",
    "trim",
    "substring",
    "interval",
    "numeric",
    "decimal",
    "varchar",
    "char",
    "character",
    "timestamp",
    "time",
    "bit",
    "float",
    "grouping",
    "rollup",
    "cube",
    "sets",
    "materialized",
    // aggregates
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "bool_and",
    "bool_or",
    "every",
    "string_agg",
    "array_agg",
    "json_agg",
    "jsonb_agg",
    "json_object_agg",
    "jsonb_object_agg",
    "stddev",
    "variance",
    "percentile_cont",
    "percentile_disc",
    "mode",
    "row_number",
    "rank",
    "dense_rank",
    "lag",
    "lead",
    "first_value",
    "last_value",
    "ntile",
    // immutable / stable built-ins
    "lower",
    "upper",
    "length",
    "char_length",
    "octet_length",
    "abs",
    "round",
    "floor",
    "ceil",
    "ceiling",
    "trunc",
    "sqrt",
    "mod",
    "power",
    "ln",
    "log",
    "exp",
    "sign",
    "concat",
    "concat_ws",
    "replace",
    "split_part",
    "substr",
    "left",
    "right",
    "lpad",
    "rpad",
    "ltrim",
    "rtrim",
    "btrim",
    "md5",
    "to_char",
    "to_date",
    "to_number",
    "to_timestamp",
    "date_trunc",
    "date_part",
    "age",
    "now",
    "current_date",
    "make_date",
    "array_length",
    "cardinality",
    "unnest",
    "generate_series",
    "jsonb_build_object",
    "json_build_object",
    "to_json",
    "to_jsonb",
    "jsonb_extract_path",
    "jsonb_array_length",
    "format",
    "starts_with",
    "regexp_replace",
    "regexp_match",
    "encode",
    "decode",
    "int2",
    "int4",
    "int8",
    "float4",
    "float8",
    "text",
    "bool",
    "date",
    "version",
    "current_setting",
    "pg_is_in_recovery",
    "pg_last_wal_replay_lsn",
    "pg_backend_pid",
];

/// True only when `sql` is certainly one read-only statement: it starts with SELECT, VALUES,
/// TABLE, WITH or SHOW, contains none of [`NOT_ON_A_REPLICA`] outside quotes and comments,
/// and calls no function outside [`CALLABLE_ON_A_REPLICA`]. Anything unsure is false (the
/// statement goes to the primary); a false "read-only" would at worst fail on the standby
/// with 25006, which is retried on the primary too. Allocation-free: it runs per simple
/// Query.
pub fn read_only(sql: &str) -> bool {
    let mut first = true;
    let mut ok = true;
    let mut statements = 0;
    for_each_statement(sql, |_| statements += 1);
    if statements != 1 || unbalanced_quotes(sql) {
        return false;
    }
    for_each_word(sql, |word, call| {
        let is = |list: &[&str]| list.iter().any(|w| word.eq_ignore_ascii_case(w));
        if first {
            first = false;
            ok = is(&["select", "values", "table", "with", "show"]);
        } else if is(NOT_ON_A_REPLICA) {
            ok = false;
        } else if call {
            let name = word
                .strip_prefix("pg_catalog.")
                .or_else(|| word.strip_prefix("PG_CATALOG."))
                .unwrap_or(word);
            ok = CALLABLE_ON_A_REPLICA
                .iter()
                .any(|w| name.eq_ignore_ascii_case(w));
        }
        ok
    });
    ok && !first
}

/// A quote or comment the scan could not close: the text is not what it seems (or not SQL).
fn unbalanced_quotes(sql: &str) -> bool {
    let (odd, backslash) = odd_quotes(sql);
    // An odd count means an unterminated literal, or a quote inside a comment or a dollar
    // quote: either way not worth reading further.
    odd || backslash || open_comment(sql)
}

/// Whether `sql` has an odd number of `'` or of `"`, and whether it has a backslash: one
/// pass the compiler vectorises.
fn odd_quotes(sql: &str) -> (bool, bool) {
    let (mut singles, mut doubles, mut backslash) = (0u8, 0u8, false);
    for &c in sql.as_bytes() {
        singles ^= u8::from(c == b'\'');
        doubles ^= u8::from(c == b'"');
        backslash |= c == b'\\';
    }
    (singles | doubles != 0, backslash)
}

/// A `/*` with no `*/` anywhere after the first one.
fn open_comment(sql: &str) -> bool {
    let b = sql.as_bytes();
    memmem::find(b, b"/*").is_some_and(|i| memmem::find(&b[i..], b"*/").is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn autocommit_only(sql: &str) -> bool {
        autocommit_shape(sql).is_some()
    }

    #[test]
    fn what_a_read_committed_transaction_may_carry_to_another_connection() {
        let movable = |sql: &str| {
            let mut replay = String::new();
            movable_in_transaction(sql, &mut replay).then_some(replay)
        };
        for (sql, replay) in [
            ("select v from kv where k = 1", ""),
            ("SELECT * FROM t", ""),
            ("begin read only", ""),
            (
                "START TRANSACTION ISOLATION LEVEL READ COMMITTED, READ ONLY",
                "",
            ),
            ("select 1; select 2", ""),
            ("begin read only; select 1;", ""),
            ("savepoint s", "savepoint s\n;"),
            ("RELEASE SAVEPOINT s", "RELEASE SAVEPOINT s\n;"),
            (
                "set local statement_timeout = 1 -- why",
                "set local statement_timeout = 1 -- why\n;",
            ),
            (
                "BEGIN READ ONLY; SET LOCAL search_path TO a, b; select 1; SET LOCAL TIME ZONE 'UTC'",
                "SET LOCAL search_path TO a, b\n;SET LOCAL TIME ZONE 'UTC'\n;",
            ),
            ("set local myapp.tenant = '7'", "set local myapp.tenant = '7'\n;"),
        ] {
            assert_eq!(movable(sql).as_deref(), Some(replay), "{sql}");
        }
        for sql in [
            "declare c cursor for select 1",
            "set statement_timeout = 1",
            "reset statement_timeout",
            "rollback to s",
            "set transaction isolation level repeatable read",
            "set local transaction isolation level repeatable read",
            "set local transaction_isolation = 'repeatable read'",
            "set local transaction_read_only = off",
            "set local role postgres",
            "set local \"Role\" = postgres",
            "set local session authorization postgres",
            "set local names 'LATIN1'",
            "set local standard_conforming_strings = off",
            "set local search_path = pg_temp",
            "set local seed = 0.5",
            "set local U&\"transaction_isolation\" = 'repeatable read'",
            "set local temp_buffers = '16MB'",
            "set local constraints all deferred",
            "select pg_advisory_xact_lock(1)",
            "select set_config('a.b', 'c', true)",
            "select my_function()",
            "select currval('s')",
            "begin read only; declare c cursor for select 1",
            "savepoint s; declare c cursor for select 1",
            "commit",
            "select * from t for share",
            "select lo_open(16385, 262144)",
            "SELECT pg_catalog.loread(0, 100)",
            "select pg_export_snapshot()",
            "select 'unclosed",
            "",
        ] {
            assert_eq!(movable(sql), None, "{sql}");
        }
    }

    #[test]
    fn what_takes_a_snapshot_in_a_transaction() {
        for sql in [
            "select 1",
            "begin read only; select 1",
            "set local a.b = 1; values (1)",
            "with x as (select 1) select * from x",
            "declare c cursor for select 1",
        ] {
            assert!(takes_snapshot(sql), "{sql}");
        }
        for sql in [
            "begin read only",
            "SET LOCAL statement_timeout = 1; savepoint s; release s",
            "show work_mem",
            "set transaction isolation level repeatable read",
            "",
        ] {
            assert!(!takes_snapshot(sql), "{sql}");
        }
    }

    #[test]
    fn shapes_leave_out_literals_and_keep_words() {
        let shape = |sql| autocommit_shape(sql).expect(sql);
        let pgbench = shape("SELECT abalance FROM pgbench_accounts WHERE aid = 17;");
        assert_eq!(
            pgbench,
            shape("select abalance  from pgbench_accounts where aid=42")
        );
        assert_eq!(
            shape("select pg_sleep(0.3)"),
            shape("SELECT pg_sleep(0.001)")
        );
        assert_eq!(
            shape("select * from t where a = 'x'"),
            shape("select * from t where a='y'")
        );
        assert_ne!(
            pgbench,
            shape("SELECT bbalance FROM pgbench_branches WHERE bid = 17")
        );
        assert_ne!(shape("select * from t"), shape("select * from u"));
        assert_ne!(shape("select a from t"), shape("select from at"));
        // Quoted identifiers count as written (an ORM quotes every name).
        assert_ne!(
            shape(r#"SELECT "id" FROM "Report" WHERE "id" = 1"#),
            shape(r#"SELECT "id" FROM "User" WHERE "id" = 1"#)
        );
        assert_ne!(shape(r#"select * from "T""#), shape(r#"select * from "t""#));
        assert_eq!(
            shape(r#"select * from "T""#),
            shape(r#"SELECT * FROM "T" "#)
        );
        // A batch's shape depends on its statements and their order.
        let (a, b) = (shape("select 1 from t"), shape("select 1 from u"));
        assert_ne!(combine_shapes(a, b), combine_shapes(b, a));
        assert_ne!(combine_shapes(0, a), 0);
    }

    #[test]
    fn autocommit_only_statements() {
        for yes in [
            "SELECT abalance FROM pgbench_accounts WHERE aid = 7;",
            "select * from t",
            "select 'update', \"delete\" from t",
            "with x as (select 1) select * from x",
            "values (1), (2)",
            "table t",
            "select 'begin' -- commit\n",
        ] {
            assert!(autocommit_only(yes), "{yes}");
        }
        for no in [
            // Writes, and reads that lock rows: they can wait for a lock, and the units
            // behind them on a pipe with them.
            "insert into t values ($1, 'begin')",
            "UPDATE t SET v = v + 1 WHERE k = $1",
            "delete from t where k = 1",
            "with d as (delete from t returning *) select * from d",
            "select * from t where k = 1 for update",
            "select * from t for no key update",
            "select * from t for key share",
            "select * from t for share",
            "begin",
            "BEGIN; select 1",
            "select 1; select 2",
            "commit",
            "set search_path = s1",
            "select set_config('a.b', '1', false)",
            "select pg_advisory_lock(1)",
            "select pg_advisory_xact_lock(1)",
            "select * into temp x from t",
            "select * into x from t",
            "create temp table x (a int)",
            "listen c",
            "copy t from stdin",
            "prepare p as select 1",
            "declare c cursor for select 1",
            "deallocate p",
            "call p()",
            "do $$ begin end $$",
            "explain analyze delete from t",
            // `$` inside an identifier is not a dollar quote hiding the rest.
            "SELECT * FROM job$queue$ WHERE id = 1 FOR UPDATE SKIP LOCKED",
            "select * from t a$$ for update",
            "select * from t as a$x$ for update of a$x$",
            "select 1 as x$q$ into temp t1",
            "with d$x$ as (update t set v = 1 returning *) select * from d$x$",
            "select 'unterminated",
            "select E'\\' ",
            "",
            // What a sequence leaves in the session: kept per client only on a connection
            // of its own.
            "select nextval('s')",
            "SELECT LASTVAL()",
            "select currval('s')",
            "select pg_catalog.setval('s', 5)",
            "select \"lastval\"()",
            "select \"currval\"('s')",
            "select pg_catalog.\"nextval\"('s')",
            "select PG_CATALOG.LASTVAL()",
        ] {
            assert!(!autocommit_only(no), "{no}");
        }
        assert!(autocommit_only("select \"LASTVAL\" from t"));
    }

    #[test]
    fn what_reads_sequence_state() {
        for yes in [
            "select lastval()",
            "SELECT CurrVal('s')",
            "select \"lastval\"()",
            "insert into t values (1); select lastval()",
            // Anywhere: a false match costs one DISCARD SEQUENCES.
            "select 'currval'",
            "select U&\"\\006castval\"()",
        ] {
            assert!(reads_sequence_state(yes), "{yes}");
        }
        for no in [
            "select nextval('s')",
            "select 1",
            "select last_val from s",
            "",
        ] {
            assert!(!reads_sequence_state(no), "{no}");
        }
    }

    #[test]
    fn read_only_transaction_starts() {
        let ro = |iso| {
            Some(TxModes {
                read_only: Some(true),
                isolation: iso,
            })
        };
        assert_eq!(begin_modes("BEGIN READ ONLY"), ro(None));
        assert_eq!(begin_modes("begin transaction read only;"), ro(None));
        assert_eq!(
            begin_modes("START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"),
            ro(Some(Isolation::RepeatableRead))
        );
        assert_eq!(
            begin_modes("start transaction read only isolation level read uncommitted"),
            ro(Some(Isolation::ReadCommitted))
        );
        assert_eq!(
            begin_modes("BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY DEFERRABLE"),
            ro(Some(Isolation::Serializable))
        );
        assert_eq!(begin_modes("begin /* x */ work"), Some(TxModes::default()));
        assert_eq!(
            begin_modes("BEGIN READ WRITE").and_then(|m| m.read_only),
            Some(false)
        );
        assert_eq!(begin_modes("BEGIN READ ONLY; SELECT 1; COMMIT"), ro(None));
        for no in [
            "BEGIN READ",
            "/* c */ BEGIN READ ONLY",
            "START READ ONLY",
            "begin isolation level snapshot",
            "select 1",
            "begin 'x'",
            "",
        ] {
            assert_eq!(begin_modes(no), None, "{no}");
        }
        assert_eq!(
            Isolation::from_setting("repeatable read"),
            Some(Isolation::RepeatableRead)
        );
    }

    #[test]
    fn transaction_ends_in_a_query() {
        assert_eq!(tx_end("select 1", false), TxEnd::No);
        assert_eq!(tx_end("savepoint a; rollback to a", false), TxEnd::No);
        assert_eq!(tx_end("COMMIT", false), TxEnd::Last);
        assert_eq!(tx_end("select 1; commit;", false), TxEnd::Last);
        assert_eq!(tx_end("commit; select 1", false), TxEnd::Inside);
        assert_eq!(
            tx_end("rollback; insert into t values (1)", false),
            TxEnd::Inside
        );
        assert_eq!(tx_end("begin read only; select 1", true), TxEnd::No);
        assert_eq!(tx_end("begin read only; select 1; end", true), TxEnd::Last);
        assert_eq!(tx_end("begin read only; select 1", false), TxEnd::Inside);
        assert_eq!(tx_end("select 'commit; x'", false), TxEnd::No);
        assert_eq!(tx_end("select 'a; commit", false), TxEnd::Inside);
    }

    #[test]
    fn deallocate_of_one_statement() {
        assert_eq!(deallocated("DEALLOCATE s1"), Some("s1".into()));
        assert_eq!(deallocated(" deallocate prepare S1 ;"), Some("s1".into()));
        assert_eq!(deallocated("DEALLOCATE \"Mixed\""), Some("Mixed".into()));
        assert_eq!(deallocated("DEALLOCATE \"all\""), Some("all".into()));
        assert_eq!(deallocated(" ; ;DEALLOCATE s1"), Some("s1".into()));
        assert_eq!(deallocated("DEALLOCATE ALL"), None);
        assert_eq!(deallocated("DEALLOCATE PREPARE ALL"), None);
        assert_eq!(deallocated("DEALLOCATE a; select 1"), None);
        assert_eq!(deallocated("DEALLOCATE a + 1"), None);
        assert!(deallocates_all("DEALLOCATE ALL"));
        assert!(deallocates_all(" deallocate prepare all ;"));
        assert!(!deallocates_all("DEALLOCATE \"all\""));
        assert!(!deallocates_all("DEALLOCATE ALL; select 1"));
        assert!(!deallocates_all("DEALLOCATE s1"));
        assert_eq!(deallocated("DEALLOCATE a b"), None);
        assert_eq!(deallocated("select 1"), None);
    }

    #[test]
    fn transaction_ends_inside_a_query() {
        let ends = |sql: &str| -> Vec<(usize, usize, bool)> {
            classify(sql)
                .ends
                .iter()
                .map(|e| (e.statement, e.sets_before, e.ends_tx))
                .collect()
        };
        // One statement: its ReadyForQuery settles it.
        assert_eq!(ends("commit"), vec![]);
        assert_eq!(ends("commit; -- done"), vec![]);
        assert_eq!(
            ends("set a.b = 1; COMMIT; set a.c = 2; set a.d = 3; rollback"),
            vec![(1, 1, true), (4, 2, true)]
        );
        assert_eq!(
            ends("begin; savepoint s; set a.b = 1; rollback to s; end; abort"),
            vec![(3, 1, false), (4, 0, true), (5, 0, true)]
        );
        assert_eq!(
            ends("begin; commit and chain; rollback work to savepoint s; commit prepared 'x'; select 1"),
            vec![(1, 0, true), (2, 0, false)]
        );
        // A comment-only statement gets no reply and is not counted.
        assert_eq!(
            ends("select 1; /* c */; commit; select 2"),
            vec![(1, 0, true)]
        );
        // Only statements with a reply count as statements; the words inside quotes and
        // comments are not statements.
        assert_eq!(ends("/* c */ ; commit"), vec![]);
        assert_eq!(ends("select 'commit; rollback'; select 1"), vec![]);
    }

    #[test]
    fn what_runs_user_code() {
        for sql in [
            "select set_tenant(42)",
            "SELECT public.f()",
            "select \"MyFunc\"(1)",
            "select \"s\".lower(x)",
            "select S.lower(x)",
            "SELECT * FROM my_rows()",
            "CALL p(1)",
            "call p",
            "do $$begin perform 1; end$$",
            "DO 'BEGIN NULL; END'",
            "select 1; /* c */ Do $$x$$",
            "select * from t join u on f(t.a) = u.b",
            "delete from t using f(1) x",
            "select x, f (y) from t",
            "select (g(1))",
            "select * from t, lateral g(t.a)",
            "select 1 from t where x in (select h(y))",
            "insert into t values (f(1))",
            "insert into t (a) select f(1)",
            "select lower(x) from t where mine(x)",
            // Comments are blank between a name and its `(`, and hide nothing before it.
            "select set_tenant/**/(42)",
            "select set_tenant --x\n(42)",
            "select -- tenant (see #12)\nset_tenant(42)",
            "select a, /* ) */ f(1) from t",
            "select app./**/lower(x)",
            // Unreserved keywords can name a user's function.
            "select hash(email) from users",
            "select key(1), range(2), options(3), index(4), partition(5)",
            "select app . lower(x)",
            "alter table t add column g int generated always as (set_tenant(a)) stored",
            "select query_to_xml('select set_tenant(42)', true, false, '')",
            "SELECT * FROM T AS X, F(1)",
            // Type-or-function-name and unreserved keywords where a call can stand.
            "SELECT is(have, want)",
            "SELECT join(tags, ',') FROM posts",
            "select * from t order by join(a)",
            "select similar(a, b), isnull(c, d)",
            "select id from users order by hash(email)",
            "select 1 from t group by range(x)",
            "select a from t join u on conflict(t.a, u.a)",
            "execute ringwire_7",
            "explain analyze execute ringwire_7",
            "create table x as execute ringwire_7(1)",
            "select distinct on (id) set_tenant(id) from t",
            "select 1 where 1 operator(pg_catalog.=) set_tenant(42)",
            "select * from generate_series(1, 3) g(i)",
            "select * from t where path like join(parts, '%')",
            "select * from t where name not ilike ilike(p)",
            "select * from a cross join join(x) j",
            "select * from a join ilike(x) i on true",
            "select ts at time zone join(z, '/') from t",
            "select trim(both join(a) from b)",
            "select * from t fetch first join(n) rows only",
        ] {
            assert!(runs_user_code(sql), "{sql}");
            assert!(!autocommit_only(sql), "{sql}");
        }
        for sql in [
            "select * from t",
            "SELECT abalance FROM pgbench_accounts WHERE aid = 1",
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) \
             VALUES (1, 2, 3, 4, CURRENT_TIMESTAMP)",
            "insert into \"Users\" (\"Name\") values ($1)",
            "INSERT INTO public.\"Users\" (\"Name\") values ($1)",
            "insert into \"s\".\"T\" (a) values (1)",
            "select count(*), lower(x), pg_catalog.upper(y), PG_CATALOG.Now() from t \
             where a in (1, 2) and exists (select 1) and b = any ($1)",
            "select cast(x as numeric(10, 2)), x::varchar(20), x::character varying(3), \
             coalesce(a, b), extract(year from d), substring(s from 2) from t",
            "with c (a) as (select 1) select * from c",
            "with recursive r(n) as (values (1)) select * from r",
            "select * from generate_series(1, 3) as g(i)",
            "select * from t as x(a, b)",
            "CREATE TABLE t (a int primary key, b text check (b <> ''), unique (b))",
            "create function f(a int) returns int language sql as 'select set_tenant(a)'",
            "create or replace procedure \"s\".\"p\"(a int) language sql as $$select 1$$",
            "drop function if exists f(int)",
            "select 'f(x)', $$g(y)$$ -- h(z)\n",
            "update t set (a, b) = (1, 2) where id = 1",
            "select sum(x) filter (where x > 0) over (partition by y order by z) from t",
            "select row(1, 2), array(select 1)",
            "INSERT INTO t (a) VALUES (1) ON CONFLICT (a) DO UPDATE SET a = excluded.a",
            "insert into t (a, b) values (1, 2) on conflict (a) do update set (a, b) = (3, 4)",
            "select 1; select 2",
            "select count(*) filter (where a) over (order by (b)) from t group by (c)",
            "select x at time zone ('utc') from t",
            "select cast(a as character varying(10)), b::bit varying(3) from t",
            "insert into t (a) values (1) on conflict (a) do nothing",
            "select 1 from t group by grouping sets ((a), (b))",
            "create table p (a int, primary key (a), foreign key (a) references q (b))",
            "copy t from stdin (format binary)",
            "COPY (SELECT 1) TO STDOUT (FORMAT csv)",
            "explain (analyze, verbose) select lower(a) from t",
            "/* app:x */ select count(*) from t",
            "select * from a join (select 1) b on true",
            "select * from a left join (b join c on c.x = b.x) on true",
            "select * from \"A\" join (select 1) b on true",
            "select 1 from t where name like ('a%') or 'a' ilike ('A') or x not like ('b')",
            "",
        ] {
            assert!(!runs_user_code(sql), "{sql}");
        }
        assert!(autocommit_only("select pg_sleep(0.3)"));
    }

    #[test]
    fn sets_and_pins() {
        let fx = classify("SET search_path = a, b; select 1; SET LOCAL x = 1");
        assert_eq!(
            fx.sets,
            vec![SetChange::Set(
                "search_path".into(),
                "SET search_path = a, b".into()
            )]
        );
        assert!(!fx.pins);
        assert_eq!(
            classify("/* c */ reset ALL").sets,
            vec![SetChange::ResetAll]
        );
        assert_eq!(
            classify("set session statement_timeout to 5").sets,
            vec![SetChange::Set(
                "statement_timeout".into(),
                "set session statement_timeout to 5".into()
            )]
        );
        assert!(classify("SET ROLE bob").pins);
        assert!(classify("select pg_advisory_lock(1)").pins);
        assert!(!classify("select pg_advisory_xact_lock(1)").pins);
        assert!(classify("CREATE TEMP TABLE t (a int)").pins);
        // Temporary objects made another way pin the session too.
        assert!(classify("SELECT 1 AS x INTO TEMP t1").pins);
        assert!(classify("select * into temporary table t1 from t").pins);
        assert!(classify("with a as (select 1) select * into local temp t1 from a").pins);
        assert!(classify("explain analyze select 1 into temp t1").pins);
        assert!(classify("CREATE TABLE pg_temp.t1 (a int)").pins);
        assert!(classify("create view PG_TEMP.v as select 1").pins);
        assert!(!classify("select * into t1 from t").pins);
        assert!(!classify("insert into temp values (1)").pins);
        assert!(!classify("create table t1 (a int)").pins);
        assert!(!classify("create table ab€€€ (a int)").pins);
        assert!(classify("SET search_path = pg_temp, public").pins);
        assert!(classify("set local search_path to 'PG_TEMP'").pins);
        assert!(classify("SET \"search_path\" TO pg_temp").pins);
        assert!(!classify("set search_path = public").pins);
        assert!(classify("DECLARE c CURSOR WITH\n  HOLD FOR select 1").pins);
        assert!(classify("declare c cursor with /* x */ hold for select 1").pins);
        assert!(!classify("declare c cursor without hold for select 1").pins);
        assert!(!classify("declare c cursor for select 'with hold'").pins);
        assert!(classify("prepare p as select 1").pins);
        assert!(classify("LISTEN c").pins);
        // DO blocks: the body's words, in code and literals.
        assert!(classify("DO $$BEGIN SET search_path = x; END$$").pins);
        assert!(classify("do $b$ begin execute 'reset all'; end $b$").pins);
        assert!(classify("DO 'BEGIN EXECUTE ''LISTEN c''; END'").pins);
        assert!(classify("do $$begin create temporary table x (a int); end$$").pins);
        // (Only the block's own text: the SET after it is a setting, tracked, not a pin.)
        assert!(!classify("do language plpgsql $$begin perform 1; end$$; set a.b = 1").pins);
        assert!(!classify("DO $$DECLARE n int; BEGIN SELECT count(*) INTO n FROM t; END$$").pins);
        assert!(!classify("do $$begin insert into t values (1); end$$").pins);
        assert!(!classify("select ';SET x=1'").pins);
        // What the lexer must read as PostgreSQL does, or a SET ROLE behind it is missed.
        for hidden in [
            "SELECT E'\\''; SET ROLE r; SELECT ''",
            "SELECT 1 /* /* */ ' */; SET ROLE r; SELECT '1'",
            "SELECT $é$ ' $é$; SET ROLE r; SELECT '1'",
            "SELECT 1 AS a$b$; SET ROLE r; SELECT 1 AS c$b$",
            "/* /* */ */ SET ROLE r",
        ] {
            assert!(classify(hidden).pins, "{hidden}");
        }
        // Names that spell state the scan cannot read, and the random sequence.
        assert!(classify("SET U&\"rol\\0065\" TO r").pins);
        assert!(classify("SELECT U&\"set\\005fconfig\"('work_mem', '8MB', false)").pins);
        assert!(classify("select setseed(0.5)").pins);
        assert!(classify("SET seed = 0.5").pins);
        assert!(classify("set standard_conforming_strings = off").pins);
        assert!(classify("SET standard_conforming_strings TO 'false'").pins);
        assert!(classify("set local standard_conforming_strings = off").pins);
        assert!(!classify("set local standard_conforming_strings = on").pins);
        assert!(!classify("SET standard_conforming_strings = on").pins);
        assert!(!classify("set standard_conforming_strings to 'ON';").pins);
        assert!(startup_changes_lexing(
            "standard_conforming_strings",
            "SET standard_conforming_strings TO 'off'"
        ));
        assert!(!startup_changes_lexing(
            "standard_conforming_strings",
            "SET standard_conforming_strings TO 'on'"
        ));
        // Temporary objects the first version of the scan missed.
        assert!(classify("SELECT 1 AS x INTO pg_temp.t2").pins);
        assert!(classify("EXPLAIN ANALYZE CREATE TEMP TABLE t3 AS SELECT 1").pins);
        assert!(classify("explain (analyze) create table pg_temp.t6 as select 1").pins);
        assert!(classify("CREATE TABLE \"pg_temp\".t4 (a int)").pins);
        // Special forms are named as SHOW names them, so RESET finds them; FROM CURRENT
        // changes nothing.
        let set = |sql: &str| classify(sql).sets;
        assert_eq!(
            set("SET TIME ZONE 'Asia/Tokyo'"),
            vec![SetChange::Set(
                "timezone".into(),
                "SET TIME ZONE 'Asia/Tokyo'".into()
            )]
        );
        assert_eq!(
            set("reset time zone"),
            vec![SetChange::Reset("timezone".into())]
        );
        assert!(
            matches!(&set("SET \"TimeZone\" = 'UTC'")[..], [SetChange::Set(n, _)] if n == "timezone")
        );
        assert!(matches!(&set("set schema 's'")[..], [SetChange::Set(n, _)] if n == "search_path"));
        assert!(
            matches!(&set("SET NAMES 'LATIN1'")[..], [SetChange::Set(n, _)] if n == "client_encoding")
        );
        assert!(
            matches!(&set("set xml option document")[..], [SetChange::Set(n, _)] if n == "xmloption")
        );
        assert_eq!(set("SET work_mem FROM CURRENT"), vec![]);
        assert!(classify("select ';SET x=1'").sets.is_empty());
        // `$` inside an identifier starts no dollar quote that would hide the SET.
        assert_eq!(
            classify("select 1 as a$x$; set search_path = s1; select 2 as b$x$").sets,
            vec![SetChange::Set(
                "search_path".into(),
                "set search_path = s1".into()
            )]
        );
        assert!(classify("select $$;set x=1;$$").sets.is_empty());
        assert!(classify("ROLLBACK TO SAVEPOINT a").savepoint);
        assert!(!classify("ROLLBACK").savepoint);
        assert!(classify("SELECT pg_advisory_lock(1);").pins);
        assert!(classify("select 1; prepare p as select 1").pins);
        assert_eq!(classify("SELECT 1 ;  ").sets, vec![]);
    }

    #[test]
    fn replica_routing() {
        for sql in [
            "select 1",
            "SELECT abalance FROM pgbench_accounts WHERE aid = $1",
            "select v from kv where k = 3;",
            "with a as (select 1) select * from a",
            "select count(*), max(v) from kv group by k having count(*) > 1",
            "select pg_is_in_recovery()",
            "select 'insert into x' as s",
            "select $$ for update $$",
            "select \"update\" from t",
            "show statement_timeout",
            "select now(), coalesce(a, 1) from t where b in (1, 2) and exists (select 1)",
            "select pg_catalog.count(*) from t",
        ] {
            assert!(read_only(sql), "{sql} is read-only");
            assert_eq!(route(sql).tx, TxControl::None);
            assert!(!route(sql).writes, "{sql}");
        }
        for sql in [
            "insert into t values (1)",
            "select * from t for update",
            "select * from t for share",
            "with d as (delete from t returning *) select * from d",
            "select nextval('s')",
            "select * into t2 from t",
            "select my_function(1)",
            "select random()",
            "select pg_advisory_xact_lock(1)",
            "select 1; select 2",
            "select 1; insert into t values (1)",
            "update t set v = 1",
            "begin",
            "select 'unterminated",
            "select E'\\' from t; delete from t; --'",
            "",
            "explain analyze delete from t",
        ] {
            assert!(!read_only(sql), "{sql} is not certainly read-only");
        }
        assert_eq!(route("BEGIN").tx, TxControl::Begin);
        assert!(!route("BEGIN").writes);
        assert_eq!(route("start transaction read only").tx, TxControl::Begin);
        assert_eq!(route("COMMIT").tx, TxControl::End);
        assert_eq!(route("end;").tx, TxControl::End);
        assert_eq!(route("rollback").tx, TxControl::End);
        assert_eq!(route("rollback to savepoint a").tx, TxControl::None);
        assert_eq!(route("commit and chain").tx, TxControl::Unsure);
        assert_eq!(route("prepare transaction 'x'").tx, TxControl::Unsure);
        assert_eq!(
            route("begin; insert into t values (1); commit").tx,
            TxControl::Unsure
        );
        assert!(route("begin; insert into t values (1); commit").writes);
        assert_eq!(
            route("insert into t values (1); commit").tx,
            TxControl::Unsure
        );
        assert!(route("insert into t values (1)").writes);
        assert_eq!(route("insert into t values (1)").tx, TxControl::None);
        assert!(!route("set x = 1").writes);
        assert_eq!(route("copy t from stdin").tx, TxControl::Unsure);
        assert!(route("select my_function(1)").writes);
    }

    /// The scan's fast paths (memchr through literals, comments and runs of digits; the
    /// needles searched a block at a time) read long text as the byte-by-byte scan did.
    #[test]
    fn long_text_reads_as_short_text() {
        let pad = "x".repeat(20_000);
        // A needle across every position of the first two search-block boundaries: for the
        // ten-byte longest needle of `plainly_stateless` at 4096 and 8183, for the twenty-byte
        // one of `classify` at 4096 and 8173 (the blocks overlap by the longest less one).
        for at in (4060..4110).chain(8140..8200) {
            let sql = format!("select '{}' || Set_Config('a','b',false)", &pad[..at]);
            assert!(classify(&sql).pins, "{at}");
            assert!(autocommit_shape(&sql).is_none(), "{at}");
            let sql = format!("select '{}INTO' ", &pad[..at]);
            assert!(!plainly_stateless(&sql), "{at}");
        }
        assert!(!classify(&format!("select '{pad}'")).pins);
        assert!(plainly_stateless(&format!(
            "insert into t values ('{pad}')"
        )));
        // Semicolons inside long literals, escape strings, dollar quotes and comments do not
        // split; those after them do.
        let count = |sql: &str| statements(sql).len();
        assert_eq!(count(&format!("select '{pad};'; select 2")), 2);
        assert_eq!(count(&format!("select E'{pad}\\';' ; select 2")), 2);
        assert_eq!(count(&format!("select '{pad}\\'; select 2")), 2);
        assert_eq!(count(&format!("select $q${pad};$q$; select 2")), 2);
        assert_eq!(
            count(&format!("select 1 /* {pad} /* ; */ ; */; select 2")),
            2
        );
        assert_eq!(count(&format!("select 1 -- {pad};\n; select 2")), 2);
        let digits = "1234567890,".repeat(2_000);
        assert_eq!(
            count(&format!("select * from t where a in ({digits}0);set x=1")),
            2
        );
        assert_eq!(
            classify(&format!("select a in ({digits}0); SET work_mem = '8MB'")).sets,
            vec![SetChange::Set(
                "work_mem".into(),
                "SET work_mem = '8MB'".into()
            )]
        );
        assert!(read_only(&format!(
            "select * from t where a in ({digits}0)"
        )));
        assert!(!read_only(&format!("select {digits}0 for update")));
        assert_eq!(
            tx_end(&format!("select '{pad}'; commit"), false),
            TxEnd::Last
        );
        // An unclosed block comment, even with a `*/` before it, is not read.
        assert!(unbalanced_quotes(&format!("select 1 */ {pad} /* x")));
        assert!(!unbalanced_quotes(&format!("select 1 /* {pad} */")));
    }
}
