"""The shared vocabulary of sizing.placement. Pure.

Names follow llama.cpp b11434 (common/fit.cpp, src/llama-model.cpp): a *device* is a GPU that
`llama_prepare_model_devices` keeps (CPU is never one); *host* is system RAM; a *measurement* is
what `common_get_device_memory_data_impl` returns: one `Usage` per device, then one for the host.
Sizes are exact integer bytes; MiB = 1,048,576 bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .cpu import Cpu

MiB = 1024 * 1024
UINT32_MAX = 2**32 - 1
DEFAULT_FIT_TARGET_MIB = 1024  # common.h: fit_params_target, per device
DEFAULT_FIT_CTX = 4096  # common.h: fit_params_min_ctx
MAX_DEVICES = 16  # llama_max_devices()
MAX_OVERRIDES = 4096  # llama_max_tensor_buft_overrides()


@dataclass(frozen=True)
class Device:
    """One GPU as the fit sees it: `ggml_backend_dev_memory` (cudaMemGetInfo) free and total."""

    name: str  # the backend's device name: "CUDA0", "CUDA1", …
    description: str  # "NVIDIA GeForce RTX 5060 Ti"
    total: int  # bytes the driver reports
    used: int = 0  # bytes already in use by other processes (and the desktop)
    bandwidth: float | None = None  # memory bandwidth in bytes/s (GPU catalogue), for the speed estimate
    backend: str = ""  # cuda | rocm | vulkan | metal | sycl (sizing.placement.efficiency); "": not said
    fp32_flops: float | None = None  # FP32 vector peak in FLOP/s (GPU catalogue), for the prefill estimate
    fp16_flops: float | None = None  # dense FP16 matrix (tensor-core) peak in FLOP/s, where the catalogue has it
    vendor: str = ""  # NVIDIA, AMD, Intel, Apple (the catalogue's): Vulkan's efficiency is per vendor

    @property
    def free(self) -> int:
        return max(0, self.total - self.used)


@dataclass(frozen=True)
class Host:
    """System RAM: the CPU device's total and free memory, its bandwidth for the speed estimate, the
    CPU's features (sizing.placement.cpu; None: not given, and no extra buffer type is assumed) and its
    arithmetic peak for the work it keeps (attention over a KV in RAM, products of weights in RAM)."""

    total: int
    free: int
    bandwidth: float | None = None
    cpu: Cpu | None = None
    flops: float | None = None  # the CPU's FP32 FMA peak (cores × clock × FLOP per cycle); None: not given
    flops_source: str = ""


@dataclass(frozen=True)
class Params:
    """The llama_model_params and llama_context_params the fit reads and rewrites.

    `n_ctx` 0 means the model's training context; `n_gpu_layers` -1 is auto (all), -2 `all`;
    `tensor_split` is one value per device (empty or all zero: in proportion to free memory);
    `overrides` are `-ot` entries in order, `(regex, buffer type)`, the buffer type "CPU" or a
    device name ("CUDA0")."""

    n_ctx: int = 0
    n_gpu_layers: int = -1
    split_mode: str = "layer"  # none | layer | row | tensor
    main_gpu: int = 0
    tensor_split: tuple[float, ...] = ()
    overrides: tuple[tuple[str, str], ...] = ()
    n_seq_max: int = 1
    kv_unified: bool = False
    kv_offload: bool = True
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: bool = True  # as `-fa auto` resolved
    n_batch: int = 2048
    n_ubatch: int = 512
    use_extra_bufts: bool = True  # False with -nr / --no-repack: no AMX, no CPU_REPACK
    no_host: bool = False  # --no-host: no pinned CUDA_Host buffer, so the extra types take CPU weights


@dataclass(frozen=True)
class Usage:
    """One bucket of a measurement: weights, KV/recurrent state and compute buffers, in bytes."""

    model: int = 0
    context: int = 0
    compute: int = 0

    @property
    def total(self) -> int:
        return self.model + self.context + self.compute


# A measurement: one Usage per device in order, then the host's. The fit is driven only by these.
Measure = Callable[[Params], Sequence[Usage]]


@dataclass
class FitResult:
    """What common_fit_params did: its status, the parameters the server then runs with, and why."""

    status: str  # "success" | "failure" | "error" | "off" (--fit off)
    message: str  # the exception text for failure/error, "" otherwise
    params: Params  # after the fit; on failure/error what it had changed before it stopped (kept)
    changes: list[str] = field(default_factory=list)  # one sentence per change, for the user
    log: list[tuple[str, str]] = field(default_factory=list)  # (level "TRC"|"WRN"|"ERR", line) as llama.cpp prints
