"""Every stored request gets the identity the import of its own export gives it.

Before, a job's or a sweep's recorder hashed its raw values (an unclassified error, no ITL),
and an import hashed a kvlab.bench/2 request with its inter-token latencies: re-importing an
export of executed runs, or a kvlab.bench/1 export of runs with ITL, added every such request
again. The content hash no longer covers the ITL, and the recorder stores what an import would.
This rewrites the hash (and, where equal hashes now meet, the occurrence) of the requests of
executed runs and of every run holding ITL, and classifies executed requests' empty error kinds
as an import does; every other row already has its identity.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from django.db import migrations

from benchmarks.records.jsonl import RecordError
from benchmarks.records.schema import MAX_INT, REQUEST_FIELD_NAMES, request_identity

CHUNK = 2_000


def _identity(row: Any) -> tuple[str, str]:
    """The row's content hash and error kind as an import of its export stores them."""
    values = {name: getattr(row, name) for name in REQUEST_FIELD_NAMES}
    values = {name: (None if value == "" else value) for name, value in values.items()}
    if values["ts"] is not None:
        values["ts"] = values["ts"].astimezone(UTC).isoformat()
    try:
        checked, digest = request_identity(values, row.extra or {})
    except RecordError:
        return row.content_hash, row.error_type  # what an import would refuse keeps what it has
    return digest, checked["error_type"] or ""


def forward(apps: Any, schema_editor: Any) -> None:
    Run = apps.get_model("benchmarks", "Run")
    RequestResult = apps.get_model("benchmarks", "RequestResult")
    with_itl = RequestResult.objects.filter(itl_s__isnull=False).values("run_id").order_by()
    run_ids = set(Run.objects.filter(source="executed").order_by().values_list("pk", flat=True))
    run_ids.update(Run.objects.filter(pk__in=with_itl).order_by().values_list("pk", flat=True))
    for run_id in sorted(run_ids):
        rows = list(
            RequestResult.objects.filter(run_id=run_id)
            .order_by("seq")
            .only("seq", "extra", "content_hash", "occurrence", *REQUEST_FIELD_NAMES)
        )
        occurrences: dict[str, int] = {}
        changed = []
        for row in rows:
            digest, error_type = _identity(row)
            occurrence = occurrences.get(digest, 0)
            occurrences[digest] = occurrence + 1
            if (digest, occurrence, error_type) != (row.content_hash, row.occurrence, row.error_type):
                row.content_hash, row.occurrence, row.error_type = digest, occurrence, error_type
                changed.append(row)
        if not changed:
            continue
        # (run, content_hash, occurrence) is unique: the changed rows first move to occurrences no
        # row holds (one per seq), then take their own.
        final = [row.occurrence for row in changed]
        for row in changed:
            row.occurrence = MAX_INT - row.seq
        RequestResult.objects.bulk_update(changed, ["content_hash", "occurrence", "error_type"], batch_size=CHUNK)
        for row, occurrence in zip(changed, final, strict=True):
            row.occurrence = occurrence
        RequestResult.objects.bulk_update(changed, ["occurrence"], batch_size=CHUNK)


class Migration(migrations.Migration):
    dependencies = [
        ("benchmarks", "0019_launch_host_facts"),
    ]

    operations = [
        migrations.RunPython(forward, migrations.RunPython.noop, elidable=True),
    ]
