"""The explain-log page's form: a llama-server start-up log, and what it may lack (the model, its weights,
the command that started it)."""

from __future__ import annotations

from typing import Any

from django import forms

from . import catalogue
from .cmdline import parse_command
from .explain_log import Explanation, explain, model_metadata
from .forms import choices_of
from .hparams import ModelParams, ModelSpecError, model_params
from .models import GgufHead
from .parsers import MAX_PARAMS_CHARS, parse_pasted_metadata, parse_weights_size
from .placement.tensors import WeightTensor
from .server_log import LogError, StartupLog, parse_startup_log


class _NotEchoed(forms.Textarea):
    """A textarea that never sends back what was posted in it: the explain-log page answers with what it read
    of the log (its lines, its size, the lines that mattered), not with a copy of up to 2 MiB of text."""

    def format_value(self, value: Any) -> str | None:
        return None


class ExplainLogForm(forms.Form):
    """A llama-server start-up log to explain, and what it may lack: the model, its weights, the command."""

    log = forms.CharField(
        strip=False,  # its length is checked by parse_startup_log (MAX_LOG_CHARS), with a clear message
        widget=_NotEchoed(attrs={"rows": 12, "placeholder": "llama_context: n_ctx = 16384 …"}),
        label="llama-server's start-up log (best with -lv 4)",
    )
    model = forms.ChoiceField(required=False, label="the model, if the log does not print its metadata")
    quant = forms.CharField(required=False, max_length=32, label="its quantization (for the model buffer)")
    weights = forms.CharField(required=False, max_length=40, label="or the weights' size (GiB, or bytes)")
    gguf = forms.CharField(required=False, max_length=16, label="an uploaded GGUF head's token")
    params = forms.CharField(
        required=False,
        max_length=MAX_PARAMS_CHARS,
        widget=forms.Textarea(attrs={"rows": 3}),
        label="or GGUF metadata (JSON)",
    )
    command = forms.CharField(
        required=False,
        max_length=20_000,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "llama-server -m model.gguf -c 16384 …"}),
        label="the command you ran (to see what the server changed)",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["model"].choices = choices_of(catalogue.models(), "— from the log —")
        self.startup: StartupLog | None = None
        self.explanation: Explanation | None = None
        self.model_source = ""
        self.tensors: list[WeightTensor] | None = None  # an uploaded GGUF head's table, in file order

    def clean_log(self) -> str:
        text: str = self.cleaned_data["log"]
        try:
            self.startup = parse_startup_log(text)
        except LogError as exc:
            raise forms.ValidationError(str(exc)) from None
        return text

    def clean_weights(self) -> int | None:
        text = self.cleaned_data.get("weights") or ""
        return parse_weights_size(text) if text.strip() else None

    def clean(self) -> dict[str, Any]:
        super().clean()
        data: dict[str, Any] = self.cleaned_data
        if self.errors or self.startup is None:
            return data
        intended = None
        if (data.get("command") or "").strip():
            parsed = parse_command(data["command"])
            if parsed.errors:
                raise forms.ValidationError("The command line: " + "; ".join(parsed.errors))
            intended = parsed.flags
        try:
            model, weights = self._model(data)
            self.explanation = explain(
                self.startup, model, weights_bytes=weights, intended=intended, tensors=self.tensors
            )
        except ModelSpecError as exc:
            raise forms.ValidationError(f"This model cannot be sized: {exc}") from None
        return data

    def _model(self, data: dict[str, Any]) -> tuple[ModelParams | None, int | None]:
        weights = data.get("weights")
        if data.get("gguf"):
            head = GgufHead.objects.filter(token=data["gguf"]).first()
            if head is None:
                raise forms.ValidationError("That uploaded GGUF head no longer exists; upload it again.")
            self.model_source = f"the uploaded GGUF head {head.filename}"
            self.tensors = head.weight_tensors()
            return model_params(head.metadata), weights or head.weights_bytes
        if (data.get("params") or "").strip():
            self.model_source = "the pasted GGUF metadata"
            return model_params(parse_pasted_metadata(data["params"])), weights
        if data.get("model"):
            entry = catalogue.models()[data["model"]]
            quant = (data.get("quant") or "").strip().upper()
            figure = catalogue.weights_for(entry.id, quant) if quant else None
            self.model_source = f"the catalogue's {entry.name}" + (f" {quant}" if figure else "")
            return model_params(entry.metadata), weights or (figure.bytes if figure else None)
        metadata = model_metadata(self.startup) if self.startup else None
        if metadata is None:
            return None, weights
        self.model_source = "the GGUF metadata the log printed"
        return model_params(metadata), weights
