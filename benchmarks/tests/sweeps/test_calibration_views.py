"""A host's calibration, without a worker: staff only, bounded, and never left running."""

from __future__ import annotations

import shutil
from datetime import timedelta

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from benchmarks.models import HostCalibration
from benchmarks.sweeps import calibration, lifecycle, worker_host
from benchmarks.tests.builders import announced_host

pytestmark = pytest.mark.django_db


@pytest.fixture
def host(tmp_path):
    return announced_host("gpu-1", tmp_path, ("tiny.gguf",))


def data(**overrides):
    return {"model_file": "tiny.gguf", "binary": "", "n_prompt": 64, "n_gen": 16, "n_gpu_layers": 0,
            "repetitions": 2, **overrides}  # fmt: skip


def running(host, **fields) -> HostCalibration:
    c = HostCalibration.objects.create(host=host, model_file="tiny.gguf", params=data(), **fields)
    assert HostCalibration.claim(c.pk, "w@test")
    c.refresh_from_db()
    return c


def test_calibration_is_for_staff_only(client, user_client, host):
    url = reverse("host-calibrate", args=[host.pk])
    for c in (client, user_client):
        assert c.get(url).status_code == 302
        assert c.post(url, data()).status_code == 302
    done = HostCalibration.objects.create(host=host, model_file="tiny.gguf", params=data())
    assert user_client.get(reverse("calibration-detail", args=[done.pk])).status_code == 302
    assert user_client.post(reverse("calibration-cancel", args=[done.pk])).status_code == 302
    assert HostCalibration.objects.filter(cancel_requested=True).count() == 0
    assert HostCalibration.objects.count() == 1


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"model_file": "other.gguf"}, "model_file", "other.gguf is not one of the available choices"),
        ({"model_file": "../../etc/passwd"}, "model_file", "not one of the available choices"),
        ({"binary": "/bin/sh"}, "binary", "/bin/sh is not one of the available choices"),
        ({"n_prompt": 10**12}, "n_prompt", "less than or equal to 16384"),
        ({"n_gen": 0}, "n_gen", "greater than or equal to 1"),
        ({"repetitions": 1000}, "repetitions", "less than or equal to 10"),
        ({"n_gpu_layers": -1}, "n_gpu_layers", "greater than or equal to 0"),
    ],
)
def test_the_form_refuses_what_the_host_did_not_announce_and_sizes_past_its_bounds(
    staff_client, host, overrides, field, message
):
    response = staff_client.post(reverse("host-calibrate", args=[host.pk]), data(**overrides))
    assert response.status_code == 400
    errors = " ".join(response.context["form"].errors[field])
    assert message in errors.replace("\u201c", "").replace("\u201d", "").replace("Select a valid choice. ", "")
    assert HostCalibration.objects.count() == 0


def test_the_form_shows_the_hosts_announced_models_and_the_bounds(staff_client, host):
    page = staff_client.get(reverse("host-calibrate", args=[host.pk])).content.decode()
    assert '<option value="tiny.gguf">tiny.gguf</option>' in page
    assert 'name="n_prompt" value="512"' in page and 'max="16384"' in page
    assert "scripts/build-llama-server.sh --bench" in page
    listing = staff_client.get(reverse("host-list")).content.decode()
    assert reverse("host-calibrate", args=[host.pk]) in listing


def test_no_worker_means_no_calibration_is_stored(staff_client, host, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    from benchmarks.jobs import lifecycle as job_lifecycle

    problem = job_lifecycle.worker_available()
    if not problem:
        pytest.skip("a worker answers on this machine's broker")
    response = staff_client.post(reverse("host-calibrate", args=[host.pk]), data())
    assert response.status_code == 503 and problem in response.content.decode()
    assert HostCalibration.objects.count() == 0


def test_a_llama_bench_missing_beside_the_server_is_a_clear_reason(tmp_path):
    with pytest.raises(worker_host.NotLaunchable) as refused:
        calibration.bench_beside("/opt/nowhere/llama-server")
    assert "no usable llama-bench beside /opt/nowhere/llama-server" in str(refused.value)
    assert "scripts/build-llama-server.sh --bench" in str(refused.value)


def test_a_failing_llama_bench_fails_the_calibration_with_its_last_words(host, llama_bench_binary):
    c = running(host)
    command = [str(llama_bench_binary), "-m", "/nonexistent/model.gguf", "-p", "8", "-n", "4", "-r", "1"]
    assert calibration._run(c, command) == HostCalibration.State.FAILED
    c.refresh_from_db()
    assert c.state == "failed" and c.finished_at is not None
    assert c.error.startswith("llama-bench exited with status 1:"), c.error
    assert "/nonexistent/model.gguf" in c.output_tail
    assert c.file_import is None


def test_a_cancel_stops_llama_bench_and_the_deadline_fails_it(host):
    sleeper = shutil.which("sleep")
    assert sleeper
    c = running(host)
    HostCalibration.cancel(c.pk)
    started = timezone.now()
    assert calibration._run(c, [sleeper, "60"]) == HostCalibration.State.CANCELLED
    assert timezone.now() - started < timedelta(seconds=20)
    c.refresh_from_db()
    assert (c.state, c.error) == ("cancelled", "cancelled by a user while llama-bench ran")
    late = running(host)
    with override_settings(KVLAB_CALIBRATION_TIMEOUT_S=0):
        assert calibration._run(late, [sleeper, "60"]) == HostCalibration.State.FAILED
    late.refresh_from_db()
    assert late.error == "llama-bench ran past the 0 s deadline"


def test_a_calibration_whose_worker_was_lost_is_reaped(host):
    c = running(host)
    HostCalibration.objects.filter(pk=c.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=10))
    fresh = running(host)
    assert lifecycle.reap_stale_calibrations(max_silence_s=60) == [c.pk]
    c.refresh_from_db()
    fresh.refresh_from_db()
    assert c.state == "failed" and "stopped sending heartbeats" in c.error
    assert fresh.state == "running"


def test_a_calibration_for_another_host_is_refused_by_the_worker_that_got_it(tmp_path, monkeypatch):
    other = announced_host("not-this-machine", tmp_path, ("tiny.gguf",))
    c = HostCalibration.objects.create(host=other, model_file="tiny.gguf", params=data())
    assert calibration.run_calibration(c.pk, "w@test") == HostCalibration.State.FAILED
    c.refresh_from_db()
    assert c.error.startswith("not launchable here: the calibration is for host not-this-machine")
    assert calibration.run_calibration(c.pk, "w@test") == "failed"  # redelivered: nothing runs twice
