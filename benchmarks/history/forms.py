"""Forms for every input of the benchmark views: query strings and uploads."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db.models import F, Func, Q, QuerySet
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html

from ..models import Run
from ..models.outcomes import OUTCOME_Q
from ..records import outcomes
from ..records.formats import Declared
from . import values

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
KEY_SEARCH_RUNS = 20_000  # the latest runs in which a part of a run id is looked for
DATED_SORTS = ("label", "model", "gpu")  # indexed with started_at (run_label_idx …): ties by date
SORT_CHOICES = [(f"{sign}{name}", f"{name} {'↓' if sign else '↑'}") for name in SORTS for sign in ("-", "")]
PAGE_SIZES = (25, 50, 100, 200)
# Run columns a filter matches exactly (indexed with started_at: run_model_idx … run_engine_idx).
VALUE_FILTERS = ("model", "gpu", "label", "tool", "engine")
OUTCOMES = [("", "any outcome")] + [
    (o, outcomes.LABELS[o]) for o in (outcomes.OK, outcomes.PARTIAL, outcomes.FAILED, outcomes.UNKNOWN)
]


# Dates a filter accepts: a day after the last one must still be a date.
FIRST_DAY, LAST_DAY = dt.date(1970, 1, 1), dt.date(9998, 12, 31)
# Run ids are 64-bit signed integers on every engine.
MAX_ID = 2**63 - 1


class SuggestInput(forms.TextInput):
    """A text box with a datalist of values from the data, refreshed as the user types.

    The datalist first holds the most used values; typing asks /runs/values/ (htmx, after a
    250 ms pause) for the values matching the text, sent under the input's own name. Without
    JavaScript the datalist keeps the most used values and a value typed in full still filters.
    """

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs)
        self.offered: Callable[[], list[str]] = list  # set by ValueFilterField.offer: read only when drawn

    def render(self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None) -> str:
        list_id = f"{(attrs or {}).get('id') or 'id_' + name}-values"
        attrs = {
            **(attrs or {}),
            "list": list_id,
            "autocomplete": "off",
            "hx-get": reverse("run-values"),
            "hx-trigger": "input changed delay:250ms",
            "hx-target": f"#{list_id}",
            "hx-swap": "innerHTML",
            "hx-sync": "this:replace",  # a newer text cancels the answer still coming for an older one
            "hx-push-url": "false",  # the filter form pushes its URL; a suggestion is not a new state
        }
        options = render_to_string("benchmarks/value_options.html", {"values": self.offered()})
        return format_html(
            '{}<datalist id="{}">{}</datalist>', super().render(name, value, attrs, renderer), list_id, options
        )


@dataclass(frozen=True)
class Matched:
    """What a value filter's text matched: the value itself when some run holds it whole, else the values
    (at most values.SUGGESTIONS) that contain it, in any case: those starting with it among every run,
    those containing it among the latest values.RECENT_RUNS (the suggestions' rule and bound)."""

    typed: str
    values: tuple[str, ...]
    exact: bool

    @property
    def more_possible(self) -> bool:
        """Whether the text may match values beyond those listed (the list is full)."""
        return not self.exact and len(self.values) >= values.SUGGESTIONS

    @property
    def recent_runs(self) -> int:
        return values.RECENT_RUNS

    def q(self, column: str) -> Q:
        if len(self.values) == 1:
            return Q(**{column: self.values[0]})  # the filter's dated index (run_model_idx …), as before
        return Q(**{f"{column}__in": self.values})


class ValueFilterField(forms.CharField):
    """Any value of a Run column, typed with the suggestions of a SuggestInput: a value some run holds
    filters exactly; a part of one, in any case, filters by the values it matches (Matched), and a text
    that matches none filters to no runs, which the page says — never an error.

    The page offers at most values.TOP_CHOICES values whatever the history holds, and suggests
    at most values.SUGGESTIONS for a typed text; matching a text costs what suggesting for it costs
    (one indexed query for the exact value, at most two more for a part).
    """

    def __init__(self, *, empty_label: str = "any", **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("max_length", 200)
        super().__init__(widget=SuggestInput(attrs={"placeholder": empty_label}), **kwargs)
        self.column = ""

    def matched(self, value: str) -> Matched:
        if Run.objects.filter(**{self.column: value}).exists():
            return Matched(value, (value,), exact=True)
        return Matched(value, tuple(values.suggest_values(self.column, value)), exact=False)

    def offer(self, column: str, offered: Callable[[], list[str]]) -> None:
        self.column = column
        self.widget.offered = offered  # type: ignore[attr-defined]


def match_values(form: forms.Form, names: tuple[str, ...]) -> dict[str, Matched]:
    """What each filled value filter of a valid form matched, by field name."""
    found = {}
    for name in names:
        field, text = form.fields.get(name), form.cleaned_data.get(name)
        if isinstance(field, ValueFilterField) and field.column and text:
            found[name] = field.matched(text)
    return found


def offer_top(form: forms.Form, names: tuple[str, ...]) -> None:
    """Let the form's value filters offer the most used values: one query for all of them, made
    only when the form is drawn (an htmx swap of the results alone makes none)."""
    fields = {name: form.fields[name] for name in names if isinstance(form.fields.get(name), ValueFilterField)}
    top: dict[str, list[str]] = {}

    def offered(name: str) -> list[str]:
        if not top:
            top.update(values.top_values(tuple(fields)))
        return top[name]

    for name, field in fields.items():
        field.offer(name, partial(offered, name))  # type: ignore[attr-defined]


def _date_field(label: str) -> forms.DateField:
    return forms.DateField(
        label=label,
        required=False,
        widget=forms.DateInput(attrs={"type": "date", "min": FIRST_DAY.isoformat(), "max": LAST_DAY.isoformat()}),
        validators=[MinValueValidator(FIRST_DAY), MaxValueValidator(LAST_DAY)],
    )


class RunFilterForm(forms.Form):
    run = forms.CharField(
        label="run id",
        required=False,
        max_length=200,
        help_text="a whole run id (any run), or part of one (among the latest 20,000 runs)",
    )
    model = ValueFilterField()
    gpu = ValueFilterField(label="GPU")
    label = ValueFilterField()
    tool = ValueFilterField(help_text="the benchmark tool that measured the run: vllm, guidellm, kvlab, …")
    engine = ValueFilterField(help_text="the serving engine: llama.cpp, vllm, sglang, …")
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
        offer_top(self, VALUE_FILTERS)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        start, end = data.get("date_from"), data.get("date_to")
        if start and end and start > end:
            raise forms.ValidationError("'from' is after 'to'.")
        self.matched = match_values(self, VALUE_FILTERS)
        return data

    def partial_matches(self) -> list[tuple[str, Matched]]:
        """The value filters typed as a part of a value (or as none), with what they matched: the page says."""
        return [(self[n].label, m) for n, m in getattr(self, "matched", {}).items() if not m.exact]

    def filter(self, runs: QuerySet[Run]) -> QuerySet[Run]:
        """The runs the filters match, in the chosen order."""
        return self.order(self.narrow(runs))

    def narrow(self, runs: QuerySet[Run]) -> QuerySet[Run]:
        """The runs the filters match, unordered."""
        data = self.cleaned_data
        if data.get("run"):
            # A run id typed whole is found anywhere (the unique index); a part of one among the latest
            # KEY_SEARCH_RUNS runs: a substring can use no index, and a search of every run reads them all.
            latest = first_runs(("started_at", "id"), descending=True, n=KEY_SEARCH_RUNS)
            runs = runs.filter(Q(key=data["run"]) | (Q(key__contains=data["run"]) & latest))
        for name, matched in self.matched.items():
            runs = runs.filter(matched.q(name)) if matched.values else runs.none()
        if data.get("outcome"):
            runs = runs.filter(OUTCOME_Q[data["outcome"]])
        if data.get("date_from"):
            runs = runs.filter(started_at__gte=_day_start(data["date_from"]))
        if data.get("date_to"):
            runs = runs.filter(started_at__lt=_day_start(data["date_to"] + dt.timedelta(days=1)))
        return runs

    def narrows(self) -> bool:
        """Whether any filter is set (the sort and the page aside)."""
        return any(self.cleaned_data.get(name) for name in ("run", *VALUE_FILTERS, "outcome", "date_from", "date_to"))

    def sorts_by_value(self) -> bool:
        """Sorted by a run's value (tok/s, label …), not by date."""
        return self.current_sort.lstrip("-") != "date"

    def sort_columns(self) -> tuple[list[str], bool]:
        """The columns the chosen sort orders by, and whether it goes down."""
        sort = self.current_sort
        name = sort.lstrip("-")
        return [SORTS[name], *(("started_at",) if name in DATED_SORTS else ()), "id"], sort.startswith("-")

    def latest_matches(self, runs: QuerySet[Run], n: int) -> QuerySet[Run]:
        """The latest n runs the filters match (all of them if fewer), unordered: a range of the filter's
        dated index (run_model_idx …, or run_started_idx), whatever the history holds."""
        matches = self.narrow(runs)
        return matches.filter(first_runs(("started_at", "id"), descending=True, n=n, among=matches))

    def order(self, runs: QuerySet[Run], *, by_index: bool = True) -> QuerySet[Run]:
        """The runs in the chosen order.

        A run without the value sorts as the lowest, on both engines; ties go by date (label, model,
        GPU) or id, in the sort's direction: every sort is a walk down one index (models.history:
        run_*_idx, run_sort_*_idx). by_index=False orders by the same values through an expression no
        index serves, so that the database finds the (few) matching runs by a filter's index and sorts
        them, instead of walking the sort's index past every run the filter rejects.
        """
        columns, descending = self.sort_columns()
        values = [F(c) if by_index or c == "id" else Unindexed(c) for c in columns]
        if descending:
            return runs.order_by(*(v.desc(nulls_last=True) for v in values))
        return runs.order_by(*(v.asc(nulls_first=True) for v in values))

    @property
    def current_sort(self) -> str:
        return (self.cleaned_data.get("sort") if self.is_valid() else None) or "-date"


def first_runs(
    columns: list[str] | tuple[str, ...], *, descending: bool, n: int, among: QuerySet[Run] | None = None
) -> Q:
    """The runs among the first n in this order (NULL the lowest value; of `among`, else of every run), as a
    range of the order's index.

    The n-th run is found by one bounded walk of the index (OFFSET n - 1); the runs up to it are those
    whose (columns…) come before or at its, written as the lexicographic comparison with a leading
    range on the first column, which both engines turn into a range of the same index: a plan that
    reads at most n runs, however the filters around it are judged (given an IN of the first n ids,
    PostgreSQL misjudged a filter and read every run instead).
    """
    order = [F(c).desc(nulls_last=True) if descending else F(c).asc(nulls_first=True) for c in columns]
    edge = (Run.objects.all() if among is None else among).order_by(*order).values_list(*columns)[n - 1 : n]
    if not edge:
        return Q()  # fewer than n runs: all of them
    return _up_to(list(columns), list(edge[0]), descending)


def _up_to(columns: list[str], values: list[Any], descending: bool) -> Q:
    """(columns…) at or before `values` in the order: lexicographic, NULL the lowest value."""
    column, value, rest = columns[0], values[0], columns[1:]
    if descending:  # before = greater; everything is greater than or equal to NULL
        before = Q(**{f"{column}__isnull": False}) if value is None else Q(**{f"{column}__gt": value})
        bound = Q() if value is None else Q(**{f"{column}__gte": value})
    else:  # before = smaller; NULL is smaller than every value
        if value is None:
            before, bound = Q(pk__in=[]), Q(**{f"{column}__isnull": True})
        else:
            before = Q(**{f"{column}__lt": value}) | Q(**{f"{column}__isnull": True})
            bound = Q(**{f"{column}__lte": value}) | Q(**{f"{column}__isnull": True})
    same = Q(**{f"{column}__isnull": True}) if value is None else Q(**{column: value})
    if not rest:
        return before | same
    return bound & (before | (same & _up_to(rest, values[1:], descending)))


class Unindexed(Func):
    """A column's value through an expression no index serves: ``+x`` on SQLite (its documented way to
    keep an index out of a plan), ``(x + 0)``, ``(x || '')`` or ``(x + INTERVAL '0 seconds')`` on PostgreSQL.
    Same order, NULLs too."""

    def __init__(self, column: str) -> None:
        super().__init__(F(column))
        self.column = column

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> Any:  # type: ignore[override]
        if connection.vendor == "sqlite":
            template = "(+%(expressions)s)"
        elif Run._meta.get_field(self.column).get_internal_type() in ("CharField", "TextField"):
            template = "(%(expressions)s || '')"
        elif Run._meta.get_field(self.column).get_internal_type() == "DateTimeField":
            template = "(%(expressions)s + INTERVAL '0 seconds')"
        else:
            template = "(%(expressions)s + 0)"
        return super().as_sql(compiler, connection, template=template, **extra)


def _day_start(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time.min, tzinfo=dt.UTC)


class ValueSearchForm(forms.Form):
    """/runs/values/: the text typed so far in one filter, under that filter's name (?model=qwen)."""

    model = forms.CharField(required=False, max_length=200)
    gpu = forms.CharField(required=False, max_length=200)
    label = forms.CharField(required=False, max_length=200)
    tool = forms.CharField(required=False, max_length=200)
    engine = forms.CharField(required=False, max_length=200)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        named = [name for name in values.FILTER_COLUMNS if name in self.data]
        if len(named) != 1:
            raise forms.ValidationError(
                "Name one filter to search: model, gpu or label — or tool, engine (e.g. ?model=qwen).", code="column"
            )
        self.column = named[0]
        return data

    def suggestions(self) -> list[str]:
        return values.suggest_values(self.column, self.cleaned_data[self.column])


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


class DeclaredForm(forms.Form):
    """What a file lacks but its runs need, declared by the user (import_bench's options, the upload form).

    A declared value never overrides one the file holds; the run's provenance says which it was.
    """

    gpu = forms.CharField(label="GPU", required=False, max_length=200, help_text="e.g. RTX 4090 24GB")
    engine = forms.CharField(required=False, max_length=40, help_text="llama.cpp, vllm, sglang, …")
    label = forms.CharField(required=False, max_length=200)
    model = forms.CharField(required=False, max_length=200)
    server_flags = forms.CharField(
        label="server flags",
        required=False,
        max_length=10_000,
        help_text="the server's command line, e.g. -c 16384 -np 4",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        for name, value in data.items():
            if isinstance(value, str) and "\x00" in value:
                self.add_error(name, "contains a NUL character")
        return data

    def declared(self) -> Declared:
        return Declared(**{name: self.cleaned_data.get(name) or "" for name in type(self).base_fields})


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("widget", MultipleFileInput())
        super().__init__(*args, **kwargs)

    def clean(self, data: Any, initial: Any = None) -> list[Any]:
        single = super().clean
        if isinstance(data, (list, tuple)) and data:
            return [single(d, initial) for d in data]
        return [single(data or None, initial)]


class ImportForm(DeclaredForm):
    file = MultipleFileField(
        label="files",
        help_text=(
            "kvlab JSONL (kvlab.bench/1 or /2, or the flat lab shape) or another tool's result files: vLLM, SGLang, "
            "GuideLLM, AIPerf, GenAI-Perf, llmperf, llama-bench — detected from the content. The files of one run "
            "given together (an llmperf summary with its responses, AIPerf's exports with inputs.json, a vLLM "
            "sweep's files) are joined as in their directory; every other file is imported on its own."
        ),
    )
    server_log = forms.FileField(
        label="llama-server start-up log", required=False, help_text="attached to the imported runs"
    )

    field_order = ["file", "gpu", "engine", "label", "model", "server_flags", "server_log"]

    def declared(self) -> Declared:
        return Declared(**{name: self.cleaned_data.get(name) or "" for name in DeclaredForm.base_fields})
