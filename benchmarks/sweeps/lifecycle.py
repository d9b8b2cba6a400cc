"""A sweep's life around its run: create and enqueue it, reap it when its worker is lost.

Claiming, finishing and cancelling are the conditional UPDATEs of models.work.Work;
running the flag sets is running.py.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from .. import enqueue
from ..models import HostCalibration, Job, LaunchHost, Sweep, SweepConfig


def create_sweep(
    host: LaunchHost, model_file: str, flag_sets: list[str], params: dict[str, Any], *, label: str = "",
    preference: str = "throughput", user: Any = None, binary: str = "",
) -> Sweep:  # fmt: skip
    """Store a sweep and its flag sets, and enqueue it on the host's queue once committed."""
    with transaction.atomic():
        sweep = Sweep.objects.create(
            host=host,
            model_file=model_file,
            binary=binary,
            label=label,
            params=params,
            preference=preference,
            created_by=user if user is not None and user.is_authenticated else None,
        )
        SweepConfig.objects.bulk_create(
            SweepConfig(sweep=sweep, position=i, command=command) for i, command in enumerate(flag_sets)
        )
        enqueue.sweep(sweep)
    return sweep


def reap_stale_sweeps(max_silence_s: int | None = None) -> list[int]:
    """Fail running sweeps whose worker stopped: neither the sweep nor its jobs beat lately."""
    silence = timedelta(seconds=max_silence_s if max_silence_s is not None else settings.KVLAB_JOB_STALE_S)
    cutoff = timezone.now() - silence
    reaped = []
    for pk, heartbeat in Sweep.objects.filter(state=Sweep.State.RUNNING, heartbeat_at__lt=cutoff).values_list(
        "pk", "heartbeat_at"
    ):
        latest_job = Job.objects.filter(sweep_config__sweep_id=pk).aggregate(last=Max("heartbeat_at"))["last"]
        if latest_job and latest_job >= cutoff:
            continue
        error = "the worker stopped sending heartbeats (killed or lost); finished flag sets are kept"
        if Sweep.fail_silent(pk, heartbeat, error):
            SweepConfig.objects.filter(sweep_id=pk, outcome=SweepConfig.Outcome.PENDING).update(
                outcome=SweepConfig.Outcome.CANCELLED, error="the sweep's worker was lost"
            )
            reaped.append(pk)
    return reaped


def reap_stale_calibrations(max_silence_s: int | None = None) -> list[int]:
    """Fail running host calibrations whose worker stopped beating (it beats while llama-bench runs)."""
    silence = timedelta(seconds=max_silence_s if max_silence_s is not None else settings.KVLAB_JOB_STALE_S)
    cutoff = timezone.now() - silence
    stale = HostCalibration.objects.filter(state=HostCalibration.State.RUNNING, heartbeat_at__lt=cutoff)
    error = "the worker stopped sending heartbeats (killed or lost) while llama-bench ran"
    return [pk for pk, beat in stale.values_list("pk", "heartbeat_at") if HostCalibration.fail_silent(pk, beat, error)]
