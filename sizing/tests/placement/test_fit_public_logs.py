"""The fit replica (sizing/placement/fit.py) replaying public llama.cpp logs of `--fit` decisions.

Each case quotes the log lines it replays and names the build. The measure returns the figures
the log prints for each measurement the replica asks for, in order (sub-MiB bytes chosen so that
every printed MiB comes out as logged); where the public excerpt ends, the measure raises and
the replica stops, and its lines up to there must equal llama.cpp's.

Builds differ from b11434 in their function names: before the move to common/ (PR #16653 era,
b7003; the mtmd PR #21489) the lines are prefixed `llama_params_fit_impl:`; b9943 (ggml-org/llama.cpp#25487)
already prints `common_params_fit_impl:` like b11434. The decisions replayed here are unchanged
between those builds and b11434 (common/fit.cpp:313-357, 641-733 and the breakdown table).
"""

from __future__ import annotations

from collections.abc import Sequence

from sizing.placement.fit import MeasureError, breakdown_table, expand_fit_target, fit_params
from sizing.placement.types import Device, FitResult, Host, MiB, Params, Usage

HOST = Host(total=256 * 1024 * MiB, free=256 * 1024 * MiB)


def mib(whole: int, fraction: float = 0.0) -> int:
    return whole * MiB + int(fraction * MiB)


class Replay:
    """Returns the logged measurements one by one; past the end of the excerpt it raises."""

    def __init__(self, measurements: Sequence[Sequence[Usage]]) -> None:
        self.measurements = list(measurements)
        self.asked: list[Params] = []

    def __call__(self, params: Params) -> list[Usage]:
        self.asked.append(params)
        if len(self.asked) > len(self.measurements):
            raise MeasureError("the public log ends here")
        return list(self.measurements[len(self.asked) - 1])


def fit_lines(result: FitResult, rename: str = "common_params_fit_impl") -> list[str]:
    return [line.replace("common_params_fit_impl:", f"{rename}:", 1) for _, line in result.log]


def segment(lines: list[str], first: str, last: str) -> list[str]:
    i = lines.index(first)
    return lines[i : lines.index(last, i) + 1]


FIRST_21489 = "llama_params_fit_impl: projected to use 3287 MiB of device memory vs. 110100 MiB of free device memory"


def test_mtmd_pr_21489_no_change_with_the_mmproj_added_to_the_target() -> None:
    # https://github.com/ggml-org/llama.cpp/pull/21489 (llama-server -hf ggml-org/Qwen2.5-Omni-3B-GGUF, build of
    # 2026-04, before the rename to common_params_fit_impl):
    #   srv    load_model: [mtmd] estimated memory usage of mmproj is 2447.80 MiB
    #   llama_params_fit_impl: projected to use 3287 MiB of device memory vs. 110100 MiB of free device memory
    #   llama_params_fit_impl: will leave 106812 >= 3471 MiB of free device memory, no changes needed
    # The target is 1024 MiB + the mmproj's 2447.80 MiB (server-context.cpp:1173-1198); 110100 - 3287 prints as
    # 106812, so the free bytes' fraction is below the used bytes' fraction.
    device = Device("ROCm0", "AMD Radeon Graphics", mib(110100, 0.1))
    margins = (mib(1024) + int(2447.80 * MiB),) + expand_fit_target([1024])[1:]
    replay = Replay([[Usage(model=mib(3287, 0.5)), Usage()]])
    result = fit_params(replay, [device], HOST, Params(n_ctx=4096), n_layer=36, n_ctx_train=32768, margins=margins)
    lines = fit_lines(result, "llama_params_fit_impl")
    assert segment(lines, lines[lines.index(FIRST_21489)], lines[lines.index(FIRST_21489) + 1]) == [
        "llama_params_fit_impl: projected to use 3287 MiB of device memory vs. 110100 MiB of free device memory",
        "llama_params_fit_impl: will leave 106812 >= 3471 MiB of free device memory, no changes needed",
    ]
    assert result.status == "success" and result.params == Params(n_ctx=4096)


# https://github.com/ggml-org/llama.cpp/issues/25487, build 9943 (c15c5c77a), 2x MI50 32 GB, MiMo-V2.5 (MoE),
# llama-server ... --ctx-size 196608 --fit on --fit-target 4096 -lv 4:
ISSUE_25487 = """\
common_params_fit_impl: id=0, n_layer= 0, n_part= 0, overflow_type=4, mem=  3128 MiB
common_params_fit_impl: id=1, n_layer= 0, n_part= 0, overflow_type=4, mem=     0 MiB
common_params_fit_impl: filling dense-only layers back-to-front:
common_memory_breakdown_print: | memory breakdown [MiB]  | total    free      self    model   context   compute    unaccounted |
common_memory_breakdown_print: |   - ROCm0 (MI60 / MI50) | 32752 = 32570 + (  3872 =      0 +       0 +    3872) +       -3690 |
common_memory_breakdown_print: |   - ROCm1 (MI60 / MI50) | 32752 = 32570 + (  9925 =   5260 +    4140 +     525) +       -9743 |
common_memory_breakdown_print: |   - Host                |                  214936 = 213974 +     495 +     466                |
common_params_fit_impl: memory for test allocation by device:
common_params_fit_impl: id=0, n_layer= 0, n_part= 0, overflow_type=4, mem=  3872 MiB
common_params_fit_impl: id=1, n_layer=49, n_part=48, overflow_type=4, mem=  9925 MiB
common_params_fit_impl: set ngl_per_device[1].n_layer=49"""  # noqa: E501 (quoted verbatim)


def test_issue_25487_two_mi50s_take_every_dense_only_layer_on_the_last_device() -> None:
    # fit.cpp:641-733: the last device's high trial holds all 49 units (48 layers + output) with its experts in
    # system memory except the output's (n_part = n_layer - 1), measures 9925 MiB <= its target of 32570 - 4096,
    # and is taken whole; device 0 then has nothing left to fill.
    devices = [Device(f"ROCm{i}", "AMD Instinct MI60 / MI50", mib(32752), mib(32752) - mib(32570)) for i in (0, 1)]
    host = Usage(mib(213974, 0.6), mib(495, 0.6), mib(466))
    replay = Replay(
        [
            [Usage(model=mib(40000)), Usage(model=mib(40000)), host],  # initial: a deficit (not in the excerpt)
            [Usage(compute=mib(3872)), Usage(mib(5260), mib(4140), mib(525)), host],  # experts to CPU: a surplus
            [Usage(compute=mib(3128)), Usage(), host],  # no layers (the excerpt's first lines)
            [Usage(compute=mib(3872)), Usage(mib(5260), mib(4140), mib(525)), host],  # device 1 takes 49
        ]
    )
    result = fit_params(
        replay,
        devices,
        HOST,
        Params(n_ctx=196608),
        n_layer=48,
        n_ctx_train=262144,
        n_expert=256,
        margins=expand_fit_target([4096]),
    )
    lines = fit_lines(result)
    assert "common_params_fit_impl: context size set by user to 196608 -> no change" in lines
    first, last = ISSUE_25487.splitlines()[0], ISSUE_25487.splitlines()[-1]
    assert segment(lines, first, last) == ISSUE_25487.splitlines()
    assert replay.asked[3].n_gpu_layers == 49 and replay.asked[3].tensor_split == (0.0, 49.0)
    assert lines[lines.index(last) + 1] == (
        "common_params_fit_impl:   - ROCm1 (AMD Instinct MI60 / MI50): 49 layers,   9925 MiB used,  22645 MiB free"
    )
    # then step 4 measures a configuration the excerpt does not show, and the replay stops
    assert lines[lines.index(last) + 3].startswith("common_params_fit_impl: converting dense-only layers")


# https://github.com/ggml-org/llama.cpp/pull/22673 (MTP support; a tester's -lv 4 log, one RTX 2000 Ada laptop GPU):
PR_22673 = """\
common_memory_breakdown_print: | memory breakdown [MiB]                         | total   free     self   model   context   compute    unaccounted |
common_memory_breakdown_print: |   - CUDA0 (RTX 2000 Ada Generation Laptop GPU) |  7807 = 7627 + ( 5658 =  2542 +    2622 +     493) +       -5478 |
common_memory_breakdown_print: |   - Host                                       |                 19891 = 19627 +       0 +     264                |
common_params_fit_impl: memory for test allocation by device:
common_params_fit_impl: id=0, n_layer=42, n_part=41, overflow_type=4, mem=  5658 MiB
common_params_fit_impl: set ngl_per_device[0].n_layer=42
common_params_fit_impl:   - CUDA0 (NVIDIA RTX 2000 Ada Generation Laptop GPU): 42 layers,   5658 MiB used,   1968 MiB free
common_params_fit_impl: converting dense-only layers to full layers and filling them front-to-back with overflow to next device/system memory:
common_memory_breakdown_print: | memory breakdown [MiB]                         | total   free     self   model   context   compute    unaccounted |
common_memory_breakdown_print: |   - CUDA0 (RTX 2000 Ada Generation Laptop GPU) |  7807 = 7627 + (24770 = 21654 +    2622 +     493) +      -24590 |
common_memory_breakdown_print: |   - Host                                       |                   779 =   515 +       0 +     264                |"""  # noqa: E501


def test_pr_22673_one_laptop_gpu_keeps_all_dense_only_layers_then_tries_full_ones() -> None:
    # fit.cpp:641-733 then 735-760: on one device the dense-only trial (42 units, 41 with experts in RAM) fits
    # under 7627 - 1024 MiB, and step 4's first trial makes all 42 full (24770 MiB).
    device = Device("CUDA0", "NVIDIA RTX 2000 Ada Generation Laptop GPU", mib(7807), mib(7807) - mib(7627, 0.1))
    dense_only = [Usage(mib(2542, 0.5), mib(2622, 0.4), mib(493, 0.3)), Usage(mib(19627), 0, mib(264))]
    full = [Usage(mib(21654, 0.5), mib(2622, 0.4), mib(493, 0.3)), Usage(mib(515), 0, mib(264))]
    replay = Replay(
        [
            full,  # initial: all layers on the GPU (the same configuration as step 4's first trial)
            dense_only,  # experts to system memory: a surplus
            [Usage(compute=mib(493)), Usage(mib(22169))],  # no layers (not in the excerpt)
            dense_only,
            full,
        ]
    )
    result = fit_params(replay, [device], HOST, Params(n_ctx=8192), n_layer=41, n_ctx_train=262144, n_expert=256)
    lines = fit_lines(result)
    expected = PR_22673.splitlines()
    i = lines.index(expected[7])  # "converting dense-only layers ..."
    assert lines[i - 7 : i + 4] == expected
    assert replay.asked[4].n_gpu_layers == 42 and replay.asked[4].overrides == ()  # 42 full layers


def test_the_breakdown_table_of_issue_25487_strips_amd_and_instinct() -> None:
    # fit.cpp:928-936 strips "AMD " then "Instinct " from the description; the columns widen to 6 for 214936
    devices = [Device(f"ROCm{i}", "AMD Instinct MI60 / MI50", mib(32752), mib(32752) - mib(32570)) for i in (0, 1)]
    usages = [
        Usage(compute=mib(3872)),
        Usage(mib(5260), mib(4140), mib(525)),
        Usage(mib(213974, 0.6), mib(495, 0.6), mib(466)),
    ]
    assert breakdown_table(devices, usages) == ISSUE_25487.splitlines()[3:7]
