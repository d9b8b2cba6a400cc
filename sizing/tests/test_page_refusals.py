"""Hostile and careless input to the sizing page, GGUF uploads and snapshots.

Each is refused with a clear 4xx and nothing stored, or kept bounded; never a 500.
"""

import io
import json
import struct

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from sizing.gguf import GGUFError, read_gguf_head
from sizing.models import GgufHead, SizingSnapshot
from sizing.tests.support import TINY, text

from .gguf_writer import gguf_head_bytes

pytestmark = pytest.mark.django_db


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("<Q", len(raw)) + raw


def head_with_raw_entry(key: str, raw_value: bytes, metadata: dict = TINY) -> bytes:
    """A GGUF head of metadata plus one entry whose typed value bytes are given as is."""
    head = gguf_head_bytes(metadata)
    n_kv = len(metadata) + 1
    return head[:16] + struct.pack("<Q", n_kv) + head[24:] + _string(key) + raw_value


def upload(client, data: bytes, name: str = "hostile.gguf"):
    return client.post(reverse("sizing-gguf"), {"head": SimpleUploadedFile(name, data)})


# Pasted metadata (the sizing form's JSON textarea)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ("[" * 1100, "nested too deeply"),
        ('{"general.architecture": "llama", "llama.block_count": ' + "9" * 5000 + "}", "too many digits"),
        (json.dumps({**TINY, "llama.attention.head_count_kv": 10**320}), "implausibly large"),
        (json.dumps({**TINY, "llama.attention.head_count_kv": [10**320] * 4}), "implausibly large"),
        (json.dumps({**TINY, "general.name": "a\u0000b"}), "NUL"),
    ],
    ids=["deep-nesting", "huge-integer", "huge-head-count", "huge-per-layer-head-count", "nul"],
)
def test_hostile_pasted_metadata_is_a_form_error_not_a_crash(client, params, message):
    response = client.get(reverse("sizing"), {"source": "params", "params": params})
    assert response.status_code == 400
    assert message in text(response)


def test_pasted_metadata_within_llama_cpp_bounds_still_sizes(client):
    response = client.get(reverse("sizing"), {"source": "params", "params": json.dumps(TINY)})
    assert response.status_code == 200 and "tiny-llama" in text(response)


# GGUF uploads


def nested_arrays(depth: int) -> bytes:
    # An array of one array of one array ... of zero uint8s.
    return struct.pack("<IIQ", 9, 9, 1) + struct.pack("<IQ", 9, 1) * (depth - 2) + struct.pack("<IQ", 0, 0)


HOSTILE_HEADS = {
    "nested-arrays": (head_with_raw_entry("x.deep", nested_arrays(3000)), "nested"),
    "huge-tensor": (gguf_head_bytes(TINY, [("w", (2**63, 2**63, 2**63), 0)]), "too large"),
    "nan": (gguf_head_bytes({**TINY, "llama.rope.freq_base": float("nan")}), "not a finite number"),
    "inf": (head_with_raw_entry("llama.rope.scale", struct.pack("<Id", 12, float("inf"))), "not a finite number"),
    "nul-string": (gguf_head_bytes({**TINY, "general.name": "tiny\u0000llama"}), "NUL"),
    "nul-key": (gguf_head_bytes({**TINY, "general.x\u0000": "y"}), "NUL"),
}


@pytest.mark.parametrize("case", list(HOSTILE_HEADS))
def test_hostile_gguf_heads_are_refused_with_the_reason_and_nothing_stored(user_client, case):
    data, message = HOSTILE_HEADS[case]
    response = upload(user_client, data)
    assert response.status_code == 400
    assert message in text(response)
    assert GgufHead.objects.count() == 0


def test_the_reader_refuses_deeply_nested_arrays_without_recursing():
    with pytest.raises(GGUFError, match="nested"):
        read_gguf_head(io.BytesIO(head_with_raw_entry("x.deep", nested_arrays(3000))))


def big_int_array(n: int) -> bytes:
    return struct.pack("<IIQ", 9, 5, n) + bytes(4 * n)


def test_a_head_with_a_million_element_array_stores_only_what_sizing_needs(user_client):
    # Both a big non-tokenizer array and a tokenizer array.
    head = gguf_head_bytes({**TINY, "llama.attention.head_count_kv": [2, 2, 0, 2]})
    n_kv = len(TINY) + 2
    data = (
        head[:16]
        + struct.pack("<Q", n_kv)
        + head[24:]
        + _string("llama.some_table")
        + big_int_array(1_000_000)
        + _string("tokenizer.ggml.tokens")
        + struct.pack("<IIQ", 9, 8, 5000)
        + _string("t") * 5000
    )
    response = upload(user_client, data)
    assert response.status_code == 302
    stored = GgufHead.objects.get()
    size = len(json.dumps(stored.metadata))
    assert size < 1_000_000
    assert "llama.some_table" not in stored.metadata and "tokenizer.ggml.tokens" not in stored.metadata
    assert stored.metadata["llama.some_table.count"] == 1_000_000
    assert stored.metadata["tokenizer.ggml.tokens.count"] == 5000
    assert stored.metadata["llama.vocab_size"] == 5000
    # The per-layer array sizing needs is kept.
    assert stored.metadata["llama.attention.head_count_kv"] == [2, 2, 0, 2]
    page = user_client.get(response.url)
    assert page.status_code == 200 and "hostile.gguf" in text(page)


def test_the_reader_skips_long_arrays_without_keeping_them():
    data = head_with_raw_entry("llama.some_table", big_int_array(200_000))
    head = read_gguf_head(io.BytesIO(data))
    assert "llama.some_table" not in head.metadata
    assert head.array_lengths == {"llama.some_table": 200_000}
    assert head.metadata["llama.block_count"] == 4


# Unguessable ids for uploaded heads


def test_an_uploaded_head_is_reached_by_an_unguessable_token_not_its_id(user_client, client):
    response = upload(user_client, gguf_head_bytes(TINY, [("w", (256, 3), 0)]), name="secret.gguf")
    stored = GgufHead.objects.get()
    assert response.status_code == 302
    assert f"gguf={stored.token}" in response.url and len(stored.token) >= 12
    assert "secret.gguf" in text(client.get(response.url))
    by_id = client.get(reverse("sizing"), {"source": "gguf", "gguf": stored.pk})
    assert by_id.status_code == 400 and "secret.gguf" not in text(by_id)
    assert "no longer exists" in text(by_id)


def test_each_head_gets_its_own_token(user_client):
    upload(user_client, gguf_head_bytes(TINY), name="a.gguf")
    upload(user_client, gguf_head_bytes(TINY), name="b.gguf")
    tokens = set(GgufHead.objects.values_list("token", flat=True))
    assert len(tokens) == 2


# Share snapshots


def test_a_nul_in_a_shared_query_is_refused_not_a_database_error(user_client):
    query = "model=devstral-small-2-24b&ctx_size=16384&x%00y=a%00b"
    response = user_client.post(reverse("sizing-share"), {"query": query})
    assert response.status_code == 400
    assert "NUL" in text(response)
    assert SizingSnapshot.objects.count() == 0


def test_a_nul_in_a_pasted_models_name_is_refused_when_shared(user_client):
    from urllib.parse import urlencode

    query = urlencode({"source": "params", "params": json.dumps({**TINY, "general.name": "a\u0000b"})})
    response = user_client.post(reverse("sizing-share"), {"query": query})
    assert response.status_code == 400
    assert SizingSnapshot.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_heads_uploaded_before_tokens_each_get_their_own_token():
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    def migrate(targets):
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(targets)
        return executor.loader.project_state(targets).apps

    try:
        old = migrate([("sizing", "0002_snapshot_view")]).get_model("sizing", "GgufHead")
        for name in ("a.gguf", "b.gguf"):
            old.objects.create(filename=name, sha256="0" * 64, size_bytes=1, metadata=TINY)
        new = migrate([("sizing", "0003_ggufhead_token")]).get_model("sizing", "GgufHead")
        tokens = list(new.objects.values_list("token", flat=True))
        assert len(set(tokens)) == 2 and all(len(t) >= 12 for t in tokens)
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
