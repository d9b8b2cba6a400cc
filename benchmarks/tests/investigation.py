"""The investigation's eleven requests, written out in code: the figures the tests assert on.

Three concurrent requests of a real 4,362-token prompt failed together after 246 s on the original
flags (4 slots sharing 16,384 cells); per-slot KV (C2: -np 3 --no-kv-unified) made them succeed;
one slot with q8_0 KV in VRAM (C3P) made them about 4x faster. data/demo/bench_results.jsonl ships
the same requests as the demo; test_the_demo_file_is_the_investigation checks that the two agree,
so what the suite asserts on is written here, not read from a file a user may replace.
"""

from __future__ import annotations

from typing import Any

from benchmarks.tests.builders import jsonl

FILENAME = "investigation.jsonl"

MACHINE = {"model": "Devstral-Small-2-24B-Q4_K_M.gguf", "gpu": "RTX 5060 Ti 16GB", "vram_total_mib": 16311}

ORIGINAL = {
    "label": "original", "ctx_size": 16384, "parallel": 4, "kv_unified": True,
    "cache_type_k": "f16", "cache_type_v": "f16", "kv_offload": False, "flash_attn": None,
}  # fmt: skip
C2 = {
    "label": "C2", "ctx_size": 9216, "parallel": 3, "kv_unified": False,
    "cache_type_k": "f16", "cache_type_v": "f16", "kv_offload": False, "flash_attn": None,
}  # fmt: skip
C3P = {
    "label": "C3P", "vram_used_mib": 15097, "ctx_size": 12288, "parallel": 1, "kv_unified": True,
    "cache_type_k": "q8_0", "cache_type_v": "q8_0", "kv_offload": True, "flash_attn": True,
}  # fmt: skip

WORKLOAD = {"prompt_tokens": 4362, "n_predict": 1738}
OK = {"status": 200, "ok": True, "error": None}
CONTEXT_EXCEEDED = {"status": 500, "ok": False, "error": "Context size has been exceeded."}


def request(
    ts: str, run: str, config: dict[str, Any], concurrency: int, outcome: dict[str, Any], **rest: Any
) -> dict[str, Any]:
    """One request line, its keys in the order the investigation's script wrote them."""
    used = {"vram_used_mib": config["vram_used_mib"]} if "vram_used_mib" in config else {}
    flags = {k: v for k, v in config.items() if k not in ("label", "vram_used_mib")}
    return {
        "ts": ts, "run": run, "label": config["label"], **MACHINE, **used, **flags, "concurrency": concurrency,
        **WORKLOAD, **outcome, **rest,
    }  # fmt: skip


def investigation_lines() -> list[dict[str, Any]]:
    """orig-single 5.84 tok/s; orig-x3 0/3 (500 after 246 s); c2-single 7.93; c2-x3 3/3 at 2.15 each;
    c3p-single 25.7 in 72 s; c3p-queue2 2/2 at 26.3."""
    failed = {**CONTEXT_EXCEEDED, "tok_s": None, "elapsed_s": 246}
    return [
        request("2026-09-18T19:02:11Z", "orig-single", ORIGINAL, 1, OK, tok_s=5.84, elapsed_s=None),
        *[request("2026-09-18T19:20:40Z", "orig-x3", ORIGINAL, 3, failed) for _ in range(3)],
        request(
            "2026-09-18T20:05:03Z",
            "c2-single",
            C2,
            1,
            OK,
            tok_s=7.93,
            elapsed_s=None,
            note="post: 9,216 tokens per slot (3 x 3,072)",
        ),  # fmt: skip
        *[
            request("2026-09-18T20:14:52Z", "c2-x3", C2, 3, OK, tok_s=2.15, elapsed_s=None, run_wall_s=615)
            for _ in range(3)
        ],
        request("2026-09-18T21:03:00Z", "c3p-single", C3P, 1, OK, tok_s=25.7, elapsed_s=72),
        *[request("2026-09-18T21:04:20Z", "c3p-queue2", C3P, 2, OK, tok_s=26.3, elapsed_s=None) for _ in range(2)],
    ]


def investigation_bytes() -> bytes:
    return jsonl(*investigation_lines())


def investigation_run(run: str) -> list[dict[str, Any]]:
    """The request lines of one of the investigation's runs."""
    lines = [line for line in investigation_lines() if line["run"] == run]
    assert lines, f"{run} is not one of the investigation's runs"
    return lines
