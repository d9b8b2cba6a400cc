"""The sizing inputs' typed values, parsed and bounded: GGUF metadata pasted as JSON, the weights' size,
memory in MiB, bandwidth in GB/s, the GPUs' repeated query parameters and the host, and the query string of
a set of field values. One parser each, for the sizing page and kvsize alike; a refusal is a ValidationError
that says what is wrong."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from typing import Any

from django import forms
from django.http import QueryDict

from . import catalogue
from .placement.cpu import Cpu, CpuSpecError, flop_per_cycle, parse_cpu
from .placement.speed import DEFAULT_HOST_BANDWIDTH, DEFAULT_HOST_BANDWIDTH_SOURCE
from .placement.types import MAX_DEVICES, Device, Host, MiB

MAX_PARAMS_CHARS = 200_000
GiB = 1024**3
MAX_WEIGHTS_BYTES = 1 << 50  # 1 PiB: beyond any model
# Without a unit, a number this large is bytes; a smaller one is GiB.
BARE_BYTES_FROM = 1 << 20
WEIGHT_UNITS = {"b": 1, "bytes": 1, "kib": 1024, "mib": 1024**2, "gib": GiB, "tib": 1024**4}
WEIGHT_UNITS |= {"kb": 1000, "mb": 10**6, "gb": 10**9, "tb": 10**12}
# The one set of bounds of the sizing page and kvsize (docs/sizing.md, its bounds). Memory in whole MiB:
# below 256 MiB no device or host runs a model with llama.cpp (its CUDA context alone takes more), and a
# smaller number is GiB typed as MiB; 4 TiB is 14 times the largest GPU (288 GB) and covers unified-memory
# superchips (GB300's 784 GB); 16 TiB is the largest 8-socket server's RAM and beyond any host kvlab sizes.
MIN_MEMORY_MIB = 256
MAX_GPU_MIB = 4_194_304  # 4 TiB
MAX_RAM_MIB = 16 * 1024 * 1024  # 16 TiB
# Bandwidth in GB/s: 0.1 is below the slowest RAM a model runs from (a Pi Zero's LPDDR2 gives ~1 GB/s)
# and keeps the tok/s estimate finite; 100,000 is 12 times B200's HBM3e (8 TB/s).
MIN_GBPS, MAX_GBPS = 0.1, 100_000.0
MAX_CPU_CORES, MAX_CPU_GHZ = 1024, 10.0
DEFAULT_CPU_CORES, DEFAULT_CPU_GHZ = 8, 3.5  # speed.DEFAULT_CPU_FLOPS's desktop
MAX_NUMBER_CHARS = 64  # a number typed in a field: longer is never valid, and is not echoed back
# The repeated per-GPU query parameters, aligned by position: gpu=ID&gpu_mib=&gpu_used=&gpu_gbps=
GPU_FIELDS = ("gpu", "gpu_mib", "gpu_used", "gpu_gbps")
MAX_GPU_VALUES = 4 * MAX_DEVICES  # values read per parameter; more is refused, not parsed
DEFAULT_RAM_GBPS = DEFAULT_HOST_BANDWIDTH / 1e9


def parse_pasted_metadata(text: str) -> dict[str, Any]:
    """The pasted GGUF metadata as a dict, or a ValidationError that says what is wrong with it."""
    try:
        metadata = json.loads(text)
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(f"The metadata is not JSON: {exc.msg} at line {exc.lineno}.") from None
    except RecursionError:
        raise forms.ValidationError("The metadata is nested too deeply to be GGUF metadata.") from None
    except ValueError:  # an integer beyond Python's conversion limit (4,300 digits)
        raise forms.ValidationError("The metadata holds a number with too many digits.") from None
    if not isinstance(metadata, dict):
        raise forms.ValidationError("The metadata must be a JSON object of GGUF keys and values.")
    if _holds_nul(metadata):
        raise forms.ValidationError("The metadata holds a NUL character (\\u0000), which no GGUF name or value has.")
    return metadata


def _holds_nul(value: object) -> bool:
    """Whether a key or string anywhere in a JSON value holds a NUL (iterative: JSON nests deep)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\0" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def parse_weights_size(text: str) -> int:
    """Bytes from "13.35 GiB", "13.35GiB", "14,333,922,848", "14333922848 B", "14.3 GB"; a bare number
    below 1,048,576 is GiB, a larger one bytes. The one parser of the sizing page and kvsize --weights."""
    match = re.fullmatch(r"\s*(\d[\d,_]{0,39}(?:\.\d{1,12})?|\.\d{1,12})\s*([A-Za-z]{0,8})\s*", text)
    if not match:
        raise forms.ValidationError(
            "Give the weights' size as a number of GiB (13.35 GiB), GB (14.3 GB) or bytes (14,333,922,848)."
        )
    number_text, unit = match.group(1).replace(",", "").replace("_", ""), match.group(2).lower()
    try:
        number = Decimal(number_text)
    except InvalidOperation:
        raise forms.ValidationError(f"{number_text!r} is not a number.") from None
    if unit and unit not in WEIGHT_UNITS:
        raise forms.ValidationError(f"Unknown unit {match.group(2)!r}: use TiB, GiB, MiB, KiB, TB, GB, MB, kB or B.")
    scale = WEIGHT_UNITS[unit] if unit else (1 if number >= BARE_BYTES_FROM else GiB)
    value = int(number * scale)
    if not 0 < value <= MAX_WEIGHTS_BYTES:
        raise forms.ValidationError("The weights' size must be above 0 and at most 1 PiB.")
    return value


def _whole(text: str) -> int | None:
    """A whole number as people write one ("16384", "16,384", "16_384"), or None."""
    return int(text.replace(",", "").replace("_", "")) if re.fullmatch(r"\d[\d,_]{0,15}", text) else None


def parse_mib(text: str, what: str, high: int) -> int:
    """A memory size in whole MiB, MIN_MEMORY_MIB to high; the message says when it looks like GiB."""
    value = _whole(text.strip())
    if value is None or not MIN_MEMORY_MIB <= value <= high:
        hint = ""
        if value is not None and 0 < value < MIN_MEMORY_MIB:
            hint = f" ({value} looks like GiB: {value} GiB is {value * 1024:,} MiB)"
        raise forms.ValidationError(f"{what} must be a whole number of MiB from {MIN_MEMORY_MIB} to {high:,}{hint}.")
    return value


def parse_gbps(text: str, what: str) -> float:
    """A bandwidth in GB/s, a plain decimal number from MIN_GBPS to MAX_GBPS (no exponent, no inf or nan)."""
    text = text.strip()
    ok = re.fullmatch(r"\d{1,7}(\.\d{0,6})?|\.\d{1,6}", text)
    value = float(text) if ok else -1.0
    if not MIN_GBPS <= value <= MAX_GBPS:
        raise forms.ValidationError(f"{what}: the bandwidth must be a number of GB/s from 0.1 to {MAX_GBPS:,.0f}.")
    return value


def as_query(values: dict[str, Any]) -> QueryDict:
    """The sizing page's query string for these field values (SizingInputs.effective, or kvsize's
    options): a list is a repeated parameter, True is "on", and False, None and "" are left out."""
    query = QueryDict(mutable=True)
    for name, value in values.items():
        if isinstance(value, list | tuple):
            query.setlist(name, [str(v) for v in value])
        elif value is True:
            query[name] = "on"
        elif value is not False and value is not None and value != "":  # 0 is a value (-c 0)
            query[name] = str(getattr(value, "pk", value))
    return query


def query_values(data: Any, name: str) -> list[str]:
    """Every value of a repeated query parameter (a QueryDict), or the one value of a plain dict."""
    if hasattr(data, "getlist"):
        return [str(v) for v in data.getlist(name)]
    value = data.get(name)
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]


def parse_gpus(columns: dict[str, list[str]]) -> tuple[list[Device], list[str], dict[str, list[str]]]:
    """The GPUs of the repeated parameters GPU_FIELDS, aligned by position. Each GPU is a catalogue id
    (`gpu`) or a memory size (`gpu_mib`; the id wins when a row has both, as a single `gpu`/`gpu_mib`
    link always did), with the MiB already in use (`gpu_used`) and a bandwidth in GB/s (`gpu_gbps`; a
    catalogue GPU's published figure otherwise). Returns the devices, the source of each one's bandwidth
    ("" when unknown), and the fields as the sizing used them (one list per parameter). A refusal is a
    ValidationError on the parameter at fault."""
    n_rows = max((len(values) for values in columns.values()), default=0)
    rows = [
        [(columns[name][i] if i < len(columns[name]) else "").strip() for name in GPU_FIELDS] for i in range(n_rows)
    ]
    rows = [row for row in rows if any(row)]
    if len(rows) > MAX_DEVICES:
        raise forms.ValidationError(
            {"gpu": f"At most {MAX_DEVICES} GPUs (llama.cpp's llama_max_devices), not {len(rows)}."}
        )
    devices, sources = [], []
    effective: dict[str, list[str]] = {name: [] for name in GPU_FIELDS}
    for i, (gpu_id, mib_text, used_text, gbps_text) in enumerate(rows):
        what = f"GPU {i + 1}"
        try:
            bandwidth = parse_gbps(gbps_text, what) * 1e9 if gbps_text else None
        except forms.ValidationError as exc:
            raise forms.ValidationError({"gpu_gbps": exc}) from None
        source = "given" if gbps_text else ""
        if gpu_id:
            gpu = catalogue.gpus().get(gpu_id[:64])
            if gpu is None:
                message = f"{what}: {gpu_id[:64]!r} is not a GPU of the catalogue; pick one or give its memory in MiB."
                raise forms.ValidationError({"gpu": message})
            total_mib, mib_text = gpu.memory_mib, ""
            if bandwidth is None and gpu.bandwidth is not None:
                source = f"the catalogue: {gpu.bandwidth_source}"
            device = gpu.device(bandwidth=bandwidth)
        elif mib_text:
            try:
                total_mib = parse_mib(mib_text, f"{what}: its memory", MAX_GPU_MIB)
            except forms.ValidationError as exc:
                raise forms.ValidationError({"gpu_mib": exc}) from None
            mib_text = str(total_mib)
            device = Device("", f"a GPU of {total_mib:,} MiB", total_mib * MiB, 0, bandwidth)
        else:
            raise forms.ValidationError({"gpu": f"{what}: pick a GPU from the catalogue or give its memory in MiB."})
        used = _whole(used_text) if used_text else 0
        if used is None or used >= total_mib:
            raise forms.ValidationError(
                {"gpu_used": f"{what}: the memory already in use must be whole MiB below its {total_mib:,} MiB."}
            )
        devices.append(replace(device, name=f"CUDA{i}", used=used * MiB))
        sources.append(source)
        for name, value in zip(GPU_FIELDS, (gpu_id, mib_text, str(used) if used else "", gbps_text), strict=True):
            effective[name].append(value)
    return devices, sources, effective


def parse_host(data: dict[str, Any], local_cpu: Cpu | None = None) -> tuple[Host | None, str]:
    """System RAM: its size (the fit's host memory), bandwidth (the speed estimate) and CPU (where
    llama.cpp keeps weights in RAM: sizing.placement.cpu), when given. `local_cpu`: the CPU kvsize read
    from this machine (--cpu host), which no query string can name."""
    ram_mib, gbps, cpu_text = data.get("ram_mib"), data.get("ram_gbps"), (data.get("cpu") or "").strip()
    cores, ghz = data.get("cpu_cores"), data.get("cpu_ghz")
    try:
        cpu = parse_cpu(cpu_text) if cpu_text else local_cpu
    except CpuSpecError as exc:
        raise forms.ValidationError({"cpu": f"Host CPU: {exc}"}) from None
    if ram_mib is None and gbps is None and cpu is None and cores is None and ghz is None:
        return None, f"default: {DEFAULT_HOST_BANDWIDTH_SOURCE}"
    total = (ram_mib or 0) * MiB
    flops, flops_source = cpu_peak(cpu, cores, ghz)
    return Host(
        total, total, None if gbps is None else gbps * 1e9, cpu=cpu, flops=flops, flops_source=flops_source
    ), "given" if gbps else f"default: {DEFAULT_HOST_BANDWIDTH_SOURCE}"


def cpu_peak(cpu: Cpu | None, cores: int | None, ghz: float | None) -> tuple[float | None, str]:
    """The CPU's FP32 FMA peak from its cores and clock (either given; the other at the default desktop's)
    and its SIMD (cpu.flop_per_cycle), with how it was counted; (None, "") when neither is given."""
    if cores is None and ghz is None:
        return None, ""
    n, clock = cores or DEFAULT_CPU_CORES, ghz or DEFAULT_CPU_GHZ
    per_cycle, why = flop_per_cycle(cpu)
    assumed = "" if cores and ghz else f"; {'the clock' if cores else 'the cores'} assumed"
    return n * clock * 1e9 * per_cycle, f"{n} cores × {clock:g} GHz × {per_cycle} FLOP/cycle: {why}{assumed}"
