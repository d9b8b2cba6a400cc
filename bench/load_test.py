"""How many page views a second does kvlab serve under gunicorn, on SQLite and on PostgreSQL?

What is measured
----------------
Each engine's database is filled first:

* SQLite: a fresh database file in a scratch KVLAB_VAR_DIR (kvlab's WAL settings).
* PostgreSQL: a scratch database (``--pg-database``, default ``kvlab_load``) created
  through the role that ``scripts/ensure-postgres.sh`` prints the DATABASE_URL of,
  dropped at the end.

a child process migrates it and fills it with bench/synthetic.py's lab, the data
chart_speed.py measures (``--runs``, default 20,000, with 10 requests each: 200,000),
inserted with executemany in one transaction. On PostgreSQL the sequences are then
reset and ``VACUUM ANALYZE`` runs (what autovacuum does within a minute of a bulk
load; SQLite has no autoanalyze and kvlab never runs ANALYZE, so SQLite gets none).

Then ``gunicorn -c deploy/gunicorn.conf.py kvlab.wsgi`` starts on a free loopback
port with the production config as it is (gthread, 2 threads per worker, access log
on), ``--workers`` (default 2) workers, KVLAB_ALLOWED_HOSTS=127.0.0.1, and the same
scratch database; on PostgreSQL once per ``--pg-pool`` setting (default ``off,on``:
KVLAB_DB_POOL=0, a new connection per request as kvlab once did, then kvlab's
connection pool), all on the one fill. For each of ``--users`` (default ``16,64``), every
setup is measured ``--rounds`` times (default 3) in turns — SQLite, PostgreSQL without the
pool, pooled; then the other way round; … — a gunicorn each time: this shared machine's
speed drifts by a third over minutes, so setups measured one after the other for minutes
each would compare the machine's moments; a round's phases are about a minute apart and
give that round's ratio. Once both workers are up, a load generator in a separate process
(aiohttp, one event loop) runs that many simulated users, each with its own keep-alive
connection, closed loop and no think time, browsing this mix over and over (each user
starts at a random point of it; in the warm-up the users arrive one by one over its first
half, so that gunicorn's workers, which keep every connection they accept, share them):

    home -> run list -> run page -> run list -> run page -> timeline -> compare 3 runs

* run list   /runs/ with random filters (model, GPU, label, outcome), sort, page size
             (25/50/100) and page (1, or 2..40: past the end shows the last page);
             3 in 10 as htmx requests (only the table partial)
* run page   /runs/<id>/ of a random run (its 10 requests and their distributions)
* timeline   /charts/timeline/: the default (latest 10,000 runs by label), by
             configuration, one model, or one GPU with another metric
* compare    /charts/compare/ of 3 random runs of one model
* home       the dashboard

First ``--warmup`` seconds (default 3) untimed, then ``--duration`` seconds (default
20) timed: no new request starts after that, the ones in flight finish and count.
Every response must be a 200 (redirects are not followed) holding what its page
must hold (the run's key, the chart's figure, the run table); anything else is an
error, and there must be none (the script exits 1 otherwise). The gunicorn access
log is read afterwards as a cross-check: every status it logged must be 200.

Reported per setup, from its median round by requests/s (every round's rate beside it):
requests/s (timed requests / time from the first start to the last finish), p50/p95/p99
latency (nearest rank; request sent to body read) per page kind and overall, errors, and
CPU over the timed window as % of one core (the machine has ``os.cpu_count()`` cores):
gunicorn (master and workers, /proc), the load generator (its own process time),
PostgreSQL (every ``postgres`` process plus the backends that exited, from the
postmaster's children times: without the pool Django opens one connection per request),
the whole machine (/proc/stat), and the rest of it: other processes (a warning is
printed when they used over 20 % of a core: the figures are then not comparable), and
each gunicorn worker's share (one near 0 % means the other held every connection).
A side-by-side table per user count (with the pooled PostgreSQL/SQLite ratio), a
summary (requests/s and p95 of every setup at every user count) and the load goal —
pooled PostgreSQL at least SQLite's requests/s at 16 users, more at 64, judged by the
median of the rounds' ratios — are printed, and
everything is written to bench/out/load_test.json (``engines``: the first user count;
``by_users``: all of them; every round's figures in ``rounds_*``). gunicorn is stopped with SIGTERM (graceful)
and must exit 0; scratch directories and the scratch database are removed.

Usage (from the repository root)::

    .venv/bin/python bench/load_test.py [--runs N] [--users 16,64] [--duration S] [--rounds 3]
        [--engines sqlite,postgres] [--pg-pool off,on] [--pg-database NAME] [--smoke] [--out DIR]

``--smoke`` fills 500 runs and runs 2 users for 1 s after a 0.5 s warm-up, one round, on SQLite,
and on PostgreSQL (pooled only) too when DATABASE_URL names one (as ``make test-postgres`` sets it;
its role must be allowed to create databases); every check is still made, the
results go to bench/out/smoke/. ``make test`` runs it so the script cannot rot.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import random
import re
import runpy
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

import common  # bench/ is on sys.path when a script runs
import synthetic
from common import ROOT

GUNICORN_CONF = ROOT / "deploy" / "gunicorn.conf.py"
PG_DATABASE = "kvlab_load"
ENGINES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}
# What a run measures: SQLite, and PostgreSQL with kvlab's connection pool on and off (--pg-pool).
SETUPS = {"sqlite": "SQLite", "postgres-nopool": "PostgreSQL, no pool", "postgres": "PostgreSQL"}
POOL_SETUPS = {"off": ("postgres-nopool", {"KVLAB_DB_POOL": "0"}), "on": ("postgres", {"KVLAB_DB_POOL": "1"})}
KINDS = ["home", "run list", "run page", "timeline", "compare 3"]
BROWSE = ["home", "run list", "run page", "run list", "run page", "timeline", "compare 3"]
MAX_REQUESTS = 200_000  # per phase, over all users: a bound, far above what 20 s can serve
REQUEST_TIMEOUT_S = 60.0
ACCESS_STATUS_RE = re.compile(r'"[A-Z]+ \S+ HTTP/[\d.]+" (\d{3}) ')


# --- the fill (a child process: Django is set up once per engine) -----------------------


def fill(runs: int, plan_path: Path) -> int:
    """Migrate the database the environment names, insert the synthetic lab, write the load plan."""
    common.start_django()
    from django.core.management import call_command
    from django.db import connection

    from benchmarks.history import forms
    from benchmarks.models import RequestResult, Run
    from benchmarks.records import catalogue as charts

    call_command("migrate", verbosity=0)
    start = time.perf_counter()
    data = synthetic.insert_lab(runs)
    common.reset_id_sequences()  # insert_lab gives the ids itself
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("VACUUM ANALYZE")  # autocommit: outside a transaction, as VACUUM needs
        fill_s = time.perf_counter() - start
        if connection.vendor == "postgresql":
            cursor.execute("SELECT current_setting('server_version'), pg_database_size(current_database())")
            version, db_bytes = cursor.fetchone()
            version = version.split()[0]
        else:
            version, db_bytes = sqlite3.sqlite_version, Path(connection.settings_dict["NAME"]).stat().st_size
        cursor.execute("SELECT id, key, model FROM benchmarks_run ORDER BY id")
        rows = cursor.fetchall()
    by_model: dict[str, list[int]] = {}
    for pk, _key, model in rows:
        by_model.setdefault(model, []).append(pk)

    def distinct(field: str) -> list[str]:
        return sorted(set(Run.objects.exclude(**{field: ""}).values_list(field, flat=True)))

    plan = {
        "engine": connection.vendor,
        "engine_version": version,
        "runs": len(rows),
        "requests": data["requests"],
        "fill_s": round(fill_s, 1),
        "db_bytes": db_bytes,
        "keys": {str(pk): key for pk, key, _model in rows},
        "ids_by_model": by_model,
        "models": distinct("model"),
        "gpus": distinct("gpu"),
        "labels": distinct("label"),
        "sorts": [value for value, _ in forms.SORT_CHOICES],
        "metrics": list(charts.METRICS),
    }
    assert plan["requests"] == RequestResult.objects.count(), "the requests inserted are not all there"
    assert all(len(ids) >= 3 for ids in by_model.values()), "a model with under 3 runs: no compare of 3"
    plan_path.write_text(json.dumps(plan))
    return 0


# --- the load generator (a child process) -----------------------------------------------


def make_request(kind: str, rng: random.Random, plan: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bool, bytes]:
    """One page view: (path, query, as htmx, what the body must hold)."""
    if kind == "home":
        return "/", [], False, b'id="trend-figure"'
    if kind == "run list":
        query: list[tuple[str, str]] = []
        for field, pool, p in (("model", "models", 0.3), ("gpu", "gpus", 0.2), ("label", "labels", 0.2)):
            if rng.random() < p:
                query.append((field, rng.choice(plan[pool])))
        if rng.random() < 0.25:
            query.append(("outcome", rng.choice(["ok", "partial", "failed"])))
        if rng.random() < 0.6:
            query.append(("sort", rng.choice(plan["sorts"])))
        query.append(("per_page", str(rng.choice([25, 50, 50, 100]))))
        if rng.random() < 0.5:
            query.append(("page", str(rng.randint(2, 40))))
        htmx = rng.random() < 0.3
        return "/runs/", query, htmx, b'<div id="run-table">'
    if kind == "run page":
        pk = rng.randint(1, plan["runs"])
        return f"/runs/{pk}/", [], False, f"<small>{plan['keys'][str(pk)]}</small>".encode()
    if kind == "timeline":
        choice = rng.random()
        if choice < 0.4:
            query = []
        elif choice < 0.6:
            query = [("group", "config")]
        elif choice < 0.85:
            query = [("model", rng.choice(plan["models"]))]
        else:
            query = [("gpu", rng.choice(plan["gpus"])), ("metric", rng.choice(plan["metrics"]))]
        return "/charts/timeline/", query, False, b'id="timeline-figure"'
    if kind == "compare 3":
        ids = rng.sample(plan["ids_by_model"][rng.choice(plan["models"])], 3)
        return "/charts/compare/", [("run", str(i)) for i in ids], False, b'id="compare-figure"'
    raise ValueError(kind)


async def browse(
    session: Any,
    base: str,
    rng: random.Random,
    plan: dict[str, Any],
    stop_at: float,
    log: dict[str, Any],
    delay: float = 0.0,
) -> None:
    """One user: the browse mix in a loop, from a random point of it, until stop_at or the request bound
    (after `delay` seconds: users arrive one by one in the warm-up)."""
    step = rng.randrange(len(BROWSE))
    await asyncio.sleep(delay)
    while time.monotonic() < stop_at and log["started"] < MAX_REQUESTS:
        kind = BROWSE[step % len(BROWSE)]
        step += 1
        path, query, htmx, marker = make_request(kind, rng, plan)
        headers = {"HX-Request": "true"} if htmx else {}
        log["started"] += 1
        start = time.perf_counter()
        problem = None
        try:
            async with session.get(base + path, params=query, headers=headers, allow_redirects=False) as response:
                body = await response.read()
                if response.status != 200:
                    problem = f"HTTP {response.status}"
                elif marker not in body:
                    problem = f"no {marker.decode()!r} in the body"
                elif (b"<html" in body) == htmx:
                    problem = "a full page for an htmx request" if htmx else "a partial for a page request"
        except Exception as exc:  # a timeout, aiohttp.ClientError and the like: an error, not a crash
            body, problem = b"", f"{type(exc).__name__}: {exc}"
        ms = (time.perf_counter() - start) * 1000
        log["done"].append((kind, ms, len(body)))
        log["last_end"] = time.perf_counter()
        if problem:
            log["errors"].append({"kind": kind, "path": path, "query": query, "htmx": htmx, "problem": problem})


def proc_stat(pid: int) -> list[str]:
    """/proc/<pid>/stat fields from the state on (index 0: state, 1: ppid, 11/12: utime/stime, 13/14: children's)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def cpu_sample(gunicorn_pid: int) -> dict[str, Any]:
    """Cumulative CPU ticks: gunicorn's master and workers, PostgreSQL's processes, and the machine."""
    gunicorn, postgres, workers = 0, 0, {}
    for pid in pids():
        try:
            fields = proc_stat(pid)
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except (OSError, ValueError):  # it ended meanwhile
            continue
        ticks = int(fields[11]) + int(fields[12])
        if pid == gunicorn_pid or int(fields[1]) == gunicorn_pid:
            gunicorn += ticks
            if pid != gunicorn_pid:
                workers[pid] = ticks
        if comm == "postgres":
            postgres += ticks
            try:
                parent = Path(f"/proc/{fields[1]}/comm").read_text().strip()
            except OSError:
                parent = ""
            if parent != "postgres":  # the postmaster: add the backends that exited (it reaps them)
                postgres += int(fields[13]) + int(fields[14])
    with open("/proc/stat") as fh:
        cpu = [int(v) for v in fh.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    return {
        "gunicorn": gunicorn,
        "postgres": postgres,
        "machine_busy": sum(cpu) - cpu[3] - cpu[4],
        "self_s": time.process_time(),
        "at": time.perf_counter(),
        "workers": workers,
    }


async def run_phases(
    base: str, plan: dict[str, Any], users: int, warmup: float, duration: float, gunicorn_pid: int
) -> tuple[dict[str, Any] | None, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The warm-up, then the timed phase, on the same keep-alive connections (one per user, as a
    browser tab that loads one page at a time): (warm-up log, CPU before, timed log, CPU after).

    In the warm-up the users arrive one by one over its first half. gunicorn's gthread workers
    share one listening socket and a worker keeps every connection it accepts: opened all at
    once, the connections tended to land on one worker, which then served every user on one
    core while the other idled (seen as two of three SQLite phases at 116 / 0 % per worker).
    """
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1), timeout=timeout) for _ in range(users)]
    try:
        warm = None
        if warmup:
            warm = await _phase(sessions, base, plan, warmup, seed=1, arrival_s=warmup / 2 / users)
        before = cpu_sample(gunicorn_pid)
        timed = await _phase(sessions, base, plan, duration, seed=2)
        after = cpu_sample(gunicorn_pid)
    finally:
        for s in sessions:
            await s.close()
    return warm, before, timed, after


async def _phase(
    sessions: list[Any], base: str, plan: dict[str, Any], seconds: float, seed: int, arrival_s: float = 0.0
) -> dict[str, Any]:
    log: dict[str, Any] = {"started": 0, "done": [], "errors": [], "last_end": None}
    start = time.perf_counter()
    stop_at = time.monotonic() + seconds
    await asyncio.gather(
        *(
            browse(s, base, random.Random(seed * 1000 + i), plan, stop_at, log, delay=i * arrival_s)
            for i, s in enumerate(sessions)
        )
    )
    log["wall_s"] = (log["last_end"] or time.perf_counter()) - start
    return log


def load(base: str, plan_path: Path, users: int, warmup: float, duration: float, gunicorn_pid: int, out: Path) -> int:
    plan = json.loads(plan_path.read_text())
    warm, before, timed, after = asyncio.run(run_phases(base, plan, users, warmup, duration, gunicorn_pid))
    wall = after["at"] - before["at"]
    tick = os.sysconf("SC_CLK_TCK")
    done = timed["done"]
    per_kind = {}
    for kind in [*KINDS, "all"]:
        ms = [d[1] for d in done if kind in ("all", d[0])]
        if not ms:
            continue
        per_kind[kind] = {
            "requests": len(ms),
            "errors": sum(1 for e in timed["errors"] if kind in ("all", e["kind"])),
            "p50_ms": round(common.percentile(ms, 50), 1),
            "p95_ms": round(common.percentile(ms, 95), 1),
            "p99_ms": round(common.percentile(ms, 99), 1),
            "mean_ms": round(sum(ms) / len(ms), 1),
            "max_ms": round(max(ms), 1),
            "mean_bytes": round(sum(d[2] for d in done if kind in ("all", d[0])) / len(ms)),
        }
    result = {
        "users": users,
        "warmup_s": warmup,
        "warmup_requests": len(warm["done"]) if warm else 0,
        "warmup_errors": warm["errors"][:20] if warm else [],
        "warmup_error_count": len(warm["errors"]) if warm else 0,
        "duration_s": duration,
        "wall_s": round(timed["wall_s"], 2),
        "requests": len(done),
        "requests_per_s": round(len(done) / timed["wall_s"], 1),
        "errors": len(timed["errors"]),
        "error_samples": timed["errors"][:20],
        "hit_request_bound": timed["started"] >= MAX_REQUESTS,
        "latency": per_kind,
        "cpu_window_s": round(wall, 2),
        "cpu_pct_of_a_core": {
            "gunicorn": round((after["gunicorn"] - before["gunicorn"]) / tick / wall * 100, 1),
            "load generator": round((after["self_s"] - before["self_s"]) / wall * 100, 1),
            "postgres": round((after["postgres"] - before["postgres"]) / tick / wall * 100, 1),
            "machine": round((after["machine_busy"] - before["machine_busy"]) / tick / wall * 100, 1),
        },
        "gunicorn_workers": sorted(before["workers"]),
        "gunicorn_workers_unchanged": sorted(before["workers"]) == sorted(after["workers"]),
        # each worker's share: one that holds most users' keep-alive connections serves them on one core
        "cpu_pct_per_worker": [
            round((after["workers"][pid] - ticks) / tick / wall * 100, 1)
            for pid, ticks in sorted(before["workers"].items())
            if pid in after["workers"]
        ],
    }
    cpu = result["cpu_pct_of_a_core"]
    cpu["other processes"] = round(cpu["machine"] - cpu["gunicorn"] - cpu["load generator"] - cpu["postgres"], 1)
    out.write_text(json.dumps(result, indent=2))
    return 0


# --- the orchestration ------------------------------------------------------------------


def postgres_url(given: str | None) -> str:
    if given:
        return given
    done = subprocess.run(
        [str(ROOT / "scripts" / "ensure-postgres.sh")], cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True
    )
    return done.stdout.strip().splitlines()[-1]


def with_database(url: str, name: str) -> str:
    return urllib.parse.urlunsplit(urllib.parse.urlsplit(url)._replace(path="/" + name))


def pg_admin(url: str, *statements: Any) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def create_pg_database(url: str, database: str) -> str:
    from psycopg import sql

    name = sql.Identifier(database)
    pg_admin(
        url,
        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name),
        sql.SQL("CREATE DATABASE {}").format(name),
    )
    return with_database(url, database)


def drop_pg_database(url: str, database: str) -> None:
    from psycopg import sql

    pg_admin(url, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))


def children(pid: int) -> list[int]:
    found = []
    for p in pids():
        try:
            if int(proc_stat(p)[1]) == pid:
                found.append(p)
        except (OSError, ValueError):
            continue
    return found


def start_gunicorn(env: dict[str, str], workers: int, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """gunicorn with the production config at a free loopback port; returns once every worker is up."""
    port = common.free_port()
    proc = common.serve(
        [sys.executable, "-m", "gunicorn", "-c", str(GUNICORN_CONF), "kvlab.wsgi"],
        {**env, "KVLAB_BIND": f"127.0.0.1:{port}", "KVLAB_WEB_WORKERS": str(workers)},
        log,
        probe_url=f"http://127.0.0.1:{port}/runs/?per_page=25",
        ready=lambda proc: len(children(proc.pid)) == workers,
    )
    return proc, f"http://127.0.0.1:{port}"


def access_statuses(log: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in log.read_text(errors="replace").splitlines():
        m = ACCESS_STATUS_RE.search(line)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def serve(
    label: str,
    env: dict[str, str],
    args: argparse.Namespace,
    users: int,
    plan_path: Path,
    log: Path,
    duration: float | None = None,
) -> dict[str, Any]:
    """gunicorn on a filled database, the load generator against it for `users` users, gunicorn stopped."""
    duration = args.duration if duration is None else duration
    proc, base = start_gunicorn(env, args.workers, log)
    stopped = None
    try:
        result_path = log.with_suffix(".json")
        print(f"[{label}] {base}: {users} users, {args.warmup:g} s warm-up + {duration:g} s timed", flush=True)
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--role",
                "load",
                "--base",
                base,
                "--plan",
                str(plan_path),
                "--users",
                str(users),
                "--warmup",
                str(args.warmup),
                "--duration",
                str(duration),
                "--gunicorn-pid",
                str(proc.pid),
                "--result",
                str(result_path),
            ],
            cwd=ROOT,
            env=env,
            check=True,
            timeout=args.warmup + duration + 2 * REQUEST_TIMEOUT_S + 60,
        )
        result = json.loads(result_path.read_text())
    finally:
        stopped = common.stop(proc, timeout_s=35)  # SIGTERM: gunicorn's graceful stop
    statuses = access_statuses(log)
    print(
        f"[{label}] {result['requests_per_s']} requests/s, {result['errors']} errors; gunicorn stopped with {stopped}",
        flush=True,
    )
    return {
        **result,
        "gunicorn_exit": stopped,
        "access_log_statuses": statuses,
        "access_log_non_200": sum(n for status, n in statuses.items() if status != "200"),
    }


def prepare_engine(
    engine: str, args: argparse.Namespace, tmp: Path, pg_url: str | None, users: int, pools: list[str]
) -> tuple[dict[str, Any], dict[str, tuple[dict[str, str], Path]]]:
    """Fill one engine's database once and prime it: (its plan, {setup: (environment, var dir)}).

    The setups are "sqlite", "postgres" (kvlab's settings: pooled) and "postgres-nopool"
    (KVLAB_DB_POOL=0: a new connection per request, kvlab before its pool).
    """
    var_dir = tmp / engine
    var_dir.mkdir()
    env = common.scratch_env(var_dir, allowed_hosts="127.0.0.1")
    for name in ("KVLAB_DEBUG", "KVLAB_PRODUCTION", "KVLAB_BIND", "KVLAB_WEB_WORKERS", "KVLAB_DB_POOL"):
        env.pop(name, None)  # the settings under test are the defaults (no SSL redirect on loopback)
    if engine == "postgres":
        assert pg_url
        env["DATABASE_URL"] = create_pg_database(pg_url, args.pg_database)
    plan_path = var_dir / "plan.json"
    print(f"[{ENGINES[engine]}] migrating and filling {args.runs:,} runs ...", flush=True)
    subprocess.run(
        [sys.executable, __file__, "--role", "fill", "--runs", str(args.runs), "--plan", str(plan_path)],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=1800,
    )
    plan = json.loads(plan_path.read_text())
    print(
        f"[{ENGINES[engine]}] {plan['runs']:,} runs and {plan['requests']:,} requests in {plan['fill_s']} s "
        f"({plan['db_bytes'] / 2**20:.0f} MiB)",
        flush=True,
    )
    setups = {"sqlite": {}} if engine == "sqlite" else dict(POOL_SETUPS[p] for p in pools)
    # The first gunicorn on a fresh fill is slower than any after it (cold files and caches):
    # a short phase primes them, not counted, so that no setup pays for being first.
    first, first_env = next(iter(setups.items()))
    serve(f"{SETUPS[first]}: priming, not counted", {**env, **first_env}, args, users, plan_path,
          var_dir / "gunicorn-priming.log", duration=min(args.duration, 5.0))  # fmt: skip
    return plan, {setup: ({**env, **extra}, var_dir) for setup, extra in setups.items()}


def measure_rounds(
    prepared: dict[str, tuple[dict[str, Any], dict[str, tuple[dict[str, str], Path]]]],
    args: argparse.Namespace,
    users: int,
) -> dict[str, list[dict[str, Any]]]:
    """Every setup once per round, in turns (the order reversed every other round): {setup: [a result a round]}.

    This machine's speed drifts by a third over minutes (the same SQLite phase, repeated: 45.8 to
    65.3 requests/s, both cores busy in each), so setups measured one after the other for minutes
    each compare the machine's moments as much as the engines. In turns, a round's phases are a
    minute apart, and each round gives its own ratio.
    """
    order = [
        (setup, plan, env, var_dir) for plan, setups in prepared.values() for setup, (env, var_dir) in setups.items()
    ]
    measured: dict[str, list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        for setup, plan, env, var_dir in order if r % 2 == 0 else order[::-1]:
            log = var_dir / f"gunicorn-{setup}-{users}-{r + 1}.log"
            label = SETUPS[setup] + (f", round {r + 1} of {args.rounds}" if args.rounds > 1 else "")
            result = serve(label, env, args, users, var_dir / "plan.json", log)
            measured.setdefault(setup, []).append(
                {
                    **result,
                    "round": r + 1,
                    "engine": SETUPS[setup],
                    "engine_version": plan["engine_version"],
                    "runs": plan["runs"],
                    "request_rows": plan["requests"],
                    "fill_s": plan["fill_s"],
                    "db_bytes": plan["db_bytes"],
                }
            )
    return measured


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """A setup's figures: its median round by requests/s (the tables' columns), with every round's rate."""
    median = sorted(rounds, key=lambda e: e["requests_per_s"])[(len(rounds) - 1) // 2]
    return {
        **median,
        "rounds_requests_per_s": [e["requests_per_s"] for e in rounds],
        "rounds_cpu_pct_per_worker": [e["cpu_pct_per_worker"] for e in rounds],
        "rounds_problems": [problem for e in rounds for problem in phase_problems(e)],
        "error_samples": [sample for e in rounds for sample in e["error_samples"]][:20],
        "warmup_errors": [sample for e in rounds for sample in e["warmup_errors"]][:20],
    }


def phase_problems(e: dict[str, Any]) -> list[str]:
    where = f"round {e['round']}"
    return [
        f"{problem} ({where})"
        for problem in (
            f"{e['errors']} errors" if e["errors"] else "",
            f"{e['warmup_error_count']} errors in the warm-up" if e["warmup_error_count"] else "",
            f"{e['access_log_non_200']} non-200 in gunicorn's access log" if e["access_log_non_200"] else "",
            f"gunicorn exited {e['gunicorn_exit']}" if e["gunicorn_exit"] != 0 else "",
            "a gunicorn worker restarted" if not e["gunicorn_workers_unchanged"] else "",
            "the request bound was hit" if e["hit_request_bound"] else "",
        )
        if problem
    ]


def round_ratios(engines: dict[str, Any]) -> list[float]:
    """Pooled PostgreSQL's requests/s over SQLite's, round by round (the phases of a round are adjacent)."""
    if "sqlite" not in engines or "postgres" not in engines:
        return []
    return [
        p / s
        for s, p in zip(
            engines["sqlite"]["rounds_requests_per_s"], engines["postgres"]["rounds_requests_per_s"], strict=True
        )
        if s
    ]


def ratio(a: float | None, b: float | None) -> str:
    return f"{b / a:.2f}" if a and b is not None else "—"


NO_RATIO = ("errors (non-200/bad)", "CPU each worker %", "each round")  # table rows that are not one number


def print_table(results: dict[str, Any]) -> None:
    engines = results["engines"]
    names = list(engines)
    cfg = results["config"]
    pair = ["sqlite", "postgres"] if {"sqlite", "postgres"} <= set(names) else None
    print(
        f"\nLoad test: {cfg['runs']:,} runs / {cfg['runs'] * 10:,} requests stored; gunicorn {cfg['gunicorn']} "
        f"{cfg['workers']} workers x {cfg['threads']} threads; {cfg['users']} users, closed loop, "
        f"{cfg['duration_s']:g} s after a {cfg['warmup_s']:g} s warm-up; {cfg['cpus']} CPUs, loopback; "
        f"each setup {cfg['rounds']} times in turns, its median round shown"
    )
    cols = f"{'requests':>8} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7}"
    head = f"{'page':<10} " + "   ".join(f"{cols}" for _ in names)
    if pair:
        head += f"   {'p50':>5} {'p95':>5} {'p99':>5}"
    title = f"{'':<10} " + "   ".join(f"{engines[n]['engine'] + ' ' + engines[n]['engine_version']:^31}" for n in names)
    if pair:
        title += f"   {'PG/SQLite':^17}"
    print(title)
    common.print_header(head)
    for kind in [*KINDS, "all"]:
        line = f"{kind:<10} "
        cells = []
        for n in names:
            lat = engines[n]["latency"].get(kind)
            cells.append(
                f"{lat['requests']:>8,} {lat['p50_ms']:>7.1f} {lat['p95_ms']:>7.1f} {lat['p99_ms']:>7.1f}"
                if lat
                else f"{'—':>31}"
            )
        line += "   ".join(cells)
        if pair:
            a, b = (engines[n]["latency"].get(kind) or {} for n in pair)
            line += "   " + " ".join(f"{ratio(a.get(p), b.get(p)):>5}" for p in ("p50_ms", "p95_ms", "p99_ms"))
        print(line)
    print()
    rows = [
        ("requests/s", lambda e: e["requests_per_s"], "{:,.1f}"),
        ("each round", lambda e: " / ".join(f"{v:.1f}" for v in e["rounds_requests_per_s"]), "{}"),
        ("requests (timed)", lambda e: e["requests"], "{:,}"),
        ("errors (non-200/bad)", lambda e: e["errors"] + e["warmup_error_count"], "{:,}"),
        ("access log non-200", lambda e: e["access_log_non_200"], "{:,}"),
        ("CPU gunicorn %", lambda e: e["cpu_pct_of_a_core"]["gunicorn"], "{:.0f}"),
        ("CPU each worker %", lambda e: " / ".join(f"{v:.0f}" for v in e.get("cpu_pct_per_worker", [])), "{}"),
        ("CPU load generator %", lambda e: e["cpu_pct_of_a_core"]["load generator"], "{:.0f}"),
        ("CPU PostgreSQL %", lambda e: e["cpu_pct_of_a_core"]["postgres"], "{:.0f}"),
        ("CPU other processes %", lambda e: e["cpu_pct_of_a_core"]["other processes"], "{:.0f}"),
        ("CPU machine busy %", lambda e: e["cpu_pct_of_a_core"]["machine"], "{:.0f}"),
        ("database MiB", lambda e: e["db_bytes"] / 2**20, "{:.0f}"),
        ("fill s", lambda e: e["fill_s"], "{:.1f}"),
    ]
    head = f"{'':<22} " + " ".join(f"{engines[n]['engine'][:20]:>20}" for n in names)
    if pair:
        head += f" {'PG/SQLite':>10}"
    common.print_header(head)
    for label, get, fmt in rows:
        values = [get(engines[n]) for n in names]
        line = f"{label:<22} " + " ".join(f"{fmt.format(v):>20}" for v in values)
        if pair:
            a, b = (get(engines[n]) for n in pair)
            line += f" {ratio(a, b) if label not in NO_RATIO else '':>10}"
        print(line)
    busy = [e["engine"] for e in engines.values() if e["cpu_pct_of_a_core"]["other processes"] > 20]
    if busy:
        print(f"WARNING: other processes used over 20% of a core during {' and '.join(busy)}: compare with care")
    print(
        f"(CPU: % of one core over the timed window, {cfg['cpus']} cores in all; PostgreSQL includes the backends"
        " that exited (without the pool Django opens one connection per request); other: whatever else ran)"
    )


def print_summary(by_users: dict[str, dict[str, Any]]) -> None:
    """requests/s and p95 of every setup at every user count, side by side, against SQLite."""
    setups = list(next(iter(by_users.values())))
    print("\nSummary: requests/s and p95 ms over all pages, each setup's median round (x: against SQLite's)")
    head = f"{'users':>5}  " + "  ".join(f"{SETUPS[n]:>30}" for n in setups)
    common.print_header(head)
    for users, engines in by_users.items():
        cells = []
        for n in setups:
            e = engines[n]
            base = engines.get("sqlite", {}).get("requests_per_s")
            versus = f" {ratio(base, e['requests_per_s'])}x" if base and n != "sqlite" else ""
            cell = f"{e['requests_per_s']:,.1f}/s p95 {e['latency']['all']['p95_ms']:,.0f} ms{versus}"
            cells.append(f"{cell:>30}")
        print(f"{users:>5}  " + "  ".join(cells))
    for line in goal_lines(by_users):
        print(line)


def goal_lines(by_users: dict[str, dict[str, Any]]) -> list[str]:
    """The load goal: pooled PostgreSQL at least as fast as SQLite at 16 users, faster at 64, by the
    median of the rounds' ratios (each round's phases adjacent in time)."""
    lines = []
    for users, wanted in (("16", "at least SQLite's requests/s"), ("64", "more requests/s than SQLite")):
        engines = by_users.get(users, {})
        ratios = round_ratios(engines)
        if not ratios:
            continue
        median = statistics.median(ratios)
        met = median >= 1 if users == "16" else median > 1
        each = ", ".join(f"{r:.2f}" for r in ratios)
        lines.append(
            f"goal at {users} users: pooled PostgreSQL serves {wanted}: {median:.2f}x, the median of "
            f"{len(ratios)} round{'s' if len(ratios) > 1 else ''} ({each}): {'met' if met else 'MISSED'}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20_000, help="runs in each database (10 requests each)")
    parser.add_argument("--users", default="16,64", help="concurrent simulated users: comma-separated counts")
    parser.add_argument("--duration", type=float, default=20.0, help="timed seconds per engine")
    parser.add_argument("--warmup", type=float, default=3.0, help="untimed seconds before (0: none)")
    parser.add_argument("--rounds", type=int, default=3, help="every setup this many times, in turns")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (KVLAB_WEB_WORKERS)")
    parser.add_argument("--engines", default="sqlite,postgres", help="comma-separated: sqlite, postgres")
    parser.add_argument(
        "--pg-pool",
        default="off,on",
        help="PostgreSQL with kvlab's connection pool off (KVLAB_DB_POOL=0) and/or on (the settings' default)",
    )
    parser.add_argument("--pg-database", default=PG_DATABASE, help="the scratch PostgreSQL database (dropped after)")
    parser.add_argument("--pg-url", help="DATABASE_URL of a role that may create databases (default: ensure-postgres)")
    # The child processes: the fill (Django on one engine) and the load generator.
    hidden = argparse.SUPPRESS
    parser.add_argument("--role", choices=["main", "fill", "load"], default="main", help=hidden)
    parser.add_argument("--plan", type=Path, help=hidden)
    parser.add_argument("--base", help=hidden)
    parser.add_argument("--gunicorn-pid", type=int, help=hidden)
    parser.add_argument("--result", type=Path, help=hidden)
    args = common.parse_args(
        parser,
        argv,
        smoke={
            "runs": 500,
            "users": "2",
            "pg_pool": "on",
            "duration": 1.0,
            "warmup": 0.5,
            "rounds": 1,
            "engines": "sqlite,postgres" if os.environ.get("DATABASE_URL") else "sqlite",
            "pg_url": os.environ.get("DATABASE_URL"),
        },
    )
    if args.role == "fill":
        return fill(args.runs, args.plan)
    if args.role == "load":
        return load(args.base, args.plan, int(args.users), args.warmup, args.duration, args.gunicorn_pid, args.result)

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if not engines or any(e not in ENGINES for e in engines) or len(set(engines)) != len(engines):
        parser.error(f"--engines: a comma-separated subset of {', '.join(ENGINES)}")
    try:
        users_list = [int(u) for u in args.users.split(",") if u.strip()]
    except ValueError:
        parser.error("--users: comma-separated counts, such as 16,64")
    pools = [p.strip() if p.strip() in POOL_SETUPS else "?" for p in args.pg_pool.split(",") if p.strip()]
    if not pools or "?" in pools or len(set(pools)) != len(pools):
        parser.error(f"--pg-pool: a comma-separated subset of {', '.join(POOL_SETUPS)}")
    if not users_list or min(users_list) < 1:
        parser.error("--users: positive counts")
    if args.runs < 100 or args.duration <= 0 or args.warmup < 0 or args.workers < 1 or args.rounds < 1:
        parser.error("--runs must be 100 or more; --duration, --workers and --rounds positive; --warmup not negative")
    os.environ["KVLAB_WEB_WORKERS"] = str(args.workers)
    conf = runpy.run_path(str(GUNICORN_CONF))  # what gunicorn will read: report it, check the worker count
    assert conf["workers"] == args.workers, conf["workers"]
    pg_url = postgres_url(args.pg_url) if "postgres" in engines else None

    by_users: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="kvlab-load-test-") as tmp:
        prepared = {}
        try:
            for engine in engines:
                prepared[engine] = prepare_engine(engine, args, Path(tmp), pg_url, users_list[0], pools)
            for users in users_list:
                measured = measure_rounds(prepared, args, users)
                by_users[str(users)] = {n: summarize(measured[n]) for n in SETUPS if n in measured}
        finally:
            if "postgres" in engines:
                assert pg_url
                drop_pg_database(pg_url, args.pg_database)
    measured = by_users[str(users_list[0])]  # "engines": the first user count, as before --users took a list

    results = {
        "config": {
            "runs": args.runs,
            "users": users_list[0],
            "user_counts": users_list,
            "pg_pool": args.pg_pool,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "rounds": args.rounds,
            "workers": conf["workers"],
            "threads": conf["threads"],
            "gunicorn": importlib.metadata.version("gunicorn"),
            "browse_mix": BROWSE,
            **common.machine(),
        },
        "engines": measured,
        "by_users": by_users,
    }
    for users, setups in by_users.items():
        print_table({"config": {**results["config"], "users": int(users)}, "engines": setups})
    print_summary(by_users)
    common.write_results(args.out, "load_test", results)
    everything = [(users, e) for users, setups in by_users.items() for e in setups.values()]
    failures = [
        f"{e['engine']} at {users} users: {problem}" for users, e in everything for problem in e["rounds_problems"]
    ]
    for users, e in everything:
        for sample in e["error_samples"][:5] + e["warmup_errors"][:5]:
            print(f"  {e['engine']} at {users} users error: {sample}")
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
