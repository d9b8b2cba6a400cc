"""Helpers for tests that start real processes (Redis, Celery workers, llama-server, the web app)."""

from __future__ import annotations

import socket
import subprocess
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10) -> None:
    """Terminate proc and wait for it; kill it if it has not gone after timeout seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)
