"""Like with like (benchmarks.records.series_keys): the flags that do not change a configuration."""

import pytest

from benchmarks.records.series_keys import CONFIG_FIELDS, configuration_flags, differences


@pytest.mark.parametrize(
    ("flags", "kept"),
    [
        ("-c 4096 --port 8080", "-c 4096"),
        ("-c 4096 --host 0.0.0.0 --port=8080 -t 8 -tb 8 --alias m --metrics --slots -v", "-c 4096"),
        ("--api-key secret -np 2 --timeout 600 --log-file /tmp/l", "-np 2"),
        ("-c 4096 -ctk q8_0 -fa on", "-c 4096 -ctk q8_0 -fa on"),
        ("--max-num-seqs 64", "--max-num-seqs 64"),  # another engine's flags are kept as they are
        ("-c 4096 --port", "-c 4096"),  # a last flag without its value
        ("-m 'a b.gguf' --port 1", "-m 'a b.gguf'"),
        ("-c 'unclosed", "-c 'unclosed"),  # not a shell line: compared as it is
        ("", ""),
    ],
)
def test_configuration_flags_drop_what_only_says_where_the_server_listens(flags, kept):
    assert configuration_flags(flags) == kept


def test_differences_compare_server_flags_by_their_configuration():
    row = dict.fromkeys(CONFIG_FIELDS, None)
    same = [{**row, "server_flags": "-c 4096 --port 8080"}, {**row, "server_flags": "-c 4096 --port 9090 -t 4"}]
    assert differences(same, CONFIG_FIELDS) == {}
    other = [*same, {**row, "server_flags": "-c 8192"}]
    assert differences(other, CONFIG_FIELDS) == {"server flags": ["-c 4096", "-c 8192"]}
