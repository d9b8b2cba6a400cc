"""Fixtures shared by every app's tests: users and clients, the investigation imported, a real Redis, a real browser."""

from __future__ import annotations

import contextlib
import io
import ipaddress
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client

from benchmarks.history.importer import import_bench_file
from benchmarks.models import FileImport
from benchmarks.tests.browser import CHROMIUM, BrowserThread, Tab
from benchmarks.tests.investigation import FILENAME, investigation_bytes
from kvlab.tests.processes import free_port, stop_process

# The llama-server fixtures (the binaries, tiny models, a running server) serve every app's tests.
pytest_plugins = ["sizing.tests.support"]


@pytest.fixture(autouse=True)
def _empty_cache() -> Iterator[None]:
    """Each test starts with an empty cache: what one test counted (the filter choices, a login
    throttle) is not another's, even where SQLite gives a new run the id of a rolled-back one."""
    cache.clear()
    yield


@pytest.fixture
def import_bytes() -> Callable[..., FileImport]:
    def run(data: bytes, filename: str = "test.jsonl", **kwargs: Any) -> FileImport:
        return import_bench_file(io.BytesIO(data), filename=filename, origin="command", **kwargs)

    return run


@pytest.fixture
def investigation(db: None) -> FileImport:
    """The investigation's eleven requests (benchmarks/tests/investigation.py), imported as from the command line."""
    return import_bench_file(io.BytesIO(investigation_bytes()), filename=FILENAME, origin="command")


@pytest.fixture
def user(db: None) -> User:
    return User.objects.create_user("ana", password="a-long-test-password")


@pytest.fixture
def user_client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def staff_client(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("ops", password="a-long-test-password", is_staff=True))
    return client


@pytest.fixture
def csrf_client(user: User) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis on a free loopback port, for the whole session."""
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed; `make test` installs it (scripts/ensure-redis.sh)")
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir), "--save", ""],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("redis-server did not start")
    yield f"redis://127.0.0.1:{port}/0"
    stop_process(proc)


class NetworkGuardError(RuntimeError):
    """A test tried to open a connection outside loopback."""


def _check_loopback(family: int, address: Any) -> None:
    if family not in (socket.AF_INET, socket.AF_INET6):
        return  # Unix sockets stay on this machine
    ip = ipaddress.ip_address(address[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    if not ip.is_loopback:
        raise NetworkGuardError(f"a test tried to connect to {address[0]}: tests may only reach loopback")


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test: a Python socket may only connect to loopback (127.0.0.0/8, ::1)."""
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def connect(self: socket.socket, address: Any) -> None:
        _check_loopback(self.family, address)
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        _check_loopback(self.family, address)
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


@pytest.fixture(scope="session")
def browser() -> Iterator[BrowserThread]:
    """One headless Chromium for the whole session."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is not installed: the browser tests need Debian's chromium. "
            "`make test` installs it (scripts/ensure-chromium.sh), or: sudo apt-get install chromium"
        )
    thread = BrowserThread()
    yield thread
    thread.close()


@pytest.fixture
def tab(browser: BrowserThread, live_server: Any) -> Iterator[Tab]:
    tab = Tab(browser, live_server.url)
    try:
        yield tab
    finally:
        tab.close()
