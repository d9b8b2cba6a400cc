"""Tensor buffer-type overrides as llama-server b11434 builds and applies them. Pure.

Built, in command-line order, into one list of (pattern, buffer type) (common/arg.cpp):

* `-ot PAT=BUFT[,PAT=BUFT...]` (arg.cpp:252-284, 2756-2761): the value is split on every ',',
  each item on its first '='; BUFT must be the *default* buffer type name of a device ("CPU",
  "CUDA0", ...), else "unknown buffer type". A pattern cannot contain ',' for that reason.
* `--cpu-moe` (arg.cpp:2762-2768): LLM_FFN_EXPS_REGEX = CPU for every layer (common.h:1224).
* `--n-cpu-moe N` (arg.cpp:2769-2778): `blk\\.<i>` + LLM_FFN_EXPS_REGEX = CPU for i = 0..N-1
  (common.h:1228-1243).
* `--n-cpu-ffn N` (arg.cpp:2779-2789): `blk\\.<i>` + LLM_FFN_DENSE_REGEX = CPU, the dense FFN.

The loader tries them in order and the first whose `std::regex_search` (ECMAScript, a substring
search) matches the tensor's name wins (src/llama-model-loader.cpp:1235-1259). A pattern comes from
anyone who opens the sizing page, so kvlab never runs it on a backtracking engine (`(.*)*(.*)*Q`
takes Python's `re` minutes on one tensor name): the list is matched by one RE2 set (google-re2),
in time linear in the name whatever the patterns, and its first matching pattern wins. Whether a
pattern occurs in a name does not depend on the engine for the constructs these patterns use
(literals, `\\.`, `\\d`, groups, alternation, classes, quantifiers, anchors; `\\d`/`\\w`
ASCII in both); a pattern needing a backtracking engine (a backreference, a lookaround) is
refused, as are the constructs only Python or only ECMAScript accepts (Python's `(?P<n>)`,
`\\Z`; ECMAScript's `[^]`), and a list too large for SET_MAX_MEM.

After parsing, the list is padded with empty entries to llama_max_tensor_buft_overrides() = 4096
(arg.cpp:946-950); the loader stops at the first empty one, so 4096 or more user entries leave no
terminator: kvlab refuses them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

import re2

from .types import MAX_OVERRIDES

LLM_FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
LLM_FFN_DENSE_REGEX = r"\.ffn_(up|down|gate)\."
CPU = "CPU"
SET_MAX_MEM = 64 << 20  # bytes RE2 may build one override list's automaton in (4,095 --n-cpu-moe take 16 MiB)

Override = tuple[str, str]


class OverrideError(ValueError):
    """An override llama-server would refuse, or that kvlab cannot apply; the message says which."""


def ffn_block_regex(idx: int, ffn_regex: str) -> str:
    """llm_ffn_block_regex: `blk\\.<idx>` followed by the FFN pattern."""
    return rf"blk\.{idx}{ffn_regex}"


def cpu_moe() -> list[Override]:
    """--cpu-moe."""
    return [(LLM_FFN_EXPS_REGEX, CPU)]


def n_cpu_moe(n: int) -> list[Override]:
    """--n-cpu-moe N: the experts of layers 0..N-1 in system RAM."""
    if n < 0:
        raise OverrideError(f"--n-cpu-moe must be 0 or more, not {n}")
    return [(ffn_block_regex(i, LLM_FFN_EXPS_REGEX), CPU) for i in range(n)]


def n_cpu_ffn(n: int) -> list[Override]:
    """--n-cpu-ffn N: the dense FFN of layers 0..N-1 in system RAM."""
    if n < 0:
        raise OverrideError(f"--n-cpu-ffn must be 0 or more, not {n}")
    return [(ffn_block_regex(i, LLM_FFN_DENSE_REGEX), CPU) for i in range(n)]


def buffer_types(device_names: Iterable[str]) -> list[str]:
    """The names `-ot` accepts: CPU and each device's default buffer type (named like the device)."""
    return [CPU, *device_names]


def parse_ot(value: str, device_names: Sequence[str]) -> list[Override]:
    """One `-ot` value: `PAT=BUFT[,PAT=BUFT...]`, validated like parse_tensor_buffer_overrides."""
    known = buffer_types(device_names)
    result = []
    for item in value.split(","):
        pattern, sep, buft = item.partition("=")
        if not sep:
            raise OverrideError(f"-ot {item!r}: expected PATTERN=BUFFER_TYPE (llama-server: invalid value)")
        if buft not in known:
            raise OverrideError(
                f"-ot {item!r}: unknown buffer type {buft!r}; the buffer types are {', '.join(known)} "
                "(llama-server prints the list and exits)"
            )
        compile_pattern(pattern)
        result.append((pattern, buft))
    return result


@lru_cache(maxsize=8192)
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.ASCII)


_PYTHON_ONLY = re.compile(r"\(\?P|\(\?<[=!]|\\Z|\\A|\(\?[aiLmsux]")


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is the user's error, said in the OverrideError
    options.max_mem = SET_MAX_MEM
    return options


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """Check a pattern: valid, read as std::regex (ECMAScript) reads it, and one RE2 can match in linear
    time; its Python form (for its syntax errors; never run on a name), or OverrideError."""
    if _PYTHON_ONLY.search(pattern) or "[^]" in pattern:
        raise OverrideError(f"-ot pattern {pattern!r} uses syntax that C++ std::regex (ECMAScript) reads differently")
    try:
        compiled = _compile(pattern)
    except re.error as exc:
        raise OverrideError(f"-ot pattern {pattern!r} is not a valid regular expression: {exc}") from None
    _linear(pattern)
    return compiled


@lru_cache(maxsize=8192)
def _linear(pattern: str) -> None:
    try:
        re2.compile(pattern, _re2_options())
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise OverrideError(
            f"-ot pattern {pattern!r} needs a backtracking regex engine ({reason}): kvlab matches tensor "
            "names in linear time (RE2), without backreferences or lookarounds"
        ) from None


def validate(overrides: Sequence[Override], device_names: Sequence[str]) -> None:
    """Check a built list: its size, every pattern and every buffer type."""
    if len(overrides) >= MAX_OVERRIDES:
        raise OverrideError(
            f"{len(overrides)} tensor overrides: llama.cpp takes at most {MAX_OVERRIDES - 1} "
            f"(llama_max_tensor_buft_overrides() = {MAX_OVERRIDES}, one entry ends the list)"
        )
    known = buffer_types(device_names)
    for pattern, buft in overrides:
        compile_pattern(pattern)
        if buft not in known:
            raise OverrideError(
                f"override {pattern}={buft}: unknown buffer type; the buffer types are {', '.join(known)}"
            )


def match(name: str, overrides: Sequence[Override]) -> str | None:
    """The buffer type of the first override whose pattern occurs in the name, or None."""
    if not overrides:
        return None
    matched = _compiled(tuple(overrides)).Match(name)
    return overrides[min(matched)][1] if matched else None


@lru_cache(maxsize=256)
def _compiled(overrides: tuple[Override, ...]) -> re2.Set:
    """An override list as one RE2 set, compiled once: the fit matches every tensor of a model against the
    same list, each name in one linear pass whatever the patterns."""
    patterns = re2.Set.SearchSet(_re2_options())
    for pattern, _ in overrides:
        compile_pattern(pattern)
        patterns.Add(pattern)
    try:
        patterns.Compile()
    except re2.error:
        raise OverrideError(
            f"{len(overrides)} tensor overrides are too large to match together (over {SET_MAX_MEM >> 20} MiB "
            "as one automaton): give fewer or simpler -ot patterns"
        ) from None
    return patterns
