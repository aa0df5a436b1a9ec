//! SQL planning: typed expressions with PostgreSQL's typing rules ([`expr`]), and statements
//! over tables planned into the compute's plans ([`plan`]).
pub mod expr;
pub mod plan;
