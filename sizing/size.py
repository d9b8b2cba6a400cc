"""One sizing: model × flags × GPU × workload → everything the page and kvsize show. Pure.

What a sizing reports as JSON, and a run's record checked against it: sizing.report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .hparams import ModelParams
from .kv import KVLayout, ServerFlags, kv_layout
from .memory import MemoryPlan, memory_plan
from .placement.server import ServerPlan, plan_server
from .placement.tensors import WeightTensor
from .placement.types import Device, Host, MiB
from .recommend import Recommendation, recommend
from .workload import Prediction, Workload, predict


@dataclass
class Sizing:
    """`flags` and `layout` are what the server runs with: after --fit when GPUs are given
    (`server` then says what changed and why), else the flags as typed."""

    model: ModelParams
    flags: ServerFlags
    layout: KVLayout
    plan: MemoryPlan
    workload: Workload | None
    prediction: Prediction | None
    recommendations: list[Recommendation]
    server: ServerPlan | None = None
    typed_flags: ServerFlags | None = None  # the flags as given, when --fit changed them


def size(
    model: ModelParams,
    flags: ServerFlags,
    *,
    workload: Workload | None = None,
    gpu_mib: int | None = None,
    weights_bytes: int | None = None,
    weights_source: str = "",
    model_path: str = "MODEL.gguf",
    with_recommendations: bool = True,
    devices: Sequence[Device] | None = None,
    host: Host | None = None,
    tensors: Sequence[WeightTensor] | None = None,
    tensors_in_file_order: bool = False,
    sm_counts: Sequence[int | None] = (),
    compute_capabilities: Sequence[float | None] = (),
) -> Sizing:
    """Size `flags` for `model`. With GPUs (`devices`, or one of `gpu_mib`), or on the CPU alone with
    the host's RAM given (`host.total`), llama-server's --fit is replayed and the sizing is of the
    configuration it then runs with. `sm_counts` and
    `compute_capabilities` (one per device, None where unknown) size what nvidia-smi shows beyond
    llama.cpp's own count."""
    if devices is None and gpu_mib is not None:
        devices = [Device("CUDA0", f"a GPU of {gpu_mib:,} MiB", gpu_mib * MiB)]
    if gpu_mib is None and devices:
        gpu_mib = devices[0].free // MiB  # the one-GPU memory plan (MemoryPlan) of the first
    server = None
    typed = flags
    if devices or (host is not None and host.total):  # GPUs, or a CPU-only host of a known size
        server = plan_server(
            model,
            flags,
            devices=devices or [],
            host=host,
            tensors=tensors,
            tensors_in_file_order=tensors_in_file_order,
            weights_bytes=weights_bytes,
            prompt_tokens=workload.prompt_tokens if workload else 0,
            output_tokens=workload.output_tokens if workload else 0,
            concurrency=workload.concurrency if workload else 1,
            sm_counts=sm_counts,
            compute_capabilities=compute_capabilities,
        )
        flags = server.flags
    layout = kv_layout(model, flags)
    plan = memory_plan(
        model, layout, flags, weights_bytes=weights_bytes, weights_source=weights_source, gpu_mib=gpu_mib
    )
    prediction = predict(layout, workload) if workload else None
    recommendations = (
        recommend(
            model,
            workload,
            base=flags,
            weights_bytes=weights_bytes,
            weights_source=weights_source,
            gpu_mib=gpu_mib,
            model_path=model_path,
            devices=devices,
            host=host,
            tensors=tensors,
        )
        if workload and with_recommendations
        else []
    )
    return Sizing(
        model, flags, layout, plan, workload, prediction, recommendations, server, typed if flags != typed else None
    )
