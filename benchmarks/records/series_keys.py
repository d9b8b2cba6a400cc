"""Which runs compare like with like: one configuration under one workload.

A run's configuration is the model and GPU it ran on and the llama-server flags that
decide its speed; its workload is what the client asked of it. Two runs are comparable
only when both match: a regression is the same series getting worse, and a load curve
is one configuration (and one prompt/n_predict) across concurrencies. Pure: rows in.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FLAG_FIELDS = ("ctx_size", "parallel", "kv_unified", "cache_type_k", "cache_type_v", "kv_offload", "flash_attn")
# engine and server_flags: a vLLM run is not a llama.cpp run of the same model, nor -c 4096 one of -c 8192
CONFIG_FIELDS = ("model", "gpu", "engine", *FLAG_FIELDS, "server_flags")
WORKLOAD_FIELDS = ("concurrency", "request_rate", "prompt_tokens_max", "n_predict_max")
SERIES_FIELDS = (*CONFIG_FIELDS, *WORKLOAD_FIELDS)
FIELD_NAMES = {
    "model": "model",
    "gpu": "GPU",
    "ctx_size": "ctx size",
    "parallel": "parallel",
    "kv_unified": "unified KV",
    "cache_type_k": "K cache",
    "cache_type_v": "V cache",
    "kv_offload": "KV offload",
    "flash_attn": "flash attention",
    "engine": "engine",
    "server_flags": "server flags",
    "concurrency": "concurrency",
    "request_rate": "request rate",
    "prompt_tokens_max": "prompt tokens",
    "n_predict_max": "n_predict",
    "build": "llama.cpp build",
}


MAX_FLAGS_SHOWN = 60  # characters of another engine's command line in a label


def flags_label(row: Mapping[str, Any]) -> str:
    """The flags as a reader of llama-server's command line expects them, briefly.

    A run of another engine (vLLM, SGLang: no llama-server flag recorded) reads as its engine and
    the start of its command line instead of a row of question marks.
    """
    if all(row.get(f) in (None, "") for f in FLAG_FIELDS) and (row.get("engine") or row.get("server_flags")):
        flags = str(row.get("server_flags") or "")
        if len(flags) > MAX_FLAGS_SHOWN:
            flags = flags[: MAX_FLAGS_SHOWN - 1] + "…"
        return f"{row.get('engine') or '?'} {flags}".strip()
    unified = {True: "unified", False: "per-slot", None: "?"}[row.get("kv_unified")]
    text = (
        f"-c {row.get('ctx_size') or '?'} -np {row.get('parallel') or '?'} {unified} "
        f"{row.get('cache_type_k') or '?'}/{row.get('cache_type_v') or '?'}"
    )
    if row.get("kv_offload") is False:
        text += " no KV offload"
    if row.get("flash_attn"):
        text += f" fa {row['flash_attn']}"
    return text


def workload_label(row: Mapping[str, Any]) -> str:
    rate = f" · {row['request_rate']:g} req/s" if row.get("request_rate") is not None else ""
    return (
        f"concurrency {_value(row.get('concurrency'))}{rate} · prompt {_value(row.get('prompt_tokens_max'))} tok"
        f" · n_predict {_value(row.get('n_predict_max'))}"
    )


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "?" if value is None or value == "" else str(value)


NOT_RECORDED = "not recorded"


def _difference(value: Any) -> str:
    """A value as a like-with-like warning names it: a value no run recorded reads "not recorded", not "?"."""
    return NOT_RECORDED if value is None or value == "" else _value(value)


def key(row: Mapping[str, Any], fields: Iterable[str] = SERIES_FIELDS) -> tuple[Any, ...]:
    return tuple(map(row.get, fields))


# llama-server flags that say where and how the server listens, logs or is named, not what it computes:
# two runs that differ only in these are one configuration. With the value each takes, or without one.
NOT_CONFIGURATION_WITH_VALUE = frozenset(
    ("--host", "--port", "-a", "--alias", "-t", "--threads", "-tb", "--threads-batch", "--threads-http", "--api-key",
     "--api-key-file", "-to", "--timeout", "--log-file", "--path", "--api-prefix", "--slot-save-path",
     "--ssl-key-file", "--ssl-cert-file")
)  # fmt: skip
NOT_CONFIGURATION = frozenset(
    ("--metrics", "--slots", "--no-slots", "--props", "-v", "--verbose", "--log-disable", "--log-timestamps",
     "--log-prefix", "--no-webui")
)  # fmt: skip


def configuration_flags(server_flags: str) -> str:
    """A server's command line without the flags that do not change its configuration (NOT_CONFIGURATION…);
    the line as it is where it cannot be split as a shell would."""
    try:
        words = shlex.split(server_flags)
    except ValueError:
        return server_flags
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
            continue
        name = word.split("=", 1)[0]
        if name in NOT_CONFIGURATION or (name in NOT_CONFIGURATION_WITH_VALUE and "=" in word):
            continue
        if name in NOT_CONFIGURATION_WITH_VALUE:
            skip = True
            continue
        kept.append(word)
    return shlex.join(kept)


def _as_configuration(values: tuple[Any, ...], fields: Sequence[str]) -> tuple[Any, ...]:
    """A row's key with its server flags read by configuration_flags."""
    if "server_flags" not in fields:
        return values
    at = fields.index("server_flags")
    flags = values[at]
    return (*values[:at], configuration_flags(flags) if flags else flags, *values[at + 1 :])


def differences(rows: Iterable[Mapping[str, Any]], fields: Sequence[str]) -> dict[str, list[str]]:
    """The fields on which the rows disagree, each with all its values in first-seen order; server flags
    compared without those that do not change the configuration (the port, the threads, the alias …)."""
    # Dicts as ordered sets: first-seen order, and one pass over the rows (a line holds up to 10,000);
    # the server flags are split only once per distinct key, not once per row.
    keys = dict.fromkeys(key(row, fields) for row in rows)
    distinct = dict.fromkeys(_as_configuration(values, fields) for values in keys)
    found = {}
    if len(distinct) > 1:
        for field, column in zip(fields, zip(*distinct, strict=True), strict=True):
            values = list(dict.fromkeys(map(_difference, dict.fromkeys(column))))  # None and "" alike
            if len(values) > 1:
                found[FIELD_NAMES[field]] = values
    return found


MAX_VALUES_NAMED = 4  # per field in a description; the rest are counted, so a warning stays a sentence


def describe(diff: Mapping[str, Sequence[str]], most: int = MAX_VALUES_NAMED) -> str:
    """The differing fields, each with its first few values and how many more there are."""
    return "; ".join(f"{name} {_some(values, most)}" for name, values in diff.items())


def _some(values: Sequence[str], most: int) -> str:
    named = " / ".join(values[:most])
    return named if len(values) <= most else f"{named} and {len(values) - most:,} more"


def measured_by(row: Mapping[str, Any]) -> str:
    """The tool that measured a run row (records.sources.measured_by: "kvlab" for an executed run)."""
    return row.get("tool") or ("kvlab" if row.get("source") == "executed" else "")


def like_with_like(rows: Sequence[Mapping[str, Any]], most: int = MAX_VALUES_NAMED) -> list[str]:
    """Why runs compared side by side are not like with like: other tools, configurations, workloads."""
    warnings = []
    tools = list(dict.fromkeys(_value(measured_by(row)) for row in rows))
    if len(tools) > 1:
        warnings.append(
            f"measured by different tools ({_some(tools, most)}): each times requests its own way "
            "(when a clock starts, what counts as the first token)"
        )
    configuration = differences(rows, CONFIG_FIELDS)
    if configuration:
        warnings.append(f"of different configurations ({describe(configuration, most)})")
    workload = differences(rows, WORKLOAD_FIELDS)
    if workload:
        warnings.append(f"under different workloads ({describe(workload, most)})")
    return warnings


@dataclass(frozen=True)
class Mixed:
    """A group of a chart whose runs differ in configuration or workload."""

    group: str
    configuration: dict[str, list[str]]
    workload: dict[str, list[str]]

    def text(self) -> str:
        parts = []
        if self.configuration:
            parts.append("configurations (" + describe(self.configuration) + ")")
        if self.workload:
            parts.append("workloads (" + describe(self.workload) + ")")
        return f"{self.group} mixes " + " and ".join(parts)


def mixed_groups(rows: Iterable[Mapping[str, Any]], group_of: Callable[[Mapping[str, Any]], str]) -> list[Mixed]:
    """The groups whose runs are not all one configuration under one workload, in first-seen order."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(group_of(row), []).append(row)
    mixed = []
    for group, members in groups.items():
        configuration = differences(members, CONFIG_FIELDS)
        workload = differences(members, WORKLOAD_FIELDS)
        if configuration or workload:
            mixed.append(Mixed(group, configuration, workload))
    return mixed
