#!/usr/bin/env python3
"""Memory per idle connection: open N connections to a running server, finish startup on each
(read to ReadyForQuery), hold them, and print the server's RSS growth per connection.

    ulimit -n 20000
    ringwire --listen 127.0.0.1:7005 --shards 1 --max-connections 20000 &
    python3 scripts/idle_connections.py 7005 8000 $(pgrep -f 'listen 127.0.0.1:7005')
"""
import socket
import struct
import sys
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(l for l in f if l.startswith("VmRSS")).split()[1])


def startup(port):
    s = socket.create_connection(("127.0.0.1", port))
    body = struct.pack("!I", 196608) + b"user\0postgres\0database\0postgres\0\0"
    s.sendall(struct.pack("!I", len(body) + 4) + body)
    buf = b""
    while not buf.endswith(b"Z\0\0\0\x05I"):
        chunk = s.recv(65536)
        if not chunk:
            raise RuntimeError("server closed the connection during startup")
        buf += chunk
    return s


def main():
    port, n, pid = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    for _ in range(20):  # warm up: first-connection allocations are not per connection
        startup(port).close()
    time.sleep(0.5)
    before = rss_kib(pid)
    conns = [startup(port) for _ in range(n)]
    time.sleep(1)
    after = rss_kib(pid)
    print(f"{n} idle connections: RSS {before} -> {after} KiB, {(after - before) * 1024 / n:.0f} bytes each")
    for c in conns:
        c.close()


if __name__ == "__main__":
    main()
