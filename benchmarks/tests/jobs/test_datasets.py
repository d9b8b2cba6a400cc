"""Prompt datasets: JSONL read with every bad line named, sampled reproducibly with a seed,
the sample's token lengths described; the job form and `bench --dataset` use them."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from benchmarks.jobs.datasets import (
    MAX_LINE_BYTES,
    MAX_SAMPLED_BYTES,
    DatasetError,
    length_distribution,
    parse_dataset,
    sample,
    sampled_prompts,
)
from benchmarks.jobs.forms import JobForm
from benchmarks.models import Job, Server


def jsonl(*items: object) -> bytes:
    return "\n".join(json.dumps(item) for item in items).encode()


def test_it_reads_prompt_and_text_lines_in_order_and_skips_blank_lines():
    raw = jsonl({"prompt": "a b"}, {"text": "c", "id": 3}) + b"\n\n  \n" + jsonl({"prompt": "é"})
    assert parse_dataset(raw) == ["a b", "c", "é"]


def test_it_rejects_bad_lines_naming_each_by_number():
    raw = b"\n".join(
        [
            b'{"prompt": "ok"}',
            b'{"messages": [{"role": "user", "content": "hi"}]}',
            b"not json",
            b"[1, 2]",
            b'{"text": "   "}',
            b'{"prompt": 7}',
            b"\xff\xfe",
            b'{"prompt": "a\\u0000b"}',
        ]
    )
    with pytest.raises(DatasetError) as raised:
        parse_dataset(raw)
    message = str(raised.value)
    assert message.startswith("7 lines of the dataset rejected")
    assert 'line 2: chat "messages" are not sent by kvlab' in message
    assert "line 3: not valid JSON" in message and "line 4: not a JSON object" in message
    assert 'line 5: an empty "text"' in message and 'line 6: no "prompt" or "text" string' in message
    assert "(and 2 more)" in message  # lines 7 (not UTF-8) and 8 (an escaped NUL) past the five shown


def test_it_rejects_a_nul_byte_a_huge_line_and_an_empty_file():
    with pytest.raises(DatasetError, match=r"NUL byte \(line 2\)"):
        parse_dataset(b'{"prompt": "a"}\n{"prompt": "\x00"}\n')
    huge = jsonl({"prompt": "a"}, {"prompt": "x" * MAX_LINE_BYTES})
    with pytest.raises(DatasetError, match=r"line 2: longer than 1024 KiB"):
        parse_dataset(huge)
    with pytest.raises(DatasetError, match="holds no prompt"):
        parse_dataset(b"\n\n")


def test_a_sample_is_reproducible_from_its_seed_and_distinct_when_it_can_be():
    first = sample(100, 30, seed=5)
    assert first == sample(100, 30, seed=5) and first != sample(100, 30, seed=6)
    assert len(set(first)) == 30 and all(0 <= i < 100 for i in first)


def test_more_requests_than_prompts_send_every_prompt_as_evenly_as_possible():
    picked = sample(4, 10, seed=1)
    counts = [picked.count(i) for i in range(4)]
    assert sorted(counts) == [2, 2, 3, 3]
    assert picked == sample(4, 10, seed=1)


def test_a_sample_too_large_for_a_job_is_refused_with_its_size():
    prompts = ["y" * (MAX_SAMPLED_BYTES // 4)] * 5
    with pytest.raises(DatasetError, match=r"5 sampled prompts hold 20\.0 MiB of text; .* at most 16 MiB"):
        sampled_prompts(prompts, 5, 0)


def test_the_length_distribution_has_nearest_rank_percentiles_and_a_histogram_covering_every_length():
    lengths = [10, 12, 15, 40, 41, 42, 100, 200, 7, 9]
    d = length_distribution(lengths)
    assert (d["n"], d["min"], d["max"], d["p50"], d["p95"]) == (10, 7, 200, 15, 200)
    assert d["mean"] == round(sum(lengths) / 10, 1)
    assert sum(b["count"] for b in d["histogram"]) == 10
    assert d["histogram"][0]["from"] == 7 and d["histogram"][-1]["to"] >= 200
    assert max(b["pct"] for b in d["histogram"]) == 100
    assert len(d["histogram"]) <= 8
    one = length_distribution([5, 5, 5])
    assert one["histogram"] == [{"from": 5, "to": 5, "count": 3, "pct": 100}]


@pytest.mark.django_db
def test_the_job_form_samples_the_dataset_with_the_seed_into_params():
    server = Server.objects.create(name="s", base_url="http://127.0.0.1:9")
    raw = jsonl(*({"prompt": f"prompt number {i}"} for i in range(50)))

    def params(seed: int) -> dict:
        data = {
            "server": server.pk,
            "prompt_source": "dataset",
            "n_predict": 8,
            "concurrency": 2,
            "requests": 6,
            "repeats": 1,
            "timeout_s": 5,
            "seed": seed,
        }
        form = JobForm(data, {"dataset_file": SimpleUploadedFile("corpus.jsonl", raw)})
        assert form.is_valid(), form.errors
        return form.params()

    first = params(3)
    assert first["dataset"] == {"name": "corpus.jsonl", "n": 6, "size": 50, "seed": 3}
    assert len(first["prompts"]) == 6 and len(set(first["prompts"])) == 6
    assert params(3)["prompts"] == first["prompts"] and params(4)["prompts"] != first["prompts"]


@pytest.mark.django_db
def test_the_job_form_names_the_bad_lines_of_a_dataset():
    server = Server.objects.create(name="s", base_url="http://127.0.0.1:9")
    data = {"server": server.pk, "prompt_source": "dataset", "n_predict": 8, "concurrency": 1, "requests": 1}
    form = JobForm({**data, "repeats": 1, "timeout_s": 5}, {"dataset_file": SimpleUploadedFile("d.jsonl", b"{}\n")})
    assert not form.is_valid()
    assert form.non_field_errors() == ['1 line of the dataset rejected — line 1: no "prompt" or "text" string.']
    form = JobForm({**data, "repeats": 1, "timeout_s": 5})
    assert not form.is_valid() and form.non_field_errors() == ["Choose a prompt dataset (JSONL)."]


@pytest.mark.django_db
def test_bench_dataset_names_a_bad_line_and_submits_nothing(tmp_path):
    bad = tmp_path / "d.jsonl"
    bad.write_bytes(b'{"prompt": "a"}\n{"prompt": "b"\n')
    with pytest.raises(CommandError, match=r"line 2: not valid JSON"):
        call_command("bench", "--server", "http://127.0.0.1:8080", "--dataset", str(bad), stdout=StringIO())
    with pytest.raises(CommandError, match=r"missing\.jsonl: No such file"):
        call_command("bench", "--server", "http://127.0.0.1:8080", "--dataset", str(tmp_path / "missing.jsonl"))
    assert Job.objects.count() == 0
