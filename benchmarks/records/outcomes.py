"""What counts as an ok, partial, failed or empty run: one definition for every screen.

The run list filter, the charts, the job page and the command line all read a run's
outcome from here, in Python (`outcome_of`) or in SQL (`models.outcomes.OUTCOME_Q`, the same rule), so they can
never disagree.
"""

from __future__ import annotations

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
