"""The overflow of a shared pool, attributed from the requests' own numbers (no samples),
and the step at which kvlab's prediction said the pool would run out."""

from __future__ import annotations

import pytest

from benchmarks.jobs.client.stream import Outcome
from benchmarks.jobs.telemetry.attribution import overflow, predicted_step
from sizing.kv import KVLayout
from sizing.workload import Workload, overflow_step, predict

SHARED = {"kind": "shared", "slots": 3, "slot_cells": 1024, "pool_cells": 1024, "from": "launch command"}


def failed(t: float, prompt: int, decoded: int, *, elapsed: float = 0.24, ttft: float = 0.03) -> Outcome:
    return Outcome(
        ok=False,
        http_status=500,
        error="Context size has been exceeded.",
        error_type="context_exceeded",
        output_tokens=decoded,
        ttft_s=ttft,
        elapsed_s=elapsed,
        itl_s=[0.0015] * (decoded - 1),
        at_error={"t_s": t, "prompt": prompt, "decoded": decoded, "cells": prompt + decoded},
    )


def test_the_step_kvlab_predicts_is_where_a_real_server_ran_out():
    # Research §1: P=1024, 3 in flight: p=200 fails at token 142, p=340 at token 2.
    assert overflow_step(1024, 3, 200) == 142
    assert overflow_step(1024, 3, 340) == 2
    assert 3 * (200 + 141) <= 1024 < 3 * (200 + 142)
    assert overflow_step(1024, 3, 400) == 0  # the prompts alone do not fit together


def test_the_prediction_carries_the_step_only_for_an_overflow():
    shared = KVLayout(
        n_ctx=1024, n_ctx_seq=1024, n_stream=1, n_parallel=3, kv_unified=True, auto_parallel=False, flash_attn=True
    )
    over = predict(shared, Workload(200, 600, 3))
    assert (over.outcome, over.overflow_step, over.cells_needed) == ("pool_overflow", 142, 2400)
    fits = predict(shared, Workload(100, 200, 3))
    assert (fits.outcome, fits.overflow_step) == ("ok", None)
    # Four requests on three slots: three in flight, the step is theirs.
    assert predicted_step(1024, 3, 200, 600, 4) == 142
    assert predicted_step(1024, 3, 100, 200, 3) is None


def test_three_requests_failing_in_one_step_are_one_overflow_with_their_cells():
    outcomes = [(0, failed(0.2433, 200, 142)), (1, failed(0.2432, 200, 142)), (2, failed(0.2430, 200, 141))]
    over = overflow(outcomes, pool=SHARED, n_predict=600, concurrency=3)
    assert over is not None
    assert over["t"] == 0.243 and over["pool_cells"] == 1024 and over["alone_needed"] == 800
    assert over["requests"] == [
        {"i": 0, "prompt": 200, "decoded": 142, "cells": 342},
        {"i": 1, "prompt": 200, "decoded": 142, "cells": 342},
        {"i": 2, "prompt": 200, "decoded": 141, "cells": 341},
    ]
    assert over["predicted_step"] == 142
    # sent at t - elapsed (≈0.003 s) + TTFT 0.03 + 141 × 1.5 ms
    assert over["predicted_t"] == pytest.approx(0.0033 + 0.03 + 141 * 0.0015, abs=1e-3)
    assert over["sentence"] == (
        "At 0.24 s the 1,024-cell pool was full: requests 1, 2 and 3 held 342, 342 and 341 cells (1,025 together); "
        "each alone needed 800 (200 prompt + 600 to generate). "
        "kvlab predicted the pool would run out at token 142 of each (≈ 0.24 s)."
    )


def test_a_later_failure_is_not_part_of_the_first_overflow():
    outcomes = [
        (0, failed(0.50, 200, 142)),
        (1, failed(0.51, 200, 142)),
        (2, failed(0.90, 200, 30)),  # the next wave of the queue, much later
        (3, Outcome(ok=True, output_tokens=600)),
    ]
    over = overflow(outcomes, pool=SHARED, n_predict=600, concurrency=3)
    assert over is not None and [r["i"] for r in over["requests"]] == [0, 1]
    assert over["sentence"].startswith("At 0.50 s the 1,024-cell pool was full: requests 1 and 2 held 342 and 342")


def test_cells_the_requests_did_not_hold_are_said_to_be_someone_elses():
    # 3 × (200 + 100) fit the pool: this failure came from cells someone else held.
    over = overflow([(4, failed(0.1, 200, 20))], pool=SHARED, n_predict=100, concurrency=3)
    assert over is not None
    assert over["sentence"].startswith("At 0.10 s the 1,024-cell pool was full: request 5 held 220 cells;")
    assert "alone it needed 300 (200 prompt + 100 to generate)" in over["sentence"]
    assert "The other 803 cells were held by requests kvlab did not send" in over["sentence"]
    assert over["predicted_step"] is None and "did not predict an overflow" in over["sentence"]


def test_per_slot_caches_never_get_an_overflow():
    outcomes = [(0, failed(0.2, 200, 142))]
    assert overflow(outcomes, pool={**SHARED, "kind": "per-slot"}, n_predict=600, concurrency=3) is None
    other = Outcome(ok=False, error_type="timeout")
    assert overflow([(0, other)], pool=SHARED, n_predict=600, concurrency=3) is None


def test_prompts_that_fail_together_at_once_are_predicted_as_not_fitting():
    outcomes = [(i, failed(0.075, 340, d, elapsed=0.075, ttft=0.07)) for i, d in enumerate([2, 1, 1])]
    over = overflow(outcomes, pool=SHARED, n_predict=600, concurrency=3)
    assert over is not None and over["predicted_step"] == 2
    assert [r["cells"] for r in over["requests"]] == [342, 341, 341]
    assert over["sentence"].endswith("kvlab predicted the pool would run out at token 2 of each (≈ 0.07 s).")


# A server kvlab did not launch: /props said 4 slots of 1,024 cells, nothing said whether they share them.
UNLAUNCHED = {"kind": "unknown", "slots": 4, "slot_cells": 1024, "pool_cells": None, "from": "unknown: no command"}
# ... and one whose /props could not be read.
NO_PROPS = {"kind": "unknown", "slots": None, "slot_cells": None, "pool_cells": None, "from": "unknown: no props"}
# -c 1024 without -np, 3 × (300 + 300): what the real server's three streams counted when it failed them.
AUTO_1024 = [(0, failed(0.0631, 300, 43)), (1, failed(0.0630, 300, 42)), (2, failed(0.0632, 300, 42))]


def test_the_500_of_a_server_kvlab_did_not_launch_is_its_shared_pool_of_the_size_props_gives():
    over = overflow(AUTO_1024, pool=UNLAUNCHED, n_predict=300, concurrency=3)
    assert over is not None
    assert (over["pool_cells"], over["pool_from"], over["shared_from"]) == (1024, "/props", "error")
    assert [r["cells"] for r in over["requests"]] == [343, 342, 342]
    assert over["predicted_step"] == 42  # 3 × (300 + 42) > 1,024 ≥ 3 × (300 + 41)
    assert over["sentence"].startswith(
        "At 0.06 s the shared pool of 1,024 cells was full: requests 1, 2 and 3 held 343, 342 and 342 cells "
        "(1,027 together); each alone needed 600 (300 prompt + 300 to generate). "
        "kvlab predicted the pool would run out at token 42 of each"
    )
    assert over["sentence"].endswith(
        ' The HTTP 500 "Context size has been exceeded" says the slots share one pool (a cache per slot refuses a '
        "prompt with HTTP 400 at admission); its size is the context /props gives each slot, all of which each slot "
        "may use."
    )


def test_without_props_the_pool_is_at_least_what_the_requests_had_written_and_the_sentence_says_how_to_learn_it():
    over = overflow(AUTO_1024, pool=NO_PROPS, n_predict=300, concurrency=3)
    assert over is not None
    # 343 + 342 + 342 counted, less the token each was writing when the step failed.
    assert (over["pool_cells"], over["pool_from"], over["pool_at_least"]) == (None, None, 1024)
    assert over["predicted_step"] is None and over["predicted_t"] is None
    assert over["sentence"] == (
        "At 0.06 s the shared pool — at least 1,024 cells, a size the server did not say — was full: "
        "requests 1, 2 and 3 held 343, 342 and 342 cells (1,027 together); "
        "each alone needed 600 (300 prompt + 300 to generate). Without the pool's size kvlab made no prediction. "
        'The HTTP 500 "Context size has been exceeded" says the slots share one pool (a cache per slot refuses a '
        "prompt with HTTP 400 at admission). To learn its size, read the server's /props "
        "(default_generation_settings.n_ctx: with one shared pool every slot may use all of it), "
        "or register the server with the command that launched it (its -c and -np)."
    )
    assert overflow(AUTO_1024, pool=None, n_predict=300, concurrency=3)["pool_at_least"] == 1024


def test_a_request_failed_before_its_first_token_adds_nothing_to_what_the_pool_held_at_least():
    outcomes = [(0, failed(0.5, 2000, 0)), (1, failed(0.5, 300, 10))]
    over = overflow(outcomes, pool=NO_PROPS, n_predict=300, concurrency=2)
    assert over is not None and over["pool_at_least"] == 309
    alone = overflow([(0, failed(0.5, 2000, 0))], pool=NO_PROPS, n_predict=300, concurrency=1)
    assert alone is not None and alone["pool_at_least"] == 0
    assert alone["sentence"].startswith("At 0.50 s the shared pool — a size the server did not say — was full:")


def test_slots_capped_below_the_pool_do_not_give_its_size():
    # /props says 256 per slot, yet 1,024 cells were written: the slots are capped (--kv-unified-per-slot).
    over = overflow(AUTO_1024, pool={**UNLAUNCHED, "slot_cells": 256}, n_predict=300, concurrency=3)
    assert over is not None and over["pool_cells"] is None and over["pool_at_least"] == 1024
    assert "(/props gives each slot 256 cells, fewer than were written: the slots are capped below" in over["sentence"]


def test_only_a_full_pool_is_attributed_not_a_400_nor_another_500():
    prompt_too_long = Outcome(
        ok=False, http_status=400, error_type="exceed_context_size", error="request (900 tokens) exceeds ..."
    )
    compute_error = failed(0.06, 300, 5)
    compute_error.error, compute_error.error_type = "Compute error.", "http_error"
    for pool in (UNLAUNCHED, NO_PROPS, SHARED):
        assert overflow([(0, prompt_too_long)], pool=pool, n_predict=300, concurrency=3) is None
        assert overflow([(0, compute_error)], pool=pool, n_predict=300, concurrency=3) is None
