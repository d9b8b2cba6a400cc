"""The host CPU's arithmetic peak: its cores, clock and SIMD, from the form, kvsize or a host's announcement,
in every estimate that runs work on the CPU (a prompt's products of weights in RAM, attention over a KV in RAM)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from benchmarks.sweeps import host_facts
from sizing.forms import SizingForm
from sizing.placement import speed
from sizing.placement.cpu import flop_per_cycle, parse_cpu
from sizing.tests.support import text

pytestmark = pytest.mark.django_db

# The investigation with its KV in RAM and a prompt: the CPU attends over the 4,362-token prompt.
QUERY = {"model": "devstral-small-2-24b", "quant": "Q4_K_M", "gpu": "rtx-5060-ti-16gb", "ctx_size": 12288,
         "parallel": 1, "no_kv_offload": "on", "prompt_tokens": 4362, "output_tokens": 1738}  # fmt: skip


def host_of(**fields):
    form = SizingForm({**QUERY, **fields})
    assert form.is_valid(), form.errors
    return form.inputs.host


@pytest.mark.parametrize(
    ("spec", "per_cycle"), [("avx2", 32), ("avx512", 64), ("avx512+amx", 64), ("arm", 16), ("AVX2,SVE", 32)]
)
def test_a_cores_flop_per_cycle_follows_its_widest_simd(spec, per_cycle):
    assert flop_per_cycle(parse_cpu(spec))[0] == per_cycle
    assert flop_per_cycle(None) == (32, "AVX2's two 8-wide FP32 FMA units, the CPU's SIMD not given")


def test_the_forms_cores_and_clock_make_the_hosts_peak_and_say_how():
    host = host_of(cpu_cores=16, cpu_ghz=4.5, cpu="avx512")
    assert host.flops == 16 * 4.5e9 * 64
    assert host.flops_source == "16 cores × 4.5 GHz × 64 FLOP/cycle: AVX-512's two 16-wide FP32 FMA units; " \
        "one unit, or Zen 4's, reaches half"  # fmt: skip
    only_cores = host_of(cpu_cores=2)
    assert only_cores.flops == 2 * 3.5e9 * 32 and only_cores.flops_source.endswith("; the clock assumed")
    assert host_of() is None  # nothing given: the default desktop's peak, said so
    assert speed.cpu_flops(None) == (speed.DEFAULT_CPU_FLOPS, speed.DEFAULT_CPU_FLOPS_SOURCE)


def test_more_cores_make_the_cpus_share_of_the_prompt_faster(client):
    def prefill(**fields):
        out = StringIO()
        args = ["--model", "devstral-small-2-24b", "--quant", "Q4_K_M", "--gpu", "rtx-5060-ti-16gb", "-c",
                "12288", "-np", "1", "--no-kv-offload", "--prompt-tokens", "4362", "--output-tokens", "1738",
                "--json"]  # fmt: skip
        for name, value in fields.items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        call_command("kvsize", *args, stdout=out)
        return json.loads(out.getvalue())["prefill_tok_s_estimate"]

    default, small, big = prefill(), prefill(cpu_cores=2, cpu_ghz=2), prefill(cpu_cores=32, cpu_ghz=3.5)
    assert small["tok_s"] < default["tok_s"] < big["tok_s"]
    # the CPU's share is its attention over the KV, FLOP / peak: the seconds move with 1 / peak exactly
    peaks = {"default": speed.DEFAULT_CPU_FLOPS, "small": 2 * 2e9 * 32, "big": 32 * 3.5e9 * 32}
    expected = (1 / peaks["small"] - 1 / peaks["default"]) / (1 / peaks["default"] - 1 / peaks["big"])
    measured = (small["seconds"] - default["seconds"]) / (default["seconds"] - big["seconds"])
    assert measured == pytest.approx(expected, rel=1e-6)
    assert "CPU 0.13 TFLOP/s (2 cores × 2 GHz × 32 FLOP/cycle" in small["efficiency"]["CPU"]
    assert speed.DEFAULT_CPU_FLOPS_SOURCE in default["efficiency"]["CPU"]
    page = text(client.get(reverse("sizing"), {**QUERY, "cpu_cores": 2, "cpu_ghz": 2}))
    assert "2 cores × 2 GHz × 32 FLOP/cycle" in page
    form = client.get(reverse("sizing"), {**QUERY, "cpu_cores": 2, "cpu_ghz": 2}).content.decode()
    assert 'name="cpu_cores" value="2"' in form and 'name="cpu_ghz" value="2.0"' in form


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("cpu_cores", "0", "greater than or equal to 1"),
        ("cpu_cores", "1025", "less than or equal to 1024"),
        ("cpu_cores", "9" * 400, "less than or equal to 1024"),
        ("cpu_cores", "9" * 5000, "Enter a whole number"),
        ("cpu_ghz", "inf", "Enter a number"),
        ("cpu_ghz", "nan", "Enter a number"),
        ("cpu_ghz", "1e308", "less than or equal to 10"),
        ("cpu_ghz", "0", "greater than or equal to 0.1"),
    ],
)
def test_cores_and_clocks_past_any_cpu_are_refused(client, field, value, message):
    response = client.get(reverse("sizing"), {**QUERY, field: value})
    assert response.status_code == 400
    assert message in text(response)
    with pytest.raises(CommandError, match=message.split()[0]):
        call_command("kvsize", "--model", "llama-3.1-8b", f"--{field.replace('_', '-')}", value, stdout=StringIO())


SMT_CPUINFO = "".join(
    f"processor\t: {i}\nmodel name\t: Some Xeon\nflags\t\t: fpu avx2 fma\nphysical id\t: {i // 4}\n"
    f"core id\t\t: {(i % 4) // 2}\n\n"
    for i in range(8)
)  # 2 sockets × 2 cores × 2 threads


def test_a_host_announces_its_physical_cores_and_the_sizing_link_carries_them():
    assert host_facts.physical_cores(SMT_CPUINFO) == 4
    assert host_facts.physical_cores("processor\t: 0\nBogoMIPS\t: 50.00\nprocessor\t: 1\n") is None  # ARM
    assert host_facts.read_cpu(SMT_CPUINFO)["physical_cores"] == 4
    facts = {"cpu": {"physical_cores": 4, "usable_cores": 8, "cores": 8}, "ram": {}, "gpus": []}
    assert ("cpu_cores", "4") in host_facts._query(host_facts.HostFacts.from_json(facts), 1)
    pinned = {**facts, "cpu": {"physical_cores": 4, "usable_cores": 2, "cores": 8}}
    assert ("cpu_cores", "2") in host_facts._query(host_facts.HostFacts.from_json(pinned), 1)
    unknown = {**facts, "cpu": {"cores": 8}}
    assert not [k for k, _ in host_facts._query(host_facts.HostFacts.from_json(unknown), 1) if k == "cpu_cores"]
