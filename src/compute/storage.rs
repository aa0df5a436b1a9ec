//! Multi-versioned in-memory tables, owned by one compute worker (single-threaded: no locks).
//!
//! # Rows and versions
//! A row is a slot in `Table::rows`, named by its [`RowId`]. Each slot holds a version chain,
//! oldest first: committed versions in increasing commit timestamp, then at most one write
//! intent (an uncommitted version of one transaction). A version's data is `None` for a
//! deletion. A reader at [`View`] `{ ts, tx }` sees, per row, the intent of `tx` if there is
//! one, else the newest committed version with commit timestamp `<= ts`.
//!
//! # Indexes
//! The primary key and each secondary index map a [`Key`] (the row's values in the index
//! columns) to the row ids holding it. The invariant: an index holds `(key, row)` exactly when
//! some version of `row` (committed or intent, not a deletion) has that key. So an entry can be
//! stale for a given view, and lookups re-check the visible version's key; entries go away when
//! the last version carrying the key does (statement rollback, abort, compaction, or an
//! intent overwritten by its own transaction).
//!
//! # Writes
//! A write by transaction `tx` reads the latest committed state plus `tx`'s own intents and
//! leaves an intent. Constraints (NOT NULL, unique) are checked against that same state at
//! the time of each row's write, row by row, as PostgreSQL checks non-deferrable constraints.
//! A row already carrying another transaction's intent is refused with 40001. Every write is
//! recorded in the transaction's undo log; a [`Mark`] is a position in it, so
//! [`Table::rollback_statement`] undoes exactly the writes after the mark (statement atomicity,
//! and savepoints later). [`Table::commit`] stamps all intents with one timestamp;
//! [`Table::abort`] rolls back to the start.
//!
//! # Compaction
//! Rows whose chains may hold garbage (more than one version, or a committed deletion) are
//! queued at commit. [`Table::compact`] visits only the queue: for each row it keeps the newest
//! committed version `<= below` (dropping it too if it is a deletion) and everything newer, and
//! drops index entries no remaining version uses. A slot whose chain empties is reused by a
//! later insert, so a [`RowId`] is only meaningful until the next `compact` or `abort`.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::ops::Bound;

use protocol::error::{ErrorObject, PgError, SqlState};
use protocol::types::{self, Interval, TextContext, Value};
use smallvec::SmallVec;

use super::{IndexDef, IndexRef, TableDef, TableRef, Timestamp, TxId};

/// A row's slot in its table. Stable while the row has any version; reused after the row is
/// compacted away or its inserting transaction rolls back.
pub type RowId = u32;

/// `40001`: a write found another transaction's intent (or a row it expected had vanished).
pub const SERIALIZATION_FAILURE: SqlState = SqlState(*b"40001");

/// What a reader sees: committed versions with commit timestamp `<= ts`, plus the intents of
/// `tx` if given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    pub ts: Timestamp,
    pub tx: Option<TxId>,
}

impl View {
    /// The latest committed state, no intents.
    pub const LATEST: View = View {
        ts: Timestamp::MAX,
        tx: None,
    };

    /// A snapshot read at `ts`.
    pub fn at(ts: Timestamp) -> View {
        View { ts, tx: None }
    }

    /// What a write statement of `tx` reads: the latest committed state and `tx`'s intents.
    pub fn for_tx(tx: TxId) -> View {
        View {
            ts: Timestamp::MAX,
            tx: Some(tx),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------------------

/// An index key (or a GROUP BY / DISTINCT key): values ordered as PostgreSQL's btree orders
/// them (via [`types::compare`]), NULLs after every other value (and equal to each other),
/// float NaN above all numbers; shorter keys before their extensions.
///
/// `Eq` and `Hash` agree with this order for keys whose values at each position have one type
/// family (integers of any width; float4/float8; numeric; text types; date/timestamp; ...),
/// which holds for every key built from one column or expression. Values of different numeric
/// families compare by value but may hash differently.
#[derive(Clone, Debug)]
pub struct Key(pub Vec<Value>);

/// A key that need not own its values, so a `BTreeMap<Key, _>` or `HashMap<Key, _>` can be
/// probed without building a [`Key`] (no allocation on the lookup path).
pub trait KeyView {
    fn key_len(&self) -> usize;
    fn key_at(&self, i: usize) -> &Value;
}

impl KeyView for Key {
    fn key_len(&self) -> usize {
        self.0.len()
    }
    fn key_at(&self, i: usize) -> &Value {
        &self.0[i]
    }
}

/// A contiguous slice of values as a key.
pub struct KeySlice<'a>(pub &'a [Value]);

impl KeyView for KeySlice<'_> {
    fn key_len(&self) -> usize {
        self.0.len()
    }
    fn key_at(&self, i: usize) -> &Value {
        &self.0[i]
    }
}

/// The values of `row` at `columns`, as a key (an index key of a stored row, uncopied).
pub struct RowKey<'a> {
    pub row: &'a [Value],
    pub columns: &'a [usize],
}

impl KeyView for RowKey<'_> {
    fn key_len(&self) -> usize {
        self.columns.len()
    }
    fn key_at(&self, i: usize) -> &Value {
        &self.row[self.columns[i]]
    }
}

/// `prefix` followed by at most one more value: the start of an index range.
struct BoundKey<'a> {
    prefix: &'a [Value],
    next: Option<&'a Value>,
}

impl KeyView for BoundKey<'_> {
    fn key_len(&self) -> usize {
        self.prefix.len() + usize::from(self.next.is_some())
    }
    fn key_at(&self, i: usize) -> &Value {
        match self.prefix.get(i) {
            Some(v) => v,
            None => self.next.expect("index within key_len"),
        }
    }
}

/// Rank of a value's type family, to order values `compare` cannot (only reachable for keys
/// mixing unrelated types, which a typed column never holds).
fn family(v: &Value) -> u8 {
    match v {
        Value::Bool(_) => 1,
        Value::Int2(_) | Value::Int4(_) | Value::Int8(_) => 2,
        Value::Float4(_) | Value::Float8(_) | Value::Numeric(_) => 2,
        Value::Text(_) => 3,
        Value::Bytea(_) => 4,
        Value::Date(_) | Value::Timestamp(_) => 5,
        Value::Timestamptz(_) => 6,
        Value::Time(_) => 7,
        Value::Interval(_) => 8,
        Value::Uuid(_) => 9,
        Value::Array(_) => 10,
        Value::Null => 11,
    }
}

/// Total order on values: PostgreSQL's btree order, NULLs last (equal to each other).
pub fn cmp_values(a: &Value, b: &Value) -> Ordering {
    match (a.is_null(), b.is_null()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => types::compare(a, b).unwrap_or_else(|| family(a).cmp(&family(b))),
    }
}

fn cmp_keys(a: &(impl KeyView + ?Sized), b: &(impl KeyView + ?Sized)) -> Ordering {
    let n = a.key_len().min(b.key_len());
    for i in 0..n {
        let ord = cmp_values(a.key_at(i), b.key_at(i));
        if ord != Ordering::Equal {
            return ord;
        }
    }
    a.key_len().cmp(&b.key_len())
}

/// Hashes `v` consistently with [`cmp_values`] equality within a type family.
pub fn hash_value<H: Hasher>(v: &Value, h: &mut H) {
    fn float_bits(f: f64) -> u64 {
        if f.is_nan() {
            u64::MAX
        } else if f == 0.0 {
            0
        } else {
            f.to_bits()
        }
    }
    family(v).hash(h);
    match v {
        Value::Null => {}
        Value::Bool(b) => b.hash(h),
        Value::Int2(x) => (*x as i64).hash(h),
        Value::Int4(x) => (*x as i64).hash(h),
        Value::Int8(x) => x.hash(h),
        Value::Float4(x) => float_bits(*x as f64).hash(h),
        Value::Float8(x) => float_bits(*x).hash(h),
        Value::Numeric(n) => n.hash(h),
        Value::Text(s) => s.as_bytes().hash(h),
        Value::Bytea(b) => b.hash(h),
        Value::Date(d) => date_as_timestamp(*d).hash(h),
        Value::Timestamp(t) | Value::Timestamptz(t) | Value::Time(t) => t.hash(h),
        Value::Interval(iv) => interval_span(iv).hash(h),
        Value::Uuid(u) => u.hash(h),
        Value::Array(items) => {
            items.len().hash(h);
            for item in items {
                hash_value(item, h);
            }
        }
    }
}

fn date_as_timestamp(d: i32) -> i64 {
    const USECS_PER_DAY: i64 = 86_400_000_000;
    match d {
        i32::MAX => i64::MAX,
        i32::MIN => i64::MIN,
        _ => d as i64 * USECS_PER_DAY,
    }
}

/// PostgreSQL's `interval_cmp_value`: months count as 30 days, days as 24 hours.
fn interval_span(iv: &Interval) -> i128 {
    let day = 86_400_000_000i128;
    iv.micros as i128 + iv.days as i128 * day + iv.months as i128 * 30 * day
}

impl<'a> Borrow<dyn KeyView + 'a> for Key {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        cmp_keys(self, other) == Ordering::Equal
    }
}
impl Eq for dyn KeyView + '_ {}
impl PartialOrd for dyn KeyView + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for dyn KeyView + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_keys(self, other)
    }
}
impl Hash for dyn KeyView + '_ {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.key_len().hash(h);
        for i in 0..self.key_len() {
            hash_value(self.key_at(i), h);
        }
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        cmp_keys(self, other) == Ordering::Equal
    }
}
impl Eq for Key {}
impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_keys(self, other)
    }
}
impl Hash for Key {
    // Must hash exactly as `dyn KeyView` does (`Borrow` requires it).
    fn hash<H: Hasher>(&self, h: &mut H) {
        (self as &dyn KeyView).hash(h)
    }
}

// ---------------------------------------------------------------------------------------------
// Versions
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stamp {
    Committed(Timestamp),
    Intent(TxId),
}

#[derive(Clone, Debug)]
struct Version {
    stamp: Stamp,
    /// None: the row is deleted as of this version.
    data: Option<Box<[Value]>>,
}

#[derive(Clone, Debug, Default)]
struct Chain {
    /// Oldest first; committed versions in increasing timestamp, then at most one intent.
    /// Most rows have exactly one version, kept inline.
    versions: SmallVec<[Version; 1]>,
    /// In `Table::compact_queue`.
    queued: bool,
}

impl Chain {
    fn visible(&self, view: View) -> Option<&[Value]> {
        for v in self.versions.iter().rev() {
            match v.stamp {
                Stamp::Intent(t) if view.tx == Some(t) => return v.data.as_deref(),
                Stamp::Intent(_) => {}
                Stamp::Committed(ts) if ts <= view.ts => return v.data.as_deref(),
                Stamp::Committed(_) => {}
            }
        }
        None
    }

    /// The transaction holding an intent on this row, if any.
    fn intent_owner(&self) -> Option<TxId> {
        match self.versions.last()?.stamp {
            Stamp::Intent(t) => Some(t),
            Stamp::Committed(_) => None,
        }
    }

    /// Whether compaction may find something to drop here once the newest version is old
    /// enough.
    fn needs_compaction(&self) -> bool {
        self.versions.len() > 1
            || self
                .versions
                .first()
                .is_some_and(|v| v.data.is_none() && matches!(v.stamp, Stamp::Committed(_)))
    }

    fn uses_key(&self, key: &dyn KeyView, columns: &[usize]) -> bool {
        self.versions.iter().any(|v| {
            v.data
                .as_deref()
                .is_some_and(|row| cmp_keys(&RowKey { row, columns }, key) == Ordering::Equal)
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Indexes
// ---------------------------------------------------------------------------------------------

/// The rows holding one key: almost always one (and always at most one visible per view in a
/// unique index), but a non-unique index may hold many.
#[derive(Clone, Debug)]
enum Postings {
    One(RowId),
    Many(BTreeSet<RowId>),
}

impl Postings {
    fn insert(&mut self, rid: RowId) {
        match self {
            Postings::One(r) if *r == rid => {}
            Postings::One(r) => *self = Postings::Many(BTreeSet::from([*r, rid])),
            Postings::Many(set) => {
                set.insert(rid);
            }
        }
    }

    /// Removes `rid`; true if no row is left.
    fn remove(&mut self, rid: RowId) -> bool {
        match self {
            Postings::One(r) => *r == rid,
            Postings::Many(set) => {
                set.remove(&rid);
                match set.len() {
                    0 => true,
                    1 => {
                        let only = *set.first().expect("one element");
                        *self = Postings::One(only);
                        false
                    }
                    _ => false,
                }
            }
        }
    }

    fn iter(&self) -> PostingsIter<'_> {
        match self {
            Postings::One(r) => PostingsIter::One(Some(*r)),
            Postings::Many(set) => PostingsIter::Many(set.iter()),
        }
    }

    fn len(&self) -> usize {
        match self {
            Postings::One(_) => 1,
            Postings::Many(set) => set.len(),
        }
    }
}

enum PostingsIter<'a> {
    One(Option<RowId>),
    Many(std::collections::btree_set::Iter<'a, RowId>),
}

impl Iterator for PostingsIter<'_> {
    type Item = RowId;
    fn next(&mut self) -> Option<RowId> {
        match self {
            PostingsIter::One(r) => r.take(),
            PostingsIter::Many(it) => it.next().copied(),
        }
    }
}

#[derive(Clone, Debug)]
struct Index {
    def: IndexDef,
    entries: BTreeMap<Key, Postings>,
}

impl Index {
    fn add(&mut self, rid: RowId, row: &[Value]) {
        let probe = RowKey {
            row,
            columns: &self.def.columns,
        };
        if let Some(p) = self.entries.get_mut(&probe as &dyn KeyView) {
            p.insert(rid);
            return;
        }
        let key = Key(self.def.columns.iter().map(|&c| row[c].clone()).collect());
        self.entries.insert(key, Postings::One(rid));
    }

    /// Drops `(key of row, rid)` unless another version in `chain` still carries that key.
    fn remove_if_unused(&mut self, rid: RowId, row: &[Value], chain: &Chain) {
        let probe = RowKey {
            row,
            columns: &self.def.columns,
        };
        if chain.uses_key(&probe, &self.def.columns) {
            return;
        }
        if let Some(p) = self.entries.get_mut(&probe as &dyn KeyView) {
            if p.remove(rid) {
                self.entries.remove(&probe as &dyn KeyView);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Transactions
// ---------------------------------------------------------------------------------------------

/// One write, as undone by statement rollback or abort.
#[derive(Debug)]
enum Undo {
    /// The write pushed a new intent onto the row (insert, or the first update/delete of the
    /// row by this transaction): undo pops it. Commit stamps exactly these rows.
    Pop(RowId),
    /// The write replaced this transaction's own intent, whose data was this: undo restores it.
    Restore(RowId, Option<Box<[Value]>>),
}

#[derive(Debug, Default)]
struct TxState {
    undo: Vec<Undo>,
}

/// A position in a transaction's writes to one table (see [`Table::begin_statement`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark(usize);

// ---------------------------------------------------------------------------------------------
// Table
// ---------------------------------------------------------------------------------------------

/// One table: its definition, its rows (version chains) and its indexes.
///
/// A *replica* of a table (on a shard other than the compute's, see `crate::replica`) is a
/// [`Table::committed_copy`] kept current with [`Table::apply_committed`]: the same row ids,
/// the same committed versions and the same indexes, so the same plans run on it.
#[derive(Debug)]
pub struct Table {
    def: TableRef,
    rows: Vec<Chain>,
    /// Empty slots in `rows`, reused by inserts.
    free: Vec<RowId>,
    /// The primary key's index first (when there is one), then `def.indexes` in order — the
    /// order in which unique violations are reported, as PostgreSQL checks indexes in
    /// creation order and the primary key is created with the table.
    indexes: Vec<Index>,
    has_primary: bool,
    /// Transactions with writes here; rarely more than one (the lead serializes writers).
    txs: Vec<(TxId, TxState)>,
    /// Rows that may hold versions compaction can drop.
    compact_queue: Vec<RowId>,
    /// Which build of the table this is: new for every [`Table::new`] (so a rebuild by DDL,
    /// which renumbers rows), kept by [`Table::committed_copy`] (a replica's copy has the
    /// compute's row ids). A scan resumed at a row id checks it (`exec::ScanCursor`).
    incarnation: u64,
}

/// Source of [`Table::incarnation`]s, process-wide so the compute's and the replicas' agree.
static INCARNATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Table {
    /// An empty table.
    ///
    /// # Panics
    /// If an index names a column the table does not have (a catalog bug).
    pub fn new(def: TableRef) -> Table {
        let ncols = def.columns.len();
        let mut indexes = Vec::new();
        for idx in def.primary_key.iter().chain(def.indexes.iter()) {
            assert!(
                idx.columns.iter().all(|&c| c < ncols),
                "index {} names a column outside table {}",
                idx.name,
                def.name
            );
            indexes.push(Index {
                def: idx.clone(),
                entries: BTreeMap::new(),
            });
        }
        Table {
            has_primary: def.primary_key.is_some(),
            def,
            rows: Vec::new(),
            free: Vec::new(),
            indexes,
            txs: Vec::new(),
            compact_queue: Vec::new(),
            incarnation: INCARNATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Which build of the table this is (see the field).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    pub fn def(&self) -> &TableDef {
        &self.def
    }

    pub fn def_ref(&self) -> &TableRef {
        &self.def
    }

    fn index(&self, r: IndexRef) -> &Index {
        let pos = match r {
            IndexRef::Primary => {
                assert!(
                    self.has_primary,
                    "plan uses a primary key table {} lacks",
                    self.def.name
                );
                0
            }
            IndexRef::Secondary(i) => i + usize::from(self.has_primary),
        };
        self.indexes
            .get(pos)
            .unwrap_or_else(|| panic!("plan uses index {r:?} table {} lacks", self.def.name))
    }

    // --- reads ---------------------------------------------------------------------------

    /// The version of row `rid` visible at `view`.
    pub fn get(&self, rid: RowId, view: View) -> Option<&[Value]> {
        self.rows.get(rid as usize)?.visible(view)
    }

    /// Every row visible at `view`, in slot order.
    pub fn scan(&self, view: View) -> impl Iterator<Item = (RowId, &[Value])> + '_ {
        self.rows
            .iter()
            .enumerate()
            .filter_map(move |(i, c)| c.visible(view).map(|row| (i as RowId, row)))
    }

    /// Every row visible at `view` with a row id at or above `from`, in slot order. A scan
    /// resumed here under a held snapshot yields exactly the rest of what one pass would:
    /// a row visible at the snapshot keeps its slot while it has any version (compaction
    /// below a held timestamp keeps the version visible there), and a slot freed and reused
    /// meanwhile holds a row committed after the snapshot, which the view does not see.
    pub fn scan_from(
        &self,
        view: View,
        from: RowId,
    ) -> impl Iterator<Item = (RowId, &[Value])> + '_ {
        let from = (from as usize).min(self.rows.len());
        self.rows[from..]
            .iter()
            .enumerate()
            .filter_map(move |(i, c)| c.visible(view).map(|row| ((from + i) as RowId, row)))
    }

    /// Rows visible at `view` whose key in `index` equals `key` (one value per index column).
    /// A NULL in `key` matches nothing (`=` with NULL is never true).
    ///
    /// # Panics
    /// If `key` does not have one value per index column.
    pub fn lookup_eq<'a>(
        &'a self,
        index: IndexRef,
        key: &'a [Value],
        view: View,
    ) -> impl Iterator<Item = (RowId, &'a [Value])> + 'a {
        let idx = self.index(index);
        assert_eq!(
            key.len(),
            idx.def.columns.len(),
            "IndexEq key width differs from index {}",
            idx.def.name
        );
        let postings = if key.iter().any(Value::is_null) {
            None
        } else {
            idx.entries.get(&KeySlice(key) as &dyn KeyView)
        };
        postings
            .into_iter()
            .flat_map(Postings::iter)
            .filter_map(move |rid| {
                let row = self.rows[rid as usize].visible(view)?;
                let cur = RowKey {
                    row,
                    columns: &idx.def.columns,
                };
                (cmp_keys(&cur, &KeySlice(key)) == Ordering::Equal).then_some((rid, row))
            })
    }

    /// Rows visible at `view` whose key in `index` starts with `prefix` and whose next column
    /// lies within `lower`/`upper` (`(value, inclusive)`), in index order. NULL in the prefix
    /// or a bound matches nothing; with a bound, rows whose next column is NULL are excluded
    /// (no comparison with NULL is true); with no bounds they are included.
    pub fn lookup_range<'a>(
        &'a self,
        index: IndexRef,
        prefix: &'a [Value],
        lower: Option<(&'a Value, bool)>,
        upper: Option<(&'a Value, bool)>,
        view: View,
    ) -> impl Iterator<Item = (RowId, &'a [Value])> + 'a {
        let idx = self.index(index);
        let width = idx.def.columns.len();
        assert!(
            prefix.len() < width || (prefix.len() == width && lower.is_none() && upper.is_none()),
            "IndexRange wider than index {}",
            idx.def.name
        );
        let empty = prefix.iter().any(Value::is_null)
            || lower.is_some_and(|(v, _)| v.is_null())
            || upper.is_some_and(|(v, _)| v.is_null());
        let start = BoundKey {
            prefix,
            next: lower.map(|(v, _)| v),
        };
        let range = if empty {
            None
        } else {
            Some(idx.entries.range::<dyn KeyView, _>((
                Bound::Included(&start as &dyn KeyView),
                Bound::Unbounded,
            )))
        };
        let p = prefix.len();
        let bounded = lower.is_some() || upper.is_some();
        range
            .into_iter()
            .flatten()
            .take_while(move |(key, _)| {
                if cmp_keys(&KeySlice(&key.0[..p]), &KeySlice(prefix)) != Ordering::Equal {
                    return false;
                }
                if p == width {
                    return true;
                }
                let v = &key.0[p];
                if v.is_null() {
                    return !bounded;
                }
                match upper {
                    Some((hi, inclusive)) => match cmp_values(v, hi) {
                        Ordering::Less => true,
                        Ordering::Equal => inclusive,
                        Ordering::Greater => false,
                    },
                    None => true,
                }
            })
            .filter(move |(key, _)| match lower {
                Some((lo, false)) => cmp_values(&key.0[p], lo) != Ordering::Equal,
                _ => true,
            })
            .flat_map(|(key, postings)| postings.iter().map(move |rid| (key, rid)))
            .filter_map(move |(key, rid)| {
                let row = self.rows[rid as usize].visible(view)?;
                let cur = RowKey {
                    row,
                    columns: &idx.def.columns,
                };
                (cmp_keys(&cur, key) == Ordering::Equal).then_some((rid, row))
            })
    }

    /// Number of rows visible at `view` (a full pass).
    pub fn len_at(&self, view: View) -> usize {
        self.rows
            .iter()
            .filter(|c| c.visible(view).is_some())
            .count()
    }

    /// Row versions held (committed, intents and deletions): what compaction bounds.
    pub fn version_count(&self) -> usize {
        self.rows.iter().map(|c| c.versions.len()).sum()
    }

    /// `(key, row)` pairs held across all indexes.
    pub fn index_entry_count(&self) -> usize {
        self.indexes
            .iter()
            .flat_map(|i| i.entries.values())
            .map(Postings::len)
            .sum()
    }

    /// Whether `tx` has uncommitted writes here.
    pub fn has_writes(&self, tx: TxId) -> bool {
        self.txs
            .iter()
            .any(|(t, s)| *t == tx && s.undo.iter().any(|u| matches!(u, Undo::Pop(_))))
    }

    // --- writes --------------------------------------------------------------------------

    fn tx_state(&mut self, tx: TxId) -> &mut TxState {
        let pos = match self.txs.iter().position(|(t, _)| *t == tx) {
            Some(pos) => pos,
            None => {
                self.txs.push((tx, TxState::default()));
                self.txs.len() - 1
            }
        };
        &mut self.txs[pos].1
    }

    /// A mark in `tx`'s writes; [`Table::rollback_statement`] to it undoes every later write of
    /// `tx` here and nothing earlier.
    pub fn begin_statement(&mut self, tx: TxId) -> Mark {
        Mark(self.tx_state(tx).undo.len())
    }

    /// Undoes `tx`'s writes made after `mark`, newest first.
    pub fn rollback_statement(&mut self, tx: TxId, mark: Mark) {
        let Some(pos) = self.txs.iter().position(|(t, _)| *t == tx) else {
            return;
        };
        while self.txs[pos].1.undo.len() > mark.0 {
            let undo = self.txs[pos].1.undo.pop().expect("len > mark");
            self.undo_one(tx, undo);
        }
    }

    fn undo_one(&mut self, tx: TxId, undo: Undo) {
        match undo {
            Undo::Pop(rid) => {
                let chain = &mut self.rows[rid as usize];
                let v = chain
                    .versions
                    .pop()
                    .expect("undo of a row without versions");
                assert_eq!(
                    v.stamp,
                    Stamp::Intent(tx),
                    "undo popped a version it did not write"
                );
                if let Some(data) = v.data {
                    let chain = &self.rows[rid as usize];
                    for idx in &mut self.indexes {
                        idx.remove_if_unused(rid, &data, chain);
                    }
                }
                if self.rows[rid as usize].versions.is_empty() {
                    self.free_slot(rid);
                }
            }
            Undo::Restore(rid, old) => {
                let chain = &mut self.rows[rid as usize];
                let last = chain
                    .versions
                    .last_mut()
                    .expect("undo of a row without versions");
                assert_eq!(
                    last.stamp,
                    Stamp::Intent(tx),
                    "undo restored another's intent"
                );
                let cur = std::mem::replace(&mut last.data, old);
                let chain = &self.rows[rid as usize];
                if let Some(old) = chain.versions.last().and_then(|v| v.data.as_deref()) {
                    for idx in &mut self.indexes {
                        idx.add(rid, old);
                    }
                }
                if let Some(cur) = cur {
                    for idx in &mut self.indexes {
                        idx.remove_if_unused(rid, &cur, chain);
                    }
                }
            }
        }
    }

    fn free_slot(&mut self, rid: RowId) {
        debug_assert!(self.rows[rid as usize].versions.is_empty());
        self.rows[rid as usize] = Chain::default();
        self.free.push(rid);
    }

    /// Makes `tx`'s intents committed versions at `ts` (every intent of `tx` here gets the same
    /// timestamp). A transaction without writes here is a no-op.
    ///
    /// # Panics
    /// If `ts` is older than a committed version of a row `tx` wrote: timestamps from the
    /// oracle only grow, and the lead's write locks keep writers of one table in order.
    pub fn commit(&mut self, tx: TxId, ts: Timestamp) {
        self.commit_with(tx, ts, |_, _| {});
    }

    /// [`Table::commit`], calling `after(row, data)` with each row's new committed version
    /// (None: deleted) — what a replica needs to apply the commit.
    pub fn commit_with(
        &mut self,
        tx: TxId,
        ts: Timestamp,
        mut after: impl FnMut(RowId, Option<&[Value]>),
    ) {
        let Some(pos) = self.txs.iter().position(|(t, _)| *t == tx) else {
            return;
        };
        let (_, state) = self.txs.swap_remove(pos);
        for undo in state.undo {
            let Undo::Pop(rid) = undo else { continue };
            let chain = &mut self.rows[rid as usize];
            let n = chain.versions.len();
            if n >= 2 {
                if let Stamp::Committed(prev) = chain.versions[n - 2].stamp {
                    assert!(prev <= ts, "commit at {ts} before commit at {prev}");
                }
            }
            let last = chain.versions.last_mut().expect("intent present");
            assert_eq!(
                last.stamp,
                Stamp::Intent(tx),
                "commit of an intent it did not write"
            );
            last.stamp = Stamp::Committed(ts);
            after(rid, last.data.as_deref());
            if chain.needs_compaction() && !chain.queued {
                chain.queued = true;
                self.compact_queue.push(rid);
            }
        }
    }

    /// Drops every write of `tx` here.
    pub fn abort(&mut self, tx: TxId) {
        self.rollback_statement(tx, Mark(0));
        self.txs.retain(|(t, _)| *t != tx);
    }

    fn serialization_failure(what: &'static str) -> PgError {
        PgError::new(SERIALIZATION_FAILURE, what)
    }

    /// NOT NULL, as PostgreSQL's `ExecConstraints`: the first NULL column that may not be.
    fn check_not_null(&self, row: &[Value], ctx: &TextContext) -> Result<(), PgError> {
        for (i, col) in self.def.columns.iter().enumerate() {
            let pk = self
                .def
                .primary_key
                .as_ref()
                .is_some_and(|pk| pk.columns.contains(&i));
            if row[i].is_null() && (col.not_null || pk) {
                return Err(PgError::new(
                    SqlState::NOT_NULL_VIOLATION,
                    format!(
                        "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                        col.name, self.def.name
                    ),
                )
                .with_detail(format!(
                    "Failing row contains {}.",
                    self.describe_row(row, ctx)
                ))
                .with_object(ErrorObject {
                    schema: Some("public".into()),
                    table: Some(self.def.name.clone()),
                    column: Some(col.name.clone()),
                    ..ErrorObject::default()
                }));
            }
        }
        Ok(())
    }

    /// `(1, null, abc)`, each value cut to 64 bytes (PostgreSQL's `ExecBuildSlotValueDescription`).
    fn describe_row(&self, row: &[Value], ctx: &TextContext) -> String {
        const MAX_FIELD_BYTES: usize = 64;
        let mut out = String::from("(");
        let mut buf = Vec::new();
        for (i, (v, col)) in row.iter().zip(&self.def.columns).enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            if v.is_null() {
                out.push_str("null");
                continue;
            }
            buf.clear();
            types::text::encode(v, col.ty, ctx, &mut buf);
            let text = String::from_utf8_lossy(&buf);
            if text.len() <= MAX_FIELD_BYTES {
                out.push_str(&text);
            } else {
                let mut end = MAX_FIELD_BYTES;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                out.push_str(&text[..end]);
                out.push_str("...");
            }
        }
        out.push(')');
        out
    }

    /// Unique indexes against the latest committed state plus `tx`'s intents (`self_rid`, the
    /// row being updated, excluded). Keys equal to `old`'s are skipped: they cannot conflict
    /// anew. NULLs never conflict.
    fn check_unique(
        &self,
        tx: TxId,
        self_rid: Option<RowId>,
        row: &[Value],
        old: Option<&[Value]>,
        ctx: &TextContext,
    ) -> Result<(), PgError> {
        let view = View::for_tx(tx);
        for idx in self.indexes.iter().filter(|i| i.def.unique) {
            let cols = &idx.def.columns;
            let probe = RowKey { row, columns: cols };
            if cols.iter().any(|&c| row[c].is_null()) {
                continue;
            }
            if let Some(old) = old {
                if cmp_keys(
                    &RowKey {
                        row: old,
                        columns: cols,
                    },
                    &probe,
                ) == Ordering::Equal
                {
                    continue;
                }
            }
            let Some(postings) = idx.entries.get(&probe as &dyn KeyView) else {
                continue;
            };
            for rid in postings.iter().filter(|&r| Some(r) != self_rid) {
                let chain = &self.rows[rid as usize];
                let has_key = |data: Option<&[Value]>| {
                    data.is_some_and(|r| {
                        cmp_keys(
                            &RowKey {
                                row: r,
                                columns: cols,
                            },
                            &probe,
                        ) == Ordering::Equal
                    })
                };
                let mine = has_key(chain.visible(view));
                if chain.intent_owner().is_some_and(|t| t != tx) {
                    let theirs = chain.versions.last().and_then(|v| v.data.as_deref());
                    if mine || has_key(theirs) {
                        return Err(Self::serialization_failure(
                            "could not serialize access due to concurrent update",
                        ));
                    }
                }
                if mine {
                    return Err(self.unique_violation(idx, row, ctx));
                }
            }
        }
        Ok(())
    }

    fn unique_violation(&self, idx: &Index, row: &[Value], ctx: &TextContext) -> PgError {
        let mut names = String::new();
        let mut values = String::new();
        let mut buf = Vec::new();
        for (i, &c) in idx.def.columns.iter().enumerate() {
            if i > 0 {
                names.push_str(", ");
                values.push_str(", ");
            }
            names.push_str(&quote_identifier(&self.def.columns[c].name));
            buf.clear();
            types::text::encode(&row[c], self.def.columns[c].ty, ctx, &mut buf);
            values.push_str(&String::from_utf8_lossy(&buf));
        }
        PgError::new(
            SqlState::UNIQUE_VIOLATION,
            format!(
                "duplicate key value violates unique constraint \"{}\"",
                idx.def.name
            ),
        )
        .with_detail(format!("Key ({names})=({values}) already exists."))
        .with_object(ErrorObject {
            schema: Some("public".into()),
            table: Some(self.def.name.clone()),
            constraint: Some(idx.def.name.clone()),
            ..ErrorObject::default()
        })
    }

    /// Inserts `row` (full width, table column order) as an intent of `tx`.
    ///
    /// # Errors
    /// 23502 (NOT NULL), 23505 (unique), 40001 (another transaction's intent holds the key).
    /// On error nothing changed.
    pub fn insert(
        &mut self,
        tx: TxId,
        row: Vec<Value>,
        ctx: &TextContext,
    ) -> Result<RowId, PgError> {
        assert_eq!(
            row.len(),
            self.def.columns.len(),
            "row width of {}",
            self.def.name
        );
        self.check_not_null(&row, ctx)?;
        self.check_unique(tx, None, &row, None, ctx)?;
        let rid = match self.free.pop() {
            Some(rid) => rid,
            None => {
                let rid = RowId::try_from(self.rows.len()).map_err(|_| {
                    PgError::new(
                        SqlState::PROGRAM_LIMIT_EXCEEDED,
                        format!("table \"{}\" has too many rows", self.def.name),
                    )
                })?;
                self.rows.push(Chain::default());
                rid
            }
        };
        for idx in &mut self.indexes {
            idx.add(rid, &row);
        }
        self.rows[rid as usize].versions.push(Version {
            stamp: Stamp::Intent(tx),
            data: Some(row.into_boxed_slice()),
        });
        self.tx_state(tx).undo.push(Undo::Pop(rid));
        Ok(rid)
    }

    /// Replaces the version of `rid` visible to `tx` by `row` (full width).
    ///
    /// # Errors
    /// 23502, 23505 as for insert; 40001 if another transaction holds an intent on the row or
    /// the row is no longer visible to `tx`. On error nothing changed.
    pub fn update(
        &mut self,
        tx: TxId,
        rid: RowId,
        row: Vec<Value>,
        ctx: &TextContext,
    ) -> Result<(), PgError> {
        assert_eq!(
            row.len(),
            self.def.columns.len(),
            "row width of {}",
            self.def.name
        );
        let old = self.writable(tx, rid)?;
        self.check_not_null(&row, ctx)?;
        self.check_unique(tx, Some(rid), &row, Some(old), ctx)?;
        self.write_version(tx, rid, Some(row.into_boxed_slice()));
        Ok(())
    }

    /// Deletes `rid` as seen by `tx`.
    ///
    /// # Errors
    /// 40001 if another transaction holds an intent on the row or it is no longer visible.
    pub fn delete(&mut self, tx: TxId, rid: RowId) -> Result<(), PgError> {
        self.writable(tx, rid)?;
        self.write_version(tx, rid, None);
        Ok(())
    }

    /// Deletes every row visible to `tx`, as intents (so TRUNCATE is transactional and other
    /// readers keep their snapshots). Returns the number of rows deleted. On error nothing
    /// changed.
    pub fn truncate(&mut self, tx: TxId) -> Result<u64, PgError> {
        let view = View::for_tx(tx);
        let targets: Vec<RowId> = self.scan(view).map(|(rid, _)| rid).collect();
        let mark = self.begin_statement(tx);
        for &rid in &targets {
            if let Err(e) = self.delete(tx, rid) {
                self.rollback_statement(tx, mark);
                return Err(e);
            }
        }
        Ok(targets.len() as u64)
    }

    /// The row `tx` is about to overwrite, checking no other transaction holds an intent.
    fn writable(&self, tx: TxId, rid: RowId) -> Result<&[Value], PgError> {
        let chain = self.rows.get(rid as usize).ok_or_else(|| {
            Self::serialization_failure("could not serialize access due to concurrent delete")
        })?;
        if chain.intent_owner().is_some_and(|t| t != tx) {
            return Err(Self::serialization_failure(
                "could not serialize access due to concurrent update",
            ));
        }
        chain.visible(View::for_tx(tx)).ok_or_else(|| {
            Self::serialization_failure("could not serialize access due to concurrent delete")
        })
    }

    fn write_version(&mut self, tx: TxId, rid: RowId, data: Option<Box<[Value]>>) {
        if let Some(row) = data.as_deref() {
            for idx in &mut self.indexes {
                idx.add(rid, row);
            }
        }
        let chain = &mut self.rows[rid as usize];
        let last = chain
            .versions
            .last_mut()
            .expect("a writable row has a version");
        if last.stamp == Stamp::Intent(tx) {
            let old = std::mem::replace(&mut last.data, data);
            let chain = &self.rows[rid as usize];
            if let Some(old_row) = old.as_deref() {
                for idx in &mut self.indexes {
                    idx.remove_if_unused(rid, old_row, chain);
                }
            }
            self.tx_state(tx).undo.push(Undo::Restore(rid, old));
        } else {
            chain.versions.push(Version {
                stamp: Stamp::Intent(tx),
                data,
            });
            self.tx_state(tx).undo.push(Undo::Pop(rid));
        }
    }

    // --- replicas ------------------------------------------------------------------------

    /// A copy holding exactly the committed versions (intents stripped, with the index entries
    /// only they used), the same row ids and the same indexes: a replica's starting state.
    pub fn committed_copy(&self) -> Table {
        let mut copy = Table {
            def: self.def.clone(),
            rows: self.rows.clone(),
            free: Vec::new(),
            indexes: self.indexes.clone(),
            has_primary: self.has_primary,
            txs: Vec::new(),
            compact_queue: self.compact_queue.clone(),
            incarnation: self.incarnation,
        };
        for rid in 0..copy.rows.len() {
            let chain = &mut copy.rows[rid];
            if !matches!(chain.versions.last(), Some(v) if matches!(v.stamp, Stamp::Intent(_))) {
                continue;
            }
            let intent = chain.versions.pop().expect("checked above");
            let chain = &copy.rows[rid];
            if let Some(data) = intent.data {
                for idx in &mut copy.indexes {
                    idx.remove_if_unused(rid as RowId, &data, chain);
                }
            }
            if copy.rows[rid].versions.is_empty() {
                // An uncommitted insert: the slot is empty here (not free: a replica takes
                // its row ids from the compute and never picks one).
                copy.rows[rid] = Chain::default();
            }
        }
        copy
    }

    /// A replica applies one row of a commit at `ts`: row `rid`'s new version is `data` (None:
    /// deleted). No constraint is checked (the compute checked them); commits must arrive in
    /// timestamp order.
    ///
    /// # Panics
    /// If `ts` is older than the row's newest version, or the row holds an intent (a replica
    /// has none).
    pub fn apply_committed(&mut self, rid: RowId, data: Option<Box<[Value]>>, ts: Timestamp) {
        let slot = rid as usize;
        if slot >= self.rows.len() {
            self.rows.resize_with(slot + 1, Chain::default);
        }
        if let Some(row) = data.as_deref() {
            for idx in &mut self.indexes {
                idx.add(rid, row);
            }
        }
        let chain = &mut self.rows[slot];
        if let Some(last) = chain.versions.last() {
            match last.stamp {
                Stamp::Committed(prev) => {
                    assert!(prev <= ts, "replica applied {ts} after {prev}")
                }
                Stamp::Intent(tx) => panic!("a replica row holds an intent of {tx}"),
            }
        }
        chain.versions.push(Version {
            stamp: Stamp::Committed(ts),
            data,
        });
        if chain.needs_compaction() && !chain.queued {
            chain.queued = true;
            self.compact_queue.push(rid);
        }
    }

    /// [`Table::compact`] for a replica: slots that empty are left empty rather than kept for
    /// reuse (the compute picks row ids).
    pub fn compact_replica(&mut self, below: Timestamp) {
        self.compact(below);
        self.free.clear();
    }

    // --- compaction ----------------------------------------------------------------------

    /// Drops the versions no reader at a timestamp `>= below` can see: for each row, versions
    /// older than its newest committed version `<= below`, and that one too if it is a
    /// deletion. Index entries no remaining version uses go with them. Intents are kept.
    /// Visits only rows queued at commit, so its cost follows the writes since the last call.
    ///
    /// Readers at timestamps `< below` must be gone: row ids and versions they could see may be
    /// dropped or reused.
    pub fn compact(&mut self, below: Timestamp) {
        let queue = std::mem::take(&mut self.compact_queue);
        let mut dropped: Vec<Box<[Value]>> = Vec::new();
        for rid in queue {
            let chain = &mut self.rows[rid as usize];
            if !chain.queued {
                continue; // freed (and maybe reused) since it was queued
            }
            chain.queued = false;
            let newest_old = chain
                .versions
                .iter()
                .rposition(|v| matches!(v.stamp, Stamp::Committed(ts) if ts <= below));
            if let Some(p) = newest_old {
                let keep_from = if chain.versions[p].data.is_none() {
                    p + 1
                } else {
                    p
                };
                dropped.extend(chain.versions.drain(..keep_from).filter_map(|v| v.data));
            }
            let chain = &self.rows[rid as usize];
            for row in dropped.drain(..) {
                for idx in &mut self.indexes {
                    idx.remove_if_unused(rid, &row, chain);
                }
            }
            let chain = &mut self.rows[rid as usize];
            if chain.versions.is_empty() {
                self.free_slot(rid);
            } else if chain.needs_compaction() {
                chain.queued = true;
                self.compact_queue.push(rid);
            }
        }
    }
}

/// PostgreSQL's `quote_identifier`: quotes names that are not plain lower-case identifiers
/// or that are keywords other than unreserved ones.
pub fn quote_identifier(name: &str) -> String {
    // `select word from pg_get_keywords() where catcode <> 'U'` on PostgreSQL 15.
    const KEYWORDS: &[&str] = &[
        "all",
        "analyse",
        "analyze",
        "and",
        "any",
        "array",
        "as",
        "asc",
        "asymmetric",
        "authorization",
        "between",
        "bigint",
        "binary",
        "bit",
        "boolean",
        "both",
        "case",
        "cast",
        "char",
        "character",
        "check",
        "coalesce",
        "collate",
        "collation",
        "column",
        "concurrently",
        "constraint",
        "create",
        "cross",
        "current_catalog",
        "current_date",
        "current_role",
        "current_schema",
        "current_time",
        "current_timestamp",
        "current_user",
        "dec",
        "decimal",
        "default",
        "deferrable",
        "desc",
        "distinct",
        "do",
        "else",
        "end",
        "except",
        "exists",
        "extract",
        "false",
        "fetch",
        "float",
        "for",
        "foreign",
        "freeze",
        "from",
        "full",
        "grant",
        "greatest",
        "group",
        "grouping",
        "having",
        "ilike",
        "in",
        "initially",
        "inner",
        "inout",
        "int",
        "integer",
        "intersect",
        "interval",
        "into",
        "is",
        "isnull",
        "join",
        "lateral",
        "leading",
        "least",
        "left",
        "like",
        "limit",
        "localtime",
        "localtimestamp",
        "national",
        "natural",
        "nchar",
        "none",
        "normalize",
        "not",
        "notnull",
        "null",
        "nullif",
        "numeric",
        "offset",
        "on",
        "only",
        "or",
        "order",
        "out",
        "outer",
        "overlaps",
        "overlay",
        "placing",
        "position",
        "precision",
        "primary",
        "real",
        "references",
        "returning",
        "right",
        "row",
        "select",
        "session_user",
        "setof",
        "similar",
        "smallint",
        "some",
        "substring",
        "symmetric",
        "table",
        "tablesample",
        "then",
        "time",
        "timestamp",
        "to",
        "trailing",
        "treat",
        "trim",
        "true",
        "union",
        "unique",
        "user",
        "using",
        "values",
        "varchar",
        "variadic",
        "verbose",
        "when",
        "where",
        "window",
        "with",
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
    ];
    let plain = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !KEYWORDS.contains(&name);
    if plain {
        return name.to_string();
    }
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        if c == '"' {
            out.push('"');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::ColumnDef;
    use protocol::types::{Scalar, Type};
    use std::sync::Arc;

    const INT4: Type = Type::scalar(Scalar::Int4);
    const TEXT: Type = Type::scalar(Scalar::Text);

    fn col(name: &str, ty: Type, not_null: bool) -> ColumnDef {
        ColumnDef {
            name: name.into(),
            ty,
            not_null,
            default: None,
        }
    }

    /// `t (id int primary key, v int, u int unique)` with an index on `v`.
    fn table() -> Table {
        Table::new(Arc::new(TableDef {
            id: 1,
            name: "t".into(),
            columns: vec![
                col("id", INT4, false),
                col("v", INT4, false),
                col("u", INT4, false),
            ],
            primary_key: Some(IndexDef {
                name: "t_pkey".into(),
                columns: vec![0],
                unique: true,
            }),
            indexes: vec![
                IndexDef {
                    name: "t_v_idx".into(),
                    columns: vec![1],
                    unique: false,
                },
                IndexDef {
                    name: "t_u_key".into(),
                    columns: vec![2],
                    unique: true,
                },
            ],
        }))
    }

    const V_IDX: IndexRef = IndexRef::Secondary(0);
    const U_IDX: IndexRef = IndexRef::Secondary(1);

    fn int(x: Option<i32>) -> Value {
        x.map_or(Value::Null, Value::Int4)
    }

    fn row(id: i32, v: Option<i32>, u: Option<i32>) -> Vec<Value> {
        vec![Value::Int4(id), int(v), int(u)]
    }

    fn ctx() -> TextContext {
        TextContext::default()
    }

    fn rid_of(t: &Table, id: i32, view: View) -> RowId {
        let key = [Value::Int4(id)];
        let found: Vec<RowId> = t
            .lookup_eq(IndexRef::Primary, &key, view)
            .map(|(r, _)| r)
            .collect();
        assert_eq!(found.len(), 1, "row {id} at {view:?}");
        found[0]
    }

    fn ids(t: &Table, view: View) -> Vec<i32> {
        let mut out: Vec<i32> = t
            .scan(view)
            .map(|(_, r)| match r[0] {
                Value::Int4(x) => x,
                _ => unreachable!(),
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn key_order_matches_postgres_btree() {
        let k = |v: Vec<Value>| Key(v);
        let mut keys = [
            k(vec![Value::Null]),
            k(vec![Value::Float8(f64::NAN)]),
            k(vec![Value::Float8(f64::INFINITY)]),
            k(vec![Value::Float8(1.5)]),
            k(vec![Value::Float8(-0.0)]),
            k(vec![Value::Float8(f64::NEG_INFINITY)]),
        ];
        keys.sort();
        let shown: Vec<String> = keys.iter().map(|k| format!("{:?}", k.0[0])).collect();
        assert_eq!(
            shown,
            [
                "Float8(-inf)",
                "Float8(-0.0)",
                "Float8(1.5)",
                "Float8(inf)",
                "Float8(NaN)",
                "Null"
            ]
        );
        assert_eq!(k(vec![Value::Float8(0.0)]), k(vec![Value::Float8(-0.0)]));
        assert_eq!(k(vec![Value::Null]), k(vec![Value::Null]));
        assert!(k(vec![Value::Int4(1)]) < k(vec![Value::Int4(1), Value::Int4(0)]));
        assert!(k(vec![Value::Int4(2), Value::Null]) > k(vec![Value::Int4(2), Value::Int4(9)]));
        assert!(k(vec![Value::Text("B".into())]) < k(vec![Value::Text("a".into())]));
        // Hash agrees with Eq where values are equal but differently represented.
        let h = |key: &Key| {
            let mut s = std::collections::hash_map::DefaultHasher::new();
            key.hash(&mut s);
            s.finish()
        };
        assert_eq!(
            h(&k(vec![Value::Float8(0.0)])),
            h(&k(vec![Value::Float8(-0.0)]))
        );
        assert_eq!(h(&k(vec![Value::Int2(7)])), h(&k(vec![Value::Int8(7)])));
        let n = |s: &str| Value::Numeric(s.parse().unwrap());
        assert_eq!(k(vec![n("1.5")]), k(vec![n("1.50")]));
        assert_eq!(h(&k(vec![n("1.5")])), h(&k(vec![n("1.50")])));
        assert_eq!(
            h(&k(vec![Value::Float8(f64::NAN)])),
            h(&k(vec![Value::Float8(-f64::NAN)]))
        );
    }

    #[test]
    fn mvcc_visibility() {
        let mut t = table();
        t.insert(1, row(1, Some(10), None), &ctx()).unwrap();
        // Own intent visible only to its transaction.
        assert_eq!(ids(&t, View::LATEST), Vec::<i32>::new());
        assert_eq!(ids(&t, View::for_tx(2)), Vec::<i32>::new());
        assert_eq!(ids(&t, View::for_tx(1)), vec![1]);
        t.commit(1, 10);
        assert_eq!(ids(&t, View::at(9)), Vec::<i32>::new());
        assert_eq!(ids(&t, View::at(10)), vec![1]);

        let rid = rid_of(&t, 1, View::for_tx(2));
        t.update(2, rid, row(1, Some(20), None), &ctx()).unwrap();
        let v_at = |t: &Table, view| t.get(rid, view).map(|r| r[1].clone());
        assert_eq!(v_at(&t, View::LATEST), Some(Value::Int4(10)));
        assert_eq!(v_at(&t, View::for_tx(2)), Some(Value::Int4(20)));
        t.commit(2, 20);
        assert_eq!(v_at(&t, View::at(15)), Some(Value::Int4(10)));
        assert_eq!(v_at(&t, View::at(20)), Some(Value::Int4(20)));

        t.delete(3, rid).unwrap();
        assert_eq!(v_at(&t, View::for_tx(3)), None);
        assert_eq!(v_at(&t, View::LATEST), Some(Value::Int4(20)));
        t.commit(3, 30);
        assert_eq!(v_at(&t, View::at(29)), Some(Value::Int4(20)));
        assert_eq!(v_at(&t, View::at(30)), None);
        assert_eq!(t.len_at(View::at(25)), 1);
        assert_eq!(t.len_at(View::LATEST), 0);

        // The index finds the row by its old key only at old views.
        let ten = [Value::Int4(10)];
        let twenty = [Value::Int4(20)];
        assert_eq!(t.lookup_eq(V_IDX, &ten, View::at(15)).count(), 1);
        assert_eq!(t.lookup_eq(V_IDX, &ten, View::at(25)).count(), 0);
        assert_eq!(t.lookup_eq(V_IDX, &twenty, View::at(25)).count(), 1);
        assert_eq!(t.lookup_eq(V_IDX, &twenty, View::at(15)).count(), 0);
    }

    #[test]
    fn abort_leaves_nothing() {
        let mut t = table();
        t.insert(1, row(1, Some(1), Some(1)), &ctx()).unwrap();
        t.insert(1, row(2, Some(2), Some(2)), &ctx()).unwrap();
        t.commit(1, 5);
        let (versions, entries) = (t.version_count(), t.index_entry_count());
        t.insert(2, row(3, Some(3), Some(3)), &ctx()).unwrap();
        let r1 = rid_of(&t, 1, View::for_tx(2));
        t.update(2, r1, row(10, Some(9), Some(9)), &ctx()).unwrap();
        let r1 = rid_of(&t, 10, View::for_tx(2));
        t.update(2, r1, row(11, Some(8), Some(8)), &ctx()).unwrap();
        let r2 = rid_of(&t, 2, View::for_tx(2));
        t.delete(2, r2).unwrap();
        assert!(t.has_writes(2));
        assert_eq!(ids(&t, View::for_tx(2)), vec![3, 11]);
        t.abort(2);
        assert!(!t.has_writes(2));
        assert_eq!(ids(&t, View::LATEST), vec![1, 2]);
        assert_eq!(ids(&t, View::for_tx(2)), vec![1, 2]);
        assert_eq!(t.version_count(), versions);
        assert_eq!(t.index_entry_count(), entries);
        // The aborted keys are free again.
        t.insert(4, row(3, Some(3), Some(3)), &ctx()).unwrap();
        t.insert(4, row(11, None, Some(8)), &ctx()).unwrap();
        t.commit(4, 6);
        assert_eq!(ids(&t, View::LATEST), vec![1, 2, 3, 11]);
    }

    #[test]
    fn unique_and_not_null_errors_match_postgres() {
        let mut t = table();
        t.insert(1, row(1, Some(1), Some(1)), &ctx()).unwrap();
        t.commit(1, 1);
        let e = t.insert(2, row(1, Some(2), Some(2)), &ctx()).unwrap_err();
        assert_eq!(e.code, SqlState::UNIQUE_VIOLATION);
        assert_eq!(
            e.message,
            "duplicate key value violates unique constraint \"t_pkey\""
        );
        assert_eq!(e.detail.as_deref(), Some("Key (id)=(1) already exists."));
        let e = t.insert(2, row(2, Some(2), Some(1)), &ctx()).unwrap_err();
        assert_eq!(
            e.message,
            "duplicate key value violates unique constraint \"t_u_key\""
        );
        assert_eq!(e.detail.as_deref(), Some("Key (u)=(1) already exists."));
        // NULLs never conflict; a non-unique index accepts duplicates.
        t.insert(2, row(2, Some(1), None), &ctx()).unwrap();
        t.insert(2, row(3, Some(1), None), &ctx()).unwrap();
        let e = t.insert(2, row(3, None, None), &ctx()).unwrap_err();
        assert_eq!(e.detail.as_deref(), Some("Key (id)=(3) already exists."));
        let e = t
            .insert(2, vec![Value::Null, int(None), int(None)], &ctx())
            .unwrap_err();
        assert_eq!(e.code, SqlState::NOT_NULL_VIOLATION);
        assert_eq!(
            e.message,
            "null value in column \"id\" of relation \"t\" violates not-null constraint"
        );
        assert_eq!(
            e.detail.as_deref(),
            Some("Failing row contains (null, null, null).")
        );
        // A key deleted in the same transaction can be reused; updating a row to its own key
        // is no conflict.
        let r1 = rid_of(&t, 1, View::for_tx(2));
        t.update(2, r1, row(1, Some(5), Some(1)), &ctx()).unwrap();
        t.delete(2, r1).unwrap();
        t.insert(2, row(1, Some(7), Some(1)), &ctx()).unwrap();
        t.commit(2, 2);
        assert_eq!(ids(&t, View::LATEST), vec![1, 2, 3]);

        // Quoted column names and a multi-column key, truncated failing rows: compared with
        // PostgreSQL 15's output for the same statements.
        let mut q = Table::new(Arc::new(TableDef {
            id: 2,
            name: "q".into(),
            columns: vec![
                col("id", INT4, false),
                col("Name", TEXT, true),
                col("v", INT4, false),
            ],
            primary_key: None,
            indexes: vec![IndexDef {
                name: "q_Name_v_key".into(),
                columns: vec![1, 2],
                unique: true,
            }],
        }));
        let text = |s: &str| Value::Text(s.into());
        q.insert(1, vec![Value::Int4(1), text("a"), Value::Int4(1)], &ctx())
            .unwrap();
        let e = q
            .insert(1, vec![Value::Int4(2), text("a"), Value::Int4(1)], &ctx())
            .unwrap_err();
        assert_eq!(
            e.detail.as_deref(),
            Some("Key (\"Name\", v)=(a, 1) already exists.")
        );
        let e = q
            .insert(1, vec![Value::Int4(3), Value::Null, Value::Int4(1)], &ctx())
            .unwrap_err();
        assert_eq!(
            e.message,
            "null value in column \"Name\" of relation \"q\" violates not-null constraint"
        );
        assert_eq!(
            e.detail.as_deref(),
            Some("Failing row contains (3, null, 1).")
        );
        let long = "é".repeat(40);
        let mut r = vec![Value::Null, text(&long), Value::Null];
        q.def = Arc::new(TableDef {
            columns: vec![
                col("a", INT4, false),
                col("b", TEXT, false),
                col("c", INT4, true),
            ],
            ..q.def().clone()
        });
        let e = q.insert(1, r.clone(), &ctx()).unwrap_err();
        assert_eq!(
            e.detail.unwrap(),
            format!("Failing row contains (null, {}..., null).", "é".repeat(32))
        );
        r[1] = text(&"x".repeat(70));
        let e = q.insert(1, r, &ctx()).unwrap_err();
        assert_eq!(
            e.detail.unwrap(),
            format!("Failing row contains (null, {}..., null).", "x".repeat(64))
        );
    }

    #[test]
    fn quote_identifier_follows_postgres() {
        assert_eq!(quote_identifier("id"), "id");
        assert_eq!(quote_identifier("a_b1"), "a_b1");
        assert_eq!(quote_identifier("value"), "value"); // unreserved keyword
        assert_eq!(quote_identifier("user"), "\"user\"");
        assert_eq!(quote_identifier("int"), "\"int\"");
        assert_eq!(quote_identifier("Ab"), "\"Ab\"");
        assert_eq!(quote_identifier("1a"), "\"1a\"");
        assert_eq!(quote_identifier("a\"b"), "\"a\"\"b\"");
    }

    #[test]
    fn concurrent_intents_are_refused() {
        let mut t = table();
        t.insert(1, row(1, Some(1), Some(1)), &ctx()).unwrap();
        t.insert(1, row(2, Some(2), Some(2)), &ctx()).unwrap();
        t.commit(1, 1);
        let r1 = rid_of(&t, 1, View::LATEST);
        t.update(2, r1, row(1, Some(5), Some(1)), &ctx()).unwrap();
        t.insert(2, row(7, None, Some(7)), &ctx()).unwrap();
        let serialization = |e: PgError| {
            assert_eq!(e.code, SERIALIZATION_FAILURE);
            assert_eq!(
                e.message,
                "could not serialize access due to concurrent update"
            );
        };
        serialization(
            t.update(3, r1, row(1, Some(6), Some(1)), &ctx())
                .unwrap_err(),
        );
        serialization(t.delete(3, r1).unwrap_err());
        // Keys held by another's intent, whether the intent adds or removes them.
        serialization(t.insert(3, row(7, None, None), &ctx()).unwrap_err());
        serialization(t.insert(3, row(8, None, Some(7)), &ctx()).unwrap_err());
        let r2 = rid_of(&t, 2, View::LATEST);
        serialization(
            t.update(3, r2, row(2, Some(2), Some(1)), &ctx())
                .unwrap_err(),
        );
        assert!(!t.has_writes(3));
        // Nothing of tx 3 got in; tx 2 commits intact.
        t.commit(2, 2);
        assert_eq!(ids(&t, View::LATEST), vec![1, 2, 7]);
        assert_eq!(t.get(r1, View::LATEST).unwrap()[1], Value::Int4(5));
    }

    #[test]
    fn statement_rollback_keeps_earlier_statements() {
        let mut t = table();
        t.insert(1, row(1, Some(1), Some(1)), &ctx()).unwrap();
        t.insert(1, row(2, Some(2), Some(2)), &ctx()).unwrap();
        t.commit(1, 1);
        let m1 = t.begin_statement(2);
        assert_eq!(m1, Mark(0));
        t.insert(2, row(3, Some(3), Some(3)), &ctx()).unwrap();
        let r1 = rid_of(&t, 1, View::for_tx(2));
        t.update(2, r1, row(1, Some(10), Some(10)), &ctx()).unwrap();
        let (versions, entries) = (t.version_count(), t.index_entry_count());
        let m2 = t.begin_statement(2);
        t.update(2, r1, row(1, Some(11), Some(11)), &ctx()).unwrap();
        t.insert(2, row(4, Some(4), Some(4)), &ctx()).unwrap();
        let r2 = rid_of(&t, 2, View::for_tx(2));
        t.delete(2, r2).unwrap();
        let r3 = rid_of(&t, 3, View::for_tx(2));
        t.update(2, r3, row(30, Some(3), Some(3)), &ctx()).unwrap();
        t.rollback_statement(2, m2);
        assert_eq!(t.version_count(), versions);
        assert_eq!(t.index_entry_count(), entries);
        assert_eq!(ids(&t, View::for_tx(2)), vec![1, 2, 3]);
        assert_eq!(t.get(r1, View::for_tx(2)).unwrap()[1], Value::Int4(10));
        let eleven = [Value::Int4(11)];
        assert_eq!(t.lookup_eq(V_IDX, &eleven, View::for_tx(2)).count(), 0);
        t.commit(2, 2);
        assert_eq!(ids(&t, View::LATEST), vec![1, 2, 3]);
        assert_eq!(t.get(r1, View::LATEST).unwrap()[2], Value::Int4(10));
        // The rolled-back keys are free.
        t.insert(3, row(4, Some(4), Some(11)), &ctx()).unwrap();
        // Truncate is one transactional write.
        assert_eq!(t.truncate(3).unwrap(), 4);
        assert_eq!(t.len_at(View::for_tx(3)), 0);
        assert_eq!(t.len_at(View::LATEST), 3);
        t.commit(3, 3);
        assert_eq!(t.len_at(View::LATEST), 0);
        assert_eq!(t.len_at(View::at(2)), 3);
    }

    #[test]
    fn compaction_bounds_versions_under_repeated_updates() {
        let run = |compact: bool| {
            let mut t = table();
            t.insert(1, row(1, Some(0), Some(0)), &ctx()).unwrap();
            t.commit(1, 1);
            for i in 1..=1000 {
                let tx = i as TxId + 1;
                let rid = rid_of(&t, 1, View::for_tx(tx));
                // Every update changes both secondary keys: old entries must go too.
                t.update(tx, rid, row(1, Some(i), Some(i)), &ctx()).unwrap();
                t.commit(tx, tx);
                if compact {
                    t.compact(tx);
                    assert_eq!(t.version_count(), 1);
                    assert_eq!(t.index_entry_count(), 3);
                }
            }
            (t.version_count(), t.index_entry_count())
        };
        assert_eq!(run(true), (1, 3));
        assert_eq!(run(false), (1001, 2003));
    }

    #[test]
    fn compaction_keeps_what_readers_at_or_after_below_see() {
        let mut t = table();
        t.insert(1, row(1, Some(10), None), &ctx()).unwrap();
        t.insert(1, row(2, Some(10), None), &ctx()).unwrap();
        t.commit(1, 10);
        let r1 = rid_of(&t, 1, View::LATEST);
        let r2 = rid_of(&t, 2, View::LATEST);
        for (ts, v) in [(20, 20), (30, 30)] {
            t.update(ts, r1, row(1, Some(v), None), &ctx()).unwrap();
            t.commit(ts, ts);
        }
        t.delete(35, r2).unwrap();
        t.commit(35, 35);
        // An open intent survives compaction.
        t.update(99, r1, row(1, Some(99), None), &ctx()).unwrap();
        t.compact(25);
        assert_eq!(t.get(r1, View::at(25)).unwrap()[1], Value::Int4(20));
        assert_eq!(t.get(r1, View::at(30)).unwrap()[1], Value::Int4(30));
        assert_eq!(t.get(r1, View::for_tx(99)).unwrap()[1], Value::Int4(99));
        assert!(t.get(r2, View::at(25)).is_some());
        assert_eq!(t.version_count(), 3 + 2);
        let ten = [Value::Int4(10)];
        assert_eq!(t.lookup_eq(V_IDX, &ten, View::at(25)).count(), 1);
        t.abort(99);
        t.compact(40);
        assert_eq!(t.version_count(), 1);
        assert_eq!(t.index_entry_count(), 3); // row 1: pkey, v and u (NULL keys are indexed too)
        assert_eq!(t.lookup_eq(V_IDX, &ten, View::at(40)).count(), 0);
        // The deleted row's slot is reused.
        let r3 = t.insert(50, row(3, None, None), &ctx()).unwrap();
        assert_eq!(r3, r2);
    }

    // --- randomized comparison against a naive model --------------------------------------

    /// xorshift64*: deterministic, dependency-free randomness for the model test.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
        fn opt(&mut self, n: u64) -> Option<i32> {
            (!self.chance(25)).then(|| self.below(n) as i32)
        }
    }

    type State = BTreeMap<i32, (Option<i32>, Option<i32>)>;

    fn model_rows(s: &State) -> Vec<Vec<Value>> {
        s.iter().map(|(&id, &(v, u))| row(id, v, u)).collect()
    }

    fn violates(s: &State, id: i32, u: Option<i32>, except: Option<i32>) -> bool {
        s.contains_key(&id) && Some(id) != except
            || u.is_some_and(|u| {
                s.iter()
                    .any(|(&k, &(_, uu))| Some(k) != except && uu == Some(u))
            })
    }

    fn sorted(mut rows: Vec<Vec<Value>>) -> Vec<Vec<Value>> {
        rows.sort_by(|a, b| cmp_keys(&KeySlice(a), &KeySlice(b)));
        rows
    }

    fn check_queries(t: &Table, rng: &mut Rng, view: View, state: &State) {
        let got = sorted(t.scan(view).map(|(_, r)| r.to_vec()).collect());
        assert_eq!(got, model_rows(state), "scan at {view:?}");
        assert_eq!(t.len_at(view), state.len());
        for _ in 0..4 {
            // Equality on each index.
            let (index, col, n) = match rng.below(3) {
                0 => (IndexRef::Primary, 0, 24),
                1 => (V_IDX, 1, 6),
                _ => (U_IDX, 2, 12),
            };
            let key = [Value::Int4(rng.below(n) as i32)];
            let got = sorted(
                t.lookup_eq(index, &key, view)
                    .map(|(_, r)| r.to_vec())
                    .collect(),
            );
            let want: Vec<_> = model_rows(state)
                .into_iter()
                .filter(|r| r[col] == key[0])
                .collect();
            assert_eq!(got, want, "eq {index:?} {key:?} at {view:?}");
            // Ranges: results in index order, matching a filtered scan.
            let bound = |rng: &mut Rng| {
                rng.chance(70)
                    .then(|| (Value::Int4(rng.below(n) as i32 - 1), rng.chance(50)))
            };
            let (lower, upper) = (bound(rng), bound(rng));
            let got: Vec<Vec<Value>> = t
                .lookup_range(
                    index,
                    &[],
                    lower.as_ref().map(|(v, i)| (v, *i)),
                    upper.as_ref().map(|(v, i)| (v, *i)),
                    view,
                )
                .map(|(_, r)| r.to_vec())
                .collect();
            let keys: Vec<&Value> = got.iter().map(|r| &r[col]).collect();
            assert!(keys
                .windows(2)
                .all(|w| cmp_values(w[0], w[1]) != Ordering::Greater));
            let within = |x: &Value| {
                if lower.is_none() && upper.is_none() {
                    return true;
                }
                if x.is_null() {
                    return false;
                }
                let lo = lower.as_ref().is_none_or(|(b, inc)| {
                    let o = cmp_values(x, b);
                    o == Ordering::Greater || (*inc && o == Ordering::Equal)
                });
                let hi = upper.as_ref().is_none_or(|(b, inc)| {
                    let o = cmp_values(x, b);
                    o == Ordering::Less || (*inc && o == Ordering::Equal)
                });
                lo && hi
            };
            let want: Vec<_> = model_rows(state)
                .into_iter()
                .filter(|r| within(&r[col]))
                .collect();
            assert_eq!(
                sorted(got),
                want,
                "range {index:?} {lower:?}..{upper:?} at {view:?}"
            );
        }
    }

    #[test]
    fn random_operations_match_a_naive_model() {
        for seed in 1..=40u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut t = table();
            let mut history: Vec<(Timestamp, State)> = vec![(0, State::new())];
            let mut floor: Timestamp = 0; // compacted below this
                                          // A read replica fed with every commit's after-images, compacted on its own, and
                                          // now and then replaced by a fresh committed copy (as after DDL).
            let mut replica = t.committed_copy();
            let mut replica_floor: Timestamp = 0;
            let mut next_tx: TxId = 1;
            let mut open: Option<(TxId, State)> = None;
            for _ in 0..400 {
                let latest = history.last().unwrap().clone();
                match rng.below(10) {
                    0..=4 => {
                        let (tx, work) = open.get_or_insert_with(|| {
                            next_tx += 1;
                            (next_tx, latest.1.clone())
                        });
                        let tx = *tx;
                        let mark = t.begin_statement(tx);
                        let saved = work.clone();
                        let mut failed = false;
                        for _ in 0..1 + rng.below(3) {
                            let id = rng.below(24) as i32;
                            let (v, u) = (rng.opt(6), rng.opt(12));
                            let view = View::for_tx(tx);
                            let target = work.contains_key(&id).then(|| rid_of(&t, id, view));
                            let result = match (rng.below(3), target) {
                                (0, _) | (_, None) => {
                                    let expect = violates(work, id, u, None);
                                    let r = t.insert(tx, row(id, v, u), &ctx()).map(|_| ());
                                    assert_eq!(r.is_err(), expect, "insert {id} {u:?}");
                                    if !expect {
                                        work.insert(id, (v, u));
                                    }
                                    r
                                }
                                (1, Some(rid)) => {
                                    let new_id = if rng.chance(30) {
                                        rng.below(24) as i32
                                    } else {
                                        id
                                    };
                                    let expect = violates(work, new_id, u, Some(id));
                                    let r = t.update(tx, rid, row(new_id, v, u), &ctx());
                                    assert_eq!(r.is_err(), expect, "update {id}->{new_id} {u:?}");
                                    if !expect {
                                        work.remove(&id);
                                        work.insert(new_id, (v, u));
                                    }
                                    r
                                }
                                (_, Some(rid)) => {
                                    work.remove(&id);
                                    t.delete(tx, rid)
                                }
                            };
                            if let Err(e) = result {
                                assert_eq!(e.code, SqlState::UNIQUE_VIOLATION);
                                failed = true;
                                break;
                            }
                        }
                        if failed || rng.chance(10) {
                            t.rollback_statement(tx, mark);
                            *work = saved;
                        }
                    }
                    5 => {
                        if let Some((tx, work)) = open.take() {
                            let ts = latest.0 + 1 + rng.below(3);
                            let mut rows = Vec::new();
                            t.commit_with(tx, ts, |rid, data| {
                                rows.push((rid, data.map(Box::from)))
                            });
                            for (rid, data) in rows {
                                replica.apply_committed(rid, data, ts);
                            }
                            history.push((ts, work));
                        }
                    }
                    6 => {
                        if let Some((tx, _)) = open.take() {
                            t.abort(tx);
                        }
                    }
                    7 => {
                        floor = floor.max(rng.below(latest.0 + 1));
                        t.compact(floor);
                        replica_floor = replica_floor.max(rng.below(latest.0 + 1));
                        replica.compact_replica(replica_floor);
                        if rng.chance(15) {
                            replica = t.committed_copy();
                            replica_floor = replica_floor.max(floor);
                        }
                    }
                    _ => {
                        let ts = floor + rng.below(latest.0 + 3 - floor);
                        let state = history
                            .iter()
                            .rev()
                            .find(|(c, _)| *c <= ts)
                            .unwrap()
                            .1
                            .clone();
                        check_queries(&t, &mut rng, View::at(ts), &state);
                        let ts = replica_floor + rng.below(latest.0 + 3 - replica_floor);
                        let state = history
                            .iter()
                            .rev()
                            .find(|(c, _)| *c <= ts)
                            .unwrap()
                            .1
                            .clone();
                        check_queries(&replica, &mut rng, View::at(ts), &state);
                        if let Some((tx, work)) = &open {
                            let work = work.clone();
                            check_queries(&t, &mut rng, View::for_tx(*tx), &work);
                        }
                    }
                }
            }
            // After everything settles, compaction leaves one version per live row and only
            // the index entries those versions need.
            if let Some((tx, _)) = open.take() {
                t.abort(tx);
            }
            let (ts, state) = history.last().unwrap().clone();
            t.compact(ts);
            assert_eq!(t.version_count(), state.len());
            // One entry per index per row (NULL keys are indexed too).
            assert_eq!(t.index_entry_count(), state.len() * 3);
            check_queries(&t, &mut rng, View::LATEST, &state);
            // The replica ends in the same state, with the same bounded garbage.
            replica.compact_replica(ts);
            assert_eq!(replica.version_count(), state.len());
            assert_eq!(replica.index_entry_count(), state.len() * 3);
            check_queries(&replica, &mut rng, View::LATEST, &state);
        }
    }
}
