"""Figures computed once: a job's total of requests is one function, shown the same
before a worker claims the job and after; a tool summary's median is one function, the same on the
run's p50 column and in the run page's table of the tool's statistics."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from benchmarks.jobs import execution
from benchmarks.jobs.forms import JobForm
from benchmarks.jobs.lifecycle import submit_job, total_requests
from benchmarks.models import Job, Run, Server
from benchmarks.records.summaries import median_of
from benchmarks.tests.builders import jsonl

pytestmark = pytest.mark.django_db


def shown_total(client, job: Job) -> str:
    page = " ".join(client.get(reverse("job-detail", args=[job.pk])).content.decode().split())
    found = re.search(r"(\d+) of (\d+) done", page)
    assert found, "the job page shows no progress"
    return found.group(0)


def test_a_rate_sweeps_total_is_the_same_before_and_after_a_worker_claims_it(client):
    server = Server.objects.create(name="s", base_url="http://127.0.0.1:9")  # nothing listens: the probe fails
    form = JobForm(
        {
            "server": server.pk,
            "prompt_source": "synthetic",
            "prompt_tokens": 16,
            "n_predict": 8,
            "concurrency": 4,
            "requests": 3,
            "repeats": 2,
            "timeout_s": 5,
            "arrival": "poisson",
            "rates": "1, 2, 4",
        }
    )
    assert form.is_valid(), form.errors
    job = submit_job(server=server, label="sweep", params=form.params())  # queued: no worker has it yet
    assert total_requests(job.params) == 3 * 2 * 3
    assert shown_total(client, job) == "0 of 18 done"

    assert execution.execute_job(job.pk, worker="test") == Job.State.FAILED  # claimed, then the probe fails
    job.refresh_from_db()
    assert job.worker == "test" and "not reachable" in job.error
    assert shown_total(client, job) == "0 of 18 done"


def test_fixed_concurrency_counts_requests_times_repeats():
    assert total_requests({"requests": 5, "repeats": 3}) == 15
    assert total_requests({"requests": 5}) == 5
    assert total_requests({"requests": 5, "repeats": 2, "arrival": "constant", "rate": 2.0}) == 10


@pytest.mark.parametrize(
    ("stats", "median"),
    [
        ({"p50": 12.0, "median": 10.0}, 12.0),  # both: the p50, as the p95 beside it is
        ({"median": 10.0}, 10.0),  # vLLM's and SGLang's default files: median alone
        ({"p50": 12.0}, 12.0),
        ({"p50": None, "median": 10.0}, 10.0),  # a statistic that is not reported is no figure
        ({"mean": 3.0}, None),
        ({}, None),
    ],
)
def test_a_tool_summarys_median_is_its_p50_else_its_median(stats, median):
    assert median_of(stats) == median


def test_the_run_page_shows_the_tools_median_that_the_runs_p50_holds(client, import_bytes):
    """A summary whose median and p50 differ: the run's TTFT p50 and the page's median column agree."""
    summary = {
        "schema": "kvlab.bench/2",
        "run": {"id": "tool-run", "model": "m", "started_at": "2026-10-01T12:00:00Z", "tool": {"name": "guidellm"}},
        "summary": {
            "n_requests": 4,
            "n_ok": 4,
            "ttft_ms": {"mean": 150.0, "median": 140.0, "p50": 160.0, "p95": 300.0},
        },
    }
    result = import_bytes(jsonl(summary))
    assert result.status == "imported", result.error
    run = Run.objects.get(key="tool-run")
    assert run.ttft_p50 == pytest.approx(0.160)
    page = " ".join(client.get(reverse("run-detail", args=[run.pk])).content.decode().split())
    row = re.search(r"<tr><th>TTFT</th>(.*?)</tr>", page)
    assert row, "no TTFT row in the tool's statistics"
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))
    assert cells[:2] == ["150.0 ms", "160.0 ms"], cells  # mean, median: the p50 the run's column holds
