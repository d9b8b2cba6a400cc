"""The history beside a sizing: measured runs of the same model and GPU, their decode speed against the
estimate, what launched servers reported of its memory, and whether a run's record agrees with the
prediction for its flags."""

from __future__ import annotations

import statistics

from django.db.models import Q, Subquery

from benchmarks.models import CalibrationPoint, Run
from benchmarks.records.outcomes import FAILED, PARTIAL, outcome_of
from sizing.cmdline import quant_in_file_name
from sizing.inputs import SizingInputs
from sizing.kv import ServerFlags, flags_key
from sizing.placement.speed import calibrate
from sizing.report import RecordCheck, check_record
from sizing.size import Sizing, size
from sizing.workload import Workload

from .runs import catalogue_id_for, flags_from_run

HISTORY_SCAN = 10_000  # the latest runs searched for the same model and GPU: the page's cost stays bounded
HISTORY_SHOWN = 10


def history(inputs: SizingInputs) -> list[Run]:
    """Measured runs of the same model (and GPU, when one is given), to show beside the prediction: of the
    latest HISTORY_SCAN runs, whatever the history's size."""
    catalogue_id = inputs.catalogue_id
    if not catalogue_id or len(inputs.devices) > 1:  # a run records one GPU
        return []
    latest = Run.objects.newest_first().values("pk")[:HISTORY_SCAN]
    runs = Run.objects.filter(pk__in=Subquery(latest)).newest_first()
    if inputs.gpu_mib:
        runs = runs.filter(Q(vram_total_mib=inputs.gpu_mib) | Q(vram_total_mib__isnull=True))
    first_word = catalogue_id.split("-")[0]
    candidates = runs.filter(model__icontains=first_word)[:200]
    return [r for r in candidates if catalogue_id_for(r.model) == catalogue_id][:HISTORY_SHOWN]


def _kv_place(flags: ServerFlags) -> str:
    return "on the GPU" if flags.kv_offload else "in system RAM"


def prompt_rate(run: Run) -> float | None:
    """A prompt-processing test's measured tok/s (llama-bench's pp N: N prompt tokens, no output; its
    summary's rate is the prompt's), or None for any other run."""
    rate = (run.summary or {}).get("total_tok_s")
    if run.tool != "llama-bench" or not run.prompt_tokens_max or run.n_predict_max or not rate:
        return None
    return float(rate) if isinstance(rate, (int, float)) and rate > 0 else None


def measured_speed(inputs: SizingInputs, result: Sizing, runs: list[Run]) -> dict[str, object] | None:
    """The measured decode tok/s of the history's runs of this model and GPU beside kvlab's estimate for each
    run's own flags and workload (speed.calibrate: measured / estimate), and the estimate calibrated by the
    median ratio of the runs that kept the KV where this configuration does; prompt-processing runs
    (llama-bench's pp, a host calibration's) likewise beside the prefill estimate, calibrating it."""
    server = result.server
    if server is None or server.speed is None or server.speed.tok_s is None or len(inputs.devices) != 1:
        return None
    rows = []
    for run in runs:
        prompt = prompt_rate(run)
        if not (run.tok_s_mean or prompt) or (inputs.quant and quant_in_file_name(run.model) not in ("", inputs.quant)):
            continue
        flags = flags_from_run(run)
        workload = Workload(run.prompt_tokens_max or 1, max(0, run.n_predict_max or 0), run.concurrency or 1)
        try:
            theirs = size(
                inputs.model,
                flags,
                workload=workload,
                weights_bytes=inputs.weights_bytes,
                devices=inputs.devices,
                host=inputs.host,
                tensors=inputs.tensors,
                sm_counts=inputs.sm_counts,
                compute_capabilities=inputs.compute_capabilities,
                with_recommendations=False,
            )
        except (ValueError, ArithmeticError):
            continue
        plan = theirs.server
        if prompt:
            estimate = plan.prefill.tok_s if plan and plan.prefill else None
            measured, what = prompt, f"prefill, {run.prompt_tokens_max:,}-token prompt"
        else:
            estimate = plan.speed.tok_s if plan and plan.speed else None
            measured, what = float(run.tok_s_mean or 0), "decode"
        ratio = calibrate(estimate, [measured]) if estimate else None
        if ratio is None:
            continue
        rows.append(
            {
                "pk": run.pk,
                "label": run.label or run.key,
                "key": run.key,
                "what": what,
                "prefill": bool(prompt),
                "measured": round(measured, 2),
                "estimate": round(estimate or 0, 2),
                "ratio": round(ratio, 3),
                "kv": _kv_place(flags),
            }
        )
    if not rows:
        return None
    place = _kv_place(result.flags)
    alike = [r["ratio"] for r in rows if r["kv"] == place and not r["prefill"]]
    ratio = statistics.median(alike) if alike else None
    calibrated = server.speed.calibrated(ratio, len(alike)) if ratio else None
    prompts = [r["ratio"] for r in rows if r["prefill"]]
    prefill_ratio = statistics.median(prompts) if prompts else None
    prefill = server.prefill.tok_s if server.prefill else None
    return {
        "runs": rows,
        "placement": place,
        "ratio": ratio,
        "n": len(alike),
        "calibrated_tok_s": None if calibrated is None or calibrated.tok_s is None else round(calibrated.tok_s, 2),
        "label": "" if calibrated is None else calibrated.label,
        "prefill_ratio": prefill_ratio,
        "prefill_n": len(prompts),
        "calibrated_prefill_tok_s": round(prefill * prefill_ratio, 1) if prefill and prefill_ratio else None,
    }


def calibration(model_name: str, flags: ServerFlags, compute_estimate: int) -> dict[str, object]:
    """What launched servers reported for this model: the exact flags if measured, else a
    correction of the compute-buffer estimate (the median reported/estimated ratio)."""
    points = list(
        CalibrationPoint.objects.filter(model_name=model_name).select_related("config").order_by("-created_at")[:200]
    )
    exact = next((p for p in points if p.flags_key == flags_key(flags)), None)
    ratios = [p.reported_compute_mib * 1048576 / p.predicted_compute_bytes for p in points if p.predicted_compute_bytes]
    ratio = statistics.median(ratios) if ratios else None
    return {
        "exact": exact,
        "n": len(ratios),
        "ratio": ratio,
        "calibrated_compute": int(compute_estimate * ratio) if ratio else None,
    }


def record_check(run: Run | None, inputs: SizingInputs, result: Sizing) -> RecordCheck | None:
    """Whether the run whose prompts are the workload measured what kvlab predicts, when it ran these flags."""
    if run is None or flags_key(flags_from_run(run)) != flags_key(inputs.flags):
        return None
    has_failures = outcome_of(run.n_ok, run.n_requests) in (PARTIAL, FAILED)
    failed = run.requests.filter(ok=False) if has_failures else run.requests.none()
    statuses = failed.values_list("http_status", flat=True)
    failure = ", ".join(f"HTTP {status}" for status in sorted(set(filter(None, statuses))))
    return check_record(result, run.n_ok, run.n_requests, has_failures=has_failures, failure=failure)
