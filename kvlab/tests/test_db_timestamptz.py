"""kvlab's PostgreSQL backend reads timestamptz with psycopg's compiled loader, to the same values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import DataError, connection
from psycopg.pq import Format

from benchmarks.models import Run
from kvlab.db.postgresql.base import PSYCOPG_LOADER, TIMESTAMPTZ_OID

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL only (no DATABASE_URL)"),
]

EDGES = [
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    datetime(2026, 3, 29, 1, 30, 0, 1, tzinfo=UTC),  # a European DST change, to the microsecond
    datetime(2026, 12, 1, 7, 0, 0, 500_000, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
]


def loader_of(cursor) -> type:  # noqa: ANN001 — Django's cursor wrapper
    return cursor.cursor.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)


def test_a_cursor_loads_timestamptz_with_psycopgs_compiled_loader() -> None:
    assert PSYCOPG_LOADER.__module__.startswith("psycopg_binary"), "psycopg[binary] is what requirements.txt installs"
    with connection.cursor() as cursor:
        assert loader_of(cursor) is PSYCOPG_LOADER


def test_it_reads_what_djangos_loader_reads_to_the_microsecond_in_utc() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT unnest(%s::timestamptz[])", [EDGES])
        fast = [value for (value,) in cursor.fetchall()]
    assert fast == EDGES
    assert all(value.tzinfo is UTC for value in fast)
    # Django's own loader, on a plain psycopg cursor of the same connection, for comparison
    from django.db.backends.postgresql.psycopg_any import register_tzloader

    with connection.connection.cursor() as raw:
        register_tzloader(connection.timezone, raw)
        raw.execute("SELECT unnest(%s::timestamptz[])", [EDGES])
        assert [value for (value,) in raw.fetchall()] == fast


def test_the_orm_round_trips_a_runs_times() -> None:
    started = datetime(2026, 11, 30, 23, 59, 59, 123_456, tzinfo=UTC)
    run = Run.objects.create(key="tz-check", model="m", gpu="g", started_at=started)
    stored = Run.objects.values_list("started_at", "created_at").get(pk=run.pk)
    assert stored[0] == started and stored[0].tzinfo is UTC
    assert stored[1].tzinfo is UTC and abs(stored[1] - datetime.now(UTC)) < timedelta(minutes=5)


def test_out_of_pythons_range_is_a_data_error_as_before() -> None:
    for text in ("infinity", "10000-01-01 00:00:00+00"):
        with connection.cursor() as cursor, pytest.raises(DataError, match="after year 10K"):
            cursor.execute(f"SELECT '{text}'::timestamptz")
            cursor.fetchall()


def test_a_session_in_another_zone_keeps_djangos_loader() -> None:
    # Django assumes its own zone on the session; should a session change it, the cursor gets
    # Django's loader back and behaves exactly as Django's backend does
    with connection.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'Asia/Tokyo'")
    try:
        with connection.cursor() as cursor:
            loader = loader_of(cursor)
            assert loader is not PSYCOPG_LOADER and loader.timezone is connection.timezone
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET TIME ZONE 'UTC'")
    with connection.cursor() as cursor:
        assert loader_of(cursor) is PSYCOPG_LOADER
