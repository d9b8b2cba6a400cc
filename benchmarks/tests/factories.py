"""Runs built in code, for the tests that assert on what a list or a filter shows of them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from benchmarks.models import Run

START = datetime(2026, 1, 1, tzinfo=UTC)


def make_sortable_runs(n: int) -> None:
    """n runs varied in every column the run list sorts or filters by, some of them without the value."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    Run.objects.bulk_create(
        Run(
            key=f"run-{i:05d}",
            label=f"cfg-{i % 3}",
            model=f"m{i % 4}.gguf",
            gpu=f"gpu-{i % 2}",
            started_at=None if i == 7 else start + timedelta(hours=i),
            n_requests=2,
            n_ok=i % 3,
            ctx_size=None if i % 5 == 0 else 4096 * (1 + i % 3),
            parallel=1 + i % 4,
            concurrency=1 + i % 8,
            prompt_tokens_max=100 + i,
            tok_s_mean=None if i % 3 == 0 else float(i % 11),
        )
        for i in range(n)
    )


def runs_named(names: list[str], **fields) -> list[Run]:
    """A run per name, oldest first: its model the name, its GPU gpu-<name>, its label label-<name>, unless given."""
    return Run.objects.bulk_create(
        Run(
            key=f"run-{i:05d}",
            model=fields.get("model", name),
            gpu=fields.get("gpu", f"gpu-{name}"),
            label=fields.get("label", f"label-{name}"),
            started_at=START + timedelta(minutes=i),
            n_requests=1,
            n_ok=1,
        )
        for i, name in enumerate(names)
    )
