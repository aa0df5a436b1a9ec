#!/usr/bin/env python3
"""Login time with startup parameters new to their key (docs/PERF.md, session 14).

usage: scripts/login_bench.py PORT [PORT...]

Each login sends a startup packet (user postgres, database postgres, a unique
application_name, three `-c` options) over a raw socket and is timed to its first
ReadyForQuery; servers are taken in turn, 50 logins at a time, 6 rounds. Prints each
port's median and p90. For ringwire --upstream, every login is a first login with its
parameter set, so it pays the startup check.
"""
import socket, struct, time, sys, statistics
def login(port, i):
    t=time.perf_counter()
    s=socket.create_connection(("127.0.0.1",port))
    kv=[("user","postgres"),("database","postgres"),("application_name",f"app-{port}-{i}-{time.time_ns()}"),
        ("options","-c work_mem=5MB -c statement_timeout=30s -c lock_timeout=10s")]
    body=struct.pack("!I",196608)+b"".join(k.encode()+b"\0"+v.encode()+b"\0" for k,v in kv)+b"\0"
    s.sendall(struct.pack("!I",len(body)+4)+body)
    buf=b""
    while not buf.endswith(b"Z\0\0\0\x05I"):
        d=s.recv(65536)
        if not d: raise SystemExit("closed")
        buf+=d
    dt=time.perf_counter()-t
    s.sendall(b"X\0\0\0\x04"); s.close()
    return dt
ports = [int(p) for p in sys.argv[1:]]
if not ports:
    raise SystemExit(__doc__)
res = {p: [] for p in ports}
for r in range(6):
    for p in ports:
        for i in range(50):
            res[p].append(login(p, r * 100 + i))
for p in ports:
    xs = sorted(res[p])
    print(p, "median %.0f us  p90 %.0f us  n=%d" % (statistics.median(xs) * 1e6, xs[int(len(xs) * 0.9)] * 1e6, len(xs)))
