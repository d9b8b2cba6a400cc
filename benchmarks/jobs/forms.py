"""Forms for registering servers and submitting benchmark jobs."""

from __future__ import annotations

import math
from typing import Any

from django import forms
from django.utils.html import format_html, format_html_join

from kvlab import bounded_parse
from sizing import catalogue
from sizing.cmdline import parse_command

from ..models import Server
from .arrivals import ARRIVAL_LABELS
from .client.target import TargetRefused, resolve_target
from .datasets import MAX_DATASET_BYTES, DatasetError, parse_dataset, sampled_prompts

MAX_PROMPTS = 10_000
MAX_PROMPT_FILE_BYTES = 16 * 1024 * 1024
MAX_RATE = 1000.0  # req/s: beyond it the client's own scheduling is the limit, not the server
MAX_SCHEDULE_S = 86_400.0  # a rate-mode repeat's arrivals span at most a day
MAX_RATES = 16
MAX_SLO_MS = 3_600_000.0
MAX_SEED = 2**32 - 1


def _finite_positive(value: float | None, what: str, most: float) -> float | None:
    """A float field's value checked beyond Django's own (which already refuses NaN and infinity)."""
    if value is None:
        return None
    if not math.isfinite(value) or value <= 0:
        raise forms.ValidationError(f"{what} must be above 0.")
    if value > most:
        raise forms.ValidationError(f"{what} must be at most {most:g}.")
    return value


def _number(value: float) -> str:
    return f"{value:g}"


class CatalogueGpuInput(forms.TextInput):
    """A text box whose datalist holds the sizing catalogue's GPUs: pick one, or type any other name."""

    def render(self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None) -> str:
        list_id = f"{(attrs or {}).get('id') or 'id_' + name}-catalogue"
        options = format_html_join("", '<option value="{}">', ((g.name,) for g in catalogue.gpus().values()))
        box = super().render(name, value, {**(attrs or {}), "list": list_id, "autocomplete": "off"}, renderer)
        return format_html('{}<datalist id="{}">{}</datalist>', box, list_id, options)


class ServerForm(forms.ModelForm):
    name = forms.CharField(
        max_length=100, help_text="how jobs, runs and charts name this server, e.g. gpu-box-1 or the model it serves"
    )
    base_url = forms.URLField(
        label="base URL",
        max_length=300,
        assume_scheme="http",
        help_text="where llama-server listens, e.g. http://127.0.0.1:8080 (its /health, /props and /slots are probed)",
    )
    api_key = forms.CharField(
        label="API key",
        required=False,
        max_length=300,
        widget=forms.PasswordInput(render_value=False),
        help_text="the server's --api-key, if it has one: stored to authenticate requests and never shown back. "
        "Leave blank to keep the current key.",
    )
    gpu = forms.CharField(
        label="GPU",
        required=False,
        max_length=200,
        widget=CatalogueGpuInput(attrs={"placeholder": "pick from the catalogue, or type"}),
        help_text="the GPU it runs on: one from the sizing catalogue gives its runs a memory and speed estimate; "
        "any other name is recorded as typed",
    )

    class Meta:
        model = Server
        fields = ["name", "base_url", "api_key", "gpu", "launch_command", "queue", "notes"]
        widgets = {"launch_command": forms.Textarea(attrs={"rows": 2}), "notes": forms.Textarea(attrs={"rows": 3})}
        help_texts = {
            "launch_command": "the llama-server command line it runs with (llama-server -m … -c … -np …): recorded as "
            "each run's configuration and used to check a job against the server's KV pool",
            "queue": "the Celery queue of the worker on this server's host (blank: the default queue)",
            "notes": "anything the team should know: who owns it, when it is free",
        }

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
        choices=[
            ("text", "a pasted real prompt"),
            ("file", "a prompt file"),
            ("dataset", "a prompt dataset, sampled"),
            ("synthetic", "a synthetic prompt"),
        ],
        initial="text",
    )
    prompt_text = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 6}), max_length=2_000_000)
    prompt_file = forms.FileField(required=False, help_text='one prompt per line, or JSONL with a "prompt" field')
    dataset_file = forms.FileField(
        required=False,
        label="prompt dataset (JSONL)",
        help_text='one JSON object per line with a "prompt" or "text" string; one prompt per request is drawn '
        "with the seed below",
    )
    prompt_tokens = forms.IntegerField(
        required=False, min_value=1, max_value=1_048_576, help_text="synthetic: exactly this many tokens"
    )
    n_predict = forms.IntegerField(min_value=1, max_value=1_048_576, initial=128, label="output tokens per request")
    concurrency = forms.IntegerField(
        min_value=1, max_value=256, initial=1, help_text="with a request rate: the most requests in flight at once"
    )
    requests = forms.IntegerField(min_value=1, max_value=MAX_PROMPTS, initial=1)
    repeats = forms.IntegerField(min_value=1, max_value=20, initial=1)
    cache_prompt = forms.BooleanField(required=False, label="allow prompt cache reuse")
    timeout_s = forms.IntegerField(min_value=1, max_value=86_400, initial=600, label="per-request deadline (s)")
    arrival = forms.ChoiceField(
        required=False,
        choices=list(ARRIVAL_LABELS.items()),
        initial="",
        label="load",
        help_text="fixed concurrency sends the next request as one finishes; a rate sends on a schedule",
    )
    rate = forms.FloatField(required=False, label="request rate (req/s)")
    rates = forms.CharField(
        required=False,
        max_length=400,
        label="rate sweep (req/s)",
        help_text=f'e.g. "0.5, 1, 2, 4": one run per rate, in this order (at most {MAX_RATES})',
    )
    seed = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_SEED,
        initial=0,
        help_text="draws the Poisson arrivals and the dataset sample: the same seed sends the same way",
    )
    slo_ttft_ms = forms.FloatField(required=False, label="goodput: TTFT objective (ms)")
    slo_tpot_ms = forms.FloatField(required=False, label="goodput: TPOT objective (ms)")
    # Asked for only when kvlab predicts that the server's pool will refuse or fail the requests.
    run_anyway = forms.BooleanField(required=False, label="run it anyway (to reproduce the failure)")

    # Which prompt source each prompt field belongs to: the page shows only the chosen one's.
    PROMPT_FIELDS = {
        "prompt_text": "text",
        "prompt_file": "file",
        "dataset_file": "dataset",
        "prompt_tokens": "synthetic",
    }

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

    @property
    def load_note(self) -> str:
        """The load as it will be sent, in words, from the validated values."""
        data = self.cleaned_data if self.is_bound and hasattr(self, "cleaned_data") and not self.errors else {}
        if not data:
            return ""
        cap = f"at most {data['concurrency']} in flight"
        if not data.get("arrival"):
            note = f"Fixed concurrency: {data['concurrency']} in flight"
        else:
            kind = ARRIVAL_LABELS[data["arrival"]]
            rates = data.get("rates") or [data["rate"]]
            at = ", ".join(_number(r) for r in rates) + " req/s"
            sweep = f" — a sweep of {len(rates)} runs" if data.get("rates") else ""
            longest = data["requests"] / min(rates)
            note = f"{kind} at {at}{sweep}, seed {data['seed']}, {cap}; a repeat's arrivals span about {longest:,.0f} s"
        objectives = [
            f"{name} ≤ {_number(data[key])} ms"
            for key, name in (("slo_ttft_ms", "TTFT"), ("slo_tpot_ms", "TPOT"))
            if data.get(key)
        ]
        goodput = f"; goodput counts requests with {' and '.join(objectives)}" if objectives else ""
        return f"{note}{goodput}."

    def clean_seed(self) -> int:
        seed: int | None = self.cleaned_data.get("seed")
        return 0 if seed is None else seed

    def clean_rate(self) -> float | None:
        return _finite_positive(self.cleaned_data.get("rate"), "The request rate", MAX_RATE)

    def clean_slo_ttft_ms(self) -> float | None:
        return _finite_positive(self.cleaned_data.get("slo_ttft_ms"), "The TTFT objective", MAX_SLO_MS)

    def clean_slo_tpot_ms(self) -> float | None:
        return _finite_positive(self.cleaned_data.get("slo_tpot_ms"), "The TPOT objective", MAX_SLO_MS)

    def clean_rates(self) -> list[float] | None:
        text = (self.cleaned_data.get("rates") or "").strip()
        if not text:
            return None
        items = [item.strip() for item in text.replace(";", ",").split(",") if item.strip()]
        if len(items) > MAX_RATES:
            raise forms.ValidationError(f"A rate sweep has at most {MAX_RATES} rates; {len(items)} were given.")
        rates = []
        for item in items:
            try:
                value = float(item)
            except ValueError:
                raise forms.ValidationError(f"{item!r} is not a number of requests per second.") from None
            if not math.isfinite(value):
                raise forms.ValidationError(f"{item!r} is not a finite rate.")
            rates.append(_finite_positive(value, f"Each rate ({item})", MAX_RATE) or value)
        if len(set(rates)) != len(rates):
            raise forms.ValidationError("A rate sweep lists each rate once.")
        return rates

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        self._clean_load(data)
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
        elif source == "dataset":
            self._clean_dataset(data)
        else:
            if not (data.get("prompt_text") or "").strip():
                raise forms.ValidationError("Paste the prompt to send.")
            data["prompts"] = [data["prompt_text"]]
        return data

    def _clean_load(self, data: dict[str, Any]) -> None:
        """Arrival mode, rate and sweep together: one consistent load, or a message saying what to change."""
        arrival, rate, rates = data.get("arrival") or "", data.get("rate"), data.get("rates")
        if not arrival:
            if rate is not None or rates:
                raise forms.ValidationError(
                    {"arrival": "A request rate needs Poisson or constant arrivals; fixed concurrency has no rate."}
                )
            return
        if rate is None and not rates:
            raise forms.ValidationError({"rate": f"Give the request rate (req/s) for {ARRIVAL_LABELS[arrival]}."})
        if rate is not None and rates:
            raise forms.ValidationError({"rates": "Give one request rate or a rate sweep, not both."})
        slowest = min(rates or [rate])
        span = data["requests"] / slowest
        if span > MAX_SCHEDULE_S:
            raise forms.ValidationError(
                {
                    "rates" if rates else "rate": f"{data['requests']:,} requests at {_number(slowest)} req/s would "
                    f"take {span / 3600:,.1f} h to send; a repeat may span at most {MAX_SCHEDULE_S / 3600:g} h: "
                    "raise the rate or send fewer requests."
                }
            )

    def _clean_dataset(self, data: dict[str, Any]) -> None:
        upload = data.get("dataset_file")
        if not upload:
            raise forms.ValidationError("Choose a prompt dataset (JSONL).")
        if upload.size > MAX_DATASET_BYTES:
            raise forms.ValidationError(f"The dataset is larger than {MAX_DATASET_BYTES // 1048576} MiB.")
        try:
            prompts = parse_dataset(upload.read())
            data["prompts"] = sampled_prompts(prompts, data["requests"], data["seed"])
        except DatasetError as exc:
            raise forms.ValidationError(str(exc)) from None
        name = (getattr(upload, "name", "") or "dataset")[:200]
        data["dataset"] = {"name": name, "n": data["requests"], "size": len(prompts), "seed": data["seed"]}

    def params(self) -> dict[str, Any]:
        data = self.cleaned_data
        params: dict[str, Any] = {
            key: data[key] for key in ("n_predict", "concurrency", "requests", "repeats", "cache_prompt", "timeout_s")
        }
        if data["prompts"] is None:
            params["prompt_tokens"] = data["prompt_tokens"]
        else:
            params["prompts"] = data["prompts"]
        params["arrival"] = data.get("arrival") or ""
        params["seed"] = data.get("seed") or 0
        if params["arrival"]:
            if data.get("rates"):
                params["rates"] = data["rates"]
            else:
                params["rate"] = data["rate"]
        for key in ("slo_ttft_ms", "slo_tpot_ms"):
            if data.get(key) is not None:
                params[key] = data[key]
        if data.get("dataset"):
            params["dataset"] = dict(data["dataset"])
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
                item = bounded_parse.python_loads(line)
            except bounded_parse.Refused as exc:
                raise forms.ValidationError(f"Line {number} of the prompt file is refused: {exc}.") from None
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
