"""One sizing: model × flags × GPU × workload → everything the page and kvsize show. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .hparams import ModelParams
from .kv import FORMULA_VERSION, KVLayout, ServerFlags, kv_layout
from .memory import ESTIMATE_FORMULA, MemoryPlan, memory_plan
from .recommend import RANKING, Recommendation, recommend
from .workload import Prediction, Workload, predict


@dataclass
class Sizing:
    model: ModelParams
    flags: ServerFlags
    layout: KVLayout
    plan: MemoryPlan
    workload: Workload | None
    prediction: Prediction | None
    recommendations: list[Recommendation]


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
) -> Sizing:
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
        )
        if workload and with_recommendations
        else []
    )
    return Sizing(model, flags, layout, plan, workload, prediction, recommendations)


def as_json(s: Sizing) -> dict[str, Any]:
    """The machine-readable sizing (kvsize --json, share snapshots). Bytes are exact integers."""
    layout = s.layout
    return {
        "formula_version": FORMULA_VERSION,
        "model": {
            "arch": s.model.arch,
            "name": s.model.name,
            "n_layer": s.model.n_layer,
            "n_ctx_train": s.model.n_ctx_train,
        },
        "n_ctx": layout.n_ctx,
        "n_ctx_seq": layout.n_ctx_seq,
        "n_stream": layout.n_stream,
        "n_parallel": layout.n_parallel,
        "kv_unified": layout.kv_unified,
        "flash_attn": layout.flash_attn,
        "caches": [
            {
                "name": c.name,
                "cells": c.cells,
                "streams": c.streams,
                "layers": c.layers,
                "type_k": c.type_k,
                "type_v": c.type_v,
                "k_bytes": c.k_bytes,
                "v_bytes": c.v_bytes,
            }
            for c in layout.caches
        ],
        "recurrent_bytes": layout.recurrent_bytes,
        "kv_bytes": layout.kv_bytes,
        "bytes_per_token": layout.bytes_per_token,
        "warnings": layout.warnings,
        "errors": layout.errors,
        "memory": {
            "weights_bytes": s.plan.weights_bytes,
            "weights_source": s.plan.weights_source,
            "kv_on_gpu_bytes": s.plan.kv_on_gpu,
            "compute_estimate_bytes": s.plan.compute_estimate,
            "compute_estimate_formula": ESTIMATE_FORMULA,
            "gpu_bytes": s.plan.gpu_bytes,
            "margin_bytes": s.plan.margin_bytes,
            "gpu_total_bytes": s.plan.gpu_total,
            "fits": s.plan.fits,
        },
        "prediction": None
        if s.prediction is None
        else {
            "outcome": s.prediction.outcome,
            "http_status": s.prediction.http_status,
            "message": s.prediction.message,
        },
        "recommendations": [
            {
                "command": r.command,
                "reasons": [list(x) for x in r.reasons],
                "score": r.score,
                "gpu_bytes": r.plan.gpu_total,
            }
            for r in s.recommendations
        ],
        "ranking": RANKING,
    }
