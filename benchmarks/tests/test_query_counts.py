"""Every list, detail and chart page costs a fixed number of queries, whatever the rows.

Each page is fetched over a history of 3 rows and of 10 (runs, requests per run, imports,
servers, jobs, hosts, sweeps, flag sets, calibration points) and must issue the same,
pinned number of queries, and show every row: an N+1 would make the 10-row count larger.
A logged-in user (a staff user for the launch hosts) costs two of them: the session and
the user.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from benchmarks.models import (
    CalibrationPoint,
    FileImport,
    Job,
    LaunchHost,
    Run,
    Server,
    Sweep,
    SweepConfig,
)
from benchmarks.tests.builders import flat, jsonl
from sizing.forms import SizingForm
from sizing.kv import flags_key
from sizing.models import SizingSnapshot

pytestmark = pytest.mark.django_db

SIZES = [3, 10]
MODEL = "Devstral-Small-2-24B-Q4_K_M.gguf"  # the sizing catalogue's devstral-small-2-24b
GPU, GPU_MIB = "RTX 5060 Ti 16GB", 16311
SIZING_QUERY = {"model": "devstral-small-2-24b", "ctx_size": 16384, "gpu_mib": GPU_MIB, "concurrency": 3}


@dataclass
class History:
    """size of everything: runs of size requests (one failed), imports, servers, jobs, sweeps."""

    size: int
    user: User
    runs: list[Run]
    imports: list[FileImport]
    rejected: FileImport
    servers: list[Server]
    jobs: list[Job]
    hosts: list[LaunchHost]
    sweeps: list[Sweep]
    snapshot: SizingSnapshot


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def build_history(size: int, import_bytes: Callable[..., FileImport]) -> History:
    user = User.objects.create_user("ana", password="a-long-test-password")
    now = timezone.now().replace(microsecond=0)
    imports = []
    for i in range(size):
        started = now - timedelta(days=size - i)  # inside the home page's last 30 days
        last = i == size - 1  # a cfg0 run far slower than the ones before it: a regression
        run = {"run": f"run-{i}", "label": "cfg0" if last else f"cfg{i % 3}", "model": MODEL, "gpu": GPU}
        records = [
            flat(
                **run,
                vram_total_mib=GPU_MIB,
                concurrency=1 if last else 1 + i % 4,  # the regression: same configuration and workload
                ts=_iso(started + timedelta(seconds=j)),
                tok_s=(1.0 if last else 10.0 + i) + j,
            )
            for j in range(size)
        ]
        records[0].update(ok=False, status=500, error="Context size has been exceeded.", tok_s=None)
        imports.append(import_bytes(jsonl(*records), filename=f"bench-{i}.jsonl", user=user))
    bad_lines = b"".join(b'{"line": %d}\n' % i for i in range(size))
    rejected = import_bytes(bad_lines, filename="broken.jsonl", user=user)
    runs = list(Run.objects.order_by("key"))

    servers = [
        Server.objects.create(
            name=f"box-{i}",
            base_url=f"http://127.0.0.1:{8080 + i}",
            last_probe={"reachable": True, "props": {"model_path": f"model-{i}.gguf", "total_slots": 4}},
            last_probed_at=now,
        )
        for i in range(size)
    ]
    params = {"requests": 3, "repeats": 1, "concurrency": 3, "n_predict": 100, "prompt_tokens": 300}
    jobs = [
        Job.objects.create(server=servers[i], label=f"job-{i}", params=params, created_by=user, n_total=3)
        for i in range(size)
    ]
    # The first server has size jobs; the first job holds every run.
    jobs += [Job.objects.create(server=servers[0], label=f"rerun-{i}", params=params) for i in range(1, size)]
    Run.objects.update(job=jobs[0])

    hosts = [
        LaunchHost.objects.create(name=f"host-{i}", binaries=["/opt/llama-server"], models_dirs=["/models"])
        for i in range(size)
    ]
    sweep_params = {"requests": 3, "prompt_tokens": 300, "n_predict": 100, "concurrencies": [1, 3]}
    sweeps = [
        Sweep.objects.create(host=hosts[i], model_file=f"model-{i}.gguf", label=f"sweep-{i}", params=sweep_params)
        for i in range(size)
    ]
    # The first sweep: size flag sets, each with a job and a run, predicted and reported memory.
    sizing = SizingForm(SIZING_QUERY)
    assert sizing.is_valid()
    inputs = sizing.inputs
    for position in range(size):
        config = SweepConfig.objects.create(
            sweep=sweeps[0],
            position=position,
            command=f"-c {1024 * (position + 1)}",
            outcome=SweepConfig.Outcome.RAN,
            predicted={"kv_bytes": 64 * 1048576, "memory": {"compute_estimate_bytes": 8 * 1048576}},
            reported={"kv_mib": 64.0, "compute_mib": 9.5, "n_ctx_slot": 1024},
            log_tail=f"log of flag set {position}",
        )
        job = Job.objects.create(server=servers[0], label="sweep", params=params, sweep_config=config)
        Run.objects.create(key=f"sweep-run-{position}", model=MODEL, job=job, n_requests=3, n_ok=3, tok_s_mean=20.0)
        CalibrationPoint.objects.create(
            model_name=inputs.model.name,
            arch="mistral3",
            flags_key=flags_key(inputs.flags) if position == 0 else f"other-{position}",
            predicted_kv_bytes=2 * 1024**3,
            reported_kv_mib=2048.0 + position,
            predicted_compute_bytes=300 * 1048576,
            reported_compute_mib=310.0,
            reported_model_mib=13000.0,
            config=config,
        )

    snapshot = SizingSnapshot.objects.create(
        inputs={f"field_{i}": [f"value-{i}"] for i in range(size)},
        title="Devstral on a 16 GB GPU",
        result={"n_parallel": 3, "kv_unified": False, "n_ctx_seq": 6144, "kv_bytes": 1, "bytes_per_token": 1},
        report_text="the report",
        formula_version="kvlab-sizing/1",
        created_by=user,
    )
    return History(size, user, runs, imports, rejected, servers, jobs, hosts, sweeps, snapshot)


@dataclass
class Page:
    name: str
    url: Callable[[History], str]
    queries: int
    shows: Callable[[History], list[str]]
    params: Callable[[History], dict[str, object] | list[tuple[str, object]]] = lambda h: {}
    htmx: bool = False
    staff: bool = False


def _run_links(h: History) -> list[str]:
    return [f'href="{reverse("run-detail", args=[r.pk])}"' for r in h.runs]


def _run_ids(h: History) -> list[tuple[str, object]]:
    return [("run", r.pk) for r in h.runs]


def _run_keys(h: History) -> list[str]:
    return [f"<small>{r.key}</small>" for r in h.runs]


def _timeline(h: History) -> list[str]:
    # charts.js takes its URLs from the page, not from literals of its own
    return [
        f"{h.size} runs",
        f'data-run-url="{reverse("run-detail", args=[0])}"',
        f'data-url="{reverse("chart-compare")}"',
    ]


def _compare_chart(h: History) -> list[str]:
    return [*_run_links(h), f"({h.size - 1}/{h.size} ok)", f'data-run-url="{reverse("run-detail", args=[0])}"']


def _regressions(h: History) -> list[str]:
    return [f'href="{reverse("run-detail", args=[h.runs[-1].pk])}"', "<tr><td>cfg0</td>"]


def _sizing(h: History) -> list[str]:
    measured = f'href="{reverse("sweep-detail", args=[h.sweeps[0].pk])}"'  # a flag set measured these exact flags
    return [*[f"<small>run-{i}</small>" for i in range(h.size)], measured, 'class="badge">calibrated<']


# "session, user": a logged-in page reads its session and its user once each; an htmx
# partial that never looks at the user skips both.
PAGES = [
    # session, user; the model, GPU and label choices (only when the form is drawn: the newest run and, on
    # the cold cache each test starts with, their count); count; the page
    Page("run-list", lambda h: reverse("run-list"), 6, _run_keys),
    Page("run-list-htmx", lambda h: reverse("run-list"), 2, _run_keys, htmx=True),
    # session, user; the run; the page of its requests (their count is the run's); failures by type;
    # the ok requests' timings
    Page(
        "run-detail",
        lambda h: reverse("run-detail", args=[h.runs[0].pk]),
        6,
        lambda h: (
            ["context_exceeded: 1", f"{h.size - 1} / {h.size}"]
            + [f'<td class="num">{10.0 + j:.2f} tok/s</td>' for j in range(1, h.size)]
        ),
    ),
    # session, user; the runs; their failures by type
    Page("run-compare", lambda h: reverse("run-compare"), 4, _run_keys, params=_run_ids),
    # session, user; count; the page (with each import's user joined)
    Page(
        "import-list",
        lambda h: reverse("import-list"),
        4,
        lambda h: [f">{i.filename}</a>" for i in h.imports] + ["command line (ana)"],
    ),
    # session, user; the import (with its user); count and page of its rejected lines
    Page(
        "import-detail",
        lambda h: reverse("import-detail", args=[h.rejected.pk]),
        5,
        lambda h: [f'<tr><td class="num">{i}</td>' for i in range(1, h.size + 1)] + ["command line by ana"],
    ),
    # session, user; the servers
    Page("server-list", lambda h: reverse("server-list"), 3, lambda h: [f"model-{i}.gguf" for i in range(h.size)]),
    # session, user; the server; its latest jobs
    Page(
        "server-detail",
        lambda h: reverse("server-detail", args=[h.servers[0].pk]),
        4,
        lambda h: ["job-0", *[f"rerun-{i}" for i in range(1, h.size)]],
    ),
    # session, user; count; the page (with each job's server joined)
    Page(
        "job-list",
        lambda h: reverse("job-list"),
        4,
        lambda h: [f"<td>box-{i}</td><td>job-{i}</td>" for i in range(h.size)],
    ),
    # the job (with its server); its runs; session, user (the cancel button asks who is looking)
    Page("job-detail", lambda h: reverse("job-detail", args=[h.jobs[0].pk]), 4, _run_links),
    Page("job-detail-htmx", lambda h: reverse("job-detail", args=[h.jobs[0].pk]), 4, _run_links, htmx=True),
    # session, user; the hosts
    Page(
        "host-list",
        lambda h: reverse("host-list"),
        3,
        lambda h: [f">host-{i}</a>" for i in range(h.size)],
        staff=True,
    ),
    # session, user; the sweeps (with each host joined)
    Page(
        "sweep-list",
        lambda h: reverse("sweep-list"),
        3,
        lambda h: [f"<td>sweep-{i}</td><td>host-{i}</td>" for i in range(h.size)],
    ),
    # the sweep (with its host); its run ids; the measurements per flag set; the flag sets; session, user
    Page(
        "sweep-detail",
        lambda h: reverse("sweep-detail", args=[h.sweeps[0].pk]),
        6,
        lambda h: (
            [f'<span class="flag">-c {1024 * (p + 1)}</span></code>' for p in range(h.size)]
            + ["on host-0", "Compare chart of the sweep's runs"]
        ),
    ),
    Page(
        "sweep-detail-htmx",
        lambda h: reverse("sweep-detail", args=[h.sweeps[0].pk]),
        6,
        lambda h: [f"log of flag set {p}" for p in range(h.size)],
        htmx=True,
    ),
    # the latest runs (the newest one's start ends the failure chart's 30 days); the story's latest runs
    # (at most home_story.STORY_RUNS); failures per day; the trend's points; session, user
    Page(
        "home",
        lambda h: reverse("home"),
        6,
        lambda h: [*_run_links(h), 'id="trend-figure"', 'id="failures-figure"'],
    ),
    # the model, GPU and label choices (only when the form is drawn: the newest run, their count on a cold
    # cache); how many runs the range holds (at most timeline_data.RAW_MAX + 1: a few are drawn raw); the
    # points; session, user
    Page("timeline", lambda h: reverse("chart-timeline"), 6, _timeline),
    Page("timeline-htmx", lambda h: reverse("chart-timeline"), 2, _timeline, htmx=True),
    # the runs; their requests; session, user
    Page("chart-compare", lambda h: reverse("chart-compare"), 4, _compare_chart, params=_run_ids),
    Page("chart-compare-htmx", lambda h: reverse("chart-compare"), 2, _compare_chart, params=_run_ids, htmx=True),
    # does a run hold the model; the model choices (only when the form is drawn: the newest run, their
    # count on a cold cache); are there more runs than a curve reads (its latest 5,000); the points per
    # concurrency; session, user
    Page(
        "load-curve",
        lambda h: reverse("chart-load"),
        7,
        lambda h: ['id="load-figure-plot"'],
        params=lambda h: {"model": MODEL},
    ),
    Page(
        "load-curve-htmx",
        lambda h: reverse("chart-load"),
        3,
        lambda h: ['id="load-figure-plot"'],
        params=lambda h: {"model": MODEL},
        htmx=True,
    ),
    # the kept comparisons, read in one query; the backlog of a large import (history.derived.pending); session, user
    Page("regressions", lambda h: reverse("chart-regressions"), 4, _regressions),
    Page("regressions-htmx", lambda h: reverse("chart-regressions"), 2, _regressions, htmx=True),
    # measured runs of the model; calibration points with their flag sets; session, user
    Page("sizing", lambda h: reverse("sizing"), 4, _sizing, params=lambda h: SIZING_QUERY),
    Page("sizing-htmx", lambda h: reverse("sizing"), 4, _sizing, params=lambda h: SIZING_QUERY, htmx=True),
    # the snapshot with its author; session, user
    Page(
        "sizing-snapshot",
        lambda h: reverse("sizing-snapshot", args=[h.snapshot.slug]),
        3,
        lambda h: [f"<code>field_{i}</code> = value-{i}" for i in range(h.size)] + ["by ana"],
    ),
]


@pytest.mark.parametrize("size", SIZES, ids=lambda n: f"{n}-rows")
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_each_page_costs_a_fixed_number_of_queries_whatever_the_rows(
    page: Page, size: int, import_bytes: Callable[..., FileImport], django_assert_num_queries: Any
) -> None:
    history = build_history(size, import_bytes)
    client = Client()
    if page.staff:
        client.force_login(User.objects.create_user("ops", password="a-long-test-password", is_staff=True))
    else:
        client.force_login(history.user)
    headers = {"HX-Request": "true"} if page.htmx else {}

    with django_assert_num_queries(page.queries):
        response = client.get(page.url(history), page.params(history), headers=headers)

    assert response.status_code == 200
    html = response.content.decode()
    assert ("<html" in html) is not page.htmx, "a full page for a plain request, a partial for htmx"
    missing = [text for text in page.shows(history) if text not in html]
    assert missing == [], f"{page.name} does not show {missing}"
