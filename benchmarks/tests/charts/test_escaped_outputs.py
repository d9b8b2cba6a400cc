"""What kvlab hands out — CSV downloads, Plotly figures, outgoing requests — under hostile input."""

from __future__ import annotations

import csv
import html
import io
import json
import re
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.urls import reverse

from benchmarks.charts import compare_figure, load_curve_figure, timeline_figure
from benchmarks.jobs.client import probe
from benchmarks.jobs.client import target as targets
from benchmarks.jobs.client.target import TargetRefused, resolve_target
from benchmarks.records import catalogue
from benchmarks.tests.builders import flat, jsonl

FORMULAS = ["=cmd|' /C calc'!A0", "@SUM(1+1)*cmd|' /C calc'!A0", "+1+1", "-2+3", "\t=1+1", "\r=1+1"]
MARKUP = "<b>bold</b><a href='https://evil.example/'>CLICK</a>"
ESCAPED = html.escape(MARKUP, quote=False)  # drawn as text


def csv_rows(response) -> list[dict[str, str]]:
    assert response.status_code == 200 and response["Content-Type"] == "text/csv"
    return list(csv.DictReader(io.StringIO(response.content.decode())))


@pytest.fixture
def formula_runs(db, import_bytes):
    records = [
        flat(run=f"f{i}", label=label, model="m.gguf", concurrency=1 + i, ts=f"2026-10-0{1 + i}T00:00:00Z")
        for i, label in enumerate(FORMULAS)
    ]
    import_bytes(jsonl(*records))


@pytest.mark.django_db
def test_the_timeline_csv_neutralises_formula_labels(client, formula_runs):
    rows = csv_rows(client.get(reverse("chart-timeline"), {"format": "csv"}))
    assert sorted(r["label"] for r in rows) == sorted("'" + label for label in FORMULAS)
    assert all(not r["label"].startswith(("=", "+", "-", "@", "\t", "\r")) for r in rows)


@pytest.mark.django_db
def test_the_compare_csv_neutralises_formula_labels(client, formula_runs):
    from benchmarks.models import Run

    ids = list(Run.objects.order_by("pk").values_list("pk", flat=True))[:3]
    rows = csv_rows(client.get(reverse("chart-compare"), {"run": ids, "format": "csv"}))
    assert [r["label"] for r in rows] == ["'" + label for label in FORMULAS[:3]]


@pytest.mark.django_db
def test_the_load_curve_csv_neutralises_formula_labels(client, formula_runs):
    rows = csv_rows(client.get(reverse("chart-load"), {"model": "m.gguf", "format": "csv"}))
    labels = {r["label_min"] for r in rows} | {r["label_max"] for r in rows}
    assert labels == {"'" + label for label in FORMULAS}


def test_csv_cells_keep_negative_numbers_as_numbers():
    from benchmarks.charts.downloads import csv_safe

    assert csv_safe(-2.5) == -2.5 and csv_safe(-3) == -3 and csv_safe(None) is None
    assert csv_safe("-2+3") == "'-2+3" and csv_safe("plain") == "plain"


def _row(label: str, pk: int, **extra) -> dict:
    row = {
        **{k: v for k, v in flat(label=label, model=label).items() if k != "ts"},
        "pk": pk,
        "key": f"{label}-run",
        "started_at": datetime(2026, 10, pk, tzinfo=UTC),
        "n_ok": 1,
        "n_requests": 1,
        "value": 1.0,
        "prompt_tokens_max": 1000,
        "n_predict_max": 200,
        "build": "b1",
        **extra,
    }
    return row


def _strings(figure: dict) -> Iterator[str]:
    def walk(value) -> Iterator[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for item in value.values():
                yield from walk(item)
        elif isinstance(value, list):
            for item in value:
                yield from walk(item)

    return walk(figure)


def _assert_no_user_markup(figure: dict) -> None:
    text = json.dumps(figure)
    assert "<a " not in text and "<b>bold" not in text
    assert any("&lt;b&gt;bold&lt;/b&gt;&lt;a href=" in s for s in _strings(figure))


@pytest.mark.parametrize("grouping", ["label", "model"])
def test_the_timeline_figure_escapes_labels_and_models(grouping):
    rows = [_row(MARKUP, 1), _row(MARKUP, 2, n_ok=0, ctx_size=4096, build="<i>b2</i>", cache_type_k="<i>q8</i>")]
    figure = timeline_figure.timeline(rows, catalogue.METRICS["tok_s"], grouping)
    _assert_no_user_markup(figure)
    assert "<i>" not in json.dumps(figure)
    (line,) = [t for t in figure["data"] if "hover_facts" in t]  # the hover text's flags, escaped once each
    assert line["hover_facts"]["flags"][1] == "-c 4096 -np 2 per-slot &lt;i&gt;q8&lt;/i&gt;/f16 fa True"


def test_the_home_figure_escapes_model_panel_titles():
    rows = [_row(MARKUP, 1), _row("other", 2)]
    figure, _ = timeline_figure.timeline_by_model(rows, catalogue.METRICS["tok_s"], "label")
    _assert_no_user_markup(figure)
    assert any(a["text"].startswith("<b>&lt;b&gt;") for a in figure["layout"]["annotations"])  # kvlab's own bold


def test_the_compare_figure_escapes_run_names_on_its_axes():
    runs = [
        {**_row(MARKUP, 1), **{f"value_{k}": 1.0 for k in catalogue.COMPARE_METRICS}},
        {**_row("ok", 2, n_ok=0), **{f"value_{k}": None for k in catalogue.COMPARE_METRICS}, "value_success": 0.0},
    ]
    figure = compare_figure.compare(runs, [(1, True, 3.0)])
    _assert_no_user_markup(figure)
    assert all(
        "<a " not in str(axis.get("categoryarray")) for axis in figure["layout"].values() if isinstance(axis, dict)
    )


def test_the_load_curve_figure_escapes_curve_names():
    point = {
        "gpu": "g",
        **{k: v for k, v in flat().items() if k in load_curve_figure.CURVE_FIELDS},
        "prompt_tokens_max": 1000,
        "n_predict_max": 200,
        "throughput": 10.0,
        "tok_s": 5.0,
        "ttft_p95": 0.1,
        "runs": 1,
        "failed": 0,
        "label_min": MARKUP,
        "label_max": MARKUP,
    }
    curves = load_curve_figure.curves(
        [{**point, "concurrency": 1}, {**point, "concurrency": 2, "throughput": 9.0, "failed": 1}]
    )
    assert curves[0].name.startswith(MARKUP)  # the page's own table escapes it; the figure must too
    _assert_no_user_markup(load_curve_figure.load_curve(curves))


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def test_measuring_prompts_on_a_server_that_never_answers_gives_up(monkeypatch, silent_server):
    monkeypatch.setattr(probe, "TOKENIZE_TIMEOUT_S", 0.5)
    target = resolve_target(f"http://127.0.0.1:{silent_server}")
    result: list[BaseException] = []

    def measure() -> None:
        try:
            probe.tokenize(target, ["hello"])
        except BaseException as exc:  # noqa: BLE001  (reported to the test below)
            result.append(exc)

    worker = threading.Thread(target=measure, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "tokenize hung on a server that never answers"
    assert isinstance(result[0], probe.ProbeError)
    assert re.search(r"/tokenize: no answer within 0\.5 s", str(result[0]))


@pytest.fixture
def own_services(settings, monkeypatch):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:6379/0"
    settings.KVLAB_PORT = 8000
    postgres = {"ENGINE": "django.db.backends.postgresql", "HOST": "localhost", "PORT": ""}
    monkeypatch.setattr(targets, "_database_settings", lambda: postgres)
    return settings


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:6379/", "port 6379 is kvlab's own Redis"),
        ("http://localhost:6379", "port 6379 is kvlab's own Redis"),
        ("http://127.0.0.2:6379", "port 6379 is kvlab's own Redis"),
        ("http://[::ffff:127.0.0.1]:6379", "port 6379 is kvlab's own Redis"),
        ("http://127.0.0.1:5432", "port 5432 is kvlab's own database"),
        ("http://127.0.0.1:8000", "port 8000 is kvlab's own web server"),
    ],
)
def test_a_server_at_kvlabs_own_service_ports_is_refused(own_services, url, why):
    with pytest.raises(TargetRefused, match=re.escape(why)):
        resolve_target(url)


def test_other_loopback_ports_stay_allowed_for_a_local_llama_server(own_services):
    assert resolve_target("http://127.0.0.1:8080").port == 8080
    assert resolve_target("http://localhost:6380/").address == "127.0.0.1"


def test_the_service_ports_follow_the_settings(own_services):
    own_services.CELERY_BROKER_URL = "redis://127.0.0.1:6390/1"
    own_services.KVLAB_PORT = 8765
    assert resolve_target("http://127.0.0.1:6379").port == 6379  # no longer kvlab's Redis
    with pytest.raises(TargetRefused, match="port 6390 is kvlab's own Redis"):
        resolve_target("http://127.0.0.1:6390")
    with pytest.raises(TargetRefused, match="port 8765 is kvlab's own web server"):
        resolve_target("http://127.0.0.1:8765")


def test_a_redis_on_another_host_is_refused_there(own_services):
    own_services.KVLAB_SERVER_ALLOWLIST = ["127.0.0.0/8", "10.9.0.0/16"]
    own_services.CELERY_BROKER_URL = "redis://10.9.0.5:6379/0"
    with pytest.raises(TargetRefused, match="port 6379 is kvlab's own Redis"):
        resolve_target("http://10.9.0.5:6379")
    assert resolve_target("http://10.9.0.6:6379").address == "10.9.0.6"  # another host's port is not kvlab's


@pytest.mark.browser
def test_a_markup_label_is_drawn_as_text_in_the_timeline_and_compare(tab, transactional_db, import_bytes):
    from benchmarks.models import Run

    import_bytes(
        jsonl(
            flat(run="evil", label=MARKUP, ts="2026-10-01T00:00:00Z"),
            flat(run="plain", label="plain", ts="2026-10-02T00:00:00Z"),
        )
    )
    evil_link = 'a[href="https://evil.example/"]'
    tab.open("/charts/timeline/", {"group": "label"})
    tab.wait_for_plot("#timeline-figure-plot")
    assert tab.evaluate(f"document.querySelectorAll('{evil_link}').length") == 0
    legend = tab.evaluate("Array.from(document.querySelectorAll('.legendtext'), e => e.textContent)")
    assert MARKUP in legend  # the label as written, not bold text and a link
    tab.open("/charts/compare/", [("run", pk) for pk in Run.objects.order_by("pk").values_list("pk", flat=True)])
    tab.wait_for_plot("#compare-figure-plot")
    assert tab.evaluate(f"document.querySelectorAll('{evil_link}').length") == 0
    strips = f"x{len(catalogue.COMPARE_METRICS) + 1}"  # the axis that names the runs
    assert f"1 · {MARKUP} (evil)" in tab.tick_labels("#compare-figure-plot", strips)
    tab.assert_no_errors()


def test_measuring_prompts_on_a_server_that_hangs_up_says_so():
    listener = socket.create_server(("127.0.0.1", 0))

    def hang_up() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.close()

    thread = threading.Thread(target=hang_up, daemon=True)
    thread.start()
    try:
        with pytest.raises(probe.ProbeError, match="ServerDisconnectedError"):
            probe.tokenize(resolve_target(f"http://127.0.0.1:{listener.getsockname()[1]}"), ["hello"])
    finally:
        thread.join(5)
        listener.close()


def test_a_failure_on_the_band_of_the_by_model_timeline_names_its_model():
    rows = [_row("a", 1), _row("a", 2, n_ok=0, n_requests=3), _row(MARKUP, 3), _row(MARKUP, 4, n_ok=0)]
    figure, _ = timeline_figure.timeline_by_model(rows, catalogue.METRICS["tok_s"], "label")
    on_band = [text for t in figure["data"] if t["name"] == "failed runs" for text in t["text"]]  # a trace a panel
    assert sorted(on_band) == sorted(
        ["a: a-run failed, 0/3 ok · a", f"{ESCAPED}: {ESCAPED}-run failed, 0/1 ok · {ESCAPED}"]
    )
