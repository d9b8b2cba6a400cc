"""Data migrations keep every row: jobs learn their target; sweep-borrowed servers go."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("benchmarks", "0004_sweeps")]
AFTER = [("benchmarks", "0005_jobs_record_their_target")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture(autouse=True)
def back_to_the_latest_schema():
    """Later tests need every migration, not the one this test stopped at."""
    yield
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_jobs_take_their_servers_target_and_sweep_servers_leave_the_registry(tmp_path):
    apps = migrate(BEFORE)
    Server, Job = apps.get_model("benchmarks", "Server"), apps.get_model("benchmarks", "Job")
    LaunchHost, Sweep = apps.get_model("benchmarks", "LaunchHost"), apps.get_model("benchmarks", "Sweep")
    SweepConfig = apps.get_model("benchmarks", "SweepConfig")
    person = Server.objects.create(
        name="gpu-1", base_url="http://127.0.0.1:8080", launch_command="llama-server -c 4096", gpu="RTX 4090"
    )
    borrowed = Server.objects.create(
        name="sweep 1 #0", base_url="http://127.0.0.1:18000", launch_command="llama-server -c 1024",
        notes="launched by sweep 1 on local demo",
    )  # fmt: skip
    host = LaunchHost.objects.create(name="h", binary_path="/x", models_dir=str(tmp_path))
    sweep = Sweep.objects.create(host=host, model_file="m.gguf", params={})
    config = SweepConfig.objects.create(sweep=sweep, position=0, command="-c 1024")
    mine = Job.objects.create(server=person, params={}).pk
    swept = Job.objects.create(server=borrowed, params={}, sweep_config=config).pk

    apps = migrate(AFTER)
    Server, Job = apps.get_model("benchmarks", "Server"), apps.get_model("benchmarks", "Job")
    assert list(Server.objects.values_list("name", flat=True)) == ["gpu-1"]
    job = Job.objects.get(pk=mine)
    assert (job.server_id, job.base_url, job.launch_command, job.gpu) == (
        person.pk, "http://127.0.0.1:8080", "llama-server -c 4096", "RTX 4090"
    )  # fmt: skip
    job = Job.objects.get(pk=swept)
    assert (job.server_id, job.base_url, job.launch_command) == (None, "http://127.0.0.1:18000", "llama-server -c 1024")


def test_web_configured_launch_hosts_keep_their_sweeps_and_wait_for_their_worker(tmp_path):
    apps = migrate([("benchmarks", "0006_job_live")])
    LaunchHost, Sweep = apps.get_model("benchmarks", "LaunchHost"), apps.get_model("benchmarks", "Sweep")
    host = LaunchHost.objects.create(name="h", binary_path="/opt/llama/llama-server", models_dir="/srv/models")
    sweep = Sweep.objects.create(host=host, model_file="m.gguf", params={})

    apps = migrate([("benchmarks", "0008_launch_hosts_drop_form_paths")])
    LaunchHost, Sweep = apps.get_model("benchmarks", "LaunchHost"), apps.get_model("benchmarks", "Sweep")
    host = LaunchHost.objects.get(name="h")
    assert Sweep.objects.get(pk=sweep.pk).host_id == host.pk
    # nothing to launch until the worker announces; the old paths are told to the admin
    assert (host.binaries, host.models_dirs, host.announced_at) == ([], [], None)
    assert "/opt/llama/llama-server" in host.notes and "/srv/models" in host.notes
    assert "KVLAB_LAUNCH_BINARIES" in host.notes
