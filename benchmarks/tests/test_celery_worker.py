"""The Celery worker `make run` starts: a real worker process on a real Redis."""

import os
import subprocess
import sys
import time

from celery import Celery
from django.conf import settings


def test_a_kvlab_worker_connects_to_redis_and_answers(redis_url, tmp_path):
    env = {**os.environ, "KVLAB_REDIS_URL": redis_url, "KVLAB_VAR_DIR": str(tmp_path)}
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "kvlab",
            "worker",
            "--pool",
            "solo",
            "--concurrency",
            "1",
            "--hostname",
            "probe@test",
        ],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    client = Celery("probe", broker=redis_url)
    try:
        replies: list = []
        deadline = time.monotonic() + 60
        while not replies and time.monotonic() < deadline and worker.poll() is None:
            replies = client.control.ping(timeout=1.0)
        assert replies == [{"probe@test": {"ok": "pong"}}], worker.poll()
        stats = client.control.inspect(timeout=2.0).stats()["probe@test"]
        assert stats["broker"]["transport"] == "redis"
        assert stats["prefetch_count"] == 1  # CELERY_WORKER_PREFETCH_MULTIPLIER = 1 (the default would give 4)
    finally:
        worker.terminate()
        output = worker.communicate(timeout=30)[0].decode()
        client.close()
    assert worker.returncode == 0, output


def test_the_production_worker_command_keeps_its_beat_schedule_out_of_the_checkout(redis_url, tmp_path):
    """`celery -A kvlab worker -B -Q kvlab`, as the README gives it, run from a copy's root."""
    var = tmp_path / "var"
    env = {**os.environ, "KVLAB_REDIS_URL": redis_url, "KVLAB_VAR_DIR": str(var), "PYTHONPATH": str(settings.BASE_DIR)}
    cwd = tmp_path / "checkout"
    cwd.mkdir()
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "kvlab", "worker", "-B", "-Q", "kvlab", "--pool", "solo"]
        + ["--hostname", "beat@test"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(var.glob("celerybeat-schedule*")) and time.monotonic() < deadline and worker.poll() is None:
            time.sleep(0.2)
    finally:
        worker.terminate()
        output = worker.communicate(timeout=30)[0].decode()
    assert list(var.glob("celerybeat-schedule*")), output
    assert list(cwd.iterdir()) == [], output
