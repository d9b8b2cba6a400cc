"""A command line wraps only between its flags: each flag with its value is one unbroken span."""

from benchmarks.templatetags.commands import command_words


def test_each_flag_keeps_its_value_and_its_hyphens_in_one_span():
    html = command_words("llama-server -c 16384 -np 3 --no-kv-unified -ctk q8_0 <b>")
    assert html == (
        '<span class="flag">llama-server</span> <span class="flag">-c 16384</span> <span class="flag">-np 3</span>'
        ' <span class="flag">--no-kv-unified</span> <span class="flag">-ctk q8_0</span>'
        ' <span class="flag">&lt;b&gt;</span>'
    )


def test_a_negative_number_is_its_flags_value_and_nothing_is_lost():
    words = ["llama-server", "-ngl", "99", "-ts", "1,1", "--override-tensor", "blk.*=CPU", "-n", "-1"]
    html = command_words(" ".join(words))
    assert html.count('<span class="flag">') == 5 and '<span class="flag">-n -1</span>' in html
    assert " ".join(part.split(">", 1)[1] for part in html.split("</span>") if ">" in part) == " ".join(words)
