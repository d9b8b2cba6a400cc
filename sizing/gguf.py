"""Read a GGUF file's head: its metadata and tensor table, never its tensor data.

GGUF v2/v3 layout (llama.cpp gguf-py/gguf/gguf_reader.py): magic "GGUF", version,
tensor count, metadata count, the metadata key/values, the tensor infos (name, dims,
type, offset). All of it sits before the tensor data, so the first few MiB of a file
are enough. A head that ends early raises GGUFError naming what was cut.
"""

from __future__ import annotations

import math
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
# Arrays up to this length are kept (per-layer arrays: llama.cpp allows 512 layers); longer
# ones are skipped without being read into memory, their length alone kept.
MAX_KEPT_ARRAY = 1024
MAX_KEPT_STRING = 64 * 1024  # chat templates run to a few KiB; a longer string is only counted
MAX_NESTING = 4  # llama.cpp reads no nested arrays at all
MAX_ELEMENTS = 1 << 62  # a tensor's element count must fit ggml's int64_t
MAX_WEIGHTS_BYTES = 1 << 50  # 1 PiB: beyond any model
_SKIP_CHUNK = 1 << 20

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
    array_lengths: dict[str, int] = field(default_factory=dict)  # the long arrays skipped, by key

    def metadata_without_vocab(self) -> dict[str, Any]:
        """The metadata to store: the tokenizer's arrays, the long arrays skipped while reading and
        long strings replaced by their length, so that a stored head stays small."""
        kept: dict[str, Any] = {}
        for key, value in self.metadata.items():
            if key.startswith("tokenizer.ggml.") and isinstance(value, list):
                kept[key + ".count"] = len(value)
            elif isinstance(value, str) and len(value) > MAX_KEPT_STRING:
                kept[key + ".length"] = len(value)  # sizing reads no long string
            else:
                kept[key] = value
        for key, length in self.array_lengths.items():
            kept[key + ".count"] = length
        arch = self.metadata.get("general.architecture")
        tokens = self.metadata.get("tokenizer.ggml.tokens")
        n_tokens = len(tokens) if isinstance(tokens, list) else self.array_lengths.get("tokenizer.ggml.tokens")
        if isinstance(arch, str) and n_tokens is not None:
            kept.setdefault(f"{arch}.vocab_size", n_tokens)
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

    def skip(self, n: int) -> None:
        """Read past n bytes without keeping them."""
        while n > 0:
            chunk = min(n, _SKIP_CHUNK)
            self.read(chunk)
            n -= chunk

    def scalar(self, vtype: int) -> Any:
        fmt, size = _SCALARS[vtype]
        value = struct.unpack(fmt, self.read(size))[0]
        if isinstance(value, float) and not math.isfinite(value):
            raise GGUFError(f"{self.what} holds {value}, not a finite number")
        return value

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
        if b"\0" in raw:
            raise GGUFError(f"a string in {self.what} holds a NUL character")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        n = self.u64()
        if n > MAX_STRING:
            raise GGUFError(f"a string of {n:,} bytes in {self.what}: the file is corrupt")
        self.skip(n)

    def value(self, vtype: int, depth: int = 0) -> Any:
        """The value, or _Skipped for an array too long to keep (read past, never materialised)."""
        if vtype in _SCALARS:
            return self.scalar(vtype)
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            if depth >= MAX_NESTING:
                raise GGUFError(f"arrays nested more than {MAX_NESTING} deep in {self.what}: the file is corrupt")
            item_type = self.u32()
            n = self.u64()
            if n > MAX_ARRAY:
                raise GGUFError(f"an array of {n:,} items in {self.what}: the file is corrupt")
            keep = n <= MAX_KEPT_ARRAY
            if item_type == _ARRAY:
                items = []
                for _ in range(n):
                    item = self.value(_ARRAY, depth + 1)
                    keep = keep and not isinstance(item, _Skipped)
                    if keep:
                        items.append(item)
                return items if keep else _Skipped(n)
            if item_type in _SCALARS:
                fmt, size = _SCALARS[item_type]
                if not keep:
                    self.skip(n * size)
                    return _Skipped(n)
                return [self.scalar(item_type) for _ in range(n)]
            if item_type == _STRING:
                if not keep:
                    for _ in range(n):
                        self.skip_string()
                    return _Skipped(n)
                return [self.string() for _ in range(n)]
            raise GGUFError(f"unknown array item type {item_type} in {self.what}")
        raise GGUFError(f"unknown value type {vtype} in {self.what}")


@dataclass(frozen=True)
class _Skipped:
    """An array read past, not kept: only its length."""

    length: int


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
        skipped: dict[str, int] = {}
        for i in range(n_kv):
            r.what = f"metadata entry {i + 1} of {n_kv}"
            key = r.string()
            r.what = f"metadata {key!r}"
            value = r.value(r.u32())
            if isinstance(value, _Skipped):
                skipped[key] = value.length
            else:
                metadata[key] = value
    except _Truncated as cut:
        raise GGUFError(f"the head ends inside {cut.what}; upload more of the file's start") from None
    arch = metadata.get("general.architecture")
    if "tokenizer.ggml.tokens" in skipped and isinstance(arch, str):
        # llama.cpp counts the vocabulary from the tokens; the tokens themselves are not kept.
        metadata.setdefault(f"{arch}.vocab_size", skipped["tokenizer.ggml.tokens"])
    head = GGUFHead(version=version, metadata=metadata, array_lengths=skipped)
    total = 0
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
            if math.prod(shape) > MAX_ELEMENTS:
                raise GGUFError(f"tensor {name!r} of shape {list(shape)} is too large: the file is corrupt")
            info = TensorInfo(name, shape, type_id)
            try:
                total += info.n_bytes
            except ValueError as exc:
                raise GGUFError(f"tensor {name!r}: {exc}") from None
            if total > MAX_WEIGHTS_BYTES:
                raise GGUFError(f"the tensors add up to {total:,} bytes, too large for any model: the file is corrupt")
            head.tensors.append(info)
    except _Truncated:
        head.complete = False  # the metadata is whole; only the weights total is unknown
    return head
