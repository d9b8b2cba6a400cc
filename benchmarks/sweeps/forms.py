"""Forms for launch hosts and sweeps; the web and `manage.py sweep` validate with the same ones."""

from __future__ import annotations

from typing import Any

from django import forms

from ..models import LaunchHost
from . import launcher

MAX_CONCURRENCIES = 12
MAX_CONCURRENCY = 256
MAX_FLAG_SETS = 20


class LaunchHostForm(forms.ModelForm):
    """What staff may say about a host. What it may launch is the worker's own settings."""

    class Meta:
        model = LaunchHost
        fields = ["gpu", "gpu_mib", "notes"]


def announced(limit: int = 500) -> dict[str, list[str]]:
    """The .gguf names and the binaries the launchable hosts announced, for the form's suggestions (bounded)."""
    models: dict[str, None] = {}
    binaries: dict[str, None] = {}
    for files, paths in LaunchHost.objects.launchable().values_list("gguf_files", "binaries")[:50]:
        for entry in files:
            if isinstance(entry, dict) and len(models) < limit:
                models[str(entry.get("file", ""))] = None
        binaries.update(dict.fromkeys(str(p) for p in paths[:limit]))
    return {"models": list(models), "binaries": list(binaries)}


def parse_concurrencies(text: str) -> list[int]:
    """'1, 2,4' → [1, 2, 4]: sorted, distinct, each 1..256, at most 12."""
    try:
        values = sorted({int(part) for part in text.replace(" ", "").split(",") if part})
    except ValueError:
        raise forms.ValidationError("Concurrencies are whole numbers separated by commas, e.g. 1,2,4,8.") from None
    if not values or values[0] < 1 or values[-1] > MAX_CONCURRENCY or len(values) > MAX_CONCURRENCIES:
        raise forms.ValidationError(f"Give 1 to {MAX_CONCURRENCIES} concurrencies from 1 to {MAX_CONCURRENCY}.")
    return values


class SweepForm(forms.Form):
    host = forms.ModelChoiceField(
        queryset=LaunchHost.objects.launchable(),
        help_text="hosts whose worker announced a binary and a model directory",
    )
    model_file = forms.CharField(
        max_length=500,
        help_text="one of the .gguf files the host's worker announced",
        widget=forms.TextInput(attrs={"list": "announced-models"}),
    )
    binary = forms.CharField(
        max_length=500,
        required=False,
        help_text="one of the host's binaries; empty: the first it lists",
        widget=forms.TextInput(attrs={"list": "announced-binaries"}),
    )
    label = forms.CharField(max_length=200, required=False)
    flag_sets = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 5}),
        help_text="one flag set per line, e.g. -c 16384 -np 3 --no-kv-unified (the model and port are kvlab's)",
    )
    prompt_tokens = forms.IntegerField(
        min_value=1,
        max_value=1_048_576,
        initial=300,
        required=False,
        help_text="a synthetic prompt of this many tokens",
    )
    prompt_text = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3}), max_length=2_000_000, help_text="or a real prompt"
    )
    n_predict = forms.IntegerField(min_value=1, max_value=1_048_576, initial=300, label="output tokens")
    concurrencies = forms.CharField(initial="3", help_text="a list turns each flag set into a load curve: 1,2,4,8")
    requests = forms.IntegerField(min_value=1, max_value=10_000, initial=3)
    repeats = forms.IntegerField(min_value=1, max_value=20, initial=1)
    timeout_s = forms.IntegerField(min_value=1, max_value=86_400, initial=300, label="per-request deadline (s)")
    preference = forms.ChoiceField(choices=[("throughput", "throughput"), ("latency", "latency")], initial="throughput")

    def clean_concurrencies(self) -> list[int]:
        return parse_concurrencies(self.cleaned_data["concurrencies"])

    def clean_flag_sets(self) -> list[str]:
        lines = [line.strip() for line in self.cleaned_data["flag_sets"].splitlines() if line.strip()]
        if not 1 <= len(lines) <= MAX_FLAG_SETS:
            raise forms.ValidationError(f"Give 1 to {MAX_FLAG_SETS} flag sets, one per line.")
        for number, line in enumerate(lines, start=1):
            command = line.removeprefix("llama-server").strip()
            try:
                launcher.checked_flags(command)
            except launcher.LaunchRefused as exc:
                raise forms.ValidationError(f"Flag set {number}: {exc}") from None
        return [line.removeprefix("llama-server").strip() for line in lines]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not data.get("prompt_tokens") and not (data.get("prompt_text") or "").strip():
            raise forms.ValidationError("Give a synthetic prompt length or paste a real prompt.")
        host = data.get("host")
        if host and data.get("model_file") and data["model_file"] not in host.model_files:
            self.add_error(
                "model_file",
                f"{data['model_file']!r} is not among the .gguf files the worker on {host.name} announced",
            )
        if host and data.get("binary") and data["binary"] not in host.binaries:
            self.add_error("binary", f"not among the binaries the worker on {host.name} announced")
        return data

    def params(self) -> dict[str, Any]:
        d = self.cleaned_data
        prompt: dict[str, Any] = (
            {"prompts": [d["prompt_text"]]}
            if (d.get("prompt_text") or "").strip()
            else {"prompt_tokens": d["prompt_tokens"]}
        )
        return {
            **prompt,
            "n_predict": d["n_predict"],
            "concurrencies": d["concurrencies"],
            "requests": d["requests"],
            "repeats": d["repeats"],
            "timeout_s": d["timeout_s"],
        }


class CommandSweepForm(SweepForm):
    """The sweep form of `manage.py sweep`: the launch host by name."""

    host = forms.ModelChoiceField(
        queryset=LaunchHost.objects.launchable(),
        to_field_name="name",
        error_messages={"invalid_choice": "no launch host of that name has been announced by a worker"},
    )
