//! Typed scalar expressions: a sqlparser [`ast::Expr`] is planned once into a [`TypedExpr`]
//! carrying PostgreSQL's types, then evaluated many times against parameters and a row.
//!
//! Planning follows PostgreSQL's parse analysis where clients can observe it: literal typing
//! (`1` is int4, `1.5` numeric, `'x'` unknown), operator and function resolution by the rules of
//! `func_select_candidate` over a table of signatures, `select_common_type` for CASE, COALESCE,
//! ARRAY and VALUES, and inference of `$n` parameter types. Untyped literals are coerced at plan
//! time, as PostgreSQL does, so `select 'abc'::int` fails before any row is produced. After
//! planning, immutable subtrees over constants are folded (`eval_const_expressions`), which is
//! why `select 1/0 where false` fails in both systems while `select false and 1/0 = 1` does not.
//!
//! Functions live in `func.rs` (a child module); this file holds the planner, casts and the
//! evaluator.

use std::cmp::Ordering;

use protocol::error::{PgError, SqlState};
use protocol::types::{self, Interval, Numeric, Scalar, TextContext, Type, Value};
use sqlparser::ast;
use sqlparser::ast::Spanned;
use sqlparser::tokenizer::Location;

// `func.rs` is a child of this module (so `sql/mod.rs` needs only `pub mod expr;`): it shares
// the plan-tree types defined here.
#[path = "func.rs"]
mod func;
use func::Func;

pub use func::VERSION_STRING;

// ---------------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------------

/// Everything planning needs besides the expression itself.
pub struct PlanCtx<'a> {
    /// Parameter types: from Parse (may contain `Scalar::Unknown` for "infer"). Planning fills
    /// in inferred types (`$1` compared to an int4 becomes int4; `$1::date` becomes date; a
    /// bare `$1` select item becomes text); grows if `$n` exceeds its length. A parameter still
    /// unknown after planning is an error, as in PostgreSQL ([`check_params_resolved`], which
    /// [`plan_const_select`] applies and callers of [`plan_expr`] should).
    pub params: &'a mut Vec<Type>,
    /// Resolves a column reference (None: every column reference is 42703).
    pub columns: Option<&'a dyn ColumnResolver>,
    /// The full query string the AST was parsed from; used only to turn sqlparser's line/column
    /// spans into PostgreSQL's 1-based character `position` in errors. `""` = no positions.
    pub source: &'a str,
    /// The session's text settings, for reading untyped literals at plan time as PostgreSQL
    /// does (`'2024-07-01 12:00'::timestamptz` is read in the session's `TimeZone`). Without
    /// it, conversions that depend on the session are left to evaluation (same values; an
    /// invalid literal is then reported when evaluated rather than when planned).
    pub text: Option<&'a TextContext>,
    /// Fold constant subexpressions while planning a SELECT (the simple protocol, where
    /// PostgreSQL parses and plans in one step). The extended protocol plans at Bind, so Parse
    /// clears this and [`ConstSelect::folded`] runs at Bind: `select 1/0` then fails at Bind,
    /// after ParseComplete, as in PostgreSQL.
    pub fold: bool,
    /// Takes over function calls before scalar resolution (the table planner plans aggregate
    /// calls through it). None: every call is a scalar function.
    pub hook: Option<&'a dyn FunctionHook>,
}

impl<'a> PlanCtx<'a> {
    pub fn new(params: &'a mut Vec<Type>, source: &'a str) -> PlanCtx<'a> {
        PlanCtx {
            params,
            columns: None,
            source,
            text: None,
            fold: true,
            hook: None,
        }
    }

    /// Leave constant folding to [`ConstSelect::folded`] (see [`PlanCtx::fold`]).
    pub fn without_folding(mut self) -> PlanCtx<'a> {
        self.fold = false;
        self
    }

    /// Plans with the session's text settings (see [`PlanCtx::text`]).
    pub fn with_text_context(mut self, text: &'a TextContext) -> PlanCtx<'a> {
        self.text = Some(text);
        self
    }
}

/// Lets a caller plan some function calls itself: consulted for every function call before
/// it is resolved as a scalar function (the table planner plans aggregates through it).
pub trait FunctionHook {
    /// `Ok(None)` lets ordinary planning continue. `ctx` is the context the call is planned in
    /// (same parameters, columns and hook), so arguments can be planned with
    /// [`PlanCtx::plan_scalar`].
    fn plan_function(
        &self,
        f: &ast::Function,
        whole: &ast::Expr,
        ctx: &mut PlanCtx,
    ) -> Result<Option<TypedExpr>, PgError>;
}

impl PlanCtx<'_> {
    /// Plans one expression, folding constants only if [`PlanCtx::fold`] is set (table plans
    /// made at Parse are folded at Bind with [`fold_expr`]).
    pub fn plan_scalar(&mut self, expr: &ast::Expr) -> Result<TypedExpr, PgError> {
        let planned = self.plan(expr)?;
        if self.fold {
            fold(planned, None)
        } else {
            Ok(planned)
        }
    }

    /// 1-based character position of `loc` in the statement text (None without text).
    pub fn position_of(&self, loc: Location) -> Option<u32> {
        self.char_position(loc)
    }

    /// `err` pointing at the start of `at`, unless it already has a position.
    pub fn error_at(&self, err: PgError, at: &ast::Expr) -> PgError {
        self.err_at(err, At::Start(at))
    }

    /// `err` pointing at `loc`, unless it already has a position.
    pub fn error_at_location(&self, err: PgError, loc: Location) -> PgError {
        self.err_at(err, At::Loc(loc))
    }

    /// Coerces an argument that must be boolean (`WHERE`, `HAVING`): 42804 otherwise.
    pub fn coerce_to_boolean(
        &mut self,
        e: TypedExpr,
        construct: &str,
        ast: &ast::Expr,
    ) -> Result<TypedExpr, PgError> {
        self.coerce_to_bool(e, construct, ast)
    }

    /// An unknown-typed output column (a select item, RETURNING item) becomes text, as
    /// PostgreSQL's `resolveTargetListUnknowns` does after the whole statement is analysed.
    pub fn resolve_output_type(&mut self, e: TypedExpr) -> Result<TypedExpr, PgError> {
        self.resolve_unknown_output(e)
    }

    /// A LIMIT or OFFSET argument (`what`): coerced to int8, 42804 if it cannot be.
    pub fn limit_argument(
        &mut self,
        e: TypedExpr,
        what: &str,
        ast: &ast::Expr,
    ) -> Result<TypedExpr, PgError> {
        self.limit_expr(e, what, ast)
    }

    /// PostgreSQL's assignment coercion (`coerce_to_target_type` with `COERCION_ASSIGNMENT`),
    /// as INSERT, UPDATE and column defaults apply it: implicit casts, the assignment casts of
    /// `pg_cast` (int8 -> int4, numeric -> int4 rounding, timestamptz -> timestamp, ...), and
    /// I/O conversion to the string types. Untyped literals are read as `to` now (so
    /// `'abc'` into an integer fails here with 22P02, pointing at the literal) and untyped
    /// parameters take the type `to`. `Ok(None)`: no assignment cast exists; the caller
    /// reports it in its own words (42804 `column "x" is of type ...`).
    pub fn coerce_assignment(
        &mut self,
        e: TypedExpr,
        to: Type,
    ) -> Result<Option<TypedExpr>, PgError> {
        let from = match e.node {
            Node::Param(i) => self.params[i],
            _ => e.ty,
        };
        if !assignment_cast_allowed(from, to) {
            return Ok(None);
        }
        let coerced = self.coerce(e, to, Typmod::None)?;
        if self.fold {
            fold(coerced, None).map(Some)
        } else {
            Ok(Some(coerced))
        }
    }

    /// Resolves aggregate `name` (`sum`, `avg`, `min`, `max`) for its one argument, as
    /// PostgreSQL's function resolution does over `pg_aggregate`'s signatures: returns the
    /// argument coerced to the chosen signature's input type and the result type. Errors are
    /// PostgreSQL's 42883 / 42725, pointing at `at`.
    pub fn resolve_aggregate(
        &mut self,
        name: &str,
        arg: TypedExpr,
        at: Location,
    ) -> Result<(TypedExpr, Type), PgError> {
        let sigs = aggregate_sigs(name);
        let inputs = [arg.ty];
        let sig = match Self::resolve(&inputs, sigs) {
            Resolved::One(s) => *s,
            Resolved::None => {
                return Err(self.err_at(undefined_function(name, &inputs), At::Loc(at)))
            }
            Resolved::Ambiguous => {
                let err = PgError::new(
                    SqlState::AMBIGUOUS_FUNCTION,
                    format!(
                        "function {} is not unique",
                        function_signature(name, &inputs)
                    ),
                )
                .with_hint(
                    "Could not choose a best candidate function. You might need to add \
                     explicit type casts.",
                );
                return Err(self.err_at(err, At::Loc(at)));
            }
        };
        let arg = self.coerce_implicit(arg, sig.args()[0])?;
        Ok((arg, sig.ret))
    }
}

/// 1-based character position (PostgreSQL's error `position`) of a sqlparser location in
/// the statement text `source`; None when the location is unknown (line 0) or past the text.
pub fn source_position(source: &str, loc: Location) -> Option<u32> {
    if loc.line == 0 || source.is_empty() {
        return None;
    }
    let mut line = 1u64;
    let mut pos = 0u32;
    for c in source.chars() {
        if line == loc.line {
            break;
        }
        pos += 1;
        if c == '\n' {
            line += 1;
        }
    }
    if line != loc.line {
        return None;
    }
    Some(pos + loc.column as u32)
}

/// Folds the constant immutable parts of an expression planned without folding
/// (PostgreSQL's `eval_const_expressions`, as [`ConstSelect::folded`] does for constant
/// SELECTs).
pub fn fold_expr(e: TypedExpr) -> Result<TypedExpr, PgError> {
    fold(e, None)
}

/// Maps a sqlparser type name to a column type, ignoring any length or precision modifier
/// (`varchar(10)` is varchar). 42704 `type "x" does not exist` for names ringwire lacks.
pub fn column_type(dt: &ast::DataType) -> Result<Type, PgError> {
    resolve_data_type(dt).map(|(t, _)| t)
}

/// Can a value of `from` be assigned to a column of type `to` (`COERCION_ASSIGNMENT`)?
fn assignment_cast_allowed(from: Type, to: Type) -> bool {
    use Scalar::*;
    if can_coerce_implicit(from, to) {
        return true;
    }
    // Automatic I/O conversion to a string type is allowed in assignment context.
    if is_string(to) && from != VOID {
        return true;
    }
    if from.array && to.array {
        return assignment_cast_allowed(from.element(), to.element());
    }
    if from.array || to.array {
        return false;
    }
    matches!(
        (from.scalar, to.scalar),
        (Int8, Int2 | Int4)
            | (Int4, Int2)
            | (Float4, Int2 | Int4 | Int8 | Numeric)
            | (Float8, Int2 | Int4 | Int8 | Float4 | Numeric)
            | (Numeric, Int2 | Int4 | Int8)
            | (Timestamp, Date | Time)
            | (Timestamptz, Date | Time | Timestamp)
            | (Interval, Time)
            | (Json, Jsonb)
            | (Jsonb, Json)
    )
}

/// Signatures of the aggregates the table planner supports besides `count` (which accepts
/// any argument), with PostgreSQL's result types.
fn aggregate_sigs(name: &str) -> &'static [Sig] {
    static TABLE: std::sync::OnceLock<SigTable> = std::sync::OnceLock::new();
    lookup_sigs(
        &TABLE,
        &["sum", "avg", "min", "max"],
        build_aggregate_sigs,
        name,
    )
}

fn build_aggregate_sigs(name: &str) -> Vec<Sig> {
    // The implementation is the executor's; `Identity` only fills the slot.
    let sig = |arg: Type, ret: Type| Sig::new(&[arg], ret, Imp::Identity);
    match name {
        "sum" => vec![
            sig(INT2, INT8),
            sig(INT4, INT8),
            sig(INT8, NUMERIC),
            sig(FLOAT4, FLOAT4),
            sig(FLOAT8, FLOAT8),
            sig(NUMERIC, NUMERIC),
            sig(INTERVAL, INTERVAL),
        ],
        "avg" => vec![
            sig(INT2, NUMERIC),
            sig(INT4, NUMERIC),
            sig(INT8, NUMERIC),
            sig(FLOAT4, FLOAT8),
            sig(FLOAT8, FLOAT8),
            sig(NUMERIC, NUMERIC),
            sig(INTERVAL, INTERVAL),
        ],
        "min" | "max" => [
            INT2,
            INT4,
            INT8,
            FLOAT4,
            FLOAT8,
            NUMERIC,
            TEXT,
            BPCHAR,
            DATE,
            TIME,
            TIMESTAMP,
            TIMESTAMPTZ,
            INTERVAL,
        ]
        .into_iter()
        .map(|t| sig(t, t))
        .collect(),
        _ => Vec::new(),
    }
}

/// True if reading a value of this type from text depends on session settings.
fn input_depends_on_session(t: Type) -> bool {
    t.scalar == Scalar::Timestamptz
}

/// Maps a (possibly qualified) column reference to its index in [`EvalEnv::row`] and its type.
pub trait ColumnResolver {
    fn resolve(&self, idents: &[ast::Ident]) -> Result<(usize, Type), PgError>;
}

/// A planned expression: its PostgreSQL result type and a private evaluation tree.
#[derive(Clone, Debug)]
pub struct TypedExpr {
    pub ty: Type,
    node: Node,
    /// Source location of a literal or column reference: for errors raised when a literal is
    /// coerced, or about a column (line 0 = unknown).
    loc: Location,
}

/// Structural equality, as PostgreSQL's `equal()` compares analysed expressions (GROUP BY
/// and ORDER BY matching): types and trees, not where they were written.
impl PartialEq for TypedExpr {
    fn eq(&self, other: &TypedExpr) -> bool {
        self.ty == other.ty && self.node == other.node
    }
}

/// Session state the evaluator may read.
pub trait SessionInfo {
    /// Value of a configuration parameter by name (case-insensitive, as PostgreSQL's GUCs);
    /// `None` = unrecognized parameter (42704).
    fn current_setting(&self, name: &str) -> Option<String>;
    fn text_context(&self) -> &TextContext;
    fn database(&self) -> &str;
    fn user(&self) -> &str;
    fn backend_pid(&self) -> i32;
    /// When the statement and its transaction started.
    fn stamps(&self) -> Stamps;
}

/// A statement's two start times, in microseconds since 2000-01-01 UTC, as PostgreSQL keeps
/// them: `statement_timestamp()` is when the statement's protocol message arrived (a Query, however
/// many statements its text holds, or an Execute); `now()`, `transaction_timestamp()`,
/// `current_timestamp`, `current_date` and `localtimestamp` are when its transaction's first
/// statement did, the same for every statement of the transaction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stamps {
    pub statement_us: i64,
    pub transaction_us: i64,
}

/// Inputs of one evaluation.
pub struct EvalEnv<'a> {
    pub params: &'a [Value],
    pub row: &'a [Value],
    pub session: &'a dyn SessionInfo,
    /// `pg_sleep` adds here; the caller awaits it (cancellably) after evaluation.
    pub sleep_us: u64,
    /// `pg_notify` adds here; the caller makes them the transaction's NOTIFYs.
    pub notifies: Vec<(String, String)>,
}

/// Plans one expression (and folds its constant immutable parts).
pub fn plan_expr(expr: &ast::Expr, ctx: &mut PlanCtx) -> Result<TypedExpr, PgError> {
    let planned = ctx.plan(expr)?;
    fold(planned, None)
}

/// Fails with PostgreSQL's 42P18 if a parameter's type could not be inferred (`select $1 is
/// null`, or `$2` never referenced while `$3` is).
pub fn check_params_resolved(params: &[Type]) -> Result<(), PgError> {
    match params.iter().position(|t| *t == UNKNOWN) {
        Some(i) => Err(PgError::new(
            SqlState::INDETERMINATE_DATATYPE,
            format!("could not determine data type of parameter ${}", i + 1),
        )),
        None => Ok(()),
    }
}

impl TypedExpr {
    pub fn eval(&self, env: &mut EvalEnv) -> Result<Value, PgError> {
        self.ev(env, None)
    }

    /// True if the expression is a constant (after folding); `eval` then needs no inputs.
    pub fn is_const(&self) -> bool {
        matches!(self.node, Node::Const(_))
    }

    /// A reference to position `index` of the row the expression is evaluated over.
    pub fn column(index: usize, ty: Type) -> TypedExpr {
        TypedExpr::new(ty, Node::Column(index))
    }

    /// A constant of type `ty`.
    pub fn constant(ty: Type, v: Value) -> TypedExpr {
        TypedExpr::konst(ty, v)
    }

    /// The value, if the expression is a constant.
    pub fn const_value(&self) -> Option<&Value> {
        match &self.node {
            Node::Const(v) => Some(v),
            _ => None,
        }
    }

    /// The row position, if the expression is a bare column reference.
    pub fn as_column(&self) -> Option<usize> {
        match self.node {
            Node::Column(i) => Some(i),
            _ => None,
        }
    }

    /// Where in the statement a column reference or literal was written (line 0: unknown).
    pub fn location(&self) -> Location {
        self.loc
    }

    /// This expression, noted as written at `loc` (for errors that point at it).
    pub fn with_location(mut self, loc: Location) -> TypedExpr {
        self.loc = loc;
        self
    }

    /// Every column reference in the tree, in evaluation-tree order, with where it was
    /// written.
    pub(crate) fn column_refs(&self) -> Vec<(usize, Location)> {
        let mut out = Vec::new();
        self.walk(&mut |e| {
            if let Node::Column(i) = e.node {
                out.push((i, e.loc));
            }
        });
        out
    }

    /// This expression cast to `to` without checks: for binary-compatible retyping only
    /// (text <-> varchar, where the value is the same).
    pub(crate) fn relabel(self, to: Type) -> TypedExpr {
        if self.ty == to {
            return self;
        }
        if let Node::Const(v) = self.node {
            return TypedExpr {
                ty: to,
                node: Node::Const(v),
                loc: self.loc,
            };
        }
        TypedExpr::new(
            to,
            Node::Cast {
                arg: Box::new(self),
                typmod: Typmod::None,
            },
        )
    }

    /// The top-level conjuncts: the arguments of an AND (AND chains are flattened while
    /// planning), else the expression itself.
    pub(crate) fn conjuncts(&self) -> Vec<&TypedExpr> {
        match &self.node {
            Node::And(args) => args.iter().collect(),
            _ => vec![self],
        }
    }

    /// `l op r` for a built-in comparison operator (operands already coerced to the type
    /// it compares in).
    pub(crate) fn as_comparison(&self) -> Option<(CmpOp, &TypedExpr, &TypedExpr)> {
        match &self.node {
            Node::Op {
                imp: Imp::Cmp(op),
                args,
            } if args.len() == 2 => Some((*op, &args[0], &args[1])),
            _ => None,
        }
    }

    /// A cast without modifier: the cast expression.
    pub(crate) fn as_cast(&self) -> Option<&TypedExpr> {
        match &self.node {
            Node::Cast {
                arg,
                typmod: Typmod::None,
            } => Some(arg),
            _ => None,
        }
    }

    /// Any column reference anywhere in the tree.
    pub(crate) fn references_columns(&self) -> bool {
        let mut found = false;
        self.walk(&mut |e| found |= matches!(e.node, Node::Column(_)));
        found
    }

    /// Calls something whose result may change within one statement (`random()`,
    /// `clock_timestamp()`, `pg_sleep`): must be evaluated per row, never once as an index key.
    pub(crate) fn is_volatile(&self) -> bool {
        let mut found = false;
        self.walk(&mut |e| {
            if let Node::Op {
                imp: Imp::Func(f), ..
            } = e.node
            {
                found |= f.volatile();
            }
        });
        found
    }

    /// Rewrites the tree top-down: where `f` returns a replacement the subtree is replaced
    /// (and not visited further); elsewhere the children are visited.
    pub(crate) fn replace_subtrees(
        self,
        f: &mut dyn FnMut(&TypedExpr) -> Result<Option<TypedExpr>, PgError>,
    ) -> Result<TypedExpr, PgError> {
        if let Some(r) = f(&self)? {
            return Ok(r);
        }
        let TypedExpr { ty, node, loc } = self;
        let mut go = |e: TypedExpr| e.replace_subtrees(f);
        let node = match node {
            n @ (Node::Const(_) | Node::Param(_) | Node::Column(_) | Node::CaseTest) => n,
            Node::Let { value, body } => Node::Let {
                value: Box::new(go(*value)?),
                body: Box::new(go(*body)?),
            },
            Node::Op { imp, args } => Node::Op {
                imp,
                args: args.into_iter().map(&mut go).collect::<Result<_, _>>()?,
            },
            Node::Cast { arg, typmod } => Node::Cast {
                arg: Box::new(go(*arg)?),
                typmod,
            },
            Node::Not(arg) => Node::Not(Box::new(go(*arg)?)),
            Node::And(args) => Node::And(args.into_iter().map(&mut go).collect::<Result<_, _>>()?),
            Node::Or(args) => Node::Or(args.into_iter().map(&mut go).collect::<Result<_, _>>()?),
            Node::IsNull { arg, negated } => Node::IsNull {
                arg: Box::new(go(*arg)?),
                negated,
            },
            Node::BoolTest { arg, test } => Node::BoolTest {
                arg: Box::new(go(*arg)?),
                test,
            },
            Node::Distinct { args, negated } => {
                let [a, b] = *args;
                Node::Distinct {
                    args: Box::new([go(a)?, go(b)?]),
                    negated,
                }
            }
            Node::Case { whens, otherwise } => Node::Case {
                whens: whens
                    .into_iter()
                    .map(|(c, r)| Ok((go(c)?, go(r)?)))
                    .collect::<Result<_, PgError>>()?,
                otherwise: Box::new(go(*otherwise)?),
            },
            Node::Coalesce(args) => {
                Node::Coalesce(args.into_iter().map(&mut go).collect::<Result<_, _>>()?)
            }
            Node::MinMax { greatest, args } => Node::MinMax {
                greatest,
                args: args.into_iter().map(&mut go).collect::<Result<_, _>>()?,
            },
            Node::Array(args) => {
                Node::Array(args.into_iter().map(&mut go).collect::<Result<_, _>>()?)
            }
            Node::AnyAll { op, all, args } => {
                let [a, b] = *args;
                Node::AnyAll {
                    op,
                    all,
                    args: Box::new([go(a)?, go(b)?]),
                }
            }
            Node::InSet { arg, set, negated } => Node::InSet {
                arg: Box::new(go(*arg)?),
                set,
                negated,
            },
        };
        Ok(TypedExpr { ty, node, loc })
    }

    /// Re-reads parameter types after planning finished: an occurrence of `$n` planned while
    /// `$n` was still unknown takes the type inferred later.
    pub fn refresh_param_types(&mut self, params: &[Type]) {
        self.walk_mut(&mut |e| {
            if let Node::Param(i) = e.node {
                if e.ty == UNKNOWN {
                    e.ty = params.get(i).copied().unwrap_or(UNKNOWN);
                }
            }
        });
    }
}

/// PostgreSQL's output column name for a select item without alias (`FigureColname`).
pub fn column_name(expr: &ast::Expr) -> String {
    let mut name = String::new();
    if figure_colname(expr, &mut name) == 0 {
        return "?column?".to_string();
    }
    name
}

/// A planned `SELECT <items> [WHERE <const>] [LIMIT/OFFSET]` without FROM, or `VALUES (..),(..)`.
#[derive(Clone, Debug)]
pub struct ConstSelect {
    pub columns: Vec<(String, Type)>,
    rows: Vec<Vec<TypedExpr>>,
    filter: Option<TypedExpr>,
    limit: Option<TypedExpr>,
    offset: Option<TypedExpr>,
}

/// Plans a whole query without FROM. Anything else (FROM, GROUP BY, set operations, ...)
/// is 0A000 here.
pub fn plan_const_select(query: &ast::Query, ctx: &mut PlanCtx) -> Result<ConstSelect, PgError> {
    let mut out = ctx.plan_query(query)?;
    check_params_resolved(ctx.params)?;
    let params: &[Type] = ctx.params;
    for e in out.rows.iter_mut().flatten() {
        e.refresh_param_types(params);
    }
    for e in [&mut out.filter, &mut out.limit, &mut out.offset]
        .into_iter()
        .flatten()
    {
        e.refresh_param_types(params);
    }
    if let Some(first) = out.rows.first() {
        for (col, e) in out.columns.iter_mut().zip(first) {
            col.1 = e.ty;
        }
    }
    Ok(out)
}

impl ConstSelect {
    /// This select with its constant immutable subexpressions evaluated (PostgreSQL's
    /// `eval_const_expressions`); errors such as division by zero in constants surface here.
    pub fn folded(&self) -> Result<ConstSelect, PgError> {
        let rows = self
            .rows
            .iter()
            .map(|r| {
                r.iter()
                    .map(|e| fold(e.clone(), None))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let filter = self.filter.clone().map(|f| fold(f, None)).transpose()?;
        Ok(ConstSelect {
            columns: self.columns.clone(),
            rows,
            filter,
            limit: self.limit.clone(),
            offset: self.offset.clone(),
        })
    }

    /// Evaluates the WHERE clause, then each row; calls `out` per produced row. Returns the
    /// number of rows produced.
    pub fn eval_rows(
        &self,
        env: &mut EvalEnv,
        out: &mut dyn FnMut(&[Value]) -> Result<(), PgError>,
    ) -> Result<u64, PgError> {
        if let Some(f) = &self.filter {
            if !matches!(f.eval(env)?, Value::Bool(true)) {
                return Ok(0);
            }
        }
        let offset = match &self.offset {
            Some(e) => match e.eval(env)? {
                Value::Int8(n) if n < 0 => {
                    return Err(PgError::new(
                        SqlState(*b"2201X"),
                        "OFFSET must not be negative",
                    ))
                }
                Value::Int8(n) => n as u64,
                _ => 0,
            },
            None => 0,
        };
        let limit = match &self.limit {
            Some(e) => match e.eval(env)? {
                Value::Int8(n) if n < 0 => {
                    return Err(PgError::new(
                        SqlState(*b"2201W"),
                        "LIMIT must not be negative",
                    ))
                }
                Value::Int8(n) => n as u64,
                _ => u64::MAX,
            },
            None => u64::MAX,
        };
        let mut produced = 0u64;
        let mut values = Vec::with_capacity(self.columns.len());
        for row in self
            .rows
            .iter()
            .skip(offset.min(usize::MAX as u64) as usize)
        {
            if produced >= limit {
                break;
            }
            values.clear();
            for e in row {
                values.push(e.eval(env)?);
            }
            out(&values)?;
            produced += 1;
        }
        Ok(produced)
    }
}

// ---------------------------------------------------------------------------------------------
// Types: names, categories, coercions
// ---------------------------------------------------------------------------------------------

pub(crate) const fn st(s: Scalar) -> Type {
    Type {
        scalar: s,
        array: false,
    }
}
pub(crate) const BOOL: Type = st(Scalar::Bool);
pub(crate) const INT2: Type = st(Scalar::Int2);
pub(crate) const INT4: Type = st(Scalar::Int4);
pub(crate) const INT8: Type = st(Scalar::Int8);
pub(crate) const FLOAT4: Type = st(Scalar::Float4);
pub(crate) const FLOAT8: Type = st(Scalar::Float8);
pub(crate) const NUMERIC: Type = st(Scalar::Numeric);
pub(crate) const TEXT: Type = st(Scalar::Text);
pub(crate) const VARCHAR: Type = st(Scalar::Varchar);
pub(crate) const BPCHAR: Type = st(Scalar::Bpchar);
pub(crate) const NAME: Type = st(Scalar::Name);
pub(crate) const BYTEA: Type = st(Scalar::Bytea);
pub(crate) const DATE: Type = st(Scalar::Date);
pub(crate) const TIME: Type = st(Scalar::Time);
pub(crate) const TIMESTAMP: Type = st(Scalar::Timestamp);
pub(crate) const TIMESTAMPTZ: Type = st(Scalar::Timestamptz);
pub(crate) const INTERVAL: Type = st(Scalar::Interval);
pub(crate) const UUID: Type = st(Scalar::Uuid);
pub(crate) const JSON: Type = st(Scalar::Json);
pub(crate) const JSONB: Type = st(Scalar::Jsonb);
pub(crate) const VOID: Type = st(Scalar::Void);
pub(crate) const UNKNOWN: Type = st(Scalar::Unknown);

/// PostgreSQL's `format_type` spelling, as used in error messages (`integer`, `text[]`).
pub fn type_display_name(t: Type) -> String {
    t.name().to_string()
}

/// `pg_type.typname` of the scalar (what a cast names its output column: `int4`, `float8`).
pub(crate) fn typname(s: Scalar) -> &'static str {
    match s {
        Scalar::Bool => "bool",
        Scalar::Int2 => "int2",
        Scalar::Int4 => "int4",
        Scalar::Int8 => "int8",
        Scalar::Float4 => "float4",
        Scalar::Float8 => "float8",
        Scalar::Numeric => "numeric",
        Scalar::Text => "text",
        Scalar::Varchar => "varchar",
        Scalar::Bpchar => "bpchar",
        Scalar::Bytea => "bytea",
        Scalar::Date => "date",
        Scalar::Time => "time",
        Scalar::Timestamp => "timestamp",
        Scalar::Timestamptz => "timestamptz",
        Scalar::Interval => "interval",
        Scalar::Uuid => "uuid",
        Scalar::Json => "json",
        Scalar::Jsonb => "jsonb",
        Scalar::Name => "name",
        Scalar::Void => "void",
        Scalar::Unknown => "unknown",
    }
}

/// `pg_type.typcategory`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Category {
    Array,
    Bool,
    DateTime,
    Numeric,
    Pseudo,
    String,
    Timespan,
    User,
    Unknown,
}

fn category(t: Type) -> Category {
    if t.array {
        return Category::Array;
    }
    match t.scalar {
        Scalar::Bool => Category::Bool,
        Scalar::Int2
        | Scalar::Int4
        | Scalar::Int8
        | Scalar::Float4
        | Scalar::Float8
        | Scalar::Numeric => Category::Numeric,
        Scalar::Text | Scalar::Varchar | Scalar::Bpchar | Scalar::Name => Category::String,
        Scalar::Date | Scalar::Time | Scalar::Timestamp | Scalar::Timestamptz => Category::DateTime,
        Scalar::Interval => Category::Timespan,
        Scalar::Bytea | Scalar::Uuid | Scalar::Json | Scalar::Jsonb => Category::User,
        Scalar::Void => Category::Pseudo,
        Scalar::Unknown => Category::Unknown,
    }
}

/// `pg_type.typispreferred`.
fn is_preferred(t: Type) -> bool {
    !t.array
        && matches!(
            t.scalar,
            Scalar::Float8 | Scalar::Text | Scalar::Timestamptz | Scalar::Interval | Scalar::Bool
        )
}

fn is_string(t: Type) -> bool {
    !t.array && category(t) == Category::String
}

/// Implicit casts of `pg_cast` (castcontext 'i') among the supported scalars.
fn implicit_scalar_cast(from: Scalar, to: Scalar) -> bool {
    use Scalar::*;
    matches!(
        (from, to),
        (Int2, Int4 | Int8 | Float4 | Float8 | Numeric)
            | (Int4, Int8 | Float4 | Float8 | Numeric)
            | (Int8, Float4 | Float8 | Numeric)
            | (Numeric, Float4 | Float8)
            | (Float4, Float8)
            | (Text, Varchar | Bpchar | Name)
            | (Varchar, Text | Bpchar | Name)
            | (Bpchar, Text | Varchar | Name)
            | (Name, Text)
            | (Date, Timestamp | Timestamptz)
            | (Timestamp, Timestamptz)
            | (Time, Interval)
    )
}

/// `can_coerce_type(..., COERCION_IMPLICIT)`.
fn can_coerce_implicit(from: Type, to: Type) -> bool {
    if from == to || from == UNKNOWN {
        return true;
    }
    if from.array != to.array {
        return false;
    }
    implicit_scalar_cast(from.scalar, to.scalar)
}

/// Casts PostgreSQL accepts with an explicit `CAST`/`::`, including I/O conversion casts to and
/// from the string types.
fn explicit_cast_allowed(from: Type, to: Type) -> bool {
    use Scalar::*;
    if from == to || from == UNKNOWN || is_string(to) || is_string(from) {
        return true;
    }
    if from.array && to.array {
        return explicit_cast_allowed(from.element(), to.element());
    }
    if from.array != to.array {
        return false;
    }
    let numeric = |s: Scalar| matches!(s, Int2 | Int4 | Int8 | Float4 | Float8 | Numeric);
    let (f, t) = (from.scalar, to.scalar);
    (numeric(f) && numeric(t))
        || matches!(
            (f, t),
            (Int4, Bool)
                | (Bool, Int4)
                | (Date, Timestamp | Timestamptz)
                | (Timestamp, Date | Time | Timestamptz)
                | (Timestamptz, Date | Time | Timestamp)
                | (Time, Interval)
                | (Interval, Time)
                | (Json, Jsonb)
                | (
                    Jsonb,
                    Json | Bool | Int2 | Int4 | Int8 | Float4 | Float8 | Numeric
                )
        )
}

/// Length/precision modifier of a cast target (`varchar(3)`, `numeric(5,2)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Typmod {
    None,
    Varchar(u32),
    Bpchar(u32),
    Numeric { precision: u32, scale: u32 },
}

// ---------------------------------------------------------------------------------------------
// Plan tree
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    fn from_binary(op: &ast::BinaryOperator) -> Option<CmpOp> {
        Some(match op {
            ast::BinaryOperator::Eq => CmpOp::Eq,
            ast::BinaryOperator::NotEq => CmpOp::Ne,
            ast::BinaryOperator::Lt => CmpOp::Lt,
            ast::BinaryOperator::LtEq => CmpOp::Le,
            ast::BinaryOperator::Gt => CmpOp::Gt,
            ast::BinaryOperator::GtEq => CmpOp::Ge,
            _ => return None,
        })
    }

    fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "<>",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    fn holds(self, o: Ordering) -> bool {
        match self {
            CmpOp::Eq => o == Ordering::Equal,
            CmpOp::Ne => o != Ordering::Equal,
            CmpOp::Lt => o == Ordering::Less,
            CmpOp::Le => o != Ordering::Greater,
            CmpOp::Gt => o == Ordering::Greater,
            CmpOp::Ge => o != Ordering::Less,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ArOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
}

/// The numeric type an arithmetic operator computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Num {
    I2,
    I4,
    I8,
    F4,
    F8,
    N,
}

impl Num {
    pub(crate) fn ty(self) -> Type {
        match self {
            Num::I2 => INT2,
            Num::I4 => INT4,
            Num::I8 => INT8,
            Num::F4 => FLOAT4,
            Num::F8 => FLOAT8,
            Num::N => NUMERIC,
        }
    }
}

/// Date/time operators; operands are already coerced to the types noted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DtOp {
    /// (date, int4) -> date
    DatePlusDays,
    /// (int4, date) -> date
    DaysPlusDate,
    /// (date, int4) -> date
    DateMinusDays,
    /// (date, date) -> int4
    DateMinusDate,
    /// (timestamp, interval) -> timestamp; also `date + interval` after date -> timestamp
    TsPlusIv,
    IvPlusTs,
    TsMinusIv,
    TstzPlusIv,
    IvPlusTstz,
    TstzMinusIv,
    /// (timestamp, timestamp) -> interval
    TsMinusTs,
    TstzMinusTstz,
    IvPlusIv,
    IvMinusIv,
    /// (interval, float8) -> interval
    IvMulF8,
    F8MulIv,
    IvDivF8,
    TimePlusIv,
    IvPlusTime,
    TimeMinusIv,
    TimeMinusTime,
    DatePlusTime,
    TimePlusDate,
    IvNeg,
}

/// What an operator or function node computes; resolved at plan time from a signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Imp {
    Arith(ArOp, Num),
    Neg(Num),
    /// Unary plus: identity.
    Identity,
    Cmp(CmpOp),
    Dt(DtOp),
    TextCat,
    ByteaCat,
    ArrayCat,
    ArrayAppend,
    ArrayPrepend,
    Like {
        case_insensitive: bool,
        negated: bool,
    },
    Func(Func),
}

impl Imp {
    /// Strict: any NULL argument makes the result NULL without calling the implementation.
    fn strict(self) -> bool {
        match self {
            Imp::ArrayCat | Imp::ArrayAppend | Imp::ArrayPrepend => false,
            Imp::Func(f) => f.strict(),
            _ => true,
        }
    }

    /// Immutable: may be evaluated at plan time over constants.
    fn immutable(self) -> bool {
        match self {
            Imp::Dt(op) => !matches!(
                op,
                DtOp::TstzPlusIv | DtOp::IvPlusTstz | DtOp::TstzMinusIv | DtOp::TstzMinusTstz
            ),
            Imp::Func(f) => f.immutable(),
            _ => true,
        }
    }
}

/// Most arguments any built-in signature declares.
const MAX_SIG_ARGS: usize = 3;

/// One candidate of an overloaded operator or function: declared argument types, the types the
/// implementation computes in (a widening of `args`, e.g. int2 + int4 computes in int4), result.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sig {
    args: [Type; MAX_SIG_ARGS],
    compute: [Type; MAX_SIG_ARGS],
    nargs: u8,
    pub ret: Type,
    pub imp: Imp,
}

impl Sig {
    pub(crate) fn new(args: &[Type], ret: Type, imp: Imp) -> Sig {
        Sig::widened(args, args, ret, imp)
    }

    pub(crate) fn widened(args: &[Type], compute: &[Type], ret: Type, imp: Imp) -> Sig {
        assert!(
            args.len() <= MAX_SIG_ARGS && compute.len() == args.len(),
            "signature arity {} (at most {MAX_SIG_ARGS}, compute types per argument)",
            args.len()
        );
        let mut sig = Sig {
            args: [UNKNOWN; MAX_SIG_ARGS],
            compute: [UNKNOWN; MAX_SIG_ARGS],
            nargs: 0,
            ret,
            imp,
        };
        sig.args[..args.len()].copy_from_slice(args);
        sig.compute[..compute.len()].copy_from_slice(compute);
        sig.nargs = args.len() as u8;
        sig
    }

    pub(crate) fn args(&self) -> &[Type] {
        &self.args[..self.nargs as usize]
    }

    pub(crate) fn compute(&self) -> &[Type] {
        &self.compute[..self.nargs as usize]
    }
}

/// Signature tables by operator or function name, built once per process: planning looks
/// candidates up without rebuilding them. Read-only after initialization, so sharing them
/// across shards costs one atomic load.
pub(crate) type SigTable = std::collections::HashMap<&'static str, Vec<Sig>>;

pub(crate) fn lookup_sigs(
    table: &'static std::sync::OnceLock<SigTable>,
    names: &[&'static str],
    build: fn(&str) -> Vec<Sig>,
    name: &str,
) -> &'static [Sig] {
    table
        .get_or_init(|| names.iter().map(|n| (*n, build(n))).collect())
        .get(name)
        .map_or(&[], Vec::as_slice)
}

/// `x IS [NOT] TRUE / FALSE / UNKNOWN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BoolTest {
    True,
    NotTrue,
    False,
    NotFalse,
    Unknown,
    NotUnknown,
}

#[derive(Clone, Debug, PartialEq)]
enum Node {
    Const(Value),
    Param(usize),
    Column(usize),
    /// The value bound by the nearest enclosing [`Node::Let`] (PostgreSQL's CaseTestExpr).
    CaseTest,
    /// Evaluates `value` once and makes it the `CaseTest` of `body` (simple CASE, NULLIF,
    /// BETWEEN and IN over a non-trivial left side).
    Let {
        value: Box<TypedExpr>,
        body: Box<TypedExpr>,
    },
    Op {
        imp: Imp,
        args: Vec<TypedExpr>,
    },
    Cast {
        arg: Box<TypedExpr>,
        typmod: Typmod,
    },
    Not(Box<TypedExpr>),
    And(Vec<TypedExpr>),
    Or(Vec<TypedExpr>),
    IsNull {
        arg: Box<TypedExpr>,
        negated: bool,
    },
    BoolTest {
        arg: Box<TypedExpr>,
        test: BoolTest,
    },
    /// `IS [NOT] DISTINCT FROM`; operands coerced to one comparable type.
    Distinct {
        args: Box<[TypedExpr; 2]>,
        negated: bool,
    },
    Case {
        whens: Vec<(TypedExpr, TypedExpr)>,
        otherwise: Box<TypedExpr>,
    },
    Coalesce(Vec<TypedExpr>),
    MinMax {
        greatest: bool,
        args: Vec<TypedExpr>,
    },
    Array(Vec<TypedExpr>),
    /// `left op ANY/ALL (right)`: `right` is an array of `left`'s type.
    AnyAll {
        op: CmpOp,
        all: bool,
        args: Box<[TypedExpr; 2]>,
    },
    /// `arg [NOT] IN (c1, c2, ...)` over many constants of a type whose equality is its
    /// values' ([`ValueSet`]): one hash lookup per row where the list of comparisons cost one
    /// comparison per item (10,000 integers over 20,000 rows took 14 s, PERF.md session 26).
    InSet {
        arg: Box<TypedExpr>,
        set: std::sync::Arc<ValueSet>,
        negated: bool,
    },
}

/// The constants of an IN list ([`Node::InSet`]), by the one kind of value they hold.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ValueSet {
    ints: std::collections::HashSet<i64>,
    texts: std::collections::HashSet<String>,
    uuids: std::collections::HashSet<[u8; 16]>,
    /// A NULL is in the list: a value not found is NULL, not false.
    has_null: bool,
}

/// Fewest constants an IN list has before it becomes a [`ValueSet`]: below, the comparisons
/// are as cheap, and keep the plan as it was.
const IN_SET_MIN: usize = 16;

impl ValueSet {
    /// The set of `values`, or None if one is of a kind a set does not hold.
    fn of(values: impl IntoIterator<Item = Value>) -> Option<ValueSet> {
        let mut set = ValueSet::default();
        for v in values {
            match v {
                Value::Null => set.has_null = true,
                Value::Text(t) => {
                    set.texts.insert(t);
                }
                Value::Uuid(u) => {
                    set.uuids.insert(u);
                }
                v => {
                    set.ints.insert(set_int(&v)?);
                }
            }
        }
        Some(set)
    }

    /// Whether `v` (not NULL) is in the set; None for a kind it does not hold.
    fn contains(&self, v: &Value) -> Option<bool> {
        Some(match v {
            Value::Text(t) => self.texts.contains(t.as_str()),
            Value::Uuid(u) => self.uuids.contains(u),
            v => self.ints.contains(&set_int(v)?),
        })
    }
}

/// An integer-like value as a set holds it (each set holds one type, so kinds never mix).
fn set_int(v: &Value) -> Option<i64> {
    Some(match *v {
        Value::Int2(i) => i64::from(i),
        Value::Int4(i) => i64::from(i),
        Value::Int8(i) => i,
        Value::Date(d) => i64::from(d),
        Value::Timestamp(t) | Value::Timestamptz(t) => t,
        _ => return None,
    })
}

/// The values of `items` as a [`ValueSet`], if every one folds to a constant (a parameter, a
/// column, a volatile call or an error in folding leaves the list as comparisons, whose
/// errors then come where they would).
fn constant_set(items: &[TypedExpr]) -> Option<ValueSet> {
    let mut values = Vec::with_capacity(items.len());
    for item in items {
        match fold_expr(item.clone()).ok()?.node {
            Node::Const(v) => values.push(v),
            _ => return None,
        }
    }
    ValueSet::of(values)
}

/// Whether two values of type `t` are equal exactly when they are the same value, so that a
/// [`ValueSet`] may stand for comparisons with `=` (not float's -0/NaN, numeric's scales,
/// interval's 1 day = 24 hours, bpchar's padding).
fn set_type(t: Type) -> bool {
    use Scalar::*;
    !t.array
        && matches!(
            t.scalar,
            Int2 | Int4 | Int8 | Date | Timestamp | Timestamptz | Text | Varchar | Uuid
        )
}

impl TypedExpr {
    fn new(ty: Type, node: Node) -> TypedExpr {
        TypedExpr {
            ty,
            node,
            loc: Location { line: 0, column: 0 },
        }
    }

    fn konst(ty: Type, v: Value) -> TypedExpr {
        TypedExpr::new(ty, Node::Const(v))
    }

    /// Cheap to evaluate twice and free of side effects: may be duplicated instead of bound
    /// with a [`Node::Let`].
    fn is_trivial(&self) -> bool {
        matches!(
            self.node,
            Node::Const(_) | Node::Param(_) | Node::Column(_) | Node::CaseTest
        )
    }

    fn walk(&self, f: &mut dyn FnMut(&TypedExpr)) {
        f(self);
        match &self.node {
            Node::Const(_) | Node::Param(_) | Node::Column(_) | Node::CaseTest => {}
            Node::Let { value, body } => {
                value.walk(f);
                body.walk(f);
            }
            Node::Op { args, .. }
            | Node::And(args)
            | Node::Or(args)
            | Node::Coalesce(args)
            | Node::MinMax { args, .. }
            | Node::Array(args) => args.iter().for_each(|a| a.walk(f)),
            Node::Cast { arg, .. }
            | Node::Not(arg)
            | Node::IsNull { arg, .. }
            | Node::BoolTest { arg, .. }
            | Node::InSet { arg, .. } => arg.walk(f),
            Node::Distinct { args, .. } | Node::AnyAll { args, .. } => {
                args.iter().for_each(|a| a.walk(f))
            }
            Node::Case { whens, otherwise } => {
                for (c, r) in whens {
                    c.walk(f);
                    r.walk(f);
                }
                otherwise.walk(f);
            }
        }
    }

    fn walk_mut(&mut self, f: &mut dyn FnMut(&mut TypedExpr)) {
        f(self);
        match &mut self.node {
            Node::Const(_) | Node::Param(_) | Node::Column(_) | Node::CaseTest => {}
            Node::Let { value, body } => {
                value.walk_mut(f);
                body.walk_mut(f);
            }
            Node::Op { args, .. }
            | Node::And(args)
            | Node::Or(args)
            | Node::Coalesce(args)
            | Node::MinMax { args, .. }
            | Node::Array(args) => args.iter_mut().for_each(|a| a.walk_mut(f)),
            Node::Cast { arg, .. }
            | Node::Not(arg)
            | Node::IsNull { arg, .. }
            | Node::BoolTest { arg, .. }
            | Node::InSet { arg, .. } => arg.walk_mut(f),
            Node::Distinct { args, .. } | Node::AnyAll { args, .. } => {
                args.iter_mut().for_each(|a| a.walk_mut(f))
            }
            Node::Case { whens, otherwise } => {
                for (c, r) in whens {
                    c.walk_mut(f);
                    r.walk_mut(f);
                }
                otherwise.walk_mut(f);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

pub(crate) fn feature_not_supported(what: impl std::fmt::Display) -> PgError {
    PgError::new(
        SqlState::FEATURE_NOT_SUPPORTED,
        format!("{what} is not supported"),
    )
}

fn undefined_operator(op: &str, left: Option<Type>, right: Type) -> PgError {
    match left {
        Some(l) => PgError::new(
            SqlState::UNDEFINED_FUNCTION,
            format!(
                "operator does not exist: {} {op} {}",
                type_display_name(l),
                type_display_name(right)
            ),
        )
        .with_hint(
            "No operator matches the given name and argument types. You might need to add \
             explicit type casts.",
        ),
        None => PgError::new(
            SqlState::UNDEFINED_FUNCTION,
            format!("operator does not exist: {op} {}", type_display_name(right)),
        )
        .with_hint(
            "No operator matches the given name and argument type. You might need to add an \
             explicit type cast.",
        ),
    }
}

fn ambiguous_operator(op: &str, left: Option<Type>, right: Type) -> PgError {
    let sig = match left {
        Some(l) => format!("{} {op} {}", type_display_name(l), type_display_name(right)),
        None => format!("{op} {}", type_display_name(right)),
    };
    PgError::new(
        SqlState::AMBIGUOUS_FUNCTION,
        format!("operator is not unique: {sig}"),
    )
    .with_hint(
        "Could not choose a best candidate operator. You might need to add explicit type casts.",
    )
}

fn function_signature(name: &str, args: &[Type]) -> String {
    let list: Vec<String> = args.iter().map(|t| type_display_name(*t)).collect();
    format!("{name}({})", list.join(", "))
}

fn undefined_function(name: &str, args: &[Type]) -> PgError {
    PgError::new(
        SqlState::UNDEFINED_FUNCTION,
        format!("function {} does not exist", function_signature(name, args)),
    )
    .with_hint(
        "No function matches the given name and argument types. You might need to add explicit \
         type casts.",
    )
}

fn datatype_mismatch(msg: String) -> PgError {
    PgError::new(SqlState::DATATYPE_MISMATCH, msg)
}

pub(crate) fn out_of_range(t: Type) -> PgError {
    let what = match t.scalar {
        Scalar::Int2 => "smallint out of range",
        Scalar::Int4 => "integer out of range",
        Scalar::Int8 => "bigint out of range",
        Scalar::Date => "date out of range",
        Scalar::Timestamp | Scalar::Timestamptz => "timestamp out of range",
        Scalar::Interval => "interval out of range",
        _ => "value out of range",
    };
    let code = match t.scalar {
        Scalar::Date | Scalar::Timestamp | Scalar::Timestamptz => SqlState::DATETIME_FIELD_OVERFLOW,
        _ => SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
    };
    PgError::new(code, what)
}

pub(crate) fn division_by_zero() -> PgError {
    PgError::new(SqlState::DIVISION_BY_ZERO, "division by zero")
}

fn float_overflow() -> PgError {
    PgError::new(
        SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
        "value out of range: overflow",
    )
}

fn float_underflow() -> PgError {
    PgError::new(
        SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
        "value out of range: underflow",
    )
}

fn internal(msg: &str) -> PgError {
    PgError::new(SqlState::INTERNAL_ERROR, format!("internal error: {msg}"))
}

/// Lowercases an unquoted identifier, as PostgreSQL's scanner does.
pub(crate) fn ident_name(id: &ast::Ident) -> String {
    if id.quote_style.is_some() {
        id.value.clone()
    } else {
        id.value.to_lowercase()
    }
}

// ---------------------------------------------------------------------------------------------
// Planner
// ---------------------------------------------------------------------------------------------

/// Where to point an error: nowhere, at the start of an expression, or at the first token after
/// one (a binary operator's symbol or keyword).
#[derive(Clone, Copy)]
enum At<'e> {
    Nowhere,
    Start(&'e ast::Expr),
    Loc(Location),
    /// The first of these tokens after the end of the expression: the operator symbol or
    /// keyword of a binary construct whose left operand it is (sqlparser keeps no operator
    /// spans). Words match case-insensitively at word boundaries.
    Token(&'e ast::Expr, &'static [&'static str]),
    /// The `n`th (0-based) `::` after the end of the expression.
    NthCast(&'e ast::Expr, usize),
    /// The last occurrence of a token before the start of the expression (`CAST`, a unary
    /// operator).
    TokenBefore(&'e ast::Expr, &'static str),
}

/// Result of overload resolution.
enum Resolved<'s> {
    One(&'s Sig),
    None,
    Ambiguous,
}

impl PlanCtx<'_> {
    /// 1-based character offset of a sqlparser location in `source`.
    fn char_position(&self, loc: Location) -> Option<u32> {
        source_position(self.source, loc)
    }

    fn position(&self, at: At) -> Option<u32> {
        match at {
            At::Nowhere => None,
            At::Loc(l) => self.char_position(l),
            At::Start(e) => self.char_position(e.span().start),
            At::Token(e, tokens) => {
                let end = self.char_position(e.span().end)?;
                let rest: Vec<char> = self.source.chars().skip(end as usize - 1).collect();
                let offset =
                    (0..rest.len()).find(|&i| tokens.iter().any(|t| token_at(&rest, i, t)))?;
                Some(end + offset as u32)
            }
            At::NthCast(e, n) => {
                let end = self.char_position(e.span().end)?;
                let rest: Vec<char> = self.source.chars().skip(end as usize - 1).collect();
                let offset = (0..rest.len())
                    .filter(|&i| token_at(&rest, i, "::"))
                    .nth(n)?;
                Some(end + offset as u32)
            }
            At::TokenBefore(e, word) => {
                let start = self.char_position(e.span().start)?;
                let before: Vec<char> = self.source.chars().take(start as usize - 1).collect();
                let at = (0..before.len())
                    .rev()
                    .find(|&i| token_at(&before, i, word))?;
                Some(at as u32 + 1)
            }
        }
    }

    fn err_at(&self, e: PgError, at: At) -> PgError {
        if e.position.is_some() {
            return e;
        }
        match self.position(at) {
            Some(p) => e.with_position(p),
            None => e,
        }
    }

    // ----- coercion ----------------------------------------------------------------------------

    /// Coerces `e` to `to`: unknown literals are converted now, unknown parameters take the
    /// type, anything else gets a cast node. The caller has checked the cast is allowed.
    fn coerce(&mut self, mut e: TypedExpr, to: Type, typmod: Typmod) -> Result<TypedExpr, PgError> {
        if e.ty == to && typmod == Typmod::None {
            return Ok(e);
        }
        if e.ty == UNKNOWN && to != UNKNOWN {
            match &e.node {
                Node::Const(Value::Null) => return Ok(TypedExpr::konst(to, Value::Null)),
                Node::Const(Value::Text(_))
                    if self.text.is_none() && input_depends_on_session(to) =>
                {
                    // Read at evaluation time, in the session's settings.
                }
                Node::Const(Value::Text(s)) => {
                    let default = TextContext::default();
                    let tctx = self.text.unwrap_or(&default);
                    let v = types::text::decode(to, s.as_bytes(), tctx)
                        .and_then(|v| apply_typmod(v, to, typmod, true))
                        .map_err(|err| self.err_at(err, At::Loc(e.loc)))?;
                    let mut out = TypedExpr::konst(to, v);
                    out.loc = e.loc;
                    return Ok(out);
                }
                Node::Param(i) => {
                    let i = *i;
                    if self.params[i] == UNKNOWN {
                        self.params[i] = to;
                    } else if self.params[i] != to {
                        // This occurrence was planned while `$n` was untyped; another one has
                        // since given it a different type (PostgreSQL's coerce_param_hook).
                        return Err(PgError::new(
                            SqlState(*b"42P08"),
                            format!("inconsistent types deduced for parameter ${}", i + 1),
                        )
                        .with_detail(format!(
                            "{} versus {}",
                            type_display_name(self.params[i]),
                            type_display_name(to)
                        )));
                    }
                    e.ty = to;
                    if typmod == Typmod::None {
                        return Ok(e);
                    }
                }
                _ => {}
            }
        }
        if let Node::Const(Value::Null) = e.node {
            return Ok(TypedExpr::konst(to, Value::Null));
        }
        Ok(TypedExpr::new(
            to,
            Node::Cast {
                arg: Box::new(e),
                typmod,
            },
        ))
    }

    /// Implicit coercion; the caller has checked `can_coerce_implicit`.
    fn coerce_implicit(&mut self, e: TypedExpr, to: Type) -> Result<TypedExpr, PgError> {
        debug_assert!(
            can_coerce_implicit(e.ty, to),
            "implicit coercion {:?} -> {:?}",
            e.ty,
            to
        );
        self.coerce(e, to, Typmod::None)
    }

    /// Explicit cast (`CAST`, `::`, typed literal).
    fn cast_explicit(
        &mut self,
        e: TypedExpr,
        to: Type,
        typmod: Typmod,
        at: At,
    ) -> Result<TypedExpr, PgError> {
        let from = if let Node::Param(i) = e.node {
            self.params[i]
        } else {
            e.ty
        };
        if !explicit_cast_allowed(from, to) {
            let err = PgError::new(
                SqlState::CANNOT_COERCE,
                format!(
                    "cannot cast type {} to {}",
                    type_display_name(from),
                    type_display_name(to)
                ),
            );
            return Err(self.err_at(err, at));
        }
        self.coerce(e, to, typmod)
    }

    /// Coerces an argument that must be boolean (WHERE, AND, CASE/WHEN, ...).
    fn coerce_to_bool(
        &mut self,
        e: TypedExpr,
        construct: &str,
        ast: &ast::Expr,
    ) -> Result<TypedExpr, PgError> {
        if e.ty == BOOL || e.ty == UNKNOWN {
            return self.coerce(e, BOOL, Typmod::None);
        }
        let err = datatype_mismatch(format!(
            "argument of {construct} must be type boolean, not type {}",
            type_display_name(e.ty)
        ));
        Err(self.err_at(err, At::Start(ast)))
    }

    /// Output of an unknown-typed select item: text.
    fn resolve_unknown_output(&mut self, mut e: TypedExpr) -> Result<TypedExpr, PgError> {
        if let Node::Param(i) = e.node {
            let inferred = self.params[i];
            if e.ty == UNKNOWN && inferred != UNKNOWN && inferred != TEXT {
                // PostgreSQL coerces the item to text and finds the parameter already typed.
                return Err(PgError::new(
                    SqlState(*b"42P08"),
                    format!("inconsistent types deduced for parameter ${}", i + 1),
                )
                .with_detail(format!("{} versus text", type_display_name(inferred))));
            }
            e.ty = inferred;
        }
        if e.ty == UNKNOWN {
            if let Node::Const(_) = e.node {
                let mut e = e;
                e.ty = TEXT;
                return Ok(e);
            }
            return self.coerce(e, TEXT, Typmod::None);
        }
        Ok(e)
    }

    /// `select_common_type` + `coerce_to_common_type` for CASE, COALESCE, ARRAY, VALUES, ...
    /// With `context == None` returns `Ok(None)` instead of an error when there is no common
    /// type (the IN-list probe).
    fn common_type(
        &self,
        exprs: &[&TypedExpr],
        context: Option<&str>,
        asts: &[Option<&ast::Expr>],
    ) -> Result<Option<Type>, PgError> {
        let mut it = exprs.iter().enumerate().filter(|(_, e)| e.ty != UNKNOWN);
        let Some((_, first)) = it.next() else {
            return Ok(Some(TEXT));
        };
        let mut ptype = first.ty;
        if exprs.iter().all(|e| e.ty == UNKNOWN || e.ty == ptype) {
            return Ok(Some(ptype));
        }
        let mut pcategory = category(ptype);
        let mut pispreferred = is_preferred(ptype);
        for (i, e) in it {
            let ntype = e.ty;
            if ntype == ptype {
                continue;
            }
            let ncategory = category(ntype);
            if ncategory != pcategory {
                let Some(context) = context else {
                    return Ok(None);
                };
                let err = datatype_mismatch(format!(
                    "{context} types {} and {} cannot be matched",
                    type_display_name(ptype),
                    type_display_name(ntype)
                ));
                let at = asts
                    .get(i)
                    .copied()
                    .flatten()
                    .map_or(At::Nowhere, At::Start);
                return Err(self.err_at(err, at));
            }
            if !pispreferred
                && can_coerce_implicit(ptype, ntype)
                && !can_coerce_implicit(ntype, ptype)
            {
                ptype = ntype;
                pcategory = ncategory;
                pispreferred = is_preferred(ntype);
            }
        }
        // verify_common_type
        for (i, e) in exprs.iter().enumerate() {
            if !can_coerce_implicit(e.ty, ptype) {
                let Some(context) = context else {
                    return Ok(None);
                };
                let err = PgError::new(
                    SqlState::CANNOT_COERCE,
                    format!(
                        "{context} could not convert type {} to {}",
                        type_display_name(e.ty),
                        type_display_name(ptype)
                    ),
                );
                let at = asts
                    .get(i)
                    .copied()
                    .flatten()
                    .map_or(At::Nowhere, At::Start);
                return Err(self.err_at(err, at));
            }
        }
        Ok(Some(ptype))
    }

    fn coerce_all(&mut self, exprs: Vec<TypedExpr>, to: Type) -> Result<Vec<TypedExpr>, PgError> {
        exprs
            .into_iter()
            .map(|e| self.coerce_implicit(e, to))
            .collect()
    }

    // ----- overload resolution -----------------------------------------------------------------

    /// PostgreSQL's `func_select_candidate` (plus the exact-match shortcuts of
    /// `binary_oper_exact` / `func_get_detail`) over `sigs`.
    fn resolve<'s>(inputs: &[Type], sigs: &'s [Sig]) -> Resolved<'s> {
        let arity: Vec<&Sig> = sigs
            .iter()
            .filter(|s| s.args().len() == inputs.len())
            .collect();
        // Exact match.
        if let Some(s) = arity.iter().find(|s| s.args() == inputs) {
            return Resolved::One(s);
        }
        // binary_oper_exact: one unknown operand, try the other's type on both sides.
        if inputs.len() == 2 && (inputs[0] == UNKNOWN) != (inputs[1] == UNKNOWN) {
            let known = if inputs[0] == UNKNOWN {
                inputs[1]
            } else {
                inputs[0]
            };
            if let Some(s) = arity
                .iter()
                .find(|s| s.args()[0] == known && s.args()[1] == known)
            {
                return Resolved::One(s);
            }
        }
        let mut cands: Vec<&Sig> = arity
            .into_iter()
            .filter(|s| {
                s.args()
                    .iter()
                    .zip(inputs)
                    .all(|(a, i)| can_coerce_implicit(*i, *a))
            })
            .collect();
        if cands.len() <= 1 {
            return cands.first().map_or(Resolved::None, |s| Resolved::One(s));
        }
        // Most exact matches on known inputs.
        let keep_max = |cands: Vec<&'s Sig>, score: &dyn Fn(&Sig) -> usize| -> Vec<&'s Sig> {
            let best = cands.iter().map(|s| score(s)).max().unwrap_or(0);
            cands.into_iter().filter(|s| score(s) == best).collect()
        };
        cands = keep_max(cands, &|s| {
            s.args()
                .iter()
                .zip(inputs)
                .filter(|(a, i)| **i != UNKNOWN && a == i)
                .count()
        });
        if cands.len() == 1 {
            return Resolved::One(cands[0]);
        }
        // Most positions accepting a preferred type where conversion is needed.
        cands = keep_max(cands, &|s| {
            s.args()
                .iter()
                .zip(inputs)
                .filter(|(a, i)| **i != UNKNOWN && (a == i || is_preferred(**a)))
                .count()
        });
        if cands.len() == 1 {
            return Resolved::One(cands[0]);
        }
        // Unknown inputs: choose a category per position (string wins), then preferred types.
        let unknown_positions: Vec<usize> = (0..inputs.len())
            .filter(|i| inputs[*i] == UNKNOWN)
            .collect();
        if !unknown_positions.is_empty() {
            let mut resolved = true;
            let mut slots = Vec::new();
            for &i in &unknown_positions {
                let mut slot_category: Option<Category> = None;
                let mut slot_has_preferred = false;
                let mut conflict = false;
                for s in &cands {
                    let cat = category(s.args()[i]);
                    let pref = is_preferred(s.args()[i]);
                    match slot_category {
                        None => {
                            slot_category = Some(cat);
                            slot_has_preferred = pref;
                        }
                        Some(c) if c == cat => slot_has_preferred |= pref,
                        Some(_) if cat == Category::String => {
                            // A string candidate always wins the position.
                            slot_category = Some(cat);
                            slot_has_preferred = pref;
                        }
                        Some(_) => conflict = true,
                    }
                }
                if conflict && slot_category != Some(Category::String) {
                    resolved = false;
                    break;
                }
                slots.push((i, slot_category, slot_has_preferred));
            }
            if resolved {
                let remaining: Vec<&Sig> = cands
                    .iter()
                    .copied()
                    .filter(|s| {
                        slots.iter().all(|(i, cat, has_pref)| {
                            Some(category(s.args()[*i])) == *cat
                                && (!*has_pref || is_preferred(s.args()[*i]))
                        })
                    })
                    .collect();
                if !remaining.is_empty() {
                    cands = remaining;
                }
                if cands.len() == 1 {
                    return Resolved::One(cands[0]);
                }
            }
            // All known inputs share one type: assume the unknowns are of it too.
            let known: Vec<Type> = inputs.iter().copied().filter(|t| *t != UNKNOWN).collect();
            if let Some(&k) = known.first() {
                if known.iter().all(|t| *t == k) {
                    let fits: Vec<&Sig> = cands
                        .iter()
                        .copied()
                        .filter(|s| {
                            unknown_positions
                                .iter()
                                .all(|i| can_coerce_implicit(k, s.args()[*i]))
                        })
                        .collect();
                    if fits.len() == 1 {
                        return Resolved::One(fits[0]);
                    }
                }
            }
        }
        Resolved::Ambiguous
    }

    /// Coerces arguments to a resolved signature's declared types, then to its compute types.
    fn apply_sig(&mut self, sig: &Sig, args: Vec<TypedExpr>) -> Result<Vec<TypedExpr>, PgError> {
        let mut out = Vec::with_capacity(args.len());
        for ((a, decl), comp) in args.into_iter().zip(sig.args()).zip(sig.compute()) {
            let a = self.coerce_implicit(a, *decl)?;
            out.push(self.coerce(a, *comp, Typmod::None)?);
        }
        Ok(out)
    }

    /// Resolves and builds a binary operator.
    fn binary_op(
        &mut self,
        op: &str,
        l: TypedExpr,
        r: TypedExpr,
        at: At,
    ) -> Result<TypedExpr, PgError> {
        if op == "||" {
            return self.concat_op(l, r, at);
        }
        let is_cmp = matches!(op, "=" | "<>" | "<" | "<=" | ">" | ">=");
        if is_cmp && (l.ty.array || r.ty.array) {
            // anyarray comparisons: both sides must end up the same array type.
            let target = if l.ty.array { l.ty } else { r.ty };
            if (l.ty == target || l.ty == UNKNOWN) && (r.ty == target || r.ty == UNKNOWN) {
                let l = self.coerce_implicit(l, target)?;
                let r = self.coerce_implicit(r, target)?;
                let cmp = cmp_op_from_symbol(op).ok_or_else(|| internal("comparison"))?;
                return Ok(TypedExpr::new(
                    BOOL,
                    Node::Op {
                        imp: Imp::Cmp(cmp),
                        args: vec![l, r],
                    },
                ));
            }
            return Err(self.err_at(undefined_operator(op, Some(l.ty), r.ty), at));
        }
        let sigs = operator_sigs(op);
        let inputs = [l.ty, r.ty];
        let sig = match Self::resolve(&inputs, sigs) {
            Resolved::One(s) => *s,
            Resolved::None => {
                return Err(self.err_at(undefined_operator(op, Some(l.ty), r.ty), at));
            }
            Resolved::Ambiguous => {
                return Err(self.err_at(ambiguous_operator(op, Some(l.ty), r.ty), at));
            }
        };
        let args = self.apply_sig(&sig, vec![l, r])?;
        Ok(TypedExpr::new(sig.ret, Node::Op { imp: sig.imp, args }))
    }

    fn unary_op(&mut self, op: &str, e: TypedExpr, at: At) -> Result<TypedExpr, PgError> {
        let sigs = unary_sigs(op);
        let sig = match Self::resolve(&[e.ty], sigs) {
            Resolved::One(s) => *s,
            Resolved::None => return Err(self.err_at(undefined_operator(op, None, e.ty), at)),
            Resolved::Ambiguous => {
                return Err(self.err_at(ambiguous_operator(op, None, e.ty), at));
            }
        };
        let args = self.apply_sig(&sig, vec![e])?;
        Ok(TypedExpr::new(sig.ret, Node::Op { imp: sig.imp, args }))
    }

    /// `||`: text concatenation (converting a non-text side through its text cast), bytea
    /// concatenation, and array concatenation / append / prepend.
    fn concat_op(&mut self, l: TypedExpr, r: TypedExpr, at: At) -> Result<TypedExpr, PgError> {
        let (lt, rt) = (l.ty, r.ty);
        if lt.array || rt.array {
            let arr = if lt.array { lt } else { rt };
            let elem = Type {
                scalar: arr.scalar,
                array: false,
            };
            if lt.array && rt == UNKNOWN || lt == UNKNOWN && rt.array {
                // An untyped literal next to an array is read as an array of the same type.
                let l = self.coerce_implicit(l, arr)?;
                let r = self.coerce_implicit(r, arr)?;
                return Ok(TypedExpr::new(
                    arr,
                    Node::Op {
                        imp: Imp::ArrayCat,
                        args: vec![l, r],
                    },
                ));
            }
            if lt.array && rt.array {
                if lt == rt {
                    return Ok(TypedExpr::new(
                        arr,
                        Node::Op {
                            imp: Imp::ArrayCat,
                            args: vec![l, r],
                        },
                    ));
                }
            } else if lt.array && can_coerce_implicit(rt, elem) {
                let r = self.coerce_implicit(r, elem)?;
                return Ok(TypedExpr::new(
                    arr,
                    Node::Op {
                        imp: Imp::ArrayAppend,
                        args: vec![l, r],
                    },
                ));
            } else if rt.array && can_coerce_implicit(lt, elem) {
                let l = self.coerce_implicit(l, elem)?;
                return Ok(TypedExpr::new(
                    arr,
                    Node::Op {
                        imp: Imp::ArrayPrepend,
                        args: vec![l, r],
                    },
                ));
            }
            return Err(self.err_at(undefined_operator("||", Some(lt), rt), at));
        }
        if (lt == BYTEA || lt == UNKNOWN) && (rt == BYTEA || rt == UNKNOWN) && lt != rt
            || lt == BYTEA && rt == BYTEA
        {
            let l = self.coerce_implicit(l, BYTEA)?;
            let r = self.coerce_implicit(r, BYTEA)?;
            return Ok(TypedExpr::new(
                BYTEA,
                Node::Op {
                    imp: Imp::ByteaCat,
                    args: vec![l, r],
                },
            ));
        }
        let textual = |t: Type| t == UNKNOWN || is_string(t);
        if !textual(lt) && !textual(rt) {
            return Err(self.err_at(undefined_operator("||", Some(lt), rt), at));
        }
        let l = self.concat_operand(l)?;
        let r = self.concat_operand(r)?;
        Ok(TypedExpr::new(
            TEXT,
            Node::Op {
                imp: Imp::TextCat,
                args: vec![l, r],
            },
        ))
    }

    fn concat_operand(&mut self, e: TypedExpr) -> Result<TypedExpr, PgError> {
        if e.ty == UNKNOWN || is_string(e.ty) {
            return self.coerce(e, TEXT, Typmod::None);
        }
        if e.ty == VOID {
            return Err(undefined_operator("||", Some(e.ty), TEXT));
        }
        // anytextcat: `$1::text || $2`
        self.coerce(e, TEXT, Typmod::None)
    }

    /// `l op r` for a comparison operator, as used by IN, BETWEEN, CASE, ANY.
    fn comparison(
        &mut self,
        op: CmpOp,
        l: TypedExpr,
        r: TypedExpr,
        at: At,
    ) -> Result<TypedExpr, PgError> {
        self.binary_op(op.symbol(), l, r, at)
    }

    /// Plans `value` once for several uses: trivial expressions are duplicated, others are
    /// bound with a `Let` and referenced through `CaseTest`.
    fn share(&mut self, value: TypedExpr) -> (Option<TypedExpr>, TypedExpr) {
        if value.is_trivial() {
            (None, value)
        } else {
            let ty = value.ty;
            (Some(value), TypedExpr::new(ty, Node::CaseTest))
        }
    }

    /// Another use of a value from [`PlanCtx::share`]. PostgreSQL copies the raw expression
    /// for each use (BETWEEN, IN), so a parameter typed by an earlier use is already typed in
    /// the next.
    fn fresh(&self, shared: &TypedExpr) -> TypedExpr {
        let mut e = shared.clone();
        if let Node::Param(i) = e.node {
            e.ty = self.params[i];
        }
        e
    }

    fn bind(binding: Option<TypedExpr>, body: TypedExpr) -> TypedExpr {
        match binding {
            None => body,
            Some(value) => TypedExpr::new(
                body.ty,
                Node::Let {
                    value: Box::new(value),
                    body: Box::new(body),
                },
            ),
        }
    }

    // ----- expressions -------------------------------------------------------------------------

    fn plan(&mut self, expr: &ast::Expr) -> Result<TypedExpr, PgError> {
        use ast::Expr as E;
        match expr {
            E::Nested(inner) => self.plan(inner),
            E::Value(v) => self.plan_value(v),
            E::Identifier(id) => {
                if id.quote_style.is_none() {
                    if let Some(f) = sql_value_function(&id.value.to_lowercase()) {
                        return self.plan_sql_value_function(f, id.span.start);
                    }
                }
                self.column(std::slice::from_ref(id), expr)
            }
            E::CompoundIdentifier(ids) => self.column(ids, expr),
            E::TypedString(ts) => {
                let (ty, typmod) = resolve_data_type(&ts.data_type)
                    .map_err(|e| self.err_at(e, At::Start(expr)))?;
                let lit = match &ts.value.value {
                    ast::Value::Null => TypedExpr::konst(UNKNOWN, Value::Null),
                    v => match string_literal(v) {
                        Some(s) => {
                            let mut e = TypedExpr::konst(UNKNOWN, Value::Text(s.to_string()));
                            e.loc = ts.value.span.start;
                            e
                        }
                        None => return Err(feature_not_supported(format!("typed literal {ts}"))),
                    },
                };
                self.cast_explicit(lit, ty, typmod, At::Start(expr))
            }
            E::Interval(iv) => self.plan_interval(iv),
            E::Cast {
                kind,
                expr: inner,
                data_type,
                format,
            } => {
                if format.is_some()
                    || !matches!(kind, ast::CastKind::Cast | ast::CastKind::DoubleColon)
                {
                    return Err(feature_not_supported(format!("{kind:?} with this syntax")));
                }
                let (ty, typmod) =
                    resolve_data_type(data_type).map_err(|e| self.err_at(e, At::Start(expr)))?;
                // `ARRAY[]::int[]`: an empty array constructor takes the cast's type.
                if let E::Array(a) = inner.as_ref() {
                    if a.elem.is_empty() && ty.array {
                        return Ok(TypedExpr::konst(ty, Value::Array(Vec::new())));
                    }
                }
                let e = self.plan(inner)?;
                let at = match kind {
                    ast::CastKind::DoubleColon => {
                        // sqlparser's span of `x::a` ends at `x`: skip the casts `inner` ends
                        // with to find this cast's `::`.
                        let mut base = inner.as_ref();
                        let mut depth = 0;
                        while let E::Cast {
                            kind: ast::CastKind::DoubleColon,
                            expr,
                            ..
                        } = base
                        {
                            base = expr;
                            depth += 1;
                        }
                        At::NthCast(base, depth)
                    }
                    _ => At::TokenBefore(inner, "cast"),
                };
                self.cast_explicit(e, ty, typmod, at)
            }
            E::UnaryOp { op, expr: inner } => self.plan_unary(*op, inner),
            E::BinaryOp { left, op, right } => self.plan_binary(left, op, right),
            E::IsNull(e) | E::IsNotNull(e) => {
                let arg = self.plan(e)?;
                let negated = matches!(expr, E::IsNotNull(_));
                Ok(TypedExpr::new(
                    BOOL,
                    Node::IsNull {
                        arg: Box::new(arg),
                        negated,
                    },
                ))
            }
            E::IsTrue(e)
            | E::IsNotTrue(e)
            | E::IsFalse(e)
            | E::IsNotFalse(e)
            | E::IsUnknown(e)
            | E::IsNotUnknown(e) => {
                let (test, name) = match expr {
                    E::IsTrue(_) => (BoolTest::True, "IS TRUE"),
                    E::IsNotTrue(_) => (BoolTest::NotTrue, "IS NOT TRUE"),
                    E::IsFalse(_) => (BoolTest::False, "IS FALSE"),
                    E::IsNotFalse(_) => (BoolTest::NotFalse, "IS NOT FALSE"),
                    E::IsUnknown(_) => (BoolTest::Unknown, "IS UNKNOWN"),
                    _ => (BoolTest::NotUnknown, "IS NOT UNKNOWN"),
                };
                let arg = self.plan(e)?;
                let arg = self.coerce_to_bool(arg, name, e)?;
                Ok(TypedExpr::new(
                    BOOL,
                    Node::BoolTest {
                        arg: Box::new(arg),
                        test,
                    },
                ))
            }
            E::IsDistinctFrom(a, b) | E::IsNotDistinctFrom(a, b) => {
                let l = self.plan(a)?;
                let r = self.plan(b)?;
                let cmp = self.comparison(CmpOp::Eq, l, r, At::Token(a, &["is"]))?;
                let Node::Op { args, .. } = cmp.node else {
                    return Err(internal("IS DISTINCT FROM"));
                };
                let [l, r]: [TypedExpr; 2] = args
                    .try_into()
                    .map_err(|_| internal("IS DISTINCT FROM arity"))?;
                let negated = matches!(expr, E::IsNotDistinctFrom(..));
                Ok(TypedExpr::new(
                    BOOL,
                    Node::Distinct {
                        args: Box::new([l, r]),
                        negated,
                    },
                ))
            }
            E::Between {
                expr: x,
                negated,
                low,
                high,
            } => {
                let xv = self.plan(x)?;
                let (binding, xr) = self.share(xv);
                let lo = self.plan(low)?;
                let hi = self.plan(high)?;
                let at = At::Token(x, if *negated { &["not"] } else { &["between"] });
                let body = if *negated {
                    let a = self.comparison(CmpOp::Lt, self.fresh(&xr), lo, at)?;
                    let b = self.comparison(CmpOp::Gt, self.fresh(&xr), hi, at)?;
                    TypedExpr::new(BOOL, Node::Or(vec![a, b]))
                } else {
                    let a = self.comparison(CmpOp::Ge, self.fresh(&xr), lo, at)?;
                    let b = self.comparison(CmpOp::Le, self.fresh(&xr), hi, at)?;
                    TypedExpr::new(BOOL, Node::And(vec![a, b]))
                };
                Ok(Self::bind(binding, body))
            }
            E::InList {
                expr: x,
                list,
                negated,
            } => self.plan_in_list(x, list, *negated),
            E::Like {
                negated,
                any,
                expr: x,
                pattern,
                escape_char,
            }
            | E::ILike {
                negated,
                any,
                expr: x,
                pattern,
                escape_char,
            } => {
                if *any {
                    return Err(feature_not_supported("LIKE ANY"));
                }
                let ci = matches!(expr, E::ILike { .. });
                let at = At::Token(
                    x,
                    match (*negated, ci) {
                        (true, _) => &["not"],
                        (false, true) => &["ilike"],
                        (false, false) => &["like"],
                    },
                );
                self.plan_like(x, pattern, escape_char.as_deref(), ci, *negated, at)
            }
            E::AnyOp {
                left,
                compare_op,
                right,
                ..
            } => self.plan_any_all(left, compare_op, right, false),
            E::AllOp {
                left,
                compare_op,
                right,
            } => self.plan_any_all(left, compare_op, right, true),
            E::Case {
                operand,
                conditions,
                else_result,
                ..
            } => self.plan_case(operand.as_deref(), conditions, else_result.as_deref()),
            E::Function(f) => self.plan_function(f, expr),
            E::Array(a) => self.plan_array(&a.elem, expr),
            E::Substring {
                expr: s,
                substring_from,
                substring_for,
                shorthand,
                ..
            } => {
                let name = if *shorthand { "substr" } else { "substring" };
                let mut args = vec![s.as_ref()];
                match (substring_from, substring_for) {
                    (Some(f), Some(n)) => {
                        args.push(f);
                        args.push(n);
                    }
                    (Some(f), None) => args.push(f),
                    (None, Some(n)) => {
                        // SUBSTRING(x FOR n) = substring(x, 1, n)
                        let one = TypedExpr::konst(INT4, Value::Int4(1));
                        let mut planned = vec![self.plan(s)?, one, self.plan(n)?];
                        return self.call_function(name, &mut planned, At::Start(expr), None);
                    }
                    (None, None) => {}
                }
                self.call_with_asts(name, &args, expr)
            }
            E::Trim {
                trim_where,
                trim_what,
                expr: s,
                trim_characters,
            } => {
                let name = match trim_where {
                    Some(ast::TrimWhereField::Leading) => "ltrim",
                    Some(ast::TrimWhereField::Trailing) => "rtrim",
                    _ => "btrim",
                };
                let mut args: Vec<&ast::Expr> = vec![s];
                if let Some(w) = trim_what {
                    args.push(w);
                }
                if let Some(chars) = trim_characters {
                    args.extend(chars.iter());
                }
                self.call_with_asts(name, &args, expr)
            }
            E::Position { expr: needle, r#in } => {
                self.call_with_asts("strpos", &[r#in.as_ref(), needle.as_ref()], expr)
            }
            E::Ceil { expr: e, field } | E::Floor { expr: e, field } => {
                let name = if matches!(expr, E::Ceil { .. }) {
                    "ceil"
                } else {
                    "floor"
                };
                match field {
                    ast::CeilFloorKind::DateTimeField(ast::DateTimeField::NoDateTime) => {
                        self.call_with_asts(name, &[e.as_ref()], expr)
                    }
                    _ => Err(feature_not_supported(format!(
                        "{name} with a second argument"
                    ))),
                }
            }
            E::Extract { field, expr: e, .. } => {
                let field_name = field.to_string().to_lowercase();
                let mut args = vec![
                    TypedExpr::konst(TEXT, Value::Text(field_name)),
                    self.plan(e)?,
                ];
                self.call_function("extract", &mut args, At::Start(expr), None)
            }
            E::AtTimeZone {
                timestamp,
                time_zone,
            } => {
                let mut args = vec![self.plan(time_zone)?, self.plan(timestamp)?];
                self.call_function("timezone", &mut args, At::Token(timestamp, &["at"]), None)
            }
            E::Collate { expr: e, .. } => self.plan(e),
            E::Subquery(_) | E::Exists { .. } | E::InSubquery { .. } => {
                Err(feature_not_supported("subquery"))
            }
            E::Tuple(_) => Err(feature_not_supported("row constructor")),
            E::Wildcard(_) | E::QualifiedWildcard(..) => Err(self.err_at(
                PgError::new(
                    SqlState::SYNTAX_ERROR,
                    "* is not allowed in an expression here",
                ),
                At::Start(expr),
            )),
            other => Err(feature_not_supported(format!("expression {other}"))),
        }
    }

    fn column(&mut self, ids: &[ast::Ident], expr: &ast::Expr) -> Result<TypedExpr, PgError> {
        if let Some(resolver) = self.columns {
            let (i, ty) = resolver
                .resolve(ids)
                .map_err(|e| self.err_at(e, At::Start(expr)))?;
            let mut e = TypedExpr::new(ty, Node::Column(i));
            e.loc = expr.span().start;
            return Ok(e);
        }
        let name: Vec<String> = ids.iter().map(ident_name).collect();
        let err = if ids.len() > 1 {
            PgError::new(
                SqlState::UNDEFINED_TABLE,
                format!(
                    "missing FROM-clause entry for table \"{}\"",
                    name[name.len() - 2]
                ),
            )
        } else {
            PgError::new(
                SqlState::UNDEFINED_COLUMN,
                format!("column \"{}\" does not exist", name.join(".")),
            )
        };
        Err(self.err_at(err, At::Start(expr)))
    }

    fn plan_value(&mut self, v: &ast::ValueWithSpan) -> Result<TypedExpr, PgError> {
        use ast::Value as V;
        let mut e = match &v.value {
            V::Number(s, _) => number_literal(s, false)?,
            V::Boolean(b) => TypedExpr::konst(BOOL, Value::Bool(*b)),
            V::Null => TypedExpr::konst(UNKNOWN, Value::Null),
            V::Placeholder(p) => return self.plan_param(p, v.span.start),
            other => match string_literal(other) {
                Some(s) => TypedExpr::konst(UNKNOWN, Value::Text(s.to_string())),
                None => return Err(feature_not_supported(format!("literal {other}"))),
            },
        };
        e.loc = v.span.start;
        Ok(e)
    }

    fn plan_param(&mut self, p: &str, loc: Location) -> Result<TypedExpr, PgError> {
        const MAX_PARAMS: usize = 65_535;
        let n: usize = p
            .strip_prefix('$')
            .and_then(|d| d.parse().ok())
            .filter(|n| (1..=MAX_PARAMS).contains(n))
            .ok_or_else(|| {
                self.err_at(
                    PgError::new(SqlState(*b"42P02"), format!("there is no parameter {p}")),
                    At::Loc(loc),
                )
            })?;
        if self.params.len() < n {
            self.params.resize(n, UNKNOWN);
        }
        let mut e = TypedExpr::new(self.params[n - 1], Node::Param(n - 1));
        e.loc = loc;
        Ok(e)
    }

    fn plan_interval(&mut self, iv: &ast::Interval) -> Result<TypedExpr, PgError> {
        let lit = self.plan(&iv.value)?;
        let lit = match (&lit.node, iv.leading_field.as_ref(), iv.last_field.as_ref()) {
            // `interval '2' hour`: the field gives the unit of a bare number.
            (Node::Const(Value::Text(s)), Some(field), None)
                if lit.ty == UNKNOWN && s.trim().parse::<f64>().is_ok() =>
            {
                let mut e = TypedExpr::konst(UNKNOWN, Value::Text(format!("{s} {field}")));
                e.loc = lit.loc;
                e
            }
            _ => lit,
        };
        self.cast_explicit(lit, INTERVAL, Typmod::None, At::Start(&iv.value))
    }

    fn plan_unary(
        &mut self,
        op: ast::UnaryOperator,
        inner: &ast::Expr,
    ) -> Result<TypedExpr, PgError> {
        match op {
            ast::UnaryOperator::Not => {
                let e = self.plan(inner)?;
                let e = self.coerce_to_bool(e, "NOT", inner)?;
                Ok(TypedExpr::new(BOOL, Node::Not(Box::new(e))))
            }
            ast::UnaryOperator::Minus | ast::UnaryOperator::Plus
                if matches!(
                    inner,
                    ast::Expr::BinaryOp {
                        op: ast::BinaryOperator::PGExp,
                        ..
                    }
                ) =>
            {
                // PostgreSQL binds unary minus tighter than `^` (`-2 ^ 2` is 4); sqlparser
                // parses `-(2 ^ 2)`. Move the sign onto the leftmost operand of the `^` chain.
                self.plan(&sign_leftmost_power_operand(op, inner))
            }
            ast::UnaryOperator::Minus => {
                // A negated numeric literal is one constant, typed by its value; PostgreSQL's
                // grammar folds any number of signs and parentheses (`-(-2147483648)` is int8).
                if let Some((v, negative)) = signed_literal(inner) {
                    if let ast::Value::Number(s, _) = &v.value {
                        let mut e = number_literal(s, !negative)?;
                        e.loc = v.span.start;
                        return Ok(e);
                    }
                }
                let e = self.plan(inner)?;
                self.unary_op("-", e, At::TokenBefore(inner, "-"))
            }
            ast::UnaryOperator::Plus => {
                let e = self.plan(inner)?;
                self.unary_op("+", e, At::TokenBefore(inner, "+"))
            }
            other => Err(feature_not_supported(format!("operator {other}"))),
        }
    }

    fn plan_binary(
        &mut self,
        left: &ast::Expr,
        op: &ast::BinaryOperator,
        right: &ast::Expr,
    ) -> Result<TypedExpr, PgError> {
        use ast::BinaryOperator as B;
        match op {
            B::And | B::Or => {
                let name = if *op == B::And { "AND" } else { "OR" };
                let mut args = Vec::new();
                for side in [left, right] {
                    let e = self.plan(side)?;
                    let e = self.coerce_to_bool(e, name, side)?;
                    // Flatten `a AND b AND c` into one node.
                    match (op, e.node) {
                        (B::And, Node::And(inner)) | (B::Or, Node::Or(inner)) => args.extend(inner),
                        (_, node) => args.push(TypedExpr::new(BOOL, node)),
                    }
                }
                let node = if *op == B::And {
                    Node::And(args)
                } else {
                    Node::Or(args)
                };
                Ok(TypedExpr::new(BOOL, node))
            }
            B::PGLikeMatch | B::PGILikeMatch | B::PGNotLikeMatch | B::PGNotILikeMatch => {
                let ci = matches!(op, B::PGILikeMatch | B::PGNotILikeMatch);
                let negated = matches!(op, B::PGNotLikeMatch | B::PGNotILikeMatch);
                let tokens: &'static [&'static str] = match op {
                    B::PGLikeMatch => &["~~"],
                    B::PGILikeMatch => &["~~*"],
                    B::PGNotLikeMatch => &["!~~"],
                    _ => &["!~~*"],
                };
                self.plan_like(left, right, None, ci, negated, At::Token(left, tokens))
            }
            _ => {
                let (symbol, tokens): (&str, &'static [&'static str]) = match op {
                    B::Plus => ("+", &["+"]),
                    B::Minus => ("-", &["-"]),
                    B::Multiply => ("*", &["*"]),
                    B::Divide => ("/", &["/"]),
                    B::Modulo => ("%", &["%"]),
                    B::PGExp => ("^", &["^"]),
                    B::StringConcat => ("||", &["||"]),
                    B::Eq => ("=", &["="]),
                    B::NotEq => ("<>", &["<>", "!="]),
                    B::Lt => ("<", &["<"]),
                    B::LtEq => ("<=", &["<="]),
                    B::Gt => (">", &[">"]),
                    B::GtEq => (">=", &[">="]),
                    other => return Err(feature_not_supported(format!("operator {other}"))),
                };
                let l = self.plan(left)?;
                let r = self.plan(right)?;
                self.binary_op(symbol, l, r, At::Token(left, tokens))
            }
        }
    }

    fn plan_in_list(
        &mut self,
        x: &ast::Expr,
        list: &[ast::Expr],
        negated: bool,
    ) -> Result<TypedExpr, PgError> {
        let lhs = self.plan(x)?;
        let mut items = Vec::with_capacity(list.len());
        for item in list {
            items.push(self.plan(item)?);
        }
        // With a common type, everything is coerced to it (`x = ANY(ARRAY[...])` in PostgreSQL);
        // otherwise each `x = item` is resolved on its own.
        let common = if lhs.ty.array || items.iter().any(|i| i.ty.array) {
            None
        } else {
            let mut all: Vec<&TypedExpr> = vec![&lhs];
            all.extend(items.iter());
            self.common_type(&all, None, &[])?
        };
        let (lhs, items) = match common {
            Some(t) => (self.coerce_implicit(lhs, t)?, self.coerce_all(items, t)?),
            None => (lhs, items),
        };
        if let Some(set) = common
            .filter(|&t| set_type(t) && items.len() >= IN_SET_MIN)
            .and_then(|_| constant_set(&items))
        {
            let node = Node::InSet {
                arg: Box::new(lhs),
                set: std::sync::Arc::new(set),
                negated,
            };
            return Ok(TypedExpr::new(BOOL, node));
        }
        // `x IN (a, b)` is `x = a OR x = b`; `x NOT IN (a, b)` is `x <> a AND x <> b`.
        let (binding, lref) = self.share(lhs);
        let (op, at) = if negated {
            (CmpOp::Ne, At::Token(x, &["not"]))
        } else {
            (CmpOp::Eq, At::Token(x, &["in"]))
        };
        let mut terms = Vec::with_capacity(items.len());
        for item in items {
            terms.push(self.comparison(op, self.fresh(&lref), item, at)?);
        }
        let body = if terms.len() == 1 {
            terms.pop().ok_or_else(|| internal("IN"))?
        } else if negated {
            TypedExpr::new(BOOL, Node::And(terms))
        } else {
            TypedExpr::new(BOOL, Node::Or(terms))
        };
        Ok(Self::bind(binding, body))
    }

    fn plan_like(
        &mut self,
        x: &ast::Expr,
        pattern: &ast::Expr,
        escape: Option<&ast::Expr>,
        case_insensitive: bool,
        negated: bool,
        at: At,
    ) -> Result<TypedExpr, PgError> {
        let l = self.plan(x)?;
        let mut r = self.plan(pattern)?;
        let op = match (case_insensitive, negated) {
            (false, false) => "~~",
            (false, true) => "!~~",
            (true, false) => "~~*",
            (true, true) => "!~~*",
        };
        if let Some(esc) = escape {
            // `x LIKE p ESCAPE e` is `x ~~ like_escape(p, e)`.
            let e = self.plan(esc)?;
            let pat = self.coerce_implicit_or_fail(r, TEXT, pattern)?;
            let e = self.coerce_implicit_or_fail(e, TEXT, esc)?;
            r = TypedExpr::new(
                TEXT,
                Node::Op {
                    imp: Imp::Func(Func::LikeEscape),
                    args: vec![pat, e],
                },
            );
        }
        let sigs = [
            Sig::new(
                &[TEXT, TEXT],
                BOOL,
                Imp::Like {
                    case_insensitive,
                    negated,
                },
            ),
            Sig::new(
                &[BPCHAR, TEXT],
                BOOL,
                Imp::Like {
                    case_insensitive,
                    negated,
                },
            ),
            Sig::new(
                &[NAME, TEXT],
                BOOL,
                Imp::Like {
                    case_insensitive,
                    negated,
                },
            ),
            Sig::new(
                &[BYTEA, BYTEA],
                BOOL,
                Imp::Like {
                    case_insensitive,
                    negated,
                },
            ),
        ];
        let sigs = if case_insensitive {
            &sigs[..3]
        } else {
            &sigs[..]
        };
        let sig = match Self::resolve(&[l.ty, r.ty], sigs) {
            Resolved::One(s) => *s,
            Resolved::None => return Err(self.err_at(undefined_operator(op, Some(l.ty), r.ty), at)),
            Resolved::Ambiguous => {
                return Err(self.err_at(ambiguous_operator(op, Some(l.ty), r.ty), at))
            }
        };
        let args = self.apply_sig(&sig, vec![l, r])?;
        Ok(TypedExpr::new(BOOL, Node::Op { imp: sig.imp, args }))
    }

    fn coerce_implicit_or_fail(
        &mut self,
        e: TypedExpr,
        to: Type,
        ast: &ast::Expr,
    ) -> Result<TypedExpr, PgError> {
        if can_coerce_implicit(e.ty, to) {
            return self.coerce_implicit(e, to);
        }
        let err = datatype_mismatch(format!(
            "argument must be type {}, not type {}",
            type_display_name(to),
            type_display_name(e.ty)
        ));
        Err(self.err_at(err, At::Start(ast)))
    }

    fn plan_any_all(
        &mut self,
        left: &ast::Expr,
        op: &ast::BinaryOperator,
        right: &ast::Expr,
        all: bool,
    ) -> Result<TypedExpr, PgError> {
        let cmp = CmpOp::from_binary(op)
            .ok_or_else(|| feature_not_supported(format!("operator {op} with ANY/ALL")))?;
        let any_tokens: &'static [&'static str] = match cmp {
            CmpOp::Eq => &["="],
            CmpOp::Ne => &["<>", "!="],
            CmpOp::Lt => &["<"],
            CmpOp::Le => &["<="],
            CmpOp::Gt => &[">"],
            CmpOp::Ge => &[">="],
        };
        let right = match right {
            ast::Expr::Nested(inner) => inner.as_ref(),
            other => other,
        };
        if matches!(right, ast::Expr::Subquery(_)) {
            return Err(feature_not_supported("ANY/ALL (subquery)"));
        }
        let l = self.plan(left)?;
        let r = self.plan(right)?;
        let elem_input = if r.ty == UNKNOWN {
            UNKNOWN
        } else if r.ty.array {
            Type {
                scalar: r.ty.scalar,
                array: false,
            }
        } else {
            let err = PgError::new(
                SqlState(*b"42809"),
                "op ANY/ALL (array) requires array on right side",
            );
            return Err(self.err_at(err, At::Token(left, any_tokens)));
        };
        let op_symbol = cmp.symbol();
        let sigs = operator_sigs(op_symbol);
        let sig = match Self::resolve(&[l.ty, elem_input], sigs) {
            Resolved::One(s) => *s,
            Resolved::None => {
                return Err(self.err_at(
                    undefined_operator(op_symbol, Some(l.ty), elem_input),
                    At::Token(left, any_tokens),
                ))
            }
            Resolved::Ambiguous => {
                return Err(self.err_at(
                    ambiguous_operator(op_symbol, Some(l.ty), elem_input),
                    At::Token(left, any_tokens),
                ))
            }
        };
        let l = self.coerce_implicit(l, sig.args()[0])?;
        let l = self.coerce(l, sig.compute()[0], Typmod::None)?;
        let arr_decl = Type {
            scalar: sig.args()[1].scalar,
            array: true,
        };
        let arr_comp = Type {
            scalar: sig.compute()[1].scalar,
            array: true,
        };
        let r = self.coerce(r, arr_decl, Typmod::None)?;
        let r = self.coerce(r, arr_comp, Typmod::None)?;
        Ok(TypedExpr::new(
            BOOL,
            Node::AnyAll {
                op: cmp,
                all,
                args: Box::new([l, r]),
            },
        ))
    }

    fn plan_case(
        &mut self,
        operand: Option<&ast::Expr>,
        conditions: &[ast::CaseWhen],
        else_result: Option<&ast::Expr>,
    ) -> Result<TypedExpr, PgError> {
        let (binding, test) = match operand {
            Some(o) => {
                let e = self.plan(o)?;
                let e = if e.ty == UNKNOWN {
                    self.coerce(e, TEXT, Typmod::None)?
                } else {
                    e
                };
                let (b, t) = self.share(e);
                (b, Some(t))
            }
            None => (None, None),
        };
        let mut conds = Vec::with_capacity(conditions.len());
        let mut results = Vec::with_capacity(conditions.len() + 1);
        let mut result_asts: Vec<&ast::Expr> = Vec::new();
        for w in conditions {
            let c = self.plan(&w.condition)?;
            let c = match &test {
                Some(t) => self.comparison(CmpOp::Eq, self.fresh(t), c, At::Start(&w.condition))?,
                None => self.coerce_to_bool(c, "CASE/WHEN", &w.condition)?,
            };
            conds.push(c);
            results.push(self.plan(&w.result)?);
            result_asts.push(&w.result);
        }
        let otherwise = match else_result {
            Some(e) => {
                result_asts.push(e);
                self.plan(e)?
            }
            None => TypedExpr::konst(UNKNOWN, Value::Null),
        };
        results.push(otherwise);
        // PostgreSQL considers the ELSE result first when choosing the type.
        let mut refs: Vec<&TypedExpr> = Vec::with_capacity(results.len());
        refs.push(&results[results.len() - 1]);
        refs.extend(results[..results.len() - 1].iter());
        let mut ordered_asts: Vec<Option<&ast::Expr>> = Vec::with_capacity(refs.len());
        if else_result.is_some() {
            ordered_asts.push(result_asts.last().copied());
            ordered_asts.extend(
                result_asts[..result_asts.len() - 1]
                    .iter()
                    .copied()
                    .map(Some),
            );
        } else {
            // No ELSE: the implicit NULL has no position.
            ordered_asts.push(None);
            ordered_asts.extend(result_asts.iter().copied().map(Some));
        }
        let ty = self
            .common_type(&refs, Some("CASE"), &ordered_asts)?
            .unwrap_or(TEXT);
        let mut results = self.coerce_all(results, ty)?;
        let otherwise = results.pop().ok_or_else(|| internal("CASE"))?;
        let whens = conds.into_iter().zip(results).collect();
        let case = TypedExpr::new(
            ty,
            Node::Case {
                whens,
                otherwise: Box::new(otherwise),
            },
        );
        Ok(Self::bind(binding, case))
    }

    fn plan_array(&mut self, elems: &[ast::Expr], whole: &ast::Expr) -> Result<TypedExpr, PgError> {
        if elems.is_empty() {
            let err = PgError::new(
                SqlState::INDETERMINATE_DATATYPE,
                "cannot determine type of empty array",
            )
            .with_hint("Explicitly cast to the desired type, for example ARRAY[]::integer[].");
            return Err(self.err_at(err, At::Start(whole)));
        }
        let mut planned = Vec::with_capacity(elems.len());
        for e in elems {
            if matches!(e, ast::Expr::Array(_)) {
                return Err(feature_not_supported("multidimensional arrays"));
            }
            planned.push(self.plan(e)?);
        }
        if planned.iter().any(|e| e.ty.array) {
            return Err(feature_not_supported("multidimensional arrays"));
        }
        let refs: Vec<&TypedExpr> = planned.iter().collect();
        let asts: Vec<Option<&ast::Expr>> = elems.iter().map(Some).collect();
        let ty = self
            .common_type(&refs, Some("ARRAY"), &asts)?
            .unwrap_or(TEXT);
        let planned = self.coerce_all(planned, ty)?;
        Ok(TypedExpr::new(
            Type {
                scalar: ty.scalar,
                array: true,
            },
            Node::Array(planned),
        ))
    }

    fn plan_sql_value_function(
        &mut self,
        f: SqlValueFunction,
        loc: Location,
    ) -> Result<TypedExpr, PgError> {
        let (func, ty) = match f {
            SqlValueFunction::CurrentUser => (Func::CurrentUser, NAME),
            SqlValueFunction::CurrentCatalog => (Func::CurrentDatabase, NAME),
            SqlValueFunction::CurrentSchema => (Func::CurrentSchema, NAME),
            SqlValueFunction::CurrentDate => (Func::CurrentDate, DATE),
            SqlValueFunction::CurrentTimestamp => (Func::Now, TIMESTAMPTZ),
            SqlValueFunction::LocalTimestamp => (Func::LocalTimestamp, TIMESTAMP),
            SqlValueFunction::LocalTime => (Func::LocalTime, TIME),
            SqlValueFunction::CurrentTime => {
                return Err(self.err_at(
                    feature_not_supported("type time with time zone (current_time)"),
                    At::Loc(loc),
                ))
            }
        };
        Ok(TypedExpr::new(
            ty,
            Node::Op {
                imp: Imp::Func(func),
                args: Vec::new(),
            },
        ))
    }

    fn plan_function(
        &mut self,
        f: &ast::Function,
        whole: &ast::Expr,
    ) -> Result<TypedExpr, PgError> {
        let parts: Vec<String> = f
            .name
            .0
            .iter()
            .map(|p| match p {
                ast::ObjectNamePart::Identifier(id) => ident_name(id),
                ast::ObjectNamePart::Function(pf) => ident_name(&pf.name),
            })
            .collect();
        let name = match parts.as_slice() {
            [n] => n.clone(),
            [schema, n] if schema == "pg_catalog" => n.clone(),
            _ => {
                return Err(self.err_at(
                    PgError::new(
                        SqlState(*b"3F000"),
                        format!("schema \"{}\" does not exist", parts[0]),
                    ),
                    At::Start(whole),
                ))
            }
        };
        if let Some(hook) = self.hook {
            if let Some(planned) = hook.plan_function(f, whole, self)? {
                return Ok(planned);
            }
        }
        if f.over.is_some() || f.filter.is_some() || !f.within_group.is_empty() {
            return Err(feature_not_supported("window and aggregate functions"));
        }
        let arg_list = match &f.args {
            ast::FunctionArguments::None => {
                if let Some(svf) = sql_value_function(&name) {
                    let loc = f.name.span().start;
                    return self.plan_sql_value_function(svf, loc);
                }
                return Err(self.column(&[ast::Ident::new(name)], whole).unwrap_err());
            }
            ast::FunctionArguments::Subquery(_) => return Err(feature_not_supported("subquery")),
            ast::FunctionArguments::List(l) => l,
        };
        if arg_list.duplicate_treatment.is_some() || !arg_list.clauses.is_empty() {
            return Err(feature_not_supported("aggregate arguments"));
        }
        // `current_timestamp(p)` etc.: precision is accepted and ignored.
        if let Some(svf) = sql_value_function(&name) {
            if matches!(
                svf,
                SqlValueFunction::CurrentTimestamp
                    | SqlValueFunction::LocalTimestamp
                    | SqlValueFunction::LocalTime
            ) && arg_list.args.len() == 1
                && f.name.0.len() == 1
            {
                return self.plan_sql_value_function(svf, f.name.span().start);
            }
        }
        let mut asts = Vec::with_capacity(arg_list.args.len());
        for a in &arg_list.args {
            match a {
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => asts.push(e),
                _ => return Err(feature_not_supported(format!("function argument {a}"))),
            }
        }
        let mut args = Vec::with_capacity(asts.len());
        for a in &asts {
            args.push(self.plan(a)?);
        }
        let at = At::Loc(f.name.span().start);
        self.call_function(&name, &mut args, at, Some(&asts))
    }

    fn call_with_asts(
        &mut self,
        name: &str,
        asts: &[&ast::Expr],
        whole: &ast::Expr,
    ) -> Result<TypedExpr, PgError> {
        let mut args = Vec::with_capacity(asts.len());
        for a in asts {
            args.push(self.plan(a)?);
        }
        self.call_function(name, &mut args, At::Start(whole), Some(asts))
    }

    /// Resolves and builds a function call. Variadic and polymorphic builtins (COALESCE,
    /// GREATEST, concat, ...) are handled here; the rest by signature tables in `func`.
    fn call_function(
        &mut self,
        name: &str,
        args: &mut Vec<TypedExpr>,
        at: At,
        asts: Option<&[&ast::Expr]>,
    ) -> Result<TypedExpr, PgError> {
        let asts = asts.unwrap_or(&[]);
        match name {
            "coalesce" | "greatest" | "least" if !args.is_empty() => {
                let context = name.to_uppercase();
                let refs: Vec<&TypedExpr> = args.iter().collect();
                let opt_asts: Vec<Option<&ast::Expr>> = asts.iter().copied().map(Some).collect();
                let ty = self
                    .common_type(&refs, Some(&context), &opt_asts)?
                    .unwrap_or(TEXT);
                let planned = self.coerce_all(std::mem::take(args), ty)?;
                let node = if name == "coalesce" {
                    Node::Coalesce(planned)
                } else {
                    if ty.array || matches!(ty.scalar, Scalar::Json | Scalar::Void) {
                        return Err(self.err_at(undefined_operator("<", Some(ty), ty), at));
                    }
                    Node::MinMax {
                        greatest: name == "greatest",
                        args: planned,
                    }
                };
                return Ok(TypedExpr::new(ty, node));
            }
            "nullif" if args.len() == 2 => {
                let b = args.pop().ok_or_else(|| internal("nullif"))?;
                let a = args.pop().ok_or_else(|| internal("nullif"))?;
                // NULLIF(a, b) is `CASE WHEN a = b THEN NULL ELSE a END` with `a` evaluated
                // once; its type is that of `a` as coerced for the comparison.
                let (binding, aref) = self.share(a);
                let cond = self.comparison(CmpOp::Eq, aref, b, at)?;
                let Node::Op { args: cmp_args, .. } = &cond.node else {
                    return Err(internal("nullif comparison"));
                };
                let result = cmp_args[0].clone();
                let ty = result.ty;
                let case = TypedExpr::new(
                    ty,
                    Node::Case {
                        whens: vec![(cond, TypedExpr::konst(ty, Value::Null))],
                        otherwise: Box::new(result),
                    },
                );
                return Ok(Self::bind(binding, case));
            }
            "concat" | "concat_ws" if !args.is_empty() => {
                let func = if name == "concat" {
                    Func::Concat
                } else {
                    Func::ConcatWs
                };
                let mut planned = Vec::with_capacity(args.len());
                for (i, a) in std::mem::take(args).into_iter().enumerate() {
                    // concat's arguments are "any": unknown literals become text (parameters
                    // stay unknown, as in PostgreSQL); the separator of concat_ws is text.
                    let literal = a.ty == UNKNOWN && matches!(a.node, Node::Const(_));
                    let a = if literal || (i == 0 && func == Func::ConcatWs) {
                        if func == Func::ConcatWs && i == 0 && !can_coerce_implicit(a.ty, TEXT) {
                            let types: Vec<Type> =
                                planned.iter().map(|e: &TypedExpr| e.ty).collect();
                            return Err(self.err_at(undefined_function(name, &types), at));
                        }
                        self.coerce(a, TEXT, Typmod::None)?
                    } else {
                        a
                    };
                    planned.push(a);
                }
                return Ok(TypedExpr::new(
                    TEXT,
                    Node::Op {
                        imp: Imp::Func(func),
                        args: planned,
                    },
                ));
            }
            _ => {}
        }
        let sigs = func::signatures(name);
        let inputs: Vec<Type> = args.iter().map(|a| a.ty).collect();
        let sig =
            match Self::resolve(&inputs, sigs) {
                Resolved::One(s) => *s,
                Resolved::None => return Err(self.err_at(undefined_function(name, &inputs), at)),
                Resolved::Ambiguous => {
                    let err = PgError::new(
                    SqlState::AMBIGUOUS_FUNCTION,
                    format!("function {} is not unique", function_signature(name, &inputs)),
                )
                .with_hint(
                    "Could not choose a best candidate function. You might need to add explicit \
                     type casts.",
                );
                    return Err(self.err_at(err, at));
                }
            };
        let planned = self.apply_sig(&sig, std::mem::take(args))?;
        Ok(TypedExpr::new(
            sig.ret,
            Node::Op {
                imp: sig.imp,
                args: planned,
            },
        ))
    }

    // ----- queries -----------------------------------------------------------------------------

    fn plan_query(&mut self, q: &ast::Query) -> Result<ConstSelect, PgError> {
        if q.with.is_some() {
            return Err(feature_not_supported("WITH"));
        }
        if q.order_by.is_some() {
            return Err(feature_not_supported("ORDER BY without FROM"));
        }
        if q.fetch.is_some() || !q.locks.is_empty() || q.for_clause.is_some() {
            return Err(feature_not_supported("FETCH / FOR clauses"));
        }
        if q.settings.is_some() || q.format_clause.is_some() || !q.pipe_operators.is_empty() {
            return Err(feature_not_supported("this query syntax"));
        }
        let mut out = match q.body.as_ref() {
            ast::SetExpr::Select(s) => self.plan_select(s)?,
            ast::SetExpr::Values(v) => self.plan_values(v)?,
            ast::SetExpr::Query(inner) => self.plan_query(inner)?,
            ast::SetExpr::SetOperation { .. } => {
                return Err(feature_not_supported("UNION/INTERSECT/EXCEPT"))
            }
            _ => return Err(feature_not_supported("this query form")),
        };
        if let Some(limit) = &q.limit_clause {
            let (limit, offset) = match limit {
                ast::LimitClause::LimitOffset {
                    limit,
                    offset,
                    limit_by,
                } => {
                    if !limit_by.is_empty() {
                        return Err(feature_not_supported("LIMIT BY"));
                    }
                    (limit.as_ref(), offset.as_ref().map(|o| &o.value))
                }
                ast::LimitClause::OffsetCommaLimit { .. } => {
                    return Err(PgError::new(
                        SqlState::SYNTAX_ERROR,
                        "LIMIT #,# syntax is not supported",
                    ))
                }
            };
            if let Some(l) = limit {
                // LIMIT ALL parses as NULL.
                let e = self.plan(l)?;
                out.limit = Some(self.limit_expr(e, "LIMIT", l)?);
            }
            if let Some(o) = offset {
                let e = self.plan(o)?;
                out.offset = Some(self.limit_expr(e, "OFFSET", o)?);
            }
        }
        Ok(out)
    }

    fn limit_expr(
        &mut self,
        e: TypedExpr,
        what: &str,
        a: &ast::Expr,
    ) -> Result<TypedExpr, PgError> {
        // PostgreSQL coerces LIMIT/OFFSET arguments with assignment rules (`limit 1.5` is 2).
        if !assignment_cast_allowed(e.ty, INT8) {
            let err = datatype_mismatch(format!(
                "argument of {what} must be type bigint, not type {}",
                type_display_name(e.ty)
            ));
            return Err(self.err_at(err, At::Start(a)));
        }
        let e = self.coerce(e, INT8, Typmod::None)?;
        fold(e, None)
    }

    fn plan_select(&mut self, s: &ast::Select) -> Result<ConstSelect, PgError> {
        if !s.from.is_empty() {
            return Err(feature_not_supported("FROM in a constant SELECT"));
        }
        let group_by_empty = match &s.group_by {
            ast::GroupByExpr::Expressions(e, m) => e.is_empty() && m.is_empty(),
            ast::GroupByExpr::All(_) => false,
        };
        if s.distinct.is_some()
            || s.top.is_some()
            || s.into.is_some()
            || !group_by_empty
            || s.having.is_some()
            || !s.named_window.is_empty()
            || s.qualify.is_some()
            || !s.lateral_views.is_empty()
            || s.prewhere.is_some()
            || !s.connect_by.is_empty()
        {
            return Err(feature_not_supported("this SELECT clause without FROM"));
        }
        let mut columns = Vec::with_capacity(s.projection.len());
        let mut row = Vec::with_capacity(s.projection.len());
        for item in &s.projection {
            let (e, name) = match item {
                ast::SelectItem::UnnamedExpr(e) => (e, column_name(e)),
                ast::SelectItem::ExprWithAlias { expr, alias } => (expr, ident_name(alias)),
                ast::SelectItem::Wildcard(_) | ast::SelectItem::QualifiedWildcard(..) => {
                    return Err(PgError::new(
                        SqlState::SYNTAX_ERROR,
                        "SELECT * with no tables specified is not valid",
                    ))
                }
                other => return Err(feature_not_supported(format!("select item {other}"))),
            };
            let planned = self.plan(e)?;
            columns.push((name, planned.ty));
            row.push(planned);
        }
        // Unknown-typed items become text only after the whole list is analysed, so a
        // parameter used elsewhere in the list keeps the type inferred there
        // (`resolveTargetListUnknowns`).
        let row = row
            .into_iter()
            .map(|e| self.resolve_unknown_output(e))
            .collect::<Result<Vec<_>, _>>()?;
        let filter = match &s.selection {
            Some(w) => {
                let e = self.plan(w)?;
                Some(self.coerce_to_bool(e, "WHERE", w)?)
            }
            None => None,
        };
        let select = ConstSelect {
            columns,
            rows: vec![row],
            filter,
            limit: None,
            offset: None,
        };
        // Fold after the whole statement is analysed, as PostgreSQL plans after parse analysis.
        if self.fold {
            select.folded()
        } else {
            Ok(select)
        }
    }

    fn plan_values(&mut self, v: &ast::Values) -> Result<ConstSelect, PgError> {
        let width = v.rows.first().map_or(0, |r| r.content.len());
        let mut rows: Vec<Vec<TypedExpr>> = Vec::with_capacity(v.rows.len());
        for r in &v.rows {
            if r.content.len() != width {
                let err = PgError::new(
                    SqlState::SYNTAX_ERROR,
                    "VALUES lists must all be the same length",
                );
                return Err(self.err_at(err, r.content.first().map_or(At::Nowhere, At::Start)));
            }
            let mut row = Vec::with_capacity(width);
            for e in &r.content {
                row.push(self.plan(e)?);
            }
            rows.push(row);
        }
        let mut columns = Vec::with_capacity(width);
        for c in 0..width {
            let refs: Vec<&TypedExpr> = rows.iter().map(|r| &r[c]).collect();
            let asts: Vec<Option<&ast::Expr>> =
                v.rows.iter().map(|r| Some(&r.content[c])).collect();
            let ty = self
                .common_type(&refs, Some("VALUES"), &asts)?
                .unwrap_or(TEXT);
            for row in rows.iter_mut() {
                let e = std::mem::replace(&mut row[c], TypedExpr::konst(ty, Value::Null));
                row[c] = self.coerce_implicit(e, ty)?;
            }
            columns.push((format!("column{}", c + 1), ty));
        }
        let select = ConstSelect {
            columns,
            rows,
            filter: None,
            limit: None,
            offset: None,
        };
        if self.fold {
            select.folded()
        } else {
            Ok(select)
        }
    }
}

/// True if `token` occurs in `text` at `i` (a word only at word boundaries, any case).
fn token_at(text: &[char], i: usize, token: &str) -> bool {
    let word = token.chars().all(|c| c.is_ascii_alphabetic());
    let mut j = i;
    for t in token.chars() {
        match text.get(j) {
            Some(c) if (word && c.eq_ignore_ascii_case(&t)) || *c == t => j += 1,
            _ => return false,
        }
    }
    if word {
        let ident = |c: Option<&char>| c.is_some_and(|c| c.is_alphanumeric() || *c == '_');
        if ident(text.get(j)) || (i > 0 && ident(text.get(i - 1))) {
            return false;
        }
    }
    true
}

fn cmp_op_from_symbol(s: &str) -> Option<CmpOp> {
    Some(match s {
        "=" => CmpOp::Eq,
        "<>" => CmpOp::Ne,
        "<" => CmpOp::Lt,
        "<=" => CmpOp::Le,
        ">" => CmpOp::Gt,
        ">=" => CmpOp::Ge,
        _ => return None,
    })
}

/// SQL-standard functions written without parentheses (PostgreSQL's SQLValueFunction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SqlValueFunction {
    CurrentUser,
    CurrentCatalog,
    CurrentSchema,
    CurrentDate,
    CurrentTime,
    CurrentTimestamp,
    LocalTime,
    LocalTimestamp,
}

fn sql_value_function(name: &str) -> Option<SqlValueFunction> {
    Some(match name {
        "current_user" | "session_user" | "user" | "current_role" => SqlValueFunction::CurrentUser,
        "current_catalog" => SqlValueFunction::CurrentCatalog,
        "current_schema" => SqlValueFunction::CurrentSchema,
        "current_date" => SqlValueFunction::CurrentDate,
        "current_time" => SqlValueFunction::CurrentTime,
        "current_timestamp" => SqlValueFunction::CurrentTimestamp,
        "localtime" => SqlValueFunction::LocalTime,
        "localtimestamp" => SqlValueFunction::LocalTimestamp,
        _ => return None,
    })
}

fn string_literal(v: &ast::Value) -> Option<&str> {
    use ast::Value as V;
    match v {
        V::SingleQuotedString(s)
        | V::EscapedStringLiteral(s)
        | V::UnicodeStringLiteral(s)
        | V::NationalStringLiteral(s)
        | V::TripleSingleQuotedString(s) => Some(s),
        V::DollarQuotedString(d) => Some(&d.value),
        _ => None,
    }
}

/// Rewrites `op (a ^ b ^ c)` as `((op a) ^ b) ^ c`.
fn sign_leftmost_power_operand(op: ast::UnaryOperator, e: &ast::Expr) -> ast::Expr {
    match e {
        ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::PGExp,
            right,
        } => ast::Expr::BinaryOp {
            left: Box::new(sign_leftmost_power_operand(op, left)),
            op: ast::BinaryOperator::PGExp,
            right: right.clone(),
        },
        other => ast::Expr::UnaryOp {
            op,
            expr: Box::new(other.clone()),
        },
    }
}

/// A numeric literal under any number of parentheses and unary minus signs: the literal and
/// whether an odd number of minus signs applies.
fn signed_literal(e: &ast::Expr) -> Option<(&ast::ValueWithSpan, bool)> {
    match e {
        ast::Expr::Value(v) if matches!(v.value, ast::Value::Number(..)) => Some((v, false)),
        ast::Expr::Nested(inner) => signed_literal(inner),
        ast::Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => signed_literal(expr).map(|(v, neg)| (v, !neg)),
        _ => None,
    }
}

/// Types a numeric literal as PostgreSQL's scanner does: int4 if it fits, else int8, else
/// numeric; anything with a point or exponent is numeric.
fn number_literal(s: &str, negative: bool) -> Result<TypedExpr, PgError> {
    let text = if negative {
        format!("-{s}")
    } else {
        s.to_string()
    };
    if s.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(v) = text.parse::<i32>() {
            return Ok(TypedExpr::konst(INT4, Value::Int4(v)));
        }
        if let Ok(v) = text.parse::<i64>() {
            return Ok(TypedExpr::konst(INT8, Value::Int8(v)));
        }
    }
    let n = Numeric::parse(&text)?;
    Ok(TypedExpr::konst(NUMERIC, Value::Numeric(n)))
}

/// Maps a sqlparser type name to a ringwire type and its modifier.
fn resolve_data_type(dt: &ast::DataType) -> Result<(Type, Typmod), PgError> {
    use ast::DataType as D;
    let char_len = |l: &Option<ast::CharacterLength>| match l {
        Some(ast::CharacterLength::IntegerLength { length, .. }) => Some(*length as u32),
        _ => None,
    };
    let numeric_mod = |info: &ast::ExactNumberInfo| -> Result<Typmod, PgError> {
        Ok(match info {
            ast::ExactNumberInfo::None => Typmod::None,
            ast::ExactNumberInfo::Precision(p) => numeric_typmod(*p, 0)?,
            ast::ExactNumberInfo::PrecisionAndScale(p, s) => numeric_typmod(*p, *s)?,
        })
    };
    Ok(match dt {
        D::Int(_) | D::Integer(_) | D::Int4(_) => (INT4, Typmod::None),
        D::SmallInt(_) | D::Int2(_) => (INT2, Typmod::None),
        D::BigInt(_) | D::Int8(_) => (INT8, Typmod::None),
        D::Real | D::Float4 => (FLOAT4, Typmod::None),
        D::DoublePrecision | D::Float8 | D::Double(ast::ExactNumberInfo::None) => {
            (FLOAT8, Typmod::None)
        }
        D::Float(info) => match info {
            ast::ExactNumberInfo::None => (FLOAT8, Typmod::None),
            ast::ExactNumberInfo::Precision(p) | ast::ExactNumberInfo::PrecisionAndScale(p, _) => {
                match *p {
                    0 => {
                        return Err(PgError::new(
                            SqlState::INVALID_PARAMETER_VALUE,
                            "precision for type float must be at least 1 bit",
                        ))
                    }
                    1..=24 => (FLOAT4, Typmod::None),
                    25..=53 => (FLOAT8, Typmod::None),
                    _ => {
                        return Err(PgError::new(
                            SqlState::INVALID_PARAMETER_VALUE,
                            "precision for type float must be less than 54 bits",
                        ))
                    }
                }
            }
        },
        D::Numeric(info) | D::Decimal(info) | D::Dec(info) => (NUMERIC, numeric_mod(info)?),
        D::Bool | D::Boolean => (BOOL, Typmod::None),
        D::Text => (TEXT, Typmod::None),
        D::Varchar(l) | D::CharacterVarying(l) | D::CharVarying(l) => {
            (VARCHAR, char_len(l).map_or(Typmod::None, Typmod::Varchar))
        }
        D::Char(l) | D::Character(l) => (BPCHAR, Typmod::Bpchar(char_len(l).unwrap_or(1))),
        D::Bytea => (BYTEA, Typmod::None),
        D::Uuid => (UUID, Typmod::None),
        D::JSON => (JSON, Typmod::None),
        D::JSONB => (JSONB, Typmod::None),
        D::Date => (DATE, Typmod::None),
        D::Time(_, tz) => match tz {
            ast::TimezoneInfo::WithTimeZone | ast::TimezoneInfo::Tz => {
                return Err(feature_not_supported("type time with time zone"))
            }
            _ => (TIME, Typmod::None),
        },
        D::Timestamp(_, tz) => match tz {
            ast::TimezoneInfo::WithTimeZone | ast::TimezoneInfo::Tz => (TIMESTAMPTZ, Typmod::None),
            _ => (TIMESTAMP, Typmod::None),
        },
        D::Interval { .. } => (INTERVAL, Typmod::None),
        D::Array(elem) => {
            let inner = match elem {
                ast::ArrayElemTypeDef::SquareBracket(t, _)
                | ast::ArrayElemTypeDef::AngleBracket(t)
                | ast::ArrayElemTypeDef::Parenthesis(t)
                | ast::ArrayElemTypeDef::Qualified(t, _) => t,
                ast::ArrayElemTypeDef::None => {
                    return Err(feature_not_supported("array type without element type"))
                }
            };
            let (t, typmod) = resolve_data_type(inner)?;
            (
                Type {
                    scalar: t.scalar,
                    array: true,
                },
                typmod,
            )
        }
        D::Custom(name, mods) => {
            let last = name.0.last().map(|p| match p {
                ast::ObjectNamePart::Identifier(id) => ident_name(id),
                ast::ObjectNamePart::Function(f) => ident_name(&f.name),
            });
            let last = last.unwrap_or_default();
            let schema_ok = name.0.len() == 1
                || (name.0.len() == 2 && name.0[0].to_string().eq_ignore_ascii_case("pg_catalog"));
            let ty = if schema_ok { custom_type(&last) } else { None };
            if let [ast::ObjectNamePart::Identifier(schema), _] = name.0.as_slice() {
                let schema = ident_name(schema);
                if schema != "pg_catalog" && schema != "public" {
                    return Err(PgError::new(
                        SqlState(*b"3F000"),
                        format!("schema \"{schema}\" does not exist"),
                    ));
                }
            }
            let Some(ty) = ty else {
                // PostgreSQL names the type as it was read: unquoted parts lowercased.
                let written: Vec<String> = name
                    .0
                    .iter()
                    .map(|p| match p {
                        ast::ObjectNamePart::Identifier(id) => ident_name(id),
                        ast::ObjectNamePart::Function(f) => ident_name(&f.name),
                    })
                    .collect();
                return Err(PgError::new(
                    SqlState::UNDEFINED_OBJECT,
                    format!("type \"{}\" does not exist", written.join(".")),
                ));
            };
            let typmod = match (ty.scalar, mods.as_slice()) {
                (Scalar::Varchar, [n]) => Typmod::Varchar(n.parse().unwrap_or(0)),
                (Scalar::Bpchar, [n]) => Typmod::Bpchar(n.parse().unwrap_or(1)),
                (Scalar::Numeric, [p]) => numeric_typmod(p.parse().unwrap_or(0), 0)?,
                (Scalar::Numeric, [p, s]) => {
                    numeric_typmod(p.parse().unwrap_or(0), s.parse().unwrap_or(0))?
                }
                _ => Typmod::None,
            };
            (ty, typmod)
        }
        other => {
            return Err(PgError::new(
                SqlState::UNDEFINED_OBJECT,
                format!(
                    "type \"{}\" does not exist",
                    other.to_string().to_lowercase()
                ),
            ))
        }
    })
}

fn numeric_typmod(precision: u64, scale: i64) -> Result<Typmod, PgError> {
    if !(1..=1000).contains(&precision) {
        return Err(PgError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("NUMERIC precision {precision} must be between 1 and 1000"),
        ));
    }
    if scale < 0 || scale as u64 > precision {
        return Err(PgError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("NUMERIC scale {scale} must be between 0 and precision {precision}"),
        ));
    }
    Ok(Typmod::Numeric {
        precision: precision as u32,
        scale: scale as u32,
    })
}

/// Type names that sqlparser leaves as `Custom`.
fn custom_type(name: &str) -> Option<Type> {
    Some(match name {
        "int2" | "smallint" => INT2,
        "int4" | "int" | "integer" => INT4,
        "int8" | "bigint" => INT8,
        "float4" | "real" => FLOAT4,
        "float8" => FLOAT8,
        "numeric" | "decimal" => NUMERIC,
        "bool" | "boolean" => BOOL,
        "text" => TEXT,
        "varchar" => VARCHAR,
        "bpchar" => BPCHAR,
        "name" => NAME,
        "bytea" => BYTEA,
        "date" => DATE,
        "time" => TIME,
        "timestamp" => TIMESTAMP,
        "timestamptz" => TIMESTAMPTZ,
        "interval" => INTERVAL,
        "uuid" => UUID,
        "json" => JSON,
        "jsonb" => JSONB,
        "void" => VOID,
        "unknown" => UNKNOWN,
        _ => return None,
    })
}

/// The name a cast gives its output column: the type's `typname` as written, with SQL-standard
/// spellings mapped as PostgreSQL's grammar does (`integer` -> `int4`, `double precision` ->
/// `float8`).
fn data_type_colname(dt: &ast::DataType) -> String {
    use ast::DataType as D;
    let s = match dt {
        D::Int(_) | D::Integer(_) | D::Int4(_) => "int4",
        D::SmallInt(_) | D::Int2(_) => "int2",
        D::BigInt(_) | D::Int8(_) => "int8",
        D::Real | D::Float4 => "float4",
        D::DoublePrecision | D::Float8 | D::Double(_) => "float8",
        D::Float(_) => match resolve_data_type(dt) {
            Ok((t, _)) => typname(t.scalar),
            Err(_) => "float8",
        },
        D::Numeric(_) | D::Decimal(_) | D::Dec(_) => "numeric",
        D::Bool | D::Boolean => "bool",
        D::Text => "text",
        D::Varchar(_) | D::CharacterVarying(_) | D::CharVarying(_) => "varchar",
        D::Char(_) | D::Character(_) => "bpchar",
        D::Bytea => "bytea",
        D::Uuid => "uuid",
        D::JSON => "json",
        D::JSONB => "jsonb",
        D::Date => "date",
        D::Time(_, ast::TimezoneInfo::WithTimeZone | ast::TimezoneInfo::Tz) => "timetz",
        D::Time(..) => "time",
        D::Timestamp(_, ast::TimezoneInfo::WithTimeZone | ast::TimezoneInfo::Tz) => "timestamptz",
        D::Timestamp(..) => "timestamp",
        D::Interval { .. } => "interval",
        D::Array(elem) => {
            return match elem {
                ast::ArrayElemTypeDef::SquareBracket(t, _)
                | ast::ArrayElemTypeDef::AngleBracket(t)
                | ast::ArrayElemTypeDef::Parenthesis(t)
                | ast::ArrayElemTypeDef::Qualified(t, _) => data_type_colname(t),
                ast::ArrayElemTypeDef::None => "array".to_string(),
            }
        }
        D::Custom(name, _) => {
            return match name.0.last() {
                Some(ast::ObjectNamePart::Identifier(id)) => ident_name(id),
                Some(ast::ObjectNamePart::Function(f)) => ident_name(&f.name),
                None => "?column?".to_string(),
            }
        }
        other => return other.to_string().to_lowercase(),
    };
    s.to_string()
}

/// `FigureColnameInternal`: 0 = no name, 1 = a type name from a cast, 2 = a real name.
fn figure_colname(expr: &ast::Expr, name: &mut String) -> u8 {
    use ast::Expr as E;
    let set = |name: &mut String, s: &str| {
        name.clear();
        name.push_str(s);
    };
    match expr {
        E::Nested(e) | E::Collate { expr: e, .. } => figure_colname(e, name),
        E::Identifier(id) => {
            set(name, &ident_name(id));
            2
        }
        E::CompoundIdentifier(ids) => match ids.last() {
            Some(id) => {
                set(name, &ident_name(id));
                2
            }
            None => 0,
        },
        E::CompoundFieldAccess { root, .. } => figure_colname(root, name),
        E::Function(f) => {
            match f.name.0.last() {
                Some(ast::ObjectNamePart::Identifier(id)) => set(name, &ident_name(id)),
                Some(ast::ObjectNamePart::Function(pf)) => set(name, &ident_name(&pf.name)),
                None => return 0,
            }
            // SQL-standard spellings map to their SQLValueFunction name.
            if matches!(f.args, ast::FunctionArguments::None) && name == "current_catalog" {
                set(name, "current_catalog");
            }
            2
        }
        E::Cast {
            expr: inner,
            data_type,
            ..
        } => {
            let strength = figure_colname(inner, name);
            if strength <= 1 {
                set(name, &data_type_colname(data_type));
                return 1;
            }
            strength
        }
        E::TypedString(ts) => {
            set(name, &data_type_colname(&ts.data_type));
            1
        }
        E::Interval(_) => {
            set(name, "interval");
            1
        }
        E::Case {
            conditions: _,
            else_result,
            ..
        } => {
            let strength = match else_result {
                Some(e) => figure_colname(e, name),
                None => 0,
            };
            if strength <= 1 {
                set(name, "case");
                return 1;
            }
            strength
        }
        E::Array(_) => {
            set(name, "array");
            2
        }
        E::Substring { shorthand, .. } => {
            set(name, if *shorthand { "substr" } else { "substring" });
            2
        }
        E::Trim { trim_where, .. } => {
            let n = match trim_where {
                Some(ast::TrimWhereField::Leading) => "ltrim",
                Some(ast::TrimWhereField::Trailing) => "rtrim",
                _ => "btrim",
            };
            set(name, n);
            2
        }
        E::Position { .. } => {
            set(name, "position");
            2
        }
        E::Ceil { .. } => {
            set(name, "ceil");
            2
        }
        E::Floor { .. } => {
            set(name, "floor");
            2
        }
        E::Extract { .. } => {
            set(name, "extract");
            2
        }
        E::AtTimeZone { .. } => {
            set(name, "timezone");
            2
        }
        E::Overlay { .. } => {
            set(name, "overlay");
            2
        }
        E::Exists { .. } => {
            set(name, "exists");
            2
        }
        E::Tuple(_) => {
            set(name, "row");
            2
        }
        _ => 0,
    }
}

// ---------------------------------------------------------------------------------------------
// Operator tables
// ---------------------------------------------------------------------------------------------

const INTS: [(Type, Num); 3] = [(INT2, Num::I2), (INT4, Num::I4), (INT8, Num::I8)];

fn wider_int(a: Num, b: Num) -> Num {
    let rank = |n: Num| match n {
        Num::I2 => 0,
        Num::I4 => 1,
        _ => 2,
    };
    if rank(a) >= rank(b) {
        a
    } else {
        b
    }
}

/// `+ - * /` (and `%`, `^` subsets) over the numeric types, including PostgreSQL's cross-width
/// integer and float4/float8 operators.
fn arith_sigs(op: ArOp, out: &mut Vec<Sig>) {
    match op {
        ArOp::Mod => {
            for (t, n) in INTS {
                out.push(Sig::new(&[t, t], t, Imp::Arith(op, n)));
            }
            out.push(Sig::new(
                &[NUMERIC, NUMERIC],
                NUMERIC,
                Imp::Arith(op, Num::N),
            ));
            return;
        }
        ArOp::Pow => {
            out.push(Sig::new(&[FLOAT8, FLOAT8], FLOAT8, Imp::Arith(op, Num::F8)));
            out.push(Sig::new(
                &[NUMERIC, NUMERIC],
                NUMERIC,
                Imp::Arith(op, Num::N),
            ));
            return;
        }
        _ => {}
    }
    for (lt, ln) in INTS {
        for (rt, rn) in INTS {
            let w = wider_int(ln, rn);
            out.push(Sig::widened(
                &[lt, rt],
                &[w.ty(), w.ty()],
                w.ty(),
                Imp::Arith(op, w),
            ));
        }
    }
    out.push(Sig::new(&[FLOAT4, FLOAT4], FLOAT4, Imp::Arith(op, Num::F4)));
    out.push(Sig::new(&[FLOAT8, FLOAT8], FLOAT8, Imp::Arith(op, Num::F8)));
    out.push(Sig::widened(
        &[FLOAT4, FLOAT8],
        &[FLOAT8, FLOAT8],
        FLOAT8,
        Imp::Arith(op, Num::F8),
    ));
    out.push(Sig::widened(
        &[FLOAT8, FLOAT4],
        &[FLOAT8, FLOAT8],
        FLOAT8,
        Imp::Arith(op, Num::F8),
    ));
    out.push(Sig::new(
        &[NUMERIC, NUMERIC],
        NUMERIC,
        Imp::Arith(op, Num::N),
    ));
}

/// Candidates of a binary operator (empty for an unknown operator).
fn operator_sigs(op: &str) -> &'static [Sig] {
    static TABLE: std::sync::OnceLock<SigTable> = std::sync::OnceLock::new();
    const OPERATORS: &[&str] = &[
        "+", "-", "*", "/", "%", "^", "=", "<>", "<", "<=", ">", ">=",
    ];
    lookup_sigs(&TABLE, OPERATORS, build_operator_sigs, op)
}

fn build_operator_sigs(op: &str) -> Vec<Sig> {
    let mut out = Vec::new();
    let dt = |args: &[Type], compute: &[Type], ret: Type, op: DtOp| {
        Sig::widened(args, compute, ret, Imp::Dt(op))
    };
    match op {
        "+" => {
            arith_sigs(ArOp::Add, &mut out);
            out.extend([
                dt(&[DATE, INT4], &[DATE, INT4], DATE, DtOp::DatePlusDays),
                dt(&[INT4, DATE], &[INT4, DATE], DATE, DtOp::DaysPlusDate),
                dt(
                    &[DATE, INTERVAL],
                    &[TIMESTAMP, INTERVAL],
                    TIMESTAMP,
                    DtOp::TsPlusIv,
                ),
                dt(
                    &[INTERVAL, DATE],
                    &[INTERVAL, TIMESTAMP],
                    TIMESTAMP,
                    DtOp::IvPlusTs,
                ),
                dt(&[DATE, TIME], &[DATE, TIME], TIMESTAMP, DtOp::DatePlusTime),
                dt(&[TIME, DATE], &[TIME, DATE], TIMESTAMP, DtOp::TimePlusDate),
                dt(&[TIME, INTERVAL], &[TIME, INTERVAL], TIME, DtOp::TimePlusIv),
                dt(&[INTERVAL, TIME], &[INTERVAL, TIME], TIME, DtOp::IvPlusTime),
                dt(
                    &[TIMESTAMP, INTERVAL],
                    &[TIMESTAMP, INTERVAL],
                    TIMESTAMP,
                    DtOp::TsPlusIv,
                ),
                dt(
                    &[INTERVAL, TIMESTAMP],
                    &[INTERVAL, TIMESTAMP],
                    TIMESTAMP,
                    DtOp::IvPlusTs,
                ),
                dt(
                    &[TIMESTAMPTZ, INTERVAL],
                    &[TIMESTAMPTZ, INTERVAL],
                    TIMESTAMPTZ,
                    DtOp::TstzPlusIv,
                ),
                dt(
                    &[INTERVAL, TIMESTAMPTZ],
                    &[INTERVAL, TIMESTAMPTZ],
                    TIMESTAMPTZ,
                    DtOp::IvPlusTstz,
                ),
                dt(
                    &[INTERVAL, INTERVAL],
                    &[INTERVAL, INTERVAL],
                    INTERVAL,
                    DtOp::IvPlusIv,
                ),
            ]);
        }
        "-" => {
            arith_sigs(ArOp::Sub, &mut out);
            out.extend([
                dt(&[DATE, INT4], &[DATE, INT4], DATE, DtOp::DateMinusDays),
                dt(&[DATE, DATE], &[DATE, DATE], INT4, DtOp::DateMinusDate),
                dt(
                    &[DATE, INTERVAL],
                    &[TIMESTAMP, INTERVAL],
                    TIMESTAMP,
                    DtOp::TsMinusIv,
                ),
                dt(&[TIME, TIME], &[TIME, TIME], INTERVAL, DtOp::TimeMinusTime),
                dt(
                    &[TIME, INTERVAL],
                    &[TIME, INTERVAL],
                    TIME,
                    DtOp::TimeMinusIv,
                ),
                dt(
                    &[TIMESTAMP, TIMESTAMP],
                    &[TIMESTAMP, TIMESTAMP],
                    INTERVAL,
                    DtOp::TsMinusTs,
                ),
                dt(
                    &[TIMESTAMP, INTERVAL],
                    &[TIMESTAMP, INTERVAL],
                    TIMESTAMP,
                    DtOp::TsMinusIv,
                ),
                dt(
                    &[TIMESTAMPTZ, TIMESTAMPTZ],
                    &[TIMESTAMPTZ, TIMESTAMPTZ],
                    INTERVAL,
                    DtOp::TstzMinusTstz,
                ),
                dt(
                    &[TIMESTAMPTZ, INTERVAL],
                    &[TIMESTAMPTZ, INTERVAL],
                    TIMESTAMPTZ,
                    DtOp::TstzMinusIv,
                ),
                dt(
                    &[INTERVAL, INTERVAL],
                    &[INTERVAL, INTERVAL],
                    INTERVAL,
                    DtOp::IvMinusIv,
                ),
            ]);
        }
        "*" => {
            arith_sigs(ArOp::Mul, &mut out);
            out.extend([
                dt(
                    &[INTERVAL, FLOAT8],
                    &[INTERVAL, FLOAT8],
                    INTERVAL,
                    DtOp::IvMulF8,
                ),
                dt(
                    &[FLOAT8, INTERVAL],
                    &[FLOAT8, INTERVAL],
                    INTERVAL,
                    DtOp::F8MulIv,
                ),
            ]);
        }
        "/" => {
            arith_sigs(ArOp::Div, &mut out);
            out.push(dt(
                &[INTERVAL, FLOAT8],
                &[INTERVAL, FLOAT8],
                INTERVAL,
                DtOp::IvDivF8,
            ));
        }
        "%" => arith_sigs(ArOp::Mod, &mut out),
        "^" => arith_sigs(ArOp::Pow, &mut out),
        "=" | "<>" | "<" | "<=" | ">" | ">=" => {
            let Some(cmp) = cmp_op_from_symbol(op) else {
                return out;
            };
            let imp = Imp::Cmp(cmp);
            for t in [
                BOOL,
                FLOAT4,
                FLOAT8,
                NUMERIC,
                TEXT,
                NAME,
                BPCHAR,
                BYTEA,
                DATE,
                TIME,
                TIMESTAMP,
                TIMESTAMPTZ,
                INTERVAL,
                UUID,
                JSONB,
            ] {
                out.push(Sig::new(&[t, t], BOOL, imp));
            }
            for (lt, ln) in INTS {
                for (rt, rn) in INTS {
                    let w = wider_int(ln, rn).ty();
                    out.push(Sig::widened(&[lt, rt], &[w, w], BOOL, imp));
                }
            }
            let cross = [
                (FLOAT4, FLOAT8, FLOAT8),
                (NAME, TEXT, TEXT),
                (DATE, TIMESTAMP, TIMESTAMP),
                (DATE, TIMESTAMPTZ, TIMESTAMPTZ),
                (TIMESTAMP, TIMESTAMPTZ, TIMESTAMPTZ),
            ];
            for (a, b, w) in cross {
                out.push(Sig::widened(&[a, b], &[w, w], BOOL, imp));
                out.push(Sig::widened(&[b, a], &[w, w], BOOL, imp));
            }
        }
        _ => {}
    }
    out
}

/// Candidates of a prefix operator.
fn unary_sigs(op: &str) -> &'static [Sig] {
    static TABLE: std::sync::OnceLock<SigTable> = std::sync::OnceLock::new();
    lookup_sigs(&TABLE, &["-", "+"], build_unary_sigs, op)
}

fn build_unary_sigs(op: &str) -> Vec<Sig> {
    let nums = [
        (INT2, Num::I2),
        (INT4, Num::I4),
        (INT8, Num::I8),
        (FLOAT4, Num::F4),
        (FLOAT8, Num::F8),
        (NUMERIC, Num::N),
    ];
    let mut out = Vec::new();
    match op {
        "-" => {
            for (t, n) in nums {
                out.push(Sig::new(&[t], t, Imp::Neg(n)));
            }
            out.push(Sig::new(&[INTERVAL], INTERVAL, Imp::Dt(DtOp::IvNeg)));
        }
        "+" => {
            for (t, _) in nums {
                out.push(Sig::new(&[t], t, Imp::Identity));
            }
        }
        _ => {}
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Constant folding
// ---------------------------------------------------------------------------------------------

/// A session for plan-time evaluation: folding only evaluates immutable nodes, which never
/// read the session, so reaching any of these methods other than `text_context` is a bug.
struct FoldSession {
    text: TextContext,
}

impl SessionInfo for FoldSession {
    fn current_setting(&self, _: &str) -> Option<String> {
        debug_assert!(false, "folding read a setting");
        None
    }
    fn text_context(&self) -> &TextContext {
        &self.text
    }
    fn database(&self) -> &str {
        debug_assert!(false, "folding read the database");
        ""
    }
    fn user(&self) -> &str {
        debug_assert!(false, "folding read the user");
        ""
    }
    fn backend_pid(&self) -> i32 {
        debug_assert!(false, "folding read the pid");
        0
    }
    fn stamps(&self) -> Stamps {
        debug_assert!(false, "folding read the clock");
        Stamps::default()
    }
}

fn eval_const(e: &TypedExpr, case: Option<&Value>) -> Result<Value, PgError> {
    let session = FoldSession {
        text: TextContext::default(),
    };
    let mut env = EvalEnv {
        params: &[],
        row: &[],
        session: &session,
        sleep_us: 0,
        notifies: Vec::new(),
    };
    e.ev(&mut env, case)
}

/// True if a cast between these types is immutable (no time zone or DateStyle dependence).
fn cast_immutable(from: Type, to: Type) -> bool {
    let tz_or_style = |t: Type| {
        matches!(
            t.scalar,
            Scalar::Timestamptz
                | Scalar::Date
                | Scalar::Time
                | Scalar::Timestamp
                | Scalar::Interval
                | Scalar::Float4
                | Scalar::Float8
                | Scalar::Unknown
                | Scalar::Bytea
                | Scalar::Json
                | Scalar::Jsonb
        )
    };
    let stringy = |t: Type| t.array || is_string(t);
    if stringy(from) || stringy(to) {
        // I/O conversions: immutable unless the other side's text form depends on settings.
        return !(tz_or_style(from) || tz_or_style(to));
    }
    !(from.scalar == Scalar::Timestamptz || to.scalar == Scalar::Timestamptz)
}

/// PostgreSQL's `eval_const_expressions`, restricted to what constant SELECTs need: immutable
/// nodes over constants are evaluated; AND/OR/CASE/COALESCE short-circuit on constants without
/// folding the arms they skip. `case` is the value of an enclosing constant `Let`.
fn fold(e: TypedExpr, case: Option<&Value>) -> Result<TypedExpr, PgError> {
    let TypedExpr { ty, node, loc } = e;
    let rebuild = |node: Node| TypedExpr { ty, node, loc };
    let konst = |v: Value| TypedExpr {
        ty,
        node: Node::Const(v),
        loc,
    };
    let all_const = |args: &[TypedExpr]| args.iter().all(TypedExpr::is_const);
    Ok(match node {
        Node::Const(_) | Node::Param(_) | Node::Column(_) => rebuild(node),
        Node::CaseTest => match case {
            Some(v) => konst(v.clone()),
            None => rebuild(Node::CaseTest),
        },
        Node::Let { value, body } => {
            let value = fold(*value, case)?;
            if let Node::Const(v) = &value.node {
                let body = fold(*body, Some(v))?;
                if body.is_const() {
                    return Ok(body);
                }
                // The body still refers to the value: keep the binding.
                return Ok(rebuild(Node::Let {
                    value: Box::new(value),
                    body: Box::new(body),
                }));
            }
            let body = fold(*body, None)?;
            rebuild(Node::Let {
                value: Box::new(value),
                body: Box::new(body),
            })
        }
        Node::Op { imp, args } => {
            let args = args
                .into_iter()
                .map(|a| fold(a, case))
                .collect::<Result<Vec<_>, _>>()?;
            let folded = rebuild(Node::Op { imp, args });
            if imp.immutable() {
                if let Node::Op { args, .. } = &folded.node {
                    if all_const(args) {
                        return Ok(konst(eval_const(&folded, case)?));
                    }
                }
            }
            folded
        }
        Node::Cast { arg, typmod } => {
            let arg = fold(*arg, case)?;
            let immutable = cast_immutable(arg.ty, ty);
            let folded = rebuild(Node::Cast {
                arg: Box::new(arg),
                typmod,
            });
            if immutable {
                if let Node::Cast { arg, .. } = &folded.node {
                    if arg.is_const() {
                        return Ok(konst(eval_const(&folded, case)?));
                    }
                }
            }
            folded
        }
        Node::Not(arg) => {
            let arg = fold(*arg, case)?;
            match arg.node {
                Node::Const(Value::Bool(b)) => konst(Value::Bool(!b)),
                Node::Const(Value::Null) => konst(Value::Null),
                _ => rebuild(Node::Not(Box::new(arg))),
            }
        }
        Node::And(args) => fold_and_or(args, true, ty, loc, case)?,
        Node::Or(args) => fold_and_or(args, false, ty, loc, case)?,
        Node::IsNull { arg, negated } => {
            let arg = fold(*arg, case)?;
            if let Node::Const(v) = &arg.node {
                return Ok(konst(Value::Bool(v.is_null() != negated)));
            }
            rebuild(Node::IsNull {
                arg: Box::new(arg),
                negated,
            })
        }
        Node::BoolTest { arg, test } => {
            let arg = fold(*arg, case)?;
            if let Node::Const(v) = &arg.node {
                return Ok(konst(bool_test(test, v)));
            }
            rebuild(Node::BoolTest {
                arg: Box::new(arg),
                test,
            })
        }
        Node::Distinct { args, negated } => {
            let [a, b] = *args;
            let a = fold(a, case)?;
            let b = fold(b, case)?;
            let folded = rebuild(Node::Distinct {
                args: Box::new([a, b]),
                negated,
            });
            if let Node::Distinct { args, .. } = &folded.node {
                if all_const(&args[..]) && !involves_tz(&args[0]) {
                    return Ok(konst(eval_const(&folded, case)?));
                }
            }
            folded
        }
        Node::Case { whens, otherwise } => {
            let mut kept = Vec::with_capacity(whens.len());
            let mut default = None;
            for (cond, result) in whens {
                let cond = fold(cond, case)?;
                match &cond.node {
                    Node::Const(Value::Bool(false)) | Node::Const(Value::Null) => continue,
                    Node::Const(Value::Bool(true)) => {
                        default = Some(fold(result, case)?);
                        break;
                    }
                    _ => kept.push((cond, fold(result, case)?)),
                }
            }
            let otherwise = match default {
                Some(d) => d,
                None => fold(*otherwise, case)?,
            };
            if kept.is_empty() {
                return Ok(otherwise);
            }
            rebuild(Node::Case {
                whens: kept,
                otherwise: Box::new(otherwise),
            })
        }
        Node::Coalesce(args) => {
            let mut kept = Vec::with_capacity(args.len());
            for a in args {
                let a = fold(a, case)?;
                match &a.node {
                    Node::Const(Value::Null) => continue,
                    Node::Const(_) => {
                        kept.push(a);
                        break;
                    }
                    _ => kept.push(a),
                }
            }
            match kept.len() {
                0 => konst(Value::Null),
                1 if kept[0].is_const() => kept.pop().unwrap_or_else(|| konst(Value::Null)),
                _ => rebuild(Node::Coalesce(kept)),
            }
        }
        Node::MinMax { greatest, args } => {
            let args = args
                .into_iter()
                .map(|a| fold(a, case))
                .collect::<Result<Vec<_>, _>>()?;
            let folded = rebuild(Node::MinMax { greatest, args });
            if let Node::MinMax { args, .. } = &folded.node {
                if all_const(args) && ty.scalar != Scalar::Timestamptz {
                    return Ok(konst(eval_const(&folded, case)?));
                }
            }
            folded
        }
        Node::Array(args) => {
            let args = args
                .into_iter()
                .map(|a| fold(a, case))
                .collect::<Result<Vec<_>, _>>()?;
            if all_const(&args) {
                let vals = args
                    .into_iter()
                    .map(|a| match a.node {
                        Node::Const(v) => v,
                        _ => Value::Null,
                    })
                    .collect();
                return Ok(konst(Value::Array(vals)));
            }
            rebuild(Node::Array(args))
        }
        Node::AnyAll { op, all, args } => {
            let [a, b] = *args;
            let a = fold(a, case)?;
            let b = fold(b, case)?;
            let folded = rebuild(Node::AnyAll {
                op,
                all,
                args: Box::new([a, b]),
            });
            if let Node::AnyAll { args, .. } = &folded.node {
                if all_const(&args[..]) {
                    return Ok(konst(eval_const(&folded, case)?));
                }
            }
            folded
        }
        Node::InSet { arg, set, negated } => {
            let arg = fold(*arg, case)?;
            let constant = arg.is_const();
            let folded = rebuild(Node::InSet {
                arg: Box::new(arg),
                set,
                negated,
            });
            if constant {
                return Ok(konst(eval_const(&folded, case)?));
            }
            folded
        }
    })
}

fn involves_tz(e: &TypedExpr) -> bool {
    e.ty.scalar == Scalar::Timestamptz
}

/// Folds AND / OR: drops constant identities, stops at the first constant that decides the
/// result (later arguments are not folded, so their errors are not raised), and keeps one NULL.
fn fold_and_or(
    args: Vec<TypedExpr>,
    is_and: bool,
    ty: Type,
    loc: Location,
    case: Option<&Value>,
) -> Result<TypedExpr, PgError> {
    let decisive = !is_and;
    let konst = |v: Value| TypedExpr {
        ty,
        node: Node::Const(v),
        loc,
    };
    let mut kept = Vec::with_capacity(args.len());
    let mut saw_null = false;
    for a in args {
        let a = fold(a, case)?;
        match &a.node {
            Node::Const(Value::Bool(b)) if *b == decisive => {
                return Ok(konst(Value::Bool(decisive)))
            }
            Node::Const(Value::Bool(_)) => {}
            Node::Const(_) => saw_null = true,
            _ => kept.push(a),
        }
    }
    if kept.is_empty() {
        return Ok(konst(if saw_null {
            Value::Null
        } else {
            Value::Bool(!decisive)
        }));
    }
    if saw_null {
        kept.push(konst(Value::Null));
    }
    if kept.len() == 1 {
        return Ok(kept.pop().unwrap_or_else(|| konst(Value::Null)));
    }
    let node = if is_and {
        Node::And(kept)
    } else {
        Node::Or(kept)
    };
    Ok(TypedExpr { ty, node, loc })
}

fn bool_test(test: BoolTest, v: &Value) -> Value {
    let b = match v {
        Value::Bool(b) => Some(*b),
        _ => None,
    };
    Value::Bool(match test {
        BoolTest::True => b == Some(true),
        BoolTest::NotTrue => b != Some(true),
        BoolTest::False => b == Some(false),
        BoolTest::NotFalse => b != Some(false),
        BoolTest::Unknown => b.is_none(),
        BoolTest::NotUnknown => b.is_some(),
    })
}

// ---------------------------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------------------------

impl TypedExpr {
    fn ev(&self, env: &mut EvalEnv, case: Option<&Value>) -> Result<Value, PgError> {
        match &self.node {
            Node::Const(v) => Ok(v.clone()),
            Node::Param(i) => env.params.get(*i).cloned().ok_or_else(|| {
                PgError::new(
                    SqlState::PROTOCOL_VIOLATION,
                    format!("no value supplied for parameter ${}", i + 1),
                )
            }),
            Node::Column(i) => env
                .row
                .get(*i)
                .cloned()
                .ok_or_else(|| internal("column index past the row")),
            Node::CaseTest => case
                .cloned()
                .ok_or_else(|| internal("CaseTest outside Let")),
            Node::Let { value, body } => {
                let v = value.ev(env, case)?;
                body.ev(env, Some(&v))
            }
            Node::Op { imp, args } => eval_op(*imp, args, env, case),
            Node::Cast { arg, typmod } => {
                let v = arg.ev(env, case)?;
                cast_value(v, arg.ty, self.ty, *typmod, env.session.text_context())
            }
            Node::Not(arg) => Ok(match arg.ev(env, case)? {
                Value::Bool(b) => Value::Bool(!b),
                _ => Value::Null,
            }),
            Node::And(args) | Node::Or(args) => {
                let decisive = matches!(self.node, Node::Or(_));
                let mut saw_null = false;
                for a in args {
                    match a.ev(env, case)? {
                        Value::Bool(b) if b == decisive => return Ok(Value::Bool(decisive)),
                        Value::Bool(_) => {}
                        _ => saw_null = true,
                    }
                }
                Ok(if saw_null {
                    Value::Null
                } else {
                    Value::Bool(!decisive)
                })
            }
            Node::IsNull { arg, negated } => {
                let v = arg.ev(env, case)?;
                Ok(Value::Bool(v.is_null() != *negated))
            }
            Node::InSet { arg, set, negated } => {
                let v = arg.ev(env, case)?;
                if v.is_null() {
                    return Ok(Value::Null);
                }
                // As the comparisons it stands for: found decides; else a NULL in the list
                // makes the answer NULL.
                Ok(match set.contains(&v) {
                    Some(true) => Value::Bool(!negated),
                    Some(false) if set.has_null => Value::Null,
                    Some(false) => Value::Bool(*negated),
                    None => return Err(internal("IN list value of another type")),
                })
            }
            Node::BoolTest { arg, test } => Ok(bool_test(*test, &arg.ev(env, case)?)),
            Node::Distinct { args, negated } => {
                let a = args[0].ev(env, case)?;
                let b = args[1].ev(env, case)?;
                let distinct = match (a.is_null(), b.is_null()) {
                    (true, true) => false,
                    (true, false) | (false, true) => true,
                    (false, false) => cmp_values(&a, &b, args[0].ty)? != Ordering::Equal,
                };
                Ok(Value::Bool(distinct != *negated))
            }
            Node::Case { whens, otherwise } => {
                for (cond, result) in whens {
                    if let Value::Bool(true) = cond.ev(env, case)? {
                        return result.ev(env, case);
                    }
                }
                otherwise.ev(env, case)
            }
            Node::Coalesce(args) => {
                for a in args {
                    let v = a.ev(env, case)?;
                    if !v.is_null() {
                        return Ok(v);
                    }
                }
                Ok(Value::Null)
            }
            Node::MinMax { greatest, args } => {
                let mut best = Value::Null;
                for a in args {
                    let v = a.ev(env, case)?;
                    if v.is_null() {
                        continue;
                    }
                    if best.is_null() {
                        best = v;
                        continue;
                    }
                    let o = cmp_values(&v, &best, self.ty)?;
                    if (*greatest && o == Ordering::Greater) || (!*greatest && o == Ordering::Less)
                    {
                        best = v;
                    }
                }
                Ok(best)
            }
            Node::Array(args) => {
                let mut out = Vec::with_capacity(args.len());
                for a in args {
                    out.push(a.ev(env, case)?);
                }
                Ok(Value::Array(out))
            }
            Node::AnyAll { op, all, args } => {
                let l = args[0].ev(env, case)?;
                let r = args[1].ev(env, case)?;
                let Value::Array(elems) = r else {
                    return Ok(Value::Null);
                };
                if elems.is_empty() {
                    return Ok(Value::Bool(*all));
                }
                if l.is_null() {
                    return Ok(Value::Null);
                }
                let elem_ty = args[0].ty;
                let mut saw_null = false;
                for e in &elems {
                    if e.is_null() {
                        saw_null = true;
                        continue;
                    }
                    let holds = op.holds(cmp_values(&l, e, elem_ty)?);
                    if holds != *all {
                        return Ok(Value::Bool(!*all));
                    }
                }
                Ok(if saw_null {
                    Value::Null
                } else {
                    Value::Bool(*all)
                })
            }
        }
    }
}

/// Arguments of an operator or function call evaluated without heap allocation for the
/// common arities.
const INLINE_ARGS: usize = 4;

fn eval_op(
    imp: Imp,
    args: &[TypedExpr],
    env: &mut EvalEnv,
    case: Option<&Value>,
) -> Result<Value, PgError> {
    let mut inline: [Value; INLINE_ARGS] = std::array::from_fn(|_| Value::Null);
    let mut spilled = Vec::new();
    let vals: &mut [Value] = if args.len() <= INLINE_ARGS {
        for (slot, a) in inline.iter_mut().zip(args) {
            *slot = a.ev(env, case)?;
        }
        &mut inline[..args.len()]
    } else {
        for a in args {
            spilled.push(a.ev(env, case)?);
        }
        &mut spilled
    };
    if imp.strict() && vals.iter().any(Value::is_null) {
        return Ok(Value::Null);
    }
    let take = |v: &mut Value| std::mem::replace(v, Value::Null);
    match imp {
        Imp::Arith(op, n) => arith(op, n, &vals[0], &vals[1]),
        Imp::Neg(n) => negate(n, &vals[0]),
        Imp::Identity => Ok(take(&mut vals[0])),
        Imp::Cmp(op) => Ok(Value::Bool(
            op.holds(cmp_values(&vals[0], &vals[1], args[0].ty)?),
        )),
        Imp::Dt(op) => func::datetime_op(op, vals, env.session.text_context()),
        Imp::TextCat => match (take(&mut vals[0]), &vals[1]) {
            (Value::Text(mut a), Value::Text(b)) => {
                a.push_str(b);
                Ok(Value::Text(a))
            }
            _ => Err(internal("|| on non-text")),
        },
        Imp::ByteaCat => match (take(&mut vals[0]), &vals[1]) {
            (Value::Bytea(mut a), Value::Bytea(b)) => {
                a.extend_from_slice(b);
                Ok(Value::Bytea(a))
            }
            _ => Err(internal("|| on non-bytea")),
        },
        Imp::ArrayCat => Ok(match (take(&mut vals[0]), take(&mut vals[1])) {
            (Value::Array(mut a), Value::Array(b)) => {
                a.extend(b);
                Value::Array(a)
            }
            (Value::Null, b) => b,
            (a, _) => a,
        }),
        Imp::ArrayAppend => {
            let e = take(&mut vals[1]);
            match take(&mut vals[0]) {
                Value::Array(mut a) => {
                    a.push(e);
                    Ok(Value::Array(a))
                }
                _ => Ok(Value::Array(vec![e])),
            }
        }
        Imp::ArrayPrepend => {
            let e = take(&mut vals[0]);
            match take(&mut vals[1]) {
                Value::Array(mut a) => {
                    a.insert(0, e);
                    Ok(Value::Array(a))
                }
                _ => Ok(Value::Array(vec![e])),
            }
        }
        Imp::Like {
            case_insensitive,
            negated,
        } => {
            let matched = match (&vals[0], &vals[1]) {
                (Value::Text(s), Value::Text(p)) => func::like(s, p, case_insensitive),
                (Value::Bytea(s), Value::Bytea(p)) => func::like_bytes(s, p),
                _ => return Err(internal("LIKE operands")),
            };
            Ok(Value::Bool(matched != negated))
        }
        Imp::Func(f) => func::call(f, vals, args, env),
    }
}

// ----- comparison --------------------------------------------------------------------------------

fn cmp_f64(a: f64, b: f64) -> Ordering {
    // PostgreSQL: NaN equals NaN and sorts above every other value.
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Interval ordering: PostgreSQL compares the total span with 30-day months and 24-hour days.
pub(crate) fn interval_span(iv: &Interval) -> i128 {
    const USECS_PER_DAY: i128 = 86_400_000_000;
    (iv.months as i128 * 30 + iv.days as i128) * USECS_PER_DAY + iv.micros as i128
}

/// Orders two non-NULL values of the same type `ty`.
pub(crate) fn cmp_values(a: &Value, b: &Value, ty: Type) -> Result<Ordering, PgError> {
    use Value as V;
    Ok(match (a, b) {
        (V::Bool(x), V::Bool(y)) => x.cmp(y),
        (V::Int2(x), V::Int2(y)) => x.cmp(y),
        (V::Int4(x), V::Int4(y)) => x.cmp(y),
        (V::Int8(x), V::Int8(y)) => x.cmp(y),
        (V::Float4(x), V::Float4(y)) => cmp_f64(*x as f64, *y as f64),
        (V::Float8(x), V::Float8(y)) => cmp_f64(*x, *y),
        (V::Numeric(x), V::Numeric(y)) => x.cmp(y),
        (V::Text(x), V::Text(y)) => {
            if ty.scalar == Scalar::Bpchar {
                x.trim_end_matches(' ')
                    .as_bytes()
                    .cmp(y.trim_end_matches(' ').as_bytes())
            } else {
                x.as_bytes().cmp(y.as_bytes())
            }
        }
        (V::Bytea(x), V::Bytea(y)) => x.cmp(y),
        (V::Date(x), V::Date(y)) => x.cmp(y),
        (V::Time(x), V::Time(y)) => x.cmp(y),
        (V::Timestamp(x), V::Timestamp(y)) | (V::Timestamptz(x), V::Timestamptz(y)) => x.cmp(y),
        (V::Interval(x), V::Interval(y)) => interval_span(x).cmp(&interval_span(y)),
        (V::Uuid(x), V::Uuid(y)) => x.cmp(y),
        (V::Array(x), V::Array(y)) => {
            let elem = Type {
                scalar: ty.scalar,
                array: false,
            };
            for (p, q) in x.iter().zip(y) {
                let o = match (p.is_null(), q.is_null()) {
                    (true, true) => Ordering::Equal,
                    (true, false) => Ordering::Greater,
                    (false, true) => Ordering::Less,
                    (false, false) => cmp_values(p, q, elem)?,
                };
                if o != Ordering::Equal {
                    return Ok(o);
                }
            }
            x.len().cmp(&y.len())
        }
        _ => return Err(internal("comparison of mismatched values")),
    })
}

// ----- arithmetic --------------------------------------------------------------------------------

fn int_result(v: i64, n: Num) -> Result<Value, PgError> {
    match n {
        Num::I2 => i16::try_from(v)
            .map(Value::Int2)
            .map_err(|_| out_of_range(INT2)),
        Num::I4 => i32::try_from(v)
            .map(Value::Int4)
            .map_err(|_| out_of_range(INT4)),
        _ => Ok(Value::Int8(v)),
    }
}

fn as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Int2(x) => Some(*x as i64),
        Value::Int4(x) => Some(*x as i64),
        Value::Int8(x) => Some(*x),
        _ => None,
    }
}

pub(crate) fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Float4(x) => Some(*x as f64),
        Value::Float8(x) => Some(*x),
        _ => None,
    }
}

/// PostgreSQL's `check_float8_val`.
fn check_float(v: f64, inf_is_valid: bool, zero_is_valid: bool) -> Result<f64, PgError> {
    if v.is_infinite() && !inf_is_valid {
        return Err(float_overflow());
    }
    if v == 0.0 && !zero_is_valid {
        return Err(float_underflow());
    }
    Ok(v)
}

fn arith(op: ArOp, n: Num, a: &Value, b: &Value) -> Result<Value, PgError> {
    match n {
        Num::I2 | Num::I4 | Num::I8 => {
            let (x, y) = match (as_i64(a), as_i64(b)) {
                (Some(x), Some(y)) => (x, y),
                _ => return Err(internal("integer operands")),
            };
            let ty = n.ty();
            let r = match op {
                ArOp::Add => x.checked_add(y),
                ArOp::Sub => x.checked_sub(y),
                ArOp::Mul => x.checked_mul(y),
                ArOp::Div => {
                    if y == 0 {
                        return Err(division_by_zero());
                    }
                    x.checked_div(y)
                }
                ArOp::Mod => {
                    if y == 0 {
                        return Err(division_by_zero());
                    }
                    Some(if y == -1 { 0 } else { x % y })
                }
                ArOp::Pow => return Err(internal("integer power")),
            };
            int_result(r.ok_or_else(|| out_of_range(ty))?, n)
        }
        Num::F4 | Num::F8 => {
            let (x, y) = match (as_f64(a), as_f64(b)) {
                (Some(x), Some(y)) => (x, y),
                _ => return Err(internal("float operands")),
            };
            let inf_in = x.is_infinite() || y.is_infinite();
            let r = if n == Num::F4 {
                let (x, y) = (x as f32, y as f32);
                let r = match op {
                    ArOp::Add => x + y,
                    ArOp::Sub => x - y,
                    ArOp::Mul => x * y,
                    ArOp::Div => {
                        if y == 0.0 && !x.is_nan() {
                            return Err(division_by_zero());
                        }
                        x / y
                    }
                    _ => return Err(internal("float4 operator")),
                };
                let zero_ok = match op {
                    ArOp::Mul => x == 0.0 || y == 0.0,
                    ArOp::Div => x == 0.0 || y.is_infinite(),
                    _ => true,
                };
                let r = r as f64;
                check_float(r, inf_in, zero_ok)?;
                return Ok(Value::Float4(r as f32));
            } else {
                match op {
                    ArOp::Add => check_float(x + y, inf_in, true)?,
                    ArOp::Sub => check_float(x - y, inf_in, true)?,
                    ArOp::Mul => check_float(x * y, inf_in, x == 0.0 || y == 0.0)?,
                    ArOp::Div => {
                        if y == 0.0 && !x.is_nan() {
                            return Err(division_by_zero());
                        }
                        check_float(x / y, inf_in, x == 0.0 || y.is_infinite())?
                    }
                    ArOp::Pow => func::float_power(x, y)?,
                    ArOp::Mod => return Err(internal("float modulo")),
                }
            };
            Ok(Value::Float8(r))
        }
        Num::N => {
            let (Value::Numeric(x), Value::Numeric(y)) = (a, b) else {
                return Err(internal("numeric operands"));
            };
            Ok(Value::Numeric(match op {
                ArOp::Add => x.add(y)?,
                ArOp::Sub => x.sub(y)?,
                ArOp::Mul => x.mul(y)?,
                ArOp::Div => x.div(y)?,
                ArOp::Mod => func::numeric_mod(x, y)?,
                ArOp::Pow => func::numeric_power(x, y)?,
            }))
        }
    }
}

fn negate(n: Num, v: &Value) -> Result<Value, PgError> {
    Ok(match (n, v) {
        (Num::I2, Value::Int2(x)) => {
            Value::Int2(x.checked_neg().ok_or_else(|| out_of_range(INT2))?)
        }
        (Num::I4, Value::Int4(x)) => {
            Value::Int4(x.checked_neg().ok_or_else(|| out_of_range(INT4))?)
        }
        (Num::I8, Value::Int8(x)) => {
            Value::Int8(x.checked_neg().ok_or_else(|| out_of_range(INT8))?)
        }
        (Num::F4, Value::Float4(x)) => Value::Float4(-x),
        (Num::F8, Value::Float8(x)) => Value::Float8(-x),
        (Num::N, Value::Numeric(x)) => Value::Numeric(x.neg()),
        _ => return Err(internal("negation operand")),
    })
}

// ----- casts -------------------------------------------------------------------------------------

fn text_out(v: &Value, ty: Type, tctx: &TextContext) -> String {
    let mut buf = Vec::new();
    types::text::encode(v, ty, tctx, &mut buf);
    String::from_utf8(buf).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

pub(crate) fn text_in(ty: Type, s: &str, tctx: &TextContext) -> Result<Value, PgError> {
    types::text::decode(ty, s.as_bytes(), tctx)
}

/// Converts a value of type `from` to type `to` (both already validated by the planner).
pub(crate) fn cast_value(
    v: Value,
    from: Type,
    to: Type,
    typmod: Typmod,
    tctx: &TextContext,
) -> Result<Value, PgError> {
    if v.is_null() {
        return Ok(Value::Null);
    }
    if from == to {
        return apply_typmod(v, to, typmod, true);
    }
    let v = if from.array && to.array {
        let (ef, et) = (
            Type {
                array: false,
                ..from
            },
            Type { array: false, ..to },
        );
        let Value::Array(elems) = v else {
            return Err(internal("array cast of non-array"));
        };
        let mut out = Vec::with_capacity(elems.len());
        for e in elems {
            out.push(cast_value(e, ef, et, Typmod::None, tctx)?);
        }
        Value::Array(out)
    } else {
        cast_scalar(v, from, to, tctx)?
    };
    apply_typmod(v, to, typmod, true)
}

fn cast_scalar(v: Value, from: Type, to: Type, tctx: &TextContext) -> Result<Value, PgError> {
    use Scalar::*;
    if is_string(to) {
        let s = match v {
            Value::Text(s)
                if is_string(from) || from == UNKNOWN || from == JSON || from == JSONB =>
            {
                if from.scalar == Bpchar && to.scalar != Bpchar {
                    s.trim_end_matches(' ').to_string()
                } else {
                    s
                }
            }
            // bool -> text is `booltext`, not `boolout`.
            Value::Bool(b) => (if b { "true" } else { "false" }).to_string(),
            other => text_out(&other, from, tctx),
        };
        return Ok(Value::Text(if to.scalar == Name {
            truncate_name(s)
        } else {
            s
        }));
    }
    if is_string(from) || from == UNKNOWN {
        let Value::Text(s) = &v else {
            return Err(internal("string cast of non-text"));
        };
        return text_in(to, s, tctx);
    }
    if from.array || to.array {
        return Err(internal("array/scalar cast"));
    }
    match (from.scalar, to.scalar) {
        (
            Int2 | Int4 | Int8 | Float4 | Float8 | Numeric,
            Int2 | Int4 | Int8 | Float4 | Float8 | Numeric,
        ) => numeric_cast(v, to),
        (Int4, Bool) => match v {
            Value::Int4(x) => Ok(Value::Bool(x != 0)),
            _ => Err(internal("int4 -> bool")),
        },
        (Bool, Int4) => match v {
            Value::Bool(b) => Ok(Value::Int4(b as i32)),
            _ => Err(internal("bool -> int4")),
        },
        (Date | Time | Timestamp | Timestamptz | Interval, _) => {
            func::datetime_cast(v, from, to, tctx)
        }
        // json <-> jsonb and jsonb -> scalar go through the text form.
        _ => {
            let s = text_out(&v, from, tctx);
            text_in(to, &s, tctx)
        }
    }
}

/// PostgreSQL truncates `name` to NAMEDATALEN - 1 = 63 bytes, on a character boundary.
fn truncate_name(mut s: String) -> String {
    const NAME_MAX_BYTES: usize = 63;
    if s.len() > NAME_MAX_BYTES {
        let mut cut = NAME_MAX_BYTES;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

fn numeric_cast(v: Value, to: Type) -> Result<Value, PgError> {
    let to_int = |x: i64| int_result(x, num_of(to));
    match v {
        Value::Int2(_) | Value::Int4(_) | Value::Int8(_) => {
            let x = as_i64(&v).unwrap_or(0);
            match to.scalar {
                Scalar::Float4 => Ok(Value::Float4(x as f32)),
                Scalar::Float8 => Ok(Value::Float8(x as f64)),
                Scalar::Numeric => Ok(Value::Numeric(Numeric::from_i64(x))),
                _ => to_int(x),
            }
        }
        Value::Float4(_) | Value::Float8(_) => {
            let x = as_f64(&v).unwrap_or(0.0);
            match to.scalar {
                Scalar::Float4 => {
                    let r = x as f32;
                    if r.is_infinite() && !x.is_infinite() {
                        return Err(float_overflow());
                    }
                    if r == 0.0 && x != 0.0 {
                        return Err(float_underflow());
                    }
                    Ok(Value::Float4(r))
                }
                Scalar::Float8 => {
                    // float4 -> float8 widens the binary value.
                    Ok(Value::Float8(x))
                }
                Scalar::Numeric => {
                    // float4 -> numeric goes through float4's shortest decimal form.
                    if let Value::Float4(f) = v {
                        if f.is_finite() {
                            return Ok(Value::Numeric(Numeric::parse(&format_float4_digits(f))?));
                        }
                    }
                    Ok(Value::Numeric(Numeric::from_f64(x)?))
                }
                _ => {
                    let r = x.round_ties_even();
                    let fits = match to.scalar {
                        Scalar::Int2 => r >= i16::MIN as f64 && r < -(i16::MIN as f64),
                        Scalar::Int4 => r >= i32::MIN as f64 && r < -(i32::MIN as f64),
                        _ => r >= i64::MIN as f64 && r < -(i64::MIN as f64),
                    };
                    if x.is_nan() || !fits {
                        return Err(out_of_range(to));
                    }
                    to_int(r as i64)
                }
            }
        }
        Value::Numeric(n) => match to.scalar {
            Scalar::Float4 | Scalar::Float8 => {
                // float8in / float4in of the numeric's text: out of range either way.
                let f = n.to_f64();
                let f4 = f as f32;
                let (inf, zero, name) = if to.scalar == Scalar::Float4 {
                    (f4.is_infinite(), f4 == 0.0, "real")
                } else {
                    (f.is_infinite(), f == 0.0, "double precision")
                };
                if n.is_finite() && (inf || (zero && !n.is_zero())) {
                    let mut text = Vec::new();
                    n.write_text(&mut text);
                    return Err(PgError::new(
                        SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
                        format!(
                            "\"{}\" is out of range for type {name}",
                            String::from_utf8_lossy(&text)
                        ),
                    ));
                }
                Ok(if to.scalar == Scalar::Float4 {
                    Value::Float4(f4)
                } else {
                    Value::Float8(f)
                })
            }
            Scalar::Numeric => Ok(Value::Numeric(n)),
            _ => {
                let int_name = match to.scalar {
                    Scalar::Int2 => "smallint",
                    Scalar::Int4 => "integer",
                    _ => "bigint",
                };
                if n.is_nan() {
                    return Err(PgError::new(
                        SqlState::FEATURE_NOT_SUPPORTED,
                        format!("cannot convert NaN to {int_name}"),
                    ));
                }
                if n.is_infinite() {
                    return Err(PgError::new(
                        SqlState::FEATURE_NOT_SUPPORTED,
                        format!("cannot convert infinity to {int_name}"),
                    ));
                }
                let r = n.round(0).to_i64().ok_or_else(|| out_of_range(to))?;
                to_int(r)
            }
        },
        _ => Err(internal("numeric cast operand")),
    }
}

/// Shortest decimal digits that round-trip a float4 (what `float4out` prints).
fn format_float4_digits(f: f32) -> String {
    let s = format!("{f:e}");
    // Rust's `{:e}` gives shortest round-trip digits, e.g. "1.1e0".
    match s.split_once('e') {
        Some((mantissa, exp)) => format!("{mantissa}e{exp}"),
        None => s,
    }
}

fn num_of(t: Type) -> Num {
    match t.scalar {
        Scalar::Int2 => Num::I2,
        Scalar::Int4 => Num::I4,
        Scalar::Int8 => Num::I8,
        Scalar::Float4 => Num::F4,
        Scalar::Float8 => Num::F8,
        _ => Num::N,
    }
}

/// Applies a length or precision modifier (explicit-cast semantics: strings are truncated).
fn apply_typmod(v: Value, ty: Type, typmod: Typmod, explicit: bool) -> Result<Value, PgError> {
    debug_assert!(explicit, "only explicit casts carry a typmod today");
    if typmod == Typmod::None || v.is_null() {
        return Ok(v);
    }
    if ty.array {
        let Value::Array(elems) = v else { return Ok(v) };
        let elem = Type { array: false, ..ty };
        let mut out = Vec::with_capacity(elems.len());
        for e in elems {
            out.push(apply_typmod(e, elem, typmod, explicit)?);
        }
        return Ok(Value::Array(out));
    }
    match (typmod, v) {
        (Typmod::Varchar(n), Value::Text(s)) => {
            Ok(Value::Text(s.chars().take(n as usize).collect()))
        }
        (Typmod::Bpchar(n), Value::Text(s)) => {
            let mut out: String = s.chars().take(n as usize).collect();
            let len = out.chars().count();
            out.extend(std::iter::repeat_n(' ', n as usize - len));
            Ok(Value::Text(out))
        }
        (Typmod::Numeric { precision, scale }, Value::Numeric(n)) => n
            .apply_typmod(precision as i32, scale as i32)
            .map(Value::Numeric),
        (_, v) => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::ast::Statement;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    struct Session {
        text: TextContext,
    }

    impl SessionInfo for Session {
        fn current_setting(&self, name: &str) -> Option<String> {
            name.eq_ignore_ascii_case("datestyle")
                .then(|| "ISO, MDY".to_string())
        }
        fn text_context(&self) -> &TextContext {
            &self.text
        }
        fn database(&self) -> &str {
            "db"
        }
        fn user(&self) -> &str {
            "alice"
        }
        fn backend_pid(&self) -> i32 {
            77
        }
        fn stamps(&self) -> Stamps {
            // 2024-01-02 03:04:05 UTC
            let at = (8767 * 86_400 + 3 * 3600 + 4 * 60 + 5) * 1_000_000;
            Stamps {
                statement_us: at,
                transaction_us: at,
            }
        }
    }

    fn query(sql: &str) -> ast::Query {
        let stmts = Parser::parse_sql(&PostgreSqlDialect {}, sql).expect("parses");
        match stmts.into_iter().next() {
            Some(Statement::Query(q)) => *q,
            other => panic!("not a query: {other:?}"),
        }
    }

    fn expr(sql: &str) -> ast::Expr {
        let q = query(&format!("select {sql}"));
        let ast::SetExpr::Select(s) = *q.body else {
            panic!("not a select")
        };
        match s.projection.into_iter().next() {
            Some(ast::SelectItem::UnnamedExpr(e)) => e,
            Some(ast::SelectItem::ExprWithAlias { expr, .. }) => expr,
            other => panic!("unexpected item {other:?}"),
        }
    }

    /// Plans `select <sql>` and returns (column types, one row as text, sleep requested).
    fn run_with(
        sql: &str,
        params: &mut Vec<Type>,
        values: &[Value],
    ) -> Result<Vec<(Type, Option<String>)>, PgError> {
        let full = format!("select {sql}");
        let q = query(&full);
        let mut ctx = PlanCtx::new(params, &full);
        let plan = plan_const_select(&q, &mut ctx)?;
        let session = Session {
            text: TextContext::default(),
        };
        let mut env = EvalEnv {
            params: values,
            row: &[],
            session: &session,
            sleep_us: 0,
            notifies: Vec::new(),
        };
        let mut out = Vec::new();
        let types: Vec<Type> = plan.columns.iter().map(|c| c.1).collect();
        plan.eval_rows(&mut env, &mut |row| {
            for (v, t) in row.iter().zip(&types) {
                let text = (!v.is_null()).then(|| text_out(v, *t, &session.text));
                out.push((*t, text));
            }
            Ok(())
        })?;
        Ok(out)
    }

    fn run(sql: &str) -> Result<Vec<(Type, Option<String>)>, PgError> {
        run_with(sql, &mut Vec::new(), &[])
    }

    /// The single value of `select <sql>` as text (None = NULL).
    fn val(sql: &str) -> Option<String> {
        let row = run(sql).unwrap_or_else(|e| panic!("{sql}: {e} {e:?}"));
        assert_eq!(row.len(), 1, "{sql}");
        row[0].1.clone()
    }

    fn v(sql: &str) -> String {
        val(sql).unwrap_or_else(|| panic!("{sql}: NULL"))
    }

    fn ty(sql: &str) -> Type {
        run(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))[0].0
    }

    fn code(sql: &str) -> String {
        match run(sql) {
            Ok(r) => panic!("{sql}: expected an error, got {r:?}"),
            Err(e) => e.code.as_str().to_string(),
        }
    }

    fn err(sql: &str) -> PgError {
        match run(sql) {
            Ok(r) => panic!("{sql}: expected an error, got {r:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn literal_types() {
        assert_eq!(ty("1"), INT4);
        assert_eq!(ty("3000000000"), INT8);
        assert_eq!(ty("-2147483648"), INT4);
        assert_eq!(ty("-(-2147483648)"), INT8);
        assert_eq!(ty("12345678901234567890"), NUMERIC);
        assert_eq!(ty("1.5"), NUMERIC);
        assert_eq!(ty("1e3"), NUMERIC);
        assert_eq!(v("1e3"), "1000");
        assert_eq!(ty("'a'"), TEXT);
        assert_eq!(ty("null"), TEXT);
        assert_eq!(val("null"), None);
        assert_eq!(ty("true"), BOOL);
        assert_eq!(ty("date '2024-01-01'"), DATE);
        assert_eq!(ty("interval '1 day'"), INTERVAL);
        assert_eq!(v("E'a\\tb'"), "a\tb");
        assert_eq!(ty("'{1,2}'::int[]"), Type::array_of(Scalar::Int4));
    }

    #[test]
    fn unknown_literals_take_the_other_operands_type() {
        assert_eq!((ty("'1' + 1"), v("'1' + 1")), (INT4, "2".to_string()));
        assert_eq!(ty("1.5 + '1'"), NUMERIC);
        assert_eq!(code("'abc' + 1"), "22P02");
        assert_eq!(err("'abc' + 1").position, Some(8));
        assert_eq!(code("'1' + '1'"), "42725");
        assert_eq!(v("'a' < 'b'"), "t");
        assert_eq!(ty("null + 1"), INT4);
        assert_eq!(v("'t' and true"), "t");
    }

    #[test]
    fn integer_arithmetic_and_overflow() {
        assert_eq!(v("7 / 2"), "3");
        assert_eq!(v("-7 / 2"), "-3");
        assert_eq!(v("-7 % 3"), "-1");
        assert_eq!(v("(-2147483648) % -1"), "0");
        assert_eq!(ty("1::int2 + 1::int2"), INT2);
        assert_eq!(ty("1::int2 + 1::int4"), INT4);
        assert_eq!(ty("1::int4 + 1::int8"), INT8);
        let e = err("2147483647 + 1");
        assert_eq!(
            (e.code, e.message.as_ref()),
            (SqlState::NUMERIC_VALUE_OUT_OF_RANGE, "integer out of range")
        );
        assert_eq!(
            err("32767::int2 + 1::int2").message,
            "smallint out of range"
        );
        assert_eq!(
            err("9223372036854775807 + 1").message,
            "bigint out of range"
        );
        assert_eq!(code("-2147483648 / -1"), "22003");
        assert_eq!(code("1 / 0"), "22012");
        assert_eq!(code("1 % 0"), "22012");
        assert_eq!(code("-(-2147483647 - 1)"), "22003");
        assert_eq!(code("abs(-2147483648)"), "22003");
    }

    #[test]
    fn numeric_and_float_arithmetic() {
        assert_eq!((ty("1 + 1.5"), v("1 + 1.5")), (NUMERIC, "2.5".to_string()));
        assert_eq!(ty("1 + 1.5::float8"), FLOAT8);
        assert_eq!(ty("1::float4 + 1"), FLOAT8);
        assert_eq!(ty("1::float4 + 1::float4"), FLOAT4);
        assert_eq!(ty("1::int8 + 1::float4"), FLOAT8);
        assert_eq!(v("0.1::float8 + 0.2::float8"), "0.30000000000000004");
        assert_eq!(code("1.0 / 0"), "22012");
        assert_eq!(code("1::float8 / 0"), "22012");
        assert_eq!(code("1e308::float8 * 10"), "22003");
        assert_eq!(v("5.5 % 2"), "1.5");
        assert_eq!(code("1.5::float8 % 1"), "42883");
        assert_eq!((ty("2 ^ 10"), v("2 ^ 10")), (FLOAT8, "1024".to_string()));
        assert_eq!(v("2.0 ^ 3"), "8.0000000000000000");
        assert_eq!(code("0 ^ -1"), "2201F");
        assert_eq!(v("-1.5"), "-1.5");
        assert_eq!(v("round(2.5)"), "3");
        assert_eq!(v("round(2.5::float8)"), "2");
        assert_eq!(v("sqrt(2::numeric)"), "1.414213562373095");
        assert_eq!(code("sqrt(-1)"), "2201F");
    }

    #[test]
    fn comparisons_across_types() {
        assert_eq!(v("1 = 1.0"), "t");
        assert_eq!(v("1::int8 = 1::int2"), "t");
        assert_eq!(v("2::int2 < 3000000000"), "t");
        assert_eq!(v("1.5 > 1::float4"), "t");
        assert_eq!(v("'a'::text = 'a'::varchar"), "t");
        assert_eq!(v("'a '::char(3) = 'a'::char(1)"), "t");
        assert_eq!(v("date '2024-01-01' = timestamp '2024-01-01 00:00'"), "t");
        assert_eq!(v("interval '1 month' = interval '30 days'"), "t");
        assert_eq!(v("'NaN'::float8 > 1e308::float8"), "t");
        assert_eq!(val("null = null"), None);
        assert_eq!(v("array[1,2] < array[1,3]"), "t");
        let e = err("1 = 'a'::text");
        assert_eq!(e.code, SqlState::UNDEFINED_FUNCTION);
        assert_eq!(e.message, "operator does not exist: integer = text");
        assert_eq!(e.position, Some(10));
        assert!(e.hint.is_some());
        assert_eq!(code("array[1] = array[1::int8]"), "42883");
    }

    #[test]
    fn three_valued_logic() {
        assert_eq!(val("true and null"), None);
        assert_eq!(v("false and null"), "f");
        assert_eq!(v("true or null"), "t");
        assert_eq!(val("false or null"), None);
        assert_eq!(val("not null::bool"), None);
        assert_eq!(v("null::bool is not true"), "t");
        assert_eq!(v("null::bool is unknown"), "t");
        assert_eq!(v("null is distinct from 1"), "t");
        assert_eq!(v("null is not distinct from null"), "t");
        assert_eq!(v("1 is null"), "f");
        assert_eq!(code("1 and true"), "42804");
        assert_eq!(
            err("1 and true").message,
            "argument of AND must be type boolean, not type integer"
        );
        assert_eq!(code("not 1"), "42804");
        // Constant folding short-circuits like PostgreSQL's planner.
        assert_eq!(v("false and 1/0 = 1"), "f");
        assert_eq!(code("1/0 = 1 and false"), "22012");
    }

    #[test]
    fn between_in_and_any() {
        assert_eq!(v("5 between 1 and 10"), "t");
        assert_eq!(v("5 not between 1 and 4"), "t");
        assert_eq!(val("null between 1 and 2"), None);
        assert_eq!(v("1 in (1, 2)"), "t");
        assert_eq!(val("1 in (2, null)"), None);
        assert_eq!(val("1 not in (2, null)"), None);
        assert_eq!(v("1 not in (2, 3)"), "t");
        assert_eq!(v("1.5 in (1, 1.5)"), "t");
        assert_eq!(
            err("1 not in (1, 'a'::text)").message,
            "operator does not exist: integer <> text"
        );
        assert_eq!(v("1 = any(array[1,2])"), "t");
        assert_eq!(val("2 = any(array[1,null])"), None);
        assert_eq!(v("1 = all(array[]::int[])"), "t");
        assert_eq!(v("1 = any('{1,2}')"), "t");
        assert_eq!(code("1 = any(1)"), "42809");
        // A non-trivial left side is evaluated once.
        assert_eq!(v("(1 + 1) between 1 and 3"), "t");
        assert_eq!(v("abs(-2) in (1, 2)"), "t");
    }

    #[test]
    fn like_and_ilike() {
        assert_eq!(v("'abc' like 'a%'"), "t");
        assert_eq!(v("'abc' like 'a_c'"), "t");
        assert_eq!(v("'abc' like 'A%'"), "f");
        assert_eq!(v("'abc' ilike 'A%'"), "t");
        assert_eq!(v("'a_c' like 'a\\_c'"), "t");
        assert_eq!(v("'abc' like 'a\\_c'"), "f");
        assert_eq!(v("'a%' like 'a#%' escape '#'"), "t");
        assert_eq!(v("'aa' like '%a%a%a%'"), "f");
        assert_eq!(val("null like 'a'"), None);
        assert_eq!(code("'a' like 'a' escape 'xy'"), "22025");
        assert_eq!(
            err("1 like 'a'").message,
            "operator does not exist: integer ~~ unknown"
        );
    }

    #[test]
    fn case_coalesce_nullif_greatest() {
        assert_eq!(v("case when 1 > 0 then 'pos' else 'neg' end"), "pos");
        assert_eq!(v("case 2 when 1 then 'one' when 2 then 'two' end"), "two");
        assert_eq!(val("case 3 when 1 then 'one' end"), None);
        assert_eq!(
            (
                ty("case when true then 1 else 1.5 end"),
                v("case when true then 1 else 1.5 end")
            ),
            (NUMERIC, "1".to_string())
        );
        assert_eq!(
            err("case when true then 1 else 'a'::text end").message,
            "CASE types text and integer cannot be matched"
        );
        assert_eq!(code("case when 1 then 2 end"), "42804");
        assert_eq!(v("case when false then 1/0 else 0 end"), "0");
        assert_eq!(v("coalesce(null, 1, 2)"), "1");
        assert_eq!(v("coalesce(1, 1/0)"), "1");
        assert_eq!(ty("coalesce(null::int, 1.5)"), NUMERIC);
        assert_eq!(val("nullif(1, 1)"), None);
        assert_eq!(
            (ty("nullif(1, 1.5)"), v("nullif(1, 1.5)")),
            (NUMERIC, "1".to_string())
        );
        assert_eq!(ty("nullif(null, 1)"), INT4);
        assert_eq!(v("greatest(1, 2.5, null)"), "2.5");
        assert_eq!(v("least('b', 'a')"), "a");
        assert_eq!(code("coalesce(1, 'a'::text)"), "42804");
    }

    #[test]
    fn casts() {
        assert_eq!(v("1::bool"), "t");
        assert_eq!(v("true::int"), "1");
        assert_eq!(code("1::int2::bool"), "42846");
        assert_eq!(err("1::int2::bool").position, Some(15));
        assert_eq!(v("2.5::int"), "3");
        assert_eq!(v("(-2.5)::int"), "-3");
        assert_eq!(v("2.5::float8::int"), "2");
        assert_eq!(v("3.5::float8::int"), "4");
        assert_eq!(code("32768::int2"), "22003");
        assert_eq!(code("'abc'::int"), "22P02");
        assert_eq!(err("'abc'::int").position, Some(8));
        assert_eq!(v("1.2345::numeric(5,2)"), "1.23");
        assert_eq!(code("12345.6::numeric(5,2)"), "22003");
        assert_eq!(v("'abc'::varchar(2)"), "ab");
        assert_eq!(v("'a'::char(3)"), "a  ");
        assert_eq!(v("'a'::char(3) || 'b'"), "ab");
        assert_eq!(v("true::text"), "true");
        assert_eq!(v("'{1,2}'::int[]::text[]"), "{1,2}");
        assert_eq!(v("array[1.7, 2.2]::int[]"), "{2,2}");
        assert_eq!(v("'2024-01-01 12:34:56'::timestamp::date"), "2024-01-01");
        assert_eq!(code("date '2024-01-01'::int"), "42846");
        assert_eq!(ty("cast(1 as bigint)"), INT8);
        assert_eq!(code("'NaN'::numeric::int"), "0A000");
    }

    #[test]
    fn dates_and_intervals() {
        assert_eq!(v("date '2024-01-31' + 1"), "2024-02-01");
        assert_eq!(
            (
                ty("date '2024-03-01' - date '2024-01-01'"),
                v("date '2024-03-01' - date '2024-01-01'")
            ),
            (INT4, "60".to_string())
        );
        assert_eq!(
            v("date '2024-01-31' + interval '1 month'"),
            "2024-02-29 00:00:00"
        );
        assert_eq!(ty("date '2024-01-31' + interval '1 month'"), TIMESTAMP);
        assert_eq!(
            v("timestamp '2024-01-02 03:00' - timestamp '2024-01-01'"),
            "1 day 03:00:00"
        );
        assert_eq!(v("interval '1 day' * 1.5"), "1 day 12:00:00");
        assert_eq!(v("interval '1 month' / 2"), "15 days");
        assert_eq!(v("time '23:00' + interval '2 hours'"), "01:00:00");
        assert_eq!(code("date '2024-01-01' - date 'infinity'"), "22008");
        assert_eq!(code("interval '1 day' / 0"), "22012");
        assert_eq!(v("extract(year from date '2024-03-05')"), "2024");
        assert_eq!(
            v("extract(second from timestamp '2024-03-05 10:11:12.5')"),
            "12.500000"
        );
    }

    #[test]
    fn concat_and_arrays() {
        assert_eq!(v("'a' || 1"), "a1");
        assert_eq!(v("1 || 'a'"), "1a");
        assert_eq!(val("'a' || null"), None);
        assert_eq!(v("'a' || true"), "atrue");
        assert_eq!(code("1 || 2"), "42883");
        assert_eq!(v("array[1,2] || 3"), "{1,2,3}");
        assert_eq!(v("0 || array[1,2]"), "{0,1,2}");
        assert_eq!(v("array[1, 1.5]"), "{1,1.5}");
        assert_eq!(ty("array[1, 1.5]"), Type::array_of(Scalar::Numeric));
        assert_eq!(v("array[null, 1]"), "{NULL,1}");
        assert_eq!(code("array[]"), "42P18");
        assert_eq!(code("array[1, 'a'::text]"), "42804");
    }

    #[test]
    fn functions() {
        assert_eq!(v("version()"), VERSION_STRING);
        assert_eq!(v("current_user"), "alice");
        assert_eq!(ty("current_user"), NAME);
        assert_eq!(v("current_database()"), "db");
        assert_eq!(v("current_schema"), "public");
        assert_eq!(v("pg_backend_pid()"), "77");
        assert_eq!(v("current_setting('DateStyle')"), "ISO, MDY");
        assert_eq!(val("current_setting('nope', true)"), None);
        let e = err("current_setting('nope')");
        assert_eq!(
            (e.code, e.message.as_ref()),
            (
                SqlState::UNDEFINED_OBJECT,
                "unrecognized configuration parameter \"nope\""
            )
        );
        assert_eq!(v("now()"), "2024-01-02 03:04:05+00");
        assert_eq!(v("current_date"), "2024-01-02");
        assert_eq!(v("length('héllo')"), "5");
        assert_eq!(v("substr('hello', 2, 3)"), "ell");
        assert_eq!(v("substr('hello', 0, 2)"), "h");
        assert_eq!(v("substring('hello' from 2 for 3)"), "ell");
        assert_eq!(code("substr('hello', 2, -1)"), "22011");
        assert_eq!(v("trim(both 'x' from 'xxaxx')"), "a");
        assert_eq!(v("replace('hello', 'l', 'L')"), "heLLo");
        assert_eq!(v("concat('a', 1, null, true)"), "a1t");
        assert_eq!(v("md5('abc')"), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(v("md5('')"), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(v("mod(-7, 3)"), "-1");
        assert_eq!(v("position('lo' in 'hello')"), "4");
        assert_eq!(v("length(gen_random_uuid()::text)"), "36");
        assert_eq!(v("random() >= 0 and random() < 1"), "t");
        let e = err("foo(1, 'a')");
        assert_eq!(e.message, "function foo(integer, unknown) does not exist");
        assert_eq!(e.position, Some(8));
        assert_eq!(code("abs('a'::text)"), "42883");
        assert_eq!(code("abs('a')"), "22P02");
    }

    #[test]
    fn pg_sleep_accumulates_sleep_time() {
        let full = "select pg_sleep(0.25), pg_sleep(-1), pg_sleep(0.5)";
        let q = query(full);
        let mut params = Vec::new();
        let mut ctx = PlanCtx::new(&mut params, full);
        let plan = plan_const_select(&q, &mut ctx).expect("plans");
        assert_eq!(plan.columns[0], ("pg_sleep".to_string(), VOID));
        let session = Session {
            text: TextContext::default(),
        };
        let mut env = EvalEnv {
            params: &[],
            row: &[],
            session: &session,
            sleep_us: 0,
            notifies: Vec::new(),
        };
        let n = plan.eval_rows(&mut env, &mut |row| {
            assert_eq!(row[0], Value::Text(String::new()));
            Ok(())
        });
        assert_eq!(n.expect("evaluates"), 1);
        assert_eq!(env.sleep_us, 750_000);
    }

    #[test]
    fn parameter_type_inference() {
        let mut params = Vec::new();
        assert_eq!(
            run_with("$1 + 1", &mut params, &[Value::Int4(41)]).expect("runs")[0]
                .1
                .as_deref(),
            Some("42")
        );
        assert_eq!(params, vec![INT4]);

        let mut params = vec![UNKNOWN];
        run_with("$1::date", &mut params, &[Value::Date(0)]).expect("runs");
        assert_eq!(params, vec![DATE]);

        let mut params = Vec::new();
        run_with("$1", &mut params, &[Value::Text("x".into())]).expect("runs");
        assert_eq!(params, vec![TEXT]);

        // Declared types are kept; `$3` grows the list.
        let mut params = vec![INT8, UNKNOWN];
        let r = run_with(
            "$1 = 5, $3 || 'x', $2::int",
            &mut params,
            &[Value::Int8(5), Value::Int4(2), Value::Text("a".into())],
        )
        .expect("runs");
        assert_eq!(params, vec![INT8, INT4, TEXT]);
        assert_eq!(r[0].1.as_deref(), Some("t"));
        assert_eq!(r[1].1.as_deref(), Some("ax"));

        // Like PostgreSQL, a parameter nothing constrains is an error, and so is a gap.
        let e = run_with("$1 is null", &mut Vec::new(), &[Value::Null]).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_ref()),
            (
                SqlState::INDETERMINATE_DATATYPE,
                "could not determine data type of parameter $1"
            )
        );
        let e = run_with("$2::int", &mut Vec::new(), &[]).unwrap_err();
        assert_eq!(e.code, SqlState::INDETERMINATE_DATATYPE);

        // A parameter planned unknown and typed later: elsewhere it takes the type; as a bare
        // select item PostgreSQL reports the conflict with text.
        let mut params = Vec::new();
        let r = run_with(
            "$1 is null, $1 + 1.5",
            &mut params,
            &[Value::Numeric(Numeric::from_i64(1))],
        )
        .expect("runs");
        assert_eq!(params, vec![NUMERIC]);
        assert_eq!(r[0].1.as_deref(), Some("f"));
        let e = run_with("$1, $1 + 1.5", &mut Vec::new(), &[]).unwrap_err();
        assert_eq!(e.code, SqlState(*b"42P08"));

        let mut params = Vec::new();
        run_with(
            "$1 like 'a%', $2 = any(array[1,2])",
            &mut params,
            &[Value::Text("a".into()), Value::Int4(1)],
        )
        .expect("runs");
        assert_eq!(params, vec![TEXT, INT4]);
    }

    #[test]
    fn column_names() {
        let name = |s: &str| column_name(&expr(s));
        assert_eq!(name("1"), "?column?");
        assert_eq!(name("1 + 1"), "?column?");
        assert_eq!(name("true"), "?column?");
        assert_eq!(name("1::int"), "int4");
        assert_eq!(name("'x'::text"), "text");
        assert_eq!(name("cast(1 as bigint)"), "int8");
        assert_eq!(name("1::double precision"), "float8");
        assert_eq!(name("'a'::character varying(3)"), "varchar");
        assert_eq!(name("'{1}'::int[]"), "int4");
        assert_eq!(name("date '2024-01-01'"), "date");
        assert_eq!(name("version()"), "version");
        assert_eq!(name("current_setting('x')"), "current_setting");
        assert_eq!(name("NOW()"), "now");
        assert_eq!(name("current_user"), "current_user");
        assert_eq!(name("current_user::text"), "current_user");
        assert_eq!(name("case when true then 1 end"), "case");
        assert_eq!(name("case when true then 1 else now() end"), "now");
        assert_eq!(name("coalesce(1, 2)"), "coalesce");
        assert_eq!(name("array[1]"), "array");
        assert_eq!(name("substring('a' from 1)"), "substring");
        assert_eq!(name("trim(leading 'x' from 'a')"), "ltrim");
        assert_eq!(name("x"), "x");
        assert_eq!(name("t.\"Col\""), "Col");
    }

    #[test]
    fn query_shapes() {
        let plan = |sql: &str| {
            let mut params = Vec::new();
            let mut ctx = PlanCtx::new(&mut params, sql);
            plan_const_select(&query(sql), &mut ctx)
        };
        let p = plan("select 1 as a, 2 as \"B\", 3 as C").expect("plans");
        let names: Vec<&str> = p.columns.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(names, ["a", "B", "c"]);
        let p = plan("values (1, 'a'), (2.5, null)").expect("plans");
        assert_eq!(
            p.columns,
            vec![
                ("column1".to_string(), NUMERIC),
                ("column2".to_string(), TEXT)
            ]
        );
        assert_eq!(
            plan("values (1), ('a'::text)").unwrap_err().code,
            SqlState::DATATYPE_MISMATCH
        );
        assert_eq!(
            plan("values (1, 2), (3)").unwrap_err().code,
            SqlState::SYNTAX_ERROR
        );
        assert_eq!(plan("select *").unwrap_err().code, SqlState::SYNTAX_ERROR);
        let e = plan("select x").unwrap_err();
        assert_eq!(
            (e.code, e.message.as_ref(), e.position),
            (
                SqlState::UNDEFINED_COLUMN,
                "column \"x\" does not exist",
                Some(8)
            )
        );
        assert_eq!(
            plan("select 1/0 where false").unwrap_err().code,
            SqlState::DIVISION_BY_ZERO
        );
        assert_eq!(
            plan("select 1 where 1").unwrap_err().code,
            SqlState::DATATYPE_MISMATCH
        );
        assert_eq!(
            plan("select 1 from t").unwrap_err().code,
            SqlState::FEATURE_NOT_SUPPORTED
        );

        let session = Session {
            text: TextContext::default(),
        };
        let count = |sql: &str| {
            let p = plan(sql).expect("plans");
            let mut env = EvalEnv {
                params: &[],
                row: &[],
                session: &session,
                sleep_us: 0,
                notifies: Vec::new(),
            };
            p.eval_rows(&mut env, &mut |_| Ok(())).expect("evaluates")
        };
        assert_eq!(count("select 1 where false"), 0);
        assert_eq!(count("select 1 where null"), 0);
        assert_eq!(count("select 1 where true"), 1);
        assert_eq!(count("values (1), (2), (3)"), 3);
        assert_eq!(count("values (1), (2), (3) limit 2"), 2);
        assert_eq!(count("values (1), (2), (3) offset 2"), 1);
        assert_eq!(count("select 1 limit 0"), 0);
    }

    #[test]
    fn column_references_use_the_resolver() {
        struct Cols;
        impl ColumnResolver for Cols {
            fn resolve(&self, idents: &[ast::Ident]) -> Result<(usize, Type), PgError> {
                match idents.last().map(|i| i.value.as_str()) {
                    Some("a") => Ok((0, INT4)),
                    Some("b") => Ok((1, TEXT)),
                    _ => Err(PgError::new(
                        SqlState::UNDEFINED_COLUMN,
                        "column does not exist",
                    )),
                }
            }
        }
        let sql = "select a * 2 + 1, b || '!', a > 1 and b like 'x%'";
        let q = query(sql);
        let ast::SetExpr::Select(s) = q.body.as_ref() else {
            panic!()
        };
        let mut params = Vec::new();
        let cols = Cols;
        let mut ctx = PlanCtx {
            params: &mut params,
            columns: Some(&cols),
            source: sql,
            text: None,
            fold: true,
            hook: None,
        };
        let session = Session {
            text: TextContext::default(),
        };
        let exprs: Vec<TypedExpr> = s
            .projection
            .iter()
            .map(|item| match item {
                ast::SelectItem::UnnamedExpr(e) => plan_expr(e, &mut ctx).expect("plans"),
                _ => panic!(),
            })
            .collect();
        assert_eq!(
            exprs.iter().map(|e| e.ty).collect::<Vec<_>>(),
            vec![INT4, TEXT, BOOL]
        );
        for (row, expected) in [
            (
                vec![Value::Int4(20), Value::Text("xy".into())],
                [
                    Value::Int4(41),
                    Value::Text("xy!".into()),
                    Value::Bool(true),
                ],
            ),
            (
                vec![Value::Null, Value::Text("y".into())],
                [Value::Null, Value::Text("y!".into()), Value::Bool(false)],
            ),
        ] {
            let mut env = EvalEnv {
                params: &[],
                row: &row,
                session: &session,
                sleep_us: 0,
                notifies: Vec::new(),
            };
            let got: Vec<Value> = exprs
                .iter()
                .map(|e| e.eval(&mut env).expect("evaluates"))
                .collect();
            assert_eq!(got, expected);
        }
        let bad = expr("c + 1");
        assert_eq!(
            plan_expr(&bad, &mut ctx).unwrap_err().code,
            SqlState::UNDEFINED_COLUMN
        );
    }
}
