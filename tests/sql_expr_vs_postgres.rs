//! Differential test of the expression layer: each constant SELECT runs through PostgreSQL 15
//! (tokio-postgres `simple_query` for names and text values, `prepare` for column type OIDs)
//! and through ringwire's planner and evaluator (`sql::expr::plan_const_select`, then
//! `types::text::encode` per value). Column names, type OIDs and text values must be identical;
//! for errors the SQLSTATE must be, and an error position ringwire reports must be PostgreSQL's.

mod common;

use common::postgres::Postgres;
use protocol::types::{self, TextContext, TimeZone, Value};
use ringwire::sql::expr::{plan_const_select, EvalEnv, PlanCtx, SessionInfo, Stamps};
use sqlparser::ast::Statement;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use tokio_postgres::{NoTls, SimpleQueryMessage};

/// Every statement here must behave identically in both systems.
const STATEMENTS: &[&str] = &[
    // ----- literals and their types
    "select 1, 3000000000, 1.5, 1e3, 'a', null, true, false",
    "select -2147483648, -9223372036854775808, 2147483648, -2147483649",
    "select 1.50, .5, 0.000, 1e-3, 1E+2, 12345678901234567890",
    "select E'a\\tb', $$dollar$$, 'it''s', E'\\x41'",
    "select date '2024-01-01', interval '1 day', timestamp '2024-01-02 03:04:05', time '12:34:56'",
    "select timestamptz '2024-01-01 00:00:00+02'",
    "select '1' + 1, 1 + '1', '1.5'::numeric + 1, 1 - '2'",
    "select 'abc' + 1",
    "select '1' + '1'",
    "select 1 + null, null + null::int, null",
    // ----- integer arithmetic
    "select 7 / 2, -7 / 2, 7 % 3, -7 % 3, 7 % -3, 2 * 3 - 1",
    "select 2147483647 + 1",
    "select -2147483647 - 2",
    "select 9223372036854775807 + 1",
    "select 3000000000 * 4000000000",
    "select 32767::int2 + 1::int2",
    "select 1/0",
    "select 1 % 0",
    "select -2147483648 / -1",
    "select (-2147483648) % -1, (-9223372036854775808) % -1",
    "select 1::int2 + 1::int8, 1::int2 * 2::int4, 5::int8 / 2::int2",
    "select -(1), - 5, +5, -'1'::int",
    "select -(-2147483648)",
    // ----- numeric and float arithmetic
    "select 7.0 / 2, 7 / 2.0, 10::numeric / 3, 1::numeric / 7, 2::numeric * 3.5, 1.1 + 2.2",
    "select 1 + 1.5, 1 + 1.5::float8, 1::float4 + 1, 1::float4 + 1::float4",
    "select 0.1::float8 + 0.2::float8, 1/3::float8, 1::float4/3",
    "select 1.0 / 0",
    "select 1::float8 / 0",
    "select 5.5 % 0",
    "select 5.5 % 2, -5.5 % 2, 10 % 3.5",
    "select 1.5::float8 % 1",
    "select 1e308::float8 * 10",
    "select 2 ^ 10, 2.0 ^ 3, 2 ^ 0.5, 10 ^ 0.3, 1.5 ^ 2.5, 0.5 ^ 2, 2.0 ^ -2, 9 ^ 0.5",
    "select 1.1 ^ 100, 2 ^ 100::numeric, 0.9 ^ 50, 7 ^ 0.5::numeric, 2.5 ^ 0, 0 ^ 0.5",
    "select sqrt(3::numeric), sqrt(1e10::numeric), sqrt(0.0001::numeric), sqrt(12345.678::numeric)",
    "select 0 ^ -1",
    "select (-8) ^ 0.5",
    "select -1.5, - 1.5::float8, -(1.5::float4)",
    "select abs(-5), abs(-5.5), abs(-1.5::float8), abs(-3::int2)",
    "select abs(-2147483648)",
    "select mod(7, 3), mod(-7.5, 2), mod(7::int8, 2)",
    "select round(2.5), round(-2.5), round(2.5::float8), round(3.5::float8), round(3.14159, 2)",
    "select round(1234.5, -2), trunc(1.9), trunc(-1.9::float8), trunc(3.14159, 3)",
    "select floor(-1.5), ceil(-1.5), floor(1.5::float8), ceil(1.2::float8), ceiling(1.2)",
    "select sqrt(16), sqrt(2), sqrt(2::numeric), sqrt(100::numeric)",
    "select sqrt(-1)",
    "select power(2, 10), pow(2.0, 3), power(2::float8, -1)",
    // ----- comparisons
    "select 1 = 1, 1 <> 2, 1 != 2, 1 < 2, 2 <= 2, 3 > 2, 3 >= 4",
    "select 1 = 1.0, 1::int8 = 1::int2, 1 = 1.0::float8, 1.5 > 1::float4, 2::int2 < 3000000000",
    "select 'a' < 'b', 'abc' = 'abc', 'a'::text = 'a'::varchar, 'B' < 'a', 'a' = 'a'",
    "select date '2024-01-01' < date '2024-01-02', date '2024-01-01' = timestamp '2024-01-01 00:00'",
    "select true > false, null = null, null <> 1, 1 = null::int",
    "select interval '1 month' = interval '30 days', interval '1 day' < interval '25 hours'",
    "select 'a'::char(3) = 'a  '::char(3), 'a '::varchar = 'a'::varchar",
    "select 1 = 'a'::text",
    "select 'abc'::text > 1",
    "select array[1,2] = array[1,2], array[1,2] < array[1,3], array[1] < array[1,0]",
    "select array[1] = array[1::int8]",
    "select 'NaN'::float8 = 'NaN'::float8, 'NaN'::float8 > 1e308::float8",
    // ----- boolean logic
    "select true and null, false and null, true or null, false or null, not null::bool, not true",
    "select null::bool is true, null::bool is not true, false is false, true is not false",
    "select null::bool is unknown, true is not unknown",
    "select 1 and true",
    "select not 1",
    "select 't' and true, 'false' or 'yes'",
    "select 1 is true",
    "select 1 is null, null is null, null is not null, 'a' is not null",
    "select false and 1/0 = 1, true or 1/0 = 1",
    // ----- IS DISTINCT FROM
    "select 1 is distinct from 1, 1 is distinct from null, null is distinct from null",
    "select null is not distinct from null, 1 is not distinct from 2, 1 is distinct from 1.0",
    "select 1 is distinct from 'a'::text",
    // ----- BETWEEN and IN
    "select 5 between 1 and 10, 5 not between 1 and 4, null between 1 and 2, 5 between 10 and 1",
    "select 1.5 between 1 and 2, 'b' between 'a' and 'c'",
    "select 1 in (1,2,3), 4 in (1,2,3), 4 not in (1,2,3), null in (1), 1 in (2, null)",
    "select 1 not in (2, null), 1 in (1, null), 'a' in ('a', 'b'), 1.5 in (1, 1.5), 1 in ('1', '2')",
    "select 1 in (1, 'a'::text)",
    "select 1 in ('a')",
    // Lists of 16 constants or more are a hash set (`Node::InSet`, session 26): the same
    // answers, NULLs included.
    "select 5 in (0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19), 50 in (0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19), 50 not in (0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19, null), 5 not in (0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19, null)",
    "select null::int in (0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19), 5::int8 in (0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19), 5::int2 not in (0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19), 7 in (0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19, null)",
    "select 'v3' in ('v0','v1','v2','v3','v4','v5','v6','v7','v8','v9','v10','v11','v12','v13','v14','v15','v16','v17','v18','v19'), 'zz' not in ('v0','v1','v2','v3','v4','v5','v6','v7','v8','v9','v10','v11','v12','v13','v14','v15','v16','v17','v18','v19', null), 'zz' in ('v0','v1','v2','v3','v4','v5','v6','v7','v8','v9','v10','v11','v12','v13','v14','v15','v16','v17','v18','v19')",
    "select date '2000-01-05' in ('2000-01-01','2000-01-02','2000-01-03','2000-01-04','2000-01-05','2000-01-06','2000-01-07','2000-01-08','2000-01-09','2000-01-10','2000-01-11','2000-01-12','2000-01-13','2000-01-14','2000-01-15','2000-01-16','2000-01-17','2000-01-18','2000-01-19','2000-01-20'), date '1999-01-01' not in ('2000-01-01','2000-01-02','2000-01-03','2000-01-04','2000-01-05','2000-01-06','2000-01-07','2000-01-08','2000-01-09','2000-01-10','2000-01-11','2000-01-12','2000-01-13','2000-01-14','2000-01-15','2000-01-16','2000-01-17','2000-01-18','2000-01-19','2000-01-20')",
    "select 1.5 in (0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19), 19.0 in (0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19), 1 in (1/0, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19)",
    // ----- LIKE
    "select 'abc' like 'a%', 'abc' like 'a_c', 'abc' like 'A%', 'abc' ilike 'A%', 'abc' not like '%d'",
    "select 'a_c' like 'a\\_c', 'abc' like 'a\\_c', '%' like '\\%', 'abc' not ilike 'ABC'",
    "select 'a' like 'a' escape '', 'a#%' like 'a##%' escape '#', 'a%' like 'a#%' escape '#'",
    "select null like 'a', 'a' like null, '' like '%', 'ab' like '%b%'",
    "select 'a' like 'a' escape 'xy'",
    "select 1 like 'a'",
    "select 'ÀBC' ilike 'àbc', 'x' like 'x%%%', 'aaa' like '%a%a%a%', 'aa' like '%a%a%a%'",
    // ----- CASE
    "select case when 1 > 0 then 'pos' else 'neg' end",
    "select case 2 when 1 then 'one' when 2 then 'two' end, case 3 when 1 then 'one' end",
    "select case when false then 1 end, case when null then 1 else 2 end",
    "select case when true then 1 else 1.5 end, case when false then 1 else 2.5 end",
    "select case when true then 1 else 'a'::text end",
    "select case when 1 then 2 end",
    "select case when false then 1/0 else 0 end",
    "select case 'a' when 'a' then 1 end, case 1 when 1.0 then 'x' end",
    "select case when true then 'a' else 'b' end, case when true then null end",
    // ----- COALESCE, NULLIF, GREATEST, LEAST
    "select coalesce(null, 1, 2), coalesce(null, null), coalesce(null::int, 1.5), coalesce('a', 'b')",
    "select coalesce(1, 1/0)",
    "select nullif(1, 1), nullif(1, 2), nullif('a', 'b'), nullif(null, 1), nullif(1.5, 1)",
    "select greatest(1, 2.5, null), least('b', 'a'), greatest(null, null), least(3, 1, 2)",
    "select greatest(date '2024-01-01', date '2023-01-01'), least(1::int8, 2::int2)",
    "select coalesce(1, 'a'::text)",
    // ----- casts
    "select 1::bool, 0::bool, true::int, false::int, '1'::bool, 'yes'::bool",
    "select 2.5::int, 3.5::int, (-2.5)::int, 2.5::float8::int, 3.5::float8::int, (-0.5)::float8::int",
    "select 1.2345::numeric(5,2), 1.5::numeric(3,0), 0.5::numeric(1,1)",
    "select 12345.6::numeric(5,2)",
    "select 'abc'::varchar(2), 'a'::char(3), 'abc'::char, 'a'::char(3) || 'b', length('a  '::char(3))",
    "select 32768::int2",
    "select 2147483648::int4",
    "select '32768'::int2",
    "select 1e20::float8::int8",
    "select 'abc'::int",
    "select ''::int",
    "select ' 12 '::int, '1e3'::float8, ' -7 '::int8",
    "select 1::text, 1.5::text, true::text, date '2024-01-01'::text, 1.5::float8::text",
    "select cast(1 as bigint), cast('1' as numeric), cast(1.5 as int), cast(null as date)",
    "select 'x'::text, 'x'::varchar, 'x'::name, 1::int4, 1::integer, 1::smallint, 1::real",
    "select 1::double precision, 1::decimal, 1::float, 1::float(10), 1::float(30)",
    "select '2024-01-01'::date::timestamp, '2024-01-01 12:34:56'::timestamp::date",
    "select '2024-01-01 12:34:56'::timestamp::time, timestamp '2024-01-01 10:00'::timestamptz",
    "select timestamptz '2024-01-01 10:00+05'::timestamp, timestamptz '2024-01-01 23:00-05'::date",
    "select date '2024-01-01'::int",
    "select 1::int2::bool",
    "select '{1,2,3}'::int[], '{a,b}'::text[], '{1,2}'::int[]::text[], array[1,2]::text",
    "select '{1.5,2}'::numeric[], '{1,NULL}'::int8[], array[1.7, 2.2]::int[]",
    "select '1 day'::interval::text, '12:00'::time::interval, '25:00:00'::interval::time",
    "select '{\"a\":1}'::json, '{\"a\": 1, \"b\": [1,2]}'::jsonb, '{\"a\":1}'::json::jsonb",
    "select 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, '\\x0102'::bytea",
    "select 1.5::float4, 0.1::float4::float8, 1.1::float4::numeric, 1::numeric::float8",
    "select '  1.5 '::float8, 'NaN'::float8, 'infinity'::float8, '-Infinity'::numeric",
    "select 'NaN'::numeric::int",
    "select 'yes'::int",
    "select '2024-13-01'::date",
    // ----- date and time arithmetic
    "select date '2024-01-31' + 1, 1 + date '2024-01-31', date '2024-03-01' - 1",
    "select date '2024-03-01' - date '2024-01-01', date '2024-01-01' - date '2024-03-01'",
    "select date '2024-01-31' + interval '1 month', date '2024-03-31' - interval '1 month'",
    "select timestamp '2024-01-31 10:00' + interval '1 month 2 days 03:00:00'",
    "select timestamp '2024-03-01' - interval '1 day', interval '1 hour' + timestamp '2024-01-01'",
    "select timestamp '2024-01-02 03:00' - timestamp '2024-01-01'",
    "select timestamp '2024-01-01' - timestamp '2024-01-02 03:00:00.5'",
    "select interval '1 day' + interval '2 hours', interval '1 day' - interval '2 hours'",
    "select interval '1 day' * 1.5, interval '1 month' / 2, -interval '1 day', interval '1 day' * 2",
    "select 2 * interval '1 hour', interval '1 mon 1 day' * 0.3, interval '1 hour' / 7",
    "select interval '1 day' / 0",
    "select time '10:00' + interval '3 hours', time '23:00' + interval '2 hours'",
    "select time '10:00' - time '08:30', date '2024-01-01' + time '10:30', time '01:00' - interval '2h'",
    "select timestamptz '2024-01-01 00:00:00+00' + interval '1 day', timestamptz '2024-01-01' - interval '1 mon'",
    "select timestamptz '2024-01-02 00:00+00' - timestamptz '2024-01-01 12:00+00'",
    "select date 'infinity' + 1, timestamp 'infinity' + interval '1 day', date '-infinity' < date '2024-01-01'",
    "select date '2024-01-01' - date 'infinity'",
    "select timestamp '2024-01-01' + interval '1 day' > timestamp '2024-01-01'",
    "select date '2024-02-29' + interval '1 year', date '2024-01-01' < timestamptz '2024-01-01 00:00:01+00'",
    "select extract(year from date '2024-03-05'), extract(month from timestamp '2024-03-05 10:11:12.5')",
    "select extract(second from timestamp '2024-03-05 10:11:12.5'), extract(epoch from timestamp '2024-01-01')",
    "select extract(dow from date '2024-03-05'), extract(doy from date '2024-03-05'), extract(hour from time '10:20')",
    "select extract(epoch from interval '1 day 2 hours'), extract(quarter from date '2024-08-01')",
    "select extract(hour from date '2024-01-01')",
    "select now() = current_timestamp, now() = transaction_timestamp(), now() = statement_timestamp()",
    "select current_date = now()::date, now() - now(), localtimestamp = now()::timestamp",
    "select timestamp '2024-01-01 10:00' at time zone 'UTC'",
    "select timestamptz '2024-01-01 10:00+00' at time zone 'America/New_York'",
    "select timestamp '2024-07-01 10:00' at time zone 'Europe/Berlin'",
    // ----- string concatenation
    "select 'a' || 'b', 'a' || 1, 1 || 'a', 'a' || null, null || null::text",
    "select 'a' || 1.5::float8, 'a' || true, 'x' || date '2024-01-01', 'n' || 1.50",
    "select 1 || 2",
    "select array[1,2] || 3, 0 || array[1,2], array[1] || array[2,3], '\\x01'::bytea || '\\x02'::bytea",
    // ----- arrays
    "select array[1,2,3], array['a','b'], array[1, 1.5], array[null, 1], array[]::int[], array[null]",
    "select array[1, 'a'::text]",
    "select array[]",
    "select 1 = any(array[1,2]), 3 = any(array[1,2]), 1 = all(array[1,1]), 1 = all(array[1,2])",
    "select 2 = any(array[1,null]), 1 = any('{1,2}'), 1 < any(array[0, 5]), null::int = any(array[1])",
    "select 1 = any(array[]::int[]), 1 = all(array[]::int[]), 1 = any(array[1.0, 2])",
    "select 1 = any(1)",
    // ----- functions
    "select length('héllo'), char_length('abc'), length(''), octet_length('héllo')",
    "select lower('ÀBC'), upper('abc'), initcap('hello wORLD')",
    "select substr('hello', 2), substr('hello', 2, 3), substr('hello', 0, 2), substr('hello', -1, 3)",
    "select substring('hello' from 2 for 3), substring('hello', 2), substring('hello' from 3)",
    "select substr('hello', 2, -1)",
    "select trim('  a  '), trim(both 'x' from 'xxaxx'), trim(leading 'x' from 'xxaxx')",
    "select trim(trailing ' ' from '  a  '), btrim('xyax', 'xy'), ltrim('  a'), rtrim('a  ')",
    "select replace('hello', 'l', 'L'), replace('abc', '', 'x')",
    "select concat('a', 1, null, true, 1.5), concat_ws(',', 'a', null, 2), concat_ws(null, 'a')",
    "select md5('abc'), md5(''), md5('The quick brown fox jumps over the lazy dog')",
    "select position('lo' in 'hello'), strpos('hello', 'z'), left('hello', 2), right('hello', 2)",
    "select left('hello', -2), repeat('ab', 3), reverse('abc'), lpad('5', 3, '0'), rpad('ab', 5, 'xy')",
    "select split_part('a,b,c', ',', 2), starts_with('hello', 'he'), ascii('A'), chr(65), to_hex(255)",
    "select lpad('hello', 2), split_part('a,b,c', ',', -1), split_part('a,b', ',', 5)",
    "select current_database(), current_schema(), current_schema, current_user, session_user",
    "select user, current_role, current_catalog",
    "select current_setting('DateStyle'), current_setting('no_such_param', true)",
    "select current_setting('no_such_param')",
    "select pg_backend_pid() > 0, version() like 'PostgreSQL %', pg_sleep(0), pg_sleep(-1)",
    "select random() >= 0 and random() < 1, length(gen_random_uuid()::text)",
    "select gen_random_uuid() <> gen_random_uuid()",
    "select foo(1)",
    "select foo(1, 'a')",
    "select abs('a'::text)",
    "select abs('a')",
    "select length(1)",
    "select pg_catalog.now() = now(), pg_catalog.length('ab')",
    "select nosuchschema.length('ab')",
    // ----- query shapes, names and errors
    "select x",
    "select t.x",
    "select *",
    "select 1 where false",
    "select 1 where true",
    "select 1 where null",
    "select 1 where 1",
    "select 1/0 where false",
    "select 1 where false and 1/0 = 1",
    "values (1, 'a'), (2, 'b')",
    "values (1), (1.5)",
    "values (1), ('a'::text)",
    "values ('a'), (null)",
    "values (1, 2), (3)",
    "select 1 as a, 2 as \"B\", 3 as C, 4 AS Dd",
    "select 1 limit 0",
    "select 1 offset 1",
    "select 1 limit 1 offset 0",
    "select 1 limit -1",
    "select 1::int, 'x'::text, cast(1 as bigint), case when true then 1 end, coalesce(1), array[1]",
    "select now() is not null, 1+1, (1), -1, true, date '2024-01-01', interval '1 day', 'a' like 'b'",
    "select substr('a', 1), trim('a'), position('a' in 'b'), nullif(1, 2), greatest(1), least(1)",
    "select current_user::text, 'a'::varchar(3)::text, case when true then 1 else now() end is null",
    "select (1 + 2) * 3, ((1)), 'x'::text::varchar, cast(cast(1 as int) as text)",
    "select 1::\"int4\", 1::pg_catalog.int8, '1'::int4[]::text",
    // ----- precedence, more operators and edge cases
    "select 2 ^ 3 ^ 2, -2 ^ 2, 2 + 3 * 4, (2 + 3) * 4, 10 - 2 - 3, 2 * 3 % 4",
    "select not true = false, not 1 > 2, 1 < 2 and 2 < 3 or false",
    "select -'1'",
    "select +'1', +1.5, +(-2)",
    "select '1'::int2 + '2', 1::int2 + 1.5::float4, 9223372036854775807::int8 * 2",
    "select (-32768)::int2 / (-1)::int2",
    "select 1::float4 / 0::float4",
    "select '1e400'::float8",
    "select 1.0e400::float8",
    "select 'infinity'::float8::int",
    "select 'NaN'::numeric + 1, 'Infinity'::numeric * -1, 1.5::numeric::float4",
    "select 12.345::numeric(4,2), 0.001::numeric(3,3), -0.0, -0.0::float8",
    "select length(null), abs(null), round(null), lower(null), upper(null::text)",
    "select 'a' || 'b' || 'c', 'a' || 1 || 2, 'a'::name || 'b', 1::name",
    "select 'abc'::varchar = 'abc'::char(5), '  abc  '::char(8), 'abc'::char(5) < 'abd'",
    "select U&'\\0041', $$a$$ || $tag$b$tag$",
    "select repeat('x', -1), lpad('abc', -1), lower(1)",
    "select concat_ws()",
    "select time '24:00:00', interval '-1 day 2 hours', interval '1 year 2 months 3 days 04:05:06.789'",
    "select '2024-02-30'::date",
    "select cast('2024-01-01' as date) + 30, now()::date - current_date, now() + interval '1 day' > now()",
    "select extract(epoch from timestamptz '2024-01-01 00:00:00+00'), extract(week from date '2024-12-30')",
    "select extract(century from date '2024-01-01'), extract(isodow from date '2024-03-03')",
    "select coalesce(null, array[1]), case when true then array[1] else array[2.5] end",
    "select 1 = any(array[1, 2]::int8[]), 'a' = any(array['a', 'b']), 1::int8 in (1, 2)",
    "select 'abc'::bytea, length('abc'::bytea), md5('abc'::bytea), 'a'::bytea like 'a'::bytea",
    "select '{\"a\":1}'::jsonb = '{\"a\": 1}'::jsonb, '[1,2]'::jsonb::text",
    "select '[1,2]'::json = '[1,2]'::json",
    "select uuid 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11' = 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'",
    "values (1, 'a') limit 1",
    "select 1 as x where false",
    "select 10 % 3::numeric, mod(10::numeric, 3), 7::int2 % 2::int2",
    "select true = 't', 'yes'::boolean, 'off'::bool, 'f' < true",
    "select 'x' collate \"C\", 'a' < 'b' collate \"C\"",
    "select current_setting('TimeZone'), current_setting('timezone')",
    "select interval '1 day' > interval '23:59:59', interval '1 mon' + date '2024-01-31'",
    "select 1 between 0 and 2 and 3 between 2 and 4",
    "select array[1,2] = '{1,2}', '{1,2}' = array[1,2], array['a'] || 'b'",
    "select x is null",
    "select x + 1 from_nothing",
];

/// Run with `TimeZone = 'Europe/Berlin'` on both sides: zone offsets, DST gaps and calendar
/// arithmetic in local time.
const TIME_ZONE_STATEMENTS: &[&str] = &[
    "select timestamptz '2024-07-01 12:00:00+00', timestamptz '2024-01-01 12:00:00+00'",
    "select timestamp '2024-07-01 12:00'::timestamptz, timestamptz '2024-07-01 23:30+00'::date",
    "select timestamptz '2024-01-01 12:00+00'::time, timestamptz '2024-07-01 12:00+00'::timestamp",
    "select date '2024-03-31'::timestamptz, date '2024-10-27'::timestamptz",
    "select timestamptz '2024-03-30 12:00+01' + interval '1 day'",
    "select timestamptz '2024-03-30 12:00+01' + interval '24 hours'",
    "select timestamptz '2024-10-26 12:00+02' + interval '1 mon', timestamptz '2024-03-31 12:00+02' - interval '1 day'",
    "select timestamp '2024-03-31 02:30'::timestamptz, timestamp '2024-10-27 02:30'::timestamptz",
    "select extract(hour from timestamptz '2024-07-01 12:00+00'), extract(timezone from timestamptz '2024-07-01 12:00+00')",
    "select extract(day from timestamptz '2024-07-01 23:30+00'), extract(epoch from timestamptz '2024-07-01 12:00+02')",
    "select timestamptz '2024-07-01 12:00+00' at time zone 'UTC', timestamp '2024-07-01 12:00' at time zone 'America/New_York'",
    "select timestamptz '2024-10-28 00:00+00' - timestamptz '2024-10-26 00:00+00'",
    "select '2024-07-01 12:00'::timestamptz = '2024-07-01 10:00+00'::timestamptz",
    "select timestamp '2024-07-01 12:00' < timestamptz '2024-07-01 11:00+00', date '2024-07-01' = timestamptz '2024-06-30 22:00+00'",
    "select greatest(timestamptz '2024-07-01 12:00+00', timestamp '2024-07-01 13:00')",
    "select current_date = now()::date, localtimestamp = now()::timestamp, now() at time zone 'Europe/Berlin' = localtimestamp",
];

/// Prepared (Parse/Describe) with unspecified parameter types: PostgreSQL's inferred parameter
/// types and result column types must be ringwire's.
const PARAM_STATEMENTS: &[&str] = &[
    "select $1 + 1",
    "select $1::date",
    "select $1",
    "select $1, $1 + 1.5",
    "select $1 = 'a'",
    "select $1 || 'x'",
    "select 'x' || $1",
    "select $1 like 'a%'",
    "select $1 between 1 and 2.5",
    "select 1 = any($1)",
    "select $1 = any(array[1, 2])",
    "select $1 in (1, 2)",
    "select $1 + $2",
    "select $1 is null",
    "select $2::int",
    "select $1 > now()",
    "select abs($1)",
    "select coalesce($1, 1)",
    "select case when $1 then 1 end",
    "select case $1 when 1 then 'a' end",
    "select $1 and true",
    "select not $1",
    "select $2::int, $1::text",
    "select length($1)",
    "select substr($1, 2)",
    "select $1::int[]",
    "select array[$1, 2]",
    "select $1 - date '2024-01-01'",
    "select $1 + interval '1 day'",
    "select -$1",
    "select $1::numeric(5,2)",
    "select nullif($1, 1)",
    "select greatest($1, 2)",
    "select $1 = $2",
    "select $1::text = $2",
    "select $1 is distinct from 1.5",
    "select current_setting($1)",
    "select pg_sleep($1)",
    "select $1 = 1 and $1 = 'x'",
    "select 1 where $1",
    "select 1 limit $1",
    "values ($1), (1)",
    "select $1::varchar || $2",
    "select concat($1, $2)",
];

struct TestSession {
    text: TextContext,
    now_us: i64,
}

impl SessionInfo for TestSession {
    fn current_setting(&self, name: &str) -> Option<String> {
        match name.to_ascii_lowercase().as_str() {
            "datestyle" => Some("ISO, MDY".to_string()),
            "timezone" => Some("UTC".to_string()),
            _ => None,
        }
    }
    fn text_context(&self) -> &TextContext {
        &self.text
    }
    fn database(&self) -> &str {
        "postgres"
    }
    fn user(&self) -> &str {
        "postgres"
    }
    fn backend_pid(&self) -> i32 {
        4242
    }
    fn stamps(&self) -> Stamps {
        // One statement that starts its own transaction, as each case is in PostgreSQL.
        Stamps {
            statement_us: self.now_us,
            transaction_us: self.now_us,
        }
    }
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Rows {
        names: Vec<String>,
        oids: Vec<u32>,
        rows: Vec<Vec<Option<String>>>,
    },
    Error {
        code: String,
        message: String,
        position: Option<u32>,
    },
}

/// Plans and evaluates with ringwire. `plan_with_session` gives the planner the session's text
/// settings (what the server does); without them session-dependent literals are read at
/// evaluation instead, which must give the same results.
fn ringwire_outcome(sql: &str, text: &TextContext, plan_with_session: bool) -> Outcome {
    let error = |e: protocol::error::PgError| Outcome::Error {
        code: e.code.as_str().to_string(),
        message: e.message.to_string(),
        position: e.position,
    };
    let stmts = match Parser::parse_sql(&PostgreSqlDialect {}, sql) {
        Ok(s) => s,
        Err(e) => {
            return Outcome::Error {
                code: "42601".into(),
                message: e.to_string(),
                position: None,
            }
        }
    };
    let [Statement::Query(query)] = stmts.as_slice() else {
        panic!("{sql}: expected one query, parsed {stmts:?}");
    };
    let mut params = Vec::new();
    let mut ctx = PlanCtx::new(&mut params, sql);
    if plan_with_session {
        ctx = ctx.with_text_context(text);
    }
    let plan = match plan_const_select(query, &mut ctx) {
        Ok(p) => p,
        Err(e) => return error(e),
    };
    let now_us = {
        let unix_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_micros() as i64;
        unix_us - 946_684_800_000_000
    };
    let session = TestSession {
        text: text.clone(),
        now_us,
    };
    let mut env = EvalEnv {
        params: &[],
        row: &[],
        session: &session,
        sleep_us: 0,
        notifies: Vec::new(),
    };
    let mut rows = Vec::new();
    let types: Vec<_> = plan.columns.iter().map(|c| c.1).collect();
    let result = plan.eval_rows(&mut env, &mut |values: &[Value]| {
        let row = values
            .iter()
            .zip(&types)
            .map(|(v, ty)| {
                if v.is_null() {
                    return None;
                }
                let mut buf = Vec::new();
                types::text::encode(v, *ty, &session.text, &mut buf);
                Some(String::from_utf8(buf).expect("text output is UTF-8"))
            })
            .collect();
        rows.push(row);
        Ok(())
    });
    if let Err(e) = result {
        return error(e);
    }
    Outcome::Rows {
        names: plan.columns.iter().map(|c| c.0.clone()).collect(),
        oids: types.iter().map(|t| t.oid()).collect(),
        rows,
    }
}

async fn postgres_outcome(client: &tokio_postgres::Client, sql: &str) -> Outcome {
    let messages = match client.simple_query(sql).await {
        Ok(m) => m,
        Err(e) => {
            let db = e
                .as_db_error()
                .unwrap_or_else(|| panic!("{sql}: not a server error: {e}"));
            let position = match db.position() {
                Some(tokio_postgres::error::ErrorPosition::Original(p)) => Some(*p),
                _ => None,
            };
            return Outcome::Error {
                code: db.code().code().to_string(),
                message: db.message().to_string(),
                position,
            };
        }
    };
    let mut names = Vec::new();
    let mut rows = Vec::new();
    for m in messages {
        match m {
            SimpleQueryMessage::RowDescription(cols) => {
                names = cols.iter().map(|c| c.name().to_string()).collect();
            }
            SimpleQueryMessage::Row(r) => {
                rows.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect());
            }
            _ => {}
        }
    }
    let stmt = client
        .prepare(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: prepare: {e}"));
    let oids = stmt.columns().iter().map(|c| c.type_().oid()).collect();
    Outcome::Rows { names, oids, rows }
}

#[derive(Debug, PartialEq)]
enum Described {
    Types { params: Vec<u32>, columns: Vec<u32> },
    Error { code: String, message: String },
}

async fn postgres_described(client: &tokio_postgres::Client, sql: &str) -> Described {
    match client.prepare(sql).await {
        Ok(stmt) => Described::Types {
            params: stmt.params().iter().map(|t| t.oid()).collect(),
            columns: stmt.columns().iter().map(|c| c.type_().oid()).collect(),
        },
        Err(e) => {
            let db = e
                .as_db_error()
                .unwrap_or_else(|| panic!("{sql}: not a server error: {e}"));
            Described::Error {
                code: db.code().code().to_string(),
                message: db.message().to_string(),
            }
        }
    }
}

fn ringwire_described(sql: &str) -> Described {
    let stmts = Parser::parse_sql(&PostgreSqlDialect {}, sql).expect("parses");
    let [Statement::Query(query)] = stmts.as_slice() else {
        panic!("{sql}: not one query")
    };
    let mut params = Vec::new();
    let mut ctx = PlanCtx::new(&mut params, sql);
    match plan_const_select(query, &mut ctx) {
        Ok(plan) => Described::Types {
            params: params.iter().map(|t| t.oid()).collect(),
            columns: plan.columns.iter().map(|c| c.1.oid()).collect(),
        },
        Err(e) => Described::Error {
            code: e.code.as_str().to_string(),
            message: e.message.to_string(),
        },
    }
}

/// Compares two outcomes; `None` if they agree. Errors must agree in SQLSTATE and message, and
/// a position ringwire reports must be PostgreSQL's (ringwire may leave it out).
fn difference(pg: &Outcome, rw: &Outcome) -> Option<String> {
    match (pg, rw) {
        (
            Outcome::Error {
                code: pc,
                message: pm,
                position: pp,
            },
            Outcome::Error {
                code: rc,
                message: rm,
                position: rp,
            },
        ) => {
            if pc != rc || pm != rm {
                return Some(format!("error: postgres {pg:?}\n  ringwire {rw:?}"));
            }
            if rp.is_some() && rp != pp {
                return Some(format!(
                    "error position: postgres {pg:?}\n  ringwire {rw:?}"
                ));
            }
            None
        }
        _ if pg == rw => None,
        _ => Some(format!("postgres {pg:?}\n  ringwire {rw:?}")),
    }
}

#[test]
fn constant_selects_match_postgres() {
    assert!(STATEMENTS.len() >= 120, "keep the corpus broad");
    let pg = Postgres::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (failures, positions_left_out) = runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&pg.connection_string(), NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        client
            .batch_execute(
                "set timezone = 'UTC'; set datestyle = 'ISO, MDY'; set extra_float_digits = 1",
            )
            .await
            .expect("session settings");
        let mut failures = Vec::new();
        let mut positions_left_out = 0;
        let utc = TextContext::default();
        for sql in STATEMENTS {
            let expected = postgres_outcome(&client, sql).await;
            let actual = ringwire_outcome(sql, &utc, true);
            if let Some(diff) = difference(&expected, &actual) {
                failures.push(format!("{sql}\n  {diff}"));
            }
            if let (
                Outcome::Error {
                    position: Some(_), ..
                },
                Outcome::Error { position: None, .. },
            ) = (&expected, &actual)
            {
                eprintln!("no error position (PostgreSQL has one): {sql}");
                positions_left_out += 1;
            }
        }
        client
            .batch_execute("set timezone = 'Europe/Berlin'")
            .await
            .expect("set timezone");
        let berlin = TextContext {
            time_zone: TimeZone::parse("Europe/Berlin").expect("zone exists"),
            ..TextContext::default()
        };
        for sql in TIME_ZONE_STATEMENTS {
            let expected = postgres_outcome(&client, sql).await;
            for plan_with_session in [true, false] {
                let actual = ringwire_outcome(sql, &berlin, plan_with_session);
                if let Some(diff) = difference(&expected, &actual) {
                    failures.push(format!(
                        "[Europe/Berlin, session at plan time: {plan_with_session}] {sql}\n  {diff}"
                    ));
                }
            }
        }
        for sql in PARAM_STATEMENTS {
            let expected = postgres_described(&client, sql).await;
            let actual = ringwire_described(sql);
            if expected != actual {
                failures.push(format!(
                    "[prepared] {sql}\n  postgres {expected:?}\n  ringwire {actual:?}"
                ));
            }
        }
        (failures, positions_left_out)
    });
    let total = STATEMENTS.len() + 2 * TIME_ZONE_STATEMENTS.len() + PARAM_STATEMENTS.len();
    eprintln!(
        "{} statements, {} match, {} differ; {} errors without the position PostgreSQL reports",
        total,
        total - failures.len(),
        failures.len(),
        positions_left_out
    );
    assert!(
        failures.is_empty(),
        "{} of {total} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
