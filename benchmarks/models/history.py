"""Benchmark history: runs, their requests, and the file imports that brought them."""

from __future__ import annotations

from datetime import datetime
from functools import cached_property
from itertools import islice
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F, Q, Value

from kvlab.visibility import as_uploaded

from ..records.metrics import RunTally, success_rate
from ..records.outcomes import outcome_of
from ..records.schema import REQUEST_FIELD_NAMES, RUN_FIELD_NAMES
from ..records.summaries import counts_reported, with_tool_summary
from .itl_sql import itl_percentiles
from .run_queries import NEWEST_FIRST, RunQuerySet

SUMMARY_CHUNK = 5_000  # a run's requests read at a time when it is summarized again

# The run list's sorts served by an index of (column, id) of their own (history.forms.SORTS). Date,
# label, model and GPU are served by the (column, started_at) indexes below: ties go by date.
SORT_INDEXED = (
    ("ctx", "ctx_size"),
    ("parallel", "parallel"),
    ("concurrency", "concurrency"),
    ("prompt", "prompt_tokens_max"),
    ("ok", "n_ok"),
    ("tok_s", "tok_s_mean"),
)
# The indexes that order runs by date, alone or within one value of a filter: (columns…, id, counts).
DATED_INDEXES = {
    "run_started_idx": ("started_at",),
    "run_model_idx": ("model", "started_at"),
    "run_gpu_idx": ("gpu", "started_at"),
    "run_label_idx": ("label", "started_at"),
    "run_tool_idx": ("tool", "started_at"),
    "run_engine_idx": ("engine", "started_at"),
}
OUTCOME_COLUMNS = ("n_requests", "n_ok")  # what a run's outcome is computed from
# Run attribute of a canonical run field, where the names differ.
RUN_ATTRIBUTES = {"run_id": "key"}


class Run(models.Model):
    """One benchmark execution, imported or executed, with aggregates of its requests."""

    class Source(models.TextChoices):
        IMPORTED = "imported"
        EXECUTED = "executed"

    class WallSource(models.TextChoices):
        REPORTED = "reported", "reported by the record"
        DERIVED = "derived", "longest request elapsed"

    key = models.CharField("run id", max_length=200, unique=True)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.IMPORTED)
    label = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200)
    gpu = models.CharField("GPU", max_length=200, blank=True)
    vram_total_mib = models.PositiveIntegerField("VRAM total (MiB)", null=True)
    vram_used_mib = models.PositiveIntegerField("VRAM used (MiB)", null=True)
    wall_s = models.FloatField("reported wall time (s)", null=True)

    # Server configuration, as the record states it.
    ctx_size = models.PositiveIntegerField("ctx size (-c)", null=True)
    parallel = models.PositiveIntegerField("parallel (-np)", null=True)
    kv_unified = models.BooleanField("unified KV", null=True)
    cache_type_k = models.CharField("K cache type", max_length=8, blank=True)
    cache_type_v = models.CharField("V cache type", max_length=8, blank=True)
    kv_offload = models.BooleanField("KV on GPU", null=True)
    flash_attn = models.CharField("flash attention", max_length=4, blank=True)
    server_flags = models.TextField(
        "server flags", blank=True, default="", db_default="", help_text="the server's command-line flags"
    )
    # Workload.
    concurrency = models.PositiveIntegerField(null=True)
    request_rate = models.FloatField("request rate (req/s)", null=True, help_text="the configured rate; null: unpaced")

    # Where the run's results come from (kvlab.bench/2): the tool that measured it and its file.
    tool = models.CharField(
        max_length=40, blank=True, default="", db_default="", help_text="the benchmark tool, e.g. vllm, guidellm, kvlab"
    )
    tool_version = models.CharField(max_length=40, blank=True, default="", db_default="")
    tool_format = models.CharField(
        max_length=60,
        blank=True,
        default="",
        db_default="",
        help_text="which of the tool's outputs, e.g. 'vllm bench serve'",
    )
    engine = models.CharField(
        max_length=40, blank=True, default="", db_default="", help_text="the serving engine, e.g. llama.cpp, vllm"
    )
    provenance = models.JSONField(
        default=dict,
        db_default=Value({}, output_field=models.JSONField()),
        blank=True,
        help_text="field -> file | declared | derived: where each value came from",
    )
    # The tool's own aggregates (kvlab.bench/2 summary, canonical units). When set, n_requests and n_ok are
    # the tool's counts, never recomputed from a sample of requests.
    summary = models.JSONField(null=True, blank=True)
    summary_extra = models.JSONField(null=True, blank=True, help_text="the summary record's keys kvlab does not map")
    requests_sampled = models.BooleanField(
        default=False, db_default=False, help_text="the stored requests are a sample of the run's"
    )
    server_log = models.TextField(
        blank=True, default="", db_default="", help_text="the llama-server start-up log attached on import"
    )

    created_at = models.DateTimeField(auto_now_add=True)
    first_import = models.ForeignKey("FileImport", null=True, on_delete=models.SET_NULL, related_name="+")
    # Indexed only where set (run_job_idx, below): an import's runs have no job.
    job = models.ForeignKey(
        "Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs", db_index=False
    )
    server_props = models.JSONField(null=True, blank=True, help_text="/props and /slots when an executed run started")

    # Aggregates of the requests, kept current by refresh_summary() so that the run
    # list can filter and sort 100,000 runs without touching their requests.
    started_at = models.DateTimeField(null=True)
    n_requests = models.PositiveIntegerField(default=0)
    n_ok = models.PositiveIntegerField(default=0)
    prompt_tokens_max = models.PositiveIntegerField(null=True)
    n_predict_max = models.IntegerField(null=True)
    output_tokens_total = models.PositiveBigIntegerField(null=True)
    tok_s_mean = models.FloatField(null=True)
    tok_s_min = models.FloatField(null=True)
    tok_s_max = models.FloatField(null=True)
    effective_wall_s = models.FloatField(null=True)
    effective_wall_source = models.CharField(max_length=8, choices=WallSource.choices, blank=True)
    throughput_tok_s = models.FloatField(null=True)
    ttft_p50 = models.FloatField("TTFT p50 (s)", null=True)
    ttft_p95 = models.FloatField("TTFT p95 (s)", null=True)
    e2e_p95 = models.FloatField("E2E p95 (s)", null=True)
    # Streamed-token latencies. ITL over every gap between two tokens of the ok
    # requests; TPOT per ok request, (E2E - TTFT) / (output tokens - 1); both nearest-rank.
    e2e_p50 = models.FloatField("E2E p50 (s)", null=True)
    itl_p50 = models.FloatField("ITL p50 (s)", null=True)
    itl_p95 = models.FloatField("ITL p95 (s)", null=True)
    tpot_p50 = models.FloatField("TPOT p50 (s)", null=True)
    tpot_p95 = models.FloatField("TPOT p95 (s)", null=True)

    # How requests arrived: "" fixed concurrency (or unknown), "poisson" or "constant" at
    # request_rate; a kvlab job's seed is in server_props["arrival"].
    arrival = models.CharField(max_length=16, blank=True, default="", db_default="")
    # The KV pool as the server reported it while the run ran (kvlab jobs): /slots and
    # /metrics sampled at 2 Hz or faster, GPU memory when NVML saw one, the peak, and the
    # attribution of a shared-pool overflow. Shape: benchmarks/jobs/telemetry/series.py.
    telemetry = models.JSONField(null=True, blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = list(NEWEST_FIRST)  # run_queries.NEWEST_FIRST says why this order
        indexes = [
            # run list default order and date-range filter; the run list filters by model, GPU, label, tool
            # and engine (RunFilterForm.narrow), newest first. Each also holds the request counts, so that
            # an outcome filter (models.outcomes.OUTCOME_Q) and the home page's failures per day are
            # answered from the index alone, without reading each run's row.
            *(
                models.Index(fields=[*columns, "id", *OUTCOME_COLUMNS], name=name)
                for name, columns in DATED_INDEXES.items()
            ),
            # the run list's other sorts (RunFilterForm.filter: the column, then id, one direction):
            # a page is a walk down an index, never a sort of every run
            *(models.Index(fields=[column, "id"], name=f"run_sort_{name}_idx") for name, column in SORT_INDEXED),
            # the outcomes "empty" and "unknown" (no request counted) are rare: found without a scan
            models.Index(fields=["started_at", "id"], condition=Q(n_requests=0), name="run_uncounted_idx"),
            # a job's runs (its page, the job list's counts, its end, a job's deletion setting them NULL): only
            # the runs that have a job, so that an import's runs (none has one) cost it nothing
            models.Index(fields=["job"], condition=Q(job__isnull=False), name="run_job_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(n_ok__lte=F("n_requests")), name="run_ok_le_requests"),
            models.CheckConstraint(condition=~Q(key=""), name="run_key_not_empty"),
            models.CheckConstraint(condition=~Q(model=""), name="run_model_not_empty"),
        ]

    def __str__(self) -> str:
        return self.key

    def refresh_summary(self) -> None:
        """Recompute the aggregates from the stored requests (metrics.summarize) and the tool's summary, and save."""
        requests = self.requests.values_list(*REQUEST_FIELD_NAMES).order_by("seq").iterator(chunk_size=SUMMARY_CHUNK)
        tally = RunTally()  # a piece at a time: a run of a million requests is not read into memory
        while chunk := list(islice(requests, SUMMARY_CHUNK)):
            tally.add(chunk)
        itl = itl_percentiles(RequestResult._meta.db_table, self.pk)  # by the database: gaps may not fit in memory
        aggregates, provenance = with_tool_summary(
            tally.result(self.wall_s)._replace(itl_p50=itl[50], itl_p95=itl[95]),
            self.summary,
            started_at=self.started_at_given(),
        )
        for name, value in aggregates._asdict().items():
            setattr(self, name, value)
        self.provenance = {**(self.provenance or {}), **provenance}
        self.requests_sampled = bool(self.summary and self.summary.get("requests_sampled"))
        self.save()

    def started_at_given(self) -> datetime | None:
        """started_at when the record (or the user) gave it, not derived from the requests."""
        given = (self.provenance or {}).get("started_at") in ("file", "declared")
        return self.started_at if given else None

    def record_values(self) -> dict[str, Any]:
        """The run's fields under their canonical record names, absent ones as None."""
        values = {name: getattr(self, RUN_ATTRIBUTES.get(name, name)) for name in RUN_FIELD_NAMES}
        values["started_at"] = self.started_at_given()
        values["provenance"] = tuple(sorted(self.provenance.items())) if self.provenance else None
        return {name: (None if value == "" else value) for name, value in values.items()}

    @property
    def success_rate(self) -> float | None:
        return success_rate(self.n_ok, self.n_requests)

    @cached_property  # a run-list row reads it twice (its word and its title)
    def kv_on_gpu(self) -> str:
        """Where the run's KV cache was, in words: "yes" only for a run on a GPU; a run on the CPU alone
        (-ngl 0, or no GPU recorded) reads n/a, not the llama-server default it never used."""
        if self.kv_offload is False:
            return "no (--no-kv-offload)"
        if _no_gpu_layers(self.server_flags):
            return "no (-ngl 0: every layer on the CPU)"
        if not self.gpu:
            return "n/a (no GPU recorded)"
        return "yes" if self.kv_offload else "not recorded"

    @property
    def kv_on_gpu_short(self) -> str:
        """kv_on_gpu in a table cell's word."""
        return self.kv_on_gpu.split(" (")[0]

    @property
    def outcome(self) -> str:
        return outcome_of(self.n_ok, self.n_requests, counts_reported=counts_reported(self.summary))


_GPU_LAYERS = ("-ngl", "--n-gpu-layers", "--gpu-layers")


def _no_gpu_layers(flags: str) -> bool:
    """The server flags put no layer on a GPU (-ngl 0, or --n-gpu-layers=0)."""
    words = flags.replace("=", " ").split() if flags else []
    return any(w in _GPU_LAYERS and i + 1 < len(words) and words[i + 1] == "0" for i, w in enumerate(words))


class RequestResult(models.Model):
    """One request of a run, as recorded."""

    # No index of its own: the unique (run, seq) index serves lookups by run.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="requests", db_index=False)
    seq = models.PositiveIntegerField(help_text="order within the run")
    ts = models.DateTimeField(null=True)
    ok = models.BooleanField()
    http_status = models.PositiveSmallIntegerField("HTTP status", null=True)
    error = models.TextField(blank=True)
    error_type = models.CharField(max_length=24, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True)
    n_predict = models.IntegerField(null=True)
    output_tokens = models.PositiveIntegerField(null=True)
    tok_s = models.FloatField("tok/s", null=True)
    elapsed_s = models.FloatField(null=True)
    ttft_s = models.FloatField("TTFT (s)", null=True)
    extra = models.JSONField(default=dict, blank=True)
    itl_s = models.JSONField("inter-token latencies (s)", null=True, blank=True)
    # Idempotent imports: identical records of a run are told apart by occurrence.
    content_hash = models.CharField(max_length=32)
    occurrence = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["run", "seq"]
        indexes = [
            # a run page's failures by type (history.views.run_detail, run_compare): of a million requests it
            # reads only the failed ones, and an import pays the index for its failed requests alone
            models.Index(fields=["run", "error_type"], condition=Q(ok=False), name="request_failed_idx"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["run", "content_hash", "occurrence"], name="request_unique_content"),
            models.UniqueConstraint(fields=["run", "seq"], name="request_unique_seq"),
            models.CheckConstraint(condition=Q(n_predict__gte=-1), name="request_n_predict_valid"),
            models.CheckConstraint(condition=Q(tok_s__gte=0) | Q(tok_s__isnull=True), name="request_tok_s_nonneg"),
            models.CheckConstraint(
                condition=Q(http_status__gte=100, http_status__lte=599) | Q(http_status__isnull=True),
                name="request_http_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq}"

    def record_values(self) -> dict[str, Any]:
        """The request's fields under their canonical record names, absent ones as None."""
        values = {name: getattr(self, name) for name in REQUEST_FIELD_NAMES}
        return {name: (None if value == "" else value) for name, value in values.items()}


class FileImport(models.Model):
    """One attempt to import a file: its counts and, when rejected, every reason."""

    class Origin(models.TextChoices):
        UPLOAD = "upload"
        COMMAND = "command", "command line"
        DEMO = "demo"
        CALIBRATION = "calibration", "host calibration"

    class Status(models.TextChoices):
        IMPORTED = "imported"
        REJECTED = "rejected"

    filename = models.CharField(max_length=255)
    format = models.CharField(
        max_length=40, blank=True, default="", db_default="", help_text="the detected or forced input format"
    )
    sha256 = models.CharField(max_length=64)
    size_bytes = models.PositiveBigIntegerField()
    origin = models.CharField(max_length=16, choices=Origin.choices)
    status = models.CharField(max_length=16, choices=Status.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    n_read = models.PositiveIntegerField("records read", default=0)
    n_blank = models.PositiveIntegerField("blank lines", default=0)
    n_imported = models.PositiveIntegerField(default=0)
    n_duplicate = models.PositiveIntegerField(default=0)
    n_rejected = models.PositiveIntegerField(default=0)
    n_runs = models.PositiveIntegerField("runs touched", default=0)
    n_new_runs = models.PositiveIntegerField("runs stored", default=0, db_default=0)
    n_summaries = models.PositiveIntegerField("run summaries stored", default=0, db_default=0)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # import_bench --if-new: has this file been imported before?
            models.Index(fields=["sha256", "status"], name="import_sha_idx"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status="rejected") | Q(n_rejected=0), name="import_imported_has_no_rejects"
            ),
            models.CheckConstraint(
                condition=Q(status="imported") | Q(n_imported=0), name="import_rejected_stores_nothing"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.filename} ({self.status})"


class RejectedLineQuerySet(models.QuerySet["RejectedLine"]):
    def bulk_create(self, objs: Any, *args: Any, **kwargs: Any) -> list[RejectedLine]:
        """A reason names an uploaded file as it was uploaded, never the temporary path it was read from."""
        objs = list(objs)
        for line in objs:
            line.reason = as_uploaded(line.reason)
        return super().bulk_create(objs, *args, **kwargs)


class RejectedLine(models.Model):
    file_import = models.ForeignKey(FileImport, on_delete=models.CASCADE, related_name="rejected_lines")
    line_no = models.PositiveIntegerField()
    reason = models.TextField()
    excerpt = models.TextField(blank=True)

    objects = RejectedLineQuerySet.as_manager()  # the importer stores reasons with bulk_create

    class Meta:
        ordering = ["file_import", "line_no"]

    def __str__(self) -> str:
        return f"line {self.line_no}: {self.reason}"
