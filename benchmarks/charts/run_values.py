"""The run values the chart pages read: one row of values a run (never the model instance)."""

from __future__ import annotations

from django.db.models import Q

VALUE_FIELDS = (
    "pk",
    "key",
    "label",
    "model",
    "gpu",
    "started_at",
    "n_ok",
    "n_requests",
    "ctx_size",
    "parallel",
    "kv_unified",
    "cache_type_k",
    "cache_type_v",
    "kv_offload",
    "flash_attn",
    "concurrency",
    "prompt_tokens_max",
    "n_predict_max",
)
# Who measured a run and how it was served, read with VALUE_FIELDS for the charts' warnings and hovers
# (a tool's run beside kvlab's, a vLLM run beside llama.cpp's); the timeline's download keeps VALUE_FIELDS.
TOOL_FIELDS = ("tool", "source", "engine", "server_flags", "request_rate")
# Runs whose speed figures are a tool's own (or derived from them), not computed from stored requests.
TOOL_FIGURES = (
    Q(provenance__has_key="throughput_tok_s") | Q(provenance__has_key="tok_s_mean") | Q(provenance__has_key="ttft_p95")
)
