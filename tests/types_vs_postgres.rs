//! ringwire's value formats checked against a real PostgreSQL 15.
//!
//! For each literal, PostgreSQL's text output (simple query) and binary output (extended query,
//! raw bytes) are compared with `protocol::types::{text, binary}`:
//! (a) PG's text == `text::encode(text::decode(PG's text))`;
//! (b) PG's bytes == `binary::encode` of that value, and `binary::decode(PG's bytes)` is the
//!     same value;
//! plus the column type's OID, name and typlen, `SHOW TimeZone`, error SQLSTATEs and messages for
//! bad input, and `Numeric` arithmetic results.
//!
//! Needs PostgreSQL 15 server binaries at /usr/local/bin/postgres (or
//! /usr/lib/postgresql/15/bin); CI's `.ci/run` installs them. See `common/postgres.rs`.

mod common;

use common::postgres::Postgres;
use protocol::types::{binary, text, Numeric, Scalar, TextContext, TimeZone, Type, Value};
use tokio_postgres::types::{FromSql, Type as PgType};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// A column value as raw wire bytes, whatever its type.
struct Raw(Vec<u8>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(
        _: &PgType,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw.to_vec()))
    }

    fn accepts(_: &PgType) -> bool {
        true
    }
}

/// Session settings for a group of literals, and the literals.
struct Group {
    time_zone: &'static str,
    extra_float_digits: i32,
    selects: &'static [&'static str],
}

const GROUPS: &[Group] = &[
    Group {
        time_zone: "UTC",
        extra_float_digits: 1,
        selects: &[
            // bool
            "select true",
            "select 'no'::bool",
            "select array[true, false, null]::bool[]",
            // integers
            "select 0::int2",
            "select (-32768)::int2",
            "select 32767::int2",
            "select '{1,-2,NULL}'::int2[]",
            "select 2147483647",
            "select (-2147483648)::int4",
            "select '{1,NULL,3}'::int4[]",
            "select '{}'::int4[]",
            "select 9223372036854775807",
            "select (-9223372036854775808)::int8",
            "select '{1,2}'::int8[]",
            // float4
            "select '1.1'::float4",
            "select 'NaN'::float4",
            "select 'Infinity'::float4",
            "select '-Infinity'::float4",
            "select '-0'::float4",
            "select '1e-45'::float4",
            "select '3.4028235e38'::float4",
            "select '1e6'::float4",
            "select '100000'::float4",
            "select '{1.5,NaN,-0,Infinity}'::float4[]",
            // float8
            "select '1.5e-7'::float8",
            "select '1e100'::float8",
            "select '-0'::float8",
            "select 'NaN'::float8",
            "select 'Infinity'::float8",
            "select '-Infinity'::float8",
            "select '5e-324'::float8",
            "select '1.7976931348623157e308'::float8",
            "select 0.1::float8",
            "select 123456789012345678::float8",
            "select 1e15::float8",
            "select 1e14::float8",
            "select 0.0001::float8",
            "select 0.00001::float8",
            "select '{1.5,-Infinity,NULL}'::float8[]",
            // numeric
            "select 123.4500::numeric",
            "select 'NaN'::numeric",
            "select 'Infinity'::numeric",
            "select '-Infinity'::numeric",
            "select -0.000123::numeric",
            "select 1e100::numeric",
            "select '12345678901234567890.12345678901234567890'::numeric",
            "select 0::numeric",
            "select 0.000::numeric",
            "select -5::numeric",
            "select 10000::numeric",
            "select 9999.9999::numeric",
            "select '1e-20'::numeric",
            "select '-1.5e-7'::numeric",
            "select 1::numeric / 3",
            "select '{1.5,NaN,-2.25,NULL,Infinity}'::numeric[]",
            // text-like
            "select 'hello'::text",
            "select ''::text",
            "select 'a b'::text",
            "select 'é中文😀'::text",
            "select E'tab\\there'::text",
            r#"select '{"a b","x\"y",NULL,"","null","NULL"}'::text[]"#,
            r#"select array['{', '}', ',', '\', ' lead', 'trail ', E'new\nline', 'plain']::text[]"#,
            "select 'abc'::varchar",
            "select '{x,y}'::varchar[]",
            "select 'ab '::bpchar",
            "select 'ab'::char(4)",
            r#"select '{a,"b "}'::bpchar[]"#,
            "select 'abc'::name",
            "select repeat('x', 70)::name",
            "select '{a,b}'::name[]",
            // bytea
            r"select '\x00ff'::bytea",
            "select ''::bytea",
            "select 'abc'::bytea",
            r#"select '{"\\x01",NULL,"\\x"}'::bytea[]"#,
            // date
            "select '2024-06-01'::date",
            "select '0044-03-15 BC'::date",
            "select '4714-11-24 BC'::date",
            "select '5874897-12-31'::date",
            "select 'infinity'::date",
            "select '-infinity'::date",
            "select '2000-01-01'::date",
            "select '1999-12-31'::date",
            "select '{2024-06-01,NULL,infinity}'::date[]",
            // time
            "select '00:00'::time",
            "select '24:00:00'::time",
            "select '12:34:56.789'::time",
            "select '23:59:59.999999'::time",
            "select '{12:00,NULL}'::time[]",
            // timestamp
            "select '2024-06-01 12:00:00.5'::timestamp",
            "select '294276-12-31 23:59:59.999999'::timestamp",
            "select '4714-11-24 00:00:00 BC'::timestamp",
            "select 'infinity'::timestamp",
            "select '-infinity'::timestamp",
            "select '2000-01-01 00:00:00'::timestamp",
            "select '1999-12-31 23:59:59.999999'::timestamp",
            "select '0001-01-01 00:00:00 BC'::timestamp",
            r#"select '{"2024-06-01 12:00:00",NULL}'::timestamp[]"#,
            // timestamptz
            "select '2024-06-01 12:00:00.5+02'::timestamptz",
            "select '2024-06-01 12:00:00+00'::timestamptz",
            "select '1800-01-01 00:00+00'::timestamptz",
            "select 'infinity'::timestamptz",
            "select '-infinity'::timestamptz",
            "select '0001-01-01 00:00:00+00 BC'::timestamptz",
            r#"select '{"2024-06-01 12:00+00",NULL}'::timestamptz[]"#,
            // interval
            "select interval '-1 year 2 mons -3 days 04:05:06.789'",
            "select interval '1 year 2 mons 3 days 04:05:06.5'",
            "select interval '0'",
            "select interval '-04:05:06'",
            "select interval '1 day -1 hour'",
            "select interval 'P1Y2M'",
            "select interval '178000000 years'",
            "select interval '-2147483648 days'",
            "select interval '100000 hours'",
            "select interval '-00:00:00.000001'",
            r#"select '{"1 day",NULL,"-1 mons"}'::interval[]"#,
            // uuid
            "select 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid",
            "select '00000000-0000-0000-0000-000000000000'::uuid",
            "select '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}'::uuid[]",
            // json / jsonb
            r#"select '{"b":1,  "a":[1,2]}'::json"#,
            "select '[]'::json",
            r#"select '{"{\"a\": 1}",NULL}'::json[]"#,
            r#"select '{"b":1,"a":[1,2.50,{"c":null}],"aa":true, "b":"x\u0041\n"}'::jsonb"#,
            "select '1e2'::jsonb",
            r#"select '"\u00e9\t\u0001"'::jsonb"#,
            "select '[]'::jsonb",
            r#"select '{"{\"b\":1,\"a\":2}",NULL}'::jsonb[]"#,
            // void
            "select pg_sleep(0)",
        ],
    },
    Group {
        time_zone: "Europe/Berlin",
        extra_float_digits: 1,
        selects: &[
            "select '2024-06-01 12:00:00+00'::timestamptz",
            "select '2024-01-15 12:00:00'::timestamptz",
            "select '1800-01-01 00:00+00'::timestamptz",
            "select '2060-07-01 00:00+00'::timestamptz",
            "select '2024-03-31 02:30:00'::timestamptz",
            "select '2024-10-27 02:30:00'::timestamptz",
            "select '0044-03-15 12:00:00 BC'::timestamptz",
            r#"select '{"2024-06-01 12:00+00","2024-12-01 12:00+00"}'::timestamptz[]"#,
            "select '2024-06-01 12:00:00'::timestamp",
        ],
    },
    Group {
        time_zone: "+05:30",
        extra_float_digits: 1,
        selects: &[
            "select '2024-06-01 12:00:00+00'::timestamptz",
            "select '2024-06-01 12:00:00'::timestamptz",
        ],
    },
    Group {
        time_zone: "-08",
        extra_float_digits: 1,
        selects: &[
            "select '2024-06-01 12:00:00+00'::timestamptz",
            "select '2024-06-01 12:00:00'::timestamptz",
        ],
    },
    Group {
        time_zone: "America/New_York",
        extra_float_digits: 1,
        selects: &[
            "select '2024-11-03 01:30:00'::timestamptz",
            "select '2024-03-10 02:30:00'::timestamptz",
            "select '2024-06-01 12:00:00 Asia/Kolkata'::timestamptz",
        ],
    },
    Group {
        time_zone: "UTC",
        extra_float_digits: 0,
        selects: &[
            "select 1.1::float8",
            "select 0.1::float4",
            "select 123456789012345678::float8",
            "select 1e-5::float8",
            "select 'NaN'::float8",
            "select '{0.1,1e300}'::float8[]",
        ],
    },
    Group {
        time_zone: "UTC",
        extra_float_digits: -15,
        selects: &[
            "select 2.5::float8",
            "select 15::float8",
            "select 25::float4",
        ],
    },
    Group {
        time_zone: "UTC",
        extra_float_digits: 3,
        selects: &["select 1.1::float8", "select 0.1::float4"],
    },
];

async fn connect(pg: &Postgres) -> Client {
    let (client, connection) = tokio_postgres::connect(&pg.connection_string(), NoTls)
        .await
        .expect("connect to PostgreSQL");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

async fn simple_text(client: &Client, sql: &str) -> Result<Option<String>, tokio_postgres::Error> {
    for msg in client.simple_query(sql).await? {
        if let SimpleQueryMessage::Row(row) = msg {
            return Ok(row.get(0).map(str::to_owned));
        }
    }
    panic!("{sql}: no row");
}

fn encode_text(v: &Value, ty: Type, ctx: &TextContext) -> String {
    let mut out = Vec::new();
    text::encode(v, ty, ctx, &mut out);
    String::from_utf8(out).expect("text output is UTF-8")
}

fn encode_binary(v: &Value, ty: Type) -> Vec<u8> {
    let mut out = Vec::new();
    binary::encode(v, ty, &mut out);
    out
}

/// Checks one literal; pushes a description of each mismatch to `failures`.
async fn check_literal(client: &Client, sql: &str, ctx: &TextContext, failures: &mut Vec<String>) {
    let pg_text = simple_text(client, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let rows = client
        .query(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let pg_type = rows[0].columns()[0].type_().clone();
    let pg_bytes: Option<Raw> = rows[0].get(0);
    let Some(ty) = Type::from_oid(pg_type.oid()) else {
        failures.push(format!(
            "{sql}: no Type for OID {} ({})",
            pg_type.oid(),
            pg_type.name()
        ));
        return;
    };
    if ty.oid() != pg_type.oid() {
        failures.push(format!(
            "{sql}: oid round trip {} -> {:?} -> {}",
            pg_type.oid(),
            ty,
            ty.oid()
        ));
    }
    let (Some(pg_text), Some(Raw(pg_bytes))) = (pg_text, pg_bytes) else {
        failures.push(format!("{sql}: PostgreSQL returned NULL"));
        return;
    };
    // (a) text round trip.
    let from_text = match text::decode(ty, pg_text.as_bytes(), ctx) {
        Ok(v) => v,
        Err(e) => {
            failures.push(format!("{sql}: text::decode({pg_text:?}) failed: {e}"));
            return;
        }
    };
    let ours = encode_text(&from_text, ty, ctx);
    if ours != pg_text {
        failures.push(format!(
            "{sql}: text round trip: PostgreSQL {pg_text:?}, ringwire {ours:?}"
        ));
    }
    // (b) binary round trip, and the exact value PostgreSQL holds printed as text.
    let from_binary = match binary::decode(ty, &pg_bytes) {
        Ok(v) => v,
        Err(e) => {
            failures.push(format!(
                "{sql}: binary::decode({pg_bytes:02x?}) failed: {e}"
            ));
            return;
        }
    };
    let ours_bin = encode_binary(&from_binary, ty);
    if ours_bin != pg_bytes {
        failures.push(format!(
            "{sql}: binary round trip: PostgreSQL {pg_bytes:02x?}, ringwire {ours_bin:02x?}"
        ));
    }
    let ours_text = encode_text(&from_binary, ty, ctx);
    if ours_text != pg_text {
        failures.push(format!(
            "{sql}: text of binary value: PostgreSQL {pg_text:?}, ringwire {ours_text:?}"
        ));
    }
    // The text form is exact except for floats printed with extra_float_digits <= 0.
    let lossy_text =
        ctx.extra_float_digits <= 0 && matches!(ty.scalar, Scalar::Float4 | Scalar::Float8);
    if !lossy_text {
        // Compare through the binary encoding: NaN != NaN under PartialEq, and numeric
        // equality ignores the display scale, which the encoding keeps.
        let text_bin = encode_binary(&from_text, ty);
        if text_bin != pg_bytes {
            failures.push(format!(
                "{sql}: binary of text value: PostgreSQL {pg_bytes:02x?}, ringwire {text_bin:02x?} \
                 (text gave {from_text:?}, binary gave {from_binary:?})"
            ));
        }
    }
}

/// Checks OID, `format_type` name and typlen of every type against the catalog.
async fn check_catalog(client: &Client, failures: &mut Vec<String>) {
    let scalars = [
        Scalar::Bool,
        Scalar::Int2,
        Scalar::Int4,
        Scalar::Int8,
        Scalar::Float4,
        Scalar::Float8,
        Scalar::Numeric,
        Scalar::Text,
        Scalar::Varchar,
        Scalar::Bpchar,
        Scalar::Bytea,
        Scalar::Date,
        Scalar::Time,
        Scalar::Timestamp,
        Scalar::Timestamptz,
        Scalar::Interval,
        Scalar::Uuid,
        Scalar::Json,
        Scalar::Jsonb,
        Scalar::Name,
        Scalar::Void,
        Scalar::Unknown,
    ];
    for scalar in scalars {
        let mut types = vec![Type::scalar(scalar)];
        if !matches!(scalar, Scalar::Unknown | Scalar::Void) {
            types.push(Type::array_of(scalar));
        }
        for ty in types {
            let sql = format!(
                "select format_type(oid, null), typlen::int4, typarray::int4 from pg_type where oid = {}",
                ty.oid()
            );
            let rows = client
                .query(sql.as_str(), &[])
                .await
                .expect("catalog query");
            let Some(row) = rows.first() else {
                failures.push(format!("{ty:?}: OID {} not in pg_type", ty.oid()));
                continue;
            };
            let (name, typlen, typarray): (String, i32, i32) = (row.get(0), row.get(1), row.get(2));
            if name != ty.name() || typlen != ty.typlen() as i32 {
                failures.push(format!(
                    "{ty:?}: PostgreSQL says {name:?} typlen {typlen}, ringwire {:?} typlen {}",
                    ty.name(),
                    ty.typlen()
                ));
            }
            if !ty.array
                && typarray != 0
                && Type::from_oid(typarray as u32) != Some(Type::array_of(scalar))
            {
                failures.push(format!("{ty:?}: array type OID {typarray} not mapped"));
            }
            if Type::from_sql_name(&name) != Some(ty) && !matches!(scalar, Scalar::Unknown) {
                failures.push(format!(
                    "{ty:?}: from_sql_name({name:?}) does not resolve back"
                ));
            }
        }
    }
}

/// Input forms beyond PostgreSQL's own output: PostgreSQL's output for each must equal
/// `text::encode(text::decode(input))`.
const GOOD_INPUTS: &[(&str, &str)] = &[
    ("int4", " 12 "),
    ("int2", "+5"),
    ("bool", "yes"),
    ("bool", " TRU "),
    ("bool", "of"),
    ("bool", "ON"),
    ("bool", "0"),
    ("float8", " 1.5 "),
    ("float8", "0x10"),
    ("float8", "inf"),
    ("float8", "-Infinity"),
    ("float8", "nan"),
    ("float4", ".5e-3"),
    ("numeric", "1.5e-7"),
    ("numeric", "  -0.000 "),
    ("numeric", "inf"),
    ("numeric", ".5"),
    ("numeric", "5."),
    ("numeric", "1.50E+3"),
    ("numeric", "0e-5"),
    ("bytea", r"\x00 ff"),
    ("bytea", r"abc\\\001\377"),
    ("uuid", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"),
    ("uuid", "{a0eebc999c0b4ef8bb6d6bb9bd380a11}"),
    ("uuid", "a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11"),
    ("date", "20240601"),
    ("date", "06/01/2024"),
    ("date", "June 1, 2024"),
    ("date", "2024-06-01 12:34"),
    ("date", " 2024-6-1 "),
    ("date", "1-1-1"),
    ("date", "1 June 2024"),
    ("date", "Saturday, June 1, 2024"),
    ("date", "epoch"),
    ("time", "12:34:56.1234567"),
    ("time", "1:2"),
    ("time", "12:00:00+02"),
    ("time", "11:59:59.9999999"),
    ("time", "allballs"),
    ("time", "4:00 pm"),
    ("time", "12:00:00 am"),
    ("time", "12:34.5"),
    ("timestamp", "2024-06-01T12:00:00.5Z"),
    ("timestamp", "2024-06-01 12:00:00+05"),
    ("timestamp", "2024-06-01 24:00:00"),
    ("timestamp", "2024-06-01 23:59:60"),
    ("timestamp", "2024-06-01 12:00:00 bc"),
    ("timestamp", "Jun 1 2024 12:00"),
    ("timestamp", "epoch"),
    ("timestamptz", "2024-06-01 12:00 Europe/Berlin"),
    ("timestamptz", "2024-06-01 12:00:00 PST"),
    ("timestamptz", "2024-06-01 12:00+0530"),
    ("timestamptz", "2024-06-01 12:00-08:00:30"),
    ("timestamptz", "2024-06-01 12:00 z"),
    ("timestamptz", "2024-06-01 12:00:00 +5"),
    ("timestamptz", "2024-06-01 12:00 +05:30:15"),
    ("timestamptz", "2024-06-01 12:00:00 cest"),
    ("timestamptz", "epoch"),
    ("interval", "1.5 years"),
    ("interval", "1.5 months"),
    ("interval", "1.5 days"),
    ("interval", "1 week"),
    ("interval", "10"),
    ("interval", "1 day ago"),
    ("interval", "@ 1 hour"),
    ("interval", "2 decades 1 century"),
    ("interval", "1-2"),
    ("interval", "3 4:05:06"),
    ("interval", "-1 2:03:04"),
    ("interval", "P1Y2M3DT4H5M6.5S"),
    ("interval", "PT-1.5S"),
    ("interval", "P0001-02-03T04:05:06"),
    ("interval", "P1W"),
    ("interval", "1 mon 1.5 weeks"),
    ("interval", "-1.5 hours"),
    ("interval", "1 d 2 h 3 m 4 s"),
    ("interval", "-1 year -2 mons +3 days -04:05:06 ago"),
    ("interval", "1.5 ms"),
    ("interval", "3000000000 seconds"),
    (
        "interval",
        "1 day 1 week 1 mon 1 year 1 decade 1 century 1 millennium 1 ms 1 us 1 min 1 s 1 h",
    ),
    ("int4[]", "  {1, 2 } "),
    ("int4[]", "{ }"),
    ("int4[]", "[1:2]={1,2}"),
    ("text[]", "{a  , b c ,  d}"),
    ("text[]", r#"{a\ b,c\,d, \  e\ \ , "" }"#),
    ("jsonb", " [1,[ ],{ }] "),
    ("jsonb", r#""\ud83d\ude00""#),
    ("jsonb", "-0"),
    ("jsonb", "1.0E-2"),
    ("json", r#"{"a" : [1, 2] }"#),
];

async fn check_inputs(client: &Client, ctx: &TextContext, failures: &mut Vec<String>) {
    for (type_name, input) in GOOD_INPUTS {
        let ty = Type::from_sql_name(type_name).expect("known type name");
        let sql = format!("select '{}'::{type_name}", input.replace('\'', "''"));
        let pg = match simple_text(client, &sql).await {
            Ok(Some(t)) => t,
            Ok(None) => panic!("{sql}: NULL"),
            Err(e) => {
                failures.push(format!("{sql}: PostgreSQL rejected it: {e}"));
                continue;
            }
        };
        match text::decode(ty, input.as_bytes(), ctx) {
            Ok(v) => {
                let ours = encode_text(&v, ty, ctx);
                if ours != pg {
                    failures.push(format!("{sql}: PostgreSQL {pg:?}, ringwire {ours:?}"));
                }
            }
            Err(e) => failures.push(format!(
                "{sql}: PostgreSQL {pg:?}, ringwire rejected it: {e}"
            )),
        }
    }
}

/// Bad input: PostgreSQL's SQLSTATE and message must match ours.
const BAD_INPUTS: &[(&str, &str)] = &[
    ("int4", "abc"),
    ("int4", "99999999999"),
    ("int2", "40000"),
    ("int8", "9223372036854775808"),
    ("int4", ""),
    ("int4", "1 2"),
    ("bool", "o"),
    ("bool", "maybe"),
    ("float8", "abc"),
    ("float8", "1e400"),
    ("float8", "1e-400"),
    ("float4", "1e39"),
    ("numeric", "abc"),
    ("numeric", "1e131072"),
    ("bytea", r"\x0"),
    ("bytea", r"\xzz"),
    ("bytea", r"\9"),
    ("uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1"),
    ("date", "2024-13-01"),
    ("date", "xyz"),
    ("date", "5874898-01-01"),
    ("date", "2024-02-30"),
    ("time", "24:00:01"),
    ("timestamp", "294277-01-01"),
    ("timestamp", "2024-06-01 25:00"),
    ("timestamptz", "x"),
    ("timestamptz", "2024-06-01 12:00 +16"),
    ("timestamptz", "2024-06-01 12:00 Foo/Bar"),
    ("interval", "1 foo"),
    ("interval", "2147483648 days"),
    ("interval", "1 day 2 days"),
    ("interval", "1.5 s 1 ms"),
    ("interval", "1 hour 02:00"),
    ("time", "13:00 pm"),
    ("date", "June June 1 2024"),
    ("int4", "1e5"),
    ("int4[]", "{1,2}}"),
    ("int4[]", "{1,2"),
    ("int4[]", "{1,x}"),
    ("text[]", r#"{"a"b}"#),
    ("jsonb", r#"{"a":1,}"#),
    ("jsonb", r#""\u0000""#),
];

async fn check_errors(client: &Client, ctx: &TextContext, failures: &mut Vec<String>) {
    for (type_name, input) in BAD_INPUTS {
        let ty = Type::from_sql_name(type_name).expect("known type name");
        let sql = format!("select '{}'::{type_name}", input.replace('\'', "''"));
        let pg = match client.simple_query(&sql).await {
            Ok(_) => {
                failures.push(format!("{sql}: PostgreSQL accepted it"));
                continue;
            }
            Err(e) => e.as_db_error().cloned().expect("a database error"),
        };
        match text::decode(ty, input.as_bytes(), ctx) {
            Ok(v) => failures.push(format!(
                "{sql}: ringwire accepted it as {v:?}; PostgreSQL: {}",
                pg.message()
            )),
            Err(ours) => {
                if ours.code.as_str() != pg.code().code() || ours.message != pg.message() {
                    failures.push(format!(
                        "{sql}: PostgreSQL {} {:?}, ringwire {} {:?}",
                        pg.code().code(),
                        pg.message(),
                        ours.code,
                        ours.message
                    ));
                }
            }
        }
    }
}

/// `Numeric` arithmetic against PostgreSQL's operators.
async fn check_numeric_arithmetic(client: &Client, failures: &mut Vec<String>) {
    let operands = [
        "0",
        "1",
        "-1",
        "3",
        "7",
        "0.001",
        "1.50",
        "-2.25",
        "123.4500",
        "99999999999999999999",
        "7.777",
        "1e-20",
        "12345678901234567890.123",
        "-98765432109876543210.9",
        "0.000001",
        "999999999999",
        "10000",
        "9999.9999",
    ];
    for a in operands {
        for b in operands {
            let sql = format!(
                "select '{a}'::numeric + '{b}', '{a}'::numeric - '{b}', '{a}'::numeric * '{b}', \
                 case when '{b}'::numeric = 0 then null else '{a}'::numeric / '{b}' end, \
                 round('{a}'::numeric, 2), trunc('{a}'::numeric, 1), '{a}'::numeric < '{b}'"
            );
            let row = client
                .query_one(sql.as_str(), &[])
                .await
                .expect("numeric query");
            let (x, y) = (Numeric::parse(a).unwrap(), Numeric::parse(b).unwrap());
            let ours = [
                Some(x.add(&y).unwrap().to_string()),
                Some(x.sub(&y).unwrap().to_string()),
                Some(x.mul(&y).unwrap().to_string()),
                if y.is_zero() {
                    None
                } else {
                    Some(x.div(&y).unwrap().to_string())
                },
                Some(x.round(2).to_string()),
                Some(x.trunc(1).to_string()),
            ];
            for (i, want) in ours.iter().enumerate() {
                let Raw(bytes) = match row.get::<_, Option<Raw>>(i) {
                    Some(r) => r,
                    None => {
                        if want.is_some() {
                            failures.push(format!("{a} op{i} {b}: PostgreSQL NULL"));
                        }
                        continue;
                    }
                };
                let pg =
                    binary::decode(Type::scalar(Scalar::Numeric), &bytes).expect("numeric bytes");
                let pg_text =
                    encode_text(&pg, Type::scalar(Scalar::Numeric), &TextContext::default());
                if Some(&pg_text) != want.as_ref() {
                    failures.push(format!(
                        "{a} op{i} {b}: PostgreSQL {pg_text}, ringwire {want:?}"
                    ));
                }
            }
            let less: bool = row.get(6);
            if less != (x < y) {
                failures.push(format!("{a} < {b}: PostgreSQL {less}"));
            }
        }
    }
}

#[test]
fn types_match_postgres() {
    let pg = Postgres::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = connect(&pg).await;
        let mut failures = Vec::new();
        let mut checked = 0;
        for group in GROUPS {
            client
                .batch_execute(&format!(
                    "set timezone = '{}'; set extra_float_digits = {}",
                    group.time_zone, group.extra_float_digits
                ))
                .await
                .expect("SET");
            let time_zone = TimeZone::parse(group.time_zone).expect("ringwire accepts the zone");
            let shown = simple_text(&client, "show timezone")
                .await
                .expect("SHOW")
                .expect("non-null");
            if shown != time_zone.name() {
                failures.push(format!(
                    "SHOW TimeZone: PostgreSQL {shown:?}, ringwire {:?}",
                    time_zone.name()
                ));
            }
            let ctx = TextContext {
                time_zone,
                extra_float_digits: group.extra_float_digits,
            };
            for sql in group.selects {
                check_literal(&client, sql, &ctx, &mut failures).await;
                checked += 1;
            }
        }
        assert!(checked >= 100, "only {checked} literals");
        client
            .batch_execute("set timezone = 'UTC'; set extra_float_digits = 1")
            .await
            .expect("SET");
        check_catalog(&client, &mut failures).await;
        check_inputs(&client, &TextContext::default(), &mut failures).await;
        check_errors(&client, &TextContext::default(), &mut failures).await;
        check_numeric_arithmetic(&client, &mut failures).await;
        assert!(
            failures.is_empty(),
            "{} mismatches with PostgreSQL:\n{}",
            failures.len(),
            failures.join("\n")
        );
        eprintln!("{checked} literals match PostgreSQL in text and binary");
    });
}
