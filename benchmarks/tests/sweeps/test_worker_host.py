"""A worker launches only what its own machine's settings list, whatever the database says."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from benchmarks.models import LaunchHost, Sweep, SweepConfig
from benchmarks.sweeps import running, worker_host
from benchmarks.sweeps.lifecycle import create_sweep
from benchmarks.sweeps.worker_host import LaunchConfig, NotLaunchable, check_binary, check_models_dir

pytestmark = pytest.mark.django_db

PARAMS = {"prompt_tokens": 10, "n_predict": 5, "concurrencies": [1], "requests": 1, "repeats": 1, "timeout_s": 60}


@pytest.fixture
def own_dir(tmp_path: Path) -> Path:
    """A directory only this user may write, though tmp_path lies under the world-writable /tmp."""
    path = tmp_path / "models"
    path.mkdir(mode=0o755)
    return path


def test_a_binary_must_be_an_executable_file_nobody_else_can_replace(llama_server_binary, tmp_path):
    assert check_binary(str(llama_server_binary)) is None
    script = tmp_path / "llama-server"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert "is writable by other users" in check_binary(str(script))  # /tmp is anyone's
    assert check_binary("llama-server") == "binary 'llama-server': not an absolute path"
    assert "not a regular file" in check_binary(str(tmp_path))
    assert "No such file" in check_binary(str(tmp_path / "missing"))
    not_executable = llama_server_binary.parent / "kvlab-test-not-executable"
    not_executable.write_text("x")
    try:
        not_executable.chmod(0o644)
        assert "not executable" in check_binary(str(not_executable))
    finally:
        not_executable.unlink()


@pytest.mark.parametrize("path", ["/", "/etc", "/proc/self", "/usr", "/home", "/dev/shm"])
def test_system_directories_are_not_model_directories(path):
    assert "a system directory" in check_models_dir(path)


def test_a_model_directory_is_an_absolute_existing_directory(own_dir):
    assert check_models_dir(str(own_dir)) is None
    assert "not an absolute path" in check_models_dir("models")
    assert "not a directory" in check_models_dir(str(own_dir / "missing"))


def test_the_worker_resolves_models_inside_its_own_directories_only(own_dir, tmp_path):
    (own_dir / "a.gguf").write_bytes(b"GGUF")
    (own_dir / "sub").mkdir()
    (own_dir / "sub" / "b.gguf").write_bytes(b"GGUF")
    (tmp_path / "outside.gguf").write_bytes(b"GGUF")
    (own_dir / "link.gguf").symlink_to(tmp_path / "outside.gguf")
    (own_dir / "notes.txt").write_text("x")
    config = LaunchConfig(name="h", binaries=["/opt/llama-server"], models_dirs=[str(own_dir)])
    assert config.model("a.gguf") == own_dir / "a.gguf"
    assert config.model("sub/b.gguf") == own_dir / "sub" / "b.gguf"
    for name, reason in [
        ("../outside.gguf", "not a file name relative"),
        (str(tmp_path / "outside.gguf"), "not a file name relative"),
        ("link.gguf", "does not exist"),  # a link out of the directory is not inside it
        ("notes.txt", "not a .gguf file"),
        ("missing.gguf", "does not exist"),
        ("", "not a file name relative"),
    ]:
        with pytest.raises(NotLaunchable, match=reason):
            config.model(name)
    assert [m["file"] for m in worker_host.list_models(config)] == ["a.gguf", "link.gguf", "sub/b.gguf"]


def test_the_worker_runs_a_listed_binary_only(own_dir):
    config = LaunchConfig(name="h", binaries=["/opt/a/llama-server", "/opt/b/llama-server"])
    assert config.binary("") == "/opt/a/llama-server"
    assert config.binary("/opt/b/llama-server") == "/opt/b/llama-server"
    with pytest.raises(NotLaunchable, match="/bin/sh is not among the binaries"):
        config.binary("/bin/sh")
    with pytest.raises(NotLaunchable, match="lists no usable llama-server binary"):
        LaunchConfig(name="h").binary("")


def test_announce_writes_the_checked_settings_and_names_what_it_refused(settings, llama_server_binary, own_dir):
    (own_dir / "m.gguf").write_bytes(b"GGUF" + bytes(60))
    settings.KVLAB_LAUNCH_HOST = "gpu-7"
    settings.KVLAB_LAUNCH_BINARIES = [str(llama_server_binary), "/bin/definitely-not-here"]
    settings.KVLAB_LAUNCH_MODELS_DIRS = [str(own_dir), "/"]
    settings.KVLAB_LAUNCH_BIND = "not-an-address"
    settings.KVLAB_LAUNCH_PORTS = "80-90"
    host = worker_host.announce("gpu7", "celery@gpu-7")
    assert host is not None and host.name == "gpu-7" and host.announced_at is not None
    assert (host.binaries, host.models_dirs) == ([str(llama_server_binary)], [str(own_dir)])
    assert host.gguf_files == [{"file": "m.gguf", "bytes": 64}]
    assert (host.bind_address, host.port_min, host.port_max, host.queue) == ("127.0.0.1", 18000, 18099, "gpu7")
    problems = "\n".join(host.problems)
    assert "/bin/definitely-not-here: No such file" in problems and "model directory /: a system directory" in problems
    assert "'not-an-address' is not an IP address; using 127.0.0.1" in problems
    assert "ports '80-90' are not a range within 1024-65535" in problems

    # the next announcement replaces the last: a removed binary is no longer offered
    settings.KVLAB_LAUNCH_BINARIES = []
    settings.KVLAB_LAUNCH_BIND, settings.KVLAB_LAUNCH_PORTS = "10.0.0.5", "19000-19009"
    host = worker_host.announce("gpu7")
    assert LaunchHost.objects.count() == 1 and host.binaries == [] and not host.launchable
    assert (host.bind_address, host.port_min, host.port_max) == ("10.0.0.5", 19000, 19009)


def test_a_machine_with_nothing_to_launch_announces_nothing(settings, own_dir):
    settings.KVLAB_LAUNCH_BINARIES, settings.KVLAB_LAUNCH_MODELS_DIRS = [], [str(own_dir)]
    assert worker_host.announce("kvlab") is None and not LaunchHost.objects.exists()


def test_the_queue_announced_is_the_workers_own(settings):
    settings.KVLAB_LAUNCH_QUEUE = ""
    assert worker_host.worker_queue(["kvlab", "gpu-a"]) == "gpu-a"
    assert worker_host.worker_queue(["kvlab"]) == "kvlab"
    settings.KVLAB_LAUNCH_QUEUE = "gpu-b"
    assert worker_host.worker_queue(["kvlab", "gpu-a"]) == "gpu-b"


def _sweep_on(host: LaunchHost, **fields: object) -> Sweep:
    sweep = create_sweep(host, "m.gguf", ["-c 512"], PARAMS)
    Sweep.objects.filter(pk=sweep.pk).update(**fields)
    return sweep


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        ({"binary": "/bin/sh"}, "not launchable here: /bin/sh is not among the binaries the worker on"),
        ({"model_file": "../../etc/passwd.gguf"}, "not launchable here: '../../etc/passwd.gguf' is not a file name"),
    ],
)
def test_a_tampered_sweep_row_launches_nothing(settings, own_dir, llama_server_binary, tamper, message):
    """Whoever writes the database (the admin site, SQL) cannot make a worker run another program."""
    (own_dir / "m.gguf").write_bytes(b"GGUF")
    settings.KVLAB_LAUNCH_HOST = ""
    settings.KVLAB_LAUNCH_BINARIES, settings.KVLAB_LAUNCH_MODELS_DIRS = [str(llama_server_binary)], [str(own_dir)]
    host = worker_host.announce("kvlab")
    LaunchHost.objects.filter(pk=host.pk).update(binaries=["/bin/sh"], models_dirs=["/"])  # tampered too
    sweep = _sweep_on(host, **tamper)
    assert running.run_sweep(sweep.pk) == "failed"
    sweep.refresh_from_db()
    assert sweep.error.startswith(message), sweep.error
    assert sweep.configs.get().outcome == SweepConfig.Outcome.CANCELLED


def test_a_sweep_for_another_host_is_refused_by_this_worker(settings, own_dir, llama_server_binary):
    settings.KVLAB_LAUNCH_BINARIES, settings.KVLAB_LAUNCH_MODELS_DIRS = [str(llama_server_binary)], [str(own_dir)]
    settings.KVLAB_LAUNCH_HOST = "gpu-a"
    host = worker_host.announce("gpu-a")
    (own_dir / "m.gguf").write_bytes(b"GGUF")
    sweep = _sweep_on(host)
    settings.KVLAB_LAUNCH_HOST = "gpu-b"  # the task reached another machine's worker
    assert running.run_sweep(sweep.pk) == "failed"
    sweep.refresh_from_db()
    assert "the sweep is for host gpu-a but reached the worker on gpu-b" in sweep.error


def test_without_settings_a_worker_binds_loopback_under_its_hostname(settings):
    settings.KVLAB_LAUNCH_HOST = ""
    settings.KVLAB_LAUNCH_BIND, settings.KVLAB_LAUNCH_PORTS = "127.0.0.1", "18000-18099"  # the defaults
    config = worker_host.current()
    assert (config.name, config.bind_address, config.port_min, config.port_max) == (
        socket.gethostname(), "127.0.0.1", 18000, 18099
    )  # fmt: skip


def test_a_fresh_checkout_announces_the_demo_model(settings, llama_server_binary, tmp_path, monkeypatch):
    """var/models does not exist before the first worker starts: announcing writes the demo model first."""
    from benchmarks.sweeps import demo

    settings.VAR_DIR = tmp_path / "var"
    settings.KVLAB_LAUNCH_BINARIES = [str(llama_server_binary)]
    settings.KVLAB_LAUNCH_MODELS_DIRS = [str(tmp_path / "var" / "models")]
    host = worker_host.announce("kvlab")
    assert host.problems == [] and host.models_dirs == [str((tmp_path / "var" / "models").resolve())]
    assert demo.DEMO_MODEL in host.model_files and demo.demo_host() == host
