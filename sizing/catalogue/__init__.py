"""The built-in catalogues: popular GGUF models (as GGUF metadata) and GPUs.

Every figure comes from a published source named in models.json / gpus.json and
SOURCES.md beside this file.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class CatalogueModel:
    id: str
    name: str
    metadata: dict[str, Any]
    files: dict[str, int]  # quantization -> GGUF file size in bytes
    sources: dict[str, str]


@dataclass(frozen=True)
class CatalogueGpu:
    id: str
    name: str
    memory_mib: int
    vendor: str
    kind: str
    source: str


@functools.cache
def models() -> dict[str, CatalogueModel]:
    data = json.loads((HERE / "models.json").read_text())
    return {
        m["id"]: CatalogueModel(m["id"], m["name"], m["metadata"], m.get("files", {}), m.get("sources", {}))
        for m in data["models"]
    }


@functools.cache
def gpus() -> dict[str, CatalogueGpu]:
    data = json.loads((HERE / "gpus.json").read_text())
    return {
        g["id"]: CatalogueGpu(
            g["id"], g["name"], g["memory_mib"], g.get("vendor", ""), g.get("kind", ""), g.get("source", "")
        )
        for g in data["gpus"]
    }
