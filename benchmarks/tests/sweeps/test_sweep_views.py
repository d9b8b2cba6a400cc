"""Launch hosts and sweeps: staff only, and no flag set kvlab would not model."""

import pytest
from django.urls import reverse

from benchmarks.models import LaunchHost, Sweep, SweepConfig
from benchmarks.sweeps import launcher
from benchmarks.sweeps.results import config_rows
from benchmarks.tests.builders import announced_host

pytestmark = pytest.mark.django_db


@pytest.fixture
def host(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    return announced_host("gpu-1", tmp_path, ("tiny.gguf",))


def sweep_data(host, **overrides):
    data = {
        "host": host.pk,
        "model_file": "tiny.gguf",
        "flag_sets": "-c 1024\n-c 2048 -np 3 --no-kv-unified",
        "prompt_tokens": 100,
        "n_predict": 10,
        "concurrencies": "1,3",
        "requests": 3,
        "repeats": 1,
        "timeout_s": 60,
        "preference": "throughput",
    }
    return {**data, **overrides}


def test_hosts_and_sweeps_are_for_staff_only(client, user_client, host):
    for url in (reverse("host-list"), reverse("host-edit", args=[host.pk]), reverse("sweep-new")):
        assert client.get(url).status_code == 302
        assert user_client.get(url).status_code == 302
    assert user_client.post(reverse("sweep-new"), sweep_data(host)).status_code == 302
    assert user_client.post(reverse("sweep-demo")).status_code == 302
    assert Sweep.objects.count() == 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"flag_sets": "-c 1024 --host 0.0.0.0"}, "not allowed: --host 0.0.0.0"),
        ({"flag_sets": "-c 1024; rm -rf /"}, "not allowed"),
        ({"flag_sets": "-c 1024 -m /etc/passwd"}, "leave -m out"),
        ({"flag_sets": "-np 0"}, "-np 0: must be -1 (auto) or 1 to 256"),
        ({"model_file": "../escape.gguf"}, "is not among the .gguf files the worker on gpu-1 announced"),
        ({"model_file": "notes.txt"}, "is not among the .gguf files the worker on gpu-1 announced"),
        ({"model_file": "missing.gguf"}, "is not among the .gguf files the worker on gpu-1 announced"),
        ({"binary": "/bin/sh"}, "not among the binaries the worker on gpu-1 announced"),
        ({"concurrencies": "1,two"}, "Concurrencies are whole numbers"),
    ],
)
def test_a_sweep_refuses_what_kvlab_would_not_launch(staff_client, host, overrides, message):
    response = staff_client.post(reverse("sweep-new"), sweep_data(host, **overrides))
    assert response.status_code == 400 and message in response.content.decode()
    assert Sweep.objects.count() == 0


def test_a_flag_set_is_rebuilt_from_parsed_flags_only():
    parsed = launcher.checked_flags("--ctx-size=4096 -np 2 -kvu -ctk q8_0 -ctv q8_0 -fa on")
    assert parsed.flags.ctx_size == 4096 and parsed.ignored == []
    with pytest.raises(launcher.LaunchRefused, match="not allowed: --rpc 10.0.0.1:50052"):
        launcher.checked_flags("-c 1024 --rpc 10.0.0.1:50052")


def test_staff_describe_a_host_but_cannot_make_it_run_another_binary(staff_client, host, tmp_path):
    data = {"gpu": "RTX 4090", "gpu_mib": 24564, "notes": "rack 2", "binaries": '["/bin/sh"]', "models_dirs": '["/"]'}
    response = staff_client.post(reverse("host-edit", args=[host.pk]), data)
    assert response.status_code == 302
    host.refresh_from_db()
    assert (host.gpu, host.gpu_mib, host.notes) == ("RTX 4090", 24564, "rack 2")
    assert host.binaries == ["/opt/llama/llama-server"] and host.models_dirs == [str(tmp_path)]
    page = staff_client.get(reverse("host-list")).content.decode()
    assert "/opt/llama/llama-server" in page and "KVLAB_LAUNCH_BINARIES" in page
    assert "Add a launch host" not in page


def test_a_host_no_worker_announced_is_not_offered_for_sweeps(staff_client, host, tmp_path):
    silent = LaunchHost.objects.create(name="old-host", notes="from before 0007")
    form_page = staff_client.get(reverse("sweep-new")).content.decode()
    assert "gpu-1" in form_page and "old-host" not in form_page
    assert '<option value="tiny.gguf">' in form_page  # the announced models are suggested
    assert '<option value="/opt/llama/llama-server">' in form_page  # and the announced binaries
    response = staff_client.post(reverse("sweep-new"), sweep_data(silent))
    assert response.status_code == 400 and "Select a valid choice" in response.content.decode()
    assert "never: not launchable" in staff_client.get(reverse("host-list")).content.decode()


def test_the_result_page_compares_predicted_and_reported_memory(client, host):
    sweep = Sweep.objects.create(
        host=host,
        model_file="tiny.gguf",
        params={"requests": 3, "prompt_tokens": 300, "n_predict": 300, "concurrencies": [3]},
    )
    SweepConfig.objects.create(
        sweep=sweep,
        position=0,
        command="-c 2048 -np 3",
        outcome="ran",
        predicted={
            "kv_bytes": 2359296,
            "errors": [],
            "prediction": {"outcome": "ok", "message": "each request needs 600 of its slot's 768 cells"},
            "memory": {"compute_estimate_bytes": 1048576},
        },
        reported={"kv_mib": 2.25, "compute_mib": 3.78, "model_mib": 6.05, "n_ctx_slot": 768},
    )
    SweepConfig.objects.create(
        sweep=sweep,
        position=1,
        command="-c 512 -ctv q8_0 -fa off",
        outcome="failed_to_start",
        log_tail="quantized V cache requires flash_attn",
    )
    (ran, failed) = config_rows(sweep)
    assert ran["predicted_kv_mib"] == 2.25 and ran["kv_diff_mib"] == 0.0 and ran["n_ctx_slot"] == 768
    page = client.get(reverse("sweep-detail", args=[sweep.pk])).content.decode()
    assert "each request needs 600 of its slot&#x27;s 768 cells" in page and "2.25 MiB" in page
    assert "failed to start" in page and "quantized V cache requires flash_attn" in page
    assert 'hx-trigger="every 2s"' in page  # still queued: the page follows it
    assert client.get(reverse("sweep-detail", args=[999])).status_code == 404
