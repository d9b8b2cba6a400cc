"""Store an import's batches on SQLite from a second thread, while the reader parses the next ones.

Reading and validating lines is Python and holds the GIL. Storing them is mostly
SQLite's own work, which runs without the GIL when a batch is one statement: each batch
of rows is handed over as one JSON array and expanded by SQLite (``json_each``). So the
reader builds a batch's rows, hands them over and reads on, while this thread inserts
the batch; the writes take a second core instead of adding to the reader's time.

What is stored is exactly what executemany would store:
* the rows are JSON that orjson wrote (it refuses integers beyond 64 bits and lone
  surrogates: such a batch is not handed over, see encode);
* a text with a NUL is not handed over either (SQLite's JSON would cut it short);
* SQLite must read every float back bit for bit: checked once per process on hard cases
  (json_floats_exact) — SQLite before 3.43 parsed with long double arithmetic, exact on
  x86-64 but not on every platform; where it is not, imports take the single-thread path;
* NaN is stored as NULL either way (orjson writes null; SQLite binds NaN as NULL).

The thread uses the import's own connection, inside its transaction; the reader does
not touch the database until the thread has stopped. At most QUEUED batches wait, so
memory stays flat. The first database error stops the writing and is raised in the
reader at its next hand-over or at the end (mapped to Django's exceptions, so an
IntegrityError still sends the file down the careful path); the caller's transaction
then rolls back.
"""

from __future__ import annotations

import functools
import io
import math
import queue
import random
import struct
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import IO, Any

import orjson
from django.db import connection

QUEUED = 2
MIN_BYTES = 4 << 20  # a smaller file is stored in one thread: a thread is not worth starting for it


class NotEncodable(Exception):
    """Rows that this path cannot store exactly; the caller stores the file another way."""


def available() -> bool:
    """Whether imports may store their batches from a second thread (SQLite, exact JSON floats)."""
    return connection.vendor == "sqlite" and json_floats_exact()


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


def encode(rows: Sequence[Sequence[Any]]) -> bytes:
    """rows as one JSON array, or NotEncodable."""
    try:
        payload = orjson.dumps(rows)
    except orjson.JSONEncodeError:
        raise NotEncodable from None
    if b"\\u0000" in payload:
        raise NotEncodable
    return payload


def insert_sql(table: str, columns: Sequence[str], *, run_table: str | None = None) -> str:
    """INSERT of a JSON array of rows (values in columns order). With run_table, the first value
    of each row is its run's key, stored as that run's id (the run is inserted first)."""
    quote = connection.ops.quote_name
    picked = [f"json_extract(value, '$[{i}]')" for i in range(len(columns))]
    if run_table is not None:
        picked[0] = f"(SELECT {quote('id')} FROM {quote(run_table)} WHERE {quote('key')} = {picked[0]})"
    names = ", ".join(quote(c) for c in columns)
    return f"INSERT INTO {quote(table)} ({names}) SELECT {', '.join(picked)} FROM json_each(%s)"


class BatchWriter:
    """A thread that runs (sql, payload) statements in order; use as a context manager."""

    def __init__(self) -> None:
        self._queue: queue.Queue[list[tuple[str, bytes]] | None] = queue.Queue(maxsize=QUEUED)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="kvlab-import-writer", daemon=True)
        self._raw = connection.connection  # the import's transaction is open on it
        self._wrap_errors = connection.wrap_database_errors
        self._joined = False

    def __enter__(self) -> BatchWriter:
        self._thread.start()
        return self

    def put(self, statements: list[tuple[str, bytes]]) -> None:
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

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _work(self) -> None:
        while (statements := self._queue.get()) is not None:
            if self._error is not None:
                continue
            try:
                with self._wrap_errors:
                    for sql, payload in statements:
                        self.execute(sql, payload)
            except BaseException as exc:  # handed to the reader, which raises it
                self._error = exc

    def execute(self, sql: str, payload: bytes) -> None:
        """Run one statement on the import's connection (in this thread)."""
        self._raw.execute(sql.replace("%s", "?"), (payload,))


# Floats whose decimal text is hardest to read back: the extremes, subnormals, halfway
# cases, and values that need all 17 digits.
_HARD_FLOATS = (
    5e-324,
    2.4703282292062328e-324,
    4.9406564584124654e-324,
    2.2250738585072011e-308,
    2.2250738585072014e-308,
    4.35679e-310,
    1.7976931348623157e308,
    8.98846567431158e307,
    0.1,
    0.30000000000000004,
    1 / 3,
    2 / 3,
    1.0000000000000002,
    0.9999999999999999,
    9007199254740993.0,
    123456789012345680.0,
    7.0064923216240854e-46,
)


@functools.cache
def json_floats_exact() -> bool:
    """Whether this SQLite reads the JSON numbers orjson writes back to the very same doubles."""
    rng = random.Random(0)
    values = [*_HARD_FLOATS, *(-v for v in _HARD_FLOATS)]
    while len(values) < 1_000:
        value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(value):
            values.append(value)
    values += [round(rng.uniform(0, 1000), rng.randint(1, 9)) for _ in range(1_000)]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT value FROM json_each(%s)", [orjson.dumps(values)])
            got = [row[0] for row in cursor.fetchall()]
    except Exception:  # no JSON functions in this SQLite
        return False
    return len(got) == len(values) and all(
        type(a) is float and struct.pack("<d", a) == struct.pack("<d", b) for a, b in zip(got, values, strict=True)
    )
