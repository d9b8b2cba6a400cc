"""python manage.py sweep — launch llama-server with several flag sets and compare them."""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks.jobs.views import worker_available
from benchmarks.models import LaunchHost, Sweep
from benchmarks.sweeps import demo as demo_sweep
from benchmarks.sweeps import launcher
from benchmarks.sweeps.views import config_rows, create_sweep, parse_concurrencies


class Command(BaseCommand):
    help = "Run a sweep through the Celery workers: each flag set is launched, measured and compared."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--demo", action="store_true", help="the built-in demo sweep on a tiny generated model")
        parser.add_argument("--host", help="a launch host's name")
        parser.add_argument("--model", help="a .gguf file in the host's models directory")
        parser.add_argument("--flags", action="append", default=[], help="one flag set (repeatable)")
        parser.add_argument("--prompt-tokens", type=int, default=300)
        parser.add_argument("--n-predict", type=int, default=300)
        parser.add_argument("--concurrency", default="3", help="a list: 1,2,4")
        parser.add_argument("--requests", type=int, default=3)
        parser.add_argument("--timeout", type=int, default=300)
        parser.add_argument("--label", default="")
        parser.add_argument("--wait", action="store_true")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **o: Any) -> None:
        problem = worker_available()
        if problem:
            raise CommandError(f"nothing was submitted: {problem}")
        if o["demo"]:
            host = demo_sweep.ensure_demo_host()
            sweep = create_sweep(
                host,
                demo_sweep.DEMO_MODEL,
                demo_sweep.DEMO_FLAG_SETS,
                demo_sweep.DEMO_PARAMS,
                label=o["label"] or "demo",
            )
        else:
            sweep = self._custom(o)
        if not o["wait"]:
            self.stdout.write(json.dumps({"sweep": sweep.pk}) if o["json"] else f"sweep {sweep.pk} queued")
            return
        while True:
            sweep.refresh_from_db()
            if sweep.finished:
                break
            time.sleep(1)
        rows = config_rows(sweep)
        summary = {
            "sweep": sweep.pk,
            "state": sweep.state,
            "error": sweep.error,
            "configs": [
                {
                    "command": r["config"].command,
                    "outcome": r["config"].outcome,
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
        if o["json"]:
            self.stdout.write(json.dumps(summary))
        else:
            self.stdout.write(f"sweep {sweep.pk}: {sweep.state}")
            for c in summary["configs"]:
                kv = f"KV {c['kv_predicted_mib'] or 0:.2f} MiB predicted, {c['kv_reported_mib'] or 0:.2f} reported"
                self.stdout.write(
                    f"  {'*' if c['best'] else ' '} llama-server {c['command']}: {c['outcome']}, "
                    f"{c['ok']}/{c['total']} ok (predicted: {c['predicted']}); {kv}"
                )
        if sweep.state != Sweep.State.SUCCEEDED:
            raise CommandError(f"sweep {sweep.pk} ended {sweep.state}: {sweep.error}")

    def _custom(self, o: dict[str, Any]) -> Sweep:
        if not (o["host"] and o["model"] and o["flags"]):
            raise CommandError("give --host, --model and at least one --flags (or --demo)")
        host = LaunchHost.objects.filter(name=o["host"]).first()
        if host is None:
            raise CommandError(f"no launch host is named {o['host']!r}")
        try:
            launcher.model_path(host, o["model"])
            for flags in o["flags"]:
                launcher.checked_flags(flags)
        except launcher.LaunchRefused as exc:
            raise CommandError(str(exc)) from None
        try:
            concurrencies = parse_concurrencies(o["concurrency"])
        except Exception as exc:
            raise CommandError(" ".join(getattr(exc, "messages", [str(exc)]))) from None
        params = {
            "prompt_tokens": o["prompt_tokens"],
            "n_predict": o["n_predict"],
            "concurrencies": concurrencies,
            "requests": o["requests"],
            "repeats": 1,
            "timeout_s": o["timeout"],
        }
        return create_sweep(host, o["model"], o["flags"], params, label=o["label"])
