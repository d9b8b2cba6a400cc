"""A run's day (UTC) in SQL, cheaply on both engines."""

from __future__ import annotations

from typing import Any

from django.db.models import CharField, Func


class UtcDay(Func):
    """started_at's calendar day in UTC, as 'YYYY-MM-DD' text.

    Django's TruncDate calls a Python function per row on SQLite (82,000 calls for a month of a
    million-run year: 1.2 s of the home page); SQLite stores a datetime as UTC text, so the day is its
    first ten characters. PostgreSQL converts to UTC and formats the date.
    """

    output_field = CharField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="substr(%(expressions)s, 1, 10)", **extra)

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        template = "to_char(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
        return self.as_sql(compiler, connection, template=template, **extra)
