#!/usr/bin/env python3
"""What TLS costs ringwire: one server with a certificate, pgbench's `select * from t` (simple
protocol) with sslmode=disable and sslmode=require, alternating rounds, at the given
concurrencies. Prints median QPS and server CPU per query for each and the TLS/plain QPS
ratio; with --idle N, also the server's memory per idle connection (N pgbench clients
sleeping in `\\sleep`), plain and TLS. pgbench is the client in both modes, so its own TLS cost
is on the client's cores, which share the machine: the ratio is what a client on this
machine sees.

The certificate is a throwaway self-signed P-256 one made with the openssl CLI.

    cargo build --release -p ringwire && python3 scripts/tls_cost.py --concurrency 1,64 --idle 200
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import RELEASE, free_port, load, pgbench_qps, sample_server, start_binary  # noqa: E402


def make_cert(directory):
    cert, key = os.path.join(directory, "server.pem"), os.path.join(directory, "server.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost"],
                   check=True, capture_output=True)
    return cert, key


def pgbench(port, sslmode, conc, duration, script_text, extra=()):
    return pgbench_qps("127.0.0.1", port, conc, duration, script_text, extra, env=dict(os.environ, PGSSLMODE=sslmode))


def measured(server, sslmode, conc, duration, extra=()):
    # The steady window starts 1 s in: connections open, handshakes done.
    return sample_server(server, duration,
                         lambda: pgbench(server.port, sslmode, conc, duration, "select * from t;\n", extra))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def idle_memory(start, sslmode, n):
    """On a fresh server: RSS with n connections idle (after one query each) minus RSS before,
    per connection."""
    server = start()
    try:
        return idle_delta(server, sslmode, n)
    finally:
        server.stop()


def idle_delta(server, sslmode, n):
    # One connection first, so one-time setup (the TLS config's first use, the engine's
    # tables) is not charged to the idle connections.
    pgbench(server.port, sslmode, 1, 1, "select 1;\n")
    time.sleep(0.5)
    before = rss_kib(server.pid)
    sample = {}

    def sampler():
        time.sleep(4.0)
        sample["rss"] = rss_kib(server.pid)

    t = threading.Thread(target=sampler)
    t.start()
    pgbench(server.port, sslmode, n, 7, "select 1;\n\\sleep 10 s\n")
    t.join()
    return (sample["rss"] - before) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="1,64")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=4, help="seconds per pgbench run")
    ap.add_argument("--server-cores", default="0-1")
    ap.add_argument("--io", default="uring")
    ap.add_argument("--idle", type=int, default=0, help="also measure memory per idle connection with N clients")
    ap.add_argument("--connects", action="store_true",
                    help="also measure server CPU per new connection (pgbench -C, one query per connection)")
    args = ap.parse_args()
    certdir = tempfile.mkdtemp(prefix="ringwire-tls-cost-")
    cert, key = make_cert(certdir)

    def start():
        port = free_port()
        return start_binary("ringwire", [os.path.join(RELEASE, "ringwire"), "--listen", f"127.0.0.1:{port}",
                                         "--cores", args.server_cores, "--io", args.io, "--log-level", "warn",
                                         "--max-connections", "4096", "--tls-cert", cert, "--tls-key", key], port)

    server = start()
    modes = (("plain", "disable"), ("tls", "require"))
    try:
        err = load(server.port, "CREATE TABLE t (a int4); INSERT INTO t VALUES (1);", 1)
        if err:
            raise RuntimeError(err)
        results = {}
        for conc in [int(c) for c in args.concurrency.split(",")]:
            for rnd in range(args.rounds):
                # Alternate which mode goes first, so drift on the shared machine hits both.
                for name, sslmode in (modes if rnd % 2 == 0 else modes[::-1]):
                    r = measured(server, sslmode, conc, args.duration)
                    results.setdefault((name, conc), []).append(r)
                    print(f"# c={conc} round {rnd} {name}: {r['qps']:.0f} qps", file=sys.stderr)
        print(f"io={args.io} server-cores={args.server_cores} rounds={args.rounds} duration={args.duration}s; "
              f"pgbench select * from t, simple protocol; medians")
        print("conn | mode | qps | server CPU us/query | tls/plain qps (median of per-round ratios)")
        for conc in sorted({c for _, c in results}):
            med = {n: {k: statistics.median(r[k] for r in results[(n, conc)]) for k in ("qps", "cpu_us")}
                   for n, _ in modes}
            ratios = [t["qps"] / p["qps"] for t, p in zip(results[("tls", conc)], results[("plain", conc)])]
            for n, _ in modes:
                ratio = f"{statistics.median(ratios):.2f} (rounds: {', '.join(f'{x:.2f}' for x in ratios)})" \
                    if n == "tls" else ""
                print(f"{conc} | {n} | {med[n]['qps']:.0f} | {med[n]['cpu_us']:.2f} | {ratio}")
        if args.connects:
            runs = {}
            for rnd in range(args.rounds):
                for name, sslmode in (modes if rnd % 2 == 0 else modes[::-1]):
                    runs.setdefault(name, []).append(measured(server, sslmode, 1, args.duration, ["-C"]))
            for name, _ in modes:
                med = {k: statistics.median(r[k] for r in runs[name]) for k in ("qps", "cpu_us")}
                print(f"new connection + 1 query (pgbench -C -c 1), {name}: {med['qps']:.0f} connections/s, "
                      f"server CPU {med['cpu_us']:.0f} us per connection")
        if args.idle:
            for name, sslmode in modes:
                per = idle_memory(start, sslmode, args.idle)
                print(f"idle memory, {args.idle} connections, {name}: {per:.1f} KiB per connection (RSS delta)")
    finally:
        server.stop()
        shutil.rmtree(certdir, ignore_errors=True)


if __name__ == "__main__":
    main()
