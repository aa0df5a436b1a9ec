#!/usr/bin/env bash
# Sweep every workload over 1..128 connections on all four servers, keep the raw results as
# JSON and draw QPS/p99 plots (one PNG per workload) next to them.
#   scripts/sweep.sh [OUT_DIR] [compare.py options...]     # default OUT_DIR: target/sweep/<time>
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/sweep/$(date +%Y%m%d-%H%M%S)}
shift || true
mkdir -p "$out"
python3 -c 'import matplotlib' 2>/dev/null || python3 -m pip install -q matplotlib
scripts/compare.sh --out "$out/results.json" "$@" | tee "$out/table.txt"
python3 scripts/plot.py "$out/results.json" "$out/sweep"
echo "wrote $out/{results.json,table.txt,sweep-*.png}"
