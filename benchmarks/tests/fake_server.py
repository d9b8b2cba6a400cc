"""A misbehaving llama-server stand-in, for fault-injection tests only.

It listens on 127.0.0.1 (a free port), runs its own event loop on a background
thread, and stops itself when the test ends. Every handler is bounded in time: one
that holds a connection waits at most `max_hold_s`, or until `stop()`.

A POST to /completion picks its behaviour from the path (`/<behaviour>/completion`,
so a base URL of `http://127.0.0.1:PORT/<behaviour>` selects it for every request),
else from the JSON body's `prompt` when that is a behaviour's name (so one job can
mix behaviours request by request), else `normal`. `n_predict` sets the number of
tokens; `fake_first_token_delay_s` (JSON) delays the first token, with keep-alive
lines and empty events sent meanwhile. It also answers /health, /props, /slots,
/metrics (501, as without --metrics) and /tokenize, so execute_job can run a job.

Never use it as a model of a correct server: the real one is pinned by the
llama_server tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from .threaded_site import ThreadedSite

KEEP_ALIVE = b": keep-alive\n\n"
CONTEXT_EXCEEDED = {"code": 500, "type": "server_error", "message": "Context size has been exceeded."}
EXCEED_CONTEXT_SIZE = {
    "code": 400,
    "type": "exceed_context_size_error",
    "message": "request (900 tokens) exceeds the available context size (768 tokens), try increasing it",
    "n_prompt_tokens": 900,
    "n_ctx": 768,
}
DRIP_INTERVAL_S = 0.2

BEHAVIOURS = (
    "normal",  # N token events, keep-alives interleaved, a final chunk with timings
    "ctx500",  # HTTP 500 "Context size has been exceeded."
    "ctx400",  # HTTP 400 exceed_context_size_error with n_prompt_tokens / n_ctx
    "error_text",  # HTTP 502 with a plain-text body
    "error_event",  # 200, two tokens, then a context-exceeded error event; no final chunk
    "error_event_other",  # 200, then an error event that is not about the context (503)
    "disconnect",  # 200, two tokens, then the connection is closed (chunked body unfinished)
    "truncated",  # 200, two tokens, then a clean end of body without a final chunk
    "hang",  # never answers: no status line, the connection held open
    "stall",  # 200 and one token, then nothing more, connection held
    "drip",  # 200, then a valid-looking stream one byte every 0.2 s, forever
    "drip_headers",  # the status line and headers themselves, one byte every 0.2 s
    "garbage",  # 200, a data line that is not JSON
    "not_sse",  # 200, an HTML page instead of an event stream
    "huge",  # 200, token events without end (1 KiB each, up to huge_bytes)
    "huge_line",  # 200, one data line of huge_bytes without a newline
    "redirect",  # 302 to /redirected/completion on this same server (a normal stream there)
    "no_timings",  # 200, tokens, a final chunk without timings
    "array",  # 200, events that are JSON arrays
)


@dataclass(frozen=True)
class Hit:
    path: str
    behaviour: str
    host: str
    prompt: Any


class FakeServer(ThreadedSite):
    name = "fake llama-server"

    def __init__(self, *, max_hold_s: float = 20.0, huge_bytes: int = 4 * 1024 * 1024) -> None:
        super().__init__()
        self.max_hold_s = max_hold_s
        self.huge_bytes = huge_bytes
        self.hits: Counter[str] = Counter()  # every request's path
        self.completions: list[Hit] = []  # every /completion request, in arrival order
        self._stopping: asyncio.Event | None = None

    def url_for(self, behaviour: str) -> str:
        assert behaviour in BEHAVIOURS, behaviour
        return f"{self.url}/{behaviour}"

    # -- lifecycle (ThreadedSite) ------------------------------------------------

    async def on_start(self) -> None:
        self._stopping = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/props", self._props)
        app.router.add_get("/slots", self._slots)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/completion", self._completion)
        app.router.add_post("/{behaviour}/completion", self._completion)
        return app

    async def before_cleanup(self) -> None:
        assert self._stopping is not None
        self._stopping.set()  # every held connection lets go

    def hits_for(self, behaviour: str) -> int:
        return sum(1 for hit in self.completions if hit.behaviour == behaviour)

    # -- the endpoints a job needs -----------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        self.hits[request.path] += 1
        return web.json_response({"status": "ok"})

    async def _props(self, request: web.Request) -> web.Response:
        self.hits[request.path] += 1
        return web.json_response(
            {
                "build_info": "b0-fake",
                "model_path": "/models/fake-fault-injector.gguf",
                "total_slots": 4,
                "default_generation_settings": {"n_ctx": 4096},
            }
        )

    async def _slots(self, request: web.Request) -> web.Response:
        self.hits[request.path] += 1
        return web.json_response([{"id": i, "n_ctx": 4096, "is_processing": False} for i in range(4)])

    async def _metrics(self, request: web.Request) -> web.Response:
        self.hits[request.path] += 1
        return web.json_response({"error": {"code": 501, "message": "metrics are not enabled"}}, status=501)

    async def _tokenize(self, request: web.Request) -> web.Response:
        self.hits[request.path] += 1
        body = await request.json()
        return web.json_response({"tokens": list(range(len(str(body.get("content", "")).split())))})

    # -- /completion -------------------------------------------------------------

    async def _completion(self, request: web.Request) -> web.StreamResponse:
        self.hits[request.path] += 1
        try:
            body = await request.json()
        except ValueError:
            body = {}
        prompt = body.get("prompt") if isinstance(body, dict) else None
        behaviour = request.match_info.get("behaviour")
        if behaviour is None:
            behaviour = prompt if isinstance(prompt, str) and prompt in BEHAVIOURS else "normal"
        elif behaviour not in (*BEHAVIOURS, "redirected"):
            raise web.HTTPNotFound()
        self.completions.append(Hit(request.path, behaviour, request.host, prompt))
        handler = getattr(self, f"_do_{behaviour}")
        try:
            return await handler(request, body)
        except ConnectionError:
            # The client went away (a cap or a deadline): nothing more to send.
            return web.Response(status=499)

    async def _hold(self, seconds: float | None = None) -> None:
        assert self._stopping is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds or self.max_hold_s)

    def _stopped(self) -> bool:
        return self._stopping is not None and self._stopping.is_set()

    async def _event_stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        return response

    @staticmethod
    def _event(data: Any) -> bytes:
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    @staticmethod
    def _token(i: int) -> dict[str, Any]:
        return {"index": 0, "content": f"t{i} ", "tokens": [1000 + i], "stop": False}

    async def _do_normal(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        n = int(body.get("n_predict") or 5)
        delay = float(body.get("fake_first_token_delay_s") or 0)
        prompt = body.get("prompt")
        prompt_n = len(prompt) if isinstance(prompt, list) else len(str(prompt or "").split())
        response = await self._event_stream(request)
        await response.write(KEEP_ALIVE)  # before the first token: must not count for TTFT
        waited_until = time.monotonic() + delay
        while time.monotonic() < waited_until:
            await response.write(self._event({"index": 0, "content": "", "stop": False}))  # an empty event
            await asyncio.sleep(min(0.05, max(0.0, waited_until - time.monotonic())))
            await response.write(KEEP_ALIVE)
        started = time.monotonic()
        for i in range(n):
            await response.write(self._event(self._token(i)))
            await response.write(KEEP_ALIVE)
            await asyncio.sleep(0.002)
        predicted_ms = (time.monotonic() - started) * 1000
        timings = {
            "prompt_n": prompt_n,
            "prompt_ms": 1.0,
            "prompt_per_second": prompt_n * 1000.0,
            "predicted_n": n,
            "predicted_ms": predicted_ms,
            "predicted_per_second": (n - 1) / predicted_ms * 1000 if n > 1 and predicted_ms > 0 else 0.0,
            "cache_n": 0,
        }
        final = {"index": 0, "content": "", "stop": True, "stop_type": "limit", "truncated": False}
        await response.write(self._event({**final, "tokens_cached": prompt_n + n, "timings": timings}))
        await response.write_eof()
        return response

    async def _do_redirected(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        return await self._do_normal(request, body)

    async def _do_ctx500(self, request: web.Request, body: dict[str, Any]) -> web.Response:
        return web.json_response({"error": CONTEXT_EXCEEDED}, status=500)

    async def _do_ctx400(self, request: web.Request, body: dict[str, Any]) -> web.Response:
        return web.json_response({"error": EXCEED_CONTEXT_SIZE}, status=400)

    async def _do_error_text(self, request: web.Request, body: dict[str, Any]) -> web.Response:
        return web.Response(status=502, text="Bad Gateway: upstream llama-server is restarting")

    async def _two_tokens(self, request: web.Request) -> web.StreamResponse:
        response = await self._event_stream(request)
        for i in range(2):
            await response.write(self._event(self._token(i)))
        return response

    async def _do_error_event(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        response = await self._two_tokens(request)
        await response.write(self._event({"error": CONTEXT_EXCEEDED}))
        await response.write_eof()
        return response

    async def _do_error_event_other(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        response = await self._event_stream(request)
        await response.write(self._event({"error": {"code": 503, "type": "unavailable_error", "message": "Loading"}}))
        await response.write_eof()
        return response

    async def _do_disconnect(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        await self._two_tokens(request)
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.close()  # the chunked body never gets its terminating chunk
        raise ConnectionResetError("closed mid-stream on purpose")

    async def _do_truncated(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        response = await self._two_tokens(request)
        await response.write_eof()
        return response

    async def _do_hang(self, request: web.Request, body: dict[str, Any]) -> web.Response:
        await self._hold()
        return web.Response(status=503, text="held until the test ended")

    async def _do_stall(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        response = await self._event_stream(request)
        await response.write(self._event(self._token(0)))
        await self._hold()
        return response

    async def _do_drip(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        response = await self._event_stream(request)
        pattern = KEEP_ALIVE + self._event(self._token(0))
        deadline = time.monotonic() + self.max_hold_s
        for byte in itertools.cycle(pattern):
            if self._stopped() or time.monotonic() > deadline:
                break
            await response.write(bytes([byte]))
            await asyncio.sleep(DRIP_INTERVAL_S)
        return response

    async def _do_drip_headers(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        transport = request.transport
        assert transport is not None
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Padding: " + b"x" * 10_000
        deadline = time.monotonic() + self.max_hold_s
        for byte in head:
            if self._stopped() or time.monotonic() > deadline or transport.is_closing():
                break
            transport.write(bytes([byte]))
            await asyncio.sleep(DRIP_INTERVAL_S)
        transport.close()
        raise ConnectionResetError("raw bytes written; no response object to send")

    async def _do_garbage(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        response = await self._event_stream(request)
        await response.write(KEEP_ALIVE + b"data: this is not json {\n\n")
        await response.write(self._event({"content": "", "stop": True, "timings": {}}))
        await response.write_eof()
        return response

    async def _do_not_sse(self, request: web.Request, body: dict[str, Any]) -> web.Response:
        return web.Response(status=200, content_type="text/html", text="<html><body>Welcome to nginx!</body></html>")

    async def _do_huge(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        response = await self._event_stream(request)
        event = self._event({"index": 0, "content": "x" * 1024, "stop": False})
        sent = 0
        while sent < self.huge_bytes and not self._stopped():
            await response.write(event)
            sent += len(event)
        await response.write_eof()
        return response

    async def _do_huge_line(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        response = await self._event_stream(request)
        await response.write(b'data: {"index": 0, "content": "')
        chunk = b"x" * 65536
        sent = 0
        while sent < self.huge_bytes and not self._stopped():
            await response.write(chunk)
            sent += len(chunk)
        await response.write(b'", "stop": false}\n\n')
        await response.write_eof()
        return response

    async def _do_redirect(self, request: web.Request, body: dict[str, Any]) -> web.Response:
        return web.Response(status=302, headers={"Location": f"{self.url}/redirected/completion"})

    async def _do_no_timings(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        response = await self._two_tokens(request)
        await response.write(self._event({"index": 0, "content": "", "stop": True}))
        await response.write_eof()
        return response

    async def _do_array(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        response = await self._event_stream(request)
        await response.write(b"data: [1, 2, 3]\n\n")
        await response.write(self._event({"content": "", "stop": True, "timings": {}}))
        await response.write_eof()
        return response


class TruthServer(FakeServer):
    """The fault injector, with its tokenizer also under a behaviour's path (so a job on
    `url_for("ctx500")` can ask for a synthetic prompt), and, with `interval_s`, its normal
    stream paced like a slow GPU: a token every interval_s."""

    interval_s: float | None = None

    async def _start_site(self) -> None:
        self._stopping = asyncio.Event()
        app = web.Application()
        for path, get in [("/health", self._health), ("/props", self._props), ("/slots", self._slots)]:
            app.router.add_get(path, get)
        app.router.add_get("/metrics", self._metrics)
        for prefix in ("", "/{behaviour}"):
            app.router.add_post(f"{prefix}/tokenize", self._tokenize)
            app.router.add_post(f"{prefix}/completion", self._completion)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _do_normal(self, request, body):
        if self.interval_s is None:
            return await super()._do_normal(request, body)
        n = int(body.get("n_predict") or 5)
        prompt = body.get("prompt")
        response = await self._event_stream(request)
        started = time.monotonic()
        await asyncio.sleep(0.1)  # prompt processing
        for i in range(n):
            if self._stopped():
                return response
            await response.write(self._event(self._token(i)))
            await asyncio.sleep(self.interval_s)
        ms = (time.monotonic() - started) * 1000
        prompt_n = len(prompt) if isinstance(prompt, list) else len(str(prompt or "").split())
        timings = {"prompt_n": prompt_n, "predicted_n": n, "predicted_ms": ms, "predicted_per_second": n / ms * 1000}
        await response.write(self._event({"index": 0, "content": "", "stop": True, "timings": timings}))
        await response.write_eof()
        return response


class PacedServer(TruthServer):
    interval_s = 0.02
