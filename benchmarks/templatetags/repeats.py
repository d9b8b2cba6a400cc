"""The job page's repeats panel: mean, 95 % interval and noise of a job's repeats (jobs/repeats.py)."""

from __future__ import annotations

from typing import Any

from django import template

from ..jobs import repeats
from ..records.catalogue import NOISE_FIGURES

register = template.Library()


@register.inclusion_tag("benchmarks/partials/repeats.html")
def repeats_panel(job: Any) -> dict[str, Any]:
    """One query: the job's runs' figures."""
    summary = repeats.summary(job)
    words = {column: (name, unit) for column, name, unit, _ in NOISE_FIGURES}
    groups = [
        {**group, "rows": [(*words[column], stats) for column, stats in group["figures"].items()]}
        for group in summary["groups"]
    ]
    return {"summary": summary, "groups": groups, "several": len(groups) > 1}
