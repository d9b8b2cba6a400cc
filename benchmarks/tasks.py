"""Celery tasks: thin adapters around the domain functions. Their names are pinned in the beat schedule."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.db import transaction

from .models import Job, Sweep


@shared_task(name="benchmarks.tasks.run_benchmark_job", acks_late=True, reject_on_worker_lost=False)
def run_benchmark_job(job_id: int) -> str:
    from .jobs import execution

    return execution.execute_job(job_id, worker=run_benchmark_job.request.hostname or "")


@shared_task(name="benchmarks.tasks.reap_stale_jobs")
def reap_stale_jobs() -> list[int]:
    from .jobs import lifecycle

    return lifecycle.reap_stale_jobs()


def enqueue(job: Job) -> None:
    """Send the job to its server's queue once the transaction that created it commits."""
    queue = job.server.celery_queue if job.server else settings.CELERY_TASK_DEFAULT_QUEUE
    transaction.on_commit(lambda: run_benchmark_job.apply_async(args=[job.pk], queue=queue))


@shared_task(name="benchmarks.tasks.run_sweep", acks_late=True, reject_on_worker_lost=False)
def run_sweep(sweep_id: int) -> str:
    from .sweeps import running

    return running.run_sweep(sweep_id, worker=run_sweep.request.hostname or "")


@shared_task(name="benchmarks.tasks.reap_stale_sweeps")
def reap_stale_sweeps() -> list[int]:
    from .sweeps import lifecycle

    return lifecycle.reap_stale_sweeps()


def enqueue_sweep(sweep: Sweep) -> None:
    queue = sweep.host.celery_queue
    transaction.on_commit(lambda: run_sweep.apply_async(args=[sweep.pk], queue=queue))


@shared_task(name="benchmarks.tasks.catch_up_derived")
def catch_up_derived() -> int:
    """Count the runs a large import left for later into the timeline's buckets and the regression baselines."""
    from .history import derived

    return derived.catch_up()
