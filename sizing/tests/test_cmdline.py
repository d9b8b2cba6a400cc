import pytest

from sizing.cmdline import parse_command, to_command
from sizing.kv import ServerFlags


def test_the_investigations_three_commands_parse():
    orig = parse_command("llama-server -m Devstral-Small-2-24B-Q4_K_M.gguf -c 16384 -ngl 99")
    assert orig.flags == ServerFlags(ctx_size=16384, n_gpu_layers=99) and orig.model_path.startswith("Devstral")
    c2 = parse_command("./llama-server -m m.gguf -c 9216 -np 3 --no-kv-unified --no-kv-offload")
    assert (c2.flags.ctx_size, c2.flags.parallel, c2.flags.kv_unified, c2.flags.kv_offload) == (9216, 3, False, False)
    c3p = parse_command("llama-server -m m.gguf -c 12288 -np 1 -ctk q8_0 -ctv q8_0 -fa on")
    assert (c3p.flags.type_k, c3p.flags.type_v, c3p.flags.flash_attn, c3p.flags.parallel) == ("q8_0", "q8_0", "on", 1)
    assert c3p.errors == [] and c3p.ignored == []


def test_long_forms_equals_signs_and_line_continuations():
    parsed = parse_command(
        "CUDA_VISIBLE_DEVICES=0 /opt/llama-server \\\n  --model=/m/x.gguf --ctx-size=8192 --parallel 2 \\\n"
        "  --kv-unified --cache-type-k q4_0 --cache-type-v=q4_0 --flash-attn auto --swa-full -ub 1024 -b 4096"
    )
    f = parsed.flags
    assert parsed.model_path == "/m/x.gguf" and parsed.errors == []
    assert (f.ctx_size, f.parallel, f.kv_unified, f.type_k, f.type_v) == (8192, 2, True, "q4_0", "q4_0")
    assert (f.flash_attn, f.swa_full, f.n_ubatch, f.n_batch) == ("auto", True, 1024, 4096)


def test_a_bare_fa_is_read_as_on_like_older_builds():
    parsed = parse_command("llama-server -fa -c 4096")
    assert parsed.flags.flash_attn == "on" and parsed.flags.ctx_size == 4096


def test_flags_kvlab_does_not_model_are_named():
    parsed = parse_command("llama-server -m x.gguf --host 0.0.0.0 --port 8080 --metrics --jinja -t 8 -c 4096")
    assert parsed.ignored == ["--host 0.0.0.0", "--port 8080", "--metrics", "--jinja", "-t 8"]
    assert parsed.flags.ctx_size == 4096


def test_np_minus_one_and_c_zero_mean_auto():
    parsed = parse_command("llama-server -np -1 -c 0")
    assert parsed.flags.parallel is None and parsed.flags.ctx_size is None


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("llama-server -c lots", "-c lots: not a whole number"),
        ("llama-server -np 0", "-np 0: must be -1 (auto) or 1 to 256"),
        ("llama-server -c -5", "-c -5: must be 0"),
        ("llama-server -c 999999999", "-c 999999999: must be 0"),
        ("llama-server -ctk q3_k", "-ctk q3_k: unknown cache type"),
        ("llama-server -c", "-c needs a value"),
        ("llama-server -m 'unclosed", "cannot be split into arguments"),
        ("llama-server " + "x" * 30000, "longer than 20,000 characters"),
    ],
)
def test_bad_values_are_errors_not_guesses(command, message):
    parsed = parse_command(command)
    assert any(message in e for e in parsed.errors), parsed.errors
    assert parsed.flags == ServerFlags()


def test_a_command_round_trips_through_to_command():
    flags = ServerFlags(ctx_size=12288, parallel=1, type_k="q8_0", type_v="q8_0", flash_attn="on", kv_offload=False)
    assert parse_command(" ".join(to_command(flags))).flags == flags
    assert to_command(ServerFlags(ctx_size=16384)) == ["llama-server", "-m", "MODEL.gguf", "-c", "16384"]


# The placement flags, read in order as llama-server reads them, and written back.
PLACEMENT = [
    "llama-server -m m.gguf -c 0 -fitc 8192 -ngl all -ts 3,1 -mg 1 -fitt 2048,512 --kv-unified-per-slot 8192",
    "llama-server -m m.gguf --n-cpu-moe 3 -ot a=CPU --cpu-moe -ot b=CUDA0,c=CPU -fit off",
    'llama-server -m m.gguf -ot "blk\\.1\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU" -sm none',
    "llama-server -m m.gguf -c 0 --n-cpu-ffn 2",
]


@pytest.mark.parametrize("command", PLACEMENT)
def test_placement_flags_round_trip_through_a_shell_quoted_command(command: str) -> None:
    import shlex

    from sizing.cmdline import to_command

    parsed = parse_command(command)
    assert parsed.errors == [] and parsed.notes == []
    again = parse_command(shlex.join(to_command(parsed.flags, "m.gguf")))
    assert again.errors == [] and again.flags == parsed.flags


def test_c_0_asks_for_the_full_context_unless_fitc_comes_after_it() -> None:
    from sizing.placement.types import UINT32_MAX

    assert parse_command("llama-server -fitc 8192 -c 0").flags.fit_ctx == UINT32_MAX
    assert parse_command("llama-server -c 0 -fitc 8192").flags.fit_ctx == 8192
    assert parse_command("llama-server").flags.fit_ctx == 4096


def test_n_cpu_moe_expands_to_llama_servers_patterns_in_order() -> None:
    flags = parse_command("llama-server --n-cpu-moe 2 --cpu-moe").flags
    assert flags.overrides == (
        (r"blk\.0\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"),
        (r"blk\.1\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"),
        (r"\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"),
    )


@pytest.mark.parametrize(
    "command, error",
    [
        ("llama-server -sm diagonal", "-sm diagonal: must be one of none, layer, row, tensor"),
        ("llama-server -ts 1,x", "-ts 1,x: not a number"),
        ("llama-server -ts " + ",".join(["1"] * 17), "at most 16 values"),
        ("llama-server -ot nope", "expected PATTERN=BUFFER_TYPE"),
        ("llama-server -ot x=GPU0", "unknown buffer type 'GPU0'"),
        ("llama-server -ot (?P<a>x)=CPU", "reads differently"),
        ("llama-server --n-cpu-moe 100000", "--n-cpu-moe 100000: must be 0 to 1,000"),
        ("llama-server -fitt " + ",".join(["1"] * 16), "one to 15 values"),
        ("llama-server -fitc 99999999999", "-fitc 99999999999: must be 0 to 4,294,967,295"),
        ("llama-server -mg 16", "-mg 16: must be -1 to 15"),
        ("llama-server -fit maybe", "unknown value for --fit: 'maybe'"),
        ("llama-server -ngl -3", "-ngl -3: must be -1 (auto), -2 (all) or 0 to 100,000"),
    ],
)
def test_bad_placement_flags_say_what_is_wrong(command: str, error: str) -> None:
    errors = parse_command(command).errors
    assert any(error in e for e in errors), errors
