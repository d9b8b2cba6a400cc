"""What the host's RAM really holds at a placement, beside what `--fit` counts. Pure.

llama.cpp's fit counts the host buffer types only (common/fit.cpp:78-97): the plain CPU (and
pinned CUDA_Host) weights, the KV kept in RAM and the CPU compute buffer. The weights in the CPU's
extra buffer types (AMX, CPU_REPACK: sizing.placement.cpu) are RAM too, resident copies the fit
leaves out. And how the plain CPU weights are held depends on `-lm/--load-mode`
(src/llama-model-loader.cpp:559, llama-model.cpp:1514-1523): with mmap (`auto`, the default, and
`mmap`, `mmap+mlock`) they are pages of the model file in the page cache, shared and reclaimable
(unless locked); with `none`, `mlock` or `dio` they are copied into anonymous memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .cpu import AMX, AMX_QUANTIZED_CRASH, REPACK, Cpu
from .types import MiB, Usage

MMAP_MODES = ("auto", "mmap", "mmap+mlock")
LOCKED_MODES = ("mlock", "mmap+mlock")
BUFFER_WORDS = {
    AMX: "an AMX buffer (repacked for the CPU's AMX tile kernels)",
    REPACK: "a CPU_REPACK buffer (interleaved for the CPU's SIMD kernels)",
}


@dataclass(frozen=True)
class HostMemory:
    counted: Usage  # what --fit projects for the host: model + context + compute
    extra: Mapping[str, int] = field(default_factory=dict)  # AMX / CPU_REPACK bytes
    load_mode: str = "auto"
    span: int = 0  # with mmap, the file's bytes from the first to the last plain CPU weight (CPU_Mapped)
    amx_quantized: bool = False  # quantized weights in the AMX buffer (cpu.AMX_QUANTIZED_CRASH)

    @property
    def extra_bytes(self) -> int:
        return sum(self.extra.values())

    @property
    def needs(self) -> int:
        """Every byte of the host's RAM the server allocates or maps: the fit's count plus the extra types."""
        return self.counted.total + self.extra_bytes

    @property
    def mapped(self) -> int:
        """Plain CPU weights held as pages of the model file (mmap), not copies."""
        return self.counted.model if self.load_mode in MMAP_MODES else 0

    @property
    def locked(self) -> bool:
        return self.load_mode in LOCKED_MODES


def _m(n: int) -> str:
    return f"{n // MiB:,} MiB"


def notes(
    memory: HostMemory,
    cpu: Cpu | None,
    *,
    total: int | None,
    extras_possible: bool,
    potential: Mapping[str, Mapping[str, int]] = {},
) -> list[str]:
    """Sentences for the pages: where the weights kept in RAM live, what --fit leaves out, and what the
    answer would be on other CPUs when the CPU is not given."""
    out = []
    if memory.amx_quantized:
        out.append(AMX_QUANTIZED_CRASH)
    if memory.extra:
        parts = " and ".join(f"{_m(size)} in {BUFFER_WORDS[name]}" for name, size in memory.extra.items())
        where = f"On this CPU ({cpu.label})" if cpu else "Here"
        out.append(
            f"{where}, llama.cpp keeps {parts} — system RAM that its memory breakdown prints on a row of its own "
            f"and --fit does not count as host memory: the fit projects {_m(memory.counted.total)} for the host, "
            f"the host will really need {_m(memory.needs)}."
        )
        if total is not None and memory.needs > total:
            out.append(
                f"That is more than the host's {_m(total)}: llama.cpp's fit cannot see it and may choose a context "
                "that does not fit in RAM (the load then fails or the system swaps). With -nr (--no-repack) every "
                "weight is plain CPU memory, which the fit counts."
            )
    elif cpu is None and extras_possible:
        would = []
        for label, extra in potential.items():
            if extra:
                parts = " and ".join(f"{_m(size)} of the weights in {name}" for name, size in extra.items())
                would.append(f"on a CPU with {label} llama.cpp would keep {parts}")
        if would:
            others = "; ".join(would)
            out.append(
                "This answer depends on the host's CPU, which was not given: kvlab assumed no CPU extra buffer type. "
                f"{others[:1].upper()}{others[1:]} — RAM that --fit does not count, so its "
                "choice can differ. Give the CPU (kvsize --cpu, or the form's CPU field) for the exact answer."
            )
    if memory.counted.model and memory.mapped:
        lock = ", locked in RAM (mlock)" if memory.locked else " (reclaimable page cache unless -lm mlock)"
        out.append(f"{_m(memory.mapped)} of the weights in plain CPU memory are mapped from the model file{lock}.")
        if memory.extra and memory.span > memory.mapped:
            out.append(
                f"llama.cpp's CPU_Mapped buffer spans {_m(memory.span)} of the file, from the first to the last of "
                "them (the repacked weights' bytes between included, as the file lays them out): its log prints "
                "that figure; the repacked weights' pages are read once to copy them, then are reclaimable."
            )
    elif memory.counted.model:
        lock = " and locked (mlock)" if memory.locked else ""
        out.append(f"-lm {memory.load_mode}: the {_m(memory.counted.model)} of weights in RAM are copied{lock}.")
    return out
