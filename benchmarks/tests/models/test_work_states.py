"""Jobs and sweeps share one state machine of conditional UPDATEs (models/work.py)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, User

from benchmarks.models import Job, LaunchHost, Server, Sweep

pytestmark = pytest.mark.django_db


@pytest.fixture(params=["job", "sweep"])
def work(request, tmp_path):
    if request.param == "job":
        server = Server.objects.create(name="s", base_url="http://127.0.0.1:9")
        return Job.objects.create(server=server, base_url=server.base_url, params={"requests": 1})
    host = LaunchHost.objects.create(name="h", binaries=["/x"], models_dirs=[str(tmp_path)])
    return Sweep.objects.create(host=host, model_file="m.gguf", params={})


def state_of(work):
    work.refresh_from_db()
    return work.state


def test_a_queued_one_is_claimed_once(work):
    model = type(work)
    assert model.claim(work.pk, "w1") is True
    assert model.claim(work.pk, "w2") is False  # a redelivered task cannot run it twice
    work.refresh_from_db()
    assert (work.state, work.worker) == ("running", "w1") and work.heartbeat_at is not None


def test_it_finishes_once_and_only_from_running(work):
    model = type(work)
    assert model.finish(work.pk, "succeeded") is False  # still queued
    model.claim(work.pk, "w")
    assert model.finish(work.pk, "failed", "x" * 6000) is True
    assert model.finish(work.pk, "succeeded") is False
    work.refresh_from_db()
    assert (work.state, len(work.error)) == ("failed", 5000) and work.finished_at is not None


def test_cancelling_a_queued_one_ends_it_and_it_can_no_longer_be_claimed(work):
    model = type(work)
    assert model.cancel(work.pk) == "cancelled"
    assert state_of(work) == "cancelled" and work.error == "cancelled before it ran"
    assert model.claim(work.pk, "w") is False
    assert model.cancel(work.pk) == "finished"


def test_cancelling_a_running_one_asks_its_worker(work):
    model = type(work)
    model.claim(work.pk, "w")
    assert model.cancel(work.pk) == "requested"
    assert state_of(work) == "running" and work.cancel_requested
    assert model.beat_and_cancel_requested(work.pk) is True  # the worker sees it at its next heartbeat


def test_the_reaper_fails_it_only_if_its_heartbeat_has_not_moved(work):
    model = type(work)
    model.claim(work.pk, "w")
    seen = model.objects.get(pk=work.pk).heartbeat_at
    model.beat_and_cancel_requested(work.pk)
    assert model.fail_silent(work.pk, seen, "lost") is False  # it beat since the reaper looked
    now = model.objects.get(pk=work.pk).heartbeat_at
    assert model.fail_silent(work.pk, now, "lost") is True
    assert state_of(work) == "failed" and work.error == "lost"


def test_cancelling_a_running_sweep_asks_its_running_job_too(tmp_path):
    host = LaunchHost.objects.create(name="h", binaries=["/x"], models_dirs=[str(tmp_path)])
    sweep = Sweep.objects.create(host=host, model_file="m.gguf", params={})
    config = sweep.configs.create(position=0, command="-c 512")
    job = Job.objects.create(base_url="http://127.0.0.1:9", params={}, sweep_config=config, state="running")
    Sweep.claim(sweep.pk, "w")
    assert Sweep.cancel(sweep.pk) == "requested"
    job.refresh_from_db()
    assert job.cancel_requested and job.server is None


def test_only_the_creator_or_staff_may_cancel(work):
    ana = User.objects.create_user("ana", password="a-long-test-password")
    bob = User.objects.create_user("bob", password="a-long-test-password")
    root = User.objects.create_user("root", password="a-long-test-password", is_staff=True)
    work.created_by = ana
    assert (work.may_cancel(ana), work.may_cancel(bob), work.may_cancel(root)) == (True, False, True)
    assert work.may_cancel(AnonymousUser()) is False
    work.created_by = None  # submitted from the command line
    assert (work.may_cancel(ana), work.may_cancel(root)) == (False, True)
