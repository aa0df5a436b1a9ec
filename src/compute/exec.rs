//! Runs plans against one [`Table`]: SELECT at a [`View`], INSERT/UPDATE/DELETE as intents of a
//! transaction, and COPY's text and CSV formats.
//!
//! # SELECT
//! The order is the one documented on [`SelectPlan`]. Without aggregation, DISTINCT or ORDER
//! BY, rows stream from the access path straight to `out` and the scan stops at LIMIT; the
//! table row is borrowed, never cloned, and the projected row lives in an inline buffer, so a
//! primary-key point select allocates only what evaluating its key and output values does
//! (nothing for integer keys and columns). ORDER BY buffers the projected rows and sorts them
//! stably; DISTINCT keeps the first of each set of equal visible rows (NULLs equal).
//!
//! # Writes
//! Each write statement is all-or-nothing: it takes a statement mark and rolls back to it on
//! any error (including one from `out`), leaving the transaction's earlier statements intact.
//! UPDATE and DELETE first collect their targets (and, for UPDATE, the new rows, computed from
//! the old row for every assignment) at the transaction's view, then apply them, so no row is
//! written twice and no statement sees its own changes. Constraints are checked row by row as
//! rows are written, as PostgreSQL does for non-deferrable constraints. RETURNING rows are
//! handed to `out` only after every row is written: PostgreSQL also runs a statement with
//! RETURNING to completion before sending rows, so a failing statement sends none.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;

use protocol::error::{PgError, SqlState};
use protocol::types::{self, Interval, Numeric, Scalar, TextContext, Type, Value};
use smallvec::SmallVec;

use super::storage::{cmp_values, Key, KeySlice, KeyView, RowId, Table, View};
use super::{
    Access, AggCall, AggFunc, Aggregate, DeletePlan, IndexRef, InsertPlan, InsertSource,
    SelectPlan, SortKey, TableDef, TxId, UpdatePlan,
};
use crate::sql::expr::{EvalEnv, SessionInfo, TypedExpr};

/// What a write statement did (for CommandComplete).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteOutcome {
    pub rows_affected: u64,
}

/// Receives each result row (visible columns only).
pub type RowSink<'o> = &'o mut dyn FnMut(&[Value]) -> Result<(), PgError>;

/// Values of one projected row or key, inline for the common narrow case.
type RowBuf = SmallVec<[Value; 8]>;

fn eval(
    e: &TypedExpr,
    params: &[Value],
    row: &[Value],
    session: &dyn SessionInfo,
) -> Result<Value, PgError> {
    // `pg_sleep` inside a table query: the delay is dropped (the caller cannot await here).
    let mut env = EvalEnv {
        params,
        row,
        session,
        sleep_us: 0,
        notifies: Vec::new(),
    };
    let value = e.eval(&mut env)?;
    if !env.notifies.is_empty() {
        // The compute has no session to give them to; refused rather than lost.
        return Err(crate::sql::expr::feature_not_supported(
            "pg_notify in a statement that reads a table",
        ));
    }
    Ok(value)
}

/// WHERE / HAVING: only `true` passes.
fn passes(
    filter: Option<&TypedExpr>,
    params: &[Value],
    row: &[Value],
    session: &dyn SessionInfo,
) -> Result<bool, PgError> {
    match filter {
        None => Ok(true),
        Some(f) => Ok(matches!(eval(f, params, row, session)?, Value::Bool(true))),
    }
}

// ---------------------------------------------------------------------------------------------
// Access paths
// ---------------------------------------------------------------------------------------------

/// An access path with its key expressions evaluated (once per execution).
enum AccessKeys {
    Scan,
    Eq(IndexRef, SmallVec<[Value; 4]>),
    Range {
        index: IndexRef,
        prefix: SmallVec<[Value; 4]>,
        lower: Option<(Value, bool)>,
        upper: Option<(Value, bool)>,
    },
}

fn eval_access(
    access: &Access,
    params: &[Value],
    session: &dyn SessionInfo,
) -> Result<AccessKeys, PgError> {
    let consts = |exprs: &[TypedExpr]| -> Result<SmallVec<[Value; 4]>, PgError> {
        exprs
            .iter()
            .map(|e| eval(e, params, &[], session))
            .collect()
    };
    let bound = |b: &Option<(TypedExpr, bool)>| -> Result<Option<(Value, bool)>, PgError> {
        b.as_ref()
            .map(|(e, inclusive)| Ok((eval(e, params, &[], session)?, *inclusive)))
            .transpose()
    };
    Ok(match access {
        Access::Scan => AccessKeys::Scan,
        Access::IndexEq { index, key } => AccessKeys::Eq(*index, consts(key)?),
        Access::IndexRange {
            index,
            prefix,
            lower,
            upper,
        } => AccessKeys::Range {
            index: *index,
            prefix: consts(prefix)?,
            lower: bound(lower)?,
            upper: bound(upper)?,
        },
    })
}

type RowVisitor<'f> = dyn FnMut(RowId, &[Value]) -> Result<ControlFlow<()>, PgError> + 'f;

/// Calls `f` with every row the access path yields at `view`, each at most once, until it
/// breaks.
fn for_each_row(
    table: &Table,
    keys: &AccessKeys,
    view: View,
    f: &mut RowVisitor,
) -> Result<(), PgError> {
    match keys {
        AccessKeys::Scan => {
            for (rid, row) in table.scan(view) {
                if f(rid, row)?.is_break() {
                    break;
                }
            }
        }
        AccessKeys::Eq(index, key) => {
            for (rid, row) in table.lookup_eq(*index, key, view) {
                if f(rid, row)?.is_break() {
                    break;
                }
            }
        }
        AccessKeys::Range {
            index,
            prefix,
            lower,
            upper,
        } => {
            let lower = lower.as_ref().map(|(v, inc)| (v, *inc));
            let upper = upper.as_ref().map(|(v, inc)| (v, *inc));
            for (rid, row) in table.lookup_range(*index, prefix, lower, upper, view) {
                if f(rid, row)?.is_break() {
                    break;
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// SELECT
// ---------------------------------------------------------------------------------------------

/// LIMIT / OFFSET as PostgreSQL's `recompute_limits`: OFFSET first, then LIMIT; negative is an
/// error, NULL means none.
fn eval_limits(
    plan: &SelectPlan,
    params: &[Value],
    session: &dyn SessionInfo,
) -> Result<(u64, Option<u64>), PgError> {
    fn as_count(v: Value, what: &str) -> Result<Option<i64>, PgError> {
        match v {
            Value::Null => Ok(None),
            Value::Int2(n) => Ok(Some(n as i64)),
            Value::Int4(n) => Ok(Some(n as i64)),
            Value::Int8(n) => Ok(Some(n)),
            other => Err(PgError::new(
                SqlState::INTERNAL_ERROR,
                format!("{what} evaluated to a non-integer {other:?}"),
            )),
        }
    }
    let mut offset = 0u64;
    if let Some(e) = &plan.offset {
        if let Some(n) = as_count(eval(e, params, &[], session)?, "OFFSET")? {
            if n < 0 {
                return Err(PgError::new(
                    SqlState(*b"2201X"),
                    "OFFSET must not be negative",
                ));
            }
            offset = n as u64;
        }
    }
    let mut limit = None;
    if let Some(e) = &plan.limit {
        if let Some(n) = as_count(eval(e, params, &[], session)?, "LIMIT")? {
            if n < 0 {
                return Err(PgError::new(
                    SqlState(*b"2201W"),
                    "LIMIT must not be negative",
                ));
            }
            limit = Some(n as u64);
        }
    }
    Ok((offset, limit))
}

/// The tail of the SELECT pipeline: distinct → (buffer and sort) → offset → limit → drop
/// hidden columns → `out`.
struct Sink<'o, 'p> {
    visible: usize,
    offset: u64,
    limit: Option<u64>,
    skipped: u64,
    produced: u64,
    distinct: Option<HashSet<Key>>,
    order_by: &'p [SortKey],
    sorted: Option<Vec<Vec<Value>>>,
    out: RowSink<'o>,
}

impl Sink<'_, '_> {
    fn push(&mut self, row: &mut RowBuf) -> Result<ControlFlow<()>, PgError> {
        if let Some(seen) = &mut self.distinct {
            let visible = &row[..self.visible];
            if seen.contains(&KeySlice(visible) as &dyn KeyView) {
                return Ok(ControlFlow::Continue(()));
            }
            seen.insert(Key(visible.to_vec()));
        }
        if let Some(buffer) = &mut self.sorted {
            buffer.push(std::mem::take(row).into_vec());
            return Ok(ControlFlow::Continue(()));
        }
        self.emit(row)
    }

    fn emit(&mut self, row: &[Value]) -> Result<ControlFlow<()>, PgError> {
        if self.skipped < self.offset {
            self.skipped += 1;
            return Ok(ControlFlow::Continue(()));
        }
        (self.out)(&row[..self.visible])?;
        self.produced += 1;
        Ok(if Some(self.produced) == self.limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    }

    fn finish(mut self) -> Result<u64, PgError> {
        if let Some(mut rows) = self.sorted.take() {
            let keys = self.order_by;
            // Stable, as PostgreSQL's sort is not guaranteed to be but clients expect ties in
            // input order more often than not.
            rows.sort_by(|a, b| cmp_rows(a, b, keys));
            for row in &rows {
                if self.emit(row)?.is_break() {
                    break;
                }
            }
        }
        Ok(self.produced)
    }
}

/// ORDER BY comparison: NULLS FIRST/LAST as asked, DESC reverses only non-NULL comparisons.
fn cmp_rows(a: &[Value], b: &[Value], keys: &[SortKey]) -> Ordering {
    for k in keys {
        let (x, y) = (&a[k.column], &b[k.column]);
        let ord = match (x.is_null(), y.is_null()) {
            (true, true) => Ordering::Equal,
            (true, false) if k.nulls_first => Ordering::Less,
            (true, false) => Ordering::Greater,
            (false, true) if k.nulls_first => Ordering::Greater,
            (false, true) => Ordering::Less,
            _ if k.descending => cmp_values(x, y).reverse(),
            _ => cmp_values(x, y),
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    Ordering::Equal
}

/// Runs `plan` against `table` at `view`, calling `out` with each result row (visible
/// columns). Returns the number of rows produced.
pub fn select(
    table: &Table,
    plan: &SelectPlan,
    params: &[Value],
    view: View,
    session: &dyn SessionInfo,
    out: &mut dyn FnMut(&[Value]) -> Result<(), PgError>,
) -> Result<u64, PgError> {
    debug_assert_eq!(plan.table, table.def().id, "plan for another table");
    let (offset, limit) = eval_limits(plan, params, session)?;
    if limit == Some(0) {
        // PostgreSQL's Limit node does not pull a single row then.
        return Ok(0);
    }
    let keys = eval_access(&plan.access, params, session)?;
    let mut sink = Sink {
        visible: plan.columns.len(),
        offset,
        limit,
        skipped: 0,
        produced: 0,
        distinct: plan.distinct.then(HashSet::new),
        order_by: &plan.order_by,
        sorted: (!plan.order_by.is_empty()).then(Vec::new),
        out,
    };
    debug_assert!(plan.projection.len() >= sink.visible);
    let mut proj = RowBuf::new();
    match &plan.aggregate {
        None => {
            for_each_row(table, &keys, view, &mut |_, row| {
                if !passes(plan.filter.as_ref(), params, row, session)? {
                    return Ok(ControlFlow::Continue(()));
                }
                proj.clear();
                for e in &plan.projection {
                    proj.push(eval(e, params, row, session)?);
                }
                sink.push(&mut proj)
            })?;
        }
        Some(agg) => {
            let groups = aggregate(
                table,
                &keys,
                view,
                plan.filter.as_ref(),
                agg,
                params,
                session,
            )?;
            let mut post = Vec::with_capacity(agg.group_by.len() + agg.aggs.len());
            for group in groups {
                post.clear();
                post.extend(group.values);
                for (acc, call) in group.accs.iter().zip(&agg.aggs) {
                    post.push(acc.finish(call.ty)?);
                }
                if !passes(plan.having.as_ref(), params, &post, session)? {
                    continue;
                }
                proj.clear();
                for e in &plan.projection {
                    proj.push(eval(e, params, &post, session)?);
                }
                if sink.push(&mut proj)?.is_break() {
                    break;
                }
            }
        }
    }
    sink.finish()
}

// ---------------------------------------------------------------------------------------------
// Resumable scans (a large result produced in chunks)
// ---------------------------------------------------------------------------------------------

/// At most this many rows are visited per chunk, however few pass the filter, so one chunk of
/// a selective scan over a large table cannot hold the shard for long either.
pub const CHUNK_ROWS_VISITED: u32 = 64 * 1024;

/// Where a SELECT produced in chunks ([`select_chunk`]) stands between them. Plain data: it
/// travels inside a peek request to another shard's compute and back, so the compute keeps
/// nothing per statement (a client that vanishes mid-result leaves nothing behind there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanCursor {
    /// The row id the next chunk starts at.
    pub next: RowId,
    /// OFFSET rows skipped so far.
    pub skipped: u64,
    /// Result rows produced so far (for LIMIT and the command tag).
    pub produced: u64,
    /// The table's [`Table::incarnation`] the first chunk read; 0 before it.
    pub incarnation: u64,
    /// Pause once `produced` reaches this (a portal's Execute with a row limit).
    pub pause_at: Option<u64>,
    /// The result is complete.
    pub done: bool,
}

impl ScanCursor {
    /// No chunk produced yet.
    pub fn is_fresh(&self) -> bool {
        self.incarnation == 0
    }
}

/// Whether `plan`'s result can be produced in chunks: a scan in row-id order whose rows go
/// out as they are found. Aggregation, DISTINCT and ORDER BY must see every row before the
/// first goes out (PostgreSQL materializes those too, in memory or on disk); LIMIT and OFFSET
/// stream. Index access paths are not resumable (yet) and produce their result whole.
pub fn streams(plan: &SelectPlan) -> bool {
    matches!(plan.access, Access::Scan)
        && plan.aggregate.is_none()
        && !plan.distinct
        && plan.order_by.is_empty()
}

/// Receives each row of a chunk; `Break` pauses the chunk after that row.
pub type ChunkSink<'f> = dyn FnMut(&[Value]) -> Result<ControlFlow<()>, PgError> + 'f;

/// DDL rebuilt the table (renumbering its rows) while a statement read it in chunks.
/// PostgreSQL would have made the DDL wait for the reader; here the reader fails, with the
/// SQLSTATE clients retry.
fn rebuilt_under_scan(table: &Table) -> PgError {
    PgError::new(
        SqlState(*b"40001"),
        format!(
            "could not continue reading table \"{}\": it was altered during the statement",
            table.def().name
        ),
    )
}

/// One chunk of a [`streams`] plan at `view`, resuming at `cursor`: rows go to `out` until it
/// asks for a pause (`Break`, after the row it was given), the cursor's `pause_at` row count
/// is reached, [`CHUNK_ROWS_VISITED`] rows were
/// visited, or the result ends (`cursor.done`). Every chunk must read at the same `view`,
/// held against compaction (see [`Table::scan_from`] for why the rows then come out exactly
/// as one pass would give them). Returns the rows produced by this chunk.
pub fn select_chunk(
    table: &Table,
    plan: &SelectPlan,
    params: &[Value],
    view: View,
    session: &dyn SessionInfo,
    cursor: &mut ScanCursor,
    out: &mut ChunkSink,
) -> Result<u64, PgError> {
    debug_assert!(
        streams(plan),
        "select_chunk of a plan that must materialize"
    );
    debug_assert!(!cursor.done, "chunk asked of a finished scan");
    debug_assert_eq!(plan.table, table.def().id, "plan for another table");
    if cursor.is_fresh() {
        cursor.incarnation = table.incarnation();
    } else if cursor.incarnation != table.incarnation() {
        return Err(rebuilt_under_scan(table));
    }
    let (offset, limit) = eval_limits(plan, params, session)?;
    let before = cursor.produced;
    if Some(cursor.produced) == cursor.pause_at {
        return Ok(0);
    }
    if limit.is_some_and(|l| cursor.produced >= l) {
        cursor.done = true;
        return Ok(0);
    }
    let visible = plan.columns.len();
    let mut proj = RowBuf::new();
    for (visited, (rid, row)) in table.scan_from(view, cursor.next).enumerate() {
        if visited == CHUNK_ROWS_VISITED as usize {
            cursor.next = rid;
            return Ok(cursor.produced - before);
        }
        if !passes(plan.filter.as_ref(), params, row, session)? {
            continue;
        }
        proj.clear();
        for e in &plan.projection {
            proj.push(eval(e, params, row, session)?);
        }
        if cursor.skipped < offset {
            cursor.skipped += 1;
            continue;
        }
        let flow = out(&proj[..visible])?;
        cursor.produced += 1;
        if Some(cursor.produced) == limit {
            break;
        }
        if flow.is_break() || Some(cursor.produced) == cursor.pause_at {
            cursor.next = rid + 1;
            return Ok(cursor.produced - before);
        }
    }
    cursor.done = true;
    Ok(cursor.produced - before)
}

// ---------------------------------------------------------------------------------------------
// Aggregation
// ---------------------------------------------------------------------------------------------

struct Group {
    values: Vec<Value>,
    accs: Vec<Acc>,
    /// Per DISTINCT aggregate, the argument values already fed to it.
    seen: Vec<Option<HashSet<Key>>>,
}

/// Groups the filtered rows, in order of first appearance (PostgreSQL's hash aggregation has
/// no defined order either). Without GROUP BY there is exactly one group.
fn aggregate(
    table: &Table,
    keys: &AccessKeys,
    view: View,
    filter: Option<&TypedExpr>,
    agg: &Aggregate,
    params: &[Value],
    session: &dyn SessionInfo,
) -> Result<Vec<Group>, PgError> {
    let new_group = |values: Vec<Value>| -> Result<Group, PgError> {
        Ok(Group {
            values,
            accs: agg.aggs.iter().map(Acc::new).collect::<Result<_, _>>()?,
            seen: agg
                .aggs
                .iter()
                .map(|c| c.distinct.then(HashSet::new))
                .collect(),
        })
    };
    let mut groups: Vec<Group> = Vec::new();
    let mut index: HashMap<Key, usize> = HashMap::new();
    if agg.group_by.is_empty() {
        groups.push(new_group(Vec::new())?);
    }
    let mut gkey = RowBuf::new();
    for_each_row(table, keys, view, &mut |_, row| {
        if !passes(filter, params, row, session)? {
            return Ok(ControlFlow::Continue(()));
        }
        let gi = if agg.group_by.is_empty() {
            0
        } else {
            gkey.clear();
            for e in &agg.group_by {
                gkey.push(eval(e, params, row, session)?);
            }
            match index.get(&KeySlice(&gkey) as &dyn KeyView) {
                Some(&gi) => gi,
                None => {
                    groups.push(new_group(gkey.to_vec())?);
                    index.insert(Key(gkey.to_vec()), groups.len() - 1);
                    groups.len() - 1
                }
            }
        };
        let group = &mut groups[gi];
        for (j, call) in agg.aggs.iter().enumerate() {
            let Some(arg) = &call.arg else {
                group.accs[j].update(&Value::Null)?; // count(*)
                continue;
            };
            let v = eval(arg, params, row, session)?;
            if v.is_null() {
                continue; // every supported aggregate but count(*) skips NULLs
            }
            if let Some(seen) = &mut group.seen[j] {
                if seen.contains(&KeySlice(std::slice::from_ref(&v)) as &dyn KeyView) {
                    continue;
                }
                seen.insert(Key(vec![v.clone()]));
            }
            group.accs[j].update(&v)?;
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(groups)
}

/// One aggregate's transition state, following PostgreSQL's transition types.
enum Acc {
    Count(i64),
    /// sum(int2/int4): int8 accumulator.
    SumInt(Option<i64>),
    /// sum(int8): 128-bit accumulator, numeric result.
    SumWide(Option<i128>),
    SumNumeric(Option<Numeric>),
    /// sum(float4) accumulates in float4, as `float4pl`.
    SumFloat4(Option<f32>),
    SumFloat8(Option<f64>),
    SumInterval(Option<Interval>),
    /// avg(int2/int4/int8): sum and count, numeric result.
    AvgInt {
        sum: i128,
        n: i64,
    },
    AvgNumeric {
        sum: Option<Numeric>,
        n: i64,
    },
    /// avg(float4/float8): PostgreSQL's Youngs-Cramer state (N, Sx, Sxx); Sxx only matters
    /// for its overflow error.
    AvgFloat {
        n: f64,
        sx: f64,
        sxx: f64,
    },
    AvgInterval {
        sum: Interval,
        n: i64,
    },
    Min(Option<Value>),
    Max(Option<Value>),
}

fn bigint_out_of_range() -> PgError {
    PgError::new(SqlState::NUMERIC_VALUE_OUT_OF_RANGE, "bigint out of range")
}

fn float_overflow() -> PgError {
    PgError::new(
        SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
        "value out of range: overflow",
    )
}

fn interval_out_of_range() -> PgError {
    PgError::new(SqlState::DATETIME_FIELD_OVERFLOW, "interval out of range")
}

fn interval_add(a: &Interval, b: &Interval) -> Result<Interval, PgError> {
    Ok(Interval {
        months: a
            .months
            .checked_add(b.months)
            .ok_or_else(interval_out_of_range)?,
        days: a
            .days
            .checked_add(b.days)
            .ok_or_else(interval_out_of_range)?,
        micros: a
            .micros
            .checked_add(b.micros)
            .ok_or_else(interval_out_of_range)?,
    })
}

/// PostgreSQL 15's `interval_div`: fractional months cascade into days, fractional days into
/// microseconds, each rounded to microseconds (`TSROUND`).
fn interval_div(span: &Interval, factor: f64) -> Interval {
    const DAYS_PER_MONTH: f64 = 30.0;
    const SECS_PER_DAY: f64 = 86400.0;
    let tsround = |x: f64| (x * 1e6).round_ties_even() / 1e6;
    let months = (span.months as f64 / factor) as i32;
    let mut days = (span.days as f64 / factor) as i32;
    let month_remainder_days =
        tsround((span.months as f64 / factor - months as f64) * DAYS_PER_MONTH);
    let mut sec_remainder = tsround(
        (span.days as f64 / factor - days as f64 + month_remainder_days
            - (month_remainder_days as i32) as f64)
            * SECS_PER_DAY,
    );
    if sec_remainder.abs() >= SECS_PER_DAY {
        let whole = (sec_remainder / SECS_PER_DAY) as i32;
        days += whole;
        sec_remainder -= whole as f64 * SECS_PER_DAY;
    }
    days += month_remainder_days as i32;
    let micros = (span.micros as f64 / factor + sec_remainder * 1e6).round_ties_even() as i64;
    Interval {
        months,
        days,
        micros,
    }
}

fn i128_to_numeric(v: i128) -> Result<Numeric, PgError> {
    match i64::try_from(v) {
        Ok(small) => Ok(Numeric::from_i64(small)),
        Err(_) => Numeric::parse(&v.to_string()),
    }
}

fn unsupported_agg(call: &AggCall) -> PgError {
    PgError::new(
        SqlState::UNDEFINED_FUNCTION,
        format!(
            "function {:?}({}) is not supported",
            call.func,
            call.arg.as_ref().map_or("*", |a| a.ty.name())
        ),
    )
}

impl Acc {
    fn new(call: &AggCall) -> Result<Acc, PgError> {
        let arg = call.arg.as_ref().map(|a| a.ty);
        let scalar = arg.filter(|t| !t.array).map(|t| t.scalar);
        Ok(match call.func {
            AggFunc::CountStar | AggFunc::Count => Acc::Count(0),
            AggFunc::Min => Acc::Min(None),
            AggFunc::Max => Acc::Max(None),
            AggFunc::Sum => match scalar {
                Some(Scalar::Int2 | Scalar::Int4) => Acc::SumInt(None),
                Some(Scalar::Int8) => Acc::SumWide(None),
                Some(Scalar::Numeric) => Acc::SumNumeric(None),
                Some(Scalar::Float4) if call.ty.scalar == Scalar::Float4 => Acc::SumFloat4(None),
                Some(Scalar::Float4 | Scalar::Float8) => Acc::SumFloat8(None),
                Some(Scalar::Interval) => Acc::SumInterval(None),
                _ => return Err(unsupported_agg(call)),
            },
            AggFunc::Avg => match scalar {
                Some(Scalar::Int2 | Scalar::Int4 | Scalar::Int8) => Acc::AvgInt { sum: 0, n: 0 },
                Some(Scalar::Numeric) => Acc::AvgNumeric { sum: None, n: 0 },
                Some(Scalar::Float4 | Scalar::Float8) => Acc::AvgFloat {
                    n: 0.0,
                    sx: 0.0,
                    sxx: 0.0,
                },
                Some(Scalar::Interval) => Acc::AvgInterval {
                    sum: Interval::default(),
                    n: 0,
                },
                _ => return Err(unsupported_agg(call)),
            },
        })
    }

    /// Feeds one non-NULL argument (`Null` only for count(*)).
    fn update(&mut self, v: &Value) -> Result<(), PgError> {
        fn int(v: &Value) -> i64 {
            match v {
                Value::Int2(x) => *x as i64,
                Value::Int4(x) => *x as i64,
                Value::Int8(x) => *x,
                other => unreachable!("integer aggregate fed {other:?}"),
            }
        }
        fn float(v: &Value) -> f64 {
            match v {
                Value::Float4(x) => *x as f64,
                Value::Float8(x) => *x,
                other => unreachable!("float aggregate fed {other:?}"),
            }
        }
        match self {
            Acc::Count(n) => *n += 1,
            Acc::SumInt(s) => {
                *s = Some(
                    s.unwrap_or(0)
                        .checked_add(int(v))
                        .ok_or_else(bigint_out_of_range)?,
                )
            }
            Acc::SumWide(s) => {
                *s = Some(
                    s.unwrap_or(0)
                        .checked_add(int(v) as i128)
                        .ok_or_else(bigint_out_of_range)?,
                )
            }
            Acc::SumNumeric(s) => {
                let Value::Numeric(x) = v else {
                    unreachable!("numeric aggregate fed {v:?}")
                };
                *s = Some(match s {
                    Some(acc) => acc.add(x)?,
                    None => x.clone(),
                });
            }
            Acc::SumFloat4(s) => {
                let Value::Float4(x) = v else {
                    unreachable!("float4 aggregate fed {v:?}")
                };
                let acc = s.unwrap_or(0.0);
                let r = acc + x;
                if r.is_infinite() && !acc.is_infinite() && !x.is_infinite() {
                    return Err(float_overflow());
                }
                *s = Some(r);
            }
            Acc::SumFloat8(s) => {
                let x = float(v);
                let acc = s.unwrap_or(0.0);
                let r = acc + x;
                if r.is_infinite() && !acc.is_infinite() && !x.is_infinite() {
                    return Err(float_overflow());
                }
                *s = Some(r);
            }
            Acc::SumInterval(s) => {
                let Value::Interval(x) = v else {
                    unreachable!("interval aggregate fed {v:?}")
                };
                *s = Some(match s {
                    Some(acc) => interval_add(acc, x)?,
                    None => *x,
                });
            }
            Acc::AvgInt { sum, n } => {
                *sum += int(v) as i128;
                *n += 1;
            }
            Acc::AvgNumeric { sum, n } => {
                let Value::Numeric(x) = v else {
                    unreachable!("numeric aggregate fed {v:?}")
                };
                *sum = Some(match sum {
                    Some(acc) => acc.add(x)?,
                    None => x.clone(),
                });
                *n += 1;
            }
            Acc::AvgFloat { n, sx, sxx } => {
                // float8_accum, step for step.
                let x = float(v);
                let prev_n = *n;
                let prev_sx = *sx;
                *n += 1.0;
                *sx += x;
                if prev_n > 0.0 {
                    let tmp = x * *n - *sx;
                    *sxx += tmp * tmp / (*n * prev_n);
                    if sx.is_infinite() || sxx.is_infinite() {
                        if !prev_sx.is_infinite() && !x.is_infinite() {
                            return Err(float_overflow());
                        }
                        *sxx = f64::NAN;
                    }
                } else if x.is_nan() || x.is_infinite() {
                    *sxx = f64::NAN;
                }
            }
            Acc::AvgInterval { sum, n } => {
                let Value::Interval(x) = v else {
                    unreachable!("interval aggregate fed {v:?}")
                };
                *sum = interval_add(sum, x)?;
                *n += 1;
            }
            // PostgreSQL's `*_larger`/`*_smaller` keep the newer value on ties (visible as a
            // numeric's display scale: max(1.5, 1.50) is 1.50).
            Acc::Min(cur) => {
                if cur
                    .as_ref()
                    .is_none_or(|c| cmp_values(c, v) != Ordering::Less)
                {
                    *cur = Some(v.clone());
                }
            }
            Acc::Max(cur) => {
                if cur
                    .as_ref()
                    .is_none_or(|c| cmp_values(c, v) != Ordering::Greater)
                {
                    *cur = Some(v.clone());
                }
            }
        }
        Ok(())
    }

    /// The aggregate's result as a value of `ty` (the planner's result type).
    fn finish(&self, ty: Type) -> Result<Value, PgError> {
        let v = match self {
            Acc::Count(n) => Value::Int8(*n),
            Acc::SumInt(s) => s.map_or(Value::Null, Value::Int8),
            Acc::SumWide(s) => match s {
                Some(s) => Value::Numeric(i128_to_numeric(*s)?),
                None => Value::Null,
            },
            Acc::SumNumeric(s) => s.clone().map_or(Value::Null, Value::Numeric),
            Acc::SumFloat4(s) => s.map_or(Value::Null, Value::Float4),
            Acc::SumFloat8(s) => s.map_or(Value::Null, Value::Float8),
            Acc::SumInterval(s) => s.map_or(Value::Null, Value::Interval),
            Acc::AvgInt { n: 0, .. }
            | Acc::AvgNumeric { n: 0, .. }
            | Acc::AvgInterval { n: 0, .. } => Value::Null,
            Acc::AvgInt { sum, n } => {
                Value::Numeric(i128_to_numeric(*sum)?.div(&Numeric::from_i64(*n))?)
            }
            Acc::AvgNumeric { sum, n } => {
                Value::Numeric(sum.as_ref().expect("n > 0").div(&Numeric::from_i64(*n))?)
            }
            Acc::AvgFloat { n, sx, .. } => {
                if *n == 0.0 {
                    Value::Null
                } else {
                    Value::Float8(*sx / *n)
                }
            }
            Acc::AvgInterval { sum, n } => Value::Interval(interval_div(sum, *n as f64)),
            Acc::Min(v) | Acc::Max(v) => v.clone().unwrap_or(Value::Null),
        };
        Ok(coerce_result(v, ty))
    }
}

/// Widens an aggregate result to the type the planner declared, where PostgreSQL's rules and
/// the declaration may differ only in width (e.g. sum(float4) declared float8).
fn coerce_result(v: Value, ty: Type) -> Value {
    let v = match (v, ty.scalar) {
        (Value::Float4(x), Scalar::Float8) if !ty.array => Value::Float8(x as f64),
        (Value::Int8(x), Scalar::Numeric) if !ty.array => Value::Numeric(Numeric::from_i64(x)),
        (v, _) => v,
    };
    debug_assert!(
        types::value_matches(&v, ty),
        "aggregate result {v:?} is not a {ty:?}"
    );
    v
}

// ---------------------------------------------------------------------------------------------
// INSERT / UPDATE / DELETE
// ---------------------------------------------------------------------------------------------

/// Runs `body` as one statement of `tx`: on error, every write it made is undone.
fn atomically<T>(
    table: &mut Table,
    tx: TxId,
    body: impl FnOnce(&mut Table) -> Result<T, PgError>,
) -> Result<T, PgError> {
    let mark = table.begin_statement(tx);
    let result = body(table);
    if result.is_err() {
        table.rollback_statement(tx, mark);
    }
    result
}

fn eval_returning(
    returning: &[TypedExpr],
    params: &[Value],
    row: &[Value],
    session: &dyn SessionInfo,
) -> Result<Vec<Value>, PgError> {
    returning
        .iter()
        .map(|e| eval(e, params, row, session))
        .collect()
}

fn send_all(rows: &[Vec<Value>], out: RowSink) -> Result<(), PgError> {
    for row in rows {
        out(row)?;
    }
    Ok(())
}

/// `INSERT`: each source row, with unlisted columns at their default (or NULL), becomes an
/// intent of `tx`. For [`InsertSource::Rows`] the rows are full width and `plan.columns` is
/// not used.
pub fn insert(
    table: &mut Table,
    plan: &InsertPlan,
    params: &[Value],
    tx: TxId,
    session: &dyn SessionInfo,
    out: &mut dyn FnMut(&[Value]) -> Result<(), PgError>,
) -> Result<WriteOutcome, PgError> {
    debug_assert_eq!(plan.table, table.def().id, "plan for another table");
    let ctx = session.text_context();
    atomically(table, tx, |table| {
        let template: Vec<Value> = table
            .def()
            .columns
            .iter()
            .map(|c| c.default.clone().unwrap_or(Value::Null))
            .collect();
        let mut returned = Vec::new();
        let mut count = 0u64;
        let mut write = |table: &mut Table, row: Vec<Value>| -> Result<(), PgError> {
            let rid = table.insert(tx, row, ctx)?;
            if !plan.returning.is_empty() {
                let row = table.get(rid, View::for_tx(tx)).expect("just inserted");
                returned.push(eval_returning(&plan.returning, params, row, session)?);
            }
            count += 1;
            Ok(())
        };
        match &plan.source {
            InsertSource::Values(rows) => {
                for exprs in rows {
                    debug_assert_eq!(exprs.len(), plan.columns.len());
                    let mut row = template.clone();
                    for (&col, e) in plan.columns.iter().zip(exprs) {
                        row[col] = eval(e, params, &[], session)?;
                    }
                    write(table, row)?;
                }
            }
            InsertSource::Rows(rows) => {
                for row in rows {
                    write(table, row.clone())?;
                }
            }
        }
        send_all(&returned, out)?;
        Ok(WriteOutcome {
            rows_affected: count,
        })
    })
}

/// COPY FROM: inserts already parsed full-width rows (see [`parse_copy_text`]) as intents of
/// `tx`, all or nothing, without copying them.
pub fn insert_rows(
    table: &mut Table,
    rows: Vec<Vec<Value>>,
    tx: TxId,
    ctx: &TextContext,
) -> Result<WriteOutcome, PgError> {
    atomically(table, tx, |table| {
        let mut count = 0u64;
        for row in rows {
            table.insert(tx, row, ctx)?;
            count += 1;
        }
        Ok(WriteOutcome {
            rows_affected: count,
        })
    })
}

/// `UPDATE`: every row the access path and filter select (as `tx` sees them) gets the
/// assignments, all evaluated over its old version.
pub fn update(
    table: &mut Table,
    plan: &UpdatePlan,
    params: &[Value],
    tx: TxId,
    session: &dyn SessionInfo,
    out: &mut dyn FnMut(&[Value]) -> Result<(), PgError>,
) -> Result<WriteOutcome, PgError> {
    debug_assert_eq!(plan.table, table.def().id, "plan for another table");
    let view = View::for_tx(tx);
    let keys = eval_access(&plan.access, params, session)?;
    let mut targets: Vec<(RowId, Vec<Value>)> = Vec::new();
    for_each_row(table, &keys, view, &mut |rid, row| {
        if passes(plan.filter.as_ref(), params, row, session)? {
            let mut new = row.to_vec();
            for (col, e) in &plan.assignments {
                new[*col] = eval(e, params, row, session)?;
            }
            targets.push((rid, new));
        }
        Ok(ControlFlow::Continue(()))
    })?;
    let ctx = session.text_context();
    atomically(table, tx, |table| {
        let mut returned = Vec::new();
        let count = targets.len() as u64;
        for (rid, new) in targets {
            table.update(tx, rid, new, ctx)?;
            if !plan.returning.is_empty() {
                let row = table.get(rid, view).expect("just updated");
                returned.push(eval_returning(&plan.returning, params, row, session)?);
            }
        }
        send_all(&returned, out)?;
        Ok(WriteOutcome {
            rows_affected: count,
        })
    })
}

/// `DELETE`: every row the access path and filter select (as `tx` sees them) is deleted.
pub fn delete(
    table: &mut Table,
    plan: &DeletePlan,
    params: &[Value],
    tx: TxId,
    session: &dyn SessionInfo,
    out: &mut dyn FnMut(&[Value]) -> Result<(), PgError>,
) -> Result<WriteOutcome, PgError> {
    debug_assert_eq!(plan.table, table.def().id, "plan for another table");
    let view = View::for_tx(tx);
    let keys = eval_access(&plan.access, params, session)?;
    let mut targets: Vec<RowId> = Vec::new();
    let mut returned = Vec::new();
    for_each_row(table, &keys, view, &mut |rid, row| {
        if passes(plan.filter.as_ref(), params, row, session)? {
            targets.push(rid);
            if !plan.returning.is_empty() {
                returned.push(eval_returning(&plan.returning, params, row, session)?);
            }
        }
        Ok(ControlFlow::Continue(()))
    })?;
    atomically(table, tx, |table| {
        for &rid in &targets {
            table.delete(tx, rid)?;
        }
        send_all(&returned, out)?;
        Ok(WriteOutcome {
            rows_affected: targets.len() as u64,
        })
    })
}

// ---------------------------------------------------------------------------------------------
// COPY
// ---------------------------------------------------------------------------------------------

const BAD_COPY_FILE_FORMAT: SqlState = SqlState(*b"22P04");

fn bad_copy(message: &'static str) -> PgError {
    PgError::new(BAD_COPY_FILE_FORMAT, message)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Eol {
    Unknown,
    Nl,
    CrNl,
    Cr,
}

/// Splits COPY data into lines as PostgreSQL's `CopyReadLineText`: the first line fixes the
/// newline style (`\n`, `\r\n` or `\r`) and a different one later is an error; `\.` and a
/// newline at the start of a line end the data (in text mode, after data on a line it only
/// ends that line, as PostgreSQL 15 does). In text mode a backslash protects the next byte
/// (so `\` + newline is data); in CSV mode newlines inside quotes are data.
struct Lines<'a> {
    data: &'a [u8],
    pos: usize,
    eol: Eol,
    csv: bool,
    done: bool,
}

impl<'a> Lines<'a> {
    fn new(data: &'a [u8], csv: bool) -> Lines<'a> {
        Lines {
            data,
            pos: 0,
            eol: Eol::Unknown,
            csv,
            done: false,
        }
    }

    fn cr_error(&self) -> PgError {
        if self.csv {
            bad_copy("unquoted carriage return found in data")
                .with_hint("Use quoted CSV field to represent carriage return.")
        } else {
            bad_copy("literal carriage return found in data")
                .with_hint("Use \"\\r\" to represent carriage return.")
        }
    }

    fn nl_error(&self) -> PgError {
        if self.csv {
            bad_copy("unquoted newline found in data")
                .with_hint("Use quoted CSV field to represent newline.")
        } else {
            bad_copy("literal newline found in data").with_hint("Use \"\\n\" to represent newline.")
        }
    }

    /// The next line without its terminator; `None` at the end of the data or after `\.`.
    fn next_line(&mut self) -> Result<Option<&'a [u8]>, PgError> {
        if self.done || self.pos >= self.data.len() {
            return Ok(None);
        }
        let data = self.data;
        let start = self.pos;
        let mut i = start;
        let mut in_quote = false;
        loop {
            if i >= data.len() {
                self.pos = i;
                return Ok(Some(&data[start..i]));
            }
            let c = data[i];
            i += 1;
            if self.csv && c == b'"' {
                in_quote = !in_quote;
            }
            if c == b'\r' && !(self.csv && in_quote) {
                if matches!(self.eol, Eol::Unknown | Eol::CrNl) {
                    if data.get(i) == Some(&b'\n') {
                        self.eol = Eol::CrNl;
                        self.pos = i + 1;
                        return Ok(Some(&data[start..i - 1]));
                    }
                    if self.eol == Eol::CrNl {
                        return Err(self.cr_error());
                    }
                    self.eol = Eol::Cr;
                } else if self.eol == Eol::Nl {
                    return Err(self.cr_error());
                }
                self.pos = i;
                return Ok(Some(&data[start..i - 1]));
            }
            if c == b'\n' && !(self.csv && in_quote) {
                if matches!(self.eol, Eol::Cr | Eol::CrNl) {
                    return Err(self.nl_error());
                }
                self.eol = Eol::Nl;
                self.pos = i;
                return Ok(Some(&data[start..i - 1]));
            }
            if c == b'\\' && (!self.csv || i - 1 == start) {
                let marker_at = i - 1;
                let Some(&c2) = data.get(i) else {
                    continue; // a backslash just before the end is data
                };
                if c2 != b'.' {
                    if !self.csv {
                        i += 1; // the escaped byte, even a newline, is data
                    }
                    continue;
                }
                // End-of-copy marker: must be followed by the line's newline (or the end).
                i += 1;
                if self.eol == Eol::CrNl {
                    match data.get(i) {
                        Some(b'\n') => {
                            return Err(bad_copy(
                                "end-of-copy marker does not match previous newline style",
                            ))
                        }
                        Some(b'\r') => i += 1,
                        _ => return Err(bad_copy("end-of-copy marker corrupt")),
                    }
                }
                // PostgreSQL reads the byte after `\.` even at the end of the data (where its
                // buffer holds a NUL), so a marker without a newline is corrupt too.
                match data.get(i) {
                    Some(&c3) if c3 == b'\r' || c3 == b'\n' => {
                        let expected = match self.eol {
                            Eol::Nl | Eol::CrNl => Some(b'\n'),
                            Eol::Cr => Some(b'\r'),
                            Eol::Unknown => None,
                        };
                        if expected.is_some_and(|e| e != c3) {
                            return Err(bad_copy(
                                "end-of-copy marker does not match previous newline style",
                            ));
                        }
                    }
                    _ => return Err(bad_copy("end-of-copy marker corrupt")),
                }
                let before = &data[start..marker_at];
                if before.is_empty() {
                    self.done = true;
                    return Ok(None);
                }
                // After data on the same line, PostgreSQL 15 only ends that line there (what
                // follows the newline is read on).
                self.pos = i + 1;
                return Ok(Some(before));
            }
        }
    }
}

/// The full-width row for one COPY line: listed columns from `fields`, others at their
/// default (or NULL).
fn copy_row(
    table: &TableDef,
    columns: &[usize],
    fields: &[Option<Vec<u8>>],
    ctx: &TextContext,
) -> Result<Vec<Value>, PgError> {
    if fields.len() > columns.len() {
        return Err(bad_copy("extra data after last expected column"));
    }
    if fields.len() < columns.len() {
        let missing = &table.columns[columns[fields.len()]].name;
        return Err(PgError::new(
            BAD_COPY_FILE_FORMAT,
            format!("missing data for column \"{missing}\""),
        ));
    }
    let mut row: Vec<Value> = table
        .columns
        .iter()
        .map(|c| c.default.clone().unwrap_or(Value::Null))
        .collect();
    for (&col, field) in columns.iter().zip(fields) {
        row[col] = match field {
            None => Value::Null,
            Some(bytes) => types::text::decode(table.columns[col].ty, bytes, ctx)?,
        };
    }
    Ok(row)
}

/// Parses COPY FROM data in PostgreSQL's text format (tab-separated, `\N` for NULL,
/// backslash escapes, optional `\.` end marker) into full-width rows in table column order:
/// `columns` are the positions the fields fill, the rest get their default or NULL.
///
/// # Errors
/// 22P04 for malformed data (`extra data after last expected column`, `missing data for
/// column "x"`, newline-style and end-marker errors), the type's input error (22P02, ...) for
/// a bad value.
pub fn parse_copy_text(
    data: &[u8],
    table: &TableDef,
    columns: &[usize],
    ctx: &TextContext,
) -> Result<Vec<Vec<Value>>, PgError> {
    let mut lines = Lines::new(data, false);
    let mut rows = Vec::new();
    let mut fields: Vec<Option<Vec<u8>>> = Vec::new();
    while let Some(line) = lines.next_line()? {
        fields.clear();
        if !(columns.is_empty() && line.is_empty()) {
            split_text_fields(line, &mut fields);
        }
        rows.push(copy_row(table, columns, &fields, ctx)?);
    }
    Ok(rows)
}

/// `CopyReadAttributesText`: the raw field `\N` is NULL; `\b \f \n \r \t \v`, octal `\ooo`,
/// hex `\xhh` and `\` + any other byte (that byte) are de-escaped.
fn split_text_fields(line: &[u8], fields: &mut Vec<Option<Vec<u8>>>) {
    let mut i = 0;
    loop {
        let start = i;
        let mut value = Vec::new();
        let mut more = false;
        while i < line.len() {
            let c = line[i];
            i += 1;
            if c == b'\t' {
                more = true;
                break;
            }
            if c != b'\\' {
                value.push(c);
                continue;
            }
            let Some(&e) = line.get(i) else {
                break; // a trailing backslash is dropped
            };
            i += 1;
            match e {
                b'0'..=b'7' => {
                    let mut v = (e - b'0') as u32;
                    for _ in 0..2 {
                        match line.get(i) {
                            Some(&d @ b'0'..=b'7') => {
                                v = v * 8 + (d - b'0') as u32;
                                i += 1;
                            }
                            _ => break,
                        }
                    }
                    value.push((v & 0xff) as u8);
                }
                b'x' => match line.get(i).and_then(|d| (*d as char).to_digit(16)) {
                    Some(mut v) => {
                        i += 1;
                        if let Some(d) = line.get(i).and_then(|d| (*d as char).to_digit(16)) {
                            v = v * 16 + d;
                            i += 1;
                        }
                        value.push(v as u8);
                    }
                    None => value.push(b'x'),
                },
                b'b' => value.push(0x08),
                b'f' => value.push(0x0c),
                b'n' => value.push(b'\n'),
                b'r' => value.push(b'\r'),
                b't' => value.push(b'\t'),
                b'v' => value.push(0x0b),
                other => value.push(other),
            }
        }
        let raw_end = if more { i - 1 } else { i };
        if &line[start..raw_end] == b"\\N" {
            fields.push(None);
        } else {
            fields.push(Some(value));
        }
        if !more {
            break;
        }
    }
}

/// Parses COPY FROM data in PostgreSQL's CSV format (comma-separated, `"` quotes with `""`
/// inside, an unquoted empty field is NULL while `""` is the empty string, newlines allowed
/// inside quotes). With `header`, the first line is skipped. Rows as for [`parse_copy_text`].
///
/// # Errors
/// As [`parse_copy_text`], plus 22P04 `unterminated CSV quoted field`.
pub fn parse_copy_csv(
    data: &[u8],
    table: &TableDef,
    columns: &[usize],
    header: bool,
    ctx: &TextContext,
) -> Result<Vec<Vec<Value>>, PgError> {
    let mut lines = Lines::new(data, true);
    let mut rows = Vec::new();
    let mut fields: Vec<Option<Vec<u8>>> = Vec::new();
    let mut skip_header = header;
    while let Some(line) = lines.next_line()? {
        if std::mem::take(&mut skip_header) {
            continue;
        }
        fields.clear();
        if !(columns.is_empty() && line.is_empty()) {
            split_csv_fields(line, &mut fields)?;
        }
        rows.push(copy_row(table, columns, &fields, ctx)?);
    }
    Ok(rows)
}

/// `CopyReadAttributesCSV` with delimiter `,`, quote and escape `"`, NULL = unquoted empty.
fn split_csv_fields(line: &[u8], fields: &mut Vec<Option<Vec<u8>>>) -> Result<(), PgError> {
    let mut i = 0;
    loop {
        let start = i;
        let mut value = Vec::new();
        let mut saw_quote = false;
        let mut more = false;
        while i < line.len() {
            let c = line[i];
            i += 1;
            if c == b',' {
                more = true;
                break;
            }
            if c != b'"' {
                value.push(c);
                continue;
            }
            saw_quote = true;
            loop {
                let Some(&q) = line.get(i) else {
                    return Err(bad_copy("unterminated CSV quoted field"));
                };
                i += 1;
                if q == b'"' {
                    if line.get(i) == Some(&b'"') {
                        value.push(b'"');
                        i += 1;
                        continue;
                    }
                    break;
                }
                value.push(q);
            }
        }
        let raw_end = if more { i - 1 } else { i };
        if !saw_quote && raw_end == start {
            fields.push(None);
        } else {
            fields.push(Some(value));
        }
        if !more {
            return Ok(());
        }
    }
}

/// Appends one row in COPY TO text format (PostgreSQL's `CopyAttributeOutText`): tab
/// separated, `\N` for NULL, backslash, tab, newline, carriage return, backspace, form feed
/// and vertical tab escaped; ends with a newline.
pub fn format_copy_text(row: &[Value], types: &[Type], ctx: &TextContext, out: &mut Vec<u8>) {
    debug_assert_eq!(row.len(), types.len());
    for (i, (v, &ty)) in row.iter().zip(types).enumerate() {
        if i > 0 {
            out.push(b'\t');
        }
        if v.is_null() {
            out.extend_from_slice(b"\\N");
            continue;
        }
        let start = out.len();
        types::text::encode(v, ty, ctx, out);
        let needs_escape = |b: &u8| matches!(b, b'\\' | b'\t' | b'\n' | b'\r' | 0x08 | 0x0b | 0x0c);
        if out[start..].iter().any(needs_escape) {
            let raw = out.split_off(start);
            for b in raw {
                match b {
                    b'\\' => out.extend_from_slice(b"\\\\"),
                    b'\t' => out.extend_from_slice(b"\\t"),
                    b'\n' => out.extend_from_slice(b"\\n"),
                    b'\r' => out.extend_from_slice(b"\\r"),
                    0x08 => out.extend_from_slice(b"\\b"),
                    0x0b => out.extend_from_slice(b"\\v"),
                    0x0c => out.extend_from_slice(b"\\f"),
                    other => out.push(other),
                }
            }
        }
    }
    out.push(b'\n');
}

/// Appends one row in COPY TO CSV format (PostgreSQL's `CopyAttributeOutCSV`): NULL is an
/// empty unquoted field; a value is quoted (with `"` doubled) if it is empty, contains `,`,
/// `"`, `\r` or `\n`, or is `\.` as the only column; ends with a newline.
pub fn format_copy_csv(row: &[Value], types: &[Type], ctx: &TextContext, out: &mut Vec<u8>) {
    debug_assert_eq!(row.len(), types.len());
    for (i, (v, &ty)) in row.iter().zip(types).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if v.is_null() {
            continue;
        }
        let start = out.len();
        types::text::encode(v, ty, ctx, out);
        let text = &out[start..];
        let quote = text.is_empty()
            || (row.len() == 1 && text == b"\\.")
            || text
                .iter()
                .any(|b| matches!(b, b',' | b'"' | b'\r' | b'\n'));
        if quote {
            let raw = out.split_off(start);
            out.push(b'"');
            for b in raw {
                if b == b'"' {
                    out.push(b'"');
                }
                out.push(b);
            }
            out.push(b'"');
        }
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::{ColumnDef, IndexDef, TableDef};
    use crate::sql::expr::{plan_expr, ColumnResolver, PlanCtx};
    use sqlparser::ast;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;
    use std::sync::Arc;

    const INT4: Type = Type::scalar(Scalar::Int4);
    const INT8: Type = Type::scalar(Scalar::Int8);
    const TEXT: Type = Type::scalar(Scalar::Text);
    const NUMERIC: Type = Type::scalar(Scalar::Numeric);
    const FLOAT8: Type = Type::scalar(Scalar::Float8);
    const INTERVAL: Type = Type::scalar(Scalar::Interval);

    struct TestSession(TextContext);

    impl SessionInfo for TestSession {
        fn current_setting(&self, _: &str) -> Option<String> {
            None
        }
        fn text_context(&self) -> &TextContext {
            &self.0
        }
        fn database(&self) -> &str {
            "postgres"
        }
        fn user(&self) -> &str {
            "postgres"
        }
        fn backend_pid(&self) -> i32 {
            1
        }
        fn stamps(&self) -> crate::sql::expr::Stamps {
            crate::sql::expr::Stamps::default()
        }
    }

    fn session() -> TestSession {
        TestSession(TextContext::default())
    }

    struct Cols<'a>(&'a [(&'a str, Type)]);

    impl ColumnResolver for Cols<'_> {
        fn resolve(&self, idents: &[ast::Ident]) -> Result<(usize, Type), PgError> {
            let name = idents.last().map(|i| i.value.as_str()).unwrap_or("");
            self.0
                .iter()
                .position(|(n, _)| *n == name)
                .map(|i| (i, self.0[i].1))
                .ok_or_else(|| PgError::new(SqlState::UNDEFINED_COLUMN, format!("no {name}")))
        }
    }

    /// Plans `sql` over a row of `cols`; `params` are the `$n` types.
    fn ex_p(sql: &str, cols: &[(&str, Type)], params: &[Type]) -> TypedExpr {
        let ast = Parser::new(&PostgreSqlDialect {})
            .try_with_sql(sql)
            .and_then(|mut p| p.parse_expr())
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let mut params = params.to_vec();
        let resolver = Cols(cols);
        let mut ctx = PlanCtx::new(&mut params, sql);
        ctx.columns = Some(&resolver);
        plan_expr(&ast, &mut ctx).unwrap_or_else(|e| panic!("{sql}: {e:?}"))
    }

    fn ex(sql: &str, cols: &[(&str, Type)]) -> TypedExpr {
        ex_p(sql, cols, &[])
    }

    const COLS: &[(&str, Type)] = &[
        ("id", INT4),
        ("grp", TEXT),
        ("x", INT4),
        ("n", NUMERIC),
        ("f", FLOAT8),
    ];
    const GRP_X: IndexRef = IndexRef::Secondary(0);

    fn def() -> TableDef {
        TableDef {
            id: 1,
            name: "e".into(),
            columns: COLS
                .iter()
                .map(|(n, ty)| ColumnDef {
                    name: n.to_string(),
                    ty: *ty,
                    not_null: false,
                    default: None,
                })
                .collect(),
            primary_key: Some(IndexDef {
                name: "e_pkey".into(),
                columns: vec![0],
                unique: true,
            }),
            indexes: vec![IndexDef {
                name: "e_grp_x_idx".into(),
                columns: vec![1, 2],
                unique: false,
            }],
        }
    }

    fn num(s: &str) -> Value {
        Value::Numeric(s.parse().unwrap())
    }

    /// The rows of the PostgreSQL reference table used below:
    /// `(1,'a',3,1.5,0.5),(2,'a',null,2.25,'NaN'),(3,'b',1,null,-1),(4,'b',3,0,null),
    /// (5,null,2,10,'Infinity')`, committed at ts 1.
    fn table() -> Table {
        let mut t = Table::new(Arc::new(def()));
        let text = |s: &str| Value::Text(s.into());
        let rows = vec![
            vec![
                Value::Int4(1),
                text("a"),
                Value::Int4(3),
                num("1.5"),
                Value::Float8(0.5),
            ],
            vec![
                Value::Int4(2),
                text("a"),
                Value::Null,
                num("2.25"),
                Value::Float8(f64::NAN),
            ],
            vec![
                Value::Int4(3),
                text("b"),
                Value::Int4(1),
                Value::Null,
                Value::Float8(-1.0),
            ],
            vec![
                Value::Int4(4),
                text("b"),
                Value::Int4(3),
                num("0"),
                Value::Null,
            ],
            vec![
                Value::Int4(5),
                Value::Null,
                Value::Int4(2),
                num("10"),
                Value::Float8(f64::INFINITY),
            ],
        ];
        insert_rows(&mut t, rows, 1, &TextContext::default()).unwrap();
        t.commit(1, 1);
        t
    }

    fn plan(access: Access, filter: Option<&str>, projection: &[&str]) -> SelectPlan {
        let projection: Vec<TypedExpr> = projection.iter().map(|s| ex(s, COLS)).collect();
        let columns = projection
            .iter()
            .enumerate()
            .map(|(i, e)| (format!("c{i}"), e.ty))
            .collect();
        SelectPlan {
            table: 1,
            access,
            filter: filter.map(|f| ex(f, COLS)),
            aggregate: None,
            having: None,
            projection,
            columns,
            distinct: false,
            order_by: Vec::new(),
            limit: None,
            offset: None,
        }
    }

    fn render(row: &[Value], types: &[Type]) -> Vec<String> {
        row.iter()
            .zip(types)
            .map(|(v, ty)| {
                if v.is_null() {
                    return "NULL".to_string();
                }
                let mut buf = Vec::new();
                types::text::encode(v, *ty, &TextContext::default(), &mut buf);
                String::from_utf8(buf).unwrap()
            })
            .collect()
    }

    fn run_with(
        t: &Table,
        p: &SelectPlan,
        params: &[Value],
        view: View,
    ) -> Result<Vec<Vec<String>>, PgError> {
        let types: Vec<Type> = p.columns.iter().map(|c| c.1).collect();
        let mut rows = Vec::new();
        let n = select(t, p, params, view, &session(), &mut |r| {
            assert_eq!(r.len(), types.len(), "hidden columns dropped");
            rows.push(render(r, &types));
            Ok(())
        })?;
        assert_eq!(n as usize, rows.len());
        Ok(rows)
    }

    fn run(t: &Table, p: &SelectPlan) -> Vec<Vec<String>> {
        run_with(t, p, &[], View::LATEST).unwrap()
    }

    /// First column of each row.
    fn col0(rows: Vec<Vec<String>>) -> Vec<String> {
        rows.into_iter().map(|mut r| r.swap_remove(0)).collect()
    }

    fn sort_key(column: usize, descending: bool, nulls_first: bool) -> SortKey {
        SortKey {
            column,
            descending,
            nulls_first,
        }
    }

    #[test]
    fn order_by_matches_postgres() {
        let t = table();
        // Hidden sort column (`x`, `f`) after the visible `id`.
        let mut p = plan(Access::Scan, None, &["id", "x"]);
        p.columns.truncate(1);
        p.order_by = vec![sort_key(1, false, false)];
        assert_eq!(col0(run(&t, &p)), ["3", "5", "1", "4", "2"]);
        p.order_by = vec![sort_key(1, true, true)];
        assert_eq!(col0(run(&t, &p)), ["2", "1", "4", "5", "3"]);
        // x NULLS FIRST, id DESC
        let mut p = plan(Access::Scan, None, &["id", "x"]);
        p.order_by = vec![sort_key(1, false, true), sort_key(0, true, true)];
        assert_eq!(col0(run(&t, &p)), ["2", "3", "5", "4", "1"]);
        // Floats: NaN above infinity, NULL last.
        let mut p = plan(Access::Scan, None, &["id", "f"]);
        p.order_by = vec![sort_key(1, false, false)];
        assert_eq!(col0(run(&t, &p)), ["3", "1", "5", "2", "4"]);
    }

    #[test]
    fn distinct_offset_limit() {
        let t = table();
        let mut p = plan(Access::Scan, None, &["grp"]);
        p.distinct = true;
        assert_eq!(col0(run(&t, &p)), ["a", "b", "NULL"]);
        p.order_by = vec![sort_key(0, true, true)];
        assert_eq!(col0(run(&t, &p)), ["NULL", "b", "a"]);
        p.offset = Some(ex("1::int8", &[]));
        p.limit = Some(ex("1::int8", &[]));
        assert_eq!(col0(run(&t, &p)), ["b"]);
        p.limit = Some(ex("NULL::int8", &[]));
        assert_eq!(col0(run(&t, &p)), ["b", "a"]);

        let mut p = plan(Access::Scan, None, &["id"]);
        p.limit = Some(ex_p("$1", &[], &[INT8]));
        let e = run_with(&t, &p, &[Value::Int8(-1)], View::LATEST).unwrap_err();
        assert_eq!(
            (e.code, &*e.message),
            (SqlState(*b"2201W"), "LIMIT must not be negative")
        );
        p.offset = Some(ex_p("$2", &[], &[INT8, INT8]));
        let e = run_with(&t, &p, &[Value::Int8(-1), Value::Int8(-1)], View::LATEST).unwrap_err();
        assert_eq!(
            (e.code, &*e.message),
            (SqlState(*b"2201X"), "OFFSET must not be negative")
        );
        let rows = run_with(&t, &p, &[Value::Int8(2), Value::Int8(4)], View::LATEST).unwrap();
        assert_eq!(col0(rows), ["5"]);

        // The scan stops at LIMIT: row 3 (x = 1) would divide by zero.
        let mut p = plan(Access::Scan, None, &["10 / (x - 1)"]);
        assert_eq!(
            run_with(&t, &p, &[], View::LATEST).unwrap_err().code,
            SqlState::DIVISION_BY_ZERO
        );
        p.limit = Some(ex("2::int8", &[]));
        assert_eq!(col0(run(&t, &p)), ["5", "NULL"]);
        p.limit = Some(ex("0::int8", &[]));
        p.filter = Some(ex("1 / (x - 1) = 0", COLS));
        assert!(run(&t, &p).is_empty());
    }

    #[test]
    fn index_access_matches_filtered_scan() {
        let mut t = table();
        // More rows so ranges have something to skip; some with NULL x.
        let mut rows = Vec::new();
        for i in 10..60 {
            let grp = ["a", "b", "c"][i % 3];
            let x = if i % 7 == 0 {
                Value::Null
            } else {
                Value::Int4((i % 11) as i32)
            };
            rows.push(vec![
                Value::Int4(i as i32),
                Value::Text(grp.into()),
                x,
                Value::Null,
                Value::Null,
            ]);
        }
        insert_rows(&mut t, rows, 2, &TextContext::default()).unwrap();
        t.commit(2, 2);
        let sorted = |mut v: Vec<Vec<String>>| {
            v.sort();
            v
        };
        let cases: Vec<(Access, &str)> = vec![
            (
                Access::IndexEq {
                    index: IndexRef::Primary,
                    key: vec![ex("13", &[])],
                },
                "id = 13",
            ),
            (
                Access::IndexEq {
                    index: IndexRef::Primary,
                    key: vec![ex("NULL::int4", &[])],
                },
                "false",
            ),
            (
                Access::IndexEq {
                    index: GRP_X,
                    key: vec![ex("'b'", &[]), ex("3", &[])],
                },
                "grp = 'b' and x = 3",
            ),
            (
                Access::IndexRange {
                    index: GRP_X,
                    prefix: vec![ex("'a'", &[])],
                    lower: None,
                    upper: None,
                },
                "grp = 'a'",
            ),
            (
                Access::IndexRange {
                    index: GRP_X,
                    prefix: vec![ex("'c'", &[])],
                    lower: Some((ex("3", &[]), false)),
                    upper: Some((ex("8", &[]), true)),
                },
                "grp = 'c' and x > 3 and x <= 8",
            ),
            (
                Access::IndexRange {
                    index: GRP_X,
                    prefix: vec![ex("'b'", &[])],
                    lower: None,
                    upper: Some((ex("4", &[]), false)),
                },
                "grp = 'b' and x < 4",
            ),
            (
                Access::IndexRange {
                    index: GRP_X,
                    prefix: vec![],
                    lower: Some((ex("'b'", &[]), true)),
                    upper: None,
                },
                "grp >= 'b'",
            ),
            (
                Access::IndexRange {
                    index: IndexRef::Primary,
                    prefix: vec![],
                    lower: Some((ex("40", &[]), true)),
                    upper: Some((ex("44", &[]), false)),
                },
                "id >= 40 and id < 44",
            ),
        ];
        for (access, filter) in cases {
            let p = plan(access.clone(), None, &["id", "grp", "x"]);
            let via_index = run(&t, &p);
            let q = plan(Access::Scan, Some(filter), &["id", "grp", "x"]);
            assert_eq!(sorted(via_index.clone()), sorted(run(&t, &q)), "{filter}");
            if !matches!(access, Access::Scan) && filter != "false" {
                assert!(!via_index.is_empty(), "{filter} finds rows");
            }
        }
        // A range scan comes back in index order.
        let p = plan(
            Access::IndexRange {
                index: IndexRef::Primary,
                prefix: vec![],
                lower: Some((ex("30", &[]), false)),
                upper: None,
            },
            None,
            &["id"],
        );
        let ids: Vec<i32> = col0(run(&t, &p))
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(ids, (31..60).collect::<Vec<_>>());
    }

    fn agg_call(func: AggFunc, arg: Option<&str>, distinct: bool, ty: Type) -> AggCall {
        AggCall {
            func,
            arg: arg.map(|a| ex(a, COLS)),
            distinct,
            ty,
        }
    }

    /// A plan projecting every post-aggregation column.
    fn agg_plan(filter: Option<&str>, group_by: &[&str], aggs: Vec<AggCall>) -> SelectPlan {
        let mut post: Vec<(String, Type)> = Vec::new();
        let group_by: Vec<TypedExpr> = group_by.iter().map(|g| ex(g, COLS)).collect();
        for (i, g) in group_by.iter().enumerate() {
            post.push((format!("g{i}"), g.ty));
        }
        for (i, a) in aggs.iter().enumerate() {
            post.push((format!("a{i}"), a.ty));
        }
        let names: Vec<(&str, Type)> = post.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        let projection: Vec<TypedExpr> = names.iter().map(|(n, _)| ex(n, &names)).collect();
        SelectPlan {
            table: 1,
            access: Access::Scan,
            filter: filter.map(|f| ex(f, COLS)),
            aggregate: Some(Aggregate { group_by, aggs }),
            having: None,
            projection,
            columns: post,
            distinct: false,
            order_by: Vec::new(),
            limit: None,
            offset: None,
        }
    }

    #[test]
    fn aggregates_match_postgres() {
        use AggFunc::*;
        let t = table();
        let all = || {
            vec![
                agg_call(CountStar, None, false, INT8),
                agg_call(Count, Some("x"), false, INT8),
                agg_call(Sum, Some("x"), false, INT8),
                agg_call(Avg, Some("x"), false, NUMERIC),
                agg_call(Min, Some("x"), false, INT4),
                agg_call(Max, Some("x"), false, INT4),
                agg_call(Sum, Some("n"), false, NUMERIC),
                agg_call(Avg, Some("n"), false, NUMERIC),
                agg_call(Min, Some("n"), false, NUMERIC),
                agg_call(Max, Some("n"), false, NUMERIC),
                agg_call(Sum, Some("f"), false, FLOAT8),
                agg_call(Avg, Some("f"), false, FLOAT8),
                agg_call(Count, Some("x"), true, INT8),
                agg_call(Sum, Some("x"), true, INT8),
                agg_call(Avg, Some("x"), true, NUMERIC),
            ]
        };
        // Expected values are PostgreSQL 15's output for the same query.
        assert_eq!(
            run(&t, &agg_plan(None, &[], all())),
            [[
                "5",
                "4",
                "9",
                "2.2500000000000000",
                "1",
                "3",
                "13.75",
                "3.4375000000000000",
                "0",
                "10",
                "NaN",
                "NaN",
                "3",
                "6",
                "2.0000000000000000"
            ]]
        );
        // Over no rows: one group, count 0, everything else NULL.
        let empty = run(&t, &agg_plan(Some("id > 10"), &[], all()));
        assert_eq!(empty.len(), 1);
        for (i, v) in empty[0].iter().enumerate() {
            let counts = [0, 1, 12]; // count(*), count(x), count(distinct x)
            let want = if counts.contains(&i) { "0" } else { "NULL" };
            assert_eq!(v, want, "aggregate {i} over no rows");
        }
        // GROUP BY puts NULLs in one group; no rows, no groups.
        let p = agg_plan(
            None,
            &["grp"],
            vec![
                agg_call(CountStar, None, false, INT8),
                agg_call(Sum, Some("x"), false, INT8),
                agg_call(Avg, Some("n"), false, NUMERIC),
            ],
        );
        let mut groups = run(&t, &p);
        groups.sort();
        assert_eq!(
            groups,
            [
                ["NULL", "1", "2", "10.0000000000000000"],
                ["a", "2", "3", "1.8750000000000000"],
                ["b", "2", "4", "0.00000000000000000000"],
            ]
        );
        let mut having = p.clone();
        having.having = Some(ex("a0 > 1", &[("g0", TEXT), ("a0", INT8)]));
        having.order_by = vec![sort_key(0, false, false)];
        assert_eq!(col0(run(&t, &having)), ["a", "b"]);
        let mut none = p.clone();
        none.filter = Some(ex("id > 10", COLS));
        assert!(run(&t, &none).is_empty());
    }

    /// `select <agg>(v) from (values ...) t(v)` over a one-column table.
    fn agg_over(
        ty: Type,
        values: Vec<Value>,
        func: AggFunc,
        result: Type,
    ) -> Result<String, PgError> {
        let cols = [("v", ty)];
        let mut t = Table::new(Arc::new(TableDef {
            id: 9,
            name: "v".into(),
            columns: vec![ColumnDef {
                name: "v".into(),
                ty,
                not_null: false,
                default: None,
            }],
            primary_key: None,
            indexes: vec![],
        }));
        insert_rows(
            &mut t,
            values.into_iter().map(|v| vec![v]).collect(),
            1,
            &TextContext::default(),
        )?;
        t.commit(1, 1);
        let agg = Aggregate {
            group_by: vec![],
            aggs: vec![AggCall {
                func,
                arg: Some(ex("v", &cols)),
                distinct: false,
                ty: result,
            }],
        };
        let p = SelectPlan {
            table: 9,
            access: Access::Scan,
            filter: None,
            aggregate: Some(agg),
            having: None,
            projection: vec![ex("a", &[("a", result)])],
            columns: vec![("a".into(), result)],
            distinct: false,
            order_by: vec![],
            limit: None,
            offset: None,
        };
        Ok(run_with(&t, &p, &[], View::LATEST)?.remove(0).remove(0))
    }

    #[test]
    fn aggregate_types_and_overflow_match_postgres() {
        use AggFunc::*;
        let ints = |v: &[i32]| v.iter().map(|&x| Value::Int4(x)).collect::<Vec<_>>();
        assert_eq!(
            agg_over(INT4, ints(&[1, 2]), Avg, NUMERIC).unwrap(),
            "1.5000000000000000"
        );
        assert_eq!(
            agg_over(INT4, ints(&[i32::MAX, i32::MAX]), Sum, INT8).unwrap(),
            "4294967294"
        );
        let big = vec![Value::Int8(i64::MAX), Value::Int8(i64::MAX)];
        assert_eq!(
            agg_over(INT8, big.clone(), Sum, NUMERIC).unwrap(),
            "18446744073709551614"
        );
        // PostgreSQL: 9223372036854775807 (16 significant digits are already there).
        assert_eq!(
            agg_over(INT8, big, Avg, NUMERIC).unwrap(),
            "9223372036854775807"
        );
        assert_eq!(
            agg_over(NUMERIC, vec![num("1.50"), num("2.2")], Avg, NUMERIC).unwrap(),
            "1.8500000000000000"
        );
        // Ties keep the later value: max(1.5, 1.50) = 1.50, min(1.50, 1.5) = 1.5.
        assert_eq!(
            agg_over(NUMERIC, vec![num("1.5"), num("1.50")], Max, NUMERIC).unwrap(),
            "1.50"
        );
        assert_eq!(
            agg_over(NUMERIC, vec![num("1.50"), num("1.5")], Min, NUMERIC).unwrap(),
            "1.5"
        );
        let overflow = |r: Result<String, PgError>| {
            let e = r.unwrap_err();
            assert_eq!(e.code, SqlState::NUMERIC_VALUE_OUT_OF_RANGE);
            assert_eq!(e.message, "value out of range: overflow");
        };
        overflow(agg_over(FLOAT8, vec![Value::Float8(1e308); 2], Sum, FLOAT8));
        overflow(agg_over(
            FLOAT8,
            vec![Value::Float8(1e200), Value::Float8(-1e200)],
            Avg,
            FLOAT8,
        ));
        assert_eq!(
            agg_over(FLOAT8, vec![Value::Float8(1e300); 2], Avg, FLOAT8).unwrap(),
            "1e+300"
        );
        let real = Type::scalar(Scalar::Float4);
        overflow(agg_over(real, vec![Value::Float4(3e38); 2], Sum, real));
        assert_eq!(
            agg_over(
                real,
                vec![Value::Float4(1.0), Value::Float4(2.5)],
                Sum,
                real
            )
            .unwrap(),
            "3.5"
        );
        assert_eq!(
            agg_over(
                real,
                vec![Value::Float4(1.0), Value::Float4(2.0)],
                Avg,
                FLOAT8
            )
            .unwrap(),
            "1.5"
        );
        let iv = |months, days, micros| {
            Value::Interval(Interval {
                months,
                days,
                micros,
            })
        };
        assert_eq!(
            agg_over(
                INTERVAL,
                vec![iv(1, 0, 0), iv(0, 1, 0), iv(0, 0, 1_000_000)],
                Avg,
                INTERVAL
            )
            .unwrap(),
            "10 days 08:00:00.333333"
        );
        assert_eq!(
            agg_over(
                INTERVAL,
                vec![iv(1, 0, 0), iv(0, 1, 0), iv(0, 0, 1_000_000)],
                Sum,
                INTERVAL
            )
            .unwrap(),
            "1 mon 1 day 00:00:01"
        );
        assert_eq!(
            agg_over(
                INTERVAL,
                vec![iv(1, 0, 0), iv(1, 0, 0), iv(0, 1, 0)],
                Avg,
                INTERVAL
            )
            .unwrap(),
            "20 days 08:00:00"
        );
        assert_eq!(
            agg_over(
                INTERVAL,
                vec![
                    iv(1, 3, 1_000_000),
                    iv(0, 0, 0),
                    iv(0, -1, 0),
                    iv(0, 0, 7_000_000)
                ],
                Avg,
                INTERVAL
            )
            .unwrap(),
            "8 days 00:00:02"
        );
        let e = agg_over(
            INTERVAL,
            vec![iv(i32::MAX, 0, 0), iv(1, 0, 0)],
            Sum,
            INTERVAL,
        )
        .unwrap_err();
        assert_eq!(e.message, "interval out of range");
    }

    // --- writes ----------------------------------------------------------------------------

    fn insert_plan(columns: &[usize], rows: &[&[&str]], returning: &[&str]) -> InsertPlan {
        InsertPlan {
            table: 1,
            columns: columns.to_vec(),
            source: InsertSource::Values(
                rows.iter()
                    .map(|r| r.iter().map(|e| ex(e, &[])).collect())
                    .collect(),
            ),
            returning: returning.iter().map(|e| ex(e, COLS)).collect(),
            returning_columns: vec![],
        }
    }

    fn all_ids(t: &Table, view: View) -> Vec<String> {
        let mut p = plan(Access::Scan, None, &["id"]);
        p.order_by = vec![sort_key(0, false, false)];
        col0(run_with(t, &p, &[], view).unwrap())
    }

    type Returned = Vec<Vec<Value>>;

    fn collect(rows: &mut Returned) -> impl FnMut(&[Value]) -> Result<(), PgError> + '_ {
        |r| {
            rows.push(r.to_vec());
            Ok(())
        }
    }

    #[test]
    fn insert_defaults_returning_and_statement_atomicity() {
        let mut d = def();
        d.columns[3].default = Some(num("7.5"));
        let mut t = Table::new(Arc::new(d));
        let s = session();
        let mut ret = Returned::new();
        let p = insert_plan(
            &[0, 2],
            &[&["1", "10"], &["2", "20"]],
            &["id", "n", "x + 1"],
        );
        let n = insert(&mut t, &p, &[], 5, &s, &mut collect(&mut ret)).unwrap();
        assert_eq!(n, WriteOutcome { rows_affected: 2 });
        assert_eq!(
            ret,
            [
                vec![Value::Int4(1), num("7.5"), Value::Int4(11)],
                vec![Value::Int4(2), num("7.5"), Value::Int4(21)]
            ]
        );
        // The third row fails: no RETURNING rows, none of the statement's rows, the earlier
        // statement's rows intact.
        let mut ret = Returned::new();
        let p = insert_plan(&[0], &[&["3"], &["4"], &["1"], &["5"]], &["id"]);
        let e = insert(&mut t, &p, &[], 5, &s, &mut collect(&mut ret)).unwrap_err();
        assert_eq!(e.code, SqlState::UNIQUE_VIOLATION);
        assert_eq!(e.detail.as_deref(), Some("Key (id)=(1) already exists."));
        assert!(ret.is_empty());
        assert_eq!(all_ids(&t, View::for_tx(5)), ["1", "2"]);
        assert_eq!(all_ids(&t, View::LATEST), Vec::<String>::new());
        // An error from the row sink fails the statement too.
        let p = insert_plan(&[0], &[&["3"]], &["id"]);
        let e = insert(&mut t, &p, &[], 5, &s, &mut |_| {
            Err(PgError::new(SqlState::QUERY_CANCELED, "canceled"))
        })
        .unwrap_err();
        assert_eq!(e.code, SqlState::QUERY_CANCELED);
        assert_eq!(all_ids(&t, View::for_tx(5)), ["1", "2"]);
        t.commit(5, 10);
        assert_eq!(all_ids(&t, View::LATEST), ["1", "2"]);
    }

    fn update_plan(
        access: Access,
        filter: Option<&str>,
        set: &[(usize, &str)],
        returning: &[&str],
    ) -> UpdatePlan {
        UpdatePlan {
            table: 1,
            access,
            filter: filter.map(|f| ex(f, COLS)),
            assignments: set.iter().map(|(c, e)| (*c, ex(e, COLS))).collect(),
            returning: returning.iter().map(|e| ex(e, COLS)).collect(),
            returning_columns: vec![],
        }
    }

    fn get_x(t: &Table, id: i32, view: View) -> Option<Value> {
        let key = [Value::Int4(id)];
        let x = t
            .lookup_eq(IndexRef::Primary, &key, view)
            .next()
            .map(|(_, r)| r[2].clone());
        x
    }

    #[test]
    fn update_sees_old_row_and_is_atomic() {
        let mut t = table();
        let s = session();
        // Every assignment reads the old row.
        let p = update_plan(
            Access::Scan,
            Some("id = 1"),
            &[(0, "id + 100"), (2, "id")],
            &["id", "x"],
        );
        let mut ret = Returned::new();
        let n = update(&mut t, &p, &[], 2, &s, &mut collect(&mut ret)).unwrap();
        assert_eq!(n.rows_affected, 1);
        assert_eq!(ret, [vec![Value::Int4(101), Value::Int4(1)]]);
        // A later statement fails half way (PostgreSQL fails the same way: row 1 -> 2 meets
        // the existing 2); only its own writes go.
        let p = update_plan(Access::Scan, Some("id = 5"), &[(2, "100")], &[]);
        update(&mut t, &p, &[], 2, &s, &mut collect(&mut Returned::new())).unwrap();
        let p = update_plan(Access::Scan, None, &[(0, "id + 1")], &["id"]);
        let mut ret = Returned::new();
        let e = update(&mut t, &p, &[], 2, &s, &mut collect(&mut ret)).unwrap_err();
        assert_eq!(e.code, SqlState::UNIQUE_VIOLATION);
        assert_eq!(e.detail.as_deref(), Some("Key (id)=(3) already exists."));
        assert!(ret.is_empty());
        assert_eq!(all_ids(&t, View::for_tx(2)), ["2", "3", "4", "5", "101"]);
        assert_eq!(get_x(&t, 5, View::for_tx(2)), Some(Value::Int4(100)));
        assert_eq!(get_x(&t, 5, View::LATEST), Some(Value::Int4(2)));
        // Without conflicts every row moves exactly once.
        let p = update_plan(Access::Scan, None, &[(0, "id + 1000")], &[]);
        let n = update(&mut t, &p, &[], 2, &s, &mut collect(&mut Returned::new())).unwrap();
        assert_eq!(n.rows_affected, 5);
        assert_eq!(
            all_ids(&t, View::for_tx(2)),
            ["1002", "1003", "1004", "1005", "1101"]
        );
        t.commit(2, 2);
        assert_eq!(all_ids(&t, View::at(1)), ["1", "2", "3", "4", "5"]);
        assert_eq!(
            all_ids(&t, View::LATEST),
            ["1002", "1003", "1004", "1005", "1101"]
        );
    }

    #[test]
    fn update_through_a_range_moves_each_row_once() {
        let mut t = table();
        let s = session();
        // New keys land further inside the scanned range; each row is still updated once.
        let access = Access::IndexRange {
            index: GRP_X,
            prefix: vec![ex("'b'", &[])],
            lower: Some((ex("0", &[]), true)),
            upper: None,
        };
        let p = update_plan(access, None, &[(2, "x + 10")], &["id", "x"]);
        let mut ret = Returned::new();
        let n = update(&mut t, &p, &[], 3, &s, &mut collect(&mut ret)).unwrap();
        assert_eq!(n.rows_affected, 2);
        ret.sort_by(|a, b| cmp_values(&a[0], &b[0]));
        assert_eq!(
            ret,
            [
                vec![Value::Int4(3), Value::Int4(11)],
                vec![Value::Int4(4), Value::Int4(13)]
            ]
        );
        // Setting NOT NULL-free columns to NULL is fine; the primary key is not.
        let p = update_plan(Access::Scan, Some("id = 3"), &[(0, "NULL::int4")], &[]);
        let e = update(&mut t, &p, &[], 3, &s, &mut collect(&mut Returned::new())).unwrap_err();
        assert_eq!(e.code, SqlState::NOT_NULL_VIOLATION);
        assert_eq!(
            e.detail.as_deref(),
            Some("Failing row contains (null, b, 11, null, -1).")
        );
        t.commit(3, 3);
        assert_eq!(get_x(&t, 3, View::LATEST), Some(Value::Int4(11)));
    }

    #[test]
    fn delete_returning_and_rollback() {
        let mut t = table();
        let s = session();
        let p = DeletePlan {
            table: 1,
            access: Access::Scan,
            filter: Some(ex("grp = 'a'", COLS)),
            returning: vec![ex("id", COLS), ex("n * 2", COLS)],
            returning_columns: vec![],
        };
        let mut ret = Returned::new();
        let n = delete(&mut t, &p, &[], 4, &s, &mut collect(&mut ret)).unwrap();
        assert_eq!(n.rows_affected, 2);
        assert_eq!(
            ret,
            [
                vec![Value::Int4(1), num("3.0")],
                vec![Value::Int4(2), num("4.50")]
            ]
        );
        assert_eq!(all_ids(&t, View::for_tx(4)), ["3", "4", "5"]);
        // Deleting again finds nothing.
        let n = delete(&mut t, &p, &[], 4, &s, &mut collect(&mut Returned::new())).unwrap();
        assert_eq!(n.rows_affected, 0);
        t.abort(4);
        assert_eq!(all_ids(&t, View::LATEST), ["1", "2", "3", "4", "5"]);
    }

    // --- allocation on the point-select path -------------------------------------------------

    mod counting {
        use std::alloc::{GlobalAlloc, Layout, System};
        use std::cell::Cell;

        thread_local! {
            static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
        }

        /// Counts allocations per thread, so tests running in parallel do not disturb each
        /// other's counts.
        pub struct Counting;

        fn count() {
            let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        }

        // SAFETY: forwards to the system allocator unchanged.
        unsafe impl GlobalAlloc for Counting {
            unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
                count();
                unsafe { System.alloc(layout) }
            }
            unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
                unsafe { System.dealloc(ptr, layout) }
            }
            unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
                count();
                unsafe { System.realloc(ptr, layout, new_size) }
            }
        }

        #[global_allocator]
        static GLOBAL: Counting = Counting;

        pub fn allocations() -> u64 {
            ALLOCATIONS.with(Cell::get)
        }
    }

    #[test]
    fn primary_key_point_select_does_not_allocate() {
        let mut t = Table::new(Arc::new(def()));
        let rows = (0..1000)
            .map(|i| {
                vec![
                    Value::Int4(i),
                    Value::Text(format!("g{}", i % 10)),
                    Value::Int4(i * 2),
                    Value::Null,
                    Value::Null,
                ]
            })
            .collect();
        insert_rows(&mut t, rows, 1, &TextContext::default()).unwrap();
        t.commit(1, 1);
        let p = plan(
            Access::IndexEq {
                index: IndexRef::Primary,
                key: vec![ex_p("$1", &[], &[INT4])],
            },
            None,
            &["id", "x"],
        );
        let s = session();
        let mut sum = 0i64;
        let mut out = |r: &[Value]| {
            if let Value::Int4(x) = r[1] {
                sum += x as i64;
            }
            Ok(())
        };
        let mut params = [Value::Int4(0)];
        let before = counting::allocations();
        for i in 0..500 {
            params[0] = Value::Int4(i);
            let n = select(&t, &p, &params, View::LATEST, &s, &mut out).unwrap();
            assert_eq!(n, 1);
        }
        let allocated = counting::allocations() - before;
        assert_eq!(sum, (0..500i64).map(|i| i * 2).sum::<i64>());
        assert_eq!(allocated, 0, "allocations on the point-select path");
        // The counter works: a scan with ORDER BY buffers rows.
        let mut q = plan(Access::Scan, None, &["id"]);
        q.order_by = vec![sort_key(0, true, false)];
        let before = counting::allocations();
        select(&t, &q, &[], View::LATEST, &s, &mut |_| Ok(())).unwrap();
        assert!(counting::allocations() > before);
    }

    // --- COPY ----------------------------------------------------------------------------------

    /// `c (a int, b text, c int not null default 7)`, as in the PostgreSQL session these
    /// expectations come from.
    fn copy_def() -> TableDef {
        let col = |name: &str, ty, default| ColumnDef {
            name: name.into(),
            ty,
            not_null: false,
            default,
        };
        TableDef {
            id: 3,
            name: "c".into(),
            columns: vec![
                col("a", INT4, None),
                col("b", TEXT, None),
                col("c", INT4, Some(Value::Int4(7))),
            ],
            primary_key: None,
            indexes: vec![],
        }
    }

    fn text_rows(data: &[u8], columns: &[usize]) -> Result<Vec<Vec<Value>>, PgError> {
        parse_copy_text(data, &copy_def(), columns, &TextContext::default())
    }

    fn csv_rows(data: &[u8], header: bool) -> Result<Vec<Vec<Value>>, PgError> {
        parse_copy_csv(
            data,
            &copy_def(),
            &[0, 1, 2],
            header,
            &TextContext::default(),
        )
    }

    fn r(a: Option<i32>, b: Option<&str>, c: Option<i32>) -> Vec<Value> {
        vec![
            a.map_or(Value::Null, Value::Int4),
            b.map_or(Value::Null, |s| Value::Text(s.into())),
            c.map_or(Value::Null, Value::Int4),
        ]
    }

    fn copy_err(r: Result<Vec<Vec<Value>>, PgError>) -> (String, String) {
        let e = r.unwrap_err();
        (e.code.as_str().to_string(), e.message.into_owned())
    }

    fn bad(code: &str, msg: &str) -> (String, String) {
        (code.to_string(), msg.to_string())
    }

    #[test]
    fn copy_text_parses_like_postgres() {
        let all = [0, 1, 2];
        // Expected values are what PostgreSQL 15 stored for the same input.
        assert_eq!(
            text_rows(
                br"5	a\\b\tc\nd\101\x41\q\N	9
\N	\N	1
",
                &all
            )
            .unwrap(),
            [
                r(Some(5), Some("a\\b\tc\ndAAqN"), Some(9)),
                r(None, None, Some(1))
            ]
        );
        assert_eq!(
            text_rows(b"1\tx\n", &[0, 1]).unwrap(),
            [r(Some(1), Some("x"), Some(7))]
        );
        // An escaped newline is data; CRLF lines; the end marker stops the data.
        assert_eq!(
            text_rows(b"10\tz\\\n", &[0, 1]).unwrap(),
            [r(Some(10), Some("z\n"), Some(7))]
        );
        assert_eq!(
            text_rows(b"1\tx\t2\r\n3\ty\t4\r\n\\.\r\nignored", &all).unwrap(),
            [
                r(Some(1), Some("x"), Some(2)),
                r(Some(3), Some("y"), Some(4))
            ]
        );
        assert_eq!(
            copy_err(text_rows(b"1\t\\.\n", &all)),
            bad("22P04", "missing data for column \"c\"")
        );
        assert_eq!(text_rows(b"", &all).unwrap(), Vec::<Vec<Value>>::new());
        assert_eq!(
            text_rows(b"\n", &[1]).unwrap(),
            [r(None, Some(""), Some(7))]
        );

        assert_eq!(
            copy_err(text_rows(b"1\tx\t3\t4\n", &all)),
            bad("22P04", "extra data after last expected column")
        );
        assert_eq!(
            copy_err(text_rows(b"1\tx\n", &all)),
            bad("22P04", "missing data for column \"c\"")
        );
        assert_eq!(
            copy_err(text_rows(b"abc\tx\t1\n", &all)),
            bad("22P02", "invalid input syntax for type integer: \"abc\"")
        );
        assert_eq!(
            copy_err(text_rows(b"\n", &[0])),
            bad("22P02", "invalid input syntax for type integer: \"\"")
        );
        assert_eq!(
            copy_err(text_rows(b"1\tx\t1\r\n2\ty\t2\n", &all)),
            bad("22P04", "literal newline found in data")
        );
        assert_eq!(
            copy_err(text_rows(b"1\tx\t1\n2\ty\r3\t4\n", &all)),
            bad("22P04", "literal carriage return found in data")
        );
        assert_eq!(
            copy_err(text_rows(b"\\.x\n", &all)),
            bad("22P04", "end-of-copy marker corrupt")
        );
        assert_eq!(
            copy_err(text_rows(b"1\tx\t2\n\\.", &all)),
            bad("22P04", "end-of-copy marker corrupt")
        );
        assert_eq!(
            text_rows(b"1\tx\t2\n2\tb\t3\\.\n4\tc\t5\n", &all).unwrap(),
            [
                r(Some(1), Some("x"), Some(2)),
                r(Some(2), Some("b"), Some(3)),
                r(Some(4), Some("c"), Some(5))
            ]
        );
        assert_eq!(
            copy_err(text_rows(b"1\tx\t2\n2\tb\t3\\.\n4\n", &all)),
            bad("22P04", "missing data for column \"b\"")
        );
        assert_eq!(
            text_rows(b"1\tx\t2\n\\.\n4\n", &all).unwrap(),
            [r(Some(1), Some("x"), Some(2))]
        );
        assert_eq!(
            text_rows(b"1\tab\\\tc\t3\n", &all).unwrap(),
            [r(Some(1), Some("ab\tc"), Some(3))]
        );
        assert_eq!(
            copy_err(text_rows(b"1\tx\t1\r\n\\.\n", &all)),
            bad(
                "22P04",
                "end-of-copy marker does not match previous newline style"
            )
        );
        assert_eq!(
            copy_err(text_rows(b"1\t\\xff\t1\n", &all)).0,
            SqlState::CHARACTER_NOT_IN_REPERTOIRE.as_str()
        );
    }

    #[test]
    fn copy_csv_parses_like_postgres() {
        assert_eq!(
            csv_rows(b"6,\"\",1\n7,,1\n8,\"a\"\"b,\nc\",1\n", false).unwrap(),
            [
                r(Some(6), Some(""), Some(1)),
                r(Some(7), None, Some(1)),
                r(Some(8), Some("a\"b,\nc"), Some(1)),
            ]
        );
        assert_eq!(
            csv_rows(b"a,b,c\r\n1, x ,2\r\n", true).unwrap(),
            [r(Some(1), Some(" x "), Some(2))]
        );
        // `\.` ends CSV data only alone at the start of a line; elsewhere it is a value.
        assert_eq!(
            csv_rows(b"1,\\.,2\n\\.\n3,y,4\n", false).unwrap(),
            [r(Some(1), Some("\\."), Some(2))]
        );
        assert_eq!(
            copy_err(csv_rows(b"a,b,c\n9,\"x,1\n", true)),
            bad("22P04", "unterminated CSV quoted field")
        );
        assert_eq!(
            copy_err(csv_rows(b"1,x,2,3\n", false)),
            bad("22P04", "extra data after last expected column")
        );
        assert_eq!(
            copy_err(csv_rows(b"1,x,2\r\n2,y,3\n", false)),
            bad("22P04", "unquoted newline found in data")
        );
    }

    #[test]
    fn copy_formats_round_trip() {
        let ctx = TextContext::default();
        let types = [INT4, TEXT, INT4];
        let nasty = [
            "plain",
            "",
            "tab\there",
            "new\nline",
            "cr\rx",
            "back\\slash",
            "\\.",
            "\\N",
            "quote\"d",
            "comma,",
            "\u{8}\u{b}\u{c}\u{1}",
            "é∑",
        ];
        let rows: Vec<Vec<Value>> = nasty
            .iter()
            .enumerate()
            .map(|(i, s)| r(Some(i as i32), Some(s), (i % 2 == 1).then_some(-1)))
            .chain([r(None, None, None)])
            .collect();
        let mut text = Vec::new();
        let mut csv = Vec::new();
        for row in &rows {
            format_copy_text(row, &types, &ctx, &mut text);
            format_copy_csv(row, &types, &ctx, &mut csv);
        }
        assert_eq!(
            parse_copy_text(&text, &copy_def(), &[0, 1, 2], &ctx).unwrap(),
            rows
        );
        assert_eq!(
            parse_copy_csv(&csv, &copy_def(), &[0, 1, 2], false, &ctx).unwrap(),
            rows
        );
        // Exact bytes, as PostgreSQL's COPY TO writes them.
        let mut out = Vec::new();
        format_copy_text(&r(Some(1), Some("a\tb\\\n"), None), &types, &ctx, &mut out);
        assert_eq!(out, b"1\ta\\tb\\\\\\n\t\\N\n");
        out.clear();
        format_copy_csv(&r(Some(1), Some(""), None), &types, &ctx, &mut out);
        format_copy_csv(&r(Some(2), Some("a\"b"), Some(3)), &types, &ctx, &mut out);
        format_copy_csv(&[Value::Text("\\.".into())], &[TEXT], &ctx, &mut out);
        assert_eq!(out, b"1,\"\",\n2,\"a\"\"b\",3\n\"\\.\"\n");
    }
}
