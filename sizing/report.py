"""What a sizing reports: its machine-readable JSON (kvsize --json, the page's ?format=json, share snapshots,
a sweep's prediction), the pieces of it the page's view shows too, and a run's record checked against it. Pure."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from .cmdline import to_command
from .hparams import ModelParams
from .kv import FORMULA_VERSION, kv_layout
from .memory import COMPUTE_FORMULA
from .placement.overhead import Item
from .placement.server import ServerPlan
from .recommend import RANKING
from .recommendation_facts import facts
from .size import Sizing
from .workload import Prediction, predict


@dataclass(frozen=True)
class RecordCheck:
    """A run's measured outcome beside the prediction for the flags it records."""

    agrees: bool
    measured: str  # "3/3 ok"
    message: str
    explanation: str = ""


def check_record(s: Sizing, n_ok: int, n_requests: int, *, has_failures: bool, failure: str = "") -> RecordCheck | None:
    """Do the run's measured requests agree with what kvlab predicts for its recorded flags?

    `has_failures`: whether the run counts as one with failed requests, by the history's one rule of a
    run's outcome (benchmarks.records.outcomes), which the caller applies.
    When they do not agree, say what would explain it: a -c recorded per slot rather than for the
    whole server (the investigation's C2), or flags other than the recorded ones."""
    if s.prediction is None or not n_requests:
        return None
    measured = f"{n_ok}/{n_requests} ok" + (f" ({failure})" if failure else "")
    predicted_fail = s.prediction.fails
    if predicted_fail == has_failures:
        return RecordCheck(True, measured, f"The record agrees with the prediction: measured {measured}.")
    if predicted_fail:
        status = f"HTTP {s.prediction.http_status}" if s.prediction.http_status else "a failure"
        message = (
            f"The record and the prediction disagree: the run measured {measured}, but for the flags it records "
            f"kvlab predicts {status} — a server started with these flags could not have served these requests."
        )
        return RecordCheck(False, measured, message, _explain_success(s))
    message = (
        f"The record and the prediction disagree: kvlab predicts no context error for the recorded flags, "
        f"but {n_requests - n_ok} of {n_requests} requests failed."
    )
    explanation = (
        "The failures may have another cause (see the run's errors), or the server ran with a smaller context "
        "than recorded: without -c, llama-server's --fit may lower it to fit the GPU; its /props and /slots say "
        "what it really had."
    )
    return RecordCheck(False, measured, message, explanation)


def _explain_success(s: Sizing) -> str:
    flags, workload, layout = s.flags, s.workload, s.layout
    if workload and flags.ctx_size and flags.parallel and flags.parallel > 1 and not layout.kv_unified:
        per_slot = replace(flags, ctx_size=flags.ctx_size * flags.parallel)
        layout_per_slot = kv_layout(s.model, per_slot)
        if not layout_per_slot.errors and predict(layout_per_slot, workload).outcome == "ok":
            return (
                f"What would explain it: the recorded -c {flags.ctx_size:,} read as the context of each slot. "
                f"llama-server divides -c among the slots ({layout.n_ctx_seq:,} cells each here); with "
                f"-c {per_slot.ctx_size:,} ({flags.parallel} × {flags.ctx_size:,}) each slot has "
                f"{layout_per_slot.n_ctx_seq:,} cells, each request needs {workload.cells_per_request:,}, "
                f"and all would succeed. Size that configuration to check it."
            )
    return (
        "What would explain it: the server ran with other flags than the record says (a larger -c, fewer slots "
        "or unified KV), or the requests were shorter than recorded. The server's /props and /slots (n_ctx per "
        "slot) say what it really had."
    )


# The pieces of a sizing that the JSON (as_json, server_json) and the page's data (render.page_data,
# render.server_data) both show, written once.


def model_json(model: ModelParams) -> dict[str, Any]:
    return {"arch": model.arch, "name": model.name, "n_layer": model.n_layer, "n_ctx_train": model.n_ctx_train}


def prediction_json(prediction: Prediction) -> dict[str, Any]:
    return {"outcome": prediction.outcome, "http_status": prediction.http_status, "message": prediction.message}


def context_json(plan: ServerPlan) -> dict[str, Any]:
    """The context llama-server will run with, after its fit."""
    return {
        "n_ctx": plan.context.n_ctx,
        "n_ctx_seq": plan.context.n_ctx_seq,
        "n_ctx_slot": plan.context.n_ctx_slot,
        "n_parallel": plan.params.n_seq_max,
        "kv_unified": plan.params.kv_unified,
    }


def fit_log(plan: ServerPlan) -> list[list[str]]:
    """The lines llama-server prints before and during its fit, as (level, text) lists."""
    return [list(line) for line in plan.pre_fit_log + plan.fit.log]


def cpu_json(plan: ServerPlan) -> dict[str, str] | None:
    return None if plan.cpu is None else {"label": plan.cpu.label, "source": plan.cpu.source}


def outside_json(item: Item) -> dict[str, Any]:
    """One use of a device's memory outside llama.cpp's own count."""
    return {
        "name": item.name,
        "bytes": item.bytes,
        "in_vram": item.in_vram,
        "upper_bound": item.upper_bound,
        "exact": item.exact,
        "source": item.source,
    }


def as_json(s: Sizing) -> dict[str, Any]:
    """The machine-readable sizing (kvsize --json, share snapshots). Bytes are exact integers."""
    layout = s.layout
    return {
        "formula_version": FORMULA_VERSION,
        "model": model_json(s.model),
        "n_ctx": layout.n_ctx,
        "n_ctx_seq": layout.n_ctx_seq,
        "n_stream": layout.n_stream,
        "n_parallel": layout.n_parallel,
        "kv_unified": layout.kv_unified,
        "flash_attn": layout.flash_attn,
        "caches": [asdict(c) for c in layout.caches],
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
            "compute_estimate_formula": COMPUTE_FORMULA,
            "gpu_bytes": s.plan.gpu_bytes,
            "margin_bytes": s.plan.margin_bytes,
            "gpu_total_bytes": s.plan.gpu_total,
            "fits": s.plan.fits,
        },
        "prediction": None if s.prediction is None else prediction_json(s.prediction),
        "recommendations": [
            {
                "command": r.command,
                "reasons": [list(x) for x in r.reasons],
                "score": r.score,
                "gpu_bytes": r.plan.gpu_total,
                **facts(r, s.workload),
            }
            for r in s.recommendations
        ],
        "ranking": RANKING,
        **server_json(s.server),
    }


def server_json(plan: ServerPlan | None) -> dict[str, Any]:
    """What llama-server will do on the given devices (kvsize --json, snapshots, the page):
    `fit` (status, changes, log), `effective` (the flags after fit), `devices` (bytes per device by
    kind) and `decode_tok_s_estimate`. Empty without devices."""
    if plan is None:
        return {}
    speed = plan.speed
    return {
        "fit": {
            "status": plan.fit.status,
            "message": plan.fit.message,
            "changes": list(plan.fit.changes),
            "log": fit_log(plan),
        },
        "effective": {
            "command": to_command(plan.flags),
            **context_json(plan),
            "n_gpu_layers": plan.params.n_gpu_layers,
            "tensor_split": list(plan.params.tensor_split),
            "overrides": [list(o) for o in plan.params.overrides],
            "warnings": list(plan.context.warnings),
        },
        "placement_error": plan.error,
        "weights_note": plan.weights_note,
        "cpu": cpu_json(plan),
        "host_memory": None
        if plan.host_memory is None
        else {
            "counted_bytes": plan.host_memory.counted.total,
            "cpu_buffers": dict(plan.host_memory.extra),
            "needs_bytes": plan.host_memory.needs,
            "mapped_bytes": plan.host_memory.mapped,
            "load_mode": plan.host_memory.load_mode,
            "notes": list(plan.host_notes),
        },
        "loads": plan.loads,
        "devices": [
            {
                "name": r.name,
                "description": r.description,
                "total_bytes": r.total,
                "free_bytes": r.free,
                "model_bytes": r.usage.model,
                "context_bytes": r.usage.context,
                "compute_bytes": r.usage.compute,
                "counted_bytes": r.usage.total,
                "fit_target_bytes": r.margin,
                "free_after_bytes": r.free_after,
                "outside_llama_cpp": None if r.outside is None else [outside_json(i) for i in r.outside.items],
            }
            for r in plan.rows
        ],
        "prefill_tok_s_estimate": None
        if plan.prefill is None
        else {
            "tok_s": plan.prefill.tok_s,
            "seconds": plan.prefill.seconds,
            "prompt_tokens": plan.prefill.prompt_tokens,
            "n_ubatch": plan.prefill.n_ubatch,
            "label": plan.prefill.label,
            "unknown": list(plan.prefill.unknown),
            "efficiency": dict(plan.prefill.inputs.get("efficiency", {})),
        },
        "decode_tok_s_estimate": None
        if speed is None
        else {
            "tok_s": speed.tok_s,
            "aggregate_tok_s": speed.aggregate_tok_s,
            "sequences": speed.sequences,
            "label": speed.label,
            "unknown": list(speed.unknown),
            "calibration": speed.calibration,
            "parts": [
                {"name": p.name, "where": p.where, "bytes": p.bytes, "seconds": p.seconds, "bound": p.bound}
                for p in speed.parts
            ],
        },
    }
