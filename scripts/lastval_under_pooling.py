#!/usr/bin/env python3
"""What `SELECT lastval()` right after a client's own INSERT answers through a pooler.

Usage: lastval_under_pooling.py PORT [CLIENTS] [SECONDS]

CLIENTS threads (default 64), each with its own connection, repeat for SECONDS (default 5):
`INSERT INTO lastval_probe (v) VALUES (...) RETURNING id`, then `SELECT lastval()` as a
separate autocommit statement (what PDO's lastInsertId() and similar helpers send). Each
answer is counted as the client's own id, another value (another client's id: wrong), or an
error (with its SQLSTATE). Against PostgreSQL itself every answer is the client's own; through
a transaction pooler the second statement may run on another backend. Needs psycopg 3
(PYTHONPATH, e.g. the copy tests/drivers.rs installs under target/tmp/drivers).
"""
import sys
import threading
import time
from collections import Counter

import psycopg

port = int(sys.argv[1])
clients = int(sys.argv[2]) if len(sys.argv) > 2 else 64
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"

with psycopg.connect(dsn, autocommit=True) as c:
    c.execute("create table if not exists lastval_probe (id bigserial primary key, v text)")

counts = Counter()
lock = threading.Lock()
start = threading.Barrier(clients)


def client(n):
    mine = Counter()
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as c:
        start.wait()
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            own = c.execute("insert into lastval_probe (v) values (%s) returning id", (str(n),)).fetchone()[0]
            try:
                got = c.execute("select lastval()").fetchone()[0]
                mine["own" if got == own else "another client's"] += 1
            except psycopg.Error as e:
                mine[f"error {e.sqlstate}"] += 1
    with lock:
        counts.update(mine)


threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
total = sum(counts.values())
print(f"port {port}, {clients} clients, {total} lastval() answers: " + ", ".join(
    f"{k} {v} ({100 * v / total:.1f}%)" for k, v in sorted(counts.items())))
