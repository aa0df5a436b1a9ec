#!/usr/bin/env bash
# Upstream mode side by side (docs/PERF.md): direct PostgreSQL, PgBouncer (transaction mode)
# and ringwire --upstream, pgbench -S and `select * from t`, at 1/16/64/512 clients.
#
# usage: scripts/upstream_bench.sh PG_PORT PGBOUNCER_PORT [RINGWIRE_BINARY]
# Needs: PostgreSQL on 127.0.0.1:PG_PORT (user postgres, trust, max_connections >= 600,
# `pgbench -i` done, a table t), PgBouncer on PGBOUNCER_PORT in front of it.
set -euo pipefail
pg=${1:?PG_PORT}; bouncer=${2:?PGBOUNCER_PORT}; bin=${3:-target/release/ringwire}
rw_port=56875
"$bin" --listen 127.0.0.1:$rw_port --shards 2 --upstream-pool-size 16 \
    --upstream "postgres://postgres@127.0.0.1:$pg/postgres" --log-level warn >/dev/null &
rw=$!
trap 'kill $rw' EXIT
sleep 1
echo "select * from t;" > /tmp/upstream_bench_t.sql
for n in 1 16 64 512; do
    j=$(( n < 2 ? 1 : 2 ))
    for w in "-S" "-f /tmp/upstream_bench_t.sql"; do
        for target in direct:$pg pgbouncer:$bouncer ringwire:$rw_port; do
            tps=$(pgbench -h 127.0.0.1 -p "${target##*:}" -U postgres -n $w -c $n -j $j -T 5 postgres 2>&1 \
                | awk '/^tps/ {print $3}')
            echo "$n ${w%% *} ${target%%:*} tps=$tps"
        done
    done
done
