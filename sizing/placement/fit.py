"""`--fit`: llama.cpp b11434's `common_fit_params` (common/fit.cpp) step by step. Pure.

The fit rewrites the parameters the user left unset (`-c`, `-ngl`, `-ts`, tensor overrides) so
that every device keeps its `--fit-target` free. It is driven only by measurements: `measure`
stands for `common_get_device_memory_data_impl`, one no-alloc load per candidate. Everything
else is copied from the C++: its order, its uint32/int64 arithmetic (truncating division,
wrap-around, saturation), its strict and non-strict comparisons, its log lines (fit.cpp:179-904).

Two C++ details shape the code:
* `tensor_split` and `tensor_buft_overrides` are buffers the real params and every trial share
  (common.cpp:1661, arg.cpp:946-950; fit.cpp:548-586 writes them for each trial). A fit that stops
  half way leaves the last trial's split and overrides in them, with `-ngl` untouched; `_Buffers`
  keeps that state.
* A `common_params_fit_exception` is a FAILURE (WRN), any other `std::runtime_error` an ERROR
  (ERR); either way llama-server ignores the status and loads with the params as they stand
  (common.cpp:1260-1269).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from sizing.placement.types import (
    DEFAULT_FIT_CTX,
    DEFAULT_FIT_TARGET_MIB,
    MAX_DEVICES,
    MAX_OVERRIDES,
    UINT32_MAX,
    Device,
    FitResult,
    Host,
    Measure,
    MiB,
    Params,
    Usage,
)

TRC, WRN, ERR, INF = "TRC", "WRN", "ERR", "INF"
IMPL = "common_params_fit_impl"
WRAPPER = "common_fit_params"
MAX_LAYER_PATTERNS = 1000  # get_overflow_pattern's n_strings (fit.cpp:495)
PATTERN_MOE_ALL = r"blk\.\d+\.ffn_(up|down|gate_up|gate)_(ch|)exps"  # fit.cpp:617

# common_layer_fraction_t (fit.cpp:18-24): what of a partial layer leaves its device.
ATTN, UP, GATE, MOE = 1, 2, 3, 4
_FRACTION_NAME = {ATTN: "ATTN", UP: "UP", GATE: "GATE", MOE: "MOE"}
_FRACTION_PATTERN = {
    ATTN: r"blk\.{il}\.ffn_(gate|up|gate_up|down).*",
    UP: r"blk\.{il}\.ffn_(gate|gate_up|down).*",
    GATE: r"blk\.{il}\.ffn_down.*",
    MOE: r"blk\.{il}\.ffn_(up|down|gate_up|gate)_(ch|)exps",
}
_DESC_PREFIXES = ("NVIDIA ", "GeForce ", "Tesla ", "AMD ", "Radeon ", "Instinct ")  # fit.cpp:928

ExtraMeasure = Callable[[int], Sequence[Usage]]
"""The extra (draft or MTP) model's memory at a context size: one Usage per device of the main
model, then the host's (fit.cpp:200-259 lays it out so). Raise MeasureError where llama.cpp could
not measure it: the fit then goes on without it."""


class MeasureError(RuntimeError):
    """A measurement llama.cpp could not make: "failed to load model", "failed to create
    llama_context from model", "no CPU backend found" (fit.cpp:60-71, 103). An ERROR status."""


class _FitFailure(Exception):
    """common_params_fit_exception: the fit gave up (FAILURE, a WRN line)."""


class _FitError(Exception):
    """Any other std::runtime_error inside the fit (ERROR, an ERR line)."""


class _Crash(Exception):
    """Undefined behaviour in the C++ (an integer division by zero): llama-server dies."""


# ---------------------------------------------------------------------------------------------
# C integer semantics


def _u32(x: int) -> int:
    return x & 0xFFFFFFFF


def _i64(x: int) -> int:
    x &= 0xFFFFFFFFFFFFFFFF
    return x - (1 << 64) if x >= 1 << 63 else x


def _div(a: int, b: int) -> int:
    """C division: truncates toward zero; by zero is SIGFPE on x86."""
    if b == 0:
        raise _Crash("integer division by zero in common_params_fit_impl (llama-server crashes with SIGFPE)")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _mib(x: int) -> int:
    """`bytes/MiB` as the C++ logs it: truncated toward zero."""
    return _div(x, MiB)


# ---------------------------------------------------------------------------------------------
# Flags


def expand_fit_target(values_mib: Sequence[int]) -> tuple[int, ...]:
    """`-fitt MiB0,MiB1,...` as arg.cpp:2898-2922 stores it: 16 margins in bytes. One value is
    broadcast to every device; a list sets its entries and leaves the rest at 1,024 MiB."""
    if len(values_mib) >= MAX_DEVICES:
        raise ValueError(f"got {len(values_mib)} input configs, but system only has {MAX_DEVICES} devices")
    if len(values_mib) == 1:
        return (values_mib[0] * MiB,) * MAX_DEVICES
    margins = [DEFAULT_FIT_TARGET_MIB * MiB] * MAX_DEVICES
    for i, value in enumerate(values_mib):
        margins[i] = value * MiB
    return tuple(margins)


def fit_ctx_min(*, ctx_size_zero: bool, fit_ctx: int | None = None) -> int:
    """`fit_params_min_ctx` when the command line is applied in order and `-c 0` came last:
    `-c 0` sets it to UINT32_MAX (arg.cpp:1641-1651), `-fitc N` after it sets it back."""
    if ctx_size_zero:
        return UINT32_MAX
    return DEFAULT_FIT_CTX if fit_ctx is None else fit_ctx


# ---------------------------------------------------------------------------------------------
# The fit


@dataclass
class _Ngl:
    """ngl_t (fit.cpp:532-543): layers on one device, the top n_part of them partial."""

    n_layer: int = 0
    n_part: int = 0
    overflow_type: int = MOE

    def n_full(self) -> int:
        return _u32(self.n_layer - self.n_part)

    def copy(self) -> _Ngl:
        return _Ngl(self.n_layer, self.n_part, self.overflow_type)


def _copy(ngl: list[_Ngl]) -> list[_Ngl]:
    return [n.copy() for n in ngl]


@dataclass
class _Buffers:
    """params.tensor_split[128] and params.tensor_buft_overrides[4096], shared by the real params
    and every trial; the overrides are read up to the first empty entry."""

    tensor_split: list[float]
    overrides: list[tuple[str, str] | None]

    @classmethod
    def of(cls, params: Params) -> _Buffers:
        split = list(params.tensor_split)
        overrides: list[tuple[str, str] | None] = list(params.overrides)
        return cls(split, overrides + [None] * (MAX_OVERRIDES - len(overrides)))

    def set_override(self, i: int, entry: tuple[str, str] | None) -> None:
        self.overrides[i] = entry

    def read_overrides(self) -> tuple[tuple[str, str], ...]:
        out = []
        for entry in self.overrides:
            if entry is None:
                break
            out.append(entry)
        return tuple(out)

    def set_split(self, i: int, value: float) -> None:
        while len(self.tensor_split) <= i:
            self.tensor_split.append(0.0)
        self.tensor_split[i] = value


@dataclass
class _State:
    """What the C++ mutates in place: cparams->n_ctx, mparams->n_gpu_layers, the two buffers."""

    base: Params
    n_ctx: int
    n_gpu_layers: int
    buffers: _Buffers
    log: list[tuple[str, str]] = field(default_factory=list)

    def params(self, n_gpu_layers: int | None = None) -> Params:
        return replace(
            self.base,
            n_ctx=self.n_ctx,
            n_gpu_layers=self.n_gpu_layers if n_gpu_layers is None else n_gpu_layers,
            tensor_split=tuple(self.buffers.tensor_split),
            overrides=self.buffers.read_overrides(),
        )

    def trc(self, line: str, func: str = IMPL) -> None:
        self.log.append((TRC, f"{func}: {line}"))


class _Fit:
    """common_params_fit_impl (fit.cpp:179-877) over one State."""

    def __init__(
        self,
        measure: Measure,
        devices: Sequence[Device],
        host: Host,
        state: _State,
        *,
        n_layer: int,
        n_ctx_train: int,
        n_expert: int,
        margins: Sequence[int],
        n_ctx_min: int,
        extra: ExtraMeasure | None,
        extra_shares_model: bool,
    ) -> None:
        self.measure_fn = measure
        self.devices = list(devices)
        self.host = host
        self.s = state
        self.hp_ngl = n_layer
        self.hp_nct = n_ctx_train
        self.hp_nex = n_expert
        self.margins_s = margins
        self.n_ctx_min = n_ctx_min
        self.extra = extra
        self.extra_shares_model = extra_shares_model
        self.extra_mem: list[Usage] | None = None
        self.n_ctx_extra = 0
        self.nd = len(self.devices)
        names = [f"{d.name} ({d.description})" for d in self.devices]
        width = max((len(n) for n in names), default=0)
        self.dev_names = [n.ljust(width) for n in names]
        # what the user-facing summary needs to know
        self.ctx_outcome = ""  # "kept" | "full" | "reduced" | "minimum"

    # --- measuring ------------------------------------------------------------------------

    def measure(self, params: Params) -> list[Usage]:
        """common_get_device_memory_data_impl: its warning, the measurement, its breakdown table."""
        for d in self.devices:
            if d.total == 0 and d.free == 0:
                self.s.log.append(
                    (
                        WRN,
                        f"common_get_device_memory_data_impl: device {d.name} did not report memory; "
                        "--fit will not use it",
                    )
                )
        measured = self.measure_fn(params)
        usages = list(measured)
        if len(usages) != self.nd + 1:
            raise ValueError(f"measure returned {len(usages)} usages for {self.nd} devices and the host")
        extra = getattr(measured, "extra", None) or {}  # breakdown.Measurement: the CPU's extra buffer types
        self.s.log.extend((TRC, line) for line in breakdown_table(self.devices, usages, extra))
        return usages

    def add_extra_memory(self, usages: list[Usage]) -> list[Usage]:
        """add_extra_memory (fit.cpp:204-259): the extra model, measured again when n_ctx changed."""
        if self.extra is None:
            return usages
        if self.extra_mem is None or self.n_ctx_extra != self.s.n_ctx:
            self.s.trc(
                f"getting device memory data for the extra model at a context size of {self.s.n_ctx}:", "operator()"
            )
            try:
                measured = list(self.extra(self.s.n_ctx))
            except MeasureError as e:
                self.s.log.append(
                    (WRN, f"operator(): failed to measure the memory of the extra model, fitting without it: {e}")
                )
                self.extra_mem = [Usage()] * (self.nd + 1)
                self.n_ctx_extra = self.s.n_ctx
                return usages
            self.s.log.extend((TRC, line) for line in breakdown_table(self.devices, measured))
            if self.extra_shares_model:
                measured = [replace(u, model=0) for u in measured]
            self.extra_mem = measured
            self.n_ctx_extra = self.s.n_ctx
        return [
            Usage(u.model + e.model, u.context + e.context, u.compute + e.compute)
            for u, e in zip(usages, self.extra_mem, strict=True)
        ]

    # --- set_ngl_tensor_split_tbo and get_memory_for_layers (fit.cpp:548-614) ----------------

    def set_ngl_tensor_split_tbo(self, ngl: list[_Ngl], overflow_bufts: list[str]) -> int:
        """Writes the shared buffers; returns n_gpu_layers for the params it was called on."""
        n_gpu_layers = 0
        for id_ in range(self.nd):
            n_gpu_layers += ngl[id_].n_layer
            if self.nd > 1:
                self.s.buffers.set_split(id_, float(ngl[id_].n_layer))
        n_gpu_layers = _i32(n_gpu_layers)
        il0 = _u32(self.hp_ngl + 1 - n_gpu_layers)
        itbo = 0
        for id_ in range(self.nd):
            il0 = _u32(il0 + ngl[id_].n_full())
            il = il0
            while il < _u32(il0 + ngl[id_].n_part):
                if itbo + 1 >= MAX_OVERRIDES:
                    self.s.buffers.set_override(itbo, None)
                    raise _FitFailure(f"llama_max_tensor_buft_overrides() == {MAX_OVERRIDES} is insufficient for model")
                fraction = ngl[id_].overflow_type if il == il0 else MOE
                self.s.buffers.set_override(
                    itbo, (overflow_pattern(il, fraction), overflow_bufts[id_] if il == il0 else "CPU")
                )
                itbo += 1
                il += 1
            il0 = _u32(il0 + ngl[id_].n_part)
        self.s.buffers.set_override(itbo, None)
        return n_gpu_layers

    def memory_for_layers(self, ngl: list[_Ngl], overflow_bufts: list[str]) -> list[int]:
        n_gpu_layers = self.set_ngl_tensor_split_tbo(ngl, overflow_bufts)
        usages = self.add_extra_memory(self.measure(self.s.params(n_gpu_layers)))
        self.s.trc("memory for test allocation by device:")
        for id_ in range(self.nd):
            n = ngl[id_]
            self.s.trc(
                f"id={id_}, n_layer={n.n_layer:2d}, n_part={n.n_part:2d}, "
                f"overflow_type={n.overflow_type}, mem={_mib(usages[id_].total):6d} MiB"
            )
        return [usages[id_].total for id_ in range(self.nd)]

    # --- the steps --------------------------------------------------------------------------

    def run(self) -> None:
        s, nd = self.s, self.nd
        if s.base.split_mode == "tensor":
            raise _FitFailure("llama_params_fit is not implemented for SPLIT_MODE_TENSOR, abort")
        n_streams = 1 if s.base.kv_unified else max(1, _u32(s.base.n_seq_max))
        n_ctx_auto = s.n_ctx == 0

        # step 1: the initial parameters (fit.cpp:261-371)
        s.trc("getting device memory data for initial parameters:")
        dmds_full = self.measure(s.params())
        n_ctx_max = min(self.hp_nct * n_streams, UINT32_MAX)
        n_ctx_min_total = min(self.n_ctx_min * n_streams, UINT32_MAX)
        if n_ctx_auto:
            s.n_ctx = n_ctx_max
            if n_streams > 1:
                s.trc(f"context size unset and KV cache not unified -> using {n_ctx_max} for {n_streams} sequences:")
                dmds_full = self.measure(s.params())
        dmds_full = self.add_extra_memory(dmds_full)

        margins = [self.margins_s[0]] if nd == 0 else [self.margins_s[i] for i in range(nd)]
        free = [d.free for d in self.devices]
        sum_free = sum_projected_free = sum_projected_used = sum_projected_model = 0
        projected_free: list[int] = []
        if nd == 0:
            sum_projected_used = dmds_full[-1].total
            sum_free = self.host.total
            sum_projected_free = sum_free - sum_projected_used
            s.trc(
                f"projected to use {_mib(sum_projected_used)} MiB of host memory vs. "
                f"{_mib(sum_free)} MiB of total host memory"
            )
            if sum_projected_free >= margins[0]:
                s.trc(
                    f"will leave {_mib(sum_projected_free)} >= {_mib(margins[0])} MiB of system memory, "
                    "no changes needed"
                )
                self.ctx_outcome = "full"
                return
        else:
            if nd > 1:
                s.trc("projected memory use with initial parameters [MiB]:")
            for id_ in range(nd):
                used = dmds_full[id_].total
                pf = free[id_] - used
                projected_free.append(pf)
                sum_free += free[id_]
                sum_projected_used += used
                sum_projected_free += pf
                sum_projected_model += dmds_full[id_].model
                if nd > 1:
                    s.trc(
                        f"  - {self.dev_names[id_]}: {_mib(self.devices[id_].total):6d} total, {_mib(used):6d} used, "
                        f"{_mib(pf):6d} free vs. target of {_mib(margins[id_]):6d}"
                    )
            s.trc(
                f"projected to use {_mib(sum_projected_used)} MiB of device memory vs. "
                f"{_mib(sum_free)} MiB of free device memory"
            )
            if nd == 1:
                if projected_free[0] >= margins[0]:
                    s.trc(
                        f"will leave {_mib(projected_free[0])} >= {_mib(margins[0])} MiB of free device memory, "
                        "no changes needed"
                    )
                    self.ctx_outcome = "full"
                    return
            elif all(projected_free[i] >= margins[i] for i in range(nd)):
                s.trc("targets for free memory can be met on all devices, no changes needed")
                self.ctx_outcome = "full"
                return

        # step 2: reduce the context (fit.cpp:373-461)
        self.ctx_outcome = "full"
        global_surplus = sum_projected_free - sum(margins)
        if global_surplus < 0:
            if nd <= 1:
                s.trc(
                    f"cannot meet free memory target of {_mib(margins[0])} MiB, "
                    f"need to reduce device memory by {_mib(-global_surplus)} MiB"
                )
            else:
                s.trc(
                    "cannot meet free memory targets on all devices, "
                    f"need to use {_mib(-global_surplus)} MiB less in total"
                )
            if not n_ctx_auto:
                s.trc(f"context size set by user to {s.n_ctx} -> no change")
                self.ctx_outcome = "kept"
            elif n_ctx_max > n_ctx_min_total:
                self.reduce_context(
                    sum_free, margins, sum_projected_model, sum_projected_used, n_ctx_max, n_ctx_min_total, n_streams
                )
                if self.ctx_outcome == "reduced" and nd <= 1:
                    return
            elif self.n_ctx_min == UINT32_MAX:
                s.trc(f"user has requested full context size of {n_ctx_max} -> no change")
            else:
                s.trc(
                    f"default model context size is {n_ctx_max} which is <= the min. context size of "
                    f"{n_ctx_min_total} -> no change"
                )
        if nd == 0:
            raise _FitFailure("was unable to fit model into system memory by reducing context, abort")

        # may the fit touch the placement? (fit.cpp:463-486)
        if s.n_gpu_layers != -1:
            raise _FitFailure(f"n_gpu_layers already set by user to {s.n_gpu_layers}, abort")
        if nd > 1:
            if any(v != 0.0 for v in s.base.tensor_split[:nd]):
                raise _FitFailure("model_params::tensor_split already set by user, abort")
            if s.base.split_mode == "row":
                raise _FitFailure("changing weight allocation for LLAMA_SPLIT_MODE_ROW not implemented, abort")
        if s.buffers.overrides[0] is not None:
            raise _FitFailure("model_params::tensor_buft_overrides already set by user, abort")

        self.place_layers(dmds_full, margins)

    def reduce_context(
        self,
        sum_free: int,
        margins: list[int],
        sum_projected_model: int,
        sum_projected_used: int,
        n_ctx_max: int,
        n_ctx_min_total: int,
        n_streams: int,
    ) -> None:
        """The linear interpolation between the minimum and the maximum context (fit.cpp:394-440)."""
        s, nd = self.s, self.nd
        sum_used_target = (self.host.total if nd == 0 else sum_free) - sum(margins)
        if nd > 1:
            # whole layers (dense) or whole tensors (MoE, ~1/3 layer) per device: expect some waste
            model_per_layer = _div(sum_projected_model, min(_u32(s.n_gpu_layers), self.hp_ngl))
            waste = _div((nd + 1) * model_per_layer, 2 if self.hp_nex == 0 else 6)
            sum_used_target = _i64(sum_used_target - waste)
        s.n_ctx = n_ctx_min_total
        dmds_min_ctx = self.add_extra_memory(self.measure(s.params()))
        used_min = dmds_min_ctx[-1].total if nd == 0 else sum(dmds_min_ctx[i].total for i in range(nd))
        if sum_used_target > used_min:
            step = _i64((n_ctx_max - n_ctx_min_total) * (sum_used_target - used_min))
            s.n_ctx = _u32(s.n_ctx + _div(step, sum_projected_used - used_min))
            align = _u32(256 * n_streams)
            s.n_ctx = max(_u32(s.n_ctx - s.n_ctx % align), n_ctx_min_total)
            bytes_per_ctx = _div(sum_projected_used - used_min, n_ctx_max - n_ctx_min_total)
            reduction = _i64((n_ctx_max - s.n_ctx) * bytes_per_ctx)
            s.trc(
                f"context size reduced from {n_ctx_max} to {s.n_ctx} -> need {_mib(reduction)} MiB less memory in total"
            )
            self.ctx_outcome = "reduced"
            if nd <= 1:
                s.trc("entire model can be fit by reducing context")
                return
            s.trc("entire model should be fit across devices by reducing context")
        else:
            reduction = sum_projected_used - used_min
            s.trc(
                f"context size reduced from {n_ctx_max} to {s.n_ctx} -> need {_mib(reduction)} MiB less memory in total"
            )
            self.ctx_outcome = "minimum"

    def place_layers(self, dmds_full: list[Usage], margins: list[int]) -> None:
        """Steps 3 and 4 (fit.cpp:488-877)."""
        s, nd, hp_ngl = self.s, self.nd, self.hp_ngl
        global_surplus_cpu_moe = 0
        if self.hp_nex > 0:
            s.buffers.set_override(0, (PATTERN_MOE_ALL, "CPU"))
            s.buffers.set_override(1, None)
            s.trc("getting device memory data with all MoE tensors moved to system memory:")
            dmds_cpu_moe = self.add_extra_memory(self.measure(s.params()))
            for id_ in range(nd):
                global_surplus_cpu_moe += self.devices[id_].free - (dmds_cpu_moe[id_].total + margins[id_])
            if global_surplus_cpu_moe > 0:
                s.trc(
                    "with only dense weights in device memory there is a total surplus of "
                    f"{_mib(global_surplus_cpu_moe)} MiB"
                )
            else:
                s.trc(
                    "with only dense weights in device memory there is still a total deficit of "
                    f"{_mib(-global_surplus_cpu_moe)} MiB"
                )
            s.buffers.set_override(0, None)

        targets = []
        for id_ in range(nd):
            targets.append(self.devices[id_].free - margins[id_])
            s.trc(f"id={id_}, target={_mib(targets[id_])} MiB")
        overflow_bufts = ["CPU"] * nd
        ngl = [_Ngl() for _ in range(nd)]
        mem = self.memory_for_layers(ngl, overflow_bufts)

        # step 3: fill back to front by false position
        s.trc("filling dense layers back-to-front:" if self.hp_nex == 0 else "filling dense-only layers back-to-front:")
        for id_ in range(nd - 1, -1, -1):
            n_unassigned = hp_ngl + 1 - sum(ngl[jd].n_layer for jd in range(id_ + 1, nd))
            high = _copy(ngl)
            high[id_].n_layer = n_unassigned
            if self.hp_nex > 0:
                high[id_].n_part = high[id_].n_layer if id_ < nd - 1 else _u32(high[id_].n_layer - 1)
            if high[id_].n_layer > 0:
                mem_high = self.memory_for_layers(high, overflow_bufts)
                if mem_high[id_] > targets[id_]:
                    delta = high[id_].n_layer - ngl[id_].n_layer
                    s.trc(f"start filling device {id_}, delta={delta}")
                    while delta > 1:
                        step = _u32(_div(_i64(delta * (targets[id_] - mem[id_])), mem_high[id_] - mem[id_]))
                        step = min(max(step, 1), delta - 1)
                        test = _copy(ngl)
                        test[id_].n_layer += step
                        if self.hp_nex:
                            last_and_empty = id_ == nd - 1 and test[id_].n_part == 0
                            test[id_].n_part += step - 1 if last_and_empty else step
                        mem_test = self.memory_for_layers(test, overflow_bufts)
                        if mem_test[id_] <= targets[id_]:
                            ngl, mem = test, mem_test
                            s.trc(f"set ngl_per_device[{id_}].n_layer={ngl[id_].n_layer}")
                        else:
                            high, mem_high = test, mem_test
                            s.trc(f"set ngl_per_device_high[{id_}].n_layer={high[id_].n_layer}")
                        delta = high[id_].n_layer - ngl[id_].n_layer
                else:
                    ngl, mem = high, mem_high
                    s.trc(f"set ngl_per_device[{id_}].n_layer={ngl[id_].n_layer}")
            margin = self.devices[id_].free - mem[id_]
            s.trc(
                f"  - {self.dev_names[id_]}: {ngl[id_].n_layer:2d} layers, {_mib(mem[id_]):6d} MiB used, "
                f"{_mib(margin):6d} MiB free"
            )
        if self.hp_nex == 0 or global_surplus_cpu_moe <= 0:
            s.n_gpu_layers = self.set_ngl_tensor_split_tbo(ngl, overflow_bufts)
            self.ngl, self.overflow_bufts = ngl, overflow_bufts
            return

        # step 4: MoE with room to spare: dense-only layers become full layers, front to back
        id_dense_start = nd
        for id_ in range(nd - 1, -1, -1):
            if ngl[id_].n_layer > 0:
                id_dense_start = id_
                continue
            break
        s.trc(
            "converting dense-only layers to full layers and filling them front-to-back "
            "with overflow to next device/system memory:"
        )
        id_ = 0
        while id_ <= id_dense_start and id_dense_start < nd:
            high = _copy(ngl)
            for jd in range(id_dense_start, nd):
                n_layer_move = high[jd].n_layer if jd < nd - 1 else _u32(high[jd].n_layer - 1)
                high[id_].n_layer = _u32(high[id_].n_layer + n_layer_move)
                high[jd].n_layer = _u32(high[jd].n_layer - n_layer_move)
                high[jd].n_part = 0
            id_dense_start_high = nd - 1
            mem_high = self.memory_for_layers(high, overflow_bufts)
            if mem_high[id_] > targets[id_]:
                delta = _u32(high[id_].n_full() - ngl[id_].n_full())
                while delta > 1:
                    step = _u32(_div(_i64(delta * (targets[id_] - mem[id_])), mem_high[id_] - mem[id_]))
                    step = min(max(step, 1), delta - 1)
                    test = _copy(ngl)
                    idt = id_dense_start
                    converted = 0
                    while idt < nd:
                        n_convert = min(_u32(step - converted), test[idt].n_part)
                        test[idt].n_layer = _u32(test[idt].n_layer - n_convert)
                        test[idt].n_part = _u32(test[idt].n_part - n_convert)
                        test[id_].n_layer = _u32(test[id_].n_layer + n_convert)
                        converted += n_convert
                        if test[idt].n_part > 0:
                            break
                        idt += 1
                    mem_test = self.memory_for_layers(test, overflow_bufts)
                    if mem_test[id_] <= targets[id_]:
                        ngl, mem, id_dense_start = test, mem_test, idt
                        s.trc(
                            f"set ngl_per_device[{id_}].(n_layer, n_part)=({ngl[id_].n_layer}, {ngl[id_].n_part}), "
                            f"id_dense_start={id_dense_start}"
                        )
                    else:
                        high, mem_high, id_dense_start_high = test, mem_test, idt
                        s.trc(
                            f"set ngl_per_device_high[{id_}].(n_layer, n_part)="
                            f"({high[id_].n_layer}, {high[id_].n_part}), "
                            f"id_dense_start_high={id_dense_start_high}"
                        )
                    delta = _u32(high[id_].n_full() - ngl[id_].n_full())
            else:
                ngl, mem, id_dense_start = high, mem_high, id_dense_start_high
                s.trc(
                    f"set ngl_per_device[{id_}].(n_layer, n_part)=({ngl[id_].n_layer}, {ngl[id_].n_part}), "
                    f"id_dense_start={id_dense_start}"
                )

            # try to fit at least part of one more layer
            if ngl[id_dense_start].n_layer > (0 if id_ < nd - 1 else 1):
                test = _copy(ngl)
                idt = id_dense_start
                test[idt].n_layer = _u32(test[idt].n_layer - 1)
                test[idt].n_part = _u32(test[idt].n_part - 1)
                test[id_].n_layer = _u32(test[id_].n_layer + 1)
                test[id_].n_part = _u32(test[id_].n_part + 1)
                if test[idt].n_part == 0:
                    idt += 1
                test[id_].overflow_type = UP
                bufts_test = list(overflow_bufts)
                if id_ < nd - 1:
                    bufts_test[id_] = self.devices[id_ + 1].name
                s.trc("trying to fit one extra layer with overflow_type=LAYER_FRACTION_UP")
                mem_test = self.memory_for_layers(test, bufts_test)
                if self._fits_strictly(mem_test, targets, id_):
                    ngl, overflow_bufts, mem, id_dense_start = test, bufts_test, mem_test, idt
                    self._log_extra_layer(ngl, id_, "UP", id_dense_start)
                    test = _copy(test)
                    test[id_].overflow_type = GATE
                    s.trc("trying to fit one extra layer with overflow_type=LAYER_FRACTION_GATE")
                    mem_test = self.memory_for_layers(test, bufts_test)
                    if self._fits_strictly(mem_test, targets, id_):
                        ngl, overflow_bufts, mem, id_dense_start = test, bufts_test, mem_test, idt
                        self._log_extra_layer(ngl, id_, "GATE", id_dense_start)
                else:
                    test[id_].overflow_type = ATTN
                    s.trc("trying to fit one extra layer with overflow_type=LAYER_FRACTION_ATTN")
                    mem_test = self.memory_for_layers(test, bufts_test)
                    if self._fits_strictly(mem_test, targets, id_):
                        ngl, overflow_bufts, mem, id_dense_start = test, bufts_test, mem_test, idt
                        self._log_extra_layer(ngl, id_, "ATTN", id_dense_start)
            self._log_device_overflowing(ngl, mem, id_)
            id_ += 1

        for id_ in range(id_dense_start + 1, nd):
            self._log_device_overflowing(ngl, mem, id_)
        s.n_gpu_layers = self.set_ngl_tensor_split_tbo(ngl, overflow_bufts)
        self.ngl, self.overflow_bufts = ngl, overflow_bufts

    def _fits_strictly(self, mem: list[int], targets: list[int], id_: int) -> bool:
        return mem[id_] < targets[id_] and (id_ + 1 == self.nd or mem[id_ + 1] < targets[id_ + 1])

    def _log_extra_layer(self, ngl: list[_Ngl], id_: int, kind: str, id_dense_start: int) -> None:
        self.s.trc(
            f"set ngl_per_device[{id_}].(n_layer, n_part, overflow_type)=({ngl[id_].n_layer}, {ngl[id_].n_part}, "
            f"{kind}), id_dense_start={id_dense_start}"
        )

    def _log_device_overflowing(self, ngl: list[_Ngl], mem: list[int], id_: int) -> None:
        margin = self.devices[id_].free - mem[id_]
        self.s.trc(
            f"  - {self.dev_names[id_]}: {ngl[id_].n_layer:2d} layers ({ngl[id_].n_part:2d} overflowing), "
            f"{_mib(mem[id_]):6d} MiB used, {_mib(margin):6d} MiB free"
        )


def overflow_pattern(il: int, fraction: int) -> str:
    """get_overflow_pattern (fit.cpp:491-530): the tensors of layer il that leave its device."""
    if il >= MAX_LAYER_PATTERNS:
        raise _FitError(f"at most {MAX_LAYER_PATTERNS} model layers are supported")
    return _FRACTION_PATTERN[fraction].format(il=il)


def breakdown_table(
    devices: Sequence[Device], usages: Sequence[Usage], extra: Mapping[str, int] | None = None
) -> list[str]:
    """common_memory_breakdown_print's table (fit.cpp:906-1060): device rows, the Host row, then a row
    for each remaining buffer type (the CPU's AMX and CPU_REPACK: their weights only)."""
    header = ["memory breakdown [MiB]", "total", "free", "self", "model", "context", "compute", "unaccounted"]
    rows: list[tuple[str, list[str]]] = [("header", header)]
    for d, u in zip(devices, usages, strict=False):
        desc = d.description
        for prefix in _DESC_PREFIXES:
            if desc.startswith(prefix):
                desc = desc[len(prefix) :]
        unaccounted = d.total - d.free - u.total
        figures = [d.total, d.free, u.total, u.model, u.context, u.compute]
        rows.append(("gpu", [f"  - {d.name} ({desc})", *(str(x // MiB) for x in figures), str(_mib(unaccounted))]))
    h = usages[-1]
    host = [
        "  - Host",
        "",
        "",
        str(h.total // MiB),
        str(h.model // MiB),
        str(h.context // MiB),
        str(h.compute // MiB),
        "",
    ]
    rows.append(("other", host))
    for name, size in (extra or {}).items():
        rows.append(("other", [f"  - {name}", "", "", str(size // MiB), str(size // MiB), "0", "0", ""]))
    widths = [max(len(cells[j]) for _, cells in rows) for j in range(8)]
    out = []
    for kind, cells in rows:
        c = [cells[0].ljust(widths[0])] + [cells[j].rjust(widths[j]) for j in range(1, 8)]
        if kind == "header":
            body = f"{c[1]}   {c[2]}    {c[3]}   {c[4]}   {c[5]}   {c[6]}    {c[7]}"
        elif kind == "gpu":
            body = f"{c[1]} = {c[2]} + ({c[3]} = {c[4]} + {c[5]} + {c[6]}) + {c[7]}"
        else:
            body = f"{c[1]}   {c[2]}    {c[3]} = {c[4]} + {c[5]} + {c[6]}    {c[7]}"
        out.append(f"common_memory_breakdown_print: | {c[0]} | {body} |")
    return out


# ---------------------------------------------------------------------------------------------
# The entry point


def fit_params(
    measure: Measure,
    devices: Sequence[Device],
    host: Host,
    params: Params,
    *,
    n_layer: int,
    n_ctx_train: int,
    n_expert: int = 0,
    margins: Sequence[int] | None = None,
    n_ctx_min: int = DEFAULT_FIT_CTX,
    extra: ExtraMeasure | None = None,
    extra_shares_model: bool = False,
    fit: bool = True,
    via_common_init: bool = True,
) -> FitResult:
    """`common_fit_params` on `params` for the model `measure` measures.

    n_layer: `llama_model_n_layer` (hp_ngl; + the NextN layers when MTP is loaded), n_expert:
    `llama_model_n_expert`. margins: `--fit-target` in bytes per device index (see
    expand_fit_target; default 1,024 MiB each). n_ctx_min: `fit_params_min_ctx` (see fit_ctx_min).
    extra: the draft or MTP model fitted alongside (extra_shares_model: MTP, weights not counted).
    via_common_init: llama-server and llama-cli log two lines before calling the fit; llama-fit-params
    calls it directly. The wrapper's "took %.2f seconds" line is left out (no clock to copy).
    """
    if not fit:
        return FitResult("off", "", params, ["`--fit off`: llama-server uses the parameters exactly as given"], [])
    state = _State(params, params.n_ctx, params.n_gpu_layers, _Buffers.of(params))
    if via_common_init:
        state.log.append((TRC, "cmn  common_init_: fitting params to device memory ..."))
        state.log.append(
            (
                TRC,
                "cmn  common_init_: (for bugs during this step try to reproduce them with -fit off, "
                "or provide --verbose logs if the bug only occurs with -fit on)",
            )
        )
    margins = expand_fit_target([DEFAULT_FIT_TARGET_MIB]) if margins is None else margins
    run = _Fit(
        measure,
        devices,
        host,
        state,
        n_layer=n_layer,
        n_ctx_train=n_ctx_train,
        n_expert=n_expert,
        margins=margins,
        n_ctx_min=n_ctx_min,
        extra=extra,
        extra_shares_model=extra_shares_model,
    )
    status, message = "success", ""
    try:
        run.run()
        state.log.append((TRC, f"{WRAPPER}: successfully fit params to free device memory"))
    except _FitFailure as e:
        status, message = "failure", str(e)
        state.log.append((WRN, f"{WRAPPER}: failed to fit params to free device memory: {message}"))
    except (_FitError, MeasureError) as e:
        status, message = "error", str(e)
        state.log.append(
            (ERR, f"{WRAPPER}: encountered an error while trying to fit params to free device memory: {message}")
        )
    except _Crash as e:
        result = FitResult("error", str(e), state.params(), [], state.log)
        result.changes = [f"llama-server would crash during the fit: {e}"]
        return result
    result = FitResult(status, message, state.params(), [], state.log)
    result.changes = _describe(result, params, run, n_ctx_min)
    return result


# ---------------------------------------------------------------------------------------------
# What the result means, in words and as llama-fit-params prints it


def cli_args(params: Params) -> str:
    """llama-fit-params' stdout for fitted params (tools/fit-params/fit-params.cpp:38-68)."""
    out = f"-c {_u32(params.n_ctx)} -ngl {params.n_gpu_layers}"
    split = list(params.tensor_split[:MAX_DEVICES])
    while len(split) > 1 and split[-1] == 0.0:
        split.pop()
    if len(split) > 1:
        out += " -ts " + ",".join(str(_u32(int(v))) for v in split)
    if params.overrides:
        out += ' -ot "' + ",".join(f"{pat}={buft}" for pat, buft in params.overrides) + '"'
    return out


def _n(x: int) -> str:
    return f"{x:,}"


def _ranges(layers: list[int]) -> str:
    parts: list[str] = []
    start = prev = layers[0]
    for il in [*layers[1:], None]:
        if il is not None and il == prev + 1:
            prev = il
            continue
        parts.append(str(start) if start == prev else f"{start}–{prev}")
        if il is not None:
            start = prev = il
    return ", ".join(parts)


def describe_overrides(overrides: Sequence[tuple[str, str]], n_layer: int) -> list[str]:
    """The fit's overrides in words: experts of layers in system RAM, the overflow of partial layers."""
    moe: list[int] = []
    out: list[str] = []
    what = {
        ATTN: "all FFN weights",
        UP: "the FFN gate and down weights",
        GATE: "the FFN down weights",
    }
    for pattern, buft in overrides:
        m = re.fullmatch(r"blk\\\.(\d+)\\\.(.*)", pattern)
        if m is None:
            continue
        il, rest = int(m[1]), "blk\\.{il}\\." + m[2]
        fraction = next((f for f, p in _FRACTION_PATTERN.items() if p == rest), None)
        if fraction == MOE and buft == "CPU":
            if il < n_layer:
                moe.append(il)
        elif fraction is not None and il < n_layer:
            place = "system RAM" if buft == "CPU" else buft
            out.append(f"{what[fraction]} of layer {il} in {place} (-ot {pattern}={buft})")
    if moe:
        out.insert(0, f"experts of layer{'s' if len(moe) > 1 else ''} {_ranges(moe)} in system RAM (-ot …_exps=CPU)")
    return out


def _describe(result: FitResult, given: Params, run: _Fit, n_ctx_min: int) -> list[str]:
    p, out = result.params, []
    nd = run.nd
    where = (
        "system memory"
        if nd == 0
        else run.devices[0].name
        if nd == 1
        else "each device (an estimate that allows for whole layers per device)"
    )
    target = _n(_mib(run.margins_s[0])) if nd <= 1 else "its target of"
    if given.n_ctx == 0 and p.n_ctx != 0:
        flag = "`-c 0`" if n_ctx_min == UINT32_MAX else "`-c` unset"
        if run.ctx_outcome == "reduced":
            free_words = {
                0: f"leaves {target} MiB of system memory free",
                1: f"leaves {target} MiB free on {where}",
            }.get(nd, "should leave each device its target free")
            out.append(f"{flag} → {_n(p.n_ctx)}: the largest context that {free_words}")
        elif run.ctx_outcome == "minimum":
            out.append(f"{flag} → {_n(p.n_ctx)}: the --fit-ctx minimum, and even that does not fit on {where}")
        else:
            why = "as -c 0 asks (context reduction off)" if n_ctx_min == UINT32_MAX else "the model's training context"
            out.append(f"{flag} → {_n(p.n_ctx)}: {why}")
    if result.status == "success" and p.n_gpu_layers != given.n_gpu_layers:
        total = run.hp_ngl + 1
        cpu = total - p.n_gpu_layers
        rest = f"{cpu} of {total} layers in system RAM" if cpu > 0 else f"all {total} layers on the GPU"
        out.append(f"`-ngl` auto → {p.n_gpu_layers}: {rest}")
        if nd > 1:
            counts = [str(int(v)) for v in p.tensor_split[:nd]]
            names = ", ".join(d.name for d in run.devices[:-1]) + f" and {run.devices[-1].name}"
            out.append(f"`-ts {','.join(counts)}`: layers split across {names}")
        out.extend(describe_overrides(p.overrides, run.hp_ngl))
    if result.status in ("failure", "error"):
        out.append(f"the fit stopped: {result.message}")
        kept = [f"-c {p.n_ctx}"] if p.n_ctx != given.n_ctx else []
        if p.tensor_split != given.tensor_split or p.overrides != given.overrides:
            kept.append("the split and overrides of its last trial")
        tail = f" (keeping {', '.join(kept)} from the fit)" if kept else ""
        out.append(f"llama-server ignores the failed fit and loads with the parameters as they stand{tail}")
    return out


# ---------------------------------------------------------------------------------------------
# llama-server around the fit


@dataclass(frozen=True)
class ServerContext:
    """The server's own adjustments before the fit, and the context it then runs with."""

    params: Params  # what the fit starts from
    n_parallel: int
    log: list[tuple[str, str]]


def server_pre_fit(
    params: Params, *, n_parallel: int = -1, kv_unified_per_slot: int = 0, n_ctx_min: int = DEFAULT_FIT_CTX
) -> ServerContext:
    """tools/server/server.cpp:168-186: `-np` auto becomes 4 slots on a unified KV cache; then
    `--kv-unified-per-slot N` sizes the pool to np × N when `-c` is unset (not when `-c 0`). A
    non-zero n_ctx then counts as set by the user in the fit (no context reduction)."""
    log: list[tuple[str, str]] = []
    kv_unified = params.kv_unified
    if n_parallel < 0:
        log.append((TRC, "srv  llama_server: n_parallel is set to auto, using n_parallel = 4 and kv_unified = true"))
        n_parallel, kv_unified = 4, True
    n_ctx = params.n_ctx
    if kv_unified_per_slot > 0 and n_ctx == 0 and n_ctx_min != UINT32_MAX:
        n_ctx = _i32(n_parallel * kv_unified_per_slot)
        log.append(
            (
                INF,
                "srv  llama_server: --kv-unified-per-slot: sizing KV pool to n_parallel * kv_unified_per_slot = "
                f"{n_parallel} * {kv_unified_per_slot} = {n_ctx}",
            )
        )
    return ServerContext(replace(params, n_ctx=n_ctx, n_seq_max=n_parallel, kv_unified=kv_unified), n_parallel, log)


def _i32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


@dataclass(frozen=True)
class ContextSize:
    """What llama_context makes of the fitted n_ctx (src/llama-context.cpp:135, 292-308)."""

    n_ctx: int  # the KV cells in total
    n_ctx_seq: int  # the cells per sequence (stream)
    n_ctx_slot: int  # what one server slot may use (capped by --kv-unified-per-slot)
    warnings: tuple[str, ...] = ()


def context_after_fit(params: Params, *, n_ctx_train: int, kv_unified_per_slot: int = 0) -> ContextSize:
    """n_ctx 0 → n_ctx_train, padded to 256; per stream padded to 256 when not unified; a slot
    is capped at --kv-unified-per-slot (server-context.cpp:1344-1369)."""
    warnings = []
    n_ctx = _u32(n_ctx_train if params.n_ctx == 0 else params.n_ctx)
    n_ctx = _u32((n_ctx + 255) // 256 * 256)
    n_seq_max = max(1, params.n_seq_max)
    if params.kv_unified:
        n_ctx_seq = n_ctx
    else:
        n_ctx_seq = _u32((n_ctx // n_seq_max + 255) // 256 * 256)
        if n_ctx != n_ctx_seq * n_seq_max:
            n_ctx = _u32(n_ctx_seq * n_seq_max)
            warnings.append(f"llama_context: n_ctx is not divisible by n_seq_max - rounding down to {n_ctx}")
    n_ctx_slot = min(n_ctx_seq, kv_unified_per_slot) if kv_unified_per_slot > 0 else n_ctx_seq
    return ContextSize(n_ctx, n_ctx_seq, n_ctx_slot, tuple(warnings))
