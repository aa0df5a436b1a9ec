//! Sharded timestamp oracle (see issue: compute/oracle/dispatcher).
