"""Forms for registering servers and submitting benchmark jobs."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from sizing.cmdline import parse_command

from ..models import Server
from .client.target import TargetRefused, resolve_target

MAX_PROMPTS = 10_000
MAX_PROMPT_FILE_BYTES = 16 * 1024 * 1024


class ServerForm(forms.ModelForm):
    base_url = forms.URLField(label="base URL", max_length=300, assume_scheme="http")
    api_key = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Stored to authenticate requests; never shown back. Leave blank to keep the current key.",
    )

    class Meta:
        model = Server
        fields = ["name", "base_url", "api_key", "gpu", "launch_command", "queue", "notes"]
        widgets = {"launch_command": forms.Textarea(attrs={"rows": 2}), "notes": forms.Textarea(attrs={"rows": 3})}

    def clean_base_url(self) -> str:
        url: str = self.cleaned_data["base_url"]
        try:
            resolve_target(url)
        except TargetRefused as exc:
            raise forms.ValidationError(str(exc)) from None
        return url.rstrip("/")

    def clean_launch_command(self) -> str:
        command: str = self.cleaned_data["launch_command"]
        if command:
            parsed = parse_command(command)
            if parsed.errors:
                raise forms.ValidationError("; ".join(parsed.errors))
        return command

    def clean_api_key(self) -> str:
        key: str = self.cleaned_data["api_key"]
        if not key and self.instance.pk:
            return self.instance.api_key  # blank keeps the stored key
        return key


class JobForm(forms.Form):
    server = forms.ModelChoiceField(queryset=Server.objects.all())
    label = forms.CharField(required=False, max_length=200)
    prompt_source = forms.ChoiceField(
        choices=[("text", "a pasted real prompt"), ("file", "a prompt file"), ("synthetic", "a synthetic prompt")],
        initial="text",
    )
    prompt_text = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 6}), max_length=2_000_000)
    prompt_file = forms.FileField(required=False, help_text='one prompt per line, or JSONL with a "prompt" field')
    prompt_tokens = forms.IntegerField(
        required=False, min_value=1, max_value=1_048_576, help_text="synthetic: exactly this many tokens"
    )
    n_predict = forms.IntegerField(min_value=1, max_value=1_048_576, initial=128, label="output tokens per request")
    concurrency = forms.IntegerField(min_value=1, max_value=256, initial=1)
    requests = forms.IntegerField(min_value=1, max_value=MAX_PROMPTS, initial=1)
    repeats = forms.IntegerField(min_value=1, max_value=20, initial=1)
    cache_prompt = forms.BooleanField(required=False, label="allow prompt cache reuse")
    timeout_s = forms.IntegerField(min_value=1, max_value=86_400, initial=600, label="per-request deadline (s)")
    # Asked for only when kvlab predicts that the server's pool will refuse or fail the requests.
    run_anyway = forms.BooleanField(required=False, label="run it anyway (to reproduce the failure)")

    # Which prompt source each prompt field belongs to: the page shows only the chosen one's.
    PROMPT_FIELDS = {"prompt_text": "text", "prompt_file": "file", "prompt_tokens": "synthetic"}

    @property
    def concurrency_note(self) -> str:
        """Said when fewer requests than the concurrency are asked for: that concurrency is never reached."""
        data = self.cleaned_data if self.is_bound and hasattr(self, "cleaned_data") else {}
        requests, concurrency = data.get("requests"), data.get("concurrency")
        if requests and concurrency and requests < concurrency:
            return (
                f"Only {requests} request{'s' if requests != 1 else ''} per repeat: at most {requests} in flight at "
                f"once, so a concurrency of {concurrency} is never reached."
            )
        return ""

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        source = data["prompt_source"]
        if source == "synthetic":
            if not data.get("prompt_tokens"):
                raise forms.ValidationError("Give the synthetic prompt's length in tokens.")
            data["prompts"] = None
        elif source == "file":
            if not data.get("prompt_file"):
                raise forms.ValidationError("Choose a prompt file.")
            upload = data["prompt_file"]
            if upload.size > MAX_PROMPT_FILE_BYTES:
                raise forms.ValidationError(f"The prompt file is larger than {MAX_PROMPT_FILE_BYTES // 1048576} MiB.")
            data["prompts"] = parse_prompt_file(upload.read())
        else:
            if not (data.get("prompt_text") or "").strip():
                raise forms.ValidationError("Paste the prompt to send.")
            data["prompts"] = [data["prompt_text"]]
        return data

    def params(self) -> dict[str, Any]:
        data = self.cleaned_data
        params: dict[str, Any] = {
            key: data[key] for key in ("n_predict", "concurrency", "requests", "repeats", "cache_prompt", "timeout_s")
        }
        if data["prompts"] is None:
            params["prompt_tokens"] = data["prompt_tokens"]
        else:
            params["prompts"] = data["prompts"]
        return params


class CommandJobForm(JobForm):
    """The job form of `manage.py bench`: the server by name or base URL, everything else as on the web.

    A base URL that is not registered is measured as it is (the job records the address);
    no Server row is created for it.
    """

    server = forms.CharField(max_length=300, help_text="a registered server's name, or a base URL")  # type: ignore[assignment]

    def clean_server(self) -> Server | str:
        ref = self.cleaned_data["server"].strip()
        server = Server.objects.filter(name=ref).first() or Server.objects.filter(base_url=ref.rstrip("/")).first()
        if server:
            return server
        if "://" not in ref:
            raise forms.ValidationError(f"no server is registered as {ref!r}; give its name or a base URL")
        try:
            resolve_target(ref)
        except TargetRefused as exc:
            raise forms.ValidationError(str(exc)) from None
        return ref.rstrip("/")


def parse_prompt_file(raw: bytes) -> list[str]:
    """Prompts from a file: one per line, or JSONL objects with a "prompt" string."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise forms.ValidationError("The prompt file is not UTF-8.") from None
    prompts: list[str] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                item = json.loads(line)
            except ValueError:
                raise forms.ValidationError(f"Line {number} of the prompt file is not valid JSON.") from None
            if not isinstance(item, dict) or not isinstance(item.get("prompt"), str):
                raise forms.ValidationError(f'Line {number} of the prompt file has no "prompt" string.')
            prompts.append(item["prompt"])
        else:
            prompts.append(line)
        if len(prompts) > MAX_PROMPTS:
            raise forms.ValidationError(f"The prompt file has more than {MAX_PROMPTS:,} prompts.")
    if not prompts:
        raise forms.ValidationError("The prompt file holds no prompt.")
    return prompts
