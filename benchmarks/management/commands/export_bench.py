"""python manage.py export_bench [--out FILE] [--run ID ...] [--schema kvlab.bench/1] — write canonical JSONL."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks.history.exporter import SCHEMAS, export_lines, skipped_by_v1
from benchmarks.models import Run
from benchmarks.records.schema import SCHEMA_V1, SCHEMA_V2


class Command(BaseCommand):
    help = (
        "Export runs as canonical kvlab.bench/2 JSONL (standard output unless --out): each run's summary, if a tool "
        "reported one, and its requests. --schema kvlab.bench/1 writes the old format (runs with requests only)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", help="file to write; written whole or not at all")
        parser.add_argument("--run", action="append", default=[], help="run id to export (repeatable)")
        parser.add_argument("--schema", choices=SCHEMAS, default=SCHEMA_V2, help="record format (default: %(default)s)")

    def handle(self, *args: Any, out: str | None, run: list[str], schema: str, **options: Any) -> None:
        runs = Run.objects.all()
        if run:
            runs = runs.filter(key__in=run)
            missing = set(run) - set(runs.values_list("key", flat=True))
            if missing:
                raise CommandError(f"unknown run id(s): {', '.join(sorted(missing))}")
        if schema == SCHEMA_V1 and (skipped := skipped_by_v1(runs)):
            self.stderr.write(f"{skipped} run(s) without requests left out: {SCHEMA_V1} holds requests only")
        if out is None:
            try:
                for line in export_lines(runs, schema):
                    sys.stdout.buffer.write(line)
                sys.stdout.buffer.flush()
            except BrokenPipeError:  # `export_bench | head` closed the pipe early
                sys.stderr.close()
            return
        target = Path(out)
        if target.exists() and not target.is_file():
            # A device or a pipe (/dev/null, a FIFO) is written to, never replaced by a file.
            with target.open("wb") as fh:
                n = _write(fh, export_lines(runs, schema))
            self.stderr.write(f"wrote {n} records of {runs.count()} runs to {target}")
            return
        # Write beside the target and rename, so a failed export never leaves half a file.
        fd, tmp = tempfile.mkstemp(dir=target.parent or ".", prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "wb") as fh:
                n = _write(fh, export_lines(runs, schema))
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.stderr.write(f"wrote {n} records of {runs.count()} runs to {target}")


def _write(fh: IO[bytes], lines: Iterable[bytes]) -> int:
    n = 0
    for line in lines:
        fh.write(line)
        n += 1
    return n
