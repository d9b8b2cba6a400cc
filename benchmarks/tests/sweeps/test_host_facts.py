"""A worker announces its machine's facts; /hosts/ shows them with their age and sizes for them."""

from __future__ import annotations

import html
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.urls import reverse
from django.utils import timezone

from benchmarks.models import LaunchHost
from benchmarks.sweeps import host_facts, worker_host
from benchmarks.sweeps.host_facts import (
    HostFacts,
    facts_note,
    read_cpu,
    read_meminfo,
    read_nvidia_smi,
    read_nvml,
    read_start_up,
    read_version,
    run_bounded,
    sizing_query,
)
from benchmarks.tests.builders import announced_host
from sizing.placement.cpu import from_system_info, parse_cpu

SAPPHIRE_RAPIDS = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
stepping\t: 8
cpu MHz\t\t: 2000.000
siblings\t: 112
cpu cores\t: 56
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss \
ht syscall nx pdpe1gb rdtscp lm constant_tsc pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes \
xsave avx f16c rdrand lahf_lm abm fsgsbase bmi1 avx2 smep bmi2 erms invpcid avx512f avx512dq rdseed adx smap \
avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec avx_vnni avx512_bf16 avx512vbmi umip \
pku avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq la57 rdpid movdiri movdir64b \
serialize amx_bf16 avx512_fp16 amx_tile amx_int8 arch_capabilities
bogomips\t: 4000.00

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse sse2
"""
SAPPHIRE_FEATURES = [
    "AMX_INT8", "AVX", "AVX2", "AVX512", "AVX512_BF16", "AVX512_VBMI", "AVX512_VNNI", "AVX_VNNI", "BMI2", "F16C",
    "FMA", "SSE3", "SSSE3",
]  # fmt: skip
GRAVITON3 = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop \
sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
CPU revision\t: 1
"""
MEMINFO = """MemTotal:       2113224704 kB
MemFree:        1800000000 kB
MemAvailable:   2049000000 kB
Buffers:          123456 kB
HugePages_Total:       0
"""
TWO_H100 = """NVIDIA H100 80GB HBM3, 81559, 81000, 00000000:18:00.0
NVIDIA H100 80GB HBM3, 81559, 80500, 00000000:2A:00.0
"""
CUDA_VERSION = """ggml_cuda_init: found 2 CUDA devices:
  Device 0: NVIDIA H100 80GB HBM3, compute capability 9.0, VMM: yes
  Device 1: NVIDIA H100 80GB HBM3, compute capability 9.0, VMM: yes
version: 11434 (0c1f2a3b)
built with cc (Debian 12.2.0-14+deb12u1) 12.2.0 for x86_64-linux-gnu
"""
SYSTEM_INFO = (
    "system_info: n_threads = 56 (n_threads_batch = 56) / 112 | CUDA : ARCHS = 900 | USE_GRAPHS = 1 | "
    "PEER_MAX_BATCH_SIZE = 128 | CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
    "AVX512 = 1 | AVX512_VNNI = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 |"
)
CUDA_START_UP = f"""0.00.001.052 I srv  llama_server: initializing ...
0.00.002.542 I cmn  common_param: common_params_print_info: build 11434 (0c1f2a3b) with cc for x86_64-linux-gnu
0.00.002.560 I cmn  common_param: device_info:
0.00.002.568 I cmn  common_param:   - CUDA0   : NVIDIA H100 80GB HBM3 (81079 MiB, 80520 MiB free)
0.00.002.568 I cmn  common_param:   - CUDA1   : NVIDIA H100 80GB HBM3 (81079 MiB, 80010 MiB free)
0.00.002.569 I cmn  common_param:   - CPU     : Intel(R) Xeon(R) Platinum 8480+ (2063701 MiB, 2001000 MiB free)
0.00.002.608 I cmn  common_param: {SYSTEM_INFO} \n0.00.002.624 I srv  llama_server: n_parallel is set to auto
0.00.005.697 E gguf_init_from_file: failed to open GGUF file '/nonexistent/kvlab-host-facts.gguf'
"""


def facts_of_two_h100() -> dict:
    """What a worker on a two-H100 Sapphire Rapids machine announces (the readers' own output)."""
    return {
        "version": 1,
        "cpu": {**read_cpu(SAPPHIRE_RAPIDS), "cores": 112, "usable_cores": 112},
        "ram": read_meminfo(MEMINFO),
        "gpus": read_nvidia_smi(TWO_H100),
        "gpu_reader": "nvidia-smi",
        "builds": [{"binary": "/opt/llama/llama-server", **read_version(CUDA_VERSION), "problems": []}],
        "problems": [],
    }


# --- the readers ------------------------------------------------------------------------------


def test_an_x86_cpuinfo_gives_its_model_and_llama_cpp_features_amx_included():
    cpu = read_cpu(SAPPHIRE_RAPIDS)
    assert cpu == {"model": "Intel(R) Xeon(R) Platinum 8480+", "features": SAPPHIRE_FEATURES, "label": "AVX-512 + AMX",
                   "physical_cores": None}  # the sample's one processor block names no core id  # fmt: skip
    assert parse_cpu("+".join(cpu["features"])).amx  # the sizing form's cpu field reads them back


def test_an_arm_cpuinfo_gives_neon_dotprod_i8mm_and_sve():
    cpu = read_cpu(GRAVITON3)
    assert cpu["model"] == ""  # ARM's /proc/cpuinfo names no model
    assert cpu["features"] == ["ARM_FMA", "DOTPROD", "FP16_VA", "MATMUL_INT8", "NEON", "SVE"]
    assert cpu["label"] == "ARM NEON + dotprod + i8mm + SVE"


def test_meminfo_gives_total_and_available_ram_in_bytes():
    assert read_meminfo(MEMINFO) == {"total_bytes": 2113224704 * 1024, "available_bytes": 2049000000 * 1024}
    assert read_meminfo("MemTotal: 1024 kB\n") == {"total_bytes": 1024 * 1024, "available_bytes": None}
    with pytest.raises(ValueError, match="no MemTotal"):
        read_meminfo("MemFree: 12 kB\n")


def test_nvidia_smis_csv_gives_each_gpu_with_its_memory_and_bus():
    assert read_nvidia_smi(TWO_H100) == [
        {"name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "memory_free_mib": 81000,
         "bus_id": "00000000:18:00.0"},
        {"name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "memory_free_mib": 80500,
         "bus_id": "00000000:2A:00.0"},
    ]  # fmt: skip
    odd = read_nvidia_smi("Tesla, rev. 2, 16384, [N/A], 00000000:01:00.0\nNVIDIA A10, 23028, 99999, 0:2:0.0\n")
    assert odd[0] == {"name": "Tesla, rev. 2", "memory_total_mib": 16384, "memory_free_mib": None,
                      "bus_id": "00000000:01:00.0"}  # fmt: skip
    assert odd[1]["memory_free_mib"] is None  # more free than total cannot be
    assert read_nvidia_smi("") == []


class FakeNvml:
    """pynvml's functions over two GPUs, one without PCI info."""

    class Memory:
        total, free = 85_520_809_984, 81000 * 1024 * 1024 + 5

    class Pci:
        busId = b"00000000:18:00.0"

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H100 80GB HBM3" if handle == 0 else "NVIDIA H100 NVL"

    def nvmlDeviceGetMemoryInfo(self, handle):
        return self.Memory()

    def nvmlDeviceGetPciInfo(self, handle):
        if handle == 1:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return self.Pci()


def test_nvml_gives_each_gpu_in_whole_mib():
    assert read_nvml(FakeNvml()) == [
        {"name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "memory_free_mib": 81000,
         "bus_id": "00000000:18:00.0"},
        {"name": "NVIDIA H100 NVL", "memory_total_mib": 81559, "memory_free_mib": 81000, "bus_id": ""},
    ]  # fmt: skip


def test_a_llama_server_version_gives_its_build_commit_and_compiler():
    assert read_version(CUDA_VERSION) == {
        "version": "11434 (0c1f2a3b)",
        "build": 11434,
        "commit": "0c1f2a3b",
        "built_with": "cc (Debian 12.2.0-14+deb12u1) 12.2.0 for x86_64-linux-gnu",
    }
    other = read_version("version: 0.6.0-dev (build 0, commit unknown)\nbuilt with GNU 12.2.0 for Linux x86_64\n")
    assert (other["version"], other["build"], other["built_with"]) == (
        "0.6.0-dev (build 0, commit unknown)", None, "GNU 12.2.0 for Linux x86_64",
    )  # fmt: skip
    with pytest.raises(ValueError, match="no 'version:' line"):
        read_version("error: unknown argument: --version\n")


def test_a_llama_server_start_up_gives_its_system_info_and_devices_without_their_free_memory():
    start_up = read_start_up(CUDA_START_UP)
    assert start_up == {
        "system_info": SYSTEM_INFO,
        "devices": [
            "CUDA0: NVIDIA H100 80GB HBM3",
            "CUDA1: NVIDIA H100 80GB HBM3",
            "CPU: Intel(R) Xeon(R) Platinum 8480+",
        ],
    }
    assert parse_cpu(start_up["system_info"]).amx  # what the sizing form's cpu field reads
    with pytest.raises(ValueError, match="no system_info line"):
        read_start_up("error: invalid argument: -lv\n")


@pytest.mark.llama_server
def test_the_real_llama_server_build_gives_its_version_and_the_system_info_the_oracle_reads(llama_server_binary):
    host_facts._BUILDS.clear()
    started = time.monotonic()
    build = host_facts.read_build(str(llama_server_binary))
    assert time.monotonic() - started < 10
    assert build["problems"] == [] and build["binary"] == str(llama_server_binary)
    assert build["version"] and build["built_with"]
    assert build["system_info"].startswith("system_info: n_threads = ") and "| CPU : " in build["system_info"]
    assert build["devices"] and build["devices"][-1].startswith("CPU: ")
    from sizing.tests.support import system_info_line

    assert from_system_info(build["system_info"]) == from_system_info(system_info_line(llama_server_binary))
    assert host_facts.read_build(str(llama_server_binary)) is build  # the same file is not run again


# --- hostile inputs -----------------------------------------------------------------------------


def test_readers_bound_what_they_read_from_huge_nul_and_garbage_text():
    huge = "processor\t: 0\n" + "x" * 10_000_000 + "\nflags : avx2\n"
    assert read_cpu(huge)["features"] == []  # past the bound, not read
    nul = SAPPHIRE_RAPIDS.replace("model name\t: Intel", "model name\t: \x00In\x1btel\x00" + "A" * 5000)
    model = read_cpu(nul)["model"]
    assert model.startswith("IntelAAA") and len(model) <= 200 and "\x00" not in model and "\x1b" not in model
    assert read_meminfo("MemTotal: " + "9" * 40 + " kB\nMemTotal: 8 kB\n")["total_bytes"] == 8 * 1024
    with pytest.raises(ValueError):
        read_meminfo("\x00\xff garbage\n" * 1000)
    many = "GPU, 1, 1, 0:0\n" * 10_000
    assert len(read_nvidia_smi(many)) <= host_facts.MAX_GPUS
    assert read_nvidia_smi("garbage\n,,,\n\x00\x00\n") == []
    long_line = read_nvidia_smi("N" * 100_000 + ", 1, 1, b")
    assert long_line == []  # the line was cut at the bound, so it has no fields left
    assert len(read_nvidia_smi("N" * 500 + ", 16384, 100, " + "b" * 500)[0]["name"]) == 200
    start_up = read_start_up("system_info: " + "AVX2 = 1 | " * 100_000)
    assert len(start_up["system_info"]) <= host_facts.MAX_SYSTEM_INFO + len("system_info: ")


def test_stored_facts_are_read_back_checked_whatever_the_row_holds():
    assert HostFacts.from_json(None) == HostFacts() and not HostFacts.from_json({}).present
    odd = HostFacts.from_json(
        {"cpu": [1], "ram": {"total_bytes": "9" * 30, "available_bytes": -5}, "gpus": "x",
         "builds": [7, {"devices": 3}], "problems": ["\x00" * 10]}
    )  # fmt: skip
    assert odd.present and odd.ram_total_bytes is None and odd.ram_available_bytes is None and odd.gpus == ()
    assert odd.cpu_spec == "" and odd.builds[1].devices == ()
    gpus = HostFacts.from_json({"gpus": [{"name": "A" * 999, "memory_total_mib": True}, "x"] * 100}).gpus
    assert len(gpus) == host_facts.MAX_GPUS and gpus[0].total_mib is None and len(gpus[0].name) == 200


def test_a_program_that_talks_forever_or_never_ends_is_cut_off(tmp_path):
    started = time.monotonic()
    assert len(run_bounded(["yes", "kvlab"], 5, 4096)) == 4096
    with pytest.raises(TimeoutError, match="gave no end within 0.5 s"):
        run_bounded(["sleep", "30"], 0.5, 4096)
    assert time.monotonic() - started < 5
    script = tmp_path / "llama-server"
    script.write_text("#!/bin/sh\nprintf 'version: \\000\\033[31m1 (abc)\\n'\nexec yes garbage\n")
    script.chmod(0o700)
    build = host_facts.read_build(str(script))
    assert build["version"] == "[31m1 (abc)"  # control characters dropped
    assert build["problems"] == ["start-up: no system_info line in its start-up output"]


# --- the announcement ---------------------------------------------------------------------------


@pytest.fixture
def own_dir(tmp_path: Path) -> Path:
    path = tmp_path / "models"
    path.mkdir(mode=0o755)
    return path


@pytest.mark.django_db
def test_the_announcement_stores_the_machines_facts(settings, llama_server_binary, own_dir):
    settings.KVLAB_LAUNCH_HOST = "gpu-7"
    settings.KVLAB_LAUNCH_BINARIES, settings.KVLAB_LAUNCH_MODELS_DIRS = [str(llama_server_binary)], [str(own_dir)]
    before = timezone.now()
    host = worker_host.announce("gpu7")
    host.refresh_from_db()
    assert host.facts_at is not None and host.facts_at >= before
    facts = HostFacts.from_json(host.facts)
    assert facts.cores is not None and facts.usable_cores is not None and facts.ram_total_bytes
    assert facts.cpu_read and facts.gpu_reader  # a machine without a GPU says why none was seen
    assert [b.binary for b in facts.builds] == [str(llama_server_binary)] and facts.system_info
    assert host.facts["problems"] == []


@pytest.mark.django_db
def test_a_failing_fact_reader_is_recorded_and_the_announcement_goes_on(settings, monkeypatch, own_dir):
    settings.KVLAB_LAUNCH_HOST = "gpu-8"
    settings.KVLAB_LAUNCH_BINARIES, settings.KVLAB_LAUNCH_MODELS_DIRS = ["/bin/true"], [str(own_dir)]

    def broken(*_):
        raise RuntimeError("NVML exploded")

    monkeypatch.setattr(host_facts, "read_gpus", broken)
    monkeypatch.setattr(host_facts, "read_meminfo", broken)
    worker_host.announce_worker(["kvlab"], "celery@gpu-8")
    host = LaunchHost.objects.get(name="gpu-8")
    assert host.binaries == ["/bin/true"] and host.announced_at is not None
    assert host.facts["problems"][:2] == [
        "RAM (/proc/meminfo): RuntimeError: NVML exploded",
        "GPUs: RuntimeError: NVML exploded",
    ]
    assert host.facts["gpus"] == [] and host.facts["ram"] is None and host.facts["cpu"]["features"] is not None
    assert host.facts["builds"][0]["problems"]  # /bin/true prints no version: said, not fatal

    monkeypatch.setattr(host_facts, "gather", broken)  # even gather itself failing
    worker_host.announce_worker(["kvlab"], "celery@gpu-8")
    host.refresh_from_db()
    assert host.facts == {"version": 1, "problems": ["RuntimeError: NVML exploded"]} and host.binaries == ["/bin/true"]


# --- the sizing link and note -------------------------------------------------------------------


@pytest.mark.django_db
def test_the_sizing_query_gives_each_gpus_total_and_used_the_ram_and_the_cpu(tmp_path):
    host = announced_host("gpu-box-1", tmp_path, facts=facts_of_two_h100(), facts_at=timezone.now())
    assert sizing_query(host) == [
        ("gpu_mib", "81559"), ("gpu_mib", "81559"), ("gpu_used", "559"), ("gpu_used", "1059"),
        ("ram_mib", str(2113224704 // 1024)), ("cpu", "+".join(SAPPHIRE_FEATURES)), ("host", str(host.pk)),
    ]  # fmt: skip
    host.facts["builds"][0]["system_info"] = SYSTEM_INFO  # the build's own line, when it gave one
    assert ("cpu", SYSTEM_INFO) in sizing_query(host)
    host.facts["gpus"][1]["memory_free_mib"] = None  # one GPU's free unknown: no gpu_used for any
    assert [k for k, _ in sizing_query(host)] == ["gpu_mib", "gpu_mib", "ram_mib", "cpu", "host"]
    assert sizing_query(announced_host("bare", tmp_path)) == [("host", str(LaunchHost.objects.get(name="bare").pk))]


@pytest.mark.django_db
def test_the_facts_note_says_where_the_sizing_values_came_from(tmp_path):
    at = datetime(2026, 12, 1, 20, 41, tzinfo=UTC)
    host = announced_host("gpu-box-1", tmp_path, facts=facts_of_two_h100(), facts_at=timezone.now())
    LaunchHost.objects.filter(pk=host.pk).update(facts_at=at)
    now = at + timedelta(minutes=5, seconds=10)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(timezone, "now", lambda: now)
        assert (
            facts_note(host.pk)
            == "GPUs, RAM and CPU from gpu-box-1's announcement of 2026-12-01 20:41 UTC (5 minutes ago)"
        )
        mp.setattr(timezone, "now", lambda: at + timedelta(days=3))
        assert facts_note(host.pk) == (
            "GPUs, RAM and CPU from gpu-box-1's announcement of 2026-12-01 20:41 UTC "
            "(3 days ago, stale: its free memory may have changed since)"
        )
    cpu_only = {**facts_of_two_h100(), "gpus": []}
    LaunchHost.objects.filter(pk=host.pk).update(facts=cpu_only)
    assert facts_note(host.pk).startswith("RAM and CPU from gpu-box-1's announcement")
    assert facts_note(announced_host("bare", tmp_path).pk) is None and facts_note(99999) is None


# --- /hosts/ ------------------------------------------------------------------------------------


def page_of(response) -> str:
    assert response.status_code == 200
    return response.content.decode()


def test_hosts_shows_each_hosts_facts_with_their_age_and_a_link_to_size_for_it(staff_client, tmp_path):
    fresh = announced_host(
        "gpu-box-1", tmp_path, facts=facts_of_two_h100(), facts_at=timezone.now() - timedelta(minutes=3)
    )
    page = page_of(staff_client.get(reverse("host-list")))
    assert "<strong>Host facts</strong>, announced 3 minutes ago" in page and "stale" not in page
    assert "CPU: Intel(R) Xeon(R) Platinum 8480+ (AVX-512 + AMX), 112 cores" in page
    assert "RAM: 2,063,696 MiB, 2,000,976 MiB available" in page
    assert "GPUs (nvidia-smi): NVIDIA H100 80GB HBM3, 81,559 MiB, 81,000 MiB free, bus 00000000:18:00.0; " in page
    assert "llama.cpp: <code>/opt/llama/llama-server</code> version 11434 (0c1f2a3b), built with cc (Debian" in page
    query = urlencode(
        [("gpu_mib", 81559), ("gpu_mib", 81559), ("gpu_used", 559), ("gpu_used", 1059), ("ram_mib", 2063696),
         ("cpu", "+".join(SAPPHIRE_FEATURES)), ("host", fresh.pk)]
    )  # fmt: skip
    assert f'<a href="/sizing/?{html.escape(query)}">size for this host</a>' in page
    assert reverse("sizing") == "/sizing/"


def test_hosts_says_plainly_when_facts_are_stale_or_absent(staff_client, tmp_path):
    announced_host("old-box", tmp_path, facts=facts_of_two_h100(), facts_at=timezone.now() - timedelta(days=2))
    announced_host("new-worker-never-said", tmp_path)
    broken = {**facts_of_two_h100(), "problems": ["GPUs: RuntimeError: NVML exploded"], "gpus": []}
    announced_host("half-read", tmp_path, facts=broken, facts_at=timezone.now())
    page = page_of(staff_client.get(reverse("host-list")))
    assert 'announced 2 days ago <span class="warning">stale: gathered over an hour ago' in page
    assert "No host facts: its worker has not announced them" in page
    assert "Facts it could not read: GPUs: RuntimeError: NVML exploded" in page
    assert page.count("size for this host") == 2  # not for the host without facts


def test_hosts_costs_the_same_queries_with_facts_however_many_hosts(staff_client, tmp_path, django_assert_num_queries):
    for size in (2, 12):
        LaunchHost.objects.all().delete()
        for i in range(size):
            announced_host(f"box-{i}", tmp_path, facts=facts_of_two_h100(), facts_at=timezone.now())
        with django_assert_num_queries(3):  # session, user; the hosts
            page = page_of(staff_client.get(reverse("host-list")))
        assert page.count("size for this host") == size


@pytest.mark.django_db
def test_size_for_this_host_fills_the_sizing_page_and_says_where_the_values_came_from(client, tmp_path):
    host = announced_host("gpu-box-1", tmp_path, facts=facts_of_two_h100(), facts_at=timezone.now())
    query = [*sizing_query(host), ("model", "devstral-small-2-24b"), ("quant", "Q8_0")]
    response = client.get(reverse("sizing") + "?" + urlencode(query))
    body = html.unescape(response.content.decode())
    assert response.status_code == 200, body[-1500:]
    assert "GPUs, RAM and CPU from gpu-box-1's announcement of" in body
    assert 'name="gpu_mib" min="256" max="4194304" value="81559"' in body
    assert f'name="ram_mib" value="{2113224704 // 1024}"' in body
    assert "Host CPU: AVX-512 + AMX" in body  # the announced CPU, as the answer used it
