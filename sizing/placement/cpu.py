"""The host's CPU as llama.cpp b11434's CPU backend sees it, and where it keeps weights in RAM. Pure.

A weight llama.cpp keeps in system RAM does not always go to plain CPU memory. The loader gives
it the first buffer type of the CPU's list that can run its op (src/llama-model.cpp:1080-1130
`make_cpu_buft_list`, src/llama-model-loader.cpp:1066-1077 `select_weight_buft`):

1. the first GPU's pinned host type (CUDA_Host) — when the model has a GPU and `--no-host` is not
   given; it takes every weight, and with mmap the loader swaps it for plain CPU (:1288-1296);
2. the CPU's *extra* buffer types, unless `-nr`/`--no-repack` (common.cpp:1663
   `use_extra_bufts = !no_extra_bufts`), in the order ggml-cpu.cpp:42-74 lists them:
   * **AMX** (ggml-cpu/amx/amx.cpp:143-199), in a build for a CPU with AMX-INT8 and AVX512-VNNI
     (`__AMX_INT8__ && __AVX512VNNI__`, llama.cpp's `AMX_INT8 = 1`): MUL_MAT weights (not
     MUL_MAT_ID) of q4_0, q4_1, q8_0 (ne0 a multiple of 32), q4_K, q5_K, q6_K, iq4_xs (of 256) or
     f16 (of 16), with ne1 a multiple of 32. Quantized ones are stored repacked, sized by
     `ggml_backend_amx_get_alloc_size` (amx/mmq.cpp:2267-2287, get_row_size :245-260: q8_0 adds an
     int32 per block, q4_K/q5_K 4 bytes, iq4_xs 2); f16 is copied as is.
   * **CPU_REPACK** (ggml-cpu/repack.cpp:4925-5141, :5189-5223), when the build has REPACK (on by
     default): 2-D MUL_MAT or 3-D MUL_MAT_ID weights whose type has an interleaved kernel on
     this CPU — on x86 with AVX2 q4_0, q4_K, iq4_nl, mxfp4 (ne1 a multiple of 8), with AVX-512
     also q2_K; on ARM with NEON and DOTPROD q4_0, iq4_nl, mxfp4, q8_0, q1_0 (ne1 of 4) and
     q4_K, q5_K, q6_K (of 8), with MATMUL_INT8 the same; q4_0 also with SVE of 256 bits and
     MATMUL_INT8. Sized as ggml_nbytes (no get_alloc_size).
3. plain CPU memory, which takes the rest.

Both extra types are allocated and filled by copying (never mmapped: their `set_tensor`
repacks), and neither is a host buffer type (`is_host` is NULL): llama.cpp prints each on a
breakdown row of its own, and `--fit`'s measurement leaves them out altogether (common/fit.cpp:
78-97 counts host buffer types and the model's GPUs only) — so on such a CPU the fit can choose a
context whose weights do not fit in RAM. kvlab counts them apart (breakdown's `extra` buckets,
sized by its `extra_alloc_size`) and says so.

The CPU is given by llama.cpp's own feature names (its `system_info` line: `AVX2 = 1 |
AMX_INT8 = 1 | REPACK = 1 | …`), a preset (`avx2`, `avx512`, `avx512+amx`, `arm`, `arm+i8mm`,
`none`), or read off a machine's /proc/cpuinfo as a native build (GGML_NATIVE, the default) sees it.
Not modelled: KleidiAI (GGML_CPU_KLEIDIAI, off by default), RISC-V's and s390x's kernels, and
the SpacemiT and HBM buffer types (builds kvlab does not target).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ..ggml_types import BY_NAME, tensor_bytes
from .tensor_ops import weight_op

AMX = "AMX"
REPACK = "CPU_REPACK"
# The CPU's list tries AMX before CPU_REPACK (ggml-cpu.cpp:42-74). The order llama.cpp's breakdown
# prints their rows differs: llama_memory_breakdown is a std::map keyed by the buffer type's pointer,
# and in this build CPU_REPACK's static object lies before AMX's (seen in llama-fit-params' table
# for a q4_0 MoE on a CPU with AMX: CPU_REPACK 1296, then AMX 125).
PRINT_ORDER = (REPACK, AMX)

# llama.cpp's names (ggml_backend_cpu_get_features) that decide the extra buffer types.
X86 = ("SSE3", "SSSE3", "AVX", "AVX_VNNI", "AVX2", "F16C", "FMA", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI",
       "AVX512_BF16", "AMX_INT8")  # fmt: skip
ARM = ("NEON", "ARM_FMA", "FP16_VA", "MATMUL_INT8", "SVE", "DOTPROD", "SME", "SME2")
KNOWN_FEATURES = frozenset(X86 + ARM + ("REPACK", "KLEIDIAI", "OPENMP", "LLAMAFILE"))

_AVX2 = ("SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2")
PRESETS: dict[str, tuple[str, ...]] = {
    "none": (),  # no SIMD kernel llama.cpp repacks for (e.g. an x86 CPU without AVX2)
    "avx2": _AVX2,
    "avx512": (*_AVX2, "AVX512"),
    "amx": (*_AVX2, "AVX512", "AVX512_VNNI", "AMX_INT8"),
    "arm": ("NEON", "ARM_FMA", "FP16_VA", "DOTPROD"),
    "i8mm": ("NEON", "ARM_FMA", "FP16_VA", "DOTPROD", "MATMUL_INT8"),
    "sve256": ("SVE",),
    "norepack": (),
}
CPU_CHOICES = "avx2, avx512, avx512+amx, arm, arm+i8mm, arm+i8mm+sve256, none, host"

# /proc/cpuinfo flag (x86 "flags", ARM "Features") -> llama.cpp's feature in a native build
_CPUINFO = {
    "pni": "SSE3",
    "ssse3": "SSSE3",
    "avx": "AVX",
    "avx_vnni": "AVX_VNNI",
    "avx2": "AVX2",
    "f16c": "F16C",
    "fma": "FMA",
    "bmi2": "BMI2",
    "avx512f": "AVX512",
    "avx512vbmi": "AVX512_VBMI",
    "avx512_vnni": "AVX512_VNNI",
    "avx512_bf16": "AVX512_BF16",
    "asimd": "NEON",
    "fphp": "FP16_VA",
    "asimddp": "DOTPROD",
    "i8mm": "MATMUL_INT8",
    "sve": "SVE",
    "sme": "SME",
    "sme2": "SME2",
}
_FEATURE_RE = re.compile(r"\b([A-Z][A-Z0-9_]*) = (\w+)")
MAX_SPEC_CHARS = 4096


class CpuSpecError(ValueError):
    """A CPU description kvlab cannot read; the message says what it accepts."""


@dataclass(frozen=True)
class Cpu:
    """The CPU features a llama.cpp build uses (its system_info names), and where they came from."""

    features: frozenset[str]
    source: str  # "--cpu avx512+amx", "llama.cpp system_info", "/proc/cpuinfo of …"
    sve_bits: int = 0  # SVE vector length (llama.cpp's SVE_CNT is bytes); 0: not SVE or unknown
    repack: bool = True  # the build has GGML_CPU_REPACK (REPACK = 1; on by default)

    @functools.cached_property
    def repack_rules(self) -> dict[str, tuple[int, ...]]:
        return _repack_rules(self)

    @property
    def amx(self) -> bool:
        return "AMX_INT8" in self.features and "AVX512_VNNI" in self.features

    def has(self, *names: str) -> bool:
        return all(n in self.features for n in names)

    @property
    def label(self) -> str:
        """A short name for the pages: the preset it matches, else its deciding features."""
        parts = []
        if self.amx:
            parts.append("AVX-512 + AMX")
        elif self.has("AVX512"):
            parts.append("AVX-512")
        elif self.has("AVX2"):
            parts.append("AVX2")
        if self.has("NEON"):
            arm = "ARM NEON"
            if self.has("DOTPROD"):
                arm += " + dotprod"
            if self.has("MATMUL_INT8"):
                arm += " + i8mm"
            if self.has("SVE"):
                arm += f" + SVE{self.sve_bits or ''}"
            parts.append(arm)
        text = ", ".join(parts) or "no AVX2/NEON kernels"
        return text if self.repack else text + " (build without REPACK)"


def flop_per_cycle(cpu: Cpu | None) -> tuple[int, str]:
    """A core's FP32 FMA peak per cycle from its widest SIMD (two FMA units, 2 FLOP a lane), and why.

    AVX-512: 2 × 16 lanes × 2 = 64 (Intel's cores with two 512-bit FMA units; one unit, or Zen 4's
    double-pumped 256-bit ones, reach half); AVX2: 2 × 8 × 2 = 32; NEON: 2 × 4 × 2 = 16, or SVE's width.
    A CPU not given counts as AVX2's, the usual x86 desktop and server."""
    if cpu is not None and cpu.has("AVX512"):
        return 64, "AVX-512's two 16-wide FP32 FMA units; one unit, or Zen 4's, reaches half"
    if cpu is not None and cpu.has("SVE") and cpu.sve_bits > 128:
        return 2 * (cpu.sve_bits // 32) * 2, f"SVE {cpu.sve_bits}'s two {cpu.sve_bits // 32}-wide FP32 FMA units"
    if cpu is not None and cpu.has("NEON") and not cpu.has("AVX2"):
        return 16, "NEON's two 4-wide FP32 FMA units"
    return 32, "AVX2's two 8-wide FP32 FMA units" + ("" if cpu is not None else ", the CPU's SIMD not given")


def parse_cpu(spec: str) -> Cpu:
    """A preset joined by '+' (`avx512+amx`, `arm+i8mm`), llama.cpp's own system_info line, or a
    comma list of its feature names (`AVX2,AVX512`). `host` is the caller's to resolve."""
    text = spec.strip()
    if len(text) > MAX_SPEC_CHARS or "\x00" in text:
        raise CpuSpecError(f"a CPU description is at most {MAX_SPEC_CHARS:,} characters of text")
    if " = " in text:
        return from_system_info(text)
    if not text:
        raise CpuSpecError(f"give the CPU: one of {CPU_CHOICES}, or llama.cpp's system_info line")
    tokens = [t.strip() for t in re.split(r"[+,\s]+", text) if t.strip()]
    features: set[str] = set()
    repack = True
    for token in tokens:
        name = token.lower()
        if name in PRESETS:
            features.update(PRESETS[name])
            repack = repack and name != "norepack"
        elif token.upper() in KNOWN_FEATURES:
            features.add(token.upper())
        else:
            raise CpuSpecError(
                f"unknown CPU {token!r}: give one of {CPU_CHOICES}, llama.cpp feature names "
                "(AVX2, AVX512, AVX512_VNNI, AMX_INT8, NEON, DOTPROD, MATMUL_INT8, SVE), or its system_info line"
            )
    sve_bits = 256 if "sve256" in (t.lower() for t in tokens) else 0
    shown = text if len(text) <= 80 else text[:77] + "…"  # the label says where it came from, not all of it
    return Cpu(frozenset(features - {"REPACK"}), f"--cpu {shown}", sve_bits=sve_bits, repack=repack)


def from_system_info(line: str) -> Cpu:
    """llama.cpp's `system_info: n_threads = 2 / 2 | CPU : SSE3 = 1 | … | REPACK = 1 |` line
    (llama_print_system_info: the CPU backend's features, each `NAME = 1`, SVE_CNT in bytes)."""
    pairs = dict(_FEATURE_RE.findall(line))
    pairs.pop("n_threads", None)
    if not pairs:
        raise CpuSpecError("no 'NAME = 1' features in this system_info line")
    features = frozenset(name for name, value in pairs.items() if value == "1" and name in KNOWN_FEATURES)
    sve_cnt = pairs.get("SVE_CNT", "0")
    sve_bits = int(sve_cnt) * 8 if sve_cnt.isdigit() and len(sve_cnt) < 6 else 0
    return Cpu(features - {"REPACK"}, "llama.cpp system_info", sve_bits=sve_bits, repack="REPACK" in features)


def from_cpuinfo(text: str, source: str = "/proc/cpuinfo") -> Cpu:
    """What a native build (GGML_NATIVE, -march=native) enables on the CPU /proc/cpuinfo describes."""
    flags: set[str] = set()
    for line in text.splitlines()[:10_000]:
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
            break
    features = {_CPUINFO[f] for f in flags if f in _CPUINFO}
    if "amx_int8" in flags and "amx_tile" in flags:
        features.add("AMX_INT8")
    if features & {"NEON"}:
        features.add("ARM_FMA")
    return Cpu(frozenset(features), source)


def cpuinfo_model(text: str) -> str:
    """The CPU's model name from /proc/cpuinfo ("" when it names none)."""
    for line in text.splitlines()[:10_000]:
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "cpu model", "Hardware"):
            return value.strip()[:200]
    return ""


# --- which buffer type a weight kept in RAM gets ------------------------------------------------

# AMX: the types with a kernel and the multiple their ne0 must be (amx.cpp:163-186)
_AMX_ALIGN = {"q4_0": 32, "q4_1": 32, "q8_0": 32, "q4_K": 256, "q5_K": 256, "q6_K": 256, "iq4_xs": 256, "f16": 16}
_AMX_EXTRA_PER_BLOCK = {"q8_0": 4, "q4_K": 4, "q5_K": 4, "iq4_xs": 2}  # get_row_size
_AMX_TILE_N2 = 32  # TILE_N * 2: op->ne[0] (the weight's ne1) must be a multiple of it


# llama-server b11434 crashes (SIGSEGV in its warm-up, the first compute) when quantized weights sit in
# the AMX buffer: seen on this project's AMX host with q4_0 and q8_0 models of 256 to 4,096 wide, f16 in
# AMX and -nr running fine (sizing/tests/test_explain_log.py keeps checking it); upstream it is
# ggml-org/llama.cpp#20824, "segfault in ggml_backend_amx_mul_mat", open without a fix.
AMX_QUANTIZED_CRASH = (
    "llama-server b11434 crashes with quantized weights in the AMX buffer: a segmentation fault in its "
    "warm-up (ggml_backend_amx_mul_mat; ggml-org/llama.cpp#20824, open; reproduced by kvlab's tests with q4_0 "
    "and q8_0 models, while f16 in AMX and -nr run). Run with -nr (--no-repack) on this CPU."
)


def _n_dims(shape: tuple[int, ...]) -> int:
    """ggml_n_dims: the dimensions up to the last one above 1 (at least 1)."""
    for i in range(len(shape) - 1, 0, -1):
        if shape[i] > 1:
            return i + 1
    return 1


def _dim(shape: tuple[int, ...], i: int) -> int:
    return shape[i] if i < len(shape) else 1


def amx_takes(type_name: str, shape: tuple[int, ...], op: str) -> bool:
    align = _AMX_ALIGN.get(type_name)
    return op == "MUL_MAT" and align is not None and _dim(shape, 1) % _AMX_TILE_N2 == 0 and _dim(shape, 0) % align == 0


def amx_alloc_size(type_name: str, shape: tuple[int, ...]) -> int:
    """ggml_backend_amx_get_alloc_size: ne1 rows of get_row_size(ne0) for a type with a kernel,
    ggml_nbytes for f16."""
    t = BY_NAME[type_name]
    if type_name == "f16":
        return tensor_bytes(t.id, shape)
    blocks = _dim(shape, 0) // t.block_size
    row = blocks * (t.type_size + _AMX_EXTRA_PER_BLOCK.get(type_name, 0))
    return _dim(shape, 1) * row


def repack_takes(type_name: str, shape: tuple[int, ...], op: str, cpu: Cpu) -> bool:
    """ggml_repack_get_optimal_repack_type finds a kernel, for a 2-D MUL_MAT or 3-D MUL_MAT_ID."""
    dims = _n_dims(shape)
    if not cpu.repack or not ((op == "MUL_MAT" and dims == 2) or (op == "MUL_MAT_ID" and dims == 3)):
        return False
    ne1 = _dim(shape, 1)
    return any(ne1 % multiple == 0 for multiple in cpu.repack_rules.get(type_name, ()))


def _repack_rules(cpu: Cpu) -> dict[str, tuple[int, ...]]:
    """Per type, the ne1 multiples of the kernels this CPU has, in the order repack.cpp tries them."""
    has = cpu.has
    neon_i8mm, neon_dot = has("NEON", "MATMUL_INT8"), has("NEON", "DOTPROD")
    rules: dict[str, list[tuple[bool, int]]] = {
        "q4_0": [
            (has("AVX2") or (has("SVE", "MATMUL_INT8") and cpu.sve_bits == 256), 8),
            (neon_i8mm, 4),
            (neon_dot, 4),
        ],
        "q4_K": [(has("AVX2"), 8), (neon_i8mm, 8), (neon_dot, 8)],
        "q2_K": [(has("AVX512"), 8)],
        "q5_K": [(neon_i8mm, 8), (neon_dot, 8)],
        "q6_K": [(neon_i8mm, 8), (neon_dot, 8)],
        "iq4_nl": [(has("AVX2"), 8), (neon_dot, 4)],
        "mxfp4": [(has("AVX2"), 8), (neon_dot, 4)],
        "q8_0": [(neon_i8mm, 4), (neon_dot, 4)],
        "q1_0": [(neon_i8mm, 4), (neon_dot, 4)],
    }
    return {name: tuple(m for ok, m in kernels if ok) for name, kernels in rules.items()}


def extra_buffer_type(
    name: str, type_name: str, shape: tuple[int, ...], cpu: Cpu | None, *, as_output: bool = False
) -> str | None:
    """AMX, CPU_REPACK or None (plain CPU memory) for a weight the CPU's extra types may take
    (the caller has ruled out CUDA_Host and -nr)."""
    if cpu is None:
        return None
    op = weight_op(name, as_output=as_output)
    if op == "OTHER":
        return None
    if cpu.amx and amx_takes(type_name, shape, op):
        return AMX
    if repack_takes(type_name, shape, op, cpu):
        return REPACK
    return None
