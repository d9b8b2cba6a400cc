"""Write runs as canonical JSONL (schema kvlab.bench/1), one request per line.

Streams: runs and their requests are read in chunks, so an export of the whole
history does not hold it in memory. Export then import into an empty database
reproduces the same runs and requests.
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson
from django.db.models import QuerySet

from ..models import RequestResult, Run
from .records import to_canonical


def export_lines(runs: QuerySet[Run]) -> Iterator[bytes]:
    requests = (
        RequestResult.objects.filter(run__in=runs.values("pk"))
        .select_related("run")
        .order_by("run_id", "seq")
        .iterator(chunk_size=2_000)
    )
    current_run_id = None
    run_values: dict = {}
    for request in requests:
        if request.run_id != current_run_id:
            current_run_id = request.run_id
            run_values = request.run.record_values()
        record = to_canonical(run_values, request.record_values(), request.extra)
        yield orjson.dumps(record) + b"\n"
