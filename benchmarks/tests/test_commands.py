import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from benchmarks.models import FileImport, RequestResult, Run

from .conftest import DEMO_PATH, flat, jsonl

pytestmark = pytest.mark.django_db


def run_command(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_import_bench_reports_the_counts(tmp_path):
    out, _ = run_command("import_bench", str(DEMO_PATH))
    assert "read 11, imported 11, duplicate 0, rejected 0 (6 runs)" in out
    out, _ = run_command("import_bench", str(DEMO_PATH))
    assert "read 11, imported 0, duplicate 11, rejected 0" in out


def test_import_bench_fails_with_each_reason_and_keeps_the_clean_files(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(jsonl(flat(run="from-bad"), b"{", flat(run="x", prompt_tokens=-3)))
    err = StringIO()
    with pytest.raises(CommandError, match=r"1 of 2 file\(s\) rejected"):
        call_command("import_bench", str(bad), str(DEMO_PATH), stdout=StringIO(), stderr=err)
    assert "line 2: invalid JSON" in err.getvalue()
    assert "line 3: 'prompt_tokens' must not be negative, got -3" in err.getvalue()
    assert not Run.objects.filter(key__in=["from-bad", "x"]).exists()
    assert Run.objects.count() == 6  # the demo file, imported on its own


def test_import_bench_if_new_skips_a_file_imported_before():
    run_command("import_bench", "--if-new", "--demo", str(DEMO_PATH))
    out, _ = run_command("import_bench", "--if-new", "--demo", str(DEMO_PATH))
    assert "imported before, skipped" in out
    assert FileImport.objects.count() == 1 and FileImport.objects.get().origin == "demo"


def test_import_bench_names_a_missing_file(tmp_path):
    with pytest.raises(CommandError, match="No such file or directory"):
        run_command("import_bench", str(tmp_path / "nope.jsonl"))


def test_export_bench_writes_a_file_that_reimports_to_the_same_runs(tmp_path, demo_import):
    target = tmp_path / "out.jsonl"
    _, err = run_command("export_bench", "--out", str(target))
    assert "wrote 11 records of 6 runs" in err
    RequestResult.objects.all().delete()
    Run.objects.all().delete()
    out, _ = run_command("import_bench", str(target))
    assert "imported 11" in out and Run.objects.count() == 6


def test_export_bench_can_select_runs(tmp_path, demo_import):
    target = tmp_path / "c2.jsonl"
    run_command("export_bench", "--out", str(target), "--run", "c2-x3")
    assert len(target.read_bytes().splitlines()) == 3
    with pytest.raises(CommandError, match="unknown run id"):
        run_command("export_bench", "--run", "nope")


def manage(*args: str, var_dir: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "KVLAB_VAR_DIR": str(var_dir)}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env=env,
        input=stdin,
        capture_output=True,
        timeout=120,
    )


def test_the_commands_exit_0_on_a_clean_file_and_1_on_a_rejected_one(tmp_path):
    assert manage("migrate", "-v0", var_dir=tmp_path).returncode == 0
    clean = manage("import_bench", str(DEMO_PATH), var_dir=tmp_path)
    assert clean.returncode == 0, clean.stderr
    rejected = manage("import_bench", "-", var_dir=tmp_path, stdin=jsonl(flat(), b"[1]"))
    assert rejected.returncode == 1
    assert b"line 2: a line must hold a JSON object, not an array" in rejected.stderr
    exported = manage("export_bench", var_dir=tmp_path)
    assert exported.returncode == 0 and len(exported.stdout.splitlines()) == 11
