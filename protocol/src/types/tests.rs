//! Round trips through the text and binary formats for every type and arrays of each, and
//! property tests: arbitrary bytes never panic a decoder, arbitrary values survive round trips.

use super::*;
use proptest::prelude::*;

const ALL_SCALARS: [Scalar; 22] = [
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

fn num(s: &str) -> Value {
    Value::Numeric(Numeric::parse(s).unwrap())
}

/// Edge values for each scalar type, in the in-memory form.
fn samples(scalar: Scalar) -> Vec<Value> {
    use Value::*;
    let texts = |v: &[&str]| v.iter().map(|s| Text(s.to_string())).collect::<Vec<_>>();
    match scalar {
        Scalar::Bool => vec![Bool(true), Bool(false)],
        Scalar::Int2 => vec![Int2(0), Int2(i16::MIN), Int2(i16::MAX), Int2(-1)],
        Scalar::Int4 => vec![Int4(0), Int4(i32::MIN), Int4(i32::MAX), Int4(42)],
        Scalar::Int8 => vec![Int8(0), Int8(i64::MIN), Int8(i64::MAX), Int8(-7)],
        Scalar::Float4 => vec![
            Float4(0.0),
            Float4(-0.0),
            Float4(f32::NAN),
            Float4(f32::INFINITY),
            Float4(f32::NEG_INFINITY),
            Float4(f32::MAX),
            Float4(f32::MIN_POSITIVE),
            Float4(1e-45),
            Float4(1.1),
            Float4(1e6),
        ],
        Scalar::Float8 => vec![
            Float8(0.0),
            Float8(-0.0),
            Float8(f64::NAN),
            Float8(f64::INFINITY),
            Float8(f64::NEG_INFINITY),
            Float8(f64::MAX),
            Float8(f64::MIN),
            Float8(5e-324),
            Float8(1.5e-7),
            Float8(1e100),
            Float8(0.1),
            Float8(123456789012345678.0),
        ],
        Scalar::Numeric => vec![
            num("0"),
            num("0.000"),
            num("NaN"),
            num("Infinity"),
            num("-Infinity"),
            num("-123.4500"),
            num("1e-1000"),
            num("-99999999999999999999999999999999999999.99999999999999999999"),
            num("1e1000"),
            num("10000"),
            num("0.0001"),
        ],
        Scalar::Text | Scalar::Varchar | Scalar::Unknown => texts(&[
            "",
            "plain",
            "a b",
            "x\"y",
            "back\\slash",
            "NULL",
            "null",
            "{}",
            ",",
            "é中😀",
            "\t\n",
        ]),
        Scalar::Bpchar => texts(&["ab  ", "", "x"]),
        Scalar::Name => texts(&["abc", "", "with space"]),
        Scalar::Void => vec![Text(String::new())],
        Scalar::Json => texts(&[r#"{"b":1,  "a":[1, 2.50]}"#, "[]", "null", r#""\u0000""#]),
        Scalar::Jsonb => texts(&[
            r#"{"a": [1, 2.50, {"c": null}], "b": "x\n", "aa": true}"#,
            "[]",
            "100",
            "\"é\"",
        ]),
        Scalar::Bytea => vec![
            Bytea(vec![]),
            Bytea(vec![0, 255, b'\\', b'"', b'{']),
            Bytea((0..=255).collect()),
        ],
        Scalar::Date => vec![
            Date(0),
            Date(i32::MIN),
            Date(i32::MAX),
            Date(datetime::DATE_MIN as i32),
            Date(datetime::DATE_END as i32 - 1),
            Date(-730_120 - 365), // 0001-01-01 BC
            Date(-1),
        ],
        Scalar::Time => vec![
            Time(0),
            Time(datetime::USECS_PER_DAY),
            Time(45_296_789_000),
            Time(1),
        ],
        Scalar::Timestamp | Scalar::Timestamptz => {
            let vals = [
                0,
                i64::MIN,
                i64::MAX,
                datetime::TIMESTAMP_MIN,
                datetime::TIMESTAMP_END - 1,
                -1,
                770_558_400_500_000,
                -63_082_281_600_000_000, // 0001-01-01 BC
            ];
            vals.iter()
                .map(|&v| {
                    if scalar == Scalar::Timestamp {
                        Timestamp(v)
                    } else {
                        Timestamptz(v)
                    }
                })
                .collect()
        }
        Scalar::Interval => vec![
            Interval(super::Interval::default()),
            Interval(super::Interval {
                months: -14,
                days: 3,
                micros: -14_706_789_000,
            }),
            Interval(super::Interval {
                months: i32::MIN,
                days: i32::MIN,
                micros: i64::MIN,
            }),
            Interval(super::Interval {
                months: i32::MAX,
                days: i32::MAX,
                micros: i64::MAX,
            }),
            Interval(super::Interval {
                months: 0,
                days: 0,
                micros: -1,
            }),
        ],
        Scalar::Uuid => vec![
            Uuid([0; 16]),
            Uuid([0xff; 16]),
            Uuid(*b"\xa0\xee\xbc\x99\x9c\x0b\x4e\xf8\xbb\x6d\x6b\xb9\xbd\x38\x0a\x11"),
        ],
    }
}

/// Equality that treats NaN as equal to itself and keeps numeric display scale: both
/// encodings must agree.
fn same(a: &Value, b: &Value, ty: Type, ctx: &TextContext) -> bool {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    binary::encode(a, ty, &mut x);
    binary::encode(b, ty, &mut y);
    let (mut p, mut q) = (Vec::new(), Vec::new());
    text::encode(a, ty, ctx, &mut p);
    text::encode(b, ty, ctx, &mut q);
    x == y && p == q
}

fn assert_round_trips(v: &Value, ty: Type, ctx: &TextContext) {
    let mut t = Vec::new();
    text::encode(v, ty, ctx, &mut t);
    let back = text::decode(ty, &t, ctx).unwrap_or_else(|e| {
        panic!(
            "{ty:?}: text {:?} of {v:?} does not decode: {e}",
            String::from_utf8_lossy(&t)
        )
    });
    assert!(
        same(v, &back, ty, ctx),
        "{ty:?} text round trip: {v:?} -> {:?} -> {back:?}",
        String::from_utf8_lossy(&t)
    );
    let mut b = Vec::new();
    binary::encode(v, ty, &mut b);
    let back = binary::decode(ty, &b)
        .unwrap_or_else(|e| panic!("{ty:?}: binary of {v:?} does not decode: {e}"));
    assert!(
        same(v, &back, ty, ctx),
        "{ty:?} binary round trip: {v:?} -> {b:02x?} -> {back:?}"
    );
}

fn contexts() -> Vec<TextContext> {
    vec![
        TextContext::default(),
        TextContext {
            time_zone: TimeZone::parse("Europe/Berlin").unwrap(),
            extra_float_digits: 3,
        },
        TextContext {
            time_zone: TimeZone::parse("-08").unwrap(),
            extra_float_digits: 1,
        },
        TextContext {
            time_zone: TimeZone::parse("UTC+3").unwrap(),
            extra_float_digits: 2,
        },
    ]
}

#[test]
fn every_type_round_trips_in_text_and_binary() {
    for ctx in contexts() {
        for scalar in ALL_SCALARS {
            let values = samples(scalar);
            let ty = Type::scalar(scalar);
            for v in &values {
                assert_round_trips(v, ty, &ctx);
            }
            if matches!(scalar, Scalar::Void | Scalar::Unknown) {
                continue; // no array type
            }
            let aty = Type::array_of(scalar);
            assert_round_trips(&Value::Array(vec![]), aty, &ctx);
            assert_round_trips(&Value::Array(vec![Value::Null]), aty, &ctx);
            let mut with_nulls = values.clone();
            with_nulls.insert(1.min(with_nulls.len()), Value::Null);
            with_nulls.push(Value::Null);
            assert_round_trips(&Value::Array(with_nulls), aty, &ctx);
        }
    }
}

#[test]
fn array_text_quoting() {
    let ctx = TextContext::default();
    let ty = Type::array_of(Scalar::Text);
    let v = Value::Array(vec![
        Value::Text("a b".into()),
        Value::Text("x\"y".into()),
        Value::Null,
        Value::Text(String::new()),
        Value::Text("NuLL".into()),
        Value::Text("\\".into()),
        Value::Text("plain".into()),
    ]);
    let mut out = Vec::new();
    text::encode(&v, ty, &ctx, &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"a b","x\"y",NULL,"","NuLL","\\",plain}"#
    );
    // Top-level NULL writes nothing: the caller sends length -1.
    let mut out = Vec::new();
    text::encode(&Value::Null, Type::scalar(Scalar::Int4), &ctx, &mut out);
    binary::encode(&Value::Null, Type::scalar(Scalar::Int4), &mut out);
    assert!(out.is_empty());
}

#[test]
fn type_catalog() {
    for scalar in ALL_SCALARS {
        let ty = Type::scalar(scalar);
        assert_eq!(Type::from_oid(ty.oid()), Some(ty), "{scalar:?}");
        assert_eq!(
            Type::from_sql_name(ty.name())
                .filter(|_| scalar != Scalar::Unknown)
                .is_some(),
            scalar != Scalar::Unknown
        );
        if !matches!(scalar, Scalar::Void | Scalar::Unknown) {
            let aty = Type::array_of(scalar);
            assert_eq!(Type::from_oid(aty.oid()), Some(aty), "{scalar:?}[]");
            assert_eq!(aty.typlen(), -1);
            assert_eq!(Type::from_sql_name(aty.name()), Some(aty));
        }
    }
    assert_eq!(Type::from_oid(0), None);
    assert_eq!(Type::from_oid(99999), None);
    let names = [
        ("int", Type::scalar(Scalar::Int4)),
        ("INTEGER", Type::scalar(Scalar::Int4)),
        ("bigint", Type::scalar(Scalar::Int8)),
        ("smallint", Type::scalar(Scalar::Int2)),
        ("float", Type::scalar(Scalar::Float8)),
        ("double   precision", Type::scalar(Scalar::Float8)),
        ("real", Type::scalar(Scalar::Float4)),
        ("decimal", Type::scalar(Scalar::Numeric)),
        ("character varying", Type::scalar(Scalar::Varchar)),
        ("char", Type::scalar(Scalar::Bpchar)),
        ("boolean", Type::scalar(Scalar::Bool)),
        ("time without time zone", Type::scalar(Scalar::Time)),
        (
            "timestamp with time zone",
            Type::scalar(Scalar::Timestamptz),
        ),
        ("timestamptz", Type::scalar(Scalar::Timestamptz)),
        ("int[]", Type::array_of(Scalar::Int4)),
        ("text []", Type::array_of(Scalar::Text)),
        ("_int8", Type::array_of(Scalar::Int8)),
    ];
    for (name, want) in names {
        assert_eq!(Type::from_sql_name(name), Some(want), "{name:?}");
    }
    assert_eq!(Type::from_sql_name("varchar(10)"), None);
    assert_eq!(Type::from_sql_name("nosuchtype"), None);
    assert_eq!(Type::scalar(Scalar::Int4).name(), "integer");
    assert_eq!(Type::array_of(Scalar::Int4).name(), "integer[]");
    assert_eq!(Type::scalar(Scalar::Timestamptz).typlen(), 8);
    assert_eq!(Type::scalar(Scalar::Interval).typlen(), 16);
}

#[test]
fn compare_orders_like_postgres() {
    use std::cmp::Ordering::*;
    use Value::*;
    assert_eq!(compare(&Int4(1), &Int8(2)), Some(Less));
    assert_eq!(compare(&Int2(3), &num("2.5")), Some(Greater));
    assert_eq!(compare(&num("2.50"), &num("2.5")), Some(Equal));
    assert_eq!(
        compare(&Float8(f64::NAN), &Float8(f64::INFINITY)),
        Some(Greater)
    );
    assert_eq!(compare(&Float8(f64::NAN), &Float8(f64::NAN)), Some(Equal));
    assert_eq!(compare(&Float8(-0.0), &Float4(0.0)), Some(Equal));
    assert_eq!(compare(&Int4(1), &Float8(1.5)), Some(Less));
    assert_eq!(compare(&Text("a".into()), &Text("B".into())), Some(Greater));
    assert_eq!(compare(&Bytea(vec![1]), &Bytea(vec![1, 0])), Some(Less));
    assert_eq!(compare(&Date(0), &Timestamp(1)), Some(Less));
    assert_eq!(compare(&Date(i32::MAX), &Timestamp(i64::MAX)), Some(Equal));
    let iv = |months, days, micros| {
        Interval(super::Interval {
            months,
            days,
            micros,
        })
    };
    assert_eq!(compare(&iv(1, 0, 0), &iv(0, 30, 0)), Some(Equal));
    assert_eq!(compare(&iv(0, 1, 0), &iv(0, 0, 86_400_000_001)), Some(Less));
    let arr = |v: Vec<Value>| Array(v);
    assert_eq!(
        compare(&arr(vec![Int4(1), Null]), &arr(vec![Int4(1), Int4(5)])),
        Some(Greater)
    );
    assert_eq!(
        compare(&arr(vec![Int4(1)]), &arr(vec![Int4(1), Int4(0)])),
        Some(Less)
    );
    assert_eq!(compare(&arr(vec![Null]), &arr(vec![Null])), Some(Equal));
    assert_eq!(compare(&Null, &Int4(1)), None);
    assert_eq!(compare(&Int4(1), &Text("1".into())), None);
    assert!(Null.is_null() && !Int4(0).is_null());
}

fn all_types() -> Vec<Type> {
    let mut v: Vec<Type> = ALL_SCALARS.iter().map(|&s| Type::scalar(s)).collect();
    v.extend(ALL_SCALARS.iter().map(|&s| Type::array_of(s)));
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Arbitrary bytes: every decoder returns Ok or Err, never panics.
    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let ctx = TextContext::default();
        for ty in all_types() {
            let _ = binary::decode(ty, &bytes);
            let _ = text::decode(ty, &bytes, &ctx);
        }
    }

    /// Text built from the characters the parsers care about reaches deeper parser states.
    #[test]
    fn text_decoders_never_panic_on_plausible_text(s in r#"[0-9a-zA-Z :./+\-{}",\\\[\]=@TZ\t]{0,40}"#) {
        let ctx = TextContext { time_zone: TimeZone::parse("Europe/Berlin").unwrap(), extra_float_digits: 1 };
        for ty in all_types() {
            let _ = text::decode(ty, s.as_bytes(), &ctx);
        }
    }

    /// Valid headers with random bodies get through to the element and digit decoders.
    #[test]
    fn binary_decoders_never_panic_on_plausible_headers(
        ndim in -1i32..3, flags in -1i32..3, len in -2i32..5, lbound in 0i32..3,
        tail in proptest::collection::vec(any::<u8>(), 0..48),
    ) {
        for scalar in ALL_SCALARS {
            let mut b = Vec::new();
            b.extend_from_slice(&ndim.to_be_bytes());
            b.extend_from_slice(&flags.to_be_bytes());
            b.extend_from_slice(&Type::scalar(scalar).oid().to_be_bytes());
            b.extend_from_slice(&len.to_be_bytes());
            b.extend_from_slice(&lbound.to_be_bytes());
            b.extend_from_slice(&tail);
            let _ = binary::decode(Type::array_of(scalar), &b);
        }
        let mut n = Vec::new();
        n.extend_from_slice(&((tail.len() / 2) as i16).to_be_bytes());
        n.extend_from_slice(&(len as i16).to_be_bytes());
        n.extend_from_slice(&[0, 0, 0, (lbound * 3) as u8]);
        n.extend_from_slice(&tail);
        let _ = binary::decode(Type::scalar(Scalar::Numeric), &n);
    }

    #[test]
    fn floats_round_trip_bit_exactly(bits in any::<u64>(), bits32 in any::<u32>()) {
        let ctx = TextContext::default();
        let x = f64::from_bits(bits);
        let mut out = Vec::new();
        text::encode(&Value::Float8(x), Type::scalar(Scalar::Float8), &ctx, &mut out);
        match text::decode(Type::scalar(Scalar::Float8), &out, &ctx).unwrap() {
            Value::Float8(y) => prop_assert!(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())),
            other => prop_assert!(false, "{other:?}"),
        }
        let x = f32::from_bits(bits32);
        let mut out = Vec::new();
        text::encode(&Value::Float4(x), Type::scalar(Scalar::Float4), &ctx, &mut out);
        match text::decode(Type::scalar(Scalar::Float4), &out, &ctx).unwrap() {
            Value::Float4(y) => prop_assert!(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())),
            other => prop_assert!(false, "{other:?}"),
        }
    }

    #[test]
    fn numerics_round_trip(neg in any::<bool>(), int in "[0-9]{0,30}", frac in "[0-9]{0,30}", exp in -40i32..40) {
        let s = format!("{}{}.{}e{}", if neg { "-" } else { "" }, if int.is_empty() { "0" } else { &int }, frac, exp);
        let v = Value::Numeric(Numeric::parse(&s).unwrap());
        assert_round_trips(&v, Type::scalar(Scalar::Numeric), &TextContext::default());
    }

    #[test]
    fn datetimes_and_intervals_round_trip(
        day in datetime::DATE_MIN..datetime::DATE_END,
        ts in datetime::TIMESTAMP_MIN..datetime::TIMESTAMP_END,
        time in 0..=datetime::USECS_PER_DAY,
        months in any::<i32>(), days in any::<i32>(), micros in any::<i64>(),
    ) {
        for ctx in contexts() {
            assert_round_trips(&Value::Date(day as i32), Type::scalar(Scalar::Date), &ctx);
            assert_round_trips(&Value::Time(time), Type::scalar(Scalar::Time), &ctx);
            assert_round_trips(&Value::Timestamp(ts), Type::scalar(Scalar::Timestamp), &ctx);
            // Shifting by the zone offset must stay inside the range for the text form.
            if ts > datetime::TIMESTAMP_MIN + datetime::USECS_PER_DAY && ts < datetime::TIMESTAMP_END - datetime::USECS_PER_DAY {
                assert_round_trips(&Value::Timestamptz(ts), Type::scalar(Scalar::Timestamptz), &ctx);
            }
            assert_round_trips(
                &Value::Interval(super::Interval { months, days, micros }),
                Type::scalar(Scalar::Interval),
                &ctx,
            );
        }
    }
}

/// Counts allocations made by the current thread, so the encoders' no-allocation promise is
/// tested rather than assumed. Other test threads do not disturb the count.
mod alloc_count {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    pub struct Counting;

    thread_local! {
        static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    }

    // SAFETY: forwards to the system allocator unchanged; only counts calls.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
            // SAFETY: same contract as our caller's.
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: same contract as our caller's.
            unsafe { System.dealloc(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
            // SAFETY: same contract as our caller's.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    pub fn count() -> usize {
        ALLOCATIONS.with(Cell::get)
    }
}

#[global_allocator]
static COUNTING: alloc_count::Counting = alloc_count::Counting;

#[test]
fn hot_path_encoders_do_not_allocate() {
    let berlin = TextContext {
        time_zone: TimeZone::parse("Europe/Berlin").unwrap(),
        extra_float_digits: 1,
    };
    let g_style = TextContext {
        extra_float_digits: 0,
        ..TextContext::default()
    };
    let values: Vec<(Value, Type)> = [
        Scalar::Bool,
        Scalar::Int2,
        Scalar::Int4,
        Scalar::Int8,
        Scalar::Float4,
        Scalar::Float8,
        Scalar::Numeric,
        Scalar::Text,
        Scalar::Bytea,
        Scalar::Date,
        Scalar::Time,
        Scalar::Timestamp,
        Scalar::Timestamptz,
        Scalar::Interval,
        Scalar::Uuid,
    ]
    .iter()
    .flat_map(|&s| samples(s).into_iter().map(move |v| (v, Type::scalar(s))))
    .chain([(
        Value::Array(vec![Value::Text("a b".into()), Value::Null]),
        Type::array_of(Scalar::Text),
    )])
    .collect();
    // The counter sees this thread's allocations.
    let before = alloc_count::count();
    std::hint::black_box(vec![0u8; 10]);
    assert_eq!(alloc_count::count(), before + 1);
    let mut out = Vec::with_capacity(1 << 16);
    for ctx in [&TextContext::default(), &berlin, &g_style] {
        // Warm up lazily initialized state (none expected, but be fair to chrono-tz).
        for (v, ty) in &values {
            text::encode(v, *ty, ctx, &mut out);
        }
        out.clear();
        let before = alloc_count::count();
        for (v, ty) in &values {
            text::encode(v, *ty, ctx, &mut out);
            binary::encode(v, *ty, &mut out);
        }
        let allocations = alloc_count::count() - before;
        assert_eq!(
            allocations,
            0,
            "encoding {} values allocated {allocations} times",
            values.len()
        );
        assert!(
            out.len() < out.capacity(),
            "the buffer itself never had to grow"
        );
        out.clear();
    }
}
