"""Pages of a list that may hold millions of rows, at a cost that does not grow with them.

Django's Paginator counts every matching row (``SELECT COUNT(*)``) on each page: at a million
runs that one count reads a whole index. A CappedPaginator counts at most ``cap`` + 1 rows
(``SELECT COUNT(*) FROM (SELECT … LIMIT cap + 1)``): the page says "10,000+" beyond the cap,
and its pages stop there — a list that long is narrowed with its filters (dates, model), not
paged through. An OFFSET deeper than the cap would read as many rows as it skips.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.core.paginator import Paginator

LIST_CAP = 10_000  # rows a list counts and pages through


class CappedPaginator(Paginator):
    """A Paginator that counts at most `cap` rows; `capped` says there are more."""

    def __init__(self, object_list: Any, per_page: int, *, cap: int | None = None, **kwargs: Any) -> None:
        super().__init__(object_list, per_page, **kwargs)
        self.cap = LIST_CAP if cap is None else cap

    @cached_property
    def _counted(self) -> int:
        """Rows counted, up to cap + 1 (one more than the cap tells that the list goes on)."""
        return self.object_list.order_by()[: self.cap + 1].count()

    @cached_property
    def count(self) -> int:  # type: ignore[override]
        return min(self._counted, self.cap)

    @property
    def capped(self) -> bool:
        """More rows match than were counted: the pages stop at the cap."""
        return self._counted > self.cap
