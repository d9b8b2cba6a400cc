"""Registered llama-server instances and the benchmark jobs run against them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from ..records.outcomes import LABELS, outcome_of
from .work import Work, WorkState

# How a job ran, in words: the state "succeeded" only says the worker finished it; what
# its requests found is Job.found, said apart.
RAN_WORDS = {
    WorkState.QUEUED: "queued",
    WorkState.RUNNING: "running",
    WorkState.SUCCEEDED: "completed",
    WorkState.FAILED: "failed to run",
    WorkState.CANCELLED: "cancelled",
}
WORKER_LOST = "the worker stopped sending heartbeats"  # how the reaper's error begins
MAX_LIVE = 256  # requests in flight listed in Job.live: the largest concurrency the form allows


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
    # The requests in flight, written by the worker at each heartbeat (at most the
    # concurrency): [{"i": index, "state": "waiting"|"streaming", "tokens": n, "elapsed_s": s,
    # "ttft_s": s|null, "tok_s": rate|null}]; emptied when the job ends.
    live = models.JSONField(default=list, blank=True)
    # The running wave's telemetry series (the shape of Run.telemetry), rewritten at each
    # heartbeat for the live page; emptied when the job ends (the runs keep theirs).
    telemetry = models.JSONField(null=True, blank=True)
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
    def how_it_ran(self) -> str:
        """completed, cancelled, failed to run, worker lost (or queued, running)."""
        if self.state == WorkState.FAILED and self.error.startswith(WORKER_LOST):
            return "worker lost"
        return RAN_WORDS.get(WorkState(self.state), self.state)

    @property
    def ran_class(self) -> str:
        return self.how_it_ran.replace(" ", "-")

    @property
    def found(self) -> str:
        """What its requests found, by records.outcomes' rule: ok, partial, failed, or empty.

        Over the requests recorded so far (n_done counts each stored result, n_failed the
        failed ones): the same requests as its runs hold.
        """
        return outcome_of(self.n_done - self.n_failed, self.n_done)

    @property
    def found_label(self) -> str:
        return LABELS[self.found]

    @property
    def tokens_so_far(self) -> int:
        """Output tokens of finished requests, and of those still streaming."""
        return self.tokens_out + sum(int(r.get("tokens") or 0) for r in self.live or [] if isinstance(r, dict))

    @property
    def progress_percent(self) -> int:
        return round(100 * self.n_done / self.n_total) if self.n_total else 0
