"""Rate mode, rate sweeps and goodput objectives from the job form and `manage.py bench`:
each value checked at its extremes with a message naming what to change, the values used
said back, and the params the executor and the metrics read."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from benchmarks.jobs.forms import MAX_RATES, JobForm
from benchmarks.models import Job, Server

pytestmark = pytest.mark.django_db


@pytest.fixture
def server() -> Server:
    return Server.objects.create(name="s", base_url="http://127.0.0.1:9")


def form(server: Server, **fields: object) -> JobForm:
    data = {
        "server": server.pk,
        "prompt_source": "synthetic",
        "prompt_tokens": 16,
        "n_predict": 8,
        "concurrency": 4,
        "requests": 20,
        "repeats": 1,
        "timeout_s": 5,
        **fields,
    }
    return JobForm({k: v for k, v in data.items() if v is not None})


def test_fixed_concurrency_stays_the_default_with_seed_0(server):
    f = form(server)
    assert f.is_valid(), f.errors
    params = f.params()
    assert (params["arrival"], params["seed"]) == ("", 0)
    assert "rate" not in params and "rates" not in params and "slo_ttft_ms" not in params
    assert f.load_note == "Fixed concurrency: 4 in flight."


def test_a_poisson_job_keeps_rate_seed_and_objectives_and_says_them_back(server):
    f = form(server, arrival="poisson", rate="2.5", seed="7", slo_ttft_ms="250", slo_tpot_ms="40.5")
    assert f.is_valid(), f.errors
    params = f.params()
    assert {k: params[k] for k in ("arrival", "rate", "seed", "slo_ttft_ms", "slo_tpot_ms", "concurrency")} == {
        "arrival": "poisson",
        "rate": 2.5,
        "seed": 7,
        "slo_ttft_ms": 250.0,
        "slo_tpot_ms": 40.5,
        "concurrency": 4,
    }
    assert f.load_note == (
        "Poisson arrivals at 2.5 req/s, seed 7, at most 4 in flight; a repeat's arrivals span about 8 s; "
        "goodput counts requests with TTFT ≤ 250 ms and TPOT ≤ 40.5 ms."
    )


def test_a_rate_sweep_keeps_its_rates_in_the_order_given(server):
    f = form(server, arrival="constant", rates="4, 0.5;1 , 2")
    assert f.is_valid(), f.errors
    params = f.params()
    assert params["rates"] == [4.0, 0.5, 1.0, 2.0] and "rate" not in params
    assert "constant rate at 4, 0.5, 1, 2 req/s — a sweep of 4 runs" in f.load_note
    assert "span about 40 s" in f.load_note  # 20 requests at the slowest rate, 0.5 req/s


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"arrival": "poisson"}, "rate", "Give the request rate (req/s) for Poisson arrivals."),
        ({"arrival": "poisson", "rate": "0"}, "rate", "The request rate must be above 0."),
        ({"arrival": "poisson", "rate": "-3"}, "rate", "The request rate must be above 0."),
        ({"arrival": "poisson", "rate": "1e9"}, "rate", "The request rate must be at most 1000."),
        ({"arrival": "poisson", "rate": "nan"}, "rate", "Enter a number."),
        ({"arrival": "poisson", "rate": "inf"}, "rate", "Enter a number."),
        ({"arrival": "poisson", "rate": "fast"}, "rate", "Enter a number."),
        ({"arrival": "poisson", "rate": "1", "rates": "1,2"}, "rates", "Give one request rate or a rate sweep"),
        ({"rate": "2"}, "arrival", "A request rate needs Poisson or constant arrivals"),
        ({"rates": "1,2"}, "arrival", "A request rate needs Poisson or constant arrivals"),
        ({"arrival": "gamma", "rate": "1"}, "arrival", "Select a valid choice."),
        ({"arrival": "constant", "rates": "1, 0"}, "rates", "Each rate (0) must be above 0."),
        ({"arrival": "constant", "rates": "1, nan"}, "rates", "'nan' is not a finite rate."),
        ({"arrival": "constant", "rates": "1, 1e400"}, "rates", "'1e400' is not a finite rate."),
        ({"arrival": "constant", "rates": "1, two"}, "rates", "'two' is not a number of requests per second."),
        ({"arrival": "constant", "rates": "2, 1, 2"}, "rates", "A rate sweep lists each rate once."),
        (
            {"arrival": "constant", "rates": ",".join(str(i + 1) for i in range(MAX_RATES + 1))},
            "rates",
            f"A rate sweep has at most {MAX_RATES} rates; {MAX_RATES + 1} were given.",
        ),
        (
            {"arrival": "poisson", "rate": "0.0001", "requests": "10000"},
            "rate",
            "10,000 requests at 0.0001 req/s would take 27,777.8 h to send; a repeat may span at most 24 h",
        ),
        ({"seed": "-1"}, "seed", "Ensure this value is greater than or equal to 0."),
        ({"seed": str(2**32)}, "seed", "Ensure this value is less than or equal to 4294967295."),
        ({"slo_ttft_ms": "0"}, "slo_ttft_ms", "The TTFT objective must be above 0."),
        ({"slo_tpot_ms": "-5"}, "slo_tpot_ms", "The TPOT objective must be above 0."),
        ({"slo_tpot_ms": "1e12"}, "slo_tpot_ms", "The TPOT objective must be at most 3.6e+06."),
        ({"slo_ttft_ms": "NaN"}, "slo_ttft_ms", "Enter a number."),
    ],
)
def test_the_load_fields_are_refused_at_their_extremes_with_a_message(server, fields, field, message):
    f = form(server, **fields)
    assert not f.is_valid()
    assert any(message in error for error in f.errors.get(field, [])), f.errors
    assert f.load_note == ""  # nothing said back about values that were refused


def run_bench(*args: str) -> str:
    out = StringIO()
    call_command("bench", "--server", "http://127.0.0.1:8080", "--prompt-tokens", "10", *args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--arrival", "poisson"], "--rate: Give the request rate (req/s) for Poisson arrivals."),
        (["--arrival", "poisson", "--rate", "0"], "--rate: The request rate must be above 0."),
        (["--arrival", "poisson", "--rate", "nan"], "--rate: Enter a number."),
        (["--arrival", "constant", "--rates", "1,2,2"], "--rates: A rate sweep lists each rate once."),
        (["--rate", "2"], "--arrival: A request rate needs Poisson or constant arrivals"),
        (["--seed", "-4"], "--seed: Ensure this value is greater than or equal to 0."),
        (["--slo-ttft-ms", "-1"], "--slo-ttft-ms: The TTFT objective must be above 0."),
        (["--slo-tpot-ms", "inf"], "--slo-tpot-ms: Enter a number."),
    ],
)
def test_bench_checks_the_load_options_with_the_job_form(args, message):
    with pytest.raises(CommandError) as raised:
        run_bench(*args)
    assert message in str(raised.value)
    assert Job.objects.count() == 0


def test_bench_refuses_an_unknown_arrival_before_the_form():
    with pytest.raises(CommandError, match="invalid choice: 'burst'"):
        run_bench("--arrival", "burst")


def test_the_form_page_offers_the_load_fields_and_the_dataset_as_a_prompt_source(user_client):
    page = user_client.get("/jobs/new/").content.decode()
    assert '<p data-prompt-source="dataset"><label for="id_dataset_file">' in page
    for name in ("arrival", "rate", "rates", "seed", "slo_ttft_ms", "slo_tpot_ms"):
        assert f'id="id_{name}"' in page
    assert '<option value="poisson">Poisson arrivals</option>' in page


def test_a_refused_rate_comes_back_as_a_400_with_its_message_and_nothing_submitted(user_client, server):
    data = {"server": server.pk, "prompt_source": "synthetic", "prompt_tokens": 8, "n_predict": 4}
    data |= {"concurrency": 2, "requests": 4, "repeats": 1, "timeout_s": 5, "arrival": "poisson", "rate": "-2"}
    response = user_client.post("/jobs/new/", data)
    assert response.status_code == 400
    assert "The request rate must be above 0." in response.content.decode()
    assert Job.objects.count() == 0
