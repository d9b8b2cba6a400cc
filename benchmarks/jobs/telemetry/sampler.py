"""Sampling a llama-server while a wave runs: /slots, /metrics and the worker's GPUs, a few times
a second, into a Series.

It runs as a task in the event loop of the requests it watches, with its own aiohttp session
(one connection at a time, each call within 0.5 s) made by the same helper as the requests,
so the target's checked address, the fixed resolver and the API key apply here too. NVML
calls (gpu.py) block, so they run in a thread of the sampler's own.

It never raises. An endpoint the server does not offer (/slots under --no-slots, /metrics
without --metrics: HTTP 501, or /props said so at the start) is recorded once as "off: …"
and not asked again; an endpoint that fails MAX_FAILURES times in a row (timeouts, 5xx,
bodies that are not what they should be) is recorded as "failed: …" and not asked again;
a single failure is a null point in the series. It stops within one request's timeout
once `stop` is set, and at once when the request in flight can be abandoned.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
import aiohttp.http_exceptions

from kvlab import bounded_parse

from ..client.stream import session_for
from ..client.target import Target
from .gpu import Gpus
from .series import Series

PERIOD_S = 0.25
REQUEST_TIMEOUT_S = 0.5
MAX_BODY = 4 * 1024 * 1024
MAX_FAILURES = 3  # in a row, before an endpoint is no longer asked
MAX_METRICS = 200  # llamacpp: series kept from one /metrics answer
SLOT_FIELDS = ("id", "n_ctx", "is_processing", "n_prompt_tokens")  # what the series reads; `params` is dropped
OFF_HINTS = {
    "slots": "llama-server was started with --no-slots",
    "metrics": "start llama-server with --metrics",
}


class _Unavailable(Exception):
    """The endpoint is not offered (it answered 4xx/501): stop asking."""


def endpoints_from_probe(probe: dict[str, Any] | None) -> dict[str, bool | None]:
    """{"slots", "metrics"} → True / False / None (unknown: ask) from the probe made at the job's start
    (client/probe.py: "slots" present when /slots answered, "metrics_enabled") or /props' own
    endpoint_slots / endpoint_metrics."""
    probe = probe if isinstance(probe, dict) else {}
    found = probe.get("props")
    props: dict[str, Any] = found if isinstance(found, dict) else {}
    slots = props.get("endpoint_slots", probe.get("endpoint_slots"))
    metrics = props.get("endpoint_metrics", probe.get("endpoint_metrics", probe.get("metrics_enabled")))
    if slots is None and isinstance(probe.get("slots"), list):
        slots = True
    return {
        "slots": slots if isinstance(slots, bool) else None,
        "metrics": metrics if isinstance(metrics, bool) else None,
    }


def parse_metrics(text: str) -> dict[str, float]:
    """The llamacpp: samples of a Prometheus text answer, without the prefix; labels ignored."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("llamacpp:"):
            continue
        name, _, rest = line[len("llamacpp:") :].partition(" ")
        name = name.split("{", 1)[0]
        if "}" in rest:  # labels with spaces in them
            rest = rest.rsplit("}", 1)[1]
        fields = rest.split()
        if not name or not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isfinite(value) and (name in values or len(values) < MAX_METRICS):
            values[name] = value
    return values


def slim_slots(data: Any) -> list[dict[str, Any]] | None:
    """/slots' entries with only the fields the series reads (a slot's `params` is ~2 KB)."""
    if not isinstance(data, list):
        return None
    return [{k: s[k] for k in SLOT_FIELDS if k in s} if isinstance(s, dict) else {} for s in data]


def _loads(body: bytes) -> Any:
    """JSON within kvlab.bounded_parse's bounds (a Refused is a ValueError: that poll failed), fast; what
    orjson refuses (an integer past 64 bits, 1e400) through the standard parser, whose odd values the
    series then reads as "not said"."""
    return bounded_parse.loads(body, fallback=True)


class _Sampler:
    def __init__(
        self,
        target: Target,
        session: aiohttp.ClientSession,
        series: Series,
        endpoints: dict[str, Any],
    ) -> None:
        self.target = target
        self.session = session
        self.series = series
        self.asking = {name: endpoints.get(name) is not False for name in ("slots", "metrics")}
        self.failures = {"slots": 0, "metrics": 0}
        self.seen_ok = {"slots": False, "metrics": False}
        self.said = {"slots": False, "metrics": False}  # an "off"/"failed" source was set
        for name, asked in self.asking.items():
            if not asked:
                self.said[name] = True
                series.set_source(name, f"off: the server said so at the start ({OFF_HINTS[name]})")

    async def _get(self, path: str) -> bytes:
        async with self.session.get(self.target.url(path), allow_redirects=False) as response:
            if response.status in (400, 401, 403, 404, 405, 501):
                hint = OFF_HINTS["slots" if path == "/slots" else "metrics"]
                if response.status in (401, 403):
                    hint = "the API key was refused"
                raise _Unavailable(f"HTTP {response.status} ({hint})")
            if response.status != 200:
                raise ValueError(f"HTTP {response.status}")
            body = await response.content.read(MAX_BODY + 1)
            if len(body) > MAX_BODY:
                raise ValueError(f"the answer passed the {MAX_BODY // 1048576} MiB cap")
            return body

    def finish(self) -> None:
        """Every endpoint's source said, even when the wave ended before its first answer."""
        for name in ("slots", "metrics"):
            if not self.seen_ok[name] and not self.said[name]:
                self.series.set_source(name, "not read: the wave ended before the first answer")

    async def poll(self, name: str) -> Any:
        """What the endpoint says now, or None (not asked, or it failed this time)."""
        if not self.asking[name]:
            return None
        path = f"/{name}"
        try:
            body = await self._get(path)
            if name == "slots":
                value: Any = slim_slots(_loads(body))
                if value is None:
                    raise ValueError("the answer is not a list of slots")
            else:
                value = parse_metrics(body.decode("utf-8", "replace"))
                if not value:
                    raise ValueError("the answer holds no llamacpp: metrics")
        except _Unavailable as exc:
            self.asking[name] = False
            self.said[name] = True
            self.series.set_source(name, f"off: {exc}")
            return None
        except (
            aiohttp.ClientError,
            aiohttp.http_exceptions.HttpProcessingError,
            TimeoutError,
            OSError,
            ValueError,  # JSONDecodeError among them
            RecursionError,
        ) as exc:
            self.failures[name] += 1
            if self.failures[name] >= MAX_FAILURES:
                self.asking[name] = False
                self.said[name] = True
                why = str(exc) or type(exc).__name__
                if isinstance(exc, TimeoutError):
                    why = f"no answer within {REQUEST_TIMEOUT_S:g} s"
                self.series.set_source(
                    name, f"failed: {why} ({MAX_FAILURES} times in a row; not asked again after {path})"
                )
            return None
        self.failures[name] = 0
        if not self.seen_ok[name]:
            self.seen_ok[name] = True
            self.series.set_source(name, "ok")
        return value


async def sample(
    target: Target,
    api_key: str,
    series: Series,
    stop: asyncio.Event,
    *,
    t0: float,
    period_s: float = PERIOD_S,
    endpoints: dict[str, Any],
    tokens_out: Callable[[], int] | None = None,
    gpu: bool = True,
) -> None:
    """Sample every period_s until stop is set; t of each sample is time.perf_counter() - t0.

    endpoints: {"slots": bool | None, "metrics": bool | None}: False when the server said at the
    start that it does not offer one (endpoints_from_probe). tokens_out, when given, is called at
    each sample for the tokens the client has received so far. gpu False leaves NVML alone.
    Never raises; returns within about REQUEST_TIMEOUT_S of stop being set.
    """
    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvlab-nvml")
    gpus = Gpus()
    gpu_open: asyncio.Future[str] | None = None
    gpu_read: asyncio.Future[Any] | None = None
    stopping = asyncio.ensure_future(stop.wait())
    sampler: _Sampler | None = None
    try:
        if gpu:
            gpu_open = loop.run_in_executor(executor, gpus.open)
        else:
            series.set_source("gpu", "off: not asked")
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        async with session_for(target, limit=1, api_key=api_key, timeout=timeout) as session:
            sampler = _Sampler(target, session, series, endpoints)
            next_at = loop.time()
            while not stop.is_set():
                if gpu_open is not None and gpu_open.done():
                    series.set_source("gpu", _gpu_source(gpu_open))
                    gpu, gpu_open = _gpu_opened(gpu_open), None
                gpu_ok = gpu and gpu_open is None
                cycle = asyncio.ensure_future(
                    _cycle(loop, executor, sampler, gpus if gpu_ok else None, gpu_read, t0, tokens_out)
                )
                done, _ = await asyncio.wait({cycle, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if cycle not in done:
                    cycle.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await cycle
                    break
                gpu_read = cycle.result()
                next_at += period_s
                delay = next_at - loop.time()
                if delay < 0:  # behind: skip the samples missed rather than bunch them
                    next_at, delay = loop.time(), 0.0
                await asyncio.wait({stopping}, timeout=delay)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 — telemetry never fails a job; said in sources
        series.set_source("sampler", f"failed: {type(exc).__name__}: {exc}")
    finally:
        stopping.cancel()
        if sampler is not None:
            sampler.finish()
        if gpu_open is not None:
            if gpu_open.done():
                series.set_source("gpu", _gpu_source(gpu_open))
            else:
                gpu_open.cancel()
                series.set_source("gpu", "none seen: NVML did not open before the wave ended")
        executor.submit(gpus.close)  # after any read in flight: one thread, in order
        executor.shutdown(wait=False)


def _gpu_source(opened: asyncio.Future[str]) -> str:
    if opened.cancelled():
        return "none seen: not opened"
    exc = opened.exception()
    if exc is not None:
        return f"none seen: {type(exc).__name__}: {exc}"
    return opened.result()


def _gpu_opened(opened: asyncio.Future[str]) -> bool:
    return not opened.cancelled() and opened.exception() is None and opened.result() == "ok"


async def _cycle(
    loop: asyncio.AbstractEventLoop,
    executor: ThreadPoolExecutor,
    sampler: _Sampler,
    gpus: Gpus | None,
    gpu_read: asyncio.Future[Any] | None,
    t0: float,
    tokens_out: Callable[[], int] | None,
) -> asyncio.Future[Any] | None:
    """One sample into the series; returns the GPU read still running, if NVML was slow."""
    t = time.perf_counter() - t0
    if gpus is not None and gpu_read is None:
        gpu_read = loop.run_in_executor(executor, gpus.read)
    slots = await sampler.poll("slots")
    metrics = await sampler.poll("metrics")
    rows = None
    if gpu_read is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(gpu_read), REQUEST_TIMEOUT_S)
        if gpu_read.done():
            rows = None if gpu_read.cancelled() or gpu_read.exception() else gpu_read.result()
            gpu_read = None
    out = None
    if tokens_out is not None:
        try:
            out = tokens_out()
        except Exception:  # noqa: BLE001 — a caller's counter must not stop the sampling
            out = None
    sampler.series.add(t, slots, metrics, rows, tokens_out=out)
    return gpu_read
