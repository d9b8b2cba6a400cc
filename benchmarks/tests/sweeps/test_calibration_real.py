"""Calibrating a host against real parts: a real Celery worker on a real Redis runs the real llama-bench built
beside llama-server on a tiny generated model, and its results become llama-bench runs in the history."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from benchmarks.models import FileImport, HostCalibration, LaunchHost, Run
from benchmarks.sweeps import demo as demo_sweep
from benchmarks.templatetags.units import tok_s

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.llama_server]


@pytest.fixture
def launch_env(llama_server_binary, llama_bench_binary, monkeypatch) -> datetime:
    """The settings of the worker the test starts: the built llama-server (llama-bench beside it) and var/models."""
    assert llama_bench_binary.parent == llama_server_binary.parent, "llama-bench is built beside llama-server"
    demo_sweep.ensure_demo_model()
    monkeypatch.setenv("KVLAB_LAUNCH_BINARIES", str(llama_server_binary))
    monkeypatch.setenv("KVLAB_LAUNCH_MODELS_DIRS", str(demo_sweep.demo_models_dir()))
    return timezone.now()


@pytest.fixture
def host(launch_env, worker) -> LaunchHost:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = demo_sweep.demo_host()
        if found is not None and found.announced_at >= launch_env:
            return found
        time.sleep(0.2)
    pytest.fail("no worker announced the demo model")


def wait(calibration_pk: int, timeout: float = 240) -> HostCalibration:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c = HostCalibration.objects.get(pk=calibration_pk)
        if c.finished:
            return c
        time.sleep(0.3)
    pytest.fail(f"calibration {calibration_pk} still {HostCalibration.objects.get(pk=calibration_pk).state}")


def test_calibrating_a_host_runs_llama_bench_through_the_worker_and_stores_its_runs(host):
    client = Client()
    client.force_login(User.objects.create_user("ops", password="a-long-test-password", is_staff=True))
    form = {"model_file": demo_sweep.DEMO_MODEL, "binary": "", "n_prompt": 64, "n_gen": 16, "n_gpu_layers": 0,
            "repetitions": 2}  # fmt: skip
    response = client.post(reverse("host-calibrate", args=[host.pk]), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    c = wait(HostCalibration.objects.get().pk)
    assert c.state == "succeeded", (c.error, c.output_tail[-1500:])
    assert c.worker and c.command.startswith(str(host.binaries[0]).rsplit("/", 1)[0] + "/llama-bench -m ")
    assert " -p 64 -n 16 -ngl 0 -r 2 -o jsonl" in c.command
    imported = c.file_import
    assert (imported.status, imported.origin, imported.format) == ("imported", "calibration", "llama-bench")
    runs = {r.label: r for r in Run.objects.filter(first_import=c.file_import)}
    assert set(runs) == {"pp64", "tg16"}
    for run in runs.values():
        assert (run.tool, run.engine, run.model) == ("llama-bench", "llama.cpp", demo_sweep.DEMO_MODEL)
        assert run.n_requests == 2
        assert run.summary["total_tok_s"] > 0  # llama-bench's avg_ts: the prompt's rate for pp, else the output's
        assert "-ngl 0" in run.server_flags
        assert run.requests.count() == 2  # one record per repetition
    # the page shows what ran and what it found, with the runs' own rates
    page = client.get(reverse("calibration-detail", args=[c.pk])).content.decode()
    assert "completed" in page and "pp64" in page and "tg16" in page
    assert reverse("run-detail", args=[runs["tg16"].pk]) in page
    assert runs["tg16"].tok_s_mean == pytest.approx(runs["tg16"].summary["total_tok_s"], rel=0.05)
    assert all(tok_s(run.summary["total_tok_s"]) in page for run in runs.values())
    assert "prompt processing" in page and "generation" in page
    assert FileImport.objects.filter(origin="calibration").count() == 1
