#!/usr/bin/env bash
# Writes src/upstream/pg_catalog_functions.txt, the names of PostgreSQL's built-in functions,
# from a running PostgreSQL (the relay's scan treats a call to any other name as user code:
# src/upstream/classify.rs, `runs_user_code`). tests/upstream.rs checks the file against the
# PostgreSQL the tests start.
#   scripts/pg_catalog_functions.sh "host=/tmp port=5432 user=postgres dbname=postgres"
set -euo pipefail
cd "$(dirname "$0")/.."
out=src/upstream/pg_catalog_functions.txt
{
    echo "# PostgreSQL $(psql "$1" -XAtc 'SHOW server_version')'s built-in function names (pg_catalog), one per line."
    echo "# Written by scripts/pg_catalog_functions.sh; read by src/upstream/classify.rs."
    psql "$1" -XAtc "SELECT DISTINCT proname COLLATE \"C\" FROM pg_catalog.pg_proc
                      WHERE pronamespace = 'pg_catalog'::regnamespace ORDER BY 1"
} > "$out"
echo "$(grep -vc '^#' "$out") names in $out"
