#!/usr/bin/env bash
# Make sure Debian's redis-server is installed: install it when missing and running
# as root, else say clearly what to do.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "kvlab: redis-server is missing; installing Debian's redis-server" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq redis-server >/dev/null
  # Debian's package may start a system redis on 6379; kvlab starts its own when needed.
  exit 0
fi
cat >&2 <<'MSG'
kvlab needs Redis (the Celery broker) and redis-server is not installed.
Install it with:   sudo apt-get install redis-server
or point kvlab at a running Redis:   export KVLAB_REDIS_URL=redis://HOST:6379/0
MSG
exit 1
