"""A llama-server start-up log: not results, but the effective configuration of a run. Pure.

`import_bench --server-log PATH` attaches `parse_startup_log(text).to_dict()` to the runs it imports
(build, model, n_ctx, slots, unified KV, cache types, flash attention, every KV and buffer line). Given
as an import file, a log is recognised by `sniff` and refused by `convert` with a message that says how
to attach it instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from sizing.server_log import LogError, StartupLog, parse_startup_log

from . import Declared, FormatError, Sample, Source

NAME = "llama-server-log"
REFUSAL = "this is a llama-server log, not results: attach it with --server-log"

__all__ = ["NAME", "REFUSAL", "LogError", "StartupLog", "convert", "parse_startup_log", "sniff"]

# Lines only a llama.cpp start-up prints (b11434 and older names), anywhere in the sample's lines.
_MARKERS = re.compile(
    rb"(?m)(?:^|[\s\]|])(?:llama_context|llama_new_context_with_model|llama_kv_cache(?:_init|_unified)?|"
    rb"load_tensors|llm_load_tensors|llama_model_loader|sched_reserve|print_info|load_model|"
    rb"common_params_print_info|ggml_cuda_init): "
)


def sniff(sample: Sample) -> bool:
    """Two or more llama.cpp start-up lines in the first bytes (a JSON or CSV result file has none)."""
    if sample.is_dir or not sample.head:
        return False
    head = sample.head.lstrip()
    if head[:1] in (b"{", b"["):  # a JSON result may quote a log line; a log never starts so
        return False
    return len(_MARKERS.findall(sample.head)) >= 2


def convert(source: Source, declared: Declared) -> Iterator[dict[str, object]]:
    raise FormatError(REFUSAL, str(source.path))
    yield {}  # pragma: no cover  (a generator, as the Format protocol has it)
