"""The sizing core stays pure: no module of sizing/ (its tests aside) imports the benchmark history.

What links a sizing to the history lives on the benchmarks side (benchmarks.run_sizing), which imports
sizing, never the reverse."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sizing.forms import SizingForm

SIZING = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for p in SIZING.rglob("*.py") if "tests" not in p.relative_to(SIZING).parts)


def imported_modules(path: Path, root: Path = SIZING) -> set[str]:
    """Every module a file of the package at `root` imports, at module level or inside a function,
    relative imports resolved."""
    package = (root.name, *path.relative_to(root).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            found.add(".".join([*base, *(node.module.split(".") if node.module else [])]))
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SIZING)))
def test_no_module_of_sizing_imports_benchmarks(path):
    assert sorted(m for m in imported_modules(path) if m.split(".")[0] == "benchmarks") == []


def test_the_check_sees_imports_inside_functions_and_relative_ones(tmp_path):
    root = tmp_path / "sizing"
    (root / "placement").mkdir(parents=True)
    module = root / "placement" / "nested.py"
    module.write_text(
        "from ..kv import ServerFlags\n"
        "def f():\n"
        "    from benchmarks.models import Run\n"
        "    import benchmarks.history.metrics\n"
    )
    assert imported_modules(module, root) == {"sizing.kv", "benchmarks.models", "benchmarks.history.metrics"}


def test_every_module_of_sizing_is_walked():
    names = {str(p.relative_to(SIZING)) for p in SOURCES}
    assert {"forms.py", "views.py", "page.py", "report.py", "placement/fit.py"} <= names
    assert not any(name.startswith("tests/") for name in names)


@pytest.mark.django_db
def test_the_sizing_form_alone_knows_no_run_and_asks_the_database_nothing(django_assert_num_queries):
    form = SizingForm({"model": "llama-3.1-8b", "ctx_size": "4096", "run": "1"})
    with django_assert_num_queries(0):
        assert not form.is_valid()
    assert form.errors["run"] == ["Run #1 does not exist or has no prompt sizes."]
