import io

import pytest

from benchmarks.records.jsonl import RecordError, decode_line, iter_lines


def lines(data: bytes, limit: int = 1000) -> list[tuple[int, bytes, bool]]:
    return list(iter_lines(io.BytesIO(data), limit))


def test_it_splits_on_newline_only():
    data = '{"a": "x\u2028y"}\n{"b": 1}\r\n'.encode()
    assert lines(data) == [(1, '{"a": "x\u2028y"}'.encode(), False), (2, b'{"b": 1}\r', False)]


def test_a_last_line_without_newline_is_read():
    assert lines(b"{}\n{}") == [(1, b"{}", False), (2, b"{}", False)]


def test_a_line_over_the_limit_is_flagged_and_not_held_whole():
    long_line = b'{"x": "' + b"a" * 5000 + b'"}'
    result = lines(long_line + b"\n{}\n", limit=100)
    assert result[0][0] == 1 and result[0][2] is True
    assert len(result[0][1]) <= 200
    assert result[1] == (2, b"{}", False)


def test_line_numbers_stay_right_across_read_chunks(monkeypatch):
    monkeypatch.setattr("benchmarks.records.jsonl.CHUNK_BYTES", 7)
    data = b"".join(b'{"n": %d}\n' % i for i in range(50))
    result = lines(data)
    assert [n for n, _, _ in result] == list(range(1, 51))
    assert result[41][1] == b'{"n": 41}'


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{not json}", "invalid JSON"),
        (b"[1, 2]", "a line must hold a JSON object, not an array"),
        (b'"text"', "a line must hold a JSON object, not a string"),
        (b'{"tok_s": NaN}', "NaN is not valid JSON"),
        (b'{"tok_s": Infinity}', "Infinity is not valid JSON"),
        (b'{"tok_s": -Infinity}', "-Infinity is not valid JSON"),
        (b'{"run": "a", "run": "b"}', "duplicate key 'run'"),
        (b'{"extra": {"k": 1, "k": 2}}', "duplicate key 'k'"),
        (b'{"model": "caf\xe9"}', "not valid UTF-8 (byte 0xe9 at column 15)"),
        (b"[" * 100_000, "invalid JSON"),
    ],
)
def test_it_rejects_bad_lines_with_a_reason(raw, reason):
    with pytest.raises(RecordError, match=r"^" + __import__("re").escape(reason)):
        decode_line(raw)


def test_a_utf8_bom_on_the_first_line_is_accepted():
    lines = list(iter_lines(io.BytesIO(b'\xef\xbb\xbf{"a": 1}\n\xef\xbb\xbf{"b": 2}\n'), 1024))
    assert decode_line(lines[0][1]) == {"a": 1}
    with pytest.raises(RecordError):  # only the file's first bytes may be a BOM
        decode_line(lines[1][1])


@pytest.mark.parametrize(
    "raw",
    [
        b'{"ts": "12:00", "ts": "13:00"}',
        b'{"a:b": 1, "a:b": 2}',
        b'{"x": "1:2:3", "y": 4, "x": "5"}',
        b'{"k": 1, "\\u006b": 2}',
        b'{"n": 12345678901234567890123}',
        b'{"o": {"a": 1}, "o": {"b": 2}}',
        b'{"s": "\\u003a", "s": 1}',
        b'{"a":1,"a":2}',
        b'{"a":1,"a" :2}',
        b'{"a":1,"a"\t:2}',
        b'{"a":":","a":2}',
        b'{"a":":x","b":2}',
        b'{"a":" x","a":1}',
        b'{"x":{"a":1,"a":2}}',
        b'{"x":{"a":1},"y":2}',
        b'{":a":1,":a":2}',
    ],
)
def test_the_fast_path_never_hides_a_duplicate_key_or_changes_a_value(raw):
    import json

    try:
        expected = json.loads(raw, object_pairs_hook=_strict_pairs)
    except ValueError:
        with pytest.raises(RecordError, match="duplicate key"):
            decode_line(raw)
        return
    assert decode_line(raw) == expected
    assert "n" not in expected or type(decode_line(raw)["n"]) is int


def test_random_flat_lines_with_and_without_duplicate_keys_decode_as_the_strict_parser_reads_them():
    import json
    import random

    rng = random.Random(16)
    pieces = ["a", "b", ":", " ", "\t", ",", "{", "}", "x:y", ":a"]
    for _ in range(3_000):
        keys = ["".join(rng.choices(pieces[:3] + pieces[8:], k=rng.randint(1, 3))) for _ in range(rng.randint(1, 5))]
        if rng.random() < 0.5:
            keys.append(rng.choice(keys))  # a duplicate
        values = [rng.choice([1, "s", ":", " v", "a:b", None, True, 2.5, {"k": 1}]) for _ in keys]
        gap = rng.choice(["", " ", "\t"])
        body = ",".join(
            f"{json.dumps(k)}{gap if rng.random() < 0.2 else ''}:{json.dumps(v)}"
            for k, v in zip(keys, values, strict=True)
        )
        raw = ("{" + body + "}").encode()
        try:
            expected = json.loads(raw, object_pairs_hook=_strict_pairs)
        except ValueError:
            with pytest.raises(RecordError, match="duplicate key"):
                decode_line(raw)
            continue
        assert decode_line(raw) == expected, raw


def _strict_pairs(pairs):
    if len({k for k, _ in pairs}) != len(pairs):
        raise ValueError("duplicate")
    return dict(pairs)


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8, 13, 64, 1 << 20])
def test_line_splitting_matches_a_plain_split_for_any_chunk_size(monkeypatch, chunk):
    import random

    monkeypatch.setattr("benchmarks.records.jsonl.CHUNK_BYTES", chunk)
    rng = random.Random(chunk)
    for _ in range(50):
        data = b"".join(rng.choice([b"\n", b"a", b"bb", b"x" * 30, b"\r\n", "\u2028".encode()]) for _ in range(40))
        limit = rng.choice([5, 20, 1000])
        expected_lines = data.split(b"\n")
        if expected_lines[-1] == b"":
            expected_lines.pop()
        got = list(iter_lines(io.BytesIO(data), limit))
        assert [(n, too_long) for n, _, too_long in got] == [
            (n, len(line) > limit) for n, line in enumerate(expected_lines, start=1)
        ], (data, limit)
        for (_, raw, too_long), line in zip(got, expected_lines, strict=True):
            # a line over the limit keeps only a prefix, for its excerpt
            assert raw == line if not too_long else (line.startswith(raw) and 0 < len(raw) <= 200)
