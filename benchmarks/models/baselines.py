"""The regressions page's data, kept as runs arrive: each dated run's series, each series' latest run
against its baseline.

Ranking every run of the history per request (a window query over a million runs) costs the page
seconds. So each dated run is filed under its series (SeriesRun: a hash of its configuration and
workload, records.series_keys.SERIES_FIELDS, beside its label and its job's server), and for each series
(per family: alone, within a label, within a server) its latest run is compared with the median of
its previous runs, for each metric and each window the page offers (BaselineComparison). Only the
comparisons where the latest run is worse are kept: the page filters them by its thresholds and
reads the worst first down an index. benchmarks.history.baselines keeps both tables current (on
import, when a job's run is summarised, when a run is deleted).
"""

from __future__ import annotations

from django.db import models


class SeriesRun(models.Model):
    """A dated run's series: what the regressions page compares it with."""

    # No constraint, no cascade: a deleted run is reported afterwards (history.derived.runs_changed),
    # which needs its series still filed here to recompute them.
    run = models.OneToOneField(
        "Run", primary_key=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    series_key = models.BigIntegerField(help_text="a 64-bit hash of the run's configuration and workload")
    label = models.CharField(max_length=200, help_text='the run\'s label; "(none)" for none, as the page names it')
    server_pk = models.IntegerField(help_text="the server of the run's job; 0 for none")
    started_at = models.DateTimeField()

    class Meta:
        indexes = [
            # the latest runs of one series, newest first (history.baselines, per family), and the
            # series counted one by one when none regressed (charts.regression_views)
            models.Index(fields=["series_key", "started_at", "run"], name="seriesrun_series_idx"),
            models.Index(fields=["series_key", "label", "started_at", "run"], name="seriesrun_label_idx"),
            models.Index(fields=["series_key", "server_pk", "started_at", "run"], name="seriesrun_server_idx"),
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} in series {self.series_key}"


class BaselineComparison(models.Model):
    """One series' latest run against the median of its previous `window_size` runs, for one metric.

    Kept only where the latest run is worse (change < 0) and, with three or more earlier runs, by
    more than twice their spread: records.catalogue.baseline_comparison decides. The series is
    (series_key) for the family "series", (series_key, label) for "label", (series_key, server_pk)
    for "server"; the other columns are blank ("", 0).
    """

    class Family(models.TextChoices):
        SERIES = "series"
        LABEL = "label"
        SERVER = "server"

    family = models.CharField(max_length=8, choices=Family.choices)
    series_key = models.BigIntegerField()
    label = models.CharField(max_length=200, blank=True, default="")
    server_pk = models.IntegerField(default=0)
    window_size = models.PositiveSmallIntegerField()
    metric = models.CharField(max_length=16, help_text="a key of records.catalogue.METRICS")
    latest_run = models.ForeignKey(  # no index of its own: comparison_worst_idx ends with it
        "Run",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
        help_text="the series' latest run",
    )
    latest = models.FloatField()
    baseline = models.FloatField(help_text="median of the earlier runs' values")
    change = models.FloatField(help_text="relative, negative: worse")
    spread = models.FloatField(null=True, help_text="standard deviation of the earlier values, with three or more")
    history = models.PositiveSmallIntegerField(help_text="earlier runs with a value")

    class Meta:
        indexes = [
            # the regressions page: per metric, the worst changes beyond its threshold, worst first
            models.Index(
                fields=["family", "window_size", "metric", "change", "latest_run"], name="comparison_worst_idx"
            ),
            # a series' comparisons, replaced when its runs change (history.baselines)
            models.Index(fields=["series_key", "family", "label", "server_pk"], name="comparison_series_idx"),
        ]
        constraints = [models.CheckConstraint(condition=models.Q(change__lt=0), name="comparison_is_worse")]

    def __str__(self) -> str:
        return f"{self.family} {self.series_key} {self.metric} over {self.window_size}: {self.change:+.1%}"
