"""The runs a change of the derived tables holds: a range of ids and the ids outside it.

An import's new runs are one range of ids (history.derived's backlog keeps it as its first and last
id); the stored runs it added to, a job's run or the admin's deletions are a few ids more. Said to
SQL as ``id BETWEEN first AND last OR id IN (the others)``, a change of 200,000 new runs costs one
range read of a primary key, not 200,000 ids staged row by row and looked up one at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connection


@dataclass(frozen=True)
class ChangedRuns:
    """The ids first..last (none when first > last) and `others` (sorted, none of them in that range)."""

    first: int
    last: int
    others: tuple[int, ...] = ()

    @classmethod
    def of(cls, ids: Iterable[int]) -> ChangedRuns:
        """Any ids: the longest stretch of consecutive ones as the range, the rest as others."""
        if isinstance(ids, range) and ids.step == 1:
            return cls(ids.start, ids.stop - 1)
        ordered = sorted(set(ids))
        if not ordered:
            return cls(1, 0)
        low = best_low = best_high = 0  # the current stretch's first index, the longest stretch's
        for i in range(1, len(ordered)):
            if ordered[i] != ordered[i - 1] + 1:
                low = i
            elif i - low > best_high - best_low:
                best_low, best_high = low, i
        return cls(ordered[best_low], ordered[best_high], (*ordered[:best_low], *ordered[best_high + 1 :]))

    @classmethod
    def joined(cls, first: int | None, last: int | None, others: Iterable[int]) -> ChangedRuns:
        """A backlog entry's runs: the range first..last (None: none) and others (some may fall inside it)."""
        if first is None or last is None:
            return cls.of(others)
        return cls(first, last, tuple(sorted({i for i in others if not first <= i <= last})))

    def __len__(self) -> int:
        return max(0, self.last - self.first + 1) + len(self.others)

    def __iter__(self) -> Iterator[int]:
        yield from range(self.first, self.last + 1)
        yield from self.others

    def where(self, column: str) -> tuple[str, list[Any]]:
        """SQL and its parameters: `column` (a run's id) is one of these runs."""
        if connection.vendor == "postgresql":
            others, value = f"{column} = ANY(%s)", list(self.others)
        else:
            others, value = f"{column} IN (SELECT value FROM json_each(%s))", json.dumps(self.others)
        if self.first > self.last:
            return others, [value]
        if not self.others:
            return f"{column} BETWEEN %s AND %s", [self.first, self.last]
        return f"({column} BETWEEN %s AND %s OR {others})", [self.first, self.last, value]
