from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from benchmarks.models import Run
from kvlab.celery import app as celery_app
from kvlab.tests.processes import stop_process

from .factories import runs_named
from .real_parts import start_worker


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads and batches far smaller than a test's file, so what does not grow with the file is small."""
    from benchmarks.history import importer_rows, reader

    monkeypatch.setattr("benchmarks.records.jsonl.CHUNK_BYTES", 1 << 16)
    monkeypatch.setattr(importer_rows, "INSERT_BATCH", 100)
    monkeypatch.setattr(reader, "SPILL_BATCH", 100)


@pytest.fixture
def broker(redis_url: str) -> Iterator[str]:
    """The test Redis as this process's Celery broker.

    Celery builds its connection pool once, from the broker URL of the first publish; an
    earlier test may have built it for another broker, so the pool is reset here too.
    """
    celery_app.conf.broker_url = redis_url
    celery_app._after_fork()  # Celery's own reset of its pools, as after a fork
    yield redis_url
    celery_app._after_fork()


@pytest.fixture
def worker(broker: str) -> Iterator[subprocess.Popen]:
    proc = start_worker(broker, f"jobs-{os.getpid()}@test")
    yield proc
    stop_process(proc, timeout=20)


@pytest.fixture
def crowded_history() -> list[Run]:
    """300 runs of distinct models, GPUs and labels, and 3 runs of one popular model."""
    rare = [f"m{i:03d}" for i in range(300)]
    return runs_named(rare + ["popular"] * 3)
