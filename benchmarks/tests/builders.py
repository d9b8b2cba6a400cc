"""Records, files and hosts built in code for the tests, and what an import stored, read back."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
from django.conf import settings

DEMO_PATH = Path(settings.BASE_DIR) / "data" / "demo" / "bench_results.jsonl"


def flat(**overrides: Any) -> dict[str, Any]:
    """A valid flat-shape record; override or drop (value ...) fields per test."""
    record: dict[str, Any] = {
        "ts": "2026-10-01T12:00:00Z",
        "run": "r1",
        "label": "base",
        "model": "tiny.gguf",
        "gpu": "RTX 4090",
        "ctx_size": 8192,
        "parallel": 2,
        "kv_unified": False,
        "cache_type_k": "f16",
        "cache_type_v": "f16",
        "kv_offload": True,
        "flash_attn": True,
        "concurrency": 2,
        "prompt_tokens": 1000,
        "n_predict": 200,
        "status": 200,
        "ok": True,
        "error": None,
        "tok_s": 40.0,
        "elapsed_s": 6.5,
    }
    record.update(overrides)
    return {k: v for k, v in record.items() if v is not ...}


def jsonl(*records: dict[str, Any] | bytes) -> bytes:
    return b"".join((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n" for r in records)


def records(n_runs: int, seed: int = 7, prefix: str = "r") -> bytes:
    """n_runs runs of two requests over nine days, in two labels, some slower than the ones before."""
    return jsonl(*record_lines(n_runs, seed, prefix))


def record_lines(n_runs: int, seed: int = 7, prefix: str = "r") -> list[dict[str, Any]]:
    rng = random.Random(seed)
    lines = []
    for i in range(n_runs):
        common = {"run": f"{prefix}{i}", "label": rng.choice(["a", "b"]), "concurrency": 1 + i % 2}
        when = f"2026-10-{1 + i % 9:02d}T{i % 24:02d}:{i % 60:02d}:00Z"
        for _ in range(2):
            lines.append(flat(**common, ts=when, ok=rng.random() < 0.9, tok_s=rng.uniform(5, 60)))
    return lines


def traced_import(data: bytes, filename: str = "traced.jsonl") -> tuple[Any, int]:
    """Import data; the FileImport, and the most memory Python held at once while importing it."""
    import io
    import tracemalloc

    from benchmarks.history.importer import import_bench_file

    tracemalloc.start()
    try:
        result = import_bench_file(io.BytesIO(data), filename=filename, origin="command")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def stored_rows() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every stored run (by key) and request (by run key and seq), each with every column but its ids and
    the wall clock of its import; floats as their bytes, so 0.0 and -0.0 or two neighbouring doubles differ."""
    import struct

    from benchmarks.models import RequestResult, Run

    def bits(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return [tuple(struct.pack("<d", v) if type(v) is float else v for v in row) for row in rows]

    run_fields = [
        f.attname for f in Run._meta.concrete_fields if f.attname not in {"id", "created_at", "first_import_id"}
    ]
    request_fields = [f.attname for f in RequestResult._meta.concrete_fields if f.attname not in {"id", "run_id"}]
    runs = list(Run.objects.order_by("key").values_list(*run_fields))
    requests = list(RequestResult.objects.order_by("run__key", "seq").values_list("run__key", *request_fields))
    return bits(runs), bits(requests)


def announced_host(name: str, models_dir: Path, files: tuple[str, ...] = ("m.gguf",), **fields: Any) -> Any:
    """A launch host as its worker would announce it, with these .gguf files written into models_dir."""
    from django.utils import timezone

    from benchmarks.models import LaunchHost

    for file in files:
        (models_dir / file).write_bytes(b"GGUF")
    defaults = {
        "binaries": ["/opt/llama/llama-server"],
        "models_dirs": [str(models_dir)],
        "gguf_files": [{"file": f, "bytes": 4} for f in files],
        "announced_at": timezone.now(),
    }
    return LaunchHost.objects.create(name=name, **{**defaults, **fields})
