"""Store an import's batches on SQLite from a second thread, while the reader parses the next ones.

Reading and validating lines is Python and holds the GIL. Storing them is mostly SQLite's
own work, which runs without the GIL once a statement's values are bound (Python's sqlite3
releases it around each step). So the reader builds a batch's rows, hands them over as a few
statements of many rows each (``INSERT … VALUES (…), (…), …``, ROWS_PER_STATEMENT rows or as
many as SQLite's limit on bound values allows) and reads on, while this thread runs them: the writes take a second
core instead of adding to the reader's time. One statement per row (``executemany``) would
take the GIL back for every row's values and wait, each time, for the reader to give it up
(Python's switch interval, 5 ms): ten times slower.

The rows are the very rows the single-thread path stores with ``executemany`` (with a run's key
where that path has its id: this thread puts the id in before the statement runs, from the runs
stored since it last looked, read down the primary key, instead of SQLite looking each row's key
up in the key's unique index), bound the same way, so what is stored is exactly what it stores.
(Before the one-statement batches, a batch went over as one JSON array that SQLite expanded with ``json_each``: SQLite
then parsed each row's JSON once per column, three to four times the CPU — 107 against 29 µs a run
of 48 columns, 17 against 8 µs a request — which a machine without a free second core waited for in
full.)

The thread uses the import's own connection, inside its transaction; the reader does
not touch the database until the thread has stopped. At most QUEUED batches wait, so
memory stays flat. The first database error stops the writing and is raised in the
reader at its next hand-over or at the end (mapped to Django's exceptions, so an
IntegrityError still sends the file down the careful path); the caller's transaction
then rolls back.
"""

from __future__ import annotations

import io
import queue
import sqlite3
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain, islice
from types import TracebackType
from typing import IO, Any

from django.db import connection

QUEUED = 2
# Rows a statement holds: a few hundred is as fast per row as any (a statement of 2,000 requests, each
# with its run's key looked up, took SQLite twenty times as long to prepare as to run), and each
# statement takes the GIL back only once.
ROWS_PER_STATEMENT = 256
MIN_BYTES = 4 << 20  # a smaller file is stored in one thread: a thread is not worth starting for it
# Python's switch interval while the writer runs. Each statement takes the GIL back to bind its values,
# and waits for the reader, which holds it, to give it up: after 5 ms by default. At 200,000 requests in
# runs of 4 the writer spent 5.3-5.5 s in SQLite's calls with 5 ms, 3.8-3.9 s with 0.5 ms.
SWITCH_INTERVAL_S = 0.0005


def available() -> bool:
    """Whether imports may store their batches from a second thread (SQLite)."""
    return bool(connection.vendor == "sqlite")


# The page cache an import's connection has while it imports (KiB). Every index of a table takes a page of
# its own for each row (the runs table has 16), and with SQLite's default of 2 MiB the pages of those
# indexes are written out and read back again every few hundred runs.
IMPORT_CACHE_KIB = 64 * 1024


@contextmanager
def page_cache(kib: int) -> Iterator[None]:
    """The connection's page cache at least kib KiB while the block runs (SQLite), its own again afterwards."""
    before = _cache_size() if available() else None
    if before is None or _kib(before) >= kib:
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA cache_size = {-int(kib)}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA cache_size = {before}")


def _cache_size() -> int:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA cache_size")
        return int(cursor.fetchone()[0])


def _kib(cache_size: int) -> int:
    """A cache_size in KiB: a negative one is in KiB already, a positive one in pages."""
    if cache_size < 0:
        return -cache_size
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA page_size")
        return cache_size * int(cursor.fetchone()[0]) // 1024


def worth_it(stream: IO[bytes]) -> bool:
    """Whether what is left of a seekable stream is large enough for the second thread."""
    try:
        here = stream.tell()
        stream.seek(0, io.SEEK_END)
        size = stream.tell()
        stream.seek(here)
    except (AttributeError, OSError, ValueError):
        return False
    return size - here >= MIN_BYTES


@dataclass(frozen=True)
class RunKeys:
    """Said of a statement's values: the first of each row of `width` values is a run's key, which
    BatchWriter replaces by that run's id (in its run table) before the statement runs."""

    width: int


# (sql, values) or (sql, values, RunKeys): what BatchWriter runs
Statement = tuple[str, list[Any]] | tuple[str, list[Any], RunKeys]


class RowsStatement:
    """A statement of many rows: ``template`` with ``{rows}`` where the rows' value lists go, each
    ``row`` (its ``%s`` marks in a row's value order); statements() splits rows into statements of
    ROWS_PER_STATEMENT rows, fewer where SQLite's limit on bound values says so. keys: each row's
    first value is a run's key, stored as the run's id (BatchWriter looks it up)."""

    def __init__(self, template: str, row: str, keys: RunKeys | None = None) -> None:
        self.template, self.row, self.keys = template, row, keys
        self.width = row.count("%s")
        self._sql: dict[int, str] = {}

    def statements(self, rows: Sequence[Sequence[Any]]) -> list[Statement]:
        """(sql, its values flattened) for consecutive chunks of rows."""
        return self._chunked(len(rows), iter(rows))

    def column_statements(self, columns: Sequence[Sequence[Any]]) -> list[Statement]:
        """statements() of the rows whose values are columns (each column one value of every row, in the
        rows' order): the rows are never built one by one, each chunk's values are laid out by C."""
        if len(columns) != self.width:
            raise ValueError(f"{len(columns)} columns for rows of {self.width} values")
        n = len(columns[0])
        if any(len(column) != n for column in columns):
            raise ValueError("columns of different lengths")
        return self._chunked(n, zip(*columns, strict=True))

    def _chunked(self, n: int, rows: Iterator[Sequence[Any]]) -> list[Statement]:
        per = max(1, min(ROWS_PER_STATEMENT, _max_values() // self.width))
        out: list[Statement] = []
        for start in range(0, n, per):
            size = min(per, n - start)
            sql = self._sql.get(size)
            if sql is None:
                sql = self._sql[size] = self.template.format(rows=", ".join([self.row] * size))
            values = list(chain.from_iterable(islice(rows, size)))
            out.append((sql, values) if self.keys is None else (sql, values, self.keys))
        return out


def _max_values() -> int:
    """SQLite's limit on the values bound to one statement (999 before SQLite 3.32, 32,766 since)."""
    connection.ensure_connection()
    return connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)  # type: ignore[no-any-return]


def insert_rows(table: str, columns: Sequence[str], *, keyed_by_run: bool = False) -> RowsStatement:
    """INSERT of rows (values in columns order). keyed_by_run: the first value of each row is its
    run's key, stored as that run's id (the run is inserted first: BatchWriter looks it up)."""
    quote = connection.ops.quote_name
    names = ", ".join(quote(c) for c in columns)
    keys = RunKeys(len(columns)) if keyed_by_run else None
    return RowsStatement(
        f"INSERT INTO {quote(table)} ({names}) VALUES {{rows}}", f"({', '.join(['%s'] * len(columns))})", keys
    )


class _ShortSwitches:
    """SWITCH_INTERVAL_S while any writer thread of the process runs; the process's own interval again
    once the last one has stopped (imports in two threads of one web worker do not undo each other's)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writers = 0
        self._own = sys.getswitchinterval()

    def enter(self) -> None:
        with self._lock:
            if not self._writers:
                self._own = sys.getswitchinterval()
                sys.setswitchinterval(min(self._own, SWITCH_INTERVAL_S))
            self._writers += 1

    def leave(self) -> None:
        with self._lock:
            self._writers -= 1
            if not self._writers:
                sys.setswitchinterval(self._own)


_short_switches = _ShortSwitches()


class BatchWriter:
    """A thread that runs (sql, values) statements in order; use as a context manager."""

    def __init__(self, run_table: str | None = None) -> None:
        """run_table: where the runs whose keys statements name (RunKeys) are stored, by this import."""
        self._queue: queue.Queue[list[Statement] | None] = queue.Queue(maxsize=QUEUED)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="kvlab-import-writer", daemon=True)
        self._raw = connection.connection  # the import's transaction is open on it
        self._wrap_errors = connection.wrap_database_errors
        self._joined = False
        self._ids: dict[str, int] = {}  # run key -> id, of the runs stored since the last look
        self._seen_up_to = 0  # the highest run id looked at
        self._run_table = run_table

    def __enter__(self) -> BatchWriter:
        if self._run_table is not None:  # the runs stored from now on are this import's
            found = self._raw.execute(f'SELECT COALESCE(MAX(id), 0) FROM "{self._run_table}"').fetchone()
            self._seen_up_to = found[0]
        _short_switches.enter()
        try:
            self._thread.start()
        except BaseException:
            _short_switches.leave()
            raise
        return self

    def put(self, statements: list[Statement]) -> None:
        """Hand a batch's statements over (waits while QUEUED batches wait); raises the thread's error."""
        self._raise_error()
        self._queue.put(statements)

    def finish(self) -> None:
        """Wait until every batch is written; raises the thread's error, if any."""
        self._join()
        self._raise_error()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        # Whatever happened in the reader, the thread is done with the connection before
        # the transaction is committed or rolled back.
        if error is not None and self._error is None:
            self._error = error  # the batches still queued are skipped
        self._join()

    def _join(self) -> None:
        if not self._joined:
            self._queue.put(None)
            self._thread.join()
            self._joined = True
            _short_switches.leave()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _work(self) -> None:
        while (statements := self._queue.get()) is not None:
            if self._error is not None:
                continue
            try:
                with self._wrap_errors:
                    for statement in statements:
                        if len(statement) == 3:
                            self._put_run_ids(statement[1], statement[2])
                        self.execute(statement[0], statement[1])
            except BaseException as exc:  # handed to the reader, which raises it
                self._error = exc

    def execute(self, sql: str, values: list[Any]) -> None:
        """Run one statement on the import's connection (in this thread)."""
        self._raw.execute(sql.replace("%s", "?"), values)

    def _put_run_ids(self, values: list[Any], keys: RunKeys) -> None:
        """Replace each row's run key (its first value) by the run's id, in place.

        The ids of the runs stored since the last look are read in one range of the primary key (the
        import's transaction holds SQLite's write lock: every run stored since is this import's); a
        run stored in an earlier batch (a run whose pieces span batches) is looked up by its key.
        """
        if self._run_table is None:
            raise RuntimeError("BatchWriter was not told where the runs are stored")
        column = values[0 :: keys.width]
        ids = self._ids
        if any(key not in ids for key in column):
            self._look()
            for key in column:
                if key not in ids:
                    found = self._raw.execute(f'SELECT id FROM "{self._run_table}" WHERE key = ?', [key]).fetchone()
                    if found is None:
                        raise sqlite3.IntegrityError(f"NOT NULL constraint failed: no run {key!r} is stored")
                    ids[key] = found[0]
        values[0 :: keys.width] = [ids[key] for key in column]

    def _look(self) -> None:
        """Learn the ids of the runs stored since the last look (forgetting the earlier ones)."""
        query = f'SELECT key, id FROM "{self._run_table}" WHERE id > ?'
        rows = self._raw.execute(query, [self._seen_up_to]).fetchall()
        self._ids = dict(rows)
        if rows:
            self._seen_up_to = max(pk for _, pk in rows)
