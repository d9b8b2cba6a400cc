"""The timeline's overview: runs rolled up into time buckets, kept as runs arrive.

At a million runs the timeline cannot read every matching run to draw a year, and a GROUP BY over
them per request costs seconds. So each run is counted into one bucket per span (an hour, six hours,
a day, a week) of its (label, model, GPU, tool, engine): per metric the smallest and largest value
and how many runs had one. The overview of any range reads at most a few hundred buckets per line
(charts.timeline_data); a range holding few runs is read raw from the runs table.
benchmarks.history.rollups keeps the table current (on import and when a job finishes).
"""

from __future__ import annotations

from django.db import models

from ..records.catalogue import METRICS

HOUR = 3600
DAY = 24 * HOUR
WEEK = 7 * DAY
SPANS = (HOUR, 6 * HOUR, DAY, WEEK)  # finest first
WEEK_STARTS = 4 * DAY  # 1970-01-01 was a Thursday: weeks start on Monday 1970-01-05
# The Run columns (and the one computed metric, success_rate) whose values are rolled up:
# records.catalogue.METRICS's columns, each as <column>_min, <column>_max and <column>_n.
ROLLED_COLUMNS = tuple(m.column for m in METRICS.values())
KEY_FIELDS = ("label", "model", "gpu", "tool", "engine")  # what a bucket is of: the timeline's exact filters


def bucket_start(seconds: int, span: int) -> int:
    """The start of the span-long bucket holding `seconds` (Unix seconds); history.rollups says it in SQL."""
    offset = WEEK_STARTS if span == WEEK else 0
    return (seconds - offset) // span * span + offset


class TimelineBucket(models.Model):
    """The runs of one (label, model, GPU, tool, engine) that started in [start, start + span_s).

    A failed run (every request failed) counts in `runs` and `failed` and in no metric: the timeline
    draws it as a red cross, not a value. Each metric's min/max/n columns are added below.
    """

    span_s = models.PositiveIntegerField()
    start = models.BigIntegerField(help_text="the bucket's start, Unix seconds (UTC)")
    label = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200)
    gpu = models.CharField(max_length=200, blank=True)
    tool = models.CharField(max_length=40, blank=True)
    engine = models.CharField(max_length=40, blank=True)
    runs = models.PositiveIntegerField()
    failed = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["span_s", *KEY_FIELDS, "start"], name="timeline_bucket_unique"),
            models.CheckConstraint(condition=models.Q(failed__lte=models.F("runs")), name="timeline_failed_le_runs"),
        ]
        indexes = [
            # timeline_data.buckets: one span's buckets in a time range, then the exact filters
            models.Index(fields=["span_s", "start"], name="timeline_bucket_range_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.label or '(none)'} {self.model} @{self.start}+{self.span_s}s: {self.runs} runs"


for _column in ROLLED_COLUMNS:
    models.FloatField(null=True).contribute_to_class(TimelineBucket, f"{_column}_min")
    models.FloatField(null=True).contribute_to_class(TimelineBucket, f"{_column}_max")
    models.PositiveIntegerField(default=0).contribute_to_class(TimelineBucket, f"{_column}_n")
