"""What each llama.cpp backend reaches of its hardware's peak: the three factors that turn the catalogue's
peak memory bandwidth and FP32 throughput into the decode and prefill estimates. Pure.

Per backend, never per GPU or per model:

* ``bandwidth``: the share of the peak memory bandwidth a decoding step's reads reach. A matrix-vector
  product streams its weights once; the kernels dequantize as they read and never reach the bus's peak
  (a copy kernel on an NVIDIA GPU reaches about 90 %, STREAM-like read kernels of llama.cpp less).
* ``node_s``: the seconds each node of the step's graph adds beyond its bytes: the kernel's launch and the
  wait for the one before it (a decoding step is a chain of ~20 small dependent kernels per layer:
  NODES_DENSE, NODES_MOE). This is what makes a 1B model far slower than its bytes say: its 16 layers ×
  19 nodes cost as much as its 0.6 GiB.
* ``tensor``: what a prefill's matrix products reach, as a share of the GPU's dense FP16 matrix peak
  (tensor cores, WMMA, XMX: the catalogue's ``fp16_tflops``) — the class of GPUs with matrix units. It may
  pass 1: llama.cpp multiplies quantized weights on the int8 matrix units (CUDA's MMQ, int8 mma), whose peak
  is twice the FP16 one, so its ceiling is 2;
* ``matmul``: the same as a multiple of the FP32 vector peak, for the class without a matrix figure (Pascal,
  RDNA2, Apple's GPUs before M5: their products run on the vector units).

The figures are *derived*, not looked up: `derive` solves, per backend, the least squares of the relative
error of `seconds = bytes / (bandwidth × peak) + nodes × node_s` (decode) and then
`seconds = FLOP / (matmul × FP32 peak) + bytes / (bandwidth × peak) + nodes × node_s` (prefill, its bytes
the weights once per ubatch and each token's activations: sizing.placement.prefill.activation_bytes) over the
public llama-bench rows of the *derivation* GPUs only — per backend, the catalogue GPU with the most rows
(bench/speed_accuracy.py DERIVATION). Every other GPU's rows are held out: bench/speed_accuracy.py reports
the error on those, and benchmarks/tests/test_speed_accuracy_bench.py checks the constants below are what
`derive` gives on the rows in the repository. The node counts come from reading llama.cpp's graph builders,
not from any row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# The kernels of one decoding step of a llama-style layer (src/models/llama.cpp at b11434, CUDA's fusions
# of rms_norm × weight counted as one): attention norm, Q, K and V products, two ropes, the K and V stores
# (set_rows), the attention (flash_attn_ext, or mul_mat + soft_max + mul_mat without FA), the output
# product, the residual add; the FFN norm, gate and up products, the SwiGLU, the down product, the add.
NODES_DENSE = 19
# A MoE layer (src/models/qwen3moe.cpp, llm_graph_context::build_moe_ffn): the attention part as above with
# Q/K norms (14), the FFN norm, the router product, its softmax, the top-k (argsort + view), get_rows of the
# weights and their normalisation (2), three mul_mat_id and the GLU, the weighting mul, then one add per
# used expert beyond the first.
NODES_MOE_BASE = 14 + 1 + 1 + 1 + 2 + 1 + 2 + 4 + 1


def nodes_per_layer(n_expert: int, n_expert_used: int) -> int:
    """Kernels one decoding step runs per layer (NODES_DENSE, or a MoE layer's with its used experts)."""
    if n_expert and n_expert_used:
        return NODES_MOE_BASE + max(0, n_expert_used - 1)
    return NODES_DENSE


@dataclass(frozen=True)
class Efficiency:
    backend: str
    bandwidth: float  # share of peak memory bandwidth a decoding step's reads reach
    node_s: float  # seconds per graph node (kernel) beyond its bytes
    matmul: float  # prefill matrix throughput as a multiple of the FP32 vector peak (no matrix figure)
    tensor: float  # prefill matrix throughput as a share of the dense FP16 matrix peak (GPUs with one)
    rows: int  # public llama-bench rows it was derived from
    derived_from: tuple[str, ...]  # the derivation GPUs' catalogue ids

    @property
    def source(self) -> str:
        return (
            f"{self.backend}: {self.bandwidth:.0%} of peak bandwidth, {self.node_s * 1e6:.1f} µs per graph node, "
            f"in prefill {self.tensor:.0%} of the FP16 matrix peak or {self.matmul:.2f}× the FP32 peak — "
            f"derived from {self.rows} public llama-bench rows of "
            f"{', '.join(self.derived_from)} (sizing/placement/efficiency.py); other GPUs held out"
        )


# Derived by `derive` from bench/data/speed_validation*.jsonl's derivation GPUs
# (`.venv/bin/python bench/speed_accuracy.py --derive` prints these lines).
EFFICIENCY: dict[str, Efficiency] = {
    "cpu": Efficiency(
        backend="cpu", bandwidth=0.761, node_s=4.206e-05, matmul=0.0, tensor=0.0, rows=9, derived_from=("CPU",)
    ),
    "cuda": Efficiency(
        backend="cuda",
        bandwidth=0.814,
        node_s=2.92e-06,
        matmul=2.427,
        tensor=1.344,
        rows=22,
        derived_from=("dgx-spark-gb10-128gb", "jetson-agx-orin-64gb", "rtx-4080", "rtx-4090"),
    ),
    "metal": Efficiency(
        backend="metal",
        bandwidth=0.898,
        node_s=8.25e-06,
        matmul=0.714,
        tensor=0.0,
        rows=30,
        derived_from=(
            "apple-m1-pro-32gb",
            "apple-m1-ultra-128gb",
            "apple-m2-max-96gb",
            "apple-m2-pro-32gb",
            "apple-m3-pro-36gb",
            "apple-m4-max-128gb",
            "apple-m4-pro-64gb",
        ),
    ),
    "rocm": Efficiency(
        backend="rocm",
        bandwidth=0.874,
        node_s=9.43e-06,
        matmul=0.608,
        tensor=0.0,
        rows=12,
        derived_from=("radeon-8060s-strix-halo-128gb",),
    ),
    "sycl": Efficiency(
        backend="sycl", bandwidth=0.634, node_s=0.0, matmul=3.025, tensor=0.0, rows=6, derived_from=("arc-b580",)
    ),
    "vulkan": Efficiency(
        backend="vulkan",
        bandwidth=0.404,
        node_s=0.0,
        matmul=2.031,
        tensor=1.529,
        rows=15,
        derived_from=("arc-a770-16gb", "radeon-8060s-strix-halo-128gb", "rtx-2070", "rtx-3090", "rtx-4090"),
    ),
    "vulkan-nvidia": Efficiency(
        backend="vulkan-nvidia",
        bandwidth=0.425,
        node_s=0.0,
        matmul=2.345,
        tensor=1.424,
        rows=12,
        derived_from=("rtx-2070", "rtx-3090", "rtx-4090"),
    ),
}

# A backend with no derivation GPU of its own takes the nearest one's figures, said in the estimate's inputs.
FALLBACK = {"sycl": "vulkan", "opencl": "vulkan", "rocm": "vulkan", "cpu": "cpu", "": "cuda"}
BACKENDS = ("cuda", "rocm", "vulkan", "metal", "sycl", "cpu")


# Vulkan is one backend over every vendor's driver and hardware: its kernels and drivers reach very different
# shares of each vendor's peak (the class of hardware), so its figures are per vendor where the rows allow.
PER_VENDOR = ("vulkan",)


def key(backend: str, vendor: str = "") -> str:
    """The EFFICIENCY key of a backend on a vendor's GPU: "vulkan-nvidia", or the backend alone."""
    name = (backend or "").lower()
    return f"{name}-{vendor.lower()}" if name in PER_VENDOR and vendor else name


def for_backend(backend: str) -> tuple[Efficiency | None, str]:
    """The figures for a backend (or a `key`), and what was used ("" when its own; else the fallback's name and
    why)."""
    name = (backend or "").lower()
    if name in EFFICIENCY:
        return EFFICIENCY[name], ""
    if "-" in name and name.split("-")[0] in EFFICIENCY:
        return EFFICIENCY[
            name.split("-")[0]
        ], f"{name}: no derivation GPU of this vendor, {name.split('-')[0]}'s figures used"
    fallback = FALLBACK.get(name, "cuda")
    if fallback in EFFICIENCY:
        return EFFICIENCY[fallback], f"{name or 'unknown backend'}: no derivation GPU, {fallback}'s figures used"
    return None, f"{name or 'unknown backend'}: no efficiency figures"


# ---- the derivation ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Observation:
    """One public llama-bench row, reduced to what the estimate's terms are at peak."""

    backend: str
    kind: str  # "decode" | "prefill"
    measured_s: float  # seconds per step (decode: per token; prefill: for the whole prompt)
    read_s: float  # bytes read / peak memory bandwidth
    nodes: int  # graph nodes run
    flop_s: float = 0.0  # FLOP / FP32 peak (prefill)
    matrix_s: float = 0.0  # FLOP / dense FP16 matrix peak, where the GPU has one (prefill)


def _solve2(rows: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Least squares of y ≈ a·x1 + b·x2 (rows already weighted), a ≥ 0 and b ≥ 0."""
    s11 = sum(x1 * x1 for x1, _, _ in rows)
    s12 = sum(x1 * x2 for x1, x2, _ in rows)
    s22 = sum(x2 * x2 for _, x2, _ in rows)
    t1 = sum(x1 * y for x1, _, y in rows)
    t2 = sum(x2 * y for _, x2, y in rows)
    det = s11 * s22 - s12 * s12
    if det > 1e-12 * max(s11 * s22, 1e-300):
        a, b = (t1 * s22 - t2 * s12) / det, (s11 * t2 - s12 * t1) / det
        if a >= 0 and b >= 0:
            return a, b
    # on the boundary: one term alone
    a_only = t1 / s11 if s11 else 0.0
    b_only = t2 / s22 if s22 else 0.0
    err_a = sum((y - a_only * x1) ** 2 for x1, _, y in rows)
    err_b = sum((y - b_only * x2) ** 2 for _, x2, y in rows)
    return (max(a_only, 0.0), 0.0) if err_a <= err_b else (0.0, max(b_only, 0.0))


def derive(observations: Iterable[Observation], derived_from: Mapping[str, tuple[str, ...]]) -> dict[str, Efficiency]:
    """Per backend: bandwidth and node_s from its decode rows (relative least squares), then matmul from its
    prefill rows given those two."""
    by_backend: dict[str, list[Observation]] = {}
    for o in observations:
        by_backend.setdefault(o.backend, []).append(o)
    out: dict[str, Efficiency] = {}
    for backend, obs in sorted(by_backend.items()):
        decode = [o for o in obs if o.kind == "decode"]
        if not decode:
            continue
        # relative error: divide each row by its measured seconds
        inverse_bw, node_s = _solve2([(o.read_s / o.measured_s, o.nodes / o.measured_s, 1.0) for o in decode])
        if inverse_bw <= 0:
            continue
        bandwidth = min(1.0, 1.0 / inverse_bw)
        if bandwidth < 1.0 / inverse_bw:  # capped at the peak: node_s takes the rest
            node_s = max(
                0.0,
                sum((o.measured_s - o.read_s) * o.nodes / o.measured_s**2 for o in decode)
                / sum(o.nodes**2 / o.measured_s**2 for o in decode),
            )
        prefill = [o for o in obs if o.kind == "prefill" and (o.flop_s > 0 or o.matrix_s > 0)]

        def factor(rows: list[Observation], basis: str, bandwidth: float = bandwidth, node_s: float = node_s) -> float:
            # the seconds left for the products against the FLOP at the basis's peak: least squares of the ratio
            pairs = [
                (
                    getattr(o, basis) / o.measured_s,
                    (o.measured_s - o.read_s / bandwidth - o.nodes * node_s) / o.measured_s,
                )
                for o in rows
            ]
            inverse = sum(x * y for x, y in pairs) / sum(x * x for x, _ in pairs) if pairs else 0.0
            return 1.0 / inverse if inverse > 0 else 0.0

        tensor = factor([o for o in prefill if o.matrix_s > 0], "matrix_s")
        matmul = factor([o for o in prefill if o.matrix_s <= 0], "flop_s")
        out[backend] = Efficiency(
            backend, round(bandwidth, 3), round(node_s, 8), round(matmul, 3), round(tensor, 3),
            len(decode) + len(prefill), derived_from.get(backend, ()),
        )  # fmt: skip
    return out
