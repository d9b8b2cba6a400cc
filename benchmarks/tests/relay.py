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

import json
from typing import Any

import aiohttp
from aiohttp import web

from .threaded_site import ThreadedSite

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"}


class Relay(ThreadedSite):
    name = "relay"

    def __init__(
        self,
        upstream: str,
        *,
        hide_props: bool = False,
        fail_after_events: int | None = None,
        fail_message: str = "",
    ) -> None:
        super().__init__()
        self.upstream = upstream.rstrip("/")
        self.hide_props = hide_props
        self.fail_after_events = fail_after_events
        self.fail_message = fail_message
        self.props_asked = 0
        self._session: aiohttp.ClientSession | None = None

    async def on_start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300), auto_decompress=False)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._relay)
        return app

    async def after_cleanup(self) -> None:
        assert self._session is not None
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
