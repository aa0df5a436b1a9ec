//! Statement text through the SQL front (sqlparser, literal lifting, planning against pgbench's
//! tables and one of every type, folding, evaluating constant SELECTs), as a simple Query and as
//! Parse + Bind: `ringwire::fuzzing::sql_plan`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ringwire::fuzzing::sql_plan(data);
});
