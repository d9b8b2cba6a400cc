"""python manage.py import_bench INPUT... — import benchmark results (files or directories), each all-or-nothing.

An input is kvlab JSONL (kvlab.bench/1, kvlab.bench/2, the flat lab shape) or any other tool's
file or directory that kvlab reads (benchmarks/records/formats), detected from its content. The
files of one tool's run given together (an llmperf summary and its responses, AIPerf's exports and
inputs.json) are one input, read as their directory would be (registry.join_given).
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks.history import derived
from benchmarks.history.importer import ServerLog, import_bench_file, import_path, read_server_log
from benchmarks.models import FileImport
from benchmarks.records.formats import SAMPLE_BYTES, Declared, FormatError, Sample, registry

MAX_SERVER_LOG_BYTES = 4 << 20
# A rejected line of a converted or joined input names its file and its own record or line
# (registry.InputStream.where): "<file>, record N: reason".
_WHERE = re.compile(r"(?P<file>.+?), (?P<unit>record|line) (?P<n>\d+): (?P<reason>.*)", re.DOTALL)
MAX_JSON_ERRORS = 100  # rejected lines printed per input with --json (the import keeps 1,000)


class Command(BaseCommand):
    help = (
        "Import benchmark results: kvlab JSONL or another tool's files or directories, the format detected "
        "from the content. Exits 1 if any input is rejected (that input stores nothing)."
    )
    # Django's system checks load every URL and view (aiohttp, Plotly, …): a third of a second
    # that an import, which needs the models only, does not wait for. `manage.py check` runs them.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "files",
            nargs="+",
            help="files or directories; '-' reads standard input; the files of one run given together are joined",
        )
        parser.add_argument(
            "--if-new",
            action="store_true",
            help="skip an input whose exact content was imported before (used for the demo data)",
        )
        parser.add_argument(
            "--demo",
            action="store_true",
            help="record the files as the demo data: their origin on /imports/ reads Demo (as make run imports it)",
        )
        parser.add_argument("--format", help="read every input as this format (default: detected from the content)")
        parser.add_argument("--gpu", default="", help="the GPU, for runs whose file does not say it")
        parser.add_argument("--engine", default="", help="the serving engine (llama.cpp, vllm, sglang, …)")
        parser.add_argument("--label", default="", help="a label, for runs whose file has none")
        parser.add_argument("--model", default="", help="the model, for runs whose file does not say it")
        parser.add_argument("--server-flags", default="", help="the server's command line, e.g. '-c 16384 -np 4'")
        parser.add_argument("--server-log", help="a llama-server start-up log to attach to the imported runs")
        parser.add_argument("--json", action="store_true", help="print one JSON object per input, one per line")

    def handle(self, *args: Any, files: list[str], if_new: bool, demo: bool, **options: Any) -> None:
        from benchmarks.history.forms import DeclaredForm

        form = DeclaredForm({name: options[name] for name in DeclaredForm.base_fields})
        if not form.is_valid():
            problems = "; ".join(f"--{name.replace('_', '-')}: {' '.join(e)}" for name, e in form.errors.items())
            raise CommandError(problems)
        declared = form.declared()
        fmt = options["format"]
        if fmt is not None:
            try:
                registry.by_name(fmt)
            except FormatError as exc:
                raise CommandError(str(exc)) from None
        server_log = self._server_log(options["server_log"])
        origin = FileImport.Origin.DEMO if demo else FileImport.Origin.COMMAND
        self.as_json = options["json"]
        inputs = self._inputs(files, fmt)
        failed = 0
        for name, given in inputs:
            if if_new and given is not None and self._imported_before(given):
                self._skipped(name)
                continue
            result = self._import(name, given, origin, declared, fmt, server_log)
            self.report(name, result)
            failed += result.status == FileImport.Status.REJECTED
        self._catch_up()
        if failed:
            raise CommandError(f"{failed} of {len(inputs)} input(s) rejected; nothing from them was stored")

    def _inputs(self, names: list[str], fmt: str | None) -> list[tuple[str, Path | registry.Joined | None]]:
        """(name, input) in the order given: standard input (None), a directory, a file, or the files of one
        run given together (registry.join_given: read as their directory), named by their names joined."""
        for name in names:
            if name != "-" and not Path(name).exists():
                raise CommandError(f"{name}: No such file or directory")
        files = [Path(name) for name in names if name != "-" and not Path(name).is_dir()]
        try:
            joined = {path: given for given in registry.join_given(files, fmt) if isinstance(given, registry.Joined)
                      for path in given.given}  # fmt: skip
        except OSError as exc:
            raise CommandError(f"{exc.filename}: {exc.strerror}") from None
        inputs: list[tuple[str, Path | registry.Joined | None]] = []
        for name in names:
            given = joined.get(Path(name)) if name != "-" else None
            if given is None:
                inputs.append((name, None if name == "-" else Path(name)))
            elif given.given[0] == Path(name):
                inputs.append((", ".join(map(str, given.given)), given))
        return inputs

    def _catch_up(self) -> None:
        """A large import left its runs for the worker to count into the timeline and the regressions page
        (history.derived): from the shell, where no worker may be running, count them now and say so."""
        n_pending, _ = derived.pending()
        if not n_pending:
            return
        started = time.perf_counter()
        counted = derived.catch_up()
        took = time.perf_counter() - started
        # on standard error: --json keeps standard output one JSON object per input
        self.stderr.write(f"timeline and regressions brought up to date: {counted:,} runs in {took:.1f} s")

    def _import(
        self,
        name: str,
        given: Path | registry.Joined | None,
        origin: str,
        declared: Declared,
        fmt: str | None,
        server_log: ServerLog | None,
    ) -> FileImport:
        common: dict[str, Any] = {"origin": origin, "declared": declared, "server_log": server_log}
        if given is None:
            return self._import_stdin(fmt, common)
        try:
            if isinstance(given, registry.Joined):
                return import_path(given.folder, format=given.format, files=given.files, filename=name, **common)
            return import_path(given, format=fmt, filename=name, **common)
        except OSError as exc:
            raise CommandError(f"{name}: {exc.strerror}") from None

    def _import_stdin(self, fmt: str | None, common: dict[str, Any]) -> FileImport:
        """kvlab JSONL streams straight in; another format is spooled to a file first (converters read files)."""
        stdin = sys.stdin.buffer
        head = stdin.read(SAMPLE_BYTES)
        detected = fmt or registry.detect_sample(Sample(head=head))
        if detected in (None, registry.KVLAB):
            return import_bench_file(_Prefixed(head, stdin), filename="-", format=registry.KVLAB, **common)  # type: ignore[arg-type]
        with tempfile.TemporaryDirectory() as tmp:
            spooled = Path(tmp) / "stdin"
            with spooled.open("wb") as fh:
                fh.write(head)
                shutil.copyfileobj(stdin, fh)
            return import_path(spooled, format=detected, filename="-", **common)

    def _server_log(self, name: str | None) -> ServerLog | None:
        if name is None:
            return None
        path = Path(name)
        try:
            if path.stat().st_size > MAX_SERVER_LOG_BYTES:
                raise CommandError(f"--server-log {name}: larger than {MAX_SERVER_LOG_BYTES >> 20} MiB")
            text = path.read_bytes().decode("utf-8", "replace")
        except OSError as exc:
            raise CommandError(f"--server-log {name}: {exc.strerror}") from None
        return read_server_log(text)

    def _imported_before(self, given: Path | registry.Joined) -> bool:
        try:  # streamed: a file of any size in constant memory
            if isinstance(given, registry.Joined):
                digest = registry.input_identity(given.folder, given.files)[0]
            else:
                digest = registry.input_identity(given)[0]
        except OSError as exc:
            raise CommandError(f"{exc.filename}: {exc.strerror}") from None
        return FileImport.objects.filter(sha256=digest, status=FileImport.Status.IMPORTED).exists()

    def _skipped(self, name: str) -> None:
        if self.as_json:
            line = {"file": name, "format": None, "status": "skipped", "runs": 0, "requests": 0, "duplicates": 0}
            self.stdout.write(orjson.dumps({**line, "errors": []}).decode())
        else:
            self.stdout.write(f"{name}: imported before, skipped")

    def report(self, name: str, result: FileImport) -> None:
        if self.as_json:
            self.stdout.write(orjson.dumps(json_result(name, result)).decode())
            return
        counts = (
            f"read {result.n_read}, imported {result.n_imported}, "
            f"duplicate {result.n_duplicate}, rejected {result.n_rejected}"
        )
        kind = f" [{result.format}]" if result.format and result.format != registry.KVLAB else ""
        if result.status == FileImport.Status.IMPORTED:
            summaries = f", {result.n_summaries} run summaries" if result.n_summaries else ""
            self.stdout.write(self.style.SUCCESS(f"{name}{kind}: {counts} ({result.n_runs} runs{summaries})"))
            return
        self.stderr.write(self.style.ERROR(f"{name}{kind}: rejected, nothing stored — {counts}"))
        for line in result.rejected_lines.all():
            self.stderr.write(f"  {rejected_line(result, line.line_no, line.reason)}")


def rejected_line(result: FileImport, line_no: int, reason: str) -> str:
    """A rejected line as text: "line N: …" in a kvlab file, "record N of <file>: …" in a converted input."""
    converted = bool(result.format) and result.format != registry.KVLAB
    where = _WHERE.fullmatch(reason) if converted else None
    if where is None:  # a converter's error names its file and the place within it
        return reason if converted else f"line {line_no}: {reason}"
    return f"{where['unit']} {where['n']} of {where['file']}: {where['reason']}"


def json_result(name: str, result: FileImport) -> dict[str, Any]:
    """The --json line of one input: what the import stored, or why it stored nothing."""
    if result.status == FileImport.Status.REJECTED:
        status = "rejected"
        errors = [
            {"line": line.line_no, "reason": line.reason} for line in result.rejected_lines.all()[:MAX_JSON_ERRORS]
        ]
    else:
        stored = result.n_new_runs or result.n_imported or result.n_summaries
        status = "imported" if stored else "duplicate"
        errors = []
    return {
        "file": name,
        "format": result.format or registry.KVLAB,
        "status": status,
        "runs": result.n_new_runs,
        "requests": result.n_imported,
        "duplicates": result.n_duplicate,
        "errors": errors,
    }


class _Prefixed:
    """A stream that first returns bytes already read from it (the head used to detect the format)."""

    def __init__(self, head: bytes, rest: Any) -> None:
        self.head, self.rest = head, rest

    def read(self, n: int = -1) -> bytes:
        if self.head:
            out, self.head = (self.head, b"") if n < 0 or n >= len(self.head) else (self.head[:n], self.head[n:])
            return out
        return self.rest.read(n)

    def __enter__(self) -> _Prefixed:
        return self

    def __exit__(self, *exc: object) -> None:
        pass
