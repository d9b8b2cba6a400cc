"""Recommendations with the placement llama-server's --fit gives a configuration that does not fit the GPU whole.

The investigation's model and workload (Devstral Small 2 24B Q4_K_M on an RTX 5060 Ti 16 GB, 4,362 + 1,738 tokens,
3 at once), a MoE model on a 12 GB card, two GPUs, and unknown weights. The weights are the catalogue's computed
tensors, so the fit replica (sizing.placement.server) places them exactly.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from sizing import catalogue
from sizing import recommend as rec
from sizing.cmdline import parse_command
from sizing.hparams import model_params
from sizing.kv import ServerFlags
from sizing.placement import tensors as placement_tensors
from sizing.placement.server import plan_server
from sizing.placement.types import Device, MiB
from sizing.workload import Workload

WORKLOAD = Workload(4362, 1738, 3)


def gpu(gpu_id: str, name: str = "CUDA0") -> Device:
    return catalogue.gpus()[gpu_id].device(name)


def model_and_tensors(model_id: str) -> tuple[object, list[placement_tensors.WeightTensor]]:
    entry = catalogue.models()[model_id]
    tensors = placement_tensors.computed(entry.metadata, "Q4_K_M", imatrix=entry.imatrix, **entry.tensor_layout)
    return model_params(entry.metadata), tensors


def ranked(model_id: str, devices: list[Device], **kwargs: object) -> list[rec.Recommendation]:
    model, tensors = model_and_tensors(model_id)
    options: dict[str, object] = {
        "base": ServerFlags(),
        "weights_bytes": None,
        "weights_source": "catalogue Q4_K_M: computed",
        "gpu_mib": None,
        "devices": devices,
        "tensors": tensors,
        "limit": 100,
    }
    options.update(kwargs)
    workload = options.pop("workload", WORKLOAD)
    return rec.recommend(model, workload, **options)  # type: ignore[arg-type]


def args(r: rec.Recommendation) -> str:
    return " ".join(r.command[3:])


def test_devstral_on_the_5060_ti_keeps_q8_0_first_and_offers_f16_with_layers_in_ram() -> None:
    results = ranked("devstral-small-2-24b", [gpu("rtx-5060-ti-16gb")])
    first = results[0]
    assert args(first) == "-c 18432 -np 3 -ctk q8_0 -ctv q8_0 -fa on" and first.placement == rec.GPU
    assert first.speed is not None and first.speed.tok_s == pytest.approx(22.62, abs=0.01)
    # f16 KV for 3 slots does not fit beside 13.3 GiB of weights: --fit moves 4 layers to system RAM
    f16 = next(r for r in results if args(r) == "-c 18432 -np 3 -fa on")
    assert f16.placement == rec.FIT and f16.checked and f16.plan.fits
    assert "-ngl" not in f16.command  # left to --fit
    flag, why = f16.reasons[-1]
    assert flag == "-ngl auto (--fit)"
    assert why.startswith(
        "--fit keeps 37 of 41 layers on the GPU; 4 in system RAM: est. 9.2 tok/s per request vs 21.0 with all on "
        "the GPU; left to --fit, which chooses this by itself"
    )
    assert f16.server is not None and f16.server.params.n_gpu_layers == 37
    # ranked by that placement's speed: below every all-on-the-GPU 3-slot configuration, above f16 KV in RAM
    assert f16.speed is not None and f16.speed.aggregate_tok_s == pytest.approx(27.54, abs=0.01)
    assert results.index(f16) > results.index(first)
    in_ram = next(r for r in results if args(r) == "-c 18432 -np 3 -fa on --no-kv-offload")
    assert f16.score > in_ram.score
    assert in_ram.reasons[-1] == (
        "--no-kv-offload",
        "the KV cache lives in system RAM and the CPU runs the attention over it: est. 3.2 tok/s per request vs "
        "21.0 with it on the GPU",
    )
    # the prompt rests on the fit's placement too: the 4 layers in RAM cross PCIe each ubatch, so it is slower
    assert first.prefill is not None and f16.prefill is not None and f16.prefill.seconds and first.prefill.seconds
    assert f16.prefill.seconds > first.prefill.seconds and "PCIe 4.0" in f16.prefill.inputs["efficiency"]["CPU"]
    assert "CPU" not in first.prefill.inputs["efficiency"]
    # what the GPU holds at the fitted placement: 37 layers' weights and KV, within the fit's 1,024 MiB margin
    assert f16.plan.margin_bytes == 1024 * MiB and (f16.plan.free_after or -1) >= 0
    assert f16.plan.kv_on_gpu < f16.plan.kv_bytes and f16.plan.weights_on_gpu < (f16.plan.weights_bytes or 0)


def test_the_command_left_to_fit_is_what_the_server_then_places() -> None:
    model, tensors = model_and_tensors("devstral-small-2-24b")
    f16 = next(
        r for r in ranked("devstral-small-2-24b", [gpu("rtx-5060-ti-16gb")]) if args(r) == "-c 18432 -np 3 -fa on"
    )
    replay = plan_server(
        model,  # type: ignore[arg-type]
        parse_command(" ".join(f16.command)).flags,
        devices=[gpu("rtx-5060-ti-16gb")],
        tensors=tensors,
        prompt_tokens=4362,
        output_tokens=1738,
        concurrency=3,
    )
    assert replay.fit.status == "success" and replay.loads
    assert replay.fit.changes == ["`-ngl` auto → 37: 4 of 41 layers in system RAM"]


def test_with_fit_off_the_placement_is_stated() -> None:
    results = ranked("devstral-small-2-24b", [gpu("rtx-5060-ti-16gb")], base=ServerFlags(fit=False))
    f16 = next(r for r in results if r.placement == rec.FIT and args(r).startswith("-c 18432 -np 3 -fa on"))
    assert "-ngl 37" in args(f16) and args(f16).endswith("-fit off")
    assert f16.reasons[-1][0] == "-ngl 37" and f16.reasons[-1][1].endswith("stated, as --fit is off")


def test_a_moe_model_on_12_gb_gets_its_experts_in_ram_with_n_cpu_moe() -> None:
    model, tensors = model_and_tensors("qwen3-30b-a3b")
    results = ranked("qwen3-30b-a3b", [gpu("rtx-3060-12gb")])
    experts = [r for r in results if r.placement == rec.EXPERTS]
    assert experts and results[0] in experts
    best = results[0]
    assert args(best) == "-c 18432 -np 3 -ctk q8_0 -ctv q8_0 -fa on --n-cpu-moe 23"
    flag, why = best.reasons[-1]
    assert flag == "--n-cpu-moe 23"
    assert why.startswith(
        "the experts of layers 0–22 in system RAM (a token reads 8 of their 128), every layer's attention and shared "
        "weights on the GPU: est. 38.8 tok/s per request vs 7.7 moving whole layers instead (-ngl 28) and 70.9 "
        "with all on the GPU. --fit alone would move about as much (the experts of 22 layers and part of one more"
    )
    # the command as given: the fit finds its margin free and changes nothing
    replay = plan_server(
        model,  # type: ignore[arg-type]
        parse_command(" ".join(best.command)).flags,
        devices=[gpu("rtx-3060-12gb")],
        tensors=tensors,
    )
    assert replay.fit.status == "success" and replay.loads and replay.fit.changes == []
    assert replay.params.n_gpu_layers == -1 and len(replay.params.overrides) == 23
    host = replay.host
    assert host is not None and host.usage.model == 8_559_968_256  # the experts of 23 of 48 layers (and token_embd)


def test_two_gpus_split_the_layers_and_fit_moves_what_does_not_fit_both() -> None:
    results = ranked("qwen3-32b", [gpu("rtx-3060-12gb"), gpu("rtx-3060-12gb", "CUDA1")])
    first = results[0]
    assert args(first) == "-c 18432 -np 3 -ctk q8_0 -ctv q8_0 -fa on" and first.placement == rec.GPU
    assert first.reasons[-1] == (
        "-ts (default)",
        "llama-server splits the layers over CUDA0 and CUDA1 in proportion to their free memory, all on the GPUs: "
        "est. 13.0 tok/s per request",
    )
    assert first.server is not None and [r.usage.model > 8 * 2**30 for r in first.server.gpus] == [True, True]
    assert first.plan.gpu_bytes == 2 * 12288 * MiB
    f16 = next(r for r in results if args(r) == "-c 18432 -np 3 -fa on")
    assert f16.placement == rec.FIT and "-ts" not in f16.command
    assert f16.reasons[-1][1].startswith(
        "--fit keeps 60 of 65 layers on the 2 GPUs; 5 in system RAM, split 30,30 (-ts 30,30): est. 5.4 tok/s per "
        "request vs 12.0 with all on the GPUs"
    )


def test_unknown_weights_give_kv_only_candidates_labelled_as_such() -> None:
    results = ranked("devstral-small-2-24b", [gpu("rtx-5060-ti-16gb")], tensors=None)
    assert results and all(r.placement == rec.UNCHECKED and not r.checked for r in results)
    assert all(r.server is None and "-ngl" not in r.command for r in results)
    # the speed still ranks them, with the weights taken from the hyperparameters
    assert results[0].speed is not None and results[0].speed.tok_s is not None
    assert results[0].speed.inputs["weights"] == "total spread over the layers (approximation)"


def test_the_fit_is_replayed_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[ServerFlags] = []
    real = rec.plan_server

    def counting(*a: object, **k: object) -> object:
        calls.append(a[1])  # type: ignore[arg-type]
        return real(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(rec, "plan_server", counting)
    results = ranked("qwen3-30b-a3b", [gpu("rtx-3060-12gb")], limit=8)
    # every configuration overflows 12 GB: at most MAX_FIT_RUNS replays, each serving a per-slot and a unified
    # pool of as many cells (one entry: twins), so the list is shorter than the limit (the price of a bounded page)
    assert len(calls) == rec.MAX_FIT_RUNS == 3
    assert len({(f.type_k, f.type_v, f.kv_offload, f.parallel) for f in calls}) == len(calls)
    assert len(results) == 3 and {r.placement for r in results} == {rec.EXPERTS}
    assert all(r.twin == "-kvu" for r in results)  # each replay's unified twin: one entry that says both work


def test_each_recommendation_knows_its_headroom_and_a_kvu_twin_is_folded_into_it() -> None:
    results = ranked("devstral-small-2-24b", [gpu("rtx-5060-ti-16gb")], limit=8)
    need = WORKLOAD.cells_per_request
    for r in results:
        slot = r.flags.ctx_size // (r.flags.parallel or 1)
        in_flight = min(r.flags.parallel or 1, WORKLOAD.concurrency)
        spare = (r.flags.ctx_size - in_flight * need) // in_flight if r.flags.kv_unified else slot - need
        assert r.cells_spare == spare >= 0
        assert r.vram_left == r.plan.free_after and r.vram_left >= 0
    ideas = [replace(r.flags, kv_unified=None, ctx_size=None) for r in results if (r.flags.parallel or 1) > 1]
    assert len(ideas) == len(set(ideas))  # no entry is another's twin
    twinned = [r for r in results if r.twin]
    assert twinned and all(("-kvu" in r.twin) != bool(r.flags.kv_unified) for r in twinned), [r.twin for r in twinned]
    assert all(any(flag == "-kvu or not" for flag, _ in r.reasons) for r in twinned)


def test_a_headroom_sizes_every_recommendation_that_much_above_the_need() -> None:
    roomy = Workload(4362, 1738, 3, headroom_pct=10)
    results = ranked("devstral-small-2-24b", [gpu("rtx-5060-ti-16gb")], limit=8, workload=roomy)
    assert results
    for r in results:
        assert r.cells_spare >= -(-WORKLOAD.cells_per_request * 10 // 100)
        assert "10 % headroom" in dict(r.reasons)[f"-c {r.flags.ctx_size}"]
