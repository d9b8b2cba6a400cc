"""What a llama-server reports about its own memory, read from its log (-lv 4). Pure.

The format strings are those of the llama.cpp tree kvlab builds (src/llama-kv-cache.cpp,
src/llama-memory-recurrent.cpp, src/llama-context.cpp, src/llama-model.cpp,
tools/server/server-context.cpp). Figures are printed in MiB with two decimals.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable
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


# --- The whole start-up log ------------------------------------------------------------------------
#
# parse_startup_log reads everything a llama-server start-up log says about the configuration the
# server really ran with. The formats are those of b11434 (common/common.cpp common_params_print_info,
# common/fit.cpp, src/llama-model-loader.cpp, src/llama-model.cpp, src/llama-context.cpp,
# src/llama-kv-cache*.cpp, src/llama-memory-recurrent.cpp, tools/server/server-context.cpp,
# ggml/src/ggml-cuda/ggml-cuda.cu), with the older names of the same lines (llama_new_context_with_model,
# llama_kv_cache_init/_unified, llm_load_tensors) where the figure means the same thing.

# What a log may hold, whoever sends it (the explain-log page is open to anyone): its cost is bounded by
# these, and every regular expression below runs in time linear in the line (anchored, possessive, or
# with a literal no earlier repetition can consume), so no line costs more than reading it a few times.
MAX_LOG_CHARS = 2 * 1024 * 1024  # a -lv 4 start-up log is tens to hundreds of KiB; its head is what matters
MAX_LINE_CHARS = 4096  # longer lines (a chat template, a vocabulary dump) are not configuration
MAX_LOG_LINES = 20_000  # a -lv 4 start-up with the fit's trace is about 3,500 lines; later ones are not read
# The most of each kind of thing kept (a real log has a few of each); more are counted in n_over_bounds.
MAX_ITEMS = {
    "slots": 1024, "kv_caches": 64, "recurrent": 64, "buffers": 1024, "devices": 64, "memory_breakdowns": 16,
    "breakdown_rows": 128, "fit": 1000, "notes": 100, "metadata": 4096, "context": 256, "lines_read": 400,
}  # fmt: skip
MAX_SHOWN_LINE_CHARS = 240  # a line read is kept this long (what the page shows of it)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# What may stand before a llama.cpp line: a journald or docker-compose prefix, a router's [pid], the
# --log-timestamps time and the --log-prefix level letter.
_LINE_PREFIX = re.compile(
    r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [\w.-]+\[\d+\]:\s)?"
    r"(?:[\w.-]+\s+\|\s)?"
    r"(?:\[\d+\]\s+)?"
    r"(?:\d+\.\d\d\.\d{3}\.\d{3}\s+)?"
    r"(?:[IWEDT]\s+)?"
)
_FUNC = re.compile(r"(?:(?:srv|slot|cmn|spec|que|res)\s+)?([A-Za-z_]\w*|operator\(\))\s*:\s?(.*)$")
_MIB = r"(\d+(?:\.\d+)?)"
_ERROR = re.compile(r"\berror\b|failed to|out of memory", re.I)
MAX_ERRORS = 20


class LogError(ValueError):
    """The text is not a llama-server start-up log kvlab can read; the message says why."""


@dataclass(frozen=True)
class KVCache(KVLine):
    """One `llama_kv_cache: size = …` line (per stream cells, the layers, K and V) and which cache it sizes."""

    kind: str = ""  # "full", "swa" (after llama_kv_cache_iswa's "creating SWA KV cache"), or "" when not said


@dataclass(frozen=True)
class RecurrentState:
    size_mib: str
    cells: int
    layers: int
    n_seq_max: int
    n_rs_seq: int
    r_mib: str
    s_mib: str
    p_mib: str


@dataclass(frozen=True)
class Buffer:
    """One buffer line: `kind` is "model", "kv", "rs" (recurrent state), "compute" or "output"."""

    kind: str
    device: str  # CUDA0, CUDA_Host, CPU, CPU_Mapped, …
    mib: str


@dataclass
class StartupLog:
    """What one llama-server start-up log says. None or empty: the log did not print it (`missing`)."""

    build: dict[str, Any] = field(default_factory=dict)  # number, commit, compiler, target
    model_path: str | None = None
    model_name: str | None = None
    model_arch: str | None = None
    model_file_type: str | None = None
    model_file_size: str | None = None  # "6.05 MiB" as printed
    model_params: str | None = None  # "1.58 M"
    metadata: dict[str, Any] = field(default_factory=dict)  # the GGUF keys the loader printed in full
    metadata_truncated: list[str] = field(default_factory=list)  # keys printed cut ("…"): not in metadata
    array_lengths: dict[str, int] = field(default_factory=dict)  # every array key's length, as printed
    n_vocab: int | None = None
    context: dict[str, str] = field(default_factory=dict)  # every `llama_context: key = value` line
    n_ctx: int | None = None
    n_ctx_seq: int | None = None
    n_seq_max: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    kv_unified: bool | None = None
    flash_attn: str | None = None  # as requested: "auto", "enabled", "disabled"
    flash_attn_resolved: bool | None = None  # what `auto` became (or the requested on/off)
    n_slots: int | None = None
    n_ctx_slot: int | None = None
    slots: list[dict[str, int]] = field(default_factory=list)  # {"id", "n_ctx"} per slot
    kv_caches: list[KVCache] = field(default_factory=list)
    recurrent: list[RecurrentState] = field(default_factory=list)
    buffers: list[Buffer] = field(default_factory=list)
    offloaded_layers: tuple[int, int] | None = None  # (on the GPUs, of)
    devices: list[dict[str, Any]] = field(default_factory=list)  # name, description, total_mib, free_mib, …
    memory_breakdowns: list[list[dict[str, Any]]] = field(default_factory=list)  # every table printed
    fit: list[str] = field(default_factory=list)  # the --fit lines (-lv 4), as printed
    fit_context: tuple[int, int] | None = None  # (from, to) when the fit reduced the context
    notes: list[str] = field(default_factory=list)  # the server's own adjustments, as printed
    errors: list[str] = field(default_factory=list)  # error lines (E level, "error:")
    system_info: str | None = None  # llama.cpp's CPU features line (-lv 4): where weights in RAM go
    n_lines: int = 0
    n_recognised: int = 0
    n_chars: int = 0
    n_long_lines: int = 0  # lines over MAX_LINE_CHARS, not read
    n_unread_lines: int = 0  # lines past MAX_LOG_LINES, not read
    n_over_bounds: int = 0  # things past MAX_ITEMS, not kept
    lines_read: list[tuple[int, str]] = field(default_factory=list)  # (line number, its start) of lines kvlab read

    def room(self, kind: str, size: int) -> bool:
        """Whether one more `kind` may be kept (MAX_ITEMS); counts the refusal when not."""
        if size < MAX_ITEMS[kind]:
            return True
        self.n_over_bounds += 1
        return False

    @property
    def reading_notes(self) -> list[str]:
        """What of the text was not read, in words."""
        notes = []
        if self.n_unread_lines:
            notes.append(
                f"Only the first {MAX_LOG_LINES:,} lines were read; the {self.n_unread_lines:,} after them were not "
                "(a start-up log is a few thousand lines)."
            )
        if self.n_long_lines:
            notes.append(
                f"{self.n_long_lines:,} line{'s' if self.n_long_lines != 1 else ''} longer than {MAX_LINE_CHARS:,} "
                "characters (a template or vocabulary dump, not configuration) were not read."
            )
        if self.n_over_bounds:
            notes.append(
                f"{self.n_over_bounds:,} repeated line{'s' if self.n_over_bounds != 1 else ''} past what a start-up "
                "log holds (devices, slots, buffers, tables, metadata keys) were not kept."
            )
        return notes

    @property
    def cache_types(self) -> tuple[str, str] | None:
        line = next((c for c in self.kv_caches), None)
        return (line.type_k, line.type_v) if line else None

    def buffers_of(self, kind: str) -> dict[str, float]:
        """MiB per device of one kind of buffer: summed, except compute buffers (the last reservation's)."""
        out: dict[str, float] = {}
        for b in self.buffers:
            if b.kind == kind:
                out[b.device] = float(b.mib) if kind == "compute" else out.get(b.device, 0.0) + float(b.mib)
        return out

    @property
    def missing(self) -> list[str]:
        """What a complete -lv 4 start-up log prints and this one does not."""
        wanted = {
            "build": self.build,
            "model path": self.model_path,
            "model architecture": self.model_arch,
            "n_ctx": self.n_ctx,
            "n_ctx_seq": self.n_ctx_seq,
            "n_seq_max": self.n_seq_max,
            "kv_unified": self.kv_unified is not None,
            "flash attention": self.flash_attn,
            "n_ubatch": self.n_ubatch,
            "KV cache lines": self.kv_caches or self.recurrent,
            "model buffers": any(b.kind == "model" for b in self.buffers),
            "compute buffers": any(b.kind == "compute" for b in self.buffers),
            "slots": self.n_slots,
        }
        return [name for name, value in wanted.items() if value is None or value is False or value in ({}, [])]

    def to_dict(self) -> dict[str, Any]:
        return {
            "build": self.build,
            "model": {
                "path": self.model_path,
                "name": self.model_name,
                "arch": self.model_arch,
                "file_type": self.model_file_type,
                "file_size": self.model_file_size,
                "params": self.model_params,
            },
            "metadata": self.metadata,
            "metadata_truncated": self.metadata_truncated,
            "array_lengths": self.array_lengths,
            "n_vocab": self.n_vocab,
            "context": self.context,
            "n_ctx": self.n_ctx,
            "n_ctx_seq": self.n_ctx_seq,
            "n_seq_max": self.n_seq_max,
            "n_batch": self.n_batch,
            "n_ubatch": self.n_ubatch,
            "kv_unified": self.kv_unified,
            "flash_attn": self.flash_attn,
            "flash_attn_resolved": self.flash_attn_resolved,
            "cache_type_k": self.cache_types[0] if self.cache_types else None,
            "cache_type_v": self.cache_types[1] if self.cache_types else None,
            "n_slots": self.n_slots,
            "n_ctx_slot": self.n_ctx_slot,
            "slots": self.slots,
            "kv_caches": [c.__dict__ for c in self.kv_caches],
            "recurrent": [r.__dict__ for r in self.recurrent],
            "buffers": [b.__dict__ for b in self.buffers],
            "offloaded_layers": list(self.offloaded_layers) if self.offloaded_layers else None,
            "devices": self.devices,
            "memory_breakdowns": self.memory_breakdowns,
            "fit": self.fit,
            "fit_context": list(self.fit_context) if self.fit_context else None,
            "notes": self.notes,
            "errors": self.errors,
            "missing": self.missing,
            "n_lines": self.n_lines,
            "n_recognised": self.n_recognised,
        }


_KV_SIZE = re.compile(
    rf"size ={_NUM} MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\), "
    rf"K \((\w+)\):{_NUM} MiB, V \((\w+)\):{_NUM} MiB"
)
_RS_SIZE = re.compile(
    rf"size ={_NUM} MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+) seqs\s+(\d+) rs_seq\), "
    rf"R \(\w+\):{_NUM} MiB, S \(\w+\):{_NUM} MiB, P \(\w+\):{_NUM} MiB"
)
# Searched for anywhere in the line: the buffer's name starts only where a word does ((?<!\S)), and
# the runs are possessive, so a line of one long word is read once, not once per character.
_BUFFER = re.compile(rf"(?<!\S)(\S++)\s++(model |KV |RS |compute |output |)buffer size\s*+=\s*+{_MIB} MiB")
_ISWA = re.compile(r"creating\s+(non-SWA|SWA) KV cache")
# The key runs to the first "=" (the caller strips its spaces): possessive, where a lazy key retried the
# spaces after each of its characters (quadratic on "a" and 4,000 spaces without an "=").
_KEY_VALUE = re.compile(r"(\w[\w ]*+)\s*+=\s*+(.*)")
_GGUF_KV = re.compile(r"- kv\s+\d+:\s+(\S+)\s+(\w+|arr\[\w+,\d+\])\s+= ?(.*)$")
_BUILD = re.compile(r"build(?: =|:)? (\d+) \(([0-9a-fA-F]+|unknown)\)(?: with (.+?) for (.+?)(?: \(debug\))?$)?")
_VERSION = re.compile(r"^version: (\d+) \(([0-9a-fA-F]+|unknown)\)$")
# ggml-cuda's "  Device 0: NVIDIA H200, compute capability 9.0, VMM: yes[, VRAM: 143167 MiB]" (ROCm's:
# "…, gfx1100 (0x1100), VMM: no, Wave Size: 32"): the head up to the first ", VMM: " is cut by
# _cuda_device, not by a pattern of two lazy runs (quadratic on a line of ", " repeated).
_CUDA_DEVICE_HEAD = re.compile(r"\s*+Device (\d++): ")
_CUDA_DEVICE_TAIL = re.compile(r"VMM: (yes|no)(?:, Wave Size: \d++)?(?:, VRAM: (\d++) MiB)?")
_COMPUTE_CAPABILITY = re.compile(r"compute capability (\d++\.\d++)")
_ROCM_ARCH = re.compile(r".*?\(0x[0-9a-f]++\)")
_DEVICE_INFO = re.compile(r"^\s*- (\S+)\s*: (.*) \((\d+) MiB, (\d+) MiB free\)$")
# Matched at the start, not searched from every "using device": once per line. The description ends at the
# first ") " the rest follows (greedy, it took the bus id too: "RTX 4090) (0000:01:00.0").
_USING_DEVICE = re.compile(r"using device (\S++) \((.*?)\) (?:\([^)]*+\) )?- (\d++) MiB free")
_BREAKDOWN_ROW = re.compile(
    r"\|\s++- (\S+)(?: \(([^)|]*+)\))?\s+\|\s++(?:(\d+)\s+=\s+(-?\d+)\s+\+\s+\()?"
    r"(\d+)\s+=\s+(\d+)\s+\+\s+(\d+)\s+\+\s+(\d+)\)?"
    r"(?:\s+\+\s+(-?\d+))?\s*\|"
)
_SLOT = re.compile(r"id\s+(\d+) \| task -?\d+ \| new slot,? n_ctx(?:_slot)? = (\d+)")
_SLOTS = re.compile(r"initializing(?: slots)?, n_slots = (\d+)(?:, n_ctx_slot = (\d+), kv_unified = '(true|false)')?")
_FIT_FUNCS = {"common_params_fit_impl", "common_fit_params", "llama_params_fit", "llama_params_fit_impl"}
_CONTEXT_FUNCS = {"llama_context", "llama_new_context_with_model", "llama_init_from_model"}
_KV_FUNCS = {"llama_kv_cache", "llama_kv_cache_unified", "llama_kv_cache_init", "llama_kv_cache_iswa"}
_MODEL_FUNCS = {"load_tensors", "llm_load_tensors"}


def _clean_lines(text: str | bytes) -> tuple[list[str], int, int]:
    """The first MAX_LOG_LINES lines, how many lines follow them, and the text's length."""
    if isinstance(text, bytes):
        if len(text) > MAX_LOG_CHARS:
            raise LogError(_too_long(len(text)))
        text = text.decode("utf-8", errors="replace")
    if len(text) > MAX_LOG_CHARS:
        raise LogError(_too_long(len(text)))
    if "\0" in text:
        raise LogError("This is not a text log: it holds NUL bytes. Paste llama-server's start-up output as text.")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n", MAX_LOG_LINES)
    unread = lines.pop().count("\n") + 1 if len(lines) > MAX_LOG_LINES else 0
    return lines, unread, len(text)


def _too_long(n: int) -> str:
    return (
        f"The log is {n / MiB:.1f} MiB; kvlab reads start-up logs of at most {MAX_LOG_CHARS // MiB} MiB "
        "(a -lv 4 start-up log is tens of KiB). Give its first lines, up to 'server is listening'."
    )


def _gguf_value(kind: str, raw: str) -> Any:
    if kind == "str":
        return raw.replace("\\n", "\n")
    if kind == "bool":
        return raw == "true"
    if kind.startswith("arr["):
        from kvlab import bounded_parse

        return bounded_parse.python_loads(raw)  # Refused (a ValueError) past the outside-JSON bounds
    try:
        return int(raw) if kind[0] in "ui" else float(raw)
    except ValueError:
        return raw


def parse_startup_log(text: str | bytes) -> StartupLog:
    """Everything a llama-server start-up log says about the configuration it ran with.

    Tolerant of --log-prefix/--log-timestamps (on or off), colours, docker/journald prefixes, Windows
    line endings and a log cut short (what is absent is listed in `missing`). Raises LogError for input
    that is too large, binary, or holds no line of a llama-server start-up."""
    log = StartupLog()
    lines, log.n_unread_lines, log.n_chars = _clean_lines(text)
    log.n_lines = len(lines) + log.n_unread_lines
    reading = _Reading(log)
    for number, raw in enumerate(lines, start=1):
        if len(raw) > MAX_LINE_CHARS:
            log.n_long_lines += 1
            continue
        line = _LINE_PREFIX.sub("", _ANSI.sub("", raw), count=1).rstrip()
        if not line:
            continue
        if _read_line(reading, line):
            log.n_recognised += 1
            if log.room("lines_read", len(log.lines_read)):
                log.lines_read.append((number, line[:MAX_SHOWN_LINE_CHARS]))
        elif _ERROR.search(line) and len(log.errors) < MAX_ERRORS:
            log.errors.append(line)
    if not log.n_recognised:
        raise LogError(
            "No line of a llama-server start-up log was found (no llama_context, llama_kv_cache, load_tensors "
            "or load_model line). Paste the server's output from its start, ideally run with -lv 4."
        )
    return log


@dataclass
class _Reading:
    """A log being read, and what one line tells the next: the KV cache an iSWA model creates next
    ("swa" or "full"), the memory breakdown whose rows follow (None: past its bound). `line` and `func`:
    the line read now (without its prefix) and the function that printed it."""

    log: StartupLog
    kv_kind: str = ""
    breakdown: list[dict[str, Any]] | None = None
    line: str = ""
    func: str = ""


def _read_line(reading: _Reading, line: str) -> bool:
    """Reads one prefix-free line into the log; True when it was a line kvlab knows. A line is first read
    whole (lines that name no function), then by the function that printed it (_BY_FUNC)."""
    reading.line = line
    if any(read(reading, line) for read in _WHOLE_LINE_READERS):
        return True
    m = _FUNC.match(line)
    if not m:
        return False
    reading.func, rest = m[1], m[2]
    read = _BY_FUNC.get(reading.func)
    if read is None and reading.func.startswith(_BUILD_FUNC_PREFIXES):
        read = _read_build
    return read is not None and read(reading, rest)


# ---- lines read whole ----


def _read_system_info(reading: _Reading, line: str) -> bool:
    at = line.find("system_info: n_threads")
    if at < 0:
        return False
    reading.log.system_info = line[at:]
    return True


def _read_cuda_device(reading: _Reading, line: str) -> bool:
    device = _cuda_device(line)
    if not device:
        return False
    index, description, capability, vmm, total_mib = device
    entry = _device(reading.log, f"CUDA{index}")
    entry.update(description=description, vmm=vmm)
    if capability:
        entry["compute_capability"] = float(capability)
    if total_mib:
        entry["total_mib"] = int(total_mib)
    return True


def _read_device_info(reading: _Reading, text: str) -> bool:
    info = _DEVICE_INFO.match(text)
    if not info:
        return False
    _device(reading.log, info[1]).update(description=info[2], total_mib=int(info[3]), free_mib=int(info[4]))
    return True


def _read_version(reading: _Reading, line: str) -> bool:
    version = _VERSION.match(line)
    if not version:
        return False
    reading.log.build = {"number": int(version[1]), "commit": version[2]}
    return True


_WHOLE_LINE_READERS = (_read_system_info, _read_cuda_device, _read_device_info, _read_version)


# ---- lines read by the function that printed them: (reading, the text after "func: ") ----


def _read_breakdown(reading: _Reading, rest: str) -> bool:
    log = reading.log
    if "memory breakdown" in rest:
        reading.breakdown = [] if log.room("memory_breakdowns", len(log.memory_breakdowns)) else None
        if reading.breakdown is not None:
            log.memory_breakdowns.append(reading.breakdown)
        return True
    row = _BREAKDOWN_ROW.search(rest)
    if not row or reading.breakdown is None or not log.room("breakdown_rows", len(reading.breakdown)):
        return False
    reading.breakdown.append(
        {
            "name": row[1],
            "description": row[2],
            "total": _int(row[3]),
            "free": _int(row[4]),
            "self": int(row[5]),
            "model": int(row[6]),
            "context": int(row[7]),
            "compute": int(row[8]),
            "unaccounted": _int(row[9]),
        }
    )
    return True


def _read_fit(reading: _Reading, rest: str) -> bool:
    log = reading.log
    if log.room("fit", len(log.fit)):
        log.fit.append(f"{reading.func}: {rest}")
    reduced = re.search(r"context size reduced from (\d+) to (\d+)", rest)
    if reduced:
        log.fit_context = (int(reduced[1]), int(reduced[2]))
    return True


def _read_init(reading: _Reading, rest: str) -> bool:
    return "fitting params" in rest and _read_fit(reading, rest)


def _read_build(reading: _Reading, rest: str) -> bool:
    build = _BUILD.search(reading.line)
    if build:
        reading.log.build = {"number": int(build[1]), "commit": build[2], "compiler": build[3], "target": build[4]}
        return True
    return _read_device_info(reading, rest)


def _read_kv(reading: _Reading, rest: str) -> bool:
    log = reading.log
    iswa = _ISWA.search(rest)
    if iswa:
        reading.kv_kind = "swa" if iswa[1] == "SWA" else "full"
        return True
    size = _KV_SIZE.match(rest)
    if size and log.room("kv_caches", len(log.kv_caches)):
        log.kv_caches.append(
            KVCache(
                size[1],
                int(size[2]),
                int(size[3]),
                int(size[4]),
                int(size[5]),
                size[6],
                size[7],
                size[8],
                size[9],
                kind=reading.kv_kind,
            )  # fmt: skip
        )
        return True
    return _read_buffer(log, rest)


def _read_recurrent(reading: _Reading, rest: str) -> bool:
    log = reading.log
    size = _RS_SIZE.match(rest)
    if size and log.room("recurrent", len(log.recurrent)):
        log.recurrent.append(
            RecurrentState(size[1], int(size[2]), int(size[3]), int(size[4]), int(size[5]), size[6], size[7], size[8])
        )
        return True
    return _read_buffer(log, rest)


def _read_tensors(reading: _Reading, rest: str) -> bool:
    offloaded = re.match(r"offloaded (\d+)/(\d+) layers to GPU", rest)
    if offloaded:
        reading.log.offloaded_layers = (int(offloaded[1]), int(offloaded[2]))
        return True
    return _read_buffer(reading.log, rest)


def _read_fused_ops(reading: _Reading, rest: str) -> bool:
    fa = re.match(r"Flash Attention (enabled|not supported, set to disabled)", rest)
    if not fa:
        return False
    reading.log.flash_attn_resolved = fa[1] == "enabled"
    return True


# print_info's keys and where each goes; the model's own arch and name, once the metadata gave them, stay.
_PRINT_INFO_FIELDS = {
    "arch": ("model_arch", True),
    "general.name": ("model_name", True),
    "file type": ("model_file_type", False),
    "model params": ("model_params", False),
}


def _read_print_info(reading: _Reading, rest: str) -> bool:
    log = reading.log
    kv = _KEY_VALUE.match(rest)
    if not kv:
        return False
    key, value = kv[1].strip(), kv[2].strip()
    if key in _PRINT_INFO_FIELDS:
        name, keep = _PRINT_INFO_FIELDS[key]
        setattr(log, name, (keep and getattr(log, name)) or value)
    elif key == "file size":
        log.model_file_size = value.split(" (")[0]
    elif key == "n_vocab" and value.isdigit():
        log.n_vocab = int(value)
    return True


def _read_using_device(reading: _Reading, rest: str) -> bool:
    using = _USING_DEVICE.match(rest)
    if not using:
        return False
    _device(reading.log, using[1]).update(description=using[2], free_mib=int(using[3]))
    return True


_FuncReader = Callable[[_Reading, str], bool]
# The functions whose lines kvlab reads, each with its reader. The first rule that names a function wins
# (llama_context prints its figures and its buffers: _read_context reads both).
_FUNC_RULES: tuple[tuple[Iterable[str], _FuncReader], ...] = (
    (("common_memory_breakdown_print", "llama_print_memory_breakdown"), _read_breakdown),
    (_FIT_FUNCS, _read_fit),
    (("common_init_",), _read_init),
    (_CONTEXT_FUNCS, lambda reading, rest: _read_context(reading.log, rest)),
    (_KV_FUNCS, _read_kv),
    (("llama_memory_recurrent",), _read_recurrent),
    (_MODEL_FUNCS, _read_tensors),
    (("sched_reserve", "graph_reserve", "llama_context"), lambda reading, rest: _read_buffer(reading.log, rest)),
    (("resolve_fused_ops",), _read_fused_ops),
    (("llama_model_loader",), lambda reading, rest: _read_loader(reading.log, rest)),
    (("print_info", "llm_load_print_meta"), _read_print_info),
    (("load_model",), lambda reading, rest: _read_server(reading.log, rest)),
    (("llama_model_load_from_file_impl",), _read_using_device),
)
_BY_FUNC: dict[str, _FuncReader] = {}
for _names, _read in _FUNC_RULES:
    for _name in _names:
        _BY_FUNC.setdefault(_name, _read)
# Any other function of these prefixes may print the build line or the device list (common_params_*, main).
_BUILD_FUNC_PREFIXES = ("common_param", "build", "main")


def _cuda_device(line: str) -> tuple[str, str, str | None, bool, str | None] | None:
    """(index, description, compute capability, VMM, total MiB) of a ggml-cuda device line, or None."""
    head = _CUDA_DEVICE_HEAD.match(line)
    if not head:
        return None
    at = line.find(", VMM: ", head.end())
    tail = _CUDA_DEVICE_TAIL.match(line, at + 2) if at >= 0 else None
    if tail is None:
        return None
    description, _, kind = line[head.end() : at].rpartition(", ")
    capability = _COMPUTE_CAPABILITY.fullmatch(kind)
    if not description or (capability is None and not _ROCM_ARCH.fullmatch(kind)):
        return None
    return head[1], description, capability[1] if capability else None, tail[1] == "yes", tail[2]


def _read_context(log: StartupLog, rest: str) -> bool:
    if "buffer size" in rest:
        return _read_buffer(log, rest)
    auto = re.match(r"Flash Attention was auto, set to (enabled|disabled)", rest)
    if auto:
        log.flash_attn_resolved = auto[1] == "enabled"
        return True
    if rest.startswith(("n_ctx is not divisible", "enabling flash_attn", "n_ctx_seq (", "n_ctx_per_seq (")):
        if log.room("notes", len(log.notes)):
            log.notes.append(rest)
        return True
    kv = re.match(r"(\w+)\s+= (\S+)$", rest)
    if not kv:
        return False
    key, value = kv[1], kv[2]
    if key in log.context or log.room("context", len(log.context)):
        log.context[key] = value
    if key in ("n_ctx", "n_ctx_seq", "n_seq_max", "n_batch", "n_ubatch") and value.isdigit():
        setattr(log, key, int(value))
    elif key == "n_ctx_per_seq" and value.isdigit():  # the name before n_ctx_seq
        log.n_ctx_seq = int(value)
    elif key == "kv_unified":
        log.kv_unified = value == "true"
    elif key == "flash_attn":
        # b11434: auto|enabled|disabled; older builds: 0/1 (then it is also what ran)
        log.flash_attn = {"0": "disabled", "1": "enabled", "false": "disabled", "true": "enabled"}.get(value, value)
        if log.flash_attn in ("enabled", "disabled"):
            log.flash_attn_resolved = log.flash_attn == "enabled"
    return True


def _read_buffer(log: StartupLog, rest: str) -> bool:
    b = _BUFFER.search(rest)
    if not b:
        return False
    kind = {"model ": "model", "KV ": "kv", "RS ": "rs", "compute ": "compute", "output ": "output", "": "model"}[b[2]]
    if log.room("buffers", len(log.buffers)):
        log.buffers.append(Buffer(kind, b[1], f"{float(b[3]):.2f}"))
    return True


def _read_loader(log: StartupLog, rest: str) -> bool:
    loaded = re.match(r"loaded meta data with \d+ key-value pairs and \d+ tensors from (.+?) \(version", rest)
    if loaded:
        log.model_path = log.model_path or loaded[1]
        return True
    kv = _GGUF_KV.match(rest)
    if not kv:
        return False
    key, kind, raw = kv[1], kv[2], kv[3]
    if key not in log.metadata and not log.room("metadata", len(log.metadata) + len(log.metadata_truncated)):
        return True
    length = re.match(r"arr\[\w+,(\d+)\]", kind)
    if length:
        log.array_lengths[key] = int(length[1])
    if raw.endswith("...") and (kind.startswith("arr[") or len(raw) >= 40):
        log.metadata_truncated.append(key)
        return True
    try:
        log.metadata[key] = _gguf_value(kind, raw)
    except (ValueError, RecursionError):  # an array nested past the JSON reader's depth is no GGUF value
        log.metadata_truncated.append(key)
        return True
    if key == "general.architecture":
        log.model_arch = str(log.metadata[key])
    elif key == "general.name":
        log.model_name = str(log.metadata[key])
    return True


def _read_server(log: StartupLog, rest: str) -> bool:
    loading = re.match(r"loading model '(.*)'$", rest)
    if loading:
        log.model_path = loading[1]
        return True
    slots = _SLOTS.search(rest)
    if slots:
        log.n_slots = int(slots[1])
        if slots[2]:
            log.n_ctx_slot = int(slots[2])
            log.kv_unified = slots[3] == "true" if log.kv_unified is None else log.kv_unified
        return True
    slot = _SLOT.search(rest)
    if slot:
        if log.room("slots", len(log.slots)):
            log.slots.append({"id": int(slot[1]), "n_ctx": int(slot[2])})
        return True
    return False


def _device(log: StartupLog, name: str) -> dict[str, Any]:
    for entry in log.devices:
        if entry["name"] == name:
            return entry
    entry = {"name": name}
    if log.room("devices", len(log.devices)):
        log.devices.append(entry)
    return entry  # past the bound, filled and dropped


def _int(text: str | None) -> int | None:
    return int(text) if text else None
