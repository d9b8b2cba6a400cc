"""What a launch host is: its CPU, cores, RAM, NVIDIA GPUs and llama.cpp builds, as its worker saw them.

The worker gathers these facts when it announces itself (worker_host.announce) and stores them,
JSON-able, on its LaunchHost; /hosts/ shows them with their age and links to the sizing page
filled from them (`sizing_query`), which says where its values came from (`facts_note`).

Each reader takes the text the machine gave (/proc/cpuinfo, /proc/meminfo, nvidia-smi's CSV,
llama-server's --version and start-up output) and is pure, so it is tested without the machine;
`gather` reads the machine and runs them, each on its own: a reader that fails is named in the
facts' `problems` and the others still count. Everything read from outside is bounded (bytes,
lines, counts, control characters): a host's facts stay a few KB whatever its tools print.

`HostFacts.from_json` reads the stored dict back as defensively, since a database row can hold
anything (an older worker's facts, an edit in the admin).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urlencode

from sizing.parsers import MAX_CPU_CORES
from sizing.placement.cpu import cpuinfo_model, from_cpuinfo

FACTS_VERSION = 1
MIB = 1024 * 1024
STALE_AFTER = timedelta(hours=1)  # free memory moves; an hour-old "free" is no longer a fact

MAX_PROC_BYTES = 256 * 1024  # /proc/cpuinfo's first processor (the one read) is ~1.5 KB
MAX_VERSION_BYTES = 4 * 1024
MAX_START_UP_BYTES = 64 * 1024  # system_info comes within the first ~10 lines
MAX_SMI_BYTES = 16 * 1024
MAX_GPUS = 64
MAX_BUILDS = 8  # binaries probed per announcement
MAX_DEVICES = 16  # llama.cpp device lines kept per build
MAX_PROBLEMS = 20
MAX_TEXT = 200  # a name, a version, a device
MAX_SYSTEM_INFO = 2000  # sizing's parse_cpu reads at most 4,096 characters
VERSION_TIMEOUT_S = 5.0
START_UP_TIMEOUT_S = 10.0
SMI_TIMEOUT_S = 5.0
GATHER_BUDGET_S = 40.0  # after this, no further binary is run
SMI_QUERY = ["--query-gpu=name,memory.total,memory.free,pci.bus_id", "--format=csv,noheader,nounits"]
# A start-up that reaches system_info and exits: no such model; its own port, so it never meets a server's.
START_UP_ARGS = ["-lv", "4", "-m", "/nonexistent/kvlab-host-facts.gguf", "--host", "127.0.0.1", "--port", "0"]

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean(text: object, limit: int = MAX_TEXT) -> str:
    """One line of printable text, at most `limit` characters."""
    return _CONTROL.sub("", str(text).replace("\n", " ").replace("\t", " ")).strip()[:limit]


def _bounded(text: str, limit: int) -> str:
    return text[:limit].replace("\x00", "")


def _int(value: object, low: int = 0, high: int = 1 << 62) -> int | None:
    """An int within [low, high], or None (a bool, a float, a string of digits too long)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip()
        if not value.isdigit() or len(value) > 19:
            return None
        value = int(value)
    return value if isinstance(value, int) and low <= value <= high else None


# --- the readers: text in, facts out ------------------------------------------------------------


def read_cpu(cpuinfo: str) -> dict[str, Any]:
    """The CPU's model name and the llama.cpp features a native build enables on it (sizing's reading)."""
    text = _bounded(cpuinfo, MAX_PROC_BYTES)
    cpu = from_cpuinfo(text)
    return {
        "model": clean(cpuinfo_model(text)), "features": sorted(cpu.features), "label": cpu.label,
        "physical_cores": physical_cores(text),
    }  # fmt: skip


def physical_cores(cpuinfo: str) -> int | None:
    """The cores (not SMT threads: they share a core's FMA units) in /proc/cpuinfo: its distinct
    (physical id, core id) pairs; None where it does not say (ARM's cpuinfo lists processors only)."""
    pairs, physical = set(), "0"
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "physical id":
            physical = value.strip()[:16]
        elif key == "core id":
            pairs.add((physical, value.strip()[:16]))
            if len(pairs) > 1 << 16:
                return None
    return len(pairs) or None


def read_cores(cpu_count: int | None, affinity: int | None) -> dict[str, int | None]:
    """The machine's logical CPUs and those this worker (and the llama-server it starts) may use."""
    return {"cores": _int(cpu_count, 1, 1 << 20), "usable_cores": _int(affinity, 1, 1 << 20)}


def read_meminfo(meminfo: str) -> dict[str, int | None]:
    """RAM in bytes: MemTotal, and MemAvailable (what a new process may take without swapping)."""
    values: dict[str, int | None] = {"total_bytes": None, "available_bytes": None}
    keys = {"MemTotal": "total_bytes", "MemAvailable": "available_bytes"}
    for line in _bounded(meminfo, MAX_PROC_BYTES).splitlines()[:200]:
        key, _, rest = line.partition(":")
        if key in keys and values[keys[key]] is None:
            number, _, unit = rest.strip().partition(" ")
            kib = _int(number, 0, 1 << 52)
            if kib is not None and unit.strip() == "kB":
                values[keys[key]] = kib * 1024
    if values["total_bytes"] is None:
        raise ValueError("/proc/meminfo gives no MemTotal")
    return values


def _gpu(name: object, total_mib: object, free_mib: object, bus_id: object) -> dict[str, Any]:
    total, free = _int(total_mib), _int(free_mib)
    if total is not None and free is not None and free > total:
        free = None  # a reading that cannot be; better unknown than a negative "used"
    return {"name": clean(name) or "unnamed GPU", "memory_total_mib": total, "memory_free_mib": free,
            "bus_id": clean(bus_id, 64)}  # fmt: skip


def read_nvidia_smi(csv: str) -> list[dict[str, Any]]:
    """`nvidia-smi --query-gpu=name,memory.total,memory.free,pci.bus_id --format=csv,noheader,nounits`:
    one line per GPU, memory in MiB; a field it cannot read ("[N/A]") is None."""
    gpus = []
    for line in _bounded(csv, MAX_SMI_BYTES).splitlines():
        fields = [f.strip() for f in line.rsplit(",", 3)]  # a name may hold a comma, the rest cannot
        if len(fields) != 4 or not fields[0]:
            continue
        gpus.append(_gpu(*fields))
        if len(gpus) >= MAX_GPUS:
            break
    return gpus


def read_nvml(nvml: Any) -> list[dict[str, Any]]:
    """The GPUs NVML sees, through an initialised pynvml module (or anything with its functions)."""
    gpus = []
    for i in range(min(int(nvml.nvmlDeviceGetCount()), MAX_GPUS)):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        name = nvml.nvmlDeviceGetName(handle)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        bus_id: object = ""
        with contextlib.suppress(Exception):  # some boards (and NVML versions) have no PCI info
            bus_id = nvml.nvmlDeviceGetPciInfo(handle).busId
        if isinstance(name, bytes):
            name = name.decode("utf-8", "replace")
        if isinstance(bus_id, bytes):
            bus_id = bus_id.decode("ascii", "replace")
        gpus.append(_gpu(name, _mib(memory.total), _mib(memory.free), bus_id))
    return gpus


def _mib(n_bytes: object) -> int | None:
    value = _int(n_bytes)
    return None if value is None else value // MIB


_VERSION = re.compile(r"^version:\s*(\S.*)$", re.MULTILINE)
_BUILT_WITH = re.compile(r"^built with\s+(\S.*)$", re.MULTILINE)
_BUILD_NUMBER = re.compile(r"^(\d{1,9}) \(([0-9a-f]{4,40})\)")


def read_version(output: str) -> dict[str, Any]:
    """`llama-server --version`: `version: 11434 (abc1234)` and `built with <compiler> for <target>`."""
    text = _bounded(output, MAX_VERSION_BYTES)
    version, built_with = _VERSION.search(text), _BUILT_WITH.search(text)
    if version is None:
        raise ValueError("no 'version:' line in its --version output")
    number = _BUILD_NUMBER.match(version.group(1))
    return {
        "version": clean(version.group(1)),
        "build": int(number.group(1)) if number else None,
        "commit": number.group(2) if number else "",
        "built_with": clean(built_with.group(1)) if built_with else "",
    }


_SYSTEM_INFO = re.compile(r"system_info:\s*(.*)$")
_DEVICE = re.compile(r"\s- ([A-Za-z][\w.-]{0,31})\s*: (.+?)(?: \(\d+ MiB, \d+ MiB free\))?\s*$")


def read_start_up(output: str) -> dict[str, Any]:
    """llama-server's start-up at verbosity 4: its `system_info:` line (the CPU backend's features, as
    sizing's --cpu reads it) and the devices it lists under `device_info:` (their free memory left out:
    it is the moment's, and the GPUs' own come from NVML)."""
    system_info, in_devices = "", False
    devices: list[str] = []
    for line in _bounded(output, MAX_START_UP_BYTES).splitlines()[:2000]:
        found = _SYSTEM_INFO.search(line)
        if found and not system_info:
            system_info = "system_info: " + clean(found.group(1), MAX_SYSTEM_INFO)
        if line.rstrip().endswith("device_info:"):
            in_devices = True
            continue
        device = _DEVICE.search(line) if in_devices else None
        if device and len(devices) < MAX_DEVICES:
            devices.append(f"{clean(device.group(1), 32)}: {clean(device.group(2))}")
        else:
            in_devices = False
    if not system_info:
        raise ValueError("no system_info line in its start-up output")
    return {"system_info": system_info, "devices": devices}


# --- reading the machine ------------------------------------------------------------------------


def run_bounded(argv: Sequence[str], timeout_s: float, limit: int) -> str:
    """A program's stdout and stderr, at most `limit` bytes and `timeout_s` seconds (then it is killed,
    with what it started). Its exit status does not matter: llama-server's probe exits 1 by design."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}  # no model, no download
    proc = subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        cwd="/", env=env, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    chunks: list[bytes] = []
    size, deadline = 0, time.monotonic() + timeout_s
    try:
        while size < limit:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{Path(argv[0]).name} gave no end within {timeout_s:g} s")
                continue
            chunk = os.read(proc.stdout.fileno(), min(65536, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stdout.close()
        proc.wait()
    return b"".join(chunks).decode("utf-8", "replace")


_BUILDS: dict[tuple[str, int, int, int], dict[str, Any]] = {}  # a binary's build, while it stays the same file


def read_build(binary: str) -> dict[str, Any]:
    """A llama-server binary's version and start-up facts; run once per file (path, inode, size, mtime)."""
    info = os.stat(binary)
    key = (binary, info.st_ino, info.st_size, info.st_mtime_ns)
    if key in _BUILDS:
        return _BUILDS[key]
    build: dict[str, Any] = {"binary": clean(binary, 500), "problems": []}
    try:
        build.update(read_version(run_bounded([binary, "--version"], VERSION_TIMEOUT_S, MAX_VERSION_BYTES)))
    except (OSError, ValueError) as exc:
        build["problems"].append(f"--version: {clean(exc)}")
    try:
        build.update(read_start_up(run_bounded([binary, *START_UP_ARGS], START_UP_TIMEOUT_S, MAX_START_UP_BYTES)))
    except (OSError, ValueError) as exc:
        build["problems"].append(f"start-up: {clean(exc)}")
    if not build["problems"]:
        _BUILDS[key] = build  # a timeout may pass next time
    return build


def read_gpus() -> tuple[list[dict[str, Any]], str]:
    """The NVIDIA GPUs, and what saw them: NVML (pynvml) if it is installed and works, else nvidia-smi
    if it is on the PATH, else none ("none seen: <why>")."""
    why = "nvidia-ml-py is not installed"
    try:
        import pynvml
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError when there is no driver; OSError for a broken library
            why = f"NVML: {clean(exc)}"
        else:
            try:
                return read_nvml(pynvml), "NVML"
            finally:
                with contextlib.suppress(Exception):
                    pynvml.nvmlShutdown()
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return [], f"none seen: {why}; no nvidia-smi on the PATH"
    return read_nvidia_smi(run_bounded([smi, *SMI_QUERY], SMI_TIMEOUT_S, MAX_SMI_BYTES)), "nvidia-smi"


def _read_file(path: str) -> str:
    with open(path, "rb") as fh:
        return fh.read(MAX_PROC_BYTES).decode("utf-8", "replace")


T = TypeVar("T")


def _attempt(problems: list[str], what: str, read: Callable[[], T], default: T) -> T:
    """read(), or `default` with the problem named: one reader's failure is not the announcement's."""
    try:
        return read()
    except Exception as exc:
        problems.append(clean(f"{what}: {type(exc).__name__}: {exc}", 300))
        return default


def _affinity() -> int | None:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def gather(binaries: Sequence[str]) -> dict[str, Any]:
    """This machine's facts, JSON-able; `binaries`: the checked llama-server binaries it announces."""
    problems: list[str] = []
    no_cpu: dict[str, Any] = {"model": "", "features": [], "label": ""}
    no_cores: dict[str, int | None] = {"cores": None, "usable_cores": None}
    no_gpus: tuple[list[dict[str, Any]], str] = ([], "none seen: reading them failed")
    cpu = _attempt(problems, "CPU (/proc/cpuinfo)", lambda: read_cpu(_read_file("/proc/cpuinfo")), no_cpu)
    cpu.update(_attempt(problems, "cores", lambda: read_cores(os.cpu_count(), _affinity()), no_cores))
    ram = _attempt(problems, "RAM (/proc/meminfo)", lambda: read_meminfo(_read_file("/proc/meminfo")), None)
    gpus, gpu_reader = _attempt(problems, "GPUs", read_gpus, no_gpus)
    builds: list[dict[str, Any]] = []
    started = time.monotonic()
    for binary in binaries[:MAX_BUILDS]:
        if time.monotonic() - started > GATHER_BUDGET_S:
            problems.append(f"llama.cpp builds: {binary} and after not probed (over {GATHER_BUDGET_S:g} s)")
            break
        failed: dict[str, Any] = {"binary": clean(binary, 500), "problems": ["could not be probed"]}
        builds.append(_attempt(problems, f"llama.cpp build {clean(binary, 500)}", partial(read_build, binary), failed))
    if len(binaries) > MAX_BUILDS:
        problems.append(f"llama.cpp builds: only the first {MAX_BUILDS} of {len(binaries)} binaries probed")
    return {
        "version": FACTS_VERSION, "cpu": cpu, "ram": ram, "gpus": gpus, "gpu_reader": gpu_reader,
        "builds": builds, "problems": problems[:MAX_PROBLEMS],
    }  # fmt: skip


# --- the stored facts, read back ----------------------------------------------------------------


@dataclass(frozen=True)
class Gpu:
    name: str
    total_mib: int | None
    free_mib: int | None
    bus_id: str

    @property
    def used_mib(self) -> int | None:
        return None if self.total_mib is None or self.free_mib is None else self.total_mib - self.free_mib


@dataclass(frozen=True)
class Build:
    binary: str
    version: str
    built_with: str
    system_info: str
    devices: tuple[str, ...]
    problems: tuple[str, ...]


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object, limit: int) -> list[Any]:
    return list(value[:limit]) if isinstance(value, list) else []


@dataclass(frozen=True)
class HostFacts:
    """A LaunchHost's stored facts, each field checked (absent or odd: empty, None)."""

    cpu_model: str = ""
    cpu_features: tuple[str, ...] = ()
    cpu_label: str = ""
    cores: int | None = None
    usable_cores: int | None = None
    physical_cores: int | None = None
    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    gpus: tuple[Gpu, ...] = ()
    gpu_reader: str = ""
    builds: tuple[Build, ...] = ()
    problems: tuple[str, ...] = ()
    present: bool = False

    @classmethod
    def from_json(cls, facts: object) -> HostFacts:
        if not isinstance(facts, Mapping) or not facts:
            return cls()
        cpu, ram = _dict(facts.get("cpu")), _dict(facts.get("ram"))
        gpus = tuple(
            Gpu(
                clean(g.get("name", "")) or "unnamed GPU",
                _int(g.get("memory_total_mib")),
                _int(g.get("memory_free_mib")),
                clean(g.get("bus_id", ""), 64),
            )  # fmt: skip
            for g in map(_dict, _list(facts.get("gpus"), MAX_GPUS))
        )
        builds = tuple(
            Build(
                clean(b.get("binary", ""), 500),
                clean(b.get("version", "")),
                clean(b.get("built_with", "")),
                clean(b.get("system_info", ""), MAX_SYSTEM_INFO),
                tuple(clean(d) for d in _list(b.get("devices"), MAX_DEVICES)),
                tuple(clean(p, 300) for p in _list(b.get("problems"), MAX_PROBLEMS)),
            )  # fmt: skip
            for b in map(_dict, _list(facts.get("builds"), MAX_BUILDS))
        )
        return cls(
            cpu_model=clean(cpu.get("model", "")),
            cpu_features=tuple(clean(f, 32) for f in _list(cpu.get("features"), 64) if isinstance(f, str)),
            cpu_label=clean(cpu.get("label", "")),
            cores=_int(cpu.get("cores"), 1),
            usable_cores=_int(cpu.get("usable_cores"), 1),
            physical_cores=_int(cpu.get("physical_cores"), 1),
            ram_total_bytes=_int(ram.get("total_bytes")),
            ram_available_bytes=_int(ram.get("available_bytes")),
            gpus=gpus,
            gpu_reader=clean(facts.get("gpu_reader", "")),
            builds=builds,
            problems=tuple(clean(p, 300) for p in _list(facts.get("problems"), MAX_PROBLEMS)),
            present=True,
        )

    @property
    def ram_total_mib(self) -> int | None:
        return None if self.ram_total_bytes is None else self.ram_total_bytes // MIB

    @property
    def ram_available_mib(self) -> int | None:
        return None if self.ram_available_bytes is None else self.ram_available_bytes // MIB

    @property
    def cpu_read(self) -> bool:
        return bool(self.cpu_model or self.cpu_features or self.cpu_label)

    @property
    def system_info(self) -> str:
        """The first binary's system_info line (the binary a sweep runs unless told otherwise)."""
        return self.builds[0].system_info if self.builds else ""

    @property
    def cpu_spec(self) -> str:
        """The CPU as sizing's `cpu` field reads it: the build's system_info line, else the features
        a native build would use ("none" when it has none of them), else "" (not read)."""
        if self.system_info:
            return self.system_info
        if self.cpu_features:
            return "+".join(self.cpu_features)
        return "none" if self.cpu_read else ""

    @property
    def cpu_source(self) -> str:
        if self.system_info:
            return "its llama.cpp build's system_info"
        return "/proc/cpuinfo" if self.cpu_spec else ""


class AnnouncedHost(Protocol):
    """What the sizing link needs of a LaunchHost."""

    pk: Any
    name: str
    facts: Any
    facts_at: datetime | None


def sizing_query(host: AnnouncedHost) -> list[tuple[str, str]]:
    """The sizing page's query for this host: `gpu_mib` (total) then `gpu_used` (total - free), whole
    MiB, one of each per GPU in NVML's order; `ram_mib` (total); `cpu` (`cpu_spec`); `cpu_cores` (its
    physical cores, at most the usable CPUs); `host` (its id).
    A value the host did not announce is left out (a GPU with an unknown free memory: no `gpu_used`
    for any, so the lists stay in step)."""
    return _query(HostFacts.from_json(host.facts), host.pk)


def _query(facts: HostFacts, pk: Any) -> list[tuple[str, str]]:
    query: list[tuple[str, str]] = [("gpu_mib", str(g.total_mib)) for g in facts.gpus if g.total_mib is not None]
    used = [g.used_mib for g in facts.gpus]
    if len(query) == len(facts.gpus) and all(u is not None for u in used):
        query += [("gpu_used", str(u)) for u in used]
    if facts.ram_total_bytes is not None:
        query.append(("ram_mib", str(facts.ram_total_mib)))
    if facts.cpu_spec:
        query.append(("cpu", facts.cpu_spec))
    if facts.physical_cores:  # the cores a server started here may use: its affinity caps them
        cores = min(facts.physical_cores, facts.usable_cores or facts.physical_cores, MAX_CPU_CORES)
        query.append(("cpu_cores", str(cores)))
    query.append(("host", str(pk)))
    return query


def is_stale(facts_at: datetime, now: datetime) -> bool:
    return now - facts_at > STALE_AFTER


def age(facts_at: datetime, now: datetime) -> str:
    """ "3 minutes ago", "2 days ago", "less than a minute ago"."""
    from django.utils.timesince import timesince

    if now - facts_at < timedelta(minutes=1):
        return "less than a minute ago"
    return str(timesince(facts_at, now, depth=1)).replace("\xa0", " ") + " ago"


@dataclass(frozen=True)
class ShownFacts:
    """A host's facts as /hosts/ shows them."""

    facts: HostFacts
    age: str  # "3 minutes ago"; "" when it has none
    stale: bool
    query: str  # the sizing page's query string; "" when it has none


def shown(host: AnnouncedHost, now: datetime) -> ShownFacts:
    facts = HostFacts.from_json(host.facts)
    if host.facts_at is None or not facts.present:
        return ShownFacts(HostFacts(), "", False, "")
    return ShownFacts(facts, age(host.facts_at, now), is_stale(host.facts_at, now), urlencode(_query(facts, host.pk)))


def facts_note(host_id: int) -> str | None:
    """Where the sizing page's host values came from: "GPUs, RAM and CPU from gpu-box-1's announcement
    of 2026-12-01 20:41 UTC (5 minutes ago)"; None for an unknown host or one without facts."""
    from django.apps import apps
    from django.utils import timezone

    row = apps.get_model("benchmarks", "LaunchHost").objects.filter(pk=host_id).values("name", "facts", "facts_at")
    host = row.first()
    if host is None or host["facts_at"] is None:
        return None
    facts = HostFacts.from_json(host["facts"])
    parts = [p for p, has in [("GPUs", facts.gpus), ("RAM", facts.ram_total_bytes), ("CPU", facts.cpu_spec)] if has]
    if not facts.present or not parts:
        return None
    what = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
    facts_at: datetime = host["facts_at"]
    now = timezone.now()
    when = age(facts_at, now)
    if is_stale(facts_at, now):
        when += ", stale: its free memory may have changed since"
    return f"{what} from {host['name']}'s announcement of {facts_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC ({when})"
