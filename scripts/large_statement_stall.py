#!/usr/bin/env python3
"""How long one client's large statement holds up the other clients of its shard
(docs/PERF.md, session 15).

usage: scripts/large_statement_stall.py MIB PORT [PORT...]

For each server in turn (6 rounds): a pinger connection sends `select 1` every millisecond
while a second connection sends one Query of MIB mebibytes (`select length('xxx…')`). Prints,
per port, the medians over the rounds of the large statement's time and of the pinger's
worst latency during it. Run ringwire with one shard (`--shards 1`) so both connections
share it; a direct PostgreSQL port alongside shows what the statement costs upstream (each
PostgreSQL backend is its own process, so its pinger waits only for CPU).
"""
import socket, struct, time, sys, threading, statistics

def connect(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = struct.pack("!I", 196608) + b"user\0postgres\0database\0postgres\0\0"
    s.sendall(struct.pack("!I", len(body) + 4) + body)
    until_ready(s)
    return s

def until_ready(s):
    tail = b""
    while True:
        d = s.recv(1 << 20)
        if not d:
            raise SystemExit("server closed the connection")
        tail = (tail + d)[-6:]
        if tail[:5] == b"Z\0\0\0\x05":
            return

def query(s, sql):
    b = sql.encode() + b"\0"
    s.sendall(b"Q" + struct.pack("!I", len(b) + 4) + b)
    until_ready(s)

def round_(port, literal):
    big, ping = connect(port), connect(port)
    worst, stop = [0.0], [False]
    def pinger():
        while not stop[0]:
            t = time.perf_counter()
            query(ping, "select 1")
            worst[0] = max(worst[0], time.perf_counter() - t)
            time.sleep(0.001)
    th = threading.Thread(target=pinger)
    th.start()
    time.sleep(0.1)
    worst[0] = 0.0
    t = time.perf_counter()
    query(big, f"select length('{literal}')")
    took = time.perf_counter() - t
    stop[0] = True
    th.join()
    big.close(); ping.close()
    return took, worst[0]

if len(sys.argv) < 3:
    raise SystemExit(__doc__)
mib, ports = float(sys.argv[1]), [int(p) for p in sys.argv[2:]]
literal = "x" * int(mib * (1 << 20))
results = {p: [] for p in ports}
for _ in range(6):
    for p in ports:
        results[p].append(round_(p, literal))
for p in ports:
    took = statistics.median(r[0] for r in results[p]) * 1e3
    worst = statistics.median(r[1] for r in results[p]) * 1e3
    print(f"port {p}: {mib:g} MiB statement {took:.0f} ms, pinger's worst latency meanwhile {worst:.1f} ms (medians of 6)")
