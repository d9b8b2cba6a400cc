"""The "calibrate this host" form: which announced model, with which llama-server's llama-bench, how much."""

from __future__ import annotations

from typing import Any

from django import forms

from ..models import LaunchHost


class CalibrationForm(forms.Form):
    """Bounded so one calibration costs the host minutes, not hours: llama-bench runs one pp and one tg test,
    each `repetitions` times (its -p, -n, -ngl, -r)."""

    model_file = forms.ChoiceField(help_text="one of the .gguf files the host's worker announced")
    binary = forms.ChoiceField(
        required=False, help_text="the announced llama-server whose directory holds the llama-bench to run"
    )
    n_prompt = forms.IntegerField(min_value=1, max_value=16_384, initial=512, label="prompt tokens (pp)")
    n_gen = forms.IntegerField(min_value=1, max_value=4_096, initial=128, label="generated tokens (tg)")
    n_gpu_layers = forms.IntegerField(
        min_value=0, max_value=999, initial=999, label="GPU layers (-ngl)", help_text="999: every layer"
    )
    repetitions = forms.IntegerField(min_value=1, max_value=10, initial=3, label="repetitions (-r)")

    def __init__(self, *args: Any, host: LaunchHost, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.host = host
        self.fields["model_file"].choices = [(name, name) for name in host.model_files[:500]]  # type: ignore[attr-defined]
        self.fields["binary"].choices = (
            [("", "the first announced")]
            + [  # type: ignore[attr-defined]
                (str(path), str(path)) for path in host.binaries[:50]
            ]
        )

    def params(self) -> dict[str, int]:
        d = self.cleaned_data
        return {key: int(d[key]) for key in ("n_prompt", "n_gen", "n_gpu_layers", "repetitions")}
