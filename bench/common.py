"""What the benchmark scripts share: Django set-up on a scratch database, and the
value pools their synthetic runs are drawn from."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup_django(var_dir: Path, allowed_hosts: str | None = None) -> None:
    """Point kvlab at a scratch SQLite database under var_dir, then start Django."""
    os.environ["KVLAB_VAR_DIR"] = str(var_dir)
    if allowed_hosts:
        os.environ["KVLAB_ALLOWED_HOSTS"] = allowed_hosts
    os.environ.pop("DATABASE_URL", None)  # the benchmarks measure the SQLite default
    os.environ.setdefault("KVLAB_LOG_LEVEL", "WARNING")
    os.environ["DJANGO_SETTINGS_MODULE"] = "kvlab.settings"
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


MODELS = [
    "Devstral-Small-2-24B-Q4_K_M.gguf",
    "Qwen3-30B-A3B-Instruct-2507-Q4_K_M.gguf",
    "Qwen3-Coder-30B-A3B-Instruct-Q5_K_M.gguf",
    "gemma-3-27b-it-Q4_K_M.gguf",
    "Llama-3.3-70B-Instruct-IQ3_XXS.gguf",
    "gpt-oss-20b-mxfp4.gguf",
    "Mistral-Small-3.2-24B-Instruct-Q6_K.gguf",
    "phi-4-Q8_0.gguf",
]
GPUS = {  # name -> total VRAM (MiB)
    "RTX 5060 Ti 16GB": 16311,
    "RTX 4090": 24564,
    "RTX 3090": 24576,
    "RTX 5090": 32607,
    "A100 80GB": 81920,
}
LABELS = ["original", "unified-kv", "q8-cache", "q4-cache", "no-offload", "fa-on", "big-ctx", "np8", "baseline"]
CTX_SIZES = [4096, 8192, 16384, 32768, 65536, 131072]
