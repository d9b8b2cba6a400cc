"""A relay in front of a real llama-server, for fault-injection tests only.

Every request is passed on to the real server and its answer passed back as it comes (a
stream event by event), except what the test asks the relay to change:
- `hide_props`: GET /props answers 404, as a gateway that routes only some paths would,
  so the server's slots and context size cannot be read;
- `fail_after_events` with `fail_message`: a /completion stream is cut after that many
  events by an error event of code 500 with that message: a 500 of the server's shape that
  is not a full pool.

It listens on 127.0.0.1 (a free port), runs its own event loop on a background thread and
stops when the test's block ends. What the server under test does is never invented here.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import aiohttp
from aiohttp import web

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"}


class Relay:
    def __init__(
        self,
        upstream: str,
        *,
        hide_props: bool = False,
        fail_after_events: int | None = None,
        fail_message: str = "",
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.hide_props = hide_props
        self.fail_after_events = fail_after_events
        self.fail_message = fail_message
        self.props_asked = 0
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Relay:
        started = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._start())
            except BaseException as exc:  # reported to __enter__
                failure.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=serve, name="relay", daemon=True)
        self._thread.start()
        if not started.wait(timeout=10) or failure:
            raise RuntimeError(f"the relay did not start: {failure}")
        return self

    def __exit__(self, *exc: object) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._stop(), loop).result(timeout=15)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300), auto_decompress=False)
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._relay)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _stop(self) -> None:
        assert self._runner is not None and self._session is not None
        await self._runner.cleanup()
        await self._session.close()

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/props":
            self.props_asked += 1
            if self.hide_props:
                return web.Response(status=404, text="Not Found")
        assert self._session is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=body, headers=headers, allow_redirects=False
        ) as upstream:
            response = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS},
            )
            await response.prepare(request)
            cut = self.fail_after_events if request.path == "/completion" else None
            events = 0
            async for line in upstream.content:
                if cut is not None and line.startswith(b"data:"):
                    if events >= cut:
                        await response.write(self._error_event())
                        break
                    events += 1
                await response.write(line)
            await response.write_eof()
            return response

    def _error_event(self) -> bytes:
        error: dict[str, Any] = {"code": 500, "type": "server_error", "message": self.fail_message}
        return b"data: " + json.dumps({"error": error}).encode() + b"\n\n"
