"""records.outcomes' rule and records.metrics.success_rate over Run's columns, for the ORM and for raw SQL:
the run list, the charts, the home page and the timeline's buckets read them from here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import F, FloatField, Q, QuerySet
from django.db.models.functions import Cast, NullIf

from ..records.outcomes import EMPTY, FAILED, OK, PARTIAL, UNKNOWN

# The same rule over Run's n_ok / n_requests columns (and its summary, for the counts).
# OK, PARTIAL and FAILED need n_requests > 0, so a run without counts is never one of them.
_COUNTS_NOT_REPORTED = Q(summary__isnull=False) & ~Q(summary__has_key="n_requests")
OUTCOME_Q = {
    OK: Q(n_requests__gt=0, n_ok=F("n_requests")),
    PARTIAL: Q(n_ok__gt=0, n_ok__lt=F("n_requests")),
    FAILED: Q(n_requests__gt=0, n_ok=0),
    EMPTY: Q(n_requests=0) & ~_COUNTS_NOT_REPORTED,
    UNKNOWN: Q(n_requests=0) & _COUNTS_NOT_REPORTED,
}
WITH_FAILURES_Q = OUTCOME_Q[PARTIAL] | OUTCOME_Q[FAILED]


def failed_sql(column: Callable[[str], str]) -> str:
    """OUTCOME_Q[FAILED] as raw SQL; column quotes a Run column's name (and may prefix its table)."""
    return f"({column('n_requests')} > 0 AND {column('n_ok')} = 0)"


SUCCESS_RATE = Cast(F("n_ok"), FloatField()) / NullIf(F("n_requests"), 0)


def success_rate_sql(column: Callable[[str], str]) -> str:
    """SUCCESS_RATE as raw SQL: NULL for a run without requests."""
    return f"CAST({column('n_ok')} AS DOUBLE PRECISION) / NULLIF({column('n_requests')}, 0)"


def with_success_rate(runs: QuerySet[Any]) -> QuerySet[Any]:
    return runs.annotate(success_rate=SUCCESS_RATE)
