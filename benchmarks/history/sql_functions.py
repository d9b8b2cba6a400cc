"""SQL expressions the history's pages read values with, written for both engines (SQLite, PostgreSQL)."""

from __future__ import annotations

from typing import Any

from django.db.models import F, FloatField, Func, Value


class JsonNumber(Func):
    """A JSON object's key as a float when it holds a JSON number, else NULL (strings and the rest)."""

    output_field = FloatField()

    def __init__(self, column: str, key: str) -> None:
        super().__init__(F(column), Value(key))
        self.key = key

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> Any:  # noqa: ARG002
        column, params = compiler.compile(self.source_expressions[0])
        if connection.vendor == "postgresql":
            sql = f"(CASE WHEN jsonb_typeof({column} -> %s) = 'number' THEN ({column} ->> %s)::double precision END)"
            return sql, (*params, self.key, *params, self.key)
        path = '$."' + self.key + '"'
        sql = f"(CASE WHEN json_type({column}, %s) IN ('real', 'integer') THEN json_extract({column}, %s) END)"
        return sql, (*params, path, *params, path)
