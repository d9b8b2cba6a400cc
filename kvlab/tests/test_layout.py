"""The architecture the folder layout promises, checked on the source: views are leaves."""

from __future__ import annotations

import ast
import re
from pathlib import Path

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
    assert flat == ["__init__.py", "admin.py", "apps.py", "tasks.py", "urls.py"]


TEMPLATES = sorted((ROOT / "templates").rglob("*.html"))


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: str(p.relative_to(ROOT)))
def test_templates_hold_no_inline_script_or_style(path):
    """Code and styles live in static/ (a strict CSP can forbid inline ones); data may be JSON."""
    html = path.read_text()
    scripts = re.findall(r"<script\b([^>]*)>", html)
    assert [s for s in scripts if "src=" not in s and 'type="application/json"' not in s] == []
    assert "<style" not in html and not re.search(r"\sstyle=", html)
