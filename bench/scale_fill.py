"""Fill a database with the lab at ten times the scale, once: 1,000,000 runs and 10,000,000 requests.

What is done
------------
bench/synthetic.py's lab (``--runs`` runs, default 1,000,000, of 10 requests each) is
generated once into a raw-rows file outside the checkout, ``<cache>/raw-<seed>-<runs>-<gen>.sqlite3``
(default cache ``~/.cache/kvlab/scale/``; ``<gen>`` a hash of synthetic.py): the Run and
RequestResult rows as the database stores them (dates as UTC text), without indexes.
Generating is the slow part; loading is a bulk copy:

* SQLite: a migrated database (``<cache>/sqlite-<runs>/kvlab.sqlite3``) loses the secondary
  indexes of the run and request tables, gets every row with ``INSERT … SELECT`` from the
  attached raw file (journal off), and gets its indexes back from their own CREATE statements.
* PostgreSQL 15: a migrated database (``--pg-database``, default ``kvlab_scale``, through the
  role whose URL ``scripts/ensure-postgres.sh`` prints, or ``--pg-url``) loses the same
  indexes, the request table's unique constraints and its foreign key, gets every row by
  ``COPY … FROM STDIN``, then its indexes and constraints back from their own definitions.

Either way the schema ends exactly as the migrations made it: its indexes and constraints are
read before the load and compared after it (the script fails if they differ). Then ``--jobs``
jobs on one server (default 20,000: the job list at scale), ``--sweeps`` sweeps of 4 flag
sets each on one launch host (default 2,000) and two big runs of ``--big-runs`` requests each
(default 1,000,000: the compare chart of two million-request runs; ``synthetic.insert_big_run``,
the lab's first run of two seeds drawn wave after wave) are added; ``manage.py rebuild_derived``
recomputes every table derived from the runs when the command exists (the regression baselines,
rollups); and ``ANALYZE`` (SQLite) or ``VACUUM ANALYZE`` (PostgreSQL) gives the planner its
statistics.

The filled database is kept: it records what it holds (seed, runs, generator, this fill's
version, and a hash of each migration file) — a sidecar JSON file for SQLite, the database's
COMMENT for PostgreSQL — written last, so a fill cut short is never reused. A rerun reuses it
while all of that still holds. A migration added since is applied to it by `migrate`, as a team's
database would get it; when the generator, the sizes or an applied migration changed it fills
again from the kept raw rows: a minute or three of bulk load, where migrating a million runs runs
each backfill and then rebuild_derived over the whole history once more.
Each step's seconds are printed and kept with the database.

Usage (from the repository root)::

    .venv/bin/python bench/scale_fill.py [--engine sqlite|postgres] [--runs N] [--jobs N] [--sweeps N]
        [--big-runs N] [--cache DIR] [--pg-url URL] [--pg-database NAME] [--refill] [--smoke] [--out DIR]

``--smoke``: 2,000 runs, 60 jobs, 110 sweeps, big runs of 20,000 requests (PostgreSQL database
``kvlab_scale_smoke``).
bench/scale_pages.py runs this first, then measures every page against the filled database.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
import urllib.parse
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import common  # bench/ is on sys.path when a script runs
import synthetic
from common import ROOT

CACHE = Path.home() / ".cache" / "kvlab" / "scale"
FILL_VERSION = 2  # bump when what a fill stores changes (jobs, sweeps, big runs, the load itself); 2: the big runs
BULK_TABLES = ("benchmarks_run", "benchmarks_requestresult")
PROMPT = "Summarise the following text in one paragraph. " * 21  # 1 KiB, 4 per job (as bounded_pages.py)
CHUNK = 10_000  # runs generated and written at a time


def generator_version() -> str:
    """What the lab's rows depend on: synthetic.py's text."""
    return hashlib.sha256((ROOT / "bench" / "synthetic.py").read_bytes()).hexdigest()[:12]


# --- the raw rows, generated once ------------------------------------------------------


def utc_text(value: datetime) -> str:
    """A datetime as Django stores it on SQLite (naive UTC, str()); PostgreSQL reads it in a UTC session."""
    return str(value.astimezone(UTC).replace(tzinfo=None))


def raw_lab(cache: Path, n_runs: int) -> Path:
    """The raw-rows file of n_runs lab runs (generated now if missing): tables run, request and meta."""
    from benchmarks.models import RequestResult, Run

    path = cache / f"raw-{synthetic.SEED}-{n_runs}-{generator_version()}.sqlite3"
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    run_fields = [(f.attname, f.column) for f in Run._meta.concrete_fields]
    request_columns = [RequestResult._meta.get_field(name).column for name in synthetic.REQUEST_COLUMNS]
    start = time.perf_counter()
    print(f"generating {n_runs:,} lab runs into {common.shown(path)} ...", flush=True)
    db = sqlite3.connect(partial, isolation_level=None)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    db.execute(f"CREATE TABLE run ({', '.join(column for _, column in run_fields)})")
    db.execute(f"CREATE TABLE request ({', '.join(request_columns)})")
    db.execute("CREATE TABLE meta (key PRIMARY KEY, value)")
    run_sql = f"INSERT INTO run VALUES ({', '.join('?' * len(run_fields))})"
    request_sql = f"INSERT INTO request VALUES ({', '.join('?' * len(request_columns))})"
    lab = synthetic.Lab()
    runs = lab.runs(n_runs)
    n_requests = 0
    db.execute("BEGIN")
    for first in range(0, n_runs, CHUNK):
        batch = [next(runs) for _ in range(min(CHUNK, n_runs - first))]
        missing = {attname for attname, _ in run_fields} - batch[0].run.keys()
        assert not missing, f"bench/synthetic.py does not set {sorted(missing)}; update it"
        db.executemany(
            run_sql,
            [tuple(stored(r.run[attname]) for attname, _ in run_fields) for r in batch],
        )
        requests = [(*q[:2], utc_text(q[2]), *q[3:]) for r in batch for q in r.requests]
        db.executemany(request_sql, requests)
        n_requests += len(requests)
    db.executemany(
        "INSERT INTO meta VALUES (?, ?)",
        [("until", lab.until.isoformat()), ("runs", n_runs), ("requests", n_requests)],
    )
    db.execute("COMMIT")
    db.close()
    partial.rename(path)
    print(f"generated {n_runs:,} runs and {n_requests:,} requests in {time.perf_counter() - start:.0f} s", flush=True)
    return path


def stored(value: Any) -> Any:
    """A lab value as the database holds it: dates as UTC text, the JSON fields as JSON text."""
    if isinstance(value, datetime):
        return utc_text(value)
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


def raw_meta(raw: Path) -> dict[str, Any]:
    with closing(sqlite3.connect(raw)) as db:
        return dict(db.execute("SELECT key, value FROM meta").fetchall())


# --- what a filled database holds --------------------------------------------------------


def migration_hashes() -> dict[str, str]:
    """Each migration on disk ("app.name", Django's own too) -> a hash of its file."""
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(None, ignore_no_migrations=True)
    found = {}
    for (app, name), migration in loader.disk_migrations.items():
        path = Path(sys.modules[type(migration).__module__].__file__ or "")
        found[f"{app}.{name}"] = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return dict(sorted(found.items()))


def wanted(args: argparse.Namespace) -> dict[str, Any]:
    """What the filled database must hold, migrations aside."""
    return {
        "seed": synthetic.SEED,
        "runs": args.runs,
        "generator": generator_version(),
        "fill_version": FILL_VERSION,
        "jobs": args.jobs,
        "sweeps": args.sweeps,
        "big_runs": args.big_runs,
    }


def reusable(held: dict[str, Any] | None, want: dict[str, Any], migrations: dict[str, str]) -> str:
    """'fresh', or why the kept database must be filled again."""
    if not held:
        return "no complete fill"
    changed = [k for k, v in want.items() if held.get(k) != v]
    if changed:
        return f"{', '.join(changed)} changed"
    applied = held.get("migrations", {})
    differ = sorted(name for name in applied.keys() | migrations.keys() if applied.get(name) != migrations.get(name))
    if differ:
        return f"migration {differ[0]} {'changed' if differ[0] in applied else 'is new'}" + (
            f" (and {len(differ) - 1} more)" if len(differ) > 1 else ""
        )
    return "fresh"


def new_migrations_only(held: dict[str, Any], migrations: dict[str, str]) -> bool:
    """Every migration the fill applied is unchanged on disk; the others are new (migrate applies them)."""
    applied = held.get("migrations", {})
    return all(migrations.get(name) == digest for name, digest in applied.items())


# --- the engines ---------------------------------------------------------------------------


class Sqlite:
    name = "sqlite"

    def __init__(self, args: argparse.Namespace) -> None:
        self.var_dir = args.cache / f"sqlite-{args.runs}"
        self.path = self.var_dir / "kvlab.sqlite3"
        self.meta_path = self.var_dir / "fill.json"

    def environment(self) -> dict[str, str]:
        return common.scratch_env(self.var_dir, allowed_hosts="testserver")

    def held(self) -> dict[str, Any] | None:
        if not (self.path.exists() and self.meta_path.exists()):
            return None
        return json.loads(self.meta_path.read_text())

    def create(self) -> None:
        self.meta_path.unlink(missing_ok=True)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        self.var_dir.mkdir(parents=True, exist_ok=True)

    def record(self, meta: dict[str, Any]) -> None:
        self.meta_path.write_text(json.dumps(meta, indent=2) + "\n")

    def schema(self) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(self.path)) as db:
            return db.execute(
                "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_stat%' ORDER BY name"
            ).fetchall()

    def load(self, raw: Path) -> None:
        """Every raw row into the migrated database, its secondary indexes dropped meanwhile."""
        from django.db import connections

        connections.close_all()
        db = sqlite3.connect(self.path, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=OFF")
            db.execute("PRAGMA synchronous=OFF")
            db.execute("PRAGMA cache_size=-262144")  # 256 MiB while the indexes are built
            marks = ", ".join("?" * len(BULK_TABLES))
            indexes = db.execute(
                f"SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
                f"AND tbl_name IN ({marks})",
                BULK_TABLES,
            ).fetchall()
            db.execute("ATTACH DATABASE ? AS raw", (str(raw),))
            db.execute("BEGIN")
            for name, _ in indexes:
                db.execute(f'DROP INDEX "{name}"')
            for table, source in zip(BULK_TABLES, ("run", "request"), strict=True):
                columns = ", ".join(f'"{c[1]}"' for c in db.execute(f"PRAGMA raw.table_info({source})"))
                db.execute(f"INSERT INTO main.{table} ({columns}) SELECT {columns} FROM raw.{source}")
            for _, sql in indexes:
                db.execute(sql)
            db.execute("COMMIT")
            db.execute("DETACH DATABASE raw")
            db.execute("PRAGMA journal_mode=WAL")  # as kvlab's settings open it
        finally:
            db.close()

    def analyze(self) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")

    def size(self) -> int:
        return self.path.stat().st_size


class Postgres:
    name = "postgres"

    def __init__(self, args: argparse.Namespace) -> None:
        self.admin = args.pg_url or ensure_postgres()
        self.database = args.pg_database
        self.url = urllib.parse.urlunsplit(urllib.parse.urlsplit(self.admin)._replace(path="/" + self.database))
        self.var_dir = args.cache / "postgres-var"  # kvlab's secret key file; the data is in the database

    def environment(self) -> dict[str, str]:
        return common.scratch_env(self.var_dir, allowed_hosts="testserver") | {"DATABASE_URL": self.url}

    def held(self) -> dict[str, Any] | None:
        import psycopg

        with psycopg.connect(self.admin, autocommit=True) as conn:
            row = conn.execute(
                "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s", (self.database,)
            ).fetchone()
        return json.loads(row[0]) if row and row[0] else None

    def create(self) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.database)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database)))

    def record(self, meta: dict[str, Any]) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("COMMENT ON DATABASE {} IS {}").format(
                    sql.Identifier(self.database), sql.Literal(json.dumps(meta))
                )
            )

    def schema(self) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.url) as conn:
            indexes = conn.execute(
                "SELECT 'index', indexname, tablename, indexdef FROM pg_indexes WHERE schemaname = 'public'"
            ).fetchall()
            constraints = conn.execute(
                "SELECT 'constraint', conname, conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE connamespace = 'public'::regnamespace"
            ).fetchall()
        return sorted(indexes + constraints)

    def load(self, raw: Path) -> None:
        """Every raw row by COPY, the request table's indexes, unique constraints and foreign key dropped meanwhile."""
        import psycopg
        from django.db import connections

        connections.close_all()
        tables = list(BULK_TABLES)
        with psycopg.connect(self.url) as conn, closing(sqlite3.connect(raw)) as source:
            conn.execute("SET TIME ZONE 'UTC'")
            conn.execute("SET maintenance_work_mem = '512MB'")
            # constraints a bulk load may drop and add back (primary keys and checks stay)
            constraints = conn.execute(
                "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE conrelid::regclass::text = ANY(%s) AND contype IN ('u', 'f')",
                (tables,),
            ).fetchall()
            indexes = conn.execute(
                "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index "
                "WHERE indrelid::regclass::text = ANY(%s) AND NOT indisprimary "
                "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = indexrelid)",
                (tables,),
            ).fetchall()
            for table, name, _ in constraints:
                conn.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
            for name, _ in indexes:
                conn.execute(f"DROP INDEX {name}")
            for table, name in zip(BULK_TABLES, ("run", "request"), strict=True):
                columns = [c[1] for c in source.execute(f"PRAGMA table_info({name})")]
                shown = ", ".join(f'"{c}"' for c in columns)
                with conn.cursor().copy(f"COPY {table} ({shown}) FROM STDIN") as copy:
                    for row in source.execute(f"SELECT {shown} FROM {name}"):
                        copy.write_row(row)
            for _, sql in indexes:
                conn.execute(sql)
            for table, name, definition in constraints:
                conn.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
            conn.commit()
        common.reset_id_sequences()  # the ids were given: the sequences go past them

    def analyze(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")

    def size(self) -> int:
        import psycopg

        with psycopg.connect(self.url) as conn:
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(row[0]) if row else 0


def ensure_postgres() -> str:
    done = subprocess.run(
        [str(ROOT / "scripts" / "ensure-postgres.sh")], cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True
    )
    return done.stdout.strip().splitlines()[-1]


# --- the fill ------------------------------------------------------------------------------


def add_jobs_and_sweeps(n_jobs: int, n_sweeps: int) -> None:
    """n_jobs finished jobs on one server (4 KiB of prompts each), n_sweeps sweeps of 4 flag sets on one host."""
    from django.utils import timezone

    from benchmarks.models import Job, LaunchHost, Server, Sweep, SweepConfig

    now = timezone.now()
    server = Server.objects.create(name="gpu-box", base_url="http://127.0.0.1:8080")
    for first in range(0, n_jobs, 2_000):
        Job.objects.bulk_create(
            Job(
                server=server,
                base_url=server.base_url,
                label=f"nightly-{i}",
                params={"requests": 40, "concurrency": 4, "n_predict": 256, "prompts": [PROMPT] * 4},
                state=Job.State.SUCCEEDED,
                n_total=40,
                n_done=40,
                n_failed=i % 3,
                finished_at=now,
            )
            for i in range(first, min(n_jobs, first + 2_000))
        )
    host = LaunchHost.objects.create(name="gpu-host", gpu="RTX 4090", gpu_mib=24564)
    flag_sets = ["-c 8192 -np 1", "-c 16384 -np 2", "-c 32768 -np 4 -fa on", "-c 32768 -np 4 -ctk q8_0 -ctv q8_0"]
    for first in range(0, n_sweeps, 500):
        sweeps = Sweep.objects.bulk_create(
            Sweep(
                host=host,
                model_file=synthetic.MODELS[i % len(synthetic.MODELS)],
                label=f"sweep-{i}",
                params={"prompt": PROMPT, "n_predict": 256, "concurrencies": [1, 2, 4, 8], "requests": 16},
                state=Sweep.State.SUCCEEDED,
                finished_at=now,
            )
            for i in range(first, min(n_sweeps, first + 500))
        )
        SweepConfig.objects.bulk_create(
            SweepConfig(sweep=sweep, position=p, command=flags, outcome=SweepConfig.Outcome.RAN)
            for sweep in sweeps
            for p, flags in enumerate(flag_sets)
        )


def add_big_runs(n_requests: int) -> list[int]:
    """Two runs of n_requests requests each (the lab's first run of two seeds, numbered 0..n-1): their ids."""
    ids = [synthetic.insert_big_run(n_requests, seed=seed) for seed in (synthetic.SEED, synthetic.SEED + 1)]
    from django.db import connection

    if connection.vendor == "postgresql":
        common.reset_id_sequences()  # insert_big_run gives the ids itself
    return ids


def rebuild_derived() -> bool:
    """manage.py rebuild_derived when kvlab has it (the derived tables); whether it ran."""
    from django.core.management import call_command, get_commands

    if "rebuild_derived" not in get_commands():
        return False
    call_command("rebuild_derived")
    return True


def timed(timings: dict[str, float], step: str, work: Any, *args: Any, **kwargs: Any) -> Any:
    start = time.perf_counter()
    result = work(*args, **kwargs)
    timings[step] = round(time.perf_counter() - start, 1)
    print(f"  {step:<22} {timings[step]:8.1f} s", flush=True)
    return result


def fill(engine: Sqlite | Postgres, args: argparse.Namespace, want: dict[str, Any]) -> dict[str, Any]:
    from django.core.management import call_command

    timings: dict[str, float] = {}
    raw = timed(timings, "generate (or cached)", raw_lab, args.cache, args.runs)
    engine.create()
    timed(timings, "migrate", call_command, "migrate", verbosity=0)
    before = engine.schema()
    timed(timings, "bulk load", engine.load, raw)
    assert engine.schema() == before, "the bulk load left another schema than the migrations made"
    timed(timings, "jobs and sweeps", add_jobs_and_sweeps, args.jobs, args.sweeps)
    big_run_ids = timed(timings, "big runs", add_big_runs, args.big_runs)
    derived = timed(timings, "rebuild_derived", rebuild_derived)
    timed(timings, "analyze", engine.analyze)
    held = raw_meta(raw)
    return want | {
        "requests": int(held["requests"]),  # the lab's; each big run holds big_runs more
        "big_run_ids": big_run_ids,
        "until": held["until"],
        "migrations": migration_hashes(),
        "rebuild_derived": derived,
        "fill_s": timings,
        "filled_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def ensure_filled(args: argparse.Namespace) -> dict[str, Any]:
    """The filled database of args (filled now or reused); what it holds, its engine's environment."""
    engine: Sqlite | Postgres = Sqlite(args) if args.engine == "sqlite" else Postgres(args)
    os.environ.update(engine.environment())
    if args.engine == "sqlite":
        os.environ.pop("DATABASE_URL", None)
    common.start_django()
    want = wanted(args)
    held = None if args.refill else engine.held()
    migrations = migration_hashes()
    verdict = reusable(held, want, migrations)
    start = time.perf_counter()
    if held is not None and verdict.startswith("migration") and new_migrations_only(held, migrations):
        # a migration added since the fill is applied as a user's `migrate` would, not by a refill
        from django.core.management import call_command

        print(f"[{engine.name}] applying the migrations added since the fill ({verdict}) ...", flush=True)
        call_command("migrate", verbosity=0)
        held = held | {"migrations": migrations}
        engine.record(held)
        verdict = "fresh"
    if verdict == "fresh":
        assert held is not None
        print(f"[{engine.name}] reusing the filled database (filled {held['filled_at']}, {held['fill_s']})")
        meta = held
    else:
        print(f"[{engine.name}] filling {args.runs:,} runs ({verdict}) ...", flush=True)
        meta = fill(engine, args, want)
        engine.record(meta)
        print(f"[{engine.name}] filled in {time.perf_counter() - start:.0f} s: {meta['fill_s']}", flush=True)
    from django.db import connections

    connections.close_all()
    return meta | {"engine": engine.name, "size_bytes": engine.size(), "environment": engine.environment()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The fill's options, shared with scale_pages.py."""
    parser.add_argument("--engine", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--runs", type=int, default=1_000_000, help="lab runs (10 requests each)")
    parser.add_argument("--jobs", type=int, default=20_000, help="finished jobs on one server")
    parser.add_argument("--sweeps", type=int, default=2_000, help="sweeps of 4 flag sets on one launch host")
    parser.add_argument("--big-runs", type=int, default=1_000_000, help="requests of each of the two big runs")
    parser.add_argument("--cache", type=Path, default=CACHE, help=f"where the raw rows and SQLite fill go ({CACHE})")
    parser.add_argument("--pg-url", help="DATABASE_URL of a role that may create databases (default: ensure-postgres)")
    parser.add_argument("--pg-database", help="the filled PostgreSQL database (kvlab_scale; smoke: kvlab_scale_smoke)")
    parser.add_argument("--refill", action="store_true", help="fill again even if the kept database is current")


SMOKE = {"runs": 2_000, "jobs": 60, "sweeps": 110, "big_runs": 20_000}


def finish_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    if args.runs < 100 or args.jobs < 60 or args.sweeps < 110 or args.big_runs < 1:
        parser.error(
            "--runs must be 100 or more, --jobs 60 or more (a full page), --sweeps 110 or more, --big-runs 1 or more"
        )
    if not args.pg_database:
        args.pg_database = "kvlab_scale_smoke" if args.smoke else "kvlab_scale"
    return args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = finish_arguments(parser, common.parse_args(parser, argv, smoke=SMOKE))
    meta = ensure_filled(args)
    shown = {k: v for k, v in meta.items() if k != "environment"}
    print(
        f"[{meta['engine']}] {meta['runs']:,} runs, {meta['requests']:,} requests, {meta['jobs']:,} jobs, "
        f"{meta['sweeps']:,} sweeps, 2 big runs of {meta['big_runs']:,} requests; "
        f"{meta['size_bytes'] / 2**30:.2f} GiB; fill {meta['fill_s']}"
    )
    common.write_results(args.out, f"scale_fill_{meta['engine']}", shown | common.machine())
    return 0


if __name__ == "__main__":
    sys.exit(main())
