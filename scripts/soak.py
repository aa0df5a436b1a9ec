#!/usr/bin/env python3
"""Soak ringwire with 1,000+ concurrent connections of mixed clients, on loopback, for a bounded
time, and report whether the well-behaved ones were unharmed.

    python3 scripts/soak.py [--seconds 120] [--rounds 1] [--binary PATH] [--json out.json]
                            [--transports tcp,tls,unix] [--auth trust|scram-sha-256]
                            [--io uring|glommio]

Starts a release ringwire (`--shards 2`, free port, loopback) and runs, all at once:

  well-behaved  real queries over the simple and the extended protocol (point selects by key,
                constant expressions, a 200-row range; --writers of them also update their own
                table in and out of transaction blocks) with every answer checked; a query
                unanswered for 30 s is an error; reconnects now and then
  slowloris     (a) a startup packet at one byte per second; (b) half a Query message, then
                silence for the rest of the run; (c) a 2 MB result read at 4 KiB per second
  disconnect    closes (or resets) mid-query: mid 2 MB result, mid 4 MB row, during
                pg_sleep, right after sending, half-way through a message
  garbage       random bytes as startup, random bytes after startup, impossible lengths,
                unknown message tags, bodies that do not parse
  probes        one connection per shard (found by BackendKeyData: (pid >> 22) - 1 is the shard)
                sending `select 1` every 10 ms from a separate process, one thread per shard:
                the max and p99 latency per shard is the longest a shard stalled

--transports spreads the well-behaved and disconnecting clients over plaintext TCP, TLS (a
throwaway self-signed certificate made with the openssl command) and the Unix-domain socket;
--auth scram-sha-256 makes every client (probes too) log in with SCRAM-SHA-256; --io picks the
server's socket path. Slowloris and garbage clients stay on plaintext TCP.

Reported (and in --json): errors seen by well-behaved clients (must be 0), RSS of the server at
start / peak / after the clients left, probe latency per shard, connection counts per kind.
Exit status 1 if a well-behaved client saw an error, a probe failed, or the server died.

python3 standard library only. Raises its own RLIMIT_NOFILE to the hard limit (the server
inherits it) and sizes the run to fit.
"""

import argparse
import asyncio
import functools
import json
import multiprocessing
import os
import random
import base64
import hashlib
import hmac
import resource
import shutil
import socket
import ssl
import tempfile
import struct
import subprocess
import sys
import threading
import time

# ---- a minimal pgwire client (just what the soak needs) ----


def startup_packet(user="soak", database="postgres"):
    body = struct.pack("!i", 196608)
    for k, v in (("user", user), ("database", database), ("application_name", "soak")):
        body += k.encode() + b"\0" + v.encode() + b"\0"
    body += b"\0"
    return struct.pack("!i", len(body) + 4) + body


def msg(tag, body=b""):
    return tag + struct.pack("!i", len(body) + 4) + body


# How clients reach the server; set in main() before any client process is forked.
TARGET = {"transports": ["tcp"], "password": None, "unix_path": None}
SOAK_PASSWORD = "soak-password"
SSL_REQUEST = struct.pack("!ii", 8, 80877103)


class Scram:
    """The client side of SCRAM-SHA-256 (RFC 5802/7677) without channel binding, sans-IO:
    first() is the SASLInitialResponse body, final() answers the server-first message, and
    check() verifies the server's signature."""

    def __init__(self, password):
        self.password = password.encode()
        self.nonce = base64.b64encode(os.urandom(18)).decode()
        self.first_bare = f"n=,r={self.nonce}"

    def first(self):
        data = ("n,," + self.first_bare).encode()
        return b"SCRAM-SHA-256\0" + struct.pack("!i", len(data)) + data

    def final(self, server_first):
        server_first = server_first.decode()
        attrs = dict(part.split("=", 1) for part in server_first.split(","))
        if not attrs["r"].startswith(self.nonce):
            raise QueryError("SCRAM: the server's nonce does not extend ours")
        salted = hashlib.pbkdf2_hmac("sha256", self.password, base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        stored = hashlib.sha256(client_key).digest()
        without_proof = f"c=biws,r={attrs['r']}"
        auth_message = f"{self.first_bare},{server_first},{without_proof}".encode()
        signature = hmac.digest(stored, auth_message, "sha256")
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.digest(salted, b"Server Key", "sha256")
        self.expected = base64.b64encode(hmac.digest(server_key, auth_message, "sha256")).decode()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def check(self, server_final):
        if server_final.decode() != f"v={self.expected}":
            raise QueryError("SCRAM: wrong server signature")


def auth_reply(scram, body):
    """The answer to an AuthenticationRequest body, or None when there is nothing to send."""
    (code,) = struct.unpack("!i", body[:4])
    if code == 0:
        return None
    if scram is None:
        raise QueryError(f"the server asks for authentication {code}; run with --auth")
    if code == 10:
        return msg(b"p", scram.first())
    if code == 11:
        return msg(b"p", scram.final(body[4:]))
    if code == 12:
        scram.check(body[4:])
        return None
    raise QueryError(f"authentication request {code} is not SCRAM")


async def open_transport(port, transport, timeout):
    if transport == "unix":
        return await asyncio.wait_for(asyncio.open_unix_connection(TARGET["unix_path"]), timeout)
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    if transport == "tls":
        writer.write(SSL_REQUEST)
        answer = await asyncio.wait_for(reader.readexactly(1), timeout)
        if answer != b"S":
            raise QueryError(f"SSLRequest answered {answer!r}")
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        await asyncio.wait_for(writer.start_tls(context), timeout)
    return reader, writer


def query_msg(sql):
    return msg(b"Q", sql.encode() + b"\0")


def extended_msgs(sql, params):
    """Parse (unnamed), Bind (text params), Describe portal, Execute, Sync."""
    parse = msg(b"P", b"\0" + sql.encode() + b"\0" + struct.pack("!h", 0))
    bind = b"\0\0" + struct.pack("!h", 0) + struct.pack("!h", len(params))
    for p in params:
        if p is None:
            bind += struct.pack("!i", -1)
        else:
            b = str(p).encode()
            bind += struct.pack("!i", len(b)) + b
    bind += struct.pack("!h", 0)
    return parse + msg(b"B", bind) + msg(b"D", b"P\0") + msg(b"E", b"\0" + struct.pack("!i", 0)) + msg(b"S")


def error_fields(body):
    fields = {}
    for part in body.split(b"\0"):
        if part:
            fields[chr(part[0])] = part[1:].decode(errors="replace")
    return fields


def data_row(body):
    (n,) = struct.unpack("!h", body[:2])
    at = 2
    out = []
    for _ in range(n):
        (length,) = struct.unpack("!i", body[at : at + 4])
        at += 4
        if length < 0:
            out.append(None)
        else:
            out.append(body[at : at + length].decode())
            at += length
    return out


class QueryError(Exception):
    pass


class Conn:
    """An asyncio pgwire connection."""

    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer
        self.pid = None
        self.scram = None

    @classmethod
    async def open(cls, port, timeout=30, transport="tcp"):
        reader, writer = await open_transport(port, transport, timeout)
        conn = cls(reader, writer)
        if TARGET["password"] is not None:
            conn.scram = Scram(TARGET["password"])
        writer.write(startup_packet())
        await asyncio.wait_for(conn.until_ready(), timeout)
        return conn

    async def read_msg(self):
        head = await self.reader.readexactly(5)
        tag = head[:1]
        (length,) = struct.unpack("!i", head[1:])
        body = await self.reader.readexactly(length - 4)
        return tag, body

    async def until_ready(self):
        """Read through ReadyForQuery; rows of DataRows, and the first ErrorResponse."""
        rows, error = [], None
        while True:
            tag, body = await self.read_msg()
            if tag == b"D":
                rows.append(data_row(body))
            elif tag == b"E":
                error = error or error_fields(body)
                if error.get("S") == "FATAL":
                    raise QueryError(f"FATAL {error.get('C')}: {error.get('M')}")
            elif tag == b"K":
                (self.pid,) = struct.unpack("!i", body[:4])
            elif tag == b"R":
                reply = auth_reply(self.scram, body)
                if reply is not None:
                    self.writer.write(reply)
            elif tag == b"Z":
                return rows, error

    async def simple(self, sql, timeout=30):
        self.writer.write(query_msg(sql))
        return await asyncio.wait_for(self.until_ready(), timeout)

    async def extended(self, sql, params, timeout=30):
        self.writer.write(extended_msgs(sql, params))
        return await asyncio.wait_for(self.until_ready(), timeout)

    def close(self, reset=False):
        if reset:
            sock = self.writer.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
        try:
            self.writer.close()
        except Exception:
            pass


# ---- the run ----

KV_ROWS = 1000
BIG_ROWS = 2000  # of 1 KB: a 2 MB result
SHARD_BITS = 22


def shard_of(pid):
    """The shard that handed out a process id: ringwire's ids are (shard + 1) << 22 | serial."""
    return (pid >> SHARD_BITS) - 1


class Stats:
    def __init__(self):
        self.counts = {}
        self.open_now = 0
        self.open_peak = 0
        self.errors = []  # well-behaved only

    def add(self, key, n=1):
        self.counts[key] = self.counts.get(key, 0) + n

    def opened(self, kind):
        self.add(f"{kind}.connections")
        self.open_now += 1
        self.open_peak = max(self.open_peak, self.open_now)

    def closed(self):
        self.open_now -= 1

    def error(self, what):
        if len(self.errors) < 50:
            self.errors.append(what)
        self.add("well_behaved.errors")


async def well_behaved(cid, port, deadline, stats, writer=False):
    """Reads and constants; a writer also updates its own table, in and out of blocks.

    Writers get a table each: ringwire's write locks are per table and held to the end of the
    block (docs/ARCHITECTURE.md), so writers sharing one table queue behind each other — a
    lock convoy that measures the client's own pacing, not harm from hostile clients.
    """
    rng = random.Random(cid)
    own = f"soak_w{cid}"
    own_id = 1
    counter = None
    conn = None
    queries = 0
    op = "connect"
    while time.monotonic() < deadline:
        try:
            op = "connect"
            if conn is None:
                transport = client_transport(cid)
                op = f"connect over {transport}"
                conn = await Conn.open(port, transport=transport)
                stats.opened("well_behaved")
                stats.add(f"well_behaved.connections.{transport}")
                if writer and counter is None:
                    op = "create own table"
                    for sql in (f"create table {own} (id int primary key, n int)",
                                f"insert into {own} values ({own_id}, 0)"):
                        _, err = await conn.simple(sql)
                        expect([], err, [], sql)
                    counter = 0
            kind = rng.randrange(7 if writer else 5)
            op = ["simple point select", "extended point select", "extended constant",
                  "simple constant", "200-row range", "update own row", "block"][kind]
            if kind == 0:
                k = rng.randrange(1, KV_ROWS + 1)
                rows, err = await conn.simple(f"select v from soak_kv where id = {k}")
                expect(rows, err, [[f"v{k}"]], "simple point select")
            elif kind == 1:
                k = rng.randrange(1, KV_ROWS + 1)
                rows, err = await conn.extended("select v from soak_kv where id = $1", [k])
                expect(rows, err, [[f"v{k}"]], "extended point select")
            elif kind == 2:
                a, b = rng.randrange(-10**6, 10**6), rng.randrange(-10**6, 10**6)
                rows, err = await conn.extended("select $1::int8 + $2::int8, $3::text", [a, b, f"s{a}"])
                expect(rows, err, [[str(a + b), f"s{a}"]], "extended constant")
            elif kind == 3:
                rows, err = await conn.simple(f"select {cid} * 2, 'c{cid}' || 'x'")
                expect(rows, err, [[str(cid * 2), f"c{cid}x"]], "simple constant")
            elif kind == 4:
                rows, err = await conn.simple("select id from soak_kv where id <= 200 order by id")
                expect(rows, err, [[str(i)] for i in range(1, 201)], "200-row range")
            elif kind == 5:
                rows, err = await conn.extended(f"update {own} set n = n + 1 where id = $1 returning n", [own_id])
                counter += 1
                expect(rows, err, [[str(counter)]], "update own row")
            else:
                for sql in ("begin", f"update {own} set n = n + 1 where id = {own_id}"):
                    _, err = await conn.simple(sql)
                    expect([], err, [], sql)
                counter += 1
                rows, err = await conn.simple(f"select n from {own} where id = {own_id}")
                expect(rows, err, [[str(counter)]], "read own write in a block")
                _, err = await conn.simple("commit")
                expect([], err, [], "commit")
            queries += 1
            stats.add("well_behaved.queries")
            if rng.random() < 0.005:  # churn: reconnect now and then
                conn.close()
                stats.closed()
                conn = None
            await asyncio.sleep(rng.uniform(0.05, 0.15))
        except (QueryError, OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
            stats.error(f"client {cid} ({'writer' if writer else 'reader'}) after {queries} queries, "
                        f"during {op}: {type(e).__name__} {e}")
            stats.add(f"well_behaved.errors.{op}")
            if conn is not None:
                conn.close()
                stats.closed()
            conn = None
            await asyncio.sleep(0.5)
    if conn is not None:
        conn.close()
        stats.closed()


def client_transport(cid):
    transports = TARGET["transports"]
    return transports[cid % len(transports)]


def expect(rows, err, want, what):
    if err:
        raise QueryError(f"{what}: {err.get('C')} {err.get('M')}")
    if rows != want:
        shown = rows if len(rows) < 5 else f"{len(rows)} rows starting {rows[:3]}"
        raise QueryError(f"{what}: got {shown}")


async def raw_open(port, kind, stats):
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 30)
    stats.opened(kind)
    return reader, writer


async def drain_until_close(reader, seconds):
    """Read until the server closes (True) or `seconds` pass (False)."""
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            data = await asyncio.wait_for(reader.read(65536), max(0.01, end - time.monotonic()))
            if not data:
                return True
        return False
    except asyncio.TimeoutError:
        return False
    except OSError:
        return True


def close_writer(writer, reset=False):
    Conn(None, writer).close(reset)


async def slowloris(cid, port, deadline, stats):
    rng = random.Random(10_000 + cid)
    kind = cid % 3
    while time.monotonic() < deadline:
        try:
            if kind == 0:
                # (a) startup at one byte per second.
                reader, writer = await raw_open(port, "slowloris_startup", stats)
                packet = startup_packet()
                for i in range(len(packet)):
                    if time.monotonic() >= deadline:
                        break
                    writer.write(packet[i : i + 1])
                    await writer.drain()
                    await asyncio.sleep(1)
                else:
                    writer.write(query_msg("select 1"))
                    closed = await drain_until_close(reader, 5)
                    stats.add("slowloris_startup.completed" if not closed else "slowloris_startup.closed_by_server")
                close_writer(writer)
                stats.closed()
            elif kind == 1:
                # (b) half a Query message, then silence until the end of the run.
                conn = await Conn.open(port)
                stats.opened("slowloris_half_message")
                await conn.simple("select 1")
                half = query_msg("select v from soak_kv where id = 1")
                conn.writer.write(half[: len(half) // 2])
                closed = await drain_until_close(conn.reader, max(0, deadline - time.monotonic()))
                if closed:
                    stats.add("slowloris_half_message.closed_by_server")
                conn.close()
                stats.closed()
            else:
                # (c) a 2 MB result read at 4 KiB per second.
                conn = await Conn.open(port)
                stats.opened("slowloris_slow_reader")
                conn.writer.write(query_msg("select id, v from soak_big"))
                got = 0
                while time.monotonic() < deadline:
                    data = await conn.reader.read(4096)
                    if not data:
                        stats.add("slowloris_slow_reader.closed_by_server")
                        break
                    got += len(data)
                    await asyncio.sleep(1)
                stats.add("slowloris_slow_reader.bytes", got)
                conn.close(reset=rng.random() < 0.5)
                stats.closed()
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, QueryError) as e:
            name = ["startup", "half_message", "slow_reader"][kind]
            stats.add(f"slowloris_{name}.{type(e).__name__}")
            await asyncio.sleep(1)


async def disconnecter(cid, port, deadline, stats):
    rng = random.Random(20_000 + cid)
    while time.monotonic() < deadline:
        kind = rng.randrange(5)
        try:
            conn = await Conn.open(port, transport=client_transport(cid))
            stats.opened("disconnect")
            if kind == 0:
                conn.writer.write(query_msg("select id, v from soak_big"))
                await conn.reader.read(rng.choice([1, 100, 65536]))
            elif kind == 1:
                conn.writer.write(query_msg("select repeat('x', 4000000)"))
                await conn.reader.read(rng.choice([1, 65536]))
            elif kind == 2:
                conn.writer.write(query_msg("select pg_sleep(0.5)"))
                await asyncio.sleep(rng.uniform(0, 0.3))
            elif kind == 3:
                conn.writer.write(extended_msgs("select v from soak_kv where id = $1", [rng.randrange(1, KV_ROWS)]))
            else:
                whole = query_msg("select v from soak_kv where id = 7")
                conn.writer.write(whole[: rng.randrange(1, len(whole))])
            await conn.writer.drain()
            conn.close(reset=rng.random() < 0.5)
            stats.closed()
            stats.add("disconnect.done")
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, QueryError) as e:
            stats.add(f"disconnect.{type(e).__name__}")
        await asyncio.sleep(rng.uniform(0.05, 0.3))


async def garbage(cid, port, deadline, stats):
    rng = random.Random(30_000 + cid)
    while time.monotonic() < deadline:
        kind = rng.randrange(5)
        try:
            reader, writer = await raw_open(port, "garbage", stats)
            if kind == 0:
                payload = rng.randbytes(rng.randrange(1, 300))
            else:
                payload = startup_packet()
                if kind == 1:
                    payload += rng.randbytes(rng.randrange(1, 300))
                elif kind == 2:
                    payload += rng.choice([b"Q", b"P", b"B"]) + struct.pack("!i", rng.choice([0, 2, -1, 0x7FFFFFFF, 100_000_000]))
                elif kind == 3:
                    payload += msg(bytes([rng.choice(b"aAbGjkKlmoOqUVwWyY\x00\xff")]), rng.randbytes(rng.randrange(0, 40)))
                else:
                    tag = rng.choice([b"P", b"B", b"E", b"D", b"C", b"F", b"d", b"f"])
                    payload += msg(tag, rng.randbytes(rng.randrange(0, 60)))
            writer.write(payload)
            closed = await drain_until_close(reader, 3)
            name = ["random_startup", "random_after_startup", "bad_length", "unknown_tag", "bad_body"][kind]
            # PostgreSQL too keeps some of these open: a length that announces more bytes than
            # were sent is a partial message, and a bad body is a statement error (not FATAL).
            stats.add(f"garbage.{name}.{'closed_by_server' if closed else 'still_open_after_3s'}")
            close_writer(writer, reset=rng.random() < 0.5)
            stats.closed()
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
            stats.add(f"garbage.{type(e).__name__}")
        await asyncio.sleep(rng.uniform(0.05, 0.3))


# ---- probes: a separate process, a thread per shard ----


def probe_process(port, shards, seconds, interval_s, out_queue):
    """Connect until one connection per shard, then `select 1` every interval on each."""
    conns = {}
    spares = []
    for _ in range(64):
        if len(conns) == shards:
            break
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(startup_packet())
        scram = Scram(TARGET["password"]) if TARGET["password"] is not None else None
        pid = None
        buf = b""
        while True:
            buf += s.recv(65536)
            done = False
            while len(buf) >= 5:
                tag = buf[:1]
                (length,) = struct.unpack("!i", buf[1:5])
                if len(buf) < 1 + length:
                    break
                body = buf[5 : 1 + length]
                buf = buf[1 + length :]
                if tag == b"K":
                    (pid,) = struct.unpack("!i", body[:4])
                if tag == b"R":
                    reply = auth_reply(scram, body)
                    if reply is not None:
                        s.sendall(reply)
                if tag == b"Z":
                    done = True
            if done:
                break
        shard = shard_of(pid)
        if shard in conns:
            spares.append(s)
        else:
            conns[shard] = s
    for s in spares:
        s.close()
    results = {}

    def run(shard, s):
        latencies = []
        failures = 0
        q = query_msg("select 1")
        end = time.monotonic() + seconds
        next_at = time.monotonic()
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                s.sendall(q)
                buf = b""
                while not buf.endswith(b"Z\x00\x00\x00\x05I"):
                    data = s.recv(4096)
                    if not data:
                        raise ConnectionError("closed")
                    buf += data
                if b"E" in buf[:1]:
                    failures += 1
            except OSError:
                failures += 1
                break
            latencies.append(time.monotonic() - t0)
            next_at += interval_s
            time.sleep(max(0, next_at - time.monotonic()))
        results[shard] = (latencies, failures)

    threads = [threading.Thread(target=run, args=(sh, s)) for sh, s in conns.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    summary = {}
    for shard, (lat, failures) in sorted(results.items()):
        lat_sorted = sorted(lat)
        summary[str(shard)] = {
            "probes": len(lat),
            "failures": failures,
            "max_ms": round(1000 * lat_sorted[-1], 2) if lat else None,
            "p99_ms": round(1000 * lat_sorted[int(0.99 * (len(lat) - 1))], 2) if lat else None,
            "p50_ms": round(1000 * lat_sorted[len(lat) // 2], 2) if lat else None,
        }
    summary["shards_found"] = len(conns)
    out_queue.put(summary)


# ---- server ----


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def server_args(args, workdir):
    """What --transports, --auth and --io add to the server's command line."""
    extra = []
    if "tls" in TARGET["transports"]:
        cert, key = os.path.join(workdir, "cert.pem"), os.path.join(workdir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
                        "-subj", "/CN=localhost", "-keyout", key, "-out", cert],
                       check=True, capture_output=True)
        extra += ["--tls-cert", cert, "--tls-key", key]
    if "unix" in TARGET["transports"]:
        extra += ["--unix-socket-dir", workdir]
    if args.auth != "trust":
        extra += ["--auth", args.auth, "--user", f"soak:{SOAK_PASSWORD}"]
    if args.io:
        extra += ["--io", args.io]
    return extra


def start_server(binary, shards, max_connections, extra=()):
    proc = subprocess.Popen(
        [binary, "--listen", "127.0.0.1:0", "--shards", str(shards),
         "--max-connections", str(max_connections), "--log-level", "warn", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
    )
    line = proc.stdout.readline()
    # "ringwire listening on 127.0.0.1:PORT with N shard(s)"
    port = next((int(w.rsplit(":", 1)[1]) for w in line.split() if w.rsplit(":", 1)[-1].isdigit() and ":" in w), None)
    if port is None:
        proc.kill()
        sys.exit(f"no port in ringwire's first line: {line!r}")
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    if TARGET["unix_path"] is not None:
        TARGET["unix_path"] = TARGET["unix_path"].replace("PORT", str(port))
    return proc, port


async def setup(port):
    conn = await Conn.open(port)
    for sql in (
        "drop table if exists soak_kv", "drop table if exists soak_big",
        "create table soak_kv (id int primary key, v text)",
        "create table soak_big (id int primary key, v text)",
    ):
        _, err = await conn.simple(sql)
        if err:
            sys.exit(f"setup {sql}: {err}")
    for start in range(1, KV_ROWS + 1, 250):
        values = ",".join(f"({i}, 'v{i}')" for i in range(start, min(start + 250, KV_ROWS + 1)))
        _, err = await conn.simple(f"insert into soak_kv values {values}")
        if err:
            sys.exit(f"setup soak_kv: {err}")
    for start in range(1, BIG_ROWS + 1, 100):
        values = ",".join(f"({i}, repeat('b', 1000))" for i in range(start, min(start + 100, BIG_ROWS + 1)))
        _, err = await conn.simple(f"insert into soak_big values {values}")
        if err:
            sys.exit(f"setup soak_big: {err}")
    conn.close()


async def after_check(port, shards):
    """Fresh connections after the storm: every shard still answers."""
    seen = set()
    for _ in range(32):
        conn = await Conn.open(port, timeout=10)
        rows, err = await conn.simple("select 1", timeout=10)
        if err or rows != [["1"]]:
            raise QueryError(f"after the run: {rows} {err}")
        seen.add(shard_of(conn.pid))
        conn.close()
        if len(seen) == shards:
            break
    return sorted(seen)


async def run(args):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    except (ValueError, OSError):
        pass
    total = args.well_behaved + args.slowloris + args.disconnect + args.garbage
    # Each connection costs the client and the server one fd each, plus headroom.
    if 2 * total + 200 > soft:
        sys.exit(f"RLIMIT_NOFILE {soft} is too small for {total} connections (client + server)")

    workdir = tempfile.mkdtemp(prefix="ringwire-soak-")
    if "unix" in TARGET["transports"]:
        TARGET["unix_path"] = os.path.join(workdir, ".s.PGSQL.PORT")
    proc, port = start_server(args.binary, args.shards, max_connections=total + 200,
                              extra=server_args(args, workdir))
    report = {"seconds_per_round": args.seconds, "rounds": args.rounds, "shards": args.shards,
              "rlimit_nofile": soft, "transports": TARGET["transports"], "auth": args.auth,
              "io": args.io or "default",
              "clients": {"well_behaved": args.well_behaved, "slowloris": args.slowloris,
                          "disconnect": args.disconnect, "garbage": args.garbage},
              "rounds_detail": []}
    try:
        await setup(port)
        await asyncio.sleep(1)
        report["rss_kib_start"] = rss_kib(proc.pid)[0]
        for round_no in range(args.rounds):
            detail = await storm(args, proc, port, round_no)
            report["rounds_detail"].append(detail)
            if not detail["server_alive"]:
                break
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    rounds = report["rounds_detail"]
    report["server_alive"] = all(r["server_alive"] for r in rounds)
    report["well_behaved_errors"] = sum(r["well_behaved_errors"] for r in rounds)
    return report


CLIENT_KINDS = {
    "reader": well_behaved,
    "writer": functools.partial(well_behaved, writer=True),
    "slowloris": slowloris,
    "disconnect": disconnecter,
    "garbage": garbage,
}


def client_worker(specs, port, deadline, ramp_s, open_now, out_queue):
    """One client process: its share of the clients on its own event loop (one Python loop
    cannot keep 1,000 connections busy and the churners connecting)."""

    async def main():
        stats = Stats()
        start = time.monotonic()

        async def publish():
            while time.monotonic() < deadline + 5:
                open_now.value = stats.open_now
                await asyncio.sleep(0.2)

        publisher = asyncio.create_task(publish())
        tasks = []
        for i, (kind, cid) in enumerate(specs):
            # Ramp on the wall clock, however busy the loop is.
            delay = start + ramp_s * i / len(specs) - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(CLIENT_KINDS[kind](cid, port, deadline, stats)))
        await asyncio.sleep(max(0, deadline - time.monotonic()))
        if tasks:
            await asyncio.wait(tasks, timeout=30)
        open_now.value = stats.open_now
        publisher.cancel()
        return {"counts": stats.counts, "errors": stats.errors, "open_peak": stats.open_peak}

    out_queue.put(asyncio.run(main()))


async def storm(args, proc, port, round_no):
    """One round: every client kind at once for args.seconds, then RSS after a settle."""
    report = {"round": round_no, "rss_kib_before": rss_kib(proc.pid)[0]}
    probes = multiprocessing.Queue()
    prober = multiprocessing.Process(
        target=probe_process, args=(port, args.shards, args.seconds + 5, 0.01, probes))
    prober.start()

    deadline = time.monotonic() + args.seconds
    ramp_s = min(10.0, args.seconds / 4)
    readers = args.well_behaved - min(args.writers, args.well_behaved)
    specs = []
    for kind, n in (("reader", readers), ("writer", args.well_behaved - readers),
                    ("slowloris", args.slowloris), ("disconnect", args.disconnect),
                    ("garbage", args.garbage)):
        # Client ids are distinct across rounds: each writer owns a fresh table.
        specs += [(kind, round_no * 10_000 + i + 1) for i in range(n)]
    random.Random(round_no).shuffle(specs)
    results = multiprocessing.Queue()
    workers = []
    for w in range(args.client_processes):
        open_now = multiprocessing.Value("i", 0)
        p = multiprocessing.Process(target=client_worker, args=(
            specs[w :: args.client_processes], port, deadline, ramp_s, open_now, results))
        p.start()
        workers.append((p, open_now))

    rss_peak = report["rss_kib_before"]
    open_peak = 0
    open_at_ramp = None
    while time.monotonic() < deadline + 2 and proc.poll() is None:
        rss_peak = max(rss_peak, rss_kib(proc.pid)[0])
        open_total = sum(v.value for _, v in workers)
        open_peak = max(open_peak, open_total)
        if open_at_ramp is None and time.monotonic() > deadline - args.seconds + ramp_s + 2:
            open_at_ramp = open_total
        await asyncio.sleep(0.5)
    merged = Stats()
    for _ in workers:
        try:
            r = results.get(timeout=60)
        except Exception:
            merged.add("client_process_lost")
            continue
        for k, v in r["counts"].items():
            merged.add(k, v)
        merged.errors += r["errors"][: 50 - len(merged.errors)]
    for p, _ in workers:
        p.join(timeout=10)
    stats = merged
    stats.open_peak = open_peak
    open_at_full = open_at_ramp
    alive = proc.poll() is None
    report["server_alive"] = alive
    report["connections_open_peak"] = stats.open_peak  # sampled every 0.5 s
    report["connections_open_after_ramp"] = open_at_full
    report["counts"] = dict(sorted(stats.counts.items()))
    report["well_behaved_errors"] = stats.counts.get("well_behaved.errors", 0)
    report["well_behaved_error_samples"] = stats.errors
    report["rss_kib_peak"] = rss_peak
    prober.join(timeout=30)
    report["probes"] = probes.get(timeout=5) if not probes.empty() else "no probe result"
    if alive:
        report["after_shards_answering"] = await after_check(port, args.shards)
        await asyncio.sleep(args.settle_seconds)
        rss_after, hwm = rss_kib(proc.pid)
        report["rss_kib_after"] = rss_after
        report["rss_kib_hwm"] = hwm
    return report


def main():
    parser = argparse.ArgumentParser(description="soak ringwire with hostile and well-behaved clients")
    parser.add_argument("--seconds", type=float, default=120, help="length of one round")
    parser.add_argument("--rounds", type=int, default=1,
                        help="storms against the same server; RSS after each shows a leak as growth")
    default_bin = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "release", "ringwire")
    parser.add_argument("--binary", default=default_bin, help=f"ringwire binary (default {default_bin})")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--well-behaved", type=int, default=800)
    parser.add_argument("--writers", type=int, default=50,
                        help="how many of the well-behaved clients also write (each its own table)")
    parser.add_argument("--slowloris", type=int, default=150)
    parser.add_argument("--disconnect", type=int, default=100)
    parser.add_argument("--garbage", type=int, default=100)
    parser.add_argument("--client-processes", type=int, default=2,
                        help="processes the clients are spread over (each its own event loop)")
    parser.add_argument("--settle-seconds", type=float, default=10,
                        help="wait after the clients left before reading RSS again")
    parser.add_argument("--json", help="also write the report here")
    parser.add_argument("--transports", default="tcp",
                        help="comma list of tcp, tls, unix: how well-behaved and disconnecting clients connect")
    parser.add_argument("--auth", default="trust", choices=["trust", "scram-sha-256"],
                        help="scram-sha-256: every client logs in with a password")
    parser.add_argument("--io", choices=["uring", "glommio"], help="the server's socket path")
    args = parser.parse_args()
    TARGET["transports"] = args.transports.split(",")
    if not set(TARGET["transports"]) <= {"tcp", "tls", "unix"}:
        sys.exit(f"--transports: unknown transport in {args.transports!r}")
    if args.auth != "trust":
        TARGET["password"] = SOAK_PASSWORD
    if not os.path.exists(args.binary):
        sys.exit(f"{args.binary} not found: cargo build --release (or --binary)")
    report = asyncio.run(run(args))
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    def probes_ok(probes):
        return (isinstance(probes, dict) and probes.get("shards_found") == args.shards
                and all(v["failures"] == 0 for k, v in probes.items() if k != "shards_found"))

    ok = (report["server_alive"] and report["well_behaved_errors"] == 0
          and all(probes_ok(r["probes"]) for r in report["rounds_detail"]))
    print("soak:", "PASS" if ok else "FAIL", file=sys.stderr)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
