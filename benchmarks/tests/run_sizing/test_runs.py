"""A run read for the sizing (benchmarks.run_sizing.runs): which catalogue GPU a run's GPU is."""

from __future__ import annotations

import pytest

from benchmarks.run_sizing.runs import catalogue_gpu_for


@pytest.mark.parametrize(
    ("name", "vram_mib", "expected"),
    [
        ("RTX 5060 Ti 16GB", 16311, "rtx-5060-ti-16gb"),  # the investigation's lab script
        ("RTX 5060 Ti 16GB", None, "rtx-5060-ti-16gb"),
        ("NVIDIA GeForce RTX 5060 Ti", 16311, "rtx-5060-ti-16gb"),  # nvidia-smi's name, no memory in it
        ("NVIDIA GeForce RTX 4090", 24564, "rtx-4090"),
        ("nvidia geforce rtx 4090", None, "rtx-4090"),
        ("NVIDIA RTX A6000", 49140, "rtx-a6000"),
        ("NVIDIA H100 80GB HBM3", 81559, "h100-80gb-sxm"),
        ("NVIDIA H200", 143771, "h200"),
        # a name shared by two variants is the one whose memory the run measured, or none
        ("NVIDIA GeForce RTX 5060 Ti", 8151, ""),
        ("NVIDIA GeForce RTX 5060 Ti", None, ""),
        ("NVIDIA GeForce RTX 4070 Ti", 12282, ""),  # not the 4070 Ti SUPER's 16 GiB
        ("NVIDIA H100", 81559, "h100-80gb-sxm"),
        ("NVIDIA H100", 81920, "h100-80gb-pcie"),
        ("", 16311, ""),
        ("NVIDIA", 16311, ""),
        ("Tesla T4", 15360, "t4"),  # "Tesla" aside, the catalogue's T4
        ("NVIDIA GeForce RTX 5060", 8151, "rtx-5060"),  # the 5060 itself, not its Ti
    ],
)
def test_a_runs_gpu_is_the_catalogue_entry_of_its_name_and_memory(name, vram_mib, expected):
    assert catalogue_gpu_for(name, vram_mib) == expected
