"""An aiohttp app served on 127.0.0.1 (a free port) by its own event loop on a background thread:
the lifecycle the tests' stand-ins share (fake_server's misbehaving server, relay's pass-through)."""

from __future__ import annotations

import asyncio
import threading
from typing import Self

from aiohttp import web


class ThreadedSite:
    name = "site"  # the thread's name, and the error's when it cannot start

    def __init__(self) -> None:
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def app(self) -> web.Application:
        """The routes, built on the site's own loop."""
        raise NotImplementedError

    async def on_start(self) -> None:
        """What the site needs on its loop before it serves."""

    async def before_cleanup(self) -> None:
        """Run on the site's loop when it stops, before its connections are closed."""

    async def after_cleanup(self) -> None:
        """Run on the site's loop when it stops, after its connections are closed."""

    def start(self) -> Self:
        started = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._start_site())
            except BaseException as exc:  # reported to start()
                failure.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=serve, name=self.name, daemon=True)
        self._thread.start()
        if not started.wait(timeout=10) or failure:
            raise RuntimeError(f"the {self.name} did not start: {failure}")
        return self

    async def _start_site(self) -> None:
        await self.on_start()
        self._runner = web.AppRunner(self.app(), shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._stop_site(), loop).result(timeout=15)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)

    async def _stop_site(self) -> None:
        assert self._runner is not None
        await self.before_cleanup()
        await self._runner.cleanup()
        await self.after_cleanup()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
