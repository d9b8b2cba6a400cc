"""The GPU catalogue's SM counts and compute capabilities: each figure cited, each plausible.

They feed what nvidia-smi shows beyond llama.cpp's own count (sizing.placement.overhead): the CUDA
context scales with the SMs, cuBLAS's workspace with the compute capability.
"""

import json

import pytest

from sizing import catalogue

# Compute capabilities of the GPUs NVIDIA lists at https://developer.nvidia.com/cuda-gpus (and its
# legacy page), Volta onwards: anything else in the catalogue is a typo.
KNOWN_CAPABILITIES = {7.0, 7.2, 7.5, 8.0, 8.6, 8.7, 8.9, 9.0, 10.0, 10.3, 11.0, 12.0, 12.1}


def _raw() -> dict[str, dict]:
    data = json.loads((catalogue.HERE / "gpus.json").read_text())
    return {g["id"]: g for g in data["gpus"]}


@pytest.mark.parametrize("gpu_id", sorted(catalogue.gpus()))
def test_every_sm_count_and_capability_has_its_source_and_is_plausible(gpu_id: str) -> None:
    raw = _raw()[gpu_id]
    gpu = catalogue.gpus()[gpu_id]
    if raw.get("sm_count") is not None:
        assert raw["sm_source"].startswith("http"), f"{gpu_id}: an SM count without its source"
        assert isinstance(raw["sm_count"], int) and 1 <= raw["sm_count"] <= 300
    if raw.get("compute_capability") is not None:
        assert raw["cc_source"].startswith("http"), f"{gpu_id}: a compute capability without its source"
        assert raw["compute_capability"] in KNOWN_CAPABILITIES
    # The loaded entry carries exactly the cited figures.
    assert gpu.sm_count == raw.get("sm_count")
    assert gpu.compute_capability == raw.get("compute_capability")
    # Every entry says something about them: a figure, or why there is none.
    assert raw.get("sm_note"), f"{gpu_id}: no sm_note"


def test_only_nvidia_gpus_have_cuda_figures() -> None:
    for gpu in catalogue.gpus().values():
        if gpu.vendor != "NVIDIA":
            assert (gpu.sm_count, gpu.compute_capability) == (None, None), gpu.id
        else:
            assert gpu.compute_capability is not None, f"{gpu.id}: NVIDIA's table lists every catalogue GPU"


def test_known_figures() -> None:
    gpus = catalogue.gpus()
    assert (gpus["rtx-5060-ti-16gb"].sm_count, gpus["rtx-5060-ti-16gb"].compute_capability) == (36, 12.0)
    assert (gpus["rtx-4060-ti-16gb"].sm_count, gpus["rtx-4060-ti-16gb"].compute_capability) == (34, 8.9)
    assert (gpus["h100-80gb-sxm"].sm_count, gpus["h100-80gb-sxm"].compute_capability) == (132, 9.0)
    assert gpus["h100-80gb-pcie"].sm_count is None  # no citable figure: unknown, never guessed


def test_a_figure_without_its_source_is_not_used(monkeypatch, tmp_path) -> None:
    data = {
        "version": 1,
        "gpus": [
            {"id": "x", "name": "X", "memory_mib": 1024, "vendor": "NVIDIA", "sm_count": 40, "compute_capability": 8.6}
        ],
    }
    (tmp_path / "gpus.json").write_text(json.dumps(data))
    monkeypatch.setattr(catalogue, "HERE", tmp_path)
    catalogue.gpus.cache_clear()
    try:
        gpu = catalogue.gpus()["x"]
        assert (gpu.sm_count, gpu.compute_capability) == (None, None)
    finally:
        catalogue.gpus.cache_clear()
