"""Forms for every input of the benchmark views: query strings and uploads."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.db.models import F, QuerySet

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


def _distinct(field: str) -> list[tuple[str, str]]:
    values = Run.objects.exclude(**{field: ""}).order_by(field).values_list(field, flat=True).distinct()
    return [("", "any")] + [(v, v) for v in values]


class RunFilterForm(forms.Form):
    run = forms.CharField(label="run id", required=False, max_length=200, help_text="exact run id, or part of it")
    model = forms.ChoiceField(required=False)
    gpu = forms.ChoiceField(label="GPU", required=False)
    label = forms.ChoiceField(required=False)
    outcome = forms.ChoiceField(choices=OUTCOMES, required=False)
    date_from = forms.DateField(label="from", required=False, widget=forms.DateInput(attrs={"type": "date"}))
    date_to = forms.DateField(label="to", required=False, widget=forms.DateInput(attrs={"type": "date"}))
    sort = forms.ChoiceField(choices=SORT_CHOICES, required=False)
    per_page = forms.TypedChoiceField(
        label="per page", choices=[(n, n) for n in PAGE_SIZES], coerce=int, required=False, empty_value=50
    )
    page = forms.IntegerField(min_value=1, required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("model", "gpu", "label"):
            self.fields[name].choices = _distinct(name)

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
