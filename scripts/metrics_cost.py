#!/usr/bin/env python3
"""What per-statement metrics recording costs: ringwire with `--metrics on` (the default) and
`--metrics off`, side by side on the same workload, alternating A B A B ... for --rounds.

Reports per round and as medians: QPS, and the server's CPU time per query (utime+stime from
/proc over the timed window), which moves less with other load on a shared 2-core host than
QPS does (hardware instruction counters are not available in this VM). Uses compare.py's helpers and
ringwire-bench from $CARGO_TARGET_DIR/release (build with scripts/compare.sh or
`cargo build --release -p ringwire -p ringwire-bench`).
"""

import argparse
import statistics
import threading
import time

import compare as c

# The same tables compare.py loads: `t` for select_t, pgbench's for point and write_mix.
LOAD_SQL = "CREATE TABLE t (a int4); INSERT INTO t VALUES (1);"


def run(server, args):
    warm, dur = c.parse_secs(args.warmup), c.parse_secs(args.duration)
    sample = {}

    def sampler():
        time.sleep(warm + 0.3)
        t0, c0 = time.time(), server.cpu_seconds()
        time.sleep(max(dur - 0.6, 0.5))
        sample["cpu_s"], sample["window_s"] = server.cpu_seconds() - c0, time.time() - t0

    t = threading.Thread(target=sampler)
    t.start()
    r = c.bench(server.port, args.workload, "simple", args.concurrency, args.duration, args.warmup,
                args.client_threads)
    t.join()
    if "error" in r or not r.get("qps"):
        return r
    r["cpu_us_per_query"] = sample["cpu_s"] * 1e6 / (r["qps"] * sample["window_s"])
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="point", choices=sorted(c.WORKLOADS))
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--duration", default="3s")
    ap.add_argument("--warmup", default="500ms")
    ap.add_argument("--client-threads", type=int, default=2)
    ap.add_argument("--server-cores", default="0-1")
    args = ap.parse_args()
    variants = [("on", []), ("off", ["--metrics", "off"])]
    servers = []
    try:
        for name, extra in variants:
            port = c.free_port()
            servers.append(c.start_binary(name, [c.os.path.join(c.RELEASE, "ringwire"), "--listen",
                                                 f"127.0.0.1:{port}", "--cores", args.server_cores,
                                                 "--log-level", "warn"] + extra, port))
            err = c.load(port, LOAD_SQL, 1)
            if err:
                print(f"# load: {err}")
        rows = {name: [] for name, _ in variants}
        for rnd in range(args.rounds):
            for s in (servers if rnd % 2 == 0 else servers[::-1]):
                r = run(s, args)
                rows[s.name].append(r)
                print(f"# round {rnd} metrics {s.name}: {r.get('qps', 'ERR')} qps, "
                      f"{r.get('cpu_us_per_query', float('nan')):.2f} server CPU us/query", flush=True)
        ratios = [a["qps"] / b["qps"] for a, b in zip(rows["on"], rows["off"])]
        ins = [a["cpu_us_per_query"] / b["cpu_us_per_query"]
               for a, b in zip(rows["on"], rows["off"])
               if "cpu_us_per_query" in a and "cpu_us_per_query" in b]
        print(f"workload={args.workload} concurrency={args.concurrency} rounds={args.rounds} duration={args.duration}")
        for name in rows:
            print(f"metrics {name}: median qps {statistics.median(r['qps'] for r in rows[name]):.0f}, "
                  f"median server CPU us/query "
                  f"{statistics.median(r['cpu_us_per_query'] for r in rows[name] if 'cpu_us_per_query' in r):.2f}")
        print(f"QPS on/off per round: {[round(x, 3) for x in ratios]}; median {statistics.median(ratios):.3f}")
        if ins:
            print(f"server CPU us/query on/off per round: {[round(x, 3) for x in ins]}; median {statistics.median(ins):.3f}")
    finally:
        for s in servers:
            s.stop()


if __name__ == "__main__":
    main()
