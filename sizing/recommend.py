"""Ranked llama-server configurations for a model, GPU and workload. Pure.

Enumerates slots × unified/per-slot × K/V cache types × KV on GPU or in RAM, sizes
the context so the workload cannot overflow it, keeps what starts, fits and cannot
fail, and ranks by the stated preference. The ranking (RANKING) rests on the decode speed
estimate of sizing.placement.speed, relative to the best candidate, not on a measurement;
sweeps (and the history beside each row) check it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .cmdline import to_command
from .hparams import ModelParams
from .kv import ServerFlags, kv_layout, pad256
from .memory import MemoryPlan, MiB, memory_plan
from .placement.speed import SpeedEstimate, approximate_weights_bytes, estimate
from .placement.types import Device, Host
from .workload import Workload, predict

# Ranking needs a GPU bandwidth; where the catalogue has none, the investigation's RTX 5060 Ti 16 GB (448 GB/s).
RANKING_GPU_BANDWIDTH = 448e9
RANKING = (
    "Each configuration's decode speed is estimated from the bytes a generated token reads (weights, and the KV at "
    "the workload's context) over the memory bandwidth where they live — the GPU's, or system RAM's when the KV is "
    "there and the CPU runs the attention (sizing.placement.speed) — and scored relative to the best candidate: for "
    "throughput the tokens of all requests decoded at once (they share one read of the weights), for latency one "
    "request's speed divided by the waves of requests that queue behind each other; then q8_0 KV ×0.97 and q4_0 "
    "×0.9 for quality; ties go to the smaller memory footprint. Without the weights' size they are taken from the "
    "hyperparameters at 4.5 bits a weight. An estimate: with the KV in RAM it was 2.6-3.6× faster than the "
    "investigation measured (README), so such configurations rank above where they would measure."
)
CACHE_PAIRS = [("f16", "f16"), ("q8_0", "q8_0"), ("f16", "q8_0"), ("q8_0", "q4_0"), ("q4_0", "q4_0")]
QUALITY = {"f16": 1.0, "q8_0": 0.97, "q4_0": 0.9}


@dataclass(frozen=True)
class Recommendation:
    flags: ServerFlags
    command: list[str]
    reasons: list[tuple[str, str]]  # (flag, why)
    plan: MemoryPlan
    score: float
    prediction_message: str
    speed: SpeedEstimate | None = None  # the decode estimate the score rests on

    @property
    def checked(self) -> bool:
        """Known to fit the GPU (False: the weights or the GPU are unknown, so only the KV is sized)."""
        return self.plan.fits is True


def recommend(
    model: ModelParams,
    workload: Workload,
    *,
    base: ServerFlags,
    weights_bytes: int | None,
    weights_source: str,
    gpu_mib: int | None,
    model_path: str = "MODEL.gguf",
    limit: int = 8,
    gpu_bandwidth: float | None = None,
    host_bandwidth: float | None = None,
) -> list[Recommendation]:
    """The best configurations first. `gpu_bandwidth` / `host_bandwidth` in bytes/s feed the speed estimate
    (defaults: RANKING_GPU_BANDWIDTH and sizing.placement.speed's system RAM default)."""
    candidates: list[Recommendation] = []
    gpu = Device("CUDA0", "GPU", (gpu_mib or 0) * MiB, 0, gpu_bandwidth or RANKING_GPU_BANDWIDTH)
    host = Host(0, 0, host_bandwidth)
    # unknown weights: a stand-in from the hyperparameters, so the KV reads are weighed against something
    read_weights = weights_bytes if weights_bytes is not None else approximate_weights_bytes(model)
    # More slots than concurrent requests only cost memory.
    slot_counts = sorted({n for n in (1, 2, 4, 8) if n <= workload.concurrency} | {min(workload.concurrency, 64)})
    pairs = [(k, v) for k, v in CACHE_PAIRS if not model.is_mla or k == v]
    for slots in slot_counts:
        for unified in (False, True) if slots > 1 else (False,):
            for type_k, type_v in pairs:
                for kv_offload in (True, False):
                    flags = _sized_flags(model, workload, base, slots, unified, type_k, type_v, kv_offload)
                    layout = kv_layout(model, flags)
                    if layout.errors:
                        continue
                    prediction = predict(layout, workload)
                    if prediction.outcome != "ok":
                        continue
                    plan = memory_plan(
                        model,
                        layout,
                        flags,
                        weights_bytes=weights_bytes,
                        weights_source=weights_source,
                        gpu_mib=gpu_mib,
                    )
                    if plan.fits is False:
                        continue
                    speed = estimate(
                        model,
                        layout,
                        flags,
                        devices=[gpu],
                        host=host,
                        prompt_tokens=workload.prompt_tokens,
                        output_tokens=workload.output_tokens,
                        concurrency=workload.concurrency,
                        weights_bytes=read_weights,
                    )
                    candidates.append(
                        Recommendation(
                            flags=flags,
                            command=to_command(flags, model_path),
                            reasons=_reasons(flags, workload, layout.n_ctx_seq, slots, plan),
                            plan=plan,
                            score=0.0,
                            prediction_message=prediction.message,
                            speed=speed,
                        )
                    )
    values = [_value(r, workload) for r in candidates]
    best = max(values, default=0.0)
    candidates = [
        replace(r, score=_score(r.flags, v / best if best else 0.0)) for r, v in zip(candidates, values, strict=True)
    ]
    candidates.sort(key=lambda r: (-r.score, r.plan.gpu_total + r.plan.ram_total))
    return candidates[:limit]


def _sized_flags(
    model: ModelParams,
    workload: Workload,
    base: ServerFlags,
    slots: int,
    unified: bool,
    type_k: str,
    type_v: str,
    kv_offload: bool,
) -> ServerFlags:
    need = workload.cells_per_request
    in_flight = min(slots, workload.concurrency)
    ctx = pad256(need * in_flight) if unified else pad256(need) * slots
    quantized_v = type_v not in ("f16", "bf16", "f32")
    return replace(
        base,
        ctx_size=ctx,
        parallel=slots,
        kv_unified=unified if slots > 1 else False,
        type_k=type_k,
        type_v=type_v,
        flash_attn="on" if quantized_v or base.flash_attn == "auto" else base.flash_attn,
        kv_offload=kv_offload,
    )


def _value(r: Recommendation, workload: Workload) -> float:
    """What the preference counts, in estimated tokens per second."""
    if r.speed is None or r.speed.tok_s is None or r.speed.aggregate_tok_s is None:
        return 0.0
    if workload.preference == "latency":
        waves = -(-workload.concurrency // (r.flags.parallel or 1))
        return r.speed.tok_s / waves
    return r.speed.aggregate_tok_s


def _score(flags: ServerFlags, relative_speed: float) -> float:
    quality = QUALITY.get(flags.type_k, 0.9) * QUALITY.get(flags.type_v, 0.9)
    return round(relative_speed * quality, 4)


def _reasons(
    flags: ServerFlags, workload: Workload, slot_cells: int, slots: int, plan: MemoryPlan
) -> list[tuple[str, str]]:
    need = workload.cells_per_request
    reasons = [
        (
            f"-c {flags.ctx_size}",
            (
                f"one pool of {slot_cells:,} cells: {min(slots, workload.concurrency)} × {need:,} "
                "(p95 prompt + output) can never overflow it"
                if flags.kv_unified
                else f"{slot_cells:,} cells per slot ≥ {need:,} (p95 prompt + output), padded to 256"
            ),
        ),
        (
            f"-np {flags.parallel}",
            f"{slots} request{'s' if slots > 1 else ''} decoded at once"
            + (f"; {workload.concurrency - slots} queue" if slots < workload.concurrency else ""),
        ),
    ]
    if flags.kv_unified:
        reasons.append(("-kvu", "slots share one pool sized for all of them, so no slot is stranded"))
    if flags.type_k != "f16" or flags.type_v != "f16":
        reasons.append(
            (
                f"-ctk {flags.type_k} -ctv {flags.type_v}",
                "a smaller KV cache, so it fits beside the weights"
                if plan.fits
                else "a smaller KV cache (whether it fits beside the weights is not known)",
            )
        )
    if flags.flash_attn == "on":
        quantized_v = flags.type_v not in ("f16", "bf16", "f32")
        reasons.append(
            (
                "-fa on",
                "required for a quantized V cache" if quantized_v else "smaller compute buffers at long contexts",
            )
        )
    if not flags.kv_offload:
        reasons.append(("--no-kv-offload", "the KV cache does not fit in VRAM: it lives in system RAM (slower)"))
    return reasons
