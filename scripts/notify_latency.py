#!/usr/bin/env python3
"""How long a NOTIFY takes to reach a client that LISTENs and waits, per server.

Usage: notify_latency.py PORT [PORT ...] [--count N]

For each PORT (PostgreSQL, PgBouncer, ringwire): one connection LISTENs and waits in
psycopg's `notifies()` (it sends nothing meanwhile), another sends N notifications (default
50) one at a time, each after the previous one arrived or 2 s passed. Prints per port how
many arrived and the median and 90th-percentile delay from NOTIFY returning to delivery.
A server that only delivers a notification with the reply to the listener's next statement
shows 0 arrived. Needs psycopg 3 (PYTHONPATH, e.g. the copy tests/drivers.rs installs under
target/tmp/drivers).
"""
import statistics
import sys
import threading
import time

import psycopg

args = sys.argv[1:]
count = 50
if "--count" in args:
    i = args.index("--count")
    count = int(args[i + 1])
    del args[i : i + 2]
ports = [int(p) for p in args]


def measure(port):
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    listener = psycopg.connect(dsn, autocommit=True)
    sender = psycopg.connect(dsn, autocommit=True)
    listener.execute("listen notify_latency")
    arrived = {}
    done = threading.Event()

    def listen():
        for n in listener.notifies(timeout=2 * count + 5, stop_after=count):
            arrived[int(n.payload)] = time.perf_counter()
        done.set()

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    delays = []
    for i in range(count):
        sent = time.perf_counter()
        sender.execute(f"notify notify_latency, '{i}'")
        deadline = sent + 2
        while i not in arrived and time.perf_counter() < deadline:
            time.sleep(0.0002)
        if i in arrived:
            delays.append(arrived[i] - sent)
    sender.close()
    return delays


for port in ports:
    d = measure(port)
    if d:
        q = statistics.quantiles(d, n=10) if len(d) >= 2 else d
        print(
            f"port {port}: {len(d)}/{count} arrived, median {statistics.median(d) * 1e3:.2f} ms,"
            f" p90 {q[-1] * 1e3:.2f} ms"
        )
    else:
        print(f"port {port}: 0/{count} arrived within 2 s each")
