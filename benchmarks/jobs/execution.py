"""Run a benchmark job: claim it, drive its requests, record every outcome, finish it.

The Celery task is a thin adapter around execute_job. Requests run in an asyncio
loop on a helper thread (aiohttp); this thread owns the database: it stores each
outcome as it arrives, writes a heartbeat, and notices a cancel request. A job is
claimed with a conditional UPDATE, so a redelivered task cannot run it twice; a job
whose worker dies stops its heartbeat and is failed by reap_stale_jobs.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from sizing.cmdline import parse_command

from ..history.importer import apply_summary
from ..history.records import REQUEST_FIELD_NAMES, content_hash
from ..models import Job, RequestResult, Run
from .client.probe import probe, tokenize_async
from .client.stream import Outcome, session_for, stream_completion
from .client.target import Target, TargetRefused, resolve_target

log = logging.getLogger(__name__)
SYNTHETIC_TEXT = "The quick brown fox jumps over the lazy dog while the benchmark measures every token it reads. "
MAX_RECENT_ERRORS = 10


def claim(job_id: int, worker: str) -> bool:
    now = timezone.now()
    return (
        Job.objects.filter(pk=job_id, state=Job.State.QUEUED, cancel_requested=False).update(
            state=Job.State.RUNNING,
            claimed_at=now,
            heartbeat_at=now,
            worker=worker[:200],
            attempts=F("attempts") + 1,
        )
        == 1
    )


def finish(job: Job, state: str, error: str = "") -> bool:
    """Move a running job to a final state (only from running: never twice)."""
    return (
        Job.objects.filter(pk=job.pk, state=Job.State.RUNNING).update(
            state=state, finished_at=timezone.now(), error=error[:5000], n_running=0
        )
        == 1
    )


def execute_job(job_id: int, worker: str = "") -> str:
    """Run one job to its end; returns its final state. Safe to call twice."""
    if not claim(job_id, worker):
        log.info("job %s was not queued (already claimed, cancelled or unknown); skipping", job_id)
        return Job.objects.filter(pk=job_id).values_list("state", flat=True).first() or "missing"
    job = Job.objects.select_related("server").get(pk=job_id)
    try:
        target = resolve_target(job.server.base_url)
    except TargetRefused as exc:
        finish(job, Job.State.FAILED, f"the server may not be contacted: {exc}")
        return Job.State.FAILED
    try:  # claimed: from here on, every path ends the job
        return _run(job, target)
    except Exception as exc:  # recorded, never a job left running
        log.exception("job %s failed", job_id)
        finish(job, Job.State.FAILED, f"{type(exc).__name__}: {exc}")
        return Job.State.FAILED


def _run(job: Job, target: Target) -> str:
    params = job.params
    api_key = job.server.api_key
    server_info = probe(target, api_key)
    if not server_info.get("reachable"):
        finish(job, Job.State.FAILED, f"the server is not reachable: {server_info.get('error', 'no answer')}")
        return Job.State.FAILED
    job.server.last_probe, job.server.last_probed_at = server_info, timezone.now()
    job.server.save(update_fields=["last_probe", "last_probed_at"])
    prompts = _prompts(params, target, api_key)
    repeats = int(params.get("repeats", 1))
    n_requests = int(params["requests"])
    Job.objects.filter(pk=job.pk).update(n_total=repeats * n_requests)
    final_state = Job.State.SUCCEEDED
    for repeat in range(repeats):
        run = _new_run(job, server_info, repeat, repeats)
        outcome_state = _run_wave(job, target, api_key, run, prompts, n_requests)
        _close_run(run)
        if outcome_state != Job.State.SUCCEEDED:
            final_state = outcome_state
            break
    if final_state == Job.State.CANCELLED:
        finish(job, Job.State.CANCELLED, "cancelled by a user; finished requests are kept")
    else:
        finish(job, final_state)
    return final_state


def _prompts(params: dict[str, Any], target: Target, api_key: str) -> list[Any]:
    if params.get("prompt_tokens"):
        n = int(params["prompt_tokens"])
        return [asyncio.run(_synthetic_ids(target, api_key, n))]
    return list(params["prompts"])


async def _synthetic_ids(target: Target, api_key: str, n: int) -> list[int]:
    """Exactly n token ids from the server's own tokenizer, used as given (no BOS added)."""
    text = SYNTHETIC_TEXT
    async with session_for(target, limit=1, api_key=api_key) as session:
        while True:
            async with session.post(
                target.url("/tokenize"), json={"content": text, "add_special": False}, allow_redirects=False
            ) as response:
                data = await response.json(content_type=None)
            ids = data.get("tokens") if isinstance(data, dict) else None
            if not isinstance(ids, list) or not ids:
                raise RuntimeError(f"/tokenize answered HTTP {response.status} without tokens")
            if len(ids) >= n:
                return [int(i) for i in ids[:n]]
            text = text * (n // len(ids) + 2)


def measure_prompts(target: Target, prompts: list[str], api_key: str = "") -> list[int]:
    return asyncio.run(tokenize_async(target, prompts, api_key))


def _new_run(job: Job, server_info: dict[str, Any], repeat: int, repeats: int) -> Run:
    params = job.params
    props = server_info.get("props") or {}
    slots = server_info.get("slots") or []
    total_slots = props.get("total_slots")
    n_ctx_slot = props.get("n_ctx_slot")
    suffix = f"-r{repeat + 1}" if repeats > 1 else ""
    model_path = str(props.get("model_path") or "unknown")
    # The server's flags, as registered with it; /props and /slots cannot tell a
    # unified pool from per-slot caches, so the launch command is the source.
    declared = parse_command(job.server.launch_command).flags if job.server.launch_command else None
    return Run.objects.create(
        key=f"job-{job.pk}{suffix}",
        source=Run.Source.EXECUTED,
        label=job.label or f"job {job.pk}",
        model=model_path.rsplit("/", 1)[-1][:200] or "unknown",
        gpu=job.server.gpu[:200],
        parallel=total_slots if isinstance(total_slots, int) and total_slots > 0 else None,
        ctx_size=declared.ctx_size if declared else None,
        kv_unified=(declared.kv_unified if declared.parallel else True) if declared else None,
        cache_type_k=declared.type_k if declared else "",
        cache_type_v=declared.type_v if declared else "",
        kv_offload=declared.kv_offload if declared else None,
        flash_attn=declared.flash_attn if declared else "",
        concurrency=int(params["concurrency"]),
        job=job,
        server_props={**server_info, "n_ctx_slot": n_ctx_slot, "slots": slots},
    )


def _run_wave(job: Job, target: Target, api_key: str, run: Run, prompts: list[Any], n_requests: int) -> str:
    """Send n_requests at the job's concurrency; store outcomes as they come."""
    params = job.params
    outcomes: queue.Queue[tuple[int, Outcome] | None] = queue.Queue()
    stop = threading.Event()
    holder: dict[str, Any] = {}

    def driver() -> None:
        try:
            asyncio.run(_drive(target, api_key, params, prompts, n_requests, outcomes, stop, holder))
        except BaseException as exc:  # reported to the owning thread
            holder["error"] = exc
        finally:
            outcomes.put(None)

    thread = threading.Thread(target=driver, name=f"job-{job.pk}-requests", daemon=True)
    thread.start()
    recorder = _Recorder(run)
    heartbeat = settings.KVLAB_JOB_HEARTBEAT_S
    next_beat = time.monotonic() + heartbeat
    cancelled = False
    while True:
        try:
            item = outcomes.get(timeout=0.5)
        except queue.Empty:
            item = ()  # type: ignore[assignment]
        if item is None:
            break
        if item:
            index, outcome = item
            recorder.store(index, outcome)
            _progress(job, outcome)
        if time.monotonic() >= next_beat:
            next_beat = time.monotonic() + heartbeat
            Job.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now(), n_running=holder.get("running", 0))
            if not cancelled and Job.objects.filter(pk=job.pk, cancel_requested=True).exists():
                cancelled = True
                stop.set()
                loop = holder.get("loop")
                if loop is not None:
                    loop.call_soon_threadsafe(lambda: [t.cancel() for t in holder.get("tasks", [])])
    thread.join(timeout=30)
    if "error" in holder and not cancelled:
        raise holder["error"]
    return Job.State.CANCELLED if cancelled else Job.State.SUCCEEDED


async def _drive(
    target: Target,
    api_key: str,
    params: dict[str, Any],
    prompts: list[Any],
    n_requests: int,
    outcomes: queue.Queue[tuple[int, Outcome] | None],
    stop: threading.Event,
    holder: dict[str, Any],
) -> None:
    concurrency = int(params["concurrency"])
    deadline = float(params.get("timeout_s", 600))
    payload_base = {
        "n_predict": int(params["n_predict"]),
        "ignore_eos": True,
        "cache_prompt": bool(params.get("cache_prompt", False)),
    }
    semaphore = asyncio.Semaphore(concurrency)
    holder["loop"] = asyncio.get_running_loop()
    holder["running"] = 0

    async with session_for(target, limit=concurrency, api_key=api_key) as session:

        async def one(index: int) -> None:
            async with semaphore:
                if stop.is_set():
                    return
                holder["running"] += 1
                try:
                    payload = {**payload_base, "prompt": prompts[index % len(prompts)]}
                    outcome = await stream_completion(session, target, payload, deadline_s=deadline)
                except Exception as exc:  # no request is ever lost: an unexpected failure is an outcome
                    outcome = Outcome(ok=False, error_type="other", error=f"{type(exc).__name__}: {exc}")
                finally:
                    holder["running"] -= 1
                outcomes.put((index, outcome))

        tasks = [asyncio.create_task(one(i)) for i in range(n_requests)]
        holder["tasks"] = tasks
        await asyncio.gather(*tasks, return_exceptions=True)


class _Recorder:
    """Stores a run's request outcomes as RequestResult rows, in arrival order."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.seq = 0
        self.occurrences: dict[str, int] = {}

    def store(self, index: int, outcome: Outcome) -> None:
        ts = datetime.fromtimestamp(outcome.started_at, tz=UTC)
        extra = {"index": index, **outcome.extra}
        if outcome.client_tok_s is not None:
            extra["client_tok_s"] = round(outcome.client_tok_s, 4)
        values = {
            "ts": ts,
            "ok": outcome.ok,
            "http_status": outcome.http_status,
            "error": outcome.error or None,
            "error_type": outcome.error_type or None,
            "prompt_tokens": outcome.prompt_tokens,
            "n_predict": self.run.job.params.get("n_predict") if self.run.job else None,
            "output_tokens": outcome.output_tokens,
            "tok_s": outcome.tok_s,
            "elapsed_s": outcome.elapsed_s,
            "ttft_s": outcome.ttft_s,
        }
        request_tuple = tuple(values[name] for name in REQUEST_FIELD_NAMES)
        digest = content_hash(request_tuple, extra)
        occurrence = self.occurrences.get(digest, 0)
        self.occurrences[digest] = occurrence + 1
        RequestResult.objects.create(
            run=self.run,
            seq=self.seq,
            **{k: ("" if v is None and k in ("error", "error_type") else v) for k, v in values.items()},
            extra=extra,
            content_hash=digest,
            occurrence=occurrence,
        )
        self.seq += 1


def _progress(job: Job, outcome: Outcome) -> None:
    updates: dict[str, Any] = {"n_done": F("n_done") + 1, "heartbeat_at": timezone.now()}
    if not outcome.ok:
        updates["n_failed"] = F("n_failed") + 1
    if outcome.output_tokens:
        updates["tokens_out"] = F("tokens_out") + outcome.output_tokens
    Job.objects.filter(pk=job.pk).update(**updates)
    if not outcome.ok:
        with transaction.atomic():
            current = Job.objects.select_for_update().get(pk=job.pk)
            errors = (current.recent_errors or [])[-(MAX_RECENT_ERRORS - 1) :]
            errors.append({"status": outcome.http_status, "type": outcome.error_type, "error": outcome.error[:300]})
            current.recent_errors = errors
            current.save(update_fields=["recent_errors"])


def _close_run(run: Run) -> None:
    apply_summary(run, run.requests.values_list(*REQUEST_FIELD_NAMES).order_by("seq"))
    run.save()


def reap_stale_jobs(max_silence_s: int | None = None, now_fn: Callable[[], Any] = timezone.now) -> list[int]:
    """Fail running jobs whose heartbeat stopped (worker killed or lost). Returns their ids."""
    silence = timedelta(seconds=max_silence_s if max_silence_s is not None else settings.KVLAB_JOB_STALE_S)
    cutoff = now_fn() - silence
    stale = list(Job.objects.filter(state=Job.State.RUNNING, heartbeat_at__lt=cutoff).values_list("pk", "heartbeat_at"))
    reaped = []
    for pk, heartbeat in stale:
        recorded = RequestResult.objects.filter(run__job_id=pk).count()
        updated = Job.objects.filter(pk=pk, state=Job.State.RUNNING, heartbeat_at=heartbeat).update(
            state=Job.State.FAILED,
            finished_at=now_fn(),
            n_running=0,
            error=(
                f"the worker stopped sending heartbeats (last at {heartbeat:%Y-%m-%d %H:%M:%S} UTC): it was killed "
                f"or lost; {recorded} request result(s) were recorded and are kept"
            ),
        )
        if updated:
            for run in Run.objects.filter(job_id=pk):
                _close_run(run)
            reaped.append(pk)
    return reaped
