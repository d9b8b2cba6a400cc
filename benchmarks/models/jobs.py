"""Registered llama-server instances and the benchmark jobs run against them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q


class Server(models.Model):
    name = models.CharField(max_length=100, unique=True)
    base_url = models.URLField("base URL", max_length=300)
    # Stored to authenticate requests; never rendered back in full, never logged.
    api_key = models.CharField("API key", max_length=300, blank=True)
    notes = models.TextField(blank=True)
    gpu = models.CharField("GPU", max_length=200, blank=True)
    launch_command = models.TextField(
        blank=True, help_text="the llama-server command line it runs with: recorded as each run's configuration"
    )
    queue = models.CharField(
        max_length=100, blank=True, help_text="Celery queue of the worker that serves this server (blank: the default)"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_probe = models.JSONField(null=True, blank=True)
    last_probed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def api_key_hint(self) -> str:
        if not self.api_key:
            return ""
        return "••••" + self.api_key[-4:] if len(self.api_key) > 8 else "••••"

    @property
    def reachable(self) -> bool | None:
        return None if self.last_probe is None else bool(self.last_probe.get("reachable"))

    @property
    def celery_queue(self) -> str:
        return self.queue or settings.CELERY_TASK_DEFAULT_QUEUE


class WorkState(models.TextChoices):
    """The life of a job or a sweep."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Job(models.Model):
    State = WorkState

    FINISHED = (State.SUCCEEDED, State.FAILED, State.CANCELLED)

    server = models.ForeignKey(Server, on_delete=models.PROTECT, related_name="jobs")
    label = models.CharField(max_length=200, blank=True)
    params = models.JSONField(help_text="the validated job form: prompts, n_predict, concurrency, ...")
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    claimed_at = models.DateTimeField(null=True)
    heartbeat_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    worker = models.CharField(max_length=200, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    n_total = models.PositiveIntegerField(default=0)
    n_done = models.PositiveIntegerField(default=0)
    n_failed = models.PositiveIntegerField(default=0)
    n_running = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveBigIntegerField(default=0)
    recent_errors = models.JSONField(default=list, blank=True)
    sweep_config = models.ForeignKey(
        "SweepConfig", null=True, blank=True, on_delete=models.CASCADE, related_name="jobs"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # the reaper: running jobs whose heartbeat stopped
            models.Index(fields=["state", "heartbeat_at"], name="job_state_heartbeat_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(n_failed__lte=F("n_done")), name="job_failed_le_done"),
            models.CheckConstraint(condition=Q(n_done__lte=F("n_total")), name="job_done_le_total"),
        ]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.state})"

    @property
    def finished(self) -> bool:
        return self.state in self.FINISHED

    @property
    def progress_percent(self) -> int:
        return round(100 * self.n_done / self.n_total) if self.n_total else 0
