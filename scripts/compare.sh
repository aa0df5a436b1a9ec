#!/usr/bin/env bash
# One command: build release binaries, then compare PostgreSQL 15, the Tokio pgwire baseline,
# ringwire's wire floor and ringwire side by side (see scripts/compare.py --help for options).
#   scripts/compare.sh                       # every workload, 1,4,16,64,128 connections
#   scripts/compare.sh --workloads select1 --concurrency 1,64 --rounds 3
set -euo pipefail
cd "$(dirname "$0")/.."
command -v pgbench >/dev/null || { echo "compare.sh: needs psql/pgbench (apt-get install postgresql-client)" >&2; exit 2; }
cargo build --release -q -p ringwire -p ringwire-bench
exec python3 scripts/compare.py "$@"
