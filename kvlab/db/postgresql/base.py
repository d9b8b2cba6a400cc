"""Django's PostgreSQL backend, reading timestamptz values with psycopg's compiled loader.

Django 5.2 reads every timestamptz through a subclass of psycopg's pure-Python loader
(django/db/backends/postgresql/psycopg_any.py: BaseTzLoader): a regular expression and a
replace() per value, about 4 µs each. A page that draws 10,000 runs reads 10,000 of them.

psycopg's own loader, compiled in psycopg_binary, returns the same datetime in the connection's
time zone, and Django sets every connection's zone to its own (ensure_timezone, and the pool's
configure). So when Django loads in UTC on a UTC connection, each cursor gets psycopg's loader.
The compiled class cannot be subclassed to carry the `timezone` attribute Django's
create_cursor compares, so the connection keeps Django's loader and the cursor overrides it
(copy-on-write: one copy of the cursor's loader map, a few µs).
Any other setting (USE_TZ off, a database TIME_ZONE) keeps Django's loader.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

import psycopg
from django.db.backends.postgresql import base
from psycopg.pq import Format

TIMESTAMPTZ_OID = psycopg.postgres.types["timestamptz"].oid
PSYCOPG_LOADER = psycopg.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)  # compiled when psycopg_binary is there


class DatabaseWrapper(base.DatabaseWrapper):
    def create_cursor(self, name: str | None = None) -> Any:
        cursor = super().create_cursor(name)
        if self.timezone is UTC and self.connection.info.parameter_status("TimeZone") == "UTC":
            cursor.adapters.register_loader(TIMESTAMPTZ_OID, PSYCOPG_LOADER)
        return cursor
