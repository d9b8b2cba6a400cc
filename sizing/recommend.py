"""Ranked llama-server configurations for a model, GPU and workload. Pure.

Enumerates slots × unified/per-slot × K/V cache types × KV on GPU or in RAM, sizes
the context so the workload cannot overflow it, keeps what starts, fits and cannot
fail, and ranks by the stated preference. The ranking is a documented heuristic
(RANKING), not a measurement; sweeps (and the history beside each row) check it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .cmdline import to_command
from .hparams import ModelParams
from .kv import ServerFlags, kv_layout, pad256
from .memory import MemoryPlan, memory_plan
from .workload import Workload, predict

RANKING = (
    "KV in system RAM is scored ×0.25 (attention then runs on the CPU: the investigation measured 4× slower); "
    "q8_0 KV ×0.97 and q4_0 ×0.9 for quality; throughput counts requests decoded at once "
    "(1 + 0.6 per extra slot); latency counts how many waves of requests queue behind each other; "
    "ties go to the smaller memory footprint."
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
) -> list[Recommendation]:
    candidates: list[Recommendation] = []
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
                    score = _score(flags, workload, slots)
                    candidates.append(
                        Recommendation(
                            flags=flags,
                            command=to_command(flags, model_path),
                            reasons=_reasons(flags, workload, layout.n_ctx_seq, slots, plan),
                            plan=plan,
                            score=score,
                            prediction_message=prediction.message,
                        )
                    )
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


def _score(flags: ServerFlags, workload: Workload, slots: int) -> float:
    quality = QUALITY.get(flags.type_k, 0.9) * QUALITY.get(flags.type_v, 0.9)
    speed = 1.0 if flags.kv_offload else 0.25
    at_once = min(slots, workload.concurrency)
    if workload.preference == "latency":
        waves = -(-workload.concurrency // slots)
        value = 1.0 / waves
    else:
        value = 1 + 0.6 * (at_once - 1)
    return round(value * speed * quality, 4)


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
