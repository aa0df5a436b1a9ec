#!/usr/bin/env python3
"""Interleaved A/B of ringwire configurations (and the Tokio baseline) with ringwire-bench.

Each configuration is one long-lived server (`--cores 0-1`, its own port, a metrics port beside
it); every round runs ringwire-bench against each server in turn (A B C A B C ...), so drift on
this shared machine hits all of them alike. Prints one line per run with QPS, p99 and how the
connections were spread over the shards (`ringwire_shard_connections_open`, read 1 s into the
run), then per concurrency the medians of QPS, server CPU per query and p99.

    scripts/ab.py '{"balanced": [], "kernel": ["--balance-connections", "off"], "tokio": []}' \\
        --concurrency 4,16,64 --rounds 8

A configuration's arguments are added to ringwire's; a first argument `@PATH` runs another
ringwire binary (e.g. a build of an earlier commit); the name `tokio` runs the Tokio baseline.
`--setup FILE` runs a psql script on every server first (`t` with one row always exists).
Builds nothing: run `cargo build --release` first (or set --bin-dir).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", help='JSON object: name -> list of extra ringwire arguments')
    ap.add_argument("--concurrency", default="4")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--duration", default="2s")
    ap.add_argument("--sql", default="select * from t")
    ap.add_argument("--setup", help="psql script run on every server before the rounds")
    ap.add_argument("--bin-dir", default=os.environ.get("CARGO_TARGET_DIR", "target") + "/release")
    ap.add_argument("--port", type=int, default=27100,
                    help="first server port; below the ephemeral range (32768-60999), where a TIME_WAIT client socket can hold it")
    args = ap.parse_args()
    configs = json.loads(args.configs)
    bins = args.bin_dir

    def start(name, extra, port):
        if name.startswith("tokio"):
            cmd = [f"{bins}/tokio-baseline", "--listen", f"127.0.0.1:{port}", "--threads", "2"]
        else:
            binary = f"{bins}/ringwire"
            if extra and extra[0].startswith("@"):
                binary, extra = extra[0][1:], extra[1:]
            cmd = [binary, "--listen", f"127.0.0.1:{port}", "--cores", "0-1", "--log-level", "error",
                   "--metrics-listen", f"127.0.0.1:{port + 1}"] + extra
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise SystemExit(f"{name} did not start: {cmd}")
        psql = ["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-q"]
        subprocess.run(psql + ["-c", "CREATE TABLE t (a int4); INSERT INTO t VALUES (1);"], capture_output=True)
        if args.setup:
            subprocess.run(psql + ["-f", args.setup], capture_output=True, check=True)
        return proc

    def cpu_seconds(pid):
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def placement(port):
        try:
            text = subprocess.run(["curl", "-s", f"127.0.0.1:{port + 1}/metrics"], capture_output=True,
                                  text=True, timeout=5).stdout
        except subprocess.TimeoutExpired:
            return "?"
        return "/".join(l.split()[-1] for l in text.splitlines()
                        if l.startswith("ringwire_shard_connections_open{"))

    servers = {}
    port = args.port
    try:
        for name, extra in configs.items():
            servers[name] = (start(name, extra, port), port)
            port += 2
        results = {}
        for conc in [int(c) for c in args.concurrency.split(",")]:
            for rnd in range(args.rounds):
                for name, (proc, p) in servers.items():
                    c0, t0 = cpu_seconds(proc.pid), time.time()
                    bench = subprocess.Popen(
                        [f"{bins}/ringwire-bench", "--port", str(p), "--mode", "simple", "--json",
                         "--duration", args.duration, "--warmup", "300ms", "--threads", "2",
                         "--concurrency", str(conc), "--sql", args.sql],
                        stdout=subprocess.PIPE, text=True)
                    spread = ""
                    if not name.startswith("tokio"):
                        time.sleep(1.0)
                        spread = placement(p)
                    out = bench.communicate()[0]
                    c1, t1 = cpu_seconds(proc.pid), time.time()
                    run = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
                    qps = run["qps"]
                    cpu_us = (c1 - c0) / (qps * (t1 - t0)) * 1e6 if qps else float("nan")
                    results.setdefault((conc, name), []).append((qps, cpu_us, run["p99_us"]))
                    print(f"# c={conc} round {rnd} {name}: {qps:.0f} qps p99 {run['p99_us']:.0f} us "
                          f"shards {spread}", flush=True)
            cells = []
            for name in servers:
                runs = results[(conc, name)]
                cells.append(f"{name}: {statistics.median(r[0] for r in runs):8.0f} qps "
                             f"{statistics.median(r[1] for r in runs):6.2f} us/query "
                             f"p99 {statistics.median(r[2] for r in runs):6.0f} us")
            print(f"{conc:>4} | " + " | ".join(cells), flush=True)
    finally:
        for proc, _ in servers.values():
            proc.kill()


if __name__ == "__main__":
    main()
