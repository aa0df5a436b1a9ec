//! The steady-state client path — encode the next query, walk the replies — must not touch
//! the global allocator (STYLE.md). This counts, in-process, with the binary's own counting
//! allocator, for every mode, with and without variables and with an error in the stream.

use ringwire_bench::alloc::{allocations, thread_allocations, CountingAllocator};
use ringwire_bench::client::{scan_replies, ThreadStats};
use ringwire_bench::workload::{Mode, WorkloadSpec};

use protocol::backend::{
    write_command_complete, write_error, write_ready_for_query, write_row_description,
    DataRowWriter, FieldDescription, TransactionStatus,
};
use protocol::error::{PgError, SqlState};
use protocol::Format;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// What a server sends for one row of one int4 column, then an error for the next query.
fn replies() -> Vec<u8> {
    let mut b = Vec::new();
    let field = FieldDescription {
        name: "a",
        table_oid: 0,
        column_id: 0,
        type_oid: 23,
        type_len: 4,
        type_modifier: -1,
        format: Format::Text,
    };
    write_row_description(&mut b, &[field]);
    let mut row = DataRowWriter::begin(&mut b);
    row.value(b"1");
    row.finish();
    write_command_complete(&mut b, "SELECT 1");
    write_ready_for_query(&mut b, TransactionStatus::Idle);
    write_error(
        &mut b,
        &PgError::new(SqlState::SYNTAX_ERROR, "syntax error"),
    );
    write_ready_for_query(&mut b, TransactionStatus::Idle);
    b
}

#[test]
fn the_per_query_path_does_not_allocate() {
    let stream = replies();
    let stats = ThreadStats::new();
    for mode in [Mode::Simple, Mode::Extended, Mode::Prepared] {
        let spec = WorkloadSpec {
            sql: vec![
                ("SELECT * FROM t".into(), 1),
                (
                    "UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid"
                        .into(),
                    2,
                ),
            ],
            params: vec![
                WorkloadSpec::parse_param("aid=1..100000").unwrap(),
                WorkloadSpec::parse_param("delta=-5000..5000").unwrap(),
            ],
            files: vec![],
        };
        let workload = spec.build(mode).unwrap();
        let mut cursor = workload.cursor(3, 42);
        let mut out = Vec::with_capacity(4096);
        // First round outside the count: the first distinct SQLSTATE is remembered with its
        // message, once.
        let mut failed = false;
        scan_replies(&stream, &mut failed, |e| stats.error(e), |_| Ok(())).unwrap();

        assert!(
            allocations().is_some(),
            "the counting allocator is installed"
        );
        let before = thread_allocations();
        let mut ready = 0;
        for _ in 0..10_000 {
            out.clear();
            workload.encode_next(&mut cursor, &mut out);
            let consumed = scan_replies(
                &stream,
                &mut failed,
                |e| stats.error(e),
                |query_failed| {
                    ready += 1;
                    assert_eq!(
                        query_failed,
                        ready % 2 == 0,
                        "the second query of each round failed"
                    );
                    Ok(())
                },
            )
            .unwrap();
            assert_eq!(consumed, stream.len());
            assert!(!out.is_empty());
        }
        let after = thread_allocations();
        assert_eq!(after - before, 0, "{mode:?}: the steady state allocated");
        assert_eq!(ready, 20_000);
    }
    let errors = stats.errors.borrow();
    assert_eq!(errors.len(), 1);
    assert_eq!(&errors[0].0, b"42601");
    assert_eq!(errors[0].1, 3 * 10_001);
}

#[test]
fn partial_replies_wait_for_the_rest() {
    let stream = replies();
    let mut failed = false;
    let mut ready = 0;
    // Feed every prefix: only whole messages are consumed, and the count adds up.
    let mut at = 0;
    for end in 1..=stream.len() {
        let n = scan_replies(
            &stream[at..end],
            &mut failed,
            |_| {},
            |_| {
                ready += 1;
                Ok(())
            },
        )
        .unwrap();
        at += n;
    }
    assert_eq!(at, stream.len());
    assert_eq!(ready, 2);
    // A ReadyForQuery nobody waits for is a protocol error, not a panic.
    let err = scan_replies(
        &stream,
        &mut failed,
        |_| {},
        |_| Err("ReadyForQuery without a query in flight"),
    );
    assert!(err.is_err());
}
