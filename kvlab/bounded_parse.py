"""Outside JSON and YAML, parsed within bounds: bytes, values and nesting. Pure.

kvlab parses documents it did not write: other tools' result files (an upload, `import_bench`) and
a llama-server's answers. What parsing one costs must follow the bytes sent, never the structure
they describe: no alias that expands, no nesting that exhausts a recursive reader, no document of
short values that builds more objects than memory holds. One rule, written once: every
reader of outside JSON or YAML parses through here, and a refusal (`Refused`, a ValueError) says
which bound the document passed, for the reader to record or show.

* Bytes: `read_capped` reads at most MAX_DOCUMENT_BYTES of a file, never the whole of a larger one.
* Values: a JSON document holds at most one value per comma and opening bracket, plus one, so
  `check_values` counts those bytes (memchr speed, before anything is built) and refuses more
  than MAX_VALUES. A YAML document's nodes are counted from its parser's events, before any is built.
* Nesting: orjson stops at 1,024 levels and Python's json at its recursion limit; what a reader then
  walks recursively (and kvlab's JSON columns, 32 levels) needs less, so `check_depth` refuses more
  than MAX_DEPTH levels, walking the parsed value level by level (no recursion).
* YAML aliases (``*name``) are refused, as Ruby's Psych.safe_load does: a few hundred bytes of anchors,
  each a list of ten aliases of the last, stand for 10**8 nodes, and merge keys (``<<: *a``) copy
  what they name. No tool kvlab reads writes one (GuideLLM's report is yaml.dump of fresh dicts).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import IO, Any

import orjson

MAX_DOCUMENT_BYTES = 256 * 1024 * 1024
CHUNK_BYTES = 1 << 20
MAX_VALUES = 4_000_000  # ~350 MiB of Python objects at worst (two-character strings), ~100 MiB of floats
MAX_DEPTH = 64  # tool files nest under 12 levels; a stored JSON value may nest 32
# PyYAML builds a node in 5-15 us (JSON's value in 0.1): 100,000 nodes is about a second, a 2.5 MB report.
MAX_YAML_NODES = 100_000


class Refused(ValueError):
    """A document kvlab will not parse: the message says which bound it passed, in the sender's terms."""


def too_deep(max_depth: int = MAX_DEPTH) -> Refused:
    return Refused(f"nested more than {max_depth} levels deep (kvlab reads {max_depth} at most)")


def read_capped(handle: IO[bytes], max_bytes: int | None = None) -> bytes:
    """The handle's bytes, or Refused past max_bytes (MAX_DOCUMENT_BYTES): a file's size is asked first;
    a stream is read a chunk at a time, never past one chunk beyond the cap (read(n) would hold n bytes)."""
    if max_bytes is None:
        max_bytes = MAX_DOCUMENT_BYTES
    refused = Refused(f"larger than {_size(max_bytes)}, the most kvlab reads of one document")
    try:
        size = os.fstat(handle.fileno()).st_size
    except (AttributeError, OSError, ValueError):  # not a file: an upload in memory, a pipe
        size = None
    chunks: list[bytes] = []
    if size is not None:
        if size > max_bytes:
            raise refused
        chunks.append(handle.read(size + 1))  # the whole file in one allocation of its size
        if len(chunks[0]) <= size:
            return chunks[0]
    total = len(chunks[0]) if chunks else 0  # a file that grew since it was measured: read on, in chunks
    if total > max_bytes:
        raise refused
    while chunk := handle.read(CHUNK_BYTES):
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise refused
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def check_values(data: bytes | str, max_values: int = MAX_VALUES) -> None:
    """Refused when data may hold more than max_values JSON values (commas and opening brackets, plus one:
    an upper bound, which text holding commas only raises)."""
    if len(data) < max_values:  # every counted character is one: a shorter document holds fewer values
        return
    if isinstance(data, bytes):
        bound = 1 + data.count(b",") + data.count(b"[") + data.count(b"{")
    else:
        bound = 1 + data.count(",") + data.count("[") + data.count("{")
    if bound > max_values:
        raise Refused(
            f"may hold {bound:,} values (its commas and opening brackets), more than the {max_values:,} "
            "kvlab parses in one document"
        )


def check_depth(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """Refused when a parsed JSON value nests more than max_depth levels (lists and objects)."""
    level = [value] if type(value) is dict or type(value) is list else []
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            raise too_deep(max_depth)
        below = []
        for container in level:
            for item in container.values() if type(container) is dict else container:
                if type(item) is dict or type(item) is list:
                    below.append(item)
        level = below


def loads(
    data: bytes | str,
    *,
    fallback: bool = False,
    parse_constant: Callable[[str], Any] | None = None,
    max_values: int = MAX_VALUES,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """JSON by orjson, within the bounds (Refused); orjson.JSONDecodeError when it is not JSON.

    With fallback, what orjson refuses but Python's json reads (NaN and Infinity, which json.dumps
    writes; a lone surrogate escape; 1e400) is read by python_loads, parse_constant given to it.
    """
    check_values(data, max_values)
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc) or "recursion" in str(exc):  # orjson's own limit, 1,024 levels
            raise too_deep(max_depth) from None
        if not fallback:
            raise
        return _python_loads(data, parse_constant, max_depth)
    check_depth(value, max_depth)
    return value


def python_loads(
    data: bytes | str,
    *,
    parse_constant: Callable[[str], Any] | None = None,
    max_values: int = MAX_VALUES,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """JSON by Python's json (its NaN, big integers and hooks, as a reader needs them), within the bounds.

    Its errors are json's own (JSONDecodeError, UnicodeDecodeError, a ValueError for an integer of
    more digits than Python converts), or Refused."""
    check_values(data, max_values)
    return _python_loads(data, parse_constant, max_depth)


def _python_loads(data: bytes | str, parse_constant: Callable[[str], Any] | None, max_depth: int) -> Any:
    try:
        value = json.loads(data, parse_constant=parse_constant)
    except RecursionError:
        raise too_deep(max_depth) from None
    check_depth(value, max_depth)
    return value


def raw_decode(decoder: json.JSONDecoder, text: str, pos: int, max_depth: int = MAX_DEPTH) -> tuple[Any, int]:
    """decoder.raw_decode(text, pos) within the nesting bound: one of several values appended in one file."""
    try:
        value, end = decoder.raw_decode(text, pos)
    except RecursionError:
        raise too_deep(max_depth) from None
    check_depth(value, max_depth)
    return value, end


def load_yaml(data: bytes | str, *, max_nodes: int = MAX_YAML_NODES, max_depth: int = MAX_DEPTH) -> Any:
    """One YAML document by PyYAML's safe loader (libyaml's when built), once its events are within the
    bounds: no alias, at most max_nodes nodes, max_depth levels. yaml.YAMLError when it is not YAML."""
    import yaml  # PyYAML comes with gguf, a runtime requirement; only YAML's readers need it

    loader_class = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    nodes = depth = 0
    for event in yaml.parse(data, Loader=loader_class):  # events only: nothing is built yet
        kind = type(event)
        if kind is yaml.ScalarEvent:
            nodes += 1
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            nodes += 1
            depth += 1
            if depth > max_depth:
                raise too_deep(max_depth)
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            depth -= 1
        elif kind is yaml.AliasEvent:
            raise Refused(
                f"a YAML alias (*{event.anchor[:40]}) at line {event.start_mark.line + 1}: kvlab reads YAML "
                "without aliases, which can stand for more than memory holds; save the file as JSON or without them"
            )
        if nodes > max_nodes:
            raise Refused(
                f"more than {max_nodes:,} YAML nodes, the most kvlab reads of one YAML document; "
                f"save it as JSON, read up to {MAX_VALUES:,} values"
            )
    loader = loader_class(data)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _size(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n / 1024:,.0f} KiB" if n >= 1024 else f"{n} bytes"
