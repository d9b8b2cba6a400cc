"""A run's telemetry in brief, for `manage.py bench --wait --json`: how many samples, from
which sources, each slot's and the pool's capacity and peak, and the overflow per request (with,
for a server kvlab did not launch, where the pool's size came from or how many cells it had at least)."""

from __future__ import annotations

from typing import Any


def for_json(run: Any) -> dict[str, Any] | None:
    """The "telemetry" block of a run (anything with .telemetry: Run.telemetry's JSON), or None."""
    data = getattr(run, "telemetry", None)
    if not isinstance(data, dict):
        return None
    pool = data.get("pool") if isinstance(data.get("pool"), dict) else {}
    peak = data.get("peak") if isinstance(data.get("peak"), dict) else {}
    slot_peaks = peak.get("slots") if isinstance(peak.get("slots"), list) else []
    n_slots = max(len(slot_peaks), len(data.get("cells") or []))
    result: dict[str, Any] = {
        "samples": data.get("samples", len(data.get("t") or [])),
        "sources": data.get("sources") or {},
        "pool": {
            "kind": pool.get("kind", "unknown"),
            "cells": pool.get("pool_cells"),
            "peak": peak.get("pool"),
            "peak_from": peak.get("from"),
        },
        "slots": [
            {"id": i, "cells": pool.get("slot_cells"), "peak": slot_peaks[i] if i < len(slot_peaks) else None}
            for i in range(n_slots)
        ],
        "overflow": None,
    }
    over = data.get("overflow")
    if isinstance(over, dict):
        requests = [r for r in over.get("requests") or [] if isinstance(r, dict)]
        result["overflow"] = {
            "t_s": over.get("t"),
            "pool_cells": over.get("pool_cells"),
            # where the size came from ("launch command", "/props"; None: unknown, then at least this many)
            "pool_from": over.get("pool_from", "launch command" if over.get("pool_cells") else None),
            "pool_at_least": over.get("pool_at_least"),
            # "error": the server's 500 said the pool is shared (no launch command said it)
            "shared_from": over.get("shared_from", "launch command"),
            # 1-based, like the job page's request numbers
            "requests": [
                {"request": int(r.get("i", 0)) + 1, **{k: r.get(k) for k in ("prompt", "decoded", "cells")}}
                for r in requests
            ],
            "alone_needed": over.get("alone_needed"),
            "predicted_step": over.get("predicted_step"),
            "predicted_t_s": over.get("predicted_t"),
            "sentence": over.get("sentence"),
        }
    return result
