#!/usr/bin/env python3
"""Memory and stalls with clients that read one large result slowly, or never.

Starts a ringwire binary (--shards 2 unless --args says otherwise) on a free port, loads a table
of --rows rows of --row-bytes bytes with COPY (psql), then opens --clients connections that
each send `SELECT * FROM wide` and either never read (--read never) or read 64 KiB every
--interval-ms (--read slow). Samples the server's RSS every 100 ms for --seconds and prints
the growth over the RSS measured after the load (peak and at the end), then lets every client
read to the end and checks each got every row. Prints the executor stall counters of
ringwire.shard_stats before the clients start and after they finish (io_uring path only).

  python3 scripts/slow_readers.py --bin target/release/ringwire --clients 16 --read never
  python3 scripts/slow_readers.py --bin OLD/ringwire --args "--read-replicas off" --read slow
"""

import argparse
import os
import shlex
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def psql(port, sql):
    out = subprocess.run(["psql", "-X", "-At", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                          "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", sql],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"psql {sql!r}: {out.stderr}")
    return out.stdout.strip()


class Raw:
    """A protocol client that reads only when told to."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        params = b"user\0postgres\0database\0postgres\0\0"
        self.s.sendall(struct.pack("!II", 8 + len(params), 196608) + params)
        self.buf = b""
        while self.message()[0] != b"Z":
            pass

    def fill(self, n=65536):
        data = self.s.recv(n)
        if not data:
            raise EOFError
        self.buf += data

    def message(self):
        while len(self.buf) < 5:
            self.fill()
        tag, length = self.buf[:1], struct.unpack("!I", self.buf[1:5])[0]
        while len(self.buf) < 1 + length:
            self.fill()
        body, self.buf = self.buf[5:1 + length], self.buf[1 + length:]
        return tag, body

    def send_query(self, sql):
        q = sql.encode() + b"\0"
        self.s.sendall(b"Q" + struct.pack("!I", 4 + len(q)) + q)

    def finish(self):
        rows = 0
        while True:
            tag, body = self.message()
            if tag == b"D":
                rows += 1
            elif tag == b"E":
                raise RuntimeError(body)
            elif tag == b"Z":
                return rows


def stalls(port):
    out = psql(port, "select coalesce(sum(executor_stalls),0), coalesce(max(executor_stall_us_max),0) "
                     "from ringwire.shard_stats")
    n, us = out.split("|")
    return int(n), int(us)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--args", default="", help="more ringwire flags")
    ap.add_argument("--rows", type=int, default=5000)
    ap.add_argument("--row-bytes", type=int, default=10000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--read", choices=["never", "slow"], default="never")
    ap.add_argument("--interval-ms", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=5)
    args = ap.parse_args()

    port = free_port()
    cmd = [args.bin, "--listen", f"127.0.0.1:{port}", "--log-level", "warn"] + shlex.split(args.args)
    if "--shards" not in cmd and "--cores" not in cmd:
        cmd += ["--shards", "2"]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    server.stdout.readline()
    threading.Thread(target=lambda: server.stdout.read(), daemon=True).start()
    try:
        psql(port, "create table wide (id int primary key, v text)")
        # Loaded in COPYs of 50 rows: one big COPY would itself stall the compute's shard for
        # longer than anything measured after it (the stall maximum counts from startup).
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "wide.tsv")
            for start in range(1, args.rows + 1, 50):
                with open(path, "w") as f:
                    for i in range(start, min(start + 50, args.rows + 1)):
                        f.write(f"{i}\t{chr(97 + i % 26) * args.row_bytes}\n")
                psql(port, f"\\copy wide from '{path}'")
        result_mb = args.rows * args.row_bytes / 1e6
        check = Raw(port)
        check.send_query("select * from wide")
        assert check.finish() == args.rows
        time.sleep(1)
        base = rss_kib(server.pid)
        before = stalls(port)
        clients = [Raw(port) for _ in range(args.clients)]
        for c in clients:
            c.send_query("select * from wide")
        stop = time.time() + args.seconds
        peak = base
        readers = []
        if args.read == "slow":
            def slow(c):
                while time.time() < stop:
                    c.fill()
                    time.sleep(args.interval_ms / 1000)
            readers = [threading.Thread(target=slow, args=(c,)) for c in clients]
            for t in readers:
                t.start()
        while time.time() < stop:
            peak = max(peak, rss_kib(server.pid))
            time.sleep(0.1)
        for t in readers:
            t.join()
        end = rss_kib(server.pid)
        for c in clients:
            assert c.finish() == args.rows, "a client got fewer rows"
        after = stalls(port)
        print(f"{os.path.basename(os.path.dirname(os.path.dirname(args.bin))) or args.bin} {args.args!r}: "
              f"{args.clients} clients reading a {result_mb:.0f} MB result {args.read}: RSS after load "
              f"{base / 1024:.0f} MiB, growth peak {(peak - base) / 1024:.0f} MiB, at end "
              f"{(end - base) / 1024:.0f} MiB; executor stalls >=10ms before {before[0]} "
              f"(max {before[1] / 1000:.1f} ms), after {after[0]} (max {after[1] / 1000:.1f} ms)")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    sys.exit(main())
