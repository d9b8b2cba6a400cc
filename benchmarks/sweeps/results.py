"""A sweep's result rows: per flag set, kvlab's prediction beside what the server reported and measured."""

from __future__ import annotations

from typing import Any

from django.db.models import Avg, IntegerField, Max, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from ..models import Run, Sweep, SweepConfig
from ..records.outcomes import LABELS, outcome_of

MiB = 1024 * 1024


def config_rows(sweep: Sweep) -> list[dict[str, Any]]:
    """One row per flag set: outcome, measurements, predicted vs reported memory; the best one marked."""
    runs = (
        Run.objects.filter(job__sweep_config__sweep=sweep)
        .values("job__sweep_config")
        .annotate(
            ok=Sum("n_ok"),
            total=Sum("n_requests"),
            tok_s=Avg("tok_s_mean"),
            throughput=Avg("throughput_tok_s"),
            ttft_p95=Avg("ttft_p95"),
            e2e_p95=Avg("e2e_p95"),
            wall=Avg("effective_wall_s"),
            # the KV pool's peak over the flag set's runs (telemetry), for the sweep table's occupancy column
            peak_cells=Max(Cast(KT("telemetry__peak__pool"), IntegerField())),
            pool_cells=Max(Cast(KT("telemetry__pool__pool_cells"), IntegerField())),
        )
    )
    measured = {r["job__sweep_config"]: r for r in runs}
    rows = [_row(config, measured.get(config.pk, {})) for config in sweep.configs.order_by("position")]
    ran = [r for r in rows if r["config"].outcome == SweepConfig.Outcome.RAN and r["measured"].get("total")]
    if ran:
        max(ran, key=lambda r: score(r["measured"], sweep.preference))["best"] = True
    return rows


def score(measured: dict[str, Any], preference: str) -> tuple[float, float]:
    """Success rate first; then throughput, or the lowest E2E p95 when latency is preferred."""
    success = (measured["ok"] or 0) / measured["total"]
    if preference == "latency":
        return success, -(measured["e2e_p95"] or float("inf"))
    return success, measured["throughput"] or 0.0


def _row(config: SweepConfig, measured: dict[str, Any]) -> dict[str, Any]:
    predicted, reported = config.predicted or {}, config.reported or {}
    predicted_kv = predicted.get("kv_bytes")
    reported_kv = reported.get("kv_mib")
    prediction = predicted.get("prediction") or {}
    total = measured.get("total")
    # What its requests found, by records.outcomes' rule: "ran" alone says nothing of 0/3.
    found = outcome_of(measured.get("ok") or 0, total) if total else None
    return {
        "config": config,
        "measured": measured,
        "found": found,
        "found_label": LABELS[found] if found else "",
        "prediction": prediction.get("message"),
        "predicted_outcome": prediction.get("outcome"),
        "predicted_errors": predicted.get("errors") or [],
        "predicted_kv_mib": None if predicted_kv is None else predicted_kv / MiB,
        "reported_kv_mib": reported_kv,
        "kv_diff_mib": None if predicted_kv is None or reported_kv is None else reported_kv - predicted_kv / MiB,
        "predicted_compute_mib": (predicted.get("memory") or {}).get("compute_estimate_bytes", 0) / MiB
        if predicted
        else None,
        "reported_compute_mib": reported.get("compute_mib"),
        "reported_model_mib": reported.get("model_mib"),
        "n_ctx_slot": reported.get("n_ctx_slot"),
    }
