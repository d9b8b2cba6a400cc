"""A job's repeats (runs job-N-r1 … job-N-rK) summarised: mean and 95 % confidence interval, and noise.

For each figure (aggregate throughput, per-request tok/s mean, TTFT p50, E2E p95) over the repeats
of one load (runs of one arrival mode, rate and concurrency; a rate sweep has one group per rate):

* mean ± t(0.975, n − 1) × s / √n, s the sample standard deviation: Student's t interval, right
  for the handful of repeats a job makes; the quantile is computed (student_t_975), not looked up,
  and agrees with the printed table (12.706 for 1 degree of freedom, 2.776 for 4, 2.262 for 9);
* the coefficient of variation s / mean.

A group is noisy, and says why, when a figure's coefficient of variation passes NOISY_CV, when its
fastest and slowest repeats differ by more than NOISY_FACTOR, or when one run's requests spread
(fastest request tok/s / slowest) by more than NOISY_REQUEST_SPREAD: on a loaded machine a rerun
of one configuration once ran 30× slower than the first, and nothing said so.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any

from ..records.catalogue import NOISE_FIGURES, NOISY_FACTOR
from ..records.metrics import mean

NOISY_CV = 0.20  # s / mean across repeats
NOISY_REQUEST_SPREAD = 3.0  # fastest vs slowest request's tok/s within one run

RUN_COLUMNS = ("pk", "key", "arrival", "request_rate", "concurrency", "tok_s_min", "tok_s_max") + tuple(
    f[0] for f in NOISE_FIGURES
)


_RATE_IN_KEY = re.compile(r"-rate([0-9][0-9.e+-]*)")  # a rate sweep's run key: job-7-rate0.5-r2 (arrivals.py)


def _load(run: dict[str, Any]) -> tuple[Any, ...]:
    """The load a run measured: its arrival mode, rate (from the key in a rate sweep) and concurrency."""
    rate = run["request_rate"]
    if rate is None and (found := _RATE_IN_KEY.search(run["key"] or "")):
        try:
            rate = float(found.group(1).rstrip("-"))
        except ValueError:
            rate = None
    return run["arrival"] or "", rate, run["concurrency"]


@cache
def student_t_975(df: int) -> float:
    """The 0.975 quantile of Student's t with df degrees of freedom (two-sided 95 %).

    Bisection on the CDF, itself Simpson's rule over the density (lgamma for the constant):
    accurate to better than 1e-6, no table, no scipy.
    """
    if df < 1:
        raise ValueError("a t interval needs at least one degree of freedom")
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def density(t: float) -> float:
        return math.exp(log_c - (df + 1) / 2 * math.log1p(t * t / df))

    def area(t: float, steps: int = 4000) -> float:  # ∫0..t density, Simpson (steps even)
        h = t / steps
        inner = sum((4 if i % 2 else 2) * density(i * h) for i in range(1, steps))
        return h / 3 * (density(0.0) + inner + density(t))

    low, high = 0.0, 1.0
    while area(high) < 0.475:
        low, high = high, high * 2
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if area(middle) < 0.475 else (low, middle)
    return (low + high) / 2


def interval(values: Sequence[float]) -> dict[str, Any]:
    """n, mean, sample standard deviation, 95 % Student t interval and coefficient of variation."""
    n = len(values)
    centre = mean(values)
    out: dict[str, Any] = {"n": n, "mean": centre, "min": min(values), "max": max(values)}
    if n < 2:
        return {**out, "sd": None, "half_width": None, "ci95": None, "cv": None}
    sd = math.sqrt(sum((v - centre) ** 2 for v in values) / (n - 1))
    half = student_t_975(n - 1) * sd / math.sqrt(n)
    cv = sd / abs(centre) if centre else None
    return {**out, "sd": sd, "half_width": half, "ci95": [centre - half, centre + half], "cv": cv}


def _factor(low: float, high: float) -> float | None:
    return high / low if low > 0 else None


def summarize_runs(runs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Groups of repeats (one per load) with their intervals and noise. Pure: runs as dicts of RUN_COLUMNS."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault(_load(run), []).append(run)
    out = []
    for (arrival, rate, concurrency), members in groups.items():
        figures: dict[str, Any] = {}
        why: list[str] = []
        for column, words, unit, _ in NOISE_FIGURES:
            values = [run[column] for run in members if run[column] is not None]
            if not values:
                continue
            stats = interval(values)
            figures[column] = stats
            if stats["cv"] is not None and stats["cv"] > NOISY_CV:
                why.append(
                    f"{words} varies {stats['cv']:.0%} (coefficient of variation) across {stats['n']} repeats, "
                    f"above {NOISY_CV:.0%}"
                )
            factor = _factor(stats["min"], stats["max"])
            if len(values) > 1 and factor is not None and factor > NOISY_FACTOR:
                why.append(
                    f"{words}: the slowest and fastest repeats differ {factor:.1f}× "
                    f"({stats['min']:,.3g} – {stats['max']:,.3g} {unit}), more than {NOISY_FACTOR:g}×"
                )
        for run in members:
            spread = _factor(run["tok_s_min"] or 0.0, run["tok_s_max"] or 0.0)
            if spread is not None and spread > NOISY_REQUEST_SPREAD:
                why.append(
                    f"{run['key']}: its requests' tok/s spread {spread:.1f}× "
                    f"({run['tok_s_min']:,.3g} – {run['tok_s_max']:,.3g}), more than {NOISY_REQUEST_SPREAD:g}×"
                )
        out.append(
            {
                "arrival": arrival,
                "request_rate": rate,
                "concurrency": concurrency,
                "runs": [run["key"] for run in members],
                "figures": figures,
                "noisy": bool(why),
                "why": why,
            }
        )
    return {
        "groups": out,
        "noisy": any(group["noisy"] for group in out),
        "thresholds": {"cv": NOISY_CV, "factor": NOISY_FACTOR, "request_spread": NOISY_REQUEST_SPREAD},
    }


def summary(job: Any) -> dict[str, Any]:
    """The job's repeats summarised (one query): what `bench --wait --json` reports as "repeats"."""
    from ..models import Run  # the models import the jobs package

    job_id = job if isinstance(job, int) else job.pk
    runs = Run.objects.filter(job_id=job_id).order_by("id").values(*RUN_COLUMNS)
    return summarize_runs(runs)
