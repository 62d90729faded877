#!/usr/bin/env bash
# Make a PostgreSQL server available to the test suite, which runs its end-to-end tests on the
# embedded SQLite database and on PostgreSQL.
#
# - CAIRN_TEST_PG_URL set: use that server as is (e.g. postgresql://user:pw@host/db).
# - Otherwise use the local server over its socket (peer auth), starting Debian's cluster and
#   creating a superuser role for the current user when run as root.
# - CAIRN_TEST_POSTGRES=skip: run without PostgreSQL (the PostgreSQL tests are then skipped,
#   loudly); for machines where it cannot be installed.
set -euo pipefail

if [ "${CAIRN_TEST_POSTGRES:-}" = "skip" ]; then
  echo "ensure_postgres: CAIRN_TEST_POSTGRES=skip — PostgreSQL tests will be skipped" >&2
  exit 0
fi
if [ -n "${CAIRN_TEST_PG_URL:-}" ]; then
  exit 0
fi

user="$(id -un)"
can_connect() { psql -d postgres -Atqc 'select 1' >/dev/null 2>&1; }

if can_connect; then
  exit 0
fi

if ! command -v pg_ctlcluster >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure_postgres: installing PostgreSQL from Debian's packages" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null
  else
    echo "ensure_postgres: PostgreSQL is not installed. Install it (Debian: apt-get install postgresql)," >&2
    echo "  point CAIRN_TEST_PG_URL at a server, or set CAIRN_TEST_POSTGRES=skip." >&2
    exit 1
  fi
fi

if [ "$(id -u)" = "0" ]; then
  cluster=$(pg_lsclusters -h 2>/dev/null | awk 'NR==1 {print $1" "$2}')
  if [ -n "$cluster" ]; then
    # shellcheck disable=SC2086
    pg_ctlcluster $cluster start 2>/dev/null || true
  fi
  for _ in $(seq 1 30); do
    su postgres -c "psql -Atqc 'select 1'" >/dev/null 2>&1 && break
    sleep 0.5
  done
  su postgres -c "psql -Atqc \"select 1 from pg_roles where rolname='${user}'\"" | grep -q 1 \
    || su postgres -c "createuser --superuser ${user}"
fi

if ! can_connect; then
  echo "ensure_postgres: cannot connect to PostgreSQL as '${user}' over the local socket." >&2
  echo "  Start it and create a superuser role '${user}', or set CAIRN_TEST_PG_URL / CAIRN_TEST_POSTGRES=skip." >&2
  exit 1
fi
echo "ensure_postgres: PostgreSQL is up (role ${user})" >&2
