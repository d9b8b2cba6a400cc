"""What a llama-server reports about its own memory, read from its log (-lv 4). Pure.

The format strings are those of the llama.cpp tree kvlab builds (src/llama-kv-cache.cpp,
src/llama-memory-recurrent.cpp, src/llama-context.cpp, src/llama-model.cpp,
tools/server/server-context.cpp). Figures are printed in MiB with two decimals.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Any

MiB = 1024 * 1024
_PREFIX = r"^(?:\d+\.\d\d\.\d{3}\.\d{3} )?(?:[IWED] )?"
_NUM = r"\s*(\d+\.\d\d)"
KV_RE = re.compile(
    rf"{_PREFIX}llama_kv_cache: size ={_NUM} MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\), "
    rf"K \((\w+)\):{_NUM} MiB, V \((\w+)\):{_NUM} MiB$",
    re.M,
)
RECURRENT_RE = re.compile(
    rf"{_PREFIX}llama_memory_recurrent: size ={_NUM} MiB "
    r"\(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+) seqs\s+(\d+) rs_seq\), "
    rf"R \(f32\):{_NUM} MiB, S \(f32\):{_NUM} MiB, P \(f32\):{_NUM} MiB$",
    re.M,
)
CONTEXT_RE = re.compile(_PREFIX + r"llama_context: (n_seq_max|n_ctx|n_ctx_seq|kv_unified)\s+= (\S+)$", re.M)
SLOTS_RE = re.compile(
    _PREFIX + r"srv\s+load_model: initializing, n_slots = (\d+), n_ctx_slot = (\d+), kv_unified = '(true|false)'$", re.M
)
MODEL_BUFFER_RE = re.compile(_PREFIX + r"load_tensors:\s+(\S+) model buffer size =" + _NUM + " MiB$", re.M)
COMPUTE_BUFFER_RE = re.compile(_PREFIX + r"sched_reserve:\s+(\S+) compute buffer size =" + _NUM + " MiB$", re.M)


def mib(n_bytes: int) -> str:
    """The server's "%.2f" of (float)bytes / (1024.0f * 1024.0f): float32 rounding, then exact."""
    as_float = struct.unpack("<f", struct.pack("<f", float(n_bytes)))[0]
    return f"{as_float / MiB:.2f}"


@dataclass(frozen=True)
class KVLine:
    size_mib: str
    cells: int
    layers: int
    n_seq_max: int
    n_stream: int
    type_k: str
    k_mib: str
    type_v: str
    v_mib: str


@dataclass
class ReportedMemory:
    kv: list[KVLine] = field(default_factory=list)
    recurrent_mib: str | None = None
    model_buffers_mib: dict[str, float] = field(default_factory=dict)  # device -> MiB
    compute_buffers_mib: dict[str, float] = field(default_factory=dict)
    context: dict[str, str] = field(default_factory=dict)
    n_slots: int | None = None
    n_ctx_slot: int | None = None
    kv_unified: bool | None = None

    @property
    def kv_mib(self) -> float:
        return sum(float(line.size_mib) for line in self.kv) + float(self.recurrent_mib or 0)

    @property
    def model_mib(self) -> float:
        return sum(self.model_buffers_mib.values())

    @property
    def compute_mib(self) -> float:
        return sum(self.compute_buffers_mib.values())

    def as_json(self) -> dict[str, Any]:
        return {
            "kv": [line.__dict__ for line in self.kv],
            "recurrent_mib": self.recurrent_mib,
            "kv_mib": round(self.kv_mib, 2),
            "model_mib": round(self.model_mib, 2),
            "compute_mib": round(self.compute_mib, 2),
            "model_buffers_mib": self.model_buffers_mib,
            "compute_buffers_mib": self.compute_buffers_mib,
            "context": self.context,
            "n_slots": self.n_slots,
            "n_ctx_slot": self.n_ctx_slot,
            "kv_unified": self.kv_unified,
        }


def read_server_log(log: str) -> ReportedMemory:
    reported = ReportedMemory()
    reported.kv = [
        KVLine(m[1], int(m[2]), int(m[3]), int(m[4]), int(m[5]), m[6], m[7], m[8], m[9]) for m in KV_RE.finditer(log)
    ]
    recurrent = RECURRENT_RE.search(log)
    if recurrent:
        reported.recurrent_mib = recurrent[1]
    for m in MODEL_BUFFER_RE.finditer(log):
        reported.model_buffers_mib[m[1]] = reported.model_buffers_mib.get(m[1], 0.0) + float(m[2])
    for m in COMPUTE_BUFFER_RE.finditer(log):
        reported.compute_buffers_mib[m[1]] = float(m[2])  # the last reservation is the one kept
    reported.context = {m[1]: m[2] for m in CONTEXT_RE.finditer(log)}
    slots = SLOTS_RE.search(log)
    if slots:
        reported.n_slots, reported.n_ctx_slot, reported.kv_unified = int(slots[1]), int(slots[2]), slots[3] == "true"
    return reported
