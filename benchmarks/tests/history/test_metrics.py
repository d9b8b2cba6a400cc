from datetime import UTC, datetime

from benchmarks.records.metrics import summarize


def request(ok=True, ts=None, prompt=None, n_predict=None, output=None, tok_s=None, elapsed=None):
    return (ts, ok, 200 if ok else 500, None, None, prompt, n_predict, output, tok_s, elapsed, None)


def test_success_rate_and_tok_s_come_from_the_ok_requests():
    summary = summarize(
        [request(tok_s=10.0), request(tok_s=30.0), request(ok=False, tok_s=99.0), request(tok_s=None)], None
    )
    assert (summary.n_requests, summary.n_ok) == (4, 3)
    assert (summary.tok_s_mean, summary.tok_s_min, summary.tok_s_max) == (20.0, 10.0, 30.0)


def test_wall_time_is_the_reported_one_else_the_longest_request():
    assert summarize([request(elapsed=5.0), request(elapsed=7.5)], None)[9:11] == (7.5, "derived")
    assert summarize([request(elapsed=5.0)], 615.0)[9:11] == (615.0, "reported")
    assert summarize([request()], None)[9:11] == (None, "")


def test_throughput_needs_every_ok_request_to_report_its_output_tokens():
    complete = summarize([request(output=100, elapsed=4.0), request(output=300, elapsed=8.0)], None)
    assert (complete.output_tokens_total, complete.throughput_tok_s) == (400, 50.0)
    partial = summarize([request(output=100, elapsed=4.0), request(output=None, elapsed=8.0)], None)
    assert (partial.output_tokens_total, partial.throughput_tok_s) == (None, None)
    failed_only = summarize([request(ok=False, output=None, elapsed=1.0)], None)
    assert failed_only.output_tokens_total is None


def test_the_run_starts_with_its_first_request_and_reports_maxima():
    early, late = datetime(2026, 9, 18, 19, tzinfo=UTC), datetime(2026, 9, 18, 20, tzinfo=UTC)
    summary = summarize([request(ts=late, prompt=10, n_predict=5), request(ts=early, prompt=4362, n_predict=-1)], None)
    assert (summary.started_at, summary.prompt_tokens_max, summary.n_predict_max) == (early, 4362, 5)


def test_an_empty_run_has_no_figures():
    summary = summarize([], None)
    assert (summary.n_requests, summary.n_ok, summary.tok_s_mean, summary.started_at) == (0, 0, None, None)


def test_percentiles_are_nearest_rank_and_the_tail_needs_twenty_values():
    from benchmarks.records.metrics import distribution

    small = distribution([3.0, None, 1.0, 2.0])
    assert (small.n, small.mean, small.minimum, small.maximum, small.percentiles) == (3, 2.0, 1.0, 3.0, {50: 2.0})
    big = distribution([float(i) for i in range(1, 101)])
    assert big.percentiles == {50: 50.0, 90: 90.0, 95: 95.0, 99: 99.0}
    assert distribution([None, None]) is None


def test_latency_percentiles_of_ok_requests_are_kept_on_the_run():
    rows = [(None, True, 200, None, None, 10, 5, 5, 40.0, float(e), 0.1 * e, None)[:11] for e in range(1, 21)] + [
        request(ok=False, elapsed=999.0)
    ]
    summary = summarize(rows, None)
    assert (summary.ttft_p50, summary.ttft_p95, summary.e2e_p95) == (1.0, 1.9000000000000001, 19.0)
