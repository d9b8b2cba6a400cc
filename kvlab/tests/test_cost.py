"""The hostile suite's cost check: no input costs the server more than it costs the sender.

For every endpoint an anonymous visitor or a plain logged-in user can reach, the worst input tried
here (the hostile pass's: an alias bomb, quadratic regex bait, deep nesting, catastrophic `-ot`
patterns, absurd numbers and counts in query strings) is answered — a page or a clear refusal,
never a 500 — within BUDGET_CPU_S of CPU and BUDGET_PEAK_MIB of memory beyond what the process held
before the request. CPU is the whole process's (a writer thread's work counts); memory is the peak
of Python's allocations during the request (tracemalloc), measured in a second, traced pass so the
trace does not inflate the CPU figure.
"""

from __future__ import annotations

import io
import resource
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

import pytest
from django.test import Client

BUDGET_CPU_S = 1.0
BUDGET_PEAK_MIB = 256

pytestmark = pytest.mark.django_db


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def alias_bomb(levels: int = 7) -> bytes:
    """GuideLLM YAML whose anchors, each a list of ten aliases of the last, expand to 10**levels nodes."""
    lines = [b"benchmarks:", b"- type_: generative_benchmark", b"  guidellm_version: '0.3'", b"  lol:"]
    lines.append(b"  - &a0 [" + b", ".join([b"lol"] * 10) + b"]")
    for level in range(1, levels):
        lines.append(b"  - &a%d [" % level + b", ".join([b"*a%d" % (level - 1)] * 10) + b"]")
    return b"\n".join(lines) + b"\n"


def quadratic_log() -> str:
    """510 lines that made the CUDA-device regex quadratic (43-72 ms a line on the old pattern)."""
    return "\n".join(["Device 0: " + ", " * 2043] * 510)


@dataclass(frozen=True)
class Case:
    name: str
    who: str  # "anonymous" or "user"
    send: Callable[[Client], object]


def get(path: str, **query: object) -> Callable[[Client], object]:
    return lambda client: client.get(path + ("?" + urlencode(query, doseq=True) if query else ""))


def post(path: str, **data: object) -> Callable[[Client], object]:
    return lambda client: client.post(path, data)


def upload(path: str, field: str, name: str, body: bytes) -> Callable[[Client], object]:
    def send(client: Client) -> object:
        handle = io.BytesIO(body)
        handle.name = name
        return client.post(path, {field: handle})

    return send


LONG = "x" * 4_000
MANY_IDS = [str(i) for i in range(1, 1_001)]
HUGE = "9" * 400
SIZING = {"model": "llama-3.1-8b", "quant": "Q4_K_M", "gpu_mib": "8000"}

CASES = [
    Case("run list: every filter at 4,000 chars", "anonymous",
         get("/runs/", model=LONG, gpu=LONG, label=LONG, tool=LONG, engine=LONG, run=LONG, sort=LONG)),
    Case("run list: a page past the end, dates at the calendar's ends", "anonymous",
         get("/runs/", page=HUGE, since="9999-12-31", until="0001-01-01", sort="-tok_s")),
    Case("value suggestions: LIKE wildcards", "anonymous", get("/runs/values/", model="%_" * 100)),
    Case("compare: 1,000 run ids", "anonymous", get("/compare/", run=MANY_IDS)),
    Case("compare chart: 1,000 run ids", "anonymous", get("/charts/compare/", run=MANY_IDS)),
    Case("timeline by server, absurd dates", "anonymous",
         get("/charts/timeline/", group="server", since="0001-01-01", until="9999-12-31", metric=LONG)),
    Case("load curve: every filter long", "anonymous", get("/charts/load/", model=LONG, gpu=LONG, label=LONG)),
    Case("regressions: absurd window and thresholds", "anonymous",
         get("/charts/regressions/", window=HUGE, group=LONG, tok_s=HUGE, success_rate="1e308")),
    Case("export with no filter", "anonymous", get("/export.jsonl")),
    Case("sizing: catastrophic -ot patterns", "anonymous",
         get("/sizing/", **SIZING, command="llama-server " + " ".join(["-ot '(.*)*(.*)*(.*)*Q=CPU'"] * 64))),
    Case("sizing: huge numbers everywhere", "anonymous",
         get("/sizing/", model="llama-3.1-8b", quant="Q4_K_M", ctx_size=HUGE, parallel=HUGE, n_ubatch=HUGE,
             concurrency=HUGE, prompt_tokens=HUGE,
             gpu_mib=[HUGE] * 64, ram_mib=HUGE, format="json")),
    Case("sizing: pasted metadata at its limit", "anonymous",
         get("/sizing/", source="params", params='{"a":' * 5_000 + "1" + "}" * 5_000)),
    Case("explain a log: quadratic regex bait", "anonymous", post("/sizing/explain-log/", log=quadratic_log())),
    Case("login: a 1 MiB password", "anonymous", post("/accounts/login/", username="nobody", password="p" * 2**20)),
    Case("snapshot: a slug that is not one", "anonymous", get("/s/" + "z" * 200 + "/")),
    Case("import: a GuideLLM YAML alias bomb", "user",
         upload("/imports/new/", "file", "benchmarks.yaml", alias_bomb())),
    Case("import: JSON nested 100,000 deep", "user",
         upload("/imports/new/", "file", "deep.json", b'{"benchmarks":' + b"[" * 100_000 + b"]" * 100_000 + b"}")),
    Case("import: one line of 4 MiB", "user",
         upload("/imports/new/", "file", "long.jsonl", b'{"run":"' + b"a" * 2**22)),
    Case("GGUF head: a million-element array header", "user",
         upload("/sizing/gguf/", "head", "x.gguf", b"GGUF" + (3).to_bytes(4, "little") + b"\xff" * 64)),
]  # fmt: skip


@pytest.fixture
def clients(investigation: object, user_client: Client) -> dict[str, Client]:
    anonymous = Client()
    anonymous.get("/sizing/?" + urlencode(SIZING))  # the catalogue and the pages' templates, loaded once
    return {"anonymous": anonymous, "user": user_client}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_worst_input_tried_costs_at_most_a_second_and_256_mib(case: Case, clients: dict[str, Client]) -> None:
    client = clients[case.who]
    start = cpu_seconds()
    answer = case.send(client)
    spent = cpu_seconds() - start
    status = answer.status_code  # type: ignore[attr-defined]
    assert status < 500, f"{case.name}: HTTP {status}"
    assert spent <= BUDGET_CPU_S, f"{case.name}: {spent:.2f} s of CPU"

    tracemalloc.start()
    try:
        case.send(client)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= BUDGET_PEAK_MIB * 2**20, f"{case.name}: {peak / 2**20:.0f} MiB at its peak"
