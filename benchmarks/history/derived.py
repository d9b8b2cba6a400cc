"""The tables derived from the runs, kept current by whoever changes runs: one hook for all of them.

Whatever stores, summarises or deletes runs reports them here, inside its own transaction: the
importer (once per import: its new runs and the stored runs it added to), a job when its run is
summarised, the reaper of stale jobs, the admin's deletions. rebuild_all recomputes every derived
table from the runs table alone (`manage.py rebuild_derived`, after runs were written some other way).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from . import baselines, rollups


def runs_changed(run_ids: Iterable[int]) -> None:
    """Bring the derived tables up to date for these runs: new, changed or deleted (set-based)."""
    ids = list(run_ids)
    with transaction.atomic():
        baselines.runs_changed(ids)
        rollups.runs_changed(ids)  # the timeline's buckets


def rebuild_all() -> None:
    """Recompute every derived table from the runs table."""
    with transaction.atomic():
        baselines.rebuild()
        rollups.rebuild_all()
