"""Exports are bounded for strangers and limited per client.

`GET /export.jsonl` with no filter streamed the whole history (2.4 GB for 4 minutes) to anyone, and
four at once starved `GET /`. Now a client streams at most KVLAB_EXPORTS_PER_CLIENT (2) exports at
once, counted across processes (kvlab.slots: a flock per slot), and an export without a login holds
at most KVLAB_ANONYMOUS_EXPORT_RUNS runs and KVLAB_ANONYMOUS_EXPORT_REQUESTS requests: past them,
a 403 that says why and links the login; past the concurrency, a 429 with Retry-After.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from django.core.signals import request_finished
from django.db import close_old_connections, connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.history.exporter import requests_at_most
from benchmarks.models import RequestResult, Run
from kvlab import slots

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def own_slots(settings, tmp_path):
    settings.KVLAB_SLOTS_DIR = tmp_path / "slots"  # not the shared var/ other test runs use


def lines_of(response) -> list[bytes]:
    return b"".join(response.streaming_content).splitlines()


def test_a_stranger_exporting_more_requests_than_the_bound_must_log_in(client, user_client, investigation, settings):
    settings.KVLAB_ANONYMOUS_EXPORT_REQUESTS = 5  # the demo holds 11
    response = client.get(reverse("export"))
    reason = response.content.decode()
    assert response.status_code == 403 and response["Content-Type"].startswith("text/plain")
    assert "This export holds more than 5 requests: an export that large needs a login" in reason
    assert "/accounts/login/?next=%2Fexport.jsonl" in reason and "narrow the filter" in reason
    assert len(lines_of(user_client.get(reverse("export")))) == 11  # a user exports it all


def test_a_stranger_exporting_more_runs_than_the_bound_is_refused(client, investigation, settings):
    settings.KVLAB_ANONYMOUS_EXPORT_RUNS = 3  # the demo holds 6
    response = client.get(reverse("export"))
    assert response.status_code == 403 and "This export holds more than 3 runs" in response.content.decode()
    assert len(lines_of(client.get(reverse("export"), {"label": "C2"}))) == 4  # narrowed: within the bound


def test_a_single_runs_export_is_bounded_too(client, investigation, settings):
    settings.KVLAB_ANONYMOUS_EXPORT_REQUESTS = 2
    run = Run.objects.get(key="c2-x3")  # 3 requests
    assert client.get(reverse("run-export", args=[run.pk])).status_code == 403
    settings.KVLAB_ANONYMOUS_EXPORT_REQUESTS = 3
    assert len(lines_of(client.get(reverse("run-export", args=[run.pk])))) == 3


def test_counting_a_strangers_export_reads_no_more_than_the_bound(investigation):
    ids = list(Run.objects.values_list("pk", flat=True))
    assert requests_at_most(ids, 4) == 5 and requests_at_most(ids, 100) == RequestResult.objects.count() == 11
    with CaptureQueriesContext(connection) as queries:
        requests_at_most(ids, 4)
    assert len(queries) == 1 and "LIMIT 5" in queries[0]["sql"]


def test_a_client_streams_at_most_two_exports_at_once(client, investigation):
    first, second = client.get(reverse("export")), client.get(reverse("export"))
    assert first.status_code == second.status_code == 200  # both still streaming: nothing read yet
    third = client.get(reverse("export"))
    assert third.status_code == 429 and third["Retry-After"] == "30"
    assert "2 exports from your address are already streaming" in third.content.decode()
    other = client.get(reverse("export"), REMOTE_ADDR="10.9.8.7")  # another client is not held up
    assert other.status_code == 200 and len(lines_of(other)) == 11
    assert len(lines_of(first)) == 11  # streamed out: its slot is free again
    assert client.get(reverse("export")).status_code == 200


def test_a_slot_is_freed_when_the_client_goes_away_before_reading(client, investigation):
    held = [client.get(reverse("export")) for _ in range(2)]
    assert client.get(reverse("export")).status_code == 429
    request_finished.disconnect(close_old_connections)  # as the test client does: the test's database stays
    try:
        held[0].close()  # what the server does when the connection drops, the lines unread
    finally:
        request_finished.connect(close_old_connections)
    assert client.get(reverse("export")).status_code == 200


HOLDER = """
import fcntl, os, sys, time
fds = []
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    fds.append(fd)
print("held", flush=True)
time.sleep(30)
"""


def test_the_limit_holds_across_processes_and_ends_with_the_holder(client, investigation, settings):
    """Another web process holding this client's slots (gunicorn runs several) leaves it none here; once
    that process is gone (even killed), its slots are free, with nothing to expire."""
    paths = [slots.slot_file("export", "127.0.0.1", slot) for slot in range(2)]
    paths[0].parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, *map(str, paths)], stdout=subprocess.PIPE, text=True
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        assert client.get(reverse("export")).status_code == 429
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    deadline = time.monotonic() + 5
    while client.get(reverse("export")).status_code != 200:
        assert time.monotonic() < deadline
