"""Start and stop llama-server as a child the worker owns. No shell, no free-form arguments.

A flag set is parsed into the flags kvlab models (sizing.cmdline) and rebuilt from
them; anything else is refused. The binary, the model directory, the address and the
ports come from the worker's own settings (worker_host.LaunchConfig), never from the
database. The child dies with its worker
(PR_SET_PDEATHSIG), runs in its own process group, and is always stopped: terminate,
then kill.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sizing.cmdline import ParsedCommand, parse_command, to_command

from .worker_host import LaunchConfig

PR_SET_PDEATHSIG = 1
LOG_TAIL_BYTES = 6000


class LaunchRefused(ValueError):
    """kvlab will not start this: the message says why."""


class LaunchFailed(RuntimeError):
    def __init__(self, message: str, log_tail: str) -> None:
        super().__init__(message)
        self.log_tail = log_tail


@dataclass
class LaunchedServer:
    process: subprocess.Popen[bytes]
    base_url: str
    args: list[str]
    log_file: IO[bytes]

    def log(self) -> str:
        self.log_file.flush()
        self.log_file.seek(0)
        return self.log_file.read().decode("utf-8", errors="replace")

    def log_tail(self) -> str:
        return self.log()[-LOG_TAIL_BYTES:]

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


def checked_flags(command: str) -> ParsedCommand:
    parsed = parse_command("llama-server " + command)
    problems = list(parsed.errors)
    if parsed.ignored:
        problems.append("kvlab launches only the flags it models; not allowed: " + ", ".join(parsed.ignored))
    if parsed.model_path:
        problems.append("the model is chosen for the whole sweep; leave -m out of the flag set")
    if problems:
        raise LaunchRefused("; ".join(problems))
    return parsed


def free_port(host: LaunchConfig) -> int:
    for port in range(host.port_min, host.port_max + 1):
        with socket.socket() as sock:
            try:
                sock.bind((host.bind_address, port))
            except OSError:
                continue
            return port
    raise LaunchRefused(f"no free port in {host.port_min}-{host.port_max} on {host.bind_address}")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    os.setsid()
    with contextlib.suppress(OSError):  # not Linux: the worker's own cleanup still stops the child
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def launch(
    host: LaunchConfig,
    binary: str,
    model: Path,
    parsed: ParsedCommand,
    *,
    timeout_s: float = 180,
    should_stop: Callable[[], bool] = lambda: False,
) -> LaunchedServer:
    port = free_port(host)
    flags = to_command(parsed.flags, str(model))[1:]  # rebuilt from the parsed flags only
    args = [binary, *flags, "--host", host.bind_address, "--port", str(port), "-lv", "4", "--no-webui"]
    log_file = tempfile.TemporaryFile()  # noqa: SIM115 - kept open for the server's life, closed by the caller
    try:
        process = subprocess.Popen(  # noqa: S603 - an argument list, never a shell
            args, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent
        )
    except OSError as exc:
        log_file.close()
        raise LaunchFailed(f"cannot run {binary}: {exc.strerror}", "") from None
    server = LaunchedServer(process, f"http://{host.bind_address}:{port}", args, log_file)
    deadline = time.monotonic() + timeout_s
    while True:
        if not server.alive:
            tail = server.log_tail()
            stop(server)
            raise LaunchFailed(f"llama-server exited with status {process.returncode} while starting", tail)
        if _healthy(server.base_url):
            return server
        if should_stop() or time.monotonic() > deadline:
            tail = server.log_tail()
            stop(server)
            reason = "cancelled while starting" if should_stop() else f"not healthy after {timeout_s:g} s"
            raise LaunchFailed(reason, tail)
        time.sleep(0.2)


def _healthy(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(base_url + "/health", timeout=2) as response:  # noqa: S310 - our own child
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def stop(server: LaunchedServer, grace_s: float = 10) -> None:
    """Stop the child and its process group: SIGTERM, then SIGKILL."""
    stop_group(server.process, grace_s)


def stop_group(process: subprocess.Popen[bytes], grace_s: float = 10) -> None:
    """Stop a child started with _die_with_parent (its own session) and its group: SIGTERM, then SIGKILL."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
