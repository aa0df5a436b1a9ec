#!/usr/bin/env python3
"""Where the cores go while pgbench runs: CPU time and context switches per query of every
process group on the machine (pgbench, ringwire, PostgreSQL's processes, PgBouncer, the rest).

On a machine where client, ringwire and PostgreSQL share the cores, throughput is the cores
divided by the sum of these; the PostgreSQL share alone bounds what any frontend can reach
(docs/PERF.md, "Session 11"). Reads utime+stime and ctxt_switches from /proc at 2.5 s into a
pgbench run and 2 s before its end; queries are pgbench's progress rate over that window.

    scripts/cpu_split.py PORT CLIENTS [PGBENCH_WORKLOAD_ARGS...]    # default workload: -S
    scripts/cpu_split.py 15875 64 -S
    T=10 scripts/cpu_split.py 15875 64 -f /tmp/t.sql

Prints one line: tps, µs of CPU per query per group and their total, context switches per
query per group, and how many PostgreSQL processes did any work (the upstream connections in
use, when ringwire or PgBouncer pools them).
"""
import os
import re
import subprocess
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")


def group(pid, comm, exe):
    if comm in ("pgbench", "pgbouncer", "postgres"):
        return comm
    if "ringwire" in os.path.basename(exe):
        return "ringwire"
    # A copy of the binary under another name: its threads are named shard-N.
    threads = (open(f"/proc/{pid}/task/{t}/comm").read() for t in os.listdir(f"/proc/{pid}/task"))
    if any(t.startswith("shard-") for t in threads):
        return "ringwire"
    return "other"


def sample():
    """(CPU ticks per group, context switches per group, CPU ticks per postgres pid)."""
    cpu, switches, backends = {}, {}, {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = open(f"/proc/{pid}/comm").read().strip()
            stat = open(f"/proc/{pid}/stat").read()
            exe = open(f"/proc/{pid}/cmdline").read().split("\0")[0]
            fields = stat[stat.rfind(")") + 2:].split()
            ticks = int(fields[11]) + int(fields[12])
            cs = 0
            for tid in os.listdir(f"/proc/{pid}/task"):
                for line in open(f"/proc/{pid}/task/{tid}/status"):
                    if "ctxt_switches:" in line:
                        cs += int(line.split()[1])
            g = group(pid, comm, exe)
        except (OSError, ValueError, IndexError):
            continue  # the process ended while we read it
        cpu[g] = cpu.get(g, 0) + ticks
        switches[g] = switches.get(g, 0) + cs
        if g == "postgres":
            backends[pid] = ticks
    return cpu, switches, backends


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    port, clients = sys.argv[1], sys.argv[2]
    workload = sys.argv[3:] or ["-S"]
    seconds = int(os.environ.get("T", "8"))
    if seconds < 6:
        sys.exit("T must be at least 6 (2.5 s warm-up, 2 s at the end)")
    jobs = "2" if int(clients) > 1 else "1"
    run = subprocess.Popen(
        ["pgbench", "-h", "127.0.0.1", "-p", port, "-U", "postgres", "-n", *workload,
         "-c", clients, "-j", jobs, "-T", str(seconds), "-P", "1", "postgres"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(2.5)
    cpu0, cs0, pg0 = sample()
    t0 = time.time()
    time.sleep(seconds - 4.5)
    cpu1, cs1, pg1 = sample()
    t1 = time.time()
    out = run.communicate()[0]
    rates = [float(m.group(2)) for m in re.finditer(r"progress: ([\d.]+) s, ([\d.]+) tps", out)
             if 3 <= float(m.group(1)) <= seconds - 2]
    if run.returncode != 0 or not rates:
        sys.exit(f"pgbench failed:\n{out}")
    tps = sum(rates) / len(rates)
    queries = tps * (t1 - t0)
    per_query = {g: (cpu1[g] - cpu0.get(g, 0)) / HZ * 1e6 / queries for g in cpu1}
    switches = {g: (cs1[g] - cs0.get(g, 0)) / queries for g in cs1}
    busy = sum(1 for pid, t in pg1.items() if t - pg0.get(pid, t) > 0)
    shown = sorted(g for g in per_query if per_query[g] >= 0.05 or switches.get(g, 0) >= 0.01)
    print(f"tps={tps:.0f} cpu_us/query: "
          + " ".join(f"{g}={per_query[g]:.1f}" for g in shown)
          + f" total={sum(per_query.values()):.1f}"
          + " | switches/query: " + " ".join(f"{g}={switches.get(g, 0):.2f}" for g in shown)
          + f" | postgres processes working: {busy}")


if __name__ == "__main__":
    main()
