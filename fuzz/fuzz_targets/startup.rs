//! The startup phase (SSLRequest/GSSENCRequest/StartupMessage/CancelRequest framing and
//! parsing), whole and chunked: `ringwire_protocol::fuzzing::startup`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringwire_protocol::fuzzing;

// Lets the shared checks measure what each decode allocates.
#[global_allocator]
static GLOBAL: fuzzing::CountingAllocator = fuzzing::CountingAllocator;

fuzz_target!(|data: &[u8]| fuzzing::startup(data));
