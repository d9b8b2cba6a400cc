"""Human-readable sizings: the data the page shows of one (`page_data`, what the sizing page and a
shared snapshot both render through the same template partial), and a plain-text report
(kvsize, and the snapshot's copy-paste text). Exact bytes with MiB beside them. Pure."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from .cmdline import ArgNote, to_command
from .ggml_types import block_note
from .kv import FORMULA_VERSION, ServerFlags
from .memory import COMPUTE_FORMULA
from .placement.server import ServerPlan
from .recommend import RANKING
from .recommendation_facts import facts, rate_text
from .report import RecordCheck, context_json, cpu_json, fit_log, model_json, outside_json, prediction_json
from .size import Sizing
from .weights import WeightsFigure

# The shape of page_data's dict, as stored in snapshots. 2 adds "server" (what llama-server will do on
# the given GPUs); a version-1 view has none, and the partial shows it without that section.
VIEW_VERSION = 2
LOG_NOTE = "llama-server prints these with -lv 4; WRN/ERR by default"
OUTSIDE_LABEL = "outside llama.cpp's count (estimate)"

MiB = 1024 * 1024


def mib(n: int) -> str:
    return f"{n / MiB:,.2f} MiB"


def exact(n: int) -> str:
    return f"{n:,} B ({mib(n)})"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def text_report(s: Sizing, *, measured: dict[str, Any] | None = None) -> str:
    m, layout, plan = s.model, s.layout, s.plan
    lines = [
        f"model: {m.name} ({m.arch}, {m.n_layer} layers, trained context {m.n_ctx_train:,})",
        "command: " + shlex.join(to_command(s.flags)),
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
            f"GPU, kvlab's plain sum (every weight + KV + compute, before llama.cpp places them): "
            f"{mib(plan.gpu_total)} of {mib(plan.gpu_bytes)} with a {mib(plan.margin_bytes)} margin: {verdict}"
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
        said = facts(r, s.workload)
        if said["twin"]:
            lines.append(f"    also works: the same with {said['twin']}")
        lines.append(f"    {said['speed']}")
        lines.append(f"    headroom: {'; '.join(x for x in (said['cells'], said['vram']) if x)}")
        lines.extend(f"    {flag}: {why}" for flag, why in r.reasons)
    server = server_data(s, measured=measured)
    if server is not None:
        lines.extend(server_text(server))
    return "\n".join(lines) + "\n"


def page_data(
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
    model_path: str = "MODEL.gguf",
    gpu_sources: Sequence[str] = (),
    host_bandwidth_source: str = "",
    tensors_source: str = "",
    tensor_notes: Sequence[str] = (),
    measured: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything the sizing's result shows, as JSON-ready values: rendered live by the page
    and stored by a snapshot, so that both go through the one template partial."""
    layout, plan = s.layout, s.plan
    return {
        "version": VIEW_VERSION,
        "title": title,
        "model": model_json(s.model),
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
            # one line per quantized type the caches use: why its figures exceed a rule of thumb's
            "block_notes": [
                note
                for name in sorted({t for c in layout.caches for t in (c.type_k, c.type_v)})
                if (note := block_note(name))
            ],
            "recurrent": None if layout.recurrent is None else asdict(layout.recurrent),
        },
        "kv_offload": s.flags.kv_offload,
        "prediction": None if s.prediction is None else {**prediction_json(s.prediction), "fails": s.prediction.fails},
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
            "headroom_pct": s.workload.headroom_pct,
        },
        "recommendations": [
            {
                "command": shlex.join(r.command),
                "reasons": [list(x) for x in r.reasons],
                "gpu_total": r.plan.gpu_total,
                "kv_bytes": r.plan.kv_bytes,
                "checked": r.checked,
                **facts(r, s.workload),
            }
            for r in s.recommendations
        ],
        "recommendations_checked": bool(s.recommendations) and all(r.checked for r in s.recommendations),
        "ranking": RANKING,
        "estimate_formula": COMPUTE_FORMULA,
        "formula_version": FORMULA_VERSION,
        "server": server_data(
            s,
            model_path=model_path,
            gpu_sources=gpu_sources,
            host_bandwidth_source=host_bandwidth_source,
            tensors_source=tensors_source,
            tensor_notes=tensor_notes,
            measured=measured,
            n_gpus=len(gpu_sources) if gpu_sources else None,
        ),
    }


# ---- what llama-server will do on the given GPUs (Sizing.server) ---------------------------------


def _ts(split: Sequence[float]) -> str:
    return ",".join(f"{v:g}" for v in split)


def _ngl(n: int | None) -> str:
    return "auto" if n is None else "all" if n == -2 else str(n)


def typed_vs_effective(typed: ServerFlags | None, effective: ServerFlags) -> list[str]:
    """Where the server will run with other flags than the ones typed, one sentence each."""
    if typed is None:
        return []
    out = []
    if typed.ctx_size != effective.ctx_size:
        what = "no -c" if typed.ctx_size is None else f"-c {typed.ctx_size:,}"
        out.append(f"You typed {what}; llama-server will run with -c {effective.ctx_size or 0:,}")
    if typed.n_gpu_layers != effective.n_gpu_layers:
        what = "no -ngl" if typed.n_gpu_layers is None else f"-ngl {_ngl(typed.n_gpu_layers)}"
        out.append(f"You typed {what}; llama-server will run with -ngl {_ngl(effective.n_gpu_layers)}")
    if tuple(typed.tensor_split) != tuple(effective.tensor_split):
        what = "no -ts" if not typed.tensor_split else f"-ts {_ts(typed.tensor_split)}"
        out.append(f"You typed {what}; llama-server will split the layers with -ts {_ts(effective.tensor_split)}")
    added = [o for o in effective.overrides if o not in typed.overrides]
    if added:
        ots = ", ".join(f"-ot {pattern}={buft}" for pattern, buft in added)
        out.append(f"llama-server will add {ots} to what you typed")
    return out


MAX_OVERRIDES_SHOWN = 20


def overrides_in_words(overrides: Sequence[tuple[str, str]]) -> list[str]:
    """The effective tensor overrides (-ot, --cpu-moe, --n-cpu-moe and the fit's), each in words."""
    out = []
    for pattern, buft in overrides[:MAX_OVERRIDES_SHOWN]:
        place = "system RAM" if buft == "CPU" else buft
        what = "MoE experts" if "exps" in pattern else "tensors"
        out.append(f"{what} matching {pattern} in {place} (-ot {pattern}={buft})")
    if len(overrides) > MAX_OVERRIDES_SHOWN:
        out.append(f"and {len(overrides) - MAX_OVERRIDES_SHOWN:,} more overrides")
    return out


def _status_text(status: str, changes: Sequence[str], loads: bool | None, error: str, *, gpus: bool = True) -> str:
    if error:
        return "llama-server cannot load this configuration."
    if status == "success":
        left = "each GPU's --fit target" if gpus else "the --fit target of system memory"
        return (
            "llama-server's --fit (on by default) changes the command:"
            if changes
            else f"llama-server's --fit leaves the command as it is: it fits with {left} free."
        )
    if status == "off":
        return "--fit off: llama-server uses the parameters exactly as given."
    if status in ("failure", "error"):
        return "llama-server's --fit fails; the server then loads with the flags as they stand."
    return "kvlab cannot replay --fit here."


def server_data(
    s: Sizing,
    *,
    model_path: str = "MODEL.gguf",
    gpu_sources: Sequence[str] = (),
    host_bandwidth_source: str = "",
    tensors_source: str = "",
    tensor_notes: Sequence[str] = (),
    measured: dict[str, Any] | None = None,
    n_gpus: int | None = None,
) -> dict[str, Any] | None:
    """What llama-server will do on the GPUs: the fit, the effective command, memory per device (llama.cpp's
    count, then what lies outside it), the decode speed estimate and the fit's log. None without GPUs."""
    plan = s.server
    if plan is None:
        return None
    fit = plan.fit
    log = fit_log(plan)
    rows = []
    for i, r in enumerate(plan.rows):
        outside = r.outside
        items = [] if outside is None else outside.items
        used_before = None if r.is_host or r.total is None or r.free is None else r.total - r.free
        smi_low = smi_high = None
        if not r.is_host and used_before is not None:
            smi_low = used_before + r.usage.total + (outside.vram_bytes if outside else 0)
            smi_high = used_before + r.usage.total + (outside.vram_bytes_max if outside else 0)
        bandwidth = None
        if plan.speed is not None:
            bandwidth = plan.speed.inputs.get("bandwidth", {}).get("CPU" if r.is_host else r.name)
        source = ""
        if r.is_host:
            source = host_bandwidth_source
        elif i < len(gpu_sources):
            source = gpu_sources[i]
        rows.append(
            {
                "name": r.name,
                "description": r.description,
                "is_host": r.is_host,
                "total": r.total,
                "free": r.free,
                "used_before": used_before,
                "model": r.usage.model,
                "context": r.usage.context,
                "compute": r.usage.compute,
                "counted": r.usage.total,
                "free_after": r.free_after,
                "fit_target": r.margin,
                "fits": r.fits,
                "outside": [outside_json(item) for item in items if item.bytes != 0],
                "outside_unknown": [item.name for item in items if item.bytes is None],
                "smi_low": smi_low,
                "smi_high": smi_high,
                "bandwidth_gbps": None if bandwidth is None else round(bandwidth / 1e9, 1),
                "bandwidth_source": source,
            }
        )
    speed = plan.speed
    speed_view = None
    bandwidths = []
    for row in rows:
        place = "system RAM" if row["is_host"] else str(row["name"])
        if row["bandwidth_gbps"] is not None:
            source = f" ({row['bandwidth_source']})" if row["bandwidth_source"] else ""
            bandwidths.append(f"{place} {row['bandwidth_gbps']:,g} GB/s{source}")
        elif not row["is_host"]:
            bandwidths.append(f"{place} unknown")
    if speed is not None:
        speed_view = {
            "tok_s": None if speed.tok_s is None else round(speed.tok_s, 2),
            "aggregate_tok_s": None if speed.aggregate_tok_s is None else round(speed.aggregate_tok_s, 2),
            "sequences": speed.sequences,
            "label": speed.label,
            "unknown": list(speed.unknown),
            "context_cells": speed.inputs.get("context_cells"),
            "bandwidths": bandwidths,
            "parts": [
                {"name": p.name, "bytes": p.bytes, "ms": round(p.seconds * 1000, 3), "bound": p.bound}
                for p in speed.parts
            ],
        }
    host_free_after = (
        None
        if plan.host_memory is None or plan.host is None or plan.host.free is None
        else plan.host.free - plan.host_memory.needs
    )
    return {
        "status": fit.status,
        "status_text": _status_text(fit.status, fit.changes, plan.loads, plan.error, gpus=bool(plan.gpus)),
        "message": fit.message,
        "changes": list(fit.changes),
        "failed": fit.status in ("failure", "error"),
        "printed": [line for line in log if line[0] in ("WRN", "ERR")],
        "typed_vs_effective": typed_vs_effective(s.typed_flags, plan.flags),
        "command": shlex.join(to_command(plan.flags, model_path)),
        "context": context_json(plan),
        "overrides": overrides_in_words(plan.params.overrides),
        "error": plan.error,
        "loads": plan.loads,
        "weights_note": plan.weights_note,
        "tensors_source": tensors_source,
        "tensor_notes": list(tensor_notes),
        "devices": rows,
        "cpu": cpu_json(plan),
        "cpu_buffers": []
        if plan.host_memory is None
        else [{"name": name, "bytes": size} for name, size in plan.host_memory.extra.items()],
        "host_needs": None if plan.host_memory is None else plan.host_memory.needs,
        "host_free_after": host_free_after,
        "host_short": None if host_free_after is None else max(0, -host_free_after),
        "host_notes": list(plan.host_notes),
        "n_gpus": n_gpus if n_gpus is not None else sum(1 for r in rows if not r["is_host"]),
        "speed": speed_view,
        "prefill": prefill_view(plan),
        "measured": measured,
        "log": log,
        "log_note": LOG_NOTE,
        "outside_label": OUTSIDE_LABEL,
    }


def prefill_view(plan: ServerPlan) -> dict[str, Any] | None:
    """The workload's prompt: its prefill speed and time (an estimate), or unknown and why."""
    p = plan.prefill
    if p is None:
        return None
    return {
        "tok_s": None if p.tok_s is None else round(p.tok_s, 1),
        "tok_s_text": None if p.tok_s is None else rate_text(p.tok_s),
        "seconds": None if p.seconds is None else round(p.seconds, 3),
        "prompt_tokens": p.prompt_tokens,
        "n_ubatch": p.n_ubatch,
        "ubatches": p.inputs.get("ubatches"),
        "label": p.label,
        "efficiency": [f"{name}: {text}" for name, text in p.inputs.get("efficiency", {}).items()],
    }


def _m(n: int | None) -> str:
    return "not given" if n is None else mib(n)


def server_text(view: dict[str, Any]) -> list[str]:
    """The server section of the plain-text report, from server_data's dict."""
    lines = ["", "WHAT LLAMA-SERVER WILL DO", view["status_text"]]
    lines.extend(f"  - {change}" for change in view["changes"])
    for line in view["typed_vs_effective"]:
        lines.append(f"NOTE: {line}")
    if view["failed"] and view["printed"]:
        lines.append("llama-server prints:")
        lines.extend(f"  {level} {text}" for level, text in view["printed"])
    if view["error"]:
        lines.append(f"CANNOT LOAD: {view['error']}")
    lines.append(f"effective command: {view['command']}")
    c = view["context"]
    lines.append(
        f"effective context: n_ctx {c['n_ctx']:,}, {c['n_ctx_seq']:,} cells per sequence, "
        f"{c['n_ctx_slot']:,} per slot, {_n(c['n_parallel'], 'slot')}"
    )
    lines.extend(f"override: {line}" for line in view["overrides"])
    if view["weights_note"]:
        lines.append(f"note: {view['weights_note']}")
    lines.extend(f"note: {note}" for note in view.get("tensor_notes", ()))
    if view["devices"]:
        lines.append(
            "memory as llama.cpp counts it, the figures of llama-server's memory breakdown in its log "
            "(weights / KV / compute = total; free before → after; --fit target):"
        )
    for r in view["devices"]:
        where = f"{r['name']} ({r['description']})"
        lines.append(
            f"  {where}: {mib(r['model'])} / {mib(r['context'])} / {mib(r['compute'])} = {mib(r['counted'])}; "
            f"free {_m(r['free'])} → {_m(r['free_after'])}"
            + ("" if r["is_host"] else f"; target {mib(r['fit_target'])}")
        )
    for b in view.get("cpu_buffers", ()):
        lines.append(f"  {b['name']} (system RAM, not counted by --fit): {mib(b['bytes'])}")
    if view.get("cpu_buffers"):
        after = view.get("host_free_after")
        free = ""
        if after is not None:
            free = f"; free {mib(after)} after all of it" if after >= 0 else f"; {mib(-after)} more than the host has"
        lines.append(f"  the host's RAM in all: {mib(view['host_needs'])}{free}")
    if view.get("cpu"):
        lines.append(f"host CPU: {view['cpu']['label']} ({view['cpu']['source']})")
    lines.extend(f"note: {note}" for note in view.get("host_notes", ()))
    for r in view["devices"]:
        if r["is_host"] or not r["outside"]:
            continue
        lines.append(f"  {r['name']} {view['outside_label']}:")
        for item in r["outside"]:
            size = (
                "unknown" if item["bytes"] is None else ("up to " if item["upper_bound"] else "") + mib(item["bytes"])
            )
            place = "VRAM" if item["in_vram"] else "system RAM"
            lines.append(f"    {item['name']}: {size} in {place} ({item['source']})")
        if r["smi_low"] is not None:
            shown = mib(r["smi_low"]) if r["smi_low"] == r["smi_high"] else f"{mib(r['smi_low'])}–{mib(r['smi_high'])}"
            unknown = f" + {', '.join(r['outside_unknown'])} (unknown)" if r["outside_unknown"] else ""
            lines.append(
                f"    as nvidia-smi would show: {shown}{unknown} of {_m(r['total'])}"
                " (compare with its memory.used while the server runs)"
            )
    speed = view["speed"]
    if speed is not None:
        if speed["tok_s"] is None:
            lines.append(f"decode speed: {speed['label']}")
        else:
            lines.append(
                f"decode speed (estimate): {speed['tok_s']:,.2f} tok/s per request, {speed['aggregate_tok_s']:,.2f} "
                f"with {speed['sequences']} decoding at once — {speed['label']}"
            )
            for p in speed["parts"]:
                read = f"{mib(p['bytes'])} per step, " if p["bytes"] else ""  # a hand-off reads nothing
                lines.append(f"    {p['name']}: {read}{p['ms']:,.3f} ms ({p['bound']})")
        lines.append(f"  bandwidths: {'; '.join(speed['bandwidths'])}")
    pre = view.get("prefill")
    if pre is not None:
        if pre["tok_s"] is None:
            lines.append(f"prefill: {pre['label']}")
        else:
            lines.append(
                f"prefill (estimate): {pre['tok_s_text']} tok/s, {pre['seconds']:,.2f} s for the "
                f"{pre['prompt_tokens']:,}-token prompt in {pre['ubatches']} ubatch(es) of {pre['n_ubatch']} — "
                f"{pre['label']}"
            )
    measured = view.get("measured")
    if measured and measured.get("runs"):
        for run in measured["runs"]:
            lines.append(
                f"  measured: {run['label']} ({run.get('what', 'decode')}) {run['measured']:,.2f} tok/s (kvlab's "
                "estimate for its flags "
                f"{run['estimate']:,.2f}, ratio {run['ratio']:.2f})"
            )
        if measured.get("ratio") is not None:
            lines.append(
                f"  calibrated: {measured['calibrated_tok_s']:,.2f} tok/s (the estimate × {measured['ratio']:.2f}, "
                f"{_n(measured['n'], 'run')} with the KV {measured['placement']})"
            )
        if measured.get("calibrated_prefill_tok_s") is not None:
            lines.append(
                f"  prefill calibrated: {measured['calibrated_prefill_tok_s']:,.0f} tok/s (the prefill estimate × "
                f"{measured['prefill_ratio']:.2f}, {_n(measured['prefill_n'], 'prompt-processing run')})"
            )
    if view["log"]:
        lines.append(f"the fit's log ({view['log_note']}):")
        lines.extend(f"  {level} {text}" for level, text in view["log"])
    return lines
