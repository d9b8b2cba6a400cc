"""The KV pool telemetry on the job, run and sweep pages: {% telemetry_panel %} and {% sweep_peaks %}.

The words and the figure come from benchmarks/charts/telemetry.py (pure); these tags only hand them to
templates/benchmarks/partials/telemetry*.html.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import template

from ..charts import telemetry as charts
from ..models import Run

register = template.Library()


@register.inclusion_tag("benchmarks/partials/telemetry.html")
def telemetry_panel(telemetry: Any, live: bool = False, kvlab_ran: bool = False) -> dict[str, Any]:
    """The chart and its sentences. live: the job page, redrawn in place at each poll.
    kvlab_ran: a run of kvlab's own with no series says why instead of showing nothing."""
    if not isinstance(telemetry, Mapping):
        return {"panel": None, "live": live, "kvlab_ran": kvlab_ran}
    return {
        "panel": {
            "figure": charts.figure(telemetry),
            "attribution": charts.attribution_text(telemetry),
            "prediction": charts.prediction_text(telemetry),
            "peak": charts.peak_text(telemetry),
            "sources": charts.sources_text(telemetry),
        },
        "live": live,
        "kvlab_ran": kvlab_ran,
    }


def _sweep_peaks(sweep: Any) -> dict[int, tuple[int, int | None]]:
    """Per flag set (config id), the highest pool occupancy over its jobs' runs and the pool's cells.

    One query per page (kept on the sweep object); only the series' `peak` and `pool` keys are read."""
    cached: dict[int, tuple[int, int | None]] | None = getattr(sweep, "_telemetry_peaks", None)
    if cached is not None:
        return cached
    rows = Run.objects.filter(job__sweep_config__sweep=sweep, telemetry__isnull=False).values_list(
        "job__sweep_config_id", "telemetry__peak", "telemetry__pool"
    )
    peaks: dict[int, tuple[int, int | None]] = {}
    for config_id, peak, pool in rows:
        found = charts.peak_of({"peak": peak, "pool": pool})
        if found is not None and (config_id not in peaks or found[0] > peaks[config_id][0]):
            peaks[config_id] = found
    sweep._telemetry_peaks = peaks
    return peaks


@register.simple_tag
def sweep_peak_text(sweep: Any, row: Mapping[str, Any]) -> str:
    """ "1,025 / 1,024 cells (100.1 %) ≈ 3.00 MiB": the peak beside the memory the sizing predicted for the pool.

    A row whose measurements carry `peak_cells` / `pool_cells` (an aggregate of the row query) costs no
    query; otherwise the sweep's peaks are read once for the page. A flag set with no run shows "—"."""
    measured = row.get("measured") or {}
    if not measured:
        return "—"
    if "peak_cells" in measured:
        peak_cells = measured["peak_cells"]
        found = None if peak_cells is None else (int(peak_cells), measured.get("pool_cells"))
    else:
        found = _sweep_peaks(sweep).get(getattr(row.get("config"), "pk", None) or 0)
    if found is None:
        return "—"
    peak, pool_cells = found
    if not pool_cells:
        return f"{charts.cells_text(peak)} cells (pool size unknown)"
    text = f"{charts.cells_text(peak)} / {charts.cells_text(pool_cells)} cells ({100 * peak / pool_cells:.1f} %)"
    predicted = row.get("predicted_kv_mib")
    if isinstance(predicted, int | float) and predicted > 0:
        text += f" ≈ {predicted * peak / pool_cells:,.2f} MiB"
    return text
