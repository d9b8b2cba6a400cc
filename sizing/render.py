"""Human-readable figures for a sizing: exact bytes with MiB beside them. Pure."""

from __future__ import annotations

from .cmdline import to_command
from .memory import ESTIMATE_FORMULA
from .report import Sizing

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
    lines.append(f"compute buffers (estimate): {mib(plan.compute_estimate)} — {ESTIMATE_FORMULA}")
    if plan.gpu_bytes is not None:
        verdict = {True: "fits", False: "DOES NOT FIT", None: "cannot tell without the weights"}[plan.fits]
        lines.append(
            f"GPU: {mib(plan.gpu_total)} of {mib(plan.gpu_bytes)} with a {mib(plan.margin_bytes)} margin: {verdict}"
        )
    if s.prediction:
        lines.append(f"workload: {s.prediction.message}")
    for warning in layout.warnings:
        lines.append(f"note: {warning}")
    for i, r in enumerate(s.recommendations, 1):
        lines.append(f"recommendation {i} (score {r.score}): {' '.join(r.command)}")
        lines.extend(f"    {flag}: {why}" for flag, why in r.reasons)
    return "\n".join(lines) + "\n"
