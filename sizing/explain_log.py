"""Explain a llama-server start-up log: kvlab's prediction beside every figure the log printed. Pure.

The configuration sized is the one the log says the server ran with (`flags_from_log`): its n_ctx,
slots, unified or not, cache types, flash attention as resolved, batch sizes and offloaded layers.
Each printed figure gets a verdict: "equal" (as the server prints it), "within" (a compute buffer inside
the estimate's tested bound, memory.COMPUTE_BOUND_*), "differs", or "not predicted" (kvlab lacks what
it would need, said in the note). Where the log shows the server chose something other than what was
asked — the fit lowering the context, -fa auto resolved, a context rounded — `adjustments` says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .fit_params import mib2
from .hparams import ModelParams
from .kv import KVLayout, ServerFlags, kv_layout
from .memory import COMPUTE_BOUND_MIB, COMPUTE_BOUND_SHARE, compute_buffer
from .placement import breakdown
from .placement.cpu import CpuSpecError, from_system_info
from .placement.server import params_of
from .placement.tensors import WeightTensor
from .placement.types import Device, Host, MiB
from .server_log import StartupLog, mib
from .size import size

EQUAL, WITHIN, DIFFERS, NOT_PREDICTED = "equal", "within", "differs", "not predicted"
HOST_BUFFERS = ("CPU", "CPU_Mapped", "CUDA_Host", "CPU_REPACK", "AMX")
EXTRA_BUFFERS = ("AMX", "CPU_REPACK")  # the CPU's extra buffer types (sizing.placement.cpu)


@dataclass(frozen=True)
class Figure:
    """One figure the log printed, beside kvlab's."""

    group: str  # "context", "slots", "KV cache (full)", "buffers", …
    name: str
    logged: str
    predicted: str
    verdict: str
    note: str = ""


@dataclass
class Explanation:
    flags: ServerFlags
    layout: KVLayout | None
    figures: list[Figure] = field(default_factory=list)
    adjustments: list[str] = field(default_factory=list)  # what the server changed from what was asked
    problems: list[str] = field(default_factory=list)  # why some figures could not be predicted

    @property
    def counts(self) -> dict[str, int]:
        """Figures per verdict, keyed by the verdict with "_" for spaces (a template reads them)."""
        out = dict.fromkeys((EQUAL, WITHIN, DIFFERS, NOT_PREDICTED.replace(" ", "_")), 0)
        for f in self.figures:
            out[f.verdict.replace(" ", "_")] += 1
        return out

    @property
    def all_equal(self) -> bool:
        return bool(self.figures) and all(f.verdict == EQUAL for f in self.figures)


def flags_from_log(log: StartupLog) -> ServerFlags:
    """The flags that give the configuration the log printed (all explicit, so --fit changes nothing)."""
    flags = ServerFlags()
    n_seq = log.n_seq_max or log.n_slots
    if log.n_ctx:
        flags = replace(flags, ctx_size=log.n_ctx)
    if n_seq:
        flags = replace(flags, parallel=n_seq, kv_unified=log.kv_unified)
    if log.kv_caches:
        flags = replace(flags, type_k=log.kv_caches[0].type_k, type_v=log.kv_caches[0].type_v)
    resolved = log.flash_attn_resolved
    if resolved is not None:
        flags = replace(flags, flash_attn="on" if resolved else "off")
    elif log.flash_attn in ("enabled", "disabled"):
        flags = replace(flags, flash_attn="on" if log.flash_attn == "enabled" else "off")
    if log.n_batch:
        flags = replace(flags, n_batch=log.n_batch)
    if log.n_ubatch:
        flags = replace(flags, n_ubatch=log.n_ubatch)
    if log.offloaded_layers:
        flags = replace(flags, n_gpu_layers=log.offloaded_layers[0])
    kv_devices = {b.device for b in log.buffers if b.kind == "kv"}
    if _gpu_names(log) and kv_devices and kv_devices <= set(HOST_BUFFERS):
        flags = replace(flags, kv_offload=False)  # the weights on a GPU, the KV in system RAM: -nkvo
    return flags


def model_metadata(log: StartupLog) -> dict[str, Any] | None:
    """The GGUF metadata the log printed, for sizing.hparams.model_params; None when the log lacks it or cut
    a key that sizes the model (a per-layer array printed with "…"). The vocabulary, whose token list
    is always cut, is sized from the list's printed length."""
    if not log.metadata.get("general.architecture"):
        return None
    if any(not key.startswith("tokenizer.") for key in log.metadata_truncated):
        return None
    metadata = dict(log.metadata)
    arch = metadata["general.architecture"]
    vocab = log.array_lengths.get("tokenizer.ggml.tokens") or log.n_vocab
    if vocab and f"{arch}.vocab_size" not in metadata:
        metadata[f"{arch}.vocab_size"] = vocab
    return metadata


def _gpu_names(log: StartupLog) -> list[str]:
    return sorted({b.device for b in log.buffers if b.device not in HOST_BUFFERS})


def explain(
    log: StartupLog,
    model: ModelParams | None,
    *,
    weights_bytes: int | None = None,
    intended: ServerFlags | None = None,
    tensors: Sequence[WeightTensor] | None = None,
) -> Explanation:
    """kvlab's prediction for the configuration the log printed, figure by figure. `tensors`: the GGUF's
    tensor table in file order, which the weights split over the CPU's buffer types need."""
    flags = flags_from_log(log)
    out = Explanation(flags, None)
    out.adjustments = adjustments(log, model, intended)
    if model is None:
        out.problems.append("the model is unknown: its GGUF metadata was not in the log (or was cut); give it below")
        return out
    layout = kv_layout(model, flags)
    swa = [c for c in log.kv_caches if c.kind == "swa"]
    if swa and not flags.swa_full:
        with_full = kv_layout(model, replace(flags, swa_full=True))
        if [c.cells for c in layout.caches] != [c.cells for c in log.kv_caches] and [
            c.cells for c in with_full.caches
        ] == [c.cells for c in log.kv_caches]:
            flags, layout = replace(flags, swa_full=True), with_full  # the SWA cache as big as the full one
            out.flags = flags
    out.layout = layout
    out.problems.extend(layout.errors)
    out.figures = [*_context_figures(log, layout), *_kv_figures(log, model, layout)]
    out.figures.extend(_buffer_figures(log, model, flags, layout, weights_bytes, out.problems, tensors))
    return out


def _verdict(logged: object, predicted: object) -> str:
    return EQUAL if str(logged) == str(predicted) else DIFFERS


def _context_figures(log: StartupLog, layout: KVLayout) -> list[Figure]:
    figures = []
    unified = "true" if layout.kv_unified else "false"
    for name, logged, predicted in (
        ("n_seq_max", log.n_seq_max, layout.n_parallel),
        ("n_ctx", log.n_ctx, layout.n_ctx),
        ("n_ctx_seq", log.n_ctx_seq, layout.n_ctx_seq),
        ("kv_unified", None if log.kv_unified is None else str(log.kv_unified).lower(), unified),
    ):
        if logged is not None:
            figures.append(Figure("context", name, str(logged), str(predicted), _verdict(logged, predicted)))
    if log.n_slots is not None:
        figures.append(
            Figure(
                "slots", "n_slots", str(log.n_slots), str(layout.n_parallel), _verdict(log.n_slots, layout.n_parallel)
            )
        )
    if log.n_ctx_slot is not None:
        figures.append(
            Figure(
                "slots",
                "n_ctx_slot",
                str(log.n_ctx_slot),
                str(layout.n_ctx_seq),
                _verdict(log.n_ctx_slot, layout.n_ctx_seq),
            )
        )
    for slot in log.slots:
        figures.append(
            Figure(
                "slots",
                f"slot {slot['id']} n_ctx",
                str(slot["n_ctx"]),
                str(layout.n_ctx_seq),
                _verdict(slot["n_ctx"], layout.n_ctx_seq),
            )  # fmt: skip
        )
    return figures


def _kv_figures(log: StartupLog, model: ModelParams, layout: KVLayout) -> list[Figure]:
    figures = []
    for i, line in enumerate(log.kv_caches):
        cache = layout.caches[i] if i < len(layout.caches) else None
        group = f"KV cache {i + 1}" + (f" ({line.kind})" if line.kind else "")
        if cache is None:
            figures.append(Figure(group, "size", f"{line.size_mib} MiB", "—", DIFFERS, "kvlab predicts no such cache"))
            continue
        for name, logged, predicted in (
            ("size", f"{line.size_mib} MiB", f"{mib(cache.bytes)} MiB"),
            ("cells", line.cells, cache.cells),
            ("layers", line.layers, cache.layers),
            ("seqs", f"{line.n_seq_max}/{line.n_stream}", f"{layout.n_parallel}/{cache.streams}"),
            (f"K ({line.type_k})", f"{line.k_mib} MiB", f"{mib(cache.k_bytes)} MiB"),
            (f"V ({line.type_v})", f"{line.v_mib} MiB", f"{mib(cache.v_bytes)} MiB"),
        ):
            figures.append(Figure(group, name, str(logged), str(predicted), _verdict(logged, predicted)))
    for extra in layout.caches[len(log.kv_caches) :]:
        figures.append(
            Figure(f"KV cache ({extra.name})", "size", "—", f"{mib(extra.bytes)} MiB", DIFFERS, "not in the log")
        )
    r = layout.recurrent
    for state in log.recurrent:
        if r is None:
            figures.append(
                Figure("recurrent state", "size", f"{state.size_mib} MiB", "—", DIFFERS, "kvlab predicts none")
            )
            continue
        for name, logged, predicted in (
            ("size", f"{state.size_mib} MiB", f"{mib(r.r_bytes + r.s_bytes)} MiB"),
            ("cells", state.cells, r.cells),
            ("layers", state.layers, model.n_layer),  # the server prints every layer of the model
            ("R (f32)", f"{state.r_mib} MiB", f"{mib(r.r_bytes)} MiB"),
            ("S (f32)", f"{state.s_mib} MiB", f"{mib(r.s_bytes)} MiB"),
        ):
            figures.append(Figure("recurrent state", name, str(logged), str(predicted), _verdict(logged, predicted)))
    return figures


def _within_bound(logged_mib: float, predicted_bytes: int) -> bool:
    return abs(predicted_bytes / MiB - logged_mib) <= COMPUTE_BOUND_MIB + COMPUTE_BOUND_SHARE * logged_mib


def _compute_verdict(logged: float, predicted: int) -> str:
    if f"{logged:.2f}" == mib(predicted):
        return EQUAL
    return WITHIN if _within_bound(logged, predicted) else DIFFERS


def _buffer_figures(
    log: StartupLog,
    model: ModelParams,
    flags: ServerFlags,
    layout: KVLayout,
    weights_bytes: int | None,
    problems: list[str],
    tensors: Sequence[WeightTensor] | None = None,
) -> list[Figure]:
    model_buffers, kv_buffers, compute = log.buffers_of("model"), log.buffers_of("kv"), log.buffers_of("compute")
    if _gpu_names(log):
        return _gpu_buffer_figures(log, model, flags, layout, weights_bytes, problems)
    figures = []
    if kv_buffers:
        total = sum(kv_buffers.values()) + sum(log.buffers_of("rs").values())
        figures.append(
            Figure(
                "buffers",
                "KV buffers (host)",
                f"{total:.2f} MiB",
                f"{mib(layout.kv_bytes)} MiB",
                EQUAL if abs(total - float(mib(layout.kv_bytes))) < 0.015 * max(1, len(kv_buffers)) else DIFFERS,
                "the sum of the KV buffer lines",
            )  # fmt: skip
        )
    if any(name in model_buffers for name in EXTRA_BUFFERS):  # the weights split over the CPU's buffer types
        figures.extend(_split_weight_figures(log, model, flags, model_buffers, tensors))
    elif model_buffers:
        logged = sum(model_buffers.values())
        if weights_bytes is None:
            figures.append(
                Figure(
                    "buffers",
                    "model buffer",
                    f"{logged:.2f} MiB",
                    "—",
                    NOT_PREDICTED,
                    "kvlab needs the weights' size: give the GGUF head, a catalogue quantization or the size",
                )  # fmt: skip
            )
        else:
            figures.append(
                Figure(
                    "buffers",
                    "model buffer",
                    f"{logged:.2f} MiB",
                    f"{mib(weights_bytes)} MiB",
                    _verdict(f"{logged:.2f}", mib(weights_bytes)),
                    "the weights' tensor bytes",
                )  # fmt: skip
            )
    for device, logged_mib in compute.items():
        predicted = compute_buffer(model, layout, flags)
        figures.append(
            Figure(
                "buffers",
                f"{device} compute buffer",
                f"{logged_mib:.2f} MiB",
                f"{mib(predicted)} MiB",
                _compute_verdict(logged_mib, predicted),
                f"an estimate: within {COMPUTE_BOUND_MIB} MiB + {COMPUTE_BOUND_SHARE:.0%} on the CPU backend",
            )  # fmt: skip
        )
    return figures


def _split_weight_figures(
    log: StartupLog,
    model: ModelParams,
    flags: ServerFlags,
    logged: dict[str, float],
    tensors: Sequence[WeightTensor] | None,
) -> list[Figure]:
    """The weights spread over the CPU's buffer types (AMX, CPU_REPACK) and plain CPU memory: each
    buffer beside kvlab's, from the tensor table and the CPU the log's system_info line names."""
    cpu = None
    if log.system_info:
        try:
            cpu = from_system_info(log.system_info)
        except CpuSpecError:
            cpu = None
    missing = []
    if tensors is None:
        missing.append("the GGUF's tensor table (upload its head)")
    if cpu is None:
        missing.append("the log's system_info line (run with -lv 4)")
    if tensors is None or cpu is None:
        why = f"llama.cpp split the weights over {', '.join(logged)}: kvlab needs {' and '.join(missing)}"
        return [
            Figure("buffers", f"{name} model buffer", f"{v:.2f} MiB", "—", NOT_PREDICTED, why)
            for name, v in logged.items()
        ]
    params = params_of(flags, kv_layout(model, flags), 0)
    placement = breakdown.host_placement(model, tensors, [], Host(0, 0, cpu=cpu), params)
    plain = sum(size for bucket, _, size in placement.weights if bucket == breakdown.HOST)
    predicted = placement.extra_bytes()
    notes = {name: f"the weights the {cpu.label} CPU's {name} kernels take (repacked copies)" for name in predicted}
    if "CPU_Mapped" in logged:
        predicted["CPU_Mapped"] = breakdown.mapped_span(placement, tensors)
        notes["CPU_Mapped"] = (
            "mmap: the file from the first to the last plain-CPU weight, repacked ones between included"
        )
    else:
        predicted["CPU"] = plain
        notes["CPU"] = "the plain CPU weights, copied (no mmap)"
    figures = []
    for name in dict.fromkeys([*logged, *predicted]):
        have, want = logged.get(name), predicted.get(name)
        have_text = None if have is None else f"{have:.2f}"  # load_tensors' "%8.2f" of the buffer's MiB
        want_text = None if want is None else mib2(want)
        verdict = DIFFERS if have_text is None or want_text is None else _verdict(have_text, want_text)
        figures.append(
            Figure(
                "buffers",
                f"{name} model buffer",
                "—" if have_text is None else f"{have_text} MiB",
                "—" if want_text is None else f"{want_text} MiB",
                verdict,
                notes.get(name, ""),
            )
        )
    return figures


def _gpu_buffer_figures(
    log: StartupLog,
    model: ModelParams,
    flags: ServerFlags,
    layout: KVLayout,
    weights_bytes: int | None,
    problems: list[str],
) -> list[Figure]:
    """With GPUs, llama-server's placement replayed on the devices the log names (sizing.placement)."""
    devices = []
    for name in _gpu_names(log):
        entry = next((d for d in log.devices if d["name"] == name), None)
        if entry is None or "total_mib" not in entry:
            problems.append(
                f"the log does not say {name}'s memory (a -lv 4 log prints it): its buffers are not predicted"
            )
            return []
        used = entry["total_mib"] - entry.get("free_mib", entry["total_mib"])
        devices.append(Device(name, entry.get("description", name), entry["total_mib"] * MiB, used * MiB))
    try:
        sizing = size(model, flags, devices=devices, weights_bytes=weights_bytes, with_recommendations=False)
    except (ValueError, ArithmeticError) as exc:
        problems.append(f"kvlab could not replay the placement: {exc}")
        return []
    if sizing.server is None:
        return []
    figures = []
    logged = {
        "model": log.buffers_of("model"),
        "context": {d: v + log.buffers_of("rs").get(d, 0.0) for d, v in log.buffers_of("kv").items()},
        "compute": log.buffers_of("compute"),
    }
    for row in sizing.server.rows:
        names = HOST_BUFFERS if row.is_host else (row.name,)
        for kind, predicted in (
            ("model", row.usage.model),
            ("context", row.usage.context),
            ("compute", row.usage.compute),
        ):
            values = [logged[kind][n] for n in names if n in logged[kind]]
            if not values:
                continue
            total = sum(values)
            if kind == "model" and weights_bytes is None:
                figures.append(Figure("buffers", f"{row.name} model", f"{total:.2f} MiB", "—", NOT_PREDICTED,
                                      "kvlab needs the weights' size"))  # fmt: skip
                continue
            verdict = (
                _compute_verdict(total, predicted) if kind == "compute" else _verdict(f"{total:.2f}", mib(predicted))
            )
            note = "an estimate, tested on the CPU backend; CUDA kernels may differ" if kind == "compute" else ""
            figures.append(
                Figure("buffers", f"{row.name} {kind}", f"{total:.2f} MiB", f"{mib(predicted)} MiB", verdict, note)
            )
    return figures


def adjustments(log: StartupLog, model: ModelParams | None, intended: ServerFlags | None) -> list[str]:
    """Where the server ran with something other than what was asked, in plain words."""
    out = []
    if log.fit_context:
        before, after = log.fit_context
        out.append(
            f"The fit reduced the context from {before:,} to {after:,} tokens to fit the free memory "
            "(llama-server's --fit is on by default when -c is not given)."
        )
    for line in log.fit:
        if "set to use" in line or "failed to fit" in line:
            out.append(f"The fit: {line.split(': ', 1)[-1]}")
    for note in log.notes:
        if note.startswith("n_ctx is not divisible"):
            out.append(f"The server rounded the context: {note} (n_ctx is split evenly among the slots).")
        elif note.startswith("enabling flash_attn"):
            out.append(f"The server turned flash attention on: {note.split('enabling flash_attn ', 1)[-1]}.")
    if log.flash_attn == "auto" and log.flash_attn_resolved is not None:
        out.append(f"-fa auto resolved to {'on' if log.flash_attn_resolved else 'off'}.")
    if log.offloaded_layers and log.offloaded_layers[0] < log.offloaded_layers[1]:
        n, total = log.offloaded_layers
        out.append(f"Only {n} of {total} layers were offloaded to the GPU; the rest run on the CPU.")
    if intended is not None and model is not None:
        asked = kv_layout(model, intended)
        for name, want, got in (
            ("n_ctx", asked.n_ctx, log.n_ctx),
            ("context per slot", asked.n_ctx_seq, log.n_ctx_seq),
            ("slots", asked.n_parallel, log.n_seq_max),
            ("unified KV", asked.kv_unified, log.kv_unified),
        ):
            if got is not None and want != got:
                out.append(f"You asked for {name} {_show(want)}; the server ran with {_show(got)}.")
        if log.kv_caches and (intended.type_k, intended.type_v) != (log.kv_caches[0].type_k, log.kv_caches[0].type_v):
            out.append(
                f"You asked for K/V cache types {intended.type_k}/{intended.type_v}; the server ran with "
                f"{log.kv_caches[0].type_k}/{log.kv_caches[0].type_v}."
            )
    return out


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:,}" if isinstance(value, int) else str(value)
