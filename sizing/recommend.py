"""Ranked llama-server configurations for a model, GPUs and workload. Pure.

Enumerates slots × unified/per-slot × K/V cache types × KV on GPU or in RAM, sizes the context so
the workload cannot overflow it, and keeps what starts and cannot fail:

* a configuration whose memory plan fits one GPU whole (sizing.memory: all weights counted on the GPU, a
  512 MiB margin) is kept as it is;
* one that does not (or any, on several GPUs) is handed to the --fit replica (sizing.placement.server)
  with `-ngl` auto, as llama-server b11434 would start it: if it loads, it is kept with the placement
  the fit chose — layers or MoE experts in system RAM, the split across GPUs — and ranked by that
  placement's speed. The command leaves that placement to --fit (see PLACEMENT), except for a MoE
  model, where `--n-cpu-moe N` / `--cpu-moe` states the experts' move in one flag when it beats
  moving whole layers.

The ranking (RANKING) rests on the decode speed estimate of sizing.placement.speed, relative to the
best candidate, not on a measurement; sweeps (and the history beside each row) check it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .cmdline import to_command
from .hparams import ModelParams
from .kv import KVLayout, ServerFlags, kv_layout, pad256
from .memory import MemoryPlan, MiB, memory_plan
from .placement import breakdown, prefill
from .placement import overrides as ot
from .placement.fit import PATTERN_MOE_ALL, describe_overrides
from .placement.prefill import PrefillEstimate
from .placement.server import ServerPlan, approximate, flags_after, plan_server
from .placement.speed import (
    SpeedEstimate,
    approximate_tensors,
    approximate_weights_bytes,
    cpu_flops,
    estimate,
)
from .placement.tensors import WeightTensor
from .placement.types import Device, Host, Params, Usage
from .twins import merge_twins
from .workload import Workload, predict

# Ranking needs a GPU bandwidth; where the catalogue has none, the investigation's RTX 5060 Ti 16 GB (448 GB/s).
RANKING_GPU_BANDWIDTH = 448e9
RANKING = (
    "Each configuration's decode speed is estimated from the bytes a generated token reads (weights, and the KV at "
    "the workload's context) over the memory bandwidth where they live — the GPU's, or system RAM's for the layers, "
    "MoE experts or KV cache kept there (the CPU then runs their part) (sizing.placement.speed) — and scored "
    "relative to the best candidate: for throughput the tokens of all requests decoded at once (they share one read "
    "of the weights), for latency one request's speed divided by the waves of requests that queue behind each other; "
    "then q8_0 KV ×0.97 and q4_0 ×0.9 for quality; ties go to the smaller memory footprint. A configuration that does "
    "not fit the GPUs whole is ranked with the placement llama-server's --fit gives it (kvlab replays the fit). "
    "Without the weights' size they are taken from the hyperparameters at 4.5 bits a weight. An estimate: with the "
    "KV in RAM the CPU reads each KV head once per query head and every layer hands off to the CPU and back; one "
    "request is within 16-57 % of the investigation's measurements, three at once 1.9× too fast (docs/sizing.md), "
    "so such configurations with many slots rank above where they would measure."
)
PLACEMENT = (
    "left to --fit, which chooses this by itself when the server starts and, with less memory free on the day, "
    "moves one more layer instead of failing to load (a fixed -ngl/-ot/-ts turns the fit's placement off)"
)
CACHE_PAIRS = [("f16", "f16"), ("q8_0", "q8_0"), ("f16", "q8_0"), ("q8_0", "q4_0"), ("q4_0", "q4_0")]
QUALITY = {"f16": 1.0, "q8_0": 0.97, "q4_0": 0.9}
# A replay of --fit that moves weights measures several placements: at most this many per call, the most
# promising first (and three times as many replays that find everything fits, on several GPUs).
MAX_FIT_RUNS = 3
# MoE configurations also tried as an explicit --n-cpu-moe N: a few measurements each.
MAX_EXPERT_RUNS = MAX_FIT_RUNS
EXPERT_TRIES = 3  # N from the fit's own count of layers up

GPU, FIT, EXPERTS, UNCHECKED = "gpu", "fit", "experts", "unchecked"


@dataclass(frozen=True)
class Recommendation:
    flags: ServerFlags  # what the command sets
    command: list[str]
    reasons: list[tuple[str, str]]  # (flag, why)
    plan: MemoryPlan  # at the placement the server will use (after --fit for FIT and EXPERTS)
    score: float
    prediction_message: str
    speed: SpeedEstimate | None = None  # the decode estimate the score rests on
    prefill: PrefillEstimate | None = None  # the workload's p95 prompt (its time to first token)
    placement: str = GPU  # GPU: all on the GPU(s); FIT: --fit moves part to RAM; EXPERTS: --n-cpu-moe; UNCHECKED
    server: ServerPlan | None = None  # the fit's replay, for FIT and EXPERTS (and GPU on several GPUs)
    # cells left to each request when all the workload's requests are in flight (in its slot, or its share of
    # the unified pool), beyond its p95 prompt + output
    cells_spare: int = 0
    twin: str = ""  # the flags of the same configuration with the other KV pool (-kvu or not), which works too

    @property
    def checked(self) -> bool:
        """Known to fit the GPU (False: the weights or the GPU are unknown, so only the KV is sized)."""
        return self.plan.fits is True

    @property
    def vram_left(self) -> int | None:
        """Bytes of GPU memory left beyond the margin (None: not known to fit, so not known)."""
        return self.plan.free_after if self.checked else None


@dataclass
class _Config:
    flags: ServerFlags
    layout: KVLayout
    plan: MemoryPlan
    message: str
    upper: SpeedEstimate | None = None  # everything on the GPU(s): no placement can be faster


@dataclass
class _Context:
    """What every candidate of one recommend() call shares."""

    model: ModelParams
    workload: Workload
    gpus: list[Device]  # the GPUs given (none: the KV alone is sized)
    speed_gpus: list[Device]  # the GPUs the speed is estimated on: a stand-in at the ranking bandwidth when none
    host: Host
    tensors: Sequence[WeightTensor] | None
    weights_bytes: int | None
    weights_source: str
    named: list[tuple[str, int]] | None
    read_weights: int
    model_path: str
    speeds: dict[ServerFlags, SpeedEstimate] = field(default_factory=dict)
    prefills: dict[ServerFlags, PrefillEstimate] = field(default_factory=dict)

    def prefill(self, flags: ServerFlags) -> PrefillEstimate:
        """The workload's prompt under these flags: what it depends on is only where the weights and the
        attention run and the ubatch, so candidates that differ in their KV's size or type share one."""
        key = ServerFlags(n_gpu_layers=flags.n_gpu_layers, overrides=flags.overrides,
                          tensor_split=flags.tensor_split, split_mode=flags.split_mode, main_gpu=flags.main_gpu,
                          kv_offload=flags.kv_offload, n_ubatch=flags.n_ubatch)  # fmt: skip
        if key not in self.prefills:
            if self.tensors is not None:
                rows = [(t.name, t.nbytes, t.n_elements) for t in self.tensors]
            else:  # the approximation's rows at Q4_K's 4.5 bits per weight
                rows = [(n, b, b * 16 // 9) for n, b in approximate_tensors(self.model, self.read_weights)]
            prompt = max(1, self.workload.prompt_tokens)
            work = prefill.work_for(self.model, key, devices=self.speed_gpus, tensors=rows, prompt_tokens=prompt)
            self.prefills[key] = prefill.estimate(
                work,
                prompt_tokens=prompt,
                n_ubatch=key.n_ubatch,
                cpu_flops=cpu_flops(self.host)[0],
                cpu_source=cpu_flops(self.host)[1],
            )
        return self.prefills[key]

    def speed(self, flags: ServerFlags, layout: KVLayout | None = None) -> SpeedEstimate:
        if flags not in self.speeds:
            self.speeds[flags] = self._speed(flags, layout)
        return self.speeds[flags]

    def _speed(self, flags: ServerFlags, layout: KVLayout | None) -> SpeedEstimate:
        return estimate(
            self.model,
            layout or kv_layout(self.model, flags),
            flags,
            devices=self.speed_gpus,
            host=self.host,
            prompt_tokens=self.workload.prompt_tokens,
            output_tokens=self.workload.output_tokens,
            concurrency=self.workload.concurrency,
            tensors=self.named,
            weights_bytes=None if self.named is not None else self.read_weights,
            cpu=cpu_flops(self.host),
        )

    def measure(self, params: Params, swa_full: bool) -> list[Usage]:
        """What llama.cpp counts per GPU, then the host, at a placement (sizing.placement.breakdown)."""
        tensors = self.tensors if self.tensors is not None else approximate(self.model, self.weights_bytes or 0)
        return breakdown.measure(self.model, tensors, self.gpus, self.host, params, swa_full=swa_full)

    def serve(self, flags: ServerFlags) -> ServerPlan:
        return plan_server(
            self.model,
            replace(flags, fit=True),
            devices=self.gpus,
            host=self.host,
            tensors=self.tensors,
            weights_bytes=self.weights_bytes,
            prompt_tokens=self.workload.prompt_tokens,
            output_tokens=self.workload.output_tokens,
            concurrency=self.workload.concurrency,
        )


def recommend(
    model: ModelParams,
    workload: Workload,
    *,
    base: ServerFlags,
    weights_bytes: int | None,
    weights_source: str,
    gpu_mib: int | None,
    model_path: str = "MODEL.gguf",
    limit: int = 8,
    gpu_bandwidth: float | None = None,
    host_bandwidth: float | None = None,
    devices: Sequence[Device] | None = None,
    host: Host | None = None,
    tensors: Sequence[WeightTensor] | None = None,
) -> list[Recommendation]:
    """The best configurations first.

    `devices` are the GPUs (else one of `gpu_mib`); a bandwidth they lack is `gpu_bandwidth`, else
    RANKING_GPU_BANDWIDTH. `host` is system RAM (its bandwidth, else `host_bandwidth`, else
    sizing.placement.speed's default). `tensors` place the weights exactly; without them `weights_bytes`
    is spread over the layers. The placement flags of `base` (-ngl, -ts, -ot) are the recommender's to
    choose and are not kept."""
    gpus = [
        replace(d, bandwidth=d.bandwidth or gpu_bandwidth or RANKING_GPU_BANDWIDTH)
        for d in (devices or ([Device("CUDA0", f"a GPU of {gpu_mib:,} MiB", gpu_mib * MiB)] if gpu_mib else []))
    ]
    if host is None:
        host = Host(0, 0, host_bandwidth)
    elif host.bandwidth is None and host_bandwidth:
        host = replace(host, bandwidth=host_bandwidth)
    if tensors is not None and weights_bytes is None:
        weights_bytes = sum(t.nbytes for t in tensors)
    ctx = _Context(
        model,
        workload,
        gpus,
        gpus or [Device("CUDA0", "a GPU", 0, 0, gpu_bandwidth or RANKING_GPU_BANDWIDTH)],
        host,
        tensors,
        weights_bytes,
        weights_source,
        None if tensors is None else [(t.name, t.nbytes) for t in tensors],
        # unknown weights: a stand-in from the hyperparameters, so the KV reads are weighed against something
        weights_bytes if weights_bytes is not None else approximate_weights_bytes(model),
        model_path,
    )
    base = replace(base, n_gpu_layers=None, tensor_split=(), overrides=())
    # the one-GPU memory plan screens; on several GPUs their free memory together (the fit splits it)
    screen_mib = sum(d.free for d in gpus) // MiB if gpus else None

    candidates: list[Recommendation] = []
    pending: dict[tuple[int, bool, int, str, str], list[_Config]] = {}
    for config in _configs(model, workload, base, weights_bytes, weights_source, screen_mib, ctx):
        plan = config.plan
        if plan.fits is not False and (plan.fits is None or len(gpus) == 1):
            config.upper = ctx.speed(config.flags, config.layout)
        if plan.fits is None:  # no GPU or no weights: the KV alone, labelled as such
            candidates.append(_candidate(ctx, config, config.flags, plan, ctx.speed(config.flags), UNCHECKED))
        elif len(gpus) == 1 and plan.fits:
            candidates.append(_candidate(ctx, config, config.flags, plan, ctx.speed(config.flags), GPU))
        elif weights_bytes is not None:
            # the fit's placement depends on the bytes to place: configurations with the same KV (per-slot and
            # unified pools of as many cells) share one replay, each then measured at its placement
            key = (
                config.flags.parallel or 1,
                config.flags.kv_offload,
                config.layout.kv_bytes,
                config.flags.type_k,
                config.flags.type_v,
            )
            pending.setdefault(key, []).append(config)

    # The most promising first; stop once even all-on-the-GPU could not enter the list.
    for group in pending.values():
        upper = ctx.speed(group[0].flags, group[0].layout)
        for config in group:
            config.upper = upper

    def bound(group: list[_Config]) -> float:
        return max(_value(c.upper, c.flags, workload) * _quality(c.flags) for c in group)

    expert_runs = placing_runs = 0
    for runs, group in enumerate(sorted(pending.values(), key=bound, reverse=True)):
        if placing_runs >= MAX_FIT_RUNS or runs >= MAX_FIT_RUNS * 3:
            break
        ranked = sorted((_value(r.speed, r.flags, workload) * _quality(r.flags) for r in candidates), reverse=True)
        if len(ranked) >= limit and bound(group) < ranked[limit - 1]:
            break
        server = ctx.serve(group[0].flags)
        placing_runs += server.params.n_gpu_layers >= 0  # a fit that changed nothing measured only once
        if server.fit.status != "success" or server.loads is not True:
            continue  # llama-server would not start it, or start it over its memory
        experts = None
        if model.n_expert and _moe_layers(server.params.overrides) and expert_runs < MAX_EXPERT_RUNS:
            expert_runs += 1
            experts = _expert_offload(ctx, group[0], server)
        placed = experts.params if experts else server.params
        for i, config in enumerate(group):
            usages = (
                (experts.usages if experts else [r.usage for r in server.gpus])
                if i == 0
                else ctx.measure(
                    replace(placed, kv_unified=bool(config.flags.kv_unified), n_seq_max=config.flags.parallel or 1),
                    config.flags.swa_full,
                )[: len(gpus)]
            )
            made = (
                _explicit_candidate(ctx, config, experts, usages)
                if experts
                else _fitted_candidate(ctx, config, server, base, usages)
            )
            if made is not None:
                candidates.append(made)

    values = [_value(r.speed, r.flags, workload) for r in candidates]
    best = max(values, default=0.0)
    candidates = [
        replace(r, score=round((v / best if best else 0.0) * _quality(r.flags), 4))
        for r, v in zip(candidates, values, strict=True)
    ]
    candidates.sort(key=lambda r: (-r.score, r.plan.gpu_total + r.plan.ram_total))
    return merge_twins(candidates)[:limit]


def _configs(
    model: ModelParams,
    workload: Workload,
    base: ServerFlags,
    weights_bytes: int | None,
    weights_source: str,
    gpu_mib: int | None,
    ctx: _Context,
) -> list[_Config]:
    out = []
    # More slots than concurrent requests only cost memory.
    slot_counts = sorted({n for n in (1, 2, 4, 8) if n <= workload.concurrency} | {min(workload.concurrency, 64)})
    pairs = [(k, v) for k, v in CACHE_PAIRS if not model.is_mla or k == v]
    for slots in slot_counts:
        for unified in (False, True) if slots > 1 else (False,):
            for type_k, type_v in pairs:
                for kv_offload in (True, False):
                    flags = _sized_flags(model, workload, base, slots, unified, type_k, type_v, kv_offload)
                    layout = kv_layout(model, flags)
                    if layout.errors:
                        continue
                    prediction = predict(layout, workload)
                    if prediction.outcome != "ok":
                        continue
                    plan = memory_plan(
                        model,
                        layout,
                        flags,
                        weights_bytes=weights_bytes,
                        weights_source=weights_source,
                        gpu_mib=gpu_mib,
                    )
                    out.append(_Config(flags, layout, plan, prediction.message))
    return out


def _sized_flags(
    model: ModelParams,
    workload: Workload,
    base: ServerFlags,
    slots: int,
    unified: bool,
    type_k: str,
    type_v: str,
    kv_offload: bool,
) -> ServerFlags:
    need = workload.sized_cells
    in_flight = min(slots, workload.concurrency)
    ctx = pad256(need * in_flight) if unified else pad256(need) * slots
    quantized_v = type_v not in ("f16", "bf16", "f32")
    return replace(
        base,
        ctx_size=ctx,
        parallel=slots,
        kv_unified=unified if slots > 1 else False,
        type_k=type_k,
        type_v=type_v,
        flash_attn="on" if quantized_v or base.flash_attn == "auto" else base.flash_attn,
        kv_offload=kv_offload,
    )


def _value(speed: SpeedEstimate | None, flags: ServerFlags, workload: Workload) -> float:
    """What the preference counts, in estimated tokens per second."""
    if speed is None or speed.tok_s is None or speed.aggregate_tok_s is None:
        return 0.0
    if workload.preference == "latency":
        waves = -(-workload.concurrency // (flags.parallel or 1))
        return speed.tok_s / waves
    return speed.aggregate_tok_s


def _quality(flags: ServerFlags) -> float:
    return QUALITY.get(flags.type_k, 0.9) * QUALITY.get(flags.type_v, 0.9)


# ---- candidates ----------------------------------------------------------------------------------


def _candidate(
    ctx: _Context,
    config: _Config,
    flags: ServerFlags,
    plan: MemoryPlan,
    speed: SpeedEstimate,
    placement: str,
    placed: list[tuple[str, str]] | None = None,
    server: ServerPlan | None = None,
    placed_flags: ServerFlags | None = None,
) -> Recommendation:
    """`placed_flags`: the placement `speed` was estimated at (the fit's, for a command that leaves it to --fit);
    the prompt's estimate rests on the same one. Default: `flags`."""
    reasons = _reasons(config.flags, ctx.workload, config.layout.n_ctx_seq, plan, placement)
    if not config.flags.kv_offload:
        reasons.append(("--no-kv-offload", _kv_in_ram(ctx, config, speed)))
    # the configuration's own layout, unless the fit changed its flags (then the one it runs with)
    prediction = predict(config.layout if flags == config.flags else kv_layout(ctx.model, flags), ctx.workload)
    spare = prediction.cells_available - prediction.cells_needed
    return Recommendation(
        flags=flags,
        command=to_command(flags, ctx.model_path),
        reasons=reasons + (placed or []),
        plan=plan,
        score=0.0,
        prediction_message=config.message,
        speed=speed,
        prefill=ctx.prefill(placed_flags or flags),
        placement=placement,
        server=server,
        cells_spare=spare // max(prediction.in_flight, 1) if flags.kv_unified else spare,
    )


def _fitted_candidate(
    ctx: _Context, config: _Config, server: ServerPlan, base: ServerFlags, usages: Sequence[Usage]
) -> Recommendation | None:
    """The configuration with the placement --fit gives it (server: the replay for an alike configuration;
    `usages`: this one's memory per GPU there)."""
    model, params = ctx.model, server.params
    effective = flags_after(config.flags, params)
    layout = kv_layout(model, effective)
    plan = _placed_plan(ctx, usages, [r.margin for r in server.gpus], layout)
    if not plan.fits:
        return None
    speed = ctx.speed(effective, layout)
    all_on_gpu = params.n_gpu_layers < 0 or (
        params.n_gpu_layers > model.n_layer and not any(b == ot.CPU for _, b in params.overrides)
    )
    # with --fit off in the given command the placement must be stated; else the fit makes it
    flags = config.flags if base.fit else replace(effective, fit=False)
    if all_on_gpu:
        placed = [] if len(ctx.gpus) == 1 else [_split_reason(ctx, params, speed)]
        return _candidate(ctx, config, flags, plan, speed, GPU, placed, server, effective)
    where = _fit_words(ctx, params)
    gpus = "the GPU" if len(ctx.gpus) == 1 else "the GPUs"
    why = f"{where}: est. {_tok_s(speed)} vs {_tok_s(config.upper, unit=False)} with all on {gpus}"
    why += f"; {PLACEMENT}" if base.fit else "; stated, as --fit is off"
    placed = [("-ngl auto (--fit)" if base.fit else _placement_flags(effective), why)]
    return _candidate(ctx, config, flags, plan, speed, FIT, placed, server, effective)


@dataclass(frozen=True)
class _Experts:
    """`--n-cpu-moe n` (or --cpu-moe) verified for a group of alike configurations."""

    n: int
    params: Params  # the placement
    usages: list[Usage]  # per GPU, at that placement
    margins: list[int]
    whole: tuple[int, SpeedEstimate] | None  # the most whole layers one GPU holds instead, and their speed
    fitted: ServerPlan  # what --fit itself chose


def _explicit_candidate(
    ctx: _Context, config: _Config, experts: _Experts, usages: Sequence[Usage]
) -> Recommendation | None:
    model, n = ctx.model, experts.n
    flags = replace(config.flags, overrides=_n_cpu_moe(model, n))
    layout = kv_layout(model, flags)
    plan = _placed_plan(ctx, usages, experts.margins, layout)
    if not plan.fits:
        return None
    speed = ctx.speed(flags, layout)
    flag = "--cpu-moe" if n >= model.n_layer else f"--n-cpu-moe {n}"
    layers = "every layer" if n >= model.n_layer else ("layer 0" if n == 1 else f"layers 0–{n - 1}")
    why = (
        f"the experts of {layers} in system RAM (a token reads {model.n_expert_used} of their {model.n_expert}), "
        f"every layer's attention and shared weights on the GPU: est. {_tok_s(speed)}"
    )
    if experts.whole is not None:
        whole_layers, whole_speed = experts.whole
        why += f" vs {_tok_s(whole_speed, unit=False)} moving whole layers instead (-ngl {whole_layers})"
    fitted = experts.fitted.params
    moved = len(_moe_layers(fitted.overrides))
    more = " and part of one more" if len(fitted.overrides) > moved else ""
    why += (
        f" and {_tok_s(config.upper, unit=False)} with all on the GPU. --fit alone would move about as much (the "
        f"experts of {moved} layers{more}, as per-layer -ot rules): the flag says it in one, and the fit keeps it"
    )
    made = _candidate(ctx, config, flags, plan, speed, EXPERTS, [(flag, why)], experts.fitted)
    return replace(made, command=to_command(replace(flags, overrides=()), ctx.model_path) + flag.split())


def _expert_offload(ctx: _Context, config: _Config, fitted: ServerPlan) -> _Experts | None:
    """The smallest `--n-cpu-moe N`, from the fit's own count up, that leaves every GPU its --fit margin
    (then the fit, finding the margin free, changes nothing), if it beats moving whole layers."""
    model = ctx.model
    moved = len(_moe_layers(fitted.params.overrides))
    partial = len(fitted.params.overrides) > moved  # part of one more layer left the GPU too
    margins = [r.margin for r in fitted.gpus]
    frees = [r.free or 0 for r in fitted.gpus]
    for n in range(moved + partial, min(moved + partial + EXPERT_TRIES, model.n_layer + 1)):
        params = replace(fitted.params, n_gpu_layers=-1, tensor_split=(), overrides=_n_cpu_moe(model, n))
        usages = ctx.measure(params, config.flags.swa_full)[: len(frees)]
        if all(u.total <= free - margin for u, free, margin in zip(usages, frees, margins, strict=True)):
            break
    else:
        return None
    speed = ctx.speed(replace(config.flags, overrides=_n_cpu_moe(model, n)))
    whole = _whole_layers(ctx, config, fitted) if len(ctx.gpus) == 1 else None
    if whole is not None and _value(whole[1], config.flags, ctx.workload) >= _value(speed, config.flags, ctx.workload):
        return None  # moving whole layers is as fast: leave the placement to --fit
    return _Experts(n, params, usages, margins, whole, fitted)


def _whole_layers(ctx: _Context, config: _Config, fitted: ServerPlan) -> tuple[int, SpeedEstimate] | None:
    """The most whole layers (experts and all) the GPU holds with its --fit margin free, and their speed:
    interpolated between none and all (layers are alike), then checked."""
    gpu = fitted.gpus[0]
    room = (gpu.free or 0) - gpu.margin
    params = replace(fitted.params, overrides=(), tensor_split=())
    total = ctx.model.n_layer + 1

    def used(n: int) -> int:
        return ctx.measure(replace(params, n_gpu_layers=n), config.flags.swa_full)[0].total

    low, high = used(0), used(total)
    if low > room:
        return None
    n = min(total, (room - low) * total // max(1, high - low))
    while n > 0 and used(n) > room:
        n -= 1
    return n, ctx.speed(replace(config.flags, n_gpu_layers=n))


# ---- what the placement is, in words -------------------------------------------------------------


def _moe_layers(overrides: Sequence[tuple[str, str]]) -> list[tuple[int, str]]:
    """(layer, buffer type) of the fit's per-layer expert overrides that go to system RAM."""
    out = []
    for pattern, buft in overrides:
        m = re.fullmatch(r"blk\\\.(\d+)\\\.(.*)", pattern)
        if m and buft == ot.CPU and PATTERN_MOE_ALL.endswith(m[2]):
            out.append((int(m[1]), buft))
    return out


def _n_cpu_moe(model: ModelParams, n: int) -> tuple[tuple[str, str], ...]:
    return tuple(ot.cpu_moe() if n >= model.n_layer else ot.n_cpu_moe(n))


def _fit_words(ctx: _Context, params: Params) -> str:
    """ "--fit keeps 37 of 41 layers on the GPU; 4 in system RAM", with the experts and the split."""
    model, total = ctx.model, ctx.model.n_layer + 1
    on_gpus = min(total, params.n_gpu_layers) if params.n_gpu_layers >= 0 else total
    gpu_words = "the GPU" if len(ctx.gpus) == 1 else f"the {len(ctx.gpus)} GPUs"
    if on_gpus == total:
        words = f"--fit keeps all {total} layers on {gpu_words}"
    else:
        words = f"--fit keeps {on_gpus} of {total} layers on {gpu_words}; {total - on_gpus} in system RAM"
    if len(ctx.gpus) > 1 and any(params.tensor_split):
        counts = ",".join(str(int(v)) for v in params.tensor_split[: len(ctx.gpus)])
        words += f", split {counts} (-ts {counts})"
    moved = describe_overrides(params.overrides, model.n_layer)
    if moved:
        words += "; " + "; ".join(m.split(" (-ot ")[0] for m in moved)
    return words


def _split_reason(ctx: _Context, params: Params, speed: SpeedEstimate) -> tuple[str, str]:
    names = ", ".join(d.name for d in ctx.gpus[:-1]) + f" and {ctx.gpus[-1].name}"
    if any(params.tensor_split):
        counts = ",".join(str(int(v)) for v in params.tensor_split[: len(ctx.gpus)])
        how = f"--fit splits the layers {counts} over {names}"
        flag = "-ts (--fit)"
    else:
        how = f"llama-server splits the layers over {names} in proportion to their free memory"
        flag = "-ts (default)"
    return flag, f"{how}, all on the GPUs: est. {_tok_s(speed)}"


def _placement_flags(flags: ServerFlags) -> str:
    """The -ngl/-ts/-ot part of a command."""
    placed = ServerFlags(n_gpu_layers=flags.n_gpu_layers, tensor_split=flags.tensor_split, overrides=flags.overrides)
    return " ".join(to_command(placed)[3:]) or "-ngl"


def _kv_in_ram(ctx: _Context, config: _Config, speed: SpeedEstimate) -> str:
    on_gpu = ctx.speed(replace(config.flags, kv_offload=True))
    return (
        "the KV cache lives in system RAM and the CPU runs the attention over it: "
        f"est. {_tok_s(speed)} vs {_tok_s(on_gpu, unit=False)} with it on the GPU"
    )


def _tok_s(speed: SpeedEstimate | None, *, unit: bool = True) -> str:
    if speed is None or speed.tok_s is None:
        return "unknown"
    figure = f"{speed.tok_s:.1f}"
    return f"{figure} tok/s per request" if unit else figure


def _placed_plan(ctx: _Context, usages: Sequence[Usage], margins: Sequence[int], layout: KVLayout) -> MemoryPlan:
    """The memory plan at a placement: what llama.cpp counts on each GPU against its free memory, less
    --fit's margin (so `fits` means what the fit means by it)."""
    return MemoryPlan(
        weights_bytes=ctx.weights_bytes,
        weights_source=ctx.weights_source,
        weights_on_gpu=sum(u.model for u in usages),
        kv_bytes=layout.kv_bytes,
        kv_on_gpu=sum(u.context for u in usages),
        compute_estimate=sum(u.compute for u in usages),
        gpu_bytes=sum(d.free for d in ctx.gpus),
        margin_bytes=sum(margins),
    )


def _reasons(
    flags: ServerFlags, workload: Workload, slot_cells: int, plan: MemoryPlan, placement: str
) -> list[tuple[str, str]]:
    need = workload.sized_cells
    what = "p95 prompt + output" + (f" + {workload.headroom_pct} % headroom" if workload.headroom_pct else "")
    slots = flags.parallel or 1
    reasons = [
        (
            f"-c {flags.ctx_size}",
            (
                f"one pool of {slot_cells:,} cells: {min(slots, workload.concurrency)} × {need:,} "
                f"({what}) can never overflow it"
                if flags.kv_unified
                else f"{slot_cells:,} cells per slot ≥ {need:,} ({what}), padded to 256"
            ),
        ),
        (
            f"-np {flags.parallel}",
            f"{slots} request{'s' if slots > 1 else ''} decoded at once"
            + (f"; {workload.concurrency - slots} queue" if slots < workload.concurrency else ""),
        ),
    ]
    if flags.kv_unified:
        reasons.append(("-kvu", "slots share one pool sized for all of them, so no slot is stranded"))
    if flags.type_k != "f16" or flags.type_v != "f16":
        reasons.append(
            (
                f"-ctk {flags.type_k} -ctv {flags.type_v}",
                "a smaller KV cache, so it fits beside the weights"
                if plan.fits and placement == GPU
                else "a smaller KV cache, so more of the model stays on the GPU"
                if plan.fits
                else "a smaller KV cache (whether it fits beside the weights is not known)",
            )
        )
    if flags.flash_attn == "on":
        quantized_v = flags.type_v not in ("f16", "bf16", "f32")
        reasons.append(
            (
                "-fa on",
                "required for a quantized V cache" if quantized_v else "smaller compute buffers at long contexts",
            )
        )
    return reasons
