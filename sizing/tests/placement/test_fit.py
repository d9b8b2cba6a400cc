"""The `--fit` replica (sizing/placement/fit.py) branch by branch, on synthetic measurements.

Each test names the lines of llama.cpp b11434's common/fit.cpp (or arg.cpp, server.cpp,
llama-context.cpp) it checks. The measure below is linear: weights per tensor, KV per token and
layer, a fixed compute buffer per device, placed the way src/llama-model.cpp:1558-1616 places
layers (the first layers on the CPU, the rest split by -ts or free memory) and tensor overrides
(the first regex that re.search-es a tensor name wins, llama-model-loader.cpp:1235-1259).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

import pytest

from sizing.placement import fit
from sizing.placement.fit import (
    MeasureError,
    breakdown_table,
    cli_args,
    context_after_fit,
    expand_fit_target,
    fit_ctx_min,
    fit_params,
    server_pre_fit,
)
from sizing.placement.types import UINT32_MAX, Device, FitResult, Host, MiB, Params, Usage

GiB = 1024 * MiB
HOST = Host(total=64 * GiB, free=64 * GiB)


@dataclass
class Synth:
    """A model with linear memory costs; calling it measures one configuration on `devices`."""

    devices: list[Device]
    n_layer: int = 40
    attn: int = 40 * MiB
    ffn: tuple[int, int, int] = (60 * MiB, 60 * MiB, 60 * MiB)  # gate, up, down
    experts: tuple[int, int, int] = (0, 0, 0)  # gate_exps, up_exps, down_exps
    output: int = 300 * MiB
    kv_per_token: int = 2 * 1024  # per layer
    compute: int = 400 * MiB  # per device
    n_ctx_train: int = 32768
    calls: list[Params] = field(default_factory=list)
    fail_at: int | None = None  # raise MeasureError on this call

    @property
    def n_expert(self) -> int:
        return 8 if any(self.experts) else 0

    def tensors(self, il: int) -> list[tuple[str, int]]:
        if il == self.n_layer:
            return [("output.weight", self.output)]
        out = [(f"blk.{il}.attn_q.weight", self.attn)]
        if self.n_expert:
            out.append((f"blk.{il}.ffn_gate_inp.weight", MiB))
            names = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")
            out += [(f"blk.{il}.{n}.weight", b) for n, b in zip(names, self.experts, strict=True)]
        names = ("ffn_gate", "ffn_up", "ffn_down")
        if self.n_expert:
            names = ("ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp")
        return out + [(f"blk.{il}.{n}.weight", b) for n, b in zip(names, self.ffn, strict=True)]

    def device_of_layer(self, params: Params) -> dict[int, int]:
        nd = len(self.devices)
        if nd == 0:
            return {}
        ngl = params.n_gpu_layers if params.n_gpu_layers >= 0 else self.n_layer + 1
        start = max(self.n_layer + 1 - ngl, 0)
        act = min(ngl, self.n_layer + 1)
        split = list(params.tensor_split[:nd]) + [0.0] * (nd - len(params.tensor_split[:nd]))
        if not any(split):
            split = [float(d.free) for d in self.devices]
        if not any(split):  # no device reported memory: llama.cpp would divide 0 by 0
            split = [1.0] + [0.0] * (nd - 1)
        cum = [sum(split[: i + 1]) / sum(split) for i in range(nd)]
        return {il: min(bisect.bisect_right(cum, (il - start) / act), nd - 1) for il in range(start, self.n_layer + 1)}

    def __call__(self, params: Params) -> list[Usage]:
        self.calls.append(params)
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise MeasureError("failed to load model")
        nd = len(self.devices)
        model, context, compute = [0] * (nd + 1), [0] * (nd + 1), [self.compute] * nd + [100 * MiB]
        names = {d.name: i for i, d in enumerate(self.devices)}
        placed = self.device_of_layer(params)
        n_ctx = params.n_ctx or self.n_ctx_train
        for il in range(self.n_layer + 1):
            home = placed.get(il, nd)
            for name, size in self.tensors(il):
                where = home
                if home < nd:
                    buft = next((b for pat, b in params.overrides if re.search(pat, name)), None)
                    if buft is not None:
                        where = nd if buft == "CPU" else names[buft]
                model[where] += size
            if il < self.n_layer:
                context[home if params.kv_offload else nd] += self.kv_per_token * n_ctx
        return [Usage(m, c, k) for m, c, k in zip(model, context, compute, strict=True)]

    def fit(self, params: Params | None = None, **kwargs: object) -> FitResult:
        return fit_params(
            self,
            self.devices,
            HOST,
            params or Params(),
            n_layer=self.n_layer,
            n_ctx_train=self.n_ctx_train,
            n_expert=self.n_expert,
            **kwargs,  # type: ignore[arg-type]
        )


def gpu(i: int, free_mib: int, total_mib: int = 24576) -> Device:
    return Device(f"CUDA{i}", "NVIDIA GeForce RTX 4090", total_mib * MiB, (total_mib - free_mib) * MiB)


def lines(result: FitResult, func: str = "common_params_fit_impl") -> list[str]:
    return [line.removeprefix(f"{func}: ") for level, line in result.log if line.startswith(f"{func}: ")]


# --- flags ---------------------------------------------------------------------------------------


def test_fit_target_broadcasts_one_value_and_sets_a_list_by_index() -> None:
    # arg.cpp:2898-2922: one value → all 16; a list sets its entries, the rest keep 1024 MiB; >= 16 → error
    assert expand_fit_target([512]) == (512 * MiB,) * 16
    assert expand_fit_target([512, 2048])[:3] == (512 * MiB, 2048 * MiB, 1024 * MiB)
    with pytest.raises(ValueError, match="got 16 input configs, but system only has 16 devices"):
        expand_fit_target([1] * 16)


def test_c_0_sets_the_minimum_context_to_uint32_max_unless_fitc_follows() -> None:
    # arg.cpp:1641-1651 (-c 0), 2923-2929 (-fitc), applied in command-line order
    assert fit_ctx_min(ctx_size_zero=True) == UINT32_MAX
    assert fit_ctx_min(ctx_size_zero=False) == 4096
    assert fit_ctx_min(ctx_size_zero=False, fit_ctx=8192) == 8192


# --- guards and the initial measurement ------------------------------------------------------------


def test_fit_off_changes_nothing() -> None:
    result = Synth([gpu(0, 1000)]).fit(fit=False)
    assert (result.status, result.params, result.log) == ("off", Params(), [])


def test_split_mode_tensor_aborts_before_measuring() -> None:
    # fit.cpp:183-185
    synth = Synth([gpu(0, 1000), gpu(1, 1000)])
    result = synth.fit(Params(split_mode="tensor"))
    assert result.status == "failure" and synth.calls == []
    assert result.message == "llama_params_fit is not implemented for SPLIT_MODE_TENSOR, abort"
    assert result.log[-1] == (
        "WRN",
        "common_fit_params: failed to fit params to free device memory: "
        "llama_params_fit is not implemented for SPLIT_MODE_TENSOR, abort",
    )
    assert result.params.n_ctx == 0
    assert "llama-server ignores the failed fit and loads with the parameters as they stand" in result.changes


def test_one_device_with_room_keeps_everything_but_sets_n_ctx_to_the_training_context() -> None:
    # fit.cpp:271-278 (n_ctx auto → n_ctx_max before anything), 344-349 (no changes needed)
    synth = Synth([gpu(0, 20000)])
    result = synth.fit()
    used = synth(Params(n_ctx=32768))[0].total
    assert lines(result) == [
        "getting device memory data for initial parameters:",
        f"projected to use {used // MiB} MiB of device memory vs. 20000 MiB of free device memory",
        f"will leave {(20000 * MiB - used) // MiB} >= 1024 MiB of free device memory, no changes needed",
    ]
    assert result.log[:2] == [
        ("TRC", "cmn  common_init_: fitting params to device memory ..."),
        (
            "TRC",
            "cmn  common_init_: (for bugs during this step try to reproduce them with -fit off, "
            "or provide --verbose logs if the bug only occurs with -fit on)",
        ),
    ]
    assert result.status == "success" and result.params == Params(n_ctx=32768)
    assert result.changes == ["`-c` unset → 32,768: the model's training context"]
    assert cli_args(result.params) == "-c 32768 -ngl -1"


def test_several_devices_print_the_projection_per_device() -> None:
    # fit.cpp:293-308 (names padded to the longest), 323-357
    devices = [gpu(0, 20000), Device("Vulkan1", "AMD Radeon RX 7900", 20000 * MiB)]
    result = Synth(devices).fit()
    out = lines(result)
    assert out[1] == "projected memory use with initial parameters [MiB]:"
    assert out[2].startswith("  - CUDA0 (NVIDIA GeForce RTX 4090): ")
    assert out[3].startswith("  - Vulkan1 (AMD Radeon RX 7900)   :  20000 total, ")
    assert out[-1] == "targets for free memory can be met on all devices, no changes needed"


def test_a_device_that_reports_no_memory_is_warned_about_at_every_measurement() -> None:
    # fit.cpp:118-129
    result = Synth([Device("CUDA0", "x", 0)]).fit()
    warns = [line for level, line in result.log if level == "WRN"]
    assert warns[0] == "common_get_device_memory_data_impl: device CUDA0 did not report memory; --fit will not use it"
    assert result.status == "success" and result.params.n_gpu_layers == 0


# --- step 2: the context ---------------------------------------------------------------------------


def expected_ctx(
    synth: Synth, target: int, n_min: int = 4096, n_max: int = 32768, align: int = 256, host: bool = False
) -> int:
    """fit.cpp:424-430 written out: int64 truncating interpolation, then aligned down."""
    part = slice(-1, None) if host else slice(None, -1)
    used_max = sum(u.total for u in synth(Params(n_ctx=n_max))[part])
    used_min = sum(u.total for u in synth(Params(n_ctx=n_min))[part])
    n = n_min + (n_max - n_min) * (target - used_min) // (used_max - used_min)
    return max(n - n % align, n_min)


def test_one_device_reduces_the_context_by_linear_interpolation() -> None:
    # fit.cpp:373-440: target = free - margin; one device returns right after the interpolation
    synth = Synth([gpu(0, 20000)], kv_per_token=16 * 1024)
    result = synth.fit()
    n_ctx = expected_ctx(Synth([gpu(0, 20000)], kv_per_token=16 * 1024), (20000 - 1024) * MiB)
    assert result.status == "success" and result.params.n_ctx == n_ctx and n_ctx % 256 == 0
    assert result.params.n_gpu_layers == -1  # the layers were never touched
    assert [p.n_ctx for p in synth.calls] == [0, 4096]
    out = lines(result)
    assert out[2].startswith("cannot meet free memory target of 1024 MiB, need to reduce device memory by ")
    assert out[3].startswith(f"context size reduced from 32768 to {n_ctx} -> need ")
    assert out[4] == "entire model can be fit by reducing context"
    assert result.changes == [
        f"`-c` unset → {n_ctx:,}: the largest context that leaves 1,024 MiB free on CUDA0",
    ]


def test_unified_streams_align_the_context_to_256_per_stream_and_measure_again() -> None:
    # fit.cpp:193-194 (n_streams), 271-278 (measured again at n_ctx_max), 428-429 (align 256 * n_streams)
    synth = Synth([gpu(0, 20000)], kv_per_token=8 * 1024)
    result = synth.fit(Params(n_seq_max=3))
    assert [p.n_ctx for p in synth.calls] == [0, 3 * 32768, 3 * 4096]
    assert lines(result)[1] == "context size unset and KV cache not unified -> using 98304 for 3 sequences:"
    n_ctx = expected_ctx(
        Synth([gpu(0, 20000)], kv_per_token=8 * 1024), 18976 * MiB, n_min=3 * 4096, n_max=3 * 32768, align=768
    )
    assert result.params.n_ctx == n_ctx and n_ctx % 768 == 0
    assert context_after_fit(result.params, n_ctx_train=32768).n_ctx_seq == n_ctx // 3


def test_context_and_stream_products_saturate_at_uint32_max() -> None:
    # fit.cpp:266-268: min(n_ctx_train * n_streams, UINT32_MAX); -c 0 makes the minimum UINT32_MAX too
    synth = Synth([gpu(0, 100)], n_ctx_train=2**31, kv_per_token=0)
    result = synth.fit(Params(n_seq_max=4), n_ctx_min=UINT32_MAX)
    assert result.params.n_ctx == UINT32_MAX
    assert "user has requested full context size of 4294967295 -> no change" in lines(result)


def test_a_short_training_context_is_not_reduced() -> None:
    # fit.cpp:449-451
    result = Synth([gpu(0, 2000)], n_ctx_train=2048).fit()
    assert "default model context size is 2048 which is <= the min. context size of 4096 -> no change" in lines(result)
    assert result.params.n_ctx == 2048 and result.status == "success"


def test_a_context_set_by_the_user_is_kept_and_the_layers_move() -> None:
    # fit.cpp:453-455
    result = Synth([gpu(0, 2000)]).fit(Params(n_ctx=8192))
    assert "context size set by user to 8192 -> no change" in lines(result)
    assert result.params.n_ctx == 8192 and 0 < result.params.n_gpu_layers < 41


def test_when_even_the_minimum_context_does_not_fit_it_stays_at_the_minimum() -> None:
    # fit.cpp:436-440: n_ctx stays n_ctx_min_total and the fit moves on to the layers
    synth = Synth([gpu(0, 2500)])
    result = synth.fit()
    used_max, used_min = synth(Params(n_ctx=32768))[0].total, synth(Params(n_ctx=4096))[0].total
    assert (
        f"context size reduced from 32768 to 4096 -> need {(used_max - used_min) // MiB} MiB less memory in total"
        in (lines(result))
    )
    assert result.params.n_ctx == 4096
    assert result.changes[0] == "`-c` unset → 4,096: the --fit-ctx minimum, and even that does not fit on CUDA0"


def test_several_devices_aim_lower_to_allow_for_whole_layers_and_go_on_to_place_them() -> None:
    # fit.cpp:403-411: target -= (nd + 1) * model_per_layer / 2 (dense); 432-434: continue to step 3
    devices = [gpu(0, 8000), gpu(1, 8000)]
    synth = Synth(devices, kv_per_token=8 * 1024)
    result = synth.fit()
    first = synth(Params(n_ctx=32768))
    per_layer = sum(u.model for u in first[:-1]) // 40
    n_ctx = expected_ctx(Synth(devices, kv_per_token=8 * 1024), (8000 - 1024) * 2 * MiB - 3 * per_layer // 2)
    assert result.params.n_ctx == n_ctx
    assert "entire model should be fit across devices by reducing context" in lines(result)
    assert result.params.n_gpu_layers != -1 and len(result.params.tensor_split) == 2


# --- may the fit place layers? ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (Params(n_gpu_layers=99), "n_gpu_layers already set by user to 99, abort"),
        (Params(n_gpu_layers=-2), "n_gpu_layers already set by user to -2, abort"),  # -ngl all
        (Params(tensor_split=(1.0, 3.0)), "model_params::tensor_split already set by user, abort"),
        (Params(split_mode="row"), "changing weight allocation for LLAMA_SPLIT_MODE_ROW not implemented, abort"),
        (Params(overrides=(("exps", "CPU"),)), "model_params::tensor_buft_overrides already set by user, abort"),
    ],
)
def test_placement_set_by_the_user_aborts_after_keeping_the_reduced_context(params: Params, message: str) -> None:
    # fit.cpp:463-486: a fit exception (FAILURE); the context step has already run and its n_ctx is kept
    result = Synth([gpu(0, 2200), gpu(1, 2200)]).fit(params)
    assert (result.status, result.message) == ("failure", message)
    assert result.params.n_ctx == 4096
    assert result.params.n_gpu_layers == params.n_gpu_layers and result.params.overrides == params.overrides
    assert result.changes[-1] == (
        "llama-server ignores the failed fit and loads with the parameters as they stand (keeping -c 4096 from the fit)"
    )


def test_one_device_does_not_check_tensor_split_or_row_mode() -> None:
    # fit.cpp:469-480 check -ts and ROW only when nd > 1
    result = Synth([gpu(0, 2200)]).fit(Params(tensor_split=(3.0,), split_mode="row"))
    assert result.status == "success" and result.params.tensor_split == (3.0,)


# --- step 3: dense layers back to front -------------------------------------------------------------


def largest_fit(synth: Synth, device: int, target: int, before: list[int]) -> int:
    """The most layers device `device` can hold under target, the later devices holding `before`."""
    nd = len(synth.devices)
    best = 0
    for k in range(synth.n_layer + 2 - sum(before)):
        counts = [0] * device + [k] + before
        split = tuple(float(c) for c in counts) if nd > 1 else ()
        if synth(Params(n_ctx=4096, n_gpu_layers=sum(counts), tensor_split=split))[device].total <= target:
            best = k
    return best


@pytest.mark.parametrize("free_mib", [1500, 2600, 3333, 4000])
def test_one_device_takes_the_most_layers_that_fit(free_mib: int) -> None:
    # fit.cpp:641-733: false position between 0 and all layers, the last one that fits
    synth = Synth([gpu(0, free_mib)])
    result = synth.fit()
    expected = largest_fit(Synth([gpu(0, free_mib)]), 0, (free_mib - 1024) * MiB, [])
    assert result.status == "success" and result.params.n_gpu_layers == expected
    assert result.params.tensor_split == () and result.params.overrides == ()
    out = lines(result)
    assert f"id=0, target={free_mib - 1024} MiB" in out
    assert f"-ngl` auto → {expected}: {41 - expected} of 41 layers in system RAM" in result.changes[-1]


@pytest.mark.parametrize("frees", [(2500, 4000), (6000, 2200), (3000, 3000, 3000), (1100, 2000, 2500)])
def test_several_devices_fill_from_the_last_one_and_split_by_layer_counts(frees: tuple[int, ...]) -> None:
    devices = [gpu(i, f) for i, f in enumerate(frees)]
    result = Synth(devices).fit()
    ref = Synth(devices)
    counts: list[int] = []
    for id_ in range(len(devices) - 1, -1, -1):
        counts.insert(0, largest_fit(ref, id_, (frees[id_] - 1024) * MiB, counts))
    assert result.params.tensor_split == tuple(float(c) for c in counts)
    assert result.params.n_gpu_layers == sum(counts)
    assert cli_args(result.params) == f"-c 4096 -ngl {sum(counts)} -ts {','.join(map(str, counts))}"
    names = " and ".join([", ".join(d.name for d in devices[:-1]), devices[-1].name])
    assert f"`-ts {','.join(map(str, counts))}`: layers split across {names}" in result.changes


def test_a_failed_measurement_mid_fill_leaves_the_last_trial_split_in_the_shared_buffer() -> None:
    # fit.cpp:548-586 writes tensor_split (aliased by the real params, common.cpp:1661) for each trial;
    # the runtime_error is an ERROR and n_gpu_layers stays -1
    synth = Synth([gpu(0, 3000), gpu(1, 3000)], fail_at=5)
    result = synth.fit()
    assert (result.status, result.message) == ("error", "failed to load model")
    assert result.log[-1] == (
        "ERR",
        "common_fit_params: encountered an error while trying to fit params to free device memory: "
        "failed to load model",
    )
    assert result.params.n_gpu_layers == -1
    assert result.params.tensor_split == synth.calls[-1].tensor_split != ()


def test_a_failed_first_measurement_is_an_error() -> None:
    result = Synth([gpu(0, 3000)], fail_at=1).fit()
    assert result.status == "error" and result.params == Params()


def test_zero_gpu_layers_with_several_devices_divides_by_zero() -> None:
    # fit.cpp:409: sum_projected_model / min(uint32(n_gpu_layers), hp_ngl) with -ngl 0 is a division by zero
    result = Synth([gpu(0, 500), gpu(1, 500)]).fit(Params(n_gpu_layers=0))
    assert result.status == "error" and "division by zero" in result.message
    assert result.changes[0].startswith("llama-server would crash during the fit")


# --- MoE ------------------------------------------------------------------------------------------


def moe(devices: list[Device], **kwargs: object) -> Synth:
    return Synth(devices, experts=(150 * MiB, 150 * MiB, 150 * MiB), ffn=(5 * MiB,) * 3, **kwargs)  # type: ignore[arg-type]


def test_moe_with_a_deficit_even_without_experts_keeps_dense_only_layers() -> None:
    # fit.cpp:614-650 (all experts to the CPU: a deficit), 641-733 (dense-only layers), 734-737 (stop)
    synth = moe([gpu(0, 2500)])
    result = synth.fit()
    out = lines(result)
    assert "getting device memory data with all MoE tensors moved to system memory:" in out
    assert any(
        line.startswith("with only dense weights in device memory there is still a total deficit of ") for line in out
    )
    assert "filling dense-only layers back-to-front:" in out
    assert [p.overrides for p in synth.calls].count(((fit.PATTERN_MOE_ALL, "CPU"),)) == 1
    ngl = result.params.n_gpu_layers
    assert 0 < ngl < 41
    # dense-only: every GPU layer but one keeps its experts on the CPU; the last device's partial
    # layers sit at the top of its slice, so the pattern of index 40 (the output) matches nothing and
    # the lowest GPU layer keeps its experts (fit.cpp:567-577)
    first = 41 - ngl
    expected = tuple((rf"blk\.{il}\.ffn_(up|down|gate_up|gate)_(ch|)exps", "CPU") for il in range(first + 1, 41))
    assert result.params.overrides == expected
    assert result.changes[-1] == f"experts of layers {first + 1}–39 in system RAM (-ot …_exps=CPU)"


def test_moe_with_a_dense_surplus_converts_layers_front_to_back() -> None:
    # fit.cpp:735-877 on one device: full layers first, then one extra partial layer (UP, then GATE)
    synth = moe([gpu(0, 9000)])
    result = synth.fit()
    out = lines(result)
    assert any(line.startswith("with only dense weights in device memory there is a total surplus of ") for line in out)
    assert (
        "converting dense-only layers to full layers and filling them front-to-back "
        "with overflow to next device/system memory:"
    ) in out
    assert "trying to fit one extra layer with overflow_type=LAYER_FRACTION_UP" in out
    assert result.status == "success" and result.params.n_gpu_layers == 41
    # re-measure the result: it meets the target
    final = synth(result.params)
    assert final[0].total <= (9000 - 1024) * MiB
    assert out[-1].startswith("  - CUDA0 (NVIDIA GeForce RTX 4090): 41 layers (")


@pytest.mark.parametrize(("up_below_target", "tried"), [(0, ["UP", "ATTN"]), (1, ["UP", "GATE"])])
def test_the_extra_layer_needs_strictly_less_than_the_target(up_below_target: int, tried: list[str]) -> None:
    # fit.cpp:827, 843, 857: mem < target (strict). The UP trial is made to cost exactly the target (or a
    # byte less): a tie is rejected and ATTN is tried instead; a byte less is accepted and GATE tried next.
    synth = moe([gpu(0, 9000)])
    target = (9000 - 1024) * MiB
    up = r"\.ffn_(gate|gate_up|down).*"

    def measure(params: Params) -> list[Usage]:
        usages = synth(params)
        if any(pattern.endswith(up) for pattern, _ in params.overrides):
            return [Usage(model=target - up_below_target), usages[1]]
        return usages

    result = fit_params(measure, synth.devices, HOST, Params(), n_layer=40, n_ctx_train=32768, n_expert=8)
    kinds = [line.rsplit("=LAYER_FRACTION_", 1)[1] for line in lines(result) if "trying to fit one extra" in line]
    assert kinds == tried
    up_accepted = [line for line in lines(result) if line.endswith(", UP), id_dense_start=0")]
    assert len(up_accepted) == up_below_target


def test_moe_on_two_devices_overflows_the_extra_layer_to_the_next_device() -> None:
    synth = moe([gpu(0, 4000), gpu(1, 9000)])
    result = synth.fit()
    assert result.status == "success"
    bufts = {b for _, b in result.params.overrides}
    assert bufts <= {"CPU", "CUDA1"}
    final = synth(result.params)
    assert final[0].total <= (4000 - 1024) * MiB and final[1].total <= (9000 - 1024) * MiB


def test_more_than_1000_layers_is_an_error() -> None:
    # fit.cpp:494-497: a runtime_error, so ERROR (not FAILURE)
    result = moe([gpu(0, 3000)], n_layer=1000).fit(Params(n_ctx=4096))
    assert (result.status, result.message) == ("error", "at most 1000 model layers are supported")


def test_too_many_overrides_is_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    # fit.cpp:564-571; with 4096 entries it cannot happen before the 1000-layer limit, so shrink the buffer
    monkeypatch.setattr(fit, "MAX_OVERRIDES", 4)
    result = moe([gpu(0, 3000)]).fit(Params(n_ctx=4096))
    assert (result.status, result.message) == (
        "failure",
        "llama_max_tensor_buft_overrides() == 4 is insufficient for model",
    )


# --- the extra (draft / MTP) model ----------------------------------------------------------------


def test_the_extra_model_is_added_to_every_measurement_and_measured_again_when_n_ctx_changes() -> None:
    # fit.cpp:200-259
    asked: list[int] = []

    def extra(n_ctx: int) -> list[Usage]:
        asked.append(n_ctx)
        return [Usage(model=500 * MiB, context=n_ctx * 64 * 1024), Usage()]

    with_extra = Synth([gpu(0, 20000)], kv_per_token=16 * 1024).fit(extra=extra)
    alone = Synth([gpu(0, 20000)], kv_per_token=16 * 1024).fit()
    assert asked == [32768, 4096]
    assert with_extra.params.n_ctx < alone.params.n_ctx
    assert "operator(): getting device memory data for the extra model at a context size of 32768:" in [
        line for _, line in with_extra.log
    ]
    shared = Synth([gpu(0, 20000)], kv_per_token=16 * 1024).fit(extra=extra, extra_shares_model=True)
    assert with_extra.params.n_ctx < shared.params.n_ctx < alone.params.n_ctx


def test_an_extra_model_that_cannot_be_measured_is_left_out() -> None:
    def extra(n_ctx: int) -> list[Usage]:
        raise MeasureError("failed to load model")

    result = Synth([gpu(0, 5000)]).fit(extra=extra)
    assert (
        "WRN",
        "operator(): failed to measure the memory of the extra model, fitting without it: failed to load model",
    ) in (result.log)
    assert result.params == Synth([gpu(0, 5000)]).fit().params


# --- CPU only ---------------------------------------------------------------------------------------


def test_without_devices_the_host_total_is_the_budget() -> None:
    # fit.cpp:313-322, 459-461
    synth = Synth([], kv_per_token=8 * 1024)
    host_total = HOST.total
    ok = synth.fit(margins=expand_fit_target([0]))
    assert ok.params.n_ctx == 32768 and "of total host memory" in lines(ok)[1]
    reduced = synth.fit(margins=expand_fit_target([64 * 1024 - 15 * 1024]))
    assert reduced.status == "success" and 4096 < reduced.params.n_ctx < 32768
    assert reduced.params.n_ctx == expected_ctx(Synth([], kv_per_token=8 * 1024), 15 * GiB, host=True)
    assert reduced.changes[0].endswith("the largest context that leaves 50,176 MiB of system memory free")
    failed = synth.fit(margins=expand_fit_target([host_total // MiB + 1]))
    assert (failed.status, failed.message) == (
        "failure",
        "was unable to fit model into system memory by reducing context, abort",
    )


# --- llama-server around the fit --------------------------------------------------------------------


def test_the_server_resolves_auto_parallelism_before_the_fit() -> None:
    # server.cpp:168-173
    pre = server_pre_fit(Params())
    assert (pre.params.n_seq_max, pre.params.kv_unified, pre.n_parallel) == (4, True, 4)
    assert pre.log == [
        ("TRC", "srv  llama_server: n_parallel is set to auto, using n_parallel = 4 and kv_unified = true")
    ]
    assert server_pre_fit(Params(), n_parallel=2).params.kv_unified is False


def test_kv_unified_per_slot_sizes_the_pool_and_so_counts_as_a_user_context() -> None:
    # server.cpp:176-186; then fit.cpp:453-455 ("context size set by user")
    pre = server_pre_fit(Params(), kv_unified_per_slot=8192)
    assert pre.params.n_ctx == 32768
    assert pre.log[-1] == (
        "INF",
        "srv  llama_server: --kv-unified-per-slot: sizing KV pool to "
        "n_parallel * kv_unified_per_slot = 4 * 8192 = 32768",
    )
    assert server_pre_fit(Params(), kv_unified_per_slot=8192, n_ctx_min=UINT32_MAX).params.n_ctx == 0  # -c 0
    assert server_pre_fit(Params(n_ctx=4096), kv_unified_per_slot=8192).params.n_ctx == 4096
    result = Synth([gpu(0, 2000)]).fit(pre.params)
    assert "context size set by user to 32768 -> no change" in lines(result)


def test_the_context_is_padded_and_split_per_stream_afterwards() -> None:
    # llama-context.cpp:135, 292-308; server-context.cpp:1344-1369
    assert context_after_fit(Params(n_ctx=45000), n_ctx_train=131072) == fit.ContextSize(45056, 45056, 45056)
    c = context_after_fit(Params(n_ctx=10000, n_seq_max=3), n_ctx_train=131072)
    assert (c.n_ctx, c.n_ctx_seq) == (10752, 3584)
    assert c.warnings == ("llama_context: n_ctx is not divisible by n_seq_max - rounding down to 10752",)
    unified = context_after_fit(
        Params(n_ctx=0, n_seq_max=4, kv_unified=True), n_ctx_train=32768, kv_unified_per_slot=8192
    )
    assert (unified.n_ctx, unified.n_ctx_seq, unified.n_ctx_slot) == (32768, 32768, 8192)


def test_the_breakdown_table_aligns_its_columns() -> None:
    # fit.cpp:1040-1060
    table = breakdown_table([gpu(0, 1000, 2000)], [Usage(10 * MiB, 20 * MiB, 30 * MiB), Usage(5 * MiB)])
    assert [line.removeprefix("common_memory_breakdown_print: ") for line in table] == [
        "| memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |",
        "|   - CUDA0 (RTX 4090)   |  2000 = 1000 + (  60 =    10 +      20 +      30) +         940 |",
        "|   - Host               |                    5 =     5 +       0 +       0                |",
    ]
