"""How runs are read in order and in lists: newest first, and without the columns a list never shows."""

from __future__ import annotations

from django.db import models
from django.db.models import F

# Newest first; a run without a date last (NULLS LAST: the order of run_started_idx on both engines,
# walked backwards). Run's default ordering, and every newest-first read of runs.
NEWEST_FIRST = (F("started_at").desc(nulls_last=True), F("id").desc())
# The run columns a list of runs never shows, and each may be large (a server's props and log, a tool's
# extra summary, a job's telemetry series): a list loads only what it shows.
LIST_DEFERRED = ("server_props", "server_log", "summary_extra", "telemetry")


class RunQuerySet(models.QuerySet["Run"]):
    def newest_first(self) -> RunQuerySet:
        return self.order_by(*NEWEST_FIRST)

    def for_list(self) -> RunQuerySet:
        """Without the columns a list never shows (LIST_DEFERRED)."""
        return self.defer(*LIST_DEFERRED)
