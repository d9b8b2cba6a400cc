"""What counts as an ok, partial, failed or empty run: one definition for every screen.

The run list filter, the charts, the job page and the command line all read a run's
outcome from here, in Python (`outcome_of`) or in SQL (`OUTCOME_Q`), so they can
never disagree.
"""

from __future__ import annotations

from django.db.models import F, Q

OK = "ok"  # every request succeeded
PARTIAL = "partial"  # some failed, some succeeded
FAILED = "failed"  # every request failed
EMPTY = "empty"  # no request recorded
# The tool did not report how many requests ran or succeeded (llama-bench's CSV/SQL print
# only means), and no request row says it: neither ok nor failed.
UNKNOWN = "unknown"
OUTCOMES = (OK, PARTIAL, FAILED, EMPTY, UNKNOWN)
LABELS = {
    OK: "all requests ok",
    PARTIAL: "some failed",
    FAILED: "all failed",
    EMPTY: "no requests",
    UNKNOWN: "counts not reported",
}


def outcome_of(n_ok: int, n_requests: int, *, counts_reported: bool = True) -> str:
    """counts_reported: False for a run whose tool summary left its counts out (summaries.counts_reported)."""
    if n_requests == 0:
        return EMPTY if counts_reported else UNKNOWN
    if n_ok == n_requests:
        return OK
    return FAILED if n_ok == 0 else PARTIAL


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
