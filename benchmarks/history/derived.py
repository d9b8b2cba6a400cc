"""The tables derived from the runs, kept current by whoever changes runs: one hook for all of them.

Whatever stores, summarises or deletes runs reports them here, inside its own transaction: the
importer (once per import: its new runs and the stored runs it added to), a job when its run is
summarised, the reaper of stale jobs, the admin's deletions. A change of up to INLINE_UP_TO runs is
counted there and then. A larger import does not wait for it: runs_added leaves a DerivedBacklog row
in the import's transaction and, once it commits, asks a Celery worker to catch_up (as a database's
continuous aggregates are refreshed after the fact); the worker's beat also catches up every minute
(kvlab.settings), should the message be lost, and `manage.py import_bench` catches up itself. Until
then `pending()` says how many runs the timeline's overview and the regressions page do not count.
rebuild_all recomputes every derived table from the runs table alone (`manage.py rebuild_derived`,
after runs were written some other way).

Every change is counted under one lock (PostgreSQL: an advisory lock held to the transaction's end;
SQLite: its single writer), so two workers never recount the same bucket at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Min, Sum

from .. import enqueue
from ..models import DerivedBacklog
from . import baselines, rollups
from .changed_runs import ChangedRuns

log = logging.getLogger(__name__)

INLINE_UP_TO = 2_000  # runs: a change this small is counted inside the caller's transaction (~0.1 s)
_LOCK_KEY = 0x6B766C6162  # "kvlab": PostgreSQL's advisory lock for counting derived tables


def _serialized() -> None:
    """Inside a transaction: wait until no other transaction is counting derived tables."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])


def runs_changed(run_ids: Iterable[int], were: Sequence[rollups.Position] = ()) -> None:
    """Bring the derived tables up to date for these runs: new, changed or deleted (set-based). `were`:
    where changed or deleted runs were counted before (rollups.position, taken before the change)."""
    changed = ChangedRuns.of(run_ids)
    if not len(changed):
        return
    with transaction.atomic():
        _serialized()
        _count(changed, were)


def _count(changed: ChangedRuns, were: Sequence[rollups.Position]) -> None:
    """Recount what these runs change in every derived table; under _serialized's lock."""
    with _page_cache(len(changed)):
        baselines.runs_changed(changed)
        rollups.runs_changed(changed, were)  # the timeline's buckets


CACHE_KIB = 64 << 10  # SQLite's page cache while a large change is counted (its default: 2 MiB)


@contextmanager
def _page_cache(n_runs: int) -> Iterator[None]:
    """On SQLite, a larger page cache while a large change is counted, then the connection's own again:
    the rows a catch-up writes land all over the derived tables' indexes, and a page evicted half-way
    is written and read again (a 200,000-run catch-up: 16.5 against 14 s)."""
    if connection.vendor != "sqlite" or n_runs <= INLINE_UP_TO:
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA cache_size")
        (before,) = cursor.fetchone()
        cursor.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        try:
            yield
        finally:
            cursor.execute(f"PRAGMA cache_size = {int(before)}")


def runs_added(new_ids: Sequence[int], other_ids: Sequence[int], were: Sequence[rollups.Position] = ()) -> bool:
    """An import's new runs and the stored runs it added to (`were`: where those that moved were counted):
    counted now when they are few, else left in the backlog for a worker, asked once the caller's
    transaction commits. True when left for later."""
    if len(new_ids) + len(other_ids) <= INLINE_UP_TO:
        runs_changed([*new_ids, *other_ids], were)
        return False
    defer(new_ids, other_ids, were)
    return True


def defer(new_ids: Sequence[int], other_ids: Sequence[int] = (), were: Sequence[rollups.Position] = ()) -> None:
    """Leave these runs in the backlog, however few, and ask a worker to count them once the caller's
    transaction commits (the regressions page, which never counts them while serving a GET)."""
    DerivedBacklog.objects.create(
        first_run_id=min(new_ids) if new_ids else None,
        last_run_id=max(new_ids) if new_ids else None,
        run_ids=list(other_ids),
        were=[list(p) for p in were],
        n_runs=len(new_ids) + len(other_ids),
    )
    transaction.on_commit(_ask_worker, robust=True)


PUBLISHER = "kvlab-derived-catch-up"  # the thread that queues a catch-up


def _ask_worker() -> None:
    """Queue a catch-up from a thread of its own: the import has committed and never waits for the broker
    (an unreachable one costs its connection retries). Without a broker the beat or import_bench catch up."""
    threading.Thread(target=_publish, name=PUBLISHER, daemon=True).start()


def _publish() -> None:
    try:
        enqueue.catch_up_derived()
    except Exception as error:  # noqa: BLE001 — the import has committed; the backlog row waits
        log.warning("derived tables: could not queue the catch-up (%s); the worker's beat will", type(error).__name__)


def pending() -> tuple[int, datetime | None]:
    """How many runs the derived tables do not count yet, and since when (None when none)."""
    row = DerivedBacklog.objects.aggregate(n=Sum("n_runs"), since=Min("created_at"))
    return int(row["n"] or 0), row["since"]


def catch_up() -> int:
    """Count every pending change, oldest first, each in its own transaction; how many runs were counted."""
    counted = 0
    while True:
        with transaction.atomic():
            _serialized()
            entry = DerivedBacklog.objects.order_by("pk").first()
            if entry is None:
                return counted
            changed = ChangedRuns.joined(entry.first_run_id, entry.last_run_id, entry.run_ids)
            _count(changed, [tuple(p) for p in entry.were])
            entry.delete()
            counted += entry.n_runs


def rebuild_all() -> None:
    """Recompute every derived table from the runs table (which also settles every pending change)."""
    with transaction.atomic():
        _serialized()
        baselines.rebuild()
        rollups.rebuild_all()
        DerivedBacklog.objects.all().delete()
