//! Property tests for the decoders: whatever bytes arrive, `split_frame`, `split_startup` and the
//! message parsers return a value or an error — never a panic — and never allocate more than a
//! small multiple of the bytes they were given; and a valid stream decodes to the same messages
//! however the network happens to chunk it.
//!
//! Allocation is measured, not assumed: a counting global allocator records the bytes each
//! decode call asks for on the calling thread (proptest cases run on the test's own thread).

use proptest::collection::vec;
use proptest::prelude::*;
use ringwire_protocol as protocol;

use protocol::backend::{self, BackendMessage, DataRowWriter, FieldDescription, TransactionStatus};
use protocol::frontend::{self, FrontendMessage, StartupRequest, Target};
use protocol::fuzzing::{
    self, allocated_by, assert_backend_allocation_bounded, assert_backend_counts_bounded,
    check_error, check_frame, decode_frontend, decode_startup, expected_missing, CountingAllocator,
    ERROR_ALLOCATION_BYTES_MAX,
};
use protocol::wire::{frame_bytes_needed, split_frame, Frame};
use protocol::{Format, PgError, Severity, SqlState};

// The decoders under test and their invariants live in `protocol::fuzzing`, shared with the
// `cargo fuzz` targets; this file adds the strategies (valid streams, mutations, chunkings).
#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

// ---- the backend decoder, driven the way a client drives it ----

/// Like [`decode_frontend`], for server messages.
fn decode_backend(buf: &[u8], max_message_bytes: usize) -> Vec<String> {
    let mut at = 0;
    let mut out = Vec::new();
    while let Ok(Some((frame, n))) = split_frame(&buf[at..], max_message_bytes) {
        check_frame(&buf[at..], frame, n, max_message_bytes);
        let (parsed, bytes) = allocated_by(|| BackendMessage::parse(frame));
        assert_backend_allocation_bounded(frame.body.len(), bytes);
        match parsed {
            Ok(msg) => {
                assert_backend_counts_bounded(&msg, frame.body.len());
                out.push(format!("{msg:?}"));
            }
            Err(e) => {
                check_error(&e);
                out.push(format!("error {}", e.code));
            }
        }
        at += n;
    }
    out
}

/// Feed `stream` to a growing receive buffer in pieces of `chunks` bytes (cycled), consuming
/// complete frames after every piece as a connection does, and return the decoded messages.
fn decode_chunked(
    stream: &[u8],
    chunks: &[usize],
    decode_one: impl Fn(Frame<'_>) -> String,
) -> Vec<String> {
    let mut received = Vec::new();
    let mut sent = 0;
    let mut out = Vec::new();
    let mut sizes = chunks.iter().copied().cycle();
    while sent < stream.len() {
        let size = sizes.next().unwrap_or(stream.len()).max(1);
        let end = (sent + size).min(stream.len());
        received.extend_from_slice(&stream[sent..end]);
        sent = end;
        loop {
            match split_frame(&received, usize::MAX) {
                Ok(Some((frame, n))) => {
                    out.push(decode_one(frame));
                    received.drain(..n);
                }
                Ok(None) => {
                    if let Some(more) = frame_bytes_needed(&received) {
                        assert_eq!(
                            more,
                            expected_missing(&received),
                            "frame_bytes_needed is off"
                        );
                    }
                    break;
                }
                Err(e) => panic!("a valid stream failed to frame: {e}"),
            }
        }
    }
    assert!(received.is_empty(), "{} bytes left over", received.len());
    out
}

fn frontend_one(frame: Frame<'_>) -> String {
    format!(
        "{:?}",
        FrontendMessage::parse(frame).expect("a valid message failed to parse")
    )
}

fn backend_one(frame: Frame<'_>) -> String {
    format!(
        "{:?}",
        BackendMessage::parse(frame).expect("a valid message failed to parse")
    )
}

// ---- strategies: valid message streams ----

/// Text without NUL (which the protocol cannot carry inside a string).
fn text() -> impl Strategy<Value = String> {
    "[^\u{0}]{0,24}"
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z_][a-z0-9_]{0,10}"]
}

fn format() -> impl Strategy<Value = Format> {
    prop_oneof![Just(Format::Text), Just(Format::Binary)]
}

#[derive(Clone, Debug)]
enum ClientMessage {
    Query(String),
    Parse {
        name: String,
        sql: String,
        types: Vec<u32>,
    },
    Bind {
        portal: String,
        statement: String,
        param_formats: Vec<Format>,
        params: Vec<Option<Vec<u8>>>,
        result_formats: Vec<Format>,
    },
    Describe(Target, String),
    Execute(String, i32),
    Close(Target, String),
    Empty(u8),
    CopyData(Vec<u8>),
    CopyFail(String),
    Password(String),
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![Just(Target::Statement), Just(Target::Portal)]
}

fn bind() -> impl Strategy<Value = ClientMessage> {
    (
        name(),
        name(),
        vec(proptest::option::of(vec(any::<u8>(), 0..16)), 0..8),
        0usize..3,
        format(),
        vec(format(), 0..4),
    )
        .prop_map(
            |(portal, statement, params, format_kind, one, result_formats)| {
                // The 0 / 1 / one-per-parameter rule for parameter formats.
                let param_formats = match format_kind {
                    0 => vec![],
                    1 => vec![one],
                    _ => params
                        .iter()
                        .enumerate()
                        .map(|(i, _)| if i % 2 == 0 { one } else { Format::Text })
                        .collect(),
                };
                ClientMessage::Bind {
                    portal,
                    statement,
                    param_formats,
                    params,
                    result_formats,
                }
            },
        )
}

fn client_message() -> impl Strategy<Value = ClientMessage> {
    prop_oneof![
        text().prop_map(ClientMessage::Query),
        (name(), text(), vec(any::<u32>(), 0..6))
            .prop_map(|(name, sql, types)| ClientMessage::Parse { name, sql, types }),
        bind(),
        (target(), name()).prop_map(|(t, n)| ClientMessage::Describe(t, n)),
        (name(), any::<i32>()).prop_map(|(p, n)| ClientMessage::Execute(p, n)),
        (target(), name()).prop_map(|(t, n)| ClientMessage::Close(t, n)),
        prop_oneof![Just(b'S'), Just(b'H'), Just(b'X'), Just(b'c')].prop_map(ClientMessage::Empty),
        vec(any::<u8>(), 0..64).prop_map(ClientMessage::CopyData),
        text().prop_map(ClientMessage::CopyFail),
        text().prop_map(ClientMessage::Password),
    ]
}

fn encode_client(messages: &[ClientMessage]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        match m {
            ClientMessage::Query(sql) => frontend::encode_query(&mut out, sql),
            ClientMessage::Parse { name, sql, types } => {
                frontend::encode_parse(&mut out, name, sql, types)
            }
            ClientMessage::Bind {
                portal,
                statement,
                param_formats,
                params,
                result_formats,
            } => {
                let params: Vec<Option<&[u8]>> = params.iter().map(|p| p.as_deref()).collect();
                frontend::encode_bind(
                    &mut out,
                    portal,
                    statement,
                    param_formats,
                    &params,
                    result_formats,
                )
            }
            ClientMessage::Describe(t, n) => frontend::encode_describe(&mut out, *t, n),
            ClientMessage::Execute(p, n) => frontend::encode_execute(&mut out, p, *n),
            ClientMessage::Close(t, n) => frontend::encode_close(&mut out, *t, n),
            ClientMessage::Empty(tag) => frontend::encode_empty(&mut out, *tag),
            ClientMessage::CopyData(d) => frontend::encode_copy_data(&mut out, d),
            ClientMessage::CopyFail(m) => frontend::encode_copy_fail(&mut out, m),
            ClientMessage::Password(p) => frontend::encode_password(&mut out, p),
        }
    }
    out
}

/// The decoded message must say what was encoded.
fn assert_decodes_to(msg: &FrontendMessage<'_>, want: &ClientMessage) {
    match (want, msg) {
        (ClientMessage::Query(s), FrontendMessage::Query { sql }) => assert_eq!(s, sql),
        (
            ClientMessage::Parse {
                name: n,
                sql: s,
                types,
            },
            FrontendMessage::Parse {
                name,
                sql,
                param_types,
            },
        ) => {
            assert_eq!((n.as_str(), s.as_str()), (*name, *sql));
            assert_eq!(&param_types.iter().collect::<Vec<_>>(), types);
        }
        (
            ClientMessage::Bind {
                portal,
                statement,
                param_formats,
                params,
                result_formats,
            },
            FrontendMessage::Bind(b),
        ) => {
            assert_eq!(
                (portal.as_str(), statement.as_str()),
                (b.portal, b.statement)
            );
            assert_eq!(b.param_count(), params.len());
            let got: Vec<Option<&[u8]>> = b.params().collect();
            let want: Vec<Option<&[u8]>> = params.iter().map(|p| p.as_deref()).collect();
            assert_eq!(got, want);
            for i in 0..params.len() {
                let expected = match param_formats.len() {
                    0 => Format::Text,
                    1 => param_formats[0],
                    _ => param_formats[i],
                };
                assert_eq!(b.param_format(i), expected);
            }
            assert_eq!(&b.result_format_codes().collect::<Vec<_>>(), result_formats);
        }
        (ClientMessage::Describe(t, n), FrontendMessage::Describe { target, name }) => {
            assert_eq!((t, n.as_str()), (target, *name))
        }
        (ClientMessage::Execute(p, n), FrontendMessage::Execute { portal, max_rows }) => {
            assert_eq!((p.as_str(), n), (*portal, max_rows))
        }
        (ClientMessage::Close(t, n), FrontendMessage::Close { target, name }) => {
            assert_eq!((t, n.as_str()), (target, *name))
        }
        (ClientMessage::Empty(b'S'), FrontendMessage::Sync)
        | (ClientMessage::Empty(b'H'), FrontendMessage::Flush)
        | (ClientMessage::Empty(b'X'), FrontendMessage::Terminate)
        | (ClientMessage::Empty(b'c'), FrontendMessage::CopyDone) => {}
        (ClientMessage::CopyData(d), FrontendMessage::CopyData { data }) => {
            assert_eq!(d.as_slice(), *data)
        }
        (ClientMessage::CopyFail(m), FrontendMessage::CopyFail { message }) => {
            assert_eq!(m, message)
        }
        (ClientMessage::Password(p), FrontendMessage::Password { body }) => {
            assert_eq!(frontend::parse_password(body).expect("password"), p)
        }
        (want, got) => panic!("encoded {want:?}, decoded {got:?}"),
    }
}

#[derive(Clone, Debug)]
enum ServerMessage {
    ParameterStatus(String, String),
    BackendKeyData(i32, i32),
    ReadyForQuery(u8),
    RowDescription(Vec<(String, u32, i16, u32, i16, i32, Format)>),
    DataRow(Vec<Option<Vec<u8>>>),
    CommandComplete(String),
    Error(String, Option<String>, Option<u32>),
    Notice(String),
    Short(u8),
    ParameterDescription(Vec<u32>),
    Negotiate(u32, Vec<String>),
    Sasl(Vec<String>),
    CopyResponse(bool, Format, usize),
    CopyData(Vec<u8>),
}

fn server_message() -> impl Strategy<Value = ServerMessage> {
    let field = (
        "[^\u{0}]{0,12}",
        any::<u32>(),
        any::<i16>(),
        any::<u32>(),
        any::<i16>(),
        any::<i32>(),
        format(),
    );
    prop_oneof![
        (text(), text()).prop_map(|(n, v)| ServerMessage::ParameterStatus(n, v)),
        (any::<i32>(), any::<i32>()).prop_map(|(p, k)| ServerMessage::BackendKeyData(p, k)),
        prop_oneof![Just(b'I'), Just(b'T'), Just(b'E')].prop_map(ServerMessage::ReadyForQuery),
        vec(field, 0..5).prop_map(ServerMessage::RowDescription),
        vec(proptest::option::of(vec(any::<u8>(), 0..12)), 0..10).prop_map(ServerMessage::DataRow),
        text().prop_map(ServerMessage::CommandComplete),
        (
            text(),
            proptest::option::of(text()),
            proptest::option::of(any::<u32>())
        )
            .prop_map(|(m, d, p)| ServerMessage::Error(m, d, p)),
        text().prop_map(ServerMessage::Notice),
        prop_oneof![
            Just(b'I'),
            Just(b'1'),
            Just(b'2'),
            Just(b'3'),
            Just(b'n'),
            Just(b's'),
            Just(b'c')
        ]
        .prop_map(ServerMessage::Short),
        vec(any::<u32>(), 0..8).prop_map(ServerMessage::ParameterDescription),
        (any::<u32>(), vec("_pq_\\.[a-z]{1,8}", 0..4))
            .prop_map(|(m, o)| ServerMessage::Negotiate(m, o)),
        vec("[A-Z0-9-]{1,16}", 0..3).prop_map(ServerMessage::Sasl),
        (any::<bool>(), format(), 0usize..6)
            .prop_map(|(i, f, n)| ServerMessage::CopyResponse(i, f, n)),
        vec(any::<u8>(), 0..64).prop_map(ServerMessage::CopyData),
    ]
}

fn encode_server(messages: &[ServerMessage]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        match m {
            ServerMessage::ParameterStatus(n, v) => backend::write_parameter_status(&mut out, n, v),
            ServerMessage::BackendKeyData(p, k) => {
                backend::write_backend_key_data(&mut out, *p, *k)
            }
            ServerMessage::ReadyForQuery(s) => backend::write_ready_for_query(
                &mut out,
                match s {
                    b'I' => TransactionStatus::Idle,
                    b'T' => TransactionStatus::InBlock,
                    _ => TransactionStatus::Failed,
                },
            ),
            ServerMessage::RowDescription(fields) => {
                let fields: Vec<FieldDescription<'_>> = fields
                    .iter()
                    .map(
                        |(
                            name,
                            table_oid,
                            column_id,
                            type_oid,
                            type_len,
                            type_modifier,
                            format,
                        )| FieldDescription {
                            name,
                            table_oid: *table_oid,
                            column_id: *column_id,
                            type_oid: *type_oid,
                            type_len: *type_len,
                            type_modifier: *type_modifier,
                            format: *format,
                        },
                    )
                    .collect();
                backend::write_row_description(&mut out, &fields)
            }
            ServerMessage::DataRow(values) => {
                let mut row = DataRowWriter::begin(&mut out);
                for v in values {
                    match v {
                        Some(v) => row.value(v),
                        None => row.null(),
                    }
                }
                row.finish();
            }
            ServerMessage::CommandComplete(t) => backend::write_command_complete(&mut out, t),
            ServerMessage::Error(m, d, p) => {
                let mut e = PgError::new(SqlState::SYNTAX_ERROR, m.clone());
                e.detail = d.clone();
                e.position = *p;
                backend::write_error(&mut out, &e)
            }
            ServerMessage::Notice(m) => backend::write_notice(
                &mut out,
                &PgError {
                    severity: Severity::Warning,
                    ..PgError::new(SqlState::WARNING, m.clone())
                },
            ),
            ServerMessage::Short(tag) => match tag {
                b'I' => backend::write_empty_query_response(&mut out),
                b'1' => backend::write_parse_complete(&mut out),
                b'2' => backend::write_bind_complete(&mut out),
                b'3' => backend::write_close_complete(&mut out),
                b'n' => backend::write_no_data(&mut out),
                b's' => backend::write_portal_suspended(&mut out),
                _ => backend::write_copy_done(&mut out),
            },
            ServerMessage::ParameterDescription(types) => {
                backend::write_parameter_description(&mut out, types)
            }
            ServerMessage::Negotiate(minor, options) => backend::write_negotiate_protocol_version(
                &mut out,
                *minor,
                options.iter().map(String::as_str),
            ),
            ServerMessage::Sasl(mechanisms) => {
                let m: Vec<&str> = mechanisms.iter().map(String::as_str).collect();
                backend::write_auth_sasl(&mut out, &m)
            }
            ServerMessage::CopyResponse(copy_in, format, columns) => backend::write_copy_response(
                &mut out,
                if *copy_in { b'G' } else { b'H' },
                *format,
                *columns,
            ),
            ServerMessage::CopyData(d) => backend::write_copy_data(&mut out, d),
        }
    }
    out
}

/// One valid startup exchange: optional SSL/GSS requests, then a StartupMessage or a
/// CancelRequest.
#[derive(Clone, Debug)]
enum StartupScript {
    Startup {
        preludes: Vec<bool>,
        version_minor: u16,
        params: Vec<(String, String)>,
    },
    Cancel {
        process_id: i32,
        key: Vec<u8>,
    },
}

fn startup_script() -> impl Strategy<Value = StartupScript> {
    prop_oneof![
        (
            vec(any::<bool>(), 0..3),
            0u16..3,
            vec(("[a-z_.]{1,12}", text()), 0..6)
        )
            .prop_map(|(preludes, version_minor, params)| StartupScript::Startup {
                preludes,
                version_minor,
                params
            }),
        (any::<i32>(), vec(any::<u8>(), 4..=256))
            .prop_map(|(process_id, key)| StartupScript::Cancel { process_id, key }),
    ]
}

fn encode_startup_script(script: &StartupScript) -> Vec<u8> {
    let mut out = Vec::new();
    match script {
        StartupScript::Startup {
            preludes,
            version_minor,
            params,
        } => {
            for ssl in preludes {
                if *ssl {
                    frontend::encode_ssl_request(&mut out)
                } else {
                    frontend::encode_gssenc_request(&mut out)
                }
            }
            let params: Vec<(&str, &str)> = params
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            frontend::encode_startup(
                &mut out,
                frontend::PROTOCOL_3_0 | u32::from(*version_minor),
                &params,
            );
        }
        StartupScript::Cancel { process_id, key } => {
            frontend::encode_cancel(&mut out, *process_id, key)
        }
    }
    out
}

/// A valid encoding with a few bytes overwritten, inserted or removed: reaches deep into the
/// body parsers, which uniformly random bytes rarely do.
fn mutate(mut bytes: Vec<u8>, edits: &[(usize, u8, u8)]) -> Vec<u8> {
    for &(at, kind, value) in edits {
        if bytes.is_empty() {
            bytes.push(value);
            continue;
        }
        let at = at % bytes.len();
        match kind % 4 {
            0 | 1 => bytes[at] = value,
            2 => bytes.insert(at, value),
            _ => {
                bytes.remove(at);
            }
        }
    }
    bytes
}

fn edits() -> impl Strategy<Value = Vec<(usize, u8, u8)>> {
    vec(
        (
            any::<usize>(),
            any::<u8>(),
            prop_oneof![any::<u8>(), Just(0u8), Just(0xffu8), Just(0x7fu8)],
        ),
        1..6,
    )
}

fn chunk_sizes() -> impl Strategy<Value = Vec<usize>> {
    vec(prop_oneof![1usize..8, 1usize..200], 1..32)
}

/// Frames with a correct length and a chosen tag around an arbitrary body.
fn tagged_frames(tags: &'static [u8]) -> impl Strategy<Value = Vec<u8>> {
    vec(
        (proptest::sample::select(tags), vec(any::<u8>(), 0..64)),
        1..8,
    )
    .prop_map(|frames| {
        let mut out = Vec::new();
        for (tag, body) in frames {
            out.push(tag);
            out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
            out.extend_from_slice(&body);
        }
        out
    })
}

const FRONTEND_TAGS: &[u8] = b"QPBDECSHXpdcfFz\0";
const BACKEND_TAGS: &[u8] = b"RSKZTDCIEN123nstvGHdcAq\0";

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_the_frontend_decoders(bytes in vec(any::<u8>(), 0..512)) {
        // The fuzz targets' entry points: whole and chunked, first byte picks the limit.
        fuzzing::frontend_message(&bytes);
        fuzzing::startup(&bytes);
    }

    #[test]
    fn arbitrary_bodies_never_panic_the_frontend_parser(bytes in tagged_frames(FRONTEND_TAGS)) {
        let decoded = decode_frontend(&bytes, usize::MAX);
        prop_assert!(!decoded.is_empty());
    }

    #[test]
    fn arbitrary_bytes_never_panic_or_overallocate_the_backend_decoder(bytes in vec(any::<u8>(), 0..512)) {
        decode_backend(&bytes, usize::MAX);
    }

    #[test]
    fn arbitrary_bodies_never_panic_or_overallocate_the_backend_parser(bytes in tagged_frames(BACKEND_TAGS)) {
        let decoded = decode_backend(&bytes, usize::MAX);
        prop_assert!(!decoded.is_empty());
    }

    #[test]
    fn hostile_counts_in_backend_messages_stay_bounded(tag in proptest::sample::select(b"DTtvGHR".as_slice()), count in any::<i16>(), wide in any::<i32>(), tail in vec(any::<u8>(), 0..40)) {
        // A count (16- or 32-bit, as the message has it) claiming far more items than follow.
        let mut body = Vec::new();
        match tag {
            b'v' => {
                body.extend_from_slice(&0i32.to_be_bytes());
                body.extend_from_slice(&wide.to_be_bytes());
            }
            b'G' | b'H' => {
                body.push(0);
                body.extend_from_slice(&count.to_be_bytes());
            }
            b'R' => body.extend_from_slice(&10i32.to_be_bytes()),
            _ => body.extend_from_slice(&count.to_be_bytes()),
        }
        body.extend_from_slice(&tail);
        let (parsed, bytes) = allocated_by(|| BackendMessage::parse(Frame { tag, body: &body }));
        assert_backend_allocation_bounded(body.len(), bytes);
        if let Ok(msg) = parsed {
            assert_backend_counts_bounded(&msg, body.len());
        }
    }

    #[test]
    fn mutated_client_streams_never_panic(messages in vec(client_message(), 1..8), edits in edits(), max in prop_oneof![Just(usize::MAX), 4usize..300], limit in any::<u8>()) {
        let bytes = mutate(encode_client(&messages), &edits);
        decode_frontend(&bytes, max);
        let mut input = vec![limit];
        input.extend_from_slice(&bytes);
        fuzzing::frontend_message(&input);
    }

    #[test]
    fn mutated_server_streams_never_panic_or_overallocate(messages in vec(server_message(), 1..8), edits in edits()) {
        let bytes = mutate(encode_server(&messages), &edits);
        decode_backend(&bytes, usize::MAX);
    }

    #[test]
    fn mutated_startup_packets_never_panic(script in startup_script(), edits in edits()) {
        let bytes = mutate(encode_startup_script(&script), &edits);
        fuzzing::startup(&bytes);
    }

    #[test]
    fn mutated_captured_client_traffic_never_panics(seed in any::<prop::sample::Index>(), edits in edits(), startup in any::<bool>()) {
        // The fuzz targets' seed corpus (traffic captured from psql, pgbench, tokio-postgres)
        // with a few bytes changed: what the fuzzer starts from, on every CI run.
        let (target, seeds) = if startup { ("startup", &*STARTUP_SEEDS) } else { ("frontend_message", &*FRONTEND_SEEDS) };
        prop_assume!(!seeds.is_empty(), "no seeds for {}", target);
        let bytes = mutate(seeds[seed.index(seeds.len())].clone(), &edits);
        if startup { fuzzing::startup(&bytes) } else { fuzzing::frontend_message(&bytes) }
    }

    #[test]
    fn client_streams_decode_the_same_whole_and_chunked(messages in vec(client_message(), 1..12), chunks in chunk_sizes()) {
        let stream = encode_client(&messages);
        // Whole: every message decodes, to what was encoded.
        let mut at = 0;
        let mut whole = Vec::new();
        for want in &messages {
            let (frame, n) = split_frame(&stream[at..], usize::MAX).expect("frame").expect("complete frame");
            let msg = FrontendMessage::parse(frame).expect("valid message");
            assert_decodes_to(&msg, want);
            whole.push(format!("{msg:?}"));
            at += n;
        }
        prop_assert_eq!(at, stream.len());
        prop_assert_eq!(&decode_frontend(&stream, usize::MAX), &whole);
        prop_assert_eq!(decode_chunked(&stream, &chunks, frontend_one), whole);
    }

    #[test]
    fn every_prefix_of_a_client_stream_is_partial_not_an_error(messages in vec(client_message(), 1..6), cut in any::<prop::sample::Index>()) {
        let stream = encode_client(&messages);
        let cut = cut.index(stream.len());
        // A prefix decodes to a prefix of the messages and then waits; it never fails.
        let whole = decode_frontend(&stream, usize::MAX);
        let partial = decode_frontend(&stream[..cut], usize::MAX);
        prop_assert!(partial.len() <= whole.len());
        prop_assert_eq!(&whole[..partial.len()], &partial[..]);
        prop_assert!(partial.iter().all(|m| !m.starts_with("error") && !m.starts_with("fatal")));
    }

    #[test]
    fn server_streams_decode_the_same_whole_and_chunked(messages in vec(server_message(), 1..12), chunks in chunk_sizes()) {
        let stream = encode_server(&messages);
        let whole = decode_backend(&stream, usize::MAX);
        prop_assert_eq!(whole.len(), messages.len());
        prop_assert!(whole.iter().all(|m| !m.starts_with("error")), "a valid server message failed to parse: {:?}", whole);
        prop_assert_eq!(decode_chunked(&stream, &chunks, backend_one), whole);
    }

    #[test]
    fn startup_exchanges_decode_the_same_whole_and_chunked(script in startup_script(), chunks in chunk_sizes()) {
        let stream = encode_startup_script(&script);
        let whole = decode_startup(&stream);
        let preludes = match &script {
            StartupScript::Startup { preludes, .. } => preludes.len(),
            StartupScript::Cancel { .. } => 0,
        };
        prop_assert_eq!(whole.len(), preludes + 1, "every packet decodes: {:?}", whole);
        prop_assert!(whole.iter().all(|m| !m.starts_with("fatal")), "{:?}", whole);
        match &script {
            StartupScript::Startup { params, .. } => {
                let pairs: Vec<(&str, &str)> = params.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                let last = whole.last().expect("decoded");
                prop_assert!(last.ends_with(&format!("{pairs:?}")), "{} lacks {:?}", last, pairs);
            }
            StartupScript::Cancel { process_id, .. } => {
                prop_assert!(whole[0].contains(&format!("process_id: {process_id}")), "{}", whole[0]);
            }
        }
        // Chunked, as the server's startup loop reads: whatever has arrived, packet by packet.
        let mut received = Vec::new();
        let mut sent = 0;
        let mut chunked = Vec::new();
        let mut sizes = chunks.iter().copied().cycle();
        while sent < stream.len() {
            let end = (sent + sizes.next().unwrap_or(1).max(1)).min(stream.len());
            received.extend_from_slice(&stream[sent..end]);
            sent = end;
            while let Some((body, n)) = frontend::split_startup(&received).expect("valid startup framing") {
                let req = StartupRequest::parse(body).expect("valid startup packet");
                chunked.push(match req {
                    StartupRequest::Startup { params, .. } => format!("{req:?} {:?}", params.iter().collect::<Vec<_>>()),
                    _ => format!("{req:?}"),
                });
                received.drain(..n);
            }
        }
        prop_assert!(received.is_empty());
        prop_assert_eq!(chunked, whole);
    }
}

/// The limit is enforced from the header alone: five bytes announcing a huge message are an
/// error before any of the body exists.
#[test]
fn oversized_frames_fail_from_the_header_alone() {
    for len in [65_537i32, i32::MAX] {
        let mut header = vec![b'Q'];
        header.extend_from_slice(&len.to_be_bytes());
        let (r, bytes) = allocated_by(|| split_frame(&header, 65_536));
        let e = r.expect_err("oversized frame accepted");
        assert_eq!(
            (e.severity, e.code),
            (Severity::Fatal, SqlState::PROTOCOL_VIOLATION)
        );
        assert!(bytes <= ERROR_ALLOCATION_BYTES_MAX);
    }
    // At the limit it is merely partial.
    let mut header = vec![b'Q'];
    header.extend_from_slice(&65_536i32.to_be_bytes());
    assert_eq!(
        split_frame(&header, 65_536).expect("within the limit"),
        None
    );
    // Startup packets have PostgreSQL's fixed bound.
    assert!(frontend::split_startup(&100_000i32.to_be_bytes()).is_err());
    assert!(frontend::split_startup(&3i32.to_be_bytes()).is_err());
}

/// The counting allocator itself must see allocations, or every bound above would pass vacuously.
#[test]
fn the_allocation_counter_counts() {
    let (v, bytes) = allocated_by(|| vec![0u8; 1000]);
    assert!(
        bytes >= 1000,
        "counted {bytes} bytes for a 1000-byte vector"
    );
    drop(v);
    // A DataRow of 100 NULLs: 100 `Option<&[u8]>` from 402 bytes of body.
    let mut body = 100i16.to_be_bytes().to_vec();
    for _ in 0..100 {
        body.extend_from_slice(&(-1i32).to_be_bytes());
    }
    let (msg, bytes) = allocated_by(|| {
        BackendMessage::parse(Frame {
            tag: b'D',
            body: &body,
        })
    });
    assert!(matches!(msg, Ok(BackendMessage::DataRow { ref values }) if values.len() == 100));
    assert!(bytes >= 100 * std::mem::size_of::<Option<&[u8]>>());
}

// ---- the fuzz corpus: captured seeds and regressions ----

/// Every file under `fuzz/<dir>/<target>/`: the committed seeds (`seeds`) or the inputs that
/// once broke a decoder (`regressions`).
fn fuzz_inputs(dir: &str, target: &str) -> Vec<Vec<u8>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz")
        .join(dir)
        .join(target);
    let Ok(entries) = std::fs::read_dir(&path) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .map(|e| e.expect("readable fuzz dir").path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read(f).expect("readable fuzz input"))
        .collect()
}

static STARTUP_SEEDS: std::sync::LazyLock<Vec<Vec<u8>>> =
    std::sync::LazyLock::new(|| fuzz_inputs("seeds", "startup"));
static FRONTEND_SEEDS: std::sync::LazyLock<Vec<Vec<u8>>> =
    std::sync::LazyLock::new(|| fuzz_inputs("seeds", "frontend_message"));

/// The captured seeds decode cleanly (they are real clients' traffic: no errors), and every
/// recorded finding runs through its target without a panic.
#[test]
fn seeds_decode_and_regressions_pass() {
    assert!(
        STARTUP_SEEDS.len() >= 3 && FRONTEND_SEEDS.len() >= 3,
        "the seed corpus is missing: {} startup, {} frontend seeds",
        STARTUP_SEEDS.len(),
        FRONTEND_SEEDS.len()
    );
    for seed in STARTUP_SEEDS.iter() {
        let decoded = decode_startup(seed);
        assert!(
            !decoded.is_empty() && decoded.iter().all(|m| !m.starts_with("fatal")),
            "a captured startup failed to decode: {decoded:?}"
        );
        fuzzing::startup(seed);
    }
    for seed in FRONTEND_SEEDS.iter() {
        // Seeds start with the limit byte (0: unlimited).
        let decoded = decode_frontend(&seed[1..], usize::MAX);
        assert!(
            !decoded.is_empty()
                && decoded
                    .iter()
                    .all(|m| !m.starts_with("error") && !m.starts_with("fatal")),
            "captured client traffic failed to decode: {decoded:?}"
        );
        fuzzing::frontend_message(seed);
    }
    for input in fuzz_inputs("regressions", "startup") {
        fuzzing::startup(&input);
    }
    for input in fuzz_inputs("regressions", "frontend_message") {
        fuzzing::frontend_message(&input);
    }
}
