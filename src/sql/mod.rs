//! SQL planning: typed expressions with PostgreSQL's typing rules ([`expr`]), and statements
//! over tables planned into the compute's plans ([`plan`]), and the literal lifting that lets
//! simple-protocol statements differing only in constants share a plan ([`lift`]).
pub mod expr;
pub mod lift;
pub mod plan;
