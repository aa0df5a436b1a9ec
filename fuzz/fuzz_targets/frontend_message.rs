//! Client messages after startup (framing, every message parser, Bind parameter values as every
//! type), whole and chunked: `ringwire_protocol::fuzzing::frontend_message`. The first input
//! byte picks `--max-message-bytes`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringwire_protocol::fuzzing;

// Lets the shared checks measure what each decode allocates.
#[global_allocator]
static GLOBAL: fuzzing::CountingAllocator = fuzzing::CountingAllocator;

fuzz_target!(|data: &[u8]| fuzzing::frontend_message(data));
