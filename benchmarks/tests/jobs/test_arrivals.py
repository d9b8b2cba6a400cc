"""Arrival schedules: Poisson gaps are exponential at the asked rate (checked statistically
with fixed seeds and stated bounds), constant arrivals are exact, both reproducible."""

from __future__ import annotations

import math

import pytest

from benchmarks.jobs.arrivals import run_key_suffix, send_offsets, wave_rates

# Two-sided 99 % normal quantile, and the Kolmogorov–Smirnov 1 % critical value's constant
# (D_crit = 1.628 / sqrt(n) for large n).
Z_99 = 2.576
KS_1PCT = 1.628


def gaps(offsets: list[float]) -> list[float]:
    return [b - a for a, b in zip(offsets, offsets[1:], strict=False)]


def ks_exponential(sample: list[float], rate: float) -> float:
    """The KS statistic of a sample against the exponential distribution of this rate."""
    ordered = sorted(sample)
    n = len(ordered)
    d = 0.0
    for i, x in enumerate(ordered):
        cdf = 1 - math.exp(-rate * x)
        d = max(d, (i + 1) / n - cdf, cdf - i / n)
    return d


@pytest.mark.parametrize("seed", [0, 1, 2, 7, 42])
@pytest.mark.parametrize("rate", [0.5, 4.0, 250.0])
def test_poisson_gaps_have_mean_one_over_rate_within_a_99_percent_interval(seed, rate):
    n = 2001
    sample = gaps(send_offsets("poisson", rate, n, seed))
    # the mean of n exponential gaps has standard deviation (1/rate)/sqrt(n)
    bound = Z_99 * (1 / rate) / math.sqrt(len(sample))
    assert abs(sum(sample) / len(sample) - 1 / rate) < bound


@pytest.mark.parametrize("seed", [0, 1, 2, 7, 42])
def test_poisson_gaps_pass_a_kolmogorov_smirnov_check_against_the_exponential(seed):
    rate, n = 2.0, 2001
    sample = gaps(send_offsets("poisson", rate, n, seed))
    assert ks_exponential(sample, rate) < KS_1PCT / math.sqrt(len(sample))


def test_the_ks_check_has_teeth_it_rejects_constant_gaps_and_the_wrong_rate():
    n = 2001
    assert ks_exponential(gaps(send_offsets("constant", 2.0, n, 0)), 2.0) > KS_1PCT / math.sqrt(n - 1)
    assert ks_exponential(gaps(send_offsets("poisson", 2.4, n, 0)), 2.0) > KS_1PCT / math.sqrt(n - 1)


def test_poisson_starts_at_zero_rises_and_is_reproducible_from_its_seed():
    first = send_offsets("poisson", 3.0, 50, 9)
    assert first is not None and first[0] == 0.0
    assert all(b > a for a, b in zip(first, first[1:], strict=False))
    assert send_offsets("poisson", 3.0, 50, 9) == first
    assert send_offsets("poisson", 3.0, 50, 10) != first
    # a longer schedule of the same seed begins with the shorter one
    assert send_offsets("poisson", 3.0, 80, 9)[:50] == first


def test_constant_arrivals_are_exactly_i_over_rate():
    assert send_offsets("constant", 4.0, 5, 123) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert send_offsets("constant", 0.5, 3, 0) == [0.0, 2.0, 4.0]


def test_fixed_concurrency_has_no_schedule():
    assert send_offsets("", None, 10, 0) is None
    assert send_offsets("", 5.0, 10, 0) is None


@pytest.mark.parametrize("rate", [None, 0.0, -1.0, math.nan, math.inf])
def test_a_rate_mode_needs_a_finite_positive_rate(rate):
    with pytest.raises(ValueError, match="finite number above 0"):
        send_offsets("poisson", rate, 3, 0)


def test_an_unknown_arrival_is_refused():
    with pytest.raises(ValueError, match="unknown arrival 'gamma'"):
        send_offsets("gamma", 1.0, 3, 0)


def test_a_job_runs_once_per_rate_of_its_sweep_in_order():
    assert wave_rates({"arrival": ""}) == [None]
    assert wave_rates({}) == [None]
    assert wave_rates({"arrival": "poisson", "rate": 2}) == [2.0]
    assert wave_rates({"arrival": "constant", "rates": [4, 0.5, 1]}) == [4.0, 0.5, 1.0]
    assert run_key_suffix({"arrival": "constant", "rates": [4, 0.5]}, 0.5) == "-rate0.5"
    assert run_key_suffix({"arrival": "poisson", "rate": 2}, 2.0) == ""
    assert run_key_suffix({}, None) == ""
