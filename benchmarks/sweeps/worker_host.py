"""What this worker's machine lets kvlab launch: read from its own settings, announced, enforced.

A launch host is not something the web app configures. The worker on a GPU host reads
the llama-server binaries, model directories, bind address and ports it may use from
its own environment (KVLAB_LAUNCH_*, see kvlab/settings.py), checks them, and
announces them as a LaunchHost row when it starts and when asked (the hosts page's button),
with what it sees of its machine (host_facts: CPU, cores, RAM, GPUs, llama.cpp builds). The sweep form
picks among what was announced; the worker then launches only what its own settings
list, whatever the database says. A staff account can choose among binaries an admin
installed on that machine, never name a new one.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery.signals import worker_ready
from celery.worker.control import control_command
from django.conf import settings
from django.utils import timezone

from ..models import LaunchHost
from . import host_facts

log = logging.getLogger(__name__)

MAX_ANNOUNCED_MODELS = 500
MAX_MODEL_DEPTH = 3
SYSTEM_DIRS = frozenset(
    Path(p)
    for p in [
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/lib",
        "/lib64",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/sys",
        "/usr",
        "/var",
        "/home",
        "/tmp",
    ]  # fmt: skip
)
SYSTEM_TREES = (Path("/proc"), Path("/sys"), Path("/dev"), Path("/etc"), Path("/boot"))


class NotLaunchable(ValueError):
    """This worker's own settings do not allow it: the message says why."""


@dataclass
class LaunchConfig:
    """A worker machine's launch settings, after the checks: only usable entries are kept."""

    name: str
    binaries: list[str] = field(default_factory=list)
    models_dirs: list[str] = field(default_factory=list)
    bind_address: str = "127.0.0.1"
    port_min: int = 18000
    port_max: int = 18099
    problems: list[str] = field(default_factory=list)

    def binary(self, chosen: str) -> str:
        """The binary to run: `chosen` if this machine lists it, the first listed if none was chosen."""
        if not self.binaries:
            raise NotLaunchable(f"the worker on {self.name} lists no usable llama-server binary ({_hint()})")
        if not chosen:
            return self.binaries[0]
        if chosen not in self.binaries:
            raise NotLaunchable(f"{chosen} is not among the binaries the worker on {self.name} lists ({_hint()})")
        return chosen

    def model(self, name: str) -> Path:
        """The .gguf called `name` (relative) in the first model directory that holds it."""
        if not self.models_dirs:
            raise NotLaunchable(f"the worker on {self.name} lists no usable model directory ({_hint()})")
        relative = Path(name)
        if relative.is_absolute() or ".." in relative.parts or not name:
            raise NotLaunchable(f"{name!r} is not a file name relative to the host's model directories")
        if relative.suffix != ".gguf":
            raise NotLaunchable(f"{name!r} is not a .gguf file")
        for directory in self.models_dirs:
            root = Path(directory)
            path = (root / relative).resolve()
            if root in path.parents and path.is_file():
                return path
        raise NotLaunchable(f"{name!r} does not exist in {', '.join(self.models_dirs)} on {self.name}")


def _hint() -> str:
    return "set KVLAB_LAUNCH_BINARIES and KVLAB_LAUNCH_MODELS_DIRS in that worker's environment"


def check_binary(path: str) -> str | None:
    """Why `path` may not be run as llama-server, or None.

    Absolute, an executable regular file, owned by root or by the worker's user, and
    neither it nor a directory above it writable by anyone else (no script in /tmp).
    """
    p = Path(path)
    if not p.is_absolute():
        return f"binary {path!r}: not an absolute path"
    try:
        resolved = p.resolve(strict=True)
        info = resolved.stat()
    except OSError as exc:
        return f"binary {path}: {exc.strerror or exc}"
    if not stat.S_ISREG(info.st_mode):
        return f"binary {path}: not a regular file"
    if not os.access(resolved, os.X_OK):
        return f"binary {path}: not executable by the worker's user"
    for node in [resolved, *resolved.parents]:
        node_info = node.stat()
        if node_info.st_uid not in (0, os.getuid()):
            return f"binary {path}: {node} belongs to another user"
        group_writable = node_info.st_mode & stat.S_IWGRP and node_info.st_gid not in (0, os.getgid())
        if node_info.st_mode & stat.S_IWOTH or group_writable:
            return f"binary {path}: {node} is writable by other users"
    return None


def check_models_dir(path: str) -> str | None:
    """Why `path` may not be a model directory, or None: an absolute directory, not a system one."""
    p = Path(path)
    if not p.is_absolute():
        return f"model directory {path!r}: not an absolute path"
    resolved = p.resolve()
    if resolved in SYSTEM_DIRS or any(resolved == t or t in resolved.parents for t in SYSTEM_TREES):
        return f"model directory {path}: a system directory, not a models directory"
    if not resolved.is_dir():
        return f"model directory {path}: not a directory"
    return None


def _ports(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    port_min, port_max = int(low), int(high or low)
    if not 1024 <= port_min <= port_max <= 65535:
        raise ValueError
    return port_min, port_max


def current() -> LaunchConfig:
    """This machine's launch settings, checked; what fails a check is left out and named in problems."""
    config = LaunchConfig(name=settings.KVLAB_LAUNCH_HOST or socket.gethostname())
    for path in settings.KVLAB_LAUNCH_BINARIES:
        problem = check_binary(path)
        (config.problems.append(problem) if problem else config.binaries.append(path))
    for path in settings.KVLAB_LAUNCH_MODELS_DIRS:
        problem = check_models_dir(path)
        if problem:
            config.problems.append(problem)
        else:
            config.models_dirs.append(str(Path(path).resolve()))
    try:
        config.bind_address = str(ipaddress.ip_address(settings.KVLAB_LAUNCH_BIND))
    except ValueError:
        config.problems.append(f"bind address {settings.KVLAB_LAUNCH_BIND!r} is not an IP address; using 127.0.0.1")
    try:
        config.port_min, config.port_max = _ports(settings.KVLAB_LAUNCH_PORTS)
    except ValueError:
        config.problems.append(f"ports {settings.KVLAB_LAUNCH_PORTS!r} are not a range within 1024-65535")
    return config


def for_host(host: LaunchHost, what: str) -> LaunchConfig:
    """This worker's own settings (never the database's), refusing work meant for another host's worker."""
    machine = current()
    if machine.name != host.name:
        raise NotLaunchable(
            f"the {what} is for host {host.name} but reached the worker on {machine.name} "
            f"(queue {host.celery_queue}): start that host's worker with its own queue"
        )
    return machine


def list_models(config: LaunchConfig) -> list[dict[str, object]]:
    """The .gguf files in the model directories (first directory wins a name), at most 500."""
    found: dict[str, int] = {}
    for directory in config.models_dirs:
        root = Path(directory)
        for dirpath, dirnames, filenames in os.walk(root):
            depth = len(Path(dirpath).relative_to(root).parts)
            if depth >= MAX_MODEL_DEPTH:
                dirnames.clear()
            dirnames.sort()
            for filename in sorted(filenames):
                if not filename.endswith(".gguf"):
                    continue
                name = str((Path(dirpath) / filename).relative_to(root))
                if name in found:
                    continue
                try:
                    found[name] = (Path(dirpath) / filename).stat().st_size
                except OSError:
                    continue
                if len(found) >= MAX_ANNOUNCED_MODELS:
                    return [{"file": n, "bytes": b} for n, b in found.items()]
    return [{"file": n, "bytes": b} for n, b in found.items()]


def announce(queue: str, worker: str = "") -> LaunchHost | None:
    """Write this machine's launch settings as its LaunchHost; None when it may launch nothing."""
    from . import demo

    demo_dir = Path(demo.demo_models_dir()).resolve()
    if demo_dir in [Path(d).resolve() for d in settings.KVLAB_LAUNCH_MODELS_DIRS if Path(d).is_absolute()]:
        demo.ensure_demo_model()  # before the checks: a fresh checkout has no var/models yet
    config = current()
    if not config.binaries and not config.problems:
        return None
    for problem in config.problems:
        log.warning("launch host %s: %s", config.name, problem)
    facts = machine_facts(config)
    host, _ = LaunchHost.objects.update_or_create(
        name=config.name,
        defaults={
            "binaries": config.binaries,
            "models_dirs": config.models_dirs,
            "gguf_files": list_models(config),
            "bind_address": config.bind_address,
            "port_min": config.port_min,
            "port_max": config.port_max,
            "queue": queue,
            "worker": worker[:200],
            "problems": config.problems,
            "announced_at": timezone.now(),
            "facts": facts,
            "facts_at": timezone.now(),
        },
    )
    return host


def machine_facts(config: LaunchConfig) -> dict[str, object]:
    """The machine's facts (host_facts.gather); a failure is recorded in them, never the announcement's."""
    try:
        facts = host_facts.gather(config.binaries)
    except Exception as exc:  # gather guards each reader; this is for what it did not foresee
        log.exception("launch host %s: gathering its facts failed", config.name)
        return {"version": host_facts.FACTS_VERSION, "problems": [host_facts.clean(f"{type(exc).__name__}: {exc}")]}
    for problem in facts["problems"]:
        log.warning("launch host %s: facts: %s", config.name, problem)
    return facts


def worker_queue(consumed: list[str]) -> str:
    """The queue a host's sweeps go to: the setting, else the worker's own (not the shared default) queue."""
    if settings.KVLAB_LAUNCH_QUEUE:
        return settings.KVLAB_LAUNCH_QUEUE
    own = [q for q in consumed if q != settings.CELERY_TASK_DEFAULT_QUEUE]
    return (own or consumed or [settings.CELERY_TASK_DEFAULT_QUEUE])[0]


def announce_worker(consumed: list[str], hostname: str) -> None:
    """At a worker's start: announce, and never stop the worker for it (jobs need no launch host)."""
    try:
        host = announce(worker_queue(consumed), hostname)
    except Exception:  # a worker without a migrated database still runs jobs
        log.exception("could not announce this machine as a launch host")
        return
    if host is None:
        log.info("no llama-server binary configured: this worker announces no launch host")


def _announce_at_start(sender: Any, **_: Any) -> None:
    """A worker tells the web app what its machine lets kvlab launch (its own KVLAB_LAUNCH_* settings)."""
    announce_worker(list(sender.app.amqp.queues.consume_from or {}), sender.hostname)


def kvlab_announce(state: Any) -> dict[str, str]:
    """Announce again on request (the launch hosts page's button): new models show without a restart."""
    consumer = state.consumer
    announce_worker(list(consumer.app.amqp.queues.consume_from or {}), consumer.hostname)
    return {"ok": "announced"}


def connect_worker_hooks() -> None:
    """Announce at a worker's start and on the kvlab_announce broadcast (called once Django has loaded the app)."""
    worker_ready.connect(_announce_at_start, weak=False, dispatch_uid="benchmarks.announce_launch_host")
    control_command()(kvlab_announce)  # registered by its name: ask_workers_to_announce broadcasts it


def ask_workers_to_announce(timeout_s: float = 3.0) -> str:
    """Ask every running worker to announce again; what happened, in words."""
    from kvlab.celery import app

    try:
        replies = app.control.broadcast("kvlab_announce", reply=True, timeout=timeout_s)
    except Exception as exc:  # kombu raises several kinds when Redis is down
        return f"the job queue (Redis) cannot be reached: {type(exc).__name__}"
    if not replies:
        return "no worker answered: start one on each launch host (make run starts a local one)"
    return f"{len(replies)} worker{'s' if len(replies) != 1 else ''} announced again"
