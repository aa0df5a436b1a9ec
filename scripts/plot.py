#!/usr/bin/env python3
"""Plot a scripts/compare.py --out JSON: per workload, QPS vs connections and p99 vs
connections, one line per server (medians over rounds). Writes <prefix>-<workload>.png."""

import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot.py RESULTS.json OUT_PREFIX")
    runs = json.load(open(sys.argv[1]))["runs"]
    workloads = sorted({r["workload"] for r in runs}, key=lambda w: [r["workload"] for r in runs].index(w))
    servers = []
    for r in runs:
        if r["server"] not in servers:
            servers.append(r["server"])
    for w in workloads:
        fig, (ax_qps, ax_p99) = plt.subplots(1, 2, figsize=(11, 4))
        for s in servers:
            concs = sorted({r["concurrency"] for r in runs if r["workload"] == w and r["server"] == s})
            qps, p99, xs = [], [], []
            for c in concs:
                ok = [r for r in runs if r["workload"] == w and r["server"] == s and r["concurrency"] == c
                      and "error" not in r and not r.get("errors")]
                if ok:
                    xs.append(c)
                    qps.append(statistics.median(r["qps"] for r in ok))
                    p99.append(statistics.median(r["p99_us"] for r in ok))
            if xs:
                ax_qps.plot(xs, qps, marker="o", label=s)
                ax_p99.plot(xs, p99, marker="o", label=s)
        for ax, title in ((ax_qps, "queries/s"), (ax_p99, "p99 latency (µs)")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("connections")
            ax.set_title(f"{w}: {title}")
            ax.grid(True, alpha=0.3)
            ax.legend()
        ax_p99.set_yscale("log")
        fig.tight_layout()
        out = f"{sys.argv[2]}-{w}.png"
        fig.savefig(out, dpi=90)
        print(out)


if __name__ == "__main__":
    main()
