"""The catalogue's weights per quantization: every figure has bytes and a source."""

from sizing import catalogue


def test_weights_for_matches_the_quantization_case_insensitively() -> None:
    figure = catalogue.weights_for("llama-3.1-8b", "q4_k_m")
    assert figure is not None
    assert figure.quant == "Q4_K_M"
    assert figure.bytes == 4920739232
    assert not figure.computed
    assert "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF" in figure.source


def test_weights_for_an_unknown_model_or_quantization_is_none() -> None:
    assert catalogue.weights_for("no-such-model", "Q4_K_M") is None
    assert catalogue.weights_for("llama-3.1-8b", "TQ1_0") is None


def test_quantizations_put_q4_k_m_first_then_go_up_in_size() -> None:
    quants = catalogue.quantizations("llama-3.1-8b")
    assert quants[0] == "Q4_K_M"
    sizes = [catalogue.models()["llama-3.1-8b"].weights[q].bytes for q in quants[1:]]
    assert sizes == sorted(sizes)
    assert catalogue.quantizations("no-such-model") == []


def test_every_figure_names_its_source() -> None:
    for model in catalogue.models().values():
        for quant, figure in model.weights.items():
            assert figure.quant == quant
            assert figure.bytes > 0
            assert figure.source, f"{model.id} {quant} has no source"
