from sizing.hparams import model_params
from sizing.kv import ServerFlags, kv_layout
from sizing.workload import Workload, predict

DEMO_WORKLOAD = Workload(prompt_tokens=4362, output_tokens=1738, concurrency=3)


def devstral():
    return model_params(
        {
            "general.architecture": "llama",
            "llama.block_count": 40,
            "llama.embedding_length": 5120,
            "llama.context_length": 393216,
            "llama.attention.head_count": 32,
            "llama.attention.head_count_kv": 8,
            "llama.attention.key_length": 128,
            "llama.attention.value_length": 128,
        }
    )


def test_the_original_config_overflows_the_shared_pool_for_all_three_requests():
    prediction = predict(kv_layout(devstral(), ServerFlags(ctx_size=16384)), DEMO_WORKLOAD)
    assert (prediction.outcome, prediction.http_status, prediction.in_flight) == ("pool_overflow", 500, 3)
    assert prediction.message.startswith(
        "3 concurrent requests of 4,362 + 1,738 tokens need 18,300 cells; the unified pool has 16,384: "
        "all in-flight requests will fail together with HTTP 500 'Context size has been exceeded'"
    )


def test_a_prompt_longer_than_its_slot_is_a_400_for_that_request_only():
    prediction = predict(kv_layout(devstral(), ServerFlags(ctx_size=9216, parallel=3)), DEMO_WORKLOAD)
    assert (prediction.outcome, prediction.http_status) == ("prompt_too_long", 400)
    assert "a 6,100-token request (4,362-token prompt) exceeds the 3,072-cell slot" in prediction.message
    assert "HTTP 400 exceed_context_size_error for that request only" in prediction.message


def test_per_slot_kv_big_enough_for_each_request_succeeds():
    prediction = predict(kv_layout(devstral(), ServerFlags(ctx_size=27648, parallel=3)), DEMO_WORKLOAD)
    assert prediction.outcome == "ok" and "6,100 of its slot's 9,216 cells" in prediction.message


def test_one_slot_queues_the_others_instead_of_failing():
    layout = kv_layout(devstral(), ServerFlags(ctx_size=12288, parallel=1, type_k="q8_0", type_v="q8_0"))
    prediction = predict(layout, DEMO_WORKLOAD)
    assert (prediction.outcome, prediction.in_flight, prediction.queued) == ("ok", 1, 2)
    assert "2 more requests wait in the server's queue" in prediction.message


def test_output_past_the_slot_end_is_cut_not_failed():
    layout = kv_layout(devstral(), ServerFlags(ctx_size=5120, parallel=1))
    prediction = predict(layout, DEMO_WORKLOAD)
    assert prediction.outcome == "truncated" and not prediction.fails
    assert "only 758 of 1,738 output tokens" in prediction.message


def test_an_invalid_configuration_is_reported_as_not_starting():
    layout = kv_layout(devstral(), ServerFlags(ctx_size=4096, type_v="q4_0", flash_attn="off"))
    prediction = predict(layout, DEMO_WORKLOAD)
    assert prediction.outcome == "invalid" and prediction.message.startswith("llama-server will not start")
