"""Real parts for the tests that need them: a llama-server on a free port, Celery worker processes
on the test database, a job submitted to a registered server and waited for, or run on a thread as a
worker runs it. The broker and worker fixtures that start them are in benchmarks/tests/conftest.py."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection, connections

from benchmarks.jobs import execution
from benchmarks.jobs.lifecycle import submit_job
from benchmarks.models import Job, Server
from kvlab.celery import app as celery_app
from kvlab.tests.processes import free_port, stop_process

HOLD_BACK = 8  # tokens the server may hold back from the stream as incomplete UTF-8 (0-5 seen)


@contextlib.contextmanager
def live_llama_server(binary: Path, model: Path, flags: list[str], log_path: Path | None = None) -> Iterator[str]:
    """A real llama-server on a free port until the block ends; its log in log_path when given."""
    port = free_port()
    with log_path.open("wb") if log_path is not None else tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "--no-webui", *flags],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                assert proc.poll() is None, "llama-server exited during start-up"
                with contextlib.suppress(OSError):
                    if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).status == 200:
                        break
                time.sleep(0.1)
            else:
                pytest.fail("llama-server did not become healthy")
            yield f"http://127.0.0.1:{port}"
        finally:
            stop_process(proc)


def database_url_for_workers() -> str:
    """The test database, for worker processes: they must see what the tests write."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def start_worker(redis_url: str, hostname: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "KVLAB_REDIS_URL": redis_url,
        "DATABASE_URL": database_url_for_workers(),
        "KVLAB_JOB_HEARTBEAT_S": "1",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "kvlab", "worker", "--pool", "solo", "--concurrency", "1"]
        + ["-Q", "kvlab", "--hostname", hostname, "--loglevel", "WARNING"],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if celery_app.control.ping(destination=[hostname], timeout=0.5):
                return proc
            assert proc.poll() is None, "the Celery worker exited during start-up"
        pytest.fail("the Celery worker did not answer")
    except BaseException:
        proc.kill()  # never leave a worker behind
        proc.wait()
        raise


def submit(server: Server, user: object = None, **params: object) -> Job:
    defaults = {
        "n_predict": 300,
        "concurrency": 3,
        "requests": 3,
        "repeats": 1,
        "cache_prompt": False,
        "timeout_s": 120,
    }
    return submit_job(server=server, label="test", params={**defaults, **params}, user=user)


def wait_for(job: Job, *, finished: bool = True, done: int | None = None, timeout: float = 180) -> Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if finished and job.finished:
            return job
        if done is not None and job.n_done >= done:
            return job
        time.sleep(0.2)
    pytest.fail(f"job {job.pk} is still {job.state} ({job.n_done}/{job.n_total}) after {timeout} s")


def register(base_url: str, launch: str) -> Server:
    return Server.objects.create(name=f"tiny-{base_url.rsplit(':', 1)[1]}", base_url=base_url, launch_command=launch)


def run_in_background(job: Job) -> threading.Thread:
    """execute_job on a thread of its own, as a worker runs it; the thread closes its database connection."""

    def work() -> None:
        try:
            execution.execute_job(job.pk, "test")
        finally:
            connections.close_all()  # this thread's own connections: none may be left open

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread
