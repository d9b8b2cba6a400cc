#!/usr/bin/env bash
# Make sure a local PostgreSQL serves a kvlab role for the test suite, and print its
# DATABASE_URL. Installs Debian's postgresql when missing and running as root.
set -euo pipefail
PORT="${KVLAB_PG_PORT:-5432}"
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "kvlab: installing Debian's postgresql" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq postgresql >/dev/null
  else
    echo "kvlab: the PostgreSQL tests need Debian's postgresql (sudo apt-get install postgresql)" >&2
    exit 1
  fi
fi
VERSION="$(ls /etc/postgresql | sort -n | tail -1)"
if ! pg_lsclusters -h | awk -v v="$VERSION" '$1 == v && $2 == "main" && $4 == "online"' | grep -q .; then
  pg_ctlcluster "$VERSION" main start >&2
fi
for _ in $(seq 50); do
  su postgres -c "psql -p $PORT -qAtc 'select 1'" >/dev/null 2>&1 && break
  sleep 0.2
done
su postgres -c "psql -p $PORT -qAtc \"select 1 from pg_roles where rolname = 'kvlab'\"" | grep -q 1 ||
  su postgres -c "psql -p $PORT -qc \"create role kvlab login createdb password 'kvlab'\"" >&2
su postgres -c "psql -p $PORT -qAtc \"select 1 from pg_database where datname = 'kvlab'\"" | grep -q 1 ||
  su postgres -c "createdb -p $PORT -O kvlab kvlab" >&2
echo "postgres://kvlab:kvlab@127.0.0.1:$PORT/kvlab"
