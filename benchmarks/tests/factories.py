"""Runs built in code, for the tests that assert on what a list or a filter shows of them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from benchmarks.models import RequestResult, Run

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


def run_with_requests(n: int) -> Run:
    """A run with n requests varied in every column its page aggregates, some failed or without a value."""
    run = runs_named(["tiny.gguf"])[0]
    requests = []
    for i in range(n):
        ok = i % 7 != 3
        extra = {"client_tok_s": 20.0 + (i * 37 % n)} if i % 5 else ({"client_tok_s": "fast"} if i % 2 else {})
        requests.append(
            RequestResult(
                run=run,
                seq=i,
                ok=ok,
                error_type="" if ok else "timeout",
                ttft_s=None if i % 11 == 0 else 0.1 + (i * 13 % n) / 100,
                elapsed_s=1.0 + (i * 17 % n) / 10,
                tok_s=None if i % 13 == 0 else 30.0 + (i * 7 % n) / 3,
                extra=extra,
                content_hash=f"h{i}",
            )
        )
    RequestResult.objects.bulk_create(requests)
    run.refresh_summary()  # as an import or a finished job leaves it
    return run
