"""A tiny format module for the import pipeline's tests (registry.FORMAT_MODULES is patched to hold it).

A file starts with the line FAKE; each further line is a record, read with Python's json (which takes
bare NaN and Infinity, as some tools write them), or RAISE <message> (a FormatError), or CRASH (a bug).
A directory holding a file named fake.summary is read whole: its files' records, in name order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.records.formats import Declared, FormatError, Sample, Source

NAME = "fake"


def sniff(sample: Sample) -> bool:
    if sample.is_dir:
        return any(Path(name).name == "fake.summary" for name in sample.names)
    return sample.head.startswith(b"FAKE\n")


def convert(source: Source, declared: Declared) -> Iterator[dict[str, Any]]:
    for path in source.files or (source.path,):
        yield from _records(path, declared)


def _records(path: Path, declared: Declared) -> Iterator[dict[str, Any]]:
    lines = path.read_text().splitlines()
    if not lines or lines[0] != "FAKE":
        raise FormatError("not a FAKE file", str(path))
    for n, line in enumerate(lines[1:], start=2):
        if line.startswith("RAISE "):
            raise FormatError(line.removeprefix("RAISE "), f"{path.name} line {n}")
        if line == "CRASH":
            raise KeyError("boom")
        yield json.loads(line)
