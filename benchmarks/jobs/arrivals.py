"""When each request of a rate-mode wave is sent: Poisson or constant arrivals at a request rate.

Pure and seeded, so a job's send times can be reproduced from its params alone
("arrival", "rate", "seed"). Fixed concurrency (arrival "") has no schedule: every
request is ready at once and the concurrency alone paces them.
"""

from __future__ import annotations

import math
import random
from typing import Any

ARRIVALS = ("", "poisson", "constant")
ARRIVAL_LABELS = {"": "fixed concurrency", "poisson": "Poisson arrivals", "constant": "constant rate"}


def send_offsets(arrival: str, rate: float | None, n: int, seed: int) -> list[float] | None:
    """Seconds after the wave's start at which request i is sent; None for fixed concurrency.

    Poisson: the first request at 0, then exponential gaps of mean 1/rate drawn from
    random.Random(seed). Constant: request i at i / rate.
    """
    if arrival == "":
        return None
    if arrival not in ARRIVALS:
        raise ValueError(f"unknown arrival {arrival!r}; one of {', '.join(repr(a) for a in ARRIVALS)}")
    if rate is None or not math.isfinite(rate) or rate <= 0:
        raise ValueError(f"a request rate must be a finite number above 0, not {rate!r}")
    if n < 0:
        raise ValueError(f"the number of requests must not be negative, not {n}")
    if arrival == "constant":
        return [i / rate for i in range(n)]
    draw = random.Random(seed)
    offsets: list[float] = []
    t = 0.0
    for i in range(n):
        if i:
            t += draw.expovariate(rate)
        offsets.append(t)
    return offsets


def wave_rates(params: dict[str, Any]) -> list[float | None]:
    """The rate of each of a job's runs, in order: [None] at fixed concurrency, the sweep's
    rates ("rates") or the one "rate" in rate mode. Repeats run per rate."""
    if not params.get("arrival"):
        return [None]
    rates = params.get("rates")
    if rates:
        return [float(r) for r in rates]
    return [float(params["rate"])]


def run_key_suffix(params: dict[str, Any], rate: float | None) -> str:
    """What a sweep's run key adds for its rate ("-rate0.5"); nothing outside a sweep."""
    return f"-rate{rate:g}" if rate is not None and params.get("rates") else ""
