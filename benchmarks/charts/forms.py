"""Forms of the chart pages: each chart's whole state is a GET query string."""

from __future__ import annotations

from typing import Any

from django import forms
from django.db.models import QuerySet

from ..history.baselines import WINDOWS
from ..history.forms import RunFilterForm, ValueFilterField, match_values, offer_top
from ..models import Run
from ..records import catalogue
from . import load_curve_figure


class ChartForm(RunFilterForm):
    metric = forms.ChoiceField(choices=[(m.key, m.label) for m in catalogue.METRICS.values()], required=False)
    group = forms.ChoiceField(choices=[(k, v[0]) for k, v in catalogue.GROUPINGS.items()], required=False)
    x0 = forms.DateTimeField(required=False, widget=forms.HiddenInput, label="shown from")
    x1 = forms.DateTimeField(required=False, widget=forms.HiddenInput, label="shown to")
    sort = None  # type: ignore[assignment]
    per_page = None  # type: ignore[assignment]
    page = None  # type: ignore[assignment]

    def metric_obj(self) -> catalogue.Metric:
        return catalogue.METRICS[self.cleaned_data.get("metric") or "tok_s"]

    def grouping(self) -> str:
        return self.cleaned_data.get("group") or "label"

    def besides_outcome(self, runs: QuerySet[Run]) -> QuerySet[Run] | None:
        """The runs every filter but the outcome matches (None without an outcome filter): the timeline
        looks for an outcome's latest runs among their latest (timeline_data.OUTCOME_WINDOW)."""
        outcome = self.cleaned_data.get("outcome")
        if not outcome:
            return None
        self.cleaned_data["outcome"] = ""
        try:
            return self.narrow(runs)
        finally:
            self.cleaned_data["outcome"] = outcome


class LoadCurveForm(forms.Form):
    model = ValueFilterField(empty_label="— pick a model —")
    gpu = forms.CharField(label="GPU", required=False, max_length=200)
    label = forms.CharField(required=False, max_length=200)
    x = forms.ChoiceField(
        label="by",
        choices=list(load_curve_figure.LOAD_AXES.items()),
        required=False,
        help_text="concurrency (kvlab, vLLM, SGLang sweeps) or request rate (GuideLLM's and vLLM's rate points)",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        offer_top(self, ("model",))

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        self.model_matched = match_values(self, ("model",)).get("model")
        return data

    @property
    def curve_model(self) -> str:
        """The model the curve is of: the one typed whole, or the one value a part of it matched ('' for none,
        or for a part that matched several: the page lists them to pick from)."""
        if self.model_matched is None or len(self.model_matched.values) != 1:
            return ""
        return self.model_matched.values[0]

    def x_name(self) -> str:
        """The load axis: concurrency unless the form asks for the request rate."""
        return self.cleaned_data.get("x") or "concurrency"

    def matching(self, runs: QuerySet[Run]) -> QuerySet[Run]:
        """The runs of the model (and GPU, and label, when given) that have a value on the load axis."""
        runs = runs.filter(model=self.curve_model).exclude(**{self.x_name(): None})
        if self.cleaned_data["gpu"]:
            runs = runs.filter(gpu=self.cleaned_data["gpu"])
        if self.cleaned_data["label"]:
            runs = runs.filter(label=self.cleaned_data["label"])
        return runs


class RegressionForm(forms.Form):
    group = forms.ChoiceField(choices=[(k, v[0]) for k, v in catalogue.GROUPINGS.items()], required=False)
    # The windows history.baselines keeps compared as runs arrive: the page never ranks the history itself.
    window = forms.TypedChoiceField(
        choices=[(w, f"previous {w} runs") for w in WINDOWS], coerce=int, required=False, initial=10
    )

    def __init__(self, data: Any = None, **kwargs: Any) -> None:
        if data is not None:  # what the query leaves out is the default, and the boxes show it: the values used
            data = data.copy()
            for name, default in self.defaults().items():
                if not data.get(name):
                    data[name] = default
        super().__init__(data, **kwargs)
        for metric in catalogue.METRICS.values():
            self.fields[f"t_{metric.key}"] = forms.FloatField(
                min_value=0, max_value=1000, required=False, initial=5, label=f"{metric.label} threshold (%)"
            )

    @staticmethod
    def defaults() -> dict[str, str]:
        return {"group": "label", "window": "10", **{f"t_{m.key}": "5" for m in catalogue.METRICS.values()}}

    def thresholds(self) -> dict[str, float]:
        return {
            m.key: (self.cleaned_data.get(f"t_{m.key}") if self.cleaned_data.get(f"t_{m.key}") is not None else 5.0)
            / 100
            for m in catalogue.METRICS.values()
        }
