"""The telemetry sampler against the real llama-server on a tiny model while real streamed requests
run, and against a misbehaving stand-in for the faults a real server will not produce on demand.

No database: the sampler and its series are plain code on the job's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from benchmarks.jobs.client.stream import Progress, session_for, stream_completion
from benchmarks.jobs.client.target import resolve_target
from benchmarks.jobs.telemetry import sampler
from benchmarks.jobs.telemetry.gpu import Gpus
from benchmarks.jobs.telemetry.sampler import endpoints_from_probe, parse_metrics, sample, slim_slots
from benchmarks.jobs.telemetry.series import Series
from benchmarks.records.storable import check_json

from ...real_parts import live_llama_server

PERIOD_S = 0.05  # faster than a job's 0.25 s: more samples in a short decode
PROMPT = "The quick brown fox jumps over the lazy dog. " * 8
SOURCES = {"slots": "not asked yet", "metrics": "not asked yet", "gpu": "not asked yet"}
PER_SLOT = ["-np", "3", "--no-kv-unified", "-c", "3072", "-t", "1"]  # 1,024 cells per slot


def new_series() -> Series:
    return Series(PERIOD_S, None, dict(SOURCES))


async def wave(url: str, series: Series, endpoints: dict[str, Any], *, n: int = 3, n_predict: int = 400) -> list:
    """n concurrent streamed requests, as a job sends them, with the sampler beside them."""
    target = resolve_target(url)
    progress = [Progress() for _ in range(n)]
    payload = {"prompt": PROMPT, "n_predict": n_predict, "ignore_eos": True, "cache_prompt": False}
    stop = asyncio.Event()
    t0 = time.perf_counter()
    task = asyncio.create_task(
        sample(
            target,
            "",
            series,
            stop,
            t0=t0,
            period_s=PERIOD_S,
            endpoints=endpoints,
            tokens_out=lambda: sum(p.tokens for p in progress),
        )
    )
    async with session_for(target, limit=n) as session:
        outcomes = await asyncio.gather(
            *(stream_completion(session, target, payload, deadline_s=60, progress=p) for p in progress)
        )
    stop.set()
    started = time.perf_counter()
    await asyncio.wait_for(task, 2)
    assert time.perf_counter() - started < sampler.REQUEST_TIMEOUT_S + 0.3  # it stops promptly
    assert task.result() is None
    return outcomes


def stored(series: Series) -> dict:
    data = series.snapshot()
    check_json(data, "telemetry")
    return data


def assert_gpu_source(data: dict) -> None:
    gpu = data["sources"]["gpu"]
    if gpu == "ok":  # a worker with an NVIDIA GPU: one row per GPU
        assert data["gpu"]["names"] and all(m is not None for m in data["gpu"]["mem_mib"][0])
    else:
        assert gpu.startswith("none seen: ") and len(gpu) > len("none seen: ")
        assert "gpu" not in data


def assert_slots_fill_while_busy(data: dict, n_predict: int) -> None:
    """Slots busy together, each one's cells rising while it decodes, within its 1,024 cells."""
    all_busy = [k for k, mask in enumerate(data["busy"]) if mask == 0b111]
    assert len(all_busy) >= 3, data["busy"]
    for column in data["cells"]:
        held = [column[k] for k in all_busy]
        assert held == sorted(held) and held[-1] > held[0], held  # rising, never falling, while busy
        assert 0 < max(column) <= 1024
    assert data["peak"]["from"] == "samples"
    assert data["peak"]["pool"] == max(sum(c[k] for c in data["cells"]) for k in range(len(data["t"])))
    assert max(data["peak"]["slots"]) > n_predict // 4  # the prompt and a good part of the decode
    tokens = [v for v in data["tokens_out"] if v is not None]
    assert tokens == sorted(tokens) and tokens[-1] > 0
    assert data["t"] == sorted(data["t"]) and data["samples"] == len(data["t"])


@pytest.mark.llama_server
def test_three_streams_fill_three_slots_and_metrics_count_them(llama_server_binary: Path, tiny_models: dict) -> None:
    series = new_series()
    with live_llama_server(llama_server_binary, tiny_models["llama"], [*PER_SLOT, "--metrics"]) as url:
        outcomes = asyncio.run(wave(url, series, {"slots": True, "metrics": True}))
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    data = stored(series)
    assert data["sources"]["slots"] == "ok" and data["sources"]["metrics"] == "ok"
    assert_gpu_source(data)
    assert_slots_fill_while_busy(data, 400)
    assert len(data["cells"]) == 3
    assert 3 in data["processing"] and set(data["deferred"]) <= {0, None}
    assert len(data["processing"]) == len(data["deferred"]) == len(data["t"])


@pytest.mark.llama_server
def test_requests_beyond_the_slots_are_counted_as_deferred(llama_server_binary: Path, tiny_models: dict) -> None:
    series = new_series()
    with live_llama_server(llama_server_binary, tiny_models["llama"], [*PER_SLOT, "--metrics"]) as url:
        outcomes = asyncio.run(wave(url, series, {"slots": True, "metrics": True}, n=5, n_predict=300))
    assert all(o.ok for o in outcomes)
    data = stored(series)
    assert max(d for d in data["deferred"] if d is not None) == 2
    assert max(p for p in data["processing"] if p is not None) == 3


@pytest.mark.llama_server
def test_without_metrics_the_slots_are_still_sampled(llama_server_binary: Path, tiny_models: dict) -> None:
    series = new_series()
    with live_llama_server(llama_server_binary, tiny_models["llama"], PER_SLOT) as url:
        # endpoints unknown: the sampler asks /metrics once, hears 501, and stops asking
        outcomes = asyncio.run(wave(url, series, {"slots": None, "metrics": None}))
    assert all(o.ok for o in outcomes)
    data = stored(series)
    assert data["sources"]["slots"] == "ok"
    assert data["sources"]["metrics"] == "off: HTTP 501 (start llama-server with --metrics)"
    assert "processing" not in data and "deferred" not in data
    assert_slots_fill_while_busy(data, 400)


@pytest.mark.llama_server
def test_with_no_slots_the_job_goes_on_and_metrics_are_sampled(llama_server_binary: Path, tiny_models: dict) -> None:
    series = new_series()
    flags = [*PER_SLOT, "--metrics", "--no-slots"]
    with live_llama_server(llama_server_binary, tiny_models["llama"], flags) as url:
        outcomes = asyncio.run(wave(url, series, {"slots": None, "metrics": True}))
    assert all(o.ok for o in outcomes)
    data = stored(series)
    assert data["sources"]["slots"].startswith("off: HTTP 501"), data["sources"]
    assert data["sources"]["metrics"] == "ok"
    assert data["cells"] == [] and set(data["busy"]) == {None}
    assert 3 in data["processing"]
    assert data["peak"] == {"pool": None, "pool_t": None, "slots": [], "from": "samples"}


@pytest.mark.llama_server
def test_what_the_probe_said_is_not_asked_again(llama_server_binary: Path, tiny_models: dict) -> None:
    series = new_series()
    with live_llama_server(llama_server_binary, tiny_models["llama"], PER_SLOT) as url:
        from benchmarks.jobs.client.probe import probe

        endpoints = endpoints_from_probe(probe(resolve_target(url)))
        assert endpoints == {"slots": True, "metrics": False}
        asyncio.run(wave(url, series, endpoints, n_predict=100))
    data = stored(series)
    assert data["sources"]["metrics"].startswith("off: the server said so at the start")
    assert data["sources"]["slots"] == "ok"


# -- faults: a stand-in server --------------------------------------------------------


@contextlib.asynccontextmanager
async def stand_in(handler: Callable[[web.Request], Any]) -> AsyncIterator[str]:
    """A server on 127.0.0.1 answering every GET with handler, in this event loop."""
    app = web.Application()
    app.router.add_get("/{path:.*}", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def sample_for(url: str, seconds: float, series: Series, **kwargs: Any) -> float:
    """Run the sampler for `seconds`, then stop it; how long it took to stop."""
    stop = asyncio.Event()
    task = asyncio.create_task(
        sample(resolve_target(url), "", series, stop, t0=time.perf_counter(), period_s=PERIOD_S, **kwargs)
    )
    await asyncio.sleep(seconds)
    stop.set()
    started = time.perf_counter()
    await asyncio.wait_for(task, 3)
    return time.perf_counter() - started


HEALTHY_SLOTS = b'[{"id": 0, "n_ctx": 1024, "is_processing": true, "n_prompt_tokens": 300, "params": {}}]'
HEALTHY_METRICS = b"# HELP x\nllamacpp:requests_processing 1\nllamacpp:requests_deferred 0\n"


def test_a_server_that_hangs_is_given_up_on_and_stop_is_prompt() -> None:
    seen: list[str] = []

    async def hang(request: web.Request) -> web.Response:
        seen.append(request.path)
        await asyncio.sleep(30)
        return web.Response(text="late")

    async def go() -> tuple[float, float]:
        series = new_series()
        async with stand_in(hang) as url:
            # a request in flight when stop comes is abandoned at once (and its sample with it)
            stop_s = await sample_for(url, 0.7, series, endpoints={"slots": True, "metrics": None}, gpu=False)
            assert series.snapshot()["samples"] == 0
            assert series.snapshot()["sources"] == {
                "slots": "not read: the wave ended before the first answer",
                "metrics": "not read: the wave ended before the first answer",
                "gpu": "off: not asked",
            }
            seen.clear()
            series2 = new_series()
            long_stop_s = await sample_for(url, 4.5, series2, endpoints={"slots": True, "metrics": True}, gpu=False)
            data2 = stored(series2)
        expected = f"failed: no answer within {sampler.REQUEST_TIMEOUT_S:g} s (3 times in a row; not asked again after"
        assert data2["sources"]["slots"].startswith(expected)
        assert data2["sources"]["metrics"].startswith(expected)
        assert data2["sources"]["gpu"] == "off: not asked"
        assert data2["samples"] >= 4  # it goes on sampling (tokens out), with null points
        return stop_s, long_stop_s

    stop_s, long_stop_s = asyncio.run(go())
    # abandoned, not waited for: stopping takes less than the request's own timeout would have
    assert stop_s < sampler.REQUEST_TIMEOUT_S and long_stop_s < sampler.REQUEST_TIMEOUT_S
    assert seen.count("/slots") == seen.count("/metrics") == sampler.MAX_FAILURES  # then no longer asked


@pytest.mark.parametrize(
    ("slots_body", "metrics_body", "status", "slots_source", "metrics_source"),
    [
        (b"<html>not json</html>", b"not prometheus", 200, "failed: ", "failed: the answer holds no llamacpp"),
        (b'{"id": 0}', HEALTHY_METRICS, 200, "failed: the answer is not a list of slots", "ok"),
        (b"[" * 5000 + b"]" * 5000, HEALTHY_METRICS, 200, "failed: ", "ok"),
        (b"[" * 100 + b"]" * 100, HEALTHY_METRICS, 200, "failed: nested more than 64 levels", "ok"),  # orjson reads it
        (b"boom", b"boom", 500, "failed: HTTP 500", "failed: HTTP 500"),
        (b"", b"", 404, "off: HTTP 404", "off: HTTP 404"),
        (b"", b"", 401, "off: HTTP 401 (the API key was refused)", "off: HTTP 401 (the API key was refused)"),
    ],
    ids=["garbage", "object", "deep", "deep-for-kvlab", "500", "404", "401"],
)
def test_bad_answers_are_recorded_once_and_never_raise(
    slots_body: bytes, metrics_body: bytes, status: int, slots_source: str, metrics_source: str
) -> None:
    hits: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        hits.append(request.path)
        body = slots_body if request.path == "/slots" else metrics_body
        return web.Response(body=body, status=status)

    async def go() -> dict:
        series = new_series()
        async with stand_in(answer) as url:
            await sample_for(url, 0.6, series, endpoints={"slots": None, "metrics": None}, gpu=False)
        return stored(series)

    data = asyncio.run(go())
    assert data["sources"]["slots"].startswith(slots_source), data["sources"]
    assert data["sources"]["metrics"].startswith(metrics_source), data["sources"]
    assert hits.count("/slots") <= sampler.MAX_FAILURES
    assert data["samples"] >= 5


def test_junk_values_in_good_answers_never_break_the_series() -> None:
    slots = (
        b'[{"id": -1, "n_prompt_tokens": -7, "is_processing": "yes"}, {"id": 1, "n_prompt_tokens": 1e400},'
        b' {"id": 2, "n_prompt_tokens": "\\u0000", "is_processing": true, "params": {"a": [1, {"b": null}]}},'
        b' 17, null, {"id": 99999999999999999999999, "n_prompt_tokens": 5}]'
    )
    metrics = b'llamacpp:requests_processing NaN\nllamacpp:requests_deferred -3\nllamacpp:bad{x="a b"} 2\n'

    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=slots if request.path == "/slots" else metrics)

    async def go() -> dict:
        series = new_series()
        async with stand_in(answer) as url:
            await sample_for(url, 0.4, series, endpoints={"slots": True, "metrics": True}, gpu=False)
        return stored(series)

    data = asyncio.run(go())
    assert data["sources"]["slots"] == "ok" and data["sources"]["metrics"] == "ok"
    assert data["cells"][:3] == [[0] * len(data["t"])] * 3
    assert set(data["busy"]) == {0b100}
    assert set(data["deferred"]) == {None} and set(data["processing"]) == {None}


def test_a_refused_connection_ends_as_failed_sources() -> None:
    from kvlab.tests.processes import free_port

    async def go() -> dict:
        series = new_series()
        await sample_for(f"http://127.0.0.1:{free_port()}", 0.5, series, endpoints={}, gpu=False)
        return stored(series)

    data = asyncio.run(go())
    assert data["sources"]["slots"].startswith("failed: Cannot connect") or "failed: " in data["sources"]["slots"]
    assert data["sources"]["metrics"].startswith("failed: ")


# -- the pieces -----------------------------------------------------------------------


def test_prometheus_text_gives_the_llamacpp_values() -> None:
    text = (
        "# HELP llamacpp:requests_processing Number of requests processing.\n"
        "# TYPE llamacpp:requests_processing gauge\n"
        "llamacpp:requests_processing 3\n"
        "llamacpp:requests_deferred 2\n"
        'llamacpp:labelled{slot="0 1"} 4.5 1700000000\n'
        "llamacpp:predicted_tokens_seconds 681.291\n"
        "llamacpp:weird +Inf\n"
        "other:metric 9\n"
    )
    assert parse_metrics(text) == {
        "requests_processing": 3.0,
        "requests_deferred": 2.0,
        "labelled": 4.5,
        "predicted_tokens_seconds": 681.291,
    }


def test_slots_keep_only_what_the_series_reads() -> None:
    slots = [{"id": 0, "n_ctx": 1024, "is_processing": True, "n_prompt_tokens": 5, "params": {"x": 1}}, "junk"]
    assert slim_slots(slots) == [{"id": 0, "n_ctx": 1024, "is_processing": True, "n_prompt_tokens": 5}, {}]
    assert slim_slots({"not": "a list"}) is None


def test_endpoints_from_the_probe() -> None:
    assert endpoints_from_probe({"slots": [], "metrics_enabled": False}) == {"slots": True, "metrics": False}
    assert endpoints_from_probe({"props": {"endpoint_slots": False, "endpoint_metrics": True}}) == {
        "slots": False,
        "metrics": True,
    }
    assert endpoints_from_probe(None) == {"slots": None, "metrics": None}


def test_no_gpu_here_is_said_not_raised() -> None:
    gpus = Gpus()
    source = gpus.open()
    if source != "ok":
        assert source.startswith("none seen: ")
        assert gpus.read() is None
    else:
        rows = gpus.read()
        assert rows and rows[0]["mem_total_mib"] > 0
    gpus.close()


@pytest.mark.llama_server
def test_the_overhead_benchmark_runs_at_its_smoke_size(llama_server_binary: Path, tmp_path: Path) -> None:
    """bench/telemetry_overhead.py (make bench) end to end on the real server, so it cannot rot."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[4]
    done = subprocess.run(
        [sys.executable, str(root / "bench" / "telemetry_overhead.py"), "--smoke", "--out", str(tmp_path)]
        + ["--server", str(llama_server_binary)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "off/on alternating, 1 rounds each" in done.stdout and "decode tok/s" in done.stdout
    results = json.loads((tmp_path / "telemetry_overhead.json").read_text())
    assert [r["sampler"] for r in results["runs"]] == ["off", "on"]
    assert results["runs"][1]["samples"] >= 1 and results["runs"][0]["samples"] == 0
    assert results["decode_tok_s"]["median_off"] > 0 and results["decode_tok_s"]["median_on"] > 0
    assert results["gpu"].startswith(("ok", "none seen: "))


class StandInNvml:
    """pynvml's calls as NVML answers them on a GPU machine (this one has none: `make test-gpu`
    machines exercise the real library); one GPU whose power reading is not supported."""

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        self.used = 1024 * 1024 * 1000
        self.shut = False

    def nvmlInit(self) -> None:  # noqa: N802 — pynvml's names
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:  # noqa: N802
        return f"handle{i}"

    def nvmlDeviceGetName(self, handle: str) -> bytes:  # noqa: N802
        return b"NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Any:  # noqa: N802
        self.used += 1024 * 1024
        return type("Memory", (), {"total": 143771 * 1024 * 1024, "used": self.used})()

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Any:  # noqa: N802
        return type("Utilization", (), {"gpu": 37})()

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:  # noqa: N802
        raise self.NVMLError("Not Supported")


def test_gpu_rows_reach_the_series_from_the_sampler_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    nvml = StandInNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)

    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=HEALTHY_SLOTS if request.path == "/slots" else HEALTHY_METRICS)

    async def go() -> dict:
        series = new_series()
        async with stand_in(answer) as url:
            await sample_for(url, 0.5, series, endpoints={"slots": True, "metrics": True})
        return stored(series)

    data = asyncio.run(go())
    assert data["sources"] == {"slots": "ok", "metrics": "ok", "gpu": "ok"}
    gpu = data["gpu"]
    assert gpu["names"] == ["NVIDIA H200"] and gpu["mem_total_mib"] == [143771]
    mem = [m for m in gpu["mem_mib"][0] if m is not None]
    assert len(mem) >= 3 and mem == sorted(mem) and mem[0] >= 1001  # read at each sample
    assert set(gpu["util_pct"][0]) <= {37, None} and 37 in gpu["util_pct"][0]
    assert set(gpu["power_w"][0]) == {None}  # not supported: said as null, the rest kept
    time.sleep(0.1)
    assert nvml.shut  # closed after the wave, on the sampler's own thread
