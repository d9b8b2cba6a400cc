"""Sweeps against real parts: kvlab launches a real llama-server per flag set on a tiny
model, through a real Celery worker on a real Redis."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from datetime import datetime
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from benchmarks.jobs.forms import JobForm
from benchmarks.models import CalibrationPoint, Job, LaunchHost, RequestResult, Run, Server, Sweep, SweepConfig
from benchmarks.sweeps import demo as demo_sweep
from benchmarks.sweeps.lifecycle import create_sweep
from kvlab.tests.processes import stop_process
from sizing.server_log import mib

from ..real_parts import start_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.llama_server]


def servers_running(model: Path) -> list[str]:
    out = subprocess.run(["pgrep", "-af", "llama-server"], capture_output=True, text=True, check=False).stdout
    return [line for line in out.splitlines() if str(model) in line]


def wait_sweep(sweep: Sweep, timeout: float = 240) -> Sweep:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sweep.refresh_from_db()
        if sweep.finished:
            return sweep
        time.sleep(0.3)
    pytest.fail(f"sweep {sweep.pk} still {sweep.state}")


@pytest.fixture
def launch_env(llama_server_binary, monkeypatch) -> datetime:
    """The launch settings of the workers this test starts: the built llama-server and var/models."""
    monkeypatch.setenv("KVLAB_LAUNCH_BINARIES", str(llama_server_binary))
    monkeypatch.setenv("KVLAB_LAUNCH_MODELS_DIRS", str(demo_sweep.demo_models_dir()))
    return timezone.now()


def announced(since: datetime, timeout: float = 30) -> LaunchHost:
    """The demo host as a worker started after `since` announced it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        host = demo_sweep.demo_host()
        if host is not None and host.announced_at >= since:
            return host
        time.sleep(0.2)
    pytest.fail("no worker announced the demo model")


@pytest.fixture
def demo_host(launch_env, worker) -> LaunchHost:  # noqa: F811
    return announced(launch_env)


def test_a_worker_announces_only_what_its_own_settings_allow(launch_env, llama_server_binary, broker, monkeypatch):  # noqa: F811
    script = Path(tempfile.mkdtemp()) / "llama-server"  # under /tmp: anyone may replace it
    script.write_text("#!/bin/sh\nexec /bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setenv("KVLAB_LAUNCH_BINARIES", f"{llama_server_binary}:{script}:relative/llama-server")
    monkeypatch.setenv("KVLAB_LAUNCH_MODELS_DIRS", f"{demo_sweep.demo_models_dir()}:/")
    proc = start_worker(broker, f"announce-{os.getpid()}@test")
    try:
        host = announced(launch_env)
    finally:
        stop_process(proc, timeout=20)
    assert host.binaries == [str(llama_server_binary)]
    assert host.models_dirs == [str(demo_sweep.demo_models_dir().resolve())]
    assert (host.bind_address, host.queue, host.worker) == ("127.0.0.1", "kvlab", f"announce-{os.getpid()}@test")
    assert demo_sweep.DEMO_MODEL in host.model_files
    problems = " | ".join(host.problems)
    assert f"{script.parent} is writable by other users" in problems or "/tmp is writable" in problems, problems
    assert "'relative/llama-server': not an absolute path" in problems
    assert "model directory /: a system directory" in problems


def test_new_models_show_when_staff_ask_the_workers_to_announce(demo_host, worker):  # noqa: F811
    extra = demo_sweep.demo_models_dir() / "kvlab-test-added.gguf"
    extra.write_bytes(b"GGUF")
    try:
        assert "kvlab-test-added.gguf" not in demo_host.model_files
        staff = Client()
        staff.force_login(User.objects.create_user("ops", password="a-long-test-password", is_staff=True))
        page = staff.post(reverse("host-refresh"), follow=True).content.decode()
        assert "1 worker announced again." in page
        demo_host.refresh_from_db()
        assert "kvlab-test-added.gguf" in demo_host.model_files
    finally:
        extra.unlink()


def test_the_demo_sweep_reproduces_the_investigation_and_its_predictions(demo_host, worker, tmp_path):  # noqa: F811
    out = StringIO()
    call_command("sweep", "--demo", "--wait", "--json", stdout=out)
    summary = json.loads(out.getvalue())
    assert summary["state"] == "succeeded", summary
    default, per_slot, q8 = summary["configs"]
    # predicted before it ran, then measured
    assert (default["predicted"], default["outcome"], default["ok"], default["total"]) == ("pool_overflow", "ran", 0, 3)
    assert (per_slot["predicted"], per_slot["ok"], per_slot["total"], per_slot["n_ctx_slot"]) == ("ok", 3, 3, 768)
    assert (q8["predicted"], q8["ok"], q8["total"], q8["n_ctx_slot"]) == ("ok", 3, 3, 1024)
    assert per_slot["best"] or q8["best"]
    for config in SweepConfig.objects.filter(sweep_id=summary["sweep"]):
        # every cache line the server printed equals kvlab's prediction
        predicted = [
            (c["cells"], c["layers"], mib(c["k_bytes"]), mib(c["v_bytes"])) for c in config.predicted["caches"]
        ]
        reported = [(k["cells"], k["layers"], k["k_mib"], k["v_mib"]) for k in config.reported["kv"]]
        assert predicted == reported, config.command
    failed = Job.objects.get(sweep_config__sweep_id=summary["sweep"], sweep_config__position=0).runs.get()
    assert set(failed.requests.values_list("http_status", "error_type")) == {(500, "context_exceeded")}
    assert CalibrationPoint.objects.filter(config__sweep_id=summary["sweep"]).count() == 3
    assert servers_running(demo_sweep.demo_models_dir() / demo_sweep.DEMO_MODEL) == []
    # the sweep's jobs record the address they measured; the server registry stays a person's
    jobs = Job.objects.filter(sweep_config__sweep_id=summary["sweep"])
    assert jobs.count() == 3 and not jobs.exclude(server=None).exists()
    assert all(url.startswith("http://127.0.0.1:") for url in jobs.values_list("base_url", flat=True))
    assert Server.objects.count() == 0 and list(JobForm().fields["server"].queryset) == []
    staff = Client()
    staff.force_login(User.objects.create_user("root", password="a-long-test-password", is_staff=True))
    page = staff.get(reverse("server-list")).content.decode()
    assert "No server registered yet." in page and "<tbody>" not in page
    # its export, imported into the same database, adds nothing, twice (once, each round added
    # the sweep's 9 requests again, and the home page showed 6/6 for a 3/3 row)
    counts = sorted(Run.objects.values_list("key", "n_requests", "n_ok", "throughput_tok_s"))
    requests = RequestResult.objects.count()
    for schema in ("kvlab.bench/2", "kvlab.bench/1"):
        call_command("export_bench", "--schema", schema, "--out", str(tmp_path / "e.jsonl"), stderr=StringIO())
        out = StringIO()
        call_command("import_bench", "--json", str(tmp_path / "e.jsonl"), stdout=out)
        result = json.loads(out.getvalue())
        assert (result["status"], result["runs"], result["requests"]) == ("duplicate", 0, 0), result
    assert (sorted(Run.objects.values_list("key", "n_requests", "n_ok", "throughput_tok_s")), requests) == (
        counts,
        RequestResult.objects.count(),
    )


def test_flag_sets_that_cannot_start_are_recorded_as_such(demo_host, worker):  # noqa: F811
    sweep = create_sweep(
        demo_host,
        demo_sweep.DEMO_MODEL,
        ["-c 1024 -np 1 -ctv q8_0 -fa off", "-c 512 -np 1"],
        {"prompt_tokens": 20, "n_predict": 5, "concurrencies": [1], "requests": 1, "repeats": 1, "timeout_s": 60},
    )
    sweep = wait_sweep(sweep)
    invalid, fine = sweep.configs.order_by("position")
    assert invalid.outcome == "failed_to_start" and "quantized V cache requires flash_attn" in invalid.log_tail
    assert invalid.predicted["errors"] and "needs flash attention" in invalid.predicted["errors"][0]
    assert fine.outcome == "ran" and sweep.state == "succeeded"

    missing = create_sweep(demo_host, "no-such-model.gguf", ["-c 512"], sweep.params)
    missing = wait_sweep(missing)
    assert missing.state == "failed" and "does not exist" in missing.error
    assert missing.configs.get().outcome == "cancelled"


def test_cancelling_mid_sweep_leaves_no_llama_server_behind(demo_host, worker):  # noqa: F811
    staff = User.objects.create_user("ops", password="a-long-test-password", is_staff=True)
    client = Client()
    client.force_login(staff)
    params = {
        "prompt_tokens": 50,
        "n_predict": 400,
        "concurrencies": [1],
        "requests": 40,
        "repeats": 1,
        "timeout_s": 60,
    }
    sweep = create_sweep(demo_host, demo_sweep.DEMO_MODEL, ["-c 2048 -np 1", "-c 1024 -np 1"], params)
    deadline = time.monotonic() + 120
    while not Job.objects.filter(sweep_config__sweep=sweep, n_done__gte=1).exists():
        assert time.monotonic() < deadline, "the sweep never got going"
        time.sleep(0.2)
    assert servers_running(demo_sweep.demo_models_dir() / demo_sweep.DEMO_MODEL)
    assert client.post(reverse("sweep-cancel", args=[sweep.pk])).status_code == 302
    sweep = wait_sweep(sweep)
    assert sweep.state == "cancelled"
    first, second = sweep.configs.order_by("position")
    assert first.outcome == "cancelled" and second.outcome == "cancelled"
    assert 1 <= Job.objects.get(sweep_config=first).n_done < 40
    assert servers_running(demo_sweep.demo_models_dir() / demo_sweep.DEMO_MODEL) == []


def test_a_killed_worker_takes_its_llama_server_with_it(launch_env, broker):  # noqa: F811
    victim = start_worker(broker, f"sweep-victim-{os.getpid()}@test")
    try:
        demo_host = announced(launch_env)
        params = {
            "prompt_tokens": 50,
            "n_predict": 400,
            "concurrencies": [1],
            "requests": 40,
            "repeats": 1,
            "timeout_s": 60,
        }
        sweep = create_sweep(demo_host, demo_sweep.DEMO_MODEL, ["-c 2048 -np 1"], params)
        deadline = time.monotonic() + 120
        while not Job.objects.filter(sweep_config__sweep=sweep, n_done__gte=1).exists():
            assert time.monotonic() < deadline, "the sweep never got going"
            time.sleep(0.2)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
    finally:
        if victim.poll() is None:
            victim.kill()
        victim.wait(timeout=10)
    deadline = time.monotonic() + 10
    while servers_running(demo_sweep.demo_models_dir() / demo_sweep.DEMO_MODEL) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert servers_running(demo_sweep.demo_models_dir() / demo_sweep.DEMO_MODEL) == []


def test_the_demo_sweep_runs_from_the_browser(demo_host, worker):  # noqa: F811
    staff = User.objects.create_user("ops", password="a-long-test-password", is_staff=True)
    client = Client()
    client.force_login(staff)
    response = client.post(reverse("sweep-demo"))
    assert response.status_code == 302
    sweep = wait_sweep(Sweep.objects.get())
    assert sweep.state == "succeeded"
    page = client.get(response.url).content.decode()
    assert page.count('<strong class="ok">best</strong>') == 1
    assert "all in-flight requests will fail together with HTTP 500" in page  # predicted for the default flags
    assert "0 / 3" in page and "3 / 3" in page
