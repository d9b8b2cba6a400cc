"""Fixtures and helpers for the tests that size or run a real llama-server (marker `llama_server`);
the root conftest.py loads the fixtures as a plugin, for every app's tests.

The binary comes from $KVLAB_LLAMA_SERVER, else from scripts/build-llama-server.sh (which
builds it once into ~/.cache/kvlab and afterwards only prints its path); llama-fit-params
likewise from $KVLAB_LLAMA_FIT_PARAMS, else from the same script's --fit-params. A test that asks
for the binary and gets none fails: an oracle that silently skips checks nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kvlab.tests.processes import free_port, stop_process

# The investigation's sizing: Devstral Small 2 24B, -c 16384, a 16 GB GPU, 3 × (4,362 + 1,738) tokens.
DEVSTRAL_16GB = {
    "model": "devstral-small-2-24b",
    "ctx_size": 16384,
    "gpu": "rtx-5060-ti-16gb",
    "prompt_tokens": 4362,
    "output_tokens": 1738,
    "concurrency": 3,
}
# The GGUF metadata of a tiny llama model, for pasted metadata and GGUF heads.
TINY = {
    "general.architecture": "llama",
    "general.name": "tiny-llama",
    "llama.block_count": 4,
    "llama.embedding_length": 256,
    "llama.context_length": 4096,
    "llama.attention.head_count": 8,
    "llama.attention.head_count_kv": 2,
}


def text(response: Any) -> str:
    """A response's HTML with its whitespace runs collapsed, to find phrases across line breaks."""
    return re.sub(r"\s+", " ", response.content.decode())


REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build-llama-server.sh"
BUILD_TIMEOUT_S = 3600  # the first build takes ~9 minutes on 2 cores
HEALTH_TIMEOUT_S = 60.0


def _built_binary(env_var: str, build_args: list[str], name: str) -> Path:
    """The binary $env_var names, else the one the build script builds once and then only prints."""
    env = os.environ.get(env_var)
    if env:
        path = Path(env)
        if not (path.is_file() and os.access(path, os.X_OK)):
            pytest.fail(f"{env_var}={env!r} is not an executable file", pytrace=False)
        return path
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT), *build_args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"{BUILD_SCRIPT} did not produce {name}: {exc}", pytrace=False)
    lines = proc.stdout.strip().splitlines()
    path = Path(lines[-1]) if lines else None
    if proc.returncode != 0 or path is None or not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"no {name} binary: set {env_var} or make {BUILD_SCRIPT.name} work "
            f"(exit {proc.returncode}, stdout {proc.stdout[-500:]!r}, stderr tail {proc.stderr[-2000:]!r})",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def llama_server_binary() -> Path:
    return _built_binary("KVLAB_LLAMA_SERVER", [], "llama-server")


@pytest.fixture(scope="session")
def llama_fit_params_binary() -> Path:
    """llama-fit-params, built beside llama-server: llama.cpp's own memory estimate (the second oracle)."""
    return _built_binary("KVLAB_LLAMA_FIT_PARAMS", ["--fit-params"], "llama-fit-params")


@pytest.fixture(scope="session")
def llama_bench_binary() -> Path:
    """llama-bench, built beside llama-server (a host's calibration runs the one beside its server)."""
    return _built_binary("KVLAB_LLAMA_BENCH", ["--bench"], "llama-bench")


# KVLAB_ORACLE_NO_REPACK=1 (make test-oracle-nr): every llama-server and llama-fit-params the oracle
# tests start gets -nr, whatever else it is given — the CPU's extra buffer types off everywhere.
FORCED_FLAGS = ["-nr"] if os.environ.get("KVLAB_ORACLE_NO_REPACK") == "1" else []
# The comparisons that run twice: as llama.cpp chooses on this CPU ("native"; -nr when forced) and -nr.
REPACK = {"native": " -nr" if FORCED_FLAGS else "", "-nr": " -nr"}

SYSTEM_INFO_RE = re.compile(r"system_info: .*\| CPU : [^\n]*")


def system_info_line(binary: Path) -> str:
    """llama.cpp's own report of the CPU features it uses: the `system_info` line llama-server logs at
    start-up (common_params_print_info, -lv 4) before it loads a model — given none, it then exits."""
    proc = subprocess.run(
        [str(binary), "-lv", "4", "-m", "/nonexistent/kvlab-cpu-probe.gguf", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    found = SYSTEM_INFO_RE.search(proc.stdout + proc.stderr)
    assert found, f"no system_info line from {binary}: {(proc.stdout + proc.stderr)[-1000:]}"
    return found[0]


@pytest.fixture(scope="session")
def llama_cpu(llama_server_binary: Path) -> Any:
    """This machine's CPU as the llama.cpp build under test sees it (sizing.placement.cpu.Cpu), read from
    its system_info line: the oracle tests predict for it (AMX, repack) and compare."""
    from sizing.placement.cpu import from_system_info

    return from_system_info(system_info_line(llama_server_binary))


@dataclass
class ServerRun:
    """What one llama-server start produced."""

    args: list[str]
    healthy: bool  # /health answered 200 before the server was stopped
    returncode: int | None  # the exit status if it exited on its own, else None
    log: str  # stdout and stderr, interleaved

    def describe(self) -> str:
        return f"llama-server {' '.join(self.args)}: healthy={self.healthy} exit={self.returncode}"


def _health(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return None


def run_llama_server(
    binary: Path, model: Path, flags: Sequence[str], *, timeout: float = HEALTH_TIMEOUT_S
) -> ServerRun:
    """Start llama-server on 127.0.0.1, wait for /health 200 or its exit, stop it, return its log.

    The process is always terminated (then killed) before this returns, whatever happens.
    """
    port = free_port()
    args = [
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-lv",
        "4",
        "--no-webui",
        *flags,
        *FORCED_FLAGS,
    ]
    healthy = False
    returncode = None
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([str(binary), *args], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                returncode = proc.poll()
                if returncode is not None:
                    break
                if _health(port) == 200:
                    healthy = True
                    break
                time.sleep(0.1)
        finally:
            stop_process(proc)
        log.seek(0)
        text = log.read().decode("utf-8", errors="replace")
    return ServerRun(args=args, healthy=healthy, returncode=returncode, log=text)


@pytest.fixture(scope="session")
def llama_server(llama_server_binary: Path) -> Callable[..., ServerRun]:
    """run(model_path, flags) -> ServerRun, with the session's binary."""

    def run(model: Path, flags: Sequence[str], *, timeout: float = HEALTH_TIMEOUT_S) -> ServerRun:
        return run_llama_server(llama_server_binary, model, flags, timeout=timeout)

    return run


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{architecture: path} of the tiny GGUF models, written once per session."""
    from sizing.tiny_gguf import write_all  # imports gguf/numpy only for the tests that need models

    return write_all(tmp_path_factory.mktemp("tiny-gguf"))


def loader_log(binary: Path, model: Path, timeout: float = 30.0) -> str:
    """llama-server's log up to the point where the weights are loaded (or it stopped): for learn_tensors."""
    from sizing.tiny_gguf import LOADED

    args = [
        str(binary),
        "-m",
        str(model),
        "--port",
        "0",
        "-lv",
        "4",
        "--no-webui",
        "-c",
        "512",
        "-np",
        "1",
        *FORCED_FLAGS,
    ]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                log.seek(0)
                if LOADED.encode() in log.read():
                    break
                time.sleep(0.005)
        finally:
            proc.kill()
            proc.wait()
        log.seek(0)
        return log.read().decode("utf-8", errors="replace")


@pytest.fixture(scope="session")
def spec_models(llama_server_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """spec name -> a tiny GGUF of it, its tensors learnt from the server's loader once per session."""
    from sizing.tiny_gguf import SPECS, learn_tensors, write_model

    directory = tmp_path_factory.mktemp("spec-gguf")
    written: dict[str, Path] = {}

    def model(name: str) -> Path:
        if name not in written:
            spec = SPECS[name]
            metadata = spec.metadata()
            tensors = learn_tensors(
                lambda path: loader_log(llama_server_binary, path), directory, spec.arch, metadata, spec.optional
            )
            written[name] = write_model(directory / f"{name}.gguf", spec.arch, metadata, tensors)
        return written[name]

    return model
