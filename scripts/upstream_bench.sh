#!/usr/bin/env bash
# Upstream mode side by side (docs/PERF.md): direct PostgreSQL, PgBouncer (transaction mode)
# and ringwire --upstream, pgbench -S and `select * from t`, at 1/16/64/512 clients.
#
# usage: scripts/upstream_bench.sh PG_PORT PGBOUNCER_PORT [RINGWIRE_BINARY]
# Needs: PostgreSQL on 127.0.0.1:PG_PORT (user postgres, trust, max_connections >= 600,
# `pgbench -i` done, a table t), PgBouncer on PGBOUNCER_PORT in front of it.
#
# usage: scripts/upstream_bench.sh replica PG_PORT REPLICA_PORT [RINGWIRE_BINARY]
# Replica reads (docs/ARCHITECTURE.md, "Replicas"): pgbench -S at 64 clients and -N at 16
# through ringwire primary-only and ringwire --replica (REPLICA_PORT: a hot standby of
# PG_PORT), alternated for ROUNDS rounds (default 5); prints each round and the medians. On one host the standby
# competes with the primary for the same cores, so this measures what routing and the oracle
# cost, not what a second machine would add.
#
# usage: scripts/upstream_bench.sh replica-tx PG_PORT REPLICA_PORT [RINGWIRE_BINARY [OTHER_BINARY]]
# Read-only transactions while the replica lags (docs/ARCHITECTURE.md, "Moving to the
# primary"): 16 clients run `BEGIN READ ONLY`, two reads of pgbench_accounts, `COMMIT`, while
# 4 clients run pgbench -N through the same ringwire, for 8 s; each binary once per round,
# alternated, ROUNDS rounds (default 3). RO_EXTRA (e.g. "SET LOCAL statement_timeout = '5s';")
# goes after the BEGIN. Prints the readers' tps, failed transactions (and
# clients pgbench aborted on another error) and mean latency, the writers' tps, and ringwire's counts of read-only transactions on the
# replica, ended with 40001, and moved to the primary.
#
# usage: scripts/upstream_bench.sh functions PG_PORT [RINGWIRE_BINARY [OTHER_BINARY]]
# What the reset after a user's function costs (see that mode's comment below).
#
# usage: scripts/upstream_bench.sh pipeline PG_PORT PGBOUNCER_PORT [RINGWIRE_BINARY]
# Pipelining (docs/ARCHITECTURE.md, "Pipelining several clients onto one connection"): direct
# PostgreSQL, PgBouncer, ringwire --upstream-pipeline on and off, pgbench -S and
# `select * from t` at CLIENTS (default "1 16 64 512") connections, the four targets run
# back to back in each of ROUNDS rounds (default 3) of SECONDS s each (default 5); prints
# every run, then per cell the medians and the ratios of ringwire (on) to the others.
# RINGWIRE_FLAGS (e.g. "--sched-batch on") go to both ringwire instances.
set -euo pipefail
if [ "${1:-}" = pipeline ]; then
    pg=${2:?PG_PORT}; bouncer=${3:?PGBOUNCER_PORT}; bin=${4:-target/release/ringwire}
    seconds=${SECONDS_PER_RUN:-5}
    read -r -a extra <<< "${RINGWIRE_FLAGS:-}"
    start_rw() { # PORT PIPELINE
        "$bin" --listen 127.0.0.1:$1 --shards 2 --upstream-pool-size 16 --upstream-pipeline "$2" \
            --upstream "postgres://postgres@127.0.0.1:$pg/postgres" --log-level warn "${extra[@]}" >/dev/null &
    }
    start_rw 15875 on; on_pid=$!
    start_rw 15876 off; off_pid=$!
    trap 'kill $on_pid $off_pid' EXIT
    sleep 1
    echo "select * from t;" > /tmp/upstream_bench_t.sql
    median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }
    declare -A runs
    for n in ${CLIENTS:-1 16 64 512}; do
        j=$(( n < 2 ? 1 : 2 ))
        for w in "-S" "-f /tmp/upstream_bench_t.sql"; do
            for round in $(seq 1 "${ROUNDS:-3}"); do
                for target in direct:$pg pgbouncer:$bouncer ringwire-on:15875 ringwire-off:15876; do
                    # A failed run (e.g. connections refused at 512 clients) counts as 0 tps.
                    tps=$(pgbench -h 127.0.0.1 -p "${target##*:}" -U postgres -n $w -c $n -j $j -T "$seconds" postgres 2>&1 \
                        | awk '/^tps/ {print $3}' || true)
                    tps=${tps:-0}
                    echo "round $round: $n ${w%% *} ${target%%:*} tps=$tps"
                    runs["$n ${w%% *} ${target%%:*}"]+="$tps "
                done
            done
            d=$(median ${runs["$n ${w%% *} direct"]}); b=$(median ${runs["$n ${w%% *} pgbouncer"]})
            on=$(median ${runs["$n ${w%% *} ringwire-on"]}); off=$(median ${runs["$n ${w%% *} ringwire-off"]})
            echo "| $n | ${w%% *} | $d | $b | $off | $on | $(ratio $on $d) | $(ratio $on $b) | $(ratio $on $off) |"
        done
    done
    exit 0
fi
if [ "${1:-}" = functions ]; then
    # What resetting a connection after code stored upstream costs (docs/ARCHITECTURE.md,
    # "Code stored upstream"): pgbench at CLIENTS (default 16) clients, each transaction one
    # call of a PL/pgSQL no-op function, or `select 1`, against direct PostgreSQL, ringwire
    # (default: reset after user code) and ringwire --upstream-trust-functions on, plus
    # OTHER_BINARY (e.g. an older build) if given; ROUNDS rounds (default 6) of SECONDS s.
    # PROTOCOL (pgbench -M: simple, the default, extended or prepared) picks the protocol.
    # usage: scripts/upstream_bench.sh functions PG_PORT [RINGWIRE_BINARY [OTHER_BINARY]]
    pg=${2:?PG_PORT}; bin=${3:-target/release/ringwire}; other=${4:-}
    seconds=${SECONDS_PER_RUN:-4}; n=${CLIENTS:-16}; protocol=${PROTOCOL:-simple}
    psql -h 127.0.0.1 -p "$pg" -U postgres -qXc "CREATE OR REPLACE FUNCTION ringwire_bench_noop()
        RETURNS int LANGUAGE plpgsql AS \$\$BEGIN RETURN 1; END\$\$" postgres
    echo "SELECT ringwire_bench_noop();" > /tmp/upstream_bench_fn.sql
    echo "SELECT 1;" > /tmp/upstream_bench_one.sql
    up=(--shards 2 --upstream-pool-size 8 --upstream "postgres://postgres@127.0.0.1:$pg/postgres" --log-level warn)
    "$bin" --listen 127.0.0.1:15877 "${up[@]}" >/dev/null & p1=$!
    "$bin" --listen 127.0.0.1:15878 "${up[@]}" --upstream-trust-functions on >/dev/null & p2=$!
    targets="direct:$pg reset:15877 trust:15878"
    if [ -n "$other" ]; then
        "$other" --listen 127.0.0.1:15879 "${up[@]}" >/dev/null & p3=$!
        targets="$targets other:15879"
    fi
    trap 'kill $p1 $p2 ${p3:-}' EXIT
    sleep 1
    median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
    declare -A runs
    for round in $(seq 1 "${ROUNDS:-6}"); do
        for w in fn one; do
            for target in $targets; do
                tps=$(pgbench -h 127.0.0.1 -p "${target##*:}" -U postgres -n -M "$protocol" -f /tmp/upstream_bench_$w.sql \
                    -c "$n" -j 2 -T "$seconds" postgres 2>&1 | awk '/^tps/ {print $3}' || true)
                echo "round $round: $w ${target%%:*} tps=${tps:-0}"
                runs["$w ${target%%:*}"]+="${tps:-0} "
            done
        done
    done
    for w in fn one; do
        line="| $w |"
        for target in $targets; do line="$line $(median ${runs["$w ${target%%:*}"]}) |"; done
        echo "$line"
    done
    exit 0
fi
if [ "${1:-}" = replica-tx ]; then
    pg=${2:?PG_PORT}; replica=${3:?REPLICA_PORT}
    bins=("${4:-target/release/ringwire}"); [ -n "${5:-}" ] && bins+=("$5")
    rw_port=16875; metrics_port=16876
    cat > /tmp/upstream_bench_ro.sql <<SQL
\set aid random(1, 100000 * :scale)
BEGIN READ ONLY;
${RO_EXTRA:-}
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
COMMIT;
SQL
    metric() { curl -s "127.0.0.1:$metrics_port/metrics" \
        | awk -v m="$1" '$1 ~ "^"m"[{ ]" || $1 == m {s += $2} END {print s + 0}'; }
    for round in $(seq 1 "${ROUNDS:-3}"); do
        for bin in "${bins[@]}"; do
            # (The previous instance's listeners may take a moment to go.)
            for _ in $(seq 50); do
                ss -ltn | grep -qE ":($rw_port|$metrics_port) " || break
                sleep 0.2
            done
            "$bin" --listen 127.0.0.1:$rw_port --shards 2 --upstream-pool-size 16 \
                --upstream "postgres://postgres@127.0.0.1:$pg/postgres" \
                --replica "postgres://postgres@127.0.0.1:$replica/postgres" \
                --metrics-listen 127.0.0.1:$metrics_port --log-level warn >/dev/null &
            rw=$!
            sleep 2
            pgbench -h 127.0.0.1 -p $rw_port -U postgres -n -N -c 4 -j 1 -T 8 postgres \
                > /tmp/upstream_bench_w.out 2>&1 &
            writers=$!
            pgbench -h 127.0.0.1 -p $rw_port -U postgres -n -f /tmp/upstream_bench_ro.sql \
                -c 16 -j 2 -T 8 postgres > /tmp/upstream_bench_r.out 2>&1 || true
            wait $writers || true
            r_tps=$(awk '/^tps/ {print $3}' /tmp/upstream_bench_r.out)
            failed=$(awk '/number of failed transactions/ {print $5}' /tmp/upstream_bench_r.out)
            lat=$(awk '/^latency average/ {print $4}' /tmp/upstream_bench_r.out)
            # (A client that gets an error other than a serialization failure is aborted.)
            aborted=$(grep -c 'aborted' /tmp/upstream_bench_r.out || true)
            w_tps=$(awk '/^tps/ {print $3}' /tmp/upstream_bench_w.out)
            on=$(metric ringwire_upstream_replica_transactions_total)
            ended=$(metric ringwire_upstream_replica_transactions_failed_total)
            moved=$(metric ringwire_upstream_replica_transactions_moved_total)
            echo "round $round $bin readers tps=$r_tps failed=${failed:-?} aborted=$aborted latency_ms=$lat" \
                "writers tps=$w_tps on_replica=$on ended_40001=$ended moved=$moved"
            kill $rw; wait $rw 2>/dev/null || true
        done
    done
    exit 0
fi
if [ "${1:-}" = replica ]; then
    pg=${2:?PG_PORT}; replica=${3:?REPLICA_PORT}; bin=${4:-target/release/ringwire}
    rw_port=16875
    # run WORKLOAD_ARGS -- RINGWIRE_ARGS: one 5 s pgbench run against a fresh ringwire.
    run() {
        local w=(); while [ "$1" != -- ]; do w+=("$1"); shift; done; shift
        "$bin" --listen 127.0.0.1:$rw_port --shards 2 --upstream-pool-size 16 \
            --upstream "postgres://postgres@127.0.0.1:$pg/postgres" "$@" --log-level warn >/dev/null &
        rw=$!
        sleep 1
        tps=$(pgbench -h 127.0.0.1 -p $rw_port -U postgres -n "${w[@]}" -j 2 -T 5 postgres 2>&1 \
            | awk '/^tps/ {print $3}')
        kill $rw; wait $rw 2>/dev/null || true
    }
    median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
    replica_arg=(--replica "postgres://postgres@127.0.0.1:$replica/postgres")
    # -S at 64 clients: reads routed to the replica. -N at 16 clients: autocommit-free write
    # transactions, each commit followed by the pipelined WAL-position query with --replica.
    for workload in "-S -c 64" "-N -c 16"; do
        primary_only=(); with_replica=()
        for round in $(seq 1 "${ROUNDS:-5}"); do
            run $workload -- ; primary_only+=("$tps")
            echo "round $round $workload ringwire primary-only tps=$tps"
            run $workload -- "${replica_arg[@]}"; with_replica+=("$tps")
            echo "round $round $workload ringwire --replica tps=$tps"
        done
        p=$(median "${primary_only[@]}"); r=$(median "${with_replica[@]}")
        echo "$workload medians: primary-only tps=$p, --replica tps=$r, ratio $(awk -v a="$r" -v b="$p" 'BEGIN {printf "%.2f", a / b}')"
    done
    exit 0
fi
pg=${1:?PG_PORT}; bouncer=${2:?PGBOUNCER_PORT}; bin=${3:-target/release/ringwire}
rw_port=16875
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
