"""records.outcomes' rule as query filters over Run's columns, for the run list, the charts and the home page."""

from __future__ import annotations

from django.db.models import F, Q

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
