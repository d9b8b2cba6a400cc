"""What `llama-fit-params` says a configuration needs: llama.cpp's own memory estimate. Pure.

`llama-fit-params` (tools/fit-params in the llama.cpp tree kvlab builds) loads a model with
`no_alloc` — no weight is read, no buffer allocated — builds the context and reserves the
worst-case compute graph exactly as llama-server would, then reports per device:

* on stdout with `--fit-print on`: one line per device and one for the host,
  `<device> <model> <context> <compute>`, each `bytes / 1024 / 1024` in whole MiB, rounded
  down (common/fit.cpp, common_fit_print);
* on stderr with `-v` (its default mode, which fits `-c`/`-ngl` and prints the fitted
  arguments on stdout): the same figures as a table (common_memory_breakdown_print,
  `| - Host | self = model + context + compute |`, whole MiB, rounded down), every
  `llama_kv_cache: size = …` / `llama_memory_recurrent: size = …` line (MiB with two
  decimals of a float32), and `sched_reserve: CPU compute buffer size = %8.2f MiB`
  (two decimals of the exact byte count as a double).

The finest figure for each part is therefore: the model in whole MiB (its `load_tensors`
line prints 0.00 under `no_alloc`), the KV and recurrent state per cache to 0.01 MiB, the
compute buffer per backend to 0.01 MiB. In `--fit-print on` mode this build drops the log
lines (the process exits before its log thread writes them), so the oracle reads the
default mode's log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .server_log import _PREFIX, COMPUTE_BUFFER_RE, CONTEXT_RE, KV_RE, RECURRENT_RE, KVLine

MiB = 1024 * 1024

PRINT_RE = re.compile(r"^(\S+) (\d+) (\d+) (\d+) ?$", re.M)
BREAKDOWN_RE = re.compile(
    _PREFIX
    + r"common_memory_breakdown_print: \|\s+- (\S+)\s+\|[^|]*?(?<!\d)(\d++) =\s+(\d+) \+\s+(\d+) \+\s+(\d+)\s+[^|]*\|$",
    re.M,
)
FLASH_RE = re.compile(_PREFIX + r"resolve_fused_ops: Flash Attention (enabled|disabled)$", re.M)


class FitParamsOutputError(ValueError):
    """The output is not what llama-fit-params prints; the message says what is missing."""


@dataclass(frozen=True)
class DeviceMiB:
    """One device's (or the host's) figures in whole MiB, rounded down, as llama.cpp prints them."""

    name: str
    model: int
    context: int
    compute: int


@dataclass
class FitParamsReport:
    devices: dict[str, DeviceMiB] = field(default_factory=dict)  # "Host", "CUDA0", …
    kv: list[KVLine] = field(default_factory=list)
    recurrent_mib: str | None = None  # "%.2f", R + S (+ P) state
    compute_mib: dict[str, str] = field(default_factory=dict)  # backend -> "%.2f" MiB
    context: dict[str, str] = field(default_factory=dict)  # n_ctx, n_ctx_seq, n_seq_max, kv_unified
    flash_attn: bool | None = None  # how -fa auto resolved

    @property
    def host(self) -> DeviceMiB:
        return self.devices["Host"]


def whole_mib(n_bytes: int) -> int:
    """llama.cpp's `bytes / 1024 / 1024` on a size_t: whole MiB, rounded down."""
    return n_bytes // MiB


def mib2(n_bytes: int) -> str:
    """sched_reserve's "%8.2f" of `bytes / 1024.0 / 1024.0` (a double), without the padding."""
    return f"{n_bytes / 1024.0 / 1024.0:.2f}"


def parse_fit_print(stdout: str) -> dict[str, DeviceMiB]:
    """The `--fit-print on` table: {device: DeviceMiB}; "Host" is always there."""
    devices = {m[1]: DeviceMiB(m[1], int(m[2]), int(m[3]), int(m[4])) for m in PRINT_RE.finditer(stdout)}
    if "Host" not in devices:
        raise FitParamsOutputError(f"no 'Host <model> <context> <compute>' line in {stdout[-500:]!r}")
    return devices


def parse_fit_log(log: str) -> FitParamsReport:
    """The default mode's `-v` log: the first memory breakdown (the one for the flags as given)."""
    report = FitParamsReport()
    found = log.find("common_memory_breakdown_print:")
    if found < 0:
        raise FitParamsOutputError("no 'common_memory_breakdown_print' table: was it run with -v?")
    header = log.rfind("\n", 0, found) + 1  # the start of its line
    first = log[:header]  # everything llama.cpp logged for the flags as given, before any fitting attempt
    for m in BREAKDOWN_RE.finditer(log, header):
        name = m[1]
        if name in report.devices:
            break  # a later table belongs to a fitting attempt with other flags
        model, context, compute = int(m[3]), int(m[4]), int(m[5])
        if not model + context + compute <= int(m[2]) <= model + context + compute + 2:  # each rounded down
            raise FitParamsOutputError(f"breakdown row {m[0]!r} does not add up")
        report.devices[name] = DeviceMiB(name, model, context, compute)
    if "Host" not in report.devices:
        raise FitParamsOutputError("no '| - Host |' row in the memory breakdown")
    report.kv = [
        KVLine(m[1], int(m[2]), int(m[3]), int(m[4]), int(m[5]), m[6], m[7], m[8], m[9]) for m in KV_RE.finditer(first)
    ]
    recurrent = RECURRENT_RE.search(first)
    if recurrent:
        report.recurrent_mib = recurrent[1]
    for m in COMPUTE_BUFFER_RE.finditer(first):
        report.compute_mib[m[1]] = m[2]
    if not report.compute_mib:
        raise FitParamsOutputError("no 'sched_reserve: … compute buffer size' line")
    report.context = {m[1]: m[2] for m in CONTEXT_RE.finditer(first)}
    flash = FLASH_RE.search(first)
    if flash:
        report.flash_attn = flash[1] == "enabled"
    return report
