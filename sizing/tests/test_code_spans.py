"""The code_spans filter (sizing.templatetags.code_spans): flags as <code>, everything else escaped."""

from sizing.templatetags.code_spans import code_spans


def test_each_backticked_span_is_code_and_the_rest_is_escaped():
    assert code_spans("`-ngl` auto → 37") == "<code>-ngl</code> auto → 37"
    assert code_spans("`-ot blk\\.(\\d+)=<CPU>` & more") == "<code>-ot blk\\.(\\d+)=&lt;CPU&gt;</code> &amp; more"
    assert code_spans("<script>`x`</script>") == "&lt;script&gt;<code>x</code>&lt;/script&gt;"
    assert code_spans("an odd ` stays") == "an odd ` stays" and code_spans("``") == "``"
