"""What the page-timing scripts share: a scratch database to fill (SQLite, or PostgreSQL made
and dropped), a page's answer read as parsed HTML, the timing loop, and the printed table.

Each script keeps its own cases (which pages, what each must show) and its own checks; the
harness does the rest the same way for all of them:

* ``scratch_database`` starts Django on a migrated scratch database, SQLite or PostgreSQL;
* ``Page`` parses a response's body with the standard library's html.parser: rows, links
  resolved through kvlab's URLconf, json_script figures, text: never a regular expression
  over the HTML;
* ``time_requests`` warms a page up, counts its SQL queries, times it, and checks every answer
  (the check outside the time); ``measure_each`` measures the cases in turn, a line of progress each;
* ``print_table`` lays out the columns a script names.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import statistics
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Literal

import common
from common import ROOT

# --- the database ------------------------------------------------------------------------


def postgres_database(url: str | None, name: str) -> tuple[str, str]:
    """(the admin URL, a fresh scratch database's URL): ensure-postgres's role unless url is given."""
    import psycopg
    from psycopg import sql

    if not url:
        done = subprocess.run(
            [str(ROOT / "scripts" / "ensure-postgres.sh")], cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True
        )
        url = done.stdout.strip().splitlines()[-1]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return url, urllib.parse.urlunsplit(urllib.parse.urlsplit(url)._replace(path="/" + name))


def drop_postgres_database(url: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@contextlib.contextmanager
def scratch_database(
    work: Path, engine: str = "sqlite", pg_url: str | None = None, pg_database: str | None = None
) -> Iterator[None]:
    """Django started on a fresh, migrated database for the test client: SQLite under work, or a
    PostgreSQL database pg_database made through pg_url's role (ensure-postgres's unless given) and
    dropped at the end."""
    pg_admin = None
    if engine == "postgres":
        assert pg_database, "a PostgreSQL scratch database needs its name"
        pg_admin, url = postgres_database(pg_url, pg_database)
        os.environ.update(common.scratch_env(work, allowed_hosts="testserver"))
        os.environ["DATABASE_URL"] = url
        common.start_django()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
    else:
        common.setup_migrated_django(work)
    try:
        yield
    finally:
        from django.db import connections

        connections.close_all()
        pool_closer = getattr(connections["default"], "close_pool", None)
        if pool_closer is not None:  # the pool's idle connections hold the database too
            pool_closer()
        if pg_admin and pg_database:
            drop_postgres_database(pg_admin, pg_database)


def engine_version() -> int | None:
    """PostgreSQL's server version; None on SQLite."""
    from django.db import connection

    return connection.cursor().connection.info.server_version if connection.vendor == "postgresql" else None


def scalar(sql: str, params: tuple[Any, ...] = ()) -> Any:
    """The first column of the first row of plain SQL; None when no row."""
    found = rows(sql, params)
    return found[0][0] if found else None


def rows(sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found: list[tuple[Any, ...]] = cursor.fetchall()
    return found


# --- a page, parsed ----------------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element | str] = field(default_factory=list)

    @property
    def classes(self) -> list[str]:
        return self.attrs.get("class", "").split()

    def iter(self) -> Iterator[Element]:
        """This element and every element under it, in document order."""
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.iter()

    def find_all(self, tag: str, **attrs: str) -> list[Element]:
        """The elements of a tag under this one holding every given attribute value (class_: one of its classes)."""
        wanted_class = attrs.pop("class_", None)
        return [
            e
            for e in self.iter()
            if e.tag == tag
            and all(e.attrs.get(k) == v for k, v in attrs.items())
            and (wanted_class is None or wanted_class in e.classes)
        ]

    def find(self, tag: str, **attrs: str) -> Element | None:
        found = self.find_all(tag, **attrs)
        return found[0] if found else None

    @property
    def raw_text(self) -> str:
        return "".join(c if isinstance(c, str) else c.raw_text for c in self.children)

    @property
    def text(self) -> str:
        """Its text, runs of white space as one space."""
        return " ".join(self.raw_text.split())


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.open = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.open[-1].children.append(element)
        if tag not in VOID:
            self.open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.open[-1].children.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.open) - 1, 0, -1):  # an end tag closes what it ends and all left open in it
            if self.open[depth].tag == tag:
                del self.open[depth:]
                return

    def handle_data(self, data: str) -> None:
        self.open[-1].children.append(data)


def body_of(response: Any) -> bytes:
    """A response's body, a streamed one read to its end, a gzipped one decompressed."""
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return gzip.decompress(body) if response.get("Content-Encoding") == "gzip" else body


class Page:
    """A page's HTML parsed (html.parser), and what the benchmarks' checks read off it."""

    def __init__(self, body: bytes | str) -> None:
        builder = _Builder()
        builder.feed(body.decode() if isinstance(body, bytes) else body)
        builder.close()
        self.root = builder.root
        self.text = self.root.text

    @classmethod
    def of(cls, response: Any) -> Page:
        return cls(body_of(response))

    @property
    def is_full_page(self) -> bool:
        return self.root.find("html") is not None

    def find_all(self, tag: str, **attrs: str) -> list[Element]:
        return self.root.find_all(tag, **attrs)

    def rows(self, class_prefix: str | None = None, classes: tuple[str, ...] = (), within: str = "") -> list[Element]:
        """The table rows (within a tag, e.g. "tbody", when given): those of a class starting with class_prefix,
        or of one of `classes`, when given."""
        scopes = self.root.find_all(within) if within else [self.root]
        found = [tr for scope in scopes for tr in scope.find_all("tr")]
        if class_prefix is not None:
            found = [tr for tr in found if any(c.startswith(class_prefix) for c in tr.classes)]
        if classes:
            found = [tr for tr in found if set(classes) & set(tr.classes)]
        return found

    def json_scripts(self) -> dict[str, tuple[int, Any]]:
        """Every json_script on the page: id -> (its bytes, the parsed JSON)."""
        found = {}
        for script in self.root.find_all("script", type="application/json"):
            content = script.raw_text
            found[script.attrs.get("id", "")] = (len(content.encode()), json.loads(content))
        return found

    def figures(self) -> dict[str, Any]:
        """Every json_script on the page: id -> the parsed figure."""
        return {name: figure for name, (_, figure) in self.json_scripts().items()}

    def option_values(self) -> list[str]:
        return [o.attrs.get("value", "") for o in self.root.find_all("option")]

    def search(self, pattern: str) -> re.Match[str] | None:
        """The first match of a regular expression in the page's text (its HTML parsed, white space collapsed)."""
        return re.search(pattern, self.text)


def regressions_shown(page: Page) -> tuple[int, int]:
    """The regressions page (charts/regressions.html): (the regressions listed, the groups its empty state
    says it searched: 0 when it says none)."""
    found = len([td for td in page.find_all("td") if {"num", "bad"} <= set(td.classes)])
    groups = page.search(r"No regressions across (\d+) group")
    return found, int(groups.group(1)) if groups else 0


def linked_ids(elements: list[Element], url_name: str) -> list[int]:
    """Per element, the pk of the first link in it that resolves (kvlab's URLconf) to url_name; an element
    without one is left out."""
    from django.urls import Resolver404, resolve

    found = []
    for element in elements:
        for link in element.find_all("a"):
            path = urllib.parse.urlsplit(link.attrs.get("href", "")).path
            try:
                match = resolve(path)
            except Resolver404:
                continue
            if match.url_name == url_name:
                found.append(int(match.kwargs["pk"]))
                break
    return found


# --- the timing loop ---------------------------------------------------------------------


@dataclass
class Timed:
    """A page's timed requests: their times, the SQL of the one counted, the last answer and its check's result."""

    times_ms: list[float]
    sql: list[str]
    queries: list[dict[str, Any]]
    response: Any
    held: Any
    sql_ms: list[float] = field(default_factory=list)

    def summary(self, digits: int = 1) -> dict[str, float]:
        times = self.times_ms
        return {
            "median_ms": round(statistics.median(times), digits),
            "p95_ms": round(common.percentile(times, 95), digits),
            "min_ms": round(min(times), digits),
            "max_ms": round(max(times), digits),
        }


def time_requests(
    request: Callable[[], Any],
    check: Callable[[Any], Any],
    repeats: int,
    *,
    count: Literal["apart", "first timed"] = "apart",
    budget_s: float | None = None,
    time_sql: bool = False,
) -> Timed:
    """Request once to warm up, then `repeats` times timed, checking every answer outside the time.

    count "apart": one more request, untimed, has its queries captured; "first timed": the first
    timed one's. With budget_s, the timing stops once the timed requests passed it, after 3 of them
    (after 1 when the warm-up alone took longer). time_sql: also the time each timed request spent
    executing SQL (Django's execute, as its query log counts it).
    """
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    start = time.perf_counter()
    held = check(request())  # warm up
    warm_up_s = time.perf_counter() - start
    queries: list[dict[str, Any]] = []
    response = None
    if count == "apart":
        with CaptureQueriesContext(connection) as captured:
            response = request()
        queries = list(captured.captured_queries)  # read now: the next request clears the log
        held = check(response)
    least = 1 if budget_s is not None and warm_up_s > budget_s else 3
    times: list[float] = []
    sql_ms: list[float] = []
    spent = 0.0
    while len(times) < repeats and not (budget_s is not None and spent > budget_s and len(times) >= least):
        in_sql = [0.0]

        def timer(execute: Any, *args: Any, in_sql: list[float] = in_sql) -> Any:
            started = time.perf_counter()
            try:
                return execute(*args)
            finally:
                in_sql[0] += time.perf_counter() - started

        with contextlib.ExitStack() as stack:
            captured = None
            if count == "first timed" and not times:
                captured = stack.enter_context(CaptureQueriesContext(connection))
            if time_sql:
                stack.enter_context(connection.execute_wrapper(timer))
            start = time.perf_counter()
            response = request()
            times.append((time.perf_counter() - start) * 1000)
        if captured is not None:
            queries = list(captured.captured_queries)
        sql_ms.append(in_sql[0] * 1000)
        spent += times[-1] / 1000
        held = check(response)
    return Timed(times, [q["sql"] for q in queries], queries, response, held, sql_ms if time_sql else [])


def measure_each(
    cases: list[dict[str, Any]], measure: Callable[[dict[str, Any]], dict[str, Any]], progress: Callable[[Any], str]
) -> list[dict[str, Any]]:
    """Each case measured in turn, its line of progress printed as soon as it is (for a run of minutes)."""
    measured = []
    for case in cases:
        measured.append(measure(case))
        print(progress(measured[-1]), flush=True)
    return measured


# --- the table ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """A table column: its head, the row's value, the value's format spec (its alignment and width lay out
    the head too) and the space before it."""

    head: str
    value: Callable[[dict[str, Any]], Any]
    spec: str = ""
    gap: str = " "

    def head_cell(self) -> str:
        layout = re.match(r"[<>^]?\d*", self.spec)
        return format(self.head, layout.group() if layout else "")


def print_table(title: str | None, columns: list[Column], table: list[dict[str, Any]], underline: bool = True) -> None:
    """The title (after a blank line), the heads (underlined), a line per row."""
    if title is not None:
        print(f"\n{title}")
    header = "".join((c.gap if i else "") + c.head_cell() for i, c in enumerate(columns))
    if underline:
        common.print_header(header)
    else:
        print(header)
    for row in table:
        print("".join((c.gap if i else "") + format(c.value(row), c.spec) for i, c in enumerate(columns)))
