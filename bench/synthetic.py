"""The one synthetic benchmark history every script in bench/ measures with: a lab's year.

What it holds
-------------
From one seed (``SEED``), always the same data:

* 30 config labels (a model and one of a few flag variants each, e.g.
  ``qwen3-30b-q8-cache``), each with its own model, main GPU, server flags and
  workload; 1 run in 20 deviates from its label's flags (a one-off experiment), so
  the timeline's "configuration changed" diamonds appear as often as they would in
  practice. 6 labels are kvlab-executed jobs with ``server_props`` (a llama.cpp build
  that changes every 10 days); the rest are imported, most with a reported wall time.
* N runs with started_at spread over the year that ends at ``until`` (default: now);
  concurrency 1..64 (mostly powers of two); about 6 % of runs fail outright (the
  server was down: 0 ok) and 8 % lose 1-3 requests.
* 10 requests a run, each with ok, HTTP status, error, tok/s, TTFT, elapsed, output
  tokens and a distinct content hash; decode speed follows the model, GPU, KV cache
  type and concurrency. A run's aggregates (n_ok, tok/s mean/min/max, throughput,
  TTFT p50/p95, E2E p95, effective wall time) come from
  benchmarks.records.metrics.summarize, exactly as an import computes them.

The views of it
---------------
* ``Lab(seed, until).runs(n)``: each run as a ``LabRun`` (its Run columns by attname,
  its requests as ``REQUEST_COLUMNS`` tuples), one at a time.
* ``insert_lab(n)``: runs and requests into the database Django is set up on, with
  executemany in one transaction (``requests_of_first`` stores only the first runs'
  requests, for a benchmark that reads the runs table alone).
* ``write_lab_jsonl(path, n_requests)``: the same runs as a bench_results.jsonl in
  the flat lab shape of data/demo/bench_results.jsonl, the last run cut short when
  ``n_requests`` is not a multiple of 10.

Only ``insert_lab`` needs Django set up; the rest is plain Python.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import common  # noqa: F401  (puts the repository root on sys.path, for benchmarks.*)

from benchmarks.records.metrics import summarize

SEED = 1_000_000
REQUESTS_PER_RUN = 10
N_LABELS = 30

MODELS = [
    "Devstral-Small-2-24B-Q4_K_M.gguf",
    "Qwen3-30B-A3B-Instruct-2507-Q4_K_M.gguf",
    "Qwen3-Coder-30B-A3B-Instruct-Q5_K_M.gguf",
    "gemma-3-27b-it-Q4_K_M.gguf",
    "Llama-3.3-70B-Instruct-IQ3_XXS.gguf",
    "gpt-oss-20b-mxfp4.gguf",
    "Mistral-Small-3.2-24B-Instruct-Q6_K.gguf",
    "phi-4-Q8_0.gguf",
]
MODEL_SHORT = dict(
    zip(
        MODELS,
        ["devstral-24b", "qwen3-30b", "qwen3-coder", "gemma3-27b", "llama33-70b", "gpt-oss-20b", "mistral-24b", "phi4"],
        strict=True,
    )
)
# Single-stream decode tok/s on an RTX 4090 (Q4-ish quants; MoE models are fast).
MODEL_SPEED = dict(zip(MODELS, [48.0, 165.0, 140.0, 42.0, 19.0, 190.0, 36.0, 70.0], strict=True))
GPUS = {  # name -> total VRAM (MiB)
    "RTX 5060 Ti 16GB": 16311,
    "RTX 4090": 24564,
    "RTX 3090": 24576,
    "RTX 5090": 32607,
    "A100 80GB": 81920,
}
GPU_SPEED = {"RTX 5060 Ti 16GB": 0.45, "RTX 4090": 1.0, "RTX 3090": 0.8, "RTX 5090": 1.35, "A100 80GB": 1.1}
CACHE_SPEED = {"f16": 1.0, "bf16": 1.0, "q8_0": 0.96, "q5_1": 0.93, "q4_0": 0.92, "iq4_nl": 0.9}
CTX_SIZES = [4096, 8192, 16384, 32768, 65536, 131072]
CONCURRENCY = [1, 1, 2, 4, 4, 8, 8, 16, 32, 64]
VARIANTS: dict[str, dict[str, Any]] = {  # flag overrides of each variant
    "baseline": {},
    "unified-kv": {"kv_unified": True, "parallel": 4},
    "q8-cache": {"cache_type_k": "q8_0", "cache_type_v": "q8_0", "flash_attn": "on"},
    "q4-cache": {"cache_type_k": "q4_0", "cache_type_v": "q4_0", "flash_attn": "on"},
    "fa-on": {"flash_attn": "on"},
    "big-ctx": {"ctx_size": 131072, "cache_type_k": "q8_0", "cache_type_v": "q8_0"},
    "np8": {"parallel": 8, "kv_unified": False},
    "no-offload": {"kv_offload": False},
}
ERRORS = [  # (error_type, HTTP status, error)
    ("exceed_context_size", 400, "the request exceeds the available context size, try increasing it"),
    ("http_error", 500, "HTTP 500: slot unavailable"),
    ("timeout", None, "no data for 600.0 s"),
    ("disconnect", None, "Server disconnected"),
]
DOWN = ("other", None, "Cannot connect to host 127.0.0.1:8080 ssl:default [Connect call failed]")
REQUEST_COLUMNS = (  # the RequestResult columns of a generated request, in order
    "run_id",
    "seq",
    "ts",
    "ok",
    "http_status",
    "error",
    "error_type",
    "prompt_tokens",
    "n_predict",
    "output_tokens",
    "tok_s",
    "elapsed_s",
    "ttft_s",
    "extra",
    "content_hash",
    "occurrence",
    "itl_s",
)
# The flat lab shape: the run's context repeated on every line, under these keys.
FLAT_RUN_KEYS = {  # JSONL key -> Run attname
    "run": "key",
    "label": "label",
    "model": "model",
    "gpu": "gpu",
    "vram_total_mib": "vram_total_mib",
    "ctx_size": "ctx_size",
    "parallel": "parallel",
    "kv_unified": "kv_unified",
    "cache_type_k": "cache_type_k",
    "cache_type_v": "cache_type_v",
    "kv_offload": "kv_offload",
    "flash_attn": "flash_attn",
    "concurrency": "concurrency",
}
FLAT_REQUEST_KEYS = {  # JSONL key -> position in a REQUEST_COLUMNS tuple
    "prompt_tokens": 7,
    "n_predict": 8,
    "status": 4,
    "ok": 3,
    "error": 5,
    "tok_s": 10,
    "elapsed_s": 11,
    "output_tokens": 9,
}


class LabRun(NamedTuple):
    run: dict[str, Any]  # Run columns by attname, id included; datetimes still datetimes
    requests: list[tuple[Any, ...]]  # REQUEST_COLUMNS order


class Lab:
    """The lab's labels, drawn from the seed; then its runs, drawn one after another."""

    def __init__(self, seed: int = SEED, until: datetime | None = None) -> None:
        self.rng = random.Random(seed)
        self.labels = make_labels(self.rng)
        self.weights = [label["weight"] for label in self.labels]
        self.until = until or datetime.now(UTC).replace(microsecond=0)

    def runs(self, n_runs: int, per_run: int = REQUESTS_PER_RUN) -> Iterator[LabRun]:
        """n_runs runs (ids 1..n_runs) of per_run requests each, spread evenly over the year that ends at `until`."""
        first = self.until - timedelta(days=365)
        gap = 365 * 86400 / n_runs
        for index in range(n_runs):
            yield self._run(index, first, gap, per_run)

    def _run(self, index: int, first: datetime, gap: float, per_run: int = REQUESTS_PER_RUN) -> LabRun:
        rng = self.rng
        run_id = index + 1
        label = rng.choices(self.labels, self.weights)[0]
        started = first + timedelta(seconds=index * gap + rng.uniform(0, gap * 0.6))
        days = (started - first).days
        flags = dict(label["flags"])
        if rng.random() < 0.05:  # a one-off experiment with other flags
            field = rng.choice(["ctx_size", "parallel", "cache_type_k", "flash_attn"])
            flags[field] = {
                "ctx_size": rng.choice(CTX_SIZES),
                "parallel": rng.choice([1, 2, 4, 8]),
                "cache_type_k": rng.choice(list(CACHE_SPEED)),
                "flash_attn": rng.choice(["on", "off", "auto"]),
            }[field]
            if field == "cache_type_k":
                flags["cache_type_v"] = flags["cache_type_k"]
        gpu = label["gpu"] if rng.random() < 0.9 else label["other_gpu"]
        run: dict[str, Any] = {
            "id": run_id,
            "source": "executed" if label["executed"] else "imported",
            "label": label["name"],
            "model": label["model"],
            "gpu": gpu,
            "vram_total_mib": GPUS[gpu],
            "concurrency": rng.choice(CONCURRENCY) if rng.random() < 0.9 else rng.randint(1, 64),
            **flags,
        }
        if label["executed"]:
            run["key"] = f"job-{run_id}-r1"
            run["server_props"] = server_props(label["model"], flags, build=6000 + days // 10)
        else:
            run["key"] = f"{label['name']}-{run_id:07d}"
            run["server_props"] = None
        drift = (1 + 0.08 * days / 365) * (0.85 if days % 97 < 4 else 1.0)  # builds get faster; some regress
        requests, reported = make_requests(rng, label, run, drift, started, per_run)
        summary = summarize([r[2:13] for r in requests], reported)
        run.update(summary._asdict())
        run.update(
            wall_s=reported,
            vram_used_mib=rng.randint(GPUS[gpu] // 3, GPUS[gpu]) if rng.random() < 0.6 else None,
            created_at=started + timedelta(seconds=(summary.effective_wall_s or 0) + rng.randint(5, 3 * 86400)),
            first_import_id=None,
            job_id=None,
            # one history for every tool: kvlab's jobs say so; the imported lab runs are kvlab JSONL of no named tool
            tool="kvlab" if label["executed"] else "",
            tool_version="",
            tool_format="",
            engine="llama.cpp" if label["executed"] else "",
            provenance="{}",
            summary=None,
            summary_extra=None,
            requests_sampled=False,
            request_rate=None,
            server_flags="",
            server_log="",
            # arrivals and telemetry: the lab's runs ran at fixed concurrency; no series was sampled for them
            arrival="",
            telemetry=None,
        )
        return LabRun(run, requests)


def make_labels(rng: random.Random, n: int = N_LABELS) -> list[dict[str, Any]]:
    """n config labels: a model with a flag variant each, its GPU, workload and activity."""
    combos = [(m, v) for m in MODELS for v in VARIANTS]
    labels = []
    for i, (model, variant) in enumerate(rng.sample(combos, n)):
        flags: dict[str, Any] = {
            "ctx_size": rng.choice([8192, 16384, 32768, 65536]),
            "parallel": rng.choice([1, 1, 2, 4]),
            "kv_unified": rng.choice([None, False]),
            "cache_type_k": "f16",
            "cache_type_v": "f16",
            "kv_offload": True,
            "flash_attn": rng.choice(["", "auto"]),
        }
        flags.update(VARIANTS[variant])
        gpu = rng.choice(list(GPUS))
        labels.append(
            {
                "name": f"{MODEL_SHORT[model]}-{variant}",
                "model": model,
                "gpu": gpu,
                "other_gpu": rng.choice([g for g in GPUS if g != gpu]),
                "flags": flags,
                "executed": i < 6,  # kvlab jobs, with server_props
                "n_predict": rng.choice([256, 512, 1024, 1024, 2048]),
                "prompt_max": min(int(flags["ctx_size"] * 0.6), rng.choice([2000, 8000, 30000])),
                "weight": rng.uniform(0.3, 3.0),
                "fail_rate": 0.15 if variant == "big-ctx" else 0.05,
            }
        )
    return labels


def server_props(model: str, flags: dict[str, Any], build: int) -> str:
    """What kvlab's probe records of a llama-server before a job (JSON text)."""
    n_ctx_slot = flags["ctx_size"] // flags["parallel"]
    return json.dumps(
        {
            "reachable": True,
            "health": {"status": 200, "body": {"status": "ok"}},
            "props": {
                "build_info": f"b{build}-{hashlib.sha1(str(build).encode()).hexdigest()[:7]}",
                "model_path": f"/models/{model}",
                "total_slots": flags["parallel"],
                "n_ctx_slot": n_ctx_slot,
            },
            "slots": [{"id": s, "n_ctx": n_ctx_slot, "is_processing": False} for s in range(flags["parallel"])],
            "metrics_enabled": True,
            "n_ctx_slot": n_ctx_slot,
        }
    )


def make_requests(
    rng: random.Random,
    label: dict[str, Any],
    run: dict[str, Any],
    drift: float,
    started: datetime,
    n: int = REQUESTS_PER_RUN,
) -> tuple[list[tuple[Any, ...]], float | None]:
    """A run's n requests as REQUEST_COLUMNS tuples (ts still a datetime), and its reported wall time."""
    c = run["concurrency"]
    speed = (
        MODEL_SPEED[run["model"]]
        * GPU_SPEED[run["gpu"]]
        * CACHE_SPEED.get(run["cache_type_k"], 1.0)
        * (0.35 if run["kv_offload"] is False else 1.0)
        * drift
        / (1 + 0.15 * (c - 1))
    )
    prefill = speed * 45 * (1 + 0.15 * (c - 1))  # prompt tok/s, shared by the c requests
    outcome = rng.random()
    if outcome < label["fail_rate"]:  # the server was down: every request fails alike
        failing = set(range(n))
        kinds = [DOWN] * n
    else:
        n_fail = rng.randint(1, 3) if outcome < label["fail_rate"] + 0.08 else 0
        failing = set(rng.sample(range(n), min(n_fail, n)))
        kinds = [rng.choice(ERRORS) for _ in range(n)]
    rows = []
    wave_start = 0.0
    wave_longest = 0.0
    for seq in range(n):
        if seq and seq % c == 0:
            wave_start += wave_longest
            wave_longest = 0.0
        ts = started + timedelta(seconds=wave_start + rng.uniform(0, 0.05) * (seq % c))
        prompt = rng.randint(min(200, label["prompt_max"]), label["prompt_max"])
        n_predict = label["n_predict"]
        if seq in failing:
            error_type, status, error = kinds[seq]
            elapsed = 600.0 if error_type == "timeout" else round(rng.uniform(0.002, 2.5), 4)
            row = (run["id"], seq, ts, False, status, error, error_type, prompt, n_predict, None, None, elapsed, None)
        else:
            output = n_predict if rng.random() < 0.7 else rng.randint(n_predict // 4, n_predict)
            tok_s = round(speed * rng.lognormvariate(0, 0.08), 3)
            ttft = round(prompt / prefill * c**0.5 * rng.lognormvariate(0, 0.15), 4)
            elapsed = round(ttft + output / tok_s, 4)
            row = (run["id"], seq, ts, True, 200, "", "", prompt, n_predict, output, tok_s, elapsed, ttft)
        wave_longest = max(wave_longest, elapsed)
        content_hash = hashlib.blake2b(f"{run['key']}/{seq}/{prompt}".encode(), digest_size=16).hexdigest()
        rows.append((*row, "{}", content_hash, 0, None))
    reported = None
    if not label["executed"] and rng.random() < 0.7:
        reported = round((wave_start + wave_longest) * rng.uniform(1.0, 1.04) + 0.3, 2)
    return rows, reported


# --- the database ------------------------------------------------------------------


def insert_lab(
    n_runs: int, *, seed: int = SEED, requests_of_first: int | None = None, chunk: int = 10_000
) -> dict[str, Any]:
    """Insert n_runs runs and their requests with executemany, in one transaction.

    requests_of_first: store the requests of only that many runs (the first), not all.
    Returns the label names, the number of requests stored and the data's end (ISO).
    """
    from django.db import connection, transaction

    from benchmarks.models import RequestResult, Run
    from benchmarks.records.schema import REQUEST_FIELD_NAMES

    assert REQUEST_COLUMNS[2:13] == REQUEST_FIELD_NAMES, "the request fields changed; update bench/synthetic.py"
    request_fields = {f.attname for f in RequestResult._meta.concrete_fields if not f.primary_key}
    assert request_fields == set(REQUEST_COLUMNS), (
        f"RequestResult fields {sorted(request_fields ^ set(REQUEST_COLUMNS))} differ; update bench/synthetic.py"
    )
    run_fields = list(Run._meta.concrete_fields)
    q = connection.ops.quote_name
    run_sql = (
        f"INSERT INTO {q(Run._meta.db_table)} ({', '.join(q(f.column) for f in run_fields)}) "
        f"VALUES ({', '.join(['%s'] * len(run_fields))})"
    )
    request_sql = (
        f"INSERT INTO {q(RequestResult._meta.db_table)} ({', '.join(q(c) for c in REQUEST_COLUMNS)}) "
        f"VALUES ({', '.join(['%s'] * len(REQUEST_COLUMNS))})"
    )
    adapt = connection.ops.adapt_datetimefield_value
    keep = n_runs if requests_of_first is None else requests_of_first
    lab = Lab(seed)
    runs = lab.runs(n_runs)
    n_requests = 0
    with transaction.atomic(), connection.cursor() as cursor:
        for start in range(0, n_runs, chunk):
            batch = [next(runs) for _ in range(min(chunk, n_runs - start))]
            missing = {f.attname for f in run_fields} - batch[0].run.keys()
            assert not missing, f"bench/synthetic.py does not set {sorted(missing)}; update it"
            cursor.executemany(
                run_sql,
                [
                    tuple(adapt(v) if isinstance(v, datetime) else v for v in (r.run[f.attname] for f in run_fields))
                    for r in batch
                ],
            )
            requests = [req for r in batch if r.run["id"] <= keep for req in r.requests]
            cursor.executemany(request_sql, [(*req[:2], adapt(req[2]), *req[3:]) for req in requests])
            n_requests += len(requests)
    return {"labels": [label["name"] for label in lab.labels], "requests": n_requests, "now": lab.until.isoformat()}


# --- the flat JSONL ------------------------------------------------------------------


def flat_records(lab_run: LabRun) -> Iterator[dict[str, Any]]:
    """A run's requests in the flat lab shape: the run's context repeated on every line."""
    run = lab_run.run
    context = {key: run[attname] for key, attname in FLAT_RUN_KEYS.items()}
    context["flash_attn"] = context["flash_attn"] or None  # a lab script writes null, not ""
    for request in lab_run.requests:
        record = {**context, "ts": request[2].strftime("%Y-%m-%dT%H:%M:%SZ")}
        record.update((key, request[i]) for key, i in FLAT_REQUEST_KEYS.items())
        record["error"] = record["error"] or None
        yield record


def write_lab_jsonl(path: Path, n_requests: int, *, seed: int = SEED) -> int:
    """Write n_requests flat records (runs of 10, the last maybe fewer) to path; return the run count."""
    import orjson

    n_runs = -(-n_requests // REQUESTS_PER_RUN)
    written = 0
    with path.open("wb") as out:
        for lab_run in Lab(seed).runs(n_runs):
            for record in flat_records(lab_run):
                if written == n_requests:
                    break
                out.write(orjson.dumps(record) + b"\n")
                written += 1
    return n_runs


# --- the kvlab.bench/2 export ----------------------------------------------------------

EXPORT_TOOL = {"tool": "vllm", "tool_version": "0.10.1", "tool_format": "vllm-bench-serve", "engine": "llama.cpp"}
# What an imported tool run's provenance says once stored, as export_bench writes it back.
EXPORT_PROVENANCE = (("gpu", "file"), ("label", "file"), ("model", "file"), ("n_ok", "file"), ("n_requests", "file"))


def tool_summary(lab_run: LabRun) -> dict[str, Any]:
    """What a benchmark tool (vLLM's bench serve) reports for the run: counts, totals, TTFT and E2E stats, in ms."""
    run, requests = lab_run.run, lab_run.requests
    ok = [r for r in requests if r[3]]
    summary: dict[str, Any] = {
        "n_requests": len(requests),
        "n_ok": len(ok),
        "n_failed": len(requests) - len(ok),
        "requests_sampled": False,
        "input_tokens": sum(r[7] for r in ok),
        "output_tokens": sum(r[9] for r in ok),
    }
    if run["effective_wall_s"]:
        summary["duration_s"] = run["effective_wall_s"]
        summary["output_tok_s"] = round(summary["output_tokens"] / run["effective_wall_s"], 6)
    for name, column in (("ttft_ms", 12), ("e2e_ms", 11)):
        values = sorted(r[column] * 1000 for r in ok if r[column] is not None)
        if values:
            summary[name] = {
                "mean": round(sum(values) / len(values), 6),
                "median": values[(len(values) - 1) // 2],
                "p99": values[min(len(values) - 1, -(-99 * len(values) // 100) - 1)],
            }
    return summary


def export_records(lab_run: LabRun) -> Iterator[dict[str, Any]]:
    """A run as export_bench writes it in kvlab.bench/2: its summary record, then one record per request."""
    from benchmarks.records.canonical import to_canonical_v2
    from benchmarks.records.schema import REQUEST_FIELD_NAMES, RUN_FIELD_NAMES

    run = lab_run.run
    values = {name: run.get("key" if name == "run_id" else name) for name in RUN_FIELD_NAMES}
    values |= {**EXPORT_TOOL, "source": "imported", "started_at": None, "provenance": EXPORT_PROVENANCE}
    values = {name: (None if value == "" else value) for name, value in values.items()}
    yield to_canonical_v2(values, summary=tool_summary(lab_run))
    for request in lab_run.requests:
        fields = dict(zip(REQUEST_FIELD_NAMES, request[2:13], strict=True))
        yield to_canonical_v2(values, request={name: (None if v == "" else v) for name, v in fields.items()})


def write_lab_export(path: Path, n_requests: int, per_run: int, *, seed: int = SEED) -> tuple[int, int]:
    """Write the lab as a kvlab.bench/2 export of n_requests requests in runs of per_run (the last maybe
    fewer), each run's summary first; return (runs, lines)."""
    import orjson

    n_runs = -(-n_requests // per_run)
    lines = 0
    with path.open("wb") as out:
        for i, lab_run in enumerate(Lab(seed).runs(n_runs, per_run)):
            if i == n_runs - 1:  # the last run cut short
                lab_run = LabRun(lab_run.run, lab_run.requests[: n_requests - i * per_run])
            for record in export_records(lab_run):
                out.write(orjson.dumps(record) + b"\n")
                lines += 1
    return n_runs, lines


# --- hostile sizes -----------------------------------------------------------------


def make_models_distinct() -> int:
    """Give every run its own model (the lab's model name + "-v<run id>"): as many models as runs."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("UPDATE benchmarks_run SET model = model || '-v' || id")
        return cursor.rowcount


def insert_big_run(n_requests: int, *, seed: int = SEED, chunk: int = 20_000, **run_fields: Any) -> int:
    """Insert one more run of the lab with n_requests requests; its id.

    The run is the lab's first run under a new id and key (``run_fields`` override its columns);
    its requests are that run's label drawn wave after wave by make_requests (the same mix of
    speeds and failures), numbered 0..n_requests-1, in chunks of executemany in one
    transaction. Its aggregates are then computed from the stored requests, as an import does
    (Run.refresh_summary).
    """
    from django.db import connection, transaction
    from django.db.models import Max

    from benchmarks.models import RequestResult, Run

    lab = Lab(seed)
    template = next(lab.runs(1)).run
    label = next(label for label in lab.labels if label["name"] == template["label"])
    run_id = (Run.objects.aggregate(last=Max("pk"))["last"] or 0) + 1
    fields = {f.attname for f in Run._meta.concrete_fields}
    values = {k: v for k, v in template.items() if k in fields} | {"id": run_id, "key": f"big-run-{run_id}"}
    if isinstance(values["server_props"], str):
        values["server_props"] = json.loads(values["server_props"])  # insert_lab writes it as JSON text
    values["provenance"] = json.loads(values["provenance"])  # likewise
    run = Run(**(values | run_fields))
    drawn = template | {"id": run_id, "key": run.key}  # the lab's model and GPU set the speeds
    q = connection.ops.quote_name
    request_sql = (
        f"INSERT INTO {q(RequestResult._meta.db_table)} ({', '.join(q(c) for c in REQUEST_COLUMNS)}) "
        f"VALUES ({', '.join(['%s'] * len(REQUEST_COLUMNS))})"
    )
    adapt = connection.ops.adapt_datetimefield_value
    started = template["started_at"]
    with transaction.atomic(), connection.cursor() as cursor:
        run.save(force_insert=True)
        seq = 0
        while seq < n_requests:
            rows = []
            while len(rows) < chunk and seq < n_requests:
                wave, _ = make_requests(lab.rng, label, drawn, 1.0, started + timedelta(seconds=seq))
                for request in wave[: n_requests - seq]:
                    content_hash = hashlib.blake2b(f"{run.key}/{seq}".encode(), digest_size=16).hexdigest()
                    rows.append((run_id, seq, adapt(request[2]), *request[3:14], content_hash, 0, None))
                    seq += 1
            cursor.executemany(request_sql, rows)
        run.refresh_summary()
    return run_id
