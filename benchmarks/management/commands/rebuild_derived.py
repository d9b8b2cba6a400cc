"""python manage.py rebuild_derived — recompute the tables derived from the runs (history.derived)."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand

from benchmarks.history import derived


class Command(BaseCommand):
    help = (
        "Recompute every table derived from the runs (the regressions page's baselines, ...) from the runs table: "
        "after runs were written other than by an import or a job (a bulk fill, a restore)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.perf_counter()
        derived.rebuild_all()
        self.stdout.write(f"derived tables rebuilt in {time.perf_counter() - started:.1f} s")
