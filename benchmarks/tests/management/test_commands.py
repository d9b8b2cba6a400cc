import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from benchmarks.management.commands.import_bench import Command as ImportBench
from benchmarks.models import FileImport, RequestResult, Run
from benchmarks.tests.builders import DEMO_PATH, announced_host, flat, jsonl

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
    with pytest.raises(CommandError, match=r"1 of 2 input\(s\) rejected"):
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


def test_import_bench_demo_says_what_it_does_in_its_help():
    parser = ImportBench().create_parser("manage.py", "import_bench")
    (demo,) = [action for action in parser._actions if "--demo" in action.option_strings]
    assert demo.help == (
        "record the files as the demo data: their origin on /imports/ reads Demo (as make run imports it)"
    )


def test_import_bench_names_a_missing_file(tmp_path):
    with pytest.raises(CommandError, match="No such file or directory"):
        run_command("import_bench", str(tmp_path / "nope.jsonl"))


def test_export_bench_writes_a_file_that_reimports_to_the_same_runs(tmp_path, investigation):
    target = tmp_path / "out.jsonl"
    _, err = run_command("export_bench", "--out", str(target))
    assert "wrote 11 records of 6 runs" in err
    RequestResult.objects.all().delete()
    Run.objects.all().delete()
    out, _ = run_command("import_bench", str(target))
    assert "imported 11" in out and Run.objects.count() == 6


def test_export_bench_can_select_runs(tmp_path, investigation):
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


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "--concurrency: Ensure this value is greater than or equal to 1."),
        (["--concurrency", "257"], "--concurrency: Ensure this value is less than or equal to 256."),
        (["--requests", "many"], "--requests: Enter a whole number."),
        (["--timeout", "0"], "--timeout: Ensure this value is greater than or equal to 1."),
        (["--n-predict", "2000000"], "--n-predict: Ensure this value is less than or equal to 1048576."),
    ],
)
def test_bench_checks_its_options_with_the_job_form(args, message):
    with pytest.raises(CommandError) as raised:
        run_command("bench", "--server", "http://127.0.0.1:8080", "--prompt-tokens", "10", *args)
    assert message in str(raised.value)
    from benchmarks.models import Job, Server

    assert Job.objects.count() == 0 and Server.objects.count() == 0  # nothing submitted, nothing registered


def test_bench_refuses_an_unknown_server_name_and_a_forbidden_address():
    with pytest.raises(CommandError, match=r"--server: no server is registered as 'gpu-box'"):
        run_command("bench", "--server", "gpu-box", "--prompt-tokens", "10")
    with pytest.raises(CommandError, match=r"--server: .*10\.1\.2\.3"):
        run_command("bench", "--server", "http://10.1.2.3:8080", "--prompt-tokens", "10")


def test_bench_refuses_a_prompt_file_the_form_refuses(tmp_path):
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "a"}\n{"text": "b"}\n')
    with pytest.raises(CommandError, match='Line 2 of the prompt file has no "prompt" string'):
        run_command("bench", "--server", "http://127.0.0.1:8080", "--prompt-file", str(bad))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "1,2,999"], "--concurrency: Give 1 to 12 concurrencies from 1 to 256."),
        (["--requests", "0"], "--requests: Ensure this value is greater than or equal to 1."),
        (["--prompt-tokens", "0"], "--prompt-tokens: Ensure this value is greater than or equal to 1."),
        (["--prefer", "cheapest"], "--prefer: Select a valid choice."),
        (["--host", "nowhere"], "--host: no launch host of that name has been announced by a worker"),
        (["--flags", "-c 1024; rm -rf /"], "--flags: Flag set 2:"),
    ],
)
def test_sweep_checks_its_options_with_the_sweep_form(tmp_path, args, message):
    from benchmarks.models import Sweep

    announced_host("h", tmp_path)
    options = {"--host": "h", "--model": "m.gguf"}
    options.update(dict(zip(args[::2], args[1::2], strict=True)))
    argv = [part for pair in options.items() for part in pair if pair[0] != "--flags"]
    with pytest.raises(CommandError) as raised:
        run_command(
            "sweep", *argv, "--flags", "-c 1024", *(["--flags", options["--flags"]] if "--flags" in options else [])
        )
    assert message in str(raised.value)
    assert Sweep.objects.count() == 0


def test_import_bench_prints_a_converters_reason_once_naming_its_file(tmp_path):
    """An error that ends a conversion (here AIPerf records without their model) is the input's, not record 1's."""
    from ..history.failed_run_files import aiperf_artifacts

    jsonl_path = aiperf_artifacts(tmp_path / "run", inputs=False) / "profile_export.jsonl"
    err = StringIO()
    with pytest.raises(CommandError, match=r"1 of 1 input\(s\) rejected"):
        call_command("import_bench", str(jsonl_path), stdout=StringIO(), stderr=err)
    (reason,) = [line.strip() for line in err.getvalue().splitlines()[1:]]
    assert reason.startswith(f"{jsonl_path} (aiperf): no model: AIPerf names the model in")
    assert "record 1" not in reason and reason.count(str(jsonl_path)) == 1
