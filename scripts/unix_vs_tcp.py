#!/usr/bin/env python3
"""One ringwire, two transports: pgbench's `select * from t` (simple protocol) over TCP
loopback and over the Unix-domain socket, interleaved rounds, at the given concurrencies.
Prints median QPS, server CPU per query and syscalls per query for each, and the Unix/TCP
QPS ratio. pgbench is the client for both, so its own cost cancels out of the comparison.

    cargo build --release -p ringwire && python3 scripts/unix_vs_tcp.py --concurrency 1,64
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import RELEASE, free_port, load, pgbench_qps, sample_server, start_binary  # noqa: E402


def measured(server, host, conc, duration):
    return sample_server(server, duration, lambda: pgbench_qps(host, server.port, conc, duration), syscalls=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="1,64")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=4, help="seconds per pgbench run")
    ap.add_argument("--server-cores", default="0-1")
    ap.add_argument("--io", default="uring")
    args = ap.parse_args()
    sockdir = tempfile.mkdtemp(prefix="ringwire-unix-")
    port = free_port()
    server = start_binary("ringwire", [os.path.join(RELEASE, "ringwire"), "--listen", f"127.0.0.1:{port}",
                                       "--cores", args.server_cores, "--io", args.io, "--log-level", "warn",
                                       "--unix-socket-dir", sockdir], port)
    try:
        err = load(port, "CREATE TABLE t (a int4); INSERT INTO t VALUES (1);", 1)
        if err:
            raise RuntimeError(err)
        results = {}
        for conc in [int(c) for c in args.concurrency.split(",")]:
            for rnd in range(args.rounds):
                for name, host in (("tcp", "127.0.0.1"), ("unix", sockdir)):
                    r = measured(server, host, conc, args.duration)
                    results.setdefault((name, conc), []).append(r)
                    print(f"# c={conc} round {rnd} {name}: {r['qps']:.0f} qps", file=sys.stderr)
        print(f"io={args.io} server-cores={args.server_cores} rounds={args.rounds} duration={args.duration}s; "
              f"pgbench select * from t, simple protocol; medians")
        print("conn | transport | qps | server CPU us/query | syscalls/query | unix/tcp qps")
        for conc in sorted({c for _, c in results}):
            med = {n: {k: statistics.median(r[k] for r in results[(n, conc)]) for k in ("qps", "cpu_us", "syscalls")}
                   for n in ("tcp", "unix")}
            for n in ("tcp", "unix"):
                ratio = f"{med['unix']['qps'] / med['tcp']['qps']:.2f}" if n == "unix" else ""
                print(f"{conc} | {n} | {med[n]['qps']:.0f} | {med[n]['cpu_us']:.2f} | {med[n]['syscalls']:.3f} | {ratio}")
    finally:
        server.stop()
        shutil.rmtree(sockdir, ignore_errors=True)


if __name__ == "__main__":
    main()
