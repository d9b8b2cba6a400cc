#!/usr/bin/env bash
# `make run`: Redis, a Celery worker and the web app on http://127.0.0.1:8000.
# Ctrl-C stops everything this script started.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
PORT="${KVLAB_PORT:-8000}"
REDIS_PORT="${KVLAB_REDIS_PORT:-6379}"
export KVLAB_REDIS_URL="${KVLAB_REDIS_URL:-redis://127.0.0.1:${REDIS_PORT}/0}"
mkdir -p var/redis

pids=()
stop_all() {
  trap - INT TERM EXIT
  echo
  echo "kvlab: stopping"
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_all INT TERM EXIT

if redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then
  echo "kvlab: using the Redis already running on port $REDIS_PORT"
else
  scripts/ensure-redis.sh
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$PWD/var/redis" \
    --save "" --appendonly no --daemonize no --loglevel warning &
  pids+=($!)
  for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi

# -B: the embedded beat runs the reaper that fails jobs whose worker died.
"$BIN/celery" -A kvlab worker -B -Q kvlab --loglevel INFO \
  --concurrency 2 --hostname "kvlab@%h" &
pids+=($!)
"$BIN/python" manage.py runserver --noreload "127.0.0.1:${PORT}" &
pids+=($!)
echo "kvlab: http://127.0.0.1:${PORT}/ (Ctrl-C stops Redis, the worker and the web app)"
wait -n "${pids[@]}"
