"""python manage.py sweep — launch llama-server with several flag sets and compare them."""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks.jobs.lifecycle import worker_available
from benchmarks.models import Sweep
from benchmarks.models.jobs import RAN_WORDS
from benchmarks.records.outcomes import FAILED, LABELS, PARTIAL
from benchmarks.sweeps import demo
from benchmarks.sweeps.forms import CommandSweepForm
from benchmarks.sweeps.lifecycle import create_sweep
from benchmarks.sweeps.results import config_rows

from ..options import form_errors

# Form fields whose option has another name.
OPTION_NAMES = {"model_file": "model", "flag_sets": "flags", "concurrencies": "concurrency", "timeout_s": "timeout",
                "preference": "prefer"}  # fmt: skip


class Command(BaseCommand):
    help = "Run a sweep through the Celery workers: each flag set is launched, measured and compared."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--demo", action="store_true", help="the built-in demo sweep on a tiny generated model")
        parser.add_argument("--host", help="a launch host's name")
        parser.add_argument("--model", help="a .gguf file in the host's models directory")
        parser.add_argument("--flags", action="append", default=[], help="one flag set (repeatable)")
        parser.add_argument("--prompt-tokens", default="300")
        parser.add_argument("--n-predict", default="300")
        parser.add_argument("--concurrency", default="3", help="a list: 1,2,4")
        parser.add_argument("--requests", default="3")
        parser.add_argument("--repeats", default="1")
        parser.add_argument("--timeout", default="300")
        parser.add_argument("--prefer", default="throughput", help="throughput or latency: which flag set is best")
        parser.add_argument("--label", default="")
        parser.add_argument("--wait", action="store_true")
        parser.add_argument("--json", action="store_true")
        parser.add_argument(
            "--allow-failures",
            action="store_true",
            help="with --wait, exit 0 although requests failed (implied by --demo, which reproduces a failure "
            "on purpose); a sweep that could not run still exits non-zero",
        )

    def handle(self, *args: Any, **o: Any) -> None:
        if o["demo"]:
            demo_host = demo.demo_host()
            if demo_host is None:
                raise CommandError(f"nothing was submitted: {demo.NO_DEMO_HOST}")
            host, model, flag_sets, params = (
                demo_host,
                demo.DEMO_MODEL,
                demo.DEMO_FLAG_SETS,
                demo.DEMO_PARAMS,
            )
            label, preference = o["label"] or "demo", "throughput"
        else:
            form = self._form(o)
            if not form.is_valid():
                raise CommandError(form_errors(form, OPTION_NAMES))
            d = form.cleaned_data
            host, model, flag_sets, params = d["host"], d["model_file"], d["flag_sets"], form.params()
            label, preference = d["label"], d["preference"]
        problem = worker_available()
        if problem:
            raise CommandError(f"nothing was submitted: {problem}")
        sweep = create_sweep(host, model, flag_sets, params, label=label, preference=preference)
        if not o["wait"]:
            self.stdout.write(json.dumps({"sweep": sweep.pk}) if o["json"] else f"sweep {sweep.pk} queued")
            return
        while True:
            sweep.refresh_from_db()
            if sweep.finished:
                break
            time.sleep(1)
        summary = self._report(sweep, as_json=o["json"])
        if sweep.state != Sweep.State.SUCCEEDED:
            raise CommandError(f"sweep {sweep.pk} {RAN_WORDS[Sweep.State(sweep.state)]}: {sweep.error}")
        failing = [c for c in summary["configs"] if c["found"] in (PARTIAL, FAILED)]
        if failing and not (o["allow_failures"] or o["demo"]):
            names = "; ".join(f"{c['command']}: {c['total'] - c['ok']} of {c['total']} failed" for c in failing)
            raise CommandError(
                f"sweep {sweep.pk} completed, but requests failed ({names}); --allow-failures keeps exit status 0"
            )

    def _form(self, o: dict[str, Any]) -> CommandSweepForm:
        if not (o["host"] and o["model"] and o["flags"]):
            raise CommandError("give --host, --model and at least one --flags (or --demo)")
        data = {
            "host": o["host"],
            "model_file": o["model"],
            "label": o["label"],
            "flag_sets": "\n".join(o["flags"]),
            "prompt_tokens": o["prompt_tokens"],
            "n_predict": o["n_predict"],
            "concurrencies": o["concurrency"],
            "requests": o["requests"],
            "repeats": o["repeats"],
            "timeout_s": o["timeout"],
            "preference": o["prefer"],
        }
        return CommandSweepForm(data)

    def _report(self, sweep: Sweep, *, as_json: bool) -> dict[str, Any]:
        rows = config_rows(sweep)
        summary = {
            "sweep": sweep.pk,
            "state": sweep.state,
            "error": sweep.error,
            "configs": [
                {
                    "command": r["config"].command,
                    "outcome": r["config"].outcome,
                    "found": r["found"],
                    "error": r["config"].error,
                    "predicted": r["predicted_outcome"],
                    "ok": r["measured"].get("ok"),
                    "total": r["measured"].get("total"),
                    "tok_s": r["measured"].get("tok_s"),
                    "throughput": r["measured"].get("throughput"),
                    "kv_predicted_mib": r["predicted_kv_mib"],
                    "kv_reported_mib": r["reported_kv_mib"],
                    "n_ctx_slot": r["n_ctx_slot"],
                    "best": bool(r.get("best")),
                }
                for r in rows
            ],
        }
        if as_json:
            self.stdout.write(json.dumps(summary))
            return summary
        self.stdout.write(f"sweep {sweep.pk}: {RAN_WORDS[Sweep.State(sweep.state)]}")
        for c in summary["configs"]:
            kv = f"KV {c['kv_predicted_mib'] or 0:.2f} MiB predicted, {c['kv_reported_mib'] or 0:.2f} reported"
            self.stdout.write(
                f"  {'*' if c['best'] else ' '} llama-server {c['command']}: {c['outcome']}"
                f"{': ' + LABELS[c['found']] if c['found'] else ''}, "
                f"{c['ok']}/{c['total']} ok (predicted: {c['predicted']}); {kv}"
            )
        return summary
