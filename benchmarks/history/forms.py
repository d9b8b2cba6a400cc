"""Forms for every input of the benchmark views: query strings and uploads."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db.models import Count, F, QuerySet

from ..models import Run
from . import outcomes

# Public sort names -> Run columns. "-name" sorts descending.
SORTS = {
    "date": "started_at",
    "label": "label",
    "model": "model",
    "gpu": "gpu",
    "ctx": "ctx_size",
    "parallel": "parallel",
    "concurrency": "concurrency",
    "prompt": "prompt_tokens_max",
    "ok": "n_ok",
    "tok_s": "tok_s_mean",
}
SORT_CHOICES = [(f"{sign}{name}", f"{name} {'↓' if sign else '↑'}") for name in SORTS for sign in ("-", "")]
PAGE_SIZES = (25, 50, 100, 200)
OUTCOMES = [("", "any outcome")] + [(o, outcomes.LABELS[o]) for o in (outcomes.OK, outcomes.PARTIAL, outcomes.FAILED)]


# How many values of a column a filter offers: the most used ones (STYLE 16, bounded by design).
TOP_CHOICES = 50
# Dates a filter accepts: a day after the last one must still be a date.
FIRST_DAY, LAST_DAY = dt.date(1970, 1, 1), dt.date(9998, 12, 31)
# Run ids are 64-bit signed integers on every engine.
MAX_ID = 2**63 - 1


def top_values(field: str, n: int = TOP_CHOICES) -> list[str]:
    """The n values of a Run column held by the most runs (ties by value), in value order: one query."""
    rows = Run.objects.exclude(**{field: ""}).values(field).annotate(n=Count("id")).order_by("-n", field)[:n]
    return sorted(row[field] for row in rows)


class ValueFilterField(forms.CharField):
    """Any value of a Run column, matched exactly, offered as a select of the most used values.

    The select holds at most TOP_CHOICES values plus the current one, whatever the history
    holds; any value that some run holds filters, listed or not (one indexed query to check).
    """

    default_error_messages = {"unknown": "Select a valid choice: no run has %(value)s as its %(column)s."}

    def __init__(self, *, empty_label: str = "any", **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("max_length", 200)
        super().__init__(widget=forms.Select, **kwargs)
        self.empty_label = empty_label
        self.column = ""
        self.offered: list[str] = []

    def validate(self, value: str) -> None:
        super().validate(value)
        if (
            value
            and self.column
            and value not in self.offered
            and not Run.objects.filter(**{self.column: value}).exists()
        ):
            raise forms.ValidationError(
                self.error_messages["unknown"], code="unknown", params={"value": value, "column": self.column}
            )

    def offer(self, column: str, values: list[str], current: object) -> None:
        self.column, self.offered = column, values
        choices = [("", self.empty_label)] + [(v, v) for v in values]
        if isinstance(current, str) and current and len(current) <= 200 and current not in values:
            choices.append((current, current))
        self.widget.choices = choices  # type: ignore[attr-defined]


def offer_top(form: forms.Form, names: tuple[str, ...]) -> None:
    for name in names:
        field = form.fields.get(name)
        if isinstance(field, ValueFilterField):
            field.offer(name, top_values(name), form.data.get(name) if form.is_bound else form.initial.get(name))


def _date_field(label: str) -> forms.DateField:
    return forms.DateField(
        label=label,
        required=False,
        widget=forms.DateInput(attrs={"type": "date", "min": FIRST_DAY.isoformat(), "max": LAST_DAY.isoformat()}),
        validators=[MinValueValidator(FIRST_DAY), MaxValueValidator(LAST_DAY)],
    )


class RunFilterForm(forms.Form):
    run = forms.CharField(label="run id", required=False, max_length=200, help_text="exact run id, or part of it")
    model = ValueFilterField()
    gpu = ValueFilterField(label="GPU")
    label = ValueFilterField()
    outcome = forms.ChoiceField(choices=OUTCOMES, required=False)
    date_from = _date_field("from")
    date_to = _date_field("to")
    sort = forms.ChoiceField(choices=SORT_CHOICES, required=False)
    per_page = forms.TypedChoiceField(
        label="per page", choices=[(n, n) for n in PAGE_SIZES], coerce=int, required=False, empty_value=50
    )
    page = forms.IntegerField(min_value=1, required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        offer_top(self, ("model", "gpu", "label"))

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        start, end = data.get("date_from"), data.get("date_to")
        if start and end and start > end:
            raise forms.ValidationError("'from' is after 'to'.")
        return data

    def filter(self, runs: QuerySet[Run]) -> QuerySet[Run]:
        data = self.cleaned_data
        if data.get("run"):
            runs = runs.filter(key__contains=data["run"])
        for name in ("model", "gpu", "label"):
            if data.get(name):
                runs = runs.filter(**{name: data[name]})
        if data.get("outcome"):
            runs = runs.filter(outcomes.OUTCOME_Q[data["outcome"]])
        if data.get("date_from"):
            runs = runs.filter(started_at__gte=_day_start(data["date_from"]))
        if data.get("date_to"):
            runs = runs.filter(started_at__lt=_day_start(data["date_to"] + dt.timedelta(days=1)))
        sort = data.get("sort") or "-date"
        column = SORTS[sort.lstrip("-")]
        order = F(column).desc(nulls_last=True) if sort.startswith("-") else F(column).asc(nulls_last=True)
        return runs.order_by(order, "-id" if sort.startswith("-") else "id")

    @property
    def current_sort(self) -> str:
        return (self.cleaned_data.get("sort") if self.is_valid() else None) or "-date"


def _day_start(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time.min, tzinfo=dt.UTC)


class CompareForm(forms.Form):
    run = forms.TypedMultipleChoiceField(coerce=int, error_messages={"required": "Select at least two runs."})

    MAX_RUNS = 12

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Any integer id is a valid choice here; unknown ids are a 404 in the view.
        ids = self.data.getlist("run") if hasattr(self.data, "getlist") else []
        self.fields["run"].choices = [(i, i) for i in ids]

    def clean_run(self) -> list[int]:
        ids = list(dict.fromkeys(self.cleaned_data["run"]))
        out_of_range = [i for i in ids if not 1 <= i <= MAX_ID]
        if out_of_range:
            raise forms.ValidationError(f"No run has the id {out_of_range[0]}: run ids are from 1 to {MAX_ID}.")
        if len(ids) < 2:
            raise forms.ValidationError("Select at least two runs to compare.")
        if len(ids) > self.MAX_RUNS:
            raise forms.ValidationError(f"Compare at most {self.MAX_RUNS} runs at once.")
        return ids


class ImportForm(forms.Form):
    file = forms.FileField(
        label="bench_results.jsonl",
        help_text="One JSON object per line, canonical kvlab.bench/1 or the flat lab shape.",
    )
