"""python manage.py bench --server URL_OR_NAME ... — enqueue a benchmark job through Celery."""

from __future__ import annotations

import importlib
import importlib.util
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks.jobs.datasets import MAX_DATASET_BYTES
from benchmarks.jobs.forms import MAX_PROMPT_FILE_BYTES, CommandJobForm
from benchmarks.jobs.lifecycle import submit_job, worker_available
from benchmarks.jobs.pool import JobWarning, Pool
from benchmarks.jobs.preflight import pool_warning
from benchmarks.models import Job, RequestResult, Server
from benchmarks.records.outcomes import LABELS, outcome_of

from ..options import form_errors


class Command(BaseCommand):
    help = "Benchmark a llama-server through the Celery workers; --wait follows the job and prints its run."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--server", required=True, help="a registered server's name, or a base URL")
        parser.add_argument("--concurrency", default="1")
        parser.add_argument("--requests", default="1")
        parser.add_argument("--repeats", default="1")
        prompt = parser.add_mutually_exclusive_group(required=True)
        prompt.add_argument("--prompt-tokens", help="a synthetic prompt of exactly N tokens")
        prompt.add_argument("--prompt-file", help="one prompt per line, or JSONL with a 'prompt' field")
        prompt.add_argument(
            "--dataset", help="a JSONL prompt dataset ('prompt' or 'text' per line): one prompt per request, by --seed"
        )
        parser.add_argument(
            "--arrival",
            choices=sorted(ARRIVAL_OPTIONS),
            default="fixed",
            help="fixed concurrency (default), or Poisson / constant arrivals at --rate",
        )
        parser.add_argument("--rate", help="requests per second, with --arrival poisson or constant")
        parser.add_argument("--rates", help="a rate sweep, e.g. '0.5,1,2,4': one run per rate, in order")
        parser.add_argument("--seed", default="0", help="draws the Poisson arrivals and the dataset sample")
        parser.add_argument("--slo-ttft-ms", help="goodput: the TTFT objective in ms")
        parser.add_argument("--slo-tpot-ms", help="goodput: the TPOT objective in ms")
        parser.add_argument("--n-predict", default="128", help="output tokens per request (forced)")
        parser.add_argument("--timeout", default="600", help="per-request deadline in seconds")
        parser.add_argument("--label", default="")
        parser.add_argument("--wait", action="store_true", help="follow the job until it ends")
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        parser.add_argument(
            "--allow-failures",
            action="store_true",
            help="submit a job the server's pool is predicted to fail, and with --wait exit 0 although requests "
            "failed (to reproduce a failure on purpose); a job that could not run still exits non-zero",
        )

    def handle(self, *args: Any, **o: Any) -> None:
        form = self._form(o)
        if not form.is_valid():
            raise CommandError(form_errors(form, {"timeout_s": "timeout", "dataset_file": "dataset"}))
        target = form.cleaned_data["server"]
        server = target if isinstance(target, Server) else None
        self._guard(server, form.params(), allow=o["allow_failures"])
        problem = worker_available()
        if problem:
            raise CommandError(f"nothing was submitted: {problem}")
        job = submit_job(
            server=server, base_url="" if server else target, label=form.cleaned_data["label"], params=form.params()
        )
        if not o["wait"]:
            self._emit(o, {"job": job.pk, "state": job.state}, f"job {job.pk} queued on {job.target_name}")
            return
        job = self._follow(job, quiet=o["json"])
        summary = self._summary(job)
        self._emit(o, summary, self._text(summary))
        if job.state != Job.State.SUCCEEDED:
            raise CommandError(f"job {job.pk} {job.how_it_ran}: {job.error}")
        failed = summary["total"] - summary["ok"]
        if failed and not o["allow_failures"]:
            raise CommandError(
                f"job {job.pk} completed, but {failed} of {summary['total']} requests failed "
                f"({summary['found_label']}); --allow-failures keeps exit status 0"
            )

    def _guard(self, server: Server | None, params: dict[str, Any], *, allow: bool) -> None:
        """The web form's warning, before anything is submitted: what the registered server's pool will do
        to these requests. Refused unless --allow-failures (to reproduce the failure), then said on stderr."""
        found = pool_warning(params, server) if server is not None else None
        if found is None:
            return
        warning = found["warning"]
        assert isinstance(warning, JobWarning) and isinstance(found["pool"], Pool)
        heading = "this job will not run as asked" if warning.certain else "this job may fail"
        text = (
            f"{heading}: {found['pool'].describe()}; {found['prompt_source']} has {found['prompt_tokens']:,} tokens. "
            f"{warning.message} Size it: {found['sizing_url']}"
        )
        if not allow:
            raise CommandError(f"nothing was submitted: {text} --allow-failures runs it as it is")
        self.stderr.write(f"warning: {text}")

    def _form(self, o: dict[str, Any]) -> CommandJobForm:
        """The options as the web form's fields; the same form validates them."""
        data = {
            "server": o["server"],
            "label": o["label"],
            "n_predict": o["n_predict"],
            "concurrency": o["concurrency"],
            "requests": o["requests"],
            "repeats": o["repeats"],
            "timeout_s": o["timeout"],
            "arrival": ARRIVAL_OPTIONS[o["arrival"]],
            "rate": o["rate"] or "",
            "rates": o["rates"] or "",
            "seed": o["seed"],
            "slo_ttft_ms": o["slo_ttft_ms"] or "",
            "slo_tpot_ms": o["slo_tpot_ms"] or "",
        }
        files = {}
        if o["prompt_tokens"] is not None:
            data.update(prompt_source="synthetic", prompt_tokens=o["prompt_tokens"])
        elif o["dataset"] is not None:
            data["prompt_source"] = "dataset"
            files["dataset_file"] = _upload(Path(o["dataset"]), MAX_DATASET_BYTES)
        else:
            data["prompt_source"] = "file"
            files["prompt_file"] = _upload(Path(o["prompt_file"]), MAX_PROMPT_FILE_BYTES)
        return CommandJobForm(data, files)

    def _follow(self, job: Job, *, quiet: bool) -> Job:
        last = None
        while True:
            job.refresh_from_db()
            line = f"job {job.pk}: {job.how_it_ran}, {job.n_done}/{job.n_total} done, {job.n_failed} failed"
            if line != last and not quiet:
                self.stderr.write(line)
                last = line
            if job.finished:
                return job
            time.sleep(0.5)

    def _summary(self, job: Job) -> dict[str, Any]:
        runs = list(job.runs.order_by("pk"))  # in the order they ran: a sweep's rates as given
        requests = RequestResult.objects.filter(run__job=job).order_by("run_id", "seq")
        ok, total = sum(r.n_ok for r in runs), sum(r.n_requests for r in runs)
        found = outcome_of(ok, total)
        out: dict[str, Any] = {
            "job": job.pk,
            "state": job.state,
            "ran": job.how_it_ran,
            "found": found,
            "found_label": LABELS[found],
            "error": job.error,
            "load": {key: job.params.get(key) for key in ("arrival", "rate", "rates", "seed", "concurrency")},
            "runs": [
                {
                    "run_id": run.pk,
                    "key": run.key,
                    "outcome": run.outcome,
                    "ok": run.n_ok,
                    "total": run.n_requests,
                    "tok_s_mean": run.tok_s_mean,
                    "throughput_tok_s": run.throughput_tok_s,
                    "wall_s": run.effective_wall_s,
                }
                for run in runs
            ],
            "ok": ok,
            "total": total,
            "status_codes": [r.http_status for r in requests],
            "error_types": [r.error_type or None for r in requests],
        }
        telemetry = _optional("benchmarks.jobs.telemetry.summary", "for_json")
        for run_json, run in zip(out["runs"], runs, strict=True):
            run_json.update(arrival=run.arrival, request_rate=run.request_rate, concurrency=run.concurrency)
            if telemetry is not None:
                run_json["telemetry"] = telemetry(run)
        if telemetry is not None and runs:
            out["telemetry"] = out["runs"][-1]["telemetry"]  # the last run: the one a failure stopped at
        repeats = _optional("benchmarks.jobs.repeats", "summary")
        if repeats is not None:
            out["repeats"] = repeats(job)
        return out

    def _text(self, s: dict[str, Any]) -> str:
        lines = [f"job {s['job']}: ran: {s['ran']}; found: {s['found_label']} — {s['ok']}/{s['total']} requests ok"]
        for run in s["runs"]:
            tok_s = f"{run['tok_s_mean']:.2f}" if run["tok_s_mean"] is not None else "—"
            load = f", {run['arrival']} at {run['request_rate']:g} req/s" if run["request_rate"] is not None else ""
            lines.append(
                f"  run {run['run_id']} ({run['key']}{load}): {LABELS[run['outcome']]}, {run['ok']}/{run['total']} "
                f"ok, {tok_s} tok/s per request"
            )
        lines.append("  status codes: " + " ".join(str(c) for c in s["status_codes"]))
        return "\n".join(lines)

    def _emit(self, o: dict[str, Any], data: dict[str, Any], text: str) -> None:
        self.stdout.write(json.dumps(data) if o["json"] else text)


# --arrival's words → the form's arrival values
ARRIVAL_OPTIONS = {"fixed": "", "poisson": "poisson", "constant": "constant"}


def _upload(path: Path, most: int) -> SimpleUploadedFile:
    """A file given on the command line as the form's upload (one byte past the limit, so the form says so)."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(most + 1)
    except OSError as exc:
        raise CommandError(f"{path}: {exc.strerror}") from None
    return SimpleUploadedFile(path.name, raw)


def _optional(module: str, function: str) -> Callable[[Any], Any] | None:
    """A summary another part of kvlab provides, when this checkout has that module (an error inside it is raised)."""
    try:
        if importlib.util.find_spec(module) is None:
            return None
    except ModuleNotFoundError:  # its package is missing too
        return None
    found: Callable[[Any], Any] = getattr(importlib.import_module(module), function)
    return found
