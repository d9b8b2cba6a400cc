"""Repeats: mean and Student t 95 % interval against a hand computation, the noisy flag, the job page."""

from __future__ import annotations

import math

import pytest
from django.urls import reverse

from benchmarks.jobs import repeats
from benchmarks.models import Job, Run, Server

# Student t, 0.975 quantile, from the printed table (e.g. NIST/SEMATECH e-Handbook, Table 1.3.6.7.2)
T_TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 9: 2.262, 10: 2.228, 19: 2.093, 29: 2.045, 100: 1.984}


def run(key, throughput=None, tok_s=None, ttft=None, e2e=None, spread=(None, None), **load):
    return {"pk": 1, "key": key, "arrival": load.get("arrival", ""), "request_rate": load.get("rate"),
            "concurrency": load.get("concurrency", 4), "tok_s_min": spread[0], "tok_s_max": spread[1],
            "throughput_tok_s": throughput, "tok_s_mean": tok_s, "ttft_p50": ttft, "e2e_p95": e2e}  # fmt: skip


@pytest.mark.parametrize(("df", "table"), T_TABLE.items())
def test_the_t_quantile_agrees_with_the_printed_table(df, table):
    assert round(repeats.student_t_975(df), 3) == table


def test_the_interval_of_three_repeats_by_hand():
    # 10, 12, 14: mean 12, s = sqrt((4 + 0 + 4) / 2) = 2, half width = 4.303 × 2 / sqrt(3) = 4.968
    stats = repeats.interval([10.0, 12.0, 14.0])
    assert stats["mean"] == 12.0 and stats["sd"] == 2.0
    assert stats["half_width"] == pytest.approx(4.3027 * 2 / math.sqrt(3), abs=1e-3)
    assert stats["ci95"][0] == pytest.approx(7.032, abs=1e-3) and stats["ci95"][1] == pytest.approx(16.968, abs=1e-3)
    assert stats["cv"] == pytest.approx(2 / 12)
    one = repeats.interval([5.0])
    assert one["ci95"] is None and one["cv"] is None and one["mean"] == 5.0


def test_a_30x_spread_between_two_repeats_is_flagged_noisy_and_says_why():
    summary = repeats.summarize_runs(
        [run("job-1-r1", throughput=300.0, tok_s=50.0), run("job-1-r2", throughput=10.0, tok_s=49.0)]
    )
    group = summary["groups"][0]
    assert summary["noisy"] and group["noisy"] and group["runs"] == ["job-1-r1", "job-1-r2"]
    assert any("aggregate throughput" in why and "30.0×" in why for why in group["why"])
    assert not any("tok/s per request" in why for why in group["why"])  # 50 vs 49 agree


def test_steady_repeats_are_not_noisy_but_a_run_whose_requests_spread_is():
    steady = [run(f"job-2-r{i}", throughput=100.0 + i, ttft=0.2, spread=(40.0, 60.0)) for i in range(1, 5)]
    assert not repeats.summarize_runs(steady)["noisy"]
    spread = steady[:3] + [run("job-2-r4", throughput=104.0, ttft=0.2, spread=(2.0, 60.0))]
    group = repeats.summarize_runs(spread)["groups"][0]
    assert group["noisy"] and group["why"] == ["job-2-r4: its requests' tok/s spread 30.0× (2 – 60), more than 3×"]


def test_a_rate_sweep_has_one_group_per_rate():
    runs = [run(f"job-3-rate{r}-r{i}", throughput=r * 100 + i, arrival="poisson") for r in (0.5, 2) for i in (1, 2)]
    groups = repeats.summarize_runs(runs)["groups"]
    assert [(g["request_rate"], g["runs"]) for g in groups] == [
        (0.5, ["job-3-rate0.5-r1", "job-3-rate0.5-r2"]),
        (2.0, ["job-3-rate2-r1", "job-3-rate2-r2"]),
    ]
    assert groups[0]["figures"]["throughput_tok_s"]["mean"] == 51.5


@pytest.mark.django_db
def test_the_job_page_shows_the_repeats_interval_and_the_noise(client):
    server = Server.objects.create(name="local", base_url="http://127.0.0.1:9")
    job = Job.objects.create(server=server, params={"requests": 2, "repeats": 2}, state="succeeded")
    for i, throughput in ((1, 300.0), (2, 10.0)):
        Run.objects.create(key=f"job-{job.pk}-r{i}", model="m", job=job, throughput_tok_s=throughput, concurrency=2)
    summary = repeats.summary(job)
    assert summary["noisy"] and summary["groups"][0]["figures"]["throughput_tok_s"]["mean"] == 155.0
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    section = page.split('id="repeats"')[1].split("</section>")[0]
    assert "Noisy" in section and "30.0×" in section and "155.000 tok/s" in section
    # the interval by hand: s = 205.06, t(1) = 12.706, half width = 12.706 × 205.06 / √2 = 1842.4
    half = repeats.student_t_975(1) * math.sqrt((145.0**2 + 145.0**2) / 1) / math.sqrt(2)
    assert f"{155 - half:.3f}" in section and f"{155 + half:.3f}" in section


@pytest.mark.django_db
def test_compare_flags_two_runs_of_one_configuration_that_differ_30x(client):
    same = {"model": "m", "ctx_size": 4096, "parallel": 2, "concurrency": 2, "prompt_tokens_max": 200}
    first = Run.objects.create(key="load-1", throughput_tok_s=300.0, tok_s_mean=40.0, **same)
    second = Run.objects.create(key="load-2", throughput_tok_s=10.0, tok_s_mean=39.0, **same)
    other = Run.objects.create(key="other", throughput_tok_s=10.0, **{**same, "ctx_size": 8192})
    page = client.get(reverse("run-compare"), {"run": [first.pk, second.pk]}).content.decode()
    noisy = page.split('id="noisy"')[1].split("</div>")[0]
    assert "load-1 and load-2" in noisy and "aggregate throughput" in noisy and "30.0×" in noisy
    assert "tok/s per request" not in noisy  # 40 vs 39 agree
    page = client.get(reverse("run-compare"), {"run": [first.pk, other.pk]}).content.decode()
    assert 'id="noisy"' not in page  # another configuration: a difference, not noise
