"""The byte filters of the sizing pages (sizing.templatetags.humanize_bytes) at their edges."""

import pytest

from sizing.templatetags.humanize_bytes import exact_bytes


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "—"),
        (0, "0 B"),
        (1023, "1,023 B"),
        (1024, "1,024 B (1.00 KiB)"),
        (87_040, "87,040 B (85.00 KiB)"),  # q8_0 KV per token of the investigation's model
        (163_840, "163,840 B (160.00 KiB)"),
        (1_048_575, "1,048,575 B (1,024.00 KiB)"),
        (1_048_576, "1,048,576 B (1.00 MiB)"),
        (-163_840, "-163,840 B (-160.00 KiB)"),
        (2**63, "9,223,372,036,854,775,808 B (8,796,093,022,208.00 MiB)"),
    ],
)
def test_exact_bytes_beside_the_unit_a_reader_recognises(value, shown):
    assert exact_bytes(value) == shown
