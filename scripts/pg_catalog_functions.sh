#!/usr/bin/env bash
# Writes src/upstream/pg_catalog_functions.txt, the names of PostgreSQL's built-in functions,
# from a running PostgreSQL (the relay's scan treats a call to any other name as user code:
# src/upstream/classify.rs, `runs_user_code`). Run it against the oldest PostgreSQL ringwire
# fronts: a newer version's built-ins missing here only cost a settings replay when called,
# but a name listed here that an older server lacks would hide a user's function of that name
# there (PostgreSQL 16's `any_value`, which older applications define themselves).
# tests/upstream.rs checks that the PostgreSQL the tests start has no built-in missing here.
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
