"""The home page's story: where each configuration label stands, the one tried first first.

Read from the latest STORY_RUNS dated runs (one bounded query, whatever the history holds): per label
its latest run's outcome and decode tok/s, at most STORY_LABELS labels, ordered by when that latest
run started. On the investigation's demo it reads original 0/3 ok → C2 3/3 ok → C3P 2/2 ok at 26 tok/s.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..models import Run
from ..records.outcomes import FAILED, outcome_of

STORY_RUNS = 500  # the latest runs the story is read from
STORY_LABELS = 6  # the labels it tells, the most recently run


@dataclass(frozen=True)
class Step:
    label: str
    run_id: int
    started_at: datetime
    n_ok: int | None
    n_requests: int | None
    tok_s: float | None

    @property
    def failed(self) -> bool:
        return outcome_of(self.n_ok, self.n_requests) == FAILED


def story() -> list[Step]:
    """The latest run of each of the most recently run labels, oldest first."""
    rows = (
        Run.objects.exclude(started_at=None)
        .exclude(label="")
        .newest_first()
        .values_list("label", "pk", "started_at", "n_ok", "n_requests", "tok_s_mean")[:STORY_RUNS]
    )
    latest: dict[str, Step] = {}
    for label, pk, started_at, n_ok, n_requests, tok_s in rows:
        if label not in latest:
            latest[label] = Step(label, pk, started_at, n_ok, n_requests, tok_s)
            if len(latest) == STORY_LABELS:
                break
    return sorted(latest.values(), key=lambda step: (step.started_at, step.run_id))
