"""Human-readable sizings: the page's view of one (`page_view`, what the sizing page and a
shared snapshot both render through the same template partial), and a plain-text report
(kvsize, and the snapshot's copy-paste text). Exact bytes with MiB beside them. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from .cmdline import ArgNote, to_command
from .kv import FORMULA_VERSION
from .memory import COMPUTE_FORMULA
from .recommend import RANKING
from .report import RecordCheck, Sizing
from .weights import WeightsFigure

VIEW_VERSION = 1  # the shape of page_view's dict, as stored in snapshots

MiB = 1024 * 1024


def mib(n: int) -> str:
    return f"{n / MiB:,.2f} MiB"


def exact(n: int) -> str:
    return f"{n:,} B ({mib(n)})"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def text_report(s: Sizing) -> str:
    m, layout, plan = s.model, s.layout, s.plan
    lines = [
        f"model: {m.name} ({m.arch}, {m.n_layer} layers, trained context {m.n_ctx_train:,})",
        "command: " + " ".join(to_command(s.flags)),
        (
            f"context: n_ctx {layout.n_ctx:,}; {_n(layout.n_parallel, 'slot')}"
            + (" (auto: no -np)" if layout.auto_parallel else "")
            + (
                f", one unified pool of {layout.n_ctx_seq:,} cells"
                if layout.kv_unified
                else f", {layout.n_ctx_seq:,} cells per slot in {_n(layout.n_stream, 'stream')}"
            )
        ),
    ]
    for error in layout.errors:
        lines.append(f"ERROR: {error}")
    if layout.bytes_per_token:
        lines.append(f"KV per token: {layout.bytes_per_token:,} B ({layout.bytes_per_token / 1024:,.2f} KiB)")
    for c in layout.caches:
        lines.append(
            f"{c.name} cache: {c.cells:,} cells × {c.streams} stream(s), {c.layers} layers: "
            f"K ({c.type_k}) {exact(c.k_bytes)}, V ({c.type_v}) {exact(c.v_bytes)}"
        )
    if layout.recurrent:
        state = layout.recurrent
        lines.append(
            f"recurrent state: {state.cells} rows, {state.layers} layers: "
            f"R {exact(state.r_bytes)}, S {exact(state.s_bytes)}"
        )
    lines.append(
        f"KV total: {exact(layout.kv_bytes)}" + ("" if s.flags.kv_offload else " — in system RAM (--no-kv-offload)")
    )
    if plan.weights_bytes is not None:
        lines.append(f"weights: {exact(plan.weights_bytes)} ({plan.weights_source})")
    else:
        lines.append("weights: unknown (give a GGUF with its tensor table, or a catalogue quantization)")
    lines.append(f"compute buffers (estimate): {mib(plan.compute_estimate)} — {COMPUTE_FORMULA}")
    if plan.gpu_bytes is not None:
        verdict = {
            True: "fits",
            False: "DOES NOT FIT",
            None: "cannot judge the fit without the weights (KV and compute buffers only)",
        }[plan.fits]
        lines.append(
            f"GPU: {mib(plan.gpu_total)} of {mib(plan.gpu_bytes)} with a {mib(plan.margin_bytes)} margin: {verdict}"
        )
    if s.prediction:
        lines.append(f"workload: {s.prediction.message}")
    for warning in layout.warnings:
        lines.append(f"note: {warning}")
    if s.recommendations and not all(r.checked for r in s.recommendations):
        lines.append(
            "KV-only candidates, NOT checked against the GPU (the weights or the GPU are unknown): "
            "each cannot overflow for this workload; none is known to fit."
        )
    for i, r in enumerate(s.recommendations, 1):
        label = "recommendation" if r.checked else "KV-only candidate"
        lines.append(f"{label} {i} (score {r.score}): {' '.join(r.command)}")
        lines.extend(f"    {flag}: {why}" for flag, why in r.reasons)
    return "\n".join(lines) + "\n"


def page_view(
    s: Sizing,
    *,
    title: str,
    command_line: str,
    gpu_label: str = "",
    notes: Sequence[ArgNote] = (),
    flags_from: str = "",
    quant_options: Sequence[WeightsFigure] = (),
    weights_notes: Sequence[str] = (),
    record: RecordCheck | None = None,
) -> dict[str, Any]:
    """Everything the sizing's result shows, as JSON-ready values: rendered live by the page
    and stored by a snapshot, so that both go through the one template partial."""
    layout, plan = s.layout, s.plan
    return {
        "version": VIEW_VERSION,
        "title": title,
        "model": {
            "name": s.model.name,
            "arch": s.model.arch,
            "n_layer": s.model.n_layer,
            "n_ctx_train": s.model.n_ctx_train,
        },
        "command_line": command_line,
        "flags_from": flags_from,
        "notes": [{"arg": n.arg, "refused": n.refused, "says": n.says} for n in notes],
        "refused": any(n.refused for n in notes),
        "layout": {
            "n_parallel": layout.n_parallel,
            "auto_parallel": layout.auto_parallel,
            "n_ctx": layout.n_ctx,
            "n_ctx_seq": layout.n_ctx_seq,
            "n_stream": layout.n_stream,
            "kv_unified": layout.kv_unified,
            "bytes_per_token": layout.bytes_per_token,
            "kv_bytes": layout.kv_bytes,
            "errors": list(layout.errors),
            "warnings": list(layout.warnings),
            "caches": [asdict(c) for c in layout.caches],
            "recurrent": None if layout.recurrent is None else asdict(layout.recurrent),
        },
        "kv_offload": s.flags.kv_offload,
        "prediction": None
        if s.prediction is None
        else {
            "outcome": s.prediction.outcome,
            "message": s.prediction.message,
            "fails": s.prediction.fails,
            "http_status": s.prediction.http_status,
        },
        "record": None
        if record is None
        else {
            "agrees": record.agrees,
            "measured": record.measured,
            "message": record.message,
            "explanation": record.explanation,
        },
        "plan": {
            "weights_bytes": plan.weights_bytes,
            "weights_source": plan.weights_source,
            "kv_on_gpu": plan.kv_on_gpu,
            "compute_estimate": plan.compute_estimate,
            "gpu_bytes": plan.gpu_bytes,
            "gpu_total": plan.gpu_total,
            "margin_bytes": plan.margin_bytes,
            "free_after": plan.free_after,
            "fits": plan.fits,
        },
        "gpu_label": gpu_label,
        "weights_unknown": plan.weights_bytes is None,
        "quant_options": [
            {"quant": f.quant, "bytes": f.bytes, "computed": f.computed, "source": f.source} for f in quant_options
        ],
        "weights_notes": list(weights_notes),
        "workload": None
        if s.workload is None
        else {
            "prompt_tokens": s.workload.prompt_tokens,
            "output_tokens": s.workload.output_tokens,
            "concurrency": s.workload.concurrency,
            "preference": s.workload.preference,
        },
        "recommendations": [
            {
                "command": " ".join(r.command),
                "reasons": [list(x) for x in r.reasons],
                "gpu_total": r.plan.gpu_total,
                "kv_bytes": r.plan.kv_bytes,
                "checked": r.checked,
            }
            for r in s.recommendations
        ],
        "recommendations_checked": bool(s.recommendations) and all(r.checked for r in s.recommendations),
        "ranking": RANKING,
        "estimate_formula": COMPUTE_FORMULA,
        "formula_version": FORMULA_VERSION,
    }
