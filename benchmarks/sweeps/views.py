"""Launch hosts and sweeps in the browser (staff only), and the sweep result page."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.admin.views.decorators import staff_member_required
from django.db import transaction
from django.db.models import Avg, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from .. import tasks
from ..jobs.views import worker_available
from ..models import Job, LaunchHost, Run, Sweep, SweepConfig
from . import demo as demo_sweep
from . import launcher

MiB = 1024 * 1024


class LaunchHostForm(forms.ModelForm):
    class Meta:
        model = LaunchHost
        fields = [
            "name",
            "binary_path",
            "models_dir",
            "bind_address",
            "port_min",
            "port_max",
            "gpu",
            "gpu_mib",
            "queue",
            "notes",
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("port_min") and data.get("port_max") and data["port_min"] > data["port_max"]:
            raise forms.ValidationError("The port range is empty: port_min is above port_max.")
        return data


def parse_concurrencies(text: str) -> list[int]:
    try:
        values = sorted({int(part) for part in text.replace(" ", "").split(",") if part})
    except ValueError:
        raise forms.ValidationError("Concurrencies are whole numbers separated by commas, e.g. 1,2,4,8.") from None
    if not values or values[0] < 1 or values[-1] > 256 or len(values) > 12:
        raise forms.ValidationError("Give 1 to 12 concurrencies from 1 to 256.")
    return values


class SweepForm(forms.Form):
    host = forms.ModelChoiceField(queryset=LaunchHost.objects.all())
    model_file = forms.CharField(max_length=500, help_text="a .gguf file in the host's models directory")
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
    preference = forms.ChoiceField(choices=[("throughput", "throughput"), ("latency", "latency")])

    def clean_concurrencies(self) -> list[int]:
        return parse_concurrencies(self.cleaned_data["concurrencies"])

    def clean_flag_sets(self) -> list[str]:
        lines = [line.strip() for line in self.cleaned_data["flag_sets"].splitlines() if line.strip()]
        if not 1 <= len(lines) <= 20:
            raise forms.ValidationError("Give 1 to 20 flag sets, one per line.")
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
        if data.get("host") and data.get("model_file"):
            try:
                launcher.model_path(data["host"], data["model_file"])
            except launcher.LaunchRefused as exc:
                self.add_error("model_file", str(exc))
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


def create_sweep(
    host: LaunchHost, model_file: str, flag_sets: list[str], params: dict[str, Any], *, label: str = "",
    preference: str = "throughput", user: Any = None,
) -> Sweep:  # fmt: skip
    with transaction.atomic():
        sweep = Sweep.objects.create(
            host=host, model_file=model_file, label=label, params=params, preference=preference, created_by=user
        )
        SweepConfig.objects.bulk_create(
            SweepConfig(sweep=sweep, position=i, command=command) for i, command in enumerate(flag_sets)
        )
        tasks.enqueue_sweep(sweep)
    return sweep


@staff_member_required
@require_GET
def host_list(request: HttpRequest) -> HttpResponse:
    return render(request, "benchmarks/host_list.html", {"hosts": LaunchHost.objects.all()})


@staff_member_required
@require_http_methods(["GET", "POST"])
def host_edit(request: HttpRequest, pk: int | None = None) -> HttpResponse:
    host = get_object_or_404(LaunchHost, pk=pk) if pk else None
    form = LaunchHostForm(request.POST or None, instance=host)
    if request.method == "POST":
        if not form.is_valid():
            return render(request, "benchmarks/host_form.html", {"form": form, "host": host}, status=400)
        form.save()
        return redirect("host-list")
    return render(request, "benchmarks/host_form.html", {"form": form, "host": host})


@require_GET
def sweep_list(request: HttpRequest) -> HttpResponse:
    return render(request, "benchmarks/sweep_list.html", {"sweeps": Sweep.objects.select_related("host")[:100]})


@staff_member_required
@require_http_methods(["GET", "POST"])
def sweep_new(request: HttpRequest) -> HttpResponse:
    initial = {"flag_sets": "\n".join(request.GET.getlist("flags"))} if request.GET.getlist("flags") else None
    form = SweepForm(request.POST or None, initial=initial)
    if request.method == "GET":
        return render(request, "benchmarks/sweep_form.html", {"form": form})
    if not form.is_valid():
        return render(request, "benchmarks/sweep_form.html", {"form": form}, status=400)
    problem = worker_available()
    if problem:
        return render(request, "benchmarks/sweep_form.html", {"form": form, "submit_error": problem}, status=503)
    d = form.cleaned_data
    sweep = create_sweep(
        d["host"], d["model_file"], d["flag_sets"], form.params(), label=d["label"], preference=d["preference"],
        user=request.user,
    )  # fmt: skip
    return redirect("sweep-detail", pk=sweep.pk)


@staff_member_required
@require_POST
def sweep_demo(request: HttpRequest) -> HttpResponse:
    problem = worker_available()
    if problem:
        return render(request, "benchmarks/sweep_form.html", {"form": SweepForm(), "submit_error": problem}, status=503)
    host = demo_sweep.ensure_demo_host()
    sweep = create_sweep(
        host, demo_sweep.DEMO_MODEL, demo_sweep.DEMO_FLAG_SETS, demo_sweep.DEMO_PARAMS, label="demo", user=request.user
    )
    return redirect("sweep-detail", pk=sweep.pk)


@staff_member_required
@require_POST
def sweep_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    sweep = get_object_or_404(Sweep, pk=pk)
    if not Sweep.objects.filter(pk=pk, state=Sweep.State.QUEUED).update(
        state=Sweep.State.CANCELLED, cancel_requested=True, finished_at=timezone.now(), error="cancelled before it ran"
    ):
        Sweep.objects.filter(pk=pk, state=Sweep.State.RUNNING).update(cancel_requested=True)
        Job.objects.filter(sweep_config__sweep=sweep, state=Job.State.RUNNING).update(cancel_requested=True)
    return redirect("sweep-detail", pk=pk)


def config_rows(sweep: Sweep) -> list[dict[str, Any]]:
    """One row per flag set: outcome, measurements, predicted vs reported memory."""
    runs = (
        Run.objects.filter(job__sweep_config__sweep=sweep)
        .values("job__sweep_config")
        .annotate(
            ok=Sum("n_ok"),
            total=Sum("n_requests"),
            tok_s=Avg("tok_s_mean"),
            throughput=Avg("throughput_tok_s"),
            ttft_p95=Avg("ttft_p95"),
            e2e_p95=Avg("e2e_p95"),
            wall=Avg("effective_wall_s"),
        )
    )
    measured = {r["job__sweep_config"]: r for r in runs}
    rows = []
    for config in sweep.configs.order_by("position"):
        m = measured.get(config.pk, {})
        predicted, reported = config.predicted or {}, config.reported or {}
        predicted_kv = predicted.get("kv_bytes")
        reported_kv = reported.get("kv_mib")
        rows.append(
            {
                "config": config,
                "measured": m,
                "prediction": (predicted.get("prediction") or {}).get("message"),
                "predicted_outcome": (predicted.get("prediction") or {}).get("outcome"),
                "predicted_errors": predicted.get("errors") or [],
                "predicted_kv_mib": None if predicted_kv is None else predicted_kv / MiB,
                "reported_kv_mib": reported_kv,
                "kv_diff_mib": None
                if predicted_kv is None or reported_kv is None
                else reported_kv - predicted_kv / MiB,
                "predicted_compute_mib": (predicted.get("memory") or {}).get("compute_estimate_bytes", 0) / MiB
                if predicted
                else None,
                "reported_compute_mib": reported.get("compute_mib"),
                "reported_model_mib": reported.get("model_mib"),
                "n_ctx_slot": reported.get("n_ctx_slot"),
            }
        )
    ran = [r for r in rows if r["config"].outcome == SweepConfig.Outcome.RAN and r["measured"].get("total")]
    if ran:

        def score(r: dict[str, Any]) -> tuple[float, float]:
            m = r["measured"]
            success = (m["ok"] or 0) / m["total"]
            if sweep.preference == "latency":
                return success, -(m["e2e_p95"] or float("inf"))
            return success, m["throughput"] or 0.0

        best = max(ran, key=score)
        best["best"] = True
    return rows


@require_GET
def sweep_detail(request: HttpRequest, pk: int) -> HttpResponse:
    sweep = get_object_or_404(Sweep.objects.select_related("host"), pk=pk)
    run_ids = list(
        Run.objects.filter(job__sweep_config__sweep=sweep)
        .order_by("job__sweep_config__position")
        .values_list("pk", flat=True)
    )
    context = {"sweep": sweep, "rows": config_rows(sweep), "run_ids": run_ids[:12]}
    template = (
        "benchmarks/sweep_detail.html#results" if getattr(request, "htmx", False) else "benchmarks/sweep_detail.html"
    )
    return render(request, template, context)
