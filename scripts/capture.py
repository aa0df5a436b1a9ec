#!/usr/bin/env python3
"""Capture real client traffic as fuzz seeds.

A TCP proxy (python3 stdlib only) between a client (psql, pgbench, tokio-postgres, ...) and a
server (ringwire or PostgreSQL). It forwards both directions unchanged and splits what the
*client* sends into PostgreSQL v3 messages, writing seeds for the fuzz targets in fuzz/:

  OUT/startup/<hash>           the untagged packets of one connection's startup phase
                               (SSLRequest, GSSENCRequest, then StartupMessage or CancelRequest)
  OUT/frontend_message/<hash>  one connection's tagged messages after startup, in runs of at
                               most --max-seed-bytes, at most --max-seeds-per-connection of
                               them; the first byte is the fuzz target's limit byte (0: no
                               --max-message-bytes limit)
  OUT/sql_plan/<hash>          every statement text of a Query ('Q') or Parse ('P') of a new
                               shape (numbers ignored: pgbench's 10,000 point selects are one
                               seed), up to --max-seed-bytes

Files are named by a hash of their content, so capturing the same traffic twice adds nothing.
Password messages ('p') are never written (they carry secrets); connections with TLS
(the server answering 'S' to SSLRequest) are forwarded but not captured past the handshake.

    python3 scripts/capture.py --listen 5499 --upstream 127.0.0.1:5432 --out fuzz/seeds
    psql -h 127.0.0.1 -p 5499 -c '\\d'      # ... and any other client
"""

import argparse
import asyncio
import hashlib
import os
import re
import struct
import sys

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102


SEEN_SHAPES = set()


def write_seed(out_dir, target, data):
    if not data:
        return
    d = os.path.join(out_dir, target)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, hashlib.sha1(data).hexdigest()[:16])
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(data)


class ClientStream:
    """Splits one connection's client bytes into startup packets and tagged messages."""

    def __init__(self, out_dir, max_seed_bytes, max_seeds):
        self.out_dir = out_dir
        self.max_seed_bytes = max_seed_bytes
        self.seeds_left = max_seeds
        self.buf = bytearray()
        self.in_startup = True
        self.startup = bytearray()
        self.messages = bytearray()
        self.encrypted = False

    def feed(self, data):
        if self.encrypted:
            return
        self.buf += data
        while True:
            if self.in_startup:
                if len(self.buf) < 8:
                    return
                (length,) = struct.unpack("!i", self.buf[:4])
                if length < 8 or length > 10_000 or len(self.buf) < length:
                    if length < 8 or length > 10_000:
                        self.in_startup = False  # not a startup packet; treat as tagged
                        continue
                    return
                packet = bytes(self.buf[:length])
                del self.buf[:length]
                self.startup += packet
                (code,) = struct.unpack("!i", packet[4:8])
                if code in (SSL_REQUEST, GSSENC_REQUEST):
                    continue  # the server answers 'N' (or 'S': see server_byte) and we go on
                write_seed(self.out_dir, "startup", bytes(self.startup))
                self.in_startup = False
                if code == CANCEL_REQUEST:
                    return
                continue
            if len(self.buf) < 5:
                return
            (length,) = struct.unpack("!i", self.buf[1:5])
            if length < 4:
                return  # not a protocol stream; stop splitting
            if len(self.buf) < 1 + length:
                return
            message = bytes(self.buf[: 1 + length])
            del self.buf[: 1 + length]
            self.message(message)

    def message(self, message):
        tag = message[:1]
        if tag == b"p":
            return  # password / SASL: secrets stay out of the corpus
        if tag in (b"Q", b"P"):
            body = message[5:]
            if tag == b"P":
                body = body[body.index(b"\0") + 1 :]  # skip the statement name
            text = body[: body.index(b"\0")] if b"\0" in body else body
            shape = re.sub(rb"[0-9]+", b"0", text)
            if shape not in SEEN_SHAPES and len(text) <= self.max_seed_bytes:
                SEEN_SHAPES.add(shape)
                write_seed(self.out_dir, "sql_plan", text)
        if self.messages and len(self.messages) + len(message) > self.max_seed_bytes:
            self.flush()
        self.messages += message

    def flush(self):
        if self.messages and self.seeds_left > 0:
            self.seeds_left -= 1
            write_seed(self.out_dir, "frontend_message", b"\0" + bytes(self.messages))
        self.messages = bytearray()

    def server_byte(self, first):
        """The server's first reply byte after an SSLRequest: 'S' means TLS follows."""
        if first == b"S":
            self.encrypted = True


async def pipe(reader, writer, on_data):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            on_data(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def handle(client_reader, client_writer, args):
    host, port = args.upstream.rsplit(":", 1)
    try:
        server_reader, server_writer = await asyncio.open_connection(host, int(port))
    except OSError as e:
        print(f"capture: upstream {args.upstream}: {e}", file=sys.stderr)
        client_writer.close()
        return
    stream = ClientStream(args.out, args.max_seed_bytes, args.max_seeds_per_connection)
    first_reply = [True]

    def from_server(data):
        if first_reply[0] and stream.startup.startswith(b"\0\0\0\x08\x04\xd2\x16\x2f"):
            stream.server_byte(data[:1])
        first_reply[0] = False

    await asyncio.gather(
        pipe(client_reader, server_writer, stream.feed),
        pipe(server_reader, client_writer, from_server),
    )
    stream.flush()


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--listen", type=int, required=True, help="loopback port to listen on")
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the server")
    parser.add_argument("--out", default="fuzz/seeds", help="seed directory (default fuzz/seeds)")
    parser.add_argument("--max-seed-bytes", type=int, default=4096)
    parser.add_argument("--max-seeds-per-connection", type=int, default=4)
    args = parser.parse_args()
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, args), "127.0.0.1", args.listen
    )
    print(f"capture: 127.0.0.1:{args.listen} -> {args.upstream}, seeds into {args.out}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
