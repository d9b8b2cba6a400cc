"""The job index holds only the runs that have a job (run_job_idx): an import's runs, which
have none, pay no entry in it, and a job's runs are still found down it (bench/run_index_use.py lists what
uses each index of the runs table)."""

from __future__ import annotations

import pytest
from django.db import connection

from benchmarks.models import Job, Run, Server

pytestmark = pytest.mark.django_db


def _plan(sql: str, params: object) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        return [str(row[-1]) for row in cursor.fetchall()]


def _run_indexes() -> dict[str, str]:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'benchmarks_run'")
        else:
            cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'benchmarks_run'")
        return {name: sql or "" for name, sql in cursor.fetchall()}


def test_only_runs_with_a_job_are_in_the_job_index():
    indexes = _run_indexes()
    job_indexes = {name: sql for name, sql in indexes.items() if "job_id" in sql}
    assert list(job_indexes) == ["run_job_idx"], indexes  # the foreign key's own index is gone
    assert "WHERE" in job_indexes["run_job_idx"] and "IS NOT NULL" in job_indexes["run_job_idx"]


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's plan")
def test_a_jobs_runs_are_still_found_down_the_job_index():
    server = Server.objects.create(name="gpu", base_url="http://127.0.0.1:8080")
    job = Job.objects.create(server=server, params={})
    Run.objects.create(key="with-job", model="m.gguf", job=job)
    Run.objects.create(key="imported", model="m.gguf")
    page = job.runs.only("pk", "key").order_by("pk")  # the job page's
    sql, params = page.query.sql_with_params()
    assert any("USING INDEX run_job_idx (job_id=?)" in step for step in _plan(sql, params)), _plan(sql, params)
    assert list(page.values_list("key", flat=True)) == ["with-job"]
    # a job's deletion sets its runs' job to NULL, found down the same index
    update = 'UPDATE "benchmarks_run" SET "job_id" = NULL WHERE "benchmarks_run"."job_id" IN (%s)'
    assert any("run_job_idx" in step for step in _plan(update, [job.pk])), _plan(update, [job.pk])
    job.delete()
    assert Run.objects.filter(job__isnull=False).count() == 0 and Run.objects.count() == 2
