"""How work reaches a worker: each task sent by its pinned name (the names the beat schedule uses too).

The jobs, the sweeps, the host calibrations and the derived tables enqueue through here; the tasks module
imports them to do the work, so nothing here imports it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction

from kvlab.celery import app

if TYPE_CHECKING:
    from .models import HostCalibration, Job, Sweep

RUN_BENCHMARK_JOB = "benchmarks.tasks.run_benchmark_job"
RUN_SWEEP = "benchmarks.tasks.run_sweep"
RUN_HOST_CALIBRATION = "benchmarks.tasks.run_host_calibration"
CATCH_UP_DERIVED = "benchmarks.tasks.catch_up_derived"


def job(job: Job) -> None:
    """Send the job to its server's queue once the transaction that created it commits."""
    queue = job.server.celery_queue if job.server else settings.CELERY_TASK_DEFAULT_QUEUE
    transaction.on_commit(lambda: app.send_task(RUN_BENCHMARK_JOB, args=[job.pk], queue=queue))


def sweep(sweep: Sweep) -> None:
    """Send the sweep to its launch host's queue once the transaction that created it commits."""
    queue = sweep.host.celery_queue
    transaction.on_commit(lambda: app.send_task(RUN_SWEEP, args=[sweep.pk], queue=queue))


def calibration(calibration: HostCalibration) -> None:
    """Send a host calibration to its launch host's queue once the transaction that created it commits."""
    queue = calibration.host.celery_queue
    transaction.on_commit(lambda: app.send_task(RUN_HOST_CALIBRATION, args=[calibration.pk], queue=queue))


def catch_up_derived() -> None:
    """Ask a worker to count the runs a large import left for later, now; raises when the broker cannot be reached."""
    app.send_task(CATCH_UP_DERIVED, retry=False)
