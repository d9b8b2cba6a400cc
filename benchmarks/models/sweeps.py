"""Launch hosts and sweeps: kvlab starts llama-server itself with several flag sets."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from .jobs import Job
from .work import Work, WorkState


class LaunchHostQuerySet(models.QuerySet["LaunchHost"]):
    def launchable(self) -> LaunchHostQuerySet:
        """Hosts whose worker announced a binary and a model directory (LaunchHost.launchable, in SQL)."""
        return self.exclude(announced_at=None).exclude(binaries=[]).exclude(models_dirs=[])


class LaunchHost(models.Model):
    """A machine where a worker may start llama-server, as that worker announced it.

    Binaries, model directories, address and ports come from the worker's own settings
    (sweeps/worker_host.py); staff may only describe the host (GPU, notes).
    """

    name = models.CharField(max_length=100, unique=True)
    binaries = models.JSONField(default=list, help_text="llama-server binaries the worker lists")
    models_dirs = models.JSONField(default=list, help_text="model directories the worker lists")
    gguf_files = models.JSONField(default=list, help_text='the .gguf files found there: [{"file", "bytes"}]')
    problems = models.JSONField(default=list, help_text="settings the worker refused, with the reason")
    bind_address = models.GenericIPAddressField(default="127.0.0.1")
    port_min = models.PositiveIntegerField(default=18000)
    port_max = models.PositiveIntegerField(default=18099)
    queue = models.CharField(max_length=100, blank=True, help_text="the Celery queue of the worker on that machine")
    worker = models.CharField(max_length=200, blank=True, help_text="the worker that announced it")
    announced_at = models.DateTimeField(null=True, blank=True)
    # One JSON snapshot, not columns: it is shown and handed to the sizing page whole, never
    # filtered in SQL, and holds lists (GPUs, builds); HostFacts.from_json reads it back checked.
    facts = models.JSONField(
        default=dict, blank=True, help_text="the machine as its worker saw it: CPU, RAM, GPUs, llama.cpp builds"
    )
    facts_at = models.DateTimeField(null=True, blank=True, help_text="when the worker gathered the facts")
    gpu = models.CharField("GPU", max_length=200, blank=True)
    gpu_mib = models.PositiveIntegerField("GPU memory (MiB)", null=True, blank=True)
    notes = models.TextField(blank=True)

    objects = LaunchHostQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(port_min__lte=F("port_max")), name="host_port_range_ordered"),
            models.CheckConstraint(condition=Q(port_min__gte=1024, port_max__lte=65535), name="host_port_range_valid"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def celery_queue(self) -> str:
        return self.queue or settings.CELERY_TASK_DEFAULT_QUEUE

    @property
    def model_files(self) -> list[str]:
        return [str(m.get("file", "")) for m in self.gguf_files if isinstance(m, dict)]

    @property
    def launchable(self) -> bool:
        return self.announced_at is not None and bool(self.binaries) and bool(self.models_dirs)


class Sweep(Work):
    host = models.ForeignKey(LaunchHost, on_delete=models.PROTECT, related_name="sweeps")
    model_file = models.CharField(max_length=500, help_text="a GGUF file name inside the host's models directory")
    binary = models.CharField(max_length=500, blank=True, help_text="one of the host's binaries; blank: its first")
    label = models.CharField(max_length=200, blank=True)
    params = models.JSONField(help_text="workload: prompt, n_predict, concurrencies, requests, repeats, timeout")
    preference = models.CharField(max_length=16, default="throughput")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # the reaper: running sweeps whose heartbeat stopped
            models.Index(fields=["state", "heartbeat_at"], name="sweep_state_heartbeat_idx"),
        ]

    def __str__(self) -> str:
        return f"sweep {self.pk} ({self.state})"

    @classmethod
    def cancel(cls, pk: int) -> str:
        """As Work.cancel; a running sweep's running job is asked to stop too."""
        result = super().cancel(pk)
        if result == "requested":
            Job.objects.filter(sweep_config__sweep_id=pk, state=WorkState.RUNNING).update(cancel_requested=True)
        return result


class SweepConfig(models.Model):
    """One flag set of a sweep: how its server started, what it reported, what it measured."""

    class Outcome(models.TextChoices):
        PENDING = "pending"
        RAN = "ran"
        INVALID = "invalid", "refused by kvlab (invalid flags)"
        FAILED_TO_START = "failed_to_start", "failed to start"
        CRASHED = "crashed"
        CANCELLED = "cancelled"

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="configs")
    position = models.PositiveSmallIntegerField()
    command = models.TextField(help_text="the flags, as typed")
    args = models.JSONField(default=list, help_text="the argument list the process was started with")
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.PENDING)
    error = models.TextField(blank=True)
    log_tail = models.TextField(blank=True)
    predicted = models.JSONField(null=True, blank=True, help_text="sizing.report.as_json before the launch")
    reported = models.JSONField(null=True, blank=True, help_text="sizing.server_log.read_server_log after it")
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)

    class Meta:
        ordering = ["sweep", "position"]
        constraints = [models.UniqueConstraint(fields=["sweep", "position"], name="sweep_config_position_unique")]

    def __str__(self) -> str:
        return f"{self.sweep_id}#{self.position}: {self.command}"


class CalibrationPoint(models.Model):
    """A (predicted, reported) memory pair from a launched server: sizing learns from these."""

    model_name = models.CharField(max_length=300)
    arch = models.CharField(max_length=50)
    flags_key = models.CharField(max_length=300, help_text="the flags that decide memory, normalised")
    predicted_kv_bytes = models.PositiveBigIntegerField()
    reported_kv_mib = models.FloatField()
    predicted_compute_bytes = models.PositiveBigIntegerField()
    reported_compute_mib = models.FloatField()
    reported_model_mib = models.FloatField()
    config = models.ForeignKey(SweepConfig, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # the sizing page: past reports for this model (and these flags)
            models.Index(fields=["model_name", "flags_key"], name="calibration_lookup_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.model_name} {self.flags_key}"
