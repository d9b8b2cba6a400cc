"""A minimal GGUF head writer for the reader's tests (tiny models for the real server
are written with the gguf package in tiny_gguf.py)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("<Q", len(raw)) + raw


def _value(v: Any) -> bytes:
    if isinstance(v, bool):
        return struct.pack("<I?", 7, v)
    if isinstance(v, int):
        return struct.pack("<Iq", 11, v) if v < 0 or v > 0xFFFFFFFF else struct.pack("<II", 4, v)
    if isinstance(v, float):
        return struct.pack("<If", 6, v)
    if isinstance(v, str):
        return struct.pack("<I", 8) + _string(v)
    if isinstance(v, list):
        if all(isinstance(x, bool) for x in v):
            return struct.pack("<IIQ", 9, 7, len(v)) + b"".join(struct.pack("<?", x) for x in v)
        if all(isinstance(x, int) for x in v):
            return struct.pack("<IIQ", 9, 5, len(v)) + b"".join(struct.pack("<i", x) for x in v)
        return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(_string(x) for x in v)
    raise TypeError(v)


def gguf_head_bytes(
    metadata: dict[str, Any], tensors: list[tuple[str, tuple[int, ...], int]] = (), version: int = 3
) -> bytes:
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(metadata))
    for key, value in metadata.items():
        out += _string(key) + _value(value)
    for offset, (name, shape, type_id) in enumerate(tensors):
        out += _string(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        out += struct.pack("<IQ", type_id, offset)
    return out


def write_gguf_head(
    path: Path,
    metadata: dict[str, Any],
    tensors: list[tuple[str, tuple[int, ...], int]] = (),
    truncate_after_tensors: bool = True,
) -> None:
    data = gguf_head_bytes(metadata, tensors)
    if not truncate_after_tensors:
        data += b"\0" * 64
    path.write_bytes(data)
