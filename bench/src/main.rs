use std::process::ExitCode;

use ringwire_bench::alloc::CountingAllocator;
use ringwire_bench::config::BenchConfig;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn main() -> ExitCode {
    match BenchConfig::from_args(std::env::args_os()) {
        Ok(config) => ringwire_bench::run(&config),
        Err(e) => {
            eprintln!("ringwire-bench: {e}");
            ExitCode::from(2)
        }
    }
}
