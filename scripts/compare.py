#!/usr/bin/env python3
"""Side-by-side comparison: PostgreSQL 15, a Tokio pgwire server, ringwire's wire floor and
ringwire, each on a fresh loopback port, driven by ringwire-bench with the same workloads,
interleaved (A B C D A B C D ...) so that drift on this shared machine hits all of them alike.

Prints, per workload and concurrency, median QPS and p99 for each server, the ratios
ringwire/PostgreSQL, ringwire/Tokio and ringwire/floor, and for ringwire and Tokio at the
concurrencies in --cost-at: server CPU per query (from /proc/PID/stat over the timed window),
syscalls per query (perf stat -e raw_syscalls:sys_enter) and peak RSS. Writes all raw runs as
JSON (--out). Run through scripts/compare.sh, which builds the binaries first.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
RELEASE = os.path.join(TARGET, "release")
CLK_TCK = os.sysconf("SC_CLK_TCK")

WORKLOADS = {
    "select1": {"sql": ["SELECT 1"], "params": []},
    "select_t": {"sql": ["SELECT * FROM t"], "params": []},
    "point": {"sql": ["SELECT abalance FROM pgbench_accounts WHERE aid = :aid"], "params": ["aid=1..100000"]},
    "write_mix": {
        "sql": [
            "SELECT abalance FROM pgbench_accounts WHERE aid = :aid",
            "UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid",
        ],
        "weights": [10, 1],
        "params": ["aid=1..100000", "delta=-5000..5000"],
    },
}


# ringwire as compared: the full path and the canned-reply wire floor, each on the io_uring
# socket path (the default, asked for explicitly so a fallback cannot hide) and on glommio's.
RINGWIRE_VARIANTS = (
    ("floor", ["--wire-floor", "--io", "uring"]),
    ("ringwire", ["--io", "uring"]),
    ("floor-glommio", ["--wire-floor", "--io", "glommio"]),
    ("ringwire-glommio", ["--io", "glommio"]),
    # Per-statement metrics recording off, to measure what it costs (docs/PERF.md).
    ("ringwire-metrics-off", ["--io", "uring", "--metrics", "off"]),
    # Every read on a shard other than the compute's crosses to it (no read replicas).
    ("ringwire-replicas-off", ["--io", "uring", "--read-replicas", "off"]),
)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc=None, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port} after {timeout}s")


def pg_bin(name):
    for d in ("/usr/local/bin", "/usr/lib/postgresql/15/bin"):
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    raise RuntimeError(f"{name} not found (install postgresql-15)")


class Server:
    def __init__(self, name, port, proc, pid=None, cleanup=None):
        self.name, self.port, self.proc, self.cleanup = name, port, proc, cleanup
        self._pid = pid

    @property
    def pid(self):
        return self._pid or self.proc.pid

    def cpu_seconds(self):
        """utime+stime of the server process (PostgreSQL: the postmaster's children are
        separate processes, so its CPU is not measured this way; it is reported as n/a)."""
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def peak_rss_kib(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        return None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.cleanup:
            self.cleanup()


def start_postgres(load_sql, scale):
    d = tempfile.mkdtemp(prefix="ringwire-pg-")
    shutil.chown(d, "postgres")
    data = os.path.join(d, "data")
    run_as = ["runuser", "-u", "postgres", "--"]
    subprocess.run(run_as + [pg_bin("initdb"), "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"],
                   check=True, stdout=subprocess.DEVNULL)
    port = free_port()
    proc = subprocess.Popen(run_as + [pg_bin("postgres"), "-D", data, "-p", str(port), "-k", d,
                                      "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300",
                                      "-c", "shared_buffers=256MB", "-c", "fsync=off",
                                      "-c", "synchronous_commit=off"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, proc)
    time.sleep(0.5)
    load(port, load_sql, scale)
    return Server("postgres", port, proc, cleanup=lambda: shutil.rmtree(d, ignore_errors=True))


def load(port, load_sql, scale):
    env = dict(os.environ, PGCONNECT_TIMEOUT="10")
    psql = ["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-X", "-q", "-v", "ON_ERROR_STOP=1"]
    r = subprocess.run(psql + ["-c", load_sql], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        return f"load failed: {r.stderr.strip()}"
    r = subprocess.run(["pgbench", "-i", "-s", str(scale), "-q", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                        "postgres"], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        return f"pgbench -i failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}"
    return None


def start_binary(name, args, port):
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, proc)
    return Server(name, port, proc)


def bench(port, workload, mode, concurrency, duration, warmup, threads):
    w = WORKLOADS[workload]
    cmd = [os.path.join(RELEASE, "ringwire-bench"), "--port", str(port), "--mode", mode, "--json",
           "--duration", duration, "--warmup", warmup, "--threads", str(threads), "--concurrency", str(concurrency)]
    for i, sql in enumerate(w["sql"]):
        cmd += ["--sql", sql]
        if "weights" in w:
            cmd += ["--weight", str(w["weights"][i])]
    for p in w["params"]:
        cmd += ["--param", p]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not lines:
        return {"error": (r.stderr.strip() or r.stdout.strip() or f"exit {r.returncode}")[-300:]}
    return json.loads(lines[-1])


def parse_secs(s):
    s = s.strip()
    if s.endswith("ms"):
        return float(s[:-2]) / 1000
    if s.endswith("s"):
        return float(s[:-1])
    return float(s)


def count_syscalls(pid, seconds):
    """Syscalls process `pid` makes over the next `seconds` (perf stat), or None if perf
    could not count them."""
    perf = subprocess.run(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "-p", str(pid), "--",
                           "sleep", str(seconds)], capture_output=True, text=True)
    for line in perf.stderr.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and "raw_syscalls" in parts[2] and parts[0].strip().isdigit():
            return int(parts[0])
    return None


def pgbench_qps(host, port, conc, duration, script_text="select * from t;\n", extra=(), env=None):
    """Stock pgbench running `script_text` (simple protocol) against HOST:PORT (HOST may be a
    socket directory); its tps. RuntimeError if it fails or reports a failed transaction."""
    script = tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False)
    script.write(script_text)
    script.close()
    try:
        r = subprocess.run(["pgbench", "-n", "-h", host, "-p", str(port), "-U", "postgres",
                            "-c", str(conc), "-j", str(min(conc, 2)), "-T", str(duration), "-f", script.name,
                            *extra, "postgres"],
                           capture_output=True, text=True, timeout=duration + 60, env=env)
    finally:
        os.unlink(script.name)
    # With -C pgbench reports tps "including reconnection times" only.
    m = re.search(r"tps = ([0-9.]+) \((?:without|including reconnection)", r.stdout)
    failed = re.search(r"number of failed transactions: (\d+)", r.stdout)
    if r.returncode != 0 or not m or (failed and int(failed.group(1)) != 0):
        raise RuntimeError(f"pgbench -h {host} {' '.join(extra)} failed: {r.stdout[-300:]} {r.stderr[-300:]}")
    return float(m.group(1))


def sample_server(server, duration, run, syscalls=False):
    """Call `run()` (a load of `duration` seconds returning its QPS) while measuring the server's
    CPU time, and with `syscalls` its syscalls, over the steady part of the load (from 1 s in to
    0.5 s before its end). Returns qps, cpu_us per query and, if asked, syscalls per query."""
    sample = {}

    def sampler():
        time.sleep(1.0)  # connections open, warmed up
        t0, c0 = time.time(), server.cpu_seconds()
        if syscalls:
            sample["syscalls"] = count_syscalls(server.pid, duration - 1.5)
        else:
            time.sleep(duration - 1.5)
        sample["cpu"], sample["window"] = server.cpu_seconds() - c0, time.time() - t0

    t = threading.Thread(target=sampler)
    t.start()
    qps = run()
    t.join()
    queries = qps * sample["window"]
    result = {"qps": qps, "cpu_us": sample["cpu"] * 1e6 / queries}
    if syscalls:
        n = sample.get("syscalls")
        result["syscalls"] = n / queries if n is not None else float("nan")
    return result


def measured_run(server, workload, mode, conc, args, cost):
    """One bench run; with `cost`, also the server's CPU and syscalls over the timed window."""
    warm, dur = parse_secs(args.warmup), parse_secs(args.duration)
    sample = {}

    def sampler():
        time.sleep(warm + 0.3)  # connections open + warm-up done
        t0, c0 = time.time(), server.cpu_seconds()
        window = max(dur - 0.6, 0.5)
        syscalls = None
        if cost and shutil.which("perf"):
            syscalls = count_syscalls(server.pid, window)
        else:
            time.sleep(window)
        sample["cpu_s"], sample["window_s"] = server.cpu_seconds() - c0, time.time() - t0
        if syscalls is not None:
            sample["syscalls"] = syscalls

    t = threading.Thread(target=sampler) if server.name != "postgres" else None
    if t:
        t.start()
    result = bench(server.port, workload, mode, conc, args.duration, args.warmup, args.client_threads)
    if t:
        t.join()
    if "error" not in result and sample and result.get("qps"):
        queries_in_window = result["qps"] * sample["window_s"]
        result["server_cpu_us_per_query"] = round(sample["cpu_s"] * 1e6 / queries_in_window, 2)
        if "syscalls" in sample:
            result["syscalls_per_query"] = round(sample["syscalls"] / queries_in_window, 3)
        result["server_peak_rss_kib"] = server.peak_rss_kib()
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="select1,select_t,point,write_mix")
    ap.add_argument("--concurrency", default="1,4,16,64,128")
    ap.add_argument("--mode", default="simple", choices=["simple", "extended", "prepared"])
    # Defaults fit the whole table (4 workloads x 5 levels x 4 servers) in about 4 minutes on
    # a 2-core machine; docs/PERF.md's table used --rounds 2 --duration 3s.
    ap.add_argument("--duration", default="2s")
    ap.add_argument("--warmup", default="500ms")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds; medians are reported")
    ap.add_argument("--client-threads", type=int, default=2)
    ap.add_argument("--server-cores", default="0-1", help="ringwire --cores and the Tokio server's thread count")
    ap.add_argument("--cost-at", default="1,64", help="concurrencies at which CPU/syscalls per query are measured")
    ap.add_argument("--servers", default="postgres,tokio,floor,ringwire",
                    help="any of postgres,tokio," + ",".join(n for n, _ in RINGWIRE_VARIANTS))
    ap.add_argument("--out", default=None, help="write raw results as JSON here")
    ap.add_argument("--baseline-bin", default=None,
                    help="another ringwire binary (e.g. a build of an earlier commit), run as "
                         "'ringwire-base' with --baseline-args, interleaved with the others")
    ap.add_argument("--baseline-args", default="--io uring",
                    help="flags for --baseline-bin (e.g. '--io uring --read-replicas off' to compare "
                         "with ringwire-replicas-off)")
    args = ap.parse_args()

    workloads = args.workloads.split(",")
    concs = [int(c) for c in args.concurrency.split(",")]
    cost_at = {int(c) for c in args.cost_at.split(",") if c}
    wanted = args.servers.split(",")
    ncores = len(args.server_cores.split(",")) if "-" not in args.server_cores else \
        int(args.server_cores.split("-")[1]) - int(args.server_cores.split("-")[0]) + 1
    load_sql = "CREATE TABLE t (a int4); INSERT INTO t VALUES (1);"

    servers = []
    try:
        if "postgres" in wanted:
            servers.append(start_postgres(load_sql, 1))
        if "tokio" in wanted:
            port = free_port()
            servers.append(start_binary("tokio", [os.path.join(RELEASE, "tokio-baseline"), "--listen", f"127.0.0.1:{port}",
                                                   "--threads", str(ncores)], port))
        variants = [(name, extra, os.path.join(RELEASE, "ringwire")) for name, extra in RINGWIRE_VARIANTS]
        if args.baseline_bin:
            variants.append(("ringwire-base", args.baseline_args.split(), args.baseline_bin))
            wanted.append("ringwire-base")
        for name, extra, binary in variants:
            if name in wanted:
                port = free_port()
                servers.append(start_binary(name, [binary, "--listen", f"127.0.0.1:{port}",
                                                   "--cores", args.server_cores, "--log-level", "warn"] + extra, port))
                if "--wire-floor" not in extra:
                    err = load(port, load_sql, 1)
                    if err:
                        print(f"# ringwire: {err} (workloads needing tables will show errors)", file=sys.stderr)

        runs = []
        for workload in workloads:
            for conc in concs:
                for rnd in range(args.rounds):
                    for s in servers:
                        r = measured_run(s, workload, args.mode, conc, args, cost=conc in cost_at and s.name != "postgres")
                        r.update({"server": s.name, "workload": workload, "round": rnd, "concurrency": conc})
                        runs.append(r)
                        print(f"# {workload} c={conc} round {rnd} {s.name}: "
                              f"{r.get('qps', 'ERR')} qps{'' if 'error' not in r else ' ' + r['error'][:120]}",
                              file=sys.stderr)
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"args": vars(args), "runs": runs}, f, indent=1)
        report(runs, workloads, concs, [s.name for s in servers], args)
    finally:
        for s in servers:
            s.stop()


def median_of(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None and "error" not in r and r.get("errors", 0) == 0]
    return statistics.median(vals) if vals else None


def fmt(x, spec="{:.0f}"):
    return "n/a" if x is None else spec.format(x)


def report(runs, workloads, concs, names, args):
    print(f"mode={args.mode} duration={args.duration} warmup={args.warmup} rounds={args.rounds} "
          f"client-threads={args.client_threads} server-cores={args.server_cores}; medians over rounds")
    for workload in workloads:
        print(f"\n## {workload}")
        extra = [("ringwire-glommio", "rw/rw-glommio"), ("floor-glommio", "floor/floor-glommio"),
                 ("ringwire-replicas-off", "rw/rw-replicas-off")]
        extra = [(o, label) for o, label in extra if o in names]
        head = ["conn"] + [f"{n} qps" for n in names] + [f"{n} p99us" for n in names] + \
               ["rw/pg", "rw/tokio", "rw/floor"] + [label for _, label in extra]
        print(" | ".join(head))
        for conc in concs:
            sel = {n: [r for r in runs if r["server"] == n and r["workload"] == workload and r["concurrency"] == conc]
                   for n in names}
            qps = {n: median_of(sel[n], "qps") for n in names}
            p99 = {n: median_of(sel[n], "p99_us") for n in names}
            rw = qps.get("ringwire")

            def ratio(other, of=None):
                mine = rw if of is None else qps.get(of)
                o = qps.get(other)
                return None if mine is None or not o else mine / o

            row = [str(conc)] + [fmt(qps[n]) for n in names] + [fmt(p99[n]) for n in names] + \
                  [fmt(ratio("postgres"), "{:.2f}"), fmt(ratio("tokio"), "{:.2f}"), fmt(ratio("floor"), "{:.2f}")] + \
                  [fmt(ratio(o, "floor" if o.startswith("floor") else None), "{:.2f}") for o, _ in extra]
            print(" | ".join(row))
        cost_rows = [(n, c) for c in sorted(set(r["concurrency"] for r in runs)) for n in names
                     if any("server_cpu_us_per_query" in r for r in runs
                            if r["server"] == n and r["workload"] == workload and r["concurrency"] == c)]
        if cost_rows:
            print("server | conn | CPU us/query | syscalls/query | peak RSS MiB | client CPU us/query")
            for n, c in cost_rows:
                sel = [r for r in runs if r["server"] == n and r["workload"] == workload and r["concurrency"] == c]
                rss = median_of(sel, "server_peak_rss_kib")
                print(f"{n} | {c} | {fmt(median_of(sel, 'server_cpu_us_per_query'), '{:.2f}')} | "
                      f"{fmt(median_of(sel, 'syscalls_per_query'), '{:.3f}')} | "
                      f"{fmt(None if rss is None else rss / 1024, '{:.1f}')} | "
                      f"{fmt(median_of(sel, 'client_cpu_us_per_query'), '{:.2f}')}")
        errs = [r for r in runs if r["workload"] == workload and ("error" in r or r.get("errors", 0))]
        for n in names:
            e = [r for r in errs if r["server"] == n]
            if e:
                codes = e[0].get("errors_by_sqlstate") or e[0].get("error", "")
                print(f"note: {n} failed this workload ({len(e)} runs), e.g. {str(codes)[:160]}")


if __name__ == "__main__":
    main()
