"""Run a benchmark job: claim it, drive its requests, record every outcome, finish it.

The Celery task is a thin adapter around execute_job. Requests run in an asyncio
loop on a helper thread (aiohttp); this thread owns the database: it stores each
outcome as it arrives, writes a heartbeat, and notices a cancel request. The two
share one typed _Wave. A job is claimed with a conditional UPDATE (models.work), so a
redelivered task cannot run it twice; a job whose worker dies stops its heartbeat
and is failed by lifecycle.reap_stale_jobs.

Beside the requests, a sampler (telemetry/sampler.py) reads /slots, /metrics and the
GPUs a few times a second into the wave's Series: the recording thread copies it into
Job.telemetry at each heartbeat (the live page) and into Run.telemetry at the wave's
end, with the overflow of a shared pool attributed from the failed requests' own
numbers (telemetry/attribution.py). Telemetry never fails a job: what could not be had
is said in the series' sources.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import queue
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from sizing.cmdline import parse_command

from ..history import derived
from ..models import Job, RequestResult, Run
from ..models.jobs import MAX_LIVE
from ..records.errors import OTHER
from ..records.schema import MAX_ERROR_CHARS, MAX_INT, request_identity
from ..records.storable import storable_json, storable_text
from .arrivals import run_key_suffix, send_offsets, wave_rates
from .client.probe import ProbeError, probe, synthetic_prompt, tokenize
from .client.stream import Outcome, Progress, session_for, stream_completion
from .client.target import Target, TargetRefused, resolve_target
from .lifecycle import total_requests
from .pool import server_pool
from .telemetry import attribution
from .telemetry.sampler import PERIOD_S, endpoints_from_probe, sample
from .telemetry.series import Series

log = logging.getLogger(__name__)
MAX_RECENT_ERRORS = 10
LIVE_INTERVAL_S = 1.0
SAMPLER_STOP_S = 2.0  # how long the wave waits for its sampler to stop (it returns within ~0.5 s)


def execute_job(job_id: int, worker: str = "") -> str:
    """Run one job to its end; returns its final state. Safe to call twice."""
    if not Job.claim(job_id, worker, claimed_at=timezone.now(), attempts=F("attempts") + 1):
        log.info("job %s was not queued (already claimed, cancelled or unknown); skipping", job_id)
        return Job.objects.filter(pk=job_id).values_list("state", flat=True).first() or "missing"
    job = Job.objects.select_related("server").get(pk=job_id)
    try:
        target = resolve_target(job.base_url)
    except TargetRefused as exc:
        _finish(job, Job.State.FAILED, f"the server may not be contacted: {exc}")
        return Job.State.FAILED
    try:  # claimed: from here on, every path ends the job
        return _run(job, target)
    except Exception as exc:  # recorded, never a job left running
        log.exception("job %s failed", job_id)
        _finish(job, Job.State.FAILED, f"{type(exc).__name__}: {exc}")
        return Job.State.FAILED


def _finish(job: Job, state: str, error: str = "") -> None:
    Job.finish(job.pk, state, storable_text(error), n_running=0, live=[], telemetry=None)


def _run(job: Job, target: Target) -> str:
    params = job.params
    repeats = int(params.get("repeats", 1))
    n_requests = int(params["requests"])
    rates = wave_rates(params)  # [None] at fixed concurrency; repeats run per rate
    # A sweep's job is stored without its total (submit_job's have it): known from the claim on, so the
    # page never reads "0 of 0 done"; the one count, the same before a worker claims the job and after.
    Job.objects.filter(pk=job.pk).update(n_total=total_requests(params))
    api_key = job.server.api_key if job.server else ""
    server_info: dict[str, Any] = storable_json(probe(target, api_key))  # the server's answers are input
    if not server_info.get("reachable"):
        _finish(job, Job.State.FAILED, f"the server is not reachable: {server_info.get('error', 'no answer')}")
        return Job.State.FAILED
    if job.server:
        job.server.last_probe, job.server.last_probed_at = server_info, timezone.now()
        job.server.save(update_fields=["last_probe", "last_probed_at"])
    prompts: list[Any] = (
        [synthetic_prompt(target, int(params["prompt_tokens"]), api_key)]
        if params.get("prompt_tokens")
        else list(params["prompts"])[:n_requests]  # request i sends prompt i modulo their number
    )
    prompt_lengths = _prompt_lengths(target, api_key, prompts)
    pool = telemetry_pool(job.launch_command, server_info)
    final_state = Job.State.SUCCEEDED
    for rate, repeat in [(rate, repeat) for rate in rates for repeat in range(repeats)]:
        run = _new_run(job, server_info, repeat, repeats, rate=rate)
        final_state = _run_wave(
            job,
            target,
            api_key,
            run,
            prompts,
            prompt_lengths,
            n_requests,
            server_info=server_info,
            pool=pool,
            rate=rate,
        )
        run.refresh_summary()
        derived.runs_changed([run.pk])  # the regressions page compares it from now on
        if final_state != Job.State.SUCCEEDED:
            break
    cancelled = final_state == Job.State.CANCELLED
    _finish(job, final_state, "cancelled by a user; finished requests are kept" if cancelled else "")
    return final_state


def telemetry_pool(launch_command: str, server_info: dict[str, Any]) -> dict[str, Any]:
    """The series' pool: shared or per slot from the launch command (pool.server_pool), the
    capacities from the server; "unknown" when the command is missing or disagrees."""
    found = server_pool(launch_command, server_info)
    if found is None:
        return {
            "kind": "unknown",
            "slots": None,
            "slot_cells": None,
            "pool_cells": None,
            "from": "unknown: the server reported no slots or context size",
        }
    kind = {True: "shared", False: "per-slot", None: "unknown"}[found.unified]
    return {
        "kind": kind,
        "slots": found.slots,
        "slot_cells": found.cells,
        "pool_cells": found.total_cells,
        "from": "launch command" if found.unified is not None else f"unknown: {found.note}",
    }


def _new_run(job: Job, server_info: dict[str, Any], repeat: int, repeats: int, *, rate: float | None = None) -> Run:
    params = job.params
    props = server_info.get("props") or {}
    slots = server_info.get("slots") or []
    total_slots = props.get("total_slots")
    n_ctx_slot = props.get("n_ctx_slot")
    suffix = run_key_suffix(params, rate) + (f"-r{repeat + 1}" if repeats > 1 else "")
    arrival = params.get("arrival") or ""
    load = {"arrival": {"arrival": arrival, "rate": rate, "seed": int(params.get("seed") or 0)}} if arrival else {}
    model_path = str(props.get("model_path") or "unknown")
    # The server's flags, as registered with it; /props and /slots cannot tell a
    # unified pool from per-slot caches, so the launch command is the source.
    declared = parse_command(job.launch_command).flags if job.launch_command else None
    return Run.objects.create(
        key=f"job-{job.pk}{suffix}",
        source=Run.Source.EXECUTED,
        label=job.label or f"job {job.pk}",
        model=model_path.rsplit("/", 1)[-1][:200] or "unknown",
        gpu=job.gpu[:200],
        parallel=total_slots if isinstance(total_slots, int) and 0 < total_slots <= MAX_INT else None,
        ctx_size=declared.ctx_size if declared else None,
        kv_unified=(declared.kv_unified if declared.parallel else True) if declared else None,
        cache_type_k=declared.type_k if declared else "",
        cache_type_v=declared.type_v if declared else "",
        kv_offload=declared.kv_offload if declared else None,
        flash_attn=declared.flash_attn if declared else "",
        concurrency=int(params["concurrency"]),
        job=job,
        server_props={**server_info, "n_ctx_slot": n_ctx_slot, "slots": slots, **load},
        arrival=arrival,
        request_rate=rate,
        tool="kvlab",
        engine="llama.cpp",
        server_flags=job.launch_command or "",
    )


@dataclass
class _Wave:
    """What the request loop (on its own thread) and the recording thread share.

    The loop puts each outcome on `outcomes` and None when it is done, keeps `running`
    and `in_flight` current and keeps an unexpected `error`; the recording thread owns
    the database, writes `live()` at each heartbeat, and calls cancel() to stop sending
    and abandon the requests in flight.
    """

    outcomes: queue.Queue[tuple[int, Outcome] | None] = field(default_factory=queue.Queue)
    stop: threading.Event = field(default_factory=threading.Event)
    running: int = 0
    in_flight: dict[int, Progress] = field(default_factory=dict)  # request index → how far it has come
    error: BaseException | None = None
    series: Series | None = None  # the telemetry, filled by the sampler on the loop's thread
    endpoints: dict[str, Any] = field(default_factory=dict)  # sampler.endpoints_from_probe
    prompt_lengths: list[int] | None = None
    t0: float = 0.0  # perf_counter at the wave's first send: the series' and at_error's origin
    tokens_done: int = 0  # output tokens of the finished requests (loop thread)
    waited_for_cap: int = 0  # rate mode: arrivals that found the concurrency cap full (loop thread)
    wall_s: float | None = None  # the wave's wall time, first send to last outcome (loop thread)
    _loop: asyncio.AbstractEventLoop | None = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def started(self, loop: asyncio.AbstractEventLoop, tasks: list[asyncio.Task[None]]) -> None:
        self._loop, self._tasks = loop, tasks

    def cancel(self) -> None:
        self.stop.set()  # requests not yet sent are never sent
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._cancel_tasks)

    def _cancel_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()

    def tokens_out(self) -> int:
        """Tokens received so far, finished and streaming requests (for the series' tokens/s)."""
        return self.tokens_done + sum(p.tokens for p in self.in_flight.copy().values())

    def telemetry(self) -> dict[str, Any] | None:
        """The series as it stands, for Job.telemetry; None if there is none or it cannot be had."""
        if self.series is None:
            return None
        try:
            return storable_json(self.series.snapshot())
        except Exception:  # telemetry never fails a job
            log.exception("telemetry snapshot failed")
            return None

    def live(self) -> list[dict[str, Any]]:
        """The requests in flight now, for Job.live: at most the concurrency, in request order."""
        now = time.perf_counter()
        rows = []
        for index, progress in sorted(self.in_flight.copy().items())[:MAX_LIVE]:  # copy(): atomic under the GIL
            first = progress.first_token_at
            decoding = now - first if first is not None else 0.0
            rate = (progress.tokens - 1) / decoding if progress.tokens > 1 and decoding > 0 else None
            rows.append(
                {
                    "i": index,
                    "state": "streaming" if progress.tokens else "waiting",
                    "tokens": progress.tokens,
                    "elapsed_s": round(now - progress.sent_at, 3),
                    "ttft_s": None if first is None else round(first - progress.sent_at, 3),
                    "tok_s": None if rate is None else round(rate, 2),
                }
            )
        return rows


def _prompt_lengths(target: Target, api_key: str, prompts: list[Any]) -> list[int] | None:
    """Each prompt's length in tokens, as the server counts it: recorded for every request,
    failed ones included (a failed request's answer does not say). None if it cannot be had."""
    if all(isinstance(p, list) for p in prompts):
        return [len(p) for p in prompts]  # token ids, sent as given
    try:
        return tokenize(target, prompts, api_key, timeout_s=120)
    except (ProbeError, OSError, TimeoutError) as exc:
        log.warning("job prompts could not be tokenized (%s): prompt tokens come from the answers alone", exc)
        return None


def _run_wave(
    job: Job,
    target: Target,
    api_key: str,
    run: Run,
    prompts: list[Any],
    prompt_lengths: list[int] | None,
    n_requests: int,
    *,
    server_info: dict[str, Any] | None = None,
    pool: dict[str, Any] | None = None,
    rate: float | None = None,
) -> str:
    """Send n_requests at the job's concurrency; store outcomes as they come."""
    wave = _Wave(prompt_lengths=prompt_lengths, endpoints=endpoints_from_probe(server_info))
    if server_info is not None:
        wave.series = Series(PERIOD_S, pool, {})
    overflowed: list[tuple[int, Outcome]] = []  # the context_exceeded failures, for the attribution

    def driver() -> None:
        try:
            asyncio.run(_drive(target, api_key, job.params, prompts, n_requests, wave, rate=rate))
        except BaseException as exc:  # reported to the recording thread
            wave.error = exc
        finally:
            wave.outcomes.put(None)

    thread = threading.Thread(target=driver, name=f"job-{job.pk}-requests", daemon=True)
    thread.start()
    recorder = _Recorder(run, prompt_lengths)
    # The live page polls every second: the requests in flight are written at least as often.
    heartbeat = min(settings.KVLAB_JOB_HEARTBEAT_S, LIVE_INTERVAL_S)
    next_beat = time.monotonic() + heartbeat
    cancelled = False
    while True:
        try:
            item = wave.outcomes.get(timeout=max(0.0, next_beat - time.monotonic()))
        except queue.Empty:
            pass
        else:
            if item is None:
                break
            index, outcome = item
            row = recorder.seq  # the request's number on the run page (#row + 1): the order it finished in
            recorder.store(index, outcome)
            _progress(job, outcome, wave)
            if outcome.at_error is not None:  # kept for the attribution, with only its mean gap
                gaps = [statistics.fmean(outcome.itl_s)] if outcome.itl_s else None
                # named by its row, as the run page's table numbers it, not by the order it was sent in
                overflowed.append((row, dataclasses.replace(outcome, itl_s=gaps, extra={})))
        if time.monotonic() >= next_beat:
            next_beat = time.monotonic() + heartbeat
            changes = {"n_running": wave.running, "live": wave.live(), "telemetry": wave.telemetry()}
            if Job.beat_and_cancel_requested(job.pk, **changes) and not cancelled:
                cancelled = True
                wave.cancel()
    thread.join(timeout=30)
    if wave.wall_s is not None:
        # The run's wall time is the wave's, not the longest request's: with more requests than
        # the concurrency, requests run one after another and the throughput is tokens / this.
        run.wall_s = wave.wall_s
        run.save(update_fields=["wall_s"])
    if "arrival" in run.server_props:  # rate mode: how many arrivals the concurrency cap held back
        run.server_props["arrival"]["waited_for_cap"] = wave.waited_for_cap
        run.save(update_fields=["server_props"])
    _save_telemetry(job, run, wave, pool, overflowed)
    if wave.error is not None and not cancelled:
        raise wave.error
    return Job.State.CANCELLED if cancelled else Job.State.SUCCEEDED


def _save_telemetry(
    job: Job, run: Run, wave: _Wave, pool: dict[str, Any] | None, overflowed: list[tuple[int, Outcome]]
) -> None:
    """Run.telemetry at the wave's end, with the overflow attributed; a failure here is logged, not the job's."""
    if wave.series is None:
        return
    try:
        params = job.params
        over = attribution.overflow(
            overflowed,
            pool=pool,
            n_predict=int(params["n_predict"]),
            concurrency=int(params["concurrency"]),
        )
        wave.series.set_overflow(over)
        run.telemetry = storable_json(wave.series.snapshot())
        run.save(update_fields=["telemetry"])
    except Exception:  # telemetry never fails a job
        log.exception("job %s: the telemetry of run %s could not be saved", job.pk, run.pk)


async def _drive(
    target: Target,
    api_key: str,
    params: dict[str, Any],
    prompts: list[Any],
    n_requests: int,
    wave: _Wave,
    *,
    rate: float | None = None,
) -> None:
    concurrency = int(params["concurrency"])
    deadline = float(params.get("timeout_s", 600))
    payload_base = {
        "n_predict": int(params["n_predict"]),
        "ignore_eos": True,
        "cache_prompt": bool(params.get("cache_prompt", False)),
    }
    semaphore = asyncio.Semaphore(concurrency)
    # rate mode: request i is sent at t0 + offsets[i], the concurrency still capping those in flight
    offsets = send_offsets(params.get("arrival") or "", rate, n_requests, int(params.get("seed") or 0))

    async with session_for(target, limit=concurrency, api_key=api_key) as session:

        async def one(index: int) -> None:
            if offsets is not None:
                delay = wave.t0 + offsets[index] - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                if semaphore.locked():
                    wave.waited_for_cap += 1
            async with semaphore:
                if wave.stop.is_set():
                    return
                wave.running += 1
                progress = wave.in_flight[index] = Progress(sent_at=time.perf_counter())
                lengths = wave.prompt_lengths
                try:
                    payload = {**payload_base, "prompt": prompts[index % len(prompts)]}
                    outcome = await stream_completion(
                        session,
                        target,
                        payload,
                        deadline_s=deadline,
                        progress=progress,
                        t0=wave.t0,
                        prompt_tokens=lengths[index % len(lengths)] if lengths else None,
                    )
                except Exception as exc:  # no request is ever lost: an unexpected failure is an outcome
                    outcome = Outcome(ok=False, error_type=OTHER, error=f"{type(exc).__name__}: {exc}")
                finally:
                    wave.running -= 1
                    wave.tokens_done += progress.tokens
                    del wave.in_flight[index]
                wave.outcomes.put((index, outcome))

        wave.t0 = time.perf_counter()
        tasks = [asyncio.create_task(one(i)) for i in range(n_requests)]
        wave.started(asyncio.get_running_loop(), tasks)
        stop_sampling = asyncio.Event()
        sampler = _start_sampler(target, api_key, wave, stop_sampling)
        try:
            await asyncio.gather(*tasks, return_exceptions=True)
            wave.wall_s = time.perf_counter() - wave.t0
        finally:
            stop_sampling.set()
            if sampler is not None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(sampler, SAMPLER_STOP_S)


def _start_sampler(target: Target, api_key: str, wave: _Wave, stop: asyncio.Event) -> asyncio.Task[None] | None:
    """The sampler as a task beside the requests (not among them: a cancel stops requests first)."""
    if wave.series is None:
        return None
    try:
        return asyncio.create_task(
            sample(target, api_key, wave.series, stop, t0=wave.t0, endpoints=wave.endpoints, tokens_out=wave.tokens_out)
        )
    except Exception as exc:  # telemetry never fails a job
        wave.series.set_source("sampler", f"failed: {type(exc).__name__}: {exc}")
        return None


class _Recorder:
    """Stores a run's request outcomes as RequestResult rows, in arrival order."""

    def __init__(self, run: Run, prompt_lengths: list[int] | None = None) -> None:
        self.run = run
        self.prompt_lengths = prompt_lengths
        self.seq = 0
        self.occurrences: dict[str, int] = {}

    def store(self, index: int, outcome: Outcome) -> None:
        extra = {"index": index, **storable_json(outcome.extra)}
        if outcome.client_tok_s is not None:
            extra["client_tok_s"] = round(outcome.client_tok_s, 4)
        if outcome.at_error is not None:
            extra["at_error"] = outcome.at_error
        if outcome.http_status is not None and not 100 <= outcome.http_status <= 599:
            extra["http_status"] = outcome.http_status  # not an HTTP status an import would take: kept aside
        values = {
            "ts": outcome.started_at,  # epoch seconds, as UTC
            "ok": outcome.ok,
            "http_status": outcome.http_status
            if outcome.http_status is None or 100 <= outcome.http_status <= 599
            else None,
            "error": storable_text(outcome.error[:MAX_ERROR_CHARS]) or None,
            "error_type": outcome.error_type or None,
            "prompt_tokens": self._prompt_tokens(index, outcome),
            "n_predict": self.run.job.params.get("n_predict") if self.run.job else None,
            "output_tokens": outcome.output_tokens,
            "tok_s": outcome.tok_s,
            "elapsed_s": outcome.elapsed_s,
            "ttft_s": outcome.ttft_s,
        }
        # Stored as the import of this run's own export would store it, so that import finds it.
        values, digest = request_identity(values, extra)
        occurrence = self.occurrences.get(digest, 0)
        self.occurrences[digest] = occurrence + 1
        RequestResult.objects.create(
            run=self.run,
            seq=self.seq,
            **{k: ("" if v is None and k in ("error", "error_type") else v) for k, v in values.items()},
            extra=extra,
            content_hash=digest,
            occurrence=occurrence,
            itl_s=outcome.itl_s,
        )
        self.seq += 1

    def _prompt_tokens(self, index: int, outcome: Outcome) -> int | None:
        """The prompt's length as sent; else what the server's answer said (timings.prompt_n, or a 400's count)."""
        if self.prompt_lengths:
            return self.prompt_lengths[index % len(self.prompt_lengths)]
        return outcome.prompt_tokens


def _progress(job: Job, outcome: Outcome, wave: _Wave) -> None:
    # live is rewritten with the count: a finished request's tokens move into tokens_out at once.
    updates: dict[str, Any] = {"n_done": F("n_done") + 1, "heartbeat_at": timezone.now(), "live": wave.live()}
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
