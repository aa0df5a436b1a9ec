#!/usr/bin/env bash
# Profile ringwire under load in one command.
#
#   scripts/profile.sh                         # ringwire full path, SELECT 1, 64 connections
#   scripts/profile.sh --floor                 # the wire floor instead
#   scripts/profile.sh --pid 1234 --port 6875  # attach to a running server
#   scripts/profile.sh --pgbench-init --sql 'SELECT abalance FROM pgbench_accounts WHERE aid = :aid' \
#       --param aid=1..100000                  # load pgbench's tables first, then profile
#   scripts/profile.sh --setup 'CREATE TABLE t (a int4); INSERT INTO t VALUES (1)' --sql 'SELECT * FROM t'
#   options: --sql 'SELECT ...' --param aid=1..100000 --concurrency N --duration 10s --mode simple
#            --setup 'SQL run once through psql before the load' --io uring|glommio
#
# Builds the `profiling` Cargo profile (release code, full symbols; frame pointers are forced
# for every build in .cargo/config.toml), starts ringwire pinned to --cores (default 0-1), warms
# up, records `perf record -F 9000 --call-graph fp` over one ringwire-bench run, and writes to
# target/profile/<time>/: perf.data, collapsed stacks, flamegraph.svg (inferno, installed with
# cargo if missing), and top20.txt (self time by function).
set -euo pipefail
cd "$(dirname "$0")/.."

pid="" port="" floor="" init="" setup="" io=auto cores="0-1" sql="SELECT 1" params=() conc=64 duration=10s mode=simple warmup=2s
while [ $# -gt 0 ]; do
    case "$1" in
        --pid) pid=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --floor) floor=--wire-floor; shift ;;
        --pgbench-init) init=1; shift ;;
        --setup) setup=$2; shift 2 ;;
        --io) io=$2; shift 2 ;;
        --cores) cores=$2; shift 2 ;;
        --sql) sql=$2; shift 2 ;;
        --param) params+=(--param "$2"); shift 2 ;;
        --concurrency) conc=$2; shift 2 ;;
        --duration) duration=$2; shift 2 ;;
        --mode) mode=$2; shift 2 ;;
        *) echo "profile.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
command -v perf >/dev/null || { echo "profile.sh: needs perf (apt-get install linux-perf)" >&2; exit 2; }
if ! command -v inferno-flamegraph >/dev/null; then
    cargo install -q inferno
fi
target=${CARGO_TARGET_DIR:-target}
cargo build -q --profile profiling -p ringwire -p ringwire-bench
out="$target/profile/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"

started=""
if [ -z "$pid" ]; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$target/profiling/ringwire" --listen "127.0.0.1:$port" --cores "$cores" --io "$io" --log-level warn $floor &
    pid=$!
    started=1
    trap '[ -n "$started" ] && kill $pid 2>/dev/null || true' EXIT
    for _ in $(seq 100); do (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
fi
[ -n "$port" ] || { echo "profile.sh: --pid needs --port" >&2; exit 2; }
if [ -n "$init" ]; then
    pgbench -i -s 1 -q -h 127.0.0.1 -p "$port" -U postgres postgres > "$out/pgbench-init.log" 2>&1
fi
if [ -n "$setup" ]; then
    psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "$setup" > "$out/setup.log"
fi

secs=${duration%s}
"$target/profiling/ringwire-bench" --port "$port" --sql "$sql" "${params[@]}" --mode "$mode" \
    --concurrency "$conc" --warmup "$warmup" --duration "$duration" --threads 2 > "$out/bench.txt" &
bench=$!
sleep "${warmup%s}"
perf record -F 9000 --call-graph fp -p "$pid" -o "$out/perf.data" -- sleep "$secs" 2> "$out/perf-record.log"
wait $bench
perf script -i "$out/perf.data" 2>/dev/null | inferno-collapse-perf > "$out/collapsed.txt"
inferno-flamegraph < "$out/collapsed.txt" > "$out/flamegraph.svg"
perf report -i "$out/perf.data" --no-children --sort symbol --stdio 2>/dev/null \
    | grep -E '^\s+[0-9.]+%' | head -20 > "$out/top20.txt" || true  # head closes the pipe early
cat "$out/bench.txt"
echo "--- top 20 self time (perf report --no-children --sort symbol)"
cat "$out/top20.txt"
echo "wrote $out/{perf.data,collapsed.txt,flamegraph.svg,top20.txt}"
