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


def test_stored_requests_take_the_identity_the_import_of_their_export_gives(tmp_path):
    """0020: executed requests were hashed raw, imported ones with their ITL; re-imports doubled them."""
    import hashlib
    import io
    from datetime import UTC, datetime

    import orjson

    from benchmarks.history.exporter import export_lines
    from benchmarks.history.importer import import_bench_file
    from benchmarks.models import RequestResult as CurrentRequest
    from benchmarks.models import Run as CurrentRun

    def old_hash(*content):
        return hashlib.blake2b(orjson.dumps(content, option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest()

    apps = migrate([("benchmarks", "0019_launch_host_facts")])
    Run, RequestResult = apps.get_model("benchmarks", "Run"), apps.get_model("benchmarks", "RequestResult")
    ts = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    executed = Run.objects.create(key="job-1-0", source="executed", model="m")
    raw = (ts, False, 500, "Context size has been exceeded", None, 343, 4, None, None, 246.0, None)
    RequestResult.objects.create(
        run=executed, seq=0, ts=ts, ok=False, http_status=500, error=raw[3], error_type="", prompt_tokens=343,
        n_predict=4, elapsed_s=246.0, extra={"index": 0}, content_hash=old_hash(raw, {"index": 0}), occurrence=0,
    )  # fmt: skip
    imported = Run.objects.create(key="a", source="imported", model="m")
    request = (None, True, None, None, None, None, None, None, 2.0, None, None)
    for seq, itl in enumerate(([0.1], [0.2])):  # the same fields, other ITL: two hashes, both occurrence 0
        RequestResult.objects.create(
            run=imported, seq=seq, ok=True, tok_s=2.0, extra={}, itl_s=itl,
            content_hash=old_hash(request, {}, tuple(itl)), occurrence=0,
        )  # fmt: skip

    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    rows = CurrentRequest.objects.order_by("run__key", "seq").values_list("run__key", "error_type", "occurrence")
    assert list(rows) == [("a", "", 0), ("a", "", 1), ("job-1-0", "context_exceeded", 0)]
    before = list(CurrentRequest.objects.order_by("pk").values())
    for schema in ("kvlab.bench/2", "kvlab.bench/1"):
        data = b"".join(export_lines(CurrentRun.objects.all(), schema))
        result = import_bench_file(io.BytesIO(data), filename="e.jsonl", origin="command")
        assert (result.status, result.n_imported) == ("imported", 0), schema
    assert list(CurrentRequest.objects.order_by("pk").values()) == before
