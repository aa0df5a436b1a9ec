#!/usr/bin/env bash
# Where the time goes in upstream mode (docs/PERF.md, "Upstream pipelining"): ringwire
# --upstream-pipeline MODE in front of PostgreSQL on PG_PORT, `pgbench -S -c CLIENTS` (default
# 64) for 20 s; meanwhile syscalls and context switches of ringwire and of every PostgreSQL
# backend (perf stat, 4 s each) and a call-graph profile of ringwire (perf record, software
# clock, 3 s). Build with `cargo build --profile profiling` (frame pointers, symbols).
#
# usage: scripts/upstream_profile.sh PG_PORT on|off [RINGWIRE_BINARY] [OUT_PREFIX]
set -u
pg=${1:?PG_PORT}; mode=${2:?on|off}; bin=${3:-target/profiling/ringwire}
out=${4:-/tmp/upstream-profile}-$mode; clients=${CLIENTS:-64}; port=15877
"$bin" --listen 127.0.0.1:$port --shards 2 --upstream-pool-size 16 --upstream-pipeline "$mode" \
    --upstream "postgres://postgres@127.0.0.1:$pg/postgres" --log-level warn >/dev/null 2>&1 &
rw=$!
sleep 1
pgbench -h 127.0.0.1 -p $port -U postgres -n -S -c "$clients" -j 2 -T 20 postgres >"$out.pgbench" 2>&1 &
pb=$!
sleep 3
backends=$(pgrep -d, -u postgres -f "postgres: postgres postgres 127.0.0.1")
perf stat -e raw_syscalls:sys_enter,context-switches -p $rw -- sleep 4 2>"$out.stat-ringwire"
perf stat -e raw_syscalls:sys_enter,context-switches -p "$backends" -- sleep 4 2>"$out.stat-postgres"
perf record -e cpu-clock -F 9000 --call-graph fp -o "$out.data" -p $rw -- sleep 3 2>/dev/null
wait $pb
kill $rw; wait $rw 2>/dev/null
grep -E "^tps" "$out.pgbench"
grep -E "sys_enter|context-switches|seconds time" "$out.stat-ringwire" "$out.stat-postgres"
perf report -i "$out.data" --no-children --sort symbol --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -25
