"""Registered llama-server instances and the benchmark jobs run against them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from .work import Work


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


class Job(Work):
    """A workload run against one llama-server: a registered server, or a sweep's own launch."""

    # Null for a sweep's temporary server: the job records the address it measured.
    server = models.ForeignKey(Server, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs")
    base_url = models.URLField("base URL", max_length=300, help_text="the address the requests went to")
    launch_command = models.TextField(blank=True, help_text="the server's command line: each run's configuration")
    gpu = models.CharField("GPU", max_length=200, blank=True)
    label = models.CharField(max_length=200, blank=True)
    params = models.JSONField(help_text="the validated job form: prompts, n_predict, concurrency, ...")
    claimed_at = models.DateTimeField(null=True)
    attempts = models.PositiveSmallIntegerField(default=0)
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
    def target_name(self) -> str:
        return self.server.name if self.server_id and self.server else self.base_url

    @property
    def progress_percent(self) -> int:
        return round(100 * self.n_done / self.n_total) if self.n_total else 0
