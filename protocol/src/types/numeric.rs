//! Arbitrary-precision `numeric` (placeholder until the types work lands).
#[derive(Clone, Debug, PartialEq)]
pub struct Numeric {}
