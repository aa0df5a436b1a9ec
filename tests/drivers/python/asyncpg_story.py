"""The driver story (tests/drivers.rs) told with asyncpg (its own protocol implementation,
binary formats, prepared statements for everything). Usage: asyncpg_story.py HOST PORT."""
import asyncio
import datetime
import decimal
import os
import sys
import uuid

import asyncpg


async def main(host, port):
    conn = await asyncpg.connect(host=host, port=port, user="postgres", database="postgres")
    row = await conn.fetchrow("select 1::int4 as a, 'x'::text as b, 2.5::numeric as n, true as t, null::text as z")
    print("literals", list(row.items()))
    print("params", await conn.fetchval("select $1::int4 + 1", 41))
    row = await conn.fetchrow(
        "select $1::text, $2::numeric, $3::bool, $4::float8",
        "hi", decimal.Decimal("1.25"), True, 0.5,
    )
    print("params", list(row.values()))
    await conn.execute("drop table if exists drv_asyncpg")
    await conn.execute("create table drv_asyncpg (id int4 primary key, name text, ts timestamptz)")
    when = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    await conn.executemany(
        "insert into drv_asyncpg values ($1, $2, $3)", [(1, "x", when), (2, None, None)]
    )
    print("rows", [list(r.values()) for r in await conn.fetch("select * from drv_asyncpg order by id")])
    async with conn.transaction():
        await conn.execute("update drv_asyncpg set name = 'kept' where id = 2")
    try:
        async with conn.transaction():
            await conn.execute("update drv_asyncpg set name = 'rolled back' where id = 1")
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    rows = await conn.fetch("select id, name from drv_asyncpg order by id")
    print("after transactions", [list(r.values()) for r in rows])
    try:
        await conn.fetch("select 1/0")
    except asyncpg.PostgresError as e:
        print("error", e.sqlstate)
    try:
        await conn.execute("insert into drv_asyncpg values (1, 'dup', null)")
    except asyncpg.PostgresError as e:
        print("error", e.sqlstate, e.constraint_name)
    stmt = await conn.prepare("select id from drv_asyncpg where id > $1 order by id")
    print("prepared", [r[0] for r in await stmt.fetch(0)], [r[0] for r in await stmt.fetch(1)])
    print("status", conn.is_in_transaction())
    # Common types in binary (arrays are left out: asyncpg introspects the catalogs for them,
    # which the embedded engine cannot answer yet; see README).
    row = await conn.fetchrow(
        "select $1::bytea, $2::date, $3::timestamp, $4::timestamptz, $5::uuid, $6::interval, "
        "$7::int8, $8::int2, $9::float4, $10::jsonb",
        b"\x00\xffab",
        datetime.date(2024, 2, 29),
        datetime.datetime(2024, 1, 2, 3, 4, 5, 678901),
        when,
        uuid.UUID(int=5),
        datetime.timedelta(days=1, seconds=5),
        2**40,
        7,
        1.5,
        '{"a": [1, 2]}',
    )
    print("types", list(row.values()))
    await conn.execute("drop table drv_asyncpg")
    if not os.environ.get("STORY_NO_LISTEN"):
        # A second session's add_listener callback hears both notifications without a
        # statement of its own. (Not their sender's process id: through --upstream that is
        # an upstream backend's.)
        listener = await asyncpg.connect(host=host, port=port, user="postgres", database="postgres")
        heard = []
        both = asyncio.Event()

        own = []

        def on_notify(listening, pid, channel, payload):
            if payload == "mine":
                # Its own notification names its own process id, by which a client skips
                # its own work bouncing back (PostgreSQL's NOTIFY documentation).
                own.append(pid == listening.get_server_pid())
                return
            heard.append((channel, payload))
            if len(heard) == 2:
                both.set()

        await listener.add_listener("drv_asyncpg_ch", on_notify)
        await conn.execute("notify drv_asyncpg_ch, 'hello'")
        await conn.execute("select pg_notify('drv_asyncpg_ch', 'again')")
        try:
            await asyncio.wait_for(both.wait(), 5)
        except asyncio.TimeoutError:
            pass
        print("notifies", heard)
        await listener.execute("notify drv_asyncpg_ch, 'mine'")
        await asyncio.sleep(0)
        print("own notification", own)
        await listener.close()
    await conn.close()


asyncio.run(main(sys.argv[1], int(sys.argv[2])))
