"""python manage.py bench --server URL_OR_NAME ... — enqueue a benchmark job through Celery."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from benchmarks import tasks
from benchmarks.jobs.client.target import TargetRefused, resolve_target
from benchmarks.jobs.forms import MAX_PROMPT_FILE_BYTES, parse_prompt_file
from benchmarks.jobs.views import worker_available
from benchmarks.models import Job, RequestResult, Server


class Command(BaseCommand):
    help = "Benchmark a llama-server through the Celery workers; --wait follows the job and prints its run."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--server", required=True, help="a registered server's name, or a base URL")
        parser.add_argument("--concurrency", type=int, default=1)
        parser.add_argument("--requests", type=int, default=1)
        parser.add_argument("--repeats", type=int, default=1)
        prompt = parser.add_mutually_exclusive_group(required=True)
        prompt.add_argument("--prompt-tokens", type=int, help="a synthetic prompt of exactly N tokens")
        prompt.add_argument("--prompt-file", help="one prompt per line, or JSONL with a 'prompt' field")
        parser.add_argument("--n-predict", type=int, default=128, help="output tokens per request (forced)")
        parser.add_argument("--timeout", type=int, default=600, help="per-request deadline in seconds")
        parser.add_argument("--label", default="")
        parser.add_argument("--wait", action="store_true", help="follow the job until it ends")
        parser.add_argument("--json", action="store_true", help="machine-readable output")

    def handle(self, *args: Any, **o: Any) -> None:
        server = self._server(o["server"])
        params = self._params(o)
        problem = worker_available()
        if problem:
            raise CommandError(f"nothing was submitted: {problem}")
        with transaction.atomic():
            job = Job.objects.create(server=server, label=o["label"], params=params)
            tasks.enqueue(job)
        if not o["wait"]:
            self._emit(o, {"job": job.pk, "state": job.state}, f"job {job.pk} queued on {server.name}")
            return
        job = self._follow(job, quiet=o["json"])
        summary = self._summary(job)
        self._emit(o, summary, self._text(summary))
        if job.state != Job.State.SUCCEEDED:
            raise CommandError(f"job {job.pk} ended {job.state}: {job.error}")

    def _server(self, ref: str) -> Server:
        server = Server.objects.filter(name=ref).first() or Server.objects.filter(base_url=ref.rstrip("/")).first()
        if server:
            return server
        if "://" not in ref:
            raise CommandError(f"no server is registered as {ref!r}; give its name or a base URL")
        try:
            resolve_target(ref)
        except TargetRefused as exc:
            raise CommandError(str(exc)) from None
        return Server.objects.create(name=ref.rstrip("/")[:100], base_url=ref.rstrip("/"))

    def _params(self, o: dict[str, Any]) -> dict[str, Any]:
        for key, low, high in (("concurrency", 1, 256), ("requests", 1, 10_000), ("repeats", 1, 20)):
            if not low <= o[key] <= high:
                raise CommandError(f"--{key} must be {low} to {high}")
        if o["n_predict"] < 1:
            raise CommandError("--n-predict must be at least 1")
        params: dict[str, Any] = {
            "n_predict": o["n_predict"],
            "concurrency": o["concurrency"],
            "requests": o["requests"],
            "repeats": o["repeats"],
            "cache_prompt": False,
            "timeout_s": o["timeout"],
        }
        if o["prompt_tokens"] is not None:
            if o["prompt_tokens"] < 1:
                raise CommandError("--prompt-tokens must be at least 1")
            params["prompt_tokens"] = o["prompt_tokens"]
        else:
            path = Path(o["prompt_file"])
            try:
                with path.open("rb") as fh:
                    raw = fh.read(MAX_PROMPT_FILE_BYTES + 1)
            except OSError as exc:
                raise CommandError(f"{path}: {exc.strerror}") from None
            if len(raw) > MAX_PROMPT_FILE_BYTES:
                raise CommandError(f"{path}: larger than {MAX_PROMPT_FILE_BYTES // 1048576} MiB")
            try:
                params["prompts"] = parse_prompt_file(raw)
            except ValidationError as exc:
                raise CommandError(f"{path}: {' '.join(exc.messages)}") from None
        return params

    def _follow(self, job: Job, *, quiet: bool) -> Job:
        last = None
        while True:
            job.refresh_from_db()
            line = f"job {job.pk}: {job.state}, {job.n_done}/{job.n_total} done, {job.n_failed} failed"
            if line != last and not quiet:
                self.stderr.write(line)
                last = line
            if job.finished:
                return job
            time.sleep(0.5)

    def _summary(self, job: Job) -> dict[str, Any]:
        runs = list(job.runs.order_by("key"))
        requests = RequestResult.objects.filter(run__job=job).order_by("run__key", "seq")
        return {
            "job": job.pk,
            "state": job.state,
            "error": job.error,
            "runs": [
                {
                    "run_id": run.pk,
                    "key": run.key,
                    "ok": run.n_ok,
                    "total": run.n_requests,
                    "tok_s_mean": run.tok_s_mean,
                    "throughput_tok_s": run.throughput_tok_s,
                    "wall_s": run.effective_wall_s,
                }
                for run in runs
            ],
            "ok": sum(r.n_ok for r in runs),
            "total": sum(r.n_requests for r in runs),
            "status_codes": [r.http_status for r in requests],
            "error_types": [r.error_type or None for r in requests],
        }

    def _text(self, s: dict[str, Any]) -> str:
        lines = [f"job {s['job']}: {s['state']} — {s['ok']}/{s['total']} requests ok"]
        for run in s["runs"]:
            tok_s = f"{run['tok_s_mean']:.2f}" if run["tok_s_mean"] is not None else "—"
            lines.append(
                f"  run {run['run_id']} ({run['key']}): {run['ok']}/{run['total']} ok, {tok_s} tok/s per request"
            )
        lines.append("  status codes: " + " ".join(str(c) for c in s["status_codes"]))
        return "\n".join(lines)

    def _emit(self, o: dict[str, Any], data: dict[str, Any], text: str) -> None:
        self.stdout.write(json.dumps(data) if o["json"] else text)
