"""python manage.py import_bench FILE... — import bench_results.jsonl files, each all-or-nothing."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks.history.importer import import_bench_file
from benchmarks.models import FileImport


class Command(BaseCommand):
    help = "Import bench_results.jsonl files. Exits 1 if any file is rejected (that file stores nothing)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+", help="JSONL files; '-' reads standard input")
        parser.add_argument(
            "--if-new",
            action="store_true",
            help="skip a file whose exact content was imported before (used for the demo data)",
        )
        parser.add_argument("--demo", action="store_true", help=FileImport.Origin.DEMO.label + " import")

    def handle(self, *args: Any, files: list[str], if_new: bool, demo: bool, **options: Any) -> None:
        origin = FileImport.Origin.DEMO if demo else FileImport.Origin.COMMAND
        failed = 0
        for name in files:
            if if_new and name != "-" and self._imported_before(Path(name)):
                self.stdout.write(f"{name}: imported before, skipped")
                continue
            try:
                stream = sys.stdin.buffer if name == "-" else open(name, "rb")  # noqa: SIM115
            except OSError as exc:
                raise CommandError(f"{name}: {exc.strerror}") from None
            with stream:
                result = import_bench_file(stream, filename=name, origin=origin)
            self.report(name, result)
            failed += result.status == FileImport.Status.REJECTED
        if failed:
            raise CommandError(f"{failed} of {len(files)} file(s) rejected; nothing from them was stored")

    def _imported_before(self, path: Path) -> bool:
        try:
            with path.open("rb") as fh:  # streamed: a file of any size in constant memory
                digest = hashlib.file_digest(fh, "sha256").hexdigest()
        except OSError as exc:
            raise CommandError(f"{path}: {exc.strerror}") from None
        return FileImport.objects.filter(sha256=digest, status=FileImport.Status.IMPORTED).exists()

    def report(self, name: str, result: FileImport) -> None:
        counts = (
            f"read {result.n_read}, imported {result.n_imported}, "
            f"duplicate {result.n_duplicate}, rejected {result.n_rejected}"
        )
        if result.status == FileImport.Status.IMPORTED:
            self.stdout.write(self.style.SUCCESS(f"{name}: {counts} ({result.n_runs} runs)"))
            return
        self.stderr.write(self.style.ERROR(f"{name}: rejected, nothing stored — {counts}"))
        for line in result.rejected_lines.all():
            self.stderr.write(f"  line {line.line_no}: {line.reason}")
