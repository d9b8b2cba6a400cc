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
