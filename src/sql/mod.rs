//! SQL expressions: planning with PostgreSQL typing rules, then evaluation.
pub mod expr;
