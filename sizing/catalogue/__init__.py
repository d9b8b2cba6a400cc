"""The built-in catalogues: popular GGUF models (as GGUF metadata) and GPUs.

Every figure comes from a published source named in models.json / gpus.json and
SOURCES.md beside this file.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..placement.types import Device
from ..weights import WeightsFigure, computed_bytes, computed_source

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class CatalogueModel:
    id: str
    name: str
    metadata: dict[str, Any]
    files: dict[str, int]  # quantization -> GGUF file size in bytes (published sizes only)
    sources: dict[str, str]
    weights: dict[str, WeightsFigure] = field(default_factory=dict)  # quantization -> figure
    # What the tensor table needs beyond the metadata: {"tied_embeddings": bool, "rope_freqs": bool}
    # and any layout hints (weights.tensor_table)
    tensor_layout: dict[str, Any] = field(default_factory=dict)
    # The published files were quantized with an importance matrix (bartowski's and unsloth's
    # are): it changes the IQ4_XS / IQ3_XXS / Q4_0 mixtures, never the K-quants'.
    imatrix: bool = False
    # Published sizes of further quantizations, not offered as weights: they check the type rules.
    checks: dict[str, int] = field(default_factory=dict)

    def computed_bytes(self, quant: str, *, imatrix: bool | None = None) -> int:
        """The tensor data of this model at a quantization, computed from its tensor shapes."""
        return computed_bytes(
            self.metadata, quant, imatrix=self.imatrix if imatrix is None else imatrix, **self.tensor_layout
        )


@dataclass(frozen=True)
class CatalogueGpu:
    id: str
    name: str
    memory_mib: int
    vendor: str
    kind: str
    source: str
    # Memory bandwidth in GB/s (10**9 bytes/s) as the vendor or a review publishes it, for the decode
    # speed estimate (sizing.placement.speed); None where no cited figure was found: shown as unknown.
    bandwidth_gbps: float | None = None
    bandwidth_source: str = ""
    # The SM count and CUDA compute capability, for what nvidia-smi shows beyond llama.cpp's own count
    # (sizing.placement.overhead: the CUDA context scales with the SMs, cuBLAS's workspace with the
    # capability); None where no cited figure was found, or for a GPU that is not NVIDIA's.
    sm_count: int | None = None
    compute_capability: float | None = None
    sm_source: str = ""
    cc_source: str = ""
    # The llama.cpp backend people run on it (cuda, rocm, metal, vulkan), and its compute for the prefill
    # estimate: dense FP16/BF16 matrix (tensor-core) throughput, FP32 vector throughput (TFLOPS), and the
    # CU / Xe-core / GPU-core count of a GPU that is not NVIDIA's; each None without its cited source.
    backend: str = ""
    fp16_tflops: float | None = None
    fp16_source: str = ""
    fp32_tflops: float | None = None
    fp32_source: str = ""
    cu_count: int | None = None
    cu_source: str = ""

    @property
    def bandwidth(self) -> float | None:
        """Bytes per second, or None when unknown."""
        return None if self.bandwidth_gbps is None else self.bandwidth_gbps * 1e9

    def device(self, name: str = "CUDA0", used: int = 0, bandwidth: float | None = None) -> Device:
        """This GPU as the fit and the speed estimates see it: its memory, `used` bytes already taken, its
        bandwidth (or the one given), backend, vendor and compute peaks."""
        return Device(
            name, self.name, self.memory_mib * 2**20, used, bandwidth or self.bandwidth, self.backend,
            None if self.fp32_tflops is None else self.fp32_tflops * 1e12,
            None if self.fp16_tflops is None else self.fp16_tflops * 1e12,
            self.vendor,
        )  # fmt: skip


@functools.cache
def models() -> dict[str, CatalogueModel]:
    data = json.loads((HERE / "models.json").read_text())
    return {m["id"]: _model(m) for m in data["models"]}


# The quantizations every catalogue model has: published where a GGUF's size is, else computed.
# (F16 is left out: nobody sizes a 16 GB GPU for it, and weights.computed_bytes gives it on demand.)
COMMON_QUANTS = ("Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0")
# Native formats worth listing for an architecture (gpt-oss ships its experts in MXFP4).
NATIVE_QUANTS = {"gpt-oss": ("MXFP4",)}


def _model(m: dict[str, Any]) -> CatalogueModel:
    files: dict[str, int] = m.get("files", {})
    sources: dict[str, str] = m.get("sources", {})
    weights = {
        quant: WeightsFigure(quant, size, sources.get("files", ""), computed=False) for quant, size in files.items()
    }
    tensors: dict[str, Any] = m.get("tensors", {})
    model = CatalogueModel(
        m["id"],
        m["name"],
        m["metadata"],
        files,
        sources,
        weights,
        tensors,
        m.get("imatrix", False),
        m.get("checks", {}),
    )
    if tensors:
        arch = m["metadata"]["general.architecture"]
        for quant in COMMON_QUANTS + NATIVE_QUANTS.get(arch, ()):
            if quant not in weights:
                # A computed figure is llama-quantize's default: no importance matrix.
                size = model.computed_bytes(quant, imatrix=False)
                weights[quant] = WeightsFigure(quant, size, computed_source(arch), computed=True)
    return model


def quantizations(model_id: str) -> list[str]:
    """The quantizations the catalogue has weights for: Q4_K_M (the usual default) first, then by size.

    [] for an unknown model.
    """
    entry = models().get(model_id)
    if entry is None:
        return []
    return sorted(entry.weights, key=lambda q: (q.upper() != "Q4_K_M", entry.weights[q].bytes, q))


def weights_for(model_id: str, quant: str) -> WeightsFigure | None:
    """The catalogue's weights of a model at a quantization (matched case-insensitively), or None."""
    entry = models().get(model_id)
    if entry is None:
        return None
    wanted = quant.strip().upper()
    return next((figure for name, figure in entry.weights.items() if name.upper() == wanted), None)


@functools.cache
def gpus() -> dict[str, CatalogueGpu]:
    data = json.loads((HERE / "gpus.json").read_text())
    return {
        g["id"]: CatalogueGpu(
            g["id"],
            g["name"],
            g["memory_mib"],
            g.get("vendor", ""),
            g.get("kind", ""),
            g.get("source", ""),
            # a figure without its source is not used
            g.get("bandwidth_gbps") if g.get("bandwidth_source") else None,
            g.get("bandwidth_source", ""),
            g.get("sm_count") if g.get("sm_source") else None,
            g.get("compute_capability") if g.get("cc_source") else None,
            g.get("sm_source", ""),
            g.get("cc_source", ""),
            g.get("backend", ""),
            g.get("fp16_tflops") if g.get("fp16_source") else None,
            g.get("fp16_source", ""),
            g.get("fp32_tflops") if g.get("fp32_source") else None,
            g.get("fp32_source", ""),
            g.get("cu_count") if g.get("cu_source") else None,
            g.get("cu_source", ""),
        )
        for g in data["gpus"]
    }
