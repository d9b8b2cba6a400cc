"""The shapes of the models in the public llama-bench rows, from each model's config.json (its card's URL beside
it): what the estimate needs that llama-bench's table does not print. Keyed by the model column without its
quantization and the params column rounded to one decimal (llama-bench prints Mistral 7B as "llama 7B" too).

Each entry: layers, n_embd, query heads, KV heads, head size, vocabulary, whether the output shares the
embedding (tied), experts and experts used (0, 0 for a dense model), the active parameters in billions
(a MoE's card; a dense model's own count), layers with a KV cache (a hybrid model's attention layers), and
the source.
"""

from __future__ import annotations

from typing import NamedTuple


class Shape(NamedTuple):
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head: int
    n_vocab: int
    tied: bool
    n_expert: int
    n_expert_used: int
    active_b: float | None  # a MoE's active parameters (its card); None: dense
    kv_layers: int
    source: str
    total_b: float = 0.0  # the params column llama-bench prints (set from the key), for rows without it


def _dense(layers: int, embd: int, heads: int, kv: int, head: int, vocab: int, tied: bool, url: str) -> Shape:
    return Shape(layers, embd, heads, kv, head, vocab, tied, 0, 0, None, layers, url)


SHAPES: dict[tuple[str, float], Shape] = {
    ("llama 7B", 6.7): _dense(32, 4096, 32, 32, 128, 32000, False, "https://huggingface.co/meta-llama/Llama-2-7b-hf"),
    ("llama 7B", 7.2): _dense(32, 4096, 32, 8, 128, 32000, False, "https://huggingface.co/mistralai/Mistral-7B-v0.1"),
    ("llama 13B", 13.0): _dense(
        40, 5120, 40, 40, 128, 32000, False, "https://huggingface.co/meta-llama/Llama-2-13b-hf"
    ),
    ("llama 1B", 1.1): _dense(
        22, 2048, 32, 4, 64, 32000, False, "https://huggingface.co/TinyLlama/TinyLlama-1.1B-Chat-v1.0"
    ),
    ("llama 1B", 1.2): _dense(16, 2048, 32, 8, 64, 128256, True, "https://huggingface.co/meta-llama/Llama-3.2-1B"),
    ("llama 3B", 3.2): _dense(28, 3072, 24, 8, 128, 128256, True, "https://huggingface.co/meta-llama/Llama-3.2-3B"),
    ("llama 8B", 8.0): _dense(32, 4096, 32, 8, 128, 128256, False, "https://huggingface.co/meta-llama/Llama-3.1-8B"),
    ("llama 70B", 70.6): _dense(80, 8192, 64, 8, 128, 128256, False, "https://huggingface.co/meta-llama/Llama-3.1-70B"),
    ("qwen2 7B", 7.6): _dense(28, 3584, 28, 4, 128, 152064, False, "https://huggingface.co/Qwen/Qwen2.5-7B"),
    ("qwen2 14B", 14.8): _dense(48, 5120, 40, 8, 128, 152064, False, "https://huggingface.co/Qwen/Qwen2.5-14B"),
    ("qwen2 32B", 32.8): _dense(64, 5120, 40, 8, 128, 152064, False, "https://huggingface.co/Qwen/Qwen2.5-32B"),
    ("qwen3 4B", 4.0): _dense(36, 2560, 32, 8, 128, 151936, True, "https://huggingface.co/Qwen/Qwen3-4B"),
    ("qwen3 8B", 8.2): _dense(36, 4096, 32, 8, 128, 151936, False, "https://huggingface.co/Qwen/Qwen3-8B"),
    ("qwen3 14B", 14.8): _dense(40, 5120, 40, 8, 128, 151936, False, "https://huggingface.co/Qwen/Qwen3-14B"),
    ("qwen3 32B", 32.8): _dense(64, 5120, 64, 8, 128, 151936, False, "https://huggingface.co/Qwen/Qwen3-32B"),
    ("gemma3 12B", 11.8): _dense(48, 3840, 16, 8, 256, 262208, True, "https://huggingface.co/google/gemma-3-12b-it"),
    ("gemma3 27B", 27.0): _dense(62, 5376, 32, 16, 128, 262208, True, "https://huggingface.co/google/gemma-3-27b-it"),
    ("gemma2 27B", 28.4): _dense(46, 4608, 32, 16, 128, 256000, True, "https://huggingface.co/google/gemma-2-27b"),
    ("gpt-oss 20B", 20.9): Shape(
        24, 2880, 64, 8, 64, 201088, False, 32, 4, 3.6, 24, "https://huggingface.co/openai/gpt-oss-20b"
    ),
    ("gpt-oss 120B", 116.8): Shape(
        36, 2880, 64, 8, 64, 201088, False, 128, 4, 5.1, 36, "https://huggingface.co/openai/gpt-oss-120b"
    ),
    ("qwen3moe 30B.A3B", 30.5): Shape(
        48, 2048, 32, 4, 128, 151936, False, 128, 8, 3.3, 48, "https://huggingface.co/Qwen/Qwen3-30B-A3B"
    ),
    ("qwen3next 80B.A3B", 79.7): Shape(
        48,
        2048,
        16,
        2,
        256,
        151936,
        False,
        512,
        10,
        3.0,
        12,
        "https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct (full attention every 4th layer)",
    ),  # fmt: skip
    ("gemma3 4B", 3.9): _dense(34, 2560, 8, 4, 256, 262208, True, "https://huggingface.co/google/gemma-3-4b-it"),
    ("gemma3 1B", 1.0): _dense(26, 1152, 4, 1, 256, 262144, True, "https://huggingface.co/google/gemma-3-1b-it"),
    ("gemma2 2B", 2.6): _dense(26, 2304, 8, 4, 256, 256000, True, "https://huggingface.co/google/gemma-2-2b"),
    ("qwen3 0.6B", 0.6): _dense(28, 1024, 16, 8, 128, 151936, True, "https://huggingface.co/Qwen/Qwen3-0.6B"),
    ("deepseek2 16B", 15.7): Shape(
        27,
        2048,
        16,
        1,
        288,
        102400,
        False,
        64,
        6,
        2.4,
        27,
        "https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite (MLA: 512 + 64 cached per layer)",
    ),  # fmt: skip
    ("llama4 17Bx16E (Scout)", 107.8): Shape(
        48,
        5120,
        40,
        8,
        128,
        202048,
        False,
        16,
        1,
        17.0,
        48,
        "https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E-Instruct",
    ),  # fmt: skip
}


# The params llama-bench prints, to the tenth, where the key rounds them (rows of compare tables lack them).
PRINTED_PARAMS = {("llama 7B", 6.7): 6.74, ("llama 7B", 7.2): 7.24, ("llama 8B", 8.0): 8.03, ("qwen2 7B", 7.6): 7.62,
                  ("qwen3moe 30B.A3B", 30.5): 30.53, ("deepseek2 16B", 15.7): 15.71, ("gpt-oss 20B", 20.9): 20.91,
                  ("gpt-oss 120B", 116.8): 116.83, ("qwen3next 80B.A3B", 79.7): 79.67}  # fmt: skip
ALIASES = {"qwen3next ?B": "qwen3next 80B.A3B"}  # llama-bench builds that print "?B" for the size


def shape_of(model_column: str, params_b: float | None) -> Shape | None:
    """The shape of a llama-bench model column ("llama 7B Q4_0") with its params, or None if not known. Without
    params (a compare table), the shape of a name that only one entry has."""
    name = model_column.lower()
    for alias, real in ALIASES.items():
        if name.startswith(alias.lower() + " "):
            name = real.lower() + name[len(alias) :]
    found = [
        (key, shape) for key, shape in SHAPES.items()
        if name.startswith(key[0].lower() + " ") and (params_b is None or abs(key[1] - params_b) <= 0.06)
    ]  # fmt: skip
    if len(found) != 1:
        return None
    key, shape = found[0]
    return shape._replace(total_b=params_b or PRINTED_PARAMS.get(key, key[1]))
