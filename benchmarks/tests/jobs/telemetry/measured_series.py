"""The KV pool telemetry measured on the real server, as a Run or Job stores it (the shape of
benchmarks/jobs/telemetry/series.py): a 1,024-cell pool shared by three 200-token prompts that overflows at
0.243 s after 142 tokens each, and three per-slot caches with a GPU sampled but no --metrics."""

from __future__ import annotations

from typing import Any

from benchmarks.jobs.telemetry import attribution

SHARED: dict[str, Any] = {
    "v": 1,
    "period_s": 0.05,
    "sources": {"slots": "ok", "metrics": "ok", "gpu": "none seen: NVML Shared Library Not Found"},
    "pool": {"kind": "shared", "slots": 3, "slot_cells": 1024, "pool_cells": 1024, "from": "launch command"},
    "t": [0.0007, 0.0517, 0.102, 0.1522, 0.2025],
    "cells": [[0, 217, 256, 292, 322], [0, 217, 256, 292, 322], [0, 217, 256, 292, 322]],
    "busy": [0, 7, 7, 7, 7],
    "processing": [1, 3, 3, 3, 3],
    "deferred": [0, 0, 0, 0, 0],
    "tokens_out": [0, 54, 168, 276, 366],
    "peak": {"pool": 1025, "pool_t": 0.243, "slots": [342, 342, 341], "from": "overflow"},
    "overflow": {
        "t": 0.243,
        "pool_cells": 1024,
        "predicted_step": 142,
        "predicted_t": 0.257,
        "requests": [
            {"i": 0, "prompt": 200, "decoded": 142, "cells": 342},
            {"i": 1, "prompt": 200, "decoded": 142, "cells": 342},
            {"i": 2, "prompt": 200, "decoded": 141, "cells": 341},
        ],
        "alone_needed": 800,
    },
}
SHARED["overflow"]["sentence"] = attribution.sentence(SHARED["overflow"], n_predict=600)  # the execution's words
PER_SLOT: dict[str, Any] = {
    "v": 1,
    "period_s": 0.1,
    "sources": {"slots": "ok", "metrics": "off: 501 Start it with `--metrics`", "gpu": "ok"},
    "pool": {"kind": "per-slot", "slots": 3, "slot_cells": 1024, "pool_cells": 3072, "from": "launch command"},
    "t": [0.102, 1.0, 1.9178],
    "cells": [[355, 645, 936], [355, 640, 940], [0, 600, 930]],
    "busy": [3, 7, 7],
    "tokens_out": [45, 900, 1788],
    "gpu": {
        "names": ["NVIDIA H200"],
        "mem_total_mib": [143771],
        "mem_mib": [[20480, 20490, 20500]],
        "util_pct": [[30, 90, 91]],
        "power_w": [[120, 400, 410]],
    },
    "peak": {"pool": 2806, "pool_t": 1.9178, "slots": [936, 940, 930], "from": "samples"},
    "overflow": None,
}
