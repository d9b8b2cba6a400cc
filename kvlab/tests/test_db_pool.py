"""PostgreSQL connections come from a pool per web process; SQLite and Celery workers have none."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.urls import reverse

PG_URL = "postgres://kvlab:kvlab@127.0.0.1:5432/kvlab"

postgres_only = pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"] != "kvlab.db.postgresql",
    reason="the connection pool is PostgreSQL's (DATABASE_URL names none)",
)


def database_settings(argv0: str = "kvlab-settings", **env: str) -> dict:
    """DATABASES["default"] as a fresh process with this environment and sys.argv[0] sees it."""
    code = (
        "import json, sys; sys.argv = [sys.argv[1]]; from kvlab import settings; "
        "db = settings.DATABASES['default']; pool = db.get('OPTIONS', {}).get('pool'); "
        "print(json.dumps({'engine': db['ENGINE'], 'conn_max_age': db['CONN_MAX_AGE'], "
        "'pool': pool or None, 'checks': db['CONN_HEALTH_CHECKS']}))"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "KVLAB_DB_POOL"))}
    result = subprocess.run(
        [sys.executable, "-c", code, argv0],
        cwd=settings.BASE_DIR,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_sqlite_has_no_pool_and_no_persistent_connection() -> None:
    db = database_settings()
    assert db == {"engine": "django.db.backends.sqlite3", "conn_max_age": 0, "pool": None, "checks": False}


def test_a_postgresql_web_process_pools_its_connections_and_checks_them() -> None:
    db = database_settings(DATABASE_URL=PG_URL)
    assert db["engine"] == "kvlab.db.postgresql"  # Django's, with psycopg's compiled timestamptz loader
    assert db["pool"] == {"min_size": 2, "max_size": 4, "timeout": 10}
    assert db["checks"] is True


def test_the_pool_is_sized_from_the_environment() -> None:
    db = database_settings(DATABASE_URL=PG_URL, KVLAB_DB_POOL_MIN="3", KVLAB_DB_POOL_MAX="8")
    assert db["pool"] == {"min_size": 3, "max_size": 8, "timeout": 10}


def test_it_refuses_a_pool_max_below_its_min() -> None:
    code = "from kvlab import settings"
    env = {**os.environ, "DATABASE_URL": PG_URL, "KVLAB_DB_POOL_MIN": "5", "KVLAB_DB_POOL_MAX": "2"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=settings.BASE_DIR, env=env, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "KVLAB_DB_POOL_MAX (2) must be at least KVLAB_DB_POOL_MIN (5)" in result.stderr


@pytest.mark.parametrize("argv0", ["/srv/kvlab/.venv/bin/celery", "/usr/lib/python3/site-packages/celery/__main__.py"])
def test_a_celery_worker_opens_a_connection_per_task_not_a_pool(argv0: str) -> None:
    # prefork children must not inherit the parent's pooled sockets
    db = database_settings(argv0, DATABASE_URL=PG_URL)
    assert db["pool"] is None
    assert db["conn_max_age"] == 0


def test_kvlab_db_pool_0_turns_the_pool_off() -> None:
    db = database_settings(DATABASE_URL=PG_URL, KVLAB_DB_POOL="0")
    assert db["pool"] is None
    assert db["conn_max_age"] == 0


# --- against the PostgreSQL the suite runs on ---------------------------------------------


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def get_run_list(client: Client) -> int:
    """One page view, as gunicorn serves it: the connection goes back when the request finishes."""
    response = client.get(reverse("run-list"))
    assert response.status_code == 200
    assert b'<div id="run-table">' in response.content
    pid = backend_pid()
    connection.close()  # what request_finished does to the connection the test read the pid on
    return pid


@pytest.fixture
def logged_in_client(transactional_db: None) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_user("pool-user", password="not-used-here-1"))
    connection.close()
    return client


@postgres_only
def test_requests_reuse_the_pooled_connections(logged_in_client: Client) -> None:
    assert connection.pool is not None
    pids = [get_run_list(logged_in_client) for _ in range(10)]
    # ten requests, at most max_size backends: without the pool each would be a new one
    assert len(set(pids)) <= settings.DATABASES["default"]["OPTIONS"]["pool"]["max_size"]
    assert len(set(pids)) < len(pids)
    stats = connection.pool.get_stats()
    assert stats["pool_max"] == 4
    assert stats["connections_num"] <= 4  # the pool opened at most its maximum over all these checkouts


@postgres_only
def test_a_broken_connection_is_replaced_before_a_request_gets_it(logged_in_client: Client) -> None:
    before = {get_run_list(logged_in_client) for _ in range(4)}
    params = connection.get_connection_params()
    with psycopg.connect(
        host=params["host"],
        port=params["port"],
        user=params["user"],
        password=params["password"],
        dbname=params["dbname"],
        autocommit=True,
    ) as admin:  # as a database restart or an idle-session timeout would
        killed = admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [list(before)])
        assert [row[0] for row in killed.fetchall()] == [True] * len(before)

    after = {get_run_list(logged_in_client) for _ in range(4)}  # each a 200, on a live connection

    assert after.isdisjoint(before)
    assert connection.pool.get_stats().get("connections_lost", 0) >= 1
