"""Prompt datasets: a JSONL file of prompts, sampled n at a time with a seed, and the
token-length distribution of the sample as the server counts it.

The file holds one JSON object per line with a "prompt" string, or a "text" string
(the field of common text corpora). Chat "messages" are refused by name: kvlab's
jobs send /completion prompts, and a chat template applied by kvlab would not be the
one the server applies. Blank lines are skipped. Everything here is pure: parsing,
sampling and the distribution take bytes or numbers and return values.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from kvlab import bounded_parse

from ..records.metrics import at_rank

MAX_DATASET_BYTES = 64 * 1024 * 1024
MAX_LINE_BYTES = 1024 * 1024
MAX_DATASET_PROMPTS = 200_000
MAX_SAMPLED_BYTES = 16 * 1024 * 1024  # what a job's params may hold of prompts
MAX_BAD_LINES_SHOWN = 5
HISTOGRAM_BINS = 8
PROMPT_FIELDS = ("prompt", "text")


class DatasetError(ValueError):
    """The dataset cannot be used; the message says why (bad lines with their numbers)."""


def parse_dataset(raw: bytes) -> list[str]:
    """The prompts of a JSONL dataset, in file order; DatasetError naming the bad lines."""
    if len(raw) > MAX_DATASET_BYTES:
        raise DatasetError(f"The dataset is larger than {MAX_DATASET_BYTES // 1048576} MiB.")
    if b"\x00" in raw:
        at = raw.count(b"\n", 0, raw.index(b"\x00")) + 1
        raise DatasetError(f"The dataset holds a NUL byte (line {at}): it is not a text file.")
    prompts: list[str] = []
    bad: list[str] = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        prompt, problem = _read_line(line)
        if prompt is not None:
            prompts.append(prompt)
        else:
            bad.append(f"line {number}: {problem}")
        if len(prompts) > MAX_DATASET_PROMPTS:
            raise DatasetError(f"The dataset has more than {MAX_DATASET_PROMPTS:,} prompts.")
    if bad:
        shown = "; ".join(bad[:MAX_BAD_LINES_SHOWN])
        more = f" (and {len(bad) - MAX_BAD_LINES_SHOWN:,} more)" if len(bad) > MAX_BAD_LINES_SHOWN else ""
        raise DatasetError(f"{len(bad):,} line{'s' if len(bad) != 1 else ''} of the dataset rejected — {shown}{more}.")
    if not prompts:
        raise DatasetError("The dataset holds no prompt.")
    return prompts


def _read_line(line: bytes) -> tuple[str | None, str]:
    """(the line's prompt, "") or (None, what is wrong with it)."""
    if len(line) > MAX_LINE_BYTES:
        return None, f"longer than {MAX_LINE_BYTES // 1024} KiB"
    try:
        item: Any = bounded_parse.python_loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not UTF-8"
    except bounded_parse.Refused as exc:
        return None, str(exc)
    except ValueError:
        return None, "not valid JSON"
    if not isinstance(item, dict):
        return None, "not a JSON object"
    for name in PROMPT_FIELDS:
        value = item.get(name)
        if isinstance(value, str):
            if not value.strip():
                return None, f'an empty "{name}"'
            if "\x00" in value:
                return None, f'a NUL character in "{name}"'
            return value, ""
    if "messages" in item:
        return None, 'chat "messages" are not sent by kvlab (jobs send /completion prompts); give "prompt" or "text"'
    return None, 'no "prompt" or "text" string'


def sample(n_prompts: int, n: int, seed: int) -> list[int]:
    """Which prompts (indices) n requests send, reproducible from the seed.

    n at most the dataset's size: n distinct prompts, random.Random(seed).sample. More:
    whole shuffled passes over the dataset, then a sample for the rest, so every prompt
    is sent as evenly often as n allows.
    """
    if n_prompts <= 0 or n < 0:
        raise ValueError("a sample needs prompts to draw from and a count not below 0")
    draw = random.Random(seed)
    picked: list[int] = []
    while n - len(picked) >= n_prompts:
        order = list(range(n_prompts))
        draw.shuffle(order)
        picked.extend(order)
    picked.extend(draw.sample(range(n_prompts), n - len(picked)))
    return picked


def sampled_prompts(prompts: Sequence[str], n: int, seed: int) -> list[str]:
    """The n prompts a job sends; DatasetError when they are more text than a job may hold."""
    chosen = [prompts[i] for i in sample(len(prompts), n, seed)]
    size = sum(len(p.encode("utf-8")) for p in chosen)
    if size > MAX_SAMPLED_BYTES:
        raise DatasetError(
            f"The {n:,} sampled prompts hold {size / 1048576:.1f} MiB of text; a job may send at most "
            f"{MAX_SAMPLED_BYTES // 1048576} MiB: ask for fewer requests."
        )
    return chosen


def length_distribution(lengths: Sequence[int], bins: int = HISTOGRAM_BINS) -> dict[str, Any]:
    """min, nearest-rank p50/p95, max, mean and an equal-width histogram of token lengths."""
    if not lengths:
        raise ValueError("no lengths to describe")
    ordered = sorted(lengths)
    low, high = ordered[0], ordered[-1]
    width = max(1, -(-(high - low + 1) // bins))  # integer bins covering low..high
    counts = [0] * (-(-(high - low + 1) // width))
    for value in ordered:
        counts[(value - low) // width] += 1
    peak = max(counts)
    return {
        "n": len(ordered),
        "min": low,
        "p50": at_rank(ordered, 50),
        "p95": at_rank(ordered, 95),
        "max": high,
        "mean": round(sum(ordered) / len(ordered), 1),
        "histogram": [
            {"from": low + i * width, "to": low + (i + 1) * width - 1, "count": c, "pct": round(100 * c / peak)}
            for i, c in enumerate(counts)
        ],
    }
