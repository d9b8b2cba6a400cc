"""A job's life around its run: submit it, know whether a worker will take it, reap it.

Claiming, finishing and cancelling are the conditional UPDATEs of models.work.Work;
running the requests is execution.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from kvlab.celery import app as celery_app

from .. import enqueue
from ..history import derived
from ..models import Job, RequestResult, Run, Server
from ..models.jobs import WORKER_LOST
from ..records.metrics import at_rank
from .arrivals import wave_rates

log = logging.getLogger(__name__)


def worker_available() -> str:
    """'' when a Celery worker answers; else why not (Redis down, no worker)."""
    try:
        replies = celery_app.control.ping(timeout=1.0)
    except Exception as exc:  # kombu raises several kinds when Redis is down
        return f"the job queue (Redis) cannot be reached: {type(exc).__name__}"
    if not replies:
        return "no benchmark worker is running (start one: make run, or celery -A kvlab worker -Q kvlab)"
    return ""


def total_requests(params: dict[str, Any]) -> int:
    """How many requests a job sends: requests × repeats, at each rate of a rate sweep (arrivals.wave_rates).
    The one count of a job's total, before a worker claims it and after."""
    return len(wave_rates(params)) * int(params.get("repeats", 1)) * int(params["requests"])


def submit_job(
    *, server: Server | None, base_url: str = "", label: str = "", params: dict[str, Any], user: Any = None
) -> Job:
    """Store a job against a registered server (or a bare address) and enqueue it once committed.

    The job keeps the server's address, command line and GPU as they are now: its runs
    record the configuration that was measured, even if the server is edited later.
    """
    with transaction.atomic():
        job = Job.objects.create(
            server=server,
            base_url=server.base_url if server else base_url,
            launch_command=server.launch_command if server else "",
            gpu=server.gpu if server else "",
            label=label,
            params=params,
            n_total=total_requests(params),  # "0 of 18 done" from the start, as once a worker claims it
            created_by=user if user is not None and user.is_authenticated else None,
        )
        enqueue.job(job)
    return job


class PromptStats(NamedTuple):
    n: int
    p50: int
    p95: int
    max: int


def prompt_stats(token_counts: Sequence[int]) -> PromptStats:
    """Nearest-rank p50/p95 and the largest of measured prompt lengths (at least one)."""
    ordered = sorted(token_counts)
    return PromptStats(len(ordered), at_rank(ordered, 50), at_rank(ordered, 95), ordered[-1])


def reap_stale_jobs(max_silence_s: int | None = None, now_fn: Callable[[], Any] = timezone.now) -> list[int]:
    """Fail running jobs whose heartbeat stopped (worker killed or lost). Returns their ids."""
    silence = timedelta(seconds=max_silence_s if max_silence_s is not None else settings.KVLAB_JOB_STALE_S)
    cutoff = now_fn() - silence
    stale = list(Job.objects.filter(state=Job.State.RUNNING, heartbeat_at__lt=cutoff).values_list("pk", "heartbeat_at"))
    reaped = []
    for pk, heartbeat in stale:
        recorded = RequestResult.objects.filter(run__job_id=pk).count()
        error = (
            f"{WORKER_LOST} (last at {heartbeat:%Y-%m-%d %H:%M:%S} UTC): it was killed "
            f"or lost; {recorded} request result(s) were recorded and are kept"
        )
        if Job.fail_silent(pk, heartbeat, error, n_running=0, live=[]):
            runs = list(Run.objects.filter(job_id=pk))
            for run in runs:
                run.refresh_summary()
            derived.runs_changed(run.pk for run in runs)
            reaped.append(pk)
    return reaped
