"""Run a sweep: for each flag set, launch llama-server, size it, run the workload, stop it.

Reuses the job machinery: each (flag set, concurrency) is a Job run by
execution.execute_job against the launched server, so heartbeats, cancellation and
recording are the same; the sweep adds the launch, the memory the server reports,
the prediction beside it, and a calibration point.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.utils import timezone

from sizing.gguf import GGUFError, read_gguf_head
from sizing.hparams import ModelSpecError, model_params
from sizing.kv import ServerFlags, flags_key
from sizing.report import as_json
from sizing.server_log import read_server_log
from sizing.size import size
from sizing.workload import Workload

from ..jobs import execution
from ..models import CalibrationPoint, Job, Sweep, SweepConfig
from . import launcher, worker_host

log = logging.getLogger(__name__)
GGUF_HEAD_LIMIT = 256 * 1024 * 1024


def run_sweep(sweep_id: int, worker: str = "") -> str:
    if not Sweep.claim(sweep_id, worker):
        return Sweep.objects.filter(pk=sweep_id).values_list("state", flat=True).first() or "missing"
    sweep = Sweep.objects.select_related("host").get(pk=sweep_id)
    try:
        machine = worker_host.for_host(sweep.host, "sweep")
        binary = machine.binary(sweep.binary)
        model = machine.model(sweep.model_file)
        with model.open("rb") as fh:
            head = read_gguf_head(fh, limit=GGUF_HEAD_LIMIT)
        params = model_params(head.metadata)
    except (worker_host.NotLaunchable, GGUFError, ModelSpecError, OSError) as exc:
        reason = "not launchable here" if isinstance(exc, worker_host.NotLaunchable) else "the model cannot be used"
        Sweep.finish(sweep.pk, Sweep.State.FAILED, f"{reason}: {exc}")
        SweepConfig.objects.filter(sweep=sweep, outcome=SweepConfig.Outcome.PENDING).update(
            outcome=SweepConfig.Outcome.CANCELLED, error="the sweep failed before this flag set"
        )
        return Sweep.State.FAILED
    try:
        for config in sweep.configs.order_by("position"):
            if Sweep.beat_and_cancel_requested(sweep.pk):
                break
            _run_config(sweep, config, Launch(machine, binary, model), params, head.weights_bytes)
        cancelled = Sweep.objects.filter(pk=sweep.pk, cancel_requested=True).exists()
        SweepConfig.objects.filter(sweep=sweep, outcome=SweepConfig.Outcome.PENDING).update(
            outcome=SweepConfig.Outcome.CANCELLED, error="the sweep was cancelled before this flag set"
        )
        if cancelled:
            Sweep.finish(sweep.pk, Sweep.State.CANCELLED, "cancelled by a user; finished flag sets are kept")
            return Sweep.State.CANCELLED
        Sweep.finish(sweep.pk, Sweep.State.SUCCEEDED)
        return Sweep.State.SUCCEEDED
    except Exception as exc:  # recorded, never a sweep left running
        log.exception("sweep %s failed", sweep_id)
        Sweep.finish(sweep.pk, Sweep.State.FAILED, f"{type(exc).__name__}: {exc}")
        return Sweep.State.FAILED


def _workload(sweep: Sweep, concurrency: int) -> Workload | None:
    prompt = sweep.params.get("prompt_tokens")
    if not prompt:
        return None
    return Workload(int(prompt), int(sweep.params["n_predict"]), concurrency, sweep.preference)


@dataclass(frozen=True)
class Launch:
    """What this worker starts for each flag set: checked against its own settings."""

    machine: worker_host.LaunchConfig
    binary: str
    model: Path


def _run_config(sweep: Sweep, config: SweepConfig, launch: Launch, params: Any, weights: int | None) -> None:
    now = timezone.now()
    try:
        parsed = launcher.checked_flags(config.command)
    except launcher.LaunchRefused as exc:
        SweepConfig.objects.filter(pk=config.pk).update(
            outcome=SweepConfig.Outcome.INVALID, error=str(exc), started_at=now, finished_at=timezone.now()
        )
        return
    concurrencies = [int(c) for c in sweep.params["concurrencies"]]
    prediction = size(
        params,
        parsed.flags,
        workload=_workload(sweep, max(concurrencies)),
        gpu_mib=sweep.host.gpu_mib,
        weights_bytes=weights,
        weights_source="gguf tensors" if weights is not None else "",
        with_recommendations=False,
    )
    config.predicted = as_json(prediction)
    config.started_at = now
    config.save(update_fields=["predicted", "started_at"])
    try:
        server = launcher.launch(
            launch.machine,
            launch.binary,
            launch.model,
            parsed,
            should_stop=lambda: Sweep.objects.filter(pk=sweep.pk, cancel_requested=True).exists(),
        )
    except launcher.LaunchFailed as exc:
        SweepConfig.objects.filter(pk=config.pk).update(
            outcome=SweepConfig.Outcome.FAILED_TO_START,
            error=str(exc),
            log_tail=exc.log_tail,
            finished_at=timezone.now(),
        )
        return
    try:
        config.args = server.args
        reported = read_server_log(server.log())
        config.reported = reported.as_json()
        config.save(update_fields=["args", "reported"])
        _calibrate(config, params, parsed.flags, prediction, reported)
        outcome, error = SweepConfig.Outcome.RAN, ""
        for concurrency in concurrencies:
            if Sweep.beat_and_cancel_requested(sweep.pk):
                outcome, error = SweepConfig.Outcome.CANCELLED, "cancelled while it ran; finished requests are kept"
                break
            state = _run_job(sweep, config, server, concurrency)
            if state == Job.State.CANCELLED:
                outcome, error = SweepConfig.Outcome.CANCELLED, "cancelled while it ran; finished requests are kept"
                break
            if not server.alive:
                outcome = SweepConfig.Outcome.CRASHED
                error = f"llama-server exited with status {server.process.returncode} during the workload"
                break
        config.outcome, config.error = outcome, error
        config.log_tail = server.log_tail() if outcome != SweepConfig.Outcome.RAN else ""
    finally:
        launcher.stop(server)
        server.log_file.close()
        config.finished_at = timezone.now()
        config.save(update_fields=["outcome", "error", "log_tail", "finished_at"])


def _run_job(sweep: Sweep, config: SweepConfig, server: launcher.LaunchedServer, concurrency: int) -> str:
    """The workload at one concurrency, as a job against the launched server's address (no Server row)."""
    job_params = {
        key: sweep.params[key]
        for key in ("n_predict", "requests", "repeats", "timeout_s", "prompt_tokens", "prompts")
        if key in sweep.params
    }
    job_params.update(concurrency=concurrency, cache_prompt=False)
    job = Job.objects.create(
        server=None,
        base_url=server.base_url,
        launch_command="llama-server " + config.command,
        gpu=sweep.host.gpu,
        label=f"{sweep.label or f'sweep {sweep.pk}'}: {config.command or 'defaults'} @ {concurrency}",
        params=job_params,
        created_by=sweep.created_by,
        sweep_config=config,
    )
    # Cancelling the sweep asks its running job to stop too (Sweep.cancel).
    return execution.execute_job(job.pk, worker=sweep.worker)


def _calibrate(config: SweepConfig, params: Any, flags: ServerFlags, prediction: Any, reported: Any) -> None:
    if not reported.kv and reported.recurrent_mib is None:
        return
    CalibrationPoint.objects.create(
        model_name=params.name[:300],
        arch=params.arch,
        flags_key=flags_key(flags),
        predicted_kv_bytes=prediction.layout.kv_bytes,
        reported_kv_mib=reported.kv_mib,
        predicted_compute_bytes=prediction.plan.compute_estimate,
        reported_compute_mib=reported.compute_mib,
        reported_model_mib=reported.model_mib,
        config=config,
    )
