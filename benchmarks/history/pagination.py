"""A run's requests page by page, at a cost that does not grow with the run."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.db.models import Max, QuerySet
from django.utils.functional import cached_property


class CountedPaginator(Paginator):
    """A run's requests page by page: told how many it holds instead of counting them, and a page past
    the first found by its range of seq, not by skipping rows.

    An OFFSET reads every row it skips (the last page of a million requests read 999,800 of them);
    a run whose requests are numbered 0..n-1 (the usual case: an import numbers them so, a job by
    the order it sent them) has page k at seq (k-1)·per_page onward, one seek down (run, seq). Its
    largest seq, one more seek, tells whether the numbers have gaps (a cancelled job's unsent
    requests); then the page is an OFFSET as before.
    """

    def __init__(self, object_list: QuerySet[Any], per_page: int, count: int) -> None:
        super().__init__(object_list, per_page)
        self._count = count

    @cached_property
    def count(self) -> int:
        return self._count

    def page(self, number: Any) -> Any:
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        if bottom == 0 or self.object_list.aggregate(last=Max("seq"))["last"] != self._count - 1:
            return super().page(number)
        rows = self.object_list.filter(seq__gte=bottom, seq__lt=bottom + self.per_page)[: self.per_page]
        return self._get_page(rows, number, self)
