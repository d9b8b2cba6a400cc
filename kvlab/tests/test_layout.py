"""The architecture the folder layout promises, checked on the source: views are leaves."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, relative imports resolved against its package."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def views_imported(path: Path) -> list[str]:
    return sorted(m for m in imported_modules(path) if m.split(".")[-1] in ("views", "job_views", "sweep_views"))


SOURCES = sorted(p for p in (ROOT / "benchmarks").rglob("*.py") if "tests" not in p.parts and p.name != "urls.py")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_of_benchmarks_imports_a_views_module_but_urls(path):
    assert views_imported(path) == []


@pytest.mark.parametrize(
    "path",
    sorted((ROOT / "benchmarks" / "management" / "commands").glob("*.py"))
    + sorted((ROOT / "sizing" / "management" / "commands").glob("*.py")),
    ids=lambda p: p.name,
)
def test_management_commands_import_no_views(path):
    assert views_imported(path) == []


def test_the_check_sees_views_imports():
    # urls.py is the one module allowed to import views: the checker must find all four.
    assert views_imported(ROOT / "benchmarks" / "urls.py") == [
        "benchmarks.charts.views",
        "benchmarks.history.views",
        "benchmarks.jobs.views",
        "benchmarks.sweeps.views",
    ]


def test_each_concern_is_a_package_of_the_one_app():
    for package in ("history", "jobs", "sweeps", "charts"):
        assert (ROOT / "benchmarks" / package / "__init__.py").exists()
        assert (ROOT / "benchmarks" / package / "views.py").exists()
        assert (ROOT / "benchmarks" / package / "forms.py").exists()
    flat = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
    assert flat == ["__init__.py", "admin.py", "apps.py", "enqueue.py", "tasks.py", "urls.py"]


TEMPLATES = sorted((ROOT / "templates").rglob("*.html"))


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: str(p.relative_to(ROOT)))
def test_templates_hold_no_inline_script_or_style(path):
    """Code and styles live in static/ (a strict CSP can forbid inline ones); data may be JSON."""
    html = path.read_text()
    scripts = re.findall(r"<script\b([^>]*)>", html)
    assert [s for s in scripts if "src=" not in s and 'type="application/json"' not in s] == []
    assert "<style" not in html and not re.search(r"\sstyle=", html)


# --- the direction of every import between packages -----------------------------------------------
# A node is a package of benchmarks (records, models, history, ...), one of its flat modules (tasks,
# enqueue, urls, ...), sizing, or kvlab's own modules. The views of every package are a layer of their
# own, "views": nothing imports them but urls (checked above), and they may import any package.
# Imports inside functions count as much as those at the top of a module.

VIEWS = "views"
FLAT_MODULES = (
    "benchmarks.admin",
    "benchmarks.apps",
    "benchmarks.enqueue",
    "benchmarks.tasks",
    "benchmarks.urls",
    "benchmarks.run_sizing.urls",
    "kvlab.celery",
    "kvlab.settings",
    "kvlab.urls",
)
CORE = {"kvlab"}  # kvlab's helpers (bounded_parse, http, visibility, ...): they import no package of ours

# Who may import whom. A pair missing in both directions may not import each other at all.
ALLOWED: dict[str, set[str]] = {
    "kvlab": {"kvlab.celery"},  # kvlab/__init__.py starts the Celery app
    "kvlab.celery": set(),  # the worker's hooks are the app's (BenchmarksConfig.ready), not imported here
    "kvlab.settings": set(),
    "kvlab.urls": {"kvlab", "sizing"},
    "sizing": {"kvlab"},  # sizing never imports benchmarks
    "benchmarks": set(),
    "benchmarks.records": {"kvlab", "sizing"},  # pure: what a record is (no model, view or task)
    "benchmarks.models": {"benchmarks.records", "kvlab"},
    "benchmarks.enqueue": {"benchmarks.models", "kvlab.celery"},  # sends tasks by name, never imports them
    "benchmarks.history": {"benchmarks.records", "benchmarks.models", "benchmarks.enqueue", "kvlab"},
    "benchmarks.charts": {"benchmarks.records", "benchmarks.models", "benchmarks.history", "kvlab"},
    "benchmarks.jobs": {
        *("benchmarks.records", "benchmarks.models", "benchmarks.history", "benchmarks.enqueue"),
        *("kvlab", "kvlab.celery", "sizing"),
    },
    "benchmarks.sweeps": {
        *("benchmarks.records", "benchmarks.models", "benchmarks.history", "benchmarks.jobs", "benchmarks.enqueue"),
        *("kvlab", "kvlab.celery", "sizing"),
    },
    "benchmarks.templatetags": {
        *("benchmarks.records", "benchmarks.models", "benchmarks.charts", "benchmarks.jobs", "benchmarks.sweeps"),
        "kvlab",
    },
    VIEWS: {
        *("benchmarks.records", "benchmarks.models", "benchmarks.history", "benchmarks.charts", "benchmarks.jobs"),
        *("benchmarks.sweeps", "benchmarks.templatetags", "benchmarks.enqueue", "benchmarks.run_sizing"),
        *("kvlab", "kvlab.celery", "sizing"),
    },
    "benchmarks.tasks": {"benchmarks.history", "benchmarks.jobs", "benchmarks.sweeps"},  # thin adapters
    "benchmarks.management": {
        *("benchmarks.records", "benchmarks.models", "benchmarks.history", "benchmarks.charts", "benchmarks.jobs"),
        *("benchmarks.sweeps", "benchmarks.enqueue", "benchmarks.run_sizing", "kvlab", "sizing"),
    },
    # what links sizing to the history: a run's flags and workload, measured speed, calibration
    "benchmarks.run_sizing": {
        *("benchmarks.records", "benchmarks.models", "benchmarks.history", "benchmarks.sweeps"),
        *("kvlab", "sizing"),
    },
    "benchmarks.run_sizing.urls": {VIEWS},
    "benchmarks.admin": {"benchmarks.records", "benchmarks.models", "benchmarks.history"},
    "benchmarks.apps": {"benchmarks.sweeps"},  # connects the worker's announcement hooks
    "benchmarks.urls": {VIEWS, "benchmarks.charts"},  # charts.vendor serves Plotly's file
    "benchmarks.migrations": {"benchmarks.records", "benchmarks.history"},
}


def node_of(module: str) -> str | None:
    """The node a module belongs to; None for a module of neither benchmarks, sizing nor kvlab."""
    parts = module.split(".")
    if parts[0] not in ("benchmarks", "sizing", "kvlab"):
        return None
    if parts[0] == "benchmarks" and len(parts) >= 3 and (parts[2] == "views" or parts[2].endswith("_views")):
        return VIEWS
    for flat in FLAT_MODULES:
        if module == flat or module.startswith(flat + "."):
            return flat
    return ".".join(parts[:2]) if parts[0] == "benchmarks" and len(parts) > 1 else parts[0]


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


PACKAGE_SOURCES = sorted(
    p for top in ("benchmarks", "sizing", "kvlab") for p in (ROOT / top).rglob("*.py") if "tests" not in p.parts
)


@functools.cache
def import_edges() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) node pairs, each with the imports that make it."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in PACKAGE_SOURCES:
        source = node_of(module_name(path))
        imports = imported_modules(path)
        for imported in sorted(imports):
            if any(other.startswith(imported + ".") for other in imports):
                continue  # `from .history import views` imports views, not all of history
            target = node_of(imported)
            if source is not None and target is not None and target != source:
                edges.setdefault((source, target), []).append(f"{module_name(path)} imports {imported}")
    return edges


def test_every_node_is_in_the_table():
    nodes = {node_of(module_name(p)) for p in PACKAGE_SOURCES}
    assert nodes - set(ALLOWED) == set()
    assert {t for targets in ALLOWED.values() for t in targets} - set(ALLOWED) == set()


def test_the_table_allows_each_pair_one_way_at_most():
    assert sorted((a, b) for a, targets in ALLOWED.items() for b in targets if a in ALLOWED.get(b, set())) == []


def _pairs() -> list[Any]:
    """Every pair the table forbids."""
    return [
        pytest.param(source, target, id=f"{source} never imports {target}")
        for source in sorted(ALLOWED)
        for target in sorted(ALLOWED)
        if source != target and target not in ALLOWED[source]
    ]


@pytest.mark.parametrize(("source", "target"), _pairs())
def test_a_package_imports_only_what_the_table_allows(source, target):
    assert import_edges().get((source, target), []) == []


def test_no_cycle_between_packages():
    """A package never reaches itself through the packages it imports."""
    graph: dict[str, set[str]] = {}
    for source, target in import_edges():
        graph.setdefault(source, set()).add(target)
    done: set[str] = set()

    def cycle_from(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            if found := cycle_from(nxt, [*path, node]):
                return found
        done.add(node)
        return None

    assert [c for node in sorted(graph) if (c := cycle_from(node, []))] == []


def test_the_cycle_check_sees_a_cycle(monkeypatch):
    monkeypatch.setitem(ALLOWED, "benchmarks.records", {*ALLOWED["benchmarks.records"], "benchmarks.models"})
    edges = {("benchmarks.models", "benchmarks.records"): ["m"], ("benchmarks.records", "benchmarks.models"): ["r"]}
    monkeypatch.setattr(f"{__name__}.import_edges", lambda: edges)
    with pytest.raises(AssertionError):
        test_no_cycle_between_packages()


RECORDS = sorted((ROOT / "benchmarks" / "records").rglob("*.py"))


def outside_records(modules: set[str]) -> list[str]:
    """The imports a module of the records package may not make: Django, Celery, benchmarks outside records."""
    return sorted(
        m
        for m in modules
        if m.split(".")[0] in ("django", "celery")
        or (m.split(".")[0] == "benchmarks" and node_of(m) != "benchmarks.records")
    )


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_records_package_imports_no_django_model_view_or_task(path):
    """What a record is holds without a database, a request or a queue: plain Python, sizing and kvlab's parsers."""
    assert outside_records(imported_modules(path)) == []


def test_the_records_check_sees_models_views_and_tasks():
    imports = {"django.db.models", "benchmarks.models.history", "benchmarks.tasks", "benchmarks.history.views"}
    assert outside_records({*imports, "benchmarks.records.jsonl", "kvlab.bounded_parse", "json"}) == sorted(imports)


def test_enqueue_sends_the_tasks_by_their_own_names():
    from benchmarks import enqueue, tasks

    assert tasks.run_benchmark_job.name == enqueue.RUN_BENCHMARK_JOB
    assert tasks.run_sweep.name == enqueue.RUN_SWEEP
    assert tasks.catch_up_derived.name == enqueue.CATCH_UP_DERIVED


def test_the_worker_hooks_are_connected_when_django_loads_the_app():
    from celery.signals import worker_ready
    from celery.worker.control import Panel

    assert "kvlab_announce" in Panel.data
    assert any(uid == "benchmarks.announce_launch_host" for (uid, _), _ in worker_ready.receivers)
