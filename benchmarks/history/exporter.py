"""Write runs as canonical JSONL: kvlab.bench/2 (the default) or kvlab.bench/1, one record per line.

kvlab.bench/2 writes, for each run, its summary record (when a tool reported one), then
one record per request; a run with only a summary is exported too. kvlab.bench/1 holds
requests only: runs without requests are left out (`skipped_by_v1` counts them).

Streams: runs are read in chunks, and each chunk's requests with an iterator, so an
export of the whole history does not hold it in memory. Export then import into an empty
database reproduces the same runs, requests and summaries.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
from django.db.models import QuerySet

from ..models import RequestResult, Run
from ..records.canonical import to_canonical, to_canonical_v2
from ..records.schema import SCHEMA_V1, SCHEMA_V2

RUN_CHUNK = 500
REQUEST_CHUNK = 2_000
SCHEMAS = (SCHEMA_V2, SCHEMA_V1)


def export_lines(runs: QuerySet[Run], schema: str = SCHEMA_V2) -> Iterator[bytes]:
    if schema not in SCHEMAS:
        raise ValueError(f"unknown schema {schema!r}; kvlab writes {' or '.join(SCHEMAS)}")
    if schema == SCHEMA_V1:
        yield from _v1_lines(runs)
        return
    last = 0
    while chunk := list(runs.filter(pk__gt=last).order_by("pk")[:RUN_CHUNK]):
        last = chunk[-1].pk
        yield from _v2_lines(chunk)


def _v2_lines(runs: list[Run]) -> Iterator[bytes]:
    """Each run's summary record, then its requests: the records of a run stay together."""
    values = {run.pk: run.record_values() for run in runs}
    requests = (
        RequestResult.objects.filter(run_id__in=list(values))
        .order_by("run_id", "seq")
        .iterator(chunk_size=REQUEST_CHUNK)
    )
    next_run = 0
    for request in requests:
        while next_run < len(runs) and runs[next_run].pk <= request.run_id:
            yield from _summary_line(runs[next_run], values)
            next_run += 1
        record = to_canonical_v2(
            values[request.run_id], request=request.record_values(), itl=request.itl_s, extra=request.extra
        )
        yield orjson.dumps(record) + b"\n"
    for run in runs[next_run:]:
        yield from _summary_line(run, values)


def _summary_line(run: Run, values: dict[int, dict[str, Any]]) -> Iterator[bytes]:
    if run.summary is not None:
        yield orjson.dumps(to_canonical_v2(values[run.pk], summary=run.summary, extra=run.summary_extra)) + b"\n"


def _v1_lines(runs: QuerySet[Run]) -> Iterator[bytes]:
    requests = (
        RequestResult.objects.filter(run__in=runs.values("pk"))
        .select_related("run")
        .order_by("run_id", "seq")
        .iterator(chunk_size=REQUEST_CHUNK)
    )
    current_run_id = None
    run_values: dict[str, Any] = {}
    for request in requests:
        if request.run_id != current_run_id:
            current_run_id = request.run_id
            run_values = request.run.record_values()
        record = to_canonical(run_values, request.record_values(), request.extra)
        yield orjson.dumps(record) + b"\n"


def skipped_by_v1(runs: QuerySet[Run]) -> int:
    """Runs a kvlab.bench/1 export leaves out: those without a request row."""
    return runs.filter(requests__isnull=True).count()


def requests_at_most(run_ids: list[int], most: int) -> int:
    """How many request rows these runs hold, counted up to most + 1 only: the cost of asking is bounded by
    `most`, whatever the runs hold (one seek down the requests' (run, seq) index per run, then rows)."""
    return RequestResult.objects.filter(run_id__in=run_ids).values("pk")[: most + 1].count()
