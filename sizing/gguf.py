"""Read a GGUF file's head: its metadata and tensor table, never its tensor data.

GGUF v2/v3 layout (llama.cpp gguf-py/gguf/gguf_reader.py): magic "GGUF", version,
tensor count, metadata count, the metadata key/values, the tensor infos (name, dims,
type, offset). All of it sits before the tensor data, so the first few MiB of a file
are enough. A head that ends early raises GGUFError naming what was cut.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import IO, Any

from .ggml_types import BY_ID, tensor_bytes

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
MAX_STRING = 16 * 1024 * 1024  # a longer string is corruption, not a model
MAX_ARRAY = 10_000_000  # vocabularies reach a few hundred thousand entries
MAX_TENSORS = 1_000_000
MAX_KV = 100_000
MAX_DIMS = 8

# GGUF value types -> struct format (scalars) or handling.
_SCALARS = {
    0: ("<B", 1),
    1: ("<b", 1),
    2: ("<H", 2),
    3: ("<h", 2),
    4: ("<I", 4),
    5: ("<i", 4),
    6: ("<f", 4),
    7: ("<?", 1),
    10: ("<Q", 8),
    11: ("<q", 8),
    12: ("<d", 8),
}
_STRING, _ARRAY = 8, 9


class GGUFError(ValueError):
    """The bytes are not a GGUF head kvlab can read; the message says why."""


@dataclass
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    type_id: int

    @property
    def type_name(self) -> str:
        t = BY_ID.get(self.type_id)
        return t.name if t else f"type {self.type_id}"

    @property
    def n_bytes(self) -> int:
        return tensor_bytes(self.type_id, self.shape)


@dataclass
class GGUFHead:
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo] = field(default_factory=list)
    complete: bool = True  # False when the tensor table was cut off by a short head

    def metadata_without_vocab(self) -> dict[str, Any]:
        """The metadata with the tokenizer's long arrays replaced by their length."""
        kept: dict[str, Any] = {}
        for key, value in self.metadata.items():
            if key.startswith("tokenizer.ggml.") and isinstance(value, list):
                kept[key + ".count"] = len(value)
            else:
                kept[key] = value
        arch = self.metadata.get("general.architecture")
        tokens = self.metadata.get("tokenizer.ggml.tokens")
        if isinstance(arch, str) and isinstance(tokens, list):
            kept.setdefault(f"{arch}.vocab_size", len(tokens))
        return kept

    @property
    def weights_bytes(self) -> int | None:
        """Sum of tensor sizes (the model buffer), or None if the table is incomplete."""
        if not self.complete:
            return None
        return sum(t.n_bytes for t in self.tensors)


class _Reader:
    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self.stream = stream
        self.limit = limit
        self.pos = 0
        self.what = "the header"

    def read(self, n: int) -> bytes:
        if self.pos + n > self.limit:
            raise _Truncated(self.what)
        data = self.stream.read(n)
        if len(data) < n:
            raise _Truncated(self.what)
        self.pos += n
        return data

    def scalar(self, vtype: int) -> Any:
        fmt, size = _SCALARS[vtype]
        return struct.unpack(fmt, self.read(size))[0]

    def u32(self) -> int:
        value: int = struct.unpack("<I", self.read(4))[0]
        return value

    def u64(self) -> int:
        value: int = struct.unpack("<Q", self.read(8))[0]
        return value

    def string(self) -> str:
        n = self.u64()
        if n > MAX_STRING:
            raise GGUFError(f"a string of {n:,} bytes in {self.what}: the file is corrupt")
        raw = self.read(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.scalar(vtype)
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type = self.u32()
            n = self.u64()
            if n > MAX_ARRAY:
                raise GGUFError(f"an array of {n:,} items in {self.what}: the file is corrupt")
            if item_type == _ARRAY:
                return [self.value(_ARRAY) for _ in range(n)]
            if item_type in _SCALARS:
                fmt, size = _SCALARS[item_type]
                return list(struct.unpack(f"<{n}{fmt[1]}", self.read(n * size)))
            if item_type == _STRING:
                return [self.string() for _ in range(n)]
            raise GGUFError(f"unknown array item type {item_type} in {self.what}")
        raise GGUFError(f"unknown value type {vtype} in {self.what}")


class _Truncated(Exception):
    def __init__(self, what: str) -> None:
        self.what = what


def read_gguf_head(stream: IO[bytes], *, limit: int = 1 << 62) -> GGUFHead:
    """Parse the head of a GGUF file from stream, reading at most limit bytes."""
    r = _Reader(stream, limit)
    try:
        magic = r.read(4)
    except _Truncated:
        raise GGUFError("the file is empty or shorter than a GGUF header") from None
    if magic != MAGIC:
        raise GGUFError(f"not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    try:
        version = r.u32()
        if version not in SUPPORTED_VERSIONS:
            raise GGUFError(f"GGUF version {version} is not supported (kvlab reads versions 2 and 3)")
        n_tensors, n_kv = r.u64(), r.u64()
        if n_tensors > MAX_TENSORS or n_kv > MAX_KV:
            raise GGUFError(f"{n_tensors:,} tensors and {n_kv:,} metadata keys: the header is corrupt")
        metadata: dict[str, Any] = {}
        for i in range(n_kv):
            r.what = f"metadata entry {i + 1} of {n_kv}"
            key = r.string()
            r.what = f"metadata {key!r}"
            metadata[key] = r.value(r.u32())
    except _Truncated as cut:
        raise GGUFError(f"the head ends inside {cut.what}; upload more of the file's start") from None
    head = GGUFHead(version=version, metadata=metadata)
    try:
        for i in range(n_tensors):
            r.what = f"tensor info {i + 1} of {n_tensors}"
            name = r.string()
            n_dims = r.u32()
            if n_dims > MAX_DIMS:
                raise GGUFError(f"tensor {name!r} has {n_dims} dimensions: the file is corrupt")
            shape = tuple(r.u64() for _ in range(n_dims))
            type_id = r.u32()
            r.u64()  # offset into the data section
            if type_id not in BY_ID:
                raise GGUFError(f"tensor {name!r} has unknown ggml type {type_id}")
            head.tensors.append(TensorInfo(name, shape, type_id))
    except _Truncated:
        head.complete = False  # the metadata is whole; only the weights total is unknown
    return head
