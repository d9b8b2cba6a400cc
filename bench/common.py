"""What the benchmark scripts share: Django set-up on a scratch database, the small
measuring helpers, their command line (``--smoke``, ``--out``), starting and stopping
a web server, and writing results. The synthetic data lives in synthetic.py."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # kvlab's apps import from the repository root


# --- the command line ------------------------------------------------------------------


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None, smoke: dict[str, Any]) -> argparse.Namespace:
    """Add --smoke and --out to a script's parser and parse.

    --smoke swaps the size defaults for `smoke` (sizes given on the command line still
    win): the whole script in a few seconds, every check on its results still made.
    Its results go to bench/out/smoke/, never over the real figures in bench/out/.
    """
    if not __debug__:
        sys.exit("the benchmarks check their results with assert: run them without -O")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: every step and check, in seconds (make test runs it)"
    )
    parser.add_argument("--out", type=Path, default=OUT, help="where the results go (default bench/out)")
    args = parser.parse_args(argv)
    if args.smoke:
        parser.set_defaults(**{"out": OUT / "smoke", **smoke})
        args = parser.parse_args(argv)
    return args


# --- Django on a scratch database ------------------------------------------------------


def scratch_env(var_dir: Path, allowed_hosts: str | None = None) -> dict[str, str]:
    """The environment of a kvlab process on a scratch SQLite database under var_dir."""
    env = {**os.environ, "KVLAB_VAR_DIR": str(var_dir), "DJANGO_SETTINGS_MODULE": "kvlab.settings"}
    env.pop("DATABASE_URL", None)  # the benchmarks measure the SQLite default
    env.setdefault("KVLAB_LOG_LEVEL", "WARNING")
    if allowed_hosts:
        env["KVLAB_ALLOWED_HOSTS"] = allowed_hosts
    return env


def start_django() -> None:
    """Start Django on the database this process's environment names."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "kvlab.settings"
    import django

    django.setup()


def setup_django(var_dir: Path, allowed_hosts: str | None = None) -> None:
    """Point kvlab at a scratch SQLite database under var_dir, then start Django."""
    os.environ.update(scratch_env(var_dir, allowed_hosts))
    os.environ.pop("DATABASE_URL", None)
    start_django()


def setup_migrated_django(var_dir: Path) -> None:
    """Start Django on a scratch database the test client may reach, and migrate it."""
    setup_django(var_dir, allowed_hosts="testserver,127.0.0.1,localhost")
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


class KvlabDatabases:
    """Migrate once, keep a copy, and restore that copy for every measurement (Django set up in this
    process on a scratch SQLite database: setup_django)."""

    def __init__(self, work: Path) -> None:
        from django.conf import settings
        from django.core.management import call_command
        from django.db import connections

        self.live = Path(settings.DATABASES["default"]["NAME"])
        self.template = work / "migrated-template.sqlite3"
        call_command("migrate", verbosity=0)
        connections.close_all()  # the last close checkpoints and removes the WAL
        assert not Path(f"{self.live}-wal").exists(), "WAL left after close; the template would be incomplete"
        shutil.copyfile(self.live, self.template)

    def fresh(self) -> None:
        from django.db import connection, connections

        connections.close_all()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.live}{suffix}").unlink(missing_ok=True)
        shutil.copyfile(self.template, self.live)
        connection.ensure_connection()  # connect (and run the PRAGMAs) outside the timing


def kvlab_import(path: Path) -> Any:
    """import_bench_file of the file, as the command's origin."""
    from benchmarks.history.importer import import_bench_file

    with path.open("rb") as f:
        return import_bench_file(f, filename=path.name, origin="command")


def reset_id_sequences() -> None:
    """PostgreSQL: move the runs' and requests' id sequences past the ids a bulk load gave itself
    (synthetic.insert_lab, scale_fill's COPY), so a later insert does not collide; SQLite needs nothing."""
    from django.core.management.color import no_style
    from django.db import connection

    from benchmarks.models import RequestResult, Run

    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for sql in connection.ops.sequence_reset_sql(no_style(), [Run, RequestResult]):
            cursor.execute(sql)


# --- measuring -------------------------------------------------------------------------


def percentile(values: Sequence[float], p: int) -> float:
    """The p-th percentile of unsorted measurements: kvlab's own nearest rank."""
    from benchmarks.records.metrics import nearest_rank

    value = nearest_rank(sorted(values), p)
    assert value is not None, "no measurements"
    return value


def rerun_ms(sql: str, repeats: int = 3) -> float:
    """Run one captured query again on the raw sqlite3 connection, fetching every row.

    Django's query log times only execute(); SQLite does most of a query's work while
    the rows are fetched, so the log under-reports. Best of `repeats`, in ms.
    """
    from django.db import connection

    raw = connection.connection
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        raw.execute(sql).fetchall()
        best = min(best, time.perf_counter() - start)
    return best * 1000


# --- a web server in a child process ---------------------------------------------------


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(
    command: list[str],
    env: dict[str, str],
    log: Path,
    probe_url: str,
    ready: Callable[[subprocess.Popen[bytes]], bool] = lambda proc: True,
    timeout_s: float = 60,
) -> subprocess.Popen[bytes]:
    """Start a web server (its output to log); return once ready(proc) and GET probe_url gives a 200."""
    with log.open("wb") as fh:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if ready(proc):
                with urllib.request.urlopen(probe_url, timeout=10) as response:
                    if response.status == 200:
                        return proc
        except (OSError, urllib.error.URLError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError(f"{' '.join(command)} did not start:\n{log.read_text()}")
        time.sleep(0.2)


def stop(proc: subprocess.Popen[Any], timeout_s: float = 10) -> int | None:
    """SIGTERM (runserver stops, gunicorn finishes its requests first); its exit status, or None if killed."""
    if proc.poll() is not None:
        return proc.returncode
    proc.terminate()
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


# --- the results -----------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """Where and when a measurement ran, for its results file."""
    return {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def print_header(header: str) -> None:
    """A table's column names, underlined."""
    print(header)
    print("-" * len(header))


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def write_results(out: Path, name: str, results: dict[str, Any], profile: str | None = None) -> None:
    """Write results to out/<name>.json, and a profile's text (printed too) to out/<name>_profile.txt."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"results written to {shown(path)}")
    if profile:
        path = out / f"{name}_profile.txt"
        path.write_text(profile)
        print(f"profile written to {shown(path)}\n")
        print(profile)
