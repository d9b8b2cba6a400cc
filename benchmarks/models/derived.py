"""Runs whose derived tables (the timeline's buckets, the regression baselines) are not yet current.

A large import stores its runs and commits without waiting for the derived tables: it leaves one
row here (history.derived.runs_added), and a Celery worker brings those tables up to date just after
the commit (history.derived.catch_up). Until then the timeline and the regressions page say how many
runs they do not count yet. The table holds one row per pending import, so it stays a few rows long.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class DerivedBacklog(models.Model):
    """The runs of one change still to be counted: the ids first_run_id..last_run_id and run_ids."""

    created_at = models.DateTimeField(default=timezone.now)
    # The new runs of one import: a range of ids (on PostgreSQL a concurrent import's runs may fall
    # inside it; counting a run again is harmless: its buckets and series are recomputed, not added to).
    first_run_id = models.BigIntegerField(null=True)
    last_run_id = models.BigIntegerField(null=True)
    run_ids = models.JSONField(default=list, blank=True, help_text="other changed runs (stored runs added to)")
    were = models.JSONField(
        default=list, blank=True, help_text="where those were counted before the change (history.rollups.position)"
    )
    n_runs = models.PositiveIntegerField(help_text="how many runs this change holds (the pages' count)")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(first_run_id__lte=models.F("last_run_id"))
                | models.Q(first_run_id__isnull=True, last_run_id__isnull=True),
                name="derived_backlog_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.n_runs} runs pending since {self.created_at:%Y-%m-%d %H:%M:%S}"
