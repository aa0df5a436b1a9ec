#!/usr/bin/env bash
# A/B of server flags at one connection (pgbench `select * from t`, 3 s runs): each run is
# classified by the shard its connection landed on — shard 1's `replica_hits + requests_sent`
# in ringwire.shard_stats grows only when the connection is on shard 1 (served by its replica,
# or crossing to the compute on shard 0). Each word of SETTINGS is one server's flags, with
# commas for spaces; FIXED flags go to every server.
#
#   cargo build --release -p ringwire
#   scripts/one_conn_ab.sh 5 "--read-replicas,on --read-replicas,off --read-replicas,on --read-replicas,off"
#   FIXED="--read-replicas off" scripts/one_conn_ab.sh 8 "--idle-spin-us,0 --idle-spin-us,10"
#   scripts/one_conn_ab.sh ROUNDS_PER_SERVER "SETTINGS ..." [CONNS]   # CONNS > 1: plain QPS + CPU
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${CARGO_TARGET_DIR:-target}/release/ringwire
rounds=${1:-8}; settings=${2:?"SETTINGS: e.g. --read-replicas,on --read-replicas,off"}; conns=${3:-1}
read -r -a fixed <<< "${FIXED:-}"
sql=$(mktemp); echo "select * from t" > "$sql"
q="select replica_hits + requests_sent from ringwire.shard_stats where shard = 1"
for setting in $settings; do
    IFS=, read -r -a flags <<< "$setting"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$bin" --listen "127.0.0.1:$port" --cores 0-1 --log-level warn "${fixed[@]}" "${flags[@]}" >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 50); do (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    psql() { command psql -X -q -At -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "$1"; }
    psql "create table t (a int4); insert into t values (1)"
    for _ in $(seq "$rounds"); do
        before=$(psql "$q"); cpu0=$(awk '{print $14+$15}' "/proc/$pid/stat")
        out=$(pgbench -n -h 127.0.0.1 -p "$port" -U postgres -c "$conns" -j $((conns > 1 ? 2 : 1)) -T 3 -f "$sql" postgres 2>&1)
        after=$(psql "$q"); cpu1=$(awk '{print $14+$15}' "/proc/$pid/stat")
        tps=$(grep -oP 'tps = \K[0-9]+' <<< "$out"); n=$(grep -oP 'actually processed: \K[0-9]+' <<< "$out")
        lat=$(grep -oP 'latency average = \K[0-9.]+' <<< "$out")
        where=shard0; [ $((after - before)) -gt 1000 ] && where=shard1
        [ "$conns" -gt 1 ] && where="conns=$conns"
        cpu_us=$(awk -v t=$((cpu1 - cpu0)) -v hz="$(getconf CLK_TCK)" -v n="${n:-0}" 'BEGIN { printf "%.1f", (n > 0 ? t * 1e6 / hz / n : 0) }')
        echo "${setting//,/ } $where qps=$tps latency_ms=$lat server_cpu_us_per_query=$cpu_us"
    done
    kill "$pid"; wait "$pid" 2>/dev/null || true
done
rm -f "$sql"
