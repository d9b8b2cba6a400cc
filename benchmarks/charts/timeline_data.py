"""What the timeline draws for a filter and a visible range: the runs themselves, or their buckets.

A range that holds at most RAW_MAX matching runs is read raw, through the runs indexes, each point a
run. A range that holds more is drawn from the rolled-up buckets (models.rollups.TimelineBucket):
per line, at most MAX_BUCKETS buckets of the finest span that fits, each the min and the max of the
runs in it; zooming in narrows the range until it is read raw. Every read is bounded (a LIMIT), so
the page costs the same at a thousand runs as at ten million.

Filters the buckets cannot express (an outcome, part of a run id) and groupings they do not hold
(server, configuration, configuration + workload) read the latest RAW_MAX runs of the range, and
the page says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db.models import Max, Min, QuerySet, Sum

from ..models import Run
from ..models.rollups import KEY_FIELDS, SPANS, WEEK, TimelineBucket, bucket_start
from ..models.run_queries import NEWEST_FIRST
from ..records.catalogue import GROUPINGS, Metric
from ..records.outcomes import FAILED

# Runs drawn one by one; more than this in the range are drawn as buckets. Chromium paints about 0.1 ms
# a point on a 2-core machine, past 200 ms of Plotly's own start: 2,000 points keep a page under 500 ms.
RAW_MAX = 2_000
MAX_BUCKETS = 240  # buckets per line: the finest span that gives at most this many over the range
MAX_BUCKET_ROWS = 20_000  # buckets read in all (30 lines of 240 need 7,200)
# An outcome filter draws the latest RAW_MAX matching runs among the latest OUTCOME_WINDOW of the range: a
# walk of the date index (PostgreSQL guesses "n_ok = n_requests" at 0.5 % of runs, not 85 %, and sorts them all).
OUTCOME_WINDOW = 20_000
MAX_DRAWN = 1_000  # buckets drawn in all (two points each): past it, neighbours in a line are merged
REDUCIBLE_GROUPINGS = ("label", "model", "gpu")  # TimelineBucket's key holds these
SPAN_WORDS = {3600: "hour", 6 * 3600: "6 hours", 24 * 3600: "day", 7 * 24 * 3600: "week"}


@dataclass
class TimelineData:
    """The runs (`rows`) or the buckets (`buckets`, of `span_s` seconds) the timeline draws."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    buckets: list[dict[str, Any]] = field(default_factory=list)
    span_s: int = 0
    truncated: bool = False  # raw: more runs matched than RAW_MAX; these are the latest
    why_raw: str = ""  # raw although the range holds more than RAW_MAX runs: why no overview
    window: int = 0  # the runs were looked for among the latest `window` runs of the range (an outcome)
    n_runs: int = 0  # the runs drawn, or the runs in the buckets drawn


def not_reducible(data: dict[str, Any], grouping: str) -> str:
    """Why the buckets cannot draw this filter and grouping ("" when they can)."""
    if grouping not in REDUCIBLE_GROUPINGS:
        return f"grouped by {GROUPINGS[grouping][0]}"
    if data.get("outcome") not in ("", None, FAILED):  # failed runs are counted per bucket: crosses
        return "filtered by outcome"
    if data.get("run"):
        return "filtered by run id"
    return ""


def in_range(runs: QuerySet[Run], data: dict[str, Any]) -> QuerySet[Run]:
    """The runs in the zoomed range (x0..x1, from the chart's URL), beside the form's date filters."""
    if data.get("x0"):
        runs = runs.filter(started_at__gte=data["x0"])
    if data.get("x1"):
        runs = runs.filter(started_at__lte=data["x1"])
    return runs


def read(
    runs: QuerySet[Run],
    data: dict[str, Any],
    metric: Metric,
    grouping: str,
    raw_values: dict[str, Any],
    besides_outcome: QuerySet[Run] | None = None,
) -> TimelineData:
    """runs: the form's filtered, dated runs, newest first; data: its cleaned_data; raw_values: the
    values() arguments of a raw row (`args`, `kwargs`); besides_outcome: the runs every filter but the
    outcome matches, when an outcome is chosen."""
    runs = in_range(runs, data)
    why = not_reducible(data, grouping)
    # one bounded count: a range of at most RAW_MAX runs is drawn run by run
    if not why and runs.order_by().values("pk")[: RAW_MAX + 1].count() > RAW_MAX:
        reduced = _reduced(data, metric, grouping)
        if isinstance(reduced, TimelineData):
            return reduced
        why = reduced
    window = 0
    if why and besides_outcome is not None:
        # from the start of the OUTCOME_WINDOW-th latest run (an index walk): a date range both engines
        # read down the date index, whatever they guess of the outcome
        latest = in_range(besides_outcome, data).order_by(*NEWEST_FIRST).values_list("started_at", flat=True)
        window, bound = OUTCOME_WINDOW, list(latest[OUTCOME_WINDOW - 1 : OUTCOME_WINDOW])
        if bound:
            runs = runs.filter(started_at__gte=bound[0])
    rows = list(runs.values(*raw_values["args"], **raw_values["kwargs"])[: RAW_MAX + 1])
    truncated = len(rows) > RAW_MAX
    return TimelineData(
        rows=rows[:RAW_MAX], truncated=truncated, why_raw=why if truncated else "", n_runs=len(rows), window=window
    )


def _reduced(data: dict[str, Any], metric: Metric, grouping: str) -> TimelineData | str:
    """The buckets over the range (the data's first to last run where the URL leaves it open), or
    why not: too many (a line per run, where every run has its own model), or none yet."""
    matching = TimelineBucket.objects.filter(**{name: data[name] for name in KEY_FIELDS if data.get(name)})
    only_failed = data.get("outcome") == FAILED
    if only_failed:
        matching = matching.filter(failed__gt=0)
    first, last = _span_of(matching, data)
    span = next((s for s in SPANS if (last - first) / s <= MAX_BUCKETS), SPANS[-1])
    column = metric.column
    buckets = matching.filter(span_s=span, start__gte=bucket_start(first, span), start__lte=last)
    field_name = GROUPINGS[grouping][1][0]
    rows = list(
        buckets.values(field_name, "start")
        .annotate(
            runs=Sum("runs"),
            failed=Sum("failed"),
            lo=Min(f"{column}_min"),
            hi=Max(f"{column}_max"),
            valued=Sum(f"{column}_n"),
        )
        .order_by(field_name, "start")[: MAX_BUCKET_ROWS + 1]
    )
    if len(rows) > MAX_BUCKET_ROWS:
        return f"more than {MAX_BUCKET_ROWS:,} buckets: too many lines"
    if not rows:  # runs stored behind history.derived's back: `manage.py rebuild_derived` counts them
        return "the overview is not built"
    for row in rows:
        row["end"] = row["start"] + span
        if only_failed:  # the failed runs alone: no value, a cross per bucket
            row.update(runs=row["failed"], lo=None, hi=None, valued=0)
    n_runs = sum(r["runs"] for r in rows)
    return TimelineData(buckets=merged(rows, -(-len(rows) // MAX_DRAWN), field_name), span_s=span, n_runs=n_runs)


def merged(rows: list[dict[str, Any]], k: int, line: str) -> list[dict[str, Any]]:
    """Each line's buckets (rows in line, start order) merged k neighbours at a time: the min of their
    minima, the max of their maxima, the sums of their counts, from the first start to the last end."""
    if k <= 1:
        return rows
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []
    for row in rows:
        if run and (len(run) == k or run[0][line] != row[line]):
            out.append(_merge(run, line))
            run = []
        run.append(row)
    if run:
        out.append(_merge(run, line))
    return out


def _merge(run: list[dict[str, Any]], line: str) -> dict[str, Any]:
    lows = [r["lo"] for r in run if r["lo"] is not None]
    highs = [r["hi"] for r in run if r["hi"] is not None]
    return {
        line: run[0][line],
        "start": run[0]["start"],
        "end": run[-1]["end"],
        "runs": sum(r["runs"] for r in run),
        "failed": sum(r["failed"] for r in run),
        "valued": sum(r["valued"] for r in run),
        "lo": min(lows) if lows else None,
        "hi": max(highs) if highs else None,
    }


def _span_of(matching: QuerySet[TimelineBucket], data: dict[str, Any]) -> tuple[int, int]:
    """The range to draw, in Unix seconds: the URL's x0..x1, else the matching week buckets' first start
    and last end, within the form's dates (one aggregate over a few thousand weeks)."""
    if data.get("x0") and data.get("x1"):
        return int(data["x0"].timestamp()), int(data["x1"].timestamp())
    weeks = matching.filter(span_s=WEEK).aggregate(first=Min("start"), last=Max("start"))
    first, last = weeks["first"] or 0, (weeks["last"] or 0) + WEEK
    starts = [int(_day(data["date_from"]).timestamp())] if data.get("date_from") else []
    ends = [int(_day(data["date_to"] + timedelta(days=1)).timestamp())] if data.get("date_to") else []
    if data.get("x0"):
        starts.append(int(data["x0"].timestamp()))
    if data.get("x1"):
        ends.append(int(data["x1"].timestamp()))
    return max([first, *starts]), min([last, *ends])


def _day(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def when(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
