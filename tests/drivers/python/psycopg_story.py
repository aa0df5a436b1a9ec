"""The driver story (tests/drivers.rs) told with psycopg 3 (libpq underneath): one line per
step, compared line by line between PostgreSQL and ringwire. Usage: psycopg_story.py HOST PORT."""
import datetime
import decimal
import os
import sys
import uuid

import psycopg

conn = psycopg.connect(host=sys.argv[1], port=int(sys.argv[2]), user="postgres", dbname="postgres")
cur = conn.cursor()
cur.execute("select 1::int4, 'a'::text, 1.5::numeric, true, 0.25::float8, null::text")
print("literals", cur.fetchall())
cur.execute(
    "select %s::int4 + 1, %s::text, %s::numeric, %s::bool",
    (41, "hi", decimal.Decimal("2.50"), False),
)
print("params", cur.fetchall())
cur.execute("drop table if exists drv_psycopg")
cur.execute("create table drv_psycopg (id int4 primary key, name text, v float8)")
cur.executemany(
    "insert into drv_psycopg values (%s, %s, %s)",
    [(1, "x", 1.5), (2, "y", None), (3, None, -2.0)],
)
conn.commit()
cur.execute("select * from drv_psycopg order by id")
print("rows", cur.fetchall())
cur.execute("update drv_psycopg set name = 'rolled back' where id = 1")
conn.rollback()
with conn.transaction():
    cur.execute("update drv_psycopg set name = 'kept' where id = 2")
cur.execute("select id, name from drv_psycopg order by id")
print("after transactions", cur.fetchall())
conn.rollback()
try:
    cur.execute("select 1/0")
except psycopg.Error as e:
    print("error", e.sqlstate)
conn.rollback()
try:
    cur.execute("insert into drv_psycopg values (1, 'dup', 0)")
except psycopg.Error as e:
    print("error", e.sqlstate, e.diag.constraint_name)
conn.rollback()
with conn.cursor(binary=True) as b:
    for i in (1, 3):
        b.execute("select id, name, v from drv_psycopg where id = %s", (i,), prepare=True)
        print("binary prepared", b.fetchall())
conn.rollback()
# PostgreSQL's common types as parameters and results, in text and in binary.
for binary in (False, True):
    with conn.cursor(binary=binary) as t:
        t.execute(
            "select %s::bytea, %s::date, %s::timestamp, %s::timestamptz, %s::int4[], %s::text[], "
            "%s::uuid, %s::jsonb, %s::interval, %s::int8, %s::int2, %s::float4",
            (
                b"\x00\xffab",
                datetime.date(2024, 2, 29),
                datetime.datetime(2024, 1, 2, 3, 4, 5, 678901),
                datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
                [1, 2, None],
                ["a", "b c", None],
                uuid.UUID(int=5),
                psycopg.types.json.Jsonb({"a": [1, 2]}),
                datetime.timedelta(days=1, seconds=5),
                2**40,
                7,
                1.5,
            ),
        )
        row = list(t.fetchone())
        row[3] = row[3].isoformat()  # the zone object depends on the server's TimeZone name
        print("types", binary, row)
conn.rollback()
conn.autocommit = True
cur.execute("select count(*) from drv_psycopg")
print("autocommit", cur.fetchone(), conn.info.transaction_status.name)
cur.execute("drop table drv_psycopg")
print("encoding", conn.info.parameter_status("server_encoding"), conn.info.encoding)
if not os.environ.get("STORY_NO_LISTEN"):
    # A second session LISTENs and only waits in notifies(); it hears both notifications.
    # (Not their sender's process id: through --upstream that is an upstream backend's.)
    listener = psycopg.connect(
        host=sys.argv[1], port=int(sys.argv[2]), user="postgres", dbname="postgres", autocommit=True
    )
    listener.execute("listen drv_psycopg_ch")
    cur.execute("notify drv_psycopg_ch, 'hello'")
    cur.execute("select pg_notify('drv_psycopg_ch', 'again')")
    heard = [
        (n.channel, n.payload)
        for n in listener.notifies(timeout=5, stop_after=2)
    ]
    print("notifies", heard)
    # Its own notification names its own process id (libpq's PQbackendPID), by which a
    # client skips its own work bouncing back, as PostgreSQL's documentation suggests.
    own = []
    listener.add_notify_handler(lambda n: own.append((n.payload, n.pid == listener.info.backend_pid)))
    listener.execute("notify drv_psycopg_ch, 'mine'")
    print("own notification", own)
    listener.close()
conn.close()
