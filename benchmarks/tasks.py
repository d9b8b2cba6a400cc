"""Celery tasks: thin adapters around the domain functions. Their names are pinned in the beat schedule
and in the enqueue module, which sends them by name: the domain modules never import this one."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="benchmarks.tasks.run_benchmark_job", acks_late=True, reject_on_worker_lost=False)
def run_benchmark_job(job_id: int) -> str:
    from .jobs import execution

    return execution.execute_job(job_id, worker=run_benchmark_job.request.hostname or "")


@shared_task(name="benchmarks.tasks.reap_stale_jobs")
def reap_stale_jobs() -> list[int]:
    from .jobs import lifecycle

    return lifecycle.reap_stale_jobs()


@shared_task(name="benchmarks.tasks.run_sweep", acks_late=True, reject_on_worker_lost=False)
def run_sweep(sweep_id: int) -> str:
    from .sweeps import running

    return running.run_sweep(sweep_id, worker=run_sweep.request.hostname or "")


@shared_task(name="benchmarks.tasks.reap_stale_sweeps")
def reap_stale_sweeps() -> list[int]:
    """Sweeps and host calibrations whose worker was lost (both run on launch hosts)."""
    from .sweeps import lifecycle

    return lifecycle.reap_stale_sweeps() + lifecycle.reap_stale_calibrations()


@shared_task(name="benchmarks.tasks.run_host_calibration", acks_late=True, reject_on_worker_lost=False)
def run_host_calibration(calibration_id: int) -> str:
    from .sweeps import calibration

    return calibration.run_calibration(calibration_id, worker=run_host_calibration.request.hostname or "")


@shared_task(name="benchmarks.tasks.catch_up_derived")
def catch_up_derived() -> int:
    """Count the runs a large import left for later into the timeline's buckets and the regression baselines."""
    from .history import derived

    return derived.catch_up()
