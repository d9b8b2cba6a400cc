"""The models and flag sets the --fit oracle checks run (make test-gpu; scripts/gpu_record.py).

Real-size sparse GGUFs (sizing.sparse_gguf): a 24-layer llama-shaped dense model (f16 and q8_0,
so CUDA's row padding of quantized tensors is exercised: n_ff 11008 is not a multiple of 512)
and a 16-layer qwen3moe with 32 experts. Each fit case gives llama-fit-params a budget: the MiB
the fit may use, set as `-fitt = free - budget`, so the decisions do not depend on the card.
"""

from __future__ import annotations

DENSE = {
    "general.architecture": "llama",
    "llama.block_count": 24,
    "llama.embedding_length": 4096,
    "llama.feed_forward_length": 11008,
    "llama.attention.head_count": 32,
    "llama.attention.head_count_kv": 8,
    "llama.vocab_size": 32000,
    "llama.context_length": 131072,
    "llama.attention.layer_norm_rms_epsilon": 1e-5,
    "llama.rope.dimension_count": 128,
}
MOE = {
    "general.architecture": "qwen3moe",
    "qwen3moe.block_count": 16,
    "qwen3moe.embedding_length": 2048,
    "qwen3moe.feed_forward_length": 6144,
    "qwen3moe.attention.head_count": 16,
    "qwen3moe.attention.head_count_kv": 4,
    "qwen3moe.attention.key_length": 128,
    "qwen3moe.attention.value_length": 128,
    "qwen3moe.expert_count": 32,
    "qwen3moe.expert_used_count": 4,
    "qwen3moe.expert_feed_forward_length": 768,
    "qwen3moe.vocab_size": 32000,
    "qwen3moe.context_length": 131072,
    "qwen3moe.attention.layer_norm_rms_epsilon": 1e-6,
    "qwen3moe.rope.freq_base": 1e6,
}
MODELS = {"dense": (DENSE, "f16"), "dense-q8": (DENSE, "q8_0"), "moe": (MOE, "q8_0")}

# (name, model, flags, budget in MiB or None): the budget is what the fit may use of the GPU,
# set as -fitt = free - budget so the decisions do not depend on the card's size.
FIT_CASES = [
    ("dense-default", "dense", "-fa off", None),
    ("dense-ctx-reduce", "dense", "-fa off", 14000),
    ("dense-ctx-reduce-q8", "dense-q8", "-fa off", 9000),
    ("dense-ctx-min-then-layers", "dense", "-fa off", 7000),
    ("dense-c16k-layers-6g", "dense", "-fa off -c 16384", 6000),
    ("dense-c16k-layers-3g", "dense", "-fa off -c 16384", 3000),
    ("dense-c16k-layers-1g", "dense", "-fa off -c 16384", 1000),
    ("dense-c16k-q8-layers", "dense-q8", "-fa off -c 16384", 3500),
    ("dense-c0-full", "dense", "-fa off -c 0", 9000),
    ("dense-c0-fitc", "dense", "-fa off -c 0 -fitc 8192", 12000),
    ("dense-np4-streams", "dense", "-fa off -np 4", 12000),
    ("dense-ub1024", "dense", "-fa off -c 8192 -ub 1024", 4000),
    ("dense-nkvo", "dense", "-fa off -c 32768 -nkvo", 5000),
    ("dense-ngl-user", "dense", "-fa off -ngl 20", 3000),
    ("dense-ot-user", "dense", "-fa off -c 8192 -ot blk\\.0\\.ffn_up=CPU", 3000),
    ("dense-zero-budget", "dense", "-fa off -c 4096", 100),
    ("moe-default", "moe", "-fa off", None),
    ("moe-c8k-dense-surplus", "moe", "-fa off -c 8192", 2000),
    ("moe-c8k-tight", "moe", "-fa off -c 8192", 1200),
    ("moe-c8k-deficit", "moe", "-fa off -c 8192", 600),
    ("moe-ctx-reduce", "moe", "-fa off", 5000),
    ("moe-cpu-moe-user", "moe", "-fa off -c 8192 --cpu-moe", 1000),
    ("moe-n-cpu-moe-user", "moe", "-fa off -c 8192 --n-cpu-moe 4", 1000),
]

# (name, model, server flags): llama-server started for nvidia-smi's memory and the decode speed.
SERVER_CASES = [
    ("dense-full", "dense", "-fa off -c 16384 -np 1 -fit off -ngl 99"),
    ("dense-half", "dense", "-fa off -c 16384 -np 1 -fit off -ngl 13"),
    ("dense-nkvo", "dense", "-fa off -c 16384 -np 1 -fit off -ngl 99 -nkvo"),
    ("moe-full", "moe", "-fa off -c 16384 -np 1 -fit off -ngl 99"),
    ("moe-cpu-moe", "moe", "-fa off -c 16384 -np 1 -fit off -ngl 99 --cpu-moe"),
]
