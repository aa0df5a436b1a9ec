//! The embedded compute: tables held in memory by compute workers, and the plans they run.
//!
//! - this module: the shared vocabulary — catalog definitions ([`TableDef`]) and the plans a
//!   frontend shard builds and a compute worker executes ([`SelectPlan`], [`InsertPlan`],
//!   [`UpdatePlan`], [`DeletePlan`]). Expressions are `sql::expr::TypedExpr`, evaluated over a
//!   table row (`EvalEnv::row`) with the statement's bound parameters.
//! - `storage`: multi-versioned tables with primary-key and secondary indexes.
//! - `exec`: runs plans against a table at a timestamp.
//!
//! Plans are `Send` (they travel to the worker that holds the table) and immutable once built;
//! a prepared statement's plan is shared by every execution through an `Arc`.

use std::sync::Arc;

use protocol::types::{Type, Value};

use crate::sql::expr::TypedExpr;

pub mod exec;
pub mod storage;

pub type TableId = u32;

/// A logical timestamp. Commits get increasing timestamps from the oracle; a read at `ts` sees
/// exactly the commits at or before `ts`.
pub type Timestamp = u64;

/// Identifies an open transaction that holds uncommitted writes (write intents) in tables.
pub type TxId = u64;

#[derive(Clone, Debug, PartialEq)]
pub struct ColumnDef {
    pub name: String,
    pub ty: Type,
    pub not_null: bool,
    /// `DEFAULT <constant>`, already coerced to `ty`.
    pub default: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexDef {
    /// Index names share the relation namespace with tables, as in PostgreSQL
    /// (the primary key's is `<table>_pkey`).
    pub name: String,
    /// Column positions in the table, in index order.
    pub columns: Vec<usize>,
    pub unique: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TableDef {
    pub id: TableId,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    /// The primary key: unique, and its columns are NOT NULL.
    pub primary_key: Option<IndexDef>,
    /// Secondary indexes (from `CREATE [UNIQUE] INDEX`, and UNIQUE column constraints).
    pub indexes: Vec<IndexDef>,
}

impl TableDef {
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// The index an [`IndexRef`] names.
    pub fn index(&self, r: IndexRef) -> Option<&IndexDef> {
        match r {
            IndexRef::Primary => self.primary_key.as_ref(),
            IndexRef::Secondary(i) => self.indexes.get(i),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexRef {
    Primary,
    /// Position in `TableDef::indexes`.
    Secondary(usize),
}

/// How a plan reaches the rows it reads. The key expressions are constants or parameters
/// (never column references), evaluated once per execution.
#[derive(Clone, Debug)]
pub enum Access {
    /// Every visible row.
    Scan,
    /// Rows whose index key equals `key` (one expression per index column, all of them).
    IndexEq {
        index: IndexRef,
        key: Vec<TypedExpr>,
    },
    /// Rows whose index key starts with `prefix` (equality on the first columns, possibly none)
    /// and whose next column lies within the bounds. `(expr, inclusive)`.
    IndexRange {
        index: IndexRef,
        prefix: Vec<TypedExpr>,
        lower: Option<(TypedExpr, bool)>,
        upper: Option<(TypedExpr, bool)>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggFunc {
    CountStar,
    Count,
    Sum,
    Min,
    Max,
    Avg,
}

/// One aggregate call: `func([DISTINCT] arg)` with its PostgreSQL result type
/// (count → int8; sum(int2/int4) → int8, sum(int8/numeric) → numeric, sum(float4/8) → float8;
/// avg(int*/numeric) → numeric, avg(float*) → float8; min/max → the argument's type).
#[derive(Clone, Debug)]
pub struct AggCall {
    pub func: AggFunc,
    /// Evaluated over the table row; None for count(*).
    pub arg: Option<TypedExpr>,
    pub distinct: bool,
    pub ty: Type,
}

/// Grouping: rows are grouped by `group_by` (over the table row); each group yields one
/// post-aggregation row `[group_by values..., aggregate results...]`. With no GROUP BY and
/// aggregates present there is exactly one group, even over no rows (`count(*)` = 0).
#[derive(Clone, Debug)]
pub struct Aggregate {
    pub group_by: Vec<TypedExpr>,
    pub aggs: Vec<AggCall>,
}

/// One ORDER BY key: a position in the projected row (visible or hidden column).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SortKey {
    pub column: usize,
    pub descending: bool,
    /// PostgreSQL's default: NULLS LAST for ASC, NULLS FIRST for DESC.
    pub nulls_first: bool,
}

/// `SELECT` over one table. Execution order: access → filter (over table rows) → aggregate →
/// having (over post-aggregation rows) → projection (over post-aggregation rows when
/// `aggregate` is set, else table rows) → distinct (on the visible columns) → order by → offset
/// → limit → drop hidden columns.
#[derive(Clone, Debug)]
pub struct SelectPlan {
    pub table: TableId,
    pub access: Access,
    pub filter: Option<TypedExpr>,
    pub aggregate: Option<Aggregate>,
    pub having: Option<TypedExpr>,
    /// Visible output columns first, then hidden ones that only ORDER BY uses.
    pub projection: Vec<TypedExpr>,
    /// Output column names and types (the visible part of `projection`).
    pub columns: Vec<(String, Type)>,
    pub distinct: bool,
    pub order_by: Vec<SortKey>,
    /// int8 expressions over constants/parameters.
    pub limit: Option<TypedExpr>,
    pub offset: Option<TypedExpr>,
}

/// Where inserted rows come from.
#[derive(Clone, Debug)]
pub enum InsertSource {
    /// `VALUES` rows, one expression per target column (constants and parameters; `DEFAULT`
    /// already replaced by the column default or NULL).
    Values(Vec<Vec<TypedExpr>>),
    /// Rows already parsed (COPY FROM), full width, in table column order.
    Rows(Vec<Vec<Value>>),
}

/// `INSERT INTO table (columns) VALUES ... [RETURNING ...]`.
#[derive(Clone, Debug)]
pub struct InsertPlan {
    pub table: TableId,
    /// Target column positions, one per source expression; columns not listed get their
    /// default (or NULL).
    pub columns: Vec<usize>,
    pub source: InsertSource,
    /// Evaluated over each new row (full width, table order); empty = no RETURNING.
    pub returning: Vec<TypedExpr>,
    pub returning_columns: Vec<(String, Type)>,
}

/// `UPDATE table SET col = expr, ... WHERE ... [RETURNING ...]`.
#[derive(Clone, Debug)]
pub struct UpdatePlan {
    pub table: TableId,
    pub access: Access,
    pub filter: Option<TypedExpr>,
    /// (column position, expression over the old row), already coerced to the column type.
    pub assignments: Vec<(usize, TypedExpr)>,
    /// Evaluated over each new row.
    pub returning: Vec<TypedExpr>,
    pub returning_columns: Vec<(String, Type)>,
}

/// `DELETE FROM table WHERE ... [RETURNING ...]`.
#[derive(Clone, Debug)]
pub struct DeletePlan {
    pub table: TableId,
    pub access: Access,
    pub filter: Option<TypedExpr>,
    /// Evaluated over each deleted row.
    pub returning: Vec<TypedExpr>,
    pub returning_columns: Vec<(String, Type)>,
}

/// A shared, immutable table definition.
pub type TableRef = Arc<TableDef>;
