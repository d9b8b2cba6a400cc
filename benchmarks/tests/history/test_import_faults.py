"""Imports under stress: huge uploads, two processes importing one file, a killed import."""

import os
import signal
import subprocess
import sys
import time

import orjson
import pytest
from django.conf import settings
from django.db import connection
from django.urls import reverse

from benchmarks.models import FileImport, RequestResult, Run
from benchmarks.tests.builders import flat

from ..real_parts import database_url_for_workers


def write_file(path, n_runs: int, per_run: int = 10) -> int:
    with path.open("wb") as fh:
        for r in range(n_runs):
            for i in range(per_run):
                fh.write(orjson.dumps(flat(run=f"big-{r}", tok_s=float(i))) + b"\n")
    return n_runs * per_run


def manage(*args: str) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": database_url_for_workers()}
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_its_session_to_end(timeout_s: float = 30) -> None:
    """On PostgreSQL a killed client's server session runs its statement on until it notices the
    client is gone, holding its locks; the test's own cleanup (and the flush after it) would wait on
    them, or deadlock. Wait until no other session uses the test database; end a session still there."""
    if connection.vendor != "postgresql":
        return  # SQLite: the killed process's locks died with it
    others = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    deadline = time.monotonic() + timeout_s
    with connection.cursor() as cursor:
        while True:
            cursor.execute(others)
            pids = [pid for (pid,) in cursor.fetchall()]
            if not pids:
                return
            if time.monotonic() > deadline:
                cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ANY(%s)", [pids])
                return
            time.sleep(0.1)


@pytest.mark.django_db
def test_a_one_gigabyte_upload_is_refused_before_its_body_is_read(user_client):
    response = user_client.post(
        reverse("import-upload"), data=b"", content_type="multipart/form-data; boundary=x", CONTENT_LENGTH=str(1 << 30)
    )
    assert response.status_code == 413 and "larger than the limit" in response.content.decode()
    assert FileImport.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_two_processes_importing_one_file_store_it_exactly_once(tmp_path):
    n = write_file(tmp_path / "same.jsonl", 300)
    procs = [manage("import_bench", str(tmp_path / "same.jsonl")) for _ in range(2)]
    outputs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert RequestResult.objects.count() == n and Run.objects.count() == 300
    imported = sorted(FileImport.objects.values_list("n_imported", "n_duplicate"))
    assert imported == [(0, n), (n, 0)]  # exactly one wins; the other finds every request stored


@pytest.mark.django_db(transaction=True)
def test_an_import_killed_midway_stores_nothing_of_it(tmp_path):
    n = write_file(tmp_path / "big.jsonl", 3000)
    started = time.monotonic()
    probe = manage("import_bench", str(tmp_path / "big.jsonl"))
    probe.communicate(timeout=300)
    full = time.monotonic() - started
    Run.objects.all().delete()
    FileImport.objects.all().delete()
    for fraction in (0.5, 0.8, 0.95):  # kill it while it parses, while it stores, near the end
        victim = manage("import_bench", str(tmp_path / "big.jsonl"))
        time.sleep(full * fraction)
        victim.send_signal(signal.SIGKILL)
        victim.communicate(timeout=30)  # reaps it and closes its pipes
        wait_for_its_session_to_end()
        stored = RequestResult.objects.count()
        assert stored in (0, n), f"killed at {fraction:.0%}: {stored} of {n} requests half-stored"
        assert Run.objects.count() in (0, 3000)
        Run.objects.all().delete()
        FileImport.objects.all().delete()


@pytest.mark.django_db(transaction=True)
def test_writers_in_several_processes_and_a_reader_never_see_a_locked_database(tmp_path, client):
    files = []
    for k in range(4):
        path = tmp_path / f"part-{k}.jsonl"
        with path.open("wb") as fh:
            for r in range(150):
                for i in range(10):
                    fh.write(orjson.dumps(flat(run=f"p{k}-{r}", tok_s=float(i))) + b"\n")
        files.append(path)
    procs = [manage("import_bench", str(path)) for path in files]
    pages = 0
    while any(p.poll() is None for p in procs):
        assert client.get(reverse("run-list")).status_code == 200  # the web keeps reading meanwhile
        pages += 1
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], outputs
    assert not any("database is locked" in err for _, err in outputs)
    assert Run.objects.count() == 600 and RequestResult.objects.count() == 6000 and pages > 0
