"""The GPU catalogue's SM counts and compute capabilities: each figure cited, each plausible.

They feed what nvidia-smi shows beyond llama.cpp's own count (sizing.placement.overhead): the CUDA
context scales with the SMs, cuBLAS's workspace with the compute capability.
"""

import json

import pytest

from sizing import catalogue

# Compute capabilities of the GPUs NVIDIA lists at https://developer.nvidia.com/cuda-gpus (and its
# legacy page), Pascal (6.1) onwards: anything else in the catalogue is a typo.
KNOWN_CAPABILITIES = {6.1, 7.0, 7.2, 7.5, 8.0, 8.6, 8.7, 8.9, 9.0, 10.0, 10.3, 11.0, 12.0, 12.1}


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


BACKENDS = {"cuda", "rocm", "metal", "vulkan", "sycl"}


def test_the_catalogue_covers_the_gpus_llama_cpp_runs_on_each_figure_cited() -> None:
    gpus = catalogue.gpus()
    assert len(gpus) >= 60
    vendors = {g.vendor for g in gpus.values()}
    assert {"NVIDIA", "AMD", "Apple", "Intel"} <= vendors, vendors
    for gpu_id, raw in _raw().items():
        gpu = gpus[gpu_id]
        assert gpu.backend in BACKENDS, gpu_id
        assert raw["source"].startswith("http"), gpu_id  # its memory
        for figure, low, high in (("fp16_tflops", 1, 5000), ("fp32_tflops", 0.1, 200), ("bandwidth_gbps", 20, 20000)):
            source = raw.get(figure.replace("_tflops", "_source").replace("_gbps", "_source"), "")
            value = getattr(gpu, figure)
            if value is not None:
                assert source.startswith("http"), (gpu_id, figure)
                assert low <= value <= high, (gpu_id, figure, value)  # a unit slip (GB/s vs MB/s) fails here
            else:
                assert raw.get(figure) is None or not source, (gpu_id, figure)  # an uncited figure is not used


def test_a_gpu_with_matrix_units_is_faster_at_fp16_than_at_fp32() -> None:
    for gpu in catalogue.gpus().values():
        if gpu.fp16_tflops is not None and gpu.fp32_tflops is not None:
            assert gpu.fp16_tflops >= gpu.fp32_tflops, gpu.id  # a dense tensor figure, not a vector one
